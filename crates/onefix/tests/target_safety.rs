//! The target is never harmed (issue 8): services keep answering, correctly, while onefix
//! attaches and detaches hundreds of times, no thread is left stopped or traced, many-threaded
//! and forking targets run as they would alone, and a profiler killed with SIGKILL leaves the
//! target running and its recording readable up to the last flush.
//!
//! Every server listens on 127.0.0.1, every loop is bounded, every child is killed on drop.

mod common;
use common::{compile_c, onefix, Scratch};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A target process, killed and reaped when the test ends, however it ends.
struct Target(Child);

impl Target {
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn is_running(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a server that prints its port on its first stdout line.
fn start_server(mut cmd: Command) -> (Target, u16) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().parse().unwrap_or_else(|_| panic!("server printed {line:?}"));
    (Target(child), port)
}

/// Threads of `pid` that are stopped or in a tracing stop, and its tracer, if any: what a
/// profiler that forgot to let go would leave behind.
fn stopped_threads(pid: u32) -> Vec<String> {
    let mut stopped = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return stopped };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        // The state follows the parenthesised command name, which may itself hold spaces.
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).unwrap_or("?");
        if state == "T" || state == "t" {
            stopped.push(format!("task {} in state {state}", task.file_name().to_string_lossy()));
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    if let Some(tracer) = status.lines().find(|l| l.starts_with("TracerPid:")) {
        if tracer.split_whitespace().nth(1) != Some("0") {
            stopped.push(tracer.to_owned());
        }
    }
    stopped
}

/// A keep-alive HTTP client that sends `GET /N` for N = 0, 1, ... until told to stop, and
/// checks every answer is `200` with the body `echo /N`. Returns how many were answered.
fn client(port: u16, stop: Arc<AtomicBool>) -> JoinHandle<Result<u64, String>> {
    std::thread::spawn(move || {
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // One write per request, sent at once: no Nagle/delayed-ACK stalls in the count.
        stream.set_nodelay(true).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut out = stream;
        let mut n = 0u64;
        // Bounded: at most 10 minutes' worth, whatever happens.
        let deadline = Instant::now() + Duration::from_secs(600);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            let fail = |what: String| format!("request {n}: {what}");
            let request = format!("GET /{n} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
            out.write_all(request.as_bytes()).map_err(|e| fail(e.to_string()))?;
            let mut status = String::new();
            reader.read_line(&mut status).map_err(|e| fail(format!("no answer ({e})")))?;
            if !status.starts_with("HTTP/1.") || !status.contains(" 200 ") {
                return Err(fail(format!("status line {status:?}")));
            }
            let mut length = None;
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).map_err(|e| fail(e.to_string()))?;
                if header == "\r\n" || header.is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse::<usize>().ok();
                    }
                }
            }
            let mut body = vec![0u8; length.ok_or_else(|| fail("no Content-Length".into()))?];
            reader.read_exact(&mut body).map_err(|e| fail(e.to_string()))?;
            let expected = format!("echo /{n}");
            if body != expected.as_bytes() {
                return Err(fail(format!("body {:?}, expected {expected:?}", String::from_utf8_lossy(&body))));
            }
            n += 1;
        }
        Ok(n)
    })
}

const PY_SERVICE: &str = r#"
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_GET(self):
        sum(i * i for i in range(2000))   # a little work per request, so it shows in samples
        body = ("echo " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// The same echo service in C, one thread per connection.
const C_SERVICE: &str = r#"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
static void *serve(void *arg) {
    int fd = (int)(long)arg;
    char buf[8192];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n <= 0) break;
        have += (size_t)n;
        buf[have] = 0;
        char *end;
        while ((end = strstr(buf, "\r\n\r\n")) != NULL) {
            char path[256] = {0};
            sscanf(buf, "GET %255s", path);
            volatile double x = 0;
            for (int i = 0; i < 200000; i++) x += i * 0.5;   /* some work per request */
            char body[300], out[512];
            int bl = snprintf(body, sizeof body, "echo %s", path);
            int ol = snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", bl, body);
            if (write(fd, out, (size_t)ol) != ol) { close(fd); return NULL; }
            size_t used = (size_t)(end + 4 - buf);
            memmove(buf, buf + used, have - used);
            have -= used;
            buf[have] = 0;
        }
    }
    close(fd);
    return NULL;
}
int main(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 64)) return 1;
    socklen_t len = sizeof a;
    getsockname(s, (struct sockaddr *)&a, &len);
    printf("%d\n", ntohs(a.sin_port));
    fflush(stdout);
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) continue;
        pthread_t t;
        pthread_create(&t, NULL, serve, (void *)(long)c);
        pthread_detach(t);
    }
}
"#;

fn python_service(s: &Scratch) -> (Target, u16) {
    std::fs::write(s.path("service.py"), PY_SERVICE).unwrap();
    let mut cmd = Command::new(python_executable());
    cmd.arg(s.path("service.py"));
    start_server(cmd)
}

/// The interpreter itself, not a launcher script, so that its pid is the Python process.
fn python_executable() -> String {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Attaches `times` times for `duration` each (with `extra` options on every `alternate`-th
/// attach) while a client checks every answer; then checks the service still answers.
fn attach_repeatedly(s: &Scratch, target: &mut Target, port: u16, times: usize, duration: &str, alternate: &[&str]) {
    let stop = Arc::new(AtomicBool::new(false));
    let running = client(port, stop.clone());
    let mut failures = Vec::new();
    let mut idle_attaches = 0;
    for i in 0..times {
        let mut cmd = onefix();
        cmd.args([
            "record",
            "--quiet",
            "--duration",
            duration,
            "-o",
            &s.arg("a.onefix"),
            "--pid",
            &target.pid().to_string(),
        ]);
        if i % 2 == 1 {
            cmd.args(alternate);
        }
        let out = cmd.stdout(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        // A native service between two requests may give no sample in a short window: that is
        // said in one sentence, and is no harm. Anything else is a failure.
        let idle = out.status.code() == Some(2) && err.contains("no sample was taken") && err.contains("idle");
        idle_attaches += usize::from(idle);
        if !out.status.success() && !idle {
            failures.push(format!("attach {i}: status {:?}: {err}", out.status.code()));
        }
        let stopped = stopped_threads(target.pid());
        if !stopped.is_empty() {
            failures.push(format!("after attach {i}: {stopped:?}"));
        }
        if !target.is_running() {
            failures.push(format!("the target died at attach {i}"));
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let answered = running.join().unwrap();
    assert!(failures.is_empty(), "{failures:#?}");
    let answered = answered.unwrap_or_else(|e| panic!("the service failed a request while being profiled: {e}"));
    assert!(answered >= times as u64, "the service answered only {answered} requests over {times} attaches");
    // And it still answers afterwards.
    let stop = Arc::new(AtomicBool::new(false));
    let after = client(port, stop.clone());
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    assert!(after.join().unwrap().unwrap() > 0);
    eprintln!("{times} attaches ({idle_attaches} said the target was idle), {answered} requests answered and checked");
}

#[test]
fn a_python_service_keeps_answering_through_200_attaches() {
    let s = Scratch::new("py200");
    let (mut target, port) = python_service(&s);
    // Every other attach merges native frames, which pauses the target's threads (ptrace) at
    // each read: those must all be let go.
    attach_repeatedly(&s, &mut target, port, 200, "50ms", &["--native"]);
}

#[test]
fn a_native_service_keeps_answering_through_200_attaches() {
    let s = Scratch::new("c200");
    let exe = compile_c(&s, "service", C_SERVICE, &["-O1", "-g", "-pthread"]);
    let (mut target, port) = start_server(Command::new(&exe));
    attach_repeatedly(&s, &mut target, port, 200, "100ms", &["--mode", "cpu"]);
}

const MANY_THREADS: &str = r#"
import threading, time
ready = threading.Barrier(501)
def work():
    ready.wait()
    while True:
        time.sleep(0.01)
        sum(range(200))
for _ in range(500):
    threading.Thread(target=work, daemon=True).start()
ready.wait()
print("ready", flush=True)
while True:
    time.sleep(1)
"#;

#[test]
fn a_500_thread_python_target_is_sampled_whole_and_left_running() {
    let s = Scratch::new("threads");
    std::fs::write(s.path("threads.py"), MANY_THREADS).unwrap();
    let mut child = Command::new(python_executable()).arg(s.path("threads.py")).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let mut target = Target(child);
    for extra in [&[][..], &["--native"][..]] {
        let out = onefix()
            .args(["record", "--quiet", "--duration", "2s", "-o", &s.arg("t.onefix"), "--speedscope", &s.arg("t.json")])
            .args(["--pid", &target.pid().to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        // speedscope holds one profile per thread seen.
        let ss: Value = serde_json::from_slice(&std::fs::read(s.path("t.json")).unwrap()).unwrap();
        let threads = ss["profiles"].as_array().unwrap().len();
        assert!(threads >= 500, "{extra:?}: {threads} threads sampled");
        assert!(target.is_running(), "{extra:?}");
        assert_eq!(stopped_threads(target.pid()), Vec::<String>::new(), "{extra:?}");
        assert_eq!(std::fs::read_dir(format!("/proc/{}/task", target.pid())).unwrap().count(), 501);
    }
}

/// Forks, execs and reaps for three seconds, and fails (status 3) if any child's status is
/// not the one it exited with: a profiler that reaped its children would be caught.
const FORKER_PY: &str = r#"
import os, subprocess, sys, time
end = time.time() + 3
n = 0
while time.time() < end:
    r = subprocess.run(["sh", "-c", "exit %d" % (n % 5)])
    if r.returncode != n % 5:
        print("subprocess status", r.returncode, "expected", n % 5, flush=True); sys.exit(3)
    pid = os.fork()
    if pid == 0:
        sum(range(10000))
        os._exit(n % 7)
    got, status = os.waitpid(pid, 0)
    if got != pid or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != n % 7:
        print("fork status", got, status, flush=True); sys.exit(3)
    n += 1
print("reaped", 2 * n, "children", flush=True)
"#;

const FORKER_C: &str = r#"
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
int main(void) {
    time_t end = time(NULL) + 3;
    int n = 0;
    while (time(NULL) < end) {
        pid_t pid = fork();
        if (pid == 0) {
            char code[16];
            snprintf(code, sizeof code, "exit %d", n % 5);
            execl("/bin/sh", "sh", "-c", code, (char *)NULL);
            _exit(99);
        }
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != n % 5) {
            printf("child %d: status %d\n", n, status);
            return 3;
        }
        volatile double x = 0;
        for (int i = 0; i < 100000; i++) x += i;
        n++;
    }
    printf("reaped %d children\n", n);
    return 0;
}
"#;

fn record_forker(s: &Scratch, extra: &[&str], command: &[String]) {
    let out = onefix()
        .args(["record", "--quiet", "-o", &s.arg("f.onefix"), "--json", &s.arg("f.json")])
        .args(extra)
        .arg("--")
        .args(command)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{extra:?}: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(s.path("f.json")).unwrap()).unwrap();
    // The target checks every child's status itself: "reaped" only when all were right.
    assert!(stdout.contains("reaped"), "{extra:?}: the target saw a wrong child status: {stdout}");
    // Paused reads (the default, and --native) wait for each thread with waitpid; the command
    // runs under a keeper process so that such a wait cannot take its exit status.
    assert_eq!(report["exit"]["code"], 0, "{extra:?}: {report}");
    assert!(report["samples"].as_u64().unwrap() > 0);
}

#[test]
fn a_target_that_forks_execs_and_reaps_sees_every_child_status() {
    let s = Scratch::new("fork");
    std::fs::write(s.path("forker.py"), FORKER_PY).unwrap();
    let py = vec!["python3".to_owned(), s.arg("forker.py")];
    for extra in [&[][..], &["--subprocesses"][..], &["--native"][..]] {
        record_forker(&s, extra, &py);
    }
    let exe = compile_c(&s, "forker", FORKER_C, &["-O1", "-g", "-pthread"]);
    record_forker(&s, &["--rate", "999"], &[exe.display().to_string()]);
}

#[test]
fn onefix_killed_mid_recording_leaves_the_target_serving_and_the_recording_readable() {
    let s = Scratch::new("sigkill");
    let (mut target, port) = python_service(&s);
    let stop = Arc::new(AtomicBool::new(false));
    let running = client(port, stop.clone());
    for (i, extra) in [&[][..], &["--native"][..]].into_iter().enumerate() {
        let rec = s.arg(&format!("k{i}.onefix"));
        let mut profiler = onefix()
            .args(["record", "--quiet", "-o", &rec, "--pid", &target.pid().to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Past two batch flushes (one a second), then SIGKILL: no chance to finish the file.
        std::thread::sleep(Duration::from_millis(2500));
        profiler.kill().unwrap();
        profiler.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(target.is_running(), "{extra:?}");
        assert_eq!(stopped_threads(target.pid()), Vec::<String>::new(), "{extra:?}");
        // Until it is complete, a recording is written under a name of its own (a killed
        // onefix never leaves half a file under the name asked for).
        assert!(!std::path::Path::new(&rec).exists(), "{extra:?}");
        let partial = format!("{rec}.partial");
        let out = onefix()
            .args(["report", "--quiet", "--json", &s.arg("k.json"), &partial])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("ends early"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&std::fs::read(s.path("k.json")).unwrap()).unwrap();
        assert!(report["samples"].as_u64().unwrap() >= 100, "{extra:?}: at least the first second's batch: {report}");
    }
    stop.store(true, Ordering::Relaxed);
    let answered = running.join().unwrap().unwrap_or_else(|e| panic!("the service failed a request: {e}"));
    assert!(answered > 0);
}

#[test]
fn the_stopped_thread_check_sees_a_stopped_process() {
    // The check the tests above rely on must be able to fail.
    let mut target = Target(Command::new("sleep").arg("30").spawn().unwrap());
    assert_eq!(stopped_threads(target.pid()), Vec::<String>::new());
    // SAFETY: signalling our own child.
    unsafe { libc::kill(target.pid() as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(stopped_threads(target.pid()).len(), 1, "{:?}", stopped_threads(target.pid()));
    assert!(target.is_running());
}

//! Runtimes onefix cannot read (Node.js, the JVM, PyPy) are named in one sentence with what to
//! use meanwhile, never given native advice (rebuild with -g, pass --user-code); and the agent
//! attached to a service still starting reads it as what it becomes, not as its launcher.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{free_port, line_of, onefix, repo, Scratch};

/// A child killed when dropped (and when the test's thread ends, whatever happens).
struct Running(Child);

impl Running {
    fn start(mut cmd: Command) -> Running {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe and touches only the child being started.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        Running(cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap())
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `onefix record` of a command, for 3 s at most.
fn record_command(s: &Scratch, command: &[&str]) -> Output {
    onefix()
        .current_dir(&s.0)
        .args(["record", "--quiet", "--duration", "3s", "-o"])
        .arg(s.path("rec.onefix"))
        .arg("--json")
        .arg(s.path("report.json"))
        .arg("--")
        .args(command)
        .output()
        .unwrap()
}

/// `onefix record --pid`, for 2 s at most.
fn record_pid(s: &Scratch, pid: u32) -> Output {
    onefix()
        .current_dir(&s.0)
        .args(["record", "--quiet", "--duration", "2s", "--pid", &pid.to_string(), "-o"])
        .arg(s.path("pid.onefix"))
        .output()
        .unwrap()
}

/// The run failed with one sentence, first, that names the runtime and what to use
/// meanwhile, and with none of the native advice.
fn assert_named(out: &Output, names: &[&str], meanwhile: &str) {
    let text = stderr(out);
    assert_eq!(out.status.code(), Some(2), "nothing was recorded:\n{text}");
    let first = text.lines().find(|l| l.starts_with("onefix: ")).unwrap_or_else(|| panic!("no sentence:\n{text}"));
    assert!(first.starts_with("onefix: onefix reads CPython and native programs; this is "), "{text}");
    for name in names {
        assert!(first.contains(name), "{name} is named:\n{text}");
    }
    assert!(first.contains(meanwhile), "{meanwhile} is advised:\n{text}");
    for wrong in ["rebuild", "-g", "--user-code", "no symbols", "exited before it could be sampled"] {
        assert!(!text.contains(wrong), "no {wrong:?}:\n{text}");
    }
    assert_eq!(text.lines().filter(|l| l.starts_with("onefix: ")).count(), 1, "one sentence:\n{text}");
}

/// Waits until `pid` maps a file whose name contains `library` (the runtime is up), 20 s at most.
fn wait_for_mapping(pid: u32, library: &str) {
    for _ in 0..400 {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if maps.contains(library) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("process {pid} never mapped {library}");
}

const BUSY_JS: &str = "let t = 0;\nconst end = Date.now() + 20000;\nwhile (Date.now() < end) { for (let i = 0; i < 1e6; i++) t += i % 7; }\nconsole.log(t);\n";

#[test]
fn node_is_named_with_what_profiles_it() {
    let s = Scratch::new("runtime-node");
    let program = s.path("busy.js");
    std::fs::write(&program, BUSY_JS).unwrap();
    let out = record_command(&s, &["node", program.to_str().unwrap()]);
    assert_named(&out, &["Node.js", "(node)", "JavaScript"], "node --cpu-prof");
    assert!(stderr(&out).contains("the program was not started"), "{}", stderr(&out));

    // A running Node.js server, attached to.
    let mut cmd = Command::new("node");
    cmd.arg(&program);
    let server = Running::start(cmd);
    wait_for_mapping(server.pid(), "node");
    assert_named(&record_pid(&s, server.pid()), &["Node.js", "(node)"], "node --cpu-prof");
}

/// Compiles a busy Java class into the scratch directory.
fn busy_java(s: &Scratch) -> std::path::PathBuf {
    let classes = s.path("classes");
    std::fs::create_dir_all(&classes).unwrap();
    let source = s.path("Busy.java");
    std::fs::write(
        &source,
        "public class Busy {\n  public static void main(String[] a) {\n    long t = 0, end = System.currentTimeMillis() + 20000;\n    while (System.currentTimeMillis() < end) for (int i = 0; i < 1000000; i++) t += i % 7;\n    System.out.println(t);\n  }\n}\n",
    )
    .unwrap();
    let ok = Command::new("javac").arg("-d").arg(&classes).arg(&source).status().unwrap();
    assert!(ok.success(), "javac failed on {}", source.display());
    classes
}

/// The name a JDK's directory gives its JVM: `OpenJDK 17` for Debian's java-17-openjdk-amd64.
fn jvm_name() -> Option<String> {
    let java = std::fs::canonicalize(
        std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join("java")).find(|p| p.is_file())?,
    )
    .ok()?;
    let home = java.parent()?.parent()?;
    let dir = home.file_name()?.to_str()?;
    let release = std::fs::read_to_string(home.join("release")).ok()?;
    let version = release.lines().find_map(|l| l.strip_prefix("JAVA_VERSION="))?.trim_matches('"');
    let major = version.split('.').next()?;
    dir.contains("openjdk").then(|| format!("the JVM (OpenJDK {major})"))
}

#[test]
fn the_jvm_is_named_with_its_version_and_what_profiles_it() {
    let s = Scratch::new("runtime-java");
    let classes = busy_java(&s);
    let named: Vec<String> =
        ["the JVM", "(java)", "Java frames"].into_iter().map(String::from).chain(jvm_name()).collect();
    let names: Vec<&str> = named.iter().map(String::as_str).collect();
    let out = record_command(&s, &["java", "-cp", classes.to_str().unwrap(), "Busy"]);
    assert_named(&out, &names, "async-profiler");

    let mut cmd = Command::new("java");
    cmd.args(["-cp", classes.to_str().unwrap(), "Busy"]);
    let jvm = Running::start(cmd);
    wait_for_mapping(jvm.pid(), "libjvm.so");
    assert_named(&record_pid(&s, jvm.pid()), &names, "JFR");
}

fn has(program: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {program}")).stdout(Stdio::null()).status().unwrap().success()
}

#[test]
fn pypy_is_named_with_what_profiles_it() {
    if !has("pypy3") {
        eprintln!("skipped: pypy3 is not installed (./setup installs Debian's pypy3)");
        return;
    }
    let s = Scratch::new("runtime-pypy");
    let program = s.path("busy.py");
    std::fs::write(&program, "import time\nend = time.time() + 20\nt = 0\nwhile time.time() < end:\n    t += sum(i % 7 for i in range(100000))\n").unwrap();
    let out = record_command(&s, &["pypy3", program.to_str().unwrap()]);
    assert_named(&out, &["PyPy", "Python frames"], "vmprof");

    let mut cmd = Command::new("pypy3");
    cmd.arg(&program);
    let running = Running::start(cmd);
    wait_for_mapping(running.pid(), "libpypy");
    // Debian's PyPy says its version in its extension modules' ABI tag (pp73).
    assert_named(&record_pid(&s, running.pid()), &["PyPy 7.", "(pypy3"], "vmprof");
}

/// The weight of each line of `file` that was a sample's innermost frame in that file, over
/// every batch in the spool.
fn spooled_lines(spool: &Path, file: &str) -> HashMap<u32, u64> {
    let mut spool = onefix_fleet::spool::Spool::open(spool, 1 << 30).unwrap();
    let mut lines: HashMap<u32, u64> = HashMap::new();
    while let Some(spooled) = spool.oldest() {
        let batch = &spooled.batch;
        let frames: HashMap<u64, &onefix_fleet::batch::FrameRow> =
            batch.frames.iter().map(|f| (f.frame_id, f)).collect();
        let stacks: HashMap<u64, &Vec<u64>> = batch.stacks.iter().map(|s| (s.stack_id, &s.frame_ids)).collect();
        for count in &batch.counts {
            let innermost = stacks[&count.stack_id].iter().rev().map(|id| frames[id]).find(|f| f.file.ends_with(file));
            if let Some(frame) = innermost {
                *lines.entry(frame.line).or_default() += count.weight as u64;
            }
        }
        spool.remove(&spooled).unwrap();
    }
    lines
}

#[test]
fn the_agent_attached_to_a_service_still_starting_reads_it_as_python() {
    let s = Scratch::new("runtime-agent-young");
    let program = repo().join("crates/onefix/tests/fleet/service.py");
    // A launcher, as a shim or an entry-point script is: a native shell that execs Python
    // once it has done its work. The agent is started while the shell still runs.
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg("sleep 1; exec python3 \"$0\" 8").arg(&program);
    let service = Running::start(cmd);
    std::thread::sleep(Duration::from_millis(100));
    let dead = format!("http://127.0.0.1:{}/?database=onefix", free_port());
    let spool = s.path("spool");
    let out = onefix()
        .args(["agent", "--pid", &service.pid().to_string(), "--to", &dead, "--interval", "1s", "--duration", "6s"])
        .arg("--spool")
        .arg(&spool)
        .output()
        .unwrap();
    let text = stderr(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(&format!("profiling process {} (python", service.pid())), "read as Python:\n{text}");
    assert!(!text.contains("(native)"), "{text}");
    let lines = spooled_lines(&spool, "service.py");
    let heaviest = lines.iter().max_by_key(|(_, w)| **w).map(|(line, _)| *line as u64);
    assert_eq!(heaviest, Some(line_of(&program, "# CULPRIT")), "the planted line is named: {lines:?}\n{text}");
}

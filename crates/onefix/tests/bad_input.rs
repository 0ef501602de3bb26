//! The bad-input matrix (issue 8): every mistake a user or a target can make gets one sentence
//! on stderr and a non-zero exit, never a panic, a backtrace or an error chain; and where
//! something was recorded, it is saved and the sentence says where.
//!
//! The cases already covered in `live.rs` (a pid that does not exist, a kernel thread, another
//! user's Python process, a command not found, `true`, a nonexistent output directory, garbage,
//! empty and missing recordings, a cut recording, a closed port, `{{int 5}}`, `--rate fast` and
//! `--duration soon` on `record`) are not repeated here.

mod common;
use common::{compile_c, onefix, Scratch};

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// The one sentence onefix printed on stderr: asserts there is exactly one (clap's pointer to
/// `--help` aside), and no panic, backtrace or multi-line error chain.
fn one_sentence(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    for bad in ["panicked", "RUST_BACKTRACE", "stack backtrace", "Caused by", "Error: "] {
        assert!(!err.contains(bad), "{bad:?} on stderr: {err}");
    }
    let lines: Vec<&str> =
        err.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("For more information")).collect();
    // `record`'s summary is on stderr when stdout is not a terminal (here, a pipe), beside the
    // sentences: its header names the samples, and its other lines carry no `onefix:` prefix.
    let summary = lines.iter().any(|l| is_summary_header(l));
    let sentences: Vec<&str> = if summary {
        lines.into_iter().filter(|l| l.starts_with("onefix: ") && !is_summary_header(l)).collect()
    } else {
        lines
    };
    assert_eq!(sentences.len(), 1, "exactly one sentence on stderr, got: {err}");
    sentences[0].to_owned()
}

/// The first line of a recording's summary: `onefix: 131 samples over 1.88 s (...) of ...`.
fn is_summary_header(line: &str) -> bool {
    line.strip_prefix("onefix: ")
        .and_then(|rest| rest.split_once(' '))
        .is_some_and(|(n, rest)| n.replace(',', "").parse::<u64>().is_ok() && rest.starts_with("sample"))
}

/// Runs onefix, expects failure with `code` and one sentence containing every `expect`.
fn fails(cmd: &mut Command, code: i32, expect: &[&str]) -> String {
    let out = cmd.output().unwrap();
    let sentence = one_sentence(&out);
    assert_eq!(out.status.code(), Some(code), "{sentence}");
    for e in expect {
        assert!(sentence.contains(e), "expected {e:?} in: {sentence}");
    }
    sentence
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Busy for a second, then the signal given as argv[1]; native, so sampled with perf_event.
const CRASH_C: &str = r#"
#include <signal.h>
#include <stdlib.h>
#include <time.h>
static volatile double sink;
static void spin(void) { double x = 0; for (int i = 0; i < 200000; i++) x += i * 0.5; sink = x; }
int main(int argc, char **argv) {
    time_t end = time(NULL) + 1;
    while (time(NULL) <= end) spin();
    raise(atoi(argv[1]));
    return 0;
}
"#;

/// A crashed target: exit 1 (recorded, but not ended as asked), one sentence naming the signal
/// and where the recording is, and that recording renders again.
fn assert_crash_is_saved(s: &Scratch, out: Output, signal: &str) {
    let sentence = one_sentence(&out);
    assert_eq!(out.status.code(), Some(1), "{sentence}");
    assert!(sentence.contains(signal), "{sentence}");
    assert!(sentence.contains(&format!("saved to {}", s.arg("rec.onefix"))), "{sentence}");
    let again = onefix().args(["report", "--quiet", &s.arg("rec.onefix")]).output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(String::from_utf8_lossy(&again.stdout).contains(&format!("signal {}", signal_number(signal))));
}

fn signal_number(name: &str) -> i32 {
    match name {
        "SIGSEGV" => libc::SIGSEGV,
        "SIGKILL" => libc::SIGKILL,
        _ => unreachable!(),
    }
}

// ---- the target ----

#[test]
fn a_python_target_that_segfaults_mid_recording_is_saved_and_said() {
    let s = Scratch::new("pysegv");
    let prog = s.path("segv.py");
    std::fs::write(&prog, "import os, signal, time\nend = time.time() + 1\nwhile time.time() < end:\n    pass\nos.kill(os.getpid(), signal.SIGSEGV)\n").unwrap();
    let out =
        onefix().args(["record", "--quiet", "-o", &s.arg("rec.onefix"), "--", "python3"]).arg(&prog).output().unwrap();
    assert_crash_is_saved(&s, out, "SIGSEGV");
}

#[test]
fn a_native_target_that_segfaults_or_is_killed_mid_recording_is_saved_and_said() {
    let s = Scratch::new("nsegv");
    let exe = compile_c(&s, "crash", CRASH_C, &["-O1", "-g"]);
    for (signal, number) in [("SIGSEGV", libc::SIGSEGV), ("SIGKILL", libc::SIGKILL)] {
        let out = onefix()
            .args(["record", "--quiet", "--mode", "cpu", "-o", &s.arg("rec.onefix"), "--"])
            .arg(&exe)
            .arg(number.to_string())
            .output()
            .unwrap();
        assert_crash_is_saved(&s, out, signal);
    }
}

#[test]
fn a_command_that_exits_at_once_saves_nothing_and_says_its_status() {
    let s = Scratch::new("false");
    fails(
        onefix().args(["record", "-o", &s.arg("rec.onefix"), "--", "false"]),
        2,
        &["no sample was taken", "(exited with 1)", "nothing was saved"],
    );
    assert!(!s.path("rec.onefix").exists(), "an empty recording is not left behind");
}

#[test]
fn memory_of_a_program_the_allocation_agent_cannot_see_is_refused_in_one_sentence() {
    let s = Scratch::new("memory-static");
    let exe = compile_c(&s, "static", "int main(void) { return 0; }\n", &["-static"]);
    fails(
        onefix().args(["record", "--memory", "-o", &s.arg("rec.onefix"), "--"]).arg(&exe),
        2,
        &["statically linked", "LD_PRELOAD"],
    );
    if Command::new("go").arg("version").output().is_ok_and(|o| o.status.success()) {
        let src = s.path("main.go");
        std::fs::write(&src, "package main\n\nfunc main() {}\n").unwrap();
        let exe = s.path("goprog");
        let built = Command::new("go")
            .args(["build", "-o"])
            .arg(&exe)
            .arg(&src)
            .env("GOCACHE", s.path("gocache"))
            .env("GO111MODULE", "off")
            .status()
            .unwrap();
        assert!(built.success());
        fails(
            onefix().args(["record", "--memory", "-o", &s.arg("rec.onefix"), "--"]).arg(&exe),
            2,
            &["is a Go program", "runtime/pprof"],
        );
    }
    assert!(!s.path("rec.onefix").exists());
}

#[test]
fn a_command_that_is_not_executable_is_one_sentence() {
    let s = Scratch::new("noexec");
    let script = s.path("app.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap(); // mode 644: not executable
    fails(onefix().args(["record", "-o", &s.arg("rec.onefix"), "--"]).arg(&script), 2, &["permission denied"]);
}

#[test]
fn attaching_to_an_idle_native_process_says_it_was_idle_and_leaves_it_running() {
    let s = Scratch::new("idle");
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let sentence = fails(
        onefix().args(["record", "-o", &s.arg("rec.onefix"), "--duration", "1s", "--pid", &sleeper.id().to_string()]),
        2,
        &["no sample was taken", "idle"],
    );
    let alive = sleeper.try_wait().unwrap().is_none();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(alive, "the target outlives the attempt: {sentence}");
}

#[test]
fn a_native_process_of_another_user_is_refused_with_how_to_fix_it() {
    if !is_root() || Command::new("runuser").arg("--help").output().is_err() {
        eprintln!("skipped: needs root (to run onefix as nobody against a root process) and runuser");
        return;
    }
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    // nobody cannot write our scratch directory: the output goes to /tmp, which it can.
    let output = format!("/tmp/onefix-bad-perm-{}.onefix", std::process::id());
    let sentence = fails(
        Command::new("runuser")
            .args([
                "-u",
                "nobody",
                "--",
                env!("CARGO_BIN_EXE_onefix"),
                "record",
                "-o",
                &output,
                "--duration",
                "1s",
                "--pid",
            ])
            .arg(sleeper.id().to_string()),
        2,
        &["permission denied", "root"],
    );
    let _ = std::fs::remove_file(&output);
    let alive = sleeper.try_wait().unwrap().is_none();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(alive, "{sentence}");
}

#[test]
fn an_interpreter_onefix_cannot_read_is_named_as_such() {
    // An executable named like a future Python (a copy of `sleep`): named an interpreter, but
    // no CPython onefix knows lives in it.
    let s = Scratch::new("unsupported");
    let fake = s.path("python3.99");
    std::fs::copy(Path::new("/bin/sleep"), &fake).unwrap();
    let mut target = Command::new(&fake).arg("30").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let sentence = fails(
        onefix().args(["record", "-o", &s.arg("rec.onefix"), "--pid", &target.id().to_string()]),
        2,
        &["Python version onefix cannot read", "supported: CPython"],
    );
    let alive = target.try_wait().unwrap().is_none();
    target.kill().unwrap();
    target.wait().unwrap();
    assert!(alive, "{sentence}");
}

#[test]
fn a_stripped_binary_is_recorded_and_says_why_no_line_is_named() {
    let s = Scratch::new("stripped");
    let exe = compile_c(&s, "hot", CRASH_C, &["-O1", "-s"]);
    let out = onefix()
        .args(["record", "--quiet", "--mode", "cpu", "-o", &s.arg("rec.onefix"), "--"])
        .arg(&exe)
        .arg("0") // raise(0) does nothing: a clean exit
        .output()
        .unwrap();
    // A recording was made: success, with one sentence saying why no line of it is named.
    let sentence = one_sentence(&out);
    assert!(out.status.success(), "{sentence}");
    assert!(sentence.contains("has no symbols") && sentence.contains("-g"), "{sentence}");
    assert!(s.path("rec.onefix").exists());
}

// ---- the recording file ----

/// A real, complete recording to damage.
fn a_recording(s: &Scratch) -> Vec<u8> {
    let out = onefix()
        .args(["record", "--quiet", "--mode", "cpu", "-o", &s.arg("good.onefix"), "--", "python3", "-c"])
        .arg("import time\nend = time.time() + 1\nwhile time.time() < end:\n    sum(range(1000))\n")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::read(s.path("good.onefix")).unwrap()
}

#[test]
fn damaged_recordings_are_refused_in_one_sentence() {
    let s = Scratch::new("damaged");
    let good = a_recording(&s);
    let report = |name: &str, bytes: &[u8]| {
        std::fs::write(s.path(name), bytes).unwrap();
        let mut cmd = onefix();
        cmd.args(["report", &s.arg(name)]);
        cmd
    };

    // A newer format version than this onefix reads.
    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&99u32.to_le_bytes());
    fails(&mut report("newer.onefix", &newer), 2, &["format version 99", "upgrade onefix"]);

    // onefix's header, then random bytes (seeded: the same bytes every run).
    let mut random = good[..12].to_vec();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..4096 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        random.push(x as u8);
    }
    fails(&mut report("random.onefix", &random), 2, &["damaged at byte 12"]);

    // Random bytes from the first byte on.
    fails(&mut report("noise.onefix", &random[12..]), 2, &["not an onefix recording"]);

    // One byte flipped inside a batch: the checksum catches it.
    let mut flipped = good.clone();
    let middle = good.len() / 2;
    flipped[middle] ^= 0x40;
    fails(&mut report("flipped.onefix", &flipped), 2, &["damaged", "checksum"]);

    // A directory where a recording was expected.
    fails(onefix().args(["report", &s.0.display().to_string()]), 2, &["cannot read", "directory"]);
}

// ---- the output path and the disk ----

#[test]
fn an_output_path_that_is_a_directory_is_refused_before_anything_starts() {
    let s = Scratch::new("outdir");
    fails(
        onefix().args(["record", "-o", &s.0.display().to_string(), "--", "python3", "-c", "pass"]),
        2,
        &["cannot write the recording", "directory"],
    );
}

/// A tmpfs of a few KiB mounted for one test, unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: PathBuf, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(&dir).status();
        ok.is_ok_and(|s| s.success()).then_some(SmallDisk(dir))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_disk_that_fills_during_a_recording_keeps_what_fit_and_says_where() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let s = Scratch::new("diskfull");
    let Some(disk) = SmallDisk::mount(s.path("disk"), "16k") else {
        eprintln!("skipped: mount -t tmpfs failed (no permission in this container?)");
        return;
    };
    // A new function at every pass and stacks of every depth: many distinct frames and stacks,
    // so that the recording outgrows 16 KiB within the first seconds (about 90 KB in 3 s alone
    // at 1000 Hz), however busy the machine.
    let prog = s.path("grow.py");
    std::fs::write(
        &prog,
        "import time\ndef f(n):\n    return f(n - 1) if n else sum(range(3000))\nend = time.time() + 3\nk = 0\nwhile time.time() < end:\n    exec('def g%d(n):\\n    return f(n)\\n' % k, globals())\n    globals()['g%d' % k](k % 60)\n    k += 1\n",
    )
    .unwrap();
    let rec = disk.0.join("rec.onefix");
    let out = onefix()
        .args(["record", "--quiet", "--rate", "1000", "-o"])
        .arg(&rec)
        .arg("--")
        .arg("python3")
        .arg(&prog)
        .output()
        .unwrap();
    let sentence = one_sentence(&out);
    assert_eq!(out.status.code(), Some(1), "{sentence}");
    assert!(sentence.contains(&rec.display().to_string()) && sentence.contains("No space left"), "{sentence}");
    // The report on stdout is whole: it comes from memory, not from the full file.
    assert!(String::from_utf8_lossy(&out.stderr).contains("grow.py"), "{}", String::from_utf8_lossy(&out.stderr));
    // What fit on the disk is kept under the recording's own partial name (the destination
    // would otherwise be replaced by half a recording), reads back, and says it ends early.
    let partial = disk.0.join("rec.onefix.partial");
    assert!(sentence.contains(&partial.display().to_string()) && !rec.exists(), "{sentence}");
    let again = onefix().args(["report", "--quiet"]).arg(&partial).output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(String::from_utf8_lossy(&again.stderr).contains("ends early"));
}

// ---- onefix load ----

/// A server on 127.0.0.1 that answers every connection with `reply` and closes it, for at
/// most `connections` connections (then its thread ends).
fn answering_server(reply: &'static [u8], connections: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(connections) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(reply);
        }
    });
    port
}

#[test]
fn a_load_target_answering_garbage_is_one_sentence() {
    let port = answering_server(b"garbage, not HTTP at all\r\n\r\n", 64);
    fails(
        onefix().args(["load", "-q", "-n", "20", "-c", "2", &format!("http://127.0.0.1:{port}/")]),
        2,
        &["no request completed", "not HTTP"],
    );
}

#[test]
fn a_load_target_that_hangs_up_at_once_is_one_sentence() {
    let port = answering_server(b"", 64);
    fails(
        onefix().args(["load", "-q", "-n", "20", "-c", "2", &format!("http://127.0.0.1:{port}/")]),
        2,
        &["no request completed"],
    );
}

#[test]
fn invalid_templates_are_one_sentence_each() {
    let url = "http://127.0.0.1:1/";
    fails(onefix().args(["load", "-n", "1", &format!("{url}{{{{nope 1}}}}")]), 2, &["not a generator"]);
    fails(onefix().args(["load", "-n", "1", &format!("{url}{{{{int 1 5")]), 2, &["never closed"]);
    fails(onefix().args(["load", "-n", "1", "--body", "{{int 3 1}}", url]), 2, &["range is empty"]);
    fails(onefix().args(["load", "-n", "1", "not-a-url"]), 2, &["http://"]);
    // Found by fuzzing: values too large to build before the first request are refused.
    fails(
        onefix().args(["load", "-n", "1", &format!("{url}{{{{pick 3000 bytes 1048576 hex}}}}")]),
        2,
        &["more than 256 MiB"],
    );
    fails(onefix().args(["load", "-n", "1", &format!("{url}{{{{line /dev/zero}}}}")]), 2, &["larger than 256 MiB"]);
}

#[test]
fn rates_and_durations_that_do_not_parse_are_one_sentence_each() {
    fails(onefix().args(["load", "--rate", "fast", "http://127.0.0.1:1/"]), 2, &["not a rate"]);
    fails(onefix().args(["load", "--rate", "-5", "http://127.0.0.1:1/"]), 2, &["rate"]);
    fails(onefix().args(["load", "--duration", "soon", "http://127.0.0.1:1/"]), 2, &["not a duration"]);
    fails(onefix().args(["load", "--duration", "3 weeks", "http://127.0.0.1:1/"]), 2, &["unknown unit"]);
    fails(onefix().args(["record", "--rate", "0", "--", "true"]), 2, &["between 1 and 10000"]);
    fails(onefix().args(["record", "--rate", "1e9", "--", "true"]), 2, &["between 1 and 10000"]);
    fails(onefix().args(["record", "--rate", "-100", "--", "true"]), 2, &["between 1 and 10000"]);
    fails(onefix().args(["record", "--duration", "0s", "--", "true"]), 2, &["positive duration"]);
    fails(onefix().args(["record", "--duration", "NaN", "--", "true"]), 2, &["duration"]);
}

#[test]
fn a_twenty_digit_duration_is_one_sentence_for_every_command_not_a_panic() {
    let huge = "99999999999999999999s";
    let url = "http://127.0.0.1:1/";
    let load = format!("{url} --duration {huge}");
    let commands: Vec<Vec<&str>> = vec![
        vec!["record", "--duration", huge, "--", "true"],
        vec!["record", "--load", &load, "--", "true"],
        vec!["top", "--duration", huge, "--", "true"],
        vec!["top", "--window", huge, "--", "true"],
        vec!["load", "--duration", huge, url],
        vec!["load", "--timeout", huge, url],
        vec!["agent", "--interval", huge, "--to", url, "--pid", "1"],
        vec!["agent", "--timeout", huge, "--to", url, "--pid", "1"],
        vec!["agent", "--duration", huge, "--to", url, "--pid", "1"],
    ];
    for args in commands {
        fails(onefix().args(&args), 2, &["longer than the longest duration onefix takes, 365 days"]);
    }
}

#[test]
fn ctrl_c_in_a_terminal_is_not_a_crash_of_the_target() {
    // A terminal's Ctrl-C signals the whole foreground group: onefix and the target it started.
    // The target dies of that SIGINT; the recording ended as asked, so the exit is 0.
    use std::os::unix::process::CommandExt;
    let s = Scratch::new("ctrlc");
    let prog = s.path("spin.py");
    std::fs::write(&prog, "import time\nend = time.time() + 20\nwhile time.time() < end:\n    sum(range(1000))\n")
        .unwrap();
    let profiler = onefix()
        .args(["record", "--quiet", "-o", &s.arg("rec.onefix"), "--", "python3"])
        .arg(&prog)
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: signalling the process group our own child leads.
    unsafe { libc::killpg(profiler.id() as i32, libc::SIGINT) };
    let out = profiler.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The summary is on stderr (stdout is a pipe here): its header, and no sentence besides.
    assert!(!err.lines().any(|l| l.starts_with("onefix:") && !is_summary_header(l)), "no complaint from onefix: {err}");
    assert!(err.contains("signal 2"), "the target's end is still reported");
}

/// A `python2.7` that answers a version question as Python 2.7 does, and otherwise is the
/// program run: it leaves a mark and writes to its stderr what Python 2.7 would have written
/// of onefix's bootstrap. (No Python 2.7 is installed; onefix's refusal asks the version of
/// the interpreter, so this is the path a real one takes.)
const FAKE_PYTHON27: &str = r#"#!/bin/sh
if [ "$1" = "-E" ] && [ "$2" = "-S" ] && [ "$3" = "-c" ]; then printf '2.7'; exit 0; fi
echo ran > "$(dirname "$0")/ran"
echo 'Error in sitecustomize; set PYTHONVERBOSE for traceback:' >&2
"#;

#[test]
fn a_python_onefix_cannot_read_is_refused_before_it_starts_with_nothing_in_its_stderr() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new("python27");
    let python = s.path("python2.7");
    std::fs::write(&python, FAKE_PYTHON27).unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Run as `python2.7 app.py`, and as a script whose #! line names it.
    let script = s.path("app.py");
    std::fs::write(&script, format!("#!{}\nprint 'hello'\n", python.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for command in [vec![s.arg("python2.7"), s.arg("app.py")], vec![s.arg("app.py")]] {
        let sentence = fails(
            onefix().args(["record", "-o", &s.arg("rec.onefix"), "--"]).args(&command),
            2,
            &["is Python 2.7, which onefix cannot read", "CPython 3.8 to 3.13", "not started"],
        );
        assert!(!sentence.contains("sitecustomize"), "{sentence}");
        assert!(!s.path("ran").exists(), "the program was started: {command:?}");
    }
}

#[test]
fn a_refused_clickhouse_url_is_never_said_with_its_password() {
    let url = "http://ingest:hunter2@127.0.0.1:1/?database=onefix";
    let sentence =
        fails(onefix().args(["fleet", "init", "--to", url]), 2, &["holds credentials", "ingest:***@127.0.0.1:1"]);
    assert!(!sentence.contains("hunter2"), "{sentence}");
}

#[test]
fn a_credentials_file_others_can_read_is_warned_of() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new("credentials");
    let file = s.path("clickhouse.credentials");
    std::fs::write(&file, "user=ingest\npassword=hunter2\n").unwrap();
    let warned = |mode: u32| {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = onefix()
            .args(["fleet", "init", "--to", "http://127.0.0.1:1/?database=onefix", "--credentials"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(!out.status.success(), "nothing listens on port 1");
        String::from_utf8_lossy(&out.stderr).contains("can be read by others")
    };
    assert!(warned(0o644), "a 0644 credentials file is used without a word");
    assert!(!warned(0o600));
}

//! A target that writes terminal escape sequences into everything onefix shows of it (its source
//! lines, argv and thread names) cannot reach the user's terminal through onefix (issue 33):
//! what `record`, `report` and `dump` print holds no ESC (0x1b) or BEL (0x07) byte, the
//! sequences are shown escaped instead, and the SVG flame graph stays valid XML.
//!
//! The output is captured, not read from a pty: with colour off (as here), what onefix prints to
//! a terminal is this same text.

mod common;
use common::{onefix, Scratch};

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// An OSC that retitles the terminal, ended by BEL.
const RETITLE: &str = "\x1b]0;pwn\x07";

/// A child killed when the test ends, however it ends.
struct Target(Child);

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Busy for argv[1] seconds on a line whose comment holds the raw sequence, in a thread whose
/// name holds it too.
fn program() -> String {
    format!(
        r#"import sys, threading, time
threading.current_thread().name = "\x1b]0;pwn\x07"
def work(seconds):
    total = 0
    deadline = time.time() + seconds
    while time.time() < deadline:
        total += sum(i * i for i in range(2000))  # {RETITLE} spin
    return total
print("started", flush=True)
work(float(sys.argv[1]))
"#
    )
}

fn text(out: &Output) -> Vec<u8> {
    [out.stdout.as_slice(), out.stderr.as_slice()].concat()
}

fn assert_no_raw_control(what: &str, bytes: &[u8]) {
    let shown = String::from_utf8_lossy(bytes);
    assert!(!bytes.contains(&0x1b) && !bytes.contains(&0x07), "{what} printed a raw ESC or BEL:\n{shown:?}");
}

#[test]
fn escape_sequences_in_source_argv_and_thread_names_reach_no_terminal_and_the_svg_stays_xml() {
    let s = Scratch::new("hostile-target");
    std::fs::write(s.path("app.py"), program()).unwrap();
    let svg = s.path("flame.svg");
    let record = onefix()
        .current_dir(&s.0)
        .args(["record", "-o"])
        .arg(s.path("rec.onefix"))
        .arg("--flamegraph")
        .arg(&svg)
        .args(["--", "python3", "app.py", "2", RETITLE])
        .output()
        .unwrap();
    assert!(record.status.success(), "{}", String::from_utf8_lossy(&record.stderr));
    assert_no_raw_control("record", &text(&record));
    // The command line is shown, its sequence escaped: the check above is not vacuous.
    assert!(String::from_utf8_lossy(&text(&record)).contains(r"\x1b]0;pwn\x07"), "{record:?}");

    let report = onefix().arg("report").arg(s.path("rec.onefix")).output().unwrap();
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    assert_no_raw_control("report", &text(&report));
    let shown = String::from_utf8_lossy(&report.stdout);
    assert!(shown.matches(r"\x1b]0;pwn\x07").count() >= 2, "argv and the source line, escaped:\n{shown}");

    // On a terminal the summary is coloured: onefix's own SGR codes, and still nothing of the
    // target's (no OSC, no BEL). Run under a pty by script(1).
    let on_pty = Command::new("script")
        .args(["-qec", &format!("{} report {}", env!("CARGO_BIN_EXE_onefix"), s.arg("rec.onefix")), "/dev/null"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .output()
        .unwrap();
    assert!(on_pty.status.success(), "{}", String::from_utf8_lossy(&on_pty.stderr));
    let shown = String::from_utf8_lossy(&on_pty.stdout);
    assert!(shown.contains("\x1b[1m"), "coloured on a terminal: {shown:?}");
    assert!(!shown.contains("\x1b]") && !shown.contains('\x07'), "the target's OSC reached the terminal: {shown:?}");
    assert!(shown.contains(r"\x1b]0;pwn\x07"), "{shown:?}");

    let parsed = Command::new("python3")
        .args(["-c", "import xml.dom.minidom, sys; xml.dom.minidom.parse(sys.argv[1])"])
        .arg(&svg)
        .output()
        .unwrap();
    assert!(parsed.status.success(), "the SVG is not XML: {}", String::from_utf8_lossy(&parsed.stderr));

    // A running target: its argv and thread names, dumped.
    let mut child = Command::new("python3")
        .current_dir(&s.0)
        .args(["app.py", "30", RETITLE])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut started = [0u8; 8];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut started).unwrap();
    let target = Target(child);
    let pid = target.0.id().to_string();
    // The thread's new name is set before it prints; the first dump may still come early.
    let deadline = Instant::now() + Duration::from_secs(10);
    let dump = loop {
        let dump = onefix().args(["dump", "--pid", &pid]).output().unwrap();
        assert!(dump.status.success(), "{}", String::from_utf8_lossy(&dump.stderr));
        if String::from_utf8_lossy(&dump.stdout).contains("pwn") || Instant::now() > deadline {
            break dump;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_no_raw_control("dump", &text(&dump));
    let shown = String::from_utf8_lossy(&dump.stdout);
    assert!(shown.matches(r"\x1b]0;pwn\x07").count() >= 2, "argv and the thread's name, escaped:\n{shown}");
}

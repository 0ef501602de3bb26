//! onefix as root on a shared machine (issue 33): it follows no link and opens no file another
//! user planted in a directory others can write, whatever `fs.protected_symlinks` says, and
//! what it writes (recordings, reports, the agent's spool) only its owner can read.
//!
//! A second user is created for the test and removed at its end; it plants each link of the
//! issue in a sticky world-writable directory, and a root-owned 0600 file must stay byte for
//! byte as it was. Run as root (as CI does); as anyone else there is no other user to be.

mod common;
use common::{onefix, Scratch};

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

const SECRET: &[u8] = b"root only: the password is swordfish\n";

/// A user made for one test, removed (with anything left of it) when the test ends.
struct OtherUser(String);

impl OtherUser {
    fn create(tag: &str) -> OtherUser {
        let name = format!("onefix-{tag}-{}", std::process::id());
        let ok = Command::new("useradd").args(["-M", "-N", "-s", "/usr/sbin/nologin", &name]).status().unwrap();
        assert!(ok.success(), "useradd {name}");
        OtherUser(name)
    }
    /// Runs a command as this user.
    fn run(&self, args: &[&str]) -> Output {
        Command::new("runuser").args(["-u", &self.0, "--"]).args(args).output().unwrap()
    }
    fn can_read(&self, path: &Path) -> bool {
        self.run(&["cat", &path.display().to_string()]).status.success()
    }
}

impl Drop for OtherUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.0).status();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The one line on stderr of a run refused as bad input: a non-zero status, not a crash.
fn refused(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "exactly one sentence on stderr, got: {err}");
    assert_eq!(out.status.code(), Some(2), "{err}");
    lines[0].to_owned()
}

/// A scratch directory (0755, so the other user can reach into it) holding a root-only secret
/// and `shared`, a sticky world-writable directory like /tmp.
fn shared_scratch(name: &str) -> (Scratch, std::path::PathBuf, std::path::PathBuf) {
    let s = Scratch::new(name);
    std::fs::set_permissions(&s.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = s.path("secret");
    std::fs::write(&secret, SECRET).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let shared = s.path("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    (s, secret, shared)
}

fn assert_untouched(secret: &Path) {
    assert_eq!(std::fs::read(secret).unwrap(), SECRET, "the root-only file was written");
    assert_eq!(std::fs::metadata(secret).unwrap().permissions().mode() & 0o7777, 0o600);
}

#[test]
fn links_and_files_another_user_plants_in_a_sticky_directory_are_not_followed_as_root() {
    if !is_root() {
        eprintln!("skipped: only root can be fooled into writing another's path (CI runs this as root)");
        return;
    }
    let other = OtherUser::create("plant");
    let (s, secret, shared) = shared_scratch("planted");
    let at = |name: &str| shared.join(name).display().to_string();
    let plant_link = |name: &str| {
        let out = other.run(&["ln", "-s", &secret.display().to_string(), &at(name)]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };

    // record --html through a planted link.
    plant_link("report.html");
    let out = onefix()
        .args(["record", "-o", &s.arg("rec.onefix"), "--html", &at("report.html"), "--", "true"])
        .output()
        .unwrap();
    let sentence = refused(&out);
    assert!(sentence.contains(&format!("{} is a symbolic link of user", at("report.html"))), "{sentence}");
    assert!(sentence.contains("a directory others can write"), "{sentence}");
    assert_untouched(&secret);

    // A file of the other user's in the sticky directory is not written either.
    assert!(other.run(&["touch", &at("report.json")]).status.success());
    let out = onefix()
        .args(["record", "-o", &s.arg("rec.onefix"), "--json", &at("report.json"), "--", "true"])
        .output()
        .unwrap();
    assert!(refused(&out).contains("is a file of user"), "{out:?}");

    // agent --log through a planted link.
    plant_link("agent.log");
    let agent = |extra: &[&str]| {
        onefix()
            .args(["agent", "--to", "http://127.0.0.1:1/?database=onefix", "--pid", "1", "--duration", "1s"])
            .args(["--spool", &s.arg("spool")])
            .args(extra)
            .output()
            .unwrap()
    };
    let sentence = refused(&agent(&["--log", &at("agent.log")]));
    assert!(sentence.contains("cannot open the log") && sentence.contains("is a symbolic link of user"), "{sentence}");
    assert_untouched(&secret);

    // agent --spool in a directory of the other user's, holding a planted probe link and a
    // planted batch: refused before anything is written or read there.
    let spool = at("spool");
    assert!(other.run(&["mkdir", "-m", "777", &spool]).status.success());
    let planted = Path::new(&spool);
    assert!(other
        .run(&["ln", "-s", &secret.display().to_string(), &planted.join(".onefix-probe").display().to_string()])
        .status
        .success());
    let out = onefix()
        .args([
            "agent",
            "--to",
            "http://127.0.0.1:1/?database=onefix",
            "--pid",
            "1",
            "--duration",
            "1s",
            "--spool",
            &spool,
        ])
        .output()
        .unwrap();
    let sentence = refused(&out);
    assert!(sentence.contains(&format!("the spool directory {spool}")), "{sentence}");
    assert!(sentence.contains("is a directory of user"), "{sentence}");
    assert_untouched(&secret);

    // The same outside the sticky directory: the spool must be the agent's own.
    let spool = s.arg("theirs");
    std::fs::create_dir(&spool).unwrap();
    std::os::unix::fs::chown(&spool, Some(other_uid(&other)), None).unwrap();
    let out = onefix()
        .args(["agent", "--to", "http://127.0.0.1:1/?database=onefix", "--pid", "1", "--duration", "1s"])
        .args(["--spool", &spool])
        .output()
        .unwrap();
    let sentence = refused(&out);
    assert!(sentence.contains("belongs to user") && sentence.contains("only the agent can write"), "{sentence}");
}

fn other_uid(user: &OtherUser) -> u32 {
    let out = Command::new("id").args(["-u", &user.0]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Busy for `seconds`: something to sample.
fn busy_python(seconds: f64) -> String {
    format!("import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    sum(range(1000))\n")
}

#[test]
fn recordings_reports_and_spooled_batches_are_not_readable_by_another_user() {
    if !is_root() {
        eprintln!("skipped: needs root to become another user (CI runs this as root)");
        return;
    }
    let other = OtherUser::create("read");
    let s = Scratch::new("private-outputs");
    std::fs::set_permissions(&s.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = onefix()
        .args(["record", "--quiet", "-o", &s.arg("rec.onefix"), "--json", &s.arg("report.json")])
        .args(["--html", &s.arg("report.html"), "--", "python3", "-c", &busy_python(0.5)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for name in ["rec.onefix", "report.json", "report.html"] {
        let path = s.path(name);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "{name}");
        assert!(!other.can_read(&path), "another user read {name}");
    }

    // The agent, with ClickHouse away, spools what it records.
    let mut target = Command::new("python3").args(["-c", &busy_python(30.0)]).spawn().unwrap();
    let spool = s.path("spool");
    let out = onefix()
        .args(["agent", "--to", "http://127.0.0.1:1/?database=onefix", "--pid", &target.id().to_string()])
        .args(["--interval", "1s", "--duration", "2s", "--spool", &s.arg("spool")])
        .output()
        .unwrap();
    let _ = target.kill();
    let _ = target.wait();
    assert!(std::fs::metadata(&spool).unwrap().permissions().mode() & 0o777 == 0o700, "{out:?}");
    let batches: Vec<_> = std::fs::read_dir(&spool).unwrap().flatten().map(|e| e.path()).collect();
    assert!(!batches.is_empty(), "nothing was spooled: {}", String::from_utf8_lossy(&out.stderr));
    for batch in &batches {
        assert_eq!(std::fs::metadata(batch).unwrap().permissions().mode() & 0o777, 0o600, "{}", batch.display());
        assert!(!other.can_read(batch), "another user read {}", batch.display());
    }
}

#[test]
fn an_agent_that_may_not_read_a_root_process_says_so_and_fails() {
    if !is_root() {
        eprintln!("skipped: needs root to run a process the agent's user may not read (CI runs this as root)");
        return;
    }
    let other = OtherUser::create("agent");
    let s = Scratch::new("agent-not-allowed");
    std::fs::set_permissions(&s.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let spool = s.path("spool");
    std::fs::create_dir(&spool).unwrap();
    std::fs::set_permissions(&spool, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&spool, Some(other_uid(&other)), None).unwrap();
    let mut target = Command::new("python3").args(["-c", &busy_python(30.0)]).spawn().unwrap();
    let pid = target.id().to_string();
    let out = other.run(&[
        env!("CARGO_BIN_EXE_onefix"),
        "agent",
        "--to",
        "http://127.0.0.1:1/?database=onefix",
        "--pid",
        &pid,
        "--duration",
        "10s",
        "--spool",
        &spool.display().to_string(),
    ]);
    let _ = target.kill();
    let _ = target.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&format!("cannot profile process {pid}")), "{err}");
    assert!(err.contains("no target could be profiled") && !err.contains("every target has exited"), "{err}");
}

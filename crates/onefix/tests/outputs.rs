//! The output-safety matrix (tests/outputs/matrix.py) against this build's binary: every
//! output flag with an existing file of the user's, /dev/null, a FIFO, a symbolic link, `-`,
//! refused paths (the target must not start) and a disk that fills up. The script prints
//! `N passed, M failed`; CI also runs it against the release binary.

use std::process::Command;

#[test]
fn no_output_ever_destroys_a_file_onefix_did_not_create() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/outputs/matrix.py");
    let out = Command::new("python3").arg(script).arg(env!("CARGO_BIN_EXE_onefix")).output().expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("");
    assert!(out.status.success() && last.ends_with(" 0 failed"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let passed: u32 = last.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(passed >= 100, "the matrix ran only {passed} checks: {stdout}");
}

//! Servers and jobs as they are deployed, recorded with no flag beyond the README's: a Django
//! site under gunicorn's pre-fork workers, a `multiprocessing.Pool` job, and a job started by a
//! shell that stays in place as its parent. Child processes are followed by default, and
//! workers waiting for connections are left out of the shares. Assertions are about which line
//! and what was said, never about how fast anything ran.

mod common;
use common::{first_finding, free_port, line_of, onefix, record_command, repo, Scratch};

use std::path::{Path, PathBuf};

use serde_json::Value;

fn bookshop() -> PathBuf {
    repo().join("tests/servers/bookshop")
}

fn gunicorn_available() -> bool {
    std::process::Command::new("python3").args(["-c", "import django, gunicorn"]).status().is_ok_and(|s| s.success())
}

/// `record --load` of the bookshop under `gunicorn -w 2`, the slow variant or the fixed one: one
/// connection at a time, so that a worker waits for connections while the other serves.
fn record_bookshop(scratch: &Scratch, fixed: bool) -> (Value, String) {
    let port = free_port();
    let name = if fixed { "fixed" } else { "slow" };
    let load = format!("http://127.0.0.1:{port}/category/1 --duration 4s -c 1");
    let out = onefix()
        .current_dir(bookshop())
        .env("BOOKSHOP_DB", scratch.path(&format!("{name}.sqlite3")))
        .env("BOOKSHOP_FIXED", if fixed { "1" } else { "0" })
        .args(["record", "--quiet", "--no-save", "--json", &scratch.arg(&format!("{name}.json"))])
        .args(["--load", &load, "--", "gunicorn", "-w", "2", "-b"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("bookshop:application")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "onefix failed: {stderr}");
    let report: Value = serde_json::from_slice(&std::fs::read(scratch.path(&format!("{name}.json"))).unwrap()).unwrap();
    (report, stderr)
}

#[test]
fn gunicorn_workers_are_followed_and_their_waits_for_connections_left_out() {
    if !gunicorn_available() {
        panic!("django and gunicorn are needed (./setup installs them from tests/programs/requirements.txt)");
    }
    let scratch = Scratch::new("deployed-gunicorn");
    let page = bookshop().join("bookshop.py");
    let render_line = line_of(&page, "html = PAGE.render(");
    let (slow, _) = record_bookshop(&scratch, false);
    let top = first_finding(&slow);
    assert!(top["file"].as_str().unwrap().ends_with("bookshop.py"), "{slow:#}");
    // The N+1 is in the template's loop, under the view's render call.
    assert_eq!(top["line"], render_line, "{slow:#}");
    assert_eq!(top["kind"], "n-plus-one-query", "{top:#}");
    let share = top["share"].as_f64().unwrap();
    assert!(share >= 0.5, "the N+1 line at {share}: the workers' waits must be left out: {slow:#}");
    // The workers were sampled (their pids are not the master's), and their waits were said.
    let notes: Vec<&str> = slow["notes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(
        notes.iter().any(|n| n.contains("workers waiting for a connection")),
        "the waiting workers must be said to be left out: {notes:#?}"
    );

    let (fixed, _) = record_bookshop(&scratch, true);
    let kinds: Vec<&str> = fixed["findings"].as_array().unwrap().iter().filter_map(|f| f["kind"].as_str()).collect();
    assert!(!kinds.contains(&"n-plus-one-query"), "the fixed site joins the authors in: {fixed:#}");
}

fn planted(program: &Path) -> u64 {
    line_of(program, "# PLANTED")
}

#[test]
fn a_process_pool_job_is_followed_into_its_workers_with_no_flag() {
    let scratch = Scratch::new("deployed-pool");
    let program = repo().join("tests/jobs/pool_digest.py");
    let (report, _) = record_command(&scratch, &[], &[Path::new("python3"), &program]);
    let top = first_finding(&report);
    assert!(top["file"].as_str().unwrap().ends_with("pool_digest.py"), "{report:#}");
    assert_eq!(top["line"], planted(&program), "{report:#}");
}

#[test]
fn a_shell_that_stays_as_the_parent_is_followed_to_its_python() {
    let scratch = Scratch::new("deployed-shell");
    let program = repo().join("tests/jobs/pool_digest.py");
    let dir = program.parent().unwrap().display().to_string();
    // Two commands, so the shell forks Python rather than exec'ing it, and stays the parent.
    let script = format!("cd '{dir}' && python3 pool_digest.py && true");
    let (report, _) = record_command(&scratch, &[], &[Path::new("sh"), Path::new("-c"), Path::new(&script)]);
    let top = first_finding(&report);
    assert!(top["file"].as_str().unwrap().ends_with("pool_digest.py"), "{report:#}");
    assert_eq!(top["line"], planted(&program), "{report:#}");
}

#[test]
fn no_subprocesses_with_a_shell_that_runs_python_is_one_sentence() {
    let out = onefix()
        .args(["record", "--no-subprocesses", "--no-save", "--", "sh", "-c", "python3 -c pass; true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--no-subprocesses leaves out") && stderr.lines().count() == 1, "{stderr}");
}

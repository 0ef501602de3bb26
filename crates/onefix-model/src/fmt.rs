//! Wording shared by every writer and command, so that one thing is always said one way:
//! sizes, a file's short name, how a process ended.

use crate::TargetExit;

/// Bytes in decimal units, as allocation profilers print them: `512 B`, `3.4 kB`, `21.4 MB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if n < 1000 {
        return format!("{n} B");
    }
    let mut value = n as f64;
    let mut unit = "B";
    for next in UNITS {
        if value < 1000.0 {
            break;
        }
        value /= 1000.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

/// Milliseconds with as many digits as they deserve.
pub fn millis(ms: f64) -> String {
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.3} ms")
    }
}

/// The last component of a path: `app.py` for `/srv/app/app.py`.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `SIGSEGV (signal 11)`, or `signal N` for the rest (Linux numbers).
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        2 => "SIGINT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    format!("{name} (signal {sig})")
}

/// How a process ended, as a clause: `exited with 0`, `killed by SIGKILL (signal 9)`, ...
/// SIGINT and SIGTERM ask a program to stop (Ctrl-C, or onefix at the end of a duration or a
/// load): it was stopped, not killed.
pub fn exit_clause(exit: &TargetExit) -> String {
    match exit {
        TargetExit::Code(code) => format!("exited with {code}"),
        TargetExit::Signal(signal @ (2 | 15)) => format!("stopped by {}", signal_name(*signal)),
        TargetExit::Signal(signal) => format!("killed by {}", signal_name(*signal)),
        TargetExit::StillRunning => "still running when recording stopped".to_owned(),
        TargetExit::Unknown => "exit status unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_asked_to_stop_was_stopped_and_one_that_crashed_was_killed() {
        assert_eq!(exit_clause(&TargetExit::Signal(2)), "stopped by SIGINT (signal 2)");
        assert_eq!(exit_clause(&TargetExit::Signal(15)), "stopped by SIGTERM (signal 15)");
        assert_eq!(exit_clause(&TargetExit::Signal(11)), "killed by SIGSEGV (signal 11)");
        assert_eq!(exit_clause(&TargetExit::Signal(64)), "killed by signal 64");
        assert_eq!(exit_clause(&TargetExit::Code(3)), "exited with 3");
    }

    #[test]
    fn sizes_and_names_read_as_people_write_them() {
        assert_eq!(bytes(999), "999 B");
        assert_eq!(bytes(21_400_000), "21.4 MB");
        assert_eq!(bytes(3_400), "3.4 kB");
        assert_eq!(file_name("/srv/app/app.py"), "app.py");
        assert_eq!(file_name("app.py"), "app.py");
    }
}

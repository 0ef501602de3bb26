//! Starting a target whose exit status survives py-spy's paused reads.
//!
//! A paused read (py-spy's lock mode) seizes each thread with ptrace and waits for it to stop
//! with `waitpid`. When the target exits during that wait, the wait returns its exit and, if the
//! waiting process is also the target's parent, reaps it: its status is gone, and onefix could
//! only say "exit status unknown". So onefix is not the target's parent. The command is started
//! under a small keeper process, forked from the child before its exec: the keeper forks again,
//! the grandchild goes on to exec the command, and the keeper waits for it and ends the same way
//! (the same exit code, or the same signal). A tracer that is not the parent only sees the exit
//! go by; the zombie is then handed to its real parent, the keeper, which keeps the status.

use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};

/// A command started under a keeper: [`KeptChild::id`] is the command's pid, and waiting on
/// it gives the command's own exit status.
pub struct KeptChild {
    keeper: Child,
    pid: u32,
}

impl KeptChild {
    /// Starts `command` under a keeper. Errors are those of [`Command::spawn`] for the command
    /// itself (not found, permission denied).
    pub fn spawn(command: &mut Command) -> io::Result<KeptChild> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills `fds` with two new descriptors, owned just below.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nothing else.
        let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let pid_to = fds[1];
        // SAFETY: the closure runs in the forked child of a possibly multi-threaded process, so
        // it calls only async-signal-safe functions (fork, write, close_range, sigaction,
        // setrlimit, waitpid, kill, _exit) and allocates nothing.
        unsafe {
            command.pre_exec(move || {
                let pid = libc::fork();
                if pid < 0 {
                    return Err(io::Error::last_os_error());
                }
                if pid == 0 {
                    // The command's process: go on to exec (the pipe closes on exec).
                    return Ok(());
                }
                keep(pid, pid_to)
            });
        }
        let spawned = command.spawn();
        drop(write_end);
        let keeper = spawned?;
        let mut bytes = [0u8; 4];
        let mut reader = std::fs::File::from(read_end);
        match reader.read_exact(&mut bytes) {
            Ok(()) => Ok(KeptChild { keeper, pid: i32::from_ne_bytes(bytes) as u32 }),
            Err(e) => {
                let mut keeper = keeper;
                let _ = keeper.kill();
                let _ = keeper.wait();
                Err(io::Error::other(format!("the command's keeper process did not start it ({e})")))
            }
        }
    }

    /// The command's pid (not the keeper's).
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// The command's exit status, if it has ended.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.keeper.try_wait()
    }

    /// Waits for the command to end and gives its exit status.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        self.keeper.wait()
    }
}

/// The keeper: says the command's pid, lets go of every descriptor (the command's stdio and
/// std's exec-error pipe, whose closing tells the parent that exec succeeded), waits for the
/// command and ends as it did. Never returns.
///
/// # Safety
/// Only for the forked child inside `pre_exec`: async-signal-safe calls only.
unsafe fn keep(pid: libc::pid_t, pid_to: libc::c_int) -> ! {
    let bytes = pid.to_ne_bytes();
    libc::write(pid_to, bytes.as_ptr().cast(), bytes.len());
    libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
    // Ctrl-C and a closed terminal reach the command itself (same process group); the keeper
    // stays to collect its status.
    for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM, libc::SIGPIPE] {
        libc::signal(sig, libc::SIG_IGN);
    }
    let mut status = 0;
    loop {
        let r = libc::waitpid(pid, &mut status, 0);
        if r == pid {
            break;
        }
        if r < 0 && *libc::__errno_location() != libc::EINTR {
            libc::_exit(127);
        }
    }
    if libc::WIFSIGNALED(status) {
        // End by the same signal, without a core file of the keeper's own.
        let sig = libc::WTERMSIG(status);
        let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
    libc::_exit(libc::WEXITSTATUS(status))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn the_command_is_the_keepers_child_and_its_status_is_kept() {
        let mut child = KeptChild::spawn(Command::new("sh").args(["-c", "sleep 0.2; exit 7"])).unwrap();
        assert_ne!(crate::process::parent(child.id()), Some(std::process::id()), "onefix is not the command's parent");
        assert_eq!(child.wait().unwrap().code(), Some(7));
    }

    #[test]
    fn a_command_killed_by_a_signal_is_said_so() {
        let mut child = KeptChild::spawn(Command::new("sleep").arg("5")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        // SAFETY: kill(2) on the command's pid, which the keeper has not reaped yet.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn a_command_that_cannot_be_run_is_the_spawn_error() {
        let err = KeptChild::spawn(&mut Command::new("/nonexistent/onefix-test")).err().expect("an error");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}

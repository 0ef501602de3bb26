//! Starting a command held at a gate: fork, let the parent open its perf events (with
//! `enable_on_exec`), then release the child to exec. std's `Command` cannot hold a child
//! between fork and exec, so this is done with fork, two pipes and execv.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::NativeError;

/// A forked child waiting at the gate for [`Gate::release`].
pub struct Gate {
    pub pid: u32,
    command: String,
    gate_w: Option<OwnedFd>,
    err_r: OwnedFd,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The executable `name` runs, found on PATH as a shell would.
pub fn resolve(name: &str) -> Option<PathBuf> {
    let is_exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file())
            && CString::new(p.as_os_str().as_bytes())
                .is_ok_and(|c| unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0)
    };
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.exists().then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| is_exec(p))
}

/// Forks a child that waits at the gate and then execs `argv`.
pub fn fork_gated(argv: &[String]) -> Result<Gate, NativeError> {
    let first = argv.first().ok_or(NativeError::EmptyCommand)?;
    let exe = resolve(first).ok_or_else(|| NativeError::CommandNotFound(first.clone()))?;
    let exec_err = |source| NativeError::Exec { command: first.clone(), source };
    let c_exe = CString::new(exe.as_os_str().as_bytes()).map_err(|_| exec_err(io::ErrorKind::InvalidInput.into()))?;
    let c_args: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| exec_err(io::ErrorKind::InvalidInput.into()))?;
    let mut c_argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    c_argv.push(std::ptr::null());

    let (gate_r, gate_w) = pipe().map_err(exec_err)?;
    let (err_r, err_w) = pipe().map_err(exec_err)?;
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(exec_err(io::Error::last_os_error()));
    }
    if pid == 0 {
        // Child: only async-signal-safe calls from here to exec.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            libc::close(gate_w.as_raw_fd());
            let mut byte = 0u8;
            let n = loop {
                let n = libc::read(gate_r.as_raw_fd(), &mut byte as *mut u8 as *mut libc::c_void, 1);
                if n >= 0 || *libc::__errno_location() != libc::EINTR {
                    break n;
                }
            };
            if n != 1 {
                // The profiler went away without releasing the gate.
                libc::_exit(125);
            }
            libc::execv(c_exe.as_ptr(), c_argv.as_ptr());
            let errno = (*libc::__errno_location()).to_ne_bytes();
            libc::write(err_w.as_raw_fd(), errno.as_ptr() as *const libc::c_void, errno.len());
            libc::_exit(127);
        }
    }
    drop(gate_r);
    drop(err_w);
    Ok(Gate { pid: pid as u32, command: first.clone(), gate_w: Some(gate_w), err_r })
}

impl Gate {
    /// Lets the child exec, and reports whether the exec succeeded.
    pub fn release(mut self) -> Result<(), NativeError> {
        let gate_w = self.gate_w.take().expect("released once");
        let one = 1u8;
        unsafe { libc::write(gate_w.as_raw_fd(), &one as *const u8 as *const libc::c_void, 1) };
        drop(gate_w);
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            let n =
                unsafe { libc::read(self.err_r.as_raw_fd(), buf[got..].as_mut_ptr() as *mut libc::c_void, 4 - got) };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                break;
            }
            got += n as usize;
        }
        if got == 0 {
            // The error pipe closed on exec: the program runs.
            return Ok(());
        }
        let errno = i32::from_ne_bytes(buf);
        unsafe { libc::waitpid(self.pid as i32, std::ptr::null_mut(), 0) };
        Err(NativeError::Exec { command: self.command.clone(), source: io::Error::from_raw_os_error(errno) })
    }

    /// Kills and reaps the waiting child (sampling could not be set up).
    pub fn abort(mut self) {
        self.gate_w.take();
        unsafe {
            libc::kill(self.pid as i32, libc::SIGKILL);
            libc::waitpid(self.pid as i32, std::ptr::null_mut(), 0);
        }
    }
}

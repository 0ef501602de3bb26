//! Waiting for an instant of CLOCK_MONOTONIC precisely enough for an open-loop schedule.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::engine::mono_ns;

/// Waits for a CLOCK_MONOTONIC instant with a timerfd: wakes within microseconds, where tokio's
/// timer rounds up to the next millisecond.
pub(crate) struct PreciseTimer {
    fd: AsyncFd<OwnedFd>,
}

impl PreciseTimer {
    pub(crate) fn new() -> io::Result<PreciseTimer> {
        // SAFETY: timerfd_create returns a new descriptor or -1.
        let raw = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: the descriptor is owned by the AsyncFd for as long as it is registered.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(io::Error::from)?;
        Ok(PreciseTimer { fd })
    }

    pub(crate) async fn wait_until(&self, at_ns: u64) {
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
            },
        };
        let fd = self.fd.get_ref().as_raw_fd();
        // SAFETY: a valid timerfd and itimerspec.
        let rc = unsafe { libc::timerfd_settime(fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
        if rc != 0 {
            return sleep_until_ns(at_ns).await;
        }
        loop {
            let Ok(mut guard) = self.fd.readable().await else {
                return sleep_until_ns(at_ns).await;
            };
            let mut expirations = 0u64;
            let read = guard.try_io(|inner| {
                // SAFETY: reading 8 bytes into a u64 from our timerfd.
                let n = unsafe {
                    libc::read(inner.get_ref().as_raw_fd(), &mut expirations as *mut u64 as *mut libc::c_void, 8)
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match read {
                Ok(_) => {
                    // The one-shot timer is spent: the next arming brings a new edge, so the
                    // next wait need not try a read that would only say "not yet".
                    guard.clear_ready();
                    return;
                }
                Err(_would_block) => continue,
            }
        }
    }
}

pub(crate) async fn sleep_until_ns(at_ns: u64) {
    let now = mono_ns();
    if at_ns > now {
        tokio::time::sleep(Duration::from_nanos(at_ns - now)).await;
    }
}

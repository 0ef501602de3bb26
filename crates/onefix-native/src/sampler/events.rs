//! Opening the perf events: a cpu-clock sampler per thread and CPU (or per CPU with inherit),
//! the context-switch events for off-CPU time, and what their errors mean.

use super::*;

impl NativeSampler {
    pub(super) fn spec(&self, kind: EventKind, exclude_kernel: bool, enable_on_exec: bool) -> AttrSpec {
        AttrSpec {
            kind,
            period_ns: self.period_ns,
            stack_bytes: self.stack_bytes,
            exclude_kernel,
            enable_on_exec,
            switch_records: kind == EventKind::CpuClock && self.switches == Some(true),
        }
    }

    /// Opens the events of `tids` on every CPU, redirecting them into one ring per CPU.
    pub(super) fn open_for(&mut self, tids: &[u32], enable_on_exec: bool) -> Result<(), NativeError> {
        for cpu in perf::online_cpus() {
            for &tid in tids {
                // The context-switch event first: whether the kernel allows it decides whether
                // the cpu-clock event also asks for switch records.
                let mut switches = None;
                if self.switches == Some(true) {
                    // Off-CPU needs kernel-mode samples: refused unprivileged at paranoid >= 2.
                    let attr = perf::attr(&self.spec(EventKind::Switches, false, enable_on_exec));
                    match perf::open(&attr, tid as i32, cpu) {
                        Ok(fd) => switches = Some(fd),
                        Err(e) if is_permission(&e) => {
                            self.switches = None;
                            self.setup_warnings.push(format!(
                                "off-CPU (blocked) time is not recorded: the kernel shows context switches with their stacks only to root at kernel.perf_event_paranoid = {}; run onefix as root or allow it with `sysctl kernel.perf_event_paranoid=1`",
                                paranoid_level()
                            ));
                        }
                        Err(e) => return Err(map_open_error(e, tid)),
                    }
                }
                let fd = self.open_cpu_clock(tid, cpu, enable_on_exec)?;
                self.add_event(fd, cpu, EventKind::CpuClock)?;
                if let Some(fd) = switches {
                    self.add_event(fd, cpu, EventKind::Switches)?;
                    self.open_wakes(tid, cpu, enable_on_exec)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn open_cpu_clock(&mut self, tid: u32, cpu: i32, enable_on_exec: bool) -> Result<OwnedFd, NativeError> {
        let tries: &[bool] = match self.exclude_kernel {
            Some(x) => {
                if x {
                    &[true]
                } else {
                    &[false]
                }
            }
            // Sampling in the kernel too sees the time spent in system calls; unprivileged at
            // paranoid 2 only user mode is allowed.
            None => &[false, true],
        };
        let mut last = None;
        for &exclude in tries {
            let attr = perf::attr(&self.spec(EventKind::CpuClock, exclude, enable_on_exec));
            match perf::open(&attr, tid as i32, cpu) {
                Ok(fd) => {
                    if self.exclude_kernel.is_none() && exclude {
                        self.setup_warnings.push(format!(
                            "CPU time inside system calls is not sampled (kernel.perf_event_paranoid = {}): run onefix as root or allow it with `sysctl kernel.perf_event_paranoid=1`",
                            paranoid_level()
                        ));
                    }
                    self.exclude_kernel = Some(exclude);
                    return Ok(fd);
                }
                Err(e) if is_permission(&e) => last = Some(e),
                Err(e) => return Err(map_open_error(e, tid)),
            }
        }
        Err(map_open_error(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EACCES)), tid))
    }

    /// The wake-ups the thread makes, when the kernel gives the `sched_waking` tracepoint
    /// (root, tracefs): without them a blocked interval has no known waker, and nothing else
    /// is lost, so a refusal is no error.
    fn open_wakes(&mut self, tid: u32, cpu: i32, enable_on_exec: bool) -> Result<(), NativeError> {
        let Some(id) = *self.wake_tracepoint.get_or_insert_with(perf::sched_waking_id) else { return Ok(()) };
        let attr = perf::attr(&self.spec(EventKind::Wakes(id), false, enable_on_exec));
        match perf::open(&attr, tid as i32, cpu) {
            Ok(fd) => self.add_event(fd, cpu, EventKind::Wakes(id)),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(NativeError::NoSuchProcess(tid)),
            Err(_) => {
                self.wake_tracepoint = Some(None);
                Ok(())
            }
        }
    }

    pub(super) fn add_event(&mut self, fd: OwnedFd, cpu: i32, kind: EventKind) -> Result<(), NativeError> {
        let id = perf::event_id(&fd).map_err(NativeError::Os)?;
        match kind {
            EventKind::CpuClock => self.cpu_ids.insert(id),
            EventKind::Switches => self.switch_ids.insert(id),
            EventKind::Wakes(_) => self.wake_ids.insert(id),
        };
        match self.ring_owner.get(&cpu) {
            Some(&owner) => perf::set_output(&fd, &self.events[owner]).map_err(NativeError::Os)?,
            None => {
                let mut pages = self.ring_pages;
                let ring = loop {
                    match Ring::map(&fd, pages) {
                        Ok(r) => break r,
                        // Unprivileged users may lock only so much (perf_event_mlock_kb).
                        Err(e) if pages > 8 && matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::ENOMEM)) => {
                            pages /= 2
                        }
                        Err(e) => return Err(NativeError::Os(e)),
                    }
                };
                self.rings.push(ring);
                self.ring_owner.insert(cpu, self.events.len());
            }
        }
        self.events.push(fd);
        Ok(())
    }
}

pub(super) fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

pub(super) fn threads_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

pub(super) fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

pub(super) fn map_open_error(e: io::Error, pid: u32) -> NativeError {
    match e.raw_os_error() {
        Some(libc::ESRCH) => NativeError::NoSuchProcess(pid),
        Some(libc::EMFILE) | Some(libc::ENFILE) => NativeError::TooManyFiles,
        Some(libc::ENOENT) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            NativeError::Unsupported { detail: e.to_string() }
        }
        Some(libc::EACCES) | Some(libc::EPERM) => {
            let euid = unsafe { libc::geteuid() };
            let owner = std::fs::metadata(format!("/proc/{pid}")).map(|m| std::os::unix::fs::MetadataExt::uid(&m)).ok();
            if euid == 0 {
                // Root refused: a container without CAP_PERFMON / with a seccomp filter.
                NativeError::Unsupported { detail: e.to_string() }
            } else if owner.is_some_and(|o| o != euid) {
                NativeError::PermissionDenied { pid }
            } else {
                NativeError::Paranoid { level: paranoid_level() }
            }
        }
        _ => NativeError::Os(e),
    }
}

//! The kernel side: perf_event_open attributes, one ring buffer per CPU, and draining it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU64, Ordering};

use perf_event_open_sys as sys;
use sys::bindings as b;

/// Registers copied with each sample (x86_64 perf_regs numbering): DI (a syscall's first
/// argument at kernel entry: the descriptor a blocked read waits on), BP, SP, IP.
pub const REGS_MASK: u64 = (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8);

pub const SAMPLE_TYPE: u64 = (b::PERF_SAMPLE_IDENTIFIER
    | b::PERF_SAMPLE_IP
    | b::PERF_SAMPLE_TID
    | b::PERF_SAMPLE_TIME
    | b::PERF_SAMPLE_REGS_USER
    | b::PERF_SAMPLE_STACK_USER) as u64;

/// Which of the two events an attribute describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Software cpu-clock at a fixed period: on-CPU time. Also carries the side-band records
    /// (MMAP2, COMM, FORK/EXIT, SWITCH).
    CpuClock,
    /// Every context switch, with the stack of the thread leaving the CPU: off-CPU time.
    Switches,
    /// The `sched:sched_waking` tracepoint (its id): a thread of the target waking another,
    /// with the woken thread in the raw data. Tells which thread ended each blocked interval.
    Wakes(u64),
}

/// What a wake-up sample carries: no stack, only who woke whom and when.
pub const WAKE_SAMPLE_TYPE: u64 =
    (b::PERF_SAMPLE_IDENTIFIER | b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME | b::PERF_SAMPLE_RAW) as u64;

#[derive(Clone, Debug)]
pub struct AttrSpec {
    pub kind: EventKind,
    pub period_ns: u64,
    pub stack_bytes: u32,
    pub exclude_kernel: bool,
    pub enable_on_exec: bool,
    /// Also emit PERF_RECORD_SWITCH (only on the cpu-clock event, and only with off-CPU).
    pub switch_records: bool,
}

pub fn attr(spec: &AttrSpec) -> b::perf_event_attr {
    let mut a = b::perf_event_attr {
        size: std::mem::size_of::<b::perf_event_attr>() as u32,
        type_: b::PERF_TYPE_SOFTWARE,
        ..Default::default()
    };
    match spec.kind {
        EventKind::CpuClock => {
            a.config = b::PERF_COUNT_SW_CPU_CLOCK as u64;
            a.__bindgen_anon_1.sample_period = spec.period_ns.max(10_000);
            // The kernel emits mapping records only when `mmap` is set (it counts mmap events by
            // that bit); with `mmap2` too they come in the MMAP2 format.
            a.set_mmap(1);
            a.set_mmap2(1);
            a.set_comm(1);
            a.set_comm_exec(1);
            a.set_task(1);
            a.set_context_switch(spec.switch_records as u64);
        }
        EventKind::Switches => {
            a.config = b::PERF_COUNT_SW_CONTEXT_SWITCHES as u64;
            a.__bindgen_anon_1.sample_period = 1;
        }
        EventKind::Wakes(id) => {
            a.type_ = b::PERF_TYPE_TRACEPOINT;
            a.config = id;
            a.__bindgen_anon_1.sample_period = 1;
        }
    }
    if let EventKind::Wakes(_) = spec.kind {
        a.sample_type = WAKE_SAMPLE_TYPE;
    } else {
        a.sample_type = SAMPLE_TYPE;
        a.sample_regs_user = REGS_MASK;
        a.sample_stack_user = spec.stack_bytes;
    }
    a.set_disabled(1);
    a.set_inherit(1);
    a.set_enable_on_exec(spec.enable_on_exec as u64);
    a.set_exclude_kernel(spec.exclude_kernel as u64);
    a.set_exclude_hv(1);
    a.set_sample_id_all(1);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    // Nobody waits on the fds: the recording loop polls the rings at its own pace.
    a.set_watermark(1);
    a.__bindgen_anon_2.wakeup_watermark = u32::MAX / 2;
    a
}

/// The id of the tracepoint `sched:sched_waking`, read from tracefs. Where tracefs is not
/// mounted (a container, a machine without systemd), it is mounted for a moment in a private
/// mount namespace of a short-lived child, so the machine's own mounts are left as they are.
pub fn sched_waking_id() -> Option<u64> {
    for dir in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if let Ok(text) = std::fs::read_to_string(format!("{dir}/events/sched/sched_waking/id")) {
            return text.trim().parse().ok();
        }
    }
    id_from_private_tracefs()
}

fn id_from_private_tracefs() -> Option<u64> {
    let mut fds = [0i32; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    let (read_end, write_end) = (fds[0], fds[1]);
    // The child makes system calls only (no allocation): safe after a fork of a process with
    // threads.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        unsafe {
            let mut buf = [0u8; 32];
            let mut n: isize = 0;
            if libc::unshare(libc::CLONE_NEWNS) == 0
                && libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0
                && libc::mount(
                    c"nodev".as_ptr(),
                    c"/sys/kernel/tracing".as_ptr(),
                    c"tracefs".as_ptr(),
                    0,
                    std::ptr::null(),
                ) == 0
            {
                let fd = libc::open(c"/sys/kernel/tracing/events/sched/sched_waking/id".as_ptr(), libc::O_RDONLY);
                if fd >= 0 {
                    n = libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len());
                }
            }
            if n > 0 {
                libc::write(write_end, buf.as_ptr() as *const libc::c_void, n as usize);
            }
            libc::_exit(0);
        }
    }
    unsafe { libc::close(write_end) };
    let mut text = Vec::new();
    if pid > 0 {
        let mut buf = [0u8; 32];
        loop {
            let n = unsafe { libc::read(read_end, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                break;
            }
            text.extend_from_slice(&buf[..n as usize]);
        }
        let mut status = 0;
        // Reaped even when a signal (Ctrl-C) interrupts the wait: no zombie is left.
        while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
    }
    unsafe { libc::close(read_end) };
    std::str::from_utf8(&text).ok()?.trim().parse().ok()
}

pub fn open(attr: &b::perf_event_attr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    let mut attr = *attr;
    let fd = unsafe { sys::perf_event_open(&mut attr, pid, cpu, -1, b::PERF_FLAG_FD_CLOEXEC as _) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn event_id(fd: &OwnedFd) -> io::Result<u64> {
    let mut id = 0u64;
    if unsafe { sys::ioctls::ID(fd.as_raw_fd(), &mut id) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(id)
}

pub fn set_output(fd: &OwnedFd, target: &OwnedFd) -> io::Result<()> {
    if unsafe { sys::ioctls::SET_OUTPUT(fd.as_raw_fd(), target.as_raw_fd()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn enable(fd: &OwnedFd) -> io::Result<()> {
    if unsafe { sys::ioctls::ENABLE(fd.as_raw_fd(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn disable(fd: &OwnedFd) {
    unsafe { sys::ioctls::DISABLE(fd.as_raw_fd(), 0) };
}

pub fn online_cpus() -> Vec<i32> {
    // "0-3,5" format; fall back to every configured CPU.
    let parse = |s: &str| -> Option<Vec<i32>> {
        let mut cpus = Vec::new();
        for part in s.trim().split(',').filter(|p| !p.is_empty()) {
            match part.split_once('-') {
                Some((a, b)) => cpus.extend(a.parse::<i32>().ok()?..=b.parse::<i32>().ok()?),
                None => cpus.push(part.parse().ok()?),
            }
        }
        Some(cpus)
    };
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse(&s))
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| {
            let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1);
            (0..n as i32).collect()
        })
}

/// A ring buffer mapped from one event fd (others may be redirected into it).
pub struct Ring {
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    /// Scratch for a record that wraps around the end of the buffer.
    wrap: Vec<u8>,
}

// The mapping is owned by the Ring alone.
unsafe impl Send for Ring {}

impl Ring {
    /// Maps `data_pages` (a power of two) data pages plus the header page.
    pub fn map(fd: &OwnedFd, data_pages: usize) -> io::Result<Ring> {
        let page = page_size();
        let map_len = (data_pages + 1) * page;
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let header = base as *const b::perf_event_mmap_page;
        let (mut data_offset, mut data_size) =
            unsafe { ((*header).data_offset as usize, (*header).data_size as usize) };
        if data_size == 0 {
            data_offset = page;
            data_size = data_pages * page;
        }
        Ok(Ring { base: base as *mut u8, map_len, data_offset, data_size, wrap: Vec::new() })
    }

    fn head_tail<'a>(base: *mut u8) -> (&'a AtomicU64, &'a AtomicU64) {
        let header = base as *mut b::perf_event_mmap_page;
        unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*header).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*header).data_tail)),
            )
        }
    }

    /// Calls `each` with every complete record written since the last drain (header
    /// included), then frees their space for the kernel.
    pub fn drain(&mut self, mut each: impl FnMut(&[u8])) -> usize {
        let (head_a, tail_a) = Ring::head_tail(self.base);
        let head = head_a.load(Ordering::Acquire);
        fence(Ordering::Acquire);
        let mut tail = tail_a.load(Ordering::Relaxed);
        let data: &[u8] = unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset), self.data_size) };
        let wrap = &mut self.wrap;
        let mut n = 0;
        while tail + 8 <= head {
            let at = (tail % self.data_size as u64) as usize;
            // The 8-byte header never wraps (records are 8-byte aligned, sizes are powers of two).
            let size = u16::from_ne_bytes([data[at + 6], data[at + 7]]) as usize;
            if size < 8 || tail + size as u64 > head {
                break;
            }
            if at + size <= self.data_size {
                each(&data[at..at + size]);
            } else {
                let first = self.data_size - at;
                wrap.clear();
                wrap.extend_from_slice(&data[at..]);
                wrap.extend_from_slice(&data[..size - first]);
                each(wrap);
            }
            tail += size as u64;
            n += 1;
        }
        fence(Ordering::Release);
        tail_a.store(tail, Ordering::Release);
        n
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
    }
}

pub fn page_size() -> usize {
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock every record is stamped with.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

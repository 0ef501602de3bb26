//! Goroutines that wait. A Go goroutine blocked on the network, a channel or a lock does not
//! hold an OS thread (the runtime parks it and the netpoller wakes it), so the threads' off-CPU
//! stacks show only the scheduler. This module reads the goroutines themselves out of the
//! target's memory: `runtime.allgs` (found in the executable's symbol table), and for each
//! goroutine its status, id and the registers saved when it was parked (`g.sched`: pc, sp,
//! bp), plus a copy of its stack from that sp, so that the sampler unwinds it like a thread.
//!
//! The layout of `runtime.g`, `runtime.gobuf`, `runtime.stack` and of the `allgs` slice is read
//! from the binary's DWARF (which `go build` keeps), never assumed: a binary built with
//! `-ldflags=-w` (or stripped) is refused with [`GoLayoutError::NoDwarf`]. Only the status
//! values are constants: they have not changed since Go 1.0.

use std::collections::HashMap;
use std::path::Path;

use addr2line::gimli;
use object::{Object, ObjectSection, ObjectSymbol};

/// `_Gwaiting`: parked by the runtime (network, channel, lock, sleep, select, ...).
pub const G_WAITING: u32 = 4;
/// `_Gscan` bit, set while the garbage collector scans the goroutine's stack.
const G_SCAN: u32 = 0x1000;
/// Goroutines read at most (a runaway program is not read whole at every tick).
const MAX_GOROUTINES: usize = 100_000;
/// Bytes of a goroutine's stack copied for unwinding, from its saved sp upwards.
pub const STACK_COPY: u64 = 16 * 1024;
/// process_vm_readv takes at most this many pieces per call (IOV_MAX).
const IOV_MAX: usize = 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GoLayoutError {
    #[error("goroutines that wait are not shown: {0} has no DWARF type information for the Go runtime (built with -ldflags=-w, or stripped); build it with plain `go build` to see them")]
    NoDwarf(String),
    #[error("goroutines that wait are not shown: the DWARF of {path} lacks {what}, which this version of onefix needs to read goroutines")]
    Missing { path: String, what: String },
}

/// Where the fields onefix reads sit, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Size of `runtime.g`: bytes read per goroutine.
    pub g_size: u64,
    pub g_stack_hi: u64,
    pub g_sched_sp: u64,
    pub g_sched_pc: u64,
    pub g_sched_bp: u64,
    pub g_status: u64,
    pub g_goid: u64,
    pub g_waitreason: Option<u64>,
    pub slice_array: u64,
    pub slice_len: u64,
}

/// The Go runtime of one executable: where `allgs` is (as linked) and the layout of what it
/// points to.
#[derive(Clone, Debug)]
pub struct GoRuntime {
    /// Link-time address of `runtime.allgs`; add the executable's load bias.
    pub allgs: u64,
    pub layout: Layout,
    /// `runtime.waitReasonStrings`, when the binary has it: index = `g.waitreason`.
    pub wait_reasons: Vec<String>,
    /// Per wait reason: the runtime's own goroutines waiting for work (see
    /// [`GoRuntime::is_runtime_wait`]).
    runtime_waits: Vec<bool>,
}

/// One goroutine as read at a tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Goroutine {
    /// Address of its `runtime.g` (stable for the goroutine's life; reused after it ends).
    pub addr: u64,
    pub goid: u64,
    /// Status without the scan bit.
    pub status: u32,
    pub waitreason: u8,
    /// Saved registers: bp, sp, pc (the order the unwinder takes).
    pub regs: [u64; 3],
    /// Top of its stack (`g.stack.hi`).
    pub stack_hi: u64,
}

impl Layout {
    /// Bytes from the start of a `runtime.g` that cover every field read.
    pub fn read_len(&self) -> u64 {
        [
            self.g_stack_hi + 8,
            self.g_sched_sp + 8,
            self.g_sched_pc + 8,
            self.g_sched_bp + 8,
            self.g_status + 4,
            self.g_goid + 8,
            self.g_waitreason.map_or(0, |w| w + 1),
        ]
        .into_iter()
        .max()
        .unwrap_or(self.g_size)
    }
}

impl GoRuntime {
    /// Reads the runtime's layout from a Go executable. `Ok(None)` when it is not a Go program
    /// (no `runtime.allgs` symbol).
    pub fn from_file(path: &Path) -> Result<Option<GoRuntime>, GoLayoutError> {
        let Ok(data) = std::fs::read(path) else { return Ok(None) };
        GoRuntime::from_image(&data, &path.display().to_string())
    }

    pub fn from_image(data: &[u8], name: &str) -> Result<Option<GoRuntime>, GoLayoutError> {
        let Ok(obj) = object::File::parse(data) else { return Ok(None) };
        let symbol = |want: &str| obj.symbols().find(|s| s.name() == Ok(want)).map(|s| (s.address(), s.size()));
        let Some((allgs, _)) = symbol("runtime.allgs") else { return Ok(None) };
        let layout = read_layout(&obj, name)?;
        let wait_reasons: Vec<String> = symbol("runtime.waitReasonStrings")
            .map(|(addr, size)| read_string_array(&obj, addr, size))
            .unwrap_or_default();
        let runtime_waits = wait_reasons
            .iter()
            .map(|r| {
                let r = r.to_ascii_lowercase();
                ["gc ", "garbage collection", "finalizer wait", "timer goroutine", "trace reader", "force gc"]
                    .iter()
                    .any(|m| r.contains(m))
            })
            .collect();
        Ok(Some(GoRuntime { allgs, layout, wait_reasons, runtime_waits }))
    }

    /// Every goroutine of process `pid` whose executable is loaded with `bias`; empty when
    /// its memory cannot be read (the process ended).
    pub fn goroutines(&self, pid: u32, bias: u64) -> Vec<Goroutine> {
        let l = &self.layout;
        let mut header = [0u8; 24];
        let slice_at = self.allgs.wrapping_add(bias);
        if read_memory(pid, &mut [(slice_at, &mut header[..])]) < header.len() {
            return Vec::new();
        }
        let word =
            |b: &[u8], at: u64| b.get(at as usize..at as usize + 8).map(|s| u64::from_ne_bytes(s.try_into().unwrap()));
        let (Some(array), Some(len)) = (word(&header, l.slice_array), word(&header, l.slice_len)) else {
            return Vec::new();
        };
        let len = (len as usize).min(MAX_GOROUTINES);
        if array == 0 || len == 0 {
            return Vec::new();
        }
        let mut ptrs = vec![0u8; len * 8];
        let got = read_memory(pid, &mut [(array, &mut ptrs[..])]);
        let addrs: Vec<u64> = ptrs[..got / 8 * 8]
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .filter(|&a| a != 0)
            .collect();
        // Only the part of each g that holds the fields read.
        let size = (l.read_len() as usize).min(l.g_size as usize);
        let gs = read_records(pid, &addrs, size);
        let u32_at = |b: &[u8], at: u64| {
            b.get(at as usize..at as usize + 4).map(|s| u32::from_ne_bytes(s.try_into().unwrap())).unwrap_or(0)
        };
        addrs
            .iter()
            .zip(gs.chunks_exact(size))
            .filter_map(|(&addr, g)| {
                let goid = word(g, l.g_goid)?;
                // A piece that could not be read stays zero: no goroutine has id 0 and sp 0.
                let sp = word(g, l.g_sched_sp)?;
                Some(Goroutine {
                    addr,
                    goid,
                    status: u32_at(g, l.g_status) & !G_SCAN,
                    waitreason: l.g_waitreason.and_then(|at| g.get(at as usize).copied()).unwrap_or(0),
                    regs: [word(g, l.g_sched_bp)?, sp, word(g, l.g_sched_pc)?],
                    stack_hi: word(g, l.g_stack_hi)?,
                })
                .filter(|g| g.goid != 0 || g.regs[1] != 0)
            })
            .collect()
    }

    /// The runtime's name for a wait reason ("IO wait", "chan receive", "semacquire", ...).
    pub fn wait_reason(&self, reason: u8) -> Option<&str> {
        self.wait_reasons.get(reason as usize).map(String::as_str).filter(|s| !s.is_empty())
    }

    /// Whether a goroutine parked for this reason is one of the runtime's own, waiting for
    /// work (a garbage collector worker, the sweeper, the finalizer, a timer goroutine): never
    /// the program's cost, so not even unwound.
    pub fn is_runtime_wait(&self, reason: u8) -> bool {
        self.runtime_waits.get(reason as usize).copied().unwrap_or(false)
    }
}

impl Goroutine {
    /// Parked, with registers saved: what the sampler unwinds.
    pub fn is_waiting(&self) -> bool {
        self.status == G_WAITING && self.regs[1] != 0 && self.regs[2] != 0 && self.regs[1] < self.stack_hi
    }

    /// Copies the goroutine's stack from its saved sp (at most [`STACK_COPY`] bytes); `None`
    /// when it cannot be read.
    pub fn read_stack(&self, pid: u32) -> Option<Vec<u8>> {
        let sp = self.regs[1];
        let len = self.stack_hi.checked_sub(sp)?.min(STACK_COPY) as usize;
        let mut buf = vec![0u8; len];
        (read_memory(pid, &mut [(sp, &mut buf[..])]) == len).then_some(buf)
    }
}

/// Reads `size` bytes at each of `addrs` and returns them one after another (zeros where the
/// memory could not be read). The `g`s sit close together in the heap: nearby ones are read
/// as one span, which costs the kernel far less than a piece per `g`.
fn read_records(pid: u32, addrs: &[u64], size: usize) -> Vec<u8> {
    const GAP: u64 = 4096;
    const MAX_SPAN: u64 = 1 << 20;
    let mut sorted: Vec<u64> = addrs.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for &a in &sorted {
        let end = a.saturating_add(size as u64);
        match spans.last_mut() {
            Some((start, e)) if a <= e.saturating_add(GAP) && end - *start <= MAX_SPAN => *e = (*e).max(end),
            _ => spans.push((a, end)),
        }
    }
    let mut bufs: Vec<Vec<u8>> = spans.iter().map(|(a, e)| vec![0u8; (e - a) as usize]).collect();
    let mut at = 0;
    while at < spans.len() {
        let upto = (at + IOV_MAX).min(spans.len());
        let mut pieces: Vec<(u64, &mut [u8])> =
            spans[at..upto].iter().map(|s| s.0).zip(bufs[at..upto].iter_mut().map(|b| &mut b[..])).collect();
        let want: usize = pieces.iter().map(|p| p.1.len()).sum();
        let got = read_memory(pid, &mut pieces);
        // The kernel stops at the first span it cannot read: go on after it.
        if got < want {
            let mut done = 0;
            let mut i = at;
            while i < upto && done + bufs[i].len() <= got {
                done += bufs[i].len();
                i += 1;
            }
            at = i + 1;
        } else {
            at = upto;
        }
    }
    let mut out = vec![0u8; addrs.len() * size];
    for (i, &a) in addrs.iter().enumerate() {
        let s = spans.partition_point(|sp| sp.0 <= a) - 1;
        let off = (a - spans[s].0) as usize;
        out[i * size..(i + 1) * size].copy_from_slice(&bufs[s][off..off + size]);
    }
    out
}

/// Reads each `(address, buffer)` piece of process `pid`'s memory; returns the bytes read (the
/// kernel stops at the first piece it cannot read).
pub fn read_memory(pid: u32, pieces: &mut [(u64, &mut [u8])]) -> usize {
    let local: Vec<libc::iovec> =
        pieces.iter_mut().map(|(_, b)| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
    let remote: Vec<libc::iovec> = pieces
        .iter()
        .map(|(a, b)| libc::iovec { iov_base: *a as usize as *mut libc::c_void, iov_len: b.len() })
        .collect();
    let n = unsafe {
        libc::process_vm_readv(
            pid as libc::pid_t,
            local.as_ptr(),
            local.len() as libc::c_ulong,
            remote.as_ptr(),
            remote.len() as libc::c_ulong,
            0,
        )
    };
    n.max(0) as usize
}

type Reader<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

/// Byte offsets of the members of the named structure types, and their sizes.
fn struct_members(dwarf: &gimli::Dwarf<Reader>, wanted: &[&str]) -> HashMap<String, (u64, HashMap<String, u64>)> {
    let mut found: HashMap<String, (u64, HashMap<String, u64>)> = HashMap::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else { continue };
        let mut entries = unit.entries();
        // The struct being read: its depth and name.
        let mut current: Option<(isize, String)> = None;
        while let Ok(Some(entry)) = entries.next_dfs() {
            let depth = entry.depth();
            if current.as_ref().is_some_and(|(d, _)| depth <= *d) {
                current = None;
            }
            let name = || -> Option<String> {
                let attr = entry.attr_value(gimli::DW_AT_name)?;
                Some(dwarf.attr_string(&unit, attr).ok()?.to_string_lossy().into_owned())
            };
            match entry.tag() {
                gimli::DW_TAG_structure_type => {
                    if let Some(n) = name().filter(|n| wanted.contains(&n.as_str()) && !found.contains_key(n)) {
                        let size = entry.attr_value(gimli::DW_AT_byte_size).and_then(|v| v.udata_value()).unwrap_or(0);
                        found.insert(n.clone(), (size, HashMap::new()));
                        current = Some((depth, n));
                    }
                }
                gimli::DW_TAG_member => {
                    if let (Some((_, owner)), Some(n)) = (&current, name()) {
                        let at = entry.attr_value(gimli::DW_AT_data_member_location).and_then(|v| v.udata_value());
                        if let (Some(at), Some(s)) = (at, found.get_mut(owner)) {
                            s.1.insert(n, at);
                        }
                    }
                }
                _ => {}
            }
        }
        if wanted.iter().all(|w| found.contains_key(*w)) {
            break;
        }
    }
    found
}

fn read_layout(obj: &object::File, name: &str) -> Result<Layout, GoLayoutError> {
    if obj.section_by_name(".debug_info").is_none() {
        return Err(GoLayoutError::NoDwarf(name.to_owned()));
    }
    let endian = if obj.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
    let mut sections: HashMap<gimli::SectionId, std::borrow::Cow<[u8]>> = HashMap::new();
    let load = |id: gimli::SectionId| -> Result<std::borrow::Cow<[u8]>, gimli::Error> {
        Ok(obj.section_by_name(id.name()).and_then(|s| s.uncompressed_data().ok()).unwrap_or_default())
    };
    for id in [
        gimli::SectionId::DebugInfo,
        gimli::SectionId::DebugAbbrev,
        gimli::SectionId::DebugStr,
        gimli::SectionId::DebugLineStr,
        gimli::SectionId::DebugStrOffsets,
        gimli::SectionId::DebugLine,
        gimli::SectionId::DebugRanges,
        gimli::SectionId::DebugRngLists,
        gimli::SectionId::DebugAddr,
    ] {
        sections.insert(id, load(id).unwrap_or_default());
    }
    let empty: &[u8] = &[];
    let dwarf = gimli::Dwarf::load(|id| -> Result<Reader, gimli::Error> {
        Ok(gimli::EndianSlice::new(sections.get(&id).map(|c| &c[..]).unwrap_or(empty), endian))
    })
    .map_err(|_| GoLayoutError::NoDwarf(name.to_owned()))?;
    let structs = struct_members(&dwarf, &["runtime.g", "runtime.gobuf", "runtime.stack", "[]*runtime.g"]);
    let missing = |what: &str| GoLayoutError::Missing { path: name.to_owned(), what: what.to_owned() };
    let member = |ty: &str, field: &str| -> Result<u64, GoLayoutError> {
        structs.get(ty).and_then(|(_, m)| m.get(field)).copied().ok_or_else(|| missing(&format!("{ty}.{field}")))
    };
    let g_size = structs.get("runtime.g").map(|s| s.0).filter(|&s| s > 0).ok_or_else(|| {
        if structs.is_empty() {
            GoLayoutError::NoDwarf(name.to_owned())
        } else {
            missing("the size of runtime.g")
        }
    })?;
    let sched = member("runtime.g", "sched")?;
    let stack = member("runtime.g", "stack")?;
    Ok(Layout {
        g_size,
        g_stack_hi: stack + member("runtime.stack", "hi")?,
        g_sched_sp: sched + member("runtime.gobuf", "sp")?,
        g_sched_pc: sched + member("runtime.gobuf", "pc")?,
        g_sched_bp: sched + member("runtime.gobuf", "bp")?,
        g_status: member("runtime.g", "atomicstatus")?,
        g_goid: member("runtime.g", "goid")?,
        g_waitreason: member("runtime.g", "waitreason").ok(),
        slice_array: member("[]*runtime.g", "array")?,
        slice_len: member("[]*runtime.g", "len")?,
    })
}

/// A `[N]string` array in the binary's initialized data: pointer and length pairs.
fn read_string_array(obj: &object::File, addr: u64, size: u64) -> Vec<String> {
    let at = |a: u64, n: u64| -> Option<&[u8]> {
        obj.sections().find_map(|s| {
            let (start, len) = (s.address(), s.size());
            if a >= start && a.checked_add(n)? <= start + len {
                let data = s.data().ok()?;
                data.get((a - start) as usize..(a - start + n) as usize)
            } else {
                None
            }
        })
    };
    let Some(table) = at(addr, size) else { return Vec::new() };
    table
        .chunks_exact(16)
        .take(256)
        .map(|c| {
            let ptr = u64::from_ne_bytes(c[..8].try_into().unwrap());
            let len = u64::from_ne_bytes(c[8..].try_into().unwrap());
            at(ptr, len.min(256)).map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_that_is_not_go_has_no_go_runtime() {
        assert_eq!(GoRuntime::from_file(Path::new("/bin/sh")).map(|r| r.is_some()), Ok(false));
        assert_eq!(GoRuntime::from_file(Path::new("/no/such/file")).map(|r| r.is_some()), Ok(false));
    }
}

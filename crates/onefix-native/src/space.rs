//! The address space of one traced process: which module is mapped where, and a framehop
//! unwinder over those modules.

use std::sync::Arc;
use std::time::Instant;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::Unwinder;

use crate::module::{Bytes, ModuleCache, ModuleFile};

#[derive(Clone)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub bias: u64,
    pub module: Arc<ModuleFile>,
}

#[derive(Clone)]
pub struct AddressSpace {
    mappings: Vec<Mapping>,
    unwinder: UnwinderX86_64<Bytes>,
    /// When /proc/PID/maps was last read to find a mapping no record announced.
    pub maps_read: Option<Instant>,
}

/// Frames deeper than this are cut (runaway recursion, corrupt stacks).
pub const MAX_FRAMES: usize = 512;

impl Default for AddressSpace {
    fn default() -> Self {
        AddressSpace { mappings: Vec::new(), unwinder: UnwinderX86_64::new(), maps_read: None }
    }
}

impl AddressSpace {
    /// Records an executable mapping; whatever it overlaps was unmapped.
    pub fn map(&mut self, start: u64, end: u64, pgoff: u64, module: Arc<ModuleFile>) {
        if end <= start {
            return;
        }
        if self.mappings.iter().any(|m| m.start == start && m.end == end && Arc::ptr_eq(&m.module, &module)) {
            return;
        }
        let unwinder = &mut self.unwinder;
        self.mappings.retain(|m| {
            let overlaps = m.start < end && start < m.end;
            if overlaps {
                unwinder.remove_module(m.start);
            }
            !overlaps
        });
        let bias = module.bias(start, pgoff);
        if module.readable() {
            self.unwinder.add_module(module.framehop_module(start..end, bias));
        }
        let at = self.mappings.partition_point(|m| m.start < start);
        self.mappings.insert(at, Mapping { start, end, pgoff, bias, module });
    }

    /// A new program image (exec): nothing of the old one stays.
    pub fn clear(&mut self) {
        *self = AddressSpace::default();
    }

    pub fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.start <= addr);
        self.mappings[..i].last().filter(|m| addr < m.end)
    }

    /// Reads the executable mappings from /proc/PID/maps (attach, or a mapping that was made
    /// before sampling began).
    pub fn load_proc_maps(&mut self, pid: u32, modules: &mut ModuleCache) {
        self.maps_read = Some(Instant::now());
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return };
        self.load_maps_text(Some(pid), &maps, modules);
    }

    /// Reads the executable mappings from the text of a /proc/PID/maps file. With `root_pid`,
    /// module files are opened through that live process's root (its mount namespace); without,
    /// by their paths (a process that sent its own maps and may be gone when they are read).
    pub fn load_maps_text(&mut self, root_pid: Option<u32>, maps: &str, modules: &mut ModuleCache) {
        for line in maps.lines() {
            let mut parts = line.split_whitespace();
            let (Some(range), Some(perms), Some(offset), Some(_dev), Some(inode)) =
                (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let path: String = parts.collect::<Vec<_>>().join(" ");
            if !perms.contains('x') || path.is_empty() || path == "[vsyscall]" {
                continue;
            }
            let Some((a, b)) = range.split_once('-') else { continue };
            let (Ok(a), Ok(b), Ok(off), Ok(ino)) = (
                u64::from_str_radix(a, 16),
                u64::from_str_radix(b, 16),
                u64::from_str_radix(offset, 16),
                inode.parse::<u64>(),
            ) else {
                continue;
            };
            let module = match root_pid {
                Some(pid) => modules.get(pid, &path, ino),
                None => modules.get_by_path(&path, ino),
            };
            self.map(a, b, off, module);
        }
    }

    /// Unwinds one sample from its user registers and stack copy. Returns lookup addresses,
    /// innermost first: the instruction pointer itself, then each return address minus one
    /// (so that it falls inside the call instruction's line).
    pub fn unwind(&self, cache: &mut CacheX86_64, regs: [u64; 3], stack: &[u8], out: &mut Vec<u64>) {
        let [bp, sp, ip] = regs;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let bytes = stack.get(off..off + 8).ok_or(())?;
            Ok(u64::from_ne_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let mut iter = self.unwinder.iter_frames(ip, UnwindRegsX86_64::new(ip, sp, bp), cache, &mut read_stack);
        while out.len() < MAX_FRAMES {
            match iter.next() {
                // A zero return address ends a stack (threads' and _start's outermost frames).
                Ok(Some(frame)) if frame.address() < 0x1000 => break,
                Ok(Some(frame)) => out.push(frame.address_for_lookup()),
                _ => break,
            }
        }
        if out.is_empty() {
            out.push(ip);
        }
    }
}

//! Address spaces and symbolization: each process's executable mappings (from perf's MMAP
//! records, /proc/PID/maps, or the text an in-process agent sends), each module's symbols kept
//! once, and addresses turned into frames. The native sampler and the memory tracker share it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onefix_model::Frame;

use crate::module::ModuleCache;
use crate::space::AddressSpace;

/// A mapping missing from the snapshot is looked for again at most this often per process.
const MAPS_REREAD: Duration = Duration::from_millis(200);

/// Turns addresses of live processes into frames, keeping each module's symbols once.
#[derive(Default)]
pub struct Symbolizer {
    modules: ModuleCache,
    spaces: HashMap<u32, AddressSpace>,
    symbols: HashMap<(usize, u64), Arc<[Frame]>>,
}

impl Symbolizer {
    pub fn new() -> Symbolizer {
        Symbolizer::default()
    }

    /// Reads the process's executable mappings now (at its start, or after an exec).
    pub fn load_maps(&mut self, pid: u32) {
        let space = self.spaces.entry(pid).or_default();
        space.clear();
        space.load_proc_maps(pid, &mut self.modules);
    }

    /// Takes the process's mappings from the text of its /proc/PID/maps, sent by the process
    /// itself: a short-lived process may be gone before onefix could read them.
    pub fn load_maps_text(&mut self, pid: u32, maps: &str) {
        let space = self.spaces.entry(pid).or_default();
        space.clear();
        space.load_maps_text(None, maps, &mut self.modules);
        space.maps_read = Some(Instant::now());
    }

    /// Gives a forked child its parent's mappings; false when the parent's are unknown.
    pub fn inherit(&mut self, child: u32, parent: u32) -> bool {
        match self.spaces.get(&parent).cloned() {
            Some(space) => {
                self.spaces.insert(child, space);
                true
            }
            None => false,
        }
    }

    /// Appends the frames of `return_addrs` (innermost first, each a return address, so the
    /// call is the byte before it) to `out`, innermost first. An address in no known mapping
    /// gets `0x…` once /proc/PID/maps has been read again.
    pub fn frames(&mut self, pid: u32, return_addrs: &[u64], out: &mut Vec<Frame>) {
        let space = self.spaces.entry(pid).or_default();
        let missing = return_addrs.iter().any(|&a| space.find(a.saturating_sub(1)).is_none());
        if missing && space.maps_read.filter(|t| t.elapsed() < MAPS_REREAD).is_none() {
            space.load_proc_maps(pid, &mut self.modules);
        }
        for &ret in return_addrs {
            out.extend(self.frames_at(pid, ret.saturating_sub(1)).iter().cloned());
        }
    }

    /// The address space known for `pid`.
    pub(crate) fn space(&self, pid: u32) -> Option<&AddressSpace> {
        self.spaces.get(&pid)
    }

    /// A new executable mapping of `pid` (a perf MMAP2 record).
    pub(crate) fn map(&mut self, pid: u32, start: u64, end: u64, pgoff: u64, path: &str, ino: u64) {
        let module = self.modules.get(pid, path, ino);
        self.spaces.entry(pid).or_default().map(start, end, pgoff, module);
    }

    /// Forgets `pid`'s mappings (it exec'd: a new image, mapped anew).
    pub(crate) fn clear(&mut self, pid: u32) {
        self.spaces.entry(pid).or_default().clear();
    }

    /// Unwinds a stack copy from its registers (bp, sp, ip) into `out` (innermost first). An
    /// address in no known mapping (mapped before sampling began, or whose record is not read
    /// yet) has /proc read again while the process lives, at most every [`MAPS_REREAD`], and
    /// the stack unwound again; says whether it was.
    pub(crate) fn unwind(
        &mut self,
        pid: u32,
        cache: &mut framehop::x86_64::CacheX86_64,
        regs: [u64; 3],
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> bool {
        let space = self.spaces.entry(pid).or_default();
        out.clear();
        space.unwind(cache, regs, stack, out);
        let reread = out.iter().any(|&a| space.find(a).is_none())
            && space.maps_read.filter(|t| t.elapsed() < MAPS_REREAD).is_none()
            && std::path::Path::new(&format!("/proc/{pid}")).exists();
        if reread {
            space.load_proc_maps(pid, &mut self.modules);
            out.clear();
            space.unwind(cache, regs, stack, out);
        }
        reread
    }

    /// The frames at `addr` (an instruction, not a return address) in `pid`, outermost inline
    /// frame last; `0x…` when no mapping holds it.
    pub(crate) fn frames_at(&mut self, pid: u32, addr: u64) -> Arc<[Frame]> {
        match self.spaces.get(&pid).and_then(|s| s.find(addr)) {
            Some(m) => {
                let svma = addr.wrapping_sub(m.bias);
                self.symbols.entry((m.module.id, svma)).or_insert_with(|| m.module.symbolize(svma).into()).clone()
            }
            None => Arc::from(vec![Frame::native(format!("0x{addr:x}"), "")]),
        }
    }

    /// The name of the global variable at `addr` in `pid` (a mutex, say), from the symbol
    /// table of the module whose data holds it. The module is found by its path in
    /// /proc/PID/maps and placed by the bias of its executable mapping, which every segment of
    /// one module shares.
    pub fn variable_at(&mut self, pid: u32, addr: u64) -> Option<String> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let path = maps.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            let (a, b) = f.next()?.split_once('-')?;
            let (a, b) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
            let path = f.nth(4)?;
            ((a..b).contains(&addr) && path.starts_with('/')).then(|| path.to_owned())
        })?;
        let space = self.spaces.get(&pid)?;
        let m = space.mappings().iter().find(|m| m.module.name == path)?;
        m.module.symbol_at(addr.wrapping_sub(m.bias))
    }

    /// Forgets a process that exited.
    pub fn forget(&mut self, pid: u32) {
        self.spaces.remove(&pid);
    }

    /// When the maps were last read for this process.
    pub fn maps_read(&self, pid: u32) -> Option<Instant> {
        self.spaces.get(&pid).and_then(|s| s.maps_read)
    }
}

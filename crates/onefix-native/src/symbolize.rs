//! Symbolization of return addresses captured inside a process (by an in-process agent such
//! as onefix's allocation agent), against that process's /proc/PID/maps.

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
            let addr = ret.saturating_sub(1);
            match space.find(addr) {
                Some(m) => {
                    let svma = addr.wrapping_sub(m.bias);
                    let frames =
                        self.symbols.entry((m.module.id, svma)).or_insert_with(|| m.module.symbolize(svma).into());
                    out.extend(frames.iter().cloned());
                }
                None => out.push(Frame::native(format!("0x{addr:x}"), "")),
            }
        }
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

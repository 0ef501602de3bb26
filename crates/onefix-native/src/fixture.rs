//! Recorded stacks for exact, offline tests of unwinding and symbolization: the mappings of a
//! process and a few raw samples (user registers and the start of the user stack copy), in a
//! small text format. A live run writes one when `ONEFIX_NATIVE_CAPTURE=FILE` is set; tests
//! replay it over committed binaries through the same unwinder and symbolizer as the sampler.
//!
//! ```text
//! # comment
//! module 0x55d0c0e01000 0x55d0c0e02000 0x1000 /path/as/mapped
//! sample 0x7ffd4e1c0a40 0x7ffd4e1c0a10 0x55d0c0e01140 <hex of the stack bytes>
//! ```
//! Registers are bp, sp, ip.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use framehop::x86_64::CacheX86_64;
use onefix_model::Frame;

use crate::module::ModuleCache;
use crate::space::AddressSpace;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackFixture {
    /// Executable mappings: start, end, file offset, path as the target mapped it.
    pub modules: Vec<(u64, u64, u64, String)>,
    /// bp, sp, ip and the stack copy from sp.
    pub samples: Vec<([u64; 3], Vec<u8>)>,
}

impl StackFixture {
    pub fn parse(text: &str) -> Result<StackFixture, String> {
        let mut f = StackFixture::default();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| format!("{s}: {e}"));
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let parts: Vec<&str> = line.splitn(5, ' ').collect();
            match parts.as_slice() {
                ["module", a, b, off, path] => f.modules.push((hex(a)?, hex(b)?, hex(off)?, path.to_string())),
                ["sample", bp, sp, ip, bytes] => {
                    let bytes = bytes.trim();
                    let stack = (0..bytes.len() / 2)
                        .map(|i| u8::from_str_radix(&bytes[2 * i..2 * i + 2], 16).map_err(|e| e.to_string()))
                        .collect::<Result<Vec<u8>, String>>()?;
                    f.samples.push(([hex(bp)?, hex(sp)?, hex(ip)?], stack));
                }
                _ => return Err(format!("line {}: not a module or a sample", n + 1)),
            }
        }
        Ok(f)
    }

    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for (a, b, off, path) in &self.modules {
            let _ = writeln!(s, "module 0x{a:x} 0x{b:x} 0x{off:x} {path}");
        }
        for ([bp, sp, ip], stack) in &self.samples {
            let _ = write!(s, "sample 0x{bp:x} 0x{sp:x} 0x{ip:x} ");
            for b in stack {
                let _ = write!(s, "{b:02x}");
            }
            s.push('\n');
        }
        s
    }

    /// Unwinds and symbolizes every sample, reading each module from `open(path)` (`None`:
    /// not available; its addresses stay unnamed). Stacks come innermost first.
    pub fn symbolize(&self, open: impl Fn(&str) -> Option<PathBuf>) -> Vec<Vec<Frame>> {
        let mut modules = ModuleCache::default();
        let mut space = AddressSpace::default();
        for (start, end, pgoff, path) in &self.modules {
            let module = match open(path) {
                Some(p) => modules.get_at(path, &p),
                None => modules.unreadable(path),
            };
            space.map(*start, *end, *pgoff, module);
        }
        let mut cache = CacheX86_64::new();
        let mut out = Vec::new();
        for (regs, stack) in &self.samples {
            let mut addrs = Vec::new();
            space.unwind(&mut cache, *regs, stack, &mut addrs);
            let mut frames = Vec::new();
            for addr in addrs {
                match space.find(addr) {
                    Some(m) => frames.extend(m.module.symbolize(addr.wrapping_sub(m.bias))),
                    None => frames.push(Frame::native(format!("0x{addr:x}"), "")),
                }
            }
            out.push(frames);
        }
        out
    }
}

/// Collects a fixture during a live run (see the module docs).
pub(crate) struct Capture {
    pub path: PathBuf,
    pub keep_bytes: usize,
    pub every: u64,
    pub max: usize,
    pub seen: u64,
    pub pid: Option<u32>,
    /// Capture the stacks of waiting goroutines (each distinct one, up to `max`) instead of
    /// on-CPU samples: `ONEFIX_NATIVE_CAPTURE_GOROUTINES=1`.
    pub goroutines: bool,
    pub fixture: StackFixture,
}

impl Capture {
    pub fn from_env() -> Option<Capture> {
        let path = std::env::var_os("ONEFIX_NATIVE_CAPTURE")?;
        let keep_bytes = std::env::var("ONEFIX_NATIVE_CAPTURE_BYTES").ok().and_then(|s| s.parse().ok()).unwrap_or(1024);
        let goroutines = std::env::var_os("ONEFIX_NATIVE_CAPTURE_GOROUTINES").is_some_and(|v| v == "1");
        let every = if goroutines { 1 } else { 50 };
        Some(Capture {
            path: path.into(),
            keep_bytes,
            every,
            max: 6,
            seen: 0,
            pid: None,
            goroutines,
            fixture: StackFixture::default(),
        })
    }

    /// Keeps every `every`-th sample of the first process sampled, up to `max`.
    pub fn offer(&mut self, pid: u32, regs: [u64; 3], stack: &[u8]) -> bool {
        if *self.pid.get_or_insert(pid) != pid || self.fixture.samples.len() >= self.max {
            return false;
        }
        self.seen += 1;
        if self.seen < self.every {
            return false;
        }
        self.seen = 0;
        self.fixture.samples.push((regs, stack[..stack.len().min(self.keep_bytes)].to_vec()));
        true
    }

    pub fn write(&self) {
        let _ = std::fs::write(&self.path, self.fixture.to_text());
    }
}

/// `path` if it exists.
pub fn existing(path: &Path) -> Option<PathBuf> {
    path.exists().then(|| path.to_owned())
}

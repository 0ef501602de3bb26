//! One executable or shared object: what framehop needs to unwind through it (its CFI
//! sections) and what the symbolizer needs to name its addresses (addr2line over its DWARF,
//! or over a separate debug file, else its symbol table, else Go's own `.gopclntab`), loaded
//! once per file.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SegmentFlags};
use onefix_model::Frame;

use crate::gopclntab::GoLineTable;
use crate::symbols::demangle;

pub type Bytes = Arc<[u8]>;

#[derive(Clone, Debug)]
struct Segment {
    offset: u64,
    vaddr: u64,
    filesz: u64,
    exec: bool,
}

/// A module as this sampler knows it, shared by every process that maps it.
pub struct ModuleFile {
    /// Unique within one sampler: the symbol cache's key.
    pub id: usize,
    /// The path as the target sees it (what frames show).
    pub name: String,
    /// Where it was read from (through /proc/PID/root when the target is in a container).
    open_path: Option<PathBuf>,
    segments: Vec<Segment>,
    text: Option<Range<u64>>,
    got: Option<Range<u64>>,
    eh_frame: Option<(Range<u64>, Bytes)>,
    eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    debug_frame: Option<Bytes>,
    build_id: Option<Vec<u8>>,
    debuglink: Option<String>,
    /// Function start addresses from the `.eh_frame_hdr` search table, sorted: names an
    /// address's function in a module stripped of every symbol.
    fde_starts: Vec<u64>,
    /// Symbols held in memory for a module that has no file (the vDSO).
    own_symbols: Option<Vec<(u64, u64, String)>>,
    /// Loaded on first use; behind a lock so that modules can be shared across threads.
    symbolizer: Mutex<Option<Option<addr2line::Loader>>>,
    /// Go's function and line table, read on the first address that DWARF and the symbol
    /// table leave without a line (a Go binary built with `-ldflags='-s -w'`).
    go_table: OnceLock<Option<GoLineTable>>,
}

impl ModuleFile {
    /// A module whose file could not be read: addresses are still shown with its name.
    pub fn unreadable(id: usize, name: &str) -> ModuleFile {
        ModuleFile {
            id,
            name: name.to_owned(),
            open_path: None,
            segments: Vec::new(),
            text: None,
            got: None,
            eh_frame: None,
            eh_frame_hdr: None,
            debug_frame: None,
            build_id: None,
            debuglink: None,
            fde_starts: Vec::new(),
            own_symbols: None,
            symbolizer: Mutex::new(None),
            go_table: OnceLock::new(),
        }
    }

    pub fn load(id: usize, name: &str, open_path: &Path) -> Option<ModuleFile> {
        let file = std::fs::File::open(open_path).ok()?;
        let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let mut m = ModuleFile::parse(id, name, &map)?;
        m.open_path = Some(open_path.to_owned());
        Some(m)
    }

    /// Parses an ELF image held in memory (the vDSO); its symbols are kept in memory too.
    pub fn from_image(id: usize, name: &str, data: &[u8]) -> Option<ModuleFile> {
        let mut m = ModuleFile::parse(id, name, data)?;
        let obj = object::File::parse(data).ok()?;
        let mut syms: Vec<(u64, u64, String)> = obj
            .dynamic_symbols()
            .chain(obj.symbols())
            .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_owned())))
            .collect();
        syms.sort();
        syms.dedup_by_key(|s| s.0);
        m.own_symbols = Some(syms);
        Some(m)
    }

    fn parse(id: usize, name: &str, data: &[u8]) -> Option<ModuleFile> {
        let obj = object::File::parse(data).ok()?;
        let segments = obj
            .segments()
            .filter_map(|s| {
                let (offset, filesz) = s.file_range();
                let exec = matches!(s.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.0 & 1 != 0);
                (filesz > 0 || exec).then_some(Segment { offset, vaddr: s.address(), filesz, exec })
            })
            .collect();
        let range = |name: &str| obj.section_by_name(name).map(|s| s.address()..s.address() + s.size());
        let bytes = |name: &str| -> Option<Bytes> {
            let s = obj.section_by_name(name)?;
            let data = s.uncompressed_data().ok()?;
            (!data.is_empty()).then(|| Bytes::from(&*data))
        };
        let eh_frame = range(".eh_frame").zip(bytes(".eh_frame"));
        let eh_frame_hdr = range(".eh_frame_hdr").zip(bytes(".eh_frame_hdr"));
        // Go and some hand-written code have no .eh_frame: their CFI is in .debug_frame, which
        // Go compresses (object decompresses it).
        let debug_frame = if eh_frame.is_none() { bytes(".debug_frame") } else { None };
        let fde_starts = eh_frame_hdr.as_ref().map(|(r, d)| fde_starts(r.start, d)).unwrap_or_default();
        let debuglink =
            obj.gnu_debuglink().ok().flatten().map(|(link, _crc)| String::from_utf8_lossy(link).into_owned());
        Some(ModuleFile {
            id,
            name: name.to_owned(),
            open_path: None,
            segments,
            text: range(".text"),
            got: range(".got"),
            eh_frame,
            eh_frame_hdr,
            debug_frame,
            build_id: obj.build_id().ok().flatten().map(<[u8]>::to_vec),
            fde_starts,
            debuglink,
            own_symbols: None,
            symbolizer: Mutex::new(None),
            go_table: OnceLock::new(),
        })
    }

    pub fn readable(&self) -> bool {
        !self.segments.is_empty()
    }

    /// `avma - svma` for an executable mapping that starts at `start` and maps file offset
    /// `pgoff`. The segment is matched by its page-aligned offset: with lld the read-only and
    /// executable segments share a file page, so matching by `p_offset` alone is off by a page.
    pub fn bias(&self, start: u64, pgoff: u64) -> u64 {
        let page = crate::perf::page_size() as u64;
        let matching = |exec_only: bool| {
            self.segments.iter().filter(|s| s.exec || !exec_only).find(|s| s.offset & !(page - 1) == pgoff).or_else(
                || {
                    self.segments
                        .iter()
                        .filter(|s| s.exec || !exec_only)
                        .find(|s| s.offset <= pgoff && pgoff < s.offset + s.filesz.max(1))
                },
            )
        };
        match matching(true).or_else(|| matching(false)) {
            // Page `pgoff` of the file holds svma `vaddr - (offset - pgoff)`.
            Some(s) => start.wrapping_sub(s.vaddr.wrapping_sub(s.offset.wrapping_sub(pgoff))),
            // Unknown layout: take svma as the file offset.
            None => start.wrapping_sub(pgoff),
        }
    }

    pub fn framehop_module(&self, avma: Range<u64>, bias: u64) -> framehop::Module<Bytes> {
        framehop::Module::new(self.name.clone(), avma, bias, SectionInfo { m: self })
    }

    /// Where this module's file can be read, in order of preference. The DWARF (and Go's
    /// table) is read lazily, at the first address to symbolize. A module opened through a
    /// live process's root (/proc/PID/root/...) can no longer be opened that way once the
    /// process has exited (a short-lived target is symbolized after its end): then its own
    /// path is read instead.
    fn readable_paths(&self) -> Vec<&Path> {
        let Some(opened) = self.open_path.as_ref() else { return Vec::new() };
        [opened.as_path(), Path::new(&self.name)].into_iter().filter(|p| p.is_absolute()).collect()
    }

    fn load_symbolizer(&self) -> Option<addr2line::Loader> {
        self.readable_paths().into_iter().find_map(|path| {
            let debug = self.debug_file(path);
            debug.and_then(|d| addr2line::Loader::new(d).ok()).or_else(|| addr2line::Loader::new(path).ok())
        })
    }

    /// Go's table of this module, when it is a Go binary; read once.
    fn go_table(&self) -> Option<&GoLineTable> {
        self.go_table
            .get_or_init(|| {
                self.readable_paths().into_iter().find_map(|path| {
                    let file = std::fs::File::open(path).ok()?;
                    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
                    GoLineTable::from_elf(Arc::new(map)).ok()
                })
            })
            .as_ref()
    }

    /// A separate debug file with DWARF for this module: by build id under
    /// /usr/lib/debug/.build-id, or by .gnu_debuglink beside it or under /usr/lib/debug.
    fn debug_file(&self, path: &Path) -> Option<PathBuf> {
        let mut candidates = Vec::new();
        if let Some(id) = self.build_id.as_ref().filter(|id| id.len() > 1) {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            candidates.push(PathBuf::from(format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..])));
        }
        if let Some(link) = &self.debuglink {
            let dir = path.parent().unwrap_or(Path::new("/"));
            candidates.push(dir.join(link));
            candidates.push(dir.join(".debug").join(link));
            let rel = Path::new(&self.name).parent().unwrap_or(Path::new("/"));
            candidates.push(Path::new("/usr/lib/debug").join(rel.strip_prefix("/").unwrap_or(rel)).join(link));
        }
        candidates.into_iter().find(|c| c.as_path() != path && c.is_file())
    }

    /// The symbol whose range holds `svma` (a function, or a global variable such as a
    /// mutex), demangled; `None` without a symbol table.
    pub fn symbol_at(&self, svma: u64) -> Option<String> {
        let mut guard = self.symbolizer.lock().unwrap_or_else(|e| e.into_inner());
        let loader = guard.get_or_insert_with(|| self.load_symbolizer()).as_ref()?;
        loader.find_symbol(svma).map(demangle)
    }

    /// Frames for one address of this module (an svma), innermost first: inlined calls
    /// expand into several frames. Never empty: an unknown address becomes `0x…` with the
    /// module's name.
    pub fn symbolize(&self, svma: u64) -> Vec<Frame> {
        let mut out = Vec::new();
        let mut symbol = None;
        let mut guard = self.symbolizer.lock().unwrap_or_else(|e| e.into_inner());
        let loader = match &self.own_symbols {
            Some(_) => None,
            None => guard.get_or_insert_with(|| self.load_symbolizer()).as_ref(),
        };
        if let Some(syms) = &self.own_symbols {
            let i = syms.partition_point(|s| s.0 <= svma);
            if i > 0 && (syms[i - 1].1 == 0 || svma < syms[i - 1].0 + syms[i - 1].1) {
                symbol = Some(syms[i - 1].2.clone());
            }
        } else if let Some(loader) = loader {
            if let Ok(mut frames) = loader.find_frames(svma) {
                while let Ok(Some(f)) = frames.next() {
                    let function =
                        f.function.as_ref().and_then(|n| n.raw_name().ok()).map(|n| demangle(&n)).unwrap_or_default();
                    let (file, line) =
                        f.location.map(|l| (l.file.unwrap_or("").to_owned(), l.line.unwrap_or(0))).unwrap_or_default();
                    out.push(Frame {
                        kind: onefix_model::FrameKind::Native,
                        function,
                        file,
                        line,
                        module: self.name.clone(),
                    });
                }
            }
            symbol = loader.find_symbol(svma).map(demangle);
        }
        // Without DWARF lines, a Go binary still has its own table: names, files, lines and
        // inlined calls.
        if self.own_symbols.is_none() && out.iter().all(|f| f.file.is_empty()) {
            if let Some(table) = self.go_table() {
                let go_frames = table.frames(svma);
                if !go_frames.is_empty() {
                    return go_frames
                        .into_iter()
                        .map(|f| Frame {
                            kind: onefix_model::FrameKind::Native,
                            function: f.function,
                            file: f.file,
                            line: f.line,
                            module: self.name.clone(),
                        })
                        .collect();
                }
            }
        }
        if out.is_empty() {
            let mut f = Frame::native(String::new(), self.name.clone());
            // A location from the line table alone still helps.
            if let Some(loader) = loader {
                if let Ok(Some(loc)) = loader.find_location(svma) {
                    f.file = loc.file.unwrap_or("").to_owned();
                    f.line = loc.line.unwrap_or(0);
                }
            }
            out.push(f);
        }
        // The outermost frame of an inline chain is the real function: the symbol table names
        // it when DWARF does not.
        // With no symbol at all, the function that .eh_frame says holds the address is named by
        // its start, so that every address in one function makes one frame.
        let start = self.fde_starts.partition_point(|&s| s <= svma).checked_sub(1).map(|i| self.fde_starts[i]);
        let n = out.len();
        for (i, f) in out.iter_mut().enumerate() {
            if f.function.is_empty() {
                f.function = match (&symbol, start) {
                    (Some(s), _) if i + 1 == n => s.clone(),
                    (None, Some(start)) if i + 1 == n => format!("0x{start:x}"),
                    _ => format!("0x{svma:x}"),
                };
            }
        }
        out
    }
}

/// Initial locations of the FDEs listed in an `.eh_frame_hdr` at `hdr_svma`, when its table
/// has the usual encoding (datarel sdata4 pairs, as GNU ld, gold, lld and mold write it).
fn fde_starts(hdr_svma: u64, hdr: &[u8]) -> Vec<u64> {
    const DW_EH_PE_UDATA4: u8 = 0x03;
    const DW_EH_PE_DATAREL_SDATA4: u8 = 0x3b;
    let (Some(&version), Some(&ptr_enc), Some(&count_enc), Some(&table_enc)) =
        (hdr.first(), hdr.get(1), hdr.get(2), hdr.get(3))
    else {
        return Vec::new();
    };
    // The eh_frame pointer is 4 bytes in every encoding linkers use (pcrel/udata4/sdata4).
    if version != 1
        || ptr_enc & 0x0f != 0x0b && ptr_enc & 0x0f != 0x03
        || count_enc != DW_EH_PE_UDATA4
        || table_enc != DW_EH_PE_DATAREL_SDATA4
    {
        return Vec::new();
    }
    let word = |at: usize| hdr.get(at..at + 4).map(|b| i32::from_le_bytes(b.try_into().unwrap()));
    let Some(count) = word(8) else { return Vec::new() };
    let mut starts: Vec<u64> = (0..count.max(0) as usize)
        .map_while(|i| word(12 + i * 8))
        .map(|rel| hdr_svma.wrapping_add(rel as i64 as u64))
        .collect();
    starts.sort_unstable();
    starts
}

struct SectionInfo<'a> {
    m: &'a ModuleFile,
}

impl framehop::ModuleSectionInfo<Bytes> for SectionInfo<'_> {
    fn base_svma(&self) -> u64 {
        0
    }
    fn section_svma_range(&mut self, name: &[u8]) -> Option<Range<u64>> {
        match name {
            b".text" => self.m.text.clone(),
            b".got" => self.m.got.clone(),
            b".eh_frame" => self.m.eh_frame.as_ref().map(|e| e.0.clone()),
            b".eh_frame_hdr" => self.m.eh_frame_hdr.as_ref().map(|e| e.0.clone()),
            _ => None,
        }
    }
    fn section_data(&mut self, name: &[u8]) -> Option<Bytes> {
        match name {
            b".eh_frame" => self.m.eh_frame.as_ref().map(|e| e.1.clone()),
            b".eh_frame_hdr" => self.m.eh_frame_hdr.as_ref().map(|e| e.1.clone()),
            b".debug_frame" => self.m.debug_frame.clone(),
            _ => None,
        }
    }
}

/// Every module loaded so far, by the file the target mapped.
#[derive(Default)]
pub struct ModuleCache {
    by_key: HashMap<(String, u64), Arc<ModuleFile>>,
    vdso: Option<Arc<ModuleFile>>,
    next_id: usize,
}

impl ModuleCache {
    /// The module for `path` (inode `ino`) as process `pid` maps it.
    pub fn get(&mut self, pid: u32, path: &str, ino: u64) -> Arc<ModuleFile> {
        if path == "[vdso]" {
            if let Some(v) = &self.vdso {
                return v.clone();
            }
            let id = self.bump();
            let m = Arc::new(
                own_vdso()
                    .and_then(|img| ModuleFile::from_image(id, "[vdso]", &img))
                    .unwrap_or_else(|| ModuleFile::unreadable(id, "[vdso]")),
            );
            self.vdso = Some(m.clone());
            return m;
        }
        let key = (path.to_owned(), ino);
        if let Some(m) = self.by_key.get(&key) {
            return m.clone();
        }
        let id = self.bump();
        let m = if path.starts_with('/') {
            // The target may live in another mount namespace: read the file through its root.
            let through_root = PathBuf::from(format!("/proc/{pid}/root{path}"));
            ModuleFile::load(id, path, &through_root).or_else(|| ModuleFile::load(id, path, Path::new(path)))
        } else {
            None
        };
        let m = Arc::new(m.unwrap_or_else(|| ModuleFile::unreadable(id, path)));
        self.by_key.insert(key, m.clone());
        m
    }

    /// The module at `path` (inode `ino`) opened by its path, not through a process's root: for
    /// a process that may have exited (its /proc entry gone) before the module is read.
    pub fn get_by_path(&mut self, path: &str, ino: u64) -> Arc<ModuleFile> {
        if path == "[vdso]" {
            return self.get(std::process::id(), path, ino);
        }
        let key = (path.to_owned(), ino);
        if let Some(m) = self.by_key.get(&key) {
            return m.clone();
        }
        let id = self.bump();
        let m = path.starts_with('/').then(|| ModuleFile::load(id, path, Path::new(path))).flatten();
        let m = Arc::new(m.unwrap_or_else(|| ModuleFile::unreadable(id, path)));
        self.by_key.insert(key, m.clone());
        m
    }

    /// The module `name`, read from `open` (fixtures: a committed copy of the file).
    pub fn get_at(&mut self, name: &str, open: &Path) -> Arc<ModuleFile> {
        let id = self.bump();
        Arc::new(ModuleFile::load(id, name, open).unwrap_or_else(|| ModuleFile::unreadable(id, name)))
    }

    pub fn unreadable(&mut self, name: &str) -> Arc<ModuleFile> {
        let id = self.bump();
        Arc::new(ModuleFile::unreadable(id, name))
    }

    fn bump(&mut self) -> usize {
        self.next_id += 1;
        self.next_id
    }
}

/// This process's own vDSO image: the kernel maps the same one into every process.
fn own_vdso() -> Option<Vec<u8>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (range, _) = line.split_once(' ')?;
    let (a, b) = range.split_once('-')?;
    let (a, b) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
    let bytes = unsafe { std::slice::from_raw_parts(a as *const u8, (b - a) as usize) };
    Some(bytes.to_vec())
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_module_whose_opening_path_is_gone_is_read_by_its_own_path() {
        use object::{Object, ObjectSymbol};
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hot_wait_c");
        let data = std::fs::read(&fixture).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        let main = obj.symbols().find(|s| s.name() == Ok("main")).unwrap().address();
        // Opened through a path that disappears before the first address is symbolized, as
        // /proc/PID/root/... does when the process exits.
        let dir = tempfile::tempdir().unwrap();
        let transient = dir.path().join("through-root");
        std::fs::copy(&fixture, &transient).unwrap();
        let m = ModuleFile::load(0, &fixture.display().to_string(), &transient).unwrap();
        drop(dir);
        let frames = m.symbolize(main);
        assert!(frames.iter().any(|f| f.function == "main"), "{frames:?}");
    }

    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
    }

    #[test]
    fn lld_segments_are_matched_by_their_page_aligned_offset() {
        // hot_rust_lld: `LOAD 0x012960 vaddr 0x013960 R E`; the kernel maps file page 0x12000.
        let m = ModuleFile::load(1, "hot_rust_lld", &fixture("hot_rust_lld")).unwrap();
        let exec = m.segments.iter().find(|s| s.exec).unwrap();
        assert_eq!((exec.offset, exec.vaddr), (0x12960, 0x13960));
        let start = 0x5555_0000_0000;
        assert_eq!(m.bias(start, 0x12000), start - 0x13000);
        assert!(m.fde_starts.len() > 100, "function starts from .eh_frame_hdr");
    }

    #[test]
    fn gnu_ld_segments_too() {
        let m = ModuleFile::load(1, "hot_wait_c", &fixture("hot_wait_c")).unwrap();
        let exec = m.segments.iter().find(|s| s.exec).unwrap();
        assert_eq!(exec.offset, exec.vaddr, "GNU ld keeps offset == vaddr here");
        assert_eq!(m.bias(0x7000_0000, exec.offset), 0x7000_0000 - exec.vaddr);
    }
}

//! Go's own function and line table (`.gopclntab`): function names, files and lines, with
//! inlined calls, for Go binaries that carry neither DWARF nor a symbol table
//! (`go build -ldflags='-s -w'`, Debian's gofmt). The Go runtime needs this table for its
//! own stack traces, so no Go binary goes without it.
//!
//! The table is read from untrusted files: every read is bounds-checked and fails with a
//! [`GoTableError`], walks are bounded by the table's size, and nothing is allocated from a
//! length the file gives except names, which are capped.
//!
//! # Format (Go's `src/debug/gosym/pclntab.go` and `src/runtime/symtab.go` are the reference)
//!
//! The header is a magic number, two zero bytes, the pc quantum (1 on x86, 4 on arm64) and
//! the pointer size, then pointer-sized words that differ by version:
//!
//! - Go 1.2 (`0xfffffffb`): the function count, then the function table right there; the
//!   file table's offset follows the function table. Every offset is from the header.
//! - Go 1.16 (`0xfffffffa`): function count, file count, then the offsets (from the header)
//!   of `funcnametab`, `cutab`, `filetab`, `pctab` and `pclntable`.
//! - Go 1.18 (`0xfffffff0`) and 1.20+ (`0xfffffff1`): function count, file count,
//!   `textStart` (the address of `runtime.text`), then the same five offsets.
//!
//! `pclntable` starts with the function table: `nfunc + 1` pairs (entry pc, offset of the
//! function's `_func` record from `pclntable`), sorted by pc; the last pair's pc ends the last
//! function. From Go 1.18 both are `u32` and pcs are offsets from `textStart`; before, they
//! are pointer-sized and pcs absolute.
//!
//! A `_func` record is the entry (pointer-sized; a `u32` offset from 1.18), then `u32`
//! fields: name offset (in `funcnametab`), args, deferreturn, pcsp, pcfile, pcln (offsets
//! of pc-value tables in `pctab`), npcdata, cuOffset; Go 1.20 adds startLine; then the bytes
//! funcID, flag, a pad and nfuncdata; then `npcdata` `u32` pc-value table offsets and
//! `nfuncdata` `u32` offsets of function data from `moduledata.gofunc` (Go 1.18+).
//!
//! A pc-value table is a run of varint pairs (value delta, zig-zag coded; pc delta in
//! quanta): the value starts at -1 at the function's entry, and a zero value delta after the
//! first pair ends the table. pcfile gives a file index (into the function's compilation
//! unit's slice of `cutab` from Go 1.16, whose `u32` is an offset into `filetab`; an index
//! into the file table before), pcln the line: both already of the innermost inlined call.
//!
//! Inlined calls: pcdata table 2 (`PCDATA_InlTreeIndex`) gives, for a pc, an index into the
//! function's inline tree (funcdata 3, `FUNCDATA_InlTree`), or -1 outside inlined code. An
//! entry names the inlined function and a `parentPc` (from the entry) whose position is the
//! call site, where the walk continues. The tree lives outside the table, at
//! `moduledata.gofunc`, found by searching the data for the `moduledata` that points at the
//! table. Inlined calls are expanded for Go 1.18+; older tables give the outer function.

use std::ops::Range;
use std::sync::Arc;

use object::{Object, ObjectSection, ObjectSegment};

/// The bytes of a whole executable, kept mapped while its table is in use.
pub type Image = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Why a Go table could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoTableError {
    #[error("the file is not an ELF object this reader can parse")]
    NotElf,
    #[error("no Go function table (.gopclntab) in this file")]
    NotFound,
    #[error("the Go function table's header is not one of Go 1.2, 1.16, 1.18 or 1.20+")]
    UnknownHeader,
    #[error("the Go function table is cut short reading its {0}")]
    Truncated(&'static str),
    #[error("the Go function table's {0} is malformed")]
    Malformed(&'static str),
}

type Result<T> = std::result::Result<T, GoTableError>;

/// One frame of an address, as the Go table names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoFrame {
    pub function: String,
    /// Empty when the table has no file for the address.
    pub file: String,
    /// 0 when the table has no line for the address.
    pub line: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Version {
    Go12,
    Go116,
    Go118,
    Go120,
}

/// Names longer than this are cut: a bound on what a hostile file can make us allocate.
const MAX_NAME: usize = 4096;
/// Inlined calls deeper than this are not followed (Go's own limit is far lower).
const MAX_INLINE_DEPTH: usize = 64;
/// Candidate headers (or moduledata) tried when searching a file without section names.
const MAX_CANDIDATES: usize = 32;
const PCDATA_INLTREE_INDEX: u32 = 2;
const FUNCDATA_INLTREE: u32 = 3;

/// The table of one Go binary, parsed enough to resolve addresses (svmas).
pub struct GoLineTable {
    image: Image,
    /// Where the table is in the image.
    table: Range<usize>,
    version: Version,
    big_endian: bool,
    quantum: u64,
    ptr_size: usize,
    /// What pcs of Go 1.18+ tables are offsets from.
    text_start: u64,
    nfunc: usize,
    // The sub-tables, as ranges of `table` (relative to its start).
    funcnametab: Range<usize>,
    cutab: Range<usize>,
    filetab: Range<usize>,
    pctab: Range<usize>,
    /// What `_func` offsets are from.
    funcdata: Range<usize>,
    functab: Range<usize>,
    /// Offset in the image of `moduledata.gofunc`, where inline trees are: `None` when it
    /// could not be found (inlined calls are then not expanded).
    gofunc: Option<usize>,
}

/// A Go table found in a file: its bytes' place, and its address when loaded.
struct Located {
    table: Range<usize>,
    svma: u64,
}

impl GoLineTable {
    /// Finds and parses the Go table of the ELF file in `image`.
    pub fn from_elf(image: Image) -> Result<GoLineTable> {
        let bytes: &[u8] = (*image).as_ref();
        let obj = object::File::parse(bytes).map_err(|_| GoTableError::NotElf)?;
        let text_section = obj.section_by_name(".text").map(|s| s.address());
        let segments: Vec<FileSegment> = obj
            .segments()
            .filter_map(|s| {
                let (offset, size) = s.file_range();
                (size > 0).then_some(FileSegment { svma: s.address(), offset, size })
            })
            .collect();
        // Relocations say what the pointers of a position-independent binary hold: the file
        // has zeros there.
        let mut relocations: Vec<(u64, u64)> =
            obj.dynamic_relocations().into_iter().flatten().map(|(at, r)| (at, r.addend() as u64)).collect();
        relocations.sort_unstable();
        let pointers = Pointers { bytes, segments: &segments, relocations: &relocations };

        let mut errors = GoTableError::NotFound;
        for located in locate(&obj, bytes, &segments)? {
            let header_text_start = |table: &GoLineTable| -> Option<u64> {
                // Go 1.18+: textStart is word 2 of the header; zero in the file of a PIE
                // linked externally, where a relocation fills it.
                let at = located.svma.checked_add(8 + 2 * table.ptr_size as u64)?;
                pointers.word(at, table.ptr_size, table.big_endian).filter(|&v| v != 0)
            };
            match GoLineTable::parse(image.clone(), located.table.clone(), 0) {
                Ok(mut table) => {
                    if table.version >= Version::Go118 {
                        match header_text_start(&table).or(text_section) {
                            Some(start) => table.text_start = start,
                            None => {
                                errors = GoTableError::Malformed("text start");
                                continue;
                            }
                        }
                    }
                    table.gofunc = table.find_gofunc(&pointers, located.svma);
                    return Ok(table);
                }
                Err(e) => errors = e,
            }
        }
        Err(errors)
    }

    /// Parses the table at `table` in `image`; `text_start` is what Go 1.18+ pcs are offsets
    /// from (`runtime.text`). Inlined calls are not expanded by a table parsed this way.
    pub fn parse(image: Image, table: Range<usize>, text_start: u64) -> Result<GoLineTable> {
        let bytes: &[u8] = (*image).as_ref();
        let data = bytes.get(table.clone()).ok_or(GoTableError::Truncated("header"))?;
        let header = data.get(..8).ok_or(GoTableError::Truncated("header"))?;
        let (quantum, ptr_size) = (header[6], header[7]);
        if header[4] != 0 || header[5] != 0 || !matches!(quantum, 1 | 2 | 4) || !matches!(ptr_size, 4 | 8) {
            return Err(GoTableError::UnknownHeader);
        }
        let magic_le = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let magic_be = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
        let version_of = |magic| match magic {
            0xfffffffb => Some(Version::Go12),
            0xfffffffa => Some(Version::Go116),
            0xfffffff0 => Some(Version::Go118),
            0xfffffff1 => Some(Version::Go120),
            _ => None,
        };
        let (version, big_endian) = match (version_of(magic_le), version_of(magic_be)) {
            (Some(v), _) => (v, false),
            (None, Some(v)) => (v, true),
            (None, None) => return Err(GoTableError::UnknownHeader),
        };
        let reader = Reader { data, big_endian };
        let ptr_size = ptr_size as usize;
        let header_word = |i: usize| reader.word(8 + i * ptr_size, ptr_size, "header");
        let to_index = |v: u64, what| usize::try_from(v).map_err(|_| GoTableError::Malformed(what));
        // A sub-table runs from its offset to the end of the table (the format gives no
        // lengths): reads past the sub-table's real end stay within the table.
        let from = |v: u64, what| -> Result<Range<usize>> {
            let start = to_index(v, what)?;
            if start > data.len() {
                return Err(GoTableError::Truncated(what));
            }
            Ok(start..data.len())
        };
        let nfunc = to_index(header_word(0)?, "function count")?;
        let mut t = GoLineTable {
            image: image.clone(),
            table,
            version,
            big_endian,
            quantum: quantum as u64,
            ptr_size,
            text_start,
            nfunc,
            funcnametab: 0..0,
            cutab: 0..0,
            filetab: 0..0,
            pctab: 0..0,
            funcdata: 0..0,
            functab: 0..0,
            gofunc: None,
        };
        let whole = 0..data.len();
        match version {
            Version::Go12 => {
                // Everything is an offset from the header; the file table's offset follows
                // the function table.
                let functab_start = 8 + ptr_size;
                let functab_len = t.functab_len()?;
                let file_offset_at =
                    functab_start.checked_add(functab_len).ok_or(GoTableError::Truncated("functab"))?;
                let file_offset = reader.u32(file_offset_at, "file table")? as usize;
                t.funcnametab = whole.clone();
                t.pctab = whole.clone();
                t.funcdata = whole.clone();
                t.functab = functab_start..file_offset_at;
                t.filetab = from(file_offset as u64, "file table")?;
            }
            Version::Go116 | Version::Go118 | Version::Go120 => {
                let first = if version == Version::Go116 { 2 } else { 3 };
                t.funcnametab = from(header_word(first)?, "function names")?;
                t.cutab = from(header_word(first + 1)?, "compilation units")?;
                t.filetab = from(header_word(first + 2)?, "file names")?;
                t.pctab = from(header_word(first + 3)?, "pc tables")?;
                t.funcdata = from(header_word(first + 4)?, "function records")?;
                let functab_len = t.functab_len()?;
                let end = t.funcdata.start.checked_add(functab_len).ok_or(GoTableError::Truncated("functab"))?;
                t.functab = t.funcdata.start..end;
            }
        }
        if t.functab.end > data.len() {
            return Err(GoTableError::Truncated("functab"));
        }
        if nfunc == 0 {
            return Err(GoTableError::Malformed("function count"));
        }
        // The first function's record must be readable and agree with the function table on
        // its entry: a cheap check that this is a table and not bytes that look like one.
        if t.record(0)?.entry != t.entry_pc(0)? {
            return Err(GoTableError::Malformed("function table"));
        }
        Ok(t)
    }

    /// The frames at `pc` (an svma), innermost first: one per inlined call, then the real
    /// function. Empty when no function of the table holds `pc` or its records are broken.
    pub fn frames(&self, pc: u64) -> Vec<GoFrame> {
        self.try_frames(pc).unwrap_or_default()
    }

    fn try_frames(&self, target: u64) -> Result<Vec<GoFrame>> {
        let Some(index) = self.function_index(target)? else { return Ok(Vec::new()) };
        let func = self.record(index)?;
        let mut frames = Vec::new();
        let mut pc = target;
        let inline_tree = self.inline_tree(&func)?;
        loop {
            let (file, line) = self.file_line(&func, pc)?;
            let call = match inline_tree {
                Some(tree) if frames.len() < MAX_INLINE_DEPTH => {
                    let ix = self.pc_value(func.pcdata(PCDATA_INLTREE_INDEX)?, func.entry, pc)?;
                    match ix {
                        Some(ix) if ix >= 0 => Some(self.inlined_call(tree, ix as u32)?),
                        _ => None,
                    }
                }
                _ => None,
            };
            match call {
                Some(call) => {
                    frames.push(GoFrame { function: self.function_name(call.name_offset)?, file, line });
                    // The caller's position is recorded at the call site: continue there, which
                    // must be in the same function.
                    pc = u64::try_from(call.parent_pc)
                        .ok()
                        .and_then(|p| func.entry.checked_add(p))
                        .ok_or(GoTableError::Malformed("inline tree"))?;
                    if self.function_index(pc)? != Some(index) {
                        return Err(GoTableError::Malformed("inline tree"));
                    }
                }
                None => {
                    frames.push(GoFrame { function: self.function_name(func.name_offset)?, file, line });
                    return Ok(frames);
                }
            }
        }
    }

    fn bytes(&self) -> &[u8] {
        let image: &[u8] = (*self.image).as_ref();
        image.get(self.table.clone()).unwrap_or_default()
    }

    fn reader(&self) -> Reader<'_> {
        Reader { data: self.bytes(), big_endian: self.big_endian }
    }

    /// Size of one field of the function table.
    fn functab_field(&self) -> usize {
        if self.version >= Version::Go118 {
            4
        } else {
            self.ptr_size
        }
    }

    /// Bytes of the function table: `nfunc + 1` pairs, the last one's pc ending the last
    /// function.
    fn functab_len(&self) -> Result<usize> {
        self.nfunc
            .checked_add(1)
            .and_then(|n| n.checked_mul(2 * self.functab_field()))
            .ok_or(GoTableError::Malformed("function count"))
    }

    /// Field `field` (0: pc, 1: record offset) of the function table's pair `i`.
    fn functab_word(&self, i: usize, field: usize) -> Result<u64> {
        let size = self.functab_field();
        let at = i
            .checked_mul(2)
            .and_then(|n| n.checked_add(field))
            .and_then(|n| n.checked_mul(size))
            .and_then(|n| n.checked_add(self.functab.start))
            .filter(|&at| at.checked_add(size).is_some_and(|end| end <= self.functab.end))
            .ok_or(GoTableError::Truncated("functab"))?;
        self.reader().word(at, size, "functab")
    }

    fn entry_pc(&self, i: usize) -> Result<u64> {
        let pc = self.functab_word(i, 0)?;
        Ok(if self.version >= Version::Go118 { pc.wrapping_add(self.text_start) } else { pc })
    }

    /// The index of the function whose code holds `pc`.
    fn function_index(&self, pc: u64) -> Result<Option<usize>> {
        if pc < self.entry_pc(0)? || pc >= self.entry_pc(self.nfunc)? {
            return Ok(None);
        }
        // Binary search for the last entry <= pc (the table is sorted by pc).
        let (mut low, mut high) = (0, self.nfunc);
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if self.entry_pc(mid)? <= pc {
                low = mid;
            } else {
                high = mid;
            }
        }
        Ok(Some(low))
    }

    /// The `_func` record of function `i`.
    fn record(&self, i: usize) -> Result<FuncRecord<'_>> {
        let offset = usize::try_from(self.functab_word(i, 1)?).map_err(|_| GoTableError::Malformed("functab"))?;
        let start = self.funcdata.start.checked_add(offset).ok_or(GoTableError::Truncated("function record"))?;
        let table = self.bytes();
        // Past this every offset below is small: no sum can overflow.
        if start >= table.len() {
            return Err(GoTableError::Truncated("function record"));
        }
        let r = self.reader();
        let entry_size = if self.version >= Version::Go118 { 4 } else { self.ptr_size };
        let entry = r.word(start, entry_size, "function record")?;
        let entry = if self.version >= Version::Go118 { entry.wrapping_add(self.text_start) } else { entry };
        // The u32 fields after the entry, by their number in Go's debug/gosym (1: name).
        let field = |n: usize| r.u32(start + entry_size + (n - 1) * 4, "function record");
        let npcdata = field(7)?;
        // After cuOffset (field 8), Go 1.20 has startLine; then funcID, flag, pad, nfuncdata.
        let fixed_fields = if self.version >= Version::Go120 { 9 } else { 8 };
        let flags_at = start + entry_size + fixed_fields * 4;
        let nfuncdata = if self.version >= Version::Go118 {
            *table.get(flags_at + 3).ok_or(GoTableError::Truncated("function record"))?
        } else {
            0
        };
        Ok(FuncRecord {
            entry,
            name_offset: field(1)?,
            pcfile: field(5)?,
            pcln: field(6)?,
            npcdata,
            cu_offset: if self.version >= Version::Go116 { field(8)? } else { 0 },
            nfuncdata,
            tables_at: flags_at + 4,
            table,
            big_endian: self.big_endian,
        })
    }

    /// The value of the pc-value table at `offset` in `pctab` for `target`, in the function
    /// entered at `entry`; `None` when the function has no such table or it ends before.
    fn pc_value(&self, offset: u32, entry: u64, target: u64) -> Result<Option<i32>> {
        if offset == 0 {
            return Ok(None);
        }
        let pctab = self.bytes().get(self.pctab.clone()).unwrap_or_default();
        let mut p = pctab.get(offset as usize..).ok_or(GoTableError::Truncated("pc table"))?;
        let mut value: i32 = -1;
        let mut pc = entry;
        let mut first = true;
        // Each step consumes at least two bytes: the walk ends within the table.
        loop {
            let value_delta = read_varint(&mut p)?;
            if value_delta == 0 && !first {
                return Ok(None);
            }
            first = false;
            // Zig-zag: the low bit is the sign.
            let delta = if value_delta & 1 != 0 { !(value_delta >> 1) } else { value_delta >> 1 } as i32;
            let pc_delta = read_varint(&mut p)? as u64 * self.quantum;
            value = value.wrapping_add(delta);
            pc = pc.checked_add(pc_delta).ok_or(GoTableError::Malformed("pc table"))?;
            if target < pc {
                return Ok(Some(value));
            }
        }
    }

    /// The file and line of `pc` (of its innermost inlined call) in `func`.
    fn file_line(&self, func: &FuncRecord, pc: u64) -> Result<(String, u32)> {
        let line = self.pc_value(func.pcln, func.entry, pc)?.filter(|&l| l > 0).unwrap_or(0) as u32;
        let file = match self.pc_value(func.pcfile, func.entry, pc)? {
            Some(index) => self.file_name(func, index)?,
            None => String::new(),
        };
        Ok((file, line))
    }

    fn file_name(&self, func: &FuncRecord, index: i32) -> Result<String> {
        let r = self.reader();
        match self.version {
            Version::Go12 => {
                // A table of u32 offsets (from the header) of the names, index 0 unused.
                if index <= 0 {
                    return Ok(String::new());
                }
                let count = r.u32(self.filetab.start, "file table")?;
                if index as u32 >= count {
                    return Err(GoTableError::Malformed("file index"));
                }
                let at = self.filetab.start + index as usize * 4;
                let offset = r.u32(at, "file table")?;
                self.string_at(0..self.bytes().len(), offset)
            }
            _ => {
                if index < 0 || func.cu_offset == u32::MAX {
                    return Ok(String::new());
                }
                let slot = (func.cu_offset as u64 + index as u64) * 4;
                let at = usize::try_from(slot).ok().and_then(|s| s.checked_add(self.cutab.start));
                let at = at.filter(|&a| a + 4 <= self.cutab.end).ok_or(GoTableError::Truncated("compilation units"))?;
                match r.u32(at, "compilation units")? {
                    u32::MAX => Ok(String::new()),
                    offset => self.string_at(self.filetab.clone(), offset),
                }
            }
        }
    }

    fn function_name(&self, offset: u32) -> Result<String> {
        self.string_at(self.funcnametab.clone(), offset)
    }

    /// The NUL-terminated string at `offset` in the sub-table `within`, cut at [`MAX_NAME`].
    fn string_at(&self, within: Range<usize>, offset: u32) -> Result<String> {
        let sub = self.bytes().get(within).ok_or(GoTableError::Truncated("names"))?;
        let tail = sub.get(offset as usize..).ok_or(GoTableError::Truncated("names"))?;
        let tail = &tail[..tail.len().min(MAX_NAME)];
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        Ok(String::from_utf8_lossy(&tail[..end]).into_owned())
    }

    /// Where `func`'s inline tree is in the image, when it has one and `gofunc` is known.
    fn inline_tree(&self, func: &FuncRecord) -> Result<Option<usize>> {
        let Some(gofunc) = self.gofunc else { return Ok(None) };
        if self.version < Version::Go118 || func.nfuncdata as u32 <= FUNCDATA_INLTREE {
            return Ok(None);
        }
        let at = (func.npcdata as usize + FUNCDATA_INLTREE as usize)
            .checked_mul(4)
            .and_then(|o| o.checked_add(func.tables_at))
            .ok_or(GoTableError::Truncated("function data"))?;
        match self.reader().u32(at, "function data")? {
            u32::MAX => Ok(None),
            offset => Ok(gofunc.checked_add(offset as usize)),
        }
    }

    /// Entry `index` of the inline tree at `tree` (an offset in the image).
    fn inlined_call(&self, tree: usize, index: u32) -> Result<InlinedCall> {
        let image = Reader { data: (*self.image).as_ref(), big_endian: self.big_endian };
        // Go 1.18-1.19: parent i16, funcID u8, pad, file i32, line i32, nameoff i32, parentPc
        // i32. Go 1.20+: funcID u8, 3 pad bytes, nameoff i32, parentPc i32, startLine i32.
        let (size, name_at, parent_pc_at) = if self.version >= Version::Go120 { (16, 4, 8) } else { (20, 12, 16) };
        let field = |within: usize| {
            let at = (index as usize)
                .checked_mul(size)
                .and_then(|o| o.checked_add(tree))
                .and_then(|o| o.checked_add(within));
            image.u32(at.ok_or(GoTableError::Truncated("inline tree"))?, "inline tree")
        };
        Ok(InlinedCall { name_offset: field(name_at)?, parent_pc: field(parent_pc_at)? as i32 })
    }

    /// `moduledata.gofunc`, where function data (inline trees) is from Go 1.18: the runtime's
    /// moduledata is the one word-aligned place in the data whose first word points at the
    /// table and whose second at its function names; gofunc is a fixed field of it.
    fn find_gofunc(&self, pointers: &Pointers, table_svma: u64) -> Option<usize> {
        if self.version < Version::Go118 {
            return None;
        }
        let size = self.ptr_size as u64;
        let word = |at: u64| pointers.word(at, self.ptr_size, self.big_endian);
        // Field numbers in words: pcHeader, then six slices of three words (funcnametab at 1),
        // findfunctab, minpc, maxpc, text (22)..., rodata, gofunc; Go 1.20 added covctrs and
        // ecovctrs before `end`, moving rodata and gofunc by two.
        let (text_field, gofunc_field) = if self.version >= Version::Go120 { (22, 40) } else { (22, 38) };
        let names_svma = table_svma.checked_add(self.funcnametab.start as u64)?;
        pointers.find_word(table_svma, self.ptr_size, self.big_endian).into_iter().take(MAX_CANDIDATES).find_map(
            |moduledata| {
                let field = |n: u64| word(moduledata.checked_add(n * size)?);
                if field(1)? != names_svma || field(text_field)? != self.text_start {
                    return None;
                }
                let (rodata, gofunc) = (field(gofunc_field - 1)?, field(gofunc_field)?);
                (rodata <= gofunc).then_some(())?;
                pointers.offset_of(gofunc)
            },
        )
    }
}

/// The parts of a `_func` record that resolving an address needs.
struct FuncRecord<'a> {
    entry: u64,
    name_offset: u32,
    pcfile: u32,
    pcln: u32,
    npcdata: u32,
    cu_offset: u32,
    nfuncdata: u8,
    /// Where the pcdata offsets start, in the table.
    tables_at: usize,
    table: &'a [u8],
    big_endian: bool,
}

impl FuncRecord<'_> {
    /// The offset in `pctab` of pcdata table `n`; 0 (none) when the function has fewer.
    fn pcdata(&self, n: u32) -> Result<u32> {
        if n >= self.npcdata {
            return Ok(0);
        }
        Reader { data: self.table, big_endian: self.big_endian }.u32(self.tables_at + n as usize * 4, "pc data")
    }
}

struct InlinedCall {
    name_offset: u32,
    parent_pc: i32,
}

/// Bounds-checked reads of fixed-size integers.
struct Reader<'a> {
    data: &'a [u8],
    big_endian: bool,
}

impl Reader<'_> {
    fn bytes<const N: usize>(&self, at: usize, what: &'static str) -> Result<[u8; N]> {
        let end = at.checked_add(N).ok_or(GoTableError::Truncated(what))?;
        let slice = self.data.get(at..end).ok_or(GoTableError::Truncated(what))?;
        let mut out = [0; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    fn u32(&self, at: usize, what: &'static str) -> Result<u32> {
        let b = self.bytes::<4>(at, what)?;
        Ok(if self.big_endian { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
    }

    fn word(&self, at: usize, size: usize, what: &'static str) -> Result<u64> {
        if size == 4 {
            return self.u32(at, what).map(u64::from);
        }
        let b = self.bytes::<8>(at, what)?;
        Ok(if self.big_endian { u64::from_be_bytes(b) } else { u64::from_le_bytes(b) })
    }
}

/// Reads an unsigned LEB128 varint of at most 32 bits and advances past it.
fn read_varint(p: &mut &[u8]) -> Result<u32> {
    let mut value: u32 = 0;
    for (i, &b) in p.iter().enumerate().take(5) {
        value |= ((b & 0x7f) as u32) << (7 * i);
        if b & 0x80 == 0 {
            *p = &p[i + 1..];
            return Ok(value);
        }
    }
    Err(GoTableError::Truncated("pc table"))
}

#[derive(Clone, Debug)]
struct FileSegment {
    svma: u64,
    offset: u64,
    size: u64,
}

/// Pointer-sized values at addresses of the file, as the loader leaves them: from the file,
/// or from a dynamic relocation's addend where the file holds a placeholder.
struct Pointers<'a> {
    bytes: &'a [u8],
    segments: &'a [FileSegment],
    /// (address, addend), sorted by address.
    relocations: &'a [(u64, u64)],
}

impl Pointers<'_> {
    fn offset_of(&self, svma: u64) -> Option<usize> {
        let s = self.segments.iter().find(|s| svma >= s.svma && svma - s.svma < s.size)?;
        usize::try_from(s.offset + (svma - s.svma)).ok().filter(|&o| o < self.bytes.len())
    }

    fn word(&self, svma: u64, size: usize, big_endian: bool) -> Option<u64> {
        if let Ok(i) = self.relocations.binary_search_by_key(&svma, |r| r.0) {
            return Some(self.relocations[i].1);
        }
        let at = self.offset_of(svma)?;
        Reader { data: self.bytes, big_endian }.word(at, size, "pointer").ok()
    }

    /// Addresses of aligned words that hold `value`, in the file or by relocation.
    fn find_word(&self, value: u64, size: usize, big_endian: bool) -> Vec<u64> {
        let mut found: Vec<u64> =
            self.relocations.iter().filter(|r| r.1 == value).map(|r| r.0).take(MAX_CANDIDATES).collect();
        let pattern: Vec<u8> = match (size, big_endian) {
            (4, false) => (value as u32).to_le_bytes().to_vec(),
            (4, true) => (value as u32).to_be_bytes().to_vec(),
            (_, false) => value.to_le_bytes().to_vec(),
            (_, true) => value.to_be_bytes().to_vec(),
        };
        for s in self.segments {
            let Some(data) = usize::try_from(s.offset)
                .ok()
                .zip(usize::try_from(s.offset.saturating_add(s.size)).ok())
                .and_then(|(a, b)| self.bytes.get(a..b))
            else {
                continue;
            };
            // Segments start aligned to their pointers, so aligned chunks are aligned words.
            for (i, chunk) in data.chunks_exact(size).enumerate() {
                if chunk == pattern.as_slice() && found.len() < MAX_CANDIDATES {
                    found.push(s.svma + (i * size) as u64);
                }
            }
        }
        found
    }
}

/// Where the Go table may be: its section (`.gopclntab`, or `.data.rel.ro.gopclntab` in a
/// position-independent binary); in a Go binary without section names, every aligned place in
/// its loaded data that starts with a table's magic.
fn locate(obj: &object::File, bytes: &[u8], segments: &[FileSegment]) -> Result<Vec<Located>> {
    for name in [".gopclntab", ".data.rel.ro.gopclntab"] {
        if let Some(section) = obj.section_by_name(name) {
            let Some((offset, size)) = section.file_range() else { continue };
            let start = usize::try_from(offset).map_err(|_| GoTableError::Truncated("section"))?;
            let end = usize::try_from(offset.saturating_add(size)).map_err(|_| GoTableError::Truncated("section"))?;
            if end > bytes.len() {
                return Err(GoTableError::Truncated("section"));
            }
            return Ok(vec![Located { table: start..end, svma: section.address() }]);
        }
    }
    // Only search files that look like Go (or have lost their section names): a C library
    // without symbols is not read through for a table it cannot have.
    let looks_like_go = obj.sections().next().is_none()
        || obj.section_by_name(".go.buildinfo").is_some()
        || obj.section_by_name(".note.go.buildid").is_some();
    if !looks_like_go {
        return Err(GoTableError::NotFound);
    }
    let mut found = Vec::new();
    for s in segments {
        let (Ok(start), Ok(end)) = (usize::try_from(s.offset), usize::try_from(s.offset.saturating_add(s.size))) else {
            continue;
        };
        let Some(data) = bytes.get(start..end.min(bytes.len())) else { continue };
        // The linker aligns the table (to 32 bytes); 8 is enough to find it and skips most.
        for (i, chunk) in data.chunks_exact(8).enumerate() {
            let magic = [chunk[0], chunk[1], chunk[2], chunk[3]];
            let is_magic = matches!(u32::from_le_bytes(magic), 0xfffffffb | 0xfffffffa | 0xfffffff0 | 0xfffffff1)
                || matches!(u32::from_be_bytes(magic), 0xfffffffb | 0xfffffffa | 0xfffffff0 | 0xfffffff1);
            if is_magic && chunk[4] == 0 && chunk[5] == 0 && found.len() < MAX_CANDIDATES {
                // The table runs to the end of the segment at most.
                found.push(Located { table: start + i * 8..start + data.len(), svma: s.svma + (i * 8) as u64 });
            }
        }
    }
    if found.is_empty() {
        return Err(GoTableError::NotFound);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// A Go program that prints, for a pc in `hot` and one in `scale` inlined into it, the
    /// pc and the innermost function the Go runtime names there.
    const PROGRAM: &str = r#"package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Small enough to be inlined into hot.
func scale(x int) int {
	mark() // SCALE
	return x * 3
}

//go:noinline
func hot(n int) int {
	x := 0
	for i := 0; i < n; i++ {
		x += (i * 7) % 13
	}
	mark() // HOT
	return scale(x)
}

// Prints the pc of the call that called it, and the function, file and line the runtime
// names there.
//
//go:noinline
func mark() {
	pcs := make([]uintptr, 1)
	runtime.Callers(2, pcs)
	pc := pcs[0] - 1
	file, line := runtime.FuncForPC(pc).FileLine(pc)
	fmt.Printf("%x %s %s:%d\n", pc, runtime.FuncForPC(pc).Name(), file, line)
}

// Prints where the executable's first page is mapped: a PIE is loaded away from its link
// address.
func printBase() {
	exe, _ := os.Executable()
	maps, _ := os.ReadFile("/proc/self/maps")
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[5] == exe && f[2] == "00000000" {
			fmt.Printf("%s base\n", strings.Split(f[0], "-")[0])
			return
		}
	}
}

func main() {
	printBase()
	hot(1000)
}
"#;

    fn have_go() -> bool {
        Command::new("go").arg("version").output().is_ok_and(|o| o.status.success())
    }

    /// Builds [`PROGRAM`] with `-ldflags='-s -w'` (and `extra` flags) into `dir`.
    fn build(dir: &Path, extra: &[&str]) -> PathBuf {
        let src = dir.join("main.go");
        std::fs::write(&src, PROGRAM).unwrap();
        let exe = dir.join("stripped");
        let built = Command::new("go")
            .arg("build")
            .args(extra)
            .args(["-ldflags=-s -w", "-o"])
            .arg(&exe)
            .arg(&src)
            .env("GO111MODULE", "off")
            .env("GOCACHE", dir.join("cache"))
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(built.status.success(), "go build: {}", String::from_utf8_lossy(&built.stderr));
        exe
    }

    /// (svma, the innermost function, file and line the Go runtime names there), for the HOT
    /// then the SCALE point.
    fn run(exe: &Path) -> Vec<(u64, GoFrame)> {
        let out = Command::new(exe).output().unwrap();
        let mut lines: Vec<(u64, GoFrame)> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let mut fields = l.splitn(3, ' ');
                let pc = u64::from_str_radix(fields.next().unwrap(), 16).unwrap();
                let function = fields.next().unwrap().to_owned();
                let (file, line) = fields.next().map(|p| p.rsplit_once(':').unwrap()).unwrap_or(("", "0"));
                (pc, GoFrame { function, file: file.to_owned(), line: line.parse().unwrap() })
            })
            .collect();
        let (base, _) = lines.remove(0);
        // The load bias: where the first page is mapped less the address it was linked at.
        let bytes = std::fs::read(exe).unwrap();
        let obj = object::File::parse(&*bytes).unwrap();
        let linked = obj.segments().find(|s| s.file_range().0 == 0).unwrap().address() & !0xfff;
        lines.into_iter().map(|(pc, name)| (pc - (base - linked), name)).collect()
    }

    /// `go tool addr2line`'s answer for `pc`: (function, file, line). Go 1.19's cannot read
    /// the table of a PIE (it looks for `.gopclntab` only): then the runtime's own answer,
    /// `runtime_says`, is taken.
    fn go_addr2line(exe: &Path, pc: u64, runtime_says: &GoFrame) -> (String, String, u32) {
        use std::io::Write;
        let mut child = Command::new("go")
            .args(["tool", "addr2line"])
            .arg(exe)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        writeln!(child.stdin.take().unwrap(), "0x{pc:x}").unwrap();
        let out = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
        let mut lines = out.lines();
        let function = lines.next().unwrap().to_owned();
        let (file, line) = lines.next().unwrap().rsplit_once(':').unwrap();
        if function == "?" {
            eprintln!("go tool addr2line cannot read {}: comparing with the Go runtime", exe.display());
            return (runtime_says.function.clone(), runtime_says.file.clone(), runtime_says.line);
        }
        (function, file.to_owned(), line.parse().unwrap())
    }

    fn load(exe: &Path) -> GoLineTable {
        let image: Image = Arc::new(std::fs::read(exe).unwrap());
        GoLineTable::from_elf(image).unwrap()
    }

    fn resolves_like_go_tool_addr2line(extra: &[&str]) {
        if !have_go() {
            eprintln!("skipped: `go` is not installed (the test builds a Go program)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let exe = build(dir.path(), extra);
        let points = run(&exe);
        assert_eq!(points.len(), 2, "{points:?}");
        let table = load(&exe);
        let (hot_pc, hot) = &points[0];
        let frames = table.frames(*hot_pc);
        let (function, file, line) = go_addr2line(&exe, *hot_pc, hot);
        assert_eq!(&function, &hot.function);
        assert_eq!(frames, vec![GoFrame { function, file, line }]);
        assert_eq!(&frames[0], hot, "the runtime agrees");

        // An inlined call expands into its own frame, then the function it was inlined in.
        // go tool addr2line names the outer function with the inner position.
        let (scale_pc, scale) = &points[1];
        let frames = table.frames(*scale_pc);
        assert_eq!(frames.len(), 2, "{frames:?}");
        assert_eq!(&frames[0], scale, "the runtime names the inlined function");
        let (outer, file, line) =
            go_addr2line(&exe, *scale_pc, &GoFrame { function: hot.function.clone(), ..scale.clone() });
        assert_eq!((&frames[0].file, frames[0].line), (&file, line));
        assert_eq!(frames[1].function, outer);
        assert_eq!(frames[1].function, hot.function);
        assert!(frames[1].line > hot.line, "the call of scale is after the HOT line: {frames:?}");
    }

    #[test]
    fn a_stripped_go_binary_is_resolved_like_go_tool_addr2line() {
        resolves_like_go_tool_addr2line(&[]);
    }

    #[test]
    fn a_stripped_position_independent_go_binary_too() {
        resolves_like_go_tool_addr2line(&["-buildmode=pie"]);
    }

    /// The module's symbolizer uses the table when there is no DWARF and no symbol.
    #[test]
    fn a_stripped_go_module_symbolizes_through_its_table() {
        if !have_go() {
            eprintln!("skipped: `go` is not installed (the test builds a Go program)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let exe = build(dir.path(), &[]);
        let (pc, hot) = run(&exe).remove(0);
        let module = crate::module::ModuleFile::load(0, exe.to_str().unwrap(), &exe).unwrap();
        let frames = module.symbolize(pc);
        let (function, file, line) = go_addr2line(&exe, pc, &hot);
        assert_eq!((&frames[0].function, &frames[0].file, frames[0].line), (&function, &file, line));
        assert_eq!(function, hot.function);
    }

    /// Cut and corrupted tables give errors or no frames, never a panic.
    #[test]
    fn damaged_tables_never_panic() {
        if !have_go() {
            eprintln!("skipped: `go` is not installed (the test builds a Go program)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let exe = build(dir.path(), &[]);
        let (pc, _) = run(&exe).remove(0);
        let bytes = std::fs::read(&exe).unwrap();
        let obj = object::File::parse(&*bytes).unwrap();
        let section = obj.section_by_name(".gopclntab").unwrap();
        let (offset, size) = section.file_range().unwrap();
        let (offset, size) = (offset as usize, size as usize);
        let text_start = obj.section_by_name(".text").unwrap().address();
        let mut seed: u64 = 0x9e3779b97f4a7c15;
        let mut random = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let table = &bytes[offset..offset + size];
        for round in 0..300 {
            let mut damaged = table.to_vec();
            if round % 3 == 0 {
                damaged.truncate(random() as usize % size);
            } else {
                for _ in 0..1 + random() % 64 {
                    let at = random() as usize % damaged.len();
                    damaged[at] = random() as u8;
                }
            }
            let len = damaged.len();
            let image: Image = Arc::new(damaged);
            if let Ok(t) = GoLineTable::parse(image, 0..len, text_start) {
                for _ in 0..50 {
                    t.frames(text_start + random() % 0x100000);
                }
                t.frames(pc);
            }
        }
        // The intact table still reads.
        let image: Image = Arc::new(table.to_vec());
        let intact = GoLineTable::parse(image, 0..size, text_start).unwrap();
        assert!(!intact.frames(pc).is_empty());
    }

    /// How long reading a large Go binary's table takes (Debian's gofmt), and that it names
    /// the functions of its text.
    #[test]
    fn debian_gofmt_is_named() {
        let Some(gofmt) = std::fs::read_dir("/usr/lib")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin/gofmt"))
            .find(|p| p.to_string_lossy().contains("/go-") && p.is_file())
        else {
            eprintln!("skipped: no /usr/lib/go-*/bin/gofmt");
            return;
        };
        let started = std::time::Instant::now();
        let table = load(&gofmt);
        let loaded = started.elapsed();
        let first = table.entry_pc(0).unwrap();
        let end = table.entry_pc(table.nfunc).unwrap();
        let started = std::time::Instant::now();
        let mut named = 0;
        let step = ((end - first) / 2000).max(1);
        let mut pc = first;
        while pc < end {
            named += table.frames(pc).iter().filter(|f| !f.function.is_empty() && f.line > 0).count().min(1);
            pc += step;
        }
        eprintln!(
            "{}: {} functions, table read in {loaded:?}; {named} of 2000 addresses named in {:?}",
            gofmt.display(),
            table.nfunc,
            started.elapsed()
        );
        assert!(named > 1900, "{named}");
        let unknown = GoFrame { function: "?".into(), file: String::new(), line: 0 };
        let (function, file, line) = go_addr2line(&gofmt, first + (end - first) / 2, &unknown);
        let frames = table.frames(first + (end - first) / 2);
        let outer = frames.last().unwrap();
        assert_eq!(outer.function, function);
        if frames.len() == 1 {
            assert_eq!((&outer.file, outer.line), (&file, line));
        }
    }
}

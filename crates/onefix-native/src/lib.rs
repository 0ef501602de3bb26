//! Native sampling for onefix: ELF programs (Rust, C, C++, Go) sampled with `perf_event_open`
//! into the same [`onefix_model::Profile`] the Python sampler fills.
//!
//! - On-CPU: the software cpu-clock event at a fixed period (999 Hz by default), one event per
//!   CPU with `inherit`, so every thread and child process the target creates is followed. Each
//!   sample carries the user registers and a copy of the user stack (16 KiB by default), which is
//!   unwound with framehop over the modules' `.eh_frame` / `.debug_frame` (frame pointers where
//!   a module has neither), then symbolized with addr2line (DWARF, separate debug files by
//!   build id, else the symbol table; a Go binary without DWARF by its own `.gopclntab`; else
//!   `0x…` with the module).
//! - Off-CPU: a sample at every context switch (with the stack of the thread that blocks) and
//!   PERF_RECORD_SWITCH records give each blocked interval with the line that waits. Blocked
//!   time becomes samples with [`onefix_model::ThreadState`] not active, weighing the blocked
//!   duration in sampling intervals, so wall mode charges it and cpu mode ignores it.
//!
//! ```no_run
//! use onefix_native::{NativeOptions, NativeSampler};
//! let opts = NativeOptions::default();
//! let (mut sampler, pid) = NativeSampler::spawn(&["./server".to_string()], &opts)?;
//! // Give the profile the sampler's interval: a weight of 1 is one period of the cpu-clock.
//! // meta.rate_hz = opts.rate_hz; meta.weight_unit = WeightUnit::Samples { interval_us: sampler.interval_us() };
//! // onefix_collect::record(&mut sampler, &mut profile, ...) then sampler.finish(...), sampler.reap()
//! # Ok::<(), onefix_native::NativeError>(())
//! ```

mod dump;
mod error;
#[doc(hidden)]
pub mod fixture;
mod gopclntab;
#[doc(hidden)]
pub mod goroutines;
mod module;
mod perf;
mod record;
mod sampler;
mod space;
mod spawn;
mod symbolize;
mod symbols;

pub use dump::native_snapshot;
pub use error::{paranoid_level, NativeError};
pub use sampler::{NativeOptions, NativeSampler, NativeStats};
pub use symbolize::Symbolizer;
pub use symbols::demangle;

use std::io::Read;
use std::path::Path;

/// Whether a file is an ELF executable that native sampling reads (not a Python interpreter,
/// whose frames the Python sampler reads better; not a script).
pub fn is_native_executable(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    let is_elf = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && magic == *b"\x7fELF";
    is_elf && !is_interpreter_name(path)
}

/// Whether a command, as it would be run (found on PATH like a shell does), is native.
pub fn is_native_command(program: &str) -> bool {
    spawn::resolve(program).is_some_and(|p| is_native_executable(&p.canonicalize().unwrap_or(p)))
}

/// How a native program gets its memory, as far as an `LD_PRELOAD` allocation agent can see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapKind {
    /// Dynamically linked, allocating through the C library: the agent sees it.
    Malloc,
    /// Statically linked: the dynamic loader never runs, so no agent is loaded.
    Static,
    /// A Go program: the Go runtime maps its own heap, which malloc never sees.
    Go,
}

/// The [`HeapKind`] of a command as it would be run; `None` when it is not a readable ELF file.
pub fn heap_kind(program: &str) -> Option<HeapKind> {
    use object::{Object, ObjectSymbol};
    let path = spawn::resolve(program)?;
    let data = std::fs::read(path.canonicalize().unwrap_or(path)).ok()?;
    let obj = object::File::parse(&*data).ok()?;
    let go = obj.section_by_name(".go.buildinfo").is_some() || obj.symbols().any(|s| s.name() == Ok("runtime.main"));
    Some(if go {
        HeapKind::Go
    } else if obj.section_by_name(".interp").is_none() {
        HeapKind::Static
    } else {
        HeapKind::Malloc
    })
}

/// Whether a running process is a native program: its executable is ELF and it is not a
/// Python interpreter (by name, or by a mapped libpython).
pub fn is_native_pid(pid: u32) -> bool {
    let exe = Path::new("/proc").join(pid.to_string()).join("exe");
    let target = std::fs::read_link(&exe).unwrap_or_default();
    is_native_executable(&exe) && !is_interpreter_name(&target) && !onefix_collect::process::looks_like_python(pid)
}

/// The directory of the source file that defines a native program's entry function
/// (`main.main` for Go, `<crate>::main` for Rust, `main` for C and C++), read from its
/// executable's debug information: where the program's own code is, wherever its binary was
/// built to. `None` without debug information, or when that file is a system or toolchain source.
pub fn main_source_dir(exe: &Path) -> Option<std::path::PathBuf> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(exe).ok()?;
    let obj = object::File::parse(&*data).ok()?;
    let module = module::ModuleFile::load(0, &exe.display().to_string(), exe)?;
    let named = |want: &str| obj.symbols().find(|s| s.name() == Ok(want) && s.address() != 0).map(|s| s.address());
    // Rust's `main` symbol is a shim the compiler writes (it has no source line): the program's
    // own `main` is the one function named `main` at the top of a crate that is not the
    // standard library's.
    let rust_main = || {
        obj.symbols().filter(|s| s.address() != 0).find_map(|s| {
            let name = demangle(s.name().ok()?);
            let (krate, f) = name.split_once("::")?;
            let own = f == "main"
                && !krate.is_empty()
                && !["std", "core", "alloc", "test"].contains(&krate)
                && krate.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            own.then(|| s.address())
        })
    };
    let dir_of = |entry: u64| {
        let frames = module.symbolize(entry);
        let file = Path::new(&frames.last()?.file).to_owned();
        let system = ["/usr/", "/rustc/", "/build/", "/lib/"].iter().any(|p| file.starts_with(p));
        (file.is_absolute() && !system).then(|| file.parent().map(Path::to_path_buf)).flatten()
    };
    [named("main.main"), rust_main(), named("main")].into_iter().flatten().find_map(dir_of)
}

fn is_interpreter_name(path: &Path) -> bool {
    let base = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    base.starts_with("python") || base.starts_with("pypy")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_without_debug_information_has_no_main_source_dir() {
        assert_eq!(main_source_dir(Path::new("/bin/sh")), None);
        assert_eq!(main_source_dir(Path::new("/no/such/file")), None);
    }

    #[test]
    fn a_dynamically_linked_program_allocates_through_malloc() {
        assert_eq!(heap_kind("true"), Some(HeapKind::Malloc));
        assert_eq!(heap_kind("no-such-command-onefix"), None);
    }

    #[test]
    fn tells_native_from_python_and_scripts() {
        assert!(is_native_executable(Path::new("/bin/sh")) || is_native_executable(Path::new("/usr/bin/dash")));
        assert!(is_native_command("true"));
        assert!(!is_native_command("no-such-command-onefix"));
        if let Some(py) = spawn::resolve("python3") {
            assert!(!is_native_executable(&py.canonicalize().unwrap()));
        }
        assert!(is_native_pid(std::process::id()));
        assert!(!is_native_pid(u32::MAX - 1));
    }
}

#[cfg(test)]
mod send_check {
    fn is_send<T: Send>() {}
    #[test]
    fn the_sampler_can_move_to_another_thread() {
        is_send::<crate::NativeSampler>();
    }
}

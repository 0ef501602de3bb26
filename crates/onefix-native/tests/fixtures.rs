//! Exact tests of unwinding and symbolization over committed binaries and stacks recorded
//! from them (tests/fixtures/README.md has the commands): no live process, no kernel.

use std::path::{Path, PathBuf};

use onefix_native::fixture::StackFixture;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Each recorded stack, innermost first, as "function file:line" (file reduced to its last
/// component), cut after `main` (what lies below is the C library, not committed).
fn stacks(name: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(fixtures().join(format!("{name}.stacks"))).unwrap();
    let fixture = StackFixture::parse(&text).unwrap();
    let stacks = fixture.symbolize(|path| path.ends_with(&format!("/{name}")).then(|| fixtures().join(name)));
    stacks
        .into_iter()
        .map(|frames| {
            let mut out = Vec::new();
            for f in frames {
                let file = f.file.rsplit('/').next().unwrap_or("").to_owned();
                let done = f.function == "main";
                out.push(if f.line > 0 { format!("{} {}:{}", f.function, file, f.line) } else { f.function.clone() });
                if done {
                    break;
                }
            }
            out
        })
        .collect()
}

#[test]
fn c_stacks_unwind_through_eh_frame_to_file_and_line() {
    // gcc -O2 -g, no frame pointers: unwound through .eh_frame, named and located by DWARF.
    let stacks = stacks("hot_wait_c");
    assert_eq!(stacks.len(), 6);
    for s in &stacks {
        assert_eq!(s, &["hot hot_wait.c:21", "compute hot_wait.c:29", "main hot_wait.c:68"]);
    }
}

#[test]
fn rust_stacks_linked_by_lld_unwind_and_name_every_frame() {
    // rustc's default linker (lld) puts the executable segment at a file offset that is not
    // page-aligned: a bias off by a page would name other functions. Symbols only (the
    // committed copy has no DWARF, to stay small); std has no frame pointers.
    let stacks = stacks("hot_rust_lld");
    assert_eq!(stacks.len(), 6);
    for s in &stacks {
        assert_eq!(
            s,
            &[
                "hot_rust::hot",
                "hot_rust::compute",
                "hot_rust::main",
                "std::sys::backtrace::__rust_begin_short_backtrace",
                "std::rt::lang_start::{{closure}}",
                "std::rt::lang_start_internal",
                "main",
            ]
        );
    }
}

#[test]
fn the_text_format_round_trips() {
    let text = std::fs::read_to_string(fixtures().join("hot_wait_c.stacks")).unwrap();
    let f = StackFixture::parse(&text).unwrap();
    assert_eq!(StackFixture::parse(&f.to_text()).unwrap(), f);
}

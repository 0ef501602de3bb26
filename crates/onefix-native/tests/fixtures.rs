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

/// Each recorded goroutine stack, innermost first, as "function file:line".
fn goroutine_stacks(name: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(fixtures().join(format!("{name}.stacks"))).unwrap();
    let fixture = StackFixture::parse(&text).unwrap();
    let stacks = fixture.symbolize(|path| path.ends_with(&format!("/{name}")).then(|| fixtures().join(name)));
    stacks
        .into_iter()
        .map(|frames| {
            frames
                .iter()
                .map(|f| format!("{} {}:{}", f.function, f.file.rsplit('/').next().unwrap_or(""), f.line))
                .collect()
        })
        .collect()
}

#[test]
fn go_goroutine_stacks_unwind_from_their_saved_registers() {
    // Go 1.19, go build: the registers a parked goroutine saved (g.sched) and its stack from
    // there, unwound through Go's compressed .debug_frame, named by its DWARF.
    let stacks = goroutine_stacks("wait_go");
    let park = ["runtime.gopark proc.go:364"];
    let netpoll = [
        "runtime.netpollblock netpoll.go:526",
        "internal/poll.runtime_pollWait netpoll.go:305",
        "internal/poll.(*pollDesc).wait fd_poll_runtime.go:84",
        "internal/poll.(*pollDesc).waitRead fd_poll_runtime.go:89",
    ];
    let join: Vec<&str> = park
        .iter()
        .copied()
        .chain([
            "runtime.goparkunlock proc.go:369",
            "runtime.semacquire1 sema.go:150",
            "sync.runtime_Semacquire sema.go:62",
            "sync.(*WaitGroup).Wait waitgroup.go:139",
            "main.main wait_go.go:46",
            "runtime.main proc.go:250",
            "runtime.goexit asm_amd64.s:1594",
        ])
        .collect();
    let accept: Vec<&str> = park
        .iter()
        .chain(&netpoll)
        .copied()
        .chain([
            "internal/poll.(*FD).Accept fd_unix.go:614",
            "net.(*netFD).accept fd_unix.go:172",
            "net.(*TCPListener).accept tcpsock_posix.go:142",
            "net.(*TCPListener).Accept tcpsock.go:288",
            "main.main.func1 wait_go.go:33",
            "runtime.goexit asm_amd64.s:1594",
        ])
        .collect();
    let read: Vec<&str> = park
        .iter()
        .chain(&netpoll)
        .copied()
        .chain([
            "internal/poll.(*FD).Read fd_unix.go:167",
            "net.(*netFD).Read fd_posix.go:55",
            "net.(*conn).Read net.go:183",
            "main.waitForReply wait_go.go:22",
            "main.main.func2 wait_go.go:44",
            "runtime.goexit asm_amd64.s:1594",
        ])
        .collect();
    assert_eq!(stacks, vec![join, accept, read]);
}

#[test]
fn go_runtime_layout_is_read_from_dwarf_and_refused_without_it() {
    use onefix_native::goroutines::{GoLayoutError, GoRuntime};
    let exe = fixtures().join("wait_go");
    let go = GoRuntime::from_file(&exe).unwrap().expect("a Go program");
    let l = &go.layout;
    // runtime.g of Go 1.19 on amd64: stack{lo, hi} first, sched (gobuf: sp, pc, g, ctxt, ret,
    // lr, bp) at 56, then atomicstatus and goid.
    assert_eq!(
        (l.g_size, l.g_stack_hi, l.g_sched_sp, l.g_sched_pc, l.g_sched_bp, l.g_status, l.g_goid),
        (392, 8, 56, 64, 104, 144, 152)
    );
    assert_eq!((l.slice_array, l.slice_len), (0, 8));
    assert_eq!(go.wait_reason(2), Some("IO wait"));
    assert!(go.is_runtime_wait(24), "{:?}", go.wait_reason(24));
    assert!(!go.is_runtime_wait(2) && !go.is_runtime_wait(14), "IO wait and chan receive are the program's own");

    // The same binary without its DWARF (as `go build -ldflags=-w` makes it) is refused, in a
    // sentence that says how to fix it.
    let dir = tempfile::tempdir().unwrap();
    let stripped = dir.path().join("wait_go");
    let ok = std::process::Command::new("objcopy")
        .arg("--strip-debug")
        .arg(&exe)
        .arg(&stripped)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped the stripped half: no objcopy");
        return;
    }
    let err = GoRuntime::from_file(&stripped).unwrap_err();
    assert!(matches!(err, GoLayoutError::NoDwarf(_)));
    assert!(err.to_string().ends_with("build it with plain `go build` to see them"), "{err}");
    assert_eq!(GoRuntime::from_file(Path::new("/bin/sh")).unwrap().map(|_| ()), None);
}

//! Nothing onefix reads is read without a bound (issue 33): `report` of `/dev/zero`, of a 3 GB
//! sparse file, of a recording whose chunk claims 512 MiB it does not hold, and of a pprof URL
//! that sends 2 GB, each end in one sentence within a memory limit (`ulimit -v`); a stack of
//! 30,000 frames renders to HTML and SVG.
//!
//! Servers listen on 127.0.0.1 only; every loop is bounded.

mod common;
use common::{onefix, Scratch};

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::Duration;

/// onefix with its address space limited to `kib` KiB, as `ulimit -v` sets it.
fn onefix_within(kib: u64, args: &[&str]) -> Output {
    Command::new("bash")
        .args(["-c", &format!("ulimit -v {kib}; exec \"$0\" \"$@\""), env!("CARGO_BIN_EXE_onefix")])
        .args(args)
        .output()
        .unwrap()
}

/// The one line on stderr of a run that failed as bad input (status 2), not a crash.
fn one_sentence(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "exactly one sentence on stderr, got: {err}");
    assert_eq!(out.status.code(), Some(2), "{err}");
    lines[0].to_owned()
}

/// Twice the cap and more: a read that were not bounded would not fit.
const LIMIT_KIB: u64 = 2_000_000;

#[test]
fn a_special_file_and_a_huge_sparse_file_end_in_one_sentence_within_the_memory_limit() {
    let sentence = one_sentence(&onefix_within(LIMIT_KIB, &["report", "/dev/zero"]));
    assert!(sentence.contains("/dev/zero goes on, more than the 512 MiB onefix reads of a profile"), "{sentence}");

    let s = Scratch::new("sparse");
    let big = s.arg("big.prof");
    assert!(Command::new("truncate").args(["-s", "3G", &big]).status().unwrap().success());
    let sentence = one_sentence(&onefix_within(LIMIT_KIB, &["report", &big]));
    assert!(sentence.contains("is 3.2 GB, more than the 512 MiB onefix reads of a profile"), "{sentence}");
}

#[test]
fn a_recording_whose_chunk_claims_more_than_the_file_holds_allocates_nothing_for_it() {
    let s = Scratch::new("claims");
    let mut bytes = b"ONEFIX\0R".to_vec();
    bytes.extend_from_slice(&2u32.to_le_bytes());
    // A metadata chunk (tag 1) declaring 512 MiB, with its checksum, and 3 bytes of it.
    bytes.push(1);
    bytes.extend_from_slice(&(512u32 << 20).to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(b"abc");
    std::fs::write(s.path("claims.onefix"), &bytes).unwrap();
    // Less than the claimed chunk: reserving it before reading would abort.
    let sentence = one_sentence(&onefix_within(300_000, &["report", &s.arg("claims.onefix")]));
    assert!(sentence.contains("ends before its metadata"), "{sentence}");
}

/// Serves one GET with a body of `total` zero bytes, announcing its length or not; returns the
/// URL. The body is written until the client stops reading or `total` is sent.
fn endless_server(total: u64, announce_length: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        conn.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut request = [0u8; 4096];
        let _ = conn.read(&mut request);
        let length = if announce_length { format!("Content-Length: {total}\r\n") } else { String::new() };
        let head = format!("HTTP/1.1 200 OK\r\n{length}Connection: close\r\n\r\n");
        if conn.write_all(head.as_bytes()).is_err() {
            return;
        }
        let zeros = vec![0u8; 1 << 20];
        let mut sent = 0u64;
        while sent < total {
            if conn.write_all(&zeros).is_err() {
                return;
            }
            sent += zeros.len() as u64;
        }
    });
    format!("http://127.0.0.1:{port}/debug/pprof/profile?seconds=1")
}

#[test]
fn a_pprof_url_that_sends_two_gigabytes_ends_in_one_sentence_within_the_memory_limit() {
    for announce_length in [true, false] {
        let url = endless_server(2 << 30, announce_length);
        let sentence = one_sentence(&onefix_within(LIMIT_KIB, &["report", &url]));
        assert!(sentence.contains("sent more than the 512 MiB onefix reads of a profile"), "{sentence}");
    }
}

#[test]
fn a_stack_of_thirty_thousand_frames_renders_to_html_and_svg() {
    let s = Scratch::new("deep-stack");
    let stack: Vec<String> = (0..30_000).map(|i| format!("frame_{i}")).collect();
    std::fs::write(s.path("deep.folded"), format!("{} 5\nmain;other 3\n", stack.join(";"))).unwrap();
    let out = onefix()
        .args(["report", &s.arg("deep.folded"), "--html", &s.arg("deep.html"), "--flamegraph", &s.arg("deep.svg")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(s.path("deep.html")).unwrap();
    assert!(html.contains("frame_29999"), "the deepest frame is in the page");
    let svg = std::fs::read_to_string(s.path("deep.svg")).unwrap();
    assert!(svg.contains("frame_0"), "the graph is drawn");
}

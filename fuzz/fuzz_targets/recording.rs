//! The `.onefix` reader and everything `onefix report` does with what it reads: any bytes must
//! give a recording or an error, never a panic, and a recording read must diagnose and render.
//!
//! Chunks carry a CRC-32 that random mutations would almost never satisfy, so the fuzzer would
//! stop at the checksum; the checksums of whole chunks are recomputed first, so that the
//! mutations reach the payload decoder and the batch validation behind it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onefix_diagnose::{diagnose, KnowledgeBase, Options, UserCode};
use onefix_model::recording::read_recording;
use onefix_report::{write_folded, write_json, write_speedscope, write_terminal, FoldedOptions, JsonOptions, TerminalOptions};

/// Rewrites every complete chunk's checksum to match its payload (layout in recording.rs:
/// 12-byte header, then chunks of tag u8, length u32 LE, crc u32 LE, payload).
fn fix_checksums(bytes: &mut [u8]) {
    let mut at = 12;
    while at + 9 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        let Some(end) = (at + 9).checked_add(len).filter(|&e| e <= bytes.len()) else { break };
        let crc = crc32(&bytes[at + 9..end]);
        bytes[at + 5..at + 9].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}

/// CRC-32 (IEEE), as crc32fast computes it; bitwise, fine for fuzz inputs.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    fix_checksums(&mut bytes);
    let Ok(loaded) = read_recording(&bytes[..]) else { return };
    let profile = loaded.profile;
    // Compiling the knowledge base's patterns dwarfs reading a recording: once per process.
    static KB: std::sync::OnceLock<KnowledgeBase> = std::sync::OnceLock::new();
    let kb = KB.get_or_init(KnowledgeBase::builtin);
    let user = UserCode::new(profile.meta.user_code.iter().map(std::path::PathBuf::from), None);
    let diagnosis = diagnose(&profile, kb, &user, &Options { mode: profile.meta.mode, ..Options::default() });
    let mut sink = Vec::new();
    let _ = write_json(&mut sink, &profile, &diagnosis, &JsonOptions { complete: loaded.complete });
    let _ = write_terminal(&mut sink, &profile, &diagnosis, &TerminalOptions::default());
    let _ = write_folded(&mut sink, &profile, profile.meta.mode, &FoldedOptions::default());
    let _ = write_speedscope(&mut sink, &profile, profile.meta.mode);
});

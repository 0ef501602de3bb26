//! The knowledge-base loader: any text as a kb/*.toml file must load or give an error, never a
//! panic, and a knowledge base that loads must match names without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onefix_diagnose::KnowledgeBase;
use onefix_model::FrameKind;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Twice over, so that the same entries meet themselves (duplicate ids across files). The
    // shipped files are not loaded beside it: compiling their patterns at every run would
    // slow the fuzzer a hundredfold; they are among the seeds instead.
    let _ = KnowledgeBase::load([("a.toml", text), ("b.toml", text)]);
    if let Ok(kb) = KnowledgeBase::load([("fuzz.toml", text)]) {
        for e in &kb.entries {
            for name in ["ssl.SSLContext.load_verify_locations", "", "a.b.c", text] {
                let _ = e.matches_frame(FrameKind::Python, name);
                let _ = e.matches_frame(FrameKind::Native, name);
                let _ = e.matches_call(name);
            }
        }
    }
});

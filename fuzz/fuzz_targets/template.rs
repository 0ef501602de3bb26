//! The load template parser: any text, in each place a template goes, must compile or give an
//! error, never a panic; a template that compiles must render requests that stay within what
//! its place allows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onefix_load::template::{Compiler, Place, RenderCtx};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Pools of up to 10 million values are valid, and building one under the sanitizer takes
    // longer than libFuzzer's timeout: inputs with numbers above 10,000 are left to the unit
    // tests (the pool's byte bound is one), so the fuzzer spends its time on the parser.
    let big_number = text.split(|c: char| !c.is_ascii_digit()).any(|d| d.len() > 4);
    if big_number {
        return;
    }
    for place in [Place::Url, Place::Header, Place::Body] {
        let mut compiler = Compiler::new(7);
        let Ok(template) = compiler.compile(text, place) else { continue };
        let mut ctx = RenderCtx::new(7, compiler.var_count());
        for seq in 0..4 {
            ctx.begin(seq);
            let mut out = Vec::new();
            ctx.render(&template, &mut out);
            match place {
                Place::Url => assert!(out.iter().all(|b| (0x21..0x7f).contains(b)), "URL bytes {out:?} from {text:?}"),
                Place::Header => assert!(!out.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0), "header bytes {out:?} from {text:?}"),
                Place::Body => {}
            }
        }
    }
});

//! The load template parser: any text, in each place a template goes, must compile or give an
//! error, never a panic; a template that compiles must render requests that stay within what
//! its place allows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onefix_load::template::{Compiler, Place, RenderCtx};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
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

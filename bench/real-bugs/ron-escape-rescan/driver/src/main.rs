//! Loads a site's pages, stored as a RON map from path to Markdown body, into a `BTreeMap`.
//! Each body is one string literal whose line breaks are escapes (`\n`), as
//! any serializer writes them: the case of ron-rs/ron#610, a string with many escapes.

use std::collections::BTreeMap;
use std::fmt::Write;

const PAGES: usize = 60;
const LINES_PER_PAGE: usize = 4_000;

fn site() -> String {
    let mut doc = String::from("{\n");
    for page in 0..PAGES {
        let _ = write!(doc, "    \"/docs/page-{page}.md\": \"# Page {page}\\n\\n");
        for line in 0..LINES_PER_PAGE {
            let _ = write!(
                doc,
                "Line {line} of the guide: set `retries = {}` and restart.\\n",
                line % 7
            );
        }
        doc.push_str("\",\n");
    }
    doc.push('}');
    doc
}

fn main() {
    let doc = site();
    let pages: BTreeMap<String, String> = ron::from_str(&doc).expect("the site is valid RON");
    let bytes: usize = pages.values().map(String::len).sum();
    println!("loaded {} pages, {bytes} bytes of Markdown", pages.len());
}

//! Reads a wide table exported as XML, one element per row with one attribute per column,
//! and sums the cells: every start tag's attributes go through `BytesStart::attributes()`
//! with its default duplicate-name check (tafia/quick-xml#969, RUSTSEC-2026-0194).

use quick_xml::events::Event;
use quick_xml::Reader;
use std::fmt::Write;

const ROWS: usize = 550;
const COLUMNS: usize = 2_000;

fn wide_table() -> String {
    let mut doc = String::from("<table>\n");
    for row in 0..ROWS {
        doc.push_str("  <row");
        for column in 0..COLUMNS {
            let _ = write!(doc, " c{column}=\"{}\"", (row * 7 + column) % 1000);
        }
        doc.push_str("/>\n");
    }
    doc.push_str("</table>\n");
    doc
}

fn main() {
    let doc = wide_table();
    let mut reader = Reader::from_str(&doc);
    let (mut cells, mut total) = (0usize, 0u64);
    loop {
        match reader.read_event().expect("the table is well-formed XML") {
            Event::Empty(row) if row.name().as_ref() == b"row" => {
                for cell in row.attributes() {
                    let cell = cell.expect("no column repeats");
                    let value: u64 = std::str::from_utf8(&cell.value).unwrap().parse().unwrap();
                    total += value;
                    cells += 1;
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    println!("read {cells} cells, sum {total}");
}

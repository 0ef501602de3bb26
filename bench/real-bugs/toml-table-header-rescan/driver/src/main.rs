//! Loads a generated library of radio stations, one small `[table]` per station, the document
//! shape of toml-rs/toml-rs#342 (a 4 MB file of small tables that took minutes to load).

use std::fmt::Write;

const STATIONS: usize = 22_000;

fn library() -> String {
    let mut doc = String::new();
    for id in 0..STATIONS {
        let _ = write!(
            doc,
            "[station-{id}]\nname = \"Station {id}\"\nurl = \"http://radio.example/{id}.mp3\"\ntags = [\"genre-{}\"]\n\n",
            id % 40
        );
    }
    doc
}

fn main() {
    let doc = library();
    let value: toml::Value = toml::from_str(&doc).expect("the library is valid TOML");
    let stations = value.as_table().map_or(0, |table| table.len());
    println!("loaded {stations} stations from {} bytes of TOML", doc.len());
}

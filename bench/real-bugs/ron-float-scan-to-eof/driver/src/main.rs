//! Loads a sensor log written as RON into `ron::Value` (the untyped model a converter or a
//! config inspector uses), the way ron-rs/ron#608 describes: a document full of numbers and
//! with no `..` range in it.

use std::fmt::Write;

const RECORDS: usize = 2_300;
const READINGS_PER_RECORD: usize = 12;

fn sensor_log() -> String {
    let mut doc = String::from("[\n");
    for id in 0..RECORDS {
        let _ = write!(doc, "    (id: {id}, station: \"st-{}\", readings: [", id % 97);
        for k in 0..READINGS_PER_RECORD {
            let reading = ((id * 31 + k * 7) % 1000) as f64 / 8.0 - 40.0;
            let _ = write!(doc, "{reading:.3}, ");
        }
        doc.push_str("]),\n");
    }
    doc.push(']');
    doc
}

fn main() {
    let doc = sensor_log();
    let value: ron::Value = ron::from_str(&doc).expect("the sensor log is valid RON");
    let records = match &value {
        ron::Value::Seq(records) => records.len(),
        _ => 0,
    };
    println!("loaded {records} records from {} bytes of RON", doc.len());
}

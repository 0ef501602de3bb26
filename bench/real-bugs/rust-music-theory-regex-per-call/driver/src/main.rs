//! Spells out the notes of every chord of a batch of lead sheets written as chord names
//! ("C major seventh", "F# minor"), with the library's chord-name parser `Chord::from_regex`
//! (ozankasikci/rust-music-theory#10: each call built its regexes again).

use rust_music_theory::chord::Chord;
use rust_music_theory::note::Notes;

const SHEETS: usize = 60;

const PROGRESSION: [&str; 12] = [
    "C major", "A minor", "D minor seventh", "G dominant seventh", "E minor", "F major seventh",
    "B diminished", "Bb major", "G# augmented", "D suspended4", "F# half diminished seventh", "Eb major ninth",
];

fn main() {
    let (mut chords, mut notes) = (0usize, 0usize);
    for sheet in 0..SHEETS {
        for name in PROGRESSION.iter().cycle().skip(sheet % 12).take(24) {
            let chord = Chord::from_regex(name).expect("a valid chord name");
            notes += chord.notes().len();
            chords += 1;
        }
    }
    println!("spelled {chords} chords, {notes} notes");
}

//! Flame graph SVG, drawn by inferno from the same collapsed stacks [`crate::write_folded`]
//! writes.

use std::io::{self, Write};

use inferno::flamegraph::color::{BasicPalette, MultiPalette, Palette};
use inferno::flamegraph::{self, Options};
use onefix_model::{Language, Mode, Profile, WeightUnit};

use crate::describe;
use crate::folded::{folded_stacks, FoldedOptions};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlamegraphOptions {
    /// The graph's title; by default `onefix: <command line>`.
    pub title: Option<String>,
    /// Split the graph by thread first (see [`FoldedOptions::thread_prefix`]).
    pub thread_prefix: bool,
}

/// Writes a flame graph of the samples that count in `mode`.
///
/// Colours are chosen by hashing each frame's name, never at random, so the same profile gives
/// the same bytes. A profile with nothing to draw in `mode` is an error (`InvalidData`) and
/// writes nothing.
pub fn write_flamegraph<W: Write>(w: W, profile: &Profile, mode: Mode, opts: &FlamegraphOptions) -> io::Result<()> {
    let folded = folded_stacks(profile, mode, &FoldedOptions { thread_prefix: opts.thread_prefix });
    if folded.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("no samples count in {} mode: there is no flame graph to draw", mode.as_str()),
        ));
    }
    let lines: Vec<String> = folded.iter().map(|(stack, weight)| xml_text(&format!("{stack} {weight}"))).collect();

    let mut options = Options::default();
    let title =
        opts.title.clone().unwrap_or_else(|| format!("onefix: {}", describe::command_line(&profile.meta.target)));
    options.title = xml_text(&title);
    options.subtitle = Some(xml_text(&subtitle(profile, mode)));
    options.deterministic = true;
    let (colors, count_name) = match profile.meta.weight_unit {
        WeightUnit::Bytes => (Palette::Basic(BasicPalette::Mem), "bytes"),
        WeightUnit::Samples { .. } => {
            let palette = match profile.meta.target.language {
                Some(Language::Python) => MultiPalette::Python,
                // onefix's native targets are Rust, C, C++ and Go; the Rust palette tells the
                // standard library and runtime apart from the program's own frames.
                Some(Language::Native) | None => MultiPalette::Rust,
            };
            (Palette::Multi(palette), "samples")
        }
    };
    options.colors = colors;
    options.count_name = count_name.to_owned();

    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), w)
}

/// Text for the SVG, which must stay XML 1.0: the characters it forbids (the C0 controls, tab
/// and line breaks aside, and U+FFFE, U+FFFF) would make a browser draw nothing. Control
/// characters are shown escaped, as on a terminal; the two non-characters become U+FFFD.
fn xml_text(text: &str) -> String {
    let shown = onefix_model::fmt::escape_controls(text);
    shown.replace(['\u{fffe}', '\u{ffff}'], "\u{fffd}")
}

/// `wall time, 100 Hz, 12.3 s`: what the widths stand for.
fn subtitle(profile: &Profile, mode: Mode) -> String {
    let meta = &profile.meta;
    match meta.weight_unit {
        WeightUnit::Samples { .. } => {
            format!("{} time, {}, {}", mode.as_str(), describe::hertz(meta.rate_hz), describe::seconds(meta.duration_s))
        }
        WeightUnit::Bytes => format!("allocated bytes, {}", describe::seconds(meta.duration_s)),
    }
}

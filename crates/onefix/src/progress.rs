//! The progress line of `record` on a terminal: elapsed time, samples, read errors and the line
//! of the user's code that is hot right now.
//!
//! The recording loop moves samples to disk about once a second, so the line cannot be worked
//! out from the profile at that moment: a sampler wrapper looks at the weight each tick adds
//! (merged samples grow in place) and keeps decaying counts per user line.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use onefix_collect::{Sampler, Tick};
use onefix_diagnose::frontier::Frontier;
use onefix_diagnose::{Origin, UserCode};
use onefix_model::{FrameId, Mode, Profile, StackId};

/// Each second, older counts weigh this much less: the line says what is hot now, not since
/// the start.
const DECAY_PER_SECOND: f64 = 0.5;
/// The line never wraps on a normal terminal.
const WIDTH: usize = 100;

pub struct Progress {
    user: UserCode,
    mode: Mode,
    /// Weight of each sample in the profile already counted, by index.
    seen: Vec<u32>,
    /// Set by the recording loop's flush: the profile's samples went to disk.
    pub flushed: bool,
    frontier: HashMap<Option<StackId>, Option<FrameId>>,
    recent: HashMap<FrameId, f64>,
    recent_total: f64,
    pub samples: u64,
}

impl Progress {
    pub fn new(user: UserCode, mode: Mode) -> Progress {
        Progress {
            user,
            mode,
            seen: Vec::new(),
            flushed: false,
            frontier: HashMap::new(),
            recent: HashMap::new(),
            recent_total: 0.0,
            samples: 0,
        }
    }

    /// Counts what the last tick added to the profile.
    fn account(&mut self, profile: &Profile) {
        if std::mem::take(&mut self.flushed) {
            self.seen.clear();
        }
        for (i, sample) in profile.samples.iter().enumerate() {
            let before = self.seen.get(i).copied().unwrap_or(0);
            if i < self.seen.len() {
                self.seen[i] = sample.weight;
            } else {
                self.seen.push(sample.weight);
            }
            let added = sample.weight.saturating_sub(before);
            if added == 0 {
                continue;
            }
            self.samples += u64::from(added);
            if !self.mode.counts(sample.state) {
                continue;
            }
            self.recent_total += f64::from(added);
            let user = &self.user;
            let line = *self.frontier.entry(sample.stack).or_insert_with(|| {
                let leaf_first: Vec<FrameId> = profile.stack_frames_leaf_first(sample.stack).collect();
                Frontier::of(&leaf_first, |f| user.origin(profile.frame(f)) == Origin::User).map(|s| s.frame)
            });
            if let Some(frame) = line {
                *self.recent.entry(frame).or_default() += f64::from(added);
            }
        }
    }

    /// The line to print, and the decay of the counts for the next second.
    pub fn line(&mut self, profile: &Profile, elapsed: Duration) -> String {
        let mut text = format!(
            "onefix: {:.0} s, {} samples, {} read errors",
            elapsed.as_secs_f64(),
            self.samples,
            profile.meta.stats.errors
        );
        let top = self.recent.iter().max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(a.0)));
        if let Some((&frame, &weight)) = top {
            let f = profile.frame(frame);
            let file = onefix_model::fmt::file_name(&f.file);
            let share = if self.recent_total > 0.0 { weight / self.recent_total } else { 0.0 };
            let now = format!(", now: {file}:{} {} ({:.0}%)", f.line, f.function, share * 100.0);
            text.push_str(&onefix_model::fmt::escape_controls(&now));
        }
        for weight in self.recent.values_mut() {
            *weight *= DECAY_PER_SECOND;
        }
        self.recent.retain(|_, w| *w >= 0.5);
        self.recent_total *= DECAY_PER_SECOND;
        if text.chars().count() > WIDTH {
            text = text.chars().take(WIDTH - 1).collect::<String>() + "…";
        }
        text
    }
}

/// A sampler that tells [`Progress`] what each tick added.
pub struct Watched<'a> {
    pub inner: &'a mut dyn Sampler,
    pub progress: Rc<RefCell<Progress>>,
}

impl Sampler for Watched<'_> {
    fn tick(&mut self, profile: &mut Profile, time_us: u64) -> Tick {
        let tick = self.inner.tick(profile, time_us);
        self.progress.borrow_mut().account(profile);
        tick
    }
}

/// The progress line kept on the terminal's last row, out of the way of the target's own
/// output: the rows above it become the scrolling region (as apt draws its progress bar), so
/// whatever the target prints scrolls there and never lands on the line, and the line is
/// redrawn in place. On a terminal too small for a region, the line is drawn where the cursor
/// is, cleared first.
pub struct StatusLine {
    rows: Option<u16>,
}

impl StatusLine {
    /// Reserves the last row of the terminal on stderr.
    pub fn reserve() -> StatusLine {
        let rows = terminal_rows().filter(|&r| r >= 4);
        if let Some(rows) = rows {
            // A new line to make room, then the region above the last row; the cursor goes
            // back to where the text continues.
            eprint!("\n\x1b7\x1b[1;{}r\x1b8\x1b[1A", rows - 1);
        }
        StatusLine { rows }
    }

    pub fn draw(&mut self, text: &str) {
        let now = terminal_rows().filter(|&r| r >= 4);
        match (self.rows, now) {
            (Some(was), Some(rows)) => {
                if rows != was {
                    // The terminal was resized: the region follows it.
                    eprint!("\x1b7\x1b[1;{}r\x1b8", rows - 1);
                    self.rows = Some(rows);
                }
                eprint!("\x1b7\x1b[{rows};1H\x1b[2K{text}\x1b8");
            }
            _ => eprint!("\r\x1b[2K{text}"),
        }
    }

    /// Gives the whole terminal back, with the last row cleared.
    pub fn release(self) {
        match self.rows {
            Some(_) => {
                let rows = terminal_rows().unwrap_or(self.rows.unwrap_or(24));
                eprint!("\x1b7\x1b[r\x1b[{rows};1H\x1b[2K\x1b8");
            }
            None => eprint!("\r\x1b[2K"),
        }
    }
}

/// The terminal's height, from stderr.
fn terminal_rows() -> Option<u16> {
    crate::outputs::terminal_size(libc::STDERR_FILENO).map(|(_, rows)| rows.min(u16::MAX as usize) as u16)
}

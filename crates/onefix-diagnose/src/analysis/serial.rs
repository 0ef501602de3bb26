//! Serial waits in a loop: the work/span bound. A loop that waits for each reply before sending
//! the next request gains, once its calls overlap, what the calls' waits add up to less the
//! slowest call, which still has to be waited for: T' ≥ T − Σw + max w (Cilkview's span law
//! applied to a loop of calls). Amdahl's law over the waits' share says nothing useful here: the
//! waits are nearly all of the run, and removing them is not what the fix does.
//!
//! The calls are counted, not assumed. Back-to-back waits at one line look like one long wait
//! to a sampler (a 100 ms call is ten samples at the same stack, and the next call starts within
//! a millisecond); the collector reads each waiting thread's count of runs on a CPU at every tick
//! (`ThreadState::same_wait`), so a wait seen at two ticks with a run in between is two calls.

use super::*;

/// Below this share of the line's waiting weight read with the run count, the calls are not
/// counted (an older recording, a native or imported profile, hundreds of waiting threads).
const MIN_READ: f64 = 0.8;

/// The waits of one line, split into the calls they are.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SerialWaits {
    /// Calls seen (a call shorter than a tick between two longer ones is not counted apart).
    pub calls: u64,
    /// The longest call, in weight units (sampling intervals).
    pub slowest: u64,
    /// Every call's wait added up, in weight units.
    pub total: u64,
}

impl SerialWaits {
    /// The predicted speedup of `run` weight units of wall time if the calls overlapped: the
    /// slowest call stays, and so does everything else the run does.
    pub fn speedup(&self, run: u64) -> Option<f64> {
        let remaining = self.remaining(run)?;
        (self.calls > 1 && remaining > 0).then(|| run as f64 / remaining as f64)
    }

    /// What stays of `run` once the calls overlap: the rest of the run and the slowest call.
    pub fn remaining(&self, run: u64) -> Option<u64> {
        Some(run.checked_sub(self.total)? + self.slowest)
    }
}

/// Splits a thread's samples into calls: `samples` are one thread's, in time order, each given
/// as (waits at the line, whether it continues the thread's previous sample's wait, weight).
/// Returns the calls' lengths and the weight whose continuation was not read.
pub(super) fn split_calls(samples: impl IntoIterator<Item = (bool, Option<bool>, u64)>) -> (Vec<u64>, u64) {
    let mut calls = Vec::new();
    let mut unread = 0;
    let mut current: Option<u64> = None;
    for (at_line, same_wait, weight) in samples {
        if !at_line {
            calls.extend(current.take());
            continue;
        }
        match (current.as_mut(), same_wait) {
            (Some(length), Some(true)) => *length += weight,
            (Some(length), None) => {
                // Not read: taken as the same call, which undercounts the calls and makes the
                // bound smaller, never larger; too much of it and no count is given.
                unread += weight;
                *length += weight;
            }
            (Some(_), Some(false)) | (None, _) => {
                calls.extend(current.replace(weight));
            }
        }
    }
    calls.extend(current);
    (calls, unread)
}

impl Engine<'_> {
    /// A batch program recorded to its end: what its user waits for is the whole run (not a
    /// server under load, nor a run cut short).
    pub(super) fn batch_run(&self) -> bool {
        let profile = self.profile;
        matches!(profile.meta.exit, Some(TargetExit::Code(_) | TargetExit::Signal(_) | TargetExit::Unknown))
            && !profile.attachments.contains_key(onefix_model::attachments::LOAD)
    }

    /// The wall time of a program recorded to its end, first sample to last, in weight units:
    /// what a user of a batch program waits for. `None` for a run cut short or a server.
    pub(super) fn whole_run_weight(&self) -> Option<u64> {
        let profile = self.profile;
        let WeightUnit::Samples { interval_us } = profile.meta.weight_unit else { return None };
        if !self.batch_run() {
            return None;
        }
        // A sample covers its weight's intervals from its time: a native blocked interval is one
        // sample weighing its whole length.
        let interval_us = interval_us.max(1);
        let first = profile.samples.iter().map(|s| s.time_us).min()?;
        let end = profile.samples.iter().map(|s| s.time_us + s.weight as u64 * interval_us).max()?;
        Some((end - first).div_ceil(interval_us) + self.unsampled_head())
    }

    /// What ran of a program onefix started before its first sample (its interpreter's
    /// start-up), in weight units, when the run went to its end: part of what its user waits
    /// for, and part of what a fix leaves. Before it was kept, and for a run cut short, 0.
    pub(super) fn unsampled_head(&self) -> u64 {
        let profile = self.profile;
        let WeightUnit::Samples { interval_us } = profile.meta.weight_unit else { return 0 };
        let Some(start) = profile.program_start().filter(|_| self.batch_run()) else { return 0 };
        let first = profile.samples.iter().map(|s| s.time_us).min().unwrap_or(0);
        (start.unsampled_us + first) / interval_us.max(1)
    }

    /// The waits at line `l` split into calls, when the recording says where one call ends and
    /// the next begins for most of them.
    pub(super) fn serial_waits(&mut self, l: usize) -> Option<SerialWaits> {
        let profile = self.profile;
        let mut by_thread: HashMap<ThreadId, Vec<(bool, Option<bool>, u64)>> = HashMap::new();
        for s in &profile.samples {
            let at_line = !self.running(s) && self.line_of(s.stack) == Some(l);
            by_thread.entry(s.thread).or_default().push((at_line, s.state.same_wait(), s.weight as u64));
        }
        let (mut calls, mut unread) = (Vec::new(), 0);
        for samples in by_thread.into_values() {
            let (c, u) = split_calls(samples);
            calls.extend(c);
            unread += u;
        }
        let total: u64 = calls.iter().sum();
        if total == 0 || (unread as f64) > (1.0 - MIN_READ) * total as f64 {
            return None;
        }
        Some(SerialWaits { calls: calls.len() as u64, slowest: calls.iter().copied().max()?, total })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_to_back_waits_are_split_where_the_thread_ran() {
        let w = |same| (true, same, 1);
        // Three calls of 3, 2 and 4 ticks, the thread running between them unseen by the
        // stack; then work, then one more call.
        let samples = vec![
            w(None),
            w(Some(true)),
            w(Some(true)),
            w(Some(false)),
            w(Some(true)),
            w(Some(false)),
            w(Some(true)),
            w(Some(true)),
            w(Some(true)),
            (false, None, 1),
            w(None),
        ];
        let (calls, unread) = split_calls(samples);
        assert_eq!(calls, vec![3, 2, 4, 1]);
        assert_eq!(unread, 0);
    }

    #[test]
    fn an_unread_continuation_is_the_same_call_and_is_counted() {
        let (calls, unread) = split_calls(vec![(true, None, 1), (true, None, 1), (true, Some(false), 1)]);
        assert_eq!(calls, vec![2, 1]);
        assert_eq!(unread, 1);
    }

    #[test]
    fn the_slowest_call_stays() {
        // 10 calls of 10 ticks in a run of 110: overlapped, 10 + 10 remain.
        let waits = SerialWaits { calls: 10, slowest: 10, total: 100 };
        assert_eq!(waits.speedup(110), Some(110.0 / 20.0));
        // One call has nothing to overlap with.
        assert_eq!(SerialWaits { calls: 1, slowest: 100, total: 100 }.speedup(110), None);
    }
}

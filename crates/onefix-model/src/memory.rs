//! Memory profiles: a [`Profile`] whose weight unit is bytes, one sample per sampled
//! allocation (its estimated bytes at its stack) and one per free of a sampled allocation
//! (flagged [`ThreadState::FREED`]). Retained bytes at any time are the allocations minus the
//! frees up to it; the views below turn that event log into profiles every writer reads.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::profile::{Profile, Sample, StackId, ThreadId, ThreadState};

/// Which bytes a memory view weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryView {
    /// Bytes live at the peak of the sampled heap (the moment the most sampled bytes were
    /// allocated and not yet freed), by the stack that allocated them: what a program holds
    /// at its fattest, not what is left after its interpreter's teardown freed everything.
    Retained,
    /// Every byte allocated during the recording, freed or not.
    Allocated,
}

/// The target's resident set size at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RssPoint {
    /// Microseconds since the start of the recording.
    pub time_us: u64,
    pub rss_bytes: u64,
}

/// What a memory recording knows beyond its samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryInfo {
    /// Mean bytes between samples.
    pub rate_bytes: u64,
    /// The target's RSS over the recording (the main process).
    pub rss: Vec<RssPoint>,
    /// Sampled bytes live (allocated and not yet freed) over the recording, at most a few
    /// hundred points: the retained heap's growth, beside the RSS.
    #[serde(default)]
    pub live: Vec<RssPoint>,
    /// The largest RSS the kernel saw for the target (VmHWM), when read.
    pub peak_rss_bytes: Option<u64>,
    /// Sampled allocations received.
    pub sampled: u64,
    /// Frees of sampled allocations received.
    pub freed: u64,
    /// Sampled allocations whose frees could not be tracked (the agent's table was full).
    pub untracked: u64,
    /// Processes the agent reported from (the target, its forks and execs).
    pub processes: u64,
    /// Whether Python frames were read (CPython 3.11 with the GIL held at the allocation).
    pub python_frames: bool,
    /// The PYTHONMALLOC the target ran with, and whether onefix set it (`malloc`) rather than
    /// the user.
    pub python_malloc: Option<String>,
    pub python_malloc_by_onefix: bool,
    /// Child processes of the target (forks and their execs) that reported allocations; each
    /// one's heap is its own and counts as freed when it exits.
    #[serde(default)]
    pub children: u64,
    /// The peak of each child's sampled live bytes, by pid.
    #[serde(default)]
    pub children_peak_bytes: Vec<u64>,
    /// The children that exited before the recording ended: their heaps are not the target's.
    #[serde(default)]
    pub exited_children: Vec<u32>,
}

impl Profile {
    /// A profile of the same frames and stacks whose samples weigh the chosen bytes: for
    /// [`MemoryView::Retained`] one sample per thread and stack with the bytes still live at
    /// the end, for [`MemoryView::Allocated`] the allocations alone.
    pub fn memory_view(&self, view: MemoryView) -> Profile {
        let mut out = self.clone();
        out.samples = match view {
            MemoryView::Allocated => self.samples.iter().filter(|s| !s.state.freed()).copied().collect(),
            MemoryView::Retained => {
                let peak = self.peak_live_time_us();
                let mut net: HashMap<(ThreadId, Option<StackId>), (i64, u64)> = HashMap::new();
                for s in self.samples.iter().filter(|s| s.time_us <= peak) {
                    let e = net.entry((s.thread, s.stack)).or_insert((0, 0));
                    if s.state.freed() {
                        e.0 -= s.weight as i64;
                    } else {
                        e.0 += s.weight as i64;
                        e.1 = e.1.max(s.time_us);
                    }
                }
                let mut samples: Vec<Sample> = net
                    .into_iter()
                    .filter(|(_, (bytes, _))| *bytes > 0)
                    .map(|((thread, stack), (bytes, time_us))| Sample {
                        time_us,
                        thread,
                        stack,
                        state: ThreadState::new(true, false),
                        weight: bytes.min(u32::MAX as i64) as u32,
                    })
                    .collect();
                samples.sort_by_key(|s| (s.time_us, s.thread, s.stack));
                samples
            }
        };
        out
    }
}

impl Profile {
    /// Sampled bytes live over time, as `points` evenly spaced points at most (the live bytes at
    /// the end of each stretch).
    pub fn live_bytes_over_time(&self, points: usize) -> Vec<RssPoint> {
        let mut order: Vec<&Sample> = self.samples.iter().collect();
        order.sort_by_key(|s| (s.time_us, s.state.freed()));
        let end = order.last().map_or(0, |s| s.time_us);
        let step = (end / points.max(1) as u64).max(1);
        let mut out: Vec<RssPoint> = Vec::new();
        let mut live = 0i64;
        for s in order {
            live += if s.state.freed() { -(s.weight as i64) } else { s.weight as i64 };
            let at = (s.time_us / step + 1) * step;
            match out.last_mut() {
                Some(last) if last.time_us == at => last.rss_bytes = live.max(0) as u64,
                _ => out.push(RssPoint { time_us: at, rss_bytes: live.max(0) as u64 }),
            }
        }
        out
    }

    /// The same profile with only the samples of processes `keep` accepts: the heaps of
    /// child processes that exited during the recording ended with them, and are reported
    /// apart rather than counted in the target's heap.
    pub fn only_processes(&self, keep: impl Fn(u32) -> bool) -> Profile {
        let mut out = self.clone();
        out.samples.retain(|s| keep(self.thread(s.thread).pid));
        out
    }

    /// The time of the largest sampled live heap (the end of the recording's samples when it
    /// only grew).
    pub fn peak_live_time_us(&self) -> u64 {
        let mut order: Vec<&Sample> = self.samples.iter().collect();
        order.sort_by_key(|s| (s.time_us, s.state.freed()));
        let (mut live, mut peak, mut at) = (0i64, 0i64, 0u64);
        for s in order {
            live += if s.state.freed() { -(s.weight as i64) } else { s.weight as i64 };
            if live >= peak {
                peak = live;
                at = s.time_us;
            }
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, Meta, WeightUnit};

    #[test]
    fn live_bytes_rise_with_allocations_and_fall_with_frees() {
        let mut p = Profile::new(Meta { weight_unit: WeightUnit::Bytes, ..Meta::default() });
        let t = p.intern_thread(1, 1, None);
        let f = p.intern_frame(Frame::native("f", "a.out"));
        let stack = p.intern_stack([f]);
        let at = |time_us, weight, freed: bool| Sample {
            time_us,
            thread: t,
            stack,
            state: ThreadState(if freed { ThreadState::FREED } else { 0 }),
            weight,
        };
        p.samples.extend([at(0, 100, false), at(10, 50, false), at(20, 100, true), at(39, 10, false)]);
        let live = p.live_bytes_over_time(4);
        let bytes: Vec<u64> = live.iter().map(|r| r.rss_bytes).collect();
        assert_eq!(bytes, vec![100, 150, 50, 60], "{live:?}");
        assert!(live.windows(2).all(|w| w[0].time_us < w[1].time_us));
    }

    #[test]
    fn retained_is_allocations_minus_frees_and_allocated_ignores_frees() {
        let mut p = Profile::new(Meta { weight_unit: WeightUnit::Bytes, ..Meta::default() });
        let t = p.intern_thread(1, 1, None);
        let kept = p.intern_frame(Frame::python("keep", "a.py", 1));
        let freed = p.intern_frame(Frame::python("temp", "a.py", 2));
        let (ks, fs) = (p.intern_stack([kept]), p.intern_stack([freed]));
        let alloc =
            |time_us, stack, weight| Sample { time_us, thread: t, stack, state: ThreadState::default(), weight };
        p.samples.push(alloc(0, ks, 100));
        p.samples.push(alloc(1, fs, 500));
        p.samples.push(Sample { state: ThreadState(ThreadState::FREED), ..alloc(2, fs, 500) });
        p.samples.push(alloc(3, ks, 600));
        let retained = p.memory_view(MemoryView::Retained);
        assert_eq!(retained.samples.len(), 1);
        assert_eq!((retained.samples[0].stack, retained.samples[0].weight), (ks, 700));
        let allocated = p.memory_view(MemoryView::Allocated);
        assert_eq!(allocated.samples.iter().map(|s| s.weight as u64).sum::<u64>(), 1200);
        // A teardown that frees everything does not hide what was held at the peak.
        p.samples.push(Sample { state: ThreadState(ThreadState::FREED), ..alloc(9, ks, 700) });
        let retained = p.memory_view(MemoryView::Retained);
        assert_eq!((retained.samples.len(), retained.samples[0].weight), (1, 700));
        assert_eq!(p.peak_live_time_us(), 3);
    }
}

//! Plays a recorded profile back one tick at a time: drives the recording loop, writers and
//! terminal output in tests exactly, without a live target.

use onefix_model::{Profile, Sample};

use crate::{Sampler, Tick};

pub struct ReplaySampler<'a> {
    source: &'a Profile,
    next: usize,
}

impl<'a> ReplaySampler<'a> {
    pub fn new(source: &'a Profile) -> ReplaySampler<'a> {
        ReplaySampler { source, next: 0 }
    }
}

impl Sampler for ReplaySampler<'_> {
    /// Each tick replays the source samples that share the next timestamp.
    fn tick(&mut self, profile: &mut Profile, _time_us: u64) -> Tick {
        let samples = &self.source.samples;
        let Some(first) = samples.get(self.next) else {
            return Tick::TargetGone;
        };
        let at = first.time_us;
        let mut added = 0;
        while let Some(s) = samples.get(self.next).filter(|s| s.time_us == at) {
            let src = self.source.thread(s.thread);
            let thread = profile.intern_thread(src.pid, src.tid, src.name.as_deref());
            let mut stack = None;
            for frame in self.source.stack_frames_root_first(s.stack) {
                let id = profile.intern_frame(self.source.frame(frame).clone());
                stack = Some(profile.intern_stack_node(stack, id));
            }
            profile.push_sample(Sample { thread, stack, ..*s });
            self.next += 1;
            added += 1;
        }
        Tick::Sampled(added)
    }
}

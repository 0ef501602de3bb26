//! The recording loop: ticks a sampler at a jittered rate, streams batches to the recording
//! file about once a second, and stops on the target's exit, a duration, or a stop flag.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use onefix_model::recording::RecordingWriter;
use onefix_model::Profile;
use rand::{Rng, SeedableRng};

use crate::{Sampler, Tick};

#[derive(Clone, Debug)]
pub struct Schedule {
    pub rate_hz: f64,
    /// Stop after this long; `None` runs until the target exits or the stop flag is raised.
    pub duration: Option<Duration>,
    /// How often the recording file is brought up to date: the most a crash can lose.
    pub flush_every: Duration,
    /// Seed of the interval jitter, so that a run can be repeated exactly.
    pub seed: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    TargetExited,
    DurationReached,
    Interrupted,
}

#[derive(Debug)]
pub struct RecordOutcome {
    pub reason: StopReason,
    /// The recording file stopped being written at this error (disk full, ...); sampling went
    /// on in memory.
    pub write_error: Option<std::io::Error>,
}

/// Samples until the target exits, `schedule.duration` passes or `stop` is raised. Each tick's
/// interval is drawn uniformly from 0.5 to 1.5 nominal intervals, so that sampling cannot lock
/// onto a periodic behaviour of the target; a tick that starts late does not cause a burst.
pub fn record<S: Sampler + ?Sized, W: Write>(
    sampler: &mut S,
    profile: &mut Profile,
    mut writer: Option<&mut RecordingWriter<W>>,
    schedule: &Schedule,
    stop: &AtomicBool,
    mut every_flush: impl FnMut(&Profile),
) -> RecordOutcome {
    let interval = Duration::from_secs_f64(1.0 / schedule.rate_hz.max(0.1));
    let mut rng = rand::rngs::StdRng::seed_from_u64(schedule.seed);
    let start = Instant::now();
    let mut next = start;
    let mut last_flush = start;
    let mut write_error = None;
    let reason = loop {
        if stop.load(Ordering::Relaxed) {
            break StopReason::Interrupted;
        }
        if schedule.duration.is_some_and(|d| start.elapsed() >= d) {
            break StopReason::DurationReached;
        }
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else if now - next > interval {
            profile.meta.stats.late += 1;
            next = now;
        }
        let time_us = start.elapsed().as_micros() as u64;
        profile.meta.stats.ticks += 1;
        match sampler.tick(profile, time_us) {
            Tick::TargetGone => break StopReason::TargetExited,
            Tick::Failed => profile.meta.stats.errors += 1,
            Tick::Sampled(_) => {}
        }
        next += interval.mul_f64(rng.random_range(0.5..1.5));
        if last_flush.elapsed() >= schedule.flush_every {
            last_flush = Instant::now();
            profile.meta.duration_s = start.elapsed().as_secs_f64();
            if let Some(w) = writer.as_deref_mut() {
                if let Err(e) = w.write_batch(profile) {
                    write_error = Some(e);
                    writer = None;
                }
            }
            every_flush(profile);
        }
    };
    profile.meta.duration_s = start.elapsed().as_secs_f64();
    RecordOutcome { reason, write_error }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReplaySampler;
    use onefix_model::{recording, Frame, Meta, Sample, ThreadState};

    fn profile_with(n: usize) -> Profile {
        let mut p = Profile::new(Meta::default());
        let t = p.intern_thread(1, 1, Some("main"));
        let f = p.intern_frame(Frame::python("work", "/app/a.py", 3));
        let s = p.intern_stack([f]);
        for i in 0..n {
            p.samples.push(Sample {
                time_us: i as u64 * 1000,
                thread: t,
                stack: s,
                state: ThreadState::new(true, true),
                weight: 1,
            });
        }
        p
    }

    #[test]
    fn stops_when_the_target_is_gone_and_writes_everything() {
        let source = profile_with(30);
        let mut sampler = ReplaySampler::new(&source);
        let mut profile = Profile::new(Meta::default());
        let mut writer = RecordingWriter::new(Vec::new(), &profile.meta).unwrap();
        let schedule = Schedule { rate_hz: 1000.0, duration: None, flush_every: Duration::from_millis(5), seed: 1 };
        let out = record(&mut sampler, &mut profile, Some(&mut writer), &schedule, &AtomicBool::new(false), |p| {
            assert!(p.samples.is_empty(), "each flush moves the samples to disk");
        });
        assert_eq!(out.reason, StopReason::TargetExited);
        let bytes = writer.finish(&mut profile).unwrap();
        let back = recording::read_recording(&bytes[..]).unwrap();
        assert!(back.complete);
        assert_eq!(back.profile.sample_count(), 30);
        assert_eq!(back.profile.meta.stats.ticks, profile.meta.stats.ticks);
    }

    #[test]
    fn a_raised_stop_flag_ends_the_recording() {
        let source = profile_with(1_000_000);
        let mut sampler = ReplaySampler::new(&source);
        let mut profile = Profile::new(Meta::default());
        let stop = AtomicBool::new(true);
        let schedule = Schedule { rate_hz: 100.0, duration: None, flush_every: Duration::from_secs(1), seed: 1 };
        let out = record::<_, Vec<u8>>(&mut sampler, &mut profile, None, &schedule, &stop, |_| {});
        assert_eq!(out.reason, StopReason::Interrupted);
        assert!(profile.samples.is_empty());
    }
}

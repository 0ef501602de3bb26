//! Thread classification, the first pass: how much of each thread is parked, and how. A parked
//! sample is never a cost; an event-loop wait still counts in the elapsed time of a thread that
//! also works; a thread that only sleeps beside threads that work (a watchdog, a flusher) is a
//! background timer, not their cost.

use super::*;

/// What the first pass says of each thread, by thread id.
pub(super) struct ThreadClasses {
    /// The thread does some work: at least [`WORKING_THREAD`] of its samples are not parked.
    pub works: Vec<bool>,
    /// The thread sleeps on a timer nearly all the time beside other threads that work.
    pub background: Vec<bool>,
}

impl Engine<'_> {
    pub(super) fn classify_threads(&mut self, mode: Mode) -> ThreadClasses {
        let profile = self.profile;
        let nthreads = profile.threads().len();
        let mut thread_total = vec![0u64; nthreads];
        let mut thread_parked = vec![0u64; nthreads];
        let mut thread_on_timer = vec![0u64; nthreads];
        // Threads that run tasks taken from a queue others fill (a pool's workers): a sleep in
        // a task is the task's work, which its submitter waits for, not a background timer's.
        let mut runs_tasks = vec![false; nthreads];
        let mut known: HashMap<StackId, bool> = HashMap::new();
        for s in profile.samples.iter() {
            if let Some(stack) = s.stack {
                let pool = match known.get(&stack) {
                    Some(&p) => p,
                    None => {
                        let p = self.under_work_queue(stack);
                        known.insert(stack, p);
                        p
                    }
                };
                runs_tasks[s.thread as usize] |= pool;
            }
        }
        for s in profile.samples.iter() {
            let running = self.running(s);
            if mode == Mode::Cpu && !running {
                continue;
            }
            // Torn and empty stacks say nothing about whether a thread works.
            if self.incomplete(s.stack) {
                continue;
            }
            thread_total[s.thread as usize] += s.weight as u64;
            if self.parked(s.stack).is_some() {
                thread_parked[s.thread as usize] += s.weight as u64;
            }
            if !running && self.on_timer(s.stack) {
                thread_on_timer[s.thread as usize] += s.weight as u64;
            }
        }
        let works: Vec<bool> = (0..nthreads)
            .map(|t| {
                thread_total[t] > 0
                    && (thread_total[t] - thread_parked[t]) as f64 >= WORKING_THREAD * thread_total[t] as f64
            })
            .collect();
        let on_timer: Vec<bool> = (0..nthreads)
            .map(|t| thread_total[t] > 0 && thread_on_timer[t] as f64 >= TIMER_THREAD * thread_total[t] as f64)
            .collect();
        let background = (0..nthreads)
            .map(|t| on_timer[t] && !runs_tasks[t] && (0..nthreads).any(|o| o != t && works[o] && !on_timer[o]))
            .collect();
        ThreadClasses { works, background }
    }

    /// Whether a stack runs under, or waits in, the loop of a worker that takes its tasks from
    /// a queue workers share (any frame matching a knowledge-base entry with `shared_queue`).
    pub(super) fn under_work_queue(&mut self, stack: StackId) -> bool {
        let frames: Vec<FrameId> = self.profile.stack_frames_leaf_first(Some(stack)).collect();
        frames.into_iter().any(|f| self.frame(f).idle.is_some_and(|e| self.kb.entries[e as usize].spec.shared_queue))
    }
}

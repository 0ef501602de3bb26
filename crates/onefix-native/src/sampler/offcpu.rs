//! Off-CPU time: a thread blocked from its switch-out to its switch-in, charged at the stack it
//! blocked in, and whether the wait is a server waiting for its client's next request.

use super::*;

impl NativeSampler {
    /// A stack blocked in a read of a connection the process accepted gets
    /// [`onefix_model::INBOUND_WAIT_FRAME`] as its leaf: the server waits for its client's next
    /// request, which is no cost of its own.
    pub(super) fn marked_if_inbound_wait(
        &mut self,
        profile: &mut Profile,
        pid: u32,
        stack: Option<StackId>,
        fd: Option<u64>,
    ) -> Option<StackId> {
        let (Some(st), Some(fd)) = (stack, fd) else { return stack };
        let reads = profile
            .stack_frames_leaf_first(Some(st))
            .next()
            .is_some_and(|leaf| onefix_collect::sockets::reads_a_descriptor(&profile.frame(leaf).function));
        // A descriptor is a small number; a pointer or a futex address is not.
        if !reads || fd > i32::MAX as u64 || !self.sockets.is_inbound(pid, fd) {
            return stack;
        }
        *self.inbound_waits.entry(st).or_insert_with(|| {
            let mut frames: Vec<_> = profile.stack_frames_leaf_first(Some(st)).collect();
            frames.reverse();
            frames
                .push(profile.intern_frame(onefix_model::Frame::native(onefix_model::INBOUND_WAIT_FRAME, "[kernel]")));
            profile.intern_stack(frames)
        })
    }

    /// Charges the blocked interval of `tid` up to `to` and forgets it.
    /// Charges the blocked interval of `tid` up to `to` and forgets it, keeping which thread
    /// woke it when it was charged as samples.
    pub(super) fn close_block(&mut self, profile: &mut Profile, tid: u32, to: u64) -> usize {
        let Some(mut b) = self.blocked.remove(&tid) else { return 0 };
        let n = self.emit_blocked(profile, tid, &mut b, to);
        if let (Some(from_us), Some((wpid, wtid))) = (b.first_us, b.waker) {
            let thread = self.thread(profile, b.pid, tid);
            let waker = self.thread(profile, wpid, wtid);
            self.wakes.push(onefix_model::attachments::WakeEdge { thread, from_us, to_us: self.time_us(to), waker });
        }
        n
    }

    /// Turns the blocked time of `tid` from `b.from` to `to` into samples, one per chunk of
    /// [`CHUNK_NS`], each weighing whole sampling intervals. The remainder carries over to the
    /// thread's next blocked time, so short waits add up to their true total instead of each
    /// counting as a whole interval.
    pub(super) fn emit_blocked(&mut self, profile: &mut Profile, tid: u32, b: &mut Blocked, to: u64) -> usize {
        let mut n = 0;
        while b.from < to {
            let end = ((b.from / CHUNK_NS + 1) * CHUNK_NS).min(to);
            let Some(stack) = b.stack else {
                b.from = end;
                continue;
            };
            let carry = self.carry.entry(tid).or_default();
            *carry += end - b.from;
            let weight = *carry / self.period_ns;
            *carry -= weight * self.period_ns;
            if weight > 0 {
                let thread = self.thread(profile, b.pid, tid);
                profile.samples.push(Sample {
                    time_us: self.time_us(b.from),
                    thread,
                    stack,
                    // Each blocked interval is one wait, known from the switch records.
                    state: ThreadState::new(false, false).with_same_wait(Some(b.first_us.is_some())),
                    weight: weight.min(u32::MAX as u64) as u32,
                });
                b.first_us.get_or_insert(self.time_us(b.from));
                n += 1;
            }
            b.from = end;
        }
        n
    }

    /// Charges every thread still blocked up to the last chunk boundary before `horizon`.
    pub(super) fn emit_ongoing(&mut self, profile: &mut Profile, horizon: u64) -> usize {
        let upto = horizon / CHUNK_NS * CHUNK_NS;
        let tids: Vec<u32> = self.blocked.iter().filter(|(_, b)| b.from < upto).map(|(t, _)| *t).collect();
        let mut n = 0;
        for tid in tids {
            let mut b = self.blocked.remove(&tid).expect("listed");
            n += self.emit_blocked(profile, tid, &mut b, upto);
            self.blocked.insert(tid, b);
        }
        n
    }
}

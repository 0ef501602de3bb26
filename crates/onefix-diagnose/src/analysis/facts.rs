//! What a frame and a stack are, computed once each and cached: whose code, which knowledge-base
//! entries it calls, whether the thread was parked, waiting or running there, and which user
//! line is its frontier.

use super::*;

impl Engine<'_> {
    pub(super) fn frame(&mut self, id: FrameId) -> &FrameFacts {
        if self.frames[id as usize].is_none() {
            let frame = self.profile.frame(id);
            let origin = self.user.origin(frame);
            let qualified = qualified_name(frame);
            let unqualified = unqualified_name(frame);
            let mut cost = Vec::new();
            let mut idle = None;
            for (i, e) in self.kb.entries.iter().enumerate() {
                if e.matches_frame(frame.kind, &qualified)
                    || unqualified.as_deref().is_some_and(|u| e.matches_frame(frame.kind, u))
                {
                    match e.spec.role {
                        Role::Cost => cost.push(i as u16),
                        Role::Idle => idle = idle.or(Some(i as u16)),
                    }
                }
            }
            self.frames[id as usize] = Some(FrameFacts { origin, qualified, cost, idle });
        }
        self.frames[id as usize].as_ref().unwrap()
    }

    pub(super) fn stack(&mut self, stack: Option<StackId>) -> Option<usize> {
        let id = stack?;
        if let Some(i) = self.stacks[id as usize] {
            return Some(i as usize);
        }
        let leaf_first: Vec<FrameId> = self.profile.stack_frames_leaf_first(Some(id)).collect();
        let split = crate::frontier::Frontier::of(&leaf_first, |f| self.frame(f).origin == Origin::User);
        let frontier_at = split.as_ref().map(|s| s.depth);
        let frontier = split.as_ref().map(|s| s.frame);
        let (beneath, callers) = match split {
            Some(s) => (s.beneath, s.callers),
            None => (leaf_first.clone(), Vec::new()),
        };
        let innermost_python = leaf_first.iter().copied().find(|&f| self.profile.frame(f).kind == FrameKind::Python);
        // The parking entry, and where in the stack (leaf first) the frame that matched it is.
        // A leaf a sampler added to say what the kernel shows the thread waits for (its clients:
        // a connection, or a client's next request) decides alone, under Python frames too:
        // it is the thread's state, not a guess from names.
        let client_wait = leaf_first
            .first()
            .filter(|&&f| {
                let name = &self.profile.frame(f).function;
                name == onefix_model::INBOUND_WAIT_FRAME || name == onefix_model::CONNECTION_WAIT_FRAME
            })
            .and_then(|&f| self.frame(f).idle);
        let mut idle = innermost_python.and_then(|f| {
            let at = leaf_first.iter().position(|&x| x == f)?;
            self.frame(f).idle.map(|e| (e, at))
        });
        // Native stacks: a user line that calls a wait for other threads (a join, a wait group,
        // a channel receive) is parked; the entry is matched on the function the line calls.
        if idle.is_none() && innermost_python.is_none() {
            idle = beneath.last().and_then(|&called| {
                let at = leaf_first.iter().position(|&x| x == called)?;
                self.frame(called).idle.map(|e| (e, at))
            });
        }
        if idle.is_none() && frontier.is_none() {
            let candidates: Vec<(u16, usize)> =
                leaf_first.iter().enumerate().filter_map(|(at, &f)| self.frame(f).idle.map(|e| (e, at))).collect();
            idle = candidates.into_iter().find(|&(e, _)| self.kb.entries[e as usize].spec.anywhere);
        }
        // A parking primitive called by a known cost (an HTTP client waiting for its reply
        // through an asyncio.Event) is waiting for that cost, not parked for want of work. A
        // cost under the parking frame (a kept-alive server connection reading its next
        // request) does not count: the thread is parked in it.
        let idle = match idle {
            _ if client_wait.is_some() => client_wait,
            // Native stacks: the Go runtime parks goroutines under library costs that wait for
            // nothing the program asked for (a kept-alive connection's read loop under
            // net.(*conn).Read); a native parking entry decides alone.
            Some((e, _)) if innermost_python.is_none() => Some(e),
            Some((e, at)) if !beneath.iter().skip(at + 1).any(|&f| !self.frame(f).cost.is_empty()) => Some(e),
            _ => None,
        };
        let truncated =
            self.partial_stacks && leaf_first.last().is_some_and(|&root| !self.profile.frame(root).can_start_stack());
        let waiting_call = match leaf_first.first() {
            Some(&leaf) if self.profile.frame(leaf).kind == FrameKind::Python => {
                let mut entries = self.frame(leaf).cost.clone();
                entries.extend(self.call_entries(leaf));
                entries.iter().any(|&e| self.kb.entries[e as usize].spec.when == When::Blocked)
            }
            _ => false,
        };
        let mut cost: Vec<u16> = Vec::new();
        for &f in &beneath {
            cost.extend(self.frame(f).cost.iter().copied());
        }
        // Calls into C have no frame of their own: read them off the innermost Python line.
        if let Some(f) = innermost_python.filter(|_| frontier.is_some()) {
            cost.extend(self.call_entries(f));
        }
        cost.sort_unstable();
        cost.dedup();
        let line = frontier.map(|f| {
            let next = self.lines.len();
            *self.line_of_frame.entry(f).or_insert_with(|| next)
        });
        if line == Some(self.lines.len()) {
            self.lines.push(LineAcc { frame: frontier.unwrap(), ..LineAcc::default() });
        }
        let importing = frontier_at.is_some_and(|i| {
            self.profile.frame(leaf_first[i]).function == "<module>"
                && leaf_first[i + 1..].iter().any(|&f| self.profile.frame(f).is_import_machinery())
        });
        let i = self.stack_facts.len();
        let leaf = leaf_first.first().copied();
        let cut_short = self.partial_stacks
            && leaf_first.last().is_some_and(|&root| {
                let f = self.profile.frame(root);
                f.kind == FrameKind::Native && !onefix_model::native_frame_can_start_stack(&f.function)
            });
        self.stack_facts.push(StackFacts {
            callers,
            beneath,
            idle,
            truncated,
            cost,
            line,
            waiting_call,
            importing,
            leaf,
            cut_short,
        });
        self.stacks[id as usize] = Some(i as u32);
        Some(i)
    }

    /// Whether the sample's thread was running: the state it was read in, unless its stack
    /// shows it inside a call that waits.
    /// A thread the kernel saw in a futex wait is waiting (for a lock or the GIL) even when it
    /// was runnable: just woken, it had not got the lock back.
    pub(super) fn running(&mut self, s: &Sample) -> bool {
        s.state.active() && !s.state.futex() && !self.stack(s.stack).is_some_and(|i| self.stack_facts[i].waiting_call)
    }

    pub(super) fn incomplete(&mut self, stack: Option<StackId>) -> bool {
        match self.stack(stack) {
            None => true,
            Some(i) => self.stack_facts[i].line.is_none() && self.stack_facts[i].truncated,
        }
    }

    /// For a line that waits for a lock, the line where the time goes while the lock is held
    /// (the frontier of the samples read inside the held block, on any thread), and its weight.
    pub(super) fn held_work(&mut self, l: usize, mode: Mode) -> Option<(usize, u64)> {
        let profile = self.profile;
        let lock = profile.frame(self.lines[l].frame);
        let path = self.user.resolve(&lock.file)?;
        let (first, last) = self.source.held_block(&path, lock.line)?;
        let block = (self.lines[l].frame, first, last);
        // The same lock taken at other places of the file is held there too.
        let elsewhere = self.source.same_lock_blocks(&path, lock.line);
        let mut in_block: HashMap<StackId, bool> = HashMap::new();
        let mut by_line: HashMap<usize, u64> = HashMap::new();
        for s in profile.samples.iter().filter(|s| mode.counts(s.state)) {
            let Some(stack) = s.stack else { continue };
            let held = *in_block.entry(stack).or_insert_with(|| {
                self.inside_block(stack, block)
                    || elsewhere.iter().any(|&(first, last)| self.inside_lines(stack, &lock.file, first, last))
            });
            if !held || self.parked(Some(stack)).is_some() {
                continue;
            }
            if let Some(line) = self.stack(Some(stack)).and_then(|i| self.stack_facts[i].line) {
                *by_line.entry(line).or_default() += s.weight as u64;
            }
        }
        by_line.into_iter().filter(|&(line, _)| line != l).max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
    }

    /// Whether a stack runs inside a lock's held block: lines `first..=last` of the function
    /// whose frame `frame` takes the lock.
    pub(super) fn inside_block(&self, stack: StackId, (frame, first, last): (FrameId, u32, u32)) -> bool {
        let lock = self.profile.frame(frame);
        self.profile.stack_frames_leaf_first(Some(stack)).any(|f| {
            let f = self.profile.frame(f);
            f.file == lock.file && f.function == lock.function && (first..=last).contains(&f.line)
        })
    }

    /// Whether a stack runs lines `first..=last` of `file`, in any function.
    pub(super) fn inside_lines(&self, stack: StackId, file: &str, first: u32, last: u32) -> bool {
        self.profile.stack_frames_leaf_first(Some(stack)).any(|f| {
            let f = self.profile.frame(f);
            f.file == file && (first..=last).contains(&f.line)
        })
    }

    /// Whether a stack waits for, or runs under, a pool of child processes (a frame matching a
    /// knowledge-base entry with `child_processes`, anywhere in it).
    pub(super) fn under_process_pool(&mut self, stack: StackId) -> bool {
        let frames: Vec<FrameId> = self.profile.stack_frames_leaf_first(Some(stack)).collect();
        frames.into_iter().any(|f| {
            let kind = self.profile.frame(f).kind;
            let qualified = self.frame(f).qualified.clone();
            self.kb.entries.iter().any(|e| e.spec.child_processes && e.matches_frame(kind, &qualified))
        })
    }

    /// The user line a stack is charged to, if any.
    pub(super) fn line_of(&mut self, stack: Option<StackId>) -> Option<usize> {
        self.stack(stack).and_then(|i| self.stack_facts[i].line)
    }

    /// Whether the stack waits on the clock (a sleep): see [`crate::kb::EntrySpec::timer`].
    pub(super) fn on_timer(&mut self, stack: Option<StackId>) -> bool {
        let Some(i) = self.stack(stack) else { return false };
        self.stack_facts[i].cost.iter().any(|&e| self.kb.entries[e as usize].spec.timer)
    }

    /// Of the idle samples, the weight the samplers read waiting for clients (a connection, a
    /// client's next request) and for a supervisor's wake-up, by the leaf they added.
    pub(super) fn waiting_for_outside(&self, idle: &crate::finding::SampleSet) -> (u64, u64) {
        let (mut clients, mut supervisors) = (0u64, 0u64);
        for (i, s) in self.profile.samples.iter().enumerate() {
            if !idle.contains(i) {
                continue;
            }
            let Some(leaf) = self.profile.stack_frames_leaf_first(s.stack).next() else { continue };
            let name = &self.profile.frame(leaf).function;
            if name == onefix_model::CONNECTION_WAIT_FRAME || name == onefix_model::INBOUND_WAIT_FRAME {
                clients += s.weight as u64;
            } else if name == onefix_model::WAKE_UP_WAIT_FRAME {
                supervisors += s.weight as u64;
            }
        }
        (clients, supervisors)
    }

    /// `Some(busy_time)` when the stack is parked for want of work.
    pub(super) fn parked(&mut self, stack: Option<StackId>) -> Option<bool> {
        let i = self.stack(stack)?;
        let e = self.stack_facts[i].idle?;
        Some(self.kb.entries[e as usize].spec.busy_time)
    }

    pub(super) fn call_entries(&mut self, frame: FrameId) -> Vec<u16> {
        let f = self.profile.frame(frame);
        let Some(path) = self.user.resolve(&f.file) else { return Vec::new() };
        let Some(code) = self.source.line(&path, f.line) else { return Vec::new() };
        let mut names = called_names(&code);
        // Calls made through a name bound to a known operation (a compiled pattern's method).
        names.extend(self.source.resolved_calls(&path, f.line, &code));
        self.kb
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.spec.role == Role::Cost && names.iter().any(|n| e.matches_call(n)))
            .map(|(i, _)| i as u16)
            .collect()
    }
}

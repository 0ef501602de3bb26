//! Charging a sample to its frontier line, and placing the reads that could not be charged at
//! once (torn or empty) by the clean reads around them.

use super::*;

impl Engine<'_> {
    /// Adds sample `s` to `line`, as read with `stack` (its own, or for a torn read the clean
    /// stack it stands for).
    pub(super) fn charge(
        &mut self,
        line: usize,
        stack: StackId,
        s: &Sample,
        running: bool,
        (window, nwindows): (usize, usize),
        charged_for_holder: bool,
    ) {
        let w = s.weight as u64;
        let facts = &self.stack_facts[self.stacks[stack as usize].unwrap() as usize];
        let (is_self, importing) = (facts.beneath.is_empty(), facts.importing);
        let acc = &mut self.lines[line];
        acc.weight += w;
        if importing {
            acc.importing += w;
        }
        if is_self {
            acc.self_weight += w;
        }
        if !running {
            acc.blocked += w;
        }
        // A wait charged to the lock holder's line is no wait in flight at that line.
        if !running && !charged_for_holder {
            let (weight, threads) = acc.blocked_windows.entry(s.time_us / IN_FLIGHT_WINDOW_US).or_default();
            *weight += w;
            if threads.len() < MAX_THREADS_PER_WINDOW && !threads.contains(&s.thread) {
                threads.push(s.thread);
            }
        }
        if acc.windows.is_empty() {
            acc.windows = vec![0; nwindows.div_ceil(64)];
            acc.first_us = s.time_us;
        }
        acc.first_us = acc.first_us.min(s.time_us);
        acc.last_us = acc.last_us.max(s.time_us);
        acc.windows[window / 64] |= 1 << (window % 64);
        acc.thirds[third(window as u64, nwindows)] += w;
        *acc.by_stack.entry((stack, running)).or_default() += w;
    }

    /// Charges a read that was left out at first (torn or empty) to `line` through `stack`,
    /// and counts it in the busy time; gives its weight.
    pub(super) fn place(
        &mut self,
        s: &Sample,
        line: usize,
        stack: StackId,
        (window_us, nwindows): (u64, usize),
        busy_timeline: &mut Vec<(u64, u64, u64)>,
        active_windows: &mut [bool],
    ) -> u64 {
        let w = s.weight as u64;
        let running = self.running(s);
        busy_timeline.push((s.time_us, w, if running { w } else { 0 }));
        let window = (s.time_us / window_us) as usize;
        active_windows[window] = true;
        self.charge(line, stack, s, running, (window, nwindows), false);
        w
    }

    /// Of clean stacks sharing an innermost frame (with their weights), the heaviest stack of
    /// the line they are charged to, when that line holds [`TORN_SOLE_LINE`] of their weight
    /// and there are enough of them to say so.
    pub(super) fn sole_line_stack(&mut self, stacks: Option<&HashMap<StackId, u64>>) -> SoleLine {
        let Some(stacks) = stacks else { return SoleLine::TooFew };
        // line -> (weight, heaviest stack, its weight)
        let mut by_line: HashMap<usize, (u64, StackId, u64)> = HashMap::new();
        let mut total = 0u64;
        for (&stack, &w) in stacks {
            let Some(line) = self.stack(Some(stack)).and_then(|i| self.stack_facts[i].line) else {
                return SoleLine::Split;
            };
            total += w;
            let e = by_line.entry(line).or_insert((0, stack, 0));
            e.0 += w;
            if w > e.2 || (w == e.2 && stack < e.1) {
                (e.1, e.2) = (stack, w);
            }
        }
        match by_line.iter().max_by_key(|(&l, &(w, _, _))| (w, std::cmp::Reverse(l))) {
            _ if total < TORN_MIN_CLEAN => SoleLine::TooFew,
            Some((_, &(weight, stack, _))) if weight as f64 >= TORN_SOLE_LINE * total as f64 => SoleLine::Line(stack),
            _ => SoleLine::Split,
        }
    }

    /// The stack to charge a torn read with innermost frame `leaf` through: asked of the clean
    /// reads with that frame, then (too few of those) with its function, then with its file.
    pub(super) fn sole_line_by_leaf(&mut self, clean: &CleanByLeaf, leaf: FrameId) -> Option<StackId> {
        let f = self.profile.frame(leaf);
        let by_function = clean.by_function.get(&(f.file.as_str(), f.function.as_str()));
        let by_file = clean.by_file.get(f.file.as_str()).filter(|_| !f.file.is_empty());
        for stacks in [clean.by_frame.get(&leaf), by_function, by_file] {
            match self.sole_line_stack(stacks) {
                SoleLine::Line(stack) => return Some(stack),
                SoleLine::Split => return None,
                SoleLine::TooFew => {}
            }
        }
        None
    }
}

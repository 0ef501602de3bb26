//! Go programs: the goroutines that wait, read from the runtime, as virtual threads.

use super::*;

impl NativeSampler {
    /// Reads the goroutines of every traced Go process and adds a sample for each one that
    /// waits, weighing the time since the previous scan: its stack is where it was parked
    /// (a network read, a channel, a lock), which no OS thread shows.
    pub(super) fn scan_goroutines(&mut self, profile: &mut Profile, now: u64) -> usize {
        if self.last_scan_ns.is_some_and(|t| now.saturating_sub(t) < self.scan_every_ns) {
            return 0;
        }
        let gap = self.last_scan_ns.map(|t| now.saturating_sub(t).min(GOROUTINE_MAX_GAP_NS)).unwrap_or(0);
        self.last_scan_ns = Some(now);
        self.scan_carry_ns += gap;
        let weight = self.scan_carry_ns / self.period_ns;
        self.scan_carry_ns -= weight * self.period_ns;
        let pids: Vec<u32> = self.live.iter().copied().filter(|p| self.awaiting_exec != Some(*p)).collect();
        let mut n = 0;
        let mut read = 0u64;
        for pid in pids {
            if matches!(self.go.get(&pid), None | Some(GoState::Unknown)) {
                let state = self.go_state(pid);
                self.go.insert(pid, state);
            }
            let Some(GoState::Go { runtime, bias }) = self.go.get(&pid) else { continue };
            let all = runtime.goroutines(pid, *bias);
            read += all.len() as u64;
            let goroutines: Vec<Goroutine> =
                all.into_iter().filter(|g| g.is_waiting() && !runtime.is_runtime_wait(g.waitreason)).collect();
            self.stats.goroutine_scans += 1;
            for g in &goroutines {
                let (thread, stack) = self.goroutine_stack(profile, pid, g);
                if weight == 0 {
                    continue;
                }
                // Merged with the goroutine's previous sample while it stays parked at the
                // same place: memory per span of time, not per scan.
                profile.push_sample(Sample {
                    time_us: self.time_us(now),
                    thread,
                    stack,
                    state: ThreadState::new(false, false),
                    weight: weight.min(u32::MAX as u64) as u32,
                });
                self.stats.goroutine_samples += 1;
                n += 1;
            }
            let scan = self.stats.goroutine_scans;
            self.parked.retain(|(p, _), s| *p != pid || s.seen == scan);
        }
        self.scan_every_ns = GOROUTINE_SCAN_NS.max(read * GOROUTINE_SCAN_NS_EACH);
        n
    }

    /// The stack of a waiting goroutine: unwound from its saved registers, or the one found
    /// before if it has not moved since.
    pub(super) fn goroutine_stack(&mut self, profile: &mut Profile, pid: u32, g: &Goroutine) -> (u32, Option<StackId>) {
        let scan = self.stats.goroutine_scans;
        if let Some(p) = self.parked.get_mut(&(pid, g.addr)).filter(|p| p.goid == g.goid && p.regs == g.regs) {
            p.seen = scan;
            return (p.thread, p.stack);
        }
        let bytes = g.read_stack(pid);
        if let (Some(c), Some(bytes)) = (self.capture.as_mut().filter(|c| c.goroutines), &bytes) {
            if c.offer(pid, g.regs, bytes) {
                let maps = self.symbolizer.space(pid).map(|sp| sp.mappings()).unwrap_or_default();
                c.fixture.modules = maps.iter().map(|m| (m.start, m.end, m.pgoff, m.module.name.clone())).collect();
            }
        }
        let stack = bytes.and_then(|bytes| self.unwound(profile, pid, g.regs, &bytes));
        let thread = profile.intern_thread(pid, GOROUTINE_TID_BASE + g.goid, Some(&format!("goroutine {}", g.goid)));
        self.parked.insert((pid, g.addr), ParkedStack { goid: g.goid, regs: g.regs, stack, thread, seen: scan });
        (thread, stack)
    }

    /// Whether `pid` runs Go, and where its runtime is loaded. `Unknown` until its executable
    /// is mapped.
    pub(super) fn go_state(&mut self, pid: u32) -> GoState {
        let exe = std::path::PathBuf::from(format!("/proc/{pid}/exe"));
        let Ok(name) = std::fs::read_link(&exe) else { return GoState::Absent };
        let name = name.display().to_string();
        let Some(bias) = self
            .symbolizer
            .space(pid)
            .and_then(|s| s.mappings().iter().find(|m| m.module.name == name).map(|m| m.bias))
        else {
            return GoState::Unknown;
        };
        match GoRuntime::from_file(&exe) {
            Ok(Some(runtime)) => GoState::Go { runtime, bias },
            Ok(None) => GoState::Absent,
            Err(e) => {
                let w = e.to_string();
                if !self.setup_warnings.contains(&w) {
                    self.setup_warnings.push(w);
                }
                GoState::Absent
            }
        }
    }
}

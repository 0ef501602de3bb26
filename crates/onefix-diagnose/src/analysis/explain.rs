//! Why a line costs: the knowledge-base entry under most of its weight, or what its thread
//! state and self time show (the built-in classifications), with its evidence and gain bound.

use super::*;

/// A frame that makes a query per item (`per_item` in the knowledge base) is evidence of N when
/// at least this share of the line's weight is under it: a lazy load seen once in passing is not.
const PER_ITEM_EVIDENCE: f64 = 0.25;

impl Engine<'_> {
    /// Says why a line costs: the knowledge-base entry under most of its weight, or what its
    /// thread state and self time show.
    /// `stretch` is the part of the run between the line's first and last sighting: the part
    /// that repeats it, from which the gain bound is computed.
    pub(super) fn explain(
        &mut self,
        l: usize,
        recurrence: Option<f64>,
        stretch: &Stretch,
        share: &dyn Fn(u64) -> f64,
        opts: &Options,
        path: Option<&critical::CriticalPath>,
    ) -> Finding {
        let profile = self.profile;
        let mode = opts.mode;
        let by_stack: Vec<((StackId, bool), u64)> = self.lines[l].by_stack.iter().map(|(k, v)| (*k, *v)).collect();
        let mut entry_weight: HashMap<u16, u64> = HashMap::new();
        let mut frame_incl: HashMap<FrameId, u64> = HashMap::new();
        // Each function's depth below the line (1: called by the line), summed by weight.
        let mut frame_depth: HashMap<FrameId, u64> = HashMap::new();
        let mut leaf_self: HashMap<FrameId, u64> = HashMap::new();
        // Callers by how far up they are (the line's function's caller first), by weight.
        let mut caller_weight: Vec<HashMap<FrameId, u64>> = Vec::new();
        // The functions the line itself calls, by the weight under each.
        let mut direct_callee: HashMap<FrameId, u64> = HashMap::new();
        // The first frame seen of each function (file, name), which stands for all its lines.
        let mut function_frame: HashMap<(&str, &str), FrameId> = HashMap::new();
        let function_of = |f: FrameId| {
            let fr = profile.frame(f);
            (fr.file.as_str(), fr.function.as_str())
        };
        for &((stack, active), w) in &by_stack {
            let i = self.stacks[stack as usize].unwrap() as usize;
            let facts = &self.stack_facts[i];
            for &e in &facts.cost {
                if self.kb.entries[e as usize].spec.when == When::Any || !active {
                    *entry_weight.entry(e).or_default() += w;
                }
            }
            // By function, not by frame: a function seen at several of its lines is one piece of
            // evidence with all of its time.
            let mut seen = Vec::with_capacity(facts.beneath.len());
            let depth_of = facts.beneath.len() as u64;
            for (at, &f) in facts.beneath.iter().enumerate().rev() {
                let f = *function_frame.entry(function_of(f)).or_insert(f);
                if !seen.contains(&f) {
                    seen.push(f);
                    *frame_incl.entry(f).or_default() += w;
                    *frame_depth.entry(f).or_default() += (depth_of - at as u64) * w;
                }
            }
            if let Some(&leaf) = facts.beneath.first() {
                let leaf = *function_frame.entry(function_of(leaf)).or_insert(leaf);
                *leaf_self.entry(leaf).or_default() += w;
            }
            if let Some(&called) = facts.beneath.last() {
                let called = *function_frame.entry(function_of(called)).or_insert(called);
                *direct_callee.entry(called).or_default() += w;
            }
            for (depth, &c) in facts.callers.iter().enumerate() {
                if caller_weight.len() <= depth {
                    caller_weight.push(HashMap::new());
                }
                *caller_weight[depth].entry(c).or_default() += w;
            }
        }
        let acc = &self.lines[l];
        let (weight, self_weight, blocked, frame_id) = (acc.weight, acc.self_weight, acc.blocked, acc.frame);
        let frame = profile.frame(frame_id).clone();

        // Of the entries under at least half the heaviest one's weight, the one listed first in
        // the knowledge base: entries are listed specific first (compiling a pattern before
        // matching one), and a specific cost inside a general one (the compile inside
        // `re.search`) is what the time is spent on.
        let heaviest = entry_weight.values().copied().max().unwrap_or(0);
        let best = entry_weight
            .iter()
            .filter(|(_, &w)| w * 2 >= heaviest)
            .min_by_key(|(&e, _)| e)
            .map(|(&e, &w)| (e, w))
            .filter(|&(_, w)| w as f64 >= ENTRY_EXPLAINS * weight as f64);

        // Evidence: the frame of each matching entry that carries the most weight, then the
        // innermost functions where the time is actually spent.
        let mut evidence: Vec<Evidence> = Vec::new();
        let mut entries: Vec<(u16, u64)> = entry_weight.iter().map(|(&e, &w)| (e, w)).collect();
        entries.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (e, _) in entries.iter().take(3) {
            let top = frame_incl
                .iter()
                .filter(|(&f, _)| self.frames[f as usize].as_ref().is_some_and(|ff| ff.cost.contains(e)))
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)));
            // Under a hundredth of the time, an entry's frame is noise next to the ones that cost.
            if let Some((&f, &w)) = top.filter(|(_, &w)| share(w) >= 0.01) {
                self.push_evidence(&mut evidence, f, share(w));
            }
        }
        // Where the time under the line narrows to: the deepest function that still holds half
        // of it, the library function a fix most likely changes.
        // A package's function before the standard library's or the runtime's under it (ron's
        // `next_bytes_is_float`, not the `str::find` it calls): that is the code a maintainer
        // changes.
        let line_weight: u64 = by_stack.iter().map(|(_, w)| w).sum();
        let candidates: Vec<(FrameId, u64, f64, bool)> = frame_incl
            .iter()
            .filter(|(_, &w)| w * 2 >= line_weight)
            .map(|(&f, &w)| (f, w, frame_depth[&f] as f64 / w as f64, self.frame(f).origin == Origin::ThirdParty))
            .collect();
        let packaged = candidates.iter().any(|c| c.3);
        let narrowest = candidates
            .into_iter()
            .filter(|c| c.3 || !packaged)
            .map(|(f, w, depth, _)| (f, w, depth))
            .max_by(|a, b| a.2.total_cmp(&b.2).then(b.0.cmp(&a.0)));
        if let Some((f, w, _)) = narrowest.filter(|&(_, _, depth)| depth >= 2.0) {
            self.push_evidence(&mut evidence, f, share(w));
        }
        let mut leaves: Vec<(FrameId, u64)> = leaf_self.into_iter().collect();
        leaves.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (f, w) in leaves.into_iter().take(3) {
            if share(w) >= 0.01 {
                self.push_evidence(&mut evidence, f, share(w));
            }
        }

        let line_share = share(weight);
        let loop_here = self.loop_of(frame_id);
        // The loop that repeats the line may be a few calls up (a helper called by a helper
        // called in the loop): the nearest caller, through the heaviest at each level, in a loop.
        let loop_in_caller = caller_weight.iter().find_map(|by_frame| {
            let (&c, _) = by_frame.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
            self.loop_of(c)
        });

        let called: Vec<String> = self
            .code(&frame.file, frame.line)
            // Only method and module calls: builtins (min, len, sum) on a line are part of its
            // own computation.
            .map(|c| called_names(&c).into_iter().filter(|n| n.contains('.')).collect())
            .unwrap_or_default();
        // The self time of a line is in a call with no frame of its own: not one of the
        // calls that show Python frames under the line (those run Python code, seen apart).
        let python_callees: Vec<&str> = direct_callee
            .keys()
            .map(|&f| profile.frame(f))
            .filter(|f| f.kind == FrameKind::Python)
            .map(|f| f.function.rsplit('.').next().unwrap_or(&f.function))
            .collect();
        let compiled_call = called.iter().find(|n| !python_callees.contains(&n.rsplit('.').next().unwrap_or(n)));
        let b = crate::builtin::Builtins::get();
        // A module's top level outside any loop runs once: a set-up there is not repeated by
        // it, whatever the entry says of set-ups in general (one `jsonschema.validate` call).
        let runs_once = frame.function == "<module>" && loop_here.is_none() && loop_in_caller.is_none();
        let repeats = |e: u16| {
            matches!(self.kb.entries[e as usize].spec.kind, Kind::RepeatedSetup | Kind::NewConnectionPerRequest)
        };
        let best = best.filter(|&(e, _)| !(runs_once && repeats(e)));
        let (kind, rule, what, why, fix) = match (best, compiled_call) {
            (Some((e, _)), _) => {
                let spec = &self.kb.entries[e as usize].spec;
                let mut why = spec.why.clone();
                // A second entry under most of the same time names where it goes inside.
                if let Some(&(inner, w)) = entries.iter().find(|(o, w)| *o != e && *w * 2 >= weight) {
                    why = format!(
                        "{why}; most of it is {} ({:.0}%)",
                        self.kb.entries[inner as usize].spec.what,
                        share(w) * 100.0
                    );
                }
                (spec.kind, spec.id.clone(), spec.what.clone(), why, spec.fix_for(frame.kind).to_owned())
            }
            (None, _) if mode == Mode::Wall && blocked * 2 >= weight => {
                let values = [("blocked_percent", format!("{:.0}", blocked as f64 * 100.0 / weight as f64))];
                let id = "blocked";
                (b.kind(id), id.to_owned(), b.what(id, &values), b.why(id, &values), b.fix(id, &values))
            }
            // Self time on a line that calls something is time inside a C function, which has
            // no Python frame of its own.
            (None, Some(c_call)) if self_weight * 2 >= weight => {
                let values = [("call", c_call.clone())];
                let id = "c-call";
                (b.kind(id), id.to_owned(), b.what(id, &values), b.why(id, &values), b.fix(id, &values))
            }
            (None, _) if self_weight * 2 >= weight => {
                let id = "self-time";
                (b.kind(id), id.to_owned(), b.what(id, &[]), b.why(id, &[]), b.fix(id, &[]))
            }
            (None, _) => {
                // Named by the call on the line that carries the most time (not by an entry that
                // explains too little of it to classify the line).
                let heaviest =
                    direct_callee.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))).map(|(&f, &w)| (f, w));
                if let Some((f, w)) = heaviest {
                    let native = profile.frame(f).kind != FrameKind::Python;
                    let name = unqualified_name(profile.frame(f))
                        .filter(|_| native)
                        .unwrap_or_else(|| self.frame(f).qualified.clone());
                    let raw = self.frame(f).qualified.clone();
                    evidence.retain(|e| e.frame != name && e.frame != raw);
                    evidence.insert(
                        0,
                        Evidence {
                            frame: name,
                            file: profile.frame(f).file.clone(),
                            line: profile.frame(f).line,
                            share: share(w),
                        },
                    );
                }
                let callee = evidence.first().map(|e| e.frame.clone()).unwrap_or_else(|| "the calls it makes".into());
                let values = [("callee", callee)];
                let id = "hot-call";
                (b.kind(id), id.to_owned(), b.what(id, &values), b.why(id, &values), b.fix(id, &values))
            }
        };

        // What the rules may need to know of the line, gathered here; each rule (rules.rs) then
        // decides alone, in order, whether and how it rewrites the finding.
        let code = self.code(&frame.file, frame.line);
        let in_condition = matches!(rule.as_str(), "hot-call" | "c-call")
            && self.user.resolve(&frame.file).is_some_and(|p| self.source.bound_recomputed_every_pass(&p, frame.line));
        let lazy = self
            .lazy_setup(&frame.file, frame.line, &called)
            .map(|(made_at, made_code, e)| (made_at, made_code, self.kb.entries[e as usize].spec.clone()));
        let enclosing = loop_here.or(loop_in_caller);
        let loop_at = enclosing.map(|(owner, loop_line)| {
            let owner = profile.frame(owner);
            (owner.file.clone(), owner.function.clone(), loop_line, self.code(&owner.file, loop_line))
        });
        // Only a loop of the line's own function advances the position it searches from.
        let advancing = match (loop_here, self.user.resolve(&frame.file)) {
            (Some(_), Some(p)) => self.source.search_from_advancing_position(&p, frame.line),
            _ => None,
        };
        // The entry that named the kind, when it needs evidence that its cost repeats per item.
        let per_item_frames = self.kb.entries.iter().find(|e| e.spec.id == rule).and_then(|e| e.per_item_frames());
        let per_item = per_item_frames.map(|set| {
            frame_incl.iter().any(|(&f, &w)| {
                w as f64 >= PER_ITEM_EVIDENCE * weight as f64 && set.is_match(&self.frame(f).qualified.clone())
            })
        });
        let facts = rules::LineFacts {
            frame: &frame,
            per_item,
            share: line_share,
            in_condition,
            in_flight: if kind == Kind::SerialIo { self.in_flight(l) } else { None },
            lazy_setup: lazy.as_ref().map(|(at, code, spec)| (*at, code.as_str(), spec)),
            loop_at: loop_at
                .as_ref()
                .map(|(file, function, line, code)| (file.as_str(), function.as_str(), *line, code.as_deref())),
            advancing_search: advancing.as_ref().map(|(c, t, v)| (c.as_str(), t.as_str(), v.as_str())),
        };
        let mut draft = rules::Draft {
            kind,
            rule,
            what,
            why,
            fix,
            file: frame.file.clone(),
            line: frame.line,
            function: frame.function.clone(),
            code,
            evidence,
        };
        for apply in rules::RULES {
            apply(&mut draft, &facts, b);
        }
        let rules::Draft { kind, rule, what, mut why, fix, file, line, function, code, mut evidence } = draft;
        // The first use of an object set up lazily is partly the set-up's cost and partly the
        // use's own work, which stays after the fix; Python samples cannot tell the two apart,
        // so no bound is given for it (nor for a finding it is folded into).
        let paid_later = lazy.as_ref().is_some_and(|(_, _, spec)| spec.id == rule);
        let no_bound = paid_later.then(|| b.why("lazy-setup-no-bound", &[("line", frame.line.to_string())]));
        let enclosing_loop = enclosing.map(|(owner, l)| format!("{}:{}", short(&profile.frame(owner).file), l));
        let advice = match (&enclosing_loop, kind) {
            (Some(at), k) if k != Kind::SerialIo => format!("{fix} (the loop is at {at})"),
            _ => fix,
        };
        // The title is worded once the share is final (after the findings that are one thing
        // to change are folded together): see `Finding::finish_texts`.
        evidence.truncate(MAX_EVIDENCE);
        // Serial waits in a loop: the work/span bound over the calls counted (serial.rs), over
        // the whole run of a program that ended, else over the stretch that repeats the line.
        let span = match (kind, &loop_at, profile.seconds_per_weight()) {
            (Kind::SerialIo, Some((loop_file, _, loop_line, _)), Some(spw)) => self.serial_waits(l).and_then(|waits| {
                let run = self.whole_run_weight().unwrap_or((stretch.seconds / spw).round() as u64);
                let bound = waits.speedup(run)?;
                let outer = self.user.resolve(loop_file).and_then(|p| self.source.enclosing_loop(&p, *loop_line));
                Some((waits, run, bound, outer, spw))
            }),
            _ => None,
        };
        if let Some((waits, run, _, outer, spw)) = &span {
            let seconds = |w: u64| format!("{:.2}", w as f64 * spw);
            let mut values = vec![
                ("why", std::mem::take(&mut why)),
                ("calls", waits.calls.to_string()),
                ("slowest_ms", format!("{:.0}", waits.slowest as f64 * spw * 1e3)),
                ("total_s", seconds(waits.total)),
                ("remaining_s", seconds(waits.remaining(*run).unwrap_or(*run))),
                ("run_s", seconds(*run)),
            ];
            let id = match outer {
                Some(outer) => {
                    values.push(("outer_line", outer.to_string()));
                    "serial-span-nested"
                }
                None => "serial-span",
            };
            why = b.why(id, &values);
        }
        let amdahl = match (&span, path) {
            _ if paid_later => None,
            (Some((_, _, bound, _, _)), _) => Some(*bound),
            (None, Some(path)) => path.speedup(&[l]),
            (None, None) => speedup(weight as f64 / stretch.busy.max(1) as f64),
        };
        // The work the line does not do stays, and runs on the machine's CPUs at best: a
        // bound past that (a lock whose holders compute, on fewer CPUs than threads) is no bound.
        let line_running = weight - blocked;
        let cpu_cap = match (opts.cpus, profile.seconds_per_weight()) {
            // The critical path has the CPUs' bound in it already. Serial calls overlapped still
            // wait for the work that answers them when the program does it itself (a server
            // thread of the same process): that work stays on the machine's CPUs too.
            (Some(cpus), Some(spw))
                if (span.is_some() || path.is_none()) && stretch.seconds > 0.0 && stretch.running > line_running =>
            {
                let cpu_seconds = (stretch.running - line_running) as f64 * spw;
                Some((cpus as f64 * stretch.seconds / cpu_seconds, cpus, cpu_seconds))
            }
            _ => None,
        };
        let max_speedup = match (amdahl, cpu_cap) {
            (Some(a), Some((cap, cpus, cpu_seconds))) if cap < a => {
                why = b.why(
                    "cpu-cap",
                    &[
                        ("why", why),
                        ("cpu_seconds", format!("{cpu_seconds:.1}")),
                        ("stretch_seconds", format!("{:.1}", stretch.seconds)),
                        ("cpus", cpus.to_string()),
                        ("cap", format!("{cap:.1}")),
                    ],
                );
                Some(cap.max(1.0))
            }
            (a, _) => a,
        };
        Finding {
            rank: 0,
            kind,
            file,
            line,
            function,
            code,
            share: line_share,
            max_speedup,
            bound_weight: match (&span, path) {
                (Some((_, run, _, _, _)), _) => *run,
                (None, Some(p)) => p.samples(),
                (None, None) => stretch.busy,
            },
            explained: best.map(|(_, w)| w as f64 / weight.max(1) as f64).unwrap_or(1.0),
            title: String::new(),
            advice,
            why,
            evidence,
            recurrence,
            rule,
            enclosing_loop,
            gain_basis: match (&span, path) {
                (Some(_), _) => GainBasis::WorkSpan,
                (None, Some(_)) => GainBasis::CriticalPath,
                (None, None) => GainBasis::BusyShare,
            },
            what,
            no_bound,
            modelled_range: None,
        }
    }

    /// For a line calling `obj.method(...)`, the line above in the same function that made
    /// `obj` with a call a set-up entry knows, and that entry.
    pub(super) fn lazy_setup(&mut self, file: &str, line: u32, called: &[String]) -> Option<(u32, String, u16)> {
        let path = self.user.resolve(file)?;
        let receiver =
            called.iter().find_map(|c| c.rsplit_once('.').map(|(r, _)| r.trim_start_matches("self.").to_owned()))?;
        let (made_at, made_code) = self.source.assignment_of(&path, line, &receiver)?;
        let names = called_names(&made_code);
        let entry = self.kb.entries.iter().position(|e| {
            e.spec.role == Role::Cost
                && matches!(e.spec.kind, Kind::RepeatedSetup | Kind::NewConnectionPerRequest)
                && names.iter().any(|n| e.matches_call(n))
        })?;
        Some((made_at, made_code, entry as u16))
    }

    /// How many blocked samples of line `l` are in flight at once: the mean and the peak over
    /// the windows where the line waits, leaving out the first and last (partly covered). The
    /// mean, not the median: a sampler's late tick moves weight between neighbouring windows,
    /// which the mean cancels out. A window counts at most as many waits as threads waited in
    /// it: one thread's late tick can put more than a window's worth of weight in one window.
    pub(super) fn in_flight(&self, l: usize) -> Option<(f64, f64)> {
        // Which waits overlapped is read from their times.
        if !self.timeline {
            return None;
        }
        let window_weight = IN_FLIGHT_WINDOW_US as f64 / 1e6 / self.profile.seconds_per_weight()?;
        let windows = &self.lines[l].blocked_windows;
        let (first, last) = (*windows.keys().min()?, *windows.keys().max()?);
        let counts: Vec<f64> = windows
            .iter()
            .filter(|(&k, _)| last - first < 3 || (k != first && k != last))
            .map(|(_, (w, threads))| (*w as f64 / window_weight).min(threads.len() as f64))
            .collect();
        let peak = counts.iter().copied().fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.max(c))))?;
        Some((counts.iter().sum::<f64>() / counts.len() as f64, peak))
    }

    pub(super) fn push_evidence(&mut self, evidence: &mut Vec<Evidence>, f: FrameId, share: f64) {
        let qualified = self.frame(f).qualified.clone();
        if evidence.iter().any(|e| e.frame == qualified) {
            return;
        }
        let frame = self.profile.frame(f);
        evidence.push(Evidence { frame: qualified, file: frame.file.clone(), line: frame.line, share });
    }
}

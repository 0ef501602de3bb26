//! A loop's own iteration spread over its lines is one thing to change, and a walk over
//! long-lived state (an object's attribute, a module's table) started again on every call is
//! changed where it is started: the caller's line, which can cache or index what the walk finds.
//!
//! py-spy shows such a walk as a few cheap lines, each a small share, and the two caller lines
//! above them holding nearly all of it: the line-by-line view says "call `extendleft()` less
//! often" where the fix is to walk once.

use super::*;

/// Rules whose findings are a loop's own iteration: the line's own code and calls into
/// compiled code (a container's method, `isinstance`). A call into code with frames of its own
/// (`hot-call`) is separate work with a fix of its own, and stays apart.
const ITERATION_RULES: &[&str] = &["self-time", "c-call"];

/// The bound on the gain of removing a part of some lines' weight: (lines, their first and last
/// sighting in µs, the weight removed, the part of the lines' weight it is).
pub(super) type Gain<'a> = dyn Fn(&[usize], (u64, u64), u64, f64) -> Option<f64> + 'a;

/// A line with this part of its loop's weight is the loop's cost by itself.
const ONE_LINE_DOMINATES: f64 = 0.6;

/// A caller is named as where the walk starts when it starts at least this part of it.
const CALLER_PART: f64 = 0.2;

/// A loop's lines in one function, with the findings among them.
struct Walk {
    file: String,
    function: String,
    header: u32,
    header_code: Option<String>,
    /// Line accumulators of the loop's lines (the header included) with weight.
    lines: Vec<usize>,
    weight: u64,
    /// Indices into the findings of the loop's lines.
    findings: Vec<usize>,
}

impl Engine<'_> {
    /// Folds each loop whose own iteration is spread over two or more findings into one, at
    /// its header; and moves a walk over long-lived state to the caller lines that start it.
    /// `gain` bounds the speedup of removing a part of the given lines' weight.
    pub(super) fn fold_walks(&mut self, findings: &mut Vec<Finding>, share: &dyn Fn(u64) -> f64, gain: &Gain) {
        let b = crate::builtin::Builtins::get();
        let mut gone: Vec<usize> = Vec::new();
        let mut added: Vec<Finding> = Vec::new();
        for walk in self.walks(findings) {
            let callers = self.callers_starting(&walk);
            let mut made: Vec<Finding> = Vec::new();
            let mut started = 0u64;
            for (caller, w) in callers {
                if (w as f64) < CALLER_PART * walk.weight as f64 || w < MIN_FINDING_WEIGHT {
                    continue;
                }
                let c = self.profile.frame(caller).clone();
                let Some(code) = self.code(&c.file, c.line) else { continue };
                let callee = walk.function.rsplit('.').next().unwrap_or(&walk.function).to_owned();
                if !self.walks_long_lived_state(&walk, &c.file, &code, &callee) {
                    continue;
                }
                started += w;
                made.push(self.walk_finding(&walk, findings, (&c, code, w), share, gain, b));
            }
            if made.is_empty() {
                // No caller starts it: the loop's own lines are one finding at the loop. The
                // functions its body calls are other work, with findings of their own.
                let own: Vec<usize> = walk
                    .findings
                    .iter()
                    .copied()
                    .filter(|&i| findings[i].file == walk.file && findings[i].function == walk.function)
                    .collect();
                let own_weight: u64 = walk
                    .lines
                    .iter()
                    .filter(|&&l| {
                        let f = self.profile.frame(self.lines[l].frame);
                        f.file == walk.file && f.function == walk.function
                    })
                    .map(|&l| self.lines[l].weight)
                    .sum();
                let mut kept: Vec<Finding> = own.iter().map(|&i| findings[i].clone()).collect();
                kept.sort_by(|a, b| b.share.total_cmp(&a.share));
                // One line holding most of the loop is the line to change; the header folds
                // into it (merge::fold_loop_headers).
                let spread = kept.first().is_some_and(|f| f.share < ONE_LINE_DOMINATES * share(own_weight));
                if kept.len() >= 2 && spread && own_weight >= MIN_FINDING_WEIGHT {
                    added.push(self.loop_finding(&walk, kept, own_weight, share, gain, b));
                    gone.extend(own);
                }
                continue;
            }
            let mut kept: Vec<Finding> = walk.findings.iter().map(|&i| findings[i].clone()).collect();
            kept.sort_by(|a, b| b.share.total_cmp(&a.share));
            let rest = walk.weight.saturating_sub(started);
            // What the callers leave of the walk is a finding of its own only when it is a
            // good part of it and spread over its lines; else it stays with its heaviest line.
            let spread = kept.first().is_some_and(|f| f.share < ONE_LINE_DOMINATES * share(walk.weight));
            let loop_finding = if kept.len() >= 2
                && spread
                && rest as f64 >= CALLER_PART * walk.weight as f64
                && rest >= MIN_FINDING_WEIGHT
            {
                Some(self.loop_finding(&walk, kept, rest, share, gain, b))
            } else {
                kept.into_iter().next().filter(|f| f.share > share(started) * 0.5)
            };
            gone.extend(&walk.findings);
            added.extend(made);
            added.extend(loop_finding);
        }
        gone.sort_unstable();
        gone.dedup();
        for i in gone.into_iter().rev() {
            findings.remove(i);
        }
        findings.extend(added);
    }

    /// The gain of removing `part` of the walk's lines' weight.
    fn walk_gain(&self, walk: &Walk, part: f64, gain: &Gain) -> Option<f64> {
        let first = walk.lines.iter().map(|&l| self.lines[l].first_us).min().unwrap_or(0);
        let last = walk.lines.iter().map(|&l| self.lines[l].last_us).max().unwrap_or(0);
        gain(&walk.lines, (first, last), (walk.weight as f64 * part) as u64, part)
    }

    /// The loops of the user's code whose findings are their own iteration, each with its lines:
    /// the lines of the loop's own function, and those of the small functions its body calls
    /// (a walk that tests each node with `matcher(node)` spends its time in `matcher`).
    fn walks(&mut self, findings: &[Finding]) -> Vec<Walk> {
        let mut walks: Vec<Walk> = Vec::new();
        for (i, f) in findings.iter().enumerate() {
            if !ITERATION_RULES.contains(&f.rule.as_str()) {
                continue;
            }
            let Some(l) = self.line_index(&f.file, f.line, &f.function) else { continue };
            let Some((file, function, header)) = self.loop_key(l) else { continue };
            match walks.iter_mut().find(|w| w.file == file && w.function == function && w.header == header) {
                Some(w) => w.findings.push(i),
                None => walks.push(Walk {
                    file,
                    function,
                    header,
                    header_code: None,
                    lines: Vec::new(),
                    weight: 0,
                    findings: vec![i],
                }),
            }
        }
        for w in &mut walks {
            w.header_code = self.code(&w.file, w.header);
            for l in 0..self.lines.len() {
                if self.lines[l].weight == 0 {
                    continue;
                }
                if self.loop_key(l).is_some_and(|(file, function, header)| {
                    file == w.file && function == w.function && header == w.header
                }) {
                    w.lines.push(l);
                    w.weight += self.lines[l].weight;
                }
            }
        }
        walks
    }

    /// The loop a line's time is spent in: its own function's, or else the nearest caller's
    /// (through its heaviest stack), as (file, function, header).
    fn loop_key(&mut self, l: usize) -> Option<(String, String, u32)> {
        let f = self.profile.frame(self.lines[l].frame).clone();
        if let Some(header) = self.own_loop(&f.file, f.line) {
            return Some((f.file, f.function, header));
        }
        let (&(stack, _), _) = self.lines[l].by_stack.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
        let i = self.stacks[stack as usize]? as usize;
        let callers = self.stack_facts[i].callers.clone();
        for c in callers {
            let c = self.profile.frame(c).clone();
            if let Some(header) = self.own_loop(&c.file, c.line) {
                return Some((c.file, c.function, header));
            }
        }
        None
    }

    /// The loop of its own function a line is in: the innermost enclosing one, or the line
    /// itself when it is a loop's header.
    fn own_loop(&mut self, file: &str, line: u32) -> Option<u32> {
        let path = self.user.resolve(file)?;
        let code = self.source.line(&path, line)?;
        let t = code.trim_start();
        if ["for ", "while ", "async for "].iter().any(|k| t.starts_with(k)) {
            return Some(line);
        }
        self.source.enclosing_loop(&path, line)
    }

    /// The user lines outside the walk's function that start it, by the weight under each: the
    /// first caller above the walk's own frame.
    fn callers_starting(&mut self, walk: &Walk) -> Vec<(FrameId, u64)> {
        let mut by_caller: HashMap<FrameId, u64> = HashMap::new();
        for &l in &walk.lines {
            let own = self.profile.frame(self.lines[l].frame);
            let in_walk_function = own.file == walk.file && own.function == walk.function;
            let stacks: Vec<(StackId, u64)> = self.lines[l].by_stack.iter().map(|(&(s, _), &w)| (s, w)).collect();
            for (stack, w) in stacks {
                let Some(i) = self.stacks[stack as usize] else { continue };
                let mut past_walk = in_walk_function;
                let mut caller = None;
                for &c in &self.stack_facts[i as usize].callers {
                    let f = self.profile.frame(c);
                    if f.file == walk.file && f.function == walk.function {
                        past_walk = true;
                    } else if past_walk {
                        caller = Some(c);
                        break;
                    }
                }
                if let Some(c) = caller {
                    *by_caller.entry(c).or_default() += w;
                }
            }
        }
        let mut callers: Vec<(FrameId, u64)> = by_caller.into_iter().collect();
        callers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        callers
    }

    /// Whether each call walks the same structure: the loop iterates state that outlives the
    /// call (`self.items`, `cls.table`, a module-level name), or the caller hands the walk such
    /// state (`self._finditem(self.referrer, key)`). A walk over the call's own argument
    /// (`total(order)`) is per-call work, which no cache saves.
    fn walks_long_lived_state(&mut self, walk: &Walk, caller_file: &str, caller_code: &str, callee: &str) -> bool {
        let module_names = self.module_level_names(&walk.file);
        let caller_names = self.module_level_names(caller_file);
        let long_lived = |expr: &str, modules: &[String]| {
            let e = expr.trim();
            e.starts_with("self.") || e.starts_with("cls.") || modules.iter().any(|m| m == e)
        };
        if let Some(iterable) = walk.header_code.as_deref().and_then(loop_iterable) {
            if long_lived(&iterable, &module_names) {
                return true;
            }
        }
        call_arguments(caller_code, callee).iter().any(|a| long_lived(a, &caller_names))
    }

    /// Names assigned at a module's top level (its tables and constants).
    fn module_level_names(&mut self, file: &str) -> Vec<String> {
        let Some(path) = self.user.resolve(file) else { return Vec::new() };
        let Some(lines) = self.source.lines(&path) else { return Vec::new() };
        lines
            .iter()
            .filter(|l| !l.starts_with([' ', '\t', '#']))
            .filter_map(|l| {
                let (name, _) = l.split_once('=')?;
                let name = name.split(':').next()?.trim();
                (!name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_')).then(|| name.to_owned())
            })
            .collect()
    }

    /// The finding at a caller line that starts the walk.
    fn walk_finding(
        &mut self,
        walk: &Walk,
        findings: &[Finding],
        (caller, code, w): (&onefix_model::Frame, String, u64),
        share: &dyn Fn(u64) -> f64,
        gain: &Gain,
        b: &crate::builtin::Builtins,
    ) -> Finding {
        let walk_at = format!("{}:{}", short(&walk.file), walk.header);
        let walk_code = walk.header_code.clone().unwrap_or_default();
        let part = w as f64 / walk.weight.max(1) as f64;
        let values = [
            ("walk_at", walk_at.clone()),
            ("walk_code", walk_code.clone()),
            ("function", walk.function.clone()),
            ("part", format!("{:.0}", part * 100.0)),
        ];
        let mut evidence = vec![Evidence {
            frame: format!("{} (the walk in {})", walk_code.trim(), walk.function),
            file: walk.file.clone(),
            line: walk.header,
            share: share(w),
        }];
        for &i in &walk.findings {
            join_evidence(
                &mut evidence,
                findings[i].evidence.iter().map(|e| Evidence { share: e.share * part, ..e.clone() }),
            );
        }
        let first = walk.findings.iter().map(|&i| &findings[i]).max_by(|a, b| a.share.total_cmp(&b.share));
        let recurrence = walk.findings.iter().filter_map(|&i| findings[i].recurrence).reduce(f64::max);
        let id = "repeated-walk";
        Finding {
            rank: 0,
            kind: b.kind(id),
            file: caller.file.clone(),
            line: caller.line,
            function: caller.function.clone(),
            code: Some(code),
            share: share(w),
            max_speedup: self.walk_gain(walk, part, gain),
            bound_weight: first.map_or(0, |f| f.bound_weight),
            title: String::new(),
            advice: b.fix(id, &values),
            why: b.why(id, &values),
            evidence,
            recurrence,
            rule: id.to_owned(),
            explained: 1.0,
            enclosing_loop: None,
            gain_basis: first.map_or(GainBasis::BusyShare, |f| f.gain_basis),
            what: b.what(id, &values),
            no_bound: None,
            modelled_range: None,
        }
    }

    /// The loop's lines as one finding at its header.
    fn loop_finding(
        &mut self,
        walk: &Walk,
        kept: Vec<Finding>,
        weight: u64,
        share: &dyn Fn(u64) -> f64,
        gain: &Gain,
        b: &crate::builtin::Builtins,
    ) -> Finding {
        // Each line's part of the loop's time.
        let loop_share = share(walk.weight).max(1e-9);
        let parts: Vec<String> =
            kept.iter().map(|f| format!("line {} {:.0}%", f.line, f.share * 100.0 / loop_share)).collect();
        let id = "loop-iteration";
        let values = [
            ("loop_at", format!("{}:{}", short(&walk.file), walk.header)),
            ("lines", kept.len().to_string()),
            ("parts", parts.join(", ")),
        ];
        let part = weight as f64 / walk.weight.max(1) as f64;
        let mut evidence = Vec::new();
        for f in &kept {
            join_evidence(&mut evidence, f.evidence.iter().cloned());
        }
        let first = kept.into_iter().next().expect("a loop finding folds two findings or more");
        Finding {
            kind: b.kind(id),
            file: walk.file.clone(),
            function: walk.function.clone(),
            line: walk.header,
            code: walk.header_code.clone(),
            share: share(weight),
            max_speedup: self.walk_gain(walk, part, gain),
            why: b.why(id, &values),
            advice: b.fix(id, &values),
            evidence,
            rule: id.to_owned(),
            explained: 1.0,
            what: b.what(id, &values),
            no_bound: None,
            ..first
        }
    }
}

/// What a loop header iterates: `for k, v in self.items:` gives `self.items`; `while values:`
/// gives nothing (its state is local).
fn loop_iterable(header: &str) -> Option<String> {
    let t = header.split('#').next()?.trim();
    let body = t.strip_prefix("for ").or_else(|| t.strip_prefix("async for "))?;
    let (_, iterable) = body.split_once(" in ")?;
    let iterable = iterable.trim_end_matches(':').trim();
    // `self.items.items()`, `self.index.values()`: the structure is the receiver.
    let base = iterable.strip_suffix("()").and_then(|e| e.rsplit_once('.').map(|(r, _)| r)).unwrap_or(iterable);
    Some(base.to_owned())
}

/// The top-level arguments of the first call to `callee` on a line of code.
pub(super) fn call_arguments(code: &str, callee: &str) -> Vec<String> {
    let Some(at) = code.find(&format!("{callee}(")) else { return Vec::new() };
    let rest = &code[at + callee.len() + 1..];
    let (mut depth, mut current, mut args) = (0i32, String::new(), Vec::new());
    for c in rest.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => break,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                args.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    args.push(current);
    args.into_iter().map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_header_and_a_call_say_what_they_walk() {
        assert_eq!(loop_iterable("for k, v in self.items:").as_deref(), Some("self.items"));
        assert_eq!(loop_iterable("for k, v in self.index.items():  # all").as_deref(), Some("self.index"));
        assert_eq!(loop_iterable("while values:"), None);
        assert_eq!(
            call_arguments("for s in self._finditem(self.referrer, \"$id\"):", "_finditem"),
            vec!["self.referrer".to_owned(), "\"$id\"".to_owned()]
        );
        assert_eq!(call_arguments("x = total(f(a, b), c)", "total"), vec!["f(a, b)".to_owned(), "c".to_owned()]);
        assert!(call_arguments("x = other(a)", "total").is_empty());
    }
}

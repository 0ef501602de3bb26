//! An object built again on every call: a line that constructs an instance of a class whose
//! construction is a large part of the run, spread over many cheap lines of the class's code,
//! and which runs again and again. Line by line, the cost is a dozen findings of a few percent
//! each (a file read here, a struct unpacked there, an exception built and caught), and the
//! heaviest of them is named; the fix is at the line that builds the object: build it once, or
//! cache it by its arguments (python-dateutil's `tzfile(filepath)` in `gettz`, tomlkit's
//! `OutOfOrderTableProxy(...)` built "to check for errors" after every append).
//!
//! Only a construction the samples see entered again and again is named: a program that builds
//! its one application object and runs inside its constructor is not told to build it once.

use std::collections::HashSet;

use super::*;

/// A construction is a finding when it holds at least this share of the busy time...
const MIN_SHARE: f64 = 0.2;
/// ...it runs mostly in the user's code under the line (the line itself holds less than this
/// part of it: else the constructor is a library's, and the line's own finding says so)...
const SPREAD: f64 = 0.5;
/// ...no finding of a specific kind (a regex, a copy, a connection) holds this part of it (that
/// finding already says what the construction does that costs; a smaller one stays a finding
/// of its own beside it)...
const EXPLAINED_BY_ONE: f64 = 0.5;
/// ...and its thread entered it at least this many separate times between samples.
const MIN_ENTRIES: u64 = 4;
/// A finding whose line's weight is at least this part under the construction is part of it.
const FOLDED: f64 = 0.5;
/// Constructions of the same class this deep in the stacks under one, on average, build
/// others inside them.
const NESTED: f64 = 1.5;
/// Functions named in a construction's evidence.
const EVIDENCE_FUNCTIONS: usize = 5;

/// One line that constructs objects, with what its constructions cost.
#[derive(Default)]
struct Construction {
    class: String,
    weight: u64,
    /// Constructions of the same class nested in the stacks under it, weighted: more than one
    /// when each construction builds another.
    nested: u64,
    /// Line accumulators under the construction, with their weight under it.
    lines: HashMap<usize, u64>,
    /// Functions run by the construction (the constructor included), with their weight and
    /// their heaviest frame: where its time goes.
    functions: HashMap<(String, String), (u64, FrameId)>,
}

impl Engine<'_> {
    /// The user lines in a stack that call a constructor (a Python `__init__`, a Rust
    /// `Type::new`, a C++ `Type::Type` beneath them), outermost occurrence first, each with the
    /// depth (leaf first) of the constructor's frame.
    fn constructions_in(&mut self, stack: StackId) -> Vec<(FrameId, usize)> {
        let leaf_first: Vec<FrameId> = self.profile.stack_frames_leaf_first(Some(stack)).collect();
        let mut found: Vec<(FrameId, usize)> = Vec::new();
        for i in (1..leaf_first.len()).rev() {
            let (callee, caller) = (self.profile.frame(leaf_first[i - 1]), self.profile.frame(leaf_first[i]));
            if callee.kind != caller.kind || !is_constructor(callee) {
                continue;
            }
            // `super().__init__(...)` continues a construction already counted above it.
            if callee.kind == FrameKind::Python && is_constructor(caller) && caller.file == callee.file {
                continue;
            }
            if self.frame(leaf_first[i]).origin != Origin::User {
                continue;
            }
            if !found.iter().any(|&(f, _)| f == leaf_first[i]) {
                found.push((leaf_first[i], i - 1));
            }
        }
        found
    }

    /// [`Engine::constructions_in`], computed once per stack.
    fn constructions_cached<'m>(
        &mut self,
        stack: StackId,
        by_stack: &'m mut HashMap<StackId, Vec<(FrameId, usize)>>,
    ) -> &'m [(FrameId, usize)] {
        by_stack.entry(stack).or_insert_with(|| self.constructions_in(stack))
    }

    /// Names the line that builds an object on every call when the object's construction is
    /// the cost, spread over its class's lines; folds the findings inside it into it.
    pub(super) fn fold_constructions(
        &mut self,
        findings: &mut Vec<Finding>,
        share: &dyn Fn(u64) -> f64,
        gain: &walk::Gain,
        mode: Mode,
    ) {
        // Without sample times (a profile imported from pprof or folded stacks) nothing says
        // whether a construction ran once or again and again.
        if !self.timeline {
            return;
        }
        let mut by_stack: HashMap<StackId, Vec<(FrameId, usize)>> = HashMap::new();
        let mut constructions: HashMap<FrameId, Construction> = HashMap::new();
        for l in 0..self.lines.len() {
            let stacks: Vec<(StackId, u64)> = self.lines[l].by_stack.iter().map(|(&(s, _), &w)| (s, w)).collect();
            for (stack, w) in stacks {
                let found = self.constructions_cached(stack, &mut by_stack).to_vec();
                if found.is_empty() {
                    continue;
                }
                let leaf_first: Vec<FrameId> = self.profile.stack_frames_leaf_first(Some(stack)).collect();
                for (at, init_depth) in found {
                    let c = constructions.entry(at).or_default();
                    if c.class.is_empty() {
                        c.class = class_of(self.profile.frame(leaf_first[init_depth]));
                    }
                    c.weight += w;
                    let init = self.profile.frame(leaf_first[init_depth]);
                    let nested = leaf_first
                        .iter()
                        .filter(|&&f| {
                            let f = self.profile.frame(f);
                            f.function == init.function && f.file == init.file
                        })
                        .count() as u64;
                    c.nested += nested * w;
                    *c.lines.entry(l).or_default() += w;
                    let mut seen: HashSet<(&str, &str)> = HashSet::new();
                    for &f in &leaf_first[..=init_depth] {
                        let frame = self.profile.frame(f);
                        if frame.kind == FrameKind::Kernel || !seen.insert((&frame.file, &frame.function)) {
                            continue;
                        }
                        let e = c.functions.entry((frame.file.clone(), frame.function.clone())).or_insert((0, f));
                        e.0 += w;
                    }
                }
            }
        }
        let mut candidates: Vec<(FrameId, Construction)> = constructions
            .into_iter()
            .filter(|(_, c)| share(c.weight) >= MIN_SHARE && c.weight >= MIN_FINDING_WEIGHT)
            .filter(|(at, c)| {
                let own = self.line_of_frame.get(at).and_then(|l| c.lines.get(l)).copied().unwrap_or(0);
                (own as f64) < SPREAD * c.weight as f64
            })
            .collect();
        // The heaviest first: a construction inside a named one is part of it.
        candidates.sort_by(|a, b| b.1.weight.cmp(&a.1.weight).then(a.0.cmp(&b.0)));
        let b = crate::builtin::Builtins::get();
        let profile = self.profile;
        // The samples in time order, per thread, for counting entries: sorted once, when a
        // construction gets that far.
        let mut order: Option<Vec<&Sample>> = None;
        let mut named: Vec<HashMap<usize, u64>> = Vec::new();
        for (at, c) in candidates {
            // Two constructions that call each other (a proxy whose constructor appends, which
            // builds a proxy) are one cost: the heavier one is named.
            let shared = |lines: &HashMap<usize, u64>| -> u64 {
                c.lines.iter().map(|(l, &w)| w.min(lines.get(l).copied().unwrap_or(0))).sum()
            };
            if named.iter().any(|lines| shared(lines) as f64 >= FOLDED * c.weight as f64) {
                continue;
            }
            let caller = self.profile.frame(at).clone();
            // Findings inside it: generic ones fold into it, and so does one at the line that
            // builds it (what part of the construction it saw); a specific one holding a good
            // part of it already says what the construction does that costs.
            let mut inside: Vec<usize> = Vec::new();
            let mut explained = false;
            for (i, f) in findings.iter().enumerate() {
                if f.file == caller.file && f.line == caller.line {
                    inside.push(i);
                    continue;
                }
                // A finding at a loop's header weighs what its loop's lines do: its function's
                // weight under the construction says whether it is part of it.
                let under = match self.line_index(&f.file, f.line, &f.function) {
                    Some(l) if self.lines[l].weight > 0 => {
                        let under = c.lines.get(&l).copied().unwrap_or(0);
                        (under as f64 >= FOLDED * self.lines[l].weight as f64).then_some(under)
                    }
                    _ => c
                        .functions
                        .get(&(f.file.clone(), f.function.clone()))
                        .filter(|&&(w, _)| share(w) >= FOLDED * f.share)
                        .map(|&(w, _)| w),
                };
                let Some(under) = under else { continue };
                if matches!(f.kind, Kind::HotCall | Kind::HotLoopCompute) {
                    inside.push(i);
                } else if under as f64 >= EXPLAINED_BY_ONE * c.weight as f64 {
                    explained = true;
                }
            }
            if explained {
                continue;
            }
            let Some(code) = self.code(&caller.file, caller.line) else { continue };
            if code.contains("__init__(") {
                continue;
            }
            let order = order.get_or_insert_with(|| {
                let mut o: Vec<&Sample> = profile.samples.iter().filter(|s| mode.counts(s.state)).collect();
                o.sort_by_key(|s| (s.thread, s.time_us));
                o
            });
            let entries = self.entries(at, order, &mut by_stack);
            if entries < MIN_ENTRIES {
                continue;
            }
            let class = if c.class.is_empty() { called_name(&code).unwrap_or_default() } else { c.class.clone() };
            let (top_line, top) =
                c.lines.iter().map(|(&l, &w)| (l, w)).max_by_key(|&(l, w)| (w, std::cmp::Reverse(l))).unwrap_or((0, 0));
            let top_frame = self.profile.frame(self.lines[top_line].frame);
            let top_at = format!("{}:{}", short(&top_frame.file), top_frame.line);
            let depth = c.nested as f64 / c.weight.max(1) as f64;
            // Built from the item of the loop around it (`Processor(path)` in `for path in
            // paths:`), the object is that item's work: building it once is no fix.
            let loop_at = self.user.resolve(&caller.file).and_then(|p| self.source.enclosing_loop(&p, caller.line));
            let item_loop = loop_at.filter(|&header| {
                let targets = self.code(&caller.file, header).map(|h| loop_targets(&h)).unwrap_or_default();
                let callee = called_name(&code).unwrap_or_default();
                walk::call_arguments(&code, &callee).iter().any(|a| targets.contains(a))
            });
            // Built per item with one line of it holding most of it, that line is what to make
            // cheaper, and its own finding says so.
            if item_loop.is_some() && top as f64 >= SPREAD * c.weight as f64 {
                continue;
            }
            let values = [
                ("class", class),
                ("top_at", top_at),
                ("entries", entries.to_string()),
                ("lines", c.lines.len().to_string()),
                ("top", format!("{:.0}", share(top) * 100.0)),
                ("depth", format!("{depth:.1}")),
                ("loop_at", item_loop.map(|h| format!("{}:{h}", short(&caller.file))).unwrap_or_default()),
            ];
            // Each construction building others of its class inside it: the cost multiplies
            // with the depth, which the words say.
            let words = match (item_loop, depth >= NESTED) {
                (Some(_), _) => "object-per-item",
                (None, true) => "object-per-call-nested",
                (None, false) => "object-per-call",
            };
            let mut functions: Vec<_> = c.functions.iter().collect();
            functions.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
            let evidence: Vec<Evidence> = functions
                .into_iter()
                .take(EVIDENCE_FUNCTIONS)
                .map(|((file, function), &(w, f))| Evidence {
                    frame: function.clone(),
                    file: file.clone(),
                    line: self.profile.frame(f).line,
                    share: share(w),
                })
                .collect();
            let mut evidence = evidence;
            for &i in &inside {
                let f = &findings[i];
                if f.file == caller.file && f.line == caller.line {
                    join_evidence(&mut evidence, f.evidence.iter().cloned());
                }
            }
            evidence.truncate(MAX_EVIDENCE);
            let lines: Vec<usize> = c.lines.keys().copied().collect();
            let total: u64 = lines.iter().map(|&l| self.lines[l].weight).sum();
            let first = lines.iter().map(|&l| self.lines[l].first_us).min().unwrap_or(0);
            let last = lines.iter().map(|&l| self.lines[l].last_us).max().unwrap_or(0);
            let part = c.weight as f64 / total.max(1) as f64;
            let heaviest = inside.iter().map(|&i| &findings[i]).max_by(|a, b| a.share.total_cmp(&b.share));
            let id = "object-per-call";
            let finding = Finding {
                rank: 0,
                kind: b.kind(words),
                file: caller.file.clone(),
                line: caller.line,
                function: caller.function.clone(),
                code: Some(code),
                share: share(c.weight),
                max_speedup: gain(&lines, (first, last), c.weight, part),
                bound_weight: heaviest.map_or(0, |f| f.bound_weight),
                title: String::new(),
                advice: b.fix(words, &values),
                why: b.why(words, &values),
                evidence,
                recurrence: heaviest.and_then(|f| f.recurrence),
                rule: id.to_owned(),
                explained: 1.0,
                enclosing_loop: None,
                gain_basis: heaviest.map_or(GainBasis::BusyShare, |f| f.gain_basis),
                what: b.what(words, &values),
                no_bound: None,
                modelled_range: None,
            };
            for i in inside.into_iter().rev() {
                findings.remove(i);
            }
            findings.push(finding);
            named.push(c.lines);
        }
    }

    /// How many separate times the threads entered the construction at `at`: runs of samples
    /// under it, per thread in time order. A lower bound: two calls a sample apart are one run.
    /// `order` is the samples the mode counts, by thread and time.
    fn entries(
        &mut self,
        at: FrameId,
        order: &[&Sample],
        by_stack: &mut HashMap<StackId, Vec<(FrameId, usize)>>,
    ) -> u64 {
        let (mut entries, mut previous) = (0u64, None::<(ThreadId, bool)>);
        for s in order {
            let inside =
                s.stack.is_some_and(|stack| self.constructions_cached(stack, by_stack).iter().any(|&(f, _)| f == at));
            let was_inside = previous.is_some_and(|(t, i)| t == s.thread && i);
            if inside && !was_inside {
                entries += 1;
            }
            previous = Some((s.thread, inside));
        }
        entries
    }
}

/// A constructor's frame: Python's `__init__` (bare or qualified, `tzfile.__init__`), Rust's
/// `Type::new`, C++'s `Type::Type`.
fn is_constructor(frame: &onefix_model::Frame) -> bool {
    match frame.kind {
        FrameKind::Python => frame.function == "__init__" || frame.function.ends_with(".__init__"),
        FrameKind::Native => native_class(&frame.function).is_some(),
        _ => false,
    }
}

/// The class a constructor builds (`tzfile.__init__` gives `tzfile`, `app::zone::Zone<T>::new`
/// gives `Zone`); empty for a bare `__init__`.
fn class_of(frame: &onefix_model::Frame) -> String {
    match frame.kind {
        FrameKind::Python => frame
            .function
            .strip_suffix(".__init__")
            .map(|c| c.rsplit('.').next().unwrap_or(c).to_owned())
            .unwrap_or_default(),
        _ => native_class(&frame.function).unwrap_or_default(),
    }
}

/// The type a native constructor builds: the path's segment before `new` (a Rust type's name
/// starts with a capital), or a C++ constructor's class (`ns::Zone::Zone(int)`), generic
/// parameters and argument lists left out.
fn native_class(function: &str) -> Option<String> {
    let (mut plain, mut depth) = (String::new(), 0i32);
    for c in function.chars() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let segments: Vec<&str> = plain.split("::").map(str::trim).collect();
    let [.., owner, last] = segments.as_slice() else { return None };
    let is_type = owner.chars().next().is_some_and(char::is_uppercase);
    (is_type && (*last == "new" || last == owner)).then(|| (*owner).to_owned())
}

/// The names a `for` header binds: `for key, (a, b) in items:` gives `key`, `a`, `b`.
fn loop_targets(header: &str) -> Vec<String> {
    let t = header.trim_start();
    let Some(body) = t.strip_prefix("for ").or_else(|| t.strip_prefix("async for ")) else { return Vec::new() };
    let Some((targets, _)) = body.split_once(" in ") else { return Vec::new() };
    targets.split([',', '(', ')', '[', ']']).map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect()
}

/// The name a line of code calls first: `tz = tzfile(filepath)` gives `tzfile`.
fn called_name(code: &str) -> Option<String> {
    let at = code.find('(')?;
    let name: String = code[..at]
        .chars()
        .rev()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
        .collect::<Vec<char>>()
        .into_iter()
        .rev()
        .collect();
    let name = name.rsplit('.').next().unwrap_or(&name).to_owned();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constructor_and_the_class_it_builds_are_read_from_names_and_code() {
        let python = |f: &str| onefix_model::Frame::python(f, "/app/tz.py", 1);
        let native = |f: &str| onefix_model::Frame { kind: FrameKind::Native, ..python(f) };
        assert!(is_constructor(&python("__init__")) && is_constructor(&python("tzfile.__init__")));
        assert!(!is_constructor(&python("__init__helper")) && !is_constructor(&python("init")));
        assert_eq!(class_of(&python("tz.tzfile.__init__")), "tzfile");
        assert_eq!(class_of(&python("__init__")), "");
        assert_eq!(class_of(&native("app::zone::Zone<T>::new")), "Zone");
        assert_eq!(class_of(&native("ns::Zone::Zone(int, char const*)")), "Zone");
        assert!(!is_constructor(&native("app::zone::new")) && !is_constructor(&native("app::Zone::load")));
        assert!(!is_constructor(&native("new")));
        assert_eq!(called_name("        tz = tzfile(filepath)").as_deref(), Some("tzfile"));
        assert_eq!(called_name("return proxy.OutOfOrderTableProxy(self, t)").as_deref(), Some("OutOfOrderTableProxy"));
        assert_eq!(called_name("x = 1"), None);
        assert_eq!(loop_targets("    for key, (a, b) in items.items():"), vec!["key", "a", "b"]);
        assert!(loop_targets("while True:").is_empty());
    }
}

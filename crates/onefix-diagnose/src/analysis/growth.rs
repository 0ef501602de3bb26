//! Work per call that grows with the input: a buffer scanned whole each time it grows, a
//! recursive function that scans its input at every level, a string or bytes copied whole to
//! append to it. Each is quadratic in the input, and each fix does less per call rather than
//! fewer calls, so they get their own kind and words.
//!
//! What is read: the line's source (what it scans and whether that grows), the stacks (how
//! deep the line's function recurses) and the samples' times (whether the line's share rises as
//! the run goes on, the growth itself where one long run shows it).

use super::*;

/// Methods that read all of their receiver (or of the text they are given).
const SCANS: &[&str] = &[
    "find",
    "rfind",
    "index",
    "rindex",
    "count",
    "split",
    "rsplit",
    "splitlines",
    "partition",
    "rpartition",
    "replace",
    "strip",
    "lstrip",
    "rstrip",
    "decode",
    "encode",
    "search",
    "match",
    "fullmatch",
    "findall",
    "finditer",
    "sub",
    "subn",
    "lower",
    "upper",
    "tobytes",
    "getvalue",
];
/// Regular-expression methods whose first argument is the text scanned.
const SCANS_ARGUMENT: &[&str] = &["search", "match", "fullmatch", "findall", "finditer", "split"];
/// A function this deep in its own stack, on average, recurses.
const RECURSION_DEPTH: f64 = 3.0;
/// The share of the last third of the line's run over the first's that shows growth.
const RISING: f64 = 1.5;

impl Engine<'_> {
    /// Rewrites findings whose work per call grows with the input as `quadratic`.
    /// `busy_thirds` is the busy weight in each third of the run, the shares' denominators.
    pub(super) fn find_growth(&mut self, findings: &mut [Finding], busy_thirds: [u64; 3]) {
        let b = crate::builtin::Builtins::get();
        for f in findings.iter_mut() {
            if matches!(
                f.kind,
                Kind::SerialIo | Kind::BlockingWait | Kind::LockContention | Kind::Idle | Kind::RepeatedWalk
            ) || f.rule == "loop-iteration"
            {
                continue;
            }
            let Some(l) = self.line_index(&f.file, f.line, &f.function) else { continue };
            let Some(path) = self.user.resolve(&f.file) else { continue };
            let Some(code) = self.source.line(&path, f.line) else { continue };
            let rising = rising_share(self.lines[l].thirds, busy_thirds);
            let growth = self
                .rescan_of_growing(&path, f.line, &code)
                .map(|(var, grow_at)| {
                    let values = [("var", var), ("grow_at", format!("{}:{}", short(&f.file), grow_at))];
                    ("rescan-growing", values.to_vec())
                })
                .or_else(|| {
                    let depth = self.recursion_depth(l);
                    (depth >= RECURSION_DEPTH && !scanned(&code).is_empty()).then(|| {
                        let values = [("function", f.function.clone()), ("depth", format!("{depth:.0}"))];
                        ("recursion-rescan", values.to_vec())
                    })
                })
                .or_else(|| {
                    let var = appended_copy(&code)?;
                    (f.rule == "self-time" && rising.is_some()).then(|| ("append-copy", vec![("var", var)]))
                });
            let Some((id, values)) = growth else { continue };
            f.kind = b.kind(id);
            f.rule = id.to_owned();
            f.what = b.what(id, &values);
            f.explained = 1.0;
            f.why = b.why(id, &values);
            if let Some((first, last)) = rising {
                f.why = format!(
                    "{}; its share of the time rose from {:.0}% in the first third of the run to {:.0}% in the last, as the input grew",
                    f.why,
                    first * 100.0,
                    last * 100.0
                );
            }
            f.advice = b.fix(id, &values);
        }
    }

    /// The line accumulator of a finding's line.
    pub(super) fn line_index(&self, file: &str, line: u32, function: &str) -> Option<usize> {
        (0..self.lines.len()).find(|&l| {
            let f = self.profile.frame(self.lines[l].frame);
            f.line == line && f.file == file && f.function == function
        })
    }

    /// What the line scans that grows: an attribute appended to anywhere in its file
    /// (`self.buffer.find(...)` with `self.buffer.extend(data)` in another method), or a local
    /// appended to in the loop around the line. Gives the name and the line that grows it.
    fn rescan_of_growing(&mut self, path: &std::path::Path, line: u32, code: &str) -> Option<(String, u32)> {
        let vars = scanned(code);
        if vars.is_empty() {
            return None;
        }
        let lines = self.source.lines(path)?.to_vec();
        let loop_range = self.source.enclosing_loop(path, line).map(|h| (h, block_end(&lines, h)));
        for var in vars {
            let range = if var.starts_with("self.") { Some((1, lines.len() as u32)) } else { loop_range };
            let Some((from, to)) = range else { continue };
            for n in from..=to {
                if n != line && grows(&lines[n as usize - 1], &var) {
                    return Some((var, n));
                }
            }
        }
        None
    }

    /// How many frames of the line's own function its stacks hold, on average by weight.
    fn recursion_depth(&self, l: usize) -> f64 {
        let own = self.profile.frame(self.lines[l].frame);
        let (mut frames, mut weight) = (0u64, 0u64);
        for (&(stack, _), &w) in &self.lines[l].by_stack {
            let depth = self
                .profile
                .stack_frames_leaf_first(Some(stack))
                .filter(|&f| {
                    let f = self.profile.frame(f);
                    f.function == own.function && f.file == own.file
                })
                .count() as u64;
            frames += depth * w;
            weight += w;
        }
        if weight == 0 {
            0.0
        } else {
            frames as f64 / weight as f64
        }
    }
}

/// The line's share in the first and last thirds of the run, when it rises steadily by
/// [`RISING`] or more over enough samples to say so.
fn rising_share(line: [u64; 3], busy: [u64; 3]) -> Option<(f64, f64)> {
    if line.iter().any(|&w| w < 10) || busy.contains(&0) {
        return None;
    }
    let s: Vec<f64> = (0..3).map(|i| line[i] as f64 / busy[i] as f64).collect();
    (s[2] >= RISING * s[0] && s[1] >= s[0] && s[2] >= s[1]).then_some((s[0], s[2]))
}

/// The names a line of code scans whole: receivers of [`SCANS`] methods, a regex method's text
/// argument, the right side of `in` outside a `for`.
fn scanned(code: &str) -> Vec<String> {
    let code = code.split('#').next().unwrap_or(code);
    let mut names = Vec::new();
    let name_before = |end: usize| -> Option<String> {
        let start = code[..end].rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')).map_or(0, |i| i + 1);
        let name = code[start..end].trim_matches('.');
        (!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit())).then(|| name.to_owned())
    };
    for method in SCANS {
        let needle = format!(".{method}(");
        let mut from = 0;
        while let Some(i) = code[from..].find(&needle) {
            let at = from + i;
            if let Some(receiver) = name_before(at) {
                // A module's function (`re.search(p, text)`) scans its argument, not the module.
                if receiver != "re" && receiver != "str" && receiver != "bytes" {
                    names.push(receiver);
                }
            }
            if SCANS_ARGUMENT.contains(method) {
                let args = &code[at + needle.len()..];
                let mut parts = args.split([',', ')']);
                let first = parts.next().unwrap_or("").trim();
                let text = if code[..at].ends_with("re") { parts.next().unwrap_or("").trim() } else { first };
                let text = text.split('[').next().unwrap_or("");
                if !text.is_empty() && text.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.') {
                    names.push(text.to_owned());
                }
            }
            from = at + needle.len();
        }
    }
    let t = code.trim_start();
    if !t.starts_with("for ") && !t.starts_with("async for ") {
        for part in code.split(" in ").skip(1) {
            let name: String = part.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.').collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Whether a line of code makes `var` longer.
fn grows(text: &str, var: &str) -> bool {
    let t = text.split('#').next().unwrap_or(text).trim();
    let Some(rest) = t.strip_prefix(var) else { return false };
    let rest = rest.trim_start();
    rest.starts_with("+=")
        || [".extend(", ".append(", ".extendleft(", ".write(", ".insert("].iter().any(|m| rest.starts_with(m))
        || rest.strip_prefix('=').is_some_and(|r| r.trim_start().starts_with(&format!("{var} +")))
}

/// `self.out += text` or `out = out + text`: the name appended to by copying.
fn appended_copy(code: &str) -> Option<String> {
    let t = code.split('#').next()?.trim();
    let (lhs, _) = t.split_once("+=")?;
    let lhs = lhs.trim();
    (!lhs.is_empty() && lhs.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.')).then(|| lhs.to_owned())
}

/// The last line of the block a header opens (1-based): the last line indented deeper.
fn block_end(lines: &[String], header: u32) -> u32 {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let Some(head) = lines.get(header as usize - 1) else { return header };
    let base = indent(head);
    let mut end = header;
    for (i, l) in lines.iter().enumerate().skip(header as usize) {
        if l.trim().is_empty() || l.trim_start().starts_with('#') {
            continue;
        }
        if indent(l) <= base {
            break;
        }
        end = i as u32 + 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_line_scans_and_what_grows_it() {
        assert_eq!(scanned("        if self.buffer.find(b\"--\" + self.boundary) == -1:"), vec!["self.buffer"]);
        assert_eq!(scanned("m = LINE_RE.search(text, pos)"), vec!["LINE_RE", "text"]);
        assert_eq!(scanned("m = re.search(pattern, text)"), vec!["text"]);
        assert_eq!(scanned("if sep in buf:"), vec!["buf"]);
        assert!(scanned("for x in items:").is_empty());
        assert!(grows("        self.buffer.extend(data)", "self.buffer"));
        assert!(grows("buf += chunk", "buf"));
        assert!(grows("buf = buf + chunk", "buf"));
        assert!(!grows("buf2 += chunk", "buf"));
        assert_eq!(appended_copy("        self.out += line + '\\n'").as_deref(), Some("self.out"));
        assert_eq!(appended_copy("x = 1"), None);
        let lines: Vec<String> = ["while True:", "    a", "", "    b", "c"].iter().map(|s| s.to_string()).collect();
        assert_eq!(block_end(&lines, 1), 4);
        assert_eq!(rising_share([10, 20, 40], [100, 100, 100]), Some((0.1, 0.4)));
        assert_eq!(rising_share([40, 40, 40], [100, 100, 100]), None);
    }
}

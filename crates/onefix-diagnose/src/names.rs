//! Qualified frame names and source lines: what the knowledge base matches against.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use onefix_model::{Frame, FrameKind};

use crate::origin::python_lib_root;

/// `ssl.create_default_context`, `httpx._client.__init__`, `app.fetch` for Python frames (module
/// from the file path, then the function); the function name as it is for native frames.
pub fn qualified_name(frame: &Frame) -> String {
    if frame.kind != FrameKind::Python {
        return frame.function.clone();
    }
    format!("{}.{}", python_module(&frame.file), frame.function)
}

/// The same name without its class path (`httpx._client.AsyncClient.__init__` gives
/// `httpx._client.__init__`), so that knowledge-base patterns written as `module.function` match
/// whether or not the interpreter reports qualified names. For native frames, the plain name
/// ([`plain_native_name`]). `None` when there is no other form.
pub fn unqualified_name(frame: &Frame) -> Option<String> {
    if frame.kind != FrameKind::Python {
        return plain_native_name(&frame.function);
    }
    if !frame.function.contains('.') {
        return None;
    }
    let last = frame.function.rsplit('.').next().unwrap_or(&frame.function);
    Some(format!("{}.{}", python_module(&frame.file), last))
}

/// A native symbol as people write it, when that differs from how it was demangled:
/// - Rust's v0 mangling (the standard library's) puts a method in its impl's brackets:
///   `<std::net::tcp::TcpListener>::accept` and `<std::net::tcp::Incoming as
///   core::iter::traits::iterator::Iterator>::next` are `std::net::tcp::TcpListener::accept` and
///   `std::net::tcp::Incoming::next`, the form of legacy mangling and the knowledge base;
/// - glibc's internal aliases and CPU-specific variants (`__GI___isoc99_sscanf`,
///   `__strlen_avx2`, `__memmove_avx_unaligned_erms`, `__vfscanf_internal`) are the function
///   the program called (`sscanf`, `strlen`, `memmove`, `vfscanf`).
pub fn plain_native_name(name: &str) -> Option<String> {
    if let Some(rest) = name.strip_prefix('<') {
        let mut depth = 0usize;
        let mut as_at = None;
        for (i, c) in rest.char_indices() {
            match c {
                '<' => depth += 1,
                '>' if depth == 0 => {
                    let ty = &rest[..as_at.unwrap_or(i)];
                    return Some(format!("{ty}{}", &rest[i + 1..]));
                }
                '>' => depth -= 1,
                ' ' if depth == 0 && as_at.is_none() && rest[i..].starts_with(" as ") => as_at = Some(i),
                _ => {}
            }
        }
        return None;
    }
    if !name.starts_with("__") || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    let mut plain = name.strip_prefix("__GI_").unwrap_or(name).trim_start_matches('_');
    for prefix in ["isoc99_", "isoc23_", "libc_"] {
        plain = plain.strip_prefix(prefix).unwrap_or(plain);
    }
    const VARIANTS: [&str; 10] =
        ["_avx2", "_avx512", "_avx", "_evex", "_sse2", "_sse4", "_ssse3", "_erms", "_internal", "_ifunc"];
    if let Some(cut) = VARIANTS.iter().filter_map(|v| plain.find(v)).min() {
        plain = &plain[..cut];
    }
    (!plain.is_empty() && plain != name).then(|| plain.to_owned())
}

/// The dotted module a Python file is imported as, from its path.
pub fn python_module(file: &str) -> String {
    if let Some(inner) = file.strip_prefix("<frozen ").and_then(|s| s.strip_suffix('>')) {
        return inner.to_owned();
    }
    let rel = ["/site-packages/", "/dist-packages/"]
        .iter()
        .find_map(|m| file.find(m).map(|i| &file[i + m.len()..]))
        .or_else(|| python_lib_root(file).map(|i| &file[i..]))
        // A relative name is relative to an import root, as py-spy's short file names are
        // (`json/__init__.py`): its directories are the module's packages.
        .or_else(|| (!file.starts_with('/')).then_some(file))
        .unwrap_or_else(|| onefix_model::fmt::file_name(file));
    let rel = rel.strip_suffix(".py").unwrap_or(rel);
    let rel = rel.strip_suffix("/__init__").unwrap_or(rel);
    rel.replace('/', ".")
}

/// Whether a (trimmed) line of source starts a loop, in any of the languages read here.
fn starts_loop(t: &str) -> bool {
    ["for ", "while ", "async for ", "loop {", "for(", "while(", "do {", "do{"].iter().any(|k| t.starts_with(k))
        || t.contains(".forEach(")
}

/// A line opening a body that runs apart from the loop around it: a Go function literal
/// (`go func(i int) {`, `defer func() {`), or a closure handed to a thread or task
/// (`thread::spawn(move || {`, `tokio::spawn(async move {`, `std::thread t([&] {`). A loop
/// around it starts the body, maybe many at once; it does not repeat it one pass at a time.
fn opens_body_run_elsewhere(t: &str) -> bool {
    let t = t.split("//").next().unwrap_or(t).trim_end();
    let go_literal = t.contains("func(") && t.ends_with('{');
    let handed_off = ["spawn(", "std::thread", "std::async(", "std::jthread"].iter().any(|k| t.contains(k));
    go_literal || (handed_off && (t.ends_with('{') || t.ends_with('(')))
}

/// The name a call of `function` (a Python frame's function, qualified or not) is written with
/// in its caller's source: the function's own name, or for a constructor its class's name.
/// `None` for names no call spells out: comprehensions, lambdas, module bodies and the other
/// special methods (`__getitem__`, `__enter__`, ...), which operators and statements call.
pub fn written_name(function: &str) -> Option<&str> {
    let mut parts = function.rsplit('.');
    let last = parts.next()?;
    let name = match last {
        "__init__" | "__new__" => parts.next()?,
        _ => last,
    };
    let identifier = name.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    (identifier && !name.starts_with("__")).then_some(name)
}

/// Names called on a line of source: `ctx.load_verify_locations(cafile)` gives
/// `ctx.load_verify_locations` and `load_verify_locations`.
pub fn called_names(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    // `with lock:` calls the lock's `__enter__`, that is `acquire`, with no call on the line.
    let without_comment = code.split('#').next().unwrap_or(code);
    if let Some(expr) = without_comment.strip_prefix("with ").and_then(|r| r.trim_end().strip_suffix(':')) {
        if !expr.contains('(') && !expr.contains(" as ") {
            names.push("acquire".to_owned());
        }
    }
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.') {
                i += 1;
            }
            let mut j = i;
            while j < bytes.len() && bytes[j] == b' ' {
                j += 1;
            }
            if j < bytes.len() && bytes[j] == b'(' {
                let dotted = code[start..i].trim_end_matches('.');
                let last = dotted.rsplit('.').next().unwrap_or(dotted);
                names.push(dotted.to_owned());
                if last != dotted {
                    names.push(last.to_owned());
                }
            }
        } else if c == b'#' {
            break;
        } else {
            i += 1;
        }
    }
    names
}

/// Reads source files once and answers questions about their lines.
#[derive(Default)]
pub struct SourceCache {
    files: HashMap<PathBuf, Option<Vec<String>>>,
    /// [`SourceCache::resolved_calls`] by line: asked once per stack, read once per line.
    resolved: HashMap<(PathBuf, u32), Vec<String>>,
    /// [`SourceCache::same_lock_blocks`] by line: asked once per wait.
    same_lock: HashMap<(PathBuf, u32), Vec<(u32, u32)>>,
}

impl SourceCache {
    pub fn lines(&mut self, path: &Path) -> Option<&[String]> {
        self.files
            .entry(path.to_path_buf())
            .or_insert_with(|| {
                let bytes = std::fs::read(path).ok()?;
                // A source file is never this large; refuse rather than hold a data file.
                if bytes.len() > 16 << 20 {
                    return None;
                }
                Some(String::from_utf8_lossy(&bytes).lines().map(str::to_owned).collect())
            })
            .as_deref()
    }

    /// The 1-based line, trimmed.
    pub fn line(&mut self, path: &Path, line: u32) -> Option<String> {
        let lines = self.lines(path)?;
        lines.get((line as usize).checked_sub(1)?).map(|l| l.trim().to_owned())
    }

    /// The loop header (`for`, `while`, `async for`, and C/Rust/Go `for`/`while`/`loop`) that
    /// encloses `line` within the same function, found by indentation, as a 1-based line.
    /// Whether `line` is a loop header whose condition compares against a call, which runs
    /// again on every pass: `while i < len(items)`, `for (i = 0; i < strlen(s); i++)`. Not a
    /// Python `for x in items:` (its iterable is evaluated once), nor a loop that reads in its
    /// condition (`while ((n = read(fd, b, k)) > 0)`: the call is each pass's work, not a bound).
    pub fn bound_recomputed_every_pass(&mut self, path: &Path, line: u32) -> bool {
        let Some(t) =
            (line as usize).checked_sub(1).and_then(|i| self.lines(path)?.get(i).map(|l| l.trim_start().to_owned()))
        else {
            return false;
        };
        let header = t.starts_with("while ")
            || t.starts_with("while(")
            || ((t.starts_with("for (") || t.starts_with("for(")) && t.contains(';'));
        static BOUND: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        let bound = BOUND.get_or_init(|| regex::Regex::new(r"[<>]=?\s*[A-Za-z_][\w.:>-]*\s*\(").unwrap());
        header && bound.is_match(&t)
    }

    /// A search on `line` from a position that its own loop advances, over a text the loop does
    /// not change: `pat.search(s, i)`, `s.find(sep, i)` or `s.index(sep, i)` inside `while ...:`
    /// whose body assigns `i` (or inside `for i in ...:`), and assigns `s` nowhere. Each pass
    /// scans the rest of the text. Returns (the call, the text, the position).
    pub fn search_from_advancing_position(&mut self, path: &Path, line: u32) -> Option<(String, String, String)> {
        static SEARCH: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        let search = SEARCH.get_or_init(|| {
            regex::Regex::new(
                r#"([A-Za-z_][\w.]*)\.(search|find|index)\(\s*('[^']*'|"[^"]*"|[^,()]+?)\s*,\s*([A-Za-z_]\w*)\s*[,)]"#,
            )
            .unwrap()
        });
        let loop_line = self.enclosing_loop(path, line)?;
        let lines = self.lines(path)?;
        let code = lines.get((line as usize).checked_sub(1)?)?.split('#').next()?.to_owned();
        let caps = search.captures(&code)?;
        let (receiver, method, first, var) = (&caps[1], &caps[2], &caps[3], caps[4].to_owned());
        // A pattern's search takes the text first; a string's find is called on the text.
        let text = if method == "search" { first } else { receiver }.to_owned();
        if !is_identifier(&text) {
            return None;
        }
        let header = lines[loop_line as usize - 1].trim_start();
        let head_indent = indentation(&lines[loop_line as usize - 1]);
        let body: Vec<&str> = lines[loop_line as usize..]
            .iter()
            .take_while(|l| l.trim().is_empty() || indentation(l) > head_indent)
            .map(|l| l.trim_start())
            .collect();
        let assigns = |name: &str, l: &str| {
            l.strip_prefix(name).is_some_and(|r| {
                let r = r.trim_start();
                (r.starts_with('=') && !r.starts_with("==")) || r.starts_with("+=")
            })
        };
        let advances = if let Some(rest) = header.strip_prefix("for ") {
            rest.split(" in ").next().is_some_and(|t| t.split(',').any(|p| p.trim() == var))
        } else {
            header.starts_with("while ") && body.iter().any(|l| assigns(&var, l))
        };
        let text_changes = body.iter().any(|l| assigns(&text, l));
        (advances && !text_changes && text != var).then(|| (format!("{receiver}.{method}()"), text, var))
    }

    pub fn enclosing_loop(&mut self, path: &Path, line: u32) -> Option<u32> {
        let lines = self.lines(path)?;
        let mut idx = (line as usize).checked_sub(1)?;
        let mut indent = indentation(lines.get(idx)?);
        // A closing brace ends its block's scope: what runs there (a drop of the block's
        // locals) runs once per pass of the loop whose body it closes. Start from the line
        // that opened the block.
        // `}(i)` closes a goroutine's literal, `});` a spawned closure: the call that starts
        // it is seen there (Go's wrapper for a `go` statement with arguments).
        if lines[idx].trim_start().starts_with('}') {
            let open = (0..idx).rev().find(|&i| {
                let t = lines[i].trim_end();
                indentation(&lines[i]) == indent && !t.trim_start().is_empty() && t.ends_with('{')
            })?;
            if starts_loop(lines[open].trim_start()) {
                return Some(open as u32 + 1);
            }
            if opens_body_run_elsewhere(lines[open].trim_start()) {
                return None;
            }
            idx = open;
            indent = indentation(&lines[open]);
        }
        for i in (0..idx).rev() {
            let text = &lines[i];
            let t = text.trim_start();
            if t.is_empty() || t.starts_with('#') || t.starts_with("//") {
                continue;
            }
            let ind = indentation(text);
            if ind >= indent {
                continue;
            }
            indent = ind;
            if starts_loop(t) {
                return Some(i as u32 + 1);
            }
            let is_function =
                ["def ", "async def ", "fn ", "pub fn ", "func ", "class "].iter().any(|k| t.starts_with(k));
            if is_function || opens_body_run_elsewhere(t) || ind == 0 {
                return None;
            }
        }
        None
    }
}

impl SourceCache {
    /// The lines run while the lock taken at `line` is held, as a 1-based inclusive range: the
    /// body of a `with lock:` statement, or for `lock.acquire()` the lines up to the matching
    /// `lock.release()` at the same indentation; for native code, see [`native_held_block`].
    /// `None` when the line takes no lock that way.
    pub fn held_block(&mut self, path: &Path, line: u32) -> Option<(u32, u32)> {
        let lines = self.lines(path)?;
        let idx = (line as usize).checked_sub(1)?;
        let text = lines.get(idx)?;
        // `with lock:  # why` is a block too: what follows the code is no part of it.
        let t = text.split('#').next().unwrap_or(text).trim();
        let indent = indentation(text);
        let significant = |l: &String| !l.trim().is_empty() && !l.trim_start().starts_with('#');
        if (t.starts_with("with ") || t.starts_with("async with ")) && t.ends_with(':') {
            let mut end = idx;
            for (i, l) in lines.iter().enumerate().skip(idx + 1) {
                if significant(l) {
                    if indentation(l) <= indent {
                        break;
                    }
                    end = i;
                }
            }
            return (end > idx).then_some((line + 1, end as u32 + 1));
        }
        if let Some(lock) = t.strip_suffix(".acquire()") {
            let release = format!("{lock}.release()");
            let end = lines
                .iter()
                .enumerate()
                .skip(idx + 1)
                .find(|(_, l)| l.trim() == release && indentation(l) == indent)?
                .0;
            return (end > idx + 1).then_some((line + 1, end as u32));
        }
        native_held_block(lines, idx).map(|(first, last)| (first as u32 + 1, last as u32 + 1))
    }

    /// The other places in the file of `line` that take the lock `line` takes, as the blocks
    /// they hold it over: a class's lock taken by `with self._lock:` in `get` and in `put` is one
    /// lock, so a thread waiting at one waits for a thread inside any of them. Python only (`with
    /// X:` and `X.acquire()`, the same `X` spelled the same way); empty when the line takes no
    /// lock so.
    pub fn same_lock_blocks(&mut self, path: &Path, line: u32) -> Vec<(u32, u32)> {
        if let Some(known) = self.same_lock.get(&(path.to_path_buf(), line)) {
            return known.clone();
        }
        let blocks = self.find_same_lock_blocks(path, line);
        self.same_lock.insert((path.to_path_buf(), line), blocks.clone());
        blocks
    }

    fn find_same_lock_blocks(&mut self, path: &Path, line: u32) -> Vec<(u32, u32)> {
        let Some(lock) = self.line(path, line).as_deref().and_then(python_lock_taken).map(str::to_owned) else {
            return Vec::new();
        };
        let others: Vec<u32> = match self.lines(path) {
            Some(lines) => (0..lines.len())
                .filter(|&i| i + 1 != line as usize && python_lock_taken(lines[i].trim()) == Some(lock.as_str()))
                .map(|i| i as u32 + 1)
                .collect(),
            None => Vec::new(),
        };
        others.into_iter().filter_map(|at| self.held_block(path, at)).collect()
    }

    /// The line above `line`, within the same function, that assigns `name` from a call
    /// (`conn = sqlite3.connect(path)`), as (1-based line, trimmed text).
    pub fn assignment_of(&mut self, path: &Path, line: u32, name: &str) -> Option<(u32, String)> {
        let lines = self.lines(path)?;
        let idx = (line as usize).checked_sub(1)?;
        let indent = indentation(lines.get(idx)?);
        for i in (0..idx).rev() {
            let text = &lines[i];
            let t = text.trim_start();
            if t.is_empty() {
                continue;
            }
            if (t.starts_with("def ") || t.starts_with("async def ")) && indentation(text) < indent {
                return None;
            }
            let Some((target, value)) = t.split_once('=') else { continue };
            let target = target.trim();
            let is_target = target == name
                || target.strip_prefix("self.") == Some(name)
                || target.split(',').any(|p| p.trim() == name);
            if is_target && !value.starts_with('=') && value.contains('(') {
                return Some((i as u32 + 1, t.to_owned()));
            }
        }
        None
    }
}

/// The methods of a compiled regular expression that run it.
const REGEX_METHODS: [&str; 8] = ["match", "search", "fullmatch", "finditer", "findall", "sub", "subn", "split"];

/// How a local name got its value, read from the function's source above the line that uses it.
enum Binding {
    /// `name = VALUE`.
    Assigned(String),
    /// `for a, name in ITERABLE:`: the name is an element (or part of one) of the iterable.
    Unpacked(String),
}

impl SourceCache {
    /// What the calls on a line stand for once the names they are made through are read in the
    /// source, as names the knowledge base knows (`re.Pattern.match`):
    /// - a call through a local bound to a compiled pattern's method: `match = re.compile(p).match`
    ///   above in the function, or a name a `for` unpacks from a table of such methods (the lexer
    ///   idiom `for rexmatch, action in TABLE: m = rexmatch(text, pos)`), the table built in this
    ///   module or in the one it is imported from (`from pkg.rules import TABLE`);
    /// - a pattern's method called on a name bound to `re.compile(...)` in the module
    ///   (`_OctalPatt.search(s, i)`), whatever the name.
    ///
    /// A parameter, or a name bound to anything else, gives nothing.
    pub fn resolved_calls(&mut self, path: &Path, line: u32, code: &str) -> Vec<String> {
        let key = (path.to_path_buf(), line);
        if let Some(known) = self.resolved.get(&key) {
            return known.clone();
        }
        let out = self.resolve_calls(path, line, code);
        self.resolved.insert(key, out.clone());
        out
    }

    fn resolve_calls(&mut self, path: &Path, line: u32, code: &str) -> Vec<String> {
        let mut out = Vec::new();
        let names = called_names(code);
        let Some(lines) = self.lines(path).map(<[String]>::to_vec) else { return out };
        let idx = (line as usize).saturating_sub(1);
        for name in names {
            let method = match name.rsplit_once('.') {
                // `R.search(...)`: is R a compiled pattern?
                Some((receiver, m)) if REGEX_METHODS.contains(&m) => {
                    let receiver = receiver.strip_prefix("self.").unwrap_or(receiver);
                    if !is_identifier(receiver) || !self.compiles_pattern(path, &lines, receiver) {
                        continue;
                    }
                    Some(m)
                }
                Some(_) => None,
                None => match binding(&lines, idx, &name) {
                    Some(Binding::Assigned(value)) => bound_pattern_method(&value, |r| {
                        compiles(r) || (is_identifier(r) && self.compiles_pattern(path, &lines, r))
                    }),
                    Some(Binding::Unpacked(iterable)) => self.table_of_pattern_methods(path, &lines, &iterable),
                    None => None,
                },
            };
            if let Some(m) = method {
                let resolved = format!("re.Pattern.{m}");
                if !out.contains(&resolved) {
                    out.push(resolved);
                }
            }
        }
        out
    }

    /// Whether `name` is bound to a compiled pattern (`NAME = re.compile(...)`, at any depth, or
    /// `self.NAME = ...`) in the file, or in the module it is imported from.
    fn compiles_pattern(&mut self, path: &Path, lines: &[String], name: &str) -> bool {
        if binds_pattern(lines, name) {
            return true;
        }
        let Some(module) = imported_from(lines, name).and_then(|m| module_file(path, &m)) else { return false };
        self.lines(&module).is_some_and(|l| binds_pattern(l, name))
    }

    /// For a name a `for` unpacks from `iterable`, the pattern method its table holds: the
    /// iterable written out, else the module that defines the table (this one, or the one it is
    /// imported from) builds its elements from bound pattern methods (`(re.compile(rx).match,
    /// action)`): the assignment of the table's name first, else any such value in that module.
    fn table_of_pattern_methods(&mut self, path: &Path, lines: &[String], iterable: &str) -> Option<&'static str> {
        if let Some(m) = bound_pattern_method(iterable, |r| compiles(r) || binds_pattern(lines, r)) {
            return Some(m);
        }
        let table = iterable.trim();
        let table = table.strip_prefix("self.").or_else(|| table.strip_prefix("cls.")).unwrap_or(table);
        let root: String = table.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let source: Vec<String> = match imported_from(lines, &root).and_then(|m| module_file(path, &m)) {
            Some(module) => self.lines(&module)?.to_vec(),
            None => lines.to_vec(),
        };
        let assigns_root = |l: &&String| {
            let t = l.trim_start();
            let t = t.strip_prefix("self.").or_else(|| t.strip_prefix("cls.")).unwrap_or(t);
            !root.is_empty() && t.strip_prefix(root.as_str()).is_some_and(|r| r.trim_start().starts_with('='))
        };
        let method_in = |l: &String| {
            let code = l.split('#').next().unwrap_or(l);
            bound_pattern_method_at(code, |r| compiles(r) || binds_pattern(&source, r))
                .map(|(m, end)| (m, code.to_owned(), end))
        };
        if let Some((m, _, _)) = source.iter().filter(assigns_root).find_map(method_in) {
            return Some(m);
        }
        // The table is filled elsewhere in its module (a class that builds its token table):
        // a bound method made as an element of a tuple or list, or returned to be one.
        source.iter().filter_map(method_in).find_map(|(m, code, end)| {
            let next = code[end..].trim_start();
            (next.starts_with([',', ')', ']']) || (code.trim_start().starts_with("return ") && next.is_empty()))
                .then_some(m)
        })
    }
}

/// Whether an expression compiles a pattern: `re.compile(...)`.
fn compiles(expr: &str) -> bool {
    expr.starts_with("re.compile(") || expr.starts_with("regex.compile(")
}

/// Whether the lines bind `name` (or `self.name`, `cls.name`) to a compiled pattern.
fn binds_pattern(lines: &[String], name: &str) -> bool {
    is_identifier(name)
        && lines.iter().any(|l| {
            let t = l.trim_start();
            let t = t.strip_prefix("self.").or_else(|| t.strip_prefix("cls.")).unwrap_or(t);
            t.strip_prefix(name)
                .and_then(|r| r.trim_start().strip_prefix('='))
                .is_some_and(|v| compiles(v.trim_start()))
        })
}

/// How `name` is bound above line index `idx`, within its function: the nearest assignment of
/// it, or the `for` that unpacks it. `None` for a parameter or a name bound elsewhere.
fn binding(lines: &[String], idx: usize, name: &str) -> Option<Binding> {
    let indent = indentation(lines.get(idx)?);
    for text in lines[..idx].iter().rev() {
        let t = text.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if (t.starts_with("def ") || t.starts_with("async def ")) && indentation(text) < indent {
            return None;
        }
        let header = t.strip_prefix("async for ").or_else(|| t.strip_prefix("for "));
        if let Some((targets, iterable)) = header.and_then(|h| h.split_once(" in ")) {
            let unpacks = targets
                .split(',')
                .any(|p| p.trim().trim_matches(|c| c == '(' || c == ')' || c == '[' || c == ']').trim() == name);
            if unpacks {
                let iterable = iterable.split('#').next().unwrap_or(iterable).trim_end();
                return Some(Binding::Unpacked(iterable.strip_suffix(':').unwrap_or(iterable).trim().to_owned()));
            }
            continue;
        }
        if let Some((target, value)) = t.split_once('=') {
            if target.trim() == name && !value.starts_with('=') {
                return Some(Binding::Assigned(value.trim().to_owned()));
            }
        }
    }
    None
}

/// A compiled pattern's method taken as a value, not called, in an expression:
/// `re.compile(p, FLAGS).match` or `rex.search` with `rex` a compiled pattern by `is_pattern`
/// (given the receiver's text). The method's name.
fn bound_pattern_method(expr: &str, is_pattern: impl FnMut(&str) -> bool) -> Option<&'static str> {
    bound_pattern_method_at(expr, is_pattern).map(|(m, _)| m)
}

/// [`bound_pattern_method`], with where the method's name ends in `expr`.
fn bound_pattern_method_at(expr: &str, mut is_pattern: impl FnMut(&str) -> bool) -> Option<(&'static str, usize)> {
    let bytes = expr.as_bytes();
    for (dot, _) in expr.match_indices('.') {
        let after = &expr[dot + 1..];
        let Some(&m) = REGEX_METHODS.iter().find(|m| {
            after.starts_with(**m)
                && !after[m.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                && !after[m.len()..].trim_start().starts_with('(')
        }) else {
            continue;
        };
        // The receiver: a call `...(...)` back to its name, or a dotted name.
        let mut start = dot;
        if dot > 0 && bytes[dot - 1] == b')' {
            let mut depth = 0i32;
            let mut i = dot;
            while i > 0 {
                i -= 1;
                match bytes[i] {
                    b')' => depth += 1,
                    b'(' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
            }
            start = i;
        }
        while start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || matches!(bytes[start - 1], b'_' | b'.')) {
            start -= 1;
        }
        let receiver = &expr[start..dot];
        if !receiver.is_empty() && is_pattern(receiver.strip_prefix("self.").unwrap_or(receiver)) {
            return Some((m, dot + 1 + m.len()));
        }
    }
    None
}

fn is_identifier(s: &str) -> bool {
    s.starts_with(|c: char| c.is_alphabetic() || c == '_') && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// The module `name` is imported from in a file (`from pkg.rules import TABLE`, `from .rules
/// import TABLE as T` for `T`), as written (leading dots kept).
fn imported_from(lines: &[String], name: &str) -> Option<String> {
    lines.iter().find_map(|l| {
        let rest = l.trim_start().strip_prefix("from ")?;
        let (module, names) = rest.split_once(" import ")?;
        let names = names.split('#').next()?.trim_matches(|c: char| c == '(' || c == ')' || c.is_whitespace());
        names
            .split(',')
            .any(|n| n.split(" as ").last().is_some_and(|local| local.trim() == name))
            .then(|| module.trim().to_owned())
    })
}

/// The file of a module imported by the file at `path`: relative (`.rules`, from the file's
/// package) or absolute (`pkg.rules`, looked for under the file's ancestors, where the package
/// is installed).
fn module_file(path: &Path, module: &str) -> Option<PathBuf> {
    let dots = module.chars().take_while(|&c| c == '.').count();
    let rel: PathBuf = module[dots..].split('.').filter(|p| !p.is_empty()).collect();
    let bases: Vec<&Path> = if dots > 0 {
        path.ancestors().nth(dots).into_iter().collect()
    } else {
        path.ancestors().skip(1).take(8).collect()
    };
    bases.into_iter().find_map(|base| {
        let stem = base.join(&rel);
        [stem.with_extension("py"), stem.join("__init__.py")].into_iter().find(|f| f.is_file())
    })
}

/// Lock calls of C, C++ and Go paired with the call that releases them: (lock, unlock).
const LOCK_PAIRS: [(&str, &str); 9] = [
    ("pthread_mutex_lock(", "pthread_mutex_unlock("),
    ("pthread_rwlock_wrlock(", "pthread_rwlock_unlock("),
    ("pthread_rwlock_rdlock(", "pthread_rwlock_unlock("),
    ("pthread_spin_lock(", "pthread_spin_unlock("),
    ("mtx_lock(", "mtx_unlock("),
    (".Lock()", ".Unlock()"),
    (".RLock()", ".RUnlock()"),
    (".lock();", ".unlock();"),
    ("->lock();", "->unlock();"),
];

/// Scoped guards, held to the end of their block: C++'s lock guards, and a Rust guard bound
/// by `let` (`let g = m.lock().unwrap();`).
const SCOPED_GUARDS: [&str; 4] = ["lock_guard", "unique_lock", "scoped_lock", "shared_lock"];
const RUST_GUARD_CALLS: [&str; 3] = [".lock()", ".write()", ".read()"];

/// The lines (0-based, inclusive) run while the native lock taken at line `idx` is held: up to
/// the matching unlock of the same lock (the one at the same indentation, else the first), to
/// the function's end after Go's `defer m.Unlock()`, or to the end of the block of a scoped
/// guard. `None` for a line that takes no lock, or holds it for that statement alone.
fn native_held_block(lines: &[String], idx: usize) -> Option<(usize, usize)> {
    let text = &lines[idx];
    let t = text.split("//").next().unwrap_or(text).trim();
    let indent = indentation(text);
    let code = |l: &String| {
        let c = l.split("//").next().unwrap_or(l).trim().to_owned();
        (!c.is_empty()).then_some(c)
    };
    // The end of the enclosing block: the last line before one indented less than `indent`.
    let block_end = || {
        let mut end = idx;
        for (i, l) in lines.iter().enumerate().skip(idx + 1) {
            if code(l).is_some() {
                if indentation(l) < indent {
                    break;
                }
                end = i;
            }
        }
        (end > idx).then_some((idx + 1, end))
    };
    let scoped = SCOPED_GUARDS.iter().any(|g| t.contains(g))
        || (t.starts_with("let ") && RUST_GUARD_CALLS.iter().any(|c| t.contains(c)) && t.contains('='));
    if scoped {
        return block_end();
    }
    let (lock, unlock) = LOCK_PAIRS.iter().find(|(lock, _)| t.contains(lock))?;
    // The lock's expression: what the call takes (`&m`), or what it is called on (`s.mu`).
    let what = match lock.strip_suffix('(') {
        Some(_) => {
            let after = &t[t.find(lock)? + lock.len()..];
            after.split(')').next()?.trim().to_owned()
        }
        None => t[..t.find(lock)?].rsplit([' ', '\t', '(', '=']).next()?.to_owned(),
    };
    let unlocks = |l: &str| {
        let l = l.trim();
        match unlock.strip_suffix('(') {
            Some(_) => l.contains(unlock) && l.contains(what.as_str()),
            None => l.contains(&format!("{what}{unlock}")),
        }
    };
    let after: Vec<(usize, String)> =
        lines.iter().enumerate().skip(idx + 1).filter_map(|(i, l)| code(l).map(|c| (i, c))).collect();
    if after.first().is_some_and(|(_, c)| c.starts_with("defer ") && unlocks(&c["defer ".len()..])) {
        // Held to the function's end: from the line after the defer to the end of the block.
        let (_, end) = block_end()?;
        return (end > idx + 1).then_some((idx + 2, end));
    }
    let mut first_unlock = None;
    for (i, c) in &after {
        if indentation(&lines[*i]) < indent {
            break;
        }
        if unlocks(c) {
            if indentation(&lines[*i]) == indent {
                return (*i > idx + 1).then_some((idx + 1, i - 1));
            }
            first_unlock.get_or_insert(*i);
        }
    }
    first_unlock.filter(|&i| i > idx + 1).map(|i| (idx + 1, i - 1))
}

/// The lock a Python line takes: `X` of `with X:` or `X.acquire()` (trimmed code). A `with`
/// of a call (`with open(p) as f:`) or of several items takes none that can be told apart.
fn python_lock_taken(code: &str) -> Option<&str> {
    let t = code.split('#').next().unwrap_or(code).trim();
    let lock = match t.strip_prefix("with ").and_then(|r| r.strip_suffix(':')) {
        Some(expr) => expr.trim(),
        None => t.strip_suffix(".acquire()")?.trim(),
    };
    let plain = !lock.is_empty() && lock.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    plain.then_some(lock)
}

fn indentation(line: &str) -> usize {
    line.chars().take_while(|c| c.is_whitespace()).map(|c| if c == '\t' { 8 } else { 1 }).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_called_in_a_loop_condition_is_told_from_a_read_in_it() {
        let dir = std::env::temp_dir().join(format!("onefix-bound-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = dir.join("scan.c");
        std::fs::write(&c, "for (size_t i = 0; i < strlen(s); i++) {\nwhile ((n = read(fd, b, k)) > 0) {\nfor (int i = 0; i < n; i++) {\n").unwrap();
        let py = dir.join("app.py");
        std::fs::write(&py, "while i < len(queue):\nfor x in sorted(items):\nwhile chunk := f.read(4096):\n").unwrap();
        let mut src = SourceCache::default();
        let mut found: Vec<bool> = (1..=3).map(|l| src.bound_recomputed_every_pass(&c, l)).collect();
        found.extend((1..=3).map(|l| src.bound_recomputed_every_pass(&py, l)));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, [true, false, false, true, false, false]);
    }

    #[test]
    fn native_names_are_read_as_people_write_them() {
        let plain = |n: &str| plain_native_name(n);
        assert_eq!(
            plain("<std::net::tcp::TcpListener>::accept").as_deref(),
            Some("std::net::tcp::TcpListener::accept")
        );
        assert_eq!(
            plain("<std::net::tcp::Incoming as core::iter::traits::iterator::Iterator>::next").as_deref(),
            Some("std::net::tcp::Incoming::next")
        );
        assert_eq!(
            plain("<std::thread::join_handle::JoinHandle<()>>::join").as_deref(),
            Some("std::thread::join_handle::JoinHandle<()>::join")
        );
        assert_eq!(plain("__strlen_avx2").as_deref(), Some("strlen"));
        assert_eq!(plain("__GI___isoc99_sscanf").as_deref(), Some("sscanf"));
        assert_eq!(plain("__memmove_avx_unaligned_erms").as_deref(), Some("memmove"));
        assert_eq!(plain("__vfscanf_internal").as_deref(), Some("vfscanf"));
        assert_eq!(plain("__libc_connect").as_deref(), Some("connect"));
        for as_is in
            ["main", "regcomp", "std::fs::read_to_string", "net/http.(*Server).Serve", "0x7f00", "__", "<broken"]
        {
            assert_eq!(plain(as_is), None, "{as_is}");
        }
    }

    #[test]
    fn python_modules_from_paths() {
        assert_eq!(python_module("/usr/lib/python3.11/ssl.py"), "ssl");
        assert_eq!(python_module("/x/lib/python3.11/site-packages/httpx/_client.py"), "httpx._client");
        assert_eq!(python_module("/x/lib/python3.11/json/__init__.py"), "json");
        assert_eq!(python_module("/x/lib/python3.11/concurrent/futures/thread.py"), "concurrent.futures.thread");
        assert_eq!(python_module("<frozen importlib._bootstrap>"), "importlib._bootstrap");
        assert_eq!(python_module("/srv/app/worker.py"), "worker");
        assert_eq!(python_module("json/__init__.py"), "json", "py-spy's short file names");
        assert_eq!(python_module("concurrent/futures/thread.py"), "concurrent.futures.thread");
        assert_eq!(
            qualified_name(&Frame::python("create_default_context", "/usr/lib/python3.11/ssl.py", 770)),
            "ssl.create_default_context"
        );
        let method = Frame::python("AsyncClient.__init__", "/x/site-packages/httpx/_client.py", 1);
        assert_eq!(qualified_name(&method), "httpx._client.AsyncClient.__init__");
        assert_eq!(unqualified_name(&method).as_deref(), Some("httpx._client.__init__"));
        assert_eq!(unqualified_name(&Frame::python("f", "/srv/a.py", 1)), None);
    }

    #[test]
    fn names_called_on_a_line() {
        assert_eq!(
            called_names("context.load_verify_locations(cafile=x)  # load("),
            vec!["context.load_verify_locations", "load_verify_locations"]
        );
        assert_eq!(called_names("conn = sqlite3.connect(path)"), vec!["sqlite3.connect", "connect"]);
        assert_eq!(called_names("x = a + b"), Vec::<String>::new());
        assert_eq!(called_names("f (g(1))"), vec!["f", "g"]);
        assert_eq!(called_names("with self._lock:  # guard"), vec!["acquire"]);
        assert_eq!(called_names("with open(p) as f:"), vec!["open"]);
    }

    #[test]
    fn calls_through_a_name_bound_to_a_compiled_pattern_resolve_to_the_pattern_method() {
        let dir = std::env::temp_dir().join(format!("onefix-alias-{}", std::process::id()));
        let pkg = dir.join("pkg");
        std::fs::create_dir_all(&pkg).unwrap();
        // A table of (bound method, action) pairs built in another module of the package.
        std::fs::write(
            pkg.join("rules.py"),
            "import re\nFLAGS = re.I\nTABLE = [(re.compile(rx, FLAGS).match, tt) for rx, tt in RAW]\n",
        )
        .unwrap();
        let lexer = pkg.join("lexer.py");
        std::fs::write(
            &lexer,
            "import re\nfrom pkg.rules import TABLE\n_Esc = re.compile(r'\\\\[0-7]')\n\n\
             def lex(text):\n    for pos in range(len(text)):\n        for rexmatch, action in TABLE:\n            m = rexmatch(text, pos)\n\n\
             def words(text, pat):\n    find = re.compile(pat).finditer\n    lower = str.lower\n    for m in find(text):\n        yield lower(m.group())\n\n\
             def unquote(s, i, matcher):\n    o = _Esc.search(s, i)\n    k = matcher(s, i)\n    return s.find(o, i)\n\n\
             def own(pairs):\n    table = [(rex.search, a) for rex, a in pairs]\n    for search, a in table:\n        search(x)\n",
        )
        .unwrap();
        let mut src = SourceCache::default();
        let line_of = |src: &mut SourceCache, n: u32| src.line(&lexer, n).unwrap();
        let resolved = |src: &mut SourceCache, n: u32| {
            let code = line_of(src, n);
            src.resolved_calls(&lexer, n, &code)
        };
        assert_eq!(resolved(&mut src, 8), ["re.Pattern.match"], "unpacked from a table imported from its module");
        assert_eq!(resolved(&mut src, 13), ["re.Pattern.finditer"], "a local bound to a pattern's method");
        assert_eq!(resolved(&mut src, 14), Vec::<String>::new(), "a local bound to something else");
        assert_eq!(resolved(&mut src, 17), ["re.Pattern.search"], "a method of a module-level pattern");
        assert_eq!(resolved(&mut src, 18), Vec::<String>::new(), "a parameter");
        assert_eq!(resolved(&mut src, 19), Vec::<String>::new(), "str.find is no pattern's");
        assert_eq!(resolved(&mut src, 24), Vec::<String>::new(), "rex is not known to be a pattern");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_search_from_a_position_its_loop_advances_is_told_from_one_that_does_not() {
        let dir = std::env::temp_dir().join(format!("onefix-advancing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("unquote.py");
        std::fs::write(
            &path,
            "def unquote(s):\n    i = 0\n    while i < len(s):\n        m = _Esc.search(s, i)\n        if not m:\n            break\n        i = m.end()\n\n\
             def words(s, seps):\n    for sep in seps:\n        k = s.find(sep, 0)\n\n\
             def grow(s, i):\n    while i < 10:\n        k = s.find(':', i)\n        s += ':'\n        i = k\n\n\
             def each(s, n):\n    for i in range(n):\n        k = s.find(':', i)\n",
        )
        .unwrap();
        let mut src = SourceCache::default();
        assert_eq!(
            src.search_from_advancing_position(&path, 4),
            Some(("_Esc.search()".to_owned(), "s".to_owned(), "i".to_owned()))
        );
        assert_eq!(src.search_from_advancing_position(&path, 11), None, "the start does not move");
        assert_eq!(src.search_from_advancing_position(&path, 15), None, "the text grows: another pattern");
        assert_eq!(
            src.search_from_advancing_position(&path, 21),
            Some(("s.find()".to_owned(), "s".to_owned(), "i".to_owned())),
            "a for's target advances"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn finds_where_a_name_was_made_in_the_same_function() {
        let dir = std::env::temp_dir().join(format!("onefix-assign-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("db.py");
        std::fs::write(&path, "def lookup(uid):\n    conn = sqlite3.connect(DB)\n    try:\n        return conn.execute(Q, (uid,)).fetchone()\n    finally:\n        conn.close()\n").unwrap();
        let mut src = SourceCache::default();
        assert_eq!(src.assignment_of(&path, 4, "conn"), Some((2, "conn = sqlite3.connect(DB)".to_owned())));
        assert_eq!(src.assignment_of(&path, 4, "cursor"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn finds_the_enclosing_loop_within_the_function() {
        let dir = std::env::temp_dir().join(format!("onefix-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("app.py");
        std::fs::write(
            &path,
            "def main(ids):\n    total = 0\n    for i in ids:\n        # comment\n        if i:\n            total += work(i)\n    return total\n\ndef work(i):\n    return i * 2\n",
        )
        .unwrap();
        let mut src = SourceCache::default();
        assert_eq!(src.enclosing_loop(&path, 6), Some(3));
        assert_eq!(src.enclosing_loop(&path, 2), None);
        assert_eq!(src.enclosing_loop(&path, 10), None);
        assert_eq!(src.line(&path, 6).as_deref(), Some("total += work(i)"));
        assert_eq!(src.assignment_of(&path, 6, "total"), None, "`total = 0` calls nothing");
        assert_eq!(src.assignment_of(&path, 10, "i"), None, "stops at the function's start");
        // What runs while a lock is held.
        let locked = dir.join("cache.py");
        std::fs::write(
            &locked,
            "def get(key):\n    with lock:\n        if key not in cache:\n\n            cache[key] = render(key)\n        return cache[key]\n    log(key)\n\ndef put(key, v):\n    lock.acquire()\n    cache[key] = v\n    lock.release()\n\ndef touch(key):\n    with lock:  # everyone waits here\n        seen.add(key)\n",
        )
        .unwrap();
        assert_eq!(src.held_block(&locked, 2), Some((3, 6)));
        assert_eq!(src.held_block(&locked, 10), Some((11, 11)));
        assert_eq!(src.held_block(&locked, 7), None);
        assert_eq!(src.held_block(&locked, 15), Some((16, 16)), "a comment after the colon");
        // One lock taken in three places, by `with` and by acquire.
        assert_eq!(src.same_lock_blocks(&locked, 2), vec![(11, 11), (16, 16)]);
        assert_eq!(src.same_lock_blocks(&locked, 10), vec![(3, 6), (16, 16)]);
        assert_eq!(src.same_lock_blocks(&locked, 7), vec![], "no lock taken there");
        // Native locks: a pthread pair (the unlock at the same indentation, not the early one
        // in an error branch), Go's defer, C++ and Rust scoped guards, a Rust temporary guard.
        let c = dir.join("table.c");
        std::fs::write(
            &c,
            "void put(struct t *t, int k) {\n    pthread_mutex_lock(&t->lock);\n    if (k < 0) {\n        pthread_mutex_unlock(&t->lock);\n        return;\n    }\n    rebuild(t, k);\n    pthread_mutex_unlock(&t->lock);\n    log_put(k);\n}\n",
        )
        .unwrap();
        assert_eq!(src.held_block(&c, 2), Some((3, 7)));
        assert_eq!(src.held_block(&c, 7), None, "no lock taken there");
        let go = dir.join("cache.go");
        std::fs::write(
            &go,
            "func (c *Cache) Get(k string) []byte {\n\tc.mu.Lock()\n\tdefer c.mu.Unlock()\n\tv := c.render(k)\n\treturn v\n}\n\nfunc (c *Cache) Put(k string) {\n\tc.mu.Lock()\n\tc.m[k] = nil\n\tc.n++\n\tc.mu.Unlock()\n}\n",
        )
        .unwrap();
        assert_eq!(src.held_block(&go, 2), Some((4, 5)), "held to the function's end after the defer");
        assert_eq!(src.held_block(&go, 9), Some((10, 11)));
        let cpp = dir.join("cache.cpp");
        std::fs::write(
            &cpp,
            "std::string Cache::get(int k) {\n    {\n        std::lock_guard<std::mutex> guard(mu_);\n        refresh(k);\n        touch(k);\n    }\n    return render(k);\n}\n",
        )
        .unwrap();
        assert_eq!(src.held_block(&cpp, 3), Some((4, 5)), "to the end of the guard's block");
        let rs = dir.join("cache.rs");
        std::fs::write(
            &rs,
            "fn get(&self, k: u32) -> String {\n    let mut map = self.map.lock().unwrap();\n    let v = expensive(k);\n    map.insert(k, v.clone());\n    v\n}\nfn bump(&self) {\n    self.count.lock().unwrap().add(1);\n}\n",
        )
        .unwrap();
        assert_eq!(src.held_block(&rs, 2), Some((3, 5)));
        assert_eq!(src.held_block(&rs, 8), None, "a temporary guard holds for its statement only");
        // C's do-while is a loop too.
        let c = dir.join("scan.c");
        std::fs::write(
            &c,
            "int main(void) {\n    long n = 0;\n    do {\n        n += scan(n);\n    } while (n < 10);\n}\n",
        )
        .unwrap();
        assert_eq!(src.enclosing_loop(&c, 4), Some(3));
        assert_eq!(src.enclosing_loop(&c, 2), None);
        // A closing brace is in the loop whose body it closes (a Rust drop at the end of a pass).
        let rs = dir.join("each.rs");
        std::fs::write(
            &rs,
            "fn each(rc: &Ctx, n: usize) {\n    for i in 0..n {\n        let local = rc.derive();\n        if i > 0 {\n            render(&local);\n        }\n    }\n}\n",
        )
        .unwrap();
        assert_eq!(src.enclosing_loop(&rs, 7), Some(2), "the loop's own closing brace");
        assert_eq!(src.enclosing_loop(&rs, 6), Some(2), "an if's closing brace inside the loop");
        assert_eq!(src.enclosing_loop(&rs, 8), None, "the function's");
        // A body a loop hands to a goroutine or a thread is not repeated by it pass by pass;
        // a closure the loop calls in place is.
        let go = dir.join("fan.go");
        std::fs::write(
            &go,
            "func main() {\n\tfor i := 0; i < n; i++ {\n\t\tgo func(i int) {\n\t\t\tdefer wg.Done()\n\t\t\tq[i] = fetch(i)\n\t\t}(i)\n\t\tcheck(i)\n\t}\n}\n",
        )
        .unwrap();
        assert_eq!(src.enclosing_loop(&go, 5), None, "the goroutine's body");
        assert_eq!(src.enclosing_loop(&go, 6), None, "the go statement's wrapper, at the literal's end");
        assert_eq!(src.enclosing_loop(&go, 7), Some(2), "the loop's own body");
        let spawned = dir.join("spawn.rs");
        std::fs::write(
            &spawned,
            "fn run(urls: &[String]) {\n    for u in urls {\n        let h = std::thread::spawn(move || {\n            fetch(u)\n        });\n        urls.iter().for_each(|x| {\n            log(x);\n        });\n    }\n}\n",
        )
        .unwrap();
        assert_eq!(src.enclosing_loop(&spawned, 4), None, "a thread's closure");
        assert_eq!(src.enclosing_loop(&spawned, 7), Some(2), "a closure called in place");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Request templates: text with `{{...}}` placeholders whose values are drawn per request.
//!
//! ```text
//! {{int A B}}                 an integer drawn uniformly from A..=B
//! {{choice a b "c d"}}        one of the words (double quotes keep spaces inside one word)
//! {{line FILE}}               one of the non-empty lines of FILE (read once, at start-up)
//! {{line FILE urlencode}}     the same, percent-encoded
//! {{bytes N ENC}}             N random bytes, written as hex, urlencode, base64 or base64url
//! {{uuid}}                    a random version-4 UUID
//! {{seq}}                     the request's number: 0, 1, 2, ... in schedule order
//! {{pick K GEN}}              one of K values made once from GEN (any of the above but seq):
//!                             a stable pool, e.g. `{{pick 2000 bytes 20 urlencode}}` is one of
//!                             2,000 fixed info-hashes
//! {{NAME = GEN}}              draw GEN, write it, and remember it as NAME for this request
//! {{NAME}}                    the value NAME holds in this request
//! ```
//!
//! A literal `{{` is written `{{choice {{}}`. Every value comes from a generator seeded by
//! `(seed, request number)`, so request N of a run is the same whatever the connections or
//! threads, and pools depend on the seed alone.

use std::fmt::Write as _;
use std::path::Path;

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

/// The template syntax, for `onefix load --help`.
pub const HELP: &str = "\
Templates: the URL's path and query, header values and the body may hold placeholders, drawn
anew for every request:
  {{int A B}}               an integer from A to B (both included)
  {{choice a b \"c d\"}}      one of the words (double quotes keep spaces in one word)
  {{line FILE}}             one of the non-empty lines of FILE; {{line FILE urlencode}} encodes it
  {{bytes N ENC}}           N random bytes as hex, urlencode, base64 or base64url
  {{uuid}}                  a random version-4 UUID
  {{seq}}                   the request's number in the schedule: 0, 1, 2, ...
  {{pick K GEN}}            one of K values made once from GEN (a stable pool), e.g.
                            {{pick 2000 bytes 20 urlencode}}: one of 2,000 fixed info-hashes
  {{NAME = GEN}}            draw GEN and remember it; {{NAME}} repeats it in the same request
                            (defined in the URL, then the headers, then the body)
A literal {{ is written {{choice {{}}. With the same --seed, request N is the same in every run.

Example, a BitTorrent announce over 2,000 torrents and 1,000 peers at 1,000 requests/s. The placeholders sit in shell variables so that no line of it wraps: paste all five lines.
  HASH='{{pick 2000 bytes 20 urlencode}}'
  PEER='{{pick 1000 bytes 20 urlencode}}'
  PORT='{{int 1024 65535}}' LEFT='{{int 0 1000000}}'
  onefix load --rate 1000 --duration 30s \\
    \"http://127.0.0.1:6969/announce?info_hash=$HASH&peer_id=$PEER&port=$PORT&left=$LEFT&compact=1\"
";

/// The largest `bytes N` and pool size accepted.
const MAX_BYTES: usize = 1 << 20;
const MAX_POOL: usize = 10_000_000;
/// The most a `pick` pool may hold in all: it is built before the first request is sent, so a
/// pool of large values (`pick 10000 bytes 1048576 hex`) must be refused, not allocated.
const MAX_POOL_BYTES: usize = 256 << 20;

/// An invalid template, in one sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

fn err<T>(msg: String) -> Result<T, TemplateError> {
    Err(TemplateError(msg))
}

/// Where a template is used decides which bytes it may produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The path and query of the URL: visible ASCII only, no spaces.
    Url,
    /// A header value: no CR, LF or NUL.
    Header,
    /// The body: anything.
    Body,
}

impl Place {
    fn allows(self, b: u8) -> bool {
        match self {
            Place::Url => (0x21..0x7f).contains(&b),
            Place::Header => b != b'\r' && b != b'\n' && b != 0,
            Place::Body => true,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Place::Url => "the URL",
            Place::Header => "a header",
            Place::Body => "the body",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    UrlEncode,
    Base64,
    Base64Url,
}

impl Encoding {
    fn parse(s: &str) -> Option<Encoding> {
        Some(match s {
            "hex" => Encoding::Hex,
            "urlencode" | "url" => Encoding::UrlEncode,
            "base64" => Encoding::Base64,
            "base64url" => Encoding::Base64Url,
            _ => return None,
        })
    }

    pub fn encode(self, bytes: &[u8], out: &mut Vec<u8>) {
        const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";
        const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";
        match self {
            Encoding::Hex => {
                for &b in bytes {
                    out.push(HEX_LOWER[(b >> 4) as usize]);
                    out.push(HEX_LOWER[(b & 15) as usize]);
                }
            }
            Encoding::UrlEncode => {
                for &b in bytes {
                    if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                        out.push(b);
                    } else {
                        out.push(b'%');
                        out.push(HEX_UPPER[(b >> 4) as usize]);
                        out.push(HEX_UPPER[(b & 15) as usize]);
                    }
                }
            }
            Encoding::Base64 | Encoding::Base64Url => {
                let table: &[u8; 64] = if self == Encoding::Base64 {
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
                } else {
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                };
                for chunk in bytes.chunks(3) {
                    let n = (chunk[0] as u32) << 16
                        | (*chunk.get(1).unwrap_or(&0) as u32) << 8
                        | *chunk.get(2).unwrap_or(&0) as u32;
                    let digits = chunk.len() + 1;
                    for i in 0..4 {
                        if i < digits {
                            out.push(table[((n >> (18 - 6 * i)) & 63) as usize]);
                        } else if self == Encoding::Base64 {
                            out.push(b'=');
                        }
                    }
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Gen {
    Int { lo: i64, hi: i64 },
    Choice(Vec<Box<[u8]>>),
    Bytes { n: usize, enc: Encoding },
    Uuid,
    Seq,
}

#[derive(Clone, Debug)]
enum Seg {
    Lit(Box<[u8]>),
    /// A generated value, optionally remembered in a variable slot.
    Gen {
        gen: Gen,
        bind: Option<usize>,
    },
    /// The value of a variable slot.
    Ref(usize),
}

/// One compiled template.
#[derive(Clone, Debug, Default)]
pub struct Template {
    segs: Vec<Seg>,
}

impl Template {
    /// True when the template has no placeholder: it renders to the same bytes every time.
    pub fn is_literal(&self) -> bool {
        self.segs.iter().all(|s| matches!(s, Seg::Lit(_)))
    }

    /// True when the template holds a placeholder.
    pub fn has_placeholders(&self) -> bool {
        !self.is_literal()
    }
}

/// Compiles the templates of one request (URL, headers, body) with shared variables and the
/// pools they draw from; defined variables are visible in templates compiled after them.
pub struct Compiler {
    seed: u64,
    vars: Vec<String>,
    pools: u64,
}

impl Compiler {
    pub fn new(seed: u64) -> Compiler {
        Compiler { seed, vars: Vec::new(), pools: 0 }
    }

    /// The number of variable slots a render context needs.
    pub fn var_count(&self) -> usize {
        self.vars.len()
    }

    /// Parses and checks `text` for use in `place`.
    pub fn compile(&mut self, text: &str, place: Place) -> Result<Template, TemplateError> {
        let mut segs = Vec::new();
        let mut rest = text;
        let mut offset = 0;
        while !rest.is_empty() {
            match rest.find("{{") {
                None => {
                    check_literal(rest, place)?;
                    segs.push(Seg::Lit(rest.as_bytes().into()));
                    break;
                }
                Some(i) => {
                    if i > 0 {
                        check_literal(&rest[..i], place)?;
                        segs.push(Seg::Lit(rest.as_bytes()[..i].into()));
                    }
                    let inner_start = i + 2;
                    let Some(len) = rest[inner_start..].find("}}") else {
                        return err(format!(
                            "invalid template: the `{{{{` at character {} of `{}` is never closed by `}}}}`",
                            offset + i + 1,
                            text
                        ));
                    };
                    let inner = &rest[inner_start..inner_start + len];
                    let seg = self.placeholder(inner, place).map_err(|e| {
                        TemplateError(format!("invalid template placeholder `{{{{{inner}}}}}`: {}", e.0))
                    })?;
                    segs.push(seg);
                    let consumed = inner_start + len + 2;
                    offset += consumed;
                    rest = &rest[consumed..];
                }
            }
        }
        Ok(Template { segs })
    }

    fn placeholder(&mut self, inner: &str, place: Place) -> Result<Seg, TemplateError> {
        let trimmed = inner.trim();
        // `NAME = GEN` binds; a lone NAME refers to a variable.
        if let Some(eq) = trimmed.find('=') {
            let name = trimmed[..eq].trim();
            if is_name(name) && !is_keyword(name) {
                if self.vars.iter().any(|v| v == name) {
                    return err(format!(
                        "the variable `{name}` is already defined: write `{{{{{name}}}}}` to repeat its value"
                    ));
                }
                let words = tokenize(&trimmed[eq + 1..])?;
                let gen = self.generator(&words, place)?;
                self.vars.push(name.to_string());
                return Ok(Seg::Gen { gen, bind: Some(self.vars.len() - 1) });
            }
        }
        let words = tokenize(trimmed)?;
        if words.is_empty() {
            return err("it is empty (try `{{int 1 100}}`)".to_string());
        }
        if words.len() == 1 && !is_keyword(&words[0]) && is_name(&words[0]) {
            return match self.vars.iter().position(|v| *v == words[0]) {
                Some(slot) => Ok(Seg::Ref(slot)),
                None => err(format!(
                    "`{}` is neither a generator (int, choice, line, bytes, uuid, seq, pick) nor a variable defined earlier (variables are defined as `{{{{NAME = GEN}}}}` in the URL, then the headers, then the body)",
                    words[0]
                )),
            };
        }
        let gen = self.generator(&words, place)?;
        Ok(Seg::Gen { gen, bind: None })
    }

    fn generator(&mut self, words: &[String], place: Place) -> Result<Gen, TemplateError> {
        let Some(kind) = words.first() else {
            return err("a generator is missing after `=`".to_string());
        };
        let args = &words[1..];
        let gen = match kind.as_str() {
            "int" => {
                let [lo, hi] = args else {
                    return err("`int` takes two bounds, as in `int 1 2000`".to_string());
                };
                let lo: i64 = parse_num(lo, "the lower bound of `int`")?;
                let hi: i64 = parse_num(hi, "the upper bound of `int`")?;
                if lo > hi {
                    return err(format!("the range is empty ({lo} is above {hi})"));
                }
                Gen::Int { lo, hi }
            }
            "choice" => {
                if args.is_empty() {
                    return err("`choice` needs at least one value, as in `choice GET PUT`".to_string());
                }
                let values: Vec<Box<[u8]>> = args.iter().map(|a| a.as_bytes().into()).collect();
                check_values(&values, place, "a `choice` value")?;
                Gen::Choice(values)
            }
            "line" => {
                let (path, enc) = match args {
                    [path] => (path, None),
                    [path, enc] => match Encoding::parse(enc) {
                        Some(e) => (path, Some(e)),
                        None => {
                            return err(format!("`{enc}` is not an encoding (use hex, urlencode, base64 or base64url)"))
                        }
                    },
                    _ => {
                        return err(
                            "`line` takes a file name and an optional encoding, as in `line names.txt urlencode`"
                                .to_string(),
                        )
                    }
                };
                let values = read_lines(Path::new(path), enc)?;
                check_values(&values, place, &format!("a line of {path}"))?;
                Gen::Choice(values)
            }
            "bytes" => {
                let [n, enc] = args else {
                    return err("`bytes` takes a count and an encoding, as in `bytes 20 urlencode`".to_string());
                };
                let n: usize = parse_num(n, "the byte count of `bytes`")?;
                if n == 0 || n > MAX_BYTES {
                    return err(format!("the byte count must be between 1 and {MAX_BYTES}, not {n}"));
                }
                let Some(enc) = Encoding::parse(enc) else {
                    return err(format!("`{enc}` is not an encoding (use hex, urlencode, base64 or base64url)"));
                };
                Gen::Bytes { n, enc }
            }
            "uuid" => {
                if !args.is_empty() {
                    return err("`uuid` takes no arguments".to_string());
                }
                Gen::Uuid
            }
            "seq" => {
                if !args.is_empty() {
                    return err("`seq` takes no arguments".to_string());
                }
                Gen::Seq
            }
            "pick" => {
                let Some((k, inner)) = args.split_first() else {
                    return err(
                        "`pick` takes a pool size and a generator, as in `pick 2000 bytes 20 urlencode`".to_string()
                    );
                };
                let k: usize = parse_num(k, "the pool size of `pick`")?;
                if k == 0 || k > MAX_POOL {
                    return err(format!("the pool size must be between 1 and {MAX_POOL}, not {k}"));
                }
                if inner.is_empty() {
                    return err("`pick` needs a generator after the pool size, as in `pick 2000 bytes 20 urlencode`"
                        .to_string());
                }
                if matches!(inner[0].as_str(), "pick" | "seq") {
                    return err(format!("`pick` cannot draw from `{}`", inner[0]));
                }
                let gen = self.generator(inner, place)?;
                // A pool depends on the seed and on how many pools came before it, nothing else.
                self.pools += 1;
                let mut rng = SmallRng::seed_from_u64(mix(self.seed ^ 0x9e37_79b9_7f4a_7c15, self.pools));
                let mut values = Vec::with_capacity(k);
                let mut buf = Vec::new();
                let mut pool_bytes = 0usize;
                for _ in 0..k {
                    buf.clear();
                    gen.write(&mut rng, 0, &mut buf);
                    pool_bytes += buf.len();
                    // The first value's size times the pool size tells at once, for values of
                    // one size; the running total catches the rest.
                    if pool_bytes > MAX_POOL_BYTES
                        || (values.is_empty() && buf.len().saturating_mul(k) > MAX_POOL_BYTES)
                    {
                        return err(format!(
                            "the pool of `pick {k}` would hold more than {} MiB: use a smaller pool or shorter values",
                            MAX_POOL_BYTES >> 20
                        ));
                    }
                    values.push(buf.as_slice().into());
                }
                Gen::Choice(values)
            }
            other => {
                return err(format!("`{other}` is not a generator (use int, choice, line, bytes, uuid, seq or pick)"))
            }
        };
        Ok(gen)
    }
}

fn is_keyword(s: &str) -> bool {
    matches!(s, "int" | "choice" | "line" | "bytes" | "uuid" | "seq" | "pick")
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_num<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, TemplateError> {
    s.parse().or_else(|_| err(format!("{what} must be a whole number, not `{s}`")))
}

/// Splits on whitespace; a double-quoted word keeps its spaces (`\"` and `\\` escape).
fn tokenize(s: &str) -> Result<Vec<String>, TemplateError> {
    let mut words = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut word = String::new();
        if c == '"' {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '"' => {
                        closed = true;
                        break;
                    }
                    '\\' => match chars.next() {
                        Some(e) => word.push(e),
                        None => break,
                    },
                    c => word.push(c),
                }
            }
            if !closed {
                return err("a double-quoted value is never closed".to_string());
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                word.push(c);
                chars.next();
            }
        }
        words.push(word);
    }
    Ok(words)
}

fn check_literal(text: &str, place: Place) -> Result<(), TemplateError> {
    if let Some(b) = text.bytes().find(|&b| !place.allows(b)) {
        return err(format!(
            "invalid template: {} cannot hold the character {:?} in `{}`{}",
            place.name(),
            b as char,
            text,
            if place == Place::Url { " (write it percent-encoded, e.g. %20 for a space)" } else { "" }
        ));
    }
    Ok(())
}

fn check_values(values: &[Box<[u8]>], place: Place, what: &str) -> Result<(), TemplateError> {
    for v in values {
        if let Some(&b) = v.iter().find(|&&b| !place.allows(b)) {
            return err(format!(
                "{what}, `{}`, holds the character {:?}, which {} cannot hold{}",
                String::from_utf8_lossy(v),
                b as char,
                place.name(),
                if place == Place::Url { " unencoded (add `urlencode`)" } else { "" }
            ));
        }
    }
    Ok(())
}

fn read_lines(path: &Path, enc: Option<Encoding>) -> Result<Vec<Box<[u8]>>, TemplateError> {
    let cannot = |e: std::io::Error| {
        TemplateError(format!("cannot read the file {}: {}", path.display(), e.to_string().to_lowercase()))
    };
    // Read no more than a pool may hold: a device (`/dev/zero`) or a huge file is refused
    // instead of filling memory.
    let mut data = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::open(path).map_err(cannot)?, MAX_POOL_BYTES as u64 + 1),
        &mut data,
    )
    .map_err(cannot)?;
    if data.len() > MAX_POOL_BYTES {
        return err(format!(
            "the file {} is larger than {} MiB: give a smaller file of values",
            path.display(),
            MAX_POOL_BYTES >> 20
        ));
    }
    let mut values = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        match enc {
            None => values.push(line.into()),
            Some(e) => {
                let mut out = Vec::new();
                e.encode(line, &mut out);
                values.push(out.into());
            }
        }
    }
    if values.is_empty() {
        return err(format!("the file {} has no non-empty line", path.display()));
    }
    Ok(values)
}

/// SplitMix64 finaliser over two words: the per-request and per-pool seeds.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a.wrapping_add(b.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn write_int(mut v: i64, out: &mut Vec<u8>) {
    if v < 0 {
        out.push(b'-');
        // i64::MIN has no positive counterpart: write it through u64.
        let u = (v as i128).unsigned_abs() as u64;
        return write_u64(u, out);
    }
    if v == 0 {
        out.push(b'0');
        return;
    }
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    while v > 0 {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out.extend_from_slice(&tmp[i..]);
}

pub(crate) fn write_u64(mut v: u64, out: &mut Vec<u8>) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

impl Gen {
    fn write(&self, rng: &mut SmallRng, seq: u64, out: &mut Vec<u8>) {
        match self {
            Gen::Int { lo, hi } => write_int(rng.random_range(*lo..=*hi), out),
            Gen::Choice(values) => {
                let v = if values.len() == 1 { &values[0] } else { &values[rng.random_range(0..values.len())] };
                out.extend_from_slice(v);
            }
            Gen::Bytes { n, enc } => {
                let mut small = [0u8; 64];
                if *n <= small.len() {
                    rng.fill_bytes(&mut small[..*n]);
                    enc.encode(&small[..*n], out);
                } else {
                    let mut big = vec![0u8; *n];
                    rng.fill_bytes(&mut big);
                    enc.encode(&big, out);
                }
            }
            Gen::Uuid => {
                let mut b = [0u8; 16];
                rng.fill_bytes(&mut b);
                b[6] = (b[6] & 0x0f) | 0x40;
                b[8] = (b[8] & 0x3f) | 0x80;
                let mut s = String::with_capacity(36);
                for (i, byte) in b.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        s.push('-');
                    }
                    let _ = write!(s, "{byte:02x}");
                }
                out.extend_from_slice(s.as_bytes());
            }
            Gen::Seq => write_u64(seq, out),
        }
    }
}

/// Per-request state for rendering: the random generator and the variables' values.
pub struct RenderCtx {
    rng: SmallRng,
    seed: u64,
    seq: u64,
    vars: Vec<(usize, usize)>,
    var_buf: Vec<u8>,
}

impl RenderCtx {
    pub fn new(seed: u64, var_count: usize) -> RenderCtx {
        RenderCtx {
            rng: SmallRng::seed_from_u64(seed),
            seed,
            seq: 0,
            vars: vec![(0, 0); var_count],
            var_buf: Vec::new(),
        }
    }

    /// Starts request number `seq`: its values depend on the seed and `seq` alone.
    pub fn begin(&mut self, seq: u64) {
        self.seq = seq;
        self.rng = SmallRng::seed_from_u64(mix(self.seed, seq));
        self.var_buf.clear();
    }

    /// Appends the template's rendering for the current request to `out`.
    pub fn render(&mut self, t: &Template, out: &mut Vec<u8>) {
        for seg in &t.segs {
            match seg {
                Seg::Lit(bytes) => out.extend_from_slice(bytes),
                Seg::Gen { gen, bind } => {
                    let start = out.len();
                    gen.write(&mut self.rng, self.seq, out);
                    if let Some(slot) = *bind {
                        let vstart = self.var_buf.len();
                        self.var_buf.extend_from_slice(&out[start..]);
                        self.vars[slot] = (vstart, self.var_buf.len());
                    }
                }
                Seg::Ref(slot) => {
                    let (a, b) = self.vars[*slot];
                    out.extend_from_slice(&self.var_buf[a..b]);
                }
            }
        }
    }
}

/// Compiles one template alone and renders request `seq` of it: for tests and previews.
pub fn render_one(text: &str, place: Place, seed: u64, seq: u64) -> Result<String, TemplateError> {
    let mut c = Compiler::new(seed);
    let t = c.compile(text, place)?;
    let mut ctx = RenderCtx::new(seed, c.var_count());
    ctx.begin(seq);
    let mut out = Vec::new();
    ctx.render(&t, &mut out);
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
#[path = "template_tests.rs"]
mod tests;

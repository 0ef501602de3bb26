//! The rewrites a finding goes through once its line is classified, each a small unit that
//! decides alone from what was gathered about the line ([`LineFacts`]), in [`RULES`]' order.
//! Their words are data (kb/builtin.toml); each has its own tests below.

use onefix_model::Frame;

use super::IN_FLIGHT_WINDOW_US;
use super::OVERLAPPING_WAITS;
use crate::builtin::Builtins;
use crate::kb::EntrySpec;
use crate::{Evidence, Kind};

/// A finding being written: what the classification said, and where it is placed.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Draft {
    pub kind: Kind,
    pub rule: String,
    /// What the cost is, as the title names it.
    pub what: String,
    pub why: String,
    pub fix: String,
    pub file: String,
    pub line: u32,
    pub function: String,
    pub code: Option<String>,
    pub evidence: Vec<Evidence>,
}

/// What is known of the line, gathered from the samples and the source before the rules run.
pub(super) struct LineFacts<'a> {
    pub frame: &'a Frame,
    /// The line's share of the busy weight.
    pub share: f64,
    /// A call in the line's loop condition (`i < strlen(s)`).
    pub in_condition: bool,
    /// Blocked samples in flight at once: the mean and the peak (serial-io lines only).
    pub in_flight: Option<(f64, f64)>,
    /// The line above, in the same function, that made the object this line uses, with the
    /// set-up entry that knows it: (line, code, entry).
    pub lazy_setup: Option<(u32, &'a str, &'a EntrySpec)>,
    /// The loop that repeats the line, here or in a caller: (file, function, line, code).
    pub loop_at: Option<(&'a str, &'a str, u32, Option<&'a str>)>,
    /// A search on the line from a position its own loop advances: (call, text, position).
    pub advancing_search: Option<(&'a str, &'a str, &'a str)>,
    /// For a finding whose entry needs evidence that its cost repeats per item (`per_item`),
    /// whether a frame making it per item carries a good part of the line's time.
    pub per_item: Option<bool>,
}

pub(super) type Rule = fn(&mut Draft, &LineFacts, &Builtins);

/// The rules, in the order they apply: each sees what the ones before it made of the finding.
pub(super) const RULES: [Rule; 7] = [
    once_per_pass,
    call_in_loop_condition,
    search_from_advancing_position,
    waits_in_flight,
    lazy_setup,
    single_wait,
    serial_at_the_loop,
];

/// A search from a position that the loop around it advances, over a text it does not change
/// (`while i < n: m = pat.search(s, i); ...; i = m.end()`): each pass scans the rest of the
/// text, quadratic in its length. Only a line read as a call or a match (not a wait).
fn search_from_advancing_position(d: &mut Draft, f: &LineFacts, b: &Builtins) {
    let Some((call, text, var)) = f.advancing_search else { return };
    if !matches!(d.kind, Kind::HotCall | Kind::HotLoopCompute | Kind::RegexMatching) {
        return;
    }
    let loop_at = f.loop_at.map(|(file, _, line, _)| format!("{}:{line}", onefix_model::fmt::file_name(file)));
    let values = [
        ("call", call.to_owned()),
        ("text", text.to_owned()),
        ("var", var.to_owned()),
        ("loop_at", loop_at.unwrap_or_default()),
    ];
    let id = "search-from-advancing-position";
    d.kind = b.kind(id);
    d.rule = id.to_owned();
    d.what = b.what(id, &values);
    d.why = b.why(id, &values);
    d.fix = b.fix(id, &values);
}

/// A kind that is about repetition (an N+1 query) needs its evidence: a loop around the line,
/// here or in a caller, or a frame that makes the operation per item. Without, the line makes
/// the call once per pass (a lookup per request), which is a call to make cheaper.
fn once_per_pass(d: &mut Draft, f: &LineFacts, b: &Builtins) {
    if d.kind != Kind::NPlusOneQuery || f.per_item != Some(false) || f.loop_at.is_some() {
        return;
    }
    let id = "query-once-per-pass";
    let callee = d.evidence.first().map(|e| e.frame.clone()).unwrap_or_else(|| "the query".into());
    let values = [("callee", callee)];
    d.kind = b.kind(id);
    d.rule = format!("{}-{id}", d.rule);
    d.what = b.what(id, &values);
    d.why = b.why(id, &values);
    d.fix = b.fix(id, &values);
}

/// A bound called in a loop's condition runs again on every pass (`i < strlen(s)` re-scans the
/// string each time: the loop is quadratic), though its answer rarely changes.
fn call_in_loop_condition(d: &mut Draft, f: &LineFacts, b: &Builtins) {
    if f.in_condition {
        let id = "call-in-loop-condition";
        d.kind = b.kind(id);
        d.rule = id.to_owned();
        d.why = b.why(id, &[("why", std::mem::take(&mut d.why))]);
        d.fix = b.fix(id, &[]);
    }
}

/// Waits issued one at a time are serial (fixed at the loop); waits that already overlap are
/// the replies' own latency.
fn waits_in_flight(d: &mut Draft, f: &LineFacts, b: &Builtins) {
    let (Kind::SerialIo, Some((mean, peak))) = (d.kind, f.in_flight) else { return };
    let values = [
        ("mean", format!("{mean:.1}")),
        ("window_ms", (IN_FLIGHT_WINDOW_US / 1000).to_string()),
        ("peak", format!("{peak:.1}")),
    ];
    if mean >= OVERLAPPING_WAITS {
        let id = "concurrent-waits";
        d.kind = b.kind(id);
        d.rule = format!("{}-concurrent", d.rule);
        d.why = b.why(id, &values);
        d.fix = b.fix(id, &values);
    } else {
        let mut values = values.to_vec();
        values.push(("why", std::mem::take(&mut d.why)));
        // The statistic is said in why, with its unit; evidence lists frames only.
        d.why = b.why("serial-waits", &values);
    }
}

/// Time inside a method of an object built a few lines above by a known set-up call is that
/// set-up's cost paid lazily (a database connection reads its schema on the first statement):
/// the fix is where the object is made.
fn lazy_setup(d: &mut Draft, f: &LineFacts, b: &Builtins) {
    let (Kind::HotCall | Kind::NPlusOneQuery, Some((made_at, made_code, spec))) = (d.kind, f.lazy_setup) else {
        return;
    };
    let first_use = Evidence {
        frame: format!("{} (first use)", d.code.clone().unwrap_or_default()),
        file: d.file.clone(),
        line: d.line,
        share: f.share,
    };
    d.evidence.insert(0, first_use);
    d.why = b.why("lazy-setup", &[("why", spec.why.clone()), ("line", f.frame.line.to_string())]);
    (d.kind, d.rule, d.fix) = (spec.kind, spec.id.clone(), spec.fix_for(f.frame.kind).to_owned());
    d.line = made_at;
    d.code = Some(made_code.to_owned());
}

/// A wait no loop of the user's repeats (a handler's one call to its backend) has nothing to
/// overlap with: the reply's own latency is the cost.
fn single_wait(d: &mut Draft, f: &LineFacts, b: &Builtins) {
    if d.kind == Kind::SerialIo && f.loop_at.is_none() {
        d.kind = b.kind("single-wait");
        d.rule = format!("{}-single", d.rule);
        d.why = b.why("single-wait", &[]);
        d.fix = b.fix("single-wait", &[]);
    }
}

/// Serial waits are fixed at the loop that issues them, which may be in a caller: the finding
/// moves there, with the call that waits as its first evidence.
fn serial_at_the_loop(d: &mut Draft, f: &LineFacts, _: &Builtins) {
    let (Kind::SerialIo, Some((file, function, line, code))) = (d.kind, f.loop_at) else { return };
    let waits = Evidence {
        frame: format!("{} (the call that waits)", d.code.clone().unwrap_or_else(|| f.frame.function.clone())),
        file: d.file.clone(),
        line: d.line,
        share: f.share,
    };
    d.evidence.insert(0, waits);
    d.file = file.to_owned();
    d.line = line;
    d.function = function.to_owned();
    d.code = code.map(str::to_owned);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Frame {
        Frame::python("fetch_all", "/app/poll.py", 12)
    }

    fn draft(kind: Kind, rule: &str) -> Draft {
        Draft {
            kind,
            rule: rule.into(),
            what: String::new(),
            why: "the thread waits for the network".into(),
            fix: "issue them concurrently".into(),
            file: "/app/poll.py".into(),
            line: 12,
            function: "fetch_all".into(),
            code: Some("r = requests.get(url)".into()),
            evidence: Vec::new(),
        }
    }

    fn facts(frame: &Frame) -> LineFacts<'_> {
        LineFacts {
            frame,
            share: 0.8,
            in_condition: false,
            in_flight: None,
            lazy_setup: None,
            loop_at: None,
            advancing_search: None,
            per_item: None,
        }
    }

    #[test]
    fn a_query_is_an_n_plus_one_only_with_a_loop_or_a_load_per_item() {
        let frame = Frame::python("view", "/app/views.py", 12);
        let once = LineFacts { per_item: Some(false), ..facts(&frame) };
        let mut d = draft(Kind::NPlusOneQuery, "query-per-item");
        run(once_per_pass, &mut d, &once);
        assert_eq!(d.kind, Kind::HotCall, "one lookup per request");
        assert!(d.why.contains("not an N+1"), "{}", d.why);
        let lazy = LineFacts { per_item: Some(true), ..facts(&frame) };
        let mut d = draft(Kind::NPlusOneQuery, "query-per-item");
        run(once_per_pass, &mut d, &lazy);
        assert_eq!(d.kind, Kind::NPlusOneQuery, "a related object loaded per item");
        let looped =
            LineFacts { per_item: Some(false), loop_at: Some(("/app/views.py", "view", 10, None)), ..facts(&frame) };
        let mut d = draft(Kind::NPlusOneQuery, "query-per-item");
        run(once_per_pass, &mut d, &looped);
        assert_eq!(d.kind, Kind::NPlusOneQuery, "a query in a loop");
    }

    fn run(rule: Rule, d: &mut Draft, f: &LineFacts) {
        rule(d, f, Builtins::get());
    }

    #[test]
    fn a_call_in_a_loop_condition_is_quadratic_work() {
        let frame = frame();
        let mut d = draft(Kind::HotCall, "hot-call");
        run(call_in_loop_condition, &mut d, &facts(&frame));
        assert_eq!(d, draft(Kind::HotCall, "hot-call"), "nothing to do outside a condition");
        run(call_in_loop_condition, &mut d, &LineFacts { in_condition: true, ..facts(&frame) });
        assert_eq!((d.kind, d.rule.as_str()), (Kind::HotLoopCompute, "call-in-loop-condition"));
        assert!(d.why.starts_with("the loop's condition") && d.why.ends_with("waits for the network"), "{}", d.why);
    }

    #[test]
    fn waits_that_overlap_are_latency_and_waits_one_at_a_time_stay_serial() {
        let frame = frame();
        let mut overlapping = draft(Kind::SerialIo, "network-wait");
        run(waits_in_flight, &mut overlapping, &LineFacts { in_flight: Some((3.2, 4.0)), ..facts(&frame) });
        assert_eq!((overlapping.kind, overlapping.rule.as_str()), (Kind::BlockingWait, "network-wait-concurrent"));
        assert!(overlapping.why.starts_with("3.2 waits are in flight at once"), "{}", overlapping.why);
        let mut serial = draft(Kind::SerialIo, "network-wait");
        run(waits_in_flight, &mut serial, &LineFacts { in_flight: Some((1.0, 1.0)), ..facts(&frame) });
        assert_eq!(serial.kind, Kind::SerialIo);
        assert!(serial.why.ends_with("one wait in flight at a time (mean 1.0 over 50 ms windows, at most 1.0)"));
        assert!(serial.evidence.iter().all(|e| !e.frame.contains("in flight")), "a statistic is no frame");
    }

    #[test]
    fn a_single_wait_is_latency_and_serial_waits_move_to_their_loop() {
        let frame = frame();
        let mut single = draft(Kind::SerialIo, "network-wait");
        run(single_wait, &mut single, &facts(&frame));
        assert_eq!((single.kind, single.rule.as_str()), (Kind::BlockingWait, "network-wait-single"));
        let mut in_loop = draft(Kind::SerialIo, "network-wait");
        let at = LineFacts { loop_at: Some(("/app/main.py", "main", 30, Some("for url in urls:"))), ..facts(&frame) };
        run(single_wait, &mut in_loop, &at);
        run(serial_at_the_loop, &mut in_loop, &at);
        assert_eq!(
            (in_loop.file.as_str(), in_loop.line, in_loop.code.as_deref()),
            ("/app/main.py", 30, Some("for url in urls:"))
        );
        assert_eq!(in_loop.evidence[0].frame, "r = requests.get(url) (the call that waits)");
        assert_eq!((in_loop.evidence[0].file.as_str(), in_loop.evidence[0].line), ("/app/poll.py", 12));
    }

    #[test]
    fn a_lazily_finished_set_up_is_charged_where_the_object_is_made() {
        let kb = crate::KnowledgeBase::builtin();
        let spec = &kb.entries.iter().find(|e| e.spec.id == "db-connect").expect("the db-connect entry").spec;
        let frame = frame();
        let mut d = draft(Kind::HotCall, "hot-call");
        d.code = Some("conn.execute(q)".into());
        let f = LineFacts { lazy_setup: Some((10, "conn = sqlite3.connect(DB)", spec)), ..facts(&frame) };
        run(lazy_setup, &mut d, &f);
        assert_eq!((d.kind, d.rule.as_str(), d.line), (spec.kind, "db-connect", 10));
        assert_eq!(d.code.as_deref(), Some("conn = sqlite3.connect(DB)"));
        assert_eq!(d.evidence[0].frame, "conn.execute(q) (first use)");
        assert!(d.why.contains("first use on line 12"), "{}", d.why);
    }
}

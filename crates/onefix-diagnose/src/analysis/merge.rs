//! Folding findings that are one thing to change: an effect into the cause the knowledge base
//! says it comes from, and one entry's findings at several lines of one function.

use super::*;

impl Engine<'_> {
    /// Folds a finding into another whose knowledge-base entry causes it, when both are
    /// repeated by the same loop: one cause, one fix, one gain bound.
    pub(super) fn merge_consequences(&self, findings: &mut Vec<Finding>) {
        let mut i = 0;
        while i < findings.len() {
            let cause = (0..findings.len()).find(|&c| {
                c != i
                    && findings[i].enclosing_loop.is_some()
                    && findings[c].enclosing_loop == findings[i].enclosing_loop
                    && self
                        .kb
                        .entries
                        .iter()
                        .any(|e| e.spec.id == findings[c].rule && e.spec.also_causes.contains(&findings[i].rule))
            });
            let Some(c) = cause else {
                i += 1;
                continue;
            };
            let effect = findings.remove(i);
            let c = if c > i { c - 1 } else { c };
            let target = &mut findings[c];
            // Only the part of the effect's line that the caused entry explains goes away.
            target.absorb_share(effect.share * effect.explained, effect.share * effect.explained);
            join_bounds(target, &effect, effect.explained);
            let effect_what = self
                .kb
                .entries
                .iter()
                .find(|e| e.spec.id == effect.rule)
                .map(|e| e.spec.what.as_str())
                .unwrap_or("its cost");
            target.why = format!(
                "{}; the same cause means {} at {}:{} ({:.0}%)",
                target.why,
                effect_what,
                short(&effect.file),
                effect.line,
                effect.share * 100.0
            );
            join_evidence(&mut target.evidence, effect.evidence);
            i = 0;
        }
    }
}

/// A finding whose time is mostly freeing a value (`core::ptr::drop_in_place<T>`), in a loop
/// where another finding copies one (a `Clone::clone`, or a deep copy the knowledge base
/// knows): the copy made on each pass is freed on each pass, so the drop is the copy's cost
/// and goes with it (sharing the value behind an `Rc`/`Arc` or borrowing it removes both).
/// Folded into the heaviest such copy.
pub(super) fn fold_drops_into_copies(findings: &mut Vec<Finding>) {
    let mostly =
        |f: &Finding, is: &dyn Fn(&str) -> bool| f.evidence.iter().any(|e| is(&e.frame) && e.share * 2.0 >= f.share);
    let is_drop = |frame: &str| frame.starts_with("core::ptr::drop_in_place<");
    let is_copy = |frame: &str| frame.ends_with("::clone") || frame.contains("::clone<");
    let mut i = 0;
    while i < findings.len() {
        let d = &findings[i];
        if d.enclosing_loop.is_none() || !mostly(d, &is_drop) {
            i += 1;
            continue;
        }
        let copy = (0..findings.len())
            .filter(|&c| {
                let f = &findings[c];
                c != i
                    && f.enclosing_loop == d.enclosing_loop
                    && !mostly(f, &is_drop)
                    && (f.kind == Kind::DeepCopy || mostly(f, &is_copy))
            })
            .max_by(|&a, &b| findings[a].share.total_cmp(&findings[b].share));
        let Some(c) = copy else {
            i += 1;
            continue;
        };
        let drop = findings.remove(i);
        let c = if c > i { c - 1 } else { c };
        let target = &mut findings[c];
        // All of the drop is the copy's cost: freeing what the copy allocated.
        target.absorb_share(drop.share, drop.share);
        join_bounds(target, &drop, 1.0);
        target.why = format!(
            "{}; each copy is freed again at {}:{} ({:.0}%), part of the same cost",
            target.why,
            short(&drop.file),
            drop.line,
            drop.share * 100.0
        );
        join_evidence(&mut target.evidence, drop.evidence);
        i = 0;
    }
}

/// Folds findings of one knowledge-base entry in one function into one, at its first line: one
/// piece of work spread over lines (a file opened on one line and closed on another, two
/// patterns compiled one after the other) is one thing to change. A line with far less of the
/// work than the other (under [`MINOR_LINE`] of it: reads torn across two lines of a loop, as a
/// busy machine makes them) is folded into the heavier one instead, where the work is. Findings
/// of the built-in rules (a hot call, self time, a wait) name different work at each line, and
/// stay apart.
/// Below this fraction of the other line's share, a line's part of the work is minor.
const MINOR_LINE: f64 = 0.25;

pub(super) fn merge_within_functions(findings: &mut Vec<Finding>, is_entry: impl Fn(&str) -> bool) {
    let mut i = 0;
    while i < findings.len() {
        let same = (0..i).find(|&k| {
            let (a, b) = (&findings[k], &findings[i]);
            a.file == b.file
                && a.function == b.function
                && a.rule == b.rule
                && a.line != b.line
                && b.kind != Kind::SerialIo
                && is_entry(&a.rule)
        });
        let Some(k) = same else {
            i += 1;
            continue;
        };
        let other = findings.remove(i);
        let kept = findings[k].clone();
        let (first, second) = if other.line < kept.line { (other, kept) } else { (kept, other) };
        let (first, second) = if first.share < MINOR_LINE * second.share { (second, first) } else { (first, second) };
        let mut joined = Finding {
            why: format!("{}; the same work goes on at line {} ({:.0}%)", first.why, second.line, second.share * 100.0),
            evidence: {
                let mut evidence = first.evidence.clone();
                join_evidence(&mut evidence, second.evidence.iter().cloned());
                evidence
            },
            ..first.clone()
        };
        join_bounds(&mut joined, &second, 1.0);
        joined.absorb_share(second.share, second.share * second.explained);
        findings[k] = joined;
    }
}

/// A loop's header line (`for i in range(n):`, `while i < n:`) computing in its own right is
/// the loop's iteration, not a second thing to change: with a finding inside that loop, it is
/// folded into the heaviest such finding. When both are the loop's own compute, the fix (less
/// work per pass, a vectorised library) removes both, so the header's share and bound join
/// it; otherwise it is only said there.
pub(super) fn fold_loop_headers(findings: &mut Vec<Finding>) {
    let is_header = |f: &Finding| {
        f.kind == Kind::HotLoopCompute
            && f.code.as_deref().is_some_and(|c| {
                let c = c.trim_start();
                c.starts_with("for ") || c.starts_with("while ") || c.starts_with("async for ")
            })
    };
    let mut i = 0;
    while i < findings.len() {
        if !is_header(&findings[i]) {
            i += 1;
            continue;
        }
        let place = format!("{}:{}", short(&findings[i].file), findings[i].line);
        let body = (0..findings.len())
            .filter(|&b| b != i && findings[b].enclosing_loop.as_deref() == Some(place.as_str()))
            .max_by(|&a, &b| findings[a].share.total_cmp(&findings[b].share));
        let Some(b) = body else {
            i += 1;
            continue;
        };
        let header = findings.remove(i);
        let b = if b > i { b - 1 } else { b };
        let target = &mut findings[b];
        if target.kind == Kind::HotLoopCompute {
            let explained = if target.rule == header.rule { header.share * header.explained } else { 0.0 };
            target.absorb_share(header.share, explained);
            join_bounds(target, &header, 1.0);
        }
        target.why =
            format!("{}; the loop's own iteration at {place} takes {:.0}% more", target.why, header.share * 100.0);
        i = 0;
    }
}

#[cfg(test)]
mod loop_header_tests {
    use super::*;

    fn at(line: u32, code: &str, share: f64, enclosing_loop: Option<&str>) -> Finding {
        Finding {
            rank: 0,
            kind: Kind::HotLoopCompute,
            file: "/app/scan.py".into(),
            line,
            function: "scan".into(),
            code: Some(code.into()),
            share,
            max_speedup: Some(1.0 / (1.0 - share)),
            bound_weight: 100,
            title: String::new(),
            advice: String::new(),
            why: "computes".into(),
            evidence: Vec::new(),
            recurrence: Some(1.0),
            rule: "self-time".into(),
            explained: 1.0,
            enclosing_loop: enclosing_loop.map(str::to_owned),
            what: String::new(),
            no_bound: None,
            modelled_range: None,
            gain_basis: GainBasis::BusyShare,
        }
    }

    #[test]
    fn a_loop_header_computing_is_folded_into_the_work_of_its_body() {
        let mut findings = vec![
            at(7, "t += i * i % 7", 0.70, Some("scan.py:6")),
            at(6, "for i in range(200_000):", 0.22, None),
            // Another loop's header, with nothing of its own inside it among the findings.
            at(20, "while queue:", 0.05, None),
        ];
        fold_loop_headers(&mut findings);
        let lines: Vec<u32> = findings.iter().map(|f| f.line).collect();
        assert_eq!(lines, [7, 20]);
        assert!((findings[0].share - 0.92).abs() < 1e-9);
        assert!((findings[0].max_speedup.unwrap() - 12.5).abs() < 0.01, "{:?}", findings[0].max_speedup);
        assert!(
            findings[0].why.ends_with("the loop's own iteration at scan.py:6 takes 22% more"),
            "{}",
            findings[0].why
        );
    }
}

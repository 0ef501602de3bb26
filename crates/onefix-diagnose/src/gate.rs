//! CI gates: conditions a run or a comparison must not cross, parsed once at the command
//! line's edge into typed values.
//!
//! - [`FailOn`]: a finding crosses a threshold (`share>20%`) or is of a listed kind
//!   (`kind=n-plus-one-query,repeated-setup`).
//! - [`slower_beyond`]: B is slower than A by more than a limit, with the confidence of the
//!   comparison's own test and interval.

use std::fmt;
use std::str::FromStr;

use onefix_model::stats::{fmt_p, Metric};

use crate::compare::{LineComparison, RunComparison};
use crate::{Finding, Kind};

/// A condition on a diagnosis's findings that fails the run when a finding meets it.
#[derive(Clone, Debug, PartialEq)]
pub enum FailOn {
    /// A finding's share of the run above `limit` (a fraction), or at it when `inclusive`.
    Share { limit: f64, inclusive: bool },
    /// A finding of one of these kinds, whatever its share.
    Kinds(Vec<Kind>),
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FailOnError {
    #[error("`{0}` is not a condition: give share>20% (or share>=0.2), or kind= and a comma-separated list of kinds")]
    Syntax(String),
    #[error("`{0}` is not a share: give a percentage between 0% and 100% (share>20%) or a fraction (share>0.2)")]
    Share(String),
    #[error("`{0}` is not a kind of finding; the kinds are {kinds}", kinds = kinds())]
    Kind(String),
}

fn kinds() -> String {
    Kind::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
}

impl FromStr for FailOn {
    type Err = FailOnError;

    fn from_str(s: &str) -> Result<FailOn, FailOnError> {
        let text = s.trim();
        if let Some(list) = text.strip_prefix("kind=").or_else(|| text.strip_prefix("kind =")) {
            let kinds = list
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(|k| {
                    Kind::ALL
                        .iter()
                        .copied()
                        .find(|kind| kind.as_str() == k)
                        .ok_or_else(|| FailOnError::Kind(k.to_owned()))
                })
                .collect::<Result<Vec<Kind>, _>>()?;
            if kinds.is_empty() {
                return Err(FailOnError::Syntax(s.to_owned()));
            }
            return Ok(FailOn::Kinds(kinds));
        }
        let rest = text.strip_prefix("share").ok_or_else(|| FailOnError::Syntax(s.to_owned()))?.trim_start();
        let (inclusive, value) = match (rest.strip_prefix(">="), rest.strip_prefix('>')) {
            (Some(v), _) => (true, v),
            (None, Some(v)) => (false, v),
            _ => return Err(FailOnError::Syntax(s.to_owned())),
        };
        let limit = parse_fraction(value).ok_or_else(|| FailOnError::Share(value.trim().to_owned()))?;
        Ok(FailOn::Share { limit, inclusive })
    }
}

/// `20%` → 0.2, `0.2` → 0.2; `None` for anything else or outside 0..=1.
pub fn parse_fraction(s: &str) -> Option<f64> {
    let s = s.trim();
    let value = match s.strip_suffix('%') {
        Some(pct) => pct.trim().parse::<f64>().ok()? / 100.0,
        None => s.parse::<f64>().ok()?,
    };
    (value.is_finite() && (0.0..=1.0).contains(&value)).then_some(value)
}

impl fmt::Display for FailOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailOn::Share { limit, inclusive } => {
                write!(f, "share{}{}%", if *inclusive { ">=" } else { ">" }, pct(*limit))
            }
            FailOn::Kinds(kinds) => {
                write!(f, "kind={}", kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(","))
            }
        }
    }
}

impl FailOn {
    pub fn met_by(&self, finding: &Finding) -> bool {
        match self {
            FailOn::Share { limit, inclusive: true } => finding.share >= *limit,
            FailOn::Share { limit, inclusive: false } => finding.share > *limit,
            FailOn::Kinds(kinds) => kinds.contains(&finding.kind),
        }
    }
}

/// The findings that meet any of the conditions, each with the first condition it meets.
pub fn failing<'a, 'c>(conditions: &'c [FailOn], findings: &'a [Finding]) -> Vec<(&'a Finding, &'c FailOn)> {
    findings.iter().filter_map(|f| conditions.iter().find(|c| c.met_by(f)).map(|c| (f, c))).collect()
}

/// A percentage as people write it: `20`, `12.5`, `0.3`.
fn pct(fraction: f64) -> String {
    let p = fraction * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0}")
    } else {
        format!("{p:.1}")
    }
}

/// What the gate of a comparison decided, and the one line saying why.
#[derive(Clone, Debug, PartialEq)]
pub struct SlowdownVerdict {
    /// B is slower than A by more than the limit, with confidence.
    pub fails: bool,
    pub sentence: String,
}

/// Whether B is slower than A by more than `limit` (a fraction: 0.05 for 5%) by `metric`,
/// whose `speedup` is above 1 when B is faster. The gate fails only when the comparison's own
/// test says B differs (Welch's p below the threshold, and the 95% interval excluding no
/// change) and the whole 95% interval of the slowdown lies above the limit: a slowdown whose
/// interval reaches below the limit may be within it, and is not failed.
pub fn slower_beyond(metric: &Metric, limit: f64) -> SlowdownVerdict {
    let slowdown = |speedup: f64| 1.0 / speedup - 1.0;
    let signed = |x: f64| format!("{}{:.1}%", if x >= 0.0 { "+" } else { "" }, x * 100.0);
    let limit_text = format!("{}%", pct(limit));
    let (Some(test), Some([lo, hi])) = (&metric.test, metric.ci95) else {
        return SlowdownVerdict {
            fails: false,
            sentence: format!(
                "not judged: too few windows to test ({} and {}; run each for at least a few seconds), so not slower with confidence",
                metric.n_a, metric.n_b
            ),
        };
    };
    let change = slowdown(metric.speedup);
    // The slowdown's interval, from the speedup's (a higher speedup is a smaller slowdown).
    let (low, high) = (slowdown(hi), slowdown(lo));
    let interval = format!("(95% CI {}..{}, {})", signed(low), signed(high), fmt_p(test.p_value));
    let sentence = if metric.significant && change > 0.0 && low > limit {
        format!("B is slower: {} {interval}, above the {limit_text} limit", signed(change))
    } else if metric.significant && change > 0.0 {
        format!("B is slower by {} {interval}, but not beyond the {limit_text} limit with confidence", signed(change))
    } else if metric.significant {
        format!("B is faster: {} {interval}", signed(change))
    } else {
        format!("not slower with confidence: {} {interval}", signed(change))
    };
    SlowdownVerdict { fails: metric.significant && change > 0.0 && low > limit, sentence }
}

/// Two whole runs (a batch program's) are judged by their wall time: with repeated runs, by
/// their test and interval as [`slower_beyond`] judges any metric; with one run each, by the
/// ratio of the two run times, which must exceed both the limit and what one run can differ by
/// on its own ([`RunComparison::one_run_noise`]), and the sentence says one run is weak
/// evidence. A run that took 3x longer always fails.
pub fn runs_slower_beyond(runs: &RunComparison, limit: f64) -> SlowdownVerdict {
    if let Some(wall) = &runs.wall {
        let v = slower_beyond(wall, limit);
        return SlowdownVerdict {
            fails: v.fails,
            sentence: format!("the run's wall time, {} runs each: {}", runs.runs_each, v.sentence),
        };
    }
    let slowdown = 1.0 / runs.wall_speedup - 1.0;
    let fails = slowdown > limit && slowdown > runs.one_run_noise;
    let change = format!("{}{:.1}%", if slowdown >= 0.0 { "+" } else { "" }, slowdown * 100.0);
    let (a, b) = runs.wall_s;
    let sentence = if fails {
        format!("B's run is slower: {change} ({a:.3} s to {b:.3} s), above the {}% limit", pct(limit))
    } else if slowdown > limit {
        format!(
            "B's run is slower by {change} ({a:.3} s to {b:.3} s), but one run each cannot tell that from noise (±{:.0}%)",
            runs.one_run_noise * 100.0
        )
    } else {
        format!("not slower beyond the {}% limit: {change} ({a:.3} s to {b:.3} s)", pct(limit))
    };
    SlowdownVerdict {
        fails,
        sentence: format!(
            "{sentence}; one run each is weak evidence: `onefix compare --runs 10 -- A ::: B` times several"
        ),
    }
}

/// Recordings without a load are judged line by line, by each line's cost per window in both
/// runs: any line slower beyond the limit fails. A line in one run only is not judged (code
/// that moved or was renamed reads as one line gone and another new).
pub fn lines_slower_beyond(lines: &LineComparison, limit: f64) -> SlowdownVerdict {
    let judged: Vec<(&crate::compare::LineChange, SlowdownVerdict)> = lines
        .lines
        .iter()
        .filter(|l| l.at_a.is_some() && l.at_b.is_some())
        .map(|l| (l, slower_beyond(&l.cost, limit)))
        .collect();
    let failing: Vec<_> = judged.iter().filter(|(_, v)| v.fails).collect();
    let at = |l: &crate::compare::LineChange| l.at_b.clone().or_else(|| l.at_a.clone()).unwrap_or_default();
    if let Some((line, v)) = failing.first() {
        let more = match failing.len() {
            1 => String::new(),
            n => format!(" (and {} more line{})", n - 1, if n > 2 { "s" } else { "" }),
        };
        return SlowdownVerdict {
            fails: true,
            sentence: format!(
                "the line at {} ({}), in {}: {}{more}",
                at(line),
                line.line.trim(),
                lines.unit,
                v.sentence
            ),
        };
    }
    // Else the line that came closest: the one B made costliest.
    let closest = judged.iter().min_by(|x, y| x.0.cost.speedup.total_cmp(&y.0.cost.speedup));
    match closest {
        Some((line, v)) => SlowdownVerdict {
            fails: false,
            sentence: format!(
                "no line is slower beyond the limit with confidence ({} compared); the closest, at {}: {}",
                judged.len(),
                at(line),
                v.sentence
            ),
        },
        None => SlowdownVerdict {
            fails: false,
            sentence: "not judged: no line ran in both recordings often enough to compare".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onefix_model::stats::metric;

    fn one_run_each(a: f64, b: f64) -> RunComparison {
        use crate::compare::RunTime;
        RunComparison::of_one_run_each(RunTime { wall_s: a, cpu_s: a }, RunTime { wall_s: b, cpu_s: b }, 0.015, vec![])
    }

    #[test]
    fn one_run_each_fails_beyond_both_the_limit_and_what_one_run_can_differ_by() {
        let slower = runs_slower_beyond(&one_run_each(0.3, 0.9), 0.05);
        assert!(slower.fails && slower.sentence.contains("weak evidence"), "{}", slower.sentence);
        // 7% slower: beyond 5%, but within one run's own noise.
        let near = runs_slower_beyond(&one_run_each(2.0, 2.14), 0.05);
        assert!(!near.fails && near.sentence.contains("cannot tell"), "{}", near.sentence);
        assert!(!runs_slower_beyond(&one_run_each(0.9, 0.3), 0.05).fails);
        // A limit above the noise is the limit: 30% slower fails a 20% gate.
        assert!(runs_slower_beyond(&one_run_each(1.0, 1.3), 0.2).fails);
    }

    #[test]
    fn repeated_runs_are_gated_by_their_interval() {
        use crate::compare::RunTime;
        let times = |base: f64| -> Vec<RunTime> {
            (0..8).map(|i| RunTime { wall_s: base * (1.0 + 0.01 * (i % 3) as f64), cpu_s: base }).collect()
        };
        let c = RunComparison::of_repeated(&times(0.1), &times(0.3), vec![]);
        assert_eq!(c.direction, "slower");
        assert!(runs_slower_beyond(&c, 0.05).fails);
        let same = RunComparison::of_repeated(&times(0.1), &times(0.1), vec![]);
        assert_eq!(same.direction, "unclear");
        assert!(!runs_slower_beyond(&same, 0.05).fails);
    }

    #[test]
    fn conditions_parse_into_typed_values_and_nonsense_is_one_sentence() {
        assert_eq!("share>20%".parse(), Ok(FailOn::Share { limit: 0.2, inclusive: false }));
        assert_eq!(" share >= 0.35 ".parse(), Ok(FailOn::Share { limit: 0.35, inclusive: true }));
        assert_eq!(
            "kind=n-plus-one-query, repeated-setup".parse(),
            Ok(FailOn::Kinds(vec![Kind::NPlusOneQuery, Kind::RepeatedSetup]))
        );
        assert_eq!("share>20%".parse::<FailOn>().unwrap().to_string(), "share>20%");
        for bad in ["share<20%", "share>120%", "share>lots", "kind=", "size>2", ""] {
            let err = bad.parse::<FailOn>().unwrap_err().to_string();
            assert!(!err.contains('\n') && err.contains("give"), "{bad}: {err}");
        }
        let err = "kind=n-plus-one".parse::<FailOn>().unwrap_err().to_string();
        assert!(err.contains("`n-plus-one` is not a kind") && err.contains("n-plus-one-query"), "{err}");
    }

    #[test]
    fn a_slowdown_fails_the_gate_only_when_its_whole_interval_is_above_the_limit() {
        let ms = |base: f64, n: usize| (0..n).map(|i| base + (i % 5) as f64 * 0.05).collect::<Vec<f64>>();
        // Latency: speedup is A's mean over B's.
        let twice_as_slow = metric("latency_ms", &ms(10.0, 12), &ms(20.0, 12), |a, b| a / b);
        let v = slower_beyond(&twice_as_slow, 0.05);
        assert!(v.fails && v.sentence.starts_with("B is slower: +"), "{v:?}");
        assert!(v.sentence.contains("above the 5% limit"), "{v:?}");
        // 3% slower, clearly, is within a 5% limit.
        let slightly = metric("latency_ms", &ms(10.0, 12), &ms(10.3, 12), |a, b| a / b);
        let v = slower_beyond(&slightly, 0.05);
        assert!(!v.fails && v.sentence.contains("not beyond the 5% limit"), "{v:?}");
        let same = metric("latency_ms", &ms(10.0, 12), &ms(10.0, 12), |a, b| a / b);
        let v = slower_beyond(&same, 0.05);
        assert!(!v.fails && v.sentence.starts_with("not slower with confidence"), "{v:?}");
        let faster = metric("latency_ms", &ms(20.0, 12), &ms(10.0, 12), |a, b| a / b);
        assert!(!slower_beyond(&faster, 0.05).fails);
        let short = metric("latency_ms", &[10.0], &[30.0], |a, b| a / b);
        let v = slower_beyond(&short, 0.05);
        assert!(!v.fails && v.sentence.starts_with("not judged"), "{v:?}");
    }

    #[test]
    fn recordings_without_a_load_fail_on_a_line_slower_beyond_the_limit_in_both_runs() {
        use crate::compare::LineChange;
        let ms = |base: f64| (0..8).map(|i| base + (i % 4) as f64 * 0.5).collect::<Vec<f64>>();
        let line = |name: &str, a: f64, b: f64, in_a: bool, in_b: bool| LineChange {
            line: name.to_owned(),
            at_a: in_a.then(|| format!("{name}.py:1")),
            at_b: in_b.then(|| format!("{name}.py:1")),
            cost: metric(name, &ms(a), &ms(b), |a, b| a / b),
            change: String::new(),
        };
        let compared = |lines: Vec<LineChange>| LineComparison {
            unit: "ms of the line per second".into(),
            window_s: 1.0,
            lines,
            not_compared: None,
        };
        // One line twice as costly in B: it fails, and is named.
        let v = lines_slower_beyond(
            &compared(vec![line("steady", 100.0, 100.0, true, true), line("worse", 50.0, 100.0, true, true)]),
            0.05,
        );
        assert!(v.fails && v.sentence.starts_with("the line at worse.py:1"), "{v:?}");
        assert!(v.sentence.contains("above the 5% limit"), "{v:?}");
        // A line new in B is not judged: code that moved reads as gone and new.
        let v = lines_slower_beyond(
            &compared(vec![line("steady", 100.0, 100.0, true, true), line("new", 0.0, 300.0, false, true)]),
            0.05,
        );
        assert!(
            !v.fails && v.sentence.starts_with("no line is slower beyond the limit with confidence (1 compared)"),
            "{v:?}"
        );
        let v = lines_slower_beyond(&compared(Vec::new()), 0.05);
        assert!(!v.fails && v.sentence.starts_with("not judged"), "{v:?}");
    }
}

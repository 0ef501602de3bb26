//! The comparison of two recordings, as text: each line's cost in A and B and how it changed
//! (time), or the bytes each line keeps live at the heap's peak (memory).

use std::fmt::Write as _;

use onefix_diagnose::compare::{HeapComparison, LineComparison, RunComparison};

/// The lines of two time recordings: cost in A and B, the change, and where the line is.
pub fn render_lines(c: &LineComparison, name_a: &str, name_b: &str) -> String {
    let mut s = String::new();
    if let Some(why) = &c.not_compared {
        let _ = writeln!(s, "the lines were not compared per window: {why}");
        return s;
    }
    let _ = writeln!(s, "the lines ({}; mean over {:.1} s windows, Welch's t-test):", c.unit, c.window_s);
    let _ = writeln!(s, "  {:>10} {:>10}  {:<24} line", "A", "B", "change");
    let _ = writeln!(s, "  {:>10} {:>10}  {:<24} ({name_a} → {name_b})", "", "", "");
    for l in &c.lines {
        let change = match l.change.as_str() {
            "down" | "up" => {
                let factor = if l.change == "down" { l.cost.speedup } else { 1.0 / l.cost.speedup };
                let p = l.cost.test.as_ref().map(|t| {
                    if t.p_value < 0.001 {
                        "p<0.001".to_owned()
                    } else {
                        format!("p={:.3}", t.p_value)
                    }
                });
                let factor = if factor.is_finite() { format!("{factor:.1}x") } else { "to 0".to_owned() };
                format!("{} {factor} {}", l.change, p.unwrap_or_default())
            }
            other => other.to_owned(),
        };
        let place = match (&l.at_a, &l.at_b) {
            (Some(x), Some(y)) if x == y => x.clone(),
            (Some(x), Some(y)) => format!("{x} → {y}"),
            (Some(x), None) | (None, Some(x)) => x.clone(),
            (None, None) => String::new(),
        };
        let _ = writeln!(
            s,
            "  {:>10} {:>10}  {:<24} {place}  {}",
            fmt_ms(l.cost.mean_a),
            fmt_ms(l.cost.mean_b),
            change,
            l.line
        );
    }
    s
}

/// The comparison's verdict in sentences, most telling first: the whole runs' time (a batch
/// program), the load's verdict (a server), then what the lines did. The HTML comparison leads
/// with them.
pub fn verdicts(runs: Option<&RunComparison>, load: Option<String>, lines: &LineComparison) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(r) = runs {
        let first = render_runs(r, "A", "B");
        out.push(first.lines().next().unwrap_or_default().replacen("the runs", "The runs", 1));
        if r.runs_each == 1 {
            out.push(format!(
                "One run each: a difference under {:.0}% could be one run's own noise; time several with `onefix compare --runs 10 -- A ::: B`.",
                r.one_run_noise * 100.0
            ));
        }
    }
    if let Some(load) = load {
        out.push(format!("The load: {load}."));
    }
    if let Some(why) = &lines.not_compared {
        out.push(format!("The lines were not compared per window: {why}."));
        return out;
    }
    let count = |what: &str| lines.lines.iter().filter(|l| l.change == what).count();
    let (down, up, gone, new) = (count("down"), count("up"), count("gone"), count("new"));
    out.push(format!(
        "The lines (per {:.1} s window, Welch's t-test): {down} cost less in B, {up} more, {gone} gone, {new} new, of {} compared.",
        lines.window_s,
        lines.lines.len()
    ));
    let biggest = lines
        .lines
        .iter()
        .filter(|l| matches!(l.change.as_str(), "down" | "up" | "gone" | "new"))
        .max_by(|a, b| (a.cost.mean_a - a.cost.mean_b).abs().total_cmp(&(b.cost.mean_a - b.cost.mean_b).abs()));
    if let Some(l) = biggest {
        let at = l.at_a.as_deref().or(l.at_b.as_deref()).unwrap_or("");
        out.push(format!(
            "The largest change: {at} {} went {} ({} to {} {}).",
            l.line,
            l.change,
            fmt_ms(l.cost.mean_a),
            fmt_ms(l.cost.mean_b),
            lines.unit
        ));
    }
    out
}

/// Two whole runs of a batch program: which took less time, and where each line's time went.
pub fn render_runs(r: &RunComparison, name_a: &str, name_b: &str) -> String {
    let mut s = String::new();
    let cpu = if !r.cpu_speedup.is_finite() {
        "B took no CPU time at all".to_owned()
    } else if r.cpu_speedup >= 1.0 {
        format!("B took {:.2}x less CPU time", r.cpu_speedup)
    } else {
        format!("B took {:.2}x more CPU time", 1.0 / r.cpu_speedup)
    };
    let each =
        if r.runs_each == 1 { "each went to its end".to_owned() } else { format!("{} timed runs each", r.runs_each) };
    let _ = writeln!(s, "the runs ({each}): {}; {cpu}", r.verdict);
    match &r.spread {
        Some(sp) => {
            let _ = writeln!(
                s,
                "     {:>10} {:>10} {:>10} {:>10} {:>10}  {:>9}",
                "mean (s)", "± sd", "median", "min", "max", "outliers"
            );
            let row = |s: &mut String, side: &str, i: usize, name: &str| {
                let pick = |t: (f64, f64)| if i == 0 { t.0 } else { t.1 };
                let out = if i == 0 { sp.outliers.0 } else { sp.outliers.1 };
                let _ = writeln!(
                    s,
                    "  {side}  {:>10.4} {:>10.4} {:>10.4} {:>10.4} {:>10.4}  {:>9}  ({name})",
                    pick(r.wall_s),
                    pick(sp.stddev_s),
                    pick(sp.median_s),
                    pick(sp.min_s),
                    pick(sp.max_s),
                    out
                );
            };
            row(&mut s, "A", 0, name_a);
            row(&mut s, "B", 1, name_b);
            if sp.outliers.0 + sp.outliers.1 > 0 {
                let _ = writeln!(
                    s,
                    "  outliers: runs more than 10 robust standard deviations from their median (another process, a cold cache); the interval includes them"
                );
            }
        }
        None => {
            let _ = writeln!(s, "  A  {:>9.3} s wall  {:>9.3} s on a CPU  ({name_a})", r.wall_s.0, r.cpu_s.0);
            let _ = writeln!(s, "  B  {:>9.3} s wall  {:>9.3} s on a CPU  ({name_b})", r.wall_s.1, r.cpu_s.1);
        }
    }
    if r.runs_each == 1 {
        let _ = writeln!(
            s,
            "  one run each: a difference under {:.0}% could be one run's own noise; `onefix compare --runs 10 -- A ::: B` times interleaved runs of each",
            r.one_run_noise * 100.0
        );
    }
    if r.too_short_for_windows {
        let _ = writeln!(
            s,
            "  a run is too short to judge its lines per window: judge by these run times and the lines' time per run"
        );
    }
    if !r.lines.is_empty() {
        let _ = writeln!(s, "  the lines' time per run:\n  {:>9} {:>9}  line", "A (s)", "B (s)");
        for l in &r.lines {
            let _ = writeln!(
                s,
                "  {:>9.3} {:>9.3}  {}  {}",
                l.seconds_a,
                l.seconds_b,
                l.at.as_deref().unwrap_or(""),
                l.line
            );
        }
    }
    s
}

fn fmt_ms(ms: f64) -> String {
    if !ms.is_finite() {
        "-".into()
    } else if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 1.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.3}")
    }
}

/// Two memory recordings: peak RSS, the heap at its peak, and each line's bytes live then.
pub fn render_heaps(c: &HeapComparison, name_a: &str, name_b: &str) -> String {
    let mut out = String::new();
    let mb = |b: Option<u64>| b.map_or("-".to_owned(), onefix_model::fmt::bytes);
    let ratio = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (Some(x), Some(y)) if y > 0 => format!("{:.1}x less in B", x as f64 / y as f64),
        _ => String::new(),
    };
    let _ = writeln!(out, "memory:            A: {name_a:<24} B: {name_b}");
    let _ = writeln!(
        out,
        "  peak RSS        {:<27} {:<14} {}",
        mb(c.peak_rss_bytes[0]),
        mb(c.peak_rss_bytes[1]),
        ratio(c.peak_rss_bytes[0], c.peak_rss_bytes[1])
    );
    let _ = writeln!(
        out,
        "  heap at peak    {:<27} {:<14} {}",
        mb(Some(c.retained_bytes[0])),
        mb(Some(c.retained_bytes[1])),
        ratio(Some(c.retained_bytes[0]), Some(c.retained_bytes[1]))
    );
    let _ = writeln!(
        out,
        "\nthe lines (MB live at the heap's peak, estimated from sampled allocations; one snapshot per run):"
    );
    for l in &c.lines {
        let place = match (&l.at_a, &l.at_b) {
            (Some(x), Some(y)) if x != y => format!("{x} → {y}"),
            (Some(x), _) | (None, Some(x)) => x.clone(),
            (None, None) => String::new(),
        };
        let _ = writeln!(
            out,
            "  {:>9} {:>9}  {place}  {}",
            format!("{:.1}", l.retained_bytes[0] as f64 / 1e6),
            format!("{:.1}", l.retained_bytes[1] as f64 / 1e6),
            l.line
        );
    }
    out
}

//! Before and after: two load results side by side, and whether B is faster, with a
//! significance test and a confidence interval.
//!
//! The samples are the runs' windows (a second each by default): the mean latency of each
//! window and its throughput. Welch's t-test compares A's and B's windows (no equal-variance
//! assumption) on a log scale, i.e. their geometric means: a speedup is a ratio, and latency
//! windows are skewed, so one stalled second in A's run (a 2 s window among 10 ms ones) must
//! not drown a 70x difference in its variance, as it does on the raw scale; the 95% interval of the speedup (mean of A / mean of B for
//! latency, B / A for throughput) is a percentile bootstrap over the windows, seeded, so the same
//! inputs give the same interval. Windows of one run are not fully independent (a slow second
//! tends to follow a slow second), so treat p-values near the threshold with care; repeated runs
//! are the stronger evidence.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

pub use onefix_model::stats::{bootstrap_ci, metric, t_two_sided_p, welch, welch_of_logs, Metric, WelchTest, ALPHA};

use crate::stats::{LoadResult, Window};
use crate::summary::{fmt_ms, fmt_rate};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub latency: Metric,
    pub throughput: Metric,
    /// Which metric the verdict rests on: latency when both runs kept to an open-loop
    /// schedule (their throughput is the schedule), throughput otherwise.
    pub primary: String,
    pub verdict: String,
}

/// The path and query of a URL template: what was asked, wherever the server listened.
fn request_part(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.find(['/', '?']).map_or("/", |i| &rest[i..])
}

/// The windows that count: whole ones (a trailing partial window is noise in a rate).
fn full_windows(r: &LoadResult) -> Vec<&Window> {
    let longest = r.windows.iter().map(|w| w.duration_s).fold(0.0, f64::max);
    r.windows.iter().filter(|w| w.duration_s >= 0.5 * longest && w.duration_s > 0.0).collect()
}

fn kept_schedule(r: &LoadResult) -> bool {
    match r.target_rps {
        Some(rate) => r.achieved_rps >= 0.9 * rate,
        None => false,
    }
}

pub fn compare(a: &LoadResult, b: &LoadResult) -> Comparison {
    let (wa, wb) = (full_windows(a), full_windows(b));
    let lat = |w: &[&Window]| -> Vec<f64> { w.iter().filter(|w| w.completed > 0).map(|w| w.latency_ms.mean).collect() };
    let rps = |w: &[&Window]| -> Vec<f64> { w.iter().map(|w| w.rps).collect() };
    let latency = metric("latency_ms", &lat(&wa), &lat(&wb), |ma, mb| ma / mb);
    let throughput = metric("throughput_rps", &rps(&wa), &rps(&wb), |ma, mb| mb / ma);
    let primary = if kept_schedule(a) && kept_schedule(b) { "latency" } else { "throughput" };
    let verdict = if primary == "latency" { latency.verdict.clone() } else { throughput.verdict.clone() };
    Comparison { latency, throughput, primary: primary.to_string(), verdict }
}

/// The comparison as the terminal shows it.
pub fn render(c: &Comparison, a: &LoadResult, b: &LoadResult, name_a: &str, name_b: &str) -> String {
    let mut s = String::new();
    let col = |x: String| format!("{x:<24}");
    let mode = |r: &LoadResult| match r.target_rps {
        Some(rate) => format!("open loop, {}", fmt_rate(rate)),
        None => "closed loop".to_string(),
    };
    let mut row = |label: &str, fa: String, fb: String| {
        let _ = writeln!(s, "  {label:<16}{}{}", col(fa), fb);
    };
    row("", format!("A: {name_a}"), format!("B: {name_b}"));
    row("load", mode(a), mode(b));
    row("connections", a.connections.to_string(), b.connections.to_string());
    let protocol = |r: &LoadResult| {
        let streams = if r.streams > 1 { format!(", {} streams", r.streams) } else { String::new() };
        format!("{}{}{streams}", r.protocol, if r.tls.is_some() { " over TLS" } else { "" })
    };
    if a.protocol != b.protocol || a.tls.is_some() || b.tls.is_some() || a.streams != b.streams {
        row("protocol", protocol(a), protocol(b));
    }
    row("completed", a.completed.to_string(), b.completed.to_string());
    row("errors", a.errors.total.to_string(), b.errors.total.to_string());
    row("throughput", fmt_rate(a.achieved_rps), fmt_rate(b.achieved_rps));
    row("latency p50", fmt_ms(a.latency_ms.p50), fmt_ms(b.latency_ms.p50));
    row("latency p90", fmt_ms(a.latency_ms.p90), fmt_ms(b.latency_ms.p90));
    row("latency p99", fmt_ms(a.latency_ms.p99), fmt_ms(b.latency_ms.p99));
    row("latency p99.9", fmt_ms(a.latency_ms.p999), fmt_ms(b.latency_ms.p999));
    row("latency max", fmt_ms(a.latency_ms.max), fmt_ms(b.latency_ms.max));
    row(
        "mean ± stddev",
        format!("{} ± {}", fmt_ms(a.latency_ms.mean), fmt_ms(a.latency_ms.stddev)),
        format!("{} ± {}", fmt_ms(b.latency_ms.mean), fmt_ms(b.latency_ms.stddev)),
    );
    row("windows", c.latency.n_a.to_string(), c.latency.n_b.to_string());
    let _ = writeln!(s);
    let _ = writeln!(s, "  latency     {}", c.latency.verdict);
    if a.target_rps.is_some() && b.target_rps.is_some() && c.primary == "latency" {
        // An open loop sends at the asked rate whatever the server does: throughput then
        // measures the schedule, not the server.
        let _ = writeln!(
            s,
            "  throughput  set by the open-loop schedule, not by the server: both runs kept to the rate asked ({})",
            c.throughput.verdict
        );
    } else {
        let _ = writeln!(s, "  throughput  {}", c.throughput.verdict);
    }
    let _ = writeln!(
        s,
        "  (per-window means; Welch's t-test on their logarithms, 95% bootstrap interval; speedup above 1 means B is faster)"
    );
    if a.protocol != b.protocol || a.tls.is_some() != b.tls.is_some() {
        let _ = writeln!(s, "  note: A and B were sent in different protocols; the comparison may not be fair");
    }
    if a.target_rps.is_some() != b.target_rps.is_some() || a.target_rps != b.target_rps {
        let _ = writeln!(s, "  note: A and B ran under different loads; the comparison may not be fair");
    }
    if request_part(&a.url) != request_part(&b.url) || a.method != b.method {
        let _ = writeln!(s, "  note: A and B sent different requests");
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "verdict ({}): {}", c.primary, c.verdict);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Errors, LatencySummary, WindowLatency};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// A synthetic result: `n` one-second windows whose mean latency is `lat` ms with seeded
    /// noise of ±`noise` ms, at `rps` requests per second.
    fn synthetic(lat: f64, noise: f64, rps: f64, n: usize, seed: u64) -> LoadResult {
        let mut rng = SmallRng::seed_from_u64(seed);
        let windows: Vec<Window> = (0..n)
            .map(|i| {
                let m = lat + noise * (rng.random::<f64>() * 2.0 - 1.0);
                Window {
                    start_s: i as f64,
                    duration_s: 1.0,
                    sent: rps as u64,
                    completed: rps as u64,
                    errors: 0,
                    rps,
                    latency_ms: WindowLatency {
                        mean: m,
                        stddev: m / 4.0,
                        p50: m,
                        p90: m * 1.5,
                        p99: m * 2.0,
                        max: m * 3.0,
                    },
                }
            })
            .collect();
        let mean = windows.iter().map(|w| w.latency_ms.mean).sum::<f64>() / n as f64;
        LoadResult {
            format: crate::stats::FORMAT.into(),
            url: "http://127.0.0.1:1/".into(),
            method: "GET".into(),
            mode: "open".into(),
            target_rps: Some(rps),
            duration_s: Some(n as f64),
            max_requests: None,
            connections: 8,
            threads: 1,
            keep_alive: true,
            seed: 1,
            timeout_s: 10.0,
            elapsed_s: n as f64,
            scheduled: rps as u64 * n as u64,
            sent: rps as u64 * n as u64,
            completed: rps as u64 * n as u64,
            unsent: 0,
            unfinished: 0,
            errors: Errors::default(),
            status_codes: Default::default(),
            achieved_rps: rps,
            bytes_sent: 0,
            bytes_received: 0,
            connections_opened: 0,
            latency_ms: LatencySummary {
                p50: mean,
                p90: mean * 1.5,
                p99: mean * 2.0,
                p999: mean * 2.5,
                min: 0.1,
                max: mean * 3.0,
                mean,
                stddev: mean / 4.0,
            },
            service_time_ms: LatencySummary::default(),
            windows,
            protocol: "HTTP/1.1".into(),
            streams: 1,
            tls: None,
            latency_histogram: Vec::new(),
            unloaded: None,
        }
    }

    #[test]
    fn identical_runs_are_not_significantly_different() {
        let a = synthetic(10.0, 2.0, 1000.0, 30, 1);
        let c = compare(&a, &a);
        assert_eq!(c.primary, "latency");
        assert!(!c.latency.significant);
        assert!((c.latency.speedup - 1.0).abs() < 1e-12);
        assert!(c.latency.test.as_ref().unwrap().p_value > 0.99);
        assert!(c.verdict.starts_with("no significant difference: 1.00x"), "{}", c.verdict);
        // Two runs of the same server: different noise, same distribution.
        let b = synthetic(10.0, 2.0, 1000.0, 30, 2);
        let c = compare(&a, &b);
        assert!(!c.latency.significant, "{:?}", c.latency);
        let [lo, hi] = c.latency.ci95.unwrap();
        assert!(lo < 1.0 && hi > 1.0);
    }

    #[test]
    fn twice_as_fast_is_significant_with_an_interval_around_two() {
        let a = synthetic(20.0, 3.0, 1000.0, 30, 3);
        let b = synthetic(10.0, 1.5, 1000.0, 30, 4);
        let c = compare(&a, &b);
        assert!(c.latency.significant);
        let [lo, hi] = c.latency.ci95.unwrap();
        assert!(lo < 2.0 && hi > 2.0, "[{lo}, {hi}]");
        assert!(lo > 1.7 && hi < 2.3, "[{lo}, {hi}]");
        assert!(c.latency.test.as_ref().unwrap().p_value < 0.001);
        assert!(c.verdict.starts_with("B is faster: "), "{}", c.verdict);
        assert!(c.verdict.ends_with("p < 0.001"), "{}", c.verdict);
        // The other way round, B is slower.
        let c = compare(&b, &a);
        assert!(c.verdict.starts_with("B is slower: 0.5"), "{}", c.verdict);
    }

    #[test]
    fn one_stalled_window_does_not_hide_a_large_speedup() {
        // The slow run's latency has a tail: one window stalled for 2 s among 10 ms ones. On
        // the raw scale its variance swamps a difference of more than 60x (p about 0.4).
        let mut a = synthetic(10.0, 1.0, 100.0, 5, 8);
        a.windows[3].latency_ms.mean = 2000.0;
        let b = synthetic(0.15, 0.01, 100.0, 5, 9);
        let raw: Vec<f64> = a.windows.iter().map(|w| w.latency_ms.mean).collect();
        let fast: Vec<f64> = b.windows.iter().map(|w| w.latency_ms.mean).collect();
        assert!(welch(&raw, &fast).unwrap().p_value > 0.05, "the raw-scale test misses it");
        let c = compare(&a, &b);
        assert!(c.latency.significant, "{:?}", c.latency);
        assert!(c.verdict.starts_with("B is faster: "), "{}", c.verdict);
        // A window that completed nothing has no logarithm: the raw test is used.
        assert!(welch_of_logs(&[0.0, 1.0, 2.0], &[1.0, 2.0, 3.0]).is_some());
    }

    #[test]
    fn closed_loop_runs_are_judged_on_throughput() {
        let mut a = synthetic(10.0, 1.0, 1000.0, 10, 5);
        let mut b = synthetic(5.0, 0.5, 2000.0, 10, 6);
        for r in [&mut a, &mut b] {
            r.target_rps = None;
            r.mode = "closed".into();
        }
        // Throughput windows vary a little.
        for (i, w) in b.windows.iter_mut().enumerate() {
            w.rps += (i as f64 - 5.0) * 10.0;
        }
        for (i, w) in a.windows.iter_mut().enumerate() {
            w.rps += (i as f64 - 5.0) * 5.0;
        }
        let c = compare(&a, &b);
        assert_eq!(c.primary, "throughput");
        assert!(c.throughput.significant);
        assert!((c.throughput.speedup - 2.0).abs() < 0.01);
        let text = render(&c, &a, &b, "slow.json", "fixed.json");
        assert!(text.contains("A: slow.json"));
        assert!(text.contains("verdict (throughput): B is faster: 2.00x"), "{text}");
    }

    #[test]
    fn open_loop_runs_lead_with_latency_and_say_the_throughput_is_the_schedule() {
        let a = synthetic(10.0, 1.0, 1000.0, 10, 11);
        let b = synthetic(5.0, 0.5, 1000.0, 10, 12);
        let c = compare(&a, &b);
        assert_eq!(c.primary, "latency");
        let text = render(&c, &a, &b, "slow.json", "fixed.json");
        let latency_at = text.find("  latency     ").unwrap();
        let throughput_at = text.find("  throughput  set by the open-loop schedule").expect(&text);
        assert!(latency_at < throughput_at, "{text}");
        assert!(text.contains("verdict (latency): B is faster"), "{text}");
    }

    #[test]
    fn too_few_windows_say_so() {
        let a = synthetic(10.0, 1.0, 1000.0, 1, 7);
        let b = synthetic(5.0, 1.0, 1000.0, 1, 8);
        let c = compare(&a, &b);
        assert!(!c.latency.significant);
        assert!(c.verdict.starts_with("too few windows"), "{}", c.verdict);
    }

    #[test]
    fn a_short_last_window_is_left_out() {
        let mut a = synthetic(10.0, 1.0, 1000.0, 5, 9);
        a.windows.push(Window { start_s: 5.0, duration_s: 0.01, rps: 100.0, ..a.windows[0].clone() });
        let c = compare(&a, &a);
        assert_eq!(c.throughput.n_a, 5);
    }
}

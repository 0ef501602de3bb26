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

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::stats::{LoadResult, Window};
use crate::summary::{fmt_ms, fmt_rate};

/// Significance threshold of the verdict.
pub const ALPHA: f64 = 0.05;
const BOOTSTRAP_ROUNDS: usize = 4000;

/// Welch's t-test of two samples' means.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WelchTest {
    pub t: f64,
    pub df: f64,
    /// Two-sided.
    pub p_value: f64,
}

/// One compared quantity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// `latency_ms` (mean latency per window) or `throughput_rps` (completed per second).
    pub name: String,
    pub n_a: usize,
    pub n_b: usize,
    pub mean_a: f64,
    pub mean_b: f64,
    pub stddev_a: f64,
    pub stddev_b: f64,
    /// Above 1: B is faster (lower latency, or higher throughput).
    pub speedup: f64,
    /// 95% bootstrap interval of the speedup; absent with fewer than 2 windows a side.
    pub ci95: Option<[f64; 2]>,
    pub test: Option<WelchTest>,
    pub significant: bool,
    /// One plain sentence: "B is faster: 3.2x [2.9, 3.5], p < 0.001".
    pub verdict: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub latency: Metric,
    pub throughput: Metric,
    /// Which metric the verdict rests on: latency when both runs kept to an open-loop
    /// schedule (their throughput is the schedule), throughput otherwise.
    pub primary: String,
    pub verdict: String,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn variance(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7).
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The continued fraction of the incomplete beta function (Lentz's method).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// The regularized incomplete beta function I_x(a, b).
fn inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front = (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

/// Two-sided p-value of Student's t with `df` degrees of freedom.
pub fn t_two_sided_p(t: f64, df: f64) -> f64 {
    if !t.is_finite() {
        return 0.0;
    }
    inc_beta(df / 2.0, 0.5, df / (df + t * t)).clamp(0.0, 1.0)
}

/// Welch's t-test; `None` with fewer than two values a side.
pub fn welch(a: &[f64], b: &[f64]) -> Option<WelchTest> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (va, vb) = (variance(a) / a.len() as f64, variance(b) / b.len() as f64);
    let diff = mean(b) - mean(a);
    let se2 = va + vb;
    if se2 == 0.0 {
        // No spread on either side: the means are equal or the difference is certain.
        let p = if diff == 0.0 { 1.0 } else { 0.0 };
        return Some(WelchTest {
            t: if diff == 0.0 { 0.0 } else { f64::INFINITY.copysign(diff) },
            df: (a.len() + b.len() - 2) as f64,
            p_value: p,
        });
    }
    let t = diff / se2.sqrt();
    let df = se2 * se2 / (va * va / (a.len() - 1) as f64 + vb * vb / (b.len() - 1) as f64).max(f64::MIN_POSITIVE);
    Some(WelchTest { t, df, p_value: t_two_sided_p(t, df) })
}

/// Welch's test on the logarithms of the values (their geometric means), or on the values
/// themselves when one is not positive (a window that completed nothing).
pub fn welch_of_logs(a: &[f64], b: &[f64]) -> Option<WelchTest> {
    if a.iter().chain(b).all(|&x| x > 0.0) {
        let ln = |v: &[f64]| v.iter().map(|x| x.ln()).collect::<Vec<f64>>();
        welch(&ln(a), &ln(b))
    } else {
        welch(a, b)
    }
}

/// Percentile bootstrap interval of `ratio(mean(a), mean(b))`, resampling each side.
pub fn bootstrap_ci(a: &[f64], b: &[f64], ratio: fn(f64, f64) -> f64, seed: u64) -> Option<[f64; 2]> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ratios = Vec::with_capacity(BOOTSTRAP_ROUNDS);
    for _ in 0..BOOTSTRAP_ROUNDS {
        let ma = (0..a.len()).map(|_| a[rng.random_range(0..a.len())]).sum::<f64>() / a.len() as f64;
        let mb = (0..b.len()).map(|_| b[rng.random_range(0..b.len())]).sum::<f64>() / b.len() as f64;
        let r = ratio(ma, mb);
        if r.is_finite() {
            ratios.push(r);
        }
    }
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(|x, y| x.total_cmp(y));
    let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q).round() as usize];
    Some([at(0.025), at(0.975)])
}

fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".to_string()
    } else {
        format!("p = {p:.3}")
    }
}

fn fmt_num(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn fmt_x(x: f64) -> String {
    format!("{}x", fmt_num(x))
}

/// The path and query of a URL template: what was asked, wherever the server listened.
fn request_part(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.find(['/', '?']).map_or("/", |i| &rest[i..])
}

/// Compares two samples of a quantity (e.g. per-window values) by `speedup_of(mean_a, mean_b)`,
/// with Welch's test and a bootstrap interval of that ratio.
pub fn metric(name: &str, a: &[f64], b: &[f64], speedup_of: fn(f64, f64) -> f64) -> Metric {
    let (mean_a, mean_b) = if a.is_empty() || b.is_empty() { (f64::NAN, f64::NAN) } else { (mean(a), mean(b)) };
    let speedup = speedup_of(mean_a, mean_b);
    let test = welch_of_logs(a, b);
    let ci95 = bootstrap_ci(a, b, speedup_of, 0x5eed_0f1f);
    let significant = match (&test, ci95) {
        (Some(t), Some([lo, hi])) => t.p_value < ALPHA && (lo > 1.0 || hi < 1.0),
        _ => false,
    };
    let interval = ci95.map(|[lo, hi]| format!(" [{}, {}]", fmt_num(lo), fmt_num(hi))).unwrap_or_default();
    let verdict = match &test {
        None => format!(
            "too few windows to judge ({} and {}; run each for at least 2 s): {}",
            a.len(),
            b.len(),
            fmt_x(speedup)
        ),
        Some(t) if significant && speedup > 1.0 => {
            format!("B is faster: {}{interval}, {}", fmt_x(speedup), fmt_p(t.p_value))
        }
        Some(t) if significant => format!("B is slower: {}{interval}, {}", fmt_x(speedup), fmt_p(t.p_value)),
        Some(t) => format!("no significant difference: {}{interval}, {}", fmt_x(speedup), fmt_p(t.p_value)),
    };
    Metric {
        name: name.to_string(),
        n_a: a.len(),
        n_b: b.len(),
        mean_a,
        mean_b,
        stddev_a: variance(a).sqrt(),
        stddev_b: variance(b).sqrt(),
        speedup,
        ci95,
        test,
        significant,
        verdict,
    }
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
    let _ = writeln!(s, "  throughput  {}", c.throughput.verdict);
    let _ = writeln!(
        s,
        "  (per-window means; Welch's t-test on their logarithms, 95% bootstrap interval; speedup above 1 means B is faster)"
    );
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

    #[test]
    fn t_distribution_matches_tables() {
        // Two-sided p-values: t = 2.228 at 10 df is the 5% point; t = 1.96 at large df too.
        assert!((t_two_sided_p(2.228, 10.0) - 0.05).abs() < 1e-3);
        assert!((t_two_sided_p(1.96, 1e6) - 0.05).abs() < 1e-3);
        assert!((t_two_sided_p(2.0, 10.0) - 0.07339).abs() < 1e-4);
        assert!((t_two_sided_p(0.0, 5.0) - 1.0).abs() < 1e-12);
        assert!(t_two_sided_p(12.0, 30.0) < 1e-10);
        assert!((t_two_sided_p(-2.0, 10.0) - t_two_sided_p(2.0, 10.0)).abs() < 1e-15);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
    }

    #[test]
    fn welch_matches_a_known_example() {
        // Computed with scipy.stats.ttest_ind(a, b, equal_var=False).
        let a = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4];
        let b = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4];
        let t = welch(&a, &b).unwrap();
        assert!((t.t - 2.46).abs() < 0.01, "{t:?}");
        assert!((t.df - 24.99).abs() < 0.05, "{t:?}");
        assert!((t.p_value - 0.021).abs() < 0.001, "{t:?}");
    }

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

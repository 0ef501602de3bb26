//! Before and after, as statistics: Welch's t-test (on a log scale, as a speedup is a ratio)
//! and a seeded percentile bootstrap of the ratio of two samples' means. Shared by the
//! comparison of two load results and of two recordings' lines.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

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

pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

pub fn variance(v: &[f64]) -> f64 {
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

/// The median of `v` (the mean of the middle two for an even count); NaN when empty.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut sorted = v.to_vec();
    sorted.sort_by(|x, y| x.total_cmp(y));
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// A modified Z-score beyond which a value is an outlier: ten standard deviations, estimated
/// robustly as 1.4826 times the median absolute deviation (hyperfine's rule), so that one slow
/// run on a busy machine is named without the spread of the others hiding it.
pub const OUTLIER_Z: f64 = 1.4826 * 10.0;

/// How many of `v` are outliers by their modified Z-score ([`OUTLIER_Z`]).
pub fn outliers(v: &[f64]) -> usize {
    if v.len() < 3 {
        return 0;
    }
    let m = median(v);
    let deviations: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    let mad = median(&deviations).max(f64::EPSILON);
    v.iter().filter(|x| ((*x - m) / mad).abs() > OUTLIER_Z).count()
}

pub fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".to_string()
    } else {
        format!("p = {p:.3}")
    }
}

pub fn fmt_num(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

pub fn fmt_x(x: f64) -> String {
    format!("{}x", fmt_num(x))
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

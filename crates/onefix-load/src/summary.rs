//! What the terminal shows: a progress line a window, and the summary at the end.

use onefix_model::fmt::bytes;
use std::fmt::Write as _;

use crate::engine::Progress;
use crate::stats::{LatencySummary, LoadResult};

/// Milliseconds with as many digits as they deserve.
pub use onefix_model::fmt::millis as fmt_ms;

pub fn fmt_rate(rps: f64) -> String {
    if rps >= 100.0 {
        format!("{rps:.0}/s")
    } else {
        format!("{rps:.1}/s")
    }
}

/// One line for each finished window (the CLI rewrites it in place on a terminal).
pub fn progress_line(p: &Progress) -> String {
    let w = &p.window;
    format!(
        "{:>5.0}s  sent {}  completed {}  errors {}  {}  p50 {}  p99 {}",
        p.elapsed_s,
        p.sent,
        p.completed,
        p.errors,
        fmt_rate(w.rps),
        fmt_ms(w.latency_ms.p50),
        fmt_ms(w.latency_ms.p99)
    )
}

fn percentiles(l: &LatencySummary) -> String {
    format!(
        "p50 {}   p90 {}   p99 {}   p99.9 {}   max {}",
        fmt_ms(l.p50),
        fmt_ms(l.p90),
        fmt_ms(l.p99),
        fmt_ms(l.p999),
        fmt_ms(l.max)
    )
}

/// The summary printed at the end of a run.
pub fn render(r: &LoadResult) -> String {
    let mut s = String::new();
    let how = match r.target_rps {
        Some(rate) => format!("open loop at {}", fmt_rate(rate)),
        None => "closed loop (as fast as responses come)".to_string(),
    };
    let mut limits = Vec::new();
    if let Some(d) = r.duration_s {
        limits.push(format!("for {d} s"));
    }
    if let Some(n) = r.max_requests {
        limits.push(format!("at most {n} requests"));
    }
    let streams = if r.streams > 1 { format!(" of {} streams", r.streams) } else { String::new() };
    let _ = writeln!(
        s,
        "{} {}: {}, {}, {} connection{}{}{}, {} thread{}, {}{}",
        r.method,
        r.url,
        how,
        limits.join(", "),
        r.connections,
        if r.connections == 1 { "" } else { "s" },
        streams,
        if r.keep_alive { " kept alive" } else { ", a new one per request" },
        r.threads,
        if r.threads == 1 { "" } else { "s" },
        r.protocol,
        if r.tls.is_some() { " over TLS" } else { "" },
    );
    let mut sent = format!("  sent        {}", r.sent);
    if r.mode == "open" {
        let _ = write!(sent, " of {} due", r.scheduled);
        if r.unsent > 0 {
            let _ = write!(sent, "; {} never sent: every connection was busy (add --connections)", r.unsent);
        }
    }
    if r.unfinished > 0 {
        let _ = write!(sent, "; {} cut off by the interruption", r.unfinished);
    }
    let _ = writeln!(s, "{sent}");
    let _ =
        writeln!(s, "  completed   {}   achieved {} over {:.2} s", r.completed, fmt_rate(r.achieved_rps), r.elapsed_s);
    if r.errors.total == 0 {
        let _ = writeln!(s, "  errors      0");
    } else {
        let kinds: Vec<String> = r.errors.kinds().iter().map(|(k, n)| format!("{n} {k}")).collect();
        let _ = writeln!(s, "  errors      {}: {}", r.errors.total, kinds.join(", "));
    }
    if r.completed > 0 {
        let _ = writeln!(s, "  latency     {}", percentiles(&r.latency_ms));
        let _ = writeln!(
            s,
            "              mean {} ± {}{}",
            fmt_ms(r.latency_ms.mean),
            fmt_ms(r.latency_ms.stddev),
            if r.mode == "open" { "   (from each request's due time: coordinated omission corrected)" } else { "" }
        );
        if r.mode == "open" {
            let _ = writeln!(s, "  service     {}   (from the actual send)", percentiles(&r.service_time_ms));
        }
    }
    let _ = writeln!(s, "  transfer    {} sent, {} received", bytes(r.bytes_sent), bytes(r.bytes_received));
    if let Some(tls) = &r.tls {
        let _ = writeln!(s, "{}", handshakes_line(r, tls));
    }
    // A server that closes kept-alive connections makes every request pay a new connection.
    if r.keep_alive && r.connections_opened > r.connections {
        let paid = match &r.tls {
            Some(tls) if tls.handshakes > 0 => format!(
                "new ones and a TLS handshake each ({} on average{})",
                fmt_ms(tls.handshake_ms.mean),
                if r.latency_ms.mean > 0.0 {
                    format!(", {:.0}% of the mean latency", 100.0 * tls.handshake_ms.mean / r.latency_ms.mean)
                } else {
                    String::new()
                }
            ),
            _ => "new ones".to_string(),
        };
        let _ = writeln!(
            s,
            "  connects    {} opened for {} connections: the server closed kept-alive connections, so requests paid for {paid}",
            r.connections_opened, r.connections
        );
    }
    if let Some(rate) = r.target_rps {
        if r.completed > 0 && r.achieved_rps < 0.9 * rate && r.unsent > 0 {
            let _ = writeln!(
                s,
                "  note: the server (or the connections) could not keep up with {}: latencies include the wait",
                fmt_rate(rate)
            );
        }
    }
    s.push_str(&histogram(r));
    s.push_str(&status_table(r));
    s.push_str(&error_table(r));
    s
}

fn handshakes_line(r: &LoadResult, tls: &crate::stats::TlsSummary) -> String {
    if tls.handshakes == 0 {
        return "  handshakes  0".to_string();
    }
    let h = &tls.handshake_ms;
    format!(
        "  handshakes  {} TLS ({} resumed from a session ticket), apart from the requests: mean {}, p50 {}, p99 {}, max {}{}",
        tls.handshakes,
        tls.resumed,
        fmt_ms(h.mean),
        fmt_ms(h.p50),
        fmt_ms(h.p99),
        fmt_ms(h.max),
        if r.completed > 0 && tls.handshakes * 2 > r.completed {
            "; most requests paid for one"
        } else {
            ""
        }
    )
}

/// The widest bar of the histogram, in characters.
const BAR_WIDTH: u64 = 32;

/// The latency histogram as oha draws it: equal-width buckets from the fastest response to the
/// slowest, each labelled by its upper edge, with its count and a bar.
pub fn histogram(r: &LoadResult) -> String {
    let mut s = String::new();
    if r.latency_histogram.is_empty() {
        return s;
    }
    let _ =
        writeln!(s, "\nResponse time histogram (ms{}):", if r.mode == "open" { ", from each due time" } else { "" });
    let most = r.latency_histogram.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    let labels: Vec<String> = r.latency_histogram.iter().map(|b| format!("{:.3}", b.to_ms)).collect();
    let counts: Vec<String> = r.latency_histogram.iter().map(|b| format!("[{}]", b.count)).collect();
    let lw = labels.iter().map(String::len).max().unwrap_or(0);
    let cw = counts.iter().map(String::len).max().unwrap_or(0);
    for ((b, label), count) in r.latency_histogram.iter().zip(&labels).zip(&counts) {
        let bar = "■".repeat((b.count * BAR_WIDTH / most) as usize);
        let _ = writeln!(s, "  {label:>lw$} {count:<cw$} |{bar}");
    }
    s
}

/// Every response by status code.
pub fn status_table(r: &LoadResult) -> String {
    let mut s = String::new();
    if r.status_codes.is_empty() {
        return s;
    }
    let _ = writeln!(s, "\nStatus code distribution:");
    let mut codes: Vec<(&String, &u64)> = r.status_codes.iter().collect();
    codes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (code, n) in codes {
        let _ = writeln!(s, "  [{code}] {n} response{}", if *n == 1 { "" } else { "s" });
    }
    s
}

/// Every failed request by what went wrong.
pub fn error_table(r: &LoadResult) -> String {
    let mut s = String::new();
    let mut kinds = r.errors.kinds();
    if kinds.is_empty() {
        return s;
    }
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    let _ = writeln!(s, "\nError distribution:");
    for (kind, n) in kinds {
        let _ = writeln!(s, "  [{n}] {kind}");
    }
    s
}

//! What the terminal shows: a progress line a window, and the summary at the end.

use onefix_model::fmt::bytes;
use std::fmt::Write as _;

use crate::engine::Progress;
use crate::stats::{LatencySummary, LoadResult};

/// Milliseconds with as many digits as they deserve.
pub fn fmt_ms(ms: f64) -> String {
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.3} ms")
    }
}

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
    let _ = writeln!(
        s,
        "{} {}: {}, {}, {} connection{}{}, {} thread{}",
        r.method,
        r.url,
        how,
        limits.join(", "),
        r.connections,
        if r.connections == 1 { "" } else { "s" },
        if r.keep_alive { " kept alive" } else { ", a new one per request" },
        r.threads,
        if r.threads == 1 { "" } else { "s" },
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
    // A server that closes kept-alive connections makes every request pay a new connection.
    if r.keep_alive && r.connections_opened > r.connections {
        let _ = writeln!(
            s,
            "  connects    {} opened for {} connections: the server closed them, so requests paid for new ones",
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
    s
}

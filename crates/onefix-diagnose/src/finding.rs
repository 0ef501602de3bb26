use serde::Serialize;

/// A library or runtime frame under a finding's line, with the share of the *recorded weight*
/// spent under it (the same denominator as the finding's share).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Evidence {
    /// Qualified name, e.g. `ssl.create_default_context` or `SSL_CTX_load_verify_locations`.
    pub frame: String,
    pub file: String,
    pub line: u32,
    pub share: f64,
}

/// One line of the user's code that costs, why, and what to change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub rank: usize,
    /// `repeated-setup`, `serial-io`, `serialization`, `hot-loop-compute`, `lock-contention`, ...
    pub kind: String,
    pub file: String,
    pub line: u32,
    pub function: String,
    /// The source line, when the file is readable.
    pub code: Option<String>,
    /// Of the weight named by [`Diagnosis::share_of`].
    pub share: f64,
    /// Amdahl bound if this cost went away: 1 / (1 - share); `None` when not meaningful.
    pub max_speedup: Option<f64>,
    pub title: String,
    pub advice: String,
    /// Why it costs: the knowledge base's explanation, worded for this run.
    pub why: String,
    pub evidence: Vec<Evidence>,
    /// Fraction of the recording's time windows (in which the busy threads ran) where this
    /// line was seen: near 1 for recurring work, low for start-up.
    pub recurrence: f64,
    /// Knowledge-base entry (or built-in analysis) that classified the line.
    pub rule: String,
    /// Fraction of the line's weight under the classifying entry (1 for self time or waits).
    pub explained: f64,
    /// The loop that repeats this line, when the source shows one: `file:line`.
    pub enclosing_loop: Option<String>,
}

/// A line of the user's code with the weight charged to it (the frontier).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HotLine {
    pub file: String,
    pub line: u32,
    pub function: String,
    pub code: Option<String>,
    /// Weight charged to the line, everything beneath included.
    pub weight: u64,
    /// Of the weight named by [`Diagnosis::share_of`].
    pub share: f64,
    /// Part of `share` spent in the line's own code rather than in calls beneath it.
    pub self_share: f64,
    /// Part of `share` spent blocked (thread not running).
    pub blocked_share: f64,
}

/// Everything the diagnosis says about one recording.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diagnosis {
    /// What shares are fractions of, in words ("wall time of the busy threads", "CPU time").
    pub share_of: String,
    /// Weight of all samples that count in the recording's mode.
    pub total_weight: u64,
    /// The denominator of every share.
    pub busy_weight: u64,
    /// Weight of threads parked waiting for work (pool workers on an empty queue, a server in
    /// `accept`, a thread joining others): not a cost of the work, left out of `busy_weight`.
    pub idle_weight: u64,
    /// Weight of busy threads outside any user line (start-up, interpreter internals).
    pub outside_user_weight: u64,
    /// Seconds per unit of weight, for time profiles.
    pub seconds_per_weight: Option<f64>,
    pub findings: Vec<Finding>,
    pub hot_lines: Vec<HotLine>,
    /// Remarks worth a line in the report (e.g. "3 threads idle for want of work: 61% of wall time").
    pub notes: Vec<String>,
}

use serde::Serialize;

/// A library or runtime frame under a finding's line, with the share of the finding's weight
/// spent under it (while the diagnosis runs, of the recorded weight, as the finding's share is;
/// [`Finding::finish_texts`] turns it into the finding's part).
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
    pub kind: crate::Kind,
    pub file: String,
    pub line: u32,
    pub function: String,
    /// The source line, when the file is readable.
    pub code: Option<String>,
    /// Of the weight named by [`Diagnosis::share_of`].
    pub share: f64,
    /// Amdahl bound if this cost went away: 1 / (1 - share); `None` when not meaningful.
    pub max_speedup: Option<f64>,
    /// Samples (units of weight) in the stretch of the run the bound was computed over: how
    /// precisely the sampled share, and so the bound, is known (see [`Finding::speedup_range`]).
    pub bound_weight: u64,
    pub title: String,
    pub advice: String,
    /// Why it costs: the knowledge base's explanation, worded for this run.
    pub why: String,
    pub evidence: Vec<Evidence>,
    /// Fraction of the recording's time windows (in which the busy threads ran) where this
    /// line was seen: near 1 for recurring work, low for start-up. `None` for a profile
    /// without sample times (imported from pprof or folded stacks), which cannot tell.
    pub recurrence: Option<f64>,
    /// Knowledge-base entry (or built-in analysis) that classified the line.
    pub rule: String,
    /// Fraction of the line's weight under the classifying entry (1 for self time or waits).
    pub explained: f64,
    /// The loop that repeats this line, when the source shows one: `file:line`.
    pub enclosing_loop: Option<String>,
    /// What [`Finding::max_speedup`] was computed over.
    pub gain_basis: GainBasis,
    /// What the classifying entry calls the cost (`deep-copying objects`): the title's subject,
    /// worded once the share is final.
    #[serde(skip)]
    pub what: String,
    /// Why [`Finding::max_speedup`] is `None` when the samples cannot give a bound for a reason
    /// of the finding's own (the terminal says it instead of the generic one).
    #[serde(skip)]
    pub no_bound: Option<String>,
    /// The bound's interval when it is not Amdahl's over `bound_weight` samples (the latency
    /// model's, over the share's interval): what [`Finding::speedup_range`] gives.
    #[serde(skip)]
    pub modelled_range: Option<(f64, Option<f64>)>,
}

/// What a finding's gain bound rests on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GainBasis {
    /// Amdahl's law over the line's share of the busy threads' time in the stretch of the run
    /// that repeats it, capped by the CPUs the remaining work needs: for a server, a run cut
    /// short, or a single busy thread.
    #[default]
    BusyShare,
    /// Critical-path zeroing: the run's end-to-end path without the line's time, no shorter
    /// than what must still run (any thread's own work, the GIL's, the CPUs').
    CriticalPath,
    /// The work/span bound of serial waits in a loop: the run without the calls' waits but the
    /// slowest call's, the calls counted from when their thread ran between them (an upper
    /// bound: every call overlapped, the remote service keeping up).
    WorkSpan,
    /// A server under an open-loop load: the mean latency per request, from a queueing model
    /// of the load's rate and the work per request (analysis/latency.rs).
    LatencyModel,
    /// No bound: a memory finding, or a profile with no time in it.
    None,
}

impl GainBasis {
    pub fn as_str(self) -> &'static str {
        match self {
            GainBasis::BusyShare => "busy-share",
            GainBasis::CriticalPath => "critical-path",
            GainBasis::WorkSpan => "work-span",
            GainBasis::LatencyModel => "latency-model",
            GainBasis::None => "none",
        }
    }
}

impl Finding {
    /// Takes in `added` more share, of which `added_explained` is the classified cost's: the
    /// share and the part of it the title's subject explains move together.
    pub fn absorb_share(&mut self, added: f64, added_explained: f64) {
        let share = self.share + added;
        if share > 0.0 {
            self.explained = ((self.explained * self.share + added_explained) / share).clamp(0.0, 1.0);
        }
        self.share = share;
    }

    /// Words the title from the final share, and gives the evidence as shares of the finding,
    /// by function, heaviest first: what a reader checks against the headline number.
    /// `time` names what shares are of ("time of the threads with work", "CPU time").
    pub fn finish_texts(&mut self, time: &str, max_evidence: usize) {
        self.word_title(time);
        let mut by_function: Vec<Evidence> = Vec::with_capacity(self.evidence.len());
        for e in self.evidence.drain(..) {
            match by_function.iter_mut().find(|x| x.frame == e.frame) {
                Some(x) => x.share += e.share,
                None => by_function.push(e),
            }
        }
        if self.share > 0.0 {
            for e in &mut by_function {
                e.share = (e.share / self.share).min(1.0);
            }
        }
        // Stable: equal shares keep the order the rules gave them (the call that waits first).
        by_function.sort_by(|a, b| b.share.total_cmp(&a.share));
        by_function.truncate(max_evidence);
        self.evidence = by_function;
    }

    /// Words the title from the share and what the cost is.
    pub fn word_title(&mut self, time: &str) {
        let place = format!("{}:{}", onefix_model::fmt::file_name(&self.file), self.line);
        let percent = self.share * 100.0;
        self.title = if self.what.is_empty() {
            format!("{place} takes {percent:.0}% of the {time}")
        } else if self.explained >= MOSTLY_EXPLAINED {
            format!("{} takes {percent:.0}% of the {time} under {place}", capitalize(&self.what))
        } else {
            format!("{place} takes {percent:.0}% of the {time}; {} is {:.0}% of it", self.what, self.explained * 100.0)
        };
    }

    /// The 95% interval of [`Finding::max_speedup`] from sampling alone: the bound rests on
    /// the part of the run outside the line, `1 / bound` of `bound_weight` samples, so near a
    /// share of 1 a handful of samples moves it a lot. Wilson's interval for that fraction,
    /// inverted; the upper end is `None` when the interval reaches zero (no bound above).
    pub fn speedup_range(&self) -> Option<(f64, Option<f64>)> {
        if self.modelled_range.is_some() {
            return self.modelled_range;
        }
        let bound = self.max_speedup.filter(|b| b.is_finite() && *b >= 1.0)?;
        if self.bound_weight == 0 {
            return None;
        }
        let (lo, hi) = wilson(1.0 / bound, self.bound_weight as f64);
        Some((1.0 / hi, (lo > 0.0).then(|| 1.0 / lo)))
    }
}

/// From this part of a finding's share explained by its entry, the title names the entry as
/// the cost; below it, the line's share leads and the entry's part is said as a part.
const MOSTLY_EXPLAINED: f64 = 0.8;

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Wilson's 95% score interval for a proportion `p` seen in `n` trials.
pub(crate) fn wilson(p: f64, n: f64) -> (f64, f64) {
    const Z: f64 = 1.96;
    let z2 = Z * Z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    ((centre - half).max(0.0), (centre + half).min(1.0))
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
    pub notes: Vec<crate::Note>,
    /// The samples counted as idle (threads waiting for work), by index in the profile: the
    /// writers leave them out where idle time would drown the work (a differential graph).
    #[serde(skip)]
    pub idle_samples: SampleSet,
}

/// A set of sample indices, one bit each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SampleSet(Vec<u64>);

impl SampleSet {
    pub fn insert(&mut self, index: usize) {
        let (word, bit) = (index / 64, index % 64);
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << bit;
    }

    pub fn contains(&self, index: usize) -> bool {
        self.0.get(index / 64).is_some_and(|w| w & (1 << (index % 64)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(bound: f64, bound_weight: u64) -> Finding {
        Finding {
            rank: 1,
            kind: crate::Kind::RepeatedSetup,
            file: "/app/main.py".into(),
            line: 3,
            function: "f".into(),
            code: None,
            share: 1.0 - 1.0 / bound,
            max_speedup: Some(bound),
            bound_weight,
            title: String::new(),
            advice: String::new(),
            why: String::new(),
            evidence: Vec::new(),
            recurrence: Some(1.0),
            rule: "r".into(),
            explained: 1.0,
            enclosing_loop: None,
            gain_basis: GainBasis::BusyShare,
            what: String::new(),
            no_bound: None,
            modelled_range: None,
        }
    }

    #[test]
    fn a_bound_near_a_share_of_one_is_known_only_roughly_from_a_few_hundred_samples() {
        // 34 samples of 792 outside the line (the synapse lab): 23x, but 17x to 33x.
        let (lo, hi) = finding(792.0 / 34.0, 792).speedup_range().unwrap();
        assert!((16.0..18.0).contains(&lo), "{lo}");
        assert!((31.0..34.0).contains(&hi.unwrap()), "{hi:?}");
        // The same share from a hundred times the samples is known within a few percent.
        let (lo, hi) = finding(792.0 / 34.0, 79_200).speedup_range().unwrap();
        assert!(lo > 22.0 && hi.unwrap() < 24.5, "{lo} {hi:?}");
        // A half share: 2x, within a few tenths.
        let (lo, hi) = finding(2.0, 1000).speedup_range().unwrap();
        assert!(lo > 1.85 && hi.unwrap() < 2.2, "{lo} {hi:?}");
    }

    #[test]
    fn no_interval_without_a_bound_or_samples() {
        let mut f = finding(2.0, 0);
        assert_eq!(f.speedup_range(), None);
        f.max_speedup = None;
        f.bound_weight = 100;
        assert_eq!(f.speedup_range(), None);
    }
}

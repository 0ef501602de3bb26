//! What a finding means for the fleet: its share of the service's sampled time, the cores it
//! keeps busy on average across the fleet, and on how many hosts it was seen.

use std::collections::BTreeSet;

use onefix_diagnose::Diagnosis;
use serde::Serialize;

use crate::query::FleetProfile;

#[derive(Clone, Debug, Serialize)]
pub struct FleetFigures {
    pub file: String,
    pub line: u32,
    pub function: String,
    /// Of the diagnosis's `share_of`.
    pub share: f64,
    /// Of every sample of the service in the window (every thread, waiting or not): the same
    /// base as the trend.
    pub sampled_share: f64,
    /// CPU seconds at the line (running samples under it) over the window's seconds: the
    /// cores it keeps busy on average, all hosts together.
    pub cores_busy: f64,
    /// Hosts where the line was sampled, of those in the window.
    pub hosts_seen: usize,
    pub hosts_total: u64,
}

/// Each finding's fleet figures, in the diagnosis's order.
pub fn figures(fleet: &FleetProfile, diagnosis: &Diagnosis) -> Vec<FleetFigures> {
    let p = &fleet.profile;
    let seconds_per_weight = p.seconds_per_weight().unwrap_or(0.0);
    let total_weight: u64 = p.samples.iter().map(|s| s.weight as u64).sum();
    diagnosis
        .findings
        .iter()
        .map(|f| {
            let (mut cpu_weight, mut weight) = (0u64, 0u64);
            let mut hosts = BTreeSet::new();
            for s in &p.samples {
                let at_line = p.stack_frames_leaf_first(s.stack).any(|id| {
                    let frame = p.frame(id);
                    frame.line == f.line && frame.file == f.file
                });
                if at_line {
                    hosts.insert(fleet.thread_hosts[s.thread as usize].as_str());
                    weight += s.weight as u64;
                    if s.state.active() {
                        cpu_weight += s.weight as u64;
                    }
                }
            }
            FleetFigures {
                file: f.file.clone(),
                line: f.line,
                function: f.function.clone(),
                share: f.share,
                sampled_share: if total_weight == 0 { 0.0 } else { weight as f64 / total_weight as f64 },
                cores_busy: cpu_weight as f64 * seconds_per_weight / fleet.span_s,
                hosts_seen: hosts.len(),
                hosts_total: fleet.overview.hosts,
            }
        })
        .collect()
}

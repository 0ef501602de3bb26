//! A server under an open-loop load: what a line costs is in each request's latency, and the
//! latency is the work per request plus the queue that work builds at the load's rate. Removing
//! a line's work shortens both, so near saturation a small share can gain much, and at a light
//! load a large share gains little more than its work (Amdahl's law over the busy time says
//! neither).
//!
//! What the model rests on:
//! - before the load, requests sent one at a time (onefix-load's `probe_unloaded`), so none
//!   queued: their mean latency `W0 = L0 + S0`, with `S0` the server's CPU time per request
//!   over them (the kernel's count of the process's CPU time) and `L0` what no fix of the
//!   server changes (the client, the network, the kernel); the spread of their latency is the
//!   spread of the work (`cs`, its coefficient of variation);
//! - from the samples, the utilisation `ρ` of what requests queue for (the GIL of a Python
//!   process, else the CPUs), hence the time each request holds it under the load,
//!   `S = ρ·c/λ`, and the fraction `f` of that work that the line is.
//!
//! Under the load a request's work is longer than alone (`S = k·S0`: threads sharing the GIL
//! or the CPUs, caches), an excess taken to shrink with the utilisation. The latency is
//! `L0 + S + Wq`, with `Wq` Kingman's and Sakasegawa's G/G/c approximation
//! `(ca² + cs²)/2 · ρ^(√(2(c+1))−1) / (c(1−ρ)) · S`; `ca = 0`, since the load sends on a fixed
//! schedule. Without the line: `ρ' = ρ(1−f)`, `S' = S0(1−f)(1 + (k−1)(1−f))`, and the gain is
//! the ratio of the two latencies, 1 for a line that is no work.
//!
//! The latency measured under the load is not the numerator: near saturation the sampling's
//! own cost deepens a queue that grows without bound, and a model scaled by it promised 55x
//! where the fix gave 8x. A first version without the unloaded requests took `L0` as the
//! fastest request's latency less the sampled work (near zero: requests' work varies) and
//! promised 32.7x where the fix gave 4.7x.

use serde_json::Value;

/// Beyond this utilisation the queue is unstable in the samples' terms: no model.
const SATURATED: f64 = 0.97;

/// What the recording says of the load that drove it and of the server's work.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LatencyModel {
    /// Requests per second answered.
    rps: f64,
    /// Servers the work queues for: 1 for a Python process (its GIL), else the CPUs.
    servers: f64,
    /// Utilisation of the servers under the load, from the samples.
    rho: f64,
    /// Seconds per request outside the server's work and its queue (`L0`).
    rest: f64,
    /// The server's CPU seconds per request alone (`S0`).
    alone: f64,
    /// How much longer a request holds a server under the load than alone (`k`, at least 1).
    stretch: f64,
    /// `(ca² + cs²) / 2`: how variable the arrivals (a fixed schedule: not) and the work are.
    variability: f64,
    /// Seconds per request of one unit of sampled weight.
    per_weight: f64,
    /// The sample slots the utilisation was read over: how precisely it is known.
    slots: f64,
}

impl LatencyModel {
    /// From the load's result (open loop only: a closed loop's rate follows the latency, and
    /// only an open loop is preceded by the unloaded requests), the weight of the work that
    /// queues (`work_weight`, over `servers`) and the seconds each unit of weight stands for.
    pub(crate) fn from_load(
        load: &[u8],
        work_weight: u64,
        seconds_per_weight: f64,
        servers: u32,
    ) -> Option<LatencyModel> {
        let v: Value = serde_json::from_slice(load).ok()?;
        if v["mode"] != "open" {
            return None;
        }
        let completed = v["completed"].as_u64().filter(|&n| n > 0)? as f64;
        let elapsed = v["elapsed_s"].as_f64().filter(|&e| e > 0.0)?;
        // Without the unloaded requests measured there is no model (a recording from before
        // they were, a server too slow for them, or one whose CPU time was not read).
        let unloaded = &v["unloaded"];
        let mean = unloaded["latency_ms"]["mean"].as_f64().filter(|&m| m > 0.0)? / 1e3;
        let stddev = unloaded["latency_ms"]["stddev"].as_f64().unwrap_or(0.0) / 1e3;
        let alone = unloaded["server_cpu_ms"].as_f64().filter(|&c| c > 0.0)? / 1e3;
        let servers = servers.max(1) as f64;
        let rho = work_weight as f64 * seconds_per_weight / (elapsed * servers);
        let model = LatencyModel::new(completed / elapsed, servers, rho, mean, stddev, alone)?;
        Some(LatencyModel {
            per_weight: seconds_per_weight / completed,
            slots: elapsed * servers / seconds_per_weight,
            ..model
        })
    }

    /// `unloaded` and `stddev`: the latency of requests sent one at a time, and its spread;
    /// `alone`: the server's CPU seconds per request then.
    fn new(rps: f64, servers: f64, rho: f64, unloaded: f64, stddev: f64, alone: f64) -> Option<LatencyModel> {
        // The CPU time can exceed the latency when the server works after it answers (or in
        // threads beside the one that answers): the request then waits for no more than it.
        let alone = alone.min(unloaded);
        let cs = stddev / unloaded;
        let model = LatencyModel {
            rps,
            servers,
            rho: 0.0,
            rest: unloaded - alone,
            alone,
            stretch: 1.0,
            variability: cs * cs / 2.0,
            per_weight: 0.0,
            slots: 0.0,
        };
        model.at_utilisation(rho)
    }

    /// The same server at utilisation `rho`: the time a request holds a server, `ρ·c/λ`, and so
    /// the stretch of its work, follow from it. `None` past saturation.
    fn at_utilisation(&self, rho: f64) -> Option<LatencyModel> {
        if !(rho > 0.0 && rho < SATURATED) || self.alone <= 0.0 {
            return None;
        }
        let held = rho * self.servers / self.rps;
        Some(LatencyModel { rho, stretch: (held / self.alone).max(1.0), ..*self })
    }

    /// The mean latency when a request's work is `keep` of what it is now.
    fn latency(&self, keep: f64, wait: f64) -> f64 {
        let rho = self.rho * keep;
        let held = self.alone * keep * (1.0 + (self.stretch - 1.0) * keep);
        let c = self.servers;
        let queued = self.variability * rho.powf((2.0 * (c + 1.0)).sqrt() - 1.0) / (c * (1.0 - rho)) * held;
        (self.rest - wait).max(0.0) + held + queued
    }

    /// The mean latency's speedup when the line is `work_fraction` of the server's work and
    /// each request also waits `wait` seconds less outside it.
    pub(crate) fn speedup(&self, work_fraction: f64, wait: f64) -> Option<f64> {
        let keep = (1.0 - work_fraction).clamp(0.0, 1.0);
        let after = self.latency(keep, wait);
        (after > 0.0).then(|| self.latency(1.0, 0.0) / after)
    }

    /// Seconds per request of `weight` units of sampled weight.
    pub(crate) fn per_request(&self, weight: f64) -> f64 {
        weight * self.per_weight
    }

    pub(crate) fn rps(&self) -> f64 {
        self.rps
    }

    /// Utilisation of the servers at the load's rate.
    pub(crate) fn utilisation(&self) -> f64 {
        self.rho
    }

    /// The model at the ends of the utilisation's 95% interval from sampling (Wilson's): the
    /// queue grows steeply with it near saturation, so the gain's interval must carry it. `None`
    /// at an end past saturation.
    pub(crate) fn at_utilisation_bounds(&self) -> (Option<LatencyModel>, Option<LatencyModel>) {
        if self.slots <= 0.0 {
            return (Some(*self), Some(*self));
        }
        let (lo, hi) = crate::finding::wilson(self.rho, self.slots);
        (self.at_utilisation(lo), self.at_utilisation(hi))
    }

    /// A request's latency alone (no queue), and the server's CPU time in it, in seconds.
    pub(crate) fn alone(&self) -> (f64, f64) {
        (self.rest + self.alone, self.alone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queueing_multiplies_a_gain_near_saturation_and_not_at_a_light_load() {
        // 1 ms of work per request, alone as under the load, exponential-like spread (cs = 1).
        let at = |rho: f64| LatencyModel::new(rho * 1000.0, 1.0, rho, 0.001, 0.001, 0.001).unwrap();
        let (light, busy) = (at(0.1), at(0.8));
        assert!(light.rest.abs() < 1e-9 && (light.stretch - 1.0).abs() < 1e-9, "{light:?}");
        // A line that is no work gains nothing.
        assert!((busy.speedup(0.0, 0.0).unwrap() - 1.0).abs() < 1e-9);
        // Half the work removed: about 2x at 10% load, far more at 80%.
        let at_light = light.speedup(0.5, 0.0).unwrap();
        let at_busy = busy.speedup(0.5, 0.0).unwrap();
        assert!((2.0..2.2).contains(&at_light), "{at_light}");
        assert!((4.0..5.0).contains(&at_busy), "{at_busy}");
        // Regular work queues less, so it gains less from the same cut.
        let regular = LatencyModel::new(800.0, 1.0, 0.8, 0.001, 0.0001, 0.001).unwrap();
        assert!(regular.speedup(0.5, 0.0).unwrap() < at_busy);
        // Latency outside the server (10 ms of its 11 ms alone) dilutes the gain...
        let far = LatencyModel::new(100.0, 1.0, 0.1, 0.011, 0.001, 0.001).unwrap();
        assert!(far.speedup(0.5, 0.0).unwrap() < 1.1);
        // ...and a wait outside the server removed shortens it.
        assert!(far.speedup(0.0, 0.005).unwrap() > 1.7);
        // Saturated, or no work seen: no model.
        assert!(LatencyModel::new(1000.0, 1.0, 0.99, 0.001, 0.001, 0.001).is_none());
        assert!(LatencyModel::new(1000.0, 1.0, 0.0, 0.001, 0.001, 0.001).is_none());
    }

    #[test]
    fn work_stretched_under_the_load_shrinks_with_it() {
        // Alone a request takes 2 ms of CPU (all of its 2 ms latency); under 213 requests/s the
        // GIL is held 85% of the time, 4 ms per request. A line that is 71% of the work:
        // 2 ms * 0.29 * (1 + 0.29) of work remains, and the queue is nearly gone.
        let m = LatencyModel::new(213.0, 1.0, 0.85, 0.002, 0.0009, 0.002).unwrap();
        assert!((m.stretch - 0.85 / 213.0 / 0.002).abs() < 1e-9, "{m:?}");
        let gain = m.speedup(0.71, 0.0).unwrap();
        assert!((7.0..9.0).contains(&gain), "{gain}");
        // A small line gains little, not the stretch itself.
        assert!(m.speedup(0.05, 0.0).unwrap() < 1.3);
    }

    #[test]
    fn only_an_open_loop_load_with_its_floor_measured_is_modelled() {
        let open = br#"{"mode":"open","completed":4000,"elapsed_s":10.0,"latency_ms":{"mean":3.0,"min":2.0},
            "unloaded":{"completed":20,"latency_ms":{"mean":2.5,"stddev":1.0},"server_cpu_ms":1.5}}"#;
        // 800 samples of 10 ms holding the server: 8 s of its 10.
        let model = LatencyModel::from_load(open, 800, 0.01, 1).unwrap();
        assert!((model.utilisation() - 0.8).abs() < 1e-9, "{model:?}");
        assert!((model.rest - 0.001).abs() < 1e-9 && (model.stretch - 0.002 / 0.0015).abs() < 1e-9, "{model:?}");
        // The utilisation read over 1,000 slots is known to a few points: the model at both ends.
        let (lo, hi) = model.at_utilisation_bounds();
        let (lo, hi) = (lo.unwrap(), hi.unwrap());
        assert!(lo.rho < 0.78 && hi.rho > 0.82 && hi.rho < 0.85, "{lo:?} {hi:?}");
        assert!(lo.speedup(0.5, 0.0).unwrap() < model.speedup(0.5, 0.0).unwrap());
        assert!(hi.speedup(0.5, 0.0).unwrap() > model.speedup(0.5, 0.0).unwrap());
        let closed = br#"{"mode":"closed","completed":4000,"elapsed_s":10.0,"latency_ms":{"mean":3.0}}"#;
        assert!(LatencyModel::from_load(closed, 800, 0.01, 1).is_none());
        // An open loop whose floor was not measured (or whose server's CPU time was not read):
        // no model either.
        let no_floor = br#"{"mode":"open","completed":4000,"elapsed_s":10.0,"latency_ms":{"mean":3.0,"min":2.0}}"#;
        assert!(LatencyModel::from_load(no_floor, 800, 0.01, 1).is_none());
        let no_cpu = br#"{"mode":"open","completed":4000,"elapsed_s":10.0,"latency_ms":{"mean":3.0},
            "unloaded":{"completed":20,"latency_ms":{"mean":2.5}}}"#;
        assert!(LatencyModel::from_load(no_cpu, 800, 0.01, 1).is_none());
    }
}

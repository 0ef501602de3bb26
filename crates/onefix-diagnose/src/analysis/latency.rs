//! A server under an open-loop load: what a line costs is in each request's latency, and the
//! latency is the work per request plus the queue that work builds at the load's rate. Removing
//! a line's work shortens both, so near saturation a small share can gain much, and at a light
//! load a large share gains little more than its work (Amdahl's law over the busy time says
//! neither). The model: each request waits `Wq` for a server (the GIL of a Python process, or
//! a CPU), then runs `S` of CPU work, plus `L0` that neither changes (the client, the kernel,
//! waits outside the server). `S` is from the samples; `L0` is the fastest request's latency
//! less `S` (no queue then); `Wq` is what the mean latency leaves. How `Wq` shrinks with the
//! work is Sakasegawa's approximation of an M/D/c queue, `ρ^(√(2(c+1))−1) / (c(1−ρ)) · S/2`
//! (exact for M/D/1: `ρ/(1−ρ) · S/2`), as a ratio: the measured queue is scaled by it, since
//! a real server queues more than the theory (a GIL handed over every 5 ms, a busy machine).

use serde_json::Value;

/// Beyond this utilisation the queue is unstable in the samples' terms: no model.
const SATURATED: f64 = 0.97;

/// What the recording says of the load that drove it, and of the work per request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LatencyModel {
    /// Requests per second answered.
    rps: f64,
    /// Servers the CPU work queues for: 1 for a Python process (its GIL), else the CPUs.
    servers: f64,
    /// CPU seconds per request.
    cpu: f64,
    /// Seconds per request outside the server's CPU work and its queue.
    rest: f64,
    /// Seconds per request queued for a server, as measured.
    queued: f64,
    /// Seconds per request of one unit of sampled weight.
    per_weight: f64,
}

impl LatencyModel {
    /// From the load's result (open loop only: a closed loop's rate follows the latency), the
    /// running weight and the seconds each unit of weight stands for.
    pub(crate) fn from_load(
        load: &[u8],
        running_weight: u64,
        seconds_per_weight: f64,
        servers: u32,
    ) -> Option<LatencyModel> {
        let v: Value = serde_json::from_slice(load).ok()?;
        if v["mode"] != "open" {
            return None;
        }
        let completed = v["completed"].as_u64().filter(|&n| n > 0)? as f64;
        let elapsed = v["elapsed_s"].as_f64().filter(|&e| e > 0.0)?;
        let mean = v["latency_ms"]["mean"].as_f64().filter(|&m| m > 0.0)? / 1e3;
        let fastest = v["latency_ms"]["min"].as_f64().unwrap_or(0.0) / 1e3;
        let per_weight = seconds_per_weight / completed;
        let cpu = running_weight as f64 * per_weight;
        let model = LatencyModel::new(completed / elapsed, servers.max(1) as f64, cpu, mean, fastest)?;
        Some(LatencyModel { per_weight, ..model })
    }

    fn new(rps: f64, servers: f64, cpu: f64, mean: f64, fastest: f64) -> Option<LatencyModel> {
        let model = LatencyModel { rps, servers, cpu, rest: 0.0, queued: 0.0, per_weight: 0.0 };
        model.queue(cpu)?;
        let rest = (fastest - cpu).max(0.0);
        Some(LatencyModel { rest, queued: (mean - rest - cpu).max(0.0), ..model })
    }

    /// The mean wait for a server when each request needs `cpu` seconds of it.
    fn queue(&self, cpu: f64) -> Option<f64> {
        let rho = self.rps * cpu / self.servers;
        if rho >= SATURATED {
            return None;
        }
        let c = self.servers;
        Some(rho.powf((2.0 * (c + 1.0)).sqrt() - 1.0) / (c * (1.0 - rho)) * cpu / 2.0)
    }

    /// The mean latency's speedup when each request does `cpu` seconds less CPU work and waits
    /// `wait` seconds less outside it.
    pub(crate) fn speedup(&self, cpu: f64, wait: f64) -> Option<f64> {
        let before = self.rest + self.cpu + self.queued;
        let cpu_after = (self.cpu - cpu).max(0.0);
        let theory = self.queue(self.cpu)?;
        let queued_after = if theory > 0.0 { self.queued * self.queue(cpu_after)? / theory } else { 0.0 };
        let after = (self.rest - wait).max(0.0) + cpu_after + queued_after;
        (after > 0.0).then(|| before / after)
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
        self.rps * self.cpu / self.servers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queueing_multiplies_a_gain_near_saturation_and_not_at_a_light_load() {
        // 1 ms of CPU per request on one server, no time elsewhere, queueing as the theory says.
        let light = LatencyModel::new(100.0, 1.0, 0.001, 0.001 + 0.1 / 0.9 * 0.0005, 0.001).unwrap();
        let busy = LatencyModel::new(800.0, 1.0, 0.001, 0.001 + 0.8 / 0.2 * 0.0005, 0.001).unwrap();
        assert!(light.rest.abs() < 1e-9 && busy.rest.abs() < 1e-9, "{light:?} {busy:?}");
        // Half the work removed: about 2x at 10% load, far more at 80%.
        let at_light = light.speedup(0.0005, 0.0).unwrap();
        let at_busy = busy.speedup(0.0005, 0.0).unwrap();
        assert!((1.9..2.2).contains(&at_light), "{at_light}");
        assert!((4.0..5.0).contains(&at_busy), "{at_busy}");
        // A server that queues three times what the theory says gains in proportion.
        let convoy = LatencyModel::new(800.0, 1.0, 0.001, 0.001 + 3.0 * 0.8 / 0.2 * 0.0005, 0.001).unwrap();
        assert!(convoy.speedup(0.0005, 0.0).unwrap() > at_busy);
        // Latency outside the server (its fastest request took 11 ms) dilutes the gain.
        let far = LatencyModel::new(100.0, 1.0, 0.001, 0.0111, 0.011).unwrap();
        assert!(far.speedup(0.0005, 0.0).unwrap() < 1.1);
        // Saturated: no model.
        assert!(LatencyModel::new(1000.0, 1.0, 0.001, 0.5, 0.001).is_none());
    }

    #[test]
    fn only_an_open_loop_load_is_modelled() {
        let open = br#"{"mode":"open","completed":4000,"elapsed_s":10.0,"latency_ms":{"mean":3.0,"min":2.0}}"#;
        // 800 samples of 10 ms running: 8 s of CPU over 4000 requests.
        let model = LatencyModel::from_load(open, 800, 0.01, 1).unwrap();
        assert!((model.utilisation() - 0.8).abs() < 1e-9, "{model:?}");
        let closed = br#"{"mode":"closed","completed":4000,"elapsed_s":10.0,"latency_ms":{"mean":3.0}}"#;
        assert!(LatencyModel::from_load(closed, 800, 0.01, 1).is_none());
    }
}

//! Runs a command under the native sampler and prints what it saw: a tool for trying the
//! sampler by hand and for the overhead benchmark (bench/run), before `onefix record` wires it.
//!
//! cargo run -p onefix-native --example native_record -- [--rate HZ] [--no-off-cpu] [--tick-ms MS] -- CMD ARGS...
//! cargo run -p onefix-native --example native_record -- [options] --pid PID --seconds S

use std::collections::HashMap;
use std::time::{Duration, Instant};

use onefix_collect::{Sampler, Tick};
use onefix_model::{Meta, Mode, Profile, WeightUnit};
use onefix_native::{NativeOptions, NativeSampler};

fn cpu_seconds_self() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let mut opts = NativeOptions::default();
    let mut tick = Duration::from_millis(1);
    let mut attach: Option<u32> = None;
    let mut seconds = 5.0;
    let mut it = args[..split].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rate" => opts.rate_hz = it.next().unwrap().parse().unwrap(),
            "--no-off-cpu" => opts.off_cpu = false,
            "--pid" => attach = Some(it.next().unwrap().parse().unwrap()),
            "--seconds" => seconds = it.next().unwrap().parse().unwrap(),
            "--tick-ms" => tick = Duration::from_secs_f64(it.next().unwrap().parse::<f64>().unwrap() / 1e3),
            other => panic!("unknown option {other}"),
        }
    }
    let argv = args.get(split + 1..).unwrap_or_default();
    let started = match attach {
        Some(pid) => NativeSampler::attach(pid, &opts).map(|s| (s, pid)),
        None => NativeSampler::spawn(argv, &opts),
    };
    let (mut sampler, pid) = match started {
        Ok(x) => x,
        Err(e) => {
            eprintln!("onefix: {e}");
            std::process::exit(2);
        }
    };
    let meta = Meta {
        rate_hz: opts.rate_hz,
        weight_unit: WeightUnit::Samples { interval_us: sampler.interval_us() },
        ..Meta::default()
    };
    let mut profile = Profile::new(meta);
    let start = Instant::now();
    let cpu0 = cpu_seconds_self();
    while sampler.tick(&mut profile, start.elapsed().as_micros() as u64) != Tick::TargetGone {
        if attach.is_some() && start.elapsed().as_secs_f64() >= seconds {
            sampler.finish(&mut profile, start.elapsed().as_micros() as u64);
            break;
        }
        std::thread::sleep(tick);
    }
    let cpu = cpu_seconds_self() - cpu0;
    let wall = start.elapsed().as_secs_f64();
    let exit = sampler.reap();
    eprintln!(
        "pid {pid} exit {exit:?}; {:.3} s wall; profiler CPU {:.3} s ({:.2}% of a core)",
        wall,
        cpu,
        100.0 * cpu / wall
    );
    eprintln!("samples {} stats {:?}", profile.samples.len(), sampler.stats());
    for w in sampler.warnings() {
        eprintln!("warning: {w}");
    }
    let spw = profile.seconds_per_weight().unwrap();
    for mode in [Mode::Cpu, Mode::Wall] {
        let total = profile.total_weight(mode);
        let mut by: HashMap<String, u64> = HashMap::new();
        for s in profile.samples.iter().filter(|s| mode.counts(s.state)) {
            // The deepest frame with a source line: what a user reads first.
            let f = profile.stack_frames_leaf_first(s.stack).map(|f| profile.frame(f)).find(|f| f.line > 0);
            let key = f.map(|f| f.label()).unwrap_or_else(|| "(no line)".into());
            *by.entry(key).or_default() += s.weight as u64;
        }
        let mut rows: Vec<_> = by.into_iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1));
        eprintln!("{} mode: {:.3} s", mode.as_str(), total as f64 * spw);
        for (k, w) in rows.iter().take(8) {
            eprintln!("  {:5.1}%  {:.3} s  {k}", 100.0 * *w as f64 / total.max(1) as f64, *w as f64 * spw);
        }
    }
}

// A known hot function under a known call chain, for the native sampler's live tests.
// Built by the tests with rustc -C opt-level=2 -g (std has no frame pointers).
use std::hint::black_box;
use std::time::Duration;

#[inline(never)]
fn hot(n: u64) -> u64 {
    let mut x = 0u64;
    for i in 0..n {
        x = x.wrapping_mul(31).wrapping_add(i ^ (x >> 7)); // HOT
    }
    x
}

// Burns `secs` of CPU time (not wall time: the machine may be busy).
#[inline(never)]
fn compute(secs: f64) -> u64 {
    let start = cpu_seconds();
    let mut s = 0;
    while cpu_seconds() - start < secs {
        s ^= black_box(hot(black_box(200_000)));
    }
    s
}

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, t: *mut Timespec) -> i32;
}

fn cpu_seconds() -> f64 {
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut t = Timespec { sec: 0, nsec: 0 };
    unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.sec as f64 + t.nsec as f64 / 1e9
}

#[inline(never)]
fn wait() {
    std::thread::sleep(Duration::from_millis(400)); // SLEEP
    black_box(()); // no tail call: `wait` keeps its frame
}

fn main() {
    wait();
    black_box(compute(0.6));
}

//! How long one cache line takes to go from one core to another on this machine: two threads,
//! pinned to two CPUs, hand a counter back and forth through one line.
//!
//! ```sh
//! cargo run --release --example pingpong -- 0 1
//! ```
//!
//! It prints the one-way time, the price every packet pays when it crosses cores. On a shared VM
//! it can change under a run (the benchmarks' machine reads about 30 ns on some minutes and
//! about 180 ns on others, when its two virtual CPUs are placed apart), so `BENCHMARKS.md` quotes
//! ratios measured in the same run, never one absolute rate.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_utils::CachePadded;

const ROUND_TRIPS: u64 = 200_000;

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes one bit of it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("CPU {cpu} is past CPU_SETSIZE"));
    }
    // SAFETY: as above, `cpu` < CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; the set is initialised.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(format!(
            "cannot run on CPU {cpu}: {} (pass two CPUs of this machine's affinity mask)",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn main() -> Result<(), String> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().map_err(|_| format!("not a CPU number: {a}")))
        .collect::<Result<_, _>>()?;
    let (a, b) = match args[..] {
        [] => (0, 1),
        [a, b] => (a, b),
        _ => return Err("usage: pingpong [CPU CPU] (default 0 1)".into()),
    };
    let line = CachePadded::new(AtomicU64::new(0));
    // Both threads pin first and meet; if either could not, neither spins.
    let failed = AtomicBool::new(false);
    let met = Barrier::new(2);
    let elapsed = std::thread::scope(|s| {
        let other = s.spawn(|| {
            let pinned = pin(b);
            failed.fetch_or(pinned.is_err(), Ordering::Relaxed);
            met.wait();
            if failed.load(Ordering::Relaxed) {
                return pinned;
            }
            for i in 0..ROUND_TRIPS {
                while line.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                line.store(2 * i + 2, Ordering::Release);
            }
            Ok(())
        });
        let pinned = pin(a);
        failed.fetch_or(pinned.is_err(), Ordering::Relaxed);
        met.wait();
        if failed.load(Ordering::Relaxed) {
            let theirs = other
                .join()
                .map_err(|_| "the other thread panicked".to_string())?;
            return Err(pinned.and(theirs).err().unwrap_or_default());
        }
        let t0 = Instant::now();
        for i in 0..ROUND_TRIPS {
            line.store(2 * i + 1, Ordering::Release);
            while line.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
            }
        }
        let elapsed = t0.elapsed();
        other
            .join()
            .map_err(|_| "the other thread panicked".to_string())??;
        Ok::<_, String>(elapsed)
    })?;
    let ns = elapsed.as_nanos() as f64 / (2 * ROUND_TRIPS) as f64;
    println!("{ns:.1} ns one-way between CPU {a} and CPU {b}");
    Ok(())
}

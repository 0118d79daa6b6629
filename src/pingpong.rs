//! The machine-state probe: how long one cache line takes to go from one core to another, two
//! threads pinned to two CPUs handing a counter back and forth through it.
//!
//! Owns the probe and its pinning only; callers decide when to run it (`examples/pingpong`
//! alone, `pktgen --compare` before each group of cells). It must not be run while a measured
//! workload runs: it spins both CPUs.
//!
//! On a shared VM the figure can change under a run (the benchmarks' machine reads about 30 ns
//! on some minutes and about 180 ns on others, when its two virtual CPUs are placed apart), and
//! every cross-core rate moves with it, so a table that says what the probe read beside each
//! group of cells tells its reader which ratios came from which state.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The line the threads hand back and forth, alone on its 128 bytes (two lines: the adjacent-line
/// prefetcher pairs them).
#[repr(align(128))]
struct Line(AtomicU64);

/// Pins the calling thread to `cpu` (also for tests that need a thread on a given CPU).
///
/// # Errors
///
/// A message naming the CPU if it is past `CPU_SETSIZE` or outside the affinity mask.
pub fn pin(cpu: usize) -> Result<(), String> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("CPU {cpu} is past CPU_SETSIZE"));
    }
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE, checked above; CPU_SET writes one bit of the set.
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

/// The one-way time in nanoseconds of a cache line between CPUs `a` and `b`, over
/// `round_trips` round trips (each thread pinned for the probe; the pinning ends with its
/// threads).
///
/// # Errors
///
/// A message naming the CPU if either thread cannot be pinned (a CPU outside the affinity
/// mask), or if a probe thread panicked.
///
/// ```no_run
/// let ns = lockless_xmit::pingpong::one_way_ns(0, 1, 20_000).unwrap();
/// println!("{ns:.1} ns one way");
/// ```
pub fn one_way_ns(a: usize, b: usize, round_trips: u64) -> Result<f64, String> {
    let round_trips = round_trips.max(1);
    let line = Line(AtomicU64::new(0));
    let line = &line.0;
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
            for i in 0..round_trips {
                while line.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                line.store(2 * i + 2, Ordering::Release);
            }
            Ok(())
        });
        let mine = s.spawn(|| {
            let pinned = pin(a);
            failed.fetch_or(pinned.is_err(), Ordering::Relaxed);
            met.wait();
            if failed.load(Ordering::Relaxed) {
                return pinned.map(|()| None);
            }
            let t0 = Instant::now();
            for i in 0..round_trips {
                line.store(2 * i + 1, Ordering::Release);
                while line.load(Ordering::Acquire) != 2 * i + 2 {
                    std::hint::spin_loop();
                }
            }
            Ok(Some(t0.elapsed()))
        });
        let theirs = other
            .join()
            .map_err(|_| "a probe thread panicked".to_string())?;
        let ours = mine
            .join()
            .map_err(|_| "a probe thread panicked".to_string())?;
        match (ours, theirs) {
            (Ok(Some(t)), Ok(())) => Ok(t),
            (Err(e), _) | (_, Err(e)) => Err(e),
            (Ok(None), Ok(())) => Err("a probe thread could not be pinned".to_string()),
        }
    })?;
    Ok(elapsed.as_nanos() as f64 / (2 * round_trips) as f64)
}

/// [`one_way_ns`] between the first two CPUs this thread may run on, over 20 000 round trips (a
/// few milliseconds): what `pktgen --compare` records before each group of cells. `None` on a
/// machine (or mask) with one CPU, or if the probe cannot run.
pub fn probe() -> Option<f64> {
    // SAFETY: a zeroed cpu_set_t is an empty set, which sched_getaffinity fills.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the size is the set's.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return None;
    }
    // SAFETY: every `c` is below CPU_SETSIZE; CPU_ISSET reads one bit of the filled set.
    let mut cpus = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) });
    let (a, b) = (cpus.next()?, cpus.next()?);
    one_way_ns(a, b, 20_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_outside_the_mask_is_a_typed_error_naming_it() {
        let err = one_way_ns(0, libc::CPU_SETSIZE as usize, 10).unwrap_err();
        assert!(err.contains("past CPU_SETSIZE"), "{err}");
    }
}

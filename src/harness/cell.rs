//! What a run measured (`Cell`), what it reports each second (`Tick`), and the clocks and
//! statistics they are read with.
//!
//! Owns: the figures and the conservation law. Must not: run anything.

use std::fmt;
use std::time::Duration;

use qdisc::XmitStats;
use skb_pool::{PerCpuStats, Pool, PoolStats};

/// A progress sample, cumulative since the start.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tick {
    /// Time since the start.
    pub elapsed: Duration,
    /// Packets offered.
    pub offered: u64,
    /// Packets sent.
    pub sent: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Packets dropped.
    pub dropped: u64,
    /// Process CPU time.
    pub cpu: Duration,
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    /// Packets offered.
    pub offered: u64,
    /// Packets the driver accepted.
    pub sent: u64,
    /// Packets dropped, any reason.
    pub dropped: u64,
    /// Packets still queued at the end (0 after a clean finish).
    pub queued: u64,
    /// Wall time from start to the last packet handled.
    pub elapsed: Duration,
    /// Process CPU time (user + system) over the same span.
    pub cpu: Duration,
    /// The engine's stats (engine only).
    pub xmit: Option<XmitStats>,
    /// The qdisc's `tc -s qdisc show` text (engine only).
    pub qdisc_show: Option<String>,
    /// The pool's counters at the end.
    pub pool: Option<PoolStats>,
    /// The pool's per-CPU counters at the end.
    pub per_cpu: Option<PerCpuStats>,
}

impl Cell {
    /// Transmitted packets per second.
    pub fn pps(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU nanoseconds per transmitted packet.
    pub fn cpu_ns_per_pkt(&self) -> f64 {
        self.cpu.as_nanos() as f64 / (self.sent.max(1)) as f64
    }

    /// Whether offered = sent + dropped + queued.
    pub fn conserved(&self) -> bool {
        self.offered == self.sent + self.dropped + self.queued
    }

    /// Records `pool`'s counters as they are at the end of the run (every thread that held
    /// its frames joined).
    pub(super) fn with_pool_stats(mut self, pool: &Pool) -> Cell {
        self.pool = Some(pool.stats());
        self.per_cpu = Some(pool.per_cpu_stats());
        self
    }
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offered {} sent {} dropped {} queued {} in {:.3} s: {:.3} Mpps, {:.1} CPU ns/pkt",
            self.offered,
            self.sent,
            self.dropped,
            self.queued,
            self.elapsed.as_secs_f64(),
            self.pps() / 1e6,
            self.cpu_ns_per_pkt()
        )
    }
}

/// The median of `xs` (the mean of the middle two for an even count), for benches that
/// repeat a measurement on a noisy machine. Panics on an empty slice.
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Process CPU time (user + system).
pub fn process_cpu_time() -> Duration {
    let mut ru = core::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` into the pointer we pass, which is valid and large
    // enough; RUSAGE_SELF is always a valid `who`.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } == 0;
    if !ok {
        return Duration::ZERO;
    }
    // SAFETY: getrusage succeeded and filled the struct (it was zeroed besides).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

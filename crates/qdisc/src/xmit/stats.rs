//! Transmit-engine counters: what `perf lock contention` and the seed's bpftrace histogram
//! showed, kept by the engine itself, and their public snapshot [`XmitStats`].
//!
//! Every counter is a relaxed atomic written off the per-packet fast path: sends by the runner
//! (one writer at a time), drops and contention only when they happen. The `xmit` latency
//! histogram times one call in [`LATENCY_SAMPLE_EVERY`] per thread (a clock read costs about
//! 25 ns on a VM, so timing every call would double the cost of a fast `xmit`), and is off
//! unless the queue was built with it.

use core::cell::Cell;
use core::fmt;

use crate::packet::DropReason;
use crate::sync::{AtomicU64, Ordering};

const BUCKETS: usize = 64;

/// A log2 histogram of nanoseconds (bucket `i` holds values in `[2^(i-1), 2^i)`, bucket 0 holds 0).
pub(crate) struct Log2Histogram {
    buckets: [AtomicU64; BUCKETS],
}

impl Log2Histogram {
    pub(crate) fn new() -> Self {
        Log2Histogram {
            buckets: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    #[inline]
    pub(crate) fn record(&self, ns: u64) {
        let i = (u64::BITS - ns.leading_zeros()) as usize;
        self.buckets[i.min(BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> [u64; BUCKETS] {
        core::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed))
    }
}

#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        // Under loom every call is the same model operation whatever `n` is: a lock wait timed
        // with the TSC can read 0 (a thread migrated between two unsynchronised counters), and a
        // model that skipped an operation on it would not replay deterministically.
        if n != 0 || cfg!(lockless_loom) {
            self.0.fetch_add(n, Ordering::Relaxed);
        }
    }
    /// Adds `n` for a counter only the run-role holder writes: a plain load and store, no
    /// locked instruction. The role's hand-over (root lock or seqlock, Acquire/Release) orders
    /// one runner's updates before the next one's, so none is lost.
    #[inline]
    pub(crate) fn add_by_runner(&self, n: u64) {
        if n != 0 {
            let v = self.0.load(Ordering::Relaxed);
            self.0.store(v + n, Ordering::Relaxed);
        }
    }

    #[inline]
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The latency histogram times one `xmit` call in this many, counted per thread, so its
/// counts are a systematic sample of the calls (multiply by this for totals).
pub const LATENCY_SAMPLE_EVERY: u32 = 16;

thread_local! {
    static XMIT_CALLS: Cell<u32> = const { Cell::new(0) };
}

/// Whether this thread's current `xmit` call is one the histogram times.
#[inline]
pub(crate) fn sample_this_call() -> bool {
    XMIT_CALLS.with(|c| {
        let n = c.get().wrapping_add(1);
        c.set(n);
        n % LATENCY_SAMPLE_EVERY == 0
    })
}

/// The live counters of a `TxQueue`.
pub(crate) struct XmitCounters {
    pub(crate) sent: Counter,
    pub(crate) sent_bytes: Counter,
    pub(crate) bypass: Counter,
    pub(crate) bypass_bytes: Counter,
    pub(crate) requeues: Counter,
    pub(crate) reschedules: Counter,
    pub(crate) drops: [Counter; DropReason::ALL.len()],
    pub(crate) root_contended: Counter,
    pub(crate) root_wait_ns: Counter,
    pub(crate) busylock_contended: Counter,
    pub(crate) busylock_wait_ns: Counter,
    pub(crate) helped_drains: Counter,
    pub(crate) overflow_waits: Counter,
    pub(crate) driver_stops: Counter,
    /// Enqueue calls into the qdisc (a batch is one) and the packets they offered; written
    /// under the root lock, whose hand-over orders them as the run role orders `sent`.
    pub(crate) enqueue_calls: Counter,
    pub(crate) enqueued: Counter,
    /// Driver calls that reached the driver (runner or bypass holder only).
    pub(crate) driver_calls: Counter,
    pub(crate) latency: Option<Log2Histogram>,
}

impl XmitCounters {
    pub(crate) fn new(latency: bool) -> Self {
        XmitCounters {
            sent: Counter::default(),
            sent_bytes: Counter::default(),
            bypass: Counter::default(),
            bypass_bytes: Counter::default(),
            requeues: Counter::default(),
            reschedules: Counter::default(),
            drops: Default::default(),
            root_contended: Counter::default(),
            root_wait_ns: Counter::default(),
            busylock_contended: Counter::default(),
            busylock_wait_ns: Counter::default(),
            helped_drains: Counter::default(),
            overflow_waits: Counter::default(),
            driver_stops: Counter::default(),
            enqueue_calls: Counter::default(),
            enqueued: Counter::default(),
            driver_calls: Counter::default(),
            latency: latency.then(Log2Histogram::new),
        }
    }

    pub(crate) fn add_drops(&self, counts: &[u64; DropReason::ALL.len()]) {
        for (c, &n) in self.drops.iter().zip(counts) {
            c.add(n);
        }
    }

    pub(crate) fn snapshot(&self, (root_bias_grants, root_bias_revokes): (u64, u64)) -> XmitStats {
        XmitStats {
            sent: self.sent.get(),
            sent_bytes: self.sent_bytes.get(),
            bypass: self.bypass.get(),
            bypass_bytes: self.bypass_bytes.get(),
            requeues: self.requeues.get(),
            reschedules: self.reschedules.get(),
            drops: core::array::from_fn(|i| self.drops[i].get()),
            root_contended: self.root_contended.get(),
            root_wait_ns: self.root_wait_ns.get(),
            busylock_contended: self.busylock_contended.get(),
            busylock_wait_ns: self.busylock_wait_ns.get(),
            helped_drains: self.helped_drains.get(),
            overflow_waits: self.overflow_waits.get(),
            driver_stops: self.driver_stops.get(),
            enqueue_calls: self.enqueue_calls.get(),
            enqueued: self.enqueued.get(),
            driver_calls: self.driver_calls.get(),
            root_bias_grants,
            root_bias_revokes,
            latency_ns: self.latency.as_ref().map(Log2Histogram::snapshot),
        }
    }
}

/// A snapshot of a transmit queue's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XmitStats {
    /// Packets the driver accepted.
    pub sent: u64,
    /// Bytes the driver accepted.
    pub sent_bytes: u64,
    /// Of `sent`, packets that bypassed the qdisc (sent directly by the caller).
    pub bypass: u64,
    /// Of `sent_bytes`, the bytes of the packets that bypassed the qdisc.
    pub bypass_bytes: u64,
    /// Packets the driver handed back (busy), requeued at the head.
    pub requeues: u64,
    /// Times a runner used up its quota with packets left (`__netif_schedule`).
    pub reschedules: u64,
    /// Drops per [`DropReason`] (index with [`DropReason::index`]), qdisc drops included.
    pub drops: [u64; DropReason::ALL.len()],
    /// Root-lock acquisitions that had to wait.
    pub root_contended: u64,
    /// Total time spent waiting for the root lock, ns.
    pub root_wait_ns: u64,
    /// Busylock acquisitions that had to wait (BusyLock strategy).
    pub busylock_contended: u64,
    /// Total time spent waiting for the busylock, ns.
    pub busylock_wait_ns: u64,
    /// Drains done by a pusher that saw the burst count high and helped.
    pub helped_drains: u64,
    /// Times a producer parked because the defer list was full (`Overflow::Wait`).
    pub overflow_waits: u64,
    /// Times the driver reported its queue stopped.
    pub driver_stops: u64,
    /// Calls into the qdisc's enqueue: one per packet, or one per batch
    /// ([`Qdisc::enqueue_batch`](crate::Qdisc::enqueue_batch), with `qdisc_batch` on).
    pub enqueue_calls: u64,
    /// Packets offered to the qdisc (bypassed packets are not).
    pub enqueued: u64,
    /// Calls into [`Driver::xmit`](crate::Driver::xmit) (`sent / driver_calls` is the mean
    /// batch the driver saw).
    pub driver_calls: u64,
    /// Times a thread that took the root lock alone, again and again, was lent it: its next
    /// acquisitions cost no locked instruction ([`TxQueueBuilder::biased_root`](crate::TxQueueBuilder::biased_root)).
    pub root_bias_grants: u64,
    /// Times another thread took the lent root lock back (a `membarrier` call each).
    pub root_bias_revokes: u64,
    /// Log2 histogram of `xmit` call latency in ns, if enabled: one call in
    /// [`LATENCY_SAMPLE_EVERY`] per thread is timed.
    pub latency_ns: Option<[u64; BUCKETS]>,
}

impl XmitStats {
    /// Every drop, all reasons.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Drops for one reason.
    pub fn drops_for(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }

    /// Writes the latency histogram in the bpftrace `hist()` shape; nothing if not enabled.
    pub fn fmt_histogram(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(h) = &self.latency_ns else {
            return Ok(());
        };
        let Some(first) = h.iter().position(|&n| n != 0) else {
            return writeln!(f, "@xmit_ns: (no samples)");
        };
        let last = h.iter().rposition(|&n| n != 0).unwrap_or(first);
        let max = h.iter().copied().max().unwrap_or(1).max(1);
        writeln!(f, "@xmit_ns (1 call in {LATENCY_SAMPLE_EVERY} timed):")?;
        for (i, &n) in h.iter().enumerate().take(last + 1).skip(first) {
            let (lo, hi) = if i == 0 {
                (0, 1)
            } else {
                (1u64 << (i - 1), 1u64 << i)
            };
            let bar = (n * 52).div_ceil(max) as usize;
            writeln!(
                f,
                "[{}, {}){:>w$} {:>8} |{:<52}|",
                human(lo),
                human(hi),
                "",
                n,
                "@".repeat(bar),
                w = 14usize.saturating_sub(human(lo).len() + human(hi).len() + 4)
            )?;
        }
        Ok(())
    }
}

fn human(ns: u64) -> String {
    match ns {
        n if n >= 1 << 30 => format!("{}G", n >> 30),
        n if n >= 1 << 20 => format!("{}M", n >> 20),
        n if n >= 1 << 10 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

impl fmt::Display for XmitStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "xmit: sent {} pkt {} bytes (bypass {}), requeues {}, reschedules {}, driver stops {}",
            self.sent,
            self.sent_bytes,
            self.bypass,
            self.requeues,
            self.reschedules,
            self.driver_stops
        )?;
        writeln!(
            f,
            "batches: {} packets in {} enqueue calls ({:.2} a call), {} packets in {} driver \
             calls ({:.2} a call)",
            self.enqueued,
            self.enqueue_calls,
            self.enqueued as f64 / self.enqueue_calls.max(1) as f64,
            self.sent,
            self.driver_calls,
            self.sent as f64 / self.driver_calls.max(1) as f64
        )?;
        write!(f, "drops: {}", self.dropped())?;
        for r in DropReason::ALL {
            if self.drops_for(r) != 0 {
                write!(f, " {}={}", r.name(), self.drops_for(r))?;
            }
        }
        writeln!(f)?;
        writeln!(
            f,
            "lock contention: root {} waits, {:.3} ms total; busylock {} waits, {:.3} ms total; \
             helped drains {}; overflow waits {}; root lent {} times, taken back {}",
            self.root_contended,
            self.root_wait_ns as f64 / 1e6,
            self.busylock_contended,
            self.busylock_wait_ns as f64 / 1e6,
            self.helped_drains,
            self.overflow_waits,
            self.root_bias_grants,
            self.root_bias_revokes
        )?;
        self.fmt_histogram(f)
    }
}

/// A cheap timestamp for the engine's own measurements (latency histogram, lock waits): the
/// TSC on x86_64, about 20 cycles where a clock read costs 50 ns or more on a VM; `Instant`
/// elsewhere. Converted to ns with a once-per-process calibration against `Instant`.
#[derive(Clone, Copy)]
pub(crate) struct Stamp(u64);

#[cfg(target_arch = "x86_64")]
impl Stamp {
    #[inline]
    pub(crate) fn now() -> Stamp {
        // SAFETY: RDTSC exists on every x86_64 CPU and only reads the time-stamp counter.
        Stamp(unsafe { core::arch::x86_64::_rdtsc() })
    }

    /// Nanoseconds since `self`.
    #[inline]
    pub(crate) fn elapsed_ns(self) -> u64 {
        let ticks = Stamp::now().0.saturating_sub(self.0);
        (ticks as f64 * ns_per_tick()) as u64
    }
}

/// Nanoseconds per TSC tick, measured once over a few milliseconds.
#[cfg(target_arch = "x86_64")]
fn ns_per_tick() -> f64 {
    static CAL: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *CAL.get_or_init(|| {
        let (t0, s0) = (std::time::Instant::now(), Stamp::now());
        while t0.elapsed() < std::time::Duration::from_millis(5) {
            core::hint::spin_loop();
        }
        let ticks = Stamp::now().0.saturating_sub(s0.0).max(1);
        t0.elapsed().as_nanos() as f64 / ticks as f64
    })
}

#[cfg(not(target_arch = "x86_64"))]
impl Stamp {
    #[inline]
    pub(crate) fn now() -> Stamp {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        Stamp(
            EPOCH
                .get_or_init(std::time::Instant::now)
                .elapsed()
                .as_nanos() as u64,
        )
    }

    #[inline]
    pub(crate) fn elapsed_ns(self) -> u64 {
        Stamp::now().0.saturating_sub(self.0)
    }
}

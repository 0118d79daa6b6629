//! Counters: per handle (plain integers, owner-only) and pool-wide (folded in when a handle is
//! dropped or publishes, plus frees by threads without a handle).

use crate::sync::{AtomicUsize, Ordering};

/// What one [`PoolHandle`](crate::PoolHandle) did. Frame counts, not batch counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandleStats {
    /// Frames allocated.
    pub allocs: u64,
    /// Frames freed on their owner's thread, into its cache.
    pub local_frees: u64,
    /// Frames this thread freed that belong to another owner (`deferred + overflow` once its
    /// batches are flushed).
    pub remote_frees: u64,
    /// Remote frees that went onto an owner's defer list.
    pub deferred: u64,
    /// Remote frees that took the overflow path (over `defer_max`, deferral disabled, or the
    /// owner gone).
    pub overflow: u64,
    /// Owner wakes this thread issued (kicks that won the pending flag).
    pub wakes: u64,
    /// Drains of this owner's own defer list that found frames.
    pub drains: u64,
    /// Frames taken back by those drains.
    pub drained: u64,
    /// Frames taken from the shared overflow list.
    pub overflow_taken: u64,
}

/// Pool-wide atomic totals.
#[derive(Debug)]
pub(crate) struct Totals {
    counters: [AtomicUsize; 9],
}

impl Totals {
    pub(crate) fn new() -> Self {
        Totals {
            counters: core::array::from_fn(|_| AtomicUsize::new(0)),
        }
    }

    pub(crate) fn fold(&self, s: &HandleStats) {
        let vals = [
            s.allocs,
            s.local_frees,
            s.remote_frees,
            s.deferred,
            s.overflow,
            s.wakes,
            s.drains,
            s.drained,
            s.overflow_taken,
        ];
        for (c, v) in self.counters.iter().zip(vals) {
            if v != 0 {
                c.fetch_add(v as usize, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn snapshot(&self) -> HandleStats {
        let v: [u64; 9] = core::array::from_fn(|i| self.counters[i].load(Ordering::Relaxed) as u64);
        HandleStats {
            allocs: v[0],
            local_frees: v[1],
            remote_frees: v[2],
            deferred: v[3],
            overflow: v[4],
            wakes: v[5],
            drains: v[6],
            drained: v[7],
            overflow_taken: v[8],
        }
    }
}

/// A snapshot of the whole pool ([`Pool::stats`](crate::Pool::stats)).
///
/// Frame states are read frame by frame, so under concurrent use they are approximate; at rest
/// `free + in_use + in_flight == frame_count` exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Frames in the region.
    pub frame_count: usize,
    /// Frames free: in an owner's or a CPU's cache, a defer list, an unflushed free batch, the
    /// overflow list or the depot ([`Pool::per_cpu_stats`](crate::Pool::per_cpu_stats) breaks
    /// down the per-CPU caches, the CPUs' defer lists and the depot).
    pub free: usize,
    /// Frames held by an [`Skb`](crate::Skb).
    pub in_use: usize,
    /// Frames handed to the kernel ([`Skb::into_addr`](crate::Skb::into_addr)) and not back.
    pub in_flight: usize,
    /// Live owner handles.
    pub owners: usize,
    /// Counters of dropped (or [published](crate::PoolHandle::publish_stats)) handles, plus
    /// frees by threads without a handle.
    pub totals: HandleStats,
}

impl PoolStats {
    /// Frames out of the pool: `in_use + in_flight`.
    pub fn outstanding(&self) -> usize {
        self.in_use + self.in_flight
    }
}

//! The per-CPU slow-path counters (one set per CPU, on that CPU's line) and the public snapshot
//! of caches, defer lists and counters, [`PerCpuStats`].
//!
//! This file only reads: it must not move a frame.

use super::{PerCpu, PerCpuState, RefillOrder};
use crate::sync::Counter;

/// What the slow paths did, for [`PerCpuStats`].
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) aborts: Counter,
    pub(super) shared: Counter,
    pub(super) refills: Counter,
    pub(super) drains: Counter,
    pub(super) flushes: Counter,
    pub(super) remote_frees: Counter,
    pub(super) sends: Counter,
    pub(super) exhausted: Counter,
    pub(super) exhausted_moving: Counter,
    pub(super) bulk_aborts: Counter,
    pub(super) takings: Counter,
}

/// A snapshot of one CPU's cache and defer list ([`PerCpuStats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuCacheStats {
    /// Frames in the CPU's cache.
    pub cached: usize,
    /// The CPU's defer count (frames deferred since its last drain; errs high after overflows).
    pub deferred: usize,
    /// Frames freed on this CPU waiting in its outgoing batch for another CPU.
    pub outgoing: usize,
    /// Whether its defer list holds frames.
    pub has_deferred: bool,
}

/// Per-CPU counters and frame locations ([`Pool::per_cpu_stats`](crate::Pool::per_cpu_stats)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerCpuStats {
    /// The implementation the pool got (never `Auto`).
    pub mode: PerCpu,
    /// The order refills hand frames out in ([`PoolBuilder::refill_order`]).
    ///
    /// [`PoolBuilder::refill_order`]: crate::PoolBuilder::refill_order
    pub refill_order: RefillOrder,
    /// Frames a CPU's cache holds at most.
    pub cache_cap: usize,
    /// One entry per CPU of the table.
    pub cpus: Vec<CpuCacheStats>,
    /// Frames in the shared depot.
    pub depot: usize,
    /// rseq critical sections the kernel aborted (preemption, migration, signal).
    pub aborts: u64,
    /// Of those, bulk sections ([`Pool::alloc_bulk`](crate::Pool::alloc_bulk),
    /// [`Pool::free_bulk`](crate::Pool::free_bulk)).
    pub bulk_aborts: u64,
    /// Allocations and frees that took the shared path (no cache for the thread at the time).
    pub shared_path: u64,
    /// Allocations that found their CPU's cache empty, or had no cache (the shared path),
    /// and looked for frames in the other sources.
    pub refills: u64,
    /// Defer-list drains into a CPU's cache after a kick.
    pub drains: u64,
    /// Half-cache flushes of a full cache to the depot.
    pub flushes: u64,
    /// Frames freed on a CPU other than their home (sent home through its defer list).
    pub remote_frees: u64,
    /// Batches of such frames pushed onto a home CPU's defer list.
    pub sends: u64,
    /// Refills that found every other source dry and took half the frames of another CPU's
    /// cache (in an rseq pool each such taking interrupts that CPU, if a thread of the process
    /// runs there).
    pub cache_takings: u64,
    /// Refills that found no frame in any source (the allocation fails with
    /// [`PoolError::Exhausted`](crate::PoolError::Exhausted), unless a locked cache's preempted
    /// holder then hands it one).
    pub exhausted: u64,
    /// Of those, refills that gave up while frames were still moving between the pool's places
    /// or a place stayed held by another thread (after 16 looks and 2 ms): frames may have been
    /// free, out of reach for that long.
    pub exhausted_moving: u64,
}

impl PerCpuState {
    /// One counter summed over every CPU's set.
    pub(super) fn sum(&self, which: impl Fn(&Counters) -> &Counter) -> u64 {
        self.counters.iter().map(|c| which(c).get()).sum()
    }

    /// The per-CPU snapshot (counts read without stopping anyone: approximate under load).
    pub(crate) fn stats(&self, depot: usize) -> PerCpuStats {
        PerCpuStats {
            mode: self.mode,
            refill_order: self.order,
            cache_cap: self.cap,
            cpus: self
                .slots
                .iter()
                .zip(self.out.iter())
                .enumerate()
                .map(|(cpu, (s, o))| CpuCacheStats {
                    cached: self.cached(cpu),
                    deferred: s.count(),
                    outgoing: o.len() + self.stacks.len_on(cpu),
                    has_deferred: !s.looks_empty(),
                })
                .collect(),
            depot,
            aborts: self.sum(|c| &c.aborts),
            bulk_aborts: self.sum(|c| &c.bulk_aborts),
            shared_path: self.sum(|c| &c.shared),
            refills: self.sum(|c| &c.refills),
            drains: self.sum(|c| &c.drains),
            flushes: self.sum(|c| &c.flushes),
            remote_frees: self.sum(|c| &c.remote_frees)
                + self.out.iter().map(|o| o.added()).sum::<u64>()
                + self.stacks.len() as u64,
            sends: self.sum(|c| &c.sends),
            cache_takings: self.sum(|c| &c.takings),
            exhausted: self.sum(|c| &c.exhausted),
            exhausted_moving: self.sum(|c| &c.exhausted_moving),
        }
    }
}

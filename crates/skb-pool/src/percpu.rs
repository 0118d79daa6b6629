//! Per-CPU frame caches: [`Pool::alloc`](crate::Pool::alloc) from any thread, no registration.
//!
//! Each CPU (of the affinity mask at build) has a cache — a stack of free frames and one 64-bit
//! word, the stack's count in the low 32 bits and the CPU's share of pool references in the high 32
//! — and a defer list (an [`OwnerSlot`](crate::remote::OwnerSlot), as a handle has). A thread
//! allocates from the cache of the CPU it runs on and stamps the frame with that home CPU. Dropping
//! the frame on its home CPU pushes it back there; on another CPU it goes onto the home CPU's defer
//! list (`skb_attempt_defer_free`, with the kick at half of `defer_max` through the CPU's
//! [`Wake`](crate::Wake)), which the next allocation on the home CPU drains when its cache is
//! dry, or when kicked and the cache is at most half full or has room for half of `defer_max`,
//! taking what the cache has room for (the newest batches stay on the list, still packed, for
//! the next drain or another CPU's probe, rather than spill into the depot). A kicked drain
//! puts the drained frames beneath those the cache still holds, which were freed before them.
//! Remote frees travel in batches, packed (`packed.rs`): the home CPU learns a batch's
//! addresses from a few metadata lines and pushes them into its cache with one critical
//! section, instead of walking a chain of frames another core wrote, one dependent miss a frame.
//! A batch gathers on the freeing CPU: in an rseq pool on that CPU's stack for the home CPU
//! (`outstack.rs`: one section a frame, like a local free), in a locked pool (or when a stack
//! is being taken) in the CPU's outgoing batch behind a try-lock (`outgoing.rs`). Every cache
//! operation is one critical section that commits with a single store of the word:
//!
//! - [`PerCpu::Rseq`]: a restartable sequence (`rseq.rs`), no lock and no atomic RMW; the
//!   allocation and free fast paths are that one section, inlined, everything else out of
//!   line, and [`Pool::alloc_bulk`](crate::Pool::alloc_bulk) /
//!   [`Pool::free_bulk`](crate::Pool::free_bulk) move up to [`Pool::BULK`](crate::Pool::BULK)
//!   frames per section;
//! - [`PerCpu::Locked`]: the CPU from `sched_getcpu`, the cache behind a try-lock that is
//!   uncontended unless its holder was preempted mid-operation; the thread that loses it takes
//!   the shared path instead of waiting. A bulk call moves up to [`Pool::BULK`](crate::Pool::BULK)
//!   frames per acquisition, as a refill or a kicked drain moves each batch it brings.
//!
//! The shared path — a CPU number past the table (a CPU that came online later), a thread
//! without an rseq area, a lost try-lock — takes frames from the shared sources and frees to the
//! overflow list, with an atomic pool reference. An allocation whose cache is dry refills from,
//! in order: its CPU's defer list, the overflow list, the depot (half a cache per batch), the
//! defer lists of other CPUs (so frames sent home to a CPU nobody allocates on any more are not
//! stranded; one probe per CPU per call), vacant owner slots, the outgoing batches and stacks
//! of every CPU (frames freed where nobody frees any more), and last the fullest other CPU's
//! cache, half of it (a *taking*: frames freed on a CPU nobody runs on any more are not
//! stranded either, so `Exhausted` means no frame sat free anywhere the allocation looked).
//! Frames from the defer list
//! and the depot go into the cache so that it hands them out in the order they were freed (or
//! sat in the depot): a frame freed here is pushed on top (its lines are hot here), but a
//! frame sent home is hot on another core, and keeping the order in which frames circulate
//! keeps a producer's frames at a fixed stride, which the hardware prefetcher follows. A push
//! to a full cache first flushes half of it to the depot (DPDK's hysteresis). A CPU's cache
//! holds at most `min(cache_max, frame_count / (2 × cpus))` frames, so the caches together
//! never hold more than half the pool, and takings, which interrupt the CPU taken from in an
//! rseq pool, stay rare.
//!
//! A taking holds the other CPU's cache as a lock would: in a locked pool by its try-lock; in
//! an rseq pool by the cache's flag byte, which every section on it checks at its start, set
//! before `membarrier(PRIVATE_EXPEDITED_RSEQ)` restarts the sections running on that CPU, so
//! that none commits on the cache until the taker clears the flag (see
//! [`take_cached`](crate::percpu::PerCpuState::take_cached)). A thread that finds its cache
//! held meanwhile takes the shared path.
//!
//! # References
//!
//! An allocated frame holds a pool reference, as with handles; here it is counted in the high half
//! of the word of the CPU that allocated it (and dropped from the word of the CPU that frees it),
//! so neither path touches a shared line. The sum over CPUs is the per-CPU share; the atomic count
//! carries a bias while a [`Pool`](crate::Pool) value exists. When the last one goes,
//! [`PerCpuState::freeze`](crate::percpu::PerCpuState::freeze) closes every cache (`dying` for
//! the locked ones, checked under their lock; the flag byte `FROZEN` for the rseq ones, checked
//! at every section's start), waits out every section in progress
//! (`membarrier(PRIVATE_EXPEDITED_RSEQ)` restarts them; for the locked caches, taking each lock
//! once), and folds the sum into the atomic count, which from then on counts every reference
//! exactly. Only the sum matters, modulo 2^32: a
//! frame counted on one CPU and released on another, or atomically, is fine.
//!
//! This file must not touch the owner handles' caches or the per-owner free path.

use core::fmt;
use core::ptr::NonNull;
use std::sync::PoisonError;

use crossbeam_utils::CachePadded;
use llist_defer::{Chain, Fifo};

use crate::meta::Frame;
use crate::outgoing::{Full, Outgoing};
use crate::outstack::{FROZEN, OutStacks, TAKING};
use crate::packed;
use crate::pool::PoolInner;
use crate::remote::{Deferred, Kick, OwnerSlot, Wake};
use crate::sync::{
    AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Counter, Ordering, current_cpu, thread,
};

/// Which per-CPU cache implementation a pool uses ([`PoolBuilder::per_cpu`]).
///
/// [`PoolBuilder::per_cpu`]: crate::PoolBuilder::per_cpu
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PerCpu {
    /// Restartable sequences (x86_64 Linux with rseq and `membarrier` RSEQ support).
    Rseq,
    /// `sched_getcpu` and a per-CPU try-lock: works everywhere.
    Locked,
    /// `Rseq` where available, else `Locked`; [`Pool::per_cpu`](crate::Pool::per_cpu) reports
    /// which one the pool got.
    Auto,
}

/// The order in which a per-CPU cache hands out the frames a refill or a kicked drain brings
/// home from its defer list ([`PoolBuilder::refill_order`]).
///
/// Frames circulate: each comes back and goes out again, so whatever order a refill gives them
/// lasts. Where several threads share a CPU's cache, the order decays lap after lap (a thread
/// that allocates, then waits with the frame in hand, puts it back among later ones), until the
/// frames come out in no order at all, and a consumer that reads them on another core loses the
/// hardware prefetcher, which follows a fixed stride.
///
/// [`PoolBuilder::refill_order`]: crate::PoolBuilder::refill_order
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RefillOrder {
    /// The order they were freed in, oldest first (the default). Costs nothing; the order
    /// decays as described above.
    #[default]
    Freed,
    /// Lowest address first: every refill and kicked drain sorts what it takes (a bitmap over
    /// the span of the frames' metadata entries, a few nanoseconds a frame), so the circulation
    /// is put back in address order at every lap. For pipelines whose consumer reads each
    /// frame's data on another core (the `skb_pool` bench's pipeline: up to 2.3x the rate with
    /// several producers per CPU, see BENCHMARKS.md). The transmit engine with a defer list
    /// can lose from it (a quarter to a third, on a machine whose cores share data quickly):
    /// its runner gets faster than its producers and drains smaller batches.
    Address,
}

/// Most CPUs a per-CPU table has (home CPUs are stamped in 15 bits).
pub const MAX_CPUS: usize = 0x7fff;

/// Owner stamp bit: the frame was allocated through the per-CPU caches.
pub(crate) const HOME_FLAG: u16 = 0x8000;
/// Owner stamp of a frame allocated through the shared path: it goes to the overflow list.
pub(crate) const NO_HOME: u16 = 0xffff;

const REF: u64 = 1 << 32;
/// Pop for an allocation: count − 1, references + 1.
const POP_ALLOC: u64 = REF - 1;
/// Push of a freed frame: count + 1, references − 1.
const PUSH_FREE: u64 = 1u64.wrapping_sub(REF);
/// Push of a frame that carries no reference (drained, refilled): count + 1.
const PUSH_SPARE: u64 = 1;
/// Pop of a frame to flush: count − 1.
const POP_SPARE: u64 = u64::MAX;
/// A remote free's reference, dropped on the freeing CPU.
const DROP_REF: u64 = 0u64.wrapping_sub(REF);
/// Frames a kicked drain lifts off the top of a cache to stash the drained ones beneath.
const LIFT_MAX: usize = 256;
/// Most frames one [`RefillOrder::Address`] drain sorts (a cache's room is at most
/// `cache_max + 1`; past this, the newer batches stay on the defer list for the next drain).
const SORT_MAX: usize = 512;

/// One CPU's cache: the commit word, the try-lock of `PerCpu::Locked`, the flag of
/// `PerCpu::Rseq`, and the stack.
struct CpuCache {
    /// Count of `items` in use (low 32 bits) | this CPU's reference share (high 32, wrapping).
    word: AtomicU64,
    lock: AtomicBool,
    /// [`TAKING`] (a thread on another CPU is taking frames) | [`FROZEN`] (the pool is being
    /// freed): the byte every rseq section on this cache checks at its start, on the word's line.
    flag: AtomicU8,
    /// Frame metadata addresses; only `[0, count)` is meaningful.
    items: Box<[AtomicUsize]>,
}

/// A cache operation.
#[derive(Clone, Copy)]
enum Op {
    Pop(u64),
    Push(usize, u64),
    Add(u64),
}

/// What a cache operation did.
enum Res {
    /// Committed on this CPU (the popped item, 0 for push and add).
    Done(usize, u32),
    /// The cache was empty (pop) or full (push).
    Refused(u32),
    /// Not running on the CPU the operation was for.
    NotHere,
    /// No cache for this thread now: take the shared path.
    NoCache,
}

/// The per-CPU half of a pool.
pub(crate) struct PerCpuState {
    mode: PerCpu,
    order: RefillOrder,
    cap: usize,
    caches: Box<[CachePadded<CpuCache>]>,
    pub(crate) slots: Box<[OwnerSlot]>,
    /// Each CPU's outgoing batch of remote frees (locked pools, and frees that find a stack
    /// being taken).
    out: Box<[CachePadded<Outgoing>]>,
    /// The outgoing stacks of an rseq pool: one section per remote free (`outstack.rs`).
    stacks: OutStacks,
    dying: CachePadded<AtomicBool>,
    /// Slow-path counters ([`PerCpuStats`]), one set per CPU and one for threads past the
    /// table: a thread counts on its CPU's line, so counting costs no cross-core transfer
    /// (one shared set bounced between the allocating and the freeing core at every refill
    /// and every batch sent home).
    counters: Box<[CachePadded<Counters>]>,
}

/// What the slow paths did, for [`PerCpuStats`].
#[derive(Debug, Default)]
struct Counters {
    aborts: Counter,
    shared: Counter,
    refills: Counter,
    drains: Counter,
    flushes: Counter,
    remote_frees: Counter,
    sends: Counter,
    exhausted: Counter,
    bulk_aborts: Counter,
    takings: Counter,
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
    /// Allocations that found their CPU's cache empty and refilled it.
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
}

/// The CPUs of the calling thread's affinity mask: the highest + 1, at least 1.
pub(crate) fn cpus_from_affinity() -> usize {
    #[cfg(not(lockless_loom))]
    {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
        let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
        // SAFETY: pid 0 is the calling thread; the size is the set's.
        let rc = unsafe {
            libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set)
        };
        if rc != 0 {
            return std::thread::available_parallelism().map_or(1, usize::from);
        }
        let max = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: reading a bit of an initialised set, index below CPU_SETSIZE.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .max();
        max.map_or(1, |m| m + 1)
    }
    #[cfg(lockless_loom)]
    {
        1
    }
}

/// Resolves the requested mode to what this process can have.
pub(crate) fn resolve(want: PerCpu) -> Result<PerCpu, &'static str> {
    let rseq = rseq_usable();
    match (want, rseq) {
        (PerCpu::Locked, _) => Ok(PerCpu::Locked),
        (PerCpu::Rseq | PerCpu::Auto, Ok(())) => Ok(PerCpu::Rseq),
        (PerCpu::Auto, Err(_)) => Ok(PerCpu::Locked),
        (PerCpu::Rseq, Err(why)) => Err(why),
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
fn rseq_usable() -> Result<(), &'static str> {
    if crate::rseq::area().is_none() {
        return Err("the kernel refused to register an rseq area for this thread (Linux < 4.18?)");
    }
    if !crate::rseq::register_membarrier() {
        return Err(
            "membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ) failed (Linux < 5.10?)",
        );
    }
    Ok(())
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
fn rseq_usable() -> Result<(), &'static str> {
    Err("this build has no rseq critical sections (x86_64 Linux only, and not under loom)")
}

impl PerCpuState {
    pub(crate) fn new(
        mode: PerCpu,
        order: RefillOrder,
        cpus: usize,
        cap: usize,
        batch: usize,
        wake: Option<Wake>,
    ) -> PerCpuState {
        let caches = (0..cpus)
            .map(|_| {
                CachePadded::new(CpuCache {
                    word: AtomicU64::new(0),
                    lock: AtomicBool::new(false),
                    flag: AtomicU8::new(0),
                    items: (0..cap).map(|_| AtomicUsize::new(0)).collect(),
                })
            })
            .collect();
        let slots = (0..cpus)
            .map(|_| OwnerSlot::new_for_cpu(wake.clone()))
            .collect();
        PerCpuState {
            mode,
            order,
            cap,
            caches,
            slots,
            out: (0..cpus)
                .map(|_| CachePadded::new(Outgoing::new(batch)))
                .collect(),
            stacks: OutStacks::new(cpus, batch.min(packed::MAX_PACK), mode == PerCpu::Rseq),
            dying: CachePadded::new(AtomicBool::new(false)),
            counters: (0..=cpus)
                .map(|_| CachePadded::new(Counters::default()))
                .collect(),
        }
    }

    pub(crate) fn mode(&self) -> PerCpu {
        self.mode
    }

    /// Runs `op` on the cache of the CPU the thread is on (if `want` is set, only if that is
    /// CPU `want`). Always inlined: `op` is a constant at every call site, so each use
    /// compiles to its one section.
    #[inline(always)]
    fn run(&self, want: Option<u32>, op: Op) -> Res {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
        if self.mode == PerCpu::Rseq {
            return self.run_rseq(want, op);
        }
        self.run_locked(want, op, false)
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[inline(always)]
    fn run_rseq(&self, want: Option<u32>, op: Op) -> Res {
        use crate::rseq::{self, Status};
        let Some(area) = rseq::area() else {
            return Res::NoCache;
        };
        loop {
            let cpu = rseq::cpu(area);
            if want.is_some_and(|w| w != cpu) {
                return Res::NotHere;
            }
            let Some(c) = self.caches.get(cpu as usize) else {
                return Res::NoCache;
            };
            let cache = rseq::CacheRef {
                word: c.word.as_ptr(),
                items: c.items.as_ptr().cast::<usize>().cast_mut(),
                cap: self.cap as u64,
                flag: c.flag.as_ptr().cast_const(),
            };
            // SAFETY: `area` is this thread's registered area; the word, the items (`cap` of
            // them) and the flag live as long as the pool, which the caller's reference keeps
            // alive; in an Rseq pool only these sections, on CPU `cpu`, write them (and a
            // taker, only once it flagged the cache and restarted them).
            let (st, item) = unsafe {
                match op {
                    Op::Pop(d) => rseq::pop(area, cpu, cache, d),
                    Op::Push(it, d) => (rseq::push(area, cpu, cache, it, d), 0),
                    Op::Add(d) => (rseq::add(area, cpu, cache, d), 0),
                }
            };
            match st {
                Status::Done => return Res::Done(item, cpu),
                Status::Refused => return Res::Refused(cpu),
                Status::Flagged => return Res::NoCache,
                Status::WrongCpu => {}
                Status::Abort => self.counters_at(cpu as usize).aborts.add(1),
            }
        }
    }

    /// One rseq attempt of `op` on the current CPU's cache, for the inlined fast paths:
    /// `Some` if it committed (the popped item, 0 for push, and the CPU), `None` for everything
    /// else — a `Locked` pool, no area, not on CPU `want`, a CPU past the table, an empty or
    /// full cache, a flagged cache (a taker holds it, or the pool is dying), an abort
    /// (counted) — after which the caller takes the full
    /// path ([`run`](Self::run), out of line), which starts over: an attempt that did not
    /// commit left no trace. Kept to the rseq section alone so that it inlines into callers'
    /// loops.
    #[inline(always)]
    fn try_fast(&self, want: Option<u32>, op: Op) -> Result<(usize, u32), Option<u32>> {
        if self.mode != PerCpu::Rseq {
            return Err(None);
        }
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
        {
            use crate::rseq::{self, Status};
            let area = rseq::area().ok_or(None)?;
            let cpu = rseq::cpu(area);
            if want.is_some_and(|w| w != cpu) {
                return Err(Some(cpu));
            }
            let cache = self.cache_ref(cpu).ok_or(None)?;
            // SAFETY: as in `run_rseq`: `area` is this thread's registered area; the word, the
            // items (`cap` of them) and the flag live as long as the pool, which the caller's
            // reference keeps alive; in an Rseq pool only these sections, on CPU `cpu`, write
            // them (and a taker, only once it flagged the cache and restarted them).
            let (st, item) = unsafe {
                match op {
                    Op::Pop(d) => rseq::pop(area, cpu, cache, d),
                    Op::Push(it, d) => (rseq::push(area, cpu, cache, it, d), 0),
                    Op::Add(d) => (rseq::add(area, cpu, cache, d), 0),
                }
            };
            if st == Status::Done {
                return Ok((item, cpu));
            }
            if st == Status::Abort {
                self.count_abort();
            }
            Err(None)
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
        {
            let _ = (want, op);
            Err(None)
        }
    }

    /// CPU `cpu`'s cache as the rseq sections see it, if the table has the CPU.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[inline(always)]
    fn cache_ref(&self, cpu: u32) -> Option<crate::rseq::CacheRef> {
        let c = self.caches.get(cpu as usize)?;
        Some(crate::rseq::CacheRef {
            word: c.word.as_ptr(),
            items: c.items.as_ptr().cast::<usize>().cast_mut(),
            cap: self.cap as u64,
            flag: c.flag.as_ptr().cast_const(),
        })
    }

    /// Frames in CPU `cpu`'s cache now (a snapshot; 0 past the table).
    fn cached(&self, cpu: usize) -> usize {
        self.caches
            .get(cpu)
            .map_or(0, |c| c.word.load(Ordering::Relaxed) as u32 as usize)
    }

    /// Takes half the frames (rounded up) of the fullest cache of a CPU other than `here` that
    /// it can hold (fullest first, by a snapshot of their counts), for a refill that found every
    /// other source dry: the frames a CPU's cache holds are otherwise handed out only on that
    /// CPU, and a CPU nobody runs on any more would keep them for good. The oldest half goes
    /// (the bottom of the stack: the frames that CPU would hand out last, and the coldest
    /// there). The frames carry no references (those went to the cache's share when they were
    /// freed, and stay there). A cache is skipped while it is held: by its try-lock (locked
    /// pools), or by its flag, for another taker or the pool's freeze (rseq pools).
    ///
    /// An rseq pool's cache is written without a lock, by sections that run only on its CPU: the
    /// taker sets the cache's flag, which every section checks at its start, then restarts the
    /// sections running on that CPU (`membarrier`; a section whose thread is not running there
    /// restarts when it next runs), so that no section commits on the cache until the flag is
    /// cleared, and the word and items are the taker's to read and rewrite. The restart costs an
    /// interrupt to that CPU if a thread of the process runs there (to every such CPU where the
    /// kernel cannot target one), and each taking brings half a cache.
    #[cold]
    #[inline(never)]
    fn take_cached(&self, here: usize) -> Fifo<Frame> {
        let mut taken = Fifo::new();
        let mut candidates: Vec<(usize, usize)> = (0..self.caches.len())
            .filter(|&cpu| cpu != here)
            .map(|cpu| (self.cached(cpu), cpu))
            .filter(|&(n, _)| n > 0)
            .collect();
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        for (_, cpu) in candidates {
            self.take_from(cpu, &mut taken);
            if !taken.is_empty() {
                self.counters_at(here).takings.add(1);
                break;
            }
        }
        taken
    }

    /// Takes half of CPU `cpu`'s cache into `out` if it can hold the cache (see
    /// [`take_cached`](Self::take_cached)).
    fn take_from(&self, cpu: usize, out: &mut Fifo<Frame>) {
        let c = &self.caches[cpu];
        match self.mode {
            PerCpu::Rseq => {
                // The flag before the restart's barrier (SeqCst); takers exclude each other, and a
                // frozen cache stays closed (the exchange fails on any bit set).
                if c.flag
                    .compare_exchange(0, TAKING, Ordering::SeqCst, Ordering::Relaxed)
                    .is_err()
                {
                    return;
                }
                if restart_sections_on(cpu as u32) {
                    self.take_half(c, out);
                }
                // Release: the next section on this cache sees it as we left it.
                c.flag.fetch_and(!TAKING, Ordering::Release);
            }
            PerCpu::Locked | PerCpu::Auto => {
                // A holder (preempted mid-operation, or running there now) is not waited for.
                if self.lock_cache(c, false) {
                    self.take_half(c, out);
                    // Release: the cache's next holder sees it as we left it.
                    c.lock.store(false, Ordering::Release);
                }
            }
        }
    }

    /// Moves the bottom half (rounded up) of cache `c` into `out`, oldest first, and the rest
    /// down in its place. The caller holds the cache: its try-lock, or its flag with every
    /// section on its CPU restarted since.
    fn take_half(&self, c: &CpuCache, out: &mut Fifo<Frame>) {
        let w = c.word.load(Ordering::Acquire);
        let n = (w as u32 as usize).min(self.cap);
        let k = n.div_ceil(2);
        for item in &c.items[..k] {
            // SAFETY: a cache holds only metadata addresses of this pool's free frames, each
            // once, below its count; these leave it with the store below.
            out.push_back(unsafe { Frame::from_addr(item.load(Ordering::Relaxed)) });
        }
        for i in k..n {
            c.items[i - k].store(c.items[i].load(Ordering::Relaxed), Ordering::Relaxed);
        }
        // Only the count changes: the reference share in the high half stays the CPU's.
        c.word.store(w - k as u64, Ordering::Relaxed);
    }

    /// Waits while a taker holds this CPU's cache (rseq pools; one `membarrier` at most) and
    /// says whether the cache is worth another try: the thread has a cache in the table, and
    /// the pool is not being frozen.
    #[cold]
    fn wait_untaken(&self) -> bool {
        let Some(c) = self.cpu_now().and_then(|cpu| self.caches.get(cpu as usize)) else {
            return false;
        };
        loop {
            match c.flag.load(Ordering::Acquire) {
                0 => return true,
                TAKING => thread::yield_now(),
                _ => return false,
            }
        }
    }

    /// One bulk pop on the current CPU's cache: `Some((k, cpu))` with the `k ≥ 1` items in
    /// `out[..k]` (the top `k`, the top one last), each carrying a reference; `None` if nothing
    /// committed (an abort is counted, a busy try-lock is not waited for), and the caller
    /// allocates one frame the ordinary way.
    #[inline]
    fn try_pop_bulk(&self, out: &mut [usize]) -> Option<(usize, u32)> {
        if self.mode == PerCpu::Locked {
            if out.is_empty() {
                return None;
            }
            let (k, cpu) = self.locked_bulk(None, |c, w| {
                let count = w as u32 as usize;
                let k = out.len().min(count);
                for (o, item) in out.iter_mut().zip(&c.items[count - k..count]) {
                    *o = item.load(Ordering::Relaxed);
                }
                let k64 = k as u64;
                (w.wrapping_add(k64 * REF).wrapping_sub(k64), k)
            })?;
            return (k > 0).then_some((k, cpu));
        }
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
        {
            use crate::rseq::{self, Status};
            if self.mode != PerCpu::Rseq || out.is_empty() {
                return None;
            }
            let area = rseq::area()?;
            let cpu = rseq::cpu(area);
            let cache = self.cache_ref(cpu)?;
            // SAFETY: as in `try_fast`; `out` is ours, valid for `out.len()` writes.
            let (st, k) = unsafe { rseq::pop_bulk(area, cpu, cache, out.as_mut_ptr(), out.len()) };
            match st {
                Status::Done => return Some((k, cpu)),
                Status::Abort => self.count_bulk_abort(),
                Status::WrongCpu | Status::Flagged | Status::Refused => {}
            }
            None
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
        {
            let _ = out;
            None
        }
    }

    /// Pushes free frames onto the cache of the CPU the thread runs on, the last one on top,
    /// each changing the word by `per` (as [`try_push_bulk`](Self::try_push_bulk)): one bulk
    /// section where it can, then one section a frame until the cache refuses (full, or no
    /// cache for the thread). Returns how many went (the first ones).
    fn push_all(&self, items: &[usize], per: u64) -> usize {
        let mut pushed = self.try_push_bulk(None, items, per);
        while pushed < items.len() {
            match self.run(None, Op::Push(items[pushed], per)) {
                Res::Done(..) => pushed += 1,
                Res::Refused(_) | Res::NotHere | Res::NoCache => break,
            }
        }
        pushed
    }

    /// One bulk push of free frames onto the cache of the CPU the thread runs on (only if
    /// that is `want`, when set), each changing the word by `per` ([`PUSH_FREE`] for frames
    /// that give back a reference, [`PUSH_SPARE`] for frames that carry none): how many went
    /// (the first ones, the last of them on top), 0 if none did (a busy try-lock is not waited
    /// for).
    #[inline]
    fn try_push_bulk(&self, want: Option<u32>, items: &[usize], per: u64) -> usize {
        if self.mode == PerCpu::Locked {
            if items.is_empty() {
                return 0;
            }
            let pushed = self.locked_bulk(want, |c, w| {
                let count = w as u32 as usize;
                let k = items.len().min(self.cap.saturating_sub(count));
                for (slot, &item) in c.items[count..count + k].iter().zip(items) {
                    slot.store(item, Ordering::Relaxed);
                }
                (w.wrapping_add(per.wrapping_mul(k as u64)), k)
            });
            return pushed.map_or(0, |(k, _)| k);
        }
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
        {
            use crate::rseq::{self, Status};
            if self.mode != PerCpu::Rseq || items.is_empty() {
                return 0;
            }
            let Some(area) = rseq::area() else { return 0 };
            let cpu = rseq::cpu(area);
            if want.is_some_and(|w| w != cpu) {
                return 0;
            }
            let Some(cache) = self.cache_ref(cpu) else {
                return 0;
            };
            // SAFETY: as in `try_fast`; `items` is valid for `items.len()` reads.
            let (st, k) =
                unsafe { rseq::push_bulk(area, cpu, cache, items.as_ptr(), items.len(), per) };
            if st == Status::Abort {
                self.count_bulk_abort();
            }
            k
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
        {
            let _ = (want, items, per);
            0
        }
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[cold]
    #[inline(never)]
    fn count_abort(&self) {
        self.counters().aborts.add(1);
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[cold]
    #[inline(never)]
    fn count_bulk_abort(&self) {
        let c = self.counters();
        c.aborts.add(1);
        c.bulk_aborts.add(1);
    }

    /// The counters of CPU `cpu` (those past the table for a CPU past it).
    #[inline]
    fn counters_at(&self, cpu: usize) -> &Counters {
        &self.counters[cpu.min(self.counters.len() - 1)]
    }

    /// The counters of the CPU the calling thread runs on.
    #[inline]
    fn counters(&self) -> &Counters {
        self.counters_at(self.cpu_now().map_or(usize::MAX, |c| c as usize))
    }

    /// The CPU the calling thread runs on, as this pool's mode reads it.
    fn cpu_now(&self) -> Option<u32> {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
        if self.mode == PerCpu::Rseq {
            return crate::rseq::area().map(crate::rseq::cpu);
        }
        current_cpu()
    }

    /// Runs `op` on the locked cache of the CPU the thread runs on (only if that is `want`,
    /// when set; `Err(NotHere)` else): `op` gets the cache and its word and returns the word to
    /// commit (`None`: leave it) and its result, with the CPU. `Err(NoCache)` if there is no
    /// cache for the thread, the try-lock is busy and `wait` is not set (with `wait` it is
    /// waited for, yielding), or the pool is dying. After the commit the pool may be gone (if
    /// it gave back the last references): nothing here touches it after the unlock.
    fn with_locked<R>(
        &self,
        want: Option<u32>,
        wait: bool,
        op: impl FnOnce(&CpuCache, u64) -> (Option<u64>, R),
    ) -> Result<(R, u32), Res> {
        let cpu = current_cpu().ok_or(Res::NoCache)?;
        if want.is_some_and(|w| w != cpu) {
            return Err(Res::NotHere);
        }
        let c = self.caches.get(cpu as usize).ok_or(Res::NoCache)?;
        if !self.lock_cache(c, wait) {
            return Err(Res::NoCache);
        }
        let (w, r) = op(c, c.word.load(Ordering::Relaxed));
        if let Some(w) = w {
            c.word.store(w, Ordering::Relaxed);
        }
        // Release: the next holder (and `freeze`) sees our writes.
        c.lock.store(false, Ordering::Release);
        Ok((r, cpu))
    }

    /// Takes cache `c`'s try-lock (waiting for it, yielding, if `wait`) unless the pool is
    /// dying; `false` if it did not (then the lock is not held).
    fn lock_cache(&self, c: &CpuCache, wait: bool) -> bool {
        // Acquire: the previous holder's stack and word writes are visible.
        while c
            .lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if !wait {
                return false;
            }
            thread::yield_now();
        }
        // Relaxed: `freeze` stores `dying` before it takes each lock, so a holder that took the
        // lock after it sees the flag, and one that took it before is waited for.
        if self.dying.load(Ordering::Relaxed) {
            c.lock.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// One bulk operation on the locked cache of the CPU the thread runs on (see
    /// [`with_locked`](Self::with_locked); a busy try-lock is not waited for): `op` returns the
    /// word to commit and its result.
    fn locked_bulk<R>(
        &self,
        want: Option<u32>,
        op: impl FnOnce(&CpuCache, u64) -> (u64, R),
    ) -> Option<(R, u32)> {
        self.with_locked(want, false, |c, w| {
            let (w, r) = op(c, w);
            (Some(w), r)
        })
        .ok()
    }

    /// The locked section; with `wait`, a busy lock is waited for (yielding) instead of
    /// refused.
    fn run_locked(&self, want: Option<u32>, op: Op, wait: bool) -> Res {
        let cap = self.cap;
        let done = self.with_locked(want, wait, |c, w| {
            let count = w as u32 as usize;
            match op {
                Op::Pop(d) if count > 0 => (
                    Some(w.wrapping_add(d)),
                    Some(c.items[count - 1].load(Ordering::Relaxed)),
                ),
                Op::Push(it, d) if count < cap => {
                    c.items[count].store(it, Ordering::Relaxed);
                    (Some(w.wrapping_add(d)), Some(0))
                }
                Op::Add(d) => (Some(w.wrapping_add(d)), Some(0)),
                Op::Pop(_) | Op::Push(..) => (None, None),
            }
        });
        match done {
            Ok((Some(item), cpu)) => Res::Done(item, cpu),
            Ok((None, cpu)) => Res::Refused(cpu),
            Err(res) => res,
        }
    }

    /// Freezes the per-CPU reference shares (the last `Pool` value is gone) and returns their
    /// sum modulo 2^32, or `None` if the sections in progress could not be waited out (then the
    /// pool is leaked rather than freed under a running section).
    pub(crate) fn freeze(&self) -> Option<u32> {
        self.dying.store(true, Ordering::SeqCst);
        for c in self.caches.iter() {
            c.flag.fetch_or(FROZEN, Ordering::SeqCst);
        }
        self.stacks.freeze();
        match self.mode {
            PerCpu::Rseq =>
            {
                #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
                if !crate::rseq::membarrier_rseq() {
                    return None;
                }
            }
            PerCpu::Locked | PerCpu::Auto => {
                for c in self.caches.iter() {
                    while c
                        .lock
                        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                    {
                        thread::yield_now();
                    }
                    c.lock.store(false, Ordering::Release);
                }
            }
        }
        Some(
            self.caches
                .iter()
                .map(|c| (c.word.load(Ordering::Acquire) >> 32) as u32)
                .fold(self.stacks.shares(), u32::wrapping_add),
        )
    }

    /// One counter summed over every CPU's set.
    fn sum(&self, which: impl Fn(&Counters) -> &Counter) -> u64 {
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
        }
    }
}

impl fmt::Debug for PerCpuState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerCpuState")
            .field("mode", &self.mode)
            .field("cpus", &self.caches.len())
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

fn home_stamp(cpu: u32) -> u16 {
    HOME_FLAG | cpu as u16
}

impl PoolInner {
    /// `Pool::alloc`: a frame from this CPU's cache, else refilled, else the shared path.
    /// The frame is stamped, in use, and carries one pool reference.
    #[inline(always)]
    pub(crate) fn percpu_alloc(&self) -> Option<Frame> {
        let pc = &self.percpu;
        if let Ok((item, cpu)) = pc.try_fast(None, Op::Pop(POP_ALLOC)) {
            // SAFETY: the caches hold only addresses of this pool's metadata entries.
            let frame = unsafe { Frame::from_addr(item) };
            // `try_fast` committed on CPU `cpu`, so it has a slot.
            if pc.slots[cpu as usize].is_pending() {
                self.drain_cpu(cpu as usize);
            }
            frame.init(home_stamp(cpu), self.cfg.headroom);
            return Some(frame);
        }
        self.percpu_alloc_slow()
    }

    /// `Pool::alloc_bulk`'s fast path: up to `out.len()` frames from this CPU's cache with one
    /// critical section, each stamped, in use and carrying one pool reference, their metadata
    /// addresses in `out[..k]`; returns `k`, 0 when the caller must allocate one frame the
    /// ordinary way (an empty cache, a busy try-lock, an abort).
    #[inline]
    pub(crate) fn percpu_alloc_bulk(&self, out: &mut [usize]) -> usize {
        let pc = &self.percpu;
        let Some((k, cpu)) = pc.try_pop_bulk(out) else {
            return 0;
        };
        if pc.slots[cpu as usize].is_pending() {
            self.drain_cpu(cpu as usize);
        }
        for &item in &out[..k] {
            // SAFETY: the caches hold only addresses of this pool's metadata entries.
            let frame = unsafe { Frame::from_addr(item) };
            frame.init(home_stamp(cpu), self.cfg.headroom);
        }
        k
    }

    /// `Pool::free_bulk`'s fast path: frees `frames` (in-use frames of this pool, all stamped
    /// home CPU `home` by [`percpu_alloc`](Self::percpu_alloc), each carrying a reference)
    /// into `home`'s cache with one critical section if the thread runs there; returns how
    /// many went (the first ones, already marked free). The caller frees the rest one by one.
    ///
    /// # Safety
    ///
    /// Each address in `frames` is an exclusively held in-use frame of this pool, stamped with
    /// home `home`, carrying one reference, and given up by the caller.
    #[inline]
    pub(crate) unsafe fn percpu_free_bulk(&self, home: u32, frames: &[usize]) -> usize {
        for &f in frames {
            // SAFETY: the caller's contract: a frame of this pool.
            unsafe { Frame::from_addr(f) }.set_free();
        }
        // The references go with the commit; the frames not pushed keep the pool alive, and if
        // all went, nothing touches it after the commit.
        self.percpu.try_push_bulk(Some(home), frames, PUSH_FREE)
    }

    /// Takes the pool reference of a frame handed out past the caches: into this CPU's share
    /// (a section on a line of this CPU's), so that refills on different cores do not pass the
    /// atomic count's line between them; the atomic count if there is no cache for the thread.
    fn take_ref(&self) {
        match self.percpu.run(None, Op::Add(REF)) {
            Res::Done(..) => {}
            Res::Refused(_) | Res::NotHere | Res::NoCache => self.acquire(1),
        }
    }

    /// Moves CPU `cpu`'s kicked defer list into its cache (`skb_defer_free_flush`), once the
    /// cache is at most half full or has room for the half of `defer_max` that kicked it:
    /// until then the kick stays pending and the next allocation on `cpu` looks again (a full
    /// cache would take nothing, put the list back and be kicked again by the next remote
    /// free). Waiting for half a cache alone let a list that would fit grow past `defer_max`,
    /// and the frames past it go to the shared overflow list, out of the order the home hands
    /// its frames out in. The list's own count is not read here: the freers write its line at
    /// every send, and this runs at every allocation while a kick waits.
    #[cold]
    #[inline(never)]
    fn drain_cpu(&self, cpu: usize) {
        let pc = &self.percpu;
        let cached = pc.cached(cpu);
        if cached > pc.cap / 2 && cached + self.cfg.defer_max / 2 > pc.cap {
            return;
        }
        pc.counters_at(cpu).drains.add(1);
        // The frames still cached were freed before those on the defer list, so they must be
        // handed out first (see `refill`): lift them off, stash the drained frames beneath,
        // and put them back on top in the order they had. Stashed on top instead, every kick
        // would permute the circulation for good (frames come back in the order they left),
        // and a pool whose frames come in no order loses the hardware prefetcher (the
        // skb_pool bench's shuffled bound).
        let mut lifted = [0usize; LIFT_MAX];
        let k = self.lift(cpu, &mut lifted);
        self.stash_drained(cpu, false, k);
        self.put_back_lifted(&lifted[..k]);
    }

    /// Pops up to `LIFT_MAX` frames off the top of CPU `cpu`'s cache into `out`, the top one
    /// last, each carrying a reference (as an allocation's); returns how many, 0 if the
    /// thread no longer runs on `cpu`.
    fn lift(&self, cpu: usize, out: &mut [usize; LIFT_MAX]) -> usize {
        let pc = &self.percpu;
        match pc.try_pop_bulk(out) {
            Some((k, on)) if on as usize == cpu => return k,
            Some((k, _)) => {
                // Migrated since the allocation: back where they came from.
                self.put_back_lifted(&out[..k]);
                return 0;
            }
            None if pc.mode == PerCpu::Rseq => return 0,
            // A locked cache that was empty, or whose try-lock was busy: one by one, waiting
            // for nothing.
            None => {}
        }
        let mut k = 0;
        while k < LIFT_MAX {
            match pc.run(Some(cpu as u32), Op::Pop(POP_ALLOC)) {
                Res::Done(item, _) => out[k] = item,
                Res::Refused(_) | Res::NotHere | Res::NoCache => break,
            }
            k += 1;
        }
        out[..k].reverse();
        k
    }

    /// Pushes frames [`lift`](Self::lift)ed off a cache (free, each carrying a reference)
    /// back onto the cache of the CPU the thread runs on, the last one on top; what does not
    /// fit goes to [`stash`](Self::stash), its references given up.
    fn put_back_lifted(&self, frames: &[usize]) {
        let rest = &frames[self.percpu.push_all(frames, PUSH_FREE)..];
        if rest.is_empty() {
            return;
        }
        self.stash(
            rest.iter()
                // SAFETY: addresses of this pool's free frames, lifted off a cache, each once.
                .map(|&a| unsafe { Frame::from_addr(a) })
                .collect(),
        );
        // SAFETY: the references the pops gave them are ours to drop; the caller's `Pool`
        // holds another, so they are not the last and the pool stays alive.
        unsafe { PoolInner::drop_refs(NonNull::from(self), rest.len()) };
    }

    /// Drains CPU `cpu`'s defer list into this CPU's cache: the newest batches beyond the
    /// cache's room go back on the list still packed (for the next drain, or another CPU's
    /// probe) instead of overflowing the cache into the depot, where they would wait as chains
    /// that take one dependent miss a frame to walk. The rest is stashed newest batch first, so
    /// that the oldest frame freed ends on top (see `refill`), or, in [`RefillOrder::Address`],
    /// lowest address on top; with `keep_last`, the oldest batch is always taken and its oldest
    /// (or lowest) frame returned instead of stashed. `reserve` frames' room is kept free
    /// (frames lifted off the cache, to be put back on top).
    fn stash_drained(&self, cpu: usize, keep_last: bool, reserve: usize) -> Option<Frame> {
        if self.percpu.order == RefillOrder::Address {
            let (mut gathered, mut n) = ([0usize; SORT_MAX], 0);
            self.take_drained(cpu, keep_last, reserve, SORT_MAX, |head, _| {
                let mut one = [0usize; packed::MAX_PACK];
                // SAFETY: `take_drained` hands over packed heads of this pool, taken whole.
                let k = unsafe { packed::unpack(head, &mut one) };
                gathered[n..n + k].copy_from_slice(&one[..k]);
                n += k;
                None
            });
            return self.stash_sorted(&mut gathered[..n], keep_last);
        }
        self.take_drained(cpu, keep_last, reserve, usize::MAX, |head, keep| {
            // SAFETY: `take_drained` hands over packed heads of this pool, taken whole.
            unsafe { self.stash_packed(head, keep) }
        })
    }

    /// [`stash_drained`](Self::stash_drained)'s take: empties CPU `cpu`'s defer list and hands
    /// the packed heads that fit (the cache's room less `reserve`, at most `limit` frames) to
    /// `each`, newest first, with `true` for the last one if `keep_last`; puts the others back
    /// on the list. Returns what `each` returned last.
    fn take_drained(
        &self,
        cpu: usize,
        keep_last: bool,
        reserve: usize,
        limit: usize,
        mut each: impl FnMut(Frame, bool) -> Option<Frame>,
    ) -> Option<Frame> {
        let pc = &self.percpu;
        let slot = &pc.slots[cpu];
        // The frames taken, counted from the heads themselves: the list's count errs high
        // after overflows and, for a moment, low (a freer counts before it links), and a
        // count too low would overfill the cache into the depot.
        let (mut taken, mut total) = (Fifo::new(), 0);
        for head in slot.drain_counted().0 {
            // SAFETY: a CPU's defer list holds only packed heads of this pool, taken whole.
            total += unsafe { packed::total(&head) };
            taken.push_back(head);
        }
        let room = pc.cap.saturating_sub(pc.cached(cpu) + reserve) + usize::from(keep_last);
        let mut excess = total.saturating_sub(room);
        let (mut back, mut back_n) = (Fifo::new(), 0);
        let (mut got, mut given) = (None, 0);
        let mut next = taken.pop_front();
        while let Some(head) = next {
            next = taken.pop_front();
            let last = next.is_none();
            // SAFETY: as above.
            let k = unsafe { packed::total(&head) };
            if (excess > 0 && !(last && keep_last)) || given + k > limit {
                excess = excess.saturating_sub(k);
                back_n += k;
                back.push_back(head);
                continue;
            }
            excess = 0;
            given += k;
            got = each(head, last && keep_last);
        }
        slot.requeue(back, back_n);
        got
    }

    /// [`RefillOrder::Address`]: puts the free frames at `addrs` (carrying no references) into
    /// this CPU's cache so that it hands them out lowest address first, but the lowest one if
    /// `keep_last`, which it returns; what does not fit goes to [`stash`](Self::stash).
    fn stash_sorted(&self, addrs: &mut [usize], keep_last: bool) -> Option<Frame> {
        if addrs.is_empty() {
            return None;
        }
        // Highest first: the last one pushed (or kept) is the lowest.
        sort_desc(addrs);
        // SAFETY: addresses of this pool's free frames the caller took whole, each once.
        unsafe { self.stash_spare(addrs, keep_last) }
    }

    /// [`percpu_alloc`](Self::percpu_alloc) past its inlined attempt: every mode, every source.
    #[cold]
    #[inline(never)]
    fn percpu_alloc_slow(&self) -> Option<Frame> {
        let pc = &self.percpu;
        let headroom = self.cfg.headroom;
        let mut waited = false;
        loop {
            match pc.run(None, Op::Pop(POP_ALLOC)) {
                Res::Done(item, cpu) => {
                    // SAFETY: the caches hold only addresses of this pool's metadata entries.
                    let frame = unsafe { Frame::from_addr(item) };
                    if pc.slots[cpu as usize].is_pending() {
                        self.drain_cpu(cpu as usize);
                    }
                    frame.init(home_stamp(cpu), headroom);
                    return Some(frame);
                }
                Res::Refused(cpu) => {
                    let frame = self.refill(cpu as usize)?;
                    self.take_ref();
                    frame.init(home_stamp(cpu), headroom);
                    return Some(frame);
                }
                Res::NotHere | Res::NoCache => {
                    pc.counters().shared.add(1);
                    if let Some(frame) = self.refill(usize::MAX) {
                        self.acquire(1);
                        frame.init(NO_HOME, headroom);
                        return Some(frame);
                    }
                    // Shared sources dry: this CPU's cache may still hold frames, out of reach
                    // only for a moment. A locked cache whose try-lock we lost: wait for its
                    // holder (preempted mid-operation) rather than fail.
                    if pc.mode == PerCpu::Locked {
                        return match pc.run_locked(None, Op::Pop(POP_ALLOC), true) {
                            Res::Done(item, cpu) => {
                                // SAFETY: the caches hold only addresses of this pool's metadata.
                                let frame = unsafe { Frame::from_addr(item) };
                                frame.init(home_stamp(cpu), headroom);
                                Some(frame)
                            }
                            Res::Refused(_) | Res::NotHere | Res::NoCache => None,
                        };
                    }
                    // An rseq cache another CPU's taker holds: wait for the taking to end, then
                    // try once more.
                    if waited || !pc.wait_untaken() {
                        return None;
                    }
                    waited = true;
                }
            }
        }
    }

    /// Finds free frames for a dry cache (of CPU `cpu`, or none if `cpu` is out of range),
    /// returns one and stashes the rest: its defer list, the overflow list, the depot, other
    /// CPUs' defer lists (one probe each), vacant owner slots.
    #[cold]
    #[inline(never)]
    fn refill(&self, cpu: usize) -> Option<Frame> {
        let pc = &self.percpu;
        pc.counters_at(cpu).refills.add(1);
        if cpu < pc.slots.len() {
            // Frames sent home come back in the order they were freed: newest batch first
            // (as the list holds them), each pushed newest frame first, the oldest of all
            // returned. Their lines are in another core's cache, so no order is hotter here;
            // this one keeps the circulation in the order frames were handed out, and a pool
            // handing out frames at a fixed stride lets the hardware prefetcher fetch the next
            // frame's lines, on both cores, ahead of use (the skb_pool bench's pipeline:
            // LIFO here scrambled the order every lap).
            if let Some(got) = self.stash_drained(cpu, true, 0) {
                return Some(got);
            }
        }
        // Every source below yields its frames oldest first (freed, or put in the depot,
        // first), and `stash_oldest_on_top` keeps that order.
        let mut got = self.overflow.take_all().reverse();
        if got.is_empty() {
            // Refill by half a cache (plus the frame returned), and leave the rest of the
            // batch in the depot: carried through this CPU's hands to be stashed, it would be
            // out of every other allocator's reach meanwhile, and one could find the pool
            // "exhausted" with most of its frames free.
            let mut depot = self.depot.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(mut batch) = depot.pop() {
                let want = pc.cap.div_ceil(2) + 1;
                while got.len() < want {
                    let Some(f) = batch.pop_front() else { break };
                    got.push_back(f);
                }
                if !batch.is_empty() {
                    depot.push(batch);
                }
            }
        }
        if got.is_empty() {
            got = self.probe_cpus();
        }
        if got.is_empty() {
            // SAFETY: an owner slot's list holds only packed heads of this pool.
            got = unsafe {
                packed::unpack_oldest_first(first_drained(
                    self.slots.iter().filter(|s| !s.is_claimed()),
                ))
            };
        }
        if got.is_empty() {
            got = self.take_outgoing();
        }
        if got.is_empty() {
            got = self.percpu.take_cached(cpu);
        }
        let Some(first) = got.pop_front() else {
            pc.counters_at(cpu).exhausted.add(1);
            return None;
        };
        self.stash_oldest_on_top(got);
        Some(first)
    }

    /// Puts free frames (carrying no references, oldest first) into this CPU's cache so that
    /// it hands them out in that order: the oldest `LIFT_MAX` (at most a cache) pushed newest
    /// first, with one critical section (or one acquisition of a locked cache); the newer rest,
    /// and what does not
    /// fit, to the depot in order. (Pushed as they come, a cache would hand each refill out
    /// newest first, and the circulation would stay reversed from then on.)
    fn stash_oldest_on_top(&self, mut frames: Fifo<Frame>) {
        let mut addr = [0usize; LIFT_MAX];
        let mut k = 0;
        while k < addr.len().min(self.percpu.cap) {
            let Some(f) = frames.pop_front() else { break };
            addr[k] = f.0.as_ptr() as usize;
            k += 1;
        }
        if !frames.is_empty() {
            self.depot
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(frames);
        }
        addr[..k].reverse();
        let pushed = self.percpu.push_all(&addr[..k], PUSH_SPARE);
        if pushed < k {
            // No cache (the shared path) or no room: the rest to the depot, oldest first again.
            let rest: Fifo<Frame> = addr[pushed..k]
                .iter()
                .rev()
                // SAFETY: addresses of this pool's free frames the caller gave us, each once.
                .map(|&a| unsafe { Frame::from_addr(a) })
                .collect();
            self.depot
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(rest);
        }
    }

    /// Puts the frames of the packed batch at `head` (free, carrying no references) into this
    /// CPU's cache so that it hands them out in the order they were freed (the oldest on top),
    /// but the oldest one if `keep_last`, which it returns; with one critical section (or one
    /// acquisition of a locked cache) per batch, and what does not fit through [`stash`].
    ///
    /// # Safety
    ///
    /// `head` is the head of a packed batch of this pool, taken whole by the caller.
    ///
    /// [`stash`]: Self::stash
    unsafe fn stash_packed(&self, head: Frame, keep_last: bool) -> Option<Frame> {
        let mut addr = [0usize; packed::MAX_PACK];
        // SAFETY: forwarded contract.
        let n = unsafe { packed::unpack(head, &mut addr) };
        // Newest first: the last one pushed (or kept) is the oldest.
        addr[..n].reverse();
        // SAFETY: entries of free frames of the batch, taken whole by the caller, each once.
        unsafe { self.stash_spare(&addr[..n], keep_last) }
    }

    /// Pushes the free frames at `addrs` (carrying no references, at least one) onto this
    /// CPU's cache in that order, the last on top, but the last one if `keep_last`, which it
    /// returns; with one critical section (or one acquisition of a locked cache), and what does
    /// not fit through [`stash`](Self::stash).
    ///
    /// # Safety
    ///
    /// Each address is a free frame of this pool that the caller took whole and gives up, each
    /// once.
    unsafe fn stash_spare(&self, addrs: &[usize], keep_last: bool) -> Option<Frame> {
        let m = addrs.len() - usize::from(keep_last);
        let pushed = self.percpu.try_push_bulk(None, &addrs[..m], PUSH_SPARE);
        if pushed < m {
            let rest: Fifo<Frame> = addrs[pushed..m]
                .iter()
                // SAFETY: the caller's contract: free frames of this pool, each once.
                .map(|&a| unsafe { Frame::from_addr(a) })
                .collect();
            self.stash(rest);
        }
        // SAFETY: as above.
        keep_last.then(|| unsafe { Frame::from_addr(addrs[m]) })
    }

    /// Puts free frames (carrying no references) into this CPU's cache; what does not fit goes
    /// to the depot.
    #[cold]
    #[inline(never)]
    fn stash(&self, mut frames: Fifo<Frame>) {
        while let Some(f) = frames.pop_front() {
            let addr = f.0.as_ptr() as usize;
            match self.percpu.run(None, Op::Push(addr, PUSH_SPARE)) {
                Res::Done(..) => {}
                Res::Refused(_) | Res::NotHere | Res::NoCache => {
                    frames.push_front(f);
                    self.depot
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(frames);
                    return;
                }
            }
        }
    }

    /// Moves half of this CPU's (full) cache to the depot.
    #[cold]
    #[inline(never)]
    fn flush_half(&self) {
        self.percpu.counters().flushes.add(1);
        let mut out = Fifo::new();
        for _ in 0..self.percpu.cap.div_ceil(2) {
            match self.percpu.run(None, Op::Pop(POP_SPARE)) {
                // SAFETY: the caches hold only addresses of this pool's metadata entries.
                Res::Done(item, _) => out.push_back(unsafe { Frame::from_addr(item) }),
                Res::Refused(_) | Res::NotHere | Res::NoCache => break,
            }
        }
        if !out.is_empty() {
            self.depot
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(out);
        }
    }

    /// Frees a frame stamped by the per-CPU path: home cache, home defer list, or overflow.
    ///
    /// # Safety
    ///
    /// `frame` is an exclusively held in-use frame of the pool at `this`, stamped by
    /// [`percpu_alloc`](Self::percpu_alloc), carrying one reference to it.
    #[inline]
    pub(crate) unsafe fn percpu_free(this: NonNull<PoolInner>, frame: Frame) {
        let home = frame.owner();
        if home != NO_HOME {
            frame.set_free();
            // SAFETY: the frame's reference keeps the pool alive for this attempt; if it
            // commits, the reference went with it and the pool is not touched again.
            let pc = unsafe { &this.as_ref().percpu };
            let push = Op::Push(frame.0.as_ptr() as usize, PUSH_FREE);
            let home = u32::from(home & !HOME_FLAG);
            match pc.try_fast(Some(home), push) {
                Ok(_) => return,
                // Running on another CPU: remote, decided once from the home stamp and the
                // CPU number the attempt read (a migration since only changes which CPU's
                // outgoing batch takes the frame; the batch has its own lock).
                Err(Some(cpu)) if (home as usize) < pc.slots.len() => {
                    // SAFETY: forwarded contract, the frame marked free; `home` is in the
                    // table.
                    unsafe {
                        if pc.stacks.enabled() {
                            PoolInner::percpu_free_stacked(this, frame, home);
                        } else {
                            PoolInner::percpu_free_remote(this, frame, home as usize, Some(cpu));
                        }
                    }
                    return;
                }
                Err(_) => {}
            }
        }
        // SAFETY: forwarded contract.
        unsafe { PoolInner::percpu_free_slow(this, frame) };
    }

    /// [`percpu_free`](Self::percpu_free) past its inlined attempt.
    ///
    /// # Safety
    ///
    /// As [`percpu_free`](Self::percpu_free).
    #[cold]
    #[inline(never)]
    unsafe fn percpu_free_slow(this: NonNull<PoolInner>, frame: Frame) {
        // SAFETY: the frame's reference keeps the pool alive until we drop it below.
        let pool = unsafe { this.as_ref() };
        let pc = &pool.percpu;
        let home = frame.owner();
        frame.set_free();
        let addr = frame.0.as_ptr() as usize;
        if home != NO_HOME {
            let home = u32::from(home & !HOME_FLAG);
            for _ in 0..2 {
                match pc.run(Some(home), Op::Push(addr, PUSH_FREE)) {
                    // The reference went with the commit: the pool may be gone now.
                    Res::Done(..) => return,
                    Res::Refused(_) => pool.flush_half(),
                    Res::NotHere => {
                        // SAFETY: forwarded contract; `home` came from this pool's table.
                        unsafe {
                            PoolInner::percpu_free_remote(this, frame, home as usize, pc.cpu_now())
                        };
                        return;
                    }
                    Res::NoCache => break,
                }
            }
        }
        pc.counters().shared.add(1);
        pool.overflow.add(frame);
        // SAFETY: the frame's reference is ours to drop, and we are done with the pool.
        unsafe { PoolInner::release(this, 1) };
    }

    /// Frames of an outgoing batch that no free on its CPU will complete: the first non-empty
    /// batch whose lock is free (one probe per CPU).
    pub(crate) fn take_outgoing(&self) -> Fifo<Frame> {
        let got = self
            .percpu
            .out
            .iter()
            .map(|o| o.try_take())
            .find(|f| !f.is_empty())
            .unwrap_or_default();
        if !got.is_empty() || !self.percpu.stacks.enabled() {
            return got;
        }
        let got = self.percpu.stacks.take_all(restart_sections);
        self.percpu.counters().remote_frees.add(got.len() as u64);
        got
    }

    /// The frames of the first non-empty CPU defer list, unpacked oldest first (one probe per
    /// CPU).
    pub(crate) fn probe_cpus(&self) -> Fifo<Frame> {
        // SAFETY: a CPU's defer list holds only packed heads of this pool, taken whole here.
        unsafe { packed::unpack_oldest_first(first_drained(self.percpu.slots.iter())) }
    }

    /// A remote free: into CPU `cpu`'s outgoing batch for `home` (the CPU the thread was seen
    /// on; alone onto `home`'s defer list if the batch is busy or there is none), a full batch
    /// sent with one `skb_attempt_defer_free`, then the reference dropped on the freeing CPU.
    /// A frame that goes into a batch is counted by the batch, under its lock.
    ///
    /// # Safety
    ///
    /// As [`percpu_free`](Self::percpu_free) (the frame already marked free); `home` is in the
    /// table.
    #[cold]
    #[inline(never)]
    unsafe fn percpu_free_remote(
        this: NonNull<PoolInner>,
        frame: Frame,
        home: usize,
        cpu: Option<u32>,
    ) {
        // SAFETY: the frame's reference keeps the pool alive until we drop it below.
        let pool = unsafe { this.as_ref() };
        let out = cpu
            .and_then(|c| pool.percpu.out.get(c as usize))
            .map(|o| &**o);
        pool.send_remote(out, &[frame.0.as_ptr() as usize], home as u32);
        // SAFETY: the frame's reference is ours to drop; the pool is not used after.
        unsafe { PoolInner::drop_refs(this, 1) };
    }

    /// A remote free through the outgoing stacks (rseq pools, `outstack.rs`): one section pushes
    /// the frame onto the stack of the CPU the thread runs on for `home`, its reference given up
    /// there. The free that fills a stack sends it home instead, with its own frame, while it
    /// still holds that frame's reference (after a commit the pool may be gone). A stack being
    /// taken (or frozen) sends the frame the lock-based way; on `home` itself (a migration) it
    /// is a local free.
    ///
    /// # Safety
    ///
    /// As [`percpu_free`](Self::percpu_free) (the frame already marked free); `home` is in the
    /// table.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[inline(never)]
    unsafe fn percpu_free_stacked(this: NonNull<PoolInner>, frame: Frame, home: u32) {
        use crate::rseq::{self, Status};
        // SAFETY: the frame's reference keeps the pool alive until a push commits it.
        let pool = unsafe { this.as_ref() };
        let pc = &pool.percpu;
        let addr = frame.0.as_ptr() as usize;
        let cap = pc.stacks.cap();
        let Some(area) = rseq::area() else {
            // SAFETY: forwarded contract.
            return unsafe { PoolInner::percpu_free_slow(this, frame) };
        };
        loop {
            let cpu = rseq::cpu(area);
            let Some(stack) = pc.stacks.cache_ref(cpu, home).filter(|_| cpu != home) else {
                // SAFETY: forwarded contract (on the home CPU now, or a CPU past the table).
                return unsafe { PoolInner::percpu_free_slow(this, frame) };
            };
            // A snapshot: a stale count only sends the batch one free early or late.
            if pc.stacks.len_of(cpu, home) + 1 >= cap {
                let mut buf = [0usize; packed::MAX_PACK];
                let want = cap.min(buf.len() - 1);
                // SAFETY: as below; `buf` is ours, valid for `want` writes.
                let (st, k) = unsafe { rseq::pop_bulk(area, cpu, stack, buf.as_mut_ptr(), want) };
                match st {
                    Status::Done => {
                        // The popped frames carry references again: ours and theirs go home
                        // together, then all are given back; nothing touches the pool after.
                        buf[k] = addr;
                        pc.counters_at(cpu as usize).remote_frees.add(k as u64 + 1);
                        pool.send_packed(&buf[..=k], home);
                        // SAFETY: the `k + 1` references are ours to drop; the pool is not used
                        // after.
                        return unsafe { PoolInner::drop_refs(this, k + 1) };
                    }
                    Status::Refused if cap <= 1 => {
                        pc.counters_at(cpu as usize).remote_frees.add(1);
                        pool.send_packed(&[addr], home);
                        // SAFETY: as above.
                        return unsafe { PoolInner::drop_refs(this, 1) };
                    }
                    // Emptied meanwhile: push as usual.
                    Status::Refused => {}
                    Status::WrongCpu => continue,
                    Status::Abort => {
                        pc.count_abort();
                        continue;
                    }
                    Status::Flagged => {
                        // SAFETY: forwarded contract.
                        return unsafe {
                            PoolInner::percpu_free_remote(this, frame, home as usize, Some(cpu))
                        };
                    }
                }
            }
            // SAFETY: `area` is this thread's registered area; the stack lives as long as the
            // pool, which the frame's reference keeps alive; only these sections, on CPU
            // `cpu`, write it (a taker only once it flagged the stack and restarted them all).
            match unsafe { rseq::push(area, cpu, stack, addr, PUSH_FREE) } {
                // The reference went with the commit: the pool may be gone now.
                Status::Done => return,
                // Filled meanwhile (a thread preempted on this CPU): the next turn sends it.
                Status::Refused | Status::WrongCpu => {}
                Status::Abort => pc.count_abort(),
                Status::Flagged => {
                    // SAFETY: forwarded contract.
                    return unsafe {
                        PoolInner::percpu_free_remote(this, frame, home as usize, Some(cpu))
                    };
                }
            }
        }
    }

    /// See the rseq build's definition; stacks exist only there.
    ///
    /// # Safety
    ///
    /// As [`percpu_free`](Self::percpu_free) (the frame already marked free); `home` is in the
    /// table.
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
    unsafe fn percpu_free_stacked(this: NonNull<PoolInner>, frame: Frame, home: u32) {
        // SAFETY: forwarded contract.
        unsafe { PoolInner::percpu_free_remote(this, frame, home as usize, None) };
    }

    /// [`percpu_free_remote_bulk`](Self::percpu_free_remote_bulk) through the outgoing stacks:
    /// whole stacks' worth go home at once from the caller's array; the rest goes onto the
    /// stack with one section if it does not fill it, else the stack is taken whole and sent
    /// home topped up from the rest, while the rest still holds references (a commit that gives
    /// up the last of them is the end of the pool's use). What a stack being taken (or frozen)
    /// refuses, and frames freed on `home` itself (a migration), are returned for the caller's
    /// other paths, still carrying their references (marked free); empty when every frame went
    /// and the pool may be gone.
    ///
    /// # Safety
    ///
    /// As [`percpu_free_remote_bulk`](Self::percpu_free_remote_bulk); `home` is in the table.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    unsafe fn percpu_free_stacked_bulk(
        this: NonNull<PoolInner>,
        home: u32,
        frames: &[usize],
    ) -> &[usize] {
        use crate::rseq::{self, Status};
        // SAFETY: the frames' references keep the pool alive while any is left.
        let pool = unsafe { this.as_ref() };
        let pc = &pool.percpu;
        let cap = pc.stacks.cap();
        for &f in frames {
            // SAFETY: the caller's contract: a frame of this pool that we hold.
            unsafe { Frame::from_addr(f) }.set_free();
        }
        let mut rest = frames;
        while !rest.is_empty() {
            let Some(area) = rseq::area() else { break };
            let cpu = rseq::cpu(area);
            let Some(stack) = pc.stacks.cache_ref(cpu, home).filter(|_| cpu != home) else {
                break;
            };
            let mut buf = [0usize; packed::MAX_PACK];
            // Frames taken from the stack into `buf` (each carrying a reference again). A run of
            // a whole batch goes straight home only past an empty stack: frames waiting there
            // were freed first, and go first (overtaken, they would come home out of order).
            let stacked = pc.stacks.len_of(cpu, home);
            let k = if stacked == 0 && rest.len() >= cap {
                0
            } else if stacked + rest.len() < cap {
                // SAFETY: as in `percpu_free_stacked`; `rest` is valid for `rest.len()` reads.
                let (st, k) = unsafe {
                    rseq::push_bulk(area, cpu, stack, rest.as_ptr(), rest.len(), PUSH_FREE)
                };
                match st {
                    // All of them: their references went with the commit, the pool may be gone.
                    Status::Done if k == rest.len() => return &[],
                    Status::Done => rest = &rest[k..],
                    Status::Refused | Status::WrongCpu => {}
                    Status::Abort => pc.count_bulk_abort(),
                    Status::Flagged => break,
                }
                continue;
            } else {
                // SAFETY: as above; `buf` is ours, valid for `cap` writes.
                match unsafe { rseq::pop_bulk(area, cpu, stack, buf.as_mut_ptr(), cap) } {
                    (Status::Done, k) => k,
                    // Emptied meanwhile (a taker).
                    (Status::Refused, _) => 0,
                    (Status::WrongCpu, _) => continue,
                    (Status::Abort, _) => {
                        pc.count_bulk_abort();
                        continue;
                    }
                    (Status::Flagged, _) => break,
                }
            };
            // A batch: the stack's frames, topped up from the rest (up to `cap` in all).
            let m = (cap - k).min(rest.len());
            buf[k..k + m].copy_from_slice(&rest[..m]);
            rest = &rest[m..];
            pool.send_packed(&buf[..k + m], home);
            pc.counters_at(cpu as usize)
                .remote_frees
                .add((k + m) as u64);
            // SAFETY: the references of the frames sent are ours to drop; the rest's keep the
            // pool alive, and with no rest this is the pool's last use here.
            unsafe { PoolInner::drop_refs(this, k + m) };
        }
        rest
    }

    /// See the rseq build's definition; stacks exist only there.
    ///
    /// # Safety
    ///
    /// As [`percpu_free_remote_bulk`](Self::percpu_free_remote_bulk).
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
    unsafe fn percpu_free_stacked_bulk(
        this: NonNull<PoolInner>,
        home: u32,
        frames: &[usize],
    ) -> &[usize] {
        let _ = (this, home);
        frames
    }

    /// Sends free frames (at most [`packed::MAX_PACK`], all for `home`, whose references the
    /// caller gives back after) home as one packed batch, oldest first as given: the home CPU
    /// hands them out in that order.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    fn send_packed(&self, frames: &[usize], home: u32) {
        // SAFETY: free frames of this pool, each once, that the caller gave up.
        self.send_home(unsafe { Full::packed(frames, home) });
    }

    /// Frees a run of per-CPU frames that [`percpu_free_bulk`](Self::percpu_free_bulk) did
    /// not put back (all stamped home CPU `home`, each carrying a reference): from another
    /// CPU, into that CPU's outgoing batch with one lock per batch, full batches sent home,
    /// and every reference dropped with one critical section; on `home` itself (a full cache,
    /// a migration), or a CPU past the table, one by one.
    ///
    /// # Safety
    ///
    /// Each address in `frames` is an exclusively held in-use frame of the pool at `this`,
    /// stamped with home `home`, carrying one reference, and given up by the caller.
    pub(crate) unsafe fn percpu_free_remote_bulk(
        this: NonNull<PoolInner>,
        home: u32,
        frames: &[usize],
    ) {
        // SAFETY: the frames' references keep the pool alive until we drop them at the end.
        let pool = unsafe { this.as_ref() };
        let pc = &pool.percpu;
        let frames = if pc.stacks.enabled() && (home as usize) < pc.slots.len() {
            // SAFETY: forwarded contract.
            let rest = unsafe { PoolInner::percpu_free_stacked_bulk(this, home, frames) };
            if rest.is_empty() {
                // Every reference went: the pool may be gone.
                return;
            }
            rest
        } else {
            frames
        };
        let batch = match pc.cpu_now() {
            Some(cpu) if cpu != home && (home as usize) < pc.slots.len() => {
                pc.out.get(cpu as usize)
            }
            _ => None,
        };
        let Some(out) = batch else {
            for &f in frames {
                // SAFETY: the caller's contract, frame by frame.
                let frame = unsafe { Frame::from_addr(f) };
                // SAFETY: forwarded contract.
                unsafe { PoolInner::percpu_free(this, frame) };
            }
            return;
        };
        for &f in frames {
            // SAFETY: the caller's contract: a frame of this pool that we hold.
            unsafe { Frame::from_addr(f) }.set_free();
        }
        pool.send_remote(Some(out), frames, home);
        // SAFETY: the references are ours to drop; the pool is not used after.
        unsafe { PoolInner::drop_refs(this, frames.len()) };
    }

    /// Sends free frames (metadata addresses, carrying no references, all for `home`) through
    /// `out`, this CPU's outgoing batch: appended under one lock per batch, full batches sent
    /// home; if there is no batch or it is busy (its holder was preempted), each frame alone
    /// onto `home`'s defer list.
    fn send_remote(&self, out: Option<&Outgoing>, frames: &[usize], home: u32) {
        let mut rest = frames;
        if let Some(out) = out {
            while !rest.is_empty() {
                let Ok((n, full)) = out.add_many(rest, home) else {
                    break;
                };
                rest = &rest[n..];
                if let Some(full) = full {
                    self.send_home(full);
                }
            }
        }
        for &f in rest {
            self.percpu.counters().remote_frees.add(1);
            // SAFETY: a free frame of this pool that the caller gave up.
            let frame = unsafe { Frame::from_addr(f) };
            self.send_home(Full::alone(frame, home));
        }
    }

    /// Gives back `k` pool references of frames freed on this CPU: one critical section, or
    /// the atomic count if there is no cache for the thread.
    ///
    /// # Safety
    ///
    /// The caller owns `k` references to the pool at `this`, and does not use the pool after
    /// unless it holds another reference besides them.
    unsafe fn drop_refs(this: NonNull<PoolInner>, k: usize) {
        // SAFETY: the caller's references keep the pool alive for this attempt; if it commits,
        // they went with it and the pool is not touched again.
        let pc = unsafe { &this.as_ref().percpu };
        match pc.run(None, Op::Add(DROP_REF.wrapping_mul(k as u64))) {
            Res::Done(..) => {}
            Res::Refused(_) | Res::NotHere | Res::NoCache => {
                // SAFETY: the references are ours to drop.
                unsafe { PoolInner::release(this, k) };
            }
        }
    }

    /// `skb_attempt_defer_free` of a packed batch to its home CPU's defer list (kick at
    /// half); past `defer_max`, its frames go to the overflow list unpacked.
    fn send_home(&self, full: Full) {
        self.percpu.counters().sends.add(1);
        let slot = &self.percpu.slots[full.home as usize];
        // SAFETY: a `Full` holds packed heads of free frames of this pool, given up to us.
        let wake = match unsafe {
            slot.defer_packed(full.heads, full.n, self.cfg.defer_max, &self.overflow)
        } {
            Deferred::Queued(Kick::Won(w)) => w,
            Deferred::Queued(Kick::None | Kick::AlreadyPending) | Deferred::Overflow => None,
        };
        if let Some(w) = wake {
            w();
        }
    }
}

/// Words of [`sort_desc`]'s bitmap (2 KiB, zeroed at each sort): metadata entries spanning at
/// most 16 Ki lines (1 MiB of side array, about 16 000 frames) sort by bitmap; wider spans by
/// comparison.
const SORT_WORDS: usize = 256;

/// Sorts distinct metadata addresses (entries of one side array, so whole entries apart)
/// highest first. A comparison sort costs about 9 ns a frame on frames in no order (a
/// refill's, in the transmit engine); marking each entry's line in a bitmap over the span and
/// reading the bits back from the top costs a pass over the frames and one over the span's
/// words.
fn sort_desc(addrs: &mut [usize]) {
    // Entries are `STRIDE` apart within a chunk, and chunks (and their one-entry headers) are
    // whole multiples of it (meta.rs asserts both).
    const LINE: usize = crate::meta::STRIDE;
    let (Some(&lo), Some(&hi)) = (addrs.iter().min(), addrs.iter().max()) else {
        return;
    };
    let words = (hi - lo) / LINE / 64 + 1;
    if words > SORT_WORDS || words > 4 * addrs.len() + 16 {
        addrs.sort_unstable_by(|a, b| b.cmp(a));
        return;
    }
    let mut bits = [0u64; SORT_WORDS];
    for &a in addrs.iter() {
        debug_assert_eq!((a - lo) % LINE, 0, "metadata entries are whole lines");
        let i = (a - lo) / LINE;
        bits[i / 64] |= 1 << (i % 64);
    }
    let mut k = 0;
    for w in (0..words).rev() {
        let mut b = bits[w];
        while b != 0 {
            let top = 63 - b.leading_zeros() as usize;
            b ^= 1 << top;
            addrs[k] = lo + (w * 64 + top) * LINE;
            k += 1;
        }
    }
    debug_assert_eq!(k, addrs.len(), "a metadata address given twice");
}

/// Restarts the rseq sections running on CPU `cpu` (a cache taker's second step); `false` if
/// it cannot, and then nothing may be taken.
fn restart_sections_on(cpu: u32) -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    {
        crate::rseq::membarrier_rseq_on(cpu)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
    {
        let _ = cpu;
        false
    }
}

/// Restarts every rseq section in progress (a stack taker's second step); `false` if it
/// cannot, and then nothing may be taken.
fn restart_sections() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    {
        crate::rseq::membarrier_rseq()
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
    {
        false
    }
}

/// Takes the first non-empty defer list among `slots` (one probe each), as it was pushed.
fn first_drained<'a>(slots: impl Iterator<Item = &'a OwnerSlot>) -> Chain<Frame> {
    for s in slots {
        if !s.looks_empty() {
            let chain = s.drain();
            if !chain.is_empty() {
                return chain;
            }
        }
    }
    Chain::new()
}

#[cfg(all(test, not(lockless_loom)))]
mod tests {
    use super::{SORT_WORDS, sort_desc};
    use crate::meta::STRIDE;

    /// A xorshift permutation source: deterministic, no dependency.
    fn shuffled(mut v: Vec<usize>, mut seed: u64) -> Vec<usize> {
        for i in (1..v.len()).rev() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            v.swap(i, (seed % (i as u64 + 1)) as usize);
        }
        v
    }

    #[test]
    fn sort_desc_matches_a_comparison_sort_on_narrow_and_wide_spans() {
        let base = 0x7f12_3400_0000usize;
        // A dense span, one entry, a span that nearly fills the bitmap (all by bitmap) and a
        // sparse one (the comparison sort), each from an ordered, a reversed and a shuffled
        // start.
        let cases: [(usize, usize); 4] = [
            (256, 4096),
            (1, 1),
            (300, SORT_WORDS * 64 + 1),
            (8, 1 << 20),
        ];
        for (n, span) in cases {
            let step = (span / n).max(1);
            let entries: Vec<usize> = (0..n).map(|i| base + i * step * STRIDE).collect();
            let mut want = entries.clone();
            want.sort_unstable_by(|a, b| b.cmp(a));
            for (k, start) in [entries.clone(), want.clone(), shuffled(entries.clone(), 7)]
                .into_iter()
                .enumerate()
            {
                let mut got = start;
                sort_desc(&mut got);
                assert_eq!(got, want, "n {n}, span {span}, start {k}");
            }
        }
        let mut empty: Vec<usize> = Vec::new();
        sort_desc(&mut empty);
        assert!(empty.is_empty());
    }
}

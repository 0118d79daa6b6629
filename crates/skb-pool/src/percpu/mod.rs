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
//! puts the drained frames beneath those the cache still holds, which were freed before them
//! (beneath its top 256, `LIFT_MAX`: in a larger cache, above the older rest).
//! Remote frees travel in batches, packed (`packed.rs`): the home CPU learns a batch's
//! addresses from a few metadata lines and pushes them into its cache with one critical
//! section, instead of walking a chain of frames another core wrote, one dependent miss a frame.
//! A batch gathers on the freeing CPU: in an rseq pool of up to 32 CPUs on that CPU's stack for
//! the home CPU (`outstack.rs`: one section a frame, like a local free), in a locked pool, a
//! larger one, or when a stack is being taken, in the CPU's outgoing batch behind a try-lock
//! (`outgoing.rs`). Every cache
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
//! stranded either, so `Exhausted` means no frame sat free anywhere the allocation looked,
//! during a look in which no other thread carried frames between those places: `hands.rs`).
//! Frames from the defer list
//! and the depot go into the cache so that it hands them out in the order they were freed (or
//! sat in the depot): a frame freed here is pushed on top (its lines are hot here), but a
//! frame sent home is hot on another core, and keeping the order in which frames circulate
//! keeps a producer's frames at a fixed stride, which the hardware prefetcher follows. A push
//! to a full cache first flushes half of it to the depot (DPDK's hysteresis). A CPU's cache
//! holds at most `min(cache_max, frame_count / (2 × cpus))` frames (at least one), so the
//! caches together never hold more than half the pool (unless it has fewer than two frames a
//! CPU), and takings, which interrupt the CPU taken from in an rseq pool, stay rare.
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
//! # Files
//!
//! This file owns the types (the modes, the cache, the operations' word changes), building the
//! per-CPU state and freezing it. The rest, one thing a file:
//!
//! - `section.rs`: one operation on a cache (an rseq section or the locked fallback's try-lock);
//! - `alloc.rs`: `Pool::alloc` and `Pool::alloc_bulk`, fast and slow paths;
//! - `refill.rs`: where a dry cache's frames come from, kicked drains, stashing in order;
//! - `sort.rs`: [`RefillOrder::Address`]'s sort;
//! - `take.rs`: cache takings;
//! - `hands.rs`: frames between two places, and when an allocation may report `Exhausted`;
//! - `free.rs`: local, remote and bulk frees, frames sent home;
//! - `stats.rs`: the counters and [`PerCpuStats`].
//!
//! None of them may touch the owner handles' caches or the per-owner free path (`handle.rs`).

mod alloc;
mod free;
mod hands;
mod refill;
mod section;
mod sort;
mod stats;
mod take;

use core::fmt;

use crossbeam_utils::CachePadded;

use crate::outgoing::Outgoing;
use crate::outstack::{FROZEN, OutStacks};
use crate::packed;
use crate::remote::{OwnerSlot, Wake};
use crate::sync::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, thread};

use stats::Counters;
pub use stats::{CpuCacheStats, PerCpuStats};

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
    ///
    /// [`TAKING`]: crate::outstack::TAKING
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
    /// Moves of free frames in progress and done, per CPU and one for threads past the table
    /// (`hands.rs`).
    hands: Box<[CachePadded<hands::Hands>]>,
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
            hands: hands::new_hands(cpus),
        }
    }

    pub(crate) fn mode(&self) -> PerCpu {
        self.mode
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

//! The frame pool against what a Rust user would pick instead, for 2048-byte buffers.
//!
//! Strategies (same run, same work):
//! - `skb_pool`: our [`Pool`], one [`PoolHandle`] per thread, used as a real user would (see
//!   "How the bench uses our pool" below);
//! - `box_system`: `Box<[u8; 2048]>` (uninitialised) from the system allocator (the global one);
//! - `mimalloc`: the same layout through `mimalloc::MiMalloc` called via `GlobalAlloc` directly;
//! - `arrayqueue_pool`: a global pool of 4096 buffers in a `crossbeam_queue::ArrayQueue`;
//! - `mutex_pool`: a global pool of 4096 buffers in a `Mutex<Vec<_>>`;
//! - `handoff_bound` (pipeline only): no allocator, the bound they all share: each producer's
//!   fixed buffers come back to it through its own `ArrayQueue` (see [`Circulate`]);
//! - `shuffled_bound` (pipeline only, per-CPU table): the same circulation with each producer's
//!   buffers in a fixed pseudo-random order instead of address order (see [`ShuffledBound`]):
//!   what the bound is worth to a pool whose frames come back in no particular order;
//! - `meta_bound` (pipeline only, per-CPU table): the same circulation plus each buffer's
//!   metadata line beside the slab, written by the producer and read and written by the
//!   consumer: the bound of any pool that keeps its metadata out of the frames (see
//!   [`MetaBound`]).
//!
//! Patterns:
//! - `pipeline/P`: P producers allocate a buffer, write 64 bytes, and hand it through one
//!   bounded `ArrayQueue` of pointers (256 slots, the same for every strategy) to one consumer,
//!   which reads the 64 bytes and frees the buffer. A full or empty queue makes the thread back
//!   off (spin, then yield), as does an exhausted pool.
//! - `local/P`: P threads each allocate 32 buffers, then free them, in a loop (the buffers are
//!   not touched: this measures the allocator alone).
//! - `local_bulk/P` (per-CPU table only): the same bursts, each allocated with one bulk call
//!   and freed with one where the strategy has them — our pool's `alloc_bulk` / `free_bulk`,
//!   on the per-CPU caches and on the per-owner handle alike — and one by one for the others
//!   (mimalloc has no bulk call).
//!
//! # How the bench uses our pool
//!
//! - Each producer is an owner: its loop calls [`PoolHandle::flush_remote`] once per iteration
//!   (the kernel's drain at the top of every poll iteration, `skb_defer_free_flush`; with
//!   nothing deferred it is three relaxed loads of lines the freer writes once per batch), and
//!   again while it backs off.
//! - The consumer frees through its own handle: remote frees are batched per owner (32, one
//!   `add_batch` per batch), and it calls [`PoolHandle::flush_frees`] whenever the queue is
//!   empty, so no frame waits in a partial batch.
//! - No wake callback: a wake (unpark, eventfd) is for an owner that sleeps. These producers
//!   never sleep — like every peer they back off by spinning, then yielding — and the kick's
//!   `pending` flag is polled on every alloc, so a callback could only repeat what the flag
//!   already says. An owner that parks when its queue is full should pass `handle_with_wake`.
//! - `defer_max` is sized for the handoff: 512 for the 256-slot queue (`SKB_BENCH_DEFER_MAX`
//!   overrides it; 128 is the kernel's and the library's default). The defer list is the
//!   return path of the handoff, so it must hold every frame of one owner that can come back
//!   while that owner is off the CPU. On this 2-core machine, shared with other work, a
//!   producer is regularly descheduled for a whole time slice, during which the consumer frees
//!   everything that producer put in the queue: up to 256 frames, plus the consumer's partial
//!   batch (< 32), plus the frame in the consumer's hands and the one the producer allocated
//!   since its last drain (the producer drains every iteration). So the count can reach
//!   256 + 32 + 2 = 290 before the owner runs again, and any `defer_max` ≤ 290 sends the rest
//!   to the shared overflow list *by construction*, however fast the owner polls. With 128,
//!   3 of every 8 batches of a full queue fit (96 frames) and 5 overflow: the 62.5% measured.
//!   512 is the next power of two above 290; the half-full kick then fires (at 256) only when
//!   the owner really was away for most of a queue. The kernel's 128 is sized for an owner
//!   that a kick (an IPI) runs within microseconds; a user-space owner is a thread that can be
//!   off the CPU for milliseconds. Rule: `defer_max > queue slots + remote_batch + 2`.
//!
//! Threads start on a `Barrier`; each measurement is timed with `iter_custom` and its CPU time
//! is read with `getrusage` (`harness::process_cpu_time`). After criterion's own report, a table
//! gives buffers/s, CPU ns per buffer, and for `skb_pool` the share of remote frees that took
//! the overflow path.
//!
//! Run: `cargo bench --bench skb_pool`; on a loaded machine, `SKB_BENCH_ROUNDS=7 cargo bench
//! --bench skb_pool` interleaves the strategies instead (see [`interleaved`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use crossbeam_utils::Backoff;
use llist_defer::{Link, Node};
use lockless_xmit::harness::{median, process_cpu_time};
use mimalloc::MiMalloc;
use skb_pool::{PerCpu, Pool, PoolError, PoolHandle, RefillOrder, Skb};

#[global_allocator]
static GLOBAL: System = System;

const BUF: usize = 2048;
const WRITE: usize = 64;
const POOL_FRAMES: usize = 4096;
/// Slots of the producer→consumer queue; `SKB_BENCH_QUEUE` overrides it.
const QUEUE_SLOTS: usize = 256;
const LOCAL_BATCH: usize = 32;
/// Frames the consumer batches per owner before one `add_batch` (the library default).
const REMOTE_BATCH: usize = 32;

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn queue_slots() -> usize {
    env_usize("SKB_BENCH_QUEUE").unwrap_or(QUEUE_SLOTS)
}

/// The smallest power of two above `queue + REMOTE_BATCH + 2`: every frame of one owner that can
/// come back while it is off the CPU fits its defer list (see the module docs).
fn defer_max() -> usize {
    env_usize("SKB_BENCH_DEFER_MAX")
        .unwrap_or((queue_slots() + REMOTE_BATCH + 3).next_power_of_two())
}
const PRODUCERS: [usize; 4] = [1, 2, 4, 8];

/// One buffer strategy. A buffer travels between threads as a `usize` token.
trait Strategy: Send + Sync + 'static {
    const NAME: &'static str;
    /// Per-thread state (our pool's owner handle; nothing for the others).
    type Local;
    fn local(&self) -> Self::Local;
    /// Allocates a buffer and writes `WRITE` bytes into it.
    fn produce(&self, l: &mut Self::Local, v: u8) -> usize;
    /// Reads the `WRITE` bytes and frees the buffer.
    fn consume(&self, l: &mut Self::Local, token: usize) -> u64;
    /// Allocates a buffer without touching it (the `local` pattern).
    fn alloc(&self, l: &mut Self::Local) -> usize;
    /// Frees a buffer without touching it (the `local` pattern).
    fn free(&self, l: &mut Self::Local, token: usize);
    /// Allocates `toks.len()` buffers without touching them (the `local_bulk` pattern): one
    /// by one, unless the strategy has a bulk call.
    #[inline]
    fn alloc_burst(&self, l: &mut Self::Local, toks: &mut [usize]) {
        for t in toks.iter_mut() {
            *t = self.alloc(l);
        }
    }
    /// Frees `toks` without touching them (the `local_bulk` pattern): one by one, unless the
    /// strategy has a bulk call.
    #[inline]
    fn free_burst(&self, l: &mut Self::Local, toks: &[usize]) {
        for &t in toks {
            self.free(l, t);
        }
    }
    /// Called once per producer iteration: the owner's poll loop. Only our pool has work here
    /// (draining its defer list).
    #[inline]
    fn poll(&self, _l: &mut Self::Local) {}
    /// Called while a thread backs off (queue full or empty, pool exhausted): the owner's poll
    /// loop. Only our pool has work here (draining its defer list, pushing its free batches).
    #[inline]
    fn idle(&self, _l: &mut Self::Local) {}
    /// (remote frees, overflows) so far, for strategies that have them.
    fn remote_stats(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// Reads the `WRITE` bytes a producer wrote (a fixed length, so every strategy's read
/// compiles to the same vectorised loop).
#[inline]
fn sum(bytes: &[u8; WRITE]) -> u64 {
    bytes.iter().map(|&b| u64::from(b)).sum()
}

struct SkbPool(Pool);
impl Strategy for SkbPool {
    const NAME: &'static str = "skb_pool";
    type Local = PoolHandle;
    fn local(&self) -> PoolHandle {
        self.0.handle().expect("owner slot")
    }
    #[inline]
    fn produce(&self, h: &mut PoolHandle, v: u8) -> usize {
        let backoff = Backoff::new();
        let mut skb = loop {
            match h.alloc() {
                Ok(s) => break s,
                Err(PoolError::Exhausted) => {
                    h.flush_remote();
                    backoff.snooze();
                }
                Err(e) => panic!("{e}"),
            }
        };
        skb.put(WRITE).expect("fits").fill(v);
        skb.into_link().as_ptr() as usize
    }
    #[inline]
    fn consume(&self, _h: &mut PoolHandle, token: usize) -> u64 {
        // SAFETY: the token came from `into_link` of an Skb, handed over exactly once.
        let skb = unsafe { Skb::from_link(NonNull::new_unchecked(token as *mut Link)) };
        let s = sum(skb.data()[..WRITE].try_into().expect("64 bytes"));
        drop(skb); // local free, or batched remote free through this thread's handle
        s
    }
    #[inline]
    fn alloc(&self, h: &mut PoolHandle) -> usize {
        let backoff = Backoff::new();
        loop {
            match h.alloc() {
                Ok(s) => return s.into_link().as_ptr() as usize,
                Err(_) => {
                    h.flush_remote();
                    backoff.snooze();
                }
            }
        }
    }
    #[inline]
    fn free(&self, _h: &mut PoolHandle, token: usize) {
        // SAFETY: the token came from `into_link` of an Skb, handed over exactly once.
        drop(unsafe { Skb::from_link(NonNull::new_unchecked(token as *mut Link)) });
    }
    #[inline]
    fn alloc_burst(&self, h: &mut PoolHandle, toks: &mut [usize]) {
        let mut got = Toks { out: toks, n: 0 };
        let backoff = Backoff::new();
        while got.n < got.out.len() {
            let want = got.out.len() - got.n;
            if h.alloc_bulk(want, &mut got) < want {
                h.flush_remote();
                backoff.snooze();
            }
        }
    }
    #[inline]
    fn free_burst(&self, h: &mut PoolHandle, toks: &[usize]) {
        h.free_bulk(toks.iter().map(|&t| {
            // SAFETY: each token came from `into_link` of an Skb, handed over exactly once.
            unsafe { Skb::from_link(NonNull::new_unchecked(t as *mut Link)) }
        }));
    }
    #[inline]
    fn poll(&self, h: &mut PoolHandle) {
        h.flush_remote();
    }
    #[inline]
    fn idle(&self, h: &mut PoolHandle) {
        h.flush_remote();
        h.flush_frees();
    }
    fn remote_stats(&self) -> (u64, u64) {
        let t = self.0.stats().totals;

        (t.remote_frees, t.overflow)
    }
}

/// Our pool's per-CPU caches ([`Pool::alloc`]): no handle, any thread; `LOCKED` picks
/// `PerCpu::Locked` over `PerCpu::Rseq`, `ADDR` [`RefillOrder::Address`] over the default
/// `RefillOrder::Freed`. Frees are plain drops (home CPU's cache, or its defer list from another
/// CPU).
struct PerCpuPool<const LOCKED: bool, const ADDR: bool = false>(Pool);

impl<const LOCKED: bool, const ADDR: bool> PerCpuPool<LOCKED, ADDR> {
    fn new() -> Self {
        let mode = if LOCKED { PerCpu::Locked } else { PerCpu::Rseq };
        let order = if ADDR {
            RefillOrder::Address
        } else {
            RefillOrder::Freed
        };
        let pool = Pool::builder()
            .frame_count(POOL_FRAMES)
            .frame_size(BUF)
            .defer_max(defer_max())
            .per_cpu(mode)
            .refill_order(order)
            .build()
            .expect("per-CPU pool");
        assert_eq!(pool.per_cpu(), mode);
        PerCpuPool(pool)
    }

    #[inline]
    fn alloc_waiting(&self) -> Skb {
        let backoff = Backoff::new();
        loop {
            match self.0.alloc() {
                Ok(s) => return s,
                Err(PoolError::Exhausted) => backoff.snooze(),
                Err(e) => panic!("{e}"),
            }
        }
    }
}

impl<const LOCKED: bool, const ADDR: bool> Strategy for PerCpuPool<LOCKED, ADDR> {
    const NAME: &'static str = match (LOCKED, ADDR) {
        (true, false) => "percpu_locked",
        (false, false) => "percpu_rseq",
        (true, true) => "percpu_locked_addr",
        (false, true) => "percpu_rseq_addr",
    };
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn produce(&self, _: &mut (), v: u8) -> usize {
        let mut skb = self.alloc_waiting();
        skb.put(WRITE).expect("fits").fill(v);
        skb.into_link().as_ptr() as usize
    }
    #[inline]
    fn consume(&self, _: &mut (), token: usize) -> u64 {
        // SAFETY: the token came from `into_link` of an Skb, handed over exactly once.
        let skb = unsafe { Skb::from_link(NonNull::new_unchecked(token as *mut Link)) };
        let s = sum(skb.data()[..WRITE].try_into().expect("64 bytes"));
        drop(skb);
        s
    }
    #[inline]
    fn alloc(&self, _: &mut ()) -> usize {
        self.alloc_waiting().into_link().as_ptr() as usize
    }
    #[inline]
    fn free(&self, _: &mut (), token: usize) {
        // SAFETY: the token came from `into_link` of an Skb, handed over exactly once.
        drop(unsafe { Skb::from_link(NonNull::new_unchecked(token as *mut Link)) });
    }
    #[inline]
    fn alloc_burst(&self, _: &mut (), toks: &mut [usize]) {
        let mut got = Toks { out: toks, n: 0 };
        let backoff = Backoff::new();
        while got.n < got.out.len() {
            let want = got.out.len() - got.n;
            if self.0.alloc_bulk(want, &mut got) < want {
                backoff.snooze();
            }
        }
    }
    #[inline]
    fn free_burst(&self, _: &mut (), toks: &[usize]) {
        self.0.free_bulk(toks.iter().map(|&t| {
            // SAFETY: each token came from `into_link` of an Skb, handed over exactly once.
            unsafe { Skb::from_link(NonNull::new_unchecked(t as *mut Link)) }
        }));
    }
}

/// Where a bulk allocation lands: the frames as tokens (`into_link`), in order.
struct Toks<'a> {
    out: &'a mut [usize],
    n: usize,
}

impl Extend<Skb> for Toks<'_> {
    fn extend<I: IntoIterator<Item = Skb>>(&mut self, skbs: I) {
        for skb in skbs {
            self.out[self.n] = skb.into_link().as_ptr() as usize;
            self.n += 1;
        }
    }
}

const LAYOUT: Layout = match Layout::from_size_align(BUF, 16) {
    Ok(l) => l,
    Err(_) => panic!("layout"),
};

/// Writes and reads raw buffers the same way for every pointer-based strategy.
#[inline]
fn write_raw(p: *mut u8, v: u8) {
    // SAFETY: `p` is a live buffer of BUF ≥ WRITE bytes owned by the caller.
    unsafe { std::ptr::write_bytes(p, v, WRITE) };
}

#[inline]
fn read_raw(p: *const u8) -> u64 {
    // SAFETY: `p` is a live buffer whose first WRITE bytes were written by the producer.
    sum(unsafe { &*p.cast::<[u8; WRITE]>() })
}

struct BoxSystem;
impl Strategy for BoxSystem {
    const NAME: &'static str = "box_system";
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn alloc(&self, _: &mut ()) -> usize {
        Box::into_raw(Box::<[u8; BUF]>::new_uninit()) as usize
    }
    #[inline]
    fn free(&self, _: &mut (), token: usize) {
        // SAFETY: the token is a `Box<MaybeUninit<[u8; BUF]>>` from `alloc`, freed once.
        drop(unsafe { Box::from_raw(token as *mut std::mem::MaybeUninit<[u8; BUF]>) });
    }
    #[inline]
    fn produce(&self, _: &mut (), v: u8) -> usize {
        let mut b = Box::<[u8; BUF]>::new_uninit();
        write_raw(b.as_mut_ptr().cast(), v);
        Box::into_raw(b) as usize
    }
    #[inline]
    fn consume(&self, _: &mut (), token: usize) -> u64 {
        let s = read_raw(token as *const u8);
        // SAFETY: the token is a `Box<MaybeUninit<[u8; BUF]>>` from `produce`, freed once.
        drop(unsafe { Box::from_raw(token as *mut std::mem::MaybeUninit<[u8; BUF]>) });
        s
    }
}

struct Mimalloc;
impl Strategy for Mimalloc {
    const NAME: &'static str = "mimalloc";
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn alloc(&self, _: &mut ()) -> usize {
        // SAFETY: LAYOUT has a non-zero size.
        let p = unsafe { GlobalAlloc::alloc(&MiMalloc, LAYOUT) };
        assert!(!p.is_null());
        p as usize
    }
    #[inline]
    fn free(&self, _: &mut (), token: usize) {
        // SAFETY: allocated by MiMalloc with LAYOUT in `alloc`, freed once.
        unsafe { GlobalAlloc::dealloc(&MiMalloc, token as *mut u8, LAYOUT) };
    }
    #[inline]
    fn produce(&self, _: &mut (), v: u8) -> usize {
        // SAFETY: LAYOUT has a non-zero size.
        let p = unsafe { GlobalAlloc::alloc(&MiMalloc, LAYOUT) };
        assert!(!p.is_null());
        write_raw(p, v);
        p as usize
    }
    #[inline]
    fn consume(&self, _: &mut (), token: usize) -> u64 {
        let s = read_raw(token as *const u8);
        // SAFETY: allocated by MiMalloc with LAYOUT in `produce`, freed once.
        unsafe { GlobalAlloc::dealloc(&MiMalloc, token as *mut u8, LAYOUT) };
        s
    }
}

/// Backing memory for the two shared pools.
struct Slab(*mut u8);
// SAFETY: plain memory; which buffer a thread may touch is decided by the pool structure.
unsafe impl Send for Slab {}
// SAFETY: as above.
unsafe impl Sync for Slab {}
impl Slab {
    fn new() -> Slab {
        // SAFETY: non-zero size.
        Slab(unsafe {
            std::alloc::alloc(Layout::from_size_align(BUF * POOL_FRAMES, 4096).unwrap())
        })
    }
    fn bufs(&self) -> impl Iterator<Item = usize> + '_ {
        (0..POOL_FRAMES).map(|i| self.0 as usize + i * BUF)
    }

    /// The buffers in address order, or (`shuffled`) with each run of `share` buffers in a
    /// fixed pseudo-random permutation (Fisher–Yates, xorshift64 from a fixed seed: every run
    /// gets the same order).
    fn bufs_ordered(&self, shuffled: bool, share: usize) -> Vec<usize> {
        let mut bufs: Vec<usize> = self.bufs().collect();
        if shuffled {
            let mut x = 0x9e37_79b9_7f4a_7c15_u64;
            for run in bufs.chunks_mut(share) {
                for i in (1..run.len()).rev() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    run.swap(i, (x % (i as u64 + 1)) as usize);
                }
            }
        }
        bufs
    }
}

/// `SKB_BENCH_SHUFFLE=1`: the fixed-buffer strategies of the round-robin table (the
/// `ArrayQueue` and mutex pools, the handoff bound) start from a shuffled buffer order (see
/// [`ShuffledBound`] for why order matters).
fn shuffle_fixed() -> bool {
    std::env::var("SKB_BENCH_SHUFFLE").is_ok_and(|v| v == "1")
}

/// Takes a buffer from `q`, backing off (spin, then yield) while it is empty.
#[inline]
fn pop_waiting(q: &ArrayQueue<usize>) -> usize {
    let backoff = Backoff::new();
    loop {
        match q.pop() {
            Some(p) => return p,
            None => backoff.snooze(),
        }
    }
}

struct ArrayQueuePool(ArrayQueue<usize>, #[allow(dead_code)] Slab);
impl Strategy for ArrayQueuePool {
    const NAME: &'static str = "arrayqueue_pool";
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn alloc(&self, _: &mut ()) -> usize {
        pop_waiting(&self.0)
    }
    #[inline]
    fn free(&self, _: &mut (), token: usize) {
        self.0.push(token).expect("pool never overfills");
    }
    #[inline]
    fn produce(&self, _: &mut (), v: u8) -> usize {
        let p = pop_waiting(&self.0);
        write_raw(p as *mut u8, v);
        p
    }
    #[inline]
    fn consume(&self, _: &mut (), token: usize) -> u64 {
        let s = read_raw(token as *const u8);
        self.0.push(token).expect("pool never overfills");
        s
    }
}

struct MutexPool(Mutex<Vec<usize>>, #[allow(dead_code)] Slab);
impl Strategy for MutexPool {
    const NAME: &'static str = "mutex_pool";
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn alloc(&self, _: &mut ()) -> usize {
        let backoff = Backoff::new();
        loop {
            if let Some(p) = self.0.lock().unwrap().pop() {
                return p;
            }
            backoff.snooze();
        }
    }
    #[inline]
    fn free(&self, _: &mut (), token: usize) {
        self.0.lock().unwrap().push(token);
    }
    #[inline]
    fn produce(&self, _: &mut (), v: u8) -> usize {
        let backoff = Backoff::new();
        let p = loop {
            if let Some(p) = self.0.lock().unwrap().pop() {
                break p;
            }
            backoff.snooze();
        };
        write_raw(p as *mut u8, v);
        p
    }
    #[inline]
    fn consume(&self, _: &mut (), token: usize) -> u64 {
        let s = read_raw(token as *const u8);
        self.0.lock().unwrap().push(token);
        s
    }
}

/// Producer slots in [`Circulate`]: one per producer, up to the largest P.
const CIRCULATE_SLOTS: usize = 8;
/// Buffers per producer slot in [`Circulate`].
const CIRCULATE_PER_SLOT: usize = POOL_FRAMES / CIRCULATE_SLOTS;

thread_local! {
    /// The [`Circulate`] slot of this producer thread, taken at its first `produce`.
    static CIRCULATE_SLOT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// The handoff bound, not an allocator: each producer slot owns a fixed eighth of the buffers,
/// which come back to it through its own `ArrayQueue` (the consumer pushes a buffer to the slot
/// its address belongs to). Nothing is allocated or looked up; what is left is the work every
/// strategy must do — the 64-byte write and read, the shared queue, and one return of the
/// buffer to the core that writes it next — so no allocator can hand over buffers faster than
/// this in the pipeline (the reference measured the same bound: 13.0 / 11.9 / 11.6 M/s
/// at P = 2 / 4 / 8). Slots are taken round-robin by producer threads (P ≤ 8, so the P producers
/// of one run have distinct slots).
struct Circulate {
    slots: Vec<ArrayQueue<usize>>,
    next_slot: std::sync::atomic::AtomicUsize,
    slab: Slab,
}

impl Circulate {
    fn new() -> Circulate {
        Circulate::with_order(false)
    }

    /// Each slot's buffers queued in address order, or (`shuffled`) in a fixed pseudo-random
    /// permutation of it; the circulation is FIFO, so the first order is kept for good.
    fn with_order(shuffled: bool) -> Circulate {
        let slab = Slab::new();
        let slots: Vec<ArrayQueue<usize>> = (0..CIRCULATE_SLOTS)
            .map(|_| ArrayQueue::new(CIRCULATE_PER_SLOT))
            .collect();
        let bufs = slab.bufs_ordered(shuffled, CIRCULATE_PER_SLOT);
        for (i, &b) in bufs.iter().enumerate() {
            slots[i / CIRCULATE_PER_SLOT].push(b).unwrap();
        }
        Circulate {
            slots,
            next_slot: std::sync::atomic::AtomicUsize::new(0),
            slab,
        }
    }

    fn my_slot(&self) -> usize {
        CIRCULATE_SLOT.with(|c| {
            c.get().unwrap_or_else(|| {
                let slot = self
                    .next_slot
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    % CIRCULATE_SLOTS;
                c.set(Some(slot));
                slot
            })
        })
    }

    fn home(&self, token: usize) -> &ArrayQueue<usize> {
        &self.slots[(token - self.slab.0 as usize) / (BUF * CIRCULATE_PER_SLOT)]
    }
}

impl Strategy for Circulate {
    const NAME: &'static str = "handoff_bound";
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn alloc(&self, _: &mut ()) -> usize {
        pop_waiting(&self.slots[self.my_slot()])
    }
    #[inline]
    fn free(&self, _: &mut (), token: usize) {
        self.home(token)
            .push(token)
            .expect("a slot holds all its buffers");
    }
    #[inline]
    fn produce(&self, l: &mut (), v: u8) -> usize {
        let p = self.alloc(l);
        write_raw(p as *mut u8, v);
        p
    }
    #[inline]
    fn consume(&self, l: &mut (), token: usize) -> u64 {
        let s = read_raw(token as *const u8);
        self.free(l, token);
        s
    }
}

/// [`Circulate`] with each producer's buffers in a fixed pseudo-random order. The plain bound
/// hands its buffers out in address order, lap after lap, so each thread touches the next
/// buffer's line at a fixed stride from the last one, and the hardware prefetcher fetches the
/// lines ahead of use (from the core that wrote them last). A pool keeps that help only if its
/// free frames come back in the order they left (our per-CPU refill and the handles' batches
/// do; LIFO free lists scramble it), and only as far as its own frames started in address
/// order: this is the same circulation without it. (A single FIFO ring of fixed buffers keeps
/// the order: the `ArrayQueue` pool; `SKB_BENCH_SHUFFLE=1` shows what it is worth there.)
struct ShuffledBound(Circulate);

impl Strategy for ShuffledBound {
    const NAME: &'static str = "shuffled_bound";
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn alloc(&self, l: &mut ()) -> usize {
        self.0.alloc(l)
    }
    #[inline]
    fn free(&self, l: &mut (), token: usize) {
        self.0.free(l, token)
    }
    #[inline]
    fn produce(&self, l: &mut (), v: u8) -> usize {
        self.0.produce(l, v)
    }
    #[inline]
    fn consume(&self, l: &mut (), token: usize) -> u64 {
        self.0.consume(l, token)
    }
}

/// One buffer's out-of-band metadata line in [`MetaBound`].
#[repr(align(64))]
struct MetaLine([std::sync::atomic::AtomicU64; 8]);

/// The handoff bound plus the one thing every pool that keeps its metadata outside the frames
/// must also move (the design `skb_pool` is held to: no link or state word in UMEM memory):
/// each buffer's metadata line, in an array beside the slab, is written by the producer when
/// it takes the buffer (a new frame's fields), read by the consumer (the data window) and
/// written by it when it gives the buffer back (its state). So each buffer costs two lines
/// across cores each way instead of one. Same circulation as [`Circulate`]; no allocator.
struct MetaBound {
    inner: Circulate,
    meta: Box<[MetaLine]>,
}

impl MetaBound {
    fn new() -> MetaBound {
        MetaBound {
            inner: Circulate::new(),
            meta: (0..POOL_FRAMES)
                .map(|_| {
                    MetaLine(core::array::from_fn(|_| {
                        std::sync::atomic::AtomicU64::new(0)
                    }))
                })
                .collect(),
        }
    }

    fn line(&self, token: usize) -> &MetaLine {
        &self.meta[(token - self.inner.slab.0 as usize) / BUF]
    }
}

impl Strategy for MetaBound {
    const NAME: &'static str = "meta_bound";
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn alloc(&self, l: &mut ()) -> usize {
        self.inner.alloc(l)
    }
    #[inline]
    fn free(&self, l: &mut (), token: usize) {
        self.inner.free(l, token)
    }
    #[inline]
    fn produce(&self, l: &mut (), v: u8) -> usize {
        use std::sync::atomic::Ordering::Relaxed;
        let p = self.alloc(l);
        // A new frame's fields: state, data window, owner, hash (what `Skb` initialisation
        // and `put` write).
        let m = &self.line(p).0;
        m[0].store(1, Relaxed);
        m[1].store(256 | (WRITE as u64) << 32, Relaxed);
        m[2].store(u64::from(v), Relaxed);
        write_raw(p as *mut u8, v);
        p
    }
    #[inline]
    fn consume(&self, l: &mut (), token: usize) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let m = &self.line(token).0;
        let window = m[1].load(Relaxed);
        let s = read_raw(token as *const u8) + (window >> 32);
        // The free: the state word and the link of the list it goes on.
        m[0].store(0, Relaxed);
        m[3].store(token as u64, Relaxed);
        self.free(l, token);
        s
    }
}

#[derive(Default, Clone, Copy)]
struct Acc {
    wall: Duration,
    cpu: Duration,
    buffers: u64,
    remote: u64,
    overflow: u64,
}

impl Acc {
    /// Remote frees that took the overflow path, as a share of all remote frees.
    fn overflow_share(&self) -> String {
        format!(
            "{:.3}% ({} of {})",
            100.0 * self.overflow as f64 / self.remote.max(1) as f64,
            self.overflow,
            self.remote
        )
    }
}

type Table = Mutex<BTreeMap<(&'static str, usize, &'static str), Acc>>;
static TABLE: Table = Mutex::new(BTreeMap::new());

fn record(
    pattern: &'static str,
    p: usize,
    name: &'static str,
    wall: Duration,
    cpu: Duration,
    n: u64,
    ro: (u64, u64),
) {
    let mut t = TABLE.lock().unwrap();
    let a = t.entry((pattern, p, name)).or_default();
    a.wall += wall;
    a.cpu += cpu;
    a.buffers += n;
    a.remote += ro.0;
    a.overflow += ro.1;
}

/// How a pipeline thread waits before it tries the queue again (full for a producer, empty for
/// the consumer): 64 pause hints, about a microsecond, a few percent of the time the other side
/// takes to make room in a 256-slot queue; from the fifth try of one wait on, it yields its CPU
/// (with more threads than cores, the side it waits for may need it). Retrying sooner than a
/// microsecond would poll the very slot the other side is about to use and steal its line from
/// under it, so a strategy whose producers are faster would read as a slower pipeline (they
/// spin on a full queue and slow the consumer down); crossbeam's `Backoff` starts at one pause.
struct PipeWait(u32);

impl PipeWait {
    #[inline]
    fn wait(&mut self) {
        if self.0 < 4 {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        } else {
            thread::yield_now();
        }
        self.0 += 1;
    }
}

fn run_pipeline<S: Strategy>(s: &Arc<S>, p: usize, iters: u64) -> Duration {
    let per = iters.div_ceil(p as u64).max(1);
    let total = per * p as u64;
    let queue = Arc::new(ArrayQueue::<usize>::new(queue_slots()));
    let start = Arc::new(Barrier::new(p + 2));
    let before = s.remote_stats();
    let mut threads = Vec::with_capacity(p + 1);
    for _ in 0..p {
        let (s, queue, start) = (s.clone(), queue.clone(), start.clone());
        threads.push(thread::spawn(move || {
            let mut l = s.local();
            start.wait();
            let t0 = Instant::now();
            for i in 0..per {
                s.poll(&mut l);
                let mut tok = s.produce(&mut l, i as u8);
                let mut w = PipeWait(0);
                while let Err(t) = queue.push(tok) {
                    tok = t;
                    s.idle(&mut l);
                    w.wait();
                }
            }
            let t1 = Instant::now();
            drop(l);
            (0, t0, t1)
        }));
    }
    {
        let (s, queue, start) = (s.clone(), queue.clone(), start.clone());
        threads.push(thread::spawn(move || {
            let mut l = s.local();
            start.wait();
            let t0 = Instant::now();
            let (mut n, mut acc) = (0, 0);
            let mut w = PipeWait(0);
            while n < total {
                match queue.pop() {
                    Some(tok) => {
                        acc += s.consume(&mut l, tok);
                        n += 1;
                        w = PipeWait(0);
                    }
                    None => {
                        s.idle(&mut l);
                        w.wait();
                    }
                }
            }
            let t1 = Instant::now();
            drop(l);
            (acc, t0, t1)
        }));
    }
    // As in `local`: the span runs from the first thread's start to the last one's end, read
    // by the threads themselves (the main thread can wake from the barrier late).
    let c0 = process_cpu_time();
    start.wait();
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    for t in threads {
        let (acc, t0, t1) = t.join().unwrap();
        black_box(acc);
        first = Some(first.map_or(t0, |f| f.min(t0)));
        last = Some(last.map_or(t1, |l| l.max(t1)));
    }
    let cpu = process_cpu_time() - c0;
    let wall = last.expect("a thread") - first.expect("a thread");
    let after = s.remote_stats();
    record(
        "pipeline",
        p,
        S::NAME,
        wall,
        cpu,
        total,
        (after.0 - before.0, after.1 - before.1),
    );
    wall
}

fn run_local<S: Strategy>(s: &Arc<S>, p: usize, iters: u64) -> Duration {
    run_local_as(s, p, iters, false)
}

/// The `local` pattern; with `bulk` (`local_bulk`) each burst is one [`Strategy::alloc_burst`]
/// and one [`Strategy::free_burst`] call (bulk calls where the strategy has them).
fn run_local_as<S: Strategy>(s: &Arc<S>, p: usize, iters: u64, bulk: bool) -> Duration {
    let rounds = iters.div_ceil((p * LOCAL_BATCH) as u64).max(1);
    let total = rounds * (p * LOCAL_BATCH) as u64;
    let start = Arc::new(Barrier::new(p + 1));
    let threads: Vec<_> = (0..p)
        .map(|_| {
            let (s, start) = (s.clone(), start.clone());
            thread::spawn(move || {
                let mut l = s.local();
                let mut toks = [0usize; LOCAL_BATCH];
                let mut acc = 0;
                start.wait();
                let t0 = Instant::now();
                for _ in 0..rounds {
                    if bulk {
                        s.alloc_burst(&mut l, black_box(&mut toks));
                        acc ^= toks[LOCAL_BATCH - 1];
                        s.free_burst(&mut l, black_box(&toks));
                        continue;
                    }
                    // black_box each token, so the compiler cannot pair and elide an
                    // allocation with its free (it does for the global allocator otherwise).
                    for t in toks.iter_mut() {
                        *t = black_box(s.alloc(&mut l));
                    }
                    acc ^= toks[LOCAL_BATCH - 1];
                    for &t in &toks {
                        s.free(&mut l, black_box(t));
                    }
                }
                let t1 = Instant::now();
                drop(l);
                (acc, t0, t1)
            })
        })
        .collect();
    // The span runs from the first worker's start to the last one's end, each read by the
    // worker itself: with more threads than cores, the main thread can wake from the barrier
    // many time slices after the workers, and a clock read there would miss their work.
    let c0 = process_cpu_time();
    start.wait();
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    for t in threads {
        let (acc, t0, t1) = t.join().unwrap();
        black_box(acc);
        first = Some(first.map_or(t0, |f| f.min(t0)));
        last = Some(last.map_or(t1, |l| l.max(t1)));
    }
    let cpu = process_cpu_time() - c0;
    let wall = last.expect("a worker") - first.expect("a worker");
    let pattern = if bulk { "local_bulk" } else { "local" };
    record(pattern, p, S::NAME, wall, cpu, total, (0, 0));
    wall
}

fn bench_strategy<S: Strategy>(c: &mut Criterion, pattern: &'static str, s: Arc<S>) {
    let mut g = c.benchmark_group(format!("skb_pool/{pattern}"));
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    for p in PRODUCERS {
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::new(S::NAME, p), &p, |b, &p| {
            b.iter_custom(|iters| match pattern {
                "pipeline" => run_pipeline(&s, p, iters),
                _ => run_local(&s, p, iters),
            })
        });
    }
    g.finish();
}

fn skb_pool() -> SkbPool {
    skb_pool_owners(16)
}

fn skb_pool_owners(max_owners: usize) -> SkbPool {
    let pool = Pool::builder()
        .frame_count(POOL_FRAMES)
        .frame_size(BUF)
        .max_owners(max_owners)
        .defer_max(defer_max())
        .remote_batch(REMOTE_BATCH)
        .build();
    SkbPool(pool.expect("pool"))
}

fn arrayqueue_pool() -> ArrayQueuePool {
    let slab = Slab::new();
    let q = ArrayQueue::new(POOL_FRAMES);
    for b in slab.bufs_ordered(shuffle_fixed(), POOL_FRAMES) {
        q.push(b).unwrap();
    }
    ArrayQueuePool(q, slab)
}

fn mutex_pool() -> MutexPool {
    let slab = Slab::new();
    let v = Mutex::new(slab.bufs_ordered(shuffle_fixed(), POOL_FRAMES));
    MutexPool(v, slab)
}

fn all(c: &mut Criterion, pattern: &'static str) {
    bench_strategy(c, pattern, Arc::new(skb_pool()));
    bench_strategy(c, pattern, Arc::new(BoxSystem));
    bench_strategy(c, pattern, Arc::new(Mimalloc));
    bench_strategy(c, pattern, Arc::new(arrayqueue_pool()));
    bench_strategy(c, pattern, Arc::new(mutex_pool()));
    if pattern == "pipeline" {
        bench_strategy(c, pattern, Arc::new(Circulate::new()));
    }
}

/// One strategy as a runner of `(pattern, P, buffers) -> wall time`.
type Runner = Box<dyn Fn(&'static str, usize, u64) -> Duration>;

fn runner<S: Strategy>(s: S) -> (&'static str, Runner) {
    let s = Arc::new(s);
    let run: Runner = Box::new(move |pattern, p, n| match pattern {
        "pipeline" => run_pipeline(&s, p, n),
        "local_bulk" => run_local_as(&s, p, n, true),
        _ => run_local(&s, p, n),
    });
    (S::NAME, run)
}

/// `SKB_BENCH_ROUNDS=N cargo bench --bench skb_pool`: instead of criterion, for each pattern
/// and P every strategy runs one slice (`SKB_BENCH_SLICE` buffers: 300 000 in the pipeline,
/// 3 000 000 in local) in turn, the order rotated each round, N rounds, so that load from other
/// processes falls on all of them alike. Prints each strategy's median rate over the rounds
/// (million buffers/s) with its CPU ns per buffer over all rounds, the medians of the
/// in-round ratios of our pool to mimalloc and to the `ArrayQueue` pool, and the overflow
/// share over all rounds. `SKB_BENCH_ONLY=pipeline` (or `local`) runs one pattern;
/// `SKB_BENCH_SHUFFLE=1` starts the fixed-buffer strategies from a shuffled order.
fn interleaved(rounds: usize) {
    let strategies = [
        runner(skb_pool()),
        runner(Mimalloc),
        runner(BoxSystem),
        runner(arrayqueue_pool()),
        runner(mutex_pool()),
        runner(Circulate::with_order(shuffle_fixed())),
    ];
    println!(
        "interleaved: {rounds} rounds, queue {} slots, defer_max {}",
        queue_slots(),
        defer_max()
    );
    println!(
        "| pattern | P | skb-pool | mimalloc | Box (glibc) | ArrayQueue pool | Mutex pool \
         | handoff bound | vs mimalloc | vs ArrayQueue | bound vs mimalloc \
         | remote frees via overflow |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let only = std::env::var("SKB_BENCH_ONLY").ok();
    for pattern in ["pipeline", "local"] {
        if only.as_deref().is_some_and(|o| o != pattern) {
            continue;
        }
        let slice = env_usize("SKB_BENCH_SLICE").unwrap_or(if pattern == "pipeline" {
            300_000
        } else {
            3_000_000
        }) as u64;
        // The handoff bound is a pipeline figure; `local` has no handoff.
        let active = if pattern == "pipeline" {
            strategies.len()
        } else {
            strategies.len() - 1
        };
        for p in PRODUCERS {
            let mut rates = vec![Vec::new(); active];
            let (mut vs_mi, mut vs_aq, mut bound_mi) = (Vec::new(), Vec::new(), Vec::new());
            for r in 0..rounds {
                let mut round = vec![0.0; active];
                for k in 0..active {
                    let i = (k + r) % active;
                    let wall = (strategies[i].1)(pattern, p, slice);
                    round[i] = slice as f64 / wall.as_secs_f64() / 1e6;
                }
                vs_mi.push(round[0] / round[1]);
                vs_aq.push(round[0] / round[3]);
                if active == strategies.len() {
                    bound_mi.push(round[5] / round[1]);
                }
                for (v, x) in rates.iter_mut().zip(round) {
                    v.push(x);
                }
            }
            let t = TABLE.lock().unwrap();
            let cpu = |name: &str| {
                let a = t[&(pattern, p, name)];
                a.cpu.as_nanos() as f64 / a.buffers as f64
            };
            let ovf = if pattern == "pipeline" {
                t[&(pattern, p, "skb_pool")].overflow_share()
            } else {
                String::from("–")
            };
            let m: Vec<f64> = rates.iter().map(|r| median(r)).collect();
            let mut cells: Vec<String> = strategies
                .iter()
                .zip(&m)
                .map(|((name, _), rate)| format!("{rate:.2} ({:.0})", cpu(name)))
                .collect();
            cells.resize(strategies.len(), String::from("–"));
            let bound = if bound_mi.is_empty() {
                String::from("–")
            } else {
                format!("{:.2}x", median(&bound_mi))
            };
            println!(
                "| {pattern} | {p} | {} | {:.2}x | {:.2}x | {bound} | {ovf} |",
                cells.join(" | "),
                median(&vs_mi),
                median(&vs_aq)
            );
        }
    }
}

fn print_table() {
    let t = TABLE.lock().unwrap();
    println!();
    println!("| pattern | P | strategy | Mbuf/s | CPU ns/buf | vs mimalloc | overflow share |");
    println!("|---|---|---|---|---|---|---|");
    for (&(pattern, p, name), a) in t.iter() {
        let rate = a.buffers as f64 / a.wall.as_secs_f64() / 1e6;
        let cpu = a.cpu.as_nanos() as f64 / a.buffers as f64;
        let mi = t
            .get(&(pattern, p, "mimalloc"))
            .map(|m| m.buffers as f64 / m.wall.as_secs_f64() / 1e6);
        let vs = mi.map_or(String::from("-"), |m| format!("{:.2}x", rate / m));
        let ovf = if name == "skb_pool" && pattern == "pipeline" {
            a.overflow_share()
        } else {
            String::from("-")
        };
        println!("| {pattern} | {p} | {name} | {rate:.2} | {cpu:.1} | {vs} | {ovf} |");
    }
}

/// Rounds of `f`, the order of `strategies` rotated each round; returns each strategy's rates
/// (million buffers/s) per round, in the order given.
fn rotate(
    strategies: &[(&'static str, Runner)],
    rounds: usize,
    pattern: &'static str,
    p: usize,
    slice: u64,
) -> Vec<Vec<f64>> {
    let mut rates = vec![Vec::with_capacity(rounds); strategies.len()];
    for r in 0..rounds {
        for k in 0..strategies.len() {
            let i = (k + r) % strategies.len();
            let wall = (strategies[i].1)(pattern, p, slice);
            rates[i].push(slice as f64 / wall.as_secs_f64() / 1e6);
        }
    }
    rates
}

/// The median over rounds of the in-round ratio `a / b`.
fn ratio(rates: &[Vec<f64>], a: usize, b: usize) -> f64 {
    let r: Vec<f64> = rates[a].iter().zip(&rates[b]).map(|(x, y)| x / y).collect();
    median(&r)
}

/// Allocation failures of the stranding pattern: 32 threads, each allocating up to 8 frames
/// at a time from a 1024-frame pool (so at most 256 in use), then freeing them, `iters` times.
/// Returns (failures, most frames in use at once).
fn stranding(per_cpu: bool, iters: usize) -> (u64, usize) {
    const THREADS: usize = 32;
    const HOLD: usize = 8;
    let pool = Pool::builder()
        .frame_count(1024)
        .max_owners(THREADS)
        .build()
        .expect("pool");
    let in_use = std::sync::atomic::AtomicUsize::new(0);
    let peak = std::sync::atomic::AtomicUsize::new(0);
    let fails = std::sync::atomic::AtomicU64::new(0);
    let start = Barrier::new(THREADS);
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut h = (!per_cpu).then(|| pool.handle().expect("owner slot"));
                let mut held = Vec::with_capacity(HOLD);
                start.wait();
                for _ in 0..iters {
                    for _ in 0..HOLD {
                        let got = match h.as_mut() {
                            Some(h) => h.alloc(),
                            None => pool.alloc(),
                        };
                        match got {
                            Ok(skb) => {
                                let n =
                                    in_use.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                                peak.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
                                held.push(skb);
                            }
                            Err(_) => {
                                fails.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    }
                    // Hold them across a yield, so the 32 threads' frames overlap.
                    thread::yield_now();
                    in_use.fetch_sub(held.len(), std::sync::atomic::Ordering::Relaxed);
                    held.clear();
                }
            });
        }
    });
    (fails.into_inner(), peak.into_inner())
}

/// What the cross-core probe reads now (before a row's rounds): the machine's state, `-` if it
/// cannot run.
fn state_before() -> String {
    lockless_xmit::pingpong::probe().map_or("-".to_string(), |ns| format!("{ns:.0}"))
}

/// Thread counts of the per-CPU `local` table: 1 to 32, or the comma-separated list in
/// `SKB_BENCH_PERCPU_P`.
fn percpu_threads() -> Vec<usize> {
    std::env::var("SKB_BENCH_PERCPU_P")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2, 4, 8, 16, 32])
}

/// `SKB_BENCH_ONLY=percpu SKB_BENCH_ROUNDS=N`: the per-CPU caches beside the per-owner handle:
/// `local` and `local_bulk` at P = 1..32 (per-CPU rseq, per-CPU locked, per-owner handle,
/// mimalloc), the pipeline at P = 1..8 (per-CPU rseq with each refill order, per-owner handle,
/// mimalloc, the handoff bound, the meta bound and the shuffled bound), and the stranding
/// pattern's failures for both pools (`SKB_BENCH_PERCPU=local`: the two `local` tables alone;
/// `SKB_BENCH_PERCPU=pipeline`: all but them). Slices of 3 000 000 frames (`SKB_BENCH_SLICE` for `local`,
/// `SKB_BENCH_PIPE_SLICE` for the pipeline). Same-run ratios are medians of in-round ratios.
/// Each row ends with what the cross-core probe ([`lockless_xmit::pingpong::probe`]) read
/// before its rounds: the machine's state.
fn percpu_table(rounds: usize) {
    let local = [
        runner(PerCpuPool::<false>::new()),
        runner(PerCpuPool::<true>::new()),
        runner(skb_pool_owners(64)),
        runner(Mimalloc),
    ];
    println!("per-CPU: {rounds} rounds, defer_max {}", defer_max());
    let slice = env_usize("SKB_BENCH_SLICE").unwrap_or(3_000_000) as u64;
    let local_tables: &[&str] = if std::env::var("SKB_BENCH_PERCPU").as_deref() == Ok("pipeline") {
        &[]
    } else {
        &["local", "local_bulk"]
    };
    for &pattern in local_tables {
        println!(
            "| {pattern} P | per-CPU rseq | per-CPU locked | per-owner | mimalloc | rseq/owner | rseq/mimalloc | locked/owner | ping-pong ns |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for p in percpu_threads() {
            let state = state_before();
            let r = rotate(&local, rounds, pattern, p, slice);
            println!(
                "| {p} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}x | {:.2}x | {:.2}x | {state} |",
                median(&r[0]),
                median(&r[1]),
                median(&r[2]),
                median(&r[3]),
                ratio(&r, 0, 2),
                ratio(&r, 0, 3),
                ratio(&r, 1, 2)
            );
        }
    }
    if std::env::var("SKB_BENCH_PERCPU").as_deref() == Ok("local") {
        return;
    }
    let pipe = [
        runner(PerCpuPool::<false>::new()),
        runner(skb_pool()),
        runner(Mimalloc),
        runner(Circulate::new()),
        runner(MetaBound::new()),
        runner(ShuffledBound(Circulate::with_order(true))),
        runner(PerCpuPool::<false, true>::new()),
    ];
    println!(
        "| pipeline P | per-CPU rseq | per-CPU rseq, address order | per-owner | mimalloc | bound | meta bound | shuffled bound | rseq/bound | address/bound | owner/bound | meta bound/bound | shuffled/bound | rseq/shuffled | owner/shuffled | rseq/mimalloc | address/mimalloc | owner/mimalloc | ping-pong ns |"
    );
    println!(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    // Three million frames a slice (100-200 ms here): with nine threads on two cores a slice
    // of 300 000 (10-20 ms, a few scheduler quanta) let thread start-up and the first
    // quanta decide the cell; the bound moved 2x between runs at P >= 2 (18-49 M/s at P = 2),
    // against 29-40 with long slices.
    let slice = env_usize("SKB_BENCH_PIPE_SLICE").unwrap_or(3_000_000) as u64;
    for p in PRODUCERS {
        let state = state_before();
        let r = rotate(&pipe, rounds, "pipeline", p, slice);
        println!(
            "| {p} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {state} |",
            median(&r[0]),
            median(&r[6]),
            median(&r[1]),
            median(&r[2]),
            median(&r[3]),
            median(&r[4]),
            median(&r[5]),
            ratio(&r, 0, 3),
            ratio(&r, 6, 3),
            ratio(&r, 1, 3),
            ratio(&r, 4, 3),
            ratio(&r, 5, 3),
            ratio(&r, 0, 5),
            ratio(&r, 1, 5),
            ratio(&r, 0, 2),
            ratio(&r, 6, 2),
            ratio(&r, 1, 2)
        );
    }
    let iters = env_usize("SKB_BENCH_STRAND_ITERS").unwrap_or(2000);
    for r in 0..rounds.min(3) {
        let (pf, pp) = stranding(true, iters);
        let (of, op) = stranding(false, iters);
        println!(
            "stranding round {r}: 1024 frames, 32 threads x {iters} iterations holding <= 8: \
             per-CPU {pf} Exhausted (peak in use {pp}), per-owner {of} Exhausted (peak in use {op})"
        );
    }
}

fn main() {
    if std::env::var("SKB_BENCH_ONLY").as_deref() == Ok("percpu") {
        percpu_table(env_usize("SKB_BENCH_ROUNDS").unwrap_or(5).max(1));
        return;
    }
    if let Some(rounds) = env_usize("SKB_BENCH_ROUNDS") {
        interleaved(rounds.max(1));
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    all(&mut c, "pipeline");
    all(&mut c, "local");
    c.final_summary();
    print_table();
}

//! [`Pool`]: the shared part of the frame pool — region, side array, owner slots, the per-CPU
//! caches, the overflow list and the depot. Its builder and the settings' limits and defaults
//! are `builder.rs`'s.
//!
//! Free frames live in nine places: an owner's cache (touched without atomics), an owner's
//! defer list (remote frees, `skb_attempt_defer_free`), a freeing thread's unflushed batch, a
//! CPU's cache and a CPU's defer list (`percpu/`), a CPU's outgoing batch of remote frees
//! (`outgoing.rs`) or its outgoing stack for one home CPU (`outstack.rs`), the shared overflow
//! list (remote frees over `defer_max`), and the depot (batches of frames not yet handed to any
//! owner or CPU, or given back by an owner whose cache grew past `cache_max` or that was
//! dropped, or by a full CPU cache). The depot is a mutex-guarded stack of whole batches, as
//! page_pool's ring is spinlocked: it is touched once per half a cache at most.
//!
//! This file must not validate settings (`builder.rs`) nor run a cache's operations: the
//! per-CPU caches are `percpu/`'s, the owner caches `handle.rs`'s.
//!
//! # Lifetime
//!
//! The pool is freed when the last reference goes. `Pool` values (each handle holds one) are
//! counted in `users`; frames out of the pool (in an `Skb` or in flight) and the handles'
//! spare frame references in `refs`, which carries a bias while any `Pool` value exists.
//! Handles buy frame references in blocks and keep the change, and a frame freed through a
//! handle leaves its reference with that handle, so the count is touched about once per
//! thousand frames, not per frame. Per-CPU frames count their references in their CPUs' words
//! instead, folded into `refs` when the last `Pool` value goes (see `percpu/mod.rs`); from then on
//! `refs` is exact and the pool goes with its last frame. Frames handed to the kernel keep the
//! pool — and so the UMEM — alive until they come back.

use core::fmt;
use core::ptr::NonNull;

use crossbeam_utils::CachePadded;
use llist_defer::{Fifo, LList};

use crate::builder::PoolBuilder;
use crate::error::{AddrError, BuildError, PoolError};
use crate::handle::PoolHandle;
use crate::meta::{Frame, FrameMeta, IN_FLIGHT, IN_USE, SideArray, TAG_MASK};
use crate::percpu::{PerCpu, PerCpuState, PerCpuStats};
use crate::region::Region;
use crate::remote::{Deferred, Kick, OwnerSlot, Wake};
use crate::skb::Skb;
use crate::stats::{HandleStats, PoolStats, Totals};
use crate::sync::{AtomicUsize, Mutex, Ordering, fence};

/// The atomic reference count's bias while a [`Pool`] value exists: per-CPU frames are counted
/// in the CPUs' words, so the atomic count alone may fall below its true value (see
/// `percpu/mod.rs`); the bias keeps it from reaching zero until the shares are folded in.
const BIAS: usize = 1 << (usize::BITS - 2);

/// Validated settings the hot paths read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) headroom: u32,
    pub(crate) defer_max: usize,
    pub(crate) remote_batch: usize,
    pub(crate) cache_max: usize,
    pub(crate) shift: u32,
}

/// The shared state. Reached through a raw pointer from every frame's metadata; freed when
/// [`refs`](PoolInner::refs) reaches zero.
///
/// Field order is drop order: the lists (whose drops walk frame links) before the side array
/// that holds the links, and the region last.
pub(crate) struct PoolInner {
    refs: AtomicUsize,
    /// `Pool` values (handles hold one each); the last one freezes the per-CPU shares.
    users: AtomicUsize,
    pub(crate) cfg: Config,
    pub(crate) totals: Totals,
    /// On its own line: every refill that reaches it locks it, and the fields beside it (`cfg`
    /// above all) are read by every free and allocation on every core.
    pub(crate) depot: CachePadded<Mutex<Vec<Fifo<Frame>>>>,
    pub(crate) overflow: LList<Frame>,
    pub(crate) slots: Box<[OwnerSlot]>,
    pub(crate) percpu: PerCpuState,
    pub(crate) metas: SideArray,
    pub(crate) region: Region,
}

impl PoolInner {
    /// Locks the depot. A panic while another thread held it leaves the `Vec` consistent (at
    /// worst a batch that thread had popped dies with it, as it would without the lock), so a
    /// poisoned lock is taken as it is.
    #[inline]
    pub(crate) fn lock_depot(&self) -> impl core::ops::DerefMut<Target = Vec<Fifo<Frame>>> + '_ {
        self.depot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn create(
        region: Region,
        cfg: Config,
        max_owners: usize,
        percpu: PerCpuState,
    ) -> NonNull<PoolInner> {
        let count = region.frame_count();
        // Allocate first, so every chunk header's pool pointer and every later access derive
        // from the one raw pointer the pool lives at.
        let raw: *mut PoolInner = Box::into_raw(Box::<PoolInner>::new_uninit()).cast();
        let metas = SideArray::new(&region, cfg.headroom, raw.cast_const());
        let slots: Box<[OwnerSlot]> = (0..max_owners).map(|_| OwnerSlot::new()).collect();
        let inner = PoolInner {
            refs: AtomicUsize::new(BIAS),
            users: AtomicUsize::new(1),
            region,
            percpu,
            metas,
            slots,
            overflow: LList::new(),
            depot: CachePadded::new(Mutex::new(Vec::new())),
            cfg,
            totals: Totals::new(),
        };
        // SAFETY: `raw` is a fresh, suitably aligned allocation for one `PoolInner`.
        unsafe { raw.write(inner) };
        // SAFETY: initialised just above; nobody else knows the pointer yet.
        let inner = unsafe { &*raw };
        // Seed the depot with every frame, in batches of half a cache, lowest index first out.
        let batch = (cfg.cache_max / 2).max(1);
        let mut batches = Vec::with_capacity(count.div_ceil(batch));
        let mut cur = Fifo::new();
        for m in inner.metas.iter() {
            cur.push_back(Frame(NonNull::from(m)));
            if cur.len() == batch {
                batches.push(core::mem::take(&mut cur));
            }
        }
        if !cur.is_empty() {
            batches.push(cur);
        }
        batches.reverse(); // the depot pops from the end
        *inner.lock_depot() = batches;
        // SAFETY: `Box::into_raw` never returns null.
        unsafe { NonNull::new_unchecked(raw) }
    }

    /// Adds `n` references. The caller already holds one, so the count is not zero.
    #[inline]
    pub(crate) fn acquire(&self, n: usize) {
        // Relaxed: as `Arc::clone`, a new reference is made from an existing one.
        self.refs.fetch_add(n, Ordering::Relaxed);
    }

    /// Drops `n` references, freeing the pool if they were the last.
    ///
    /// # Safety
    ///
    /// - `this` points to a live pool and the caller owns `n` of its references;
    /// - the caller does not touch the pool after this call.
    #[inline]
    pub(crate) unsafe fn release(this: NonNull<PoolInner>, n: usize) {
        // SAFETY: the caller still owns `n` references, so the pool is alive here.
        let refs = unsafe { &this.as_ref().refs };
        // Release, then an Acquire fence in the last one: every use of the pool by other
        // reference holders happens before the free (the `Arc::drop` protocol).
        if refs.fetch_sub(n, Ordering::Release) == n {
            fence(Ordering::Acquire);
            // SAFETY: that was the last reference: nobody else can reach the pool any more,
            // and it was leaked from a `Box` in `create`.
            drop(unsafe { Box::from_raw(this.as_ptr()) });
        }
    }

    /// The last [`Pool`] value is gone: folds the per-CPU reference shares into the atomic
    /// count, drops the bias, and frees the pool if nothing else holds it.
    ///
    /// # Safety
    ///
    /// `this` points to a live pool whose last `Pool` value is being dropped; the caller does
    /// not touch the pool after this call.
    unsafe fn kill(this: NonNull<PoolInner>) {
        // SAFETY: the bias (not yet dropped) keeps the pool alive here.
        let inner = unsafe { this.as_ref() };
        let Some(share) = inner.percpu.freeze() else {
            // Sections may still run against the caches: leak the pool rather than free it.
            return;
        };
        // From here every per-CPU operation takes the atomic path, so the count is exact once
        // the share is folded in. The true remainder (frames out of the pool) is below 2^32,
        // so it is the count minus the bias plus the share, modulo 2^32.
        let mut cur = inner.refs.load(Ordering::Relaxed);
        loop {
            let fin = (cur.wrapping_sub(BIAS) as u32).wrapping_add(share) as usize;
            match inner
                .refs
                .compare_exchange_weak(cur, fin, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) if fin == 0 => {
                    fence(Ordering::Acquire);
                    // SAFETY: no reference is left and no `Pool` value: nobody can reach the
                    // pool any more; it was leaked from a `Box` in `create`.
                    drop(unsafe { Box::from_raw(this.as_ptr()) });
                    return;
                }
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
    }

    /// The slot of owner `id`.
    #[inline]
    pub(crate) fn slot(&self, id: u16) -> &OwnerSlot {
        &self.slots[id as usize]
    }

    /// Frees one frame from a thread with no handle for this pool: an unbatched
    /// `skb_attempt_defer_free`, then drops the frame's pool reference.
    ///
    /// # Safety
    ///
    /// `frame` is an exclusively held in-use frame of the pool at `this`, carrying one
    /// reference to it.
    pub(crate) unsafe fn free_unbatched(this: NonNull<PoolInner>, frame: Frame) {
        {
            // SAFETY: the frame's reference keeps the pool alive until `release` below.
            let pool = unsafe { this.as_ref() };
            let owner = frame.owner();
            frame.set_free();
            let mut one = Fifo::new();
            one.push_back(frame);
            let mut s = HandleStats {
                remote_frees: 1,
                ..HandleStats::default()
            };
            // SAFETY: the frame is free, ours alone, and given up here.
            let wake = match unsafe {
                pool.slot(owner)
                    .defer(one, 1, pool.cfg.defer_max, &pool.overflow)
            } {
                Deferred::Overflow => {
                    s.overflow = 1;
                    None
                }
                Deferred::Queued(kick) => {
                    s.deferred = 1;
                    match kick {
                        Kick::Won(w) => {
                            s.wakes = 1;
                            w
                        }
                        Kick::None | Kick::AlreadyPending => None,
                    }
                }
            };
            pool.totals.fold(&s);
            if let Some(w) = wake {
                w();
            }
        }
        // SAFETY: the frame's reference is ours to drop, and we are done with the pool.
        unsafe { PoolInner::release(this, 1) };
    }

    /// Validates `addr` and takes the in-flight frame back (`state IN_FLIGHT(off) → IN_USE`).
    fn take_in_flight(&self, addr: u64, exact: bool) -> Result<NonNull<FrameMeta>, AddrError> {
        let region_len = self.region.len() as u64;
        if addr >= region_len {
            return Err(AddrError::OutOfRegion { addr, region_len });
        }
        let index = (addr >> self.cfg.shift) as usize;
        let off = (addr & ((1u64 << self.cfg.shift) - 1)) as u32;
        let meta = self
            .metas
            .get(index)
            .ok_or(AddrError::OutOfRegion { addr, region_len })?;
        let frame_base = (index as u64) << self.cfg.shift;
        let mut cur = meta.state.load(Ordering::Relaxed);
        loop {
            if cur & TAG_MASK != IN_FLIGHT {
                return Err(AddrError::NotInFlight { addr });
            }
            if exact && cur != (off << 2) | IN_FLIGHT {
                return Err(AddrError::Misaligned {
                    addr,
                    expected: frame_base + u64::from(cur >> 2),
                });
            }
            // Acquire: pairs with `into_addr`'s Release, so the metadata written before the
            // frame went to the kernel is visible. One CAS validates state and offset at once,
            // so of two racing completions for one frame exactly one wins.
            match meta.state.compare_exchange_weak(
                cur,
                IN_USE,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(NonNull::from(meta)),
                Err(seen) => cur = seen,
            }
        }
    }
}

/// A frame pool: the region, and the shared state its owner handles and frames point at.
///
/// Cloning a `Pool` is cheap (one reference count increment); every clone names the same pool.
/// Threads that allocate get a [`PoolHandle`] with [`handle`](Pool::handle).
///
/// ```
/// use skb_pool::Pool;
///
/// let pool = Pool::builder().frame_count(64).build()?;
/// let mut h = pool.handle()?;
/// let mut skb = h.alloc()?;
/// skb.put_slice(b"hello")?;
/// assert_eq!(skb.data(), b"hello");
/// drop(skb); // back into h's cache
/// drop(h);
/// assert_eq!(pool.stats().free, 64);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Pool {
    pub(crate) inner: NonNull<PoolInner>,
}

// SAFETY: everything reachable through `&PoolInner` is atomics, lock-free lists, a mutex, or
// immutable after construction; frame contents are reached only through exclusive handles.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Pool {
    /// Whether `self` and `other` are the same pool (clones of one handle share it), like
    /// `Arc::ptr_eq`.
    pub fn ptr_eq(&self, other: &Pool) -> bool {
        self.inner == other.inner
    }

    /// A builder with the defaults (2048-byte frames × 4096, headroom 256, defer_max 128).
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    /// A pool with the defaults.
    ///
    /// # Errors
    ///
    /// [`BuildError::Mmap`] if the 8 MiB region cannot be mapped.
    pub fn new() -> Result<Pool, BuildError> {
        PoolBuilder::default().build()
    }

    #[inline]
    pub(crate) fn inner(&self) -> &PoolInner {
        // SAFETY: this `Pool` owns a reference, so the pool is alive.
        unsafe { self.inner.as_ref() }
    }

    /// The frame region, for AF_XDP UMEM registration.
    pub fn region(&self) -> &Region {
        &self.inner().region
    }

    /// Headroom a new `Skb` starts with.
    pub fn headroom(&self) -> usize {
        self.inner().cfg.headroom as usize
    }

    /// The per-owner defer limit.
    pub fn defer_max(&self) -> usize {
        self.inner().cfg.defer_max
    }

    /// The effective remote-free batch size (after clamping to `defer_max / 4`).
    pub fn remote_batch(&self) -> usize {
        self.inner().cfg.remote_batch
    }

    /// Number of owner slots.
    pub fn max_owners(&self) -> usize {
        self.inner().slots.len()
    }

    /// Allocates one frame from the cache of the CPU the calling thread runs on: any thread,
    /// no registration. The frame has the pool's headroom, empty data and cleared metadata,
    /// and goes home to that CPU when dropped (see the crate docs for when to prefer a
    /// [`PoolHandle`]).
    ///
    /// ```
    /// let pool = skb_pool::Pool::builder().frame_count(64).build()?;
    /// let skbs: Vec<_> = std::thread::scope(|s| {
    ///     let a = s.spawn(|| pool.alloc());
    ///     let b = s.spawn(|| pool.alloc());
    ///     [a.join().unwrap(), b.join().unwrap()]
    /// }).into_iter().collect::<Result<_, _>>()?;
    /// assert_eq!(pool.stats().in_use, 2);
    /// drop(skbs); // each back to its home CPU's cache or defer list
    /// assert_eq!(pool.stats().in_use, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`PoolError::Exhausted`] if no frame is free anywhere this CPU can reach: its cache, the
    /// depot, every CPU's defer list, the frames freed on another CPU that wait there for their
    /// batch to fill and, last, the fullest other CPU's cache (half of it, at the cost of an
    /// interrupt to that CPU in an rseq pool). Other threads move free frames between those
    /// places (a refill carries them from a list to its cache): an allocation that finds
    /// nothing while a move is in progress or has just ended, or while a place is held by
    /// another thread, yields and looks again. So `Exhausted` normally means a look during
    /// which no frame moved found none free; while frames keep moving (or a thread holding
    /// some is descheduled) it gives up after 16 looks and 2 ms, long enough for the frames
    /// waiting for their batch, which an rseq pool takes at most once a millisecond (taking
    /// them interrupts every CPU); [`PerCpuStats::exhausted_moving`] counts those. Frees are not
    /// part of that: a frame freed behind a look, while other threads take the frames ahead of
    /// it, can be missed, when the pool had at most that frame free.
    #[inline(always)]
    pub fn alloc(&self) -> Result<Skb, PoolError> {
        let frame = self.inner().percpu_alloc().ok_or(PoolError::Exhausted)?;
        // SAFETY: the frame is in use, ours alone, and carries one pool reference.
        Ok(unsafe { Skb::from_meta(frame.0) })
    }

    /// Allocates up to `n` frames into `out`, as [`alloc`](Self::alloc) would one by one;
    /// returns how many (fewer than `n` only when the pool is exhausted). It takes up to
    /// [`BULK`](Self::BULK) frames from the CPU's cache per critical section (one rseq section
    /// with [`PerCpu::Rseq`], one acquisition of the cache's try-lock with [`PerCpu::Locked`]).
    pub fn alloc_bulk<E: Extend<Skb>>(&self, n: usize, out: &mut E) -> usize {
        let inner = self.inner();
        let mut got = 0;
        let mut handout = crate::skb::Handout::new();
        while got < n {
            let want = (n - got).min(Self::BULK);
            let k = inner.percpu_alloc_bulk(&mut handout.slots()[..want]);
            if k > 0 {
                // SAFETY: `percpu_alloc_bulk` handed us these frames in use, each with one
                // pool reference.
                unsafe { handout.set_len(k) };
                // Frames `out` does not take are freed (leaked if it panics).
                handout.hand_to(out);
                got += k;
                continue;
            }
            match self.alloc() {
                Ok(skb) => out.extend(core::iter::once(skb)),
                Err(_) => return got,
            }
            got += 1;
        }
        n
    }

    /// Frames [`alloc_bulk`](Self::alloc_bulk) and [`free_bulk`](Self::free_bulk) move per
    /// critical section at most.
    pub const BULK: usize = 32;

    /// Frees many frames, as [`Skb::free_bulk`] does (frames of any pool).
    pub fn free_bulk<I: IntoIterator<Item = Skb>>(&self, skbs: I) {
        Skb::free_bulk(skbs);
    }

    /// [`alloc`](Self::alloc), waiting up to `timeout` for a frame to come back if the pool is
    /// exhausted. There is no owner to wake here: it looks again after a nap that starts at
    /// [`FIRST_NAP`](Self::FIRST_NAP) and doubles up to [`PoolHandle::WAIT_NAP`], so a frame
    /// that comes back soon is seen soon, and a long wait costs a wakeup a millisecond.
    ///
    /// # Errors
    ///
    /// [`PoolError::Exhausted`] if no frame came back within `timeout` (overrun by up to the
    /// 2 ms an [`alloc`](Self::alloc) may look while frames move).
    pub fn alloc_wait(&self, timeout: std::time::Duration) -> Result<Skb, PoolError> {
        let deadline = std::time::Instant::now().checked_add(timeout);
        let mut longest = Self::FIRST_NAP;
        loop {
            match self.alloc() {
                Err(PoolError::Exhausted) => {}
                other => return other,
            }
            let now = std::time::Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(PoolError::Exhausted);
            }
            let nap = deadline.map_or(longest, |d| (d - now).min(longest));
            crate::sync::park_timeout(nap);
            longest = (longest * 2).min(PoolHandle::WAIT_NAP);
        }
    }

    /// The first nap of [`alloc_wait`](Self::alloc_wait) (each next one twice as long, up to
    /// [`PoolHandle::WAIT_NAP`]).
    pub const FIRST_NAP: std::time::Duration = std::time::Duration::from_micros(16);

    /// The per-CPU implementation this pool got ([`PerCpu::Rseq`] or [`PerCpu::Locked`]).
    pub fn per_cpu(&self) -> PerCpu {
        self.inner().percpu.mode()
    }

    /// Frames per CPU cache, per CPU defer list and in the depot, and the per-CPU counters.
    pub fn per_cpu_stats(&self) -> PerCpuStats {
        let inner = self.inner();
        let depot = inner.lock_depot().iter().map(Fifo::len).sum();
        inner.percpu.stats(depot)
    }

    /// Registers the calling thread as an owner, without a wake callback.
    ///
    /// # Errors
    ///
    /// [`PoolError::TooManyOwners`] if every slot has a live handle.
    pub fn handle(&self) -> Result<PoolHandle, PoolError> {
        PoolHandle::new(self, None)
    }

    /// Registers the calling thread as an owner whose `wake` is called when remote frees fill
    /// its defer list past half of `defer_max` (once per fill cycle). It runs on the freeing
    /// thread: keep it short (unpark a thread, write an eventfd).
    ///
    /// # Errors
    ///
    /// [`PoolError::TooManyOwners`] if every slot has a live handle.
    pub fn handle_with_wake(&self, wake: Wake) -> Result<PoolHandle, PoolError> {
        PoolHandle::new(self, Some(wake))
    }

    /// Takes back a frame the kernel completed (AF_XDP completion ring): `addr` must be exactly
    /// what [`Skb::into_addr`] returned. The address is validated — inside the region, the frame
    /// in flight, the same data offset — before anything is dereferenced; a duplicate or forged
    /// address is refused. The `Skb` keeps its data window and metadata.
    ///
    /// # Errors
    ///
    /// [`AddrError::OutOfRegion`], [`AddrError::Misaligned`] or [`AddrError::NotInFlight`].
    ///
    /// ```
    /// let pool = skb_pool::Pool::builder().frame_count(8).build()?;
    /// let mut h = pool.handle()?;
    /// let mut skb = h.alloc()?;
    /// skb.put_slice(&[0xab; 60])?;
    /// let addr = skb.into_addr(); // now owned by the kernel (a TX descriptor)
    /// let back = pool.skb_from_addr(addr)?; // from the completion ring
    /// assert_eq!(back.len(), 60);
    /// assert!(pool.skb_from_addr(addr).is_err(), "a duplicate completion is refused");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn skb_from_addr(&self, addr: u64) -> Result<Skb, AddrError> {
        let meta = self.inner().take_in_flight(addr, true)?;
        // SAFETY: the CAS made us the frame's only holder; its pool reference moves to the Skb.
        Ok(unsafe { Skb::from_meta(meta) })
    }

    /// Takes back a frame the kernel filled (AF_XDP RX ring): `addr` may be anywhere in a frame
    /// that is in flight (handed out with [`Skb::into_addr`] for the fill ring); the `Skb`'s
    /// data becomes `addr .. addr + len` of that frame.
    ///
    /// # Errors
    ///
    /// [`AddrError::OutOfRegion`] if `addr .. addr + len` leaves the frame or the region,
    /// [`AddrError::NotInFlight`] if the frame is not in flight.
    pub fn skb_from_rx(&self, addr: u64, len: u32) -> Result<Skb, AddrError> {
        let inner = self.inner();
        let fs = 1u64 << inner.cfg.shift;
        let region_len = inner.region.len() as u64;
        if addr >= region_len || (addr & (fs - 1)) + u64::from(len) > fs {
            return Err(AddrError::OutOfRegion { addr, region_len });
        }
        // The kernel just wrote the packet and the caller reads it next: ask for its first line
        // now, so that it arrives while the state word is validated (a hint: nothing is read
        // from the frame before the validation succeeds).
        llist_defer::hint::prefetch(inner.region.base().wrapping_add(addr as usize));
        let meta = inner.take_in_flight(addr, false)?;
        // SAFETY: as in `skb_from_addr`.
        let mut skb = unsafe { Skb::from_meta(meta) };
        skb.set_window((addr & (fs - 1)) as u32, len);
        Ok(skb)
    }

    /// A snapshot of frame states and counters (an O(frame_count) scan of the state words).
    pub fn stats(&self) -> PoolStats {
        let inner = self.inner();
        let (mut free, mut in_use, mut in_flight) = (0, 0, 0);
        for m in inner.metas.iter() {
            match m.state.load(Ordering::Relaxed) & TAG_MASK {
                IN_USE => in_use += 1,
                IN_FLIGHT => in_flight += 1,
                _ => free += 1,
            }
        }
        PoolStats {
            frame_count: inner.metas.len(),
            free,
            in_use,
            in_flight,
            owners: inner.slots.iter().filter(|s| s.is_claimed()).count(),
            totals: inner.totals.snapshot(),
        }
    }

    /// The remote-free state of one owner (for monitoring, and for the loom model).
    pub fn owner_state(&self, owner: crate::OwnerId) -> Option<OwnerState> {
        let slot = self.inner().slots.get(owner.index())?;
        Some(OwnerState {
            claimed: slot.is_claimed(),
            deferred_count: slot.count(),
            has_deferred: !slot.looks_empty(),
            wake_pending: slot.is_pending(),
        })
    }
}

impl Clone for Pool {
    fn clone(&self) -> Self {
        // Relaxed: as `Arc::clone`, a new value is made from an existing one.
        self.inner().users.fetch_add(1, Ordering::Relaxed);
        Pool { inner: self.inner }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Release, and Acquire in the last one: every use through other values happens before
        // the kill (the `Arc::drop` protocol).
        if self.inner().users.fetch_sub(1, Ordering::Release) == 1 {
            fence(Ordering::Acquire);
            // SAFETY: that was the last `Pool` value; this one is not used again.
            unsafe { PoolInner::kill(self.inner) };
        }
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner();
        f.debug_struct("Pool")
            .field("region", &inner.region)
            .field("cfg", &inner.cfg)
            .field("owners", &inner.slots.len())
            .finish_non_exhaustive()
    }
}

/// One owner's remote-free state ([`Pool::owner_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerState {
    /// Whether a live handle owns the slot.
    pub claimed: bool,
    /// The defer count (frames deferred since the last drain; errs high after overflows, and
    /// low when frees race a drain's reset, as the kernel's does).
    pub deferred_count: usize,
    /// Whether the defer list holds frames (a relaxed snapshot).
    pub has_deferred: bool,
    /// Whether a wake is pending (set by the kick at half of `defer_max`, cleared by a drain).
    pub wake_pending: bool,
}

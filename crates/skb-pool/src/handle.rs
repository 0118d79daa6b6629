//! [`PoolHandle`]: one owner thread's view of the pool — the kernel's per-CPU side of
//! `skb_attempt_defer_free` / `skb_defer_free_flush`, with page_pool's owner-only cache.
//!
//! A handle owns a slot (its [`OwnerId`]) and a local state no other thread touches: a LIFO
//! cache of free frames, the chain last taken from the overflow list, one outgoing batch per
//! other owner, and its share of pool references. Allocation pops the cache without an atomic;
//! when the cache is dry it drains, in order: its defer list (packed batches, unpacked behind
//! the cache in the order their frames were freed), the shared overflow list, a depot batch,
//! the defer lists of vacant slots, and then per-CPU frees no CPU is taking: the first
//! non-empty CPU defer list, a CPU's stranded outgoing batch.
//!
//! Dropping an [`Skb`] looks up the calling thread's handle for the frame's pool (a short
//! thread-local list, usually of one). On the owner's thread the frame goes into the cache. On
//! another thread with a handle it joins that handle's batch for the owner, packed and pushed
//! with one `add_batch` when it reaches `remote_batch` frames, on [`PoolHandle::flush_frees`],
//! and when that handle is dropped (snmalloc's message batching). On a thread without a handle
//! it is deferred alone, exactly as the kernel does it.
//!
//! # Why `!Send`
//!
//! The thread-local registration is what tells an `Skb`'s drop that it runs on its owner's
//! thread and may touch the owner's cache without atomics. A handle moved to another thread
//! would leave that registration behind, and two threads would then share the cache unguarded.
//! So a handle stays on the thread that made it (`!Send`, `!Sync`); make one per thread.

use core::fmt;
use core::marker::PhantomData;
use core::ptr::{self, NonNull};
use std::collections::VecDeque;

use llist_defer::{Chain, Fifo};

use crate::error::{AddrError, PoolError};
use crate::meta::{ALLOC_AHEAD, Frame, FrameMeta};
use crate::packed;
use crate::pool::{Pool, PoolInner};
use crate::remote::{Deferred, Kick, OwnerSlot, Wake};
use crate::skb::{OwnerId, Skb};
use crate::stats::HandleStats;
use crate::sync::LOCALS;

/// Pool references a handle buys at once for the frames it hands out.
const CREDIT_BATCH: usize = 1024;
/// Above this many spare references a handle gives back all but `CREDIT_BATCH`.
const CREDIT_HIGH: usize = 4 * CREDIT_BATCH;

/// A handle's thread-local state. Reached through a raw pointer both from its [`PoolHandle`]
/// and from `Skb` drops on the same thread; a `&mut Local` is only ever formed for the span of
/// one method that runs no user code and drops no `Skb`, so those borrows never overlap.
pub(crate) struct Local {
    pool: NonNull<PoolInner>,
    slot: NonNull<OwnerSlot>,
    id: u16,
    cache: Fifo<Frame>,
    /// Frames its defer list sent home, as metadata addresses in the order they were freed,
    /// handed out once the cache is empty: kept as addresses, a drain writes nothing into the
    /// frames (their lines are in the freeing core's cache until each is allocated). Reserved
    /// for a whole defer list up front; a drain that finds it full links the rest behind the
    /// cache.
    returned: VecDeque<usize>,
    /// The chain last taken from the overflow list (plain frames, linked through their own
    /// metadata), allocated from once the cache is empty: walked one frame per allocation
    /// instead of all at once.
    taken: Chain<Frame>,
    outgoing: Box<[Fifo<Frame>]>,
    dirty: Box<[u64]>,
    credits: usize,
    stats: HandleStats,
    /// Next handle registered on this thread.
    next: *mut Local,
}

impl Local {
    #[inline]
    fn pool(&self) -> &PoolInner {
        // SAFETY: the handle owning this state holds a pool reference.
        unsafe { self.pool.as_ref() }
    }

    #[inline]
    fn slot(&self) -> &OwnerSlot {
        // SAFETY: the slot is in the pool's slot array, alive as long as the pool.
        unsafe { self.slot.as_ref() }
    }

    /// The allocation path: poll the kick, pop the cache, the returned frames or the taken
    /// chain, else refill.
    #[inline]
    fn alloc_frame(&mut self) -> Option<Frame> {
        if self.slot().is_pending() {
            self.drain_own();
        }
        let frame = match self.cache.pop_front() {
            Some(f) => f,
            None => match self.pop_returned().or_else(|| self.pop_taken()) {
                Some(f) => f,
                None => self.refill()?,
            },
        };
        if self.credits == 0 {
            self.pool().acquire(CREDIT_BATCH);
            self.credits = CREDIT_BATCH;
        }
        self.credits -= 1; // this reference now travels with the frame
        frame.init(self.id, self.pool().cfg.headroom);
        self.stats.allocs += 1;
        Some(frame)
    }

    /// The bulk allocation path for up to [`Pool::BULK`](crate::Pool::BULK) frames: one kick
    /// poll, then as many frames as the cache has (up to `n`) with one credit and counter
    /// update, the rest one by one, their metadata addresses into `out`. Returns how many.
    /// Runs no user code: the caller hands the frames over once this borrow has ended.
    fn take_many(&mut self, n: usize, out: &mut crate::skb::Handout) -> usize {
        let slots = out.slots();
        let n = n.min(slots.len());
        if self.slot().is_pending() {
            self.drain_own();
        }
        let k = n.min(self.cache.len());
        while self.credits < k {
            self.pool().acquire(CREDIT_BATCH);
            self.credits += CREDIT_BATCH;
        }
        self.credits -= k; // these references now travel with the frames
        self.stats.allocs += k as u64;
        let (id, headroom) = (self.id, self.pool().cfg.headroom);
        let mut got = 0;
        while got < k {
            let Some(f) = self.cache.pop_front() else {
                break;
            };
            f.init(id, headroom);
            slots[got] = f.0.as_ptr() as usize;
            got += 1;
        }
        debug_assert_eq!(got, k);
        while got < n {
            let Some(f) = self.alloc_frame() else { break };
            slots[got] = f.0.as_ptr() as usize;
            got += 1;
        }
        // SAFETY: each slot below `got` is a frame just put in use, carrying one reference.
        unsafe { out.set_len(got) };
        got
    }

    #[inline]
    fn pop_returned(&mut self) -> Option<Frame> {
        let a = self.returned.pop_front()?;
        // The frame `ALLOC_AHEAD` allocations on: its metadata line is in the freeing core's
        // cache, and `init` writes it (see `meta::ALLOC_AHEAD`).
        if let Some(&next) = self.returned.get(ALLOC_AHEAD) {
            llist_defer::hint::prefetch_write(next as *const FrameMeta);
        }
        // SAFETY: `returned` holds only entries of free frames of this pool, each once.
        Some(unsafe { Frame::from_addr(a) })
    }

    #[inline]
    fn pop_taken(&mut self) -> Option<Frame> {
        let f = self.taken.pop()?;
        self.stats.overflow_taken += 1;
        Some(f)
    }

    /// `skb_defer_free_flush` for this owner. Returns whether frames were found. They go behind
    /// the cache, in the order they were freed (frames sent home were freed after those the
    /// cache holds, and a pool whose frames keep their order keeps them at the stride the
    /// hardware prefetcher follows).
    fn drain_own(&mut self) -> bool {
        let heads = self.slot().drain();
        if heads.is_empty() {
            return false;
        }
        self.stats.drains += 1;
        self.take_home(heads);
        true
    }

    /// Puts the frames of a defer list taken whole (from this handle's slot or a vacant one)
    /// into `returned`, in the order they were freed, counted as drained.
    fn take_home(&mut self, heads: Chain<Frame>) {
        let (returned, cache, stats) = (&mut self.returned, &mut self.cache, &mut self.stats);
        // SAFETY: an owner slot's list holds only packed heads of this pool, taken whole.
        unsafe {
            packed::unpack_each_oldest_first(heads, |batch| {
                stats.drained += batch.len() as u64;
                let room = (returned.capacity() - returned.len()).min(batch.len());
                returned.extend(&batch[..room]);
                for &a in &batch[room..] {
                    // SAFETY: an entry of a free frame of the batch, each once.
                    cache.push_back(Frame::from_addr(a));
                }
            })
        };
    }

    #[cold]
    fn refill(&mut self) -> Option<Frame> {
        if self.drain_own() {
            return self.cache.pop_front().or_else(|| self.pop_returned());
        }
        // Only a dry handle refills: the cache, the returned frames and the taken chain are all
        // empty.
        let overflow = self.pool().overflow.take_all();
        if !overflow.is_empty() {
            debug_assert!(self.taken.is_empty());
            self.taken = overflow;
            return self.pop_taken();
        }
        let batch = self.pool().lock_depot().pop();
        if let Some(mut batch) = batch {
            let f = batch.pop_front();
            self.cache.append(&mut batch);
            return f;
        }
        // Last resort: frames freed to slots whose handles are gone (they raced the drop), and
        // per-CPU frames sent home to CPUs where nobody calls `Pool::alloc` any more.
        let pool = self.pool;
        // SAFETY: our handle's reference keeps the pool alive; the borrow is not tied to self.
        let pool = unsafe { pool.as_ref() };
        for slot in pool.slots.iter().filter(|s| !s.is_claimed()) {
            if !slot.looks_empty() {
                self.take_home(slot.drain());
                if let Some(f) = self.cache.pop_front().or_else(|| self.pop_returned()) {
                    return Some(f);
                }
            }
        }
        let mut homeless = pool.probe_cpus();
        if let Some(f) = homeless.pop_front() {
            self.stats.drained += 1 + homeless.len() as u64;
            self.cache.append(&mut homeless);
            return Some(f);
        }
        // And per-CPU remote frees waiting in an outgoing batch no free will complete.
        let mut stranded = pool.take_outgoing();
        let f = stranded.pop_front();
        self.cache.append(&mut stranded);
        f
    }

    /// The free path for a frame whose pool is this handle's. Takes over the frame's pool
    /// reference. Returns a wake to call once this borrow ends.
    #[inline]
    fn free(&mut self, frame: Frame) -> Option<Wake> {
        self.credits += 1;
        let owner = frame.owner();
        frame.set_free();
        if owner == self.id {
            self.cache.push_front(frame);
            self.stats.local_frees += 1;
            if self.cache.len() > self.pool().cfg.cache_max {
                self.spill();
            }
            if self.credits > CREDIT_HIGH {
                self.give_back_credits();
            }
            return None;
        }
        self.stats.remote_frees += 1;
        let out = &mut self.outgoing[owner as usize];
        out.push_back(frame);
        let len = out.len();
        if len == 1 {
            self.dirty[owner as usize / 64] |= 1 << (owner % 64);
        }
        if len >= self.pool().cfg.remote_batch {
            self.flush_to(owner)
        } else {
            None
        }
    }

    /// Moves the colder half of an overgrown cache to the depot.
    #[cold]
    fn spill(&mut self) {
        let keep = self.pool().cfg.cache_max / 2;
        let mut hot = Fifo::new();
        while hot.len() < keep {
            match self.cache.pop_front() {
                Some(f) => hot.push_back(f),
                None => break,
            }
        }
        let cold = core::mem::replace(&mut self.cache, hot);
        if !cold.is_empty() {
            self.pool().lock_depot().push(cold);
        }
    }

    #[cold]
    fn give_back_credits(&mut self) {
        let extra = self.credits - CREDIT_BATCH;
        self.credits = CREDIT_BATCH;
        // SAFETY: we own `extra` spare references, and the handle still holds its own, so the
        // pool stays alive and is not touched by this call after the decrement.
        unsafe { PoolInner::release(self.pool, extra) };
    }

    /// Pushes the outgoing batch for `owner` (one `skb_attempt_defer_free` for the batch).
    fn flush_to(&mut self, owner: u16) -> Option<Wake> {
        self.dirty[owner as usize / 64] &= !(1 << (owner % 64));
        let batch = core::mem::take(&mut self.outgoing[owner as usize]);
        let k = batch.len();
        if k == 0 {
            return None;
        }
        let pool = self.pool;
        // SAFETY: our handle's reference keeps the pool alive; the borrow is not tied to self.
        let pool = unsafe { pool.as_ref() };
        // SAFETY: the batch's frames are free frames of this pool, ours alone, given up here.
        match unsafe {
            pool.slot(owner)
                .defer(batch, k, pool.cfg.defer_max, &pool.overflow)
        } {
            Deferred::Overflow => {
                self.stats.overflow += k as u64;
                None
            }
            Deferred::Queued(kick) => {
                self.stats.deferred += k as u64;
                match kick {
                    Kick::Won(w) => {
                        self.stats.wakes += 1;
                        w
                    }
                    Kick::None | Kick::AlreadyPending => None,
                }
            }
        }
    }

    /// The lowest owner with a non-empty outgoing batch.
    fn next_dirty(&self) -> Option<u16> {
        self.dirty
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| (i * 64 + w.trailing_zeros() as usize) as u16)
    }

    /// Empties everything this handle holds into the depot (the handle is going away);
    /// returns whether it moved any frame.
    fn give_back_frames(&mut self) -> bool {
        let mut all = core::mem::take(&mut self.cache);
        for a in self.returned.drain(..) {
            // SAFETY: `returned` holds only entries of free frames of this pool, each once.
            all.push_back(unsafe { Frame::from_addr(a) });
        }
        all.append(&mut core::mem::take(&mut self.taken).reverse());
        // SAFETY: an owner slot's list holds only packed heads of this pool.
        all.append(&mut unsafe { packed::unpack_oldest_first(self.slot().drain()) });
        if all.is_empty() {
            return false;
        }
        self.pool().lock_depot().push(all);
        true
    }
}

/// Frees a frame from an `Skb` drop: a per-CPU frame to its home CPU (inlined fast path), an
/// owner's frame through this thread's handle for its pool if there is one, else alone (the
/// handle-less remote free).
#[inline]
pub(crate) fn free_frame(frame: Frame) {
    if frame.owner() & crate::percpu::HOME_FLAG != 0 {
        let pool = frame.pool();
        // SAFETY: the frame is exclusively ours (its `Skb` is being dropped), in use, stamped by
        // the per-CPU path, and carries a reference to its pool, which is therefore alive.
        unsafe { PoolInner::percpu_free(NonNull::new_unchecked(pool.cast_mut()), frame) };
        return;
    }
    free_owned(frame);
}

/// [`free_frame`] of a frame a handle allocated.
#[inline(never)]
fn free_owned(frame: Frame) {
    let pool = frame.pool();
    free_through(local_for(pool), pool, frame);
}

/// [`free_owned`] of a run of handle frames of the pool at `pool` (metadata addresses, each
/// an in-use frame given up by the caller with its reference): the thread's handle state is
/// looked up once for the run, and again after a wake (the callback may have dropped it).
pub(crate) fn free_owned_run(pool: *const PoolInner, frames: &[usize]) {
    let mut local = local_for(pool);
    for &f in frames {
        // SAFETY: the caller's contract: an in-use frame of this pool, ours to free.
        let frame = unsafe { Frame::from_addr(f) };
        if free_through(local, pool, frame) {
            local = local_for(pool);
        }
    }
}

/// Frees a handle frame of the pool at `pool` through `local`, this thread's state for that
/// pool (null: unbatched, to its owner's defer list or the overflow list). Returns whether it
/// called a wake.
#[inline]
fn free_through(local: *mut Local, pool: *const PoolInner, frame: Frame) -> bool {
    if local.is_null() {
        // SAFETY: the frame is exclusively ours (its `Skb` is being freed), in use, and carries
        // a reference to the pool `pool` points at, which is therefore alive.
        unsafe { PoolInner::free_unbatched(NonNull::new_unchecked(pool.cast_mut()), frame) };
        return false;
    }
    // SAFETY: the state is registered on this thread (looked up since the last wake), so its
    // handle is alive here; no other borrow of it is live (see `Local`): we are freeing an
    // `Skb`, not inside a `Local` method.
    let wake = unsafe { (*local).free(frame) };
    match wake {
        Some(w) => {
            w();
            true
        }
        None => false,
    }
}

/// This thread's registered handle state for the pool at `pool`, or null.
#[inline]
fn local_for(pool: *const PoolInner) -> *mut Local {
    LOCALS
        .try_with(|head| {
            let mut cur = head.get();
            while !cur.is_null() {
                // SAFETY: registered states stay alive until their handle, on this thread,
                // unregisters them; reading two fields forms no `&mut`.
                let (p, next) = unsafe { ((*cur).pool.as_ptr().cast_const(), (*cur).next) };
                if p == pool {
                    return cur;
                }
                cur = next;
            }
            ptr::null_mut()
        })
        .unwrap_or(ptr::null_mut())
}

/// One owner thread's handle on a [`Pool`]: allocation from a local cache, batched remote
/// frees, and the drain of its own defer list.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use skb_pool::Pool;
///
/// let pool = Pool::builder().frame_count(256).defer_max(8).build()?;
/// let wakes = Arc::new(AtomicUsize::new(0));
/// let w = wakes.clone();
/// let mut owner = pool.handle_with_wake(Arc::new(move || { w.fetch_add(1, Ordering::Relaxed); }))?;
/// let skbs: Vec<_> = (0..6).map(|_| owner.alloc()).collect::<Result<_, _>>()?;
///
/// // Another thread, without a handle, frees them: they are deferred to the owner, which is
/// // woken once when its defer list passes half of defer_max.
/// std::thread::spawn(move || drop(skbs)).join().unwrap();
/// assert_eq!(wakes.load(Ordering::Relaxed), 1);
///
/// // The owner drains its defer list in its poll loop (or when its cache runs dry).
/// owner.flush_remote();
/// drop(owner);
/// assert_eq!(pool.stats().free, 256);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PoolHandle {
    local: NonNull<Local>,
    pool: Pool,
    _not_send: PhantomData<*mut ()>,
}

impl PoolHandle {
    pub(crate) fn new(pool: &Pool, wake: Option<Wake>) -> Result<PoolHandle, PoolError> {
        let inner = pool.inner();
        let id = inner
            .slots
            .iter()
            .position(|s| s.try_claim(wake.clone()))
            .ok_or(PoolError::TooManyOwners {
                max_owners: inner.slots.len(),
            })?;
        let slot = &inner.slots[id];
        let owners = inner.slots.len();
        let mut local = Box::new(Local {
            pool: pool.inner,
            slot: NonNull::from(slot),
            id: id as u16,
            cache: Fifo::new(),
            returned: VecDeque::with_capacity(inner.cfg.defer_max.max(packed::MAX_PACK)),
            taken: Chain::new(),
            outgoing: (0..owners).map(|_| Fifo::new()).collect(),
            dirty: vec![0; owners.div_ceil(64)].into_boxed_slice(),
            credits: 0,
            stats: HandleStats::default(),
            next: ptr::null_mut(),
        });
        // Frames freed to this slot after its previous handle left.
        local.drain_own();
        let local = NonNull::from(Box::leak(local));
        LOCALS.with(|head| {
            // SAFETY: `local` is fresh and ours; nothing else references it yet.
            unsafe { (*local.as_ptr()).next = head.get() };
            head.set(local.as_ptr());
        });
        Ok(PoolHandle {
            local,
            pool: pool.clone(),
            _not_send: PhantomData,
        })
    }

    #[inline]
    fn local(&mut self) -> &mut Local {
        // SAFETY: the state lives until this handle drops; `&mut self` on a `!Send` handle means
        // we are on its thread and no `Local` method is running (they never call back out).
        unsafe { self.local.as_mut() }
    }

    /// The pool this handle allocates from.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// This owner's identity, stamped on every frame it allocates.
    pub fn owner(&self) -> OwnerId {
        // SAFETY: reading a field of our live state; no `&mut` to it is live.
        OwnerId(unsafe { (*self.local.as_ptr()).id })
    }

    /// Allocates one frame, with the pool's headroom, empty data and cleared metadata.
    ///
    /// The fast path pops the local cache without an atomic. It also drains this owner's defer
    /// list first if a remote freer has kicked it (one relaxed load per call).
    ///
    /// # Errors
    ///
    /// [`PoolError::Exhausted`] if no frame is free anywhere this handle can reach.
    #[inline]
    pub fn alloc(&mut self) -> Result<Skb, PoolError> {
        let frame = self.local().alloc_frame().ok_or(PoolError::Exhausted)?;
        // SAFETY: the frame is in use, ours alone, and carries one pool reference.
        Ok(unsafe { Skb::from_meta(frame.0) })
    }

    /// Allocates up to `n` frames into `out`, as [`alloc`](Self::alloc) would one by one;
    /// returns how many (fewer than `n` only when the pool is exhausted). Per
    /// [`Pool::BULK`](crate::Pool::BULK) frames the kick is polled once, and what the local
    /// cache holds is taken with one credit and counter update. `out` receives the frames
    /// after the handle's state is let go (it may drop `Skb`s of this pool); frames it does
    /// not take are freed (leaked, never handed out twice, if it panics).
    pub fn alloc_bulk<E: Extend<Skb>>(&mut self, n: usize, out: &mut E) -> usize {
        let mut got = 0;
        let mut handout = crate::skb::Handout::new();
        while got < n {
            let want = (n - got).min(crate::Pool::BULK);
            let k = self.local().take_many(want, &mut handout);
            handout.hand_to(out);
            got += k;
            if k < want {
                return got; // exhausted
            }
        }
        n
    }

    /// Allocates one frame, waiting up to `timeout` for one to come back if the pool is
    /// exhausted: the `Wait` policy beside [`alloc`](Self::alloc)'s fail-fast one.
    ///
    /// While it waits it keeps draining every source a frame can come back through — this
    /// owner's defer list (remote frees), the overflow list, the depot (handles that were
    /// dropped, caches that spilled) and vacant owners' defer lists — and pushes this handle's
    /// own outgoing free batches first, so two owners waiting on each other's frames do not
    /// deadlock. Between attempts it parks the thread, so a waiting owner costs no CPU while
    /// other threads hold its frames: a remote free unparks it as soon as the frame reaches its
    /// defer list (at once for a thread without a handle; for one with a handle, when its batch
    /// for this owner is pushed: full, flushed, or with the handle's drop). Frames that come
    /// back by the other ways are found within [`WAIT_NAP`](Self::WAIT_NAP), the longest
    /// single park.
    ///
    /// ```
    /// use std::time::Duration;
    /// use skb_pool::{Pool, PoolError};
    ///
    /// let pool = Pool::builder().frame_count(4).build()?;
    /// let mut a = pool.handle()?;
    /// let held: Vec<_> = (0..4).map(|_| a.alloc()).collect::<Result<_, _>>()?;
    /// // Nothing comes back: the wait ends with the typed error after the timeout.
    /// assert_eq!(a.alloc_wait(Duration::from_millis(10)).unwrap_err(), PoolError::Exhausted);
    ///
    /// // Another thread frees a frame while `waiter` waits; the wait ends with it.
    /// let pool2 = pool.clone();
    /// let waiter = std::thread::spawn(move || {
    ///     let mut b = pool2.handle().unwrap();
    ///     b.alloc_wait(Duration::from_secs(60)).map(drop)
    /// });
    /// drop(held);
    /// drop(a); // its cache goes back to the shared depot, where `b` finds it
    /// waiter.join().unwrap()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`PoolError::Exhausted`] if no frame came back within `timeout`.
    pub fn alloc_wait(&mut self, timeout: std::time::Duration) -> Result<Skb, PoolError> {
        let deadline = std::time::Instant::now().checked_add(timeout);
        loop {
            // `alloc` drains the defer list, the overflow list, the depot and vacant slots
            // whenever the local cache is dry.
            match self.alloc() {
                Err(PoolError::Exhausted) => {}
                other => return other,
            }
            // Our own unflushed frees may be what another waiting owner needs.
            self.flush_frees();
            let now = std::time::Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(PoolError::Exhausted);
            }
            let nap = deadline.map_or(Self::WAIT_NAP, |d| (d - now).min(Self::WAIT_NAP));
            let slot = self.local().slot();
            if slot.prepare_park() {
                crate::sync::park_timeout(nap);
                slot.end_park();
            }
        }
    }

    /// The longest [`alloc_wait`](Self::alloc_wait) parks before it looks again by itself: the
    /// bound on how late it sees a frame that came back other than through its defer list (the
    /// overflow list, the depot, a vacant owner's list).
    pub const WAIT_NAP: std::time::Duration = std::time::Duration::from_millis(1);

    /// Frees many frames through this handle: local frees into the cache, remote ones into the
    /// outgoing batches (no thread-local lookup per frame).
    pub fn free_bulk<I: IntoIterator<Item = Skb>>(&mut self, skbs: I) {
        for skb in skbs {
            let frame = skb.into_frame();
            if frame.pool() != self.pool.inner.as_ptr().cast_const()
                || frame.owner() & crate::percpu::HOME_FLAG != 0
            {
                free_frame(frame);
                continue;
            }
            if let Some(w) = self.local().free(frame) {
                w();
            }
        }
    }

    /// `skb_defer_free_flush`: drains this owner's defer list into its cache. Call it in the
    /// owner's poll loop, and when woken. Returns whether frames were found.
    pub fn flush_remote(&mut self) -> bool {
        self.local().drain_own()
    }

    /// Pushes every outgoing remote-free batch to its owner now (freeing threads call it when
    /// idle, so no frame waits in a partial batch).
    pub fn flush_frees(&mut self) {
        while let Some(owner) = self.local().next_dirty() {
            if let Some(w) = self.local().flush_to(owner) {
                w();
            }
        }
    }

    /// This handle's counters since it was created (or last [published](Self::publish_stats)).
    pub fn stats(&self) -> HandleStats {
        // SAFETY: reading our live state; no `&mut` to it is live.
        unsafe { (*self.local.as_ptr()).stats }
    }

    /// Adds this handle's counters to the pool's totals and resets them.
    pub fn publish_stats(&mut self) {
        let s = core::mem::take(&mut self.local().stats);
        self.pool.inner().totals.fold(&s);
    }

    /// Takes back a completed frame (see [`Pool::skb_from_addr`]).
    ///
    /// # Errors
    ///
    /// As [`Pool::skb_from_addr`].
    pub fn skb_from_addr(&self, addr: u64) -> Result<Skb, AddrError> {
        self.pool.skb_from_addr(addr)
    }
}

impl Drop for PoolHandle {
    fn drop(&mut self) {
        let me = self.local.as_ptr();
        // Unregister first: from now on `Skb` drops on this thread take the handle-less path.
        let _ = LOCALS.try_with(|head| {
            let mut link: *mut *mut Local = ptr::null_mut();
            let mut cur = head.get();
            while !cur.is_null() && cur != me {
                // SAFETY: registered states are alive (see `free_frame`).
                link = unsafe { &raw mut (*cur).next };
                // SAFETY: as above.
                cur = unsafe { (*cur).next };
            }
            if cur == me {
                // SAFETY: `me` is our live state.
                let next = unsafe { (*me).next };
                if link.is_null() {
                    head.set(next);
                } else {
                    // SAFETY: `link` points into a live registered state on this thread.
                    unsafe { *link = next };
                }
            }
        });
        self.flush_frees();
        let local = self.local();
        local.give_back_frames();
        local.slot().release();
        // Frees that saw the slot claimed and landed after the drain above. The slot is
        // vacant now, a place per-CPU refills look: taken out of it, its frames are in this
        // thread's hands until the depot has them (`percpu/hands.rs`).
        let pool = local.pool;
        // SAFETY: our pool reference (`self.pool`) is held until this function returns.
        let mut hand = unsafe { pool.as_ref() }.percpu.in_hand();
        if local.give_back_frames() {
            hand.carried();
        }
        drop(hand);
        let stats = core::mem::take(&mut local.stats);
        let credits = core::mem::take(&mut local.credits);
        // SAFETY: unregistered, so nothing else can reach the state; it was leaked from a Box.
        drop(unsafe { Box::from_raw(me) });
        // SAFETY: our pool reference (`self.pool`) is still held.
        unsafe { pool.as_ref() }.totals.fold(&stats);
        if credits > 0 {
            // SAFETY: we own `credits` spare references; `self.pool` keeps one more.
            unsafe { PoolInner::release(pool, credits) };
        }
    }
}

impl fmt::Debug for PoolHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolHandle")
            .field("owner", &self.owner())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

//! Remote free: the owner slot's defer list, the port of `skb_attempt_defer_free`,
//! `kick_defer_list_purge` and `skb_defer_free_flush` (net/core/skbuff.c, net/core/dev.c, v6.19),
//! and the kick an owner asks for ([`Wake`]).
//!
//! A frame freed by a thread that is not its owner goes back to the owner rather than into the
//! freeing thread's cache, as the kernel returns an skb to the CPU that allocated it. The freer
//! adds the frame count to the owner's `count` (increment first, then compare, so a refused free
//! leaves the count inflated until the next drain), and:
//! - at or over `defer_max` (or with deferral disabled, `defer_max` ≤ 1, or the owner gone) the
//!   frames go to the pool's shared **overflow list** instead of being freed locally: in user
//!   space there is no slab to free into, and every owner drains the overflow list when its own
//!   sources run dry, so no frame is stranded;
//! - otherwise they go on the owner's lock-free list, and the freer whose increment carries the
//!   count past `defer_max / 2` kicks the owner: it sets the owner's `pending` flag and, if it
//!   found the flag clear, calls the owner's wake callback (the kernel's IPI). One wake is in
//!   flight per fill cycle.
//!
//! The owner drains (`skb_defer_free_flush`) when its `pending` flag is set, when its cache runs
//! dry, and on `PoolHandle::flush_remote`: it clears `pending`, resets the count (Release), then
//! takes the whole list with one swap. Clearing `pending` *before* the reset is the kernel's
//! order too (the IPI handler clears `defer_ipi_scheduled` before the softirq flushes) and it is
//! what makes the wake reliable: a freer whose (Acquire) increment reads the reset count is
//! ordered after the clear, so its kick finds the flag clear and wakes. Clearing after the take,
//! instead, lets a new cycle's kick find the flag still set and lose its wake. A CPU whose cache
//! cannot hold everything it drained puts the rest back (`requeue`: counted, no kick) for its
//! next drain or another CPU's probe.
//!
//! Freers batch (see `PoolHandle`): one `add_batch` and one count update per batch of up to
//! `remote_batch` frames for the same owner, clamped to `defer_max / 4` so that the batch that
//! crosses the half mark always fits under the limit and its kick is never lost to overflow.
//!
//! An owner that has run out of frames can sleep until some come back
//! (`PoolHandle::alloc_wait`), which the kernel never needs (its CPUs do not wait for skbs). It
//! raises `parked`, then looks at its list once more, then parks its thread; a freer that adds to
//! the list then looks at `parked`, and if it takes the flag down, unparks the owner. A SeqCst
//! fence on each side between its write and its read makes this Dekker's handshake: at least one
//! of the two sees the other's write, so either the owner finds the frames and does not sleep, or
//! the freer finds the owner asleep and wakes it. The freer pays one fence and one load of a line
//! the owner writes only when it sleeps, per batch.

use core::fmt;
use std::sync::{Arc, PoisonError};

use crossbeam_utils::CachePadded;
use llist_defer::{Chain, Fifo, LList};

use crate::meta::Frame;
use crate::packed;
use crate::sync::{AtomicBool, AtomicUsize, Mutex, Ordering, fence, thread};

/// An owner's wake callback: unpark its thread, write its eventfd, … (the kernel's IPI).
///
/// It runs on the freeing thread, in the middle of a free: keep it short, and do not panic in
/// it (a panic there can unwind past the free's reference bookkeeping, and the pool is then
/// never unmapped).
pub type Wake = Arc<dyn Fn() + Send + Sync>;

/// Where a remote free went.
pub(crate) enum Deferred {
    /// Onto the owner's defer list, with the outcome of the half-full check.
    Queued(Kick),
    /// Onto the shared overflow list.
    Overflow,
}

/// The half-full check of one remote free.
pub(crate) enum Kick {
    /// The count did not cross `defer_max / 2`.
    None,
    /// It crossed, but a wake was already in flight this cycle.
    AlreadyPending,
    /// It crossed and this free set `pending`: call the owner's callback, if it has one,
    /// outside any borrow of the freeing thread's state.
    Won(Option<Wake>),
}

/// The remote-free state of one owner: the list and count freers write, then on their own cache
/// lines the `pending` flag the owner polls, and the wake callback.
pub(crate) struct OwnerSlot {
    remote: CachePadded<RemoteList>,
    pending: CachePadded<AtomicBool>,
    wake: Mutex<Option<Wake>>,
    /// Whether the owner is parked (or about to park) in `alloc_wait`, waiting for frames.
    parked: CachePadded<AtomicBool>,
    /// The owner's thread, to unpark (a handle is bound to the thread that created it).
    thread: Mutex<Option<thread::Thread>>,
    /// A CPU's defer list (per-CPU caches): nobody parks on it, so freers skip the handshake.
    for_cpu: bool,
}

struct RemoteList {
    list: LList<Frame>,
    count: AtomicUsize,
    /// Whether a live `PoolHandle` owns this slot.
    claimed: AtomicBool,
}

impl OwnerSlot {
    pub(crate) fn new() -> Self {
        OwnerSlot {
            remote: CachePadded::new(RemoteList {
                list: LList::new(),
                count: AtomicUsize::new(0),
                claimed: AtomicBool::new(false),
            }),
            pending: CachePadded::new(AtomicBool::new(false)),
            wake: Mutex::new(None),
            parked: CachePadded::new(AtomicBool::new(false)),
            thread: Mutex::new(None),
            for_cpu: false,
        }
    }

    /// Claims a vacant slot for a new handle. Returns `false` if it was taken.
    pub(crate) fn try_claim(&self, wake: Option<Wake>) -> bool {
        if self
            .remote
            .claimed
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        *self.wake.lock().unwrap_or_else(PoisonError::into_inner) = wake;
        *self.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread::current());
        true
    }

    /// A slot claimed for good as a CPU's defer list (per-CPU caches): no thread to unpark,
    /// `wake` kicked at half of `defer_max`.
    pub(crate) fn new_for_cpu(wake: Option<Wake>) -> Self {
        let mut s = OwnerSlot::new();
        s.for_cpu = true;
        s.remote.claimed.store(true, Ordering::Relaxed);
        *s.wake.lock().unwrap_or_else(PoisonError::into_inner) = wake;
        s
    }

    /// Gives the slot up (the handle is being dropped). Frames freed to it afterwards go to the
    /// overflow list; frames that raced in are found by [`drain`](Self::drain) from anyone.
    pub(crate) fn release(&self) {
        *self.wake.lock().unwrap_or_else(PoisonError::into_inner) = None;
        *self.thread.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.remote.claimed.store(false, Ordering::Release);
    }

    /// Whether a live handle owns the slot (a hint).
    #[inline]
    pub(crate) fn is_claimed(&self) -> bool {
        self.remote.claimed.load(Ordering::Relaxed)
    }

    /// Whether a kick is pending: the owner should drain. The owner polls this on every alloc;
    /// the line is written once per fill cycle, so the load normally hits.
    #[inline]
    pub(crate) fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    /// The deferred-frame count (a snapshot; it errs high after refused frees).
    pub(crate) fn count(&self) -> usize {
        self.remote.count.load(Ordering::Relaxed)
    }

    /// `skb_attempt_defer_free` for a plain batch of `k ≥ 1` frames (in the order they were
    /// freed), all owned by this slot: packed (`packed.rs`), then as
    /// [`defer_packed`](Self::defer_packed).
    ///
    /// # Safety
    ///
    /// Every frame of `batch` is a free frame of this slot's pool, held exclusively by the
    /// caller, which gives them up.
    pub(crate) unsafe fn defer(
        &self,
        batch: Fifo<Frame>,
        k: usize,
        defer_max: usize,
        overflow: &LList<Frame>,
    ) -> Deferred {
        // SAFETY: the caller's contract.
        let heads = unsafe { packed::pack_fifo(batch) };
        // SAFETY: heads we just packed, of free frames we gave up.
        unsafe { self.defer_packed(heads, k, defer_max, overflow) }
    }

    /// `skb_attempt_defer_free` for packed heads standing for `k ≥ 1` frames in all, all owned
    /// by this slot: onto the list, or (at or over `defer_max`, deferral disabled, the owner
    /// gone) unpacked onto the overflow list, which holds plain frames.
    ///
    /// # Safety
    ///
    /// Every node of `heads` is the head of a packed batch of free frames of this slot's pool,
    /// held whole by the caller, which gives them up.
    pub(crate) unsafe fn defer_packed(
        &self,
        heads: Fifo<Frame>,
        k: usize,
        defer_max: usize,
        overflow: &LList<Frame>,
    ) -> Deferred {
        let r = &*self.remote;
        // With a limit of 2 the only batch that could cross the half mark (1 -> 2) already
        // overflows, so no kick would ever be sent: below 3 there is no deferral.
        if defer_max <= 2 || !r.claimed.load(Ordering::Relaxed) {
            // SAFETY: the caller's contract.
            overflow.add_batch(unsafe { packed::unpack_newest_first(heads) });
            return Deferred::Overflow;
        }
        // Acquire: pairs with the drain's Release reset, so a free counted in a new cycle is
        // ordered after the drain's `pending` clear (see the module docs).
        let prev = r.count.fetch_add(k, Ordering::Acquire);
        let n = prev + k;
        if n >= defer_max {
            // SAFETY: the caller's contract.
            overflow.add_batch(unsafe { packed::unpack_newest_first(heads) });
            return Deferred::Overflow;
        }
        r.list.add_batch(heads);
        if !self.for_cpu {
            self.unpark_owner();
        }
        let half = defer_max / 2;
        Deferred::Queued(if prev <= half && n > half {
            self.kick()
        } else {
            Kick::None
        })
    }

    /// `kick_defer_list_purge`: one wake per fill cycle, guarded by `pending`.
    fn kick(&self) -> Kick {
        if self.pending.swap(true, Ordering::AcqRel) {
            return Kick::AlreadyPending;
        }
        Kick::Won(
            self.wake
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }

    /// The freer's half of the sleep handshake (see the module docs), after adding frames.
    #[inline]
    fn unpark_owner(&self) {
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::Relaxed) {
            if let Some(t) = &*self.thread.lock().unwrap_or_else(PoisonError::into_inner) {
                t.unpark();
            }
        }
    }

    /// The owner's half of the sleep handshake: announces that it is about to park, then says
    /// whether it may (its list is still empty). If not, it has taken the announcement back.
    pub(crate) fn prepare_park(&self) -> bool {
        self.parked.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.remote.list.is_empty() {
            return true;
        }
        self.parked.store(false, Ordering::Relaxed);
        false
    }

    /// The owner is awake again (woken, timed out, or spuriously): takes its announcement back.
    pub(crate) fn end_park(&self) {
        self.parked.store(false, Ordering::Relaxed);
    }

    /// [`drain`](Self::drain), with the count it reset (the frames taken; it errs high after
    /// refused frees).
    pub(crate) fn drain_counted(&self) -> (Chain<Frame>, usize) {
        let r = &*self.remote;
        // Nothing to do (the common case of a poll loop): stay off the freers' cache line
        // instead of writing it with two RMWs. A free racing this snapshot kicks by itself.
        if r.list.is_empty()
            && r.count.load(Ordering::Relaxed) == 0
            && !self.pending.load(Ordering::Relaxed)
        {
            return (Chain::new(), 0);
        }
        if self.pending.load(Ordering::Relaxed) {
            self.pending.store(false, Ordering::Relaxed);
        }
        // Release: orders the clear above before any free that reads the reset count. A swap
        // rather than a store so the reset takes its place in the count's modification order
        // after every increment it overwrites (with a plain store the C11 argument is the same,
        // but loom's partial modification order would let later increments read past it).
        let n = r.count.swap(0, Ordering::Release);
        (r.list.take_all(), n)
    }

    /// Puts drained nodes standing for `k` frames back on the list, counted, without a kick
    /// (their owner took what it had room for and leaves the rest to its next drain or to
    /// another's probe).
    pub(crate) fn requeue(&self, batch: Fifo<Frame>, k: usize) {
        if batch.is_empty() {
            return;
        }
        let r = &*self.remote;
        // Acquire: as in `defer_packed`.
        r.count.fetch_add(k, Ordering::Acquire);
        r.list.add_batch(batch);
    }

    /// `skb_defer_free_flush`: clear `pending`, reset the count, take the whole list.
    pub(crate) fn drain(&self) -> Chain<Frame> {
        self.drain_counted().0
    }

    /// Whether the defer list looks empty (a hint).
    #[inline]
    pub(crate) fn looks_empty(&self) -> bool {
        self.remote.list.is_empty()
    }
}

impl fmt::Debug for OwnerSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnerSlot")
            .field("claimed", &self.is_claimed())
            .field("count", &self.count())
            .field("pending", &self.is_pending())
            .field("parked", &self.parked.load(Ordering::Relaxed))
            .finish()
    }
}

//! The root lock ([`RootLock`](crate::xmit::rootlock::RootLock)): a parking mutex that lends
//! itself to one thread. A thread that takes it
//! [`BIAS_AFTER`](crate::xmit::rootlock::BIAS_AFTER) times in a row with nobody else taking it
//! in between is granted the *bias*: from then on it enters by storing the lock's address in a
//! slot of its own (a cache line nobody else writes) and loading words nobody writes while it
//! holds the bias, with no locked instruction, where a mutex costs a compare-and-swap and a
//! swap (about 9 ns a pair on the project's machine: a lone producer's whole synchronisation
//! cost against a queue of its own). Any other thread that wants the lock revokes the bias
//! first.
//!
//! The hand-over is an asymmetric Dekker handshake. The owner stores "inside this lock" in its
//! thread's [`Slot`](crate::xmit::rootlock::Slot), then reloads the bias word; a revoker clears
//! the bias word, then issues a heavy barrier (`membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`:
//! every running thread of the process executes a full fence) and waits until the owner's slot
//! no longer names this lock. The heavy barrier orders the owner's store before its reload as
//! a fence on its side would, so the owner's side needs only a compiler fence: either the
//! revoker sees the owner inside (and waits), or the owner sees the bias gone (and takes the
//! mutex). Under loom both barriers are `SeqCst` fences, and the models check the handshake
//! (`tests/loom_xmit.rs`); the model is the stronger of the two, since it places the owner's
//! fence exactly between its store and its reload where `membarrier` interrupts it anywhere,
//! but the argument holds wherever the fence falls: before the store, the revoker's clear is
//! visible to the reload; after the reload, the store is visible to the revoker.
//!
//! A thread takes the lock again while it holds it only by a bug (a qdisc or driver calling
//! back into its own queue): `lock` then panics where a mutex would deadlock, and `try_lock`
//! answers `None`. A grant made under the mutex takes effect when that guard drops, and an owner
//! that comes through the mutex (nested in another lent lock) gives its bias up, so a mutex
//! guard and a biased guard never coexist on one thread either.
//!
//! A revocation costs a system call that interrupts every CPU running the process (a few
//! microseconds), so each one doubles the run of uncontended acquisitions the next grant needs
//! (up to [`MAX_BIAS_AFTER`](crate::xmit::rootlock::MAX_BIAS_AFTER)): a lock that several
//! threads take in turn is soon never lent. Without `membarrier` (not Linux, or the
//! registration refused) no bias is ever granted.
//!
//! Owns: the mutex, the bias word, the per-thread slots and the grant policy. Must not: know what
//! it guards (the engine's `Root`) or how the engine uses it.

use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

// A slot's `Arc` is std's even under loom: a queue dropped while a failed model unwinds must
// not reach into the model from a destructor. Its atomic is the model's.
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering, UnsafeCell};

/// Uncontended acquisitions in a row by one thread that earn it the bias, at first.
#[cfg(not(lockless_loom))]
pub(crate) const BIAS_AFTER: u32 = 64;
/// Under the model checker the first acquisition earns it, so that every model explores grants
/// and revocations.
#[cfg(lockless_loom)]
pub(crate) const BIAS_AFTER: u32 = 1;

/// The longest run a grant ever needs, however often the bias was revoked.
pub(crate) const MAX_BIAS_AFTER: u32 = 1 << 16;

/// A thread's mark of which biased lock it is inside (the lock's address; 0: none). Written by
/// its thread only, on a line of its own (two threads' slots may be allocated side by side);
/// read by revokers, which hold an `Arc` of it for as long as the bias lasts, so a slot
/// outlives its thread if it must.
pub(crate) struct Slot {
    /// Never 0 and never reused, unlike an address (a dead thread's slot may be freed and its
    /// address handed to a new thread's): the bias word names its owner by id, so that a
    /// stale read of the word can never name the reader unless the reader was lent the lock.
    id: u64,
    inside: CachePadded<AtomicUsize>,
}

impl Slot {
    fn new() -> Arc<Slot> {
        // Not the model's atomic: decisions compare ids for equality only, never their values,
        // so a model replays the same whatever numbers its threads drew.
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Arc::new(Slot {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            inside: CachePadded::new(AtomicUsize::new(0)),
        })
    }
}

/// This thread's slot, created at its first use of a lendable lock, and (outside loom) a copy
/// of its id and address that the fast path reads without the lazy thread-local's state check.
/// The copy is cleared when the slot's thread-local is destroyed at thread exit.
#[cfg(not(lockless_loom))]
mod this_thread {
    use core::cell::Cell;

    use super::{Arc, Slot};

    struct Owned(Arc<Slot>);

    impl Drop for Owned {
        fn drop(&mut self) {
            // A lock taken from a later thread-local destructor goes through the mutex.
            let _ = CURRENT.try_with(|c| c.set((0, core::ptr::null())));
        }
    }

    std::thread_local! {
        static CURRENT: Cell<(u64, *const Slot)> = const { Cell::new((0, core::ptr::null())) };
        static OWNED: Owned = {
            let slot = Slot::new();
            CURRENT.with(|c| c.set((slot.id, &*slot as *const Slot)));
            Owned(slot)
        };
    }

    /// This thread's slot id and slot (0 and null if it has none yet, or none any more).
    #[inline]
    pub(super) fn get() -> (u64, *const Slot) {
        CURRENT.with(Cell::get)
    }

    /// This thread's slot, created if need be (`None` during thread exit).
    pub(super) fn slot() -> Option<Arc<Slot>> {
        OWNED.try_with(|o| o.0.clone()).ok()
    }
}

/// Under loom: a lazy thread-local per model thread, no cache.
#[cfg(lockless_loom)]
mod this_thread {
    use super::{Arc, Slot};

    loom::thread_local! {
        static OWNED: Arc<Slot> = Slot::new();
    }

    pub(super) fn get() -> (u64, *const Slot) {
        OWNED.with(|s| (s.id, &**s as *const Slot))
    }

    pub(super) fn slot() -> Option<Arc<Slot>> {
        Some(OWNED.with(Arc::clone))
    }
}

/// What only the mutex holder reads and writes.
struct Policy {
    /// The slot of the bias owner, kept alive while the bias word names it.
    owner: Option<Arc<Slot>>,
    /// The slot id of the last thread that took the mutex, and its run of acquisitions.
    last: u64,
    streak: u32,
    /// The run that earns the bias now (0: never).
    need: u32,
    /// A grant made by the current holder, published in the bias word when its guard drops
    /// (0: none): a thread still holding the mutex must not also enter by bias.
    publish: u64,
}

/// A mutex with an owner bias; see the module docs.
pub(crate) struct RootLock<T> {
    /// 0, or the id of the bias owner's [`Slot`]. Written only by the mutex holder.
    bias: AtomicU64,
    mutex: Mutex<Policy>,
    /// Whether a bias may ever be granted (asked for, and `membarrier` available).
    lendable: bool,
    grants: AtomicU64,
    revokes: AtomicU64,
    data: UnsafeCell<T>,
}

// SAFETY: `data` is reached only through a `RootGuard`, and guards are exclusive: a mutex guard
// excludes every other mutex guard; the bias handshake excludes another thread's mutex guard
// from a biased one; one thread never holds both (a grant is published when its mutex guard
// drops, an owner that takes the mutex gives its bias up, and an owner inside by bias gets
// `Held`, not a second guard); and there is one owner. So sharing the lock hands `&mut T` to
// one thread at a time: `T: Send` suffices.
unsafe impl<T: Send> Sync for RootLock<T> {}
// SAFETY: as above; moving the lock moves `T`.
unsafe impl<T: Send> Send for RootLock<T> {}

/// Exclusive access to the data of a [`RootLock`], through the mutex or by bias.
pub(crate) struct RootGuard<'a, T> {
    lock: &'a RootLock<T>,
    #[cfg(not(lockless_loom))]
    data: *mut T,
    #[cfg(lockless_loom)]
    data: core::mem::ManuallyDrop<loom::cell::MutPtr<T>>,
    how: How<'a>,
    /// Not `Send`: a biased guard clears its own thread's slot.
    _not_send: PhantomData<*const ()>,
}

/// How a guard holds the lock: exactly one of the two is `Some`. (Two options rather than an
/// enum: the enum packed its tag beside the mutex guard's poison flag, and every move of a guard
/// became odd-sized copies that stalled store forwarding, 6 ns a packet at one producer.)
struct How<'a> {
    /// Unlocks as it drops (after publishing a grant it made).
    locked: Option<MutexGuard<'a, Policy>>,
    /// The owner's slot: this thread's own (see `enter_biased` for how long it lives).
    biased: Option<&'a Slot>,
}

/// What the owner's entry found.
enum Entry<'a, T> {
    /// In, by bias.
    Entered(RootGuard<'a, T>),
    /// This thread is inside this lock by bias already.
    Held,
    /// Not lent to this thread (or nested in another lent lock): take the mutex.
    Mutex,
}

#[cold]
#[inline(never)]
#[track_caller]
fn reentered() -> ! {
    panic!(
        "a TxQueue's root lock was taken again by the thread holding it: a qdisc or driver \
         called back into its own queue"
    )
}

impl<T> RootLock<T> {
    /// A lock over `value`; `bias` off never lends it.
    pub(crate) fn new(value: T, bias: bool) -> Self {
        let need = if bias && heavy::available() {
            BIAS_AFTER
        } else {
            0
        };
        RootLock {
            bias: AtomicU64::new(0),
            mutex: Mutex::new(Policy {
                owner: None,
                last: 0,
                streak: 0,
                need,
                publish: 0,
            }),
            lendable: need != 0,
            grants: AtomicU64::new(0),
            revokes: AtomicU64::new(0),
            data: UnsafeCell::new(value),
        }
    }

    /// Whether this lock may ever be lent (asked for, and `membarrier` available).
    pub(crate) fn lendable(&self) -> bool {
        self.lendable
    }

    /// Grants and revocations so far.
    pub(crate) fn bias_counts(&self) -> (u64, u64) {
        (
            self.grants.load(Ordering::Relaxed),
            self.revokes.load(Ordering::Relaxed),
        )
    }

    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    /// Takes the lock, waiting for it (and revoking another thread's bias) if need be.
    ///
    /// # Panics
    ///
    /// If this thread holds the lock by bias already (a qdisc or driver called back into its
    /// own queue), where a mutex would deadlock.
    #[inline(always)]
    pub(crate) fn lock(&self) -> RootGuard<'_, T> {
        match self.enter_biased() {
            Entry::Entered(g) => g,
            Entry::Held => reentered(),
            Entry::Mutex => self.lock_slow(),
        }
    }

    /// Takes the lock if that needs no waiting: `None` if another thread holds the mutex or
    /// the bias (a try does not revoke), or this thread holds the lock already.
    #[inline(always)]
    pub(crate) fn try_lock(&self) -> Option<RootGuard<'_, T>> {
        match self.enter_biased() {
            Entry::Entered(g) => return Some(g),
            Entry::Held => return None,
            Entry::Mutex => {}
        }
        // Lent to another thread: a try does not revoke. Checked before the mutex (so a try
        // does not touch its line) and again after (a grant published in between); the
        // thread-local is read only when the lock is lent to someone.
        let lent_elsewhere = || {
            let b = self.bias.load(Ordering::Relaxed);
            b != 0 && b != this_thread::get().0
        };
        if lent_elsewhere() {
            return None;
        }
        let policy = self.mutex.try_lock()?;
        if lent_elsewhere() {
            // Granted to another thread between the two reads.
            return None;
        }
        Some(self.locked(policy))
    }

    /// The owner's entry: four loads and a store, no locked instruction. `Mutex` unless this
    /// thread holds the bias and is inside no other lent lock (a nested entry takes the
    /// mutex, since a thread marks one lock at a time); `Held` if it is inside this one.
    #[inline(always)]
    fn enter_biased(&self) -> Entry<'_, T> {
        let b = self.bias.load(Ordering::Relaxed);
        if b == 0 {
            return Entry::Mutex;
        }
        let (me, slot) = this_thread::get();
        if b != me {
            return Entry::Mutex;
        }
        // SAFETY: `me` is not 0, so `slot` is this thread's own slot, which its thread-local
        // keeps alive while the thread runs and `Policy::owner` (or the revoker that took it
        // from there) keeps alive while the word names it or the slot marks this lock: past the
        // guard's life either way.
        let slot = unsafe { &*slot };
        match slot.inside.load(Ordering::Relaxed) {
            0 => {}
            inside if inside == self.addr() => return Entry::Held,
            _ => return Entry::Mutex,
        }
        // Release: a revoker that reads this mark (rather than our exit's 0) must still see
        // everything we did inside this lock before, if we left another lent lock since.
        slot.inside.store(self.addr(), Ordering::Release);
        // Pairs with the revoker's heavy barrier: either it sees our mark, or we see the bias
        // gone. The barriers order the two accesses, so the reload needs no ordering of its
        // own.
        heavy::light_barrier();
        if self.bias.load(Ordering::Relaxed) != b {
            slot.inside.store(0, Ordering::Release);
            return Entry::Mutex;
        }
        Entry::Entered(RootGuard::new(
            self,
            How {
                locked: None,
                biased: Some(slot),
            },
        ))
    }

    /// Waits for the mutex, then revokes another thread's bias, counts the run, maybe grants.
    #[cold]
    fn lock_slow(&self) -> RootGuard<'_, T> {
        self.locked(self.mutex.lock())
    }

    #[inline(always)]
    fn locked<'a>(&'a self, mut policy: MutexGuard<'a, Policy>) -> RootGuard<'a, T> {
        // A lock never lent is a plain mutex: one test here.
        if policy.need != 0 {
            self.track(&mut policy);
        }
        RootGuard::new(
            self,
            How {
                locked: Some(policy),
                biased: None,
            },
        )
    }

    /// The mutex holder's bookkeeping of a lendable lock: revoke another thread's bias, count
    /// this thread's run, grant the bias when the run is long enough.
    #[inline(never)]
    fn track(&self, policy: &mut Policy) {
        let mut me = this_thread::get().0;
        if me == 0 {
            me = this_thread::slot().map_or(0, |s| s.id);
        }
        let b = self.bias.load(Ordering::Relaxed);
        if b != 0 && b != me {
            self.revoke(policy);
        } else if b != 0 {
            // Our own bias, and we came through the mutex: nested in another lent lock
            // (`enter_biased` refused). Give the bias up, so that no later entry by bias can
            // overlap this mutex guard; no barrier, since this thread is not inside by bias.
            self.bias.store(0, Ordering::Relaxed);
            policy.owner = None;
        }
        if policy.last == me && me != 0 {
            policy.streak = policy.streak.saturating_add(1);
        } else {
            policy.last = me;
            policy.streak = 1;
        }
        if b == 0 && me != 0 && policy.publish == 0 && policy.streak >= policy.need {
            self.grant(policy);
        }
    }

    /// Lends the lock to this thread (the mutex holder): once its guard drops, its next
    /// acquisitions enter by bias.
    #[cold]
    fn grant(&self, policy: &mut Policy) {
        let Some(slot) = this_thread::slot() else {
            return;
        };
        policy.publish = slot.id;
        policy.last = slot.id;
        policy.owner = Some(slot);
        self.grants.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the bias back from its owner: clear the word, make every running thread fence,
    /// wait until the owner is not inside. The caller holds the mutex.
    fn revoke(&self, policy: &mut Policy) {
        let owner = policy
            .owner
            .take()
            .expect("a bias word names a slot the policy keeps");
        self.bias.store(0, Ordering::Relaxed);
        heavy::barrier();
        let mut waits = 0u32;
        while owner.inside.load(Ordering::Acquire) == self.addr() {
            // The owner is inside: a short section, unless it was preempted there or is a
            // runner sending a long run. Spin, then yield, then sleep longer each time (up to
            // a millisecond), rather than keep a core busy.
            waits = waits.saturating_add(1);
            if waits <= 64 {
                crate::sync::spin_loop();
            } else if waits <= 128 || cfg!(lockless_loom) {
                crate::sync::yield_now();
            } else {
                let us = 1u64 << (waits - 128).min(10);
                std::thread::sleep(std::time::Duration::from_micros(us));
            }
        }
        self.revokes.fetch_add(1, Ordering::Relaxed);
        policy.need = policy.need.saturating_mul(2).min(MAX_BIAS_AFTER);
        policy.streak = 0;
    }
}

impl<'a, T> RootGuard<'a, T> {
    fn new(lock: &'a RootLock<T>, how: How<'a>) -> Self {
        RootGuard {
            lock,
            #[cfg(not(lockless_loom))]
            data: lock.data.with_mut(|p| p),
            #[cfg(lockless_loom)]
            data: core::mem::ManuallyDrop::new(lock.data.get_mut()),
            how,
            _not_send: PhantomData,
        }
    }

    /// Whether this guard entered by bias (no mutex held).
    #[cfg(all(test, not(lockless_loom)))]
    fn is_biased(&self) -> bool {
        self.how.biased.is_some()
    }
}

impl<T> Deref for RootGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard is exclusive (see `RootLock`'s `Sync`), and the pointer is the
        // lock's data, alive as long as the borrow of the lock.
        #[cfg(not(lockless_loom))]
        unsafe {
            &*self.data
        }
        // SAFETY: as above; loom tracks the access until the guard drops.
        #[cfg(lockless_loom)]
        unsafe {
            loom::cell::MutPtr::deref(&self.data)
        }
    }
}

impl<T> DerefMut for RootGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference.
        #[cfg(not(lockless_loom))]
        unsafe {
            &mut *self.data
        }
        // SAFETY: as above.
        #[cfg(lockless_loom)]
        unsafe {
            loom::cell::MutPtr::deref(&self.data)
        }
    }
}

impl<T> Drop for RootGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // The data access ends before the lock is let go.
        #[cfg(lockless_loom)]
        // SAFETY: dropped once, here, and never used after.
        unsafe {
            core::mem::ManuallyDrop::drop(&mut self.data)
        };
        if let Some(slot) = self.how.biased {
            slot.inside.store(0, Ordering::Release);
        }
        if let Some(policy) = self.how.locked.as_mut() {
            if policy.publish != 0 {
                // A grant this guard made: the bias word names the new owner from now on
                // (only that thread compares it with its own slot, after this unlock).
                self.lock.bias.store(policy.publish, Ordering::Relaxed);
                policy.publish = 0;
            }
        }
        // A mutex guard unlocks as its field drops, after this.
    }
}

/// The two barriers of the handshake.
#[cfg(all(target_os = "linux", not(lockless_loom)))]
mod heavy {
    use std::sync::OnceLock;

    const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;
    const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    fn membarrier(cmd: libc::c_int) -> bool {
        // SAFETY: membarrier(cmd, 0, 0) takes no pointer; it fails with an errno when the
        // command is not supported or not registered.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0u32, 0i32) == 0 }
    }

    /// Registers the process for expedited private barriers, once.
    pub(super) fn available() -> bool {
        static REGISTERED: OnceLock<bool> = OnceLock::new();
        *REGISTERED.get_or_init(|| membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED))
    }

    /// The owner's side: the compiler keeps the slot store before the bias reload; the
    /// revoker's `membarrier` supplies the CPU fence.
    #[inline(always)]
    pub(super) fn light_barrier() {
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    }

    /// The revoker's side: every running thread of the process executes a full fence. Only
    /// called with a bias granted, so after a registration that succeeded; should the call
    /// fail all the same, the global barrier (no registration, a grace period) does the job.
    pub(super) fn barrier() {
        if !membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) && !membarrier(MEMBARRIER_CMD_GLOBAL) {
            // No barrier means no proof that the owner is out: nothing safe is left to do.
            std::process::abort();
        }
    }
}

/// Without `membarrier` nothing is ever lent, so neither barrier runs.
#[cfg(all(not(target_os = "linux"), not(lockless_loom)))]
mod heavy {
    pub(super) fn available() -> bool {
        false
    }
    #[inline(always)]
    pub(super) fn light_barrier() {}
    pub(super) fn barrier() {
        unreachable!("no bias is granted without membarrier")
    }
}

/// Under loom: what `membarrier` guarantees, a `SeqCst` fence on each side.
#[cfg(lockless_loom)]
mod heavy {
    use crate::sync::{Ordering, fence};

    pub(super) fn available() -> bool {
        true
    }
    pub(super) fn light_barrier() {
        fence(Ordering::SeqCst);
    }
    pub(super) fn barrier() {
        fence(Ordering::SeqCst);
    }
}

#[cfg(all(test, not(lockless_loom)))]
mod tests {
    use std::sync::Arc as StdArc;
    use std::sync::Barrier;
    use std::thread;

    use super::{BIAS_AFTER, RootLock};

    /// Whether `lock` may be lent here; if not, says the test is skipped (no `membarrier`).
    fn lent(lock: &RootLock<u64>) -> bool {
        if !lock.lendable() {
            eprintln!("skipped: membarrier(PRIVATE_EXPEDITED) is not available here");
        }
        lock.lendable()
    }

    /// Takes the lock `n` times on this thread; returns whether the last entry was by bias.
    fn take(lock: &RootLock<u64>, n: u32) -> bool {
        let mut biased = false;
        for _ in 0..n {
            let mut g = lock.lock();
            *g += 1;
            biased = g.is_biased();
        }
        biased
    }

    #[test]
    fn a_lone_thread_is_lent_the_lock_after_its_run() {
        let lock = RootLock::new(0u64, true);
        if !lent(&lock) {
            return;
        }
        assert!(
            !take(&lock, BIAS_AFTER - 1),
            "lent before the run was long enough"
        );
        assert_eq!(lock.bias_counts(), (0, 0));
        // The BIAS_AFTER-th acquisition grants (through the mutex); the next enters by bias.
        assert!(!take(&lock, 1));
        assert_eq!(lock.bias_counts(), (1, 0));
        assert!(take(&lock, 1), "the owner did not enter by bias");
        assert!(lock.try_lock().is_some_and(|g| g.is_biased()));
        assert_eq!(*lock.lock(), u64::from(BIAS_AFTER) + 1);
    }

    #[test]
    fn a_lock_built_without_bias_is_a_plain_mutex() {
        let lock = RootLock::new(0u64, false);
        assert!(!lock.lendable());
        assert!(!take(&lock, 4 * BIAS_AFTER));
        assert_eq!(lock.bias_counts(), (0, 0));
    }

    #[test]
    fn another_thread_takes_the_lock_back_and_the_next_grant_needs_twice_the_run() {
        let lock = StdArc::new(RootLock::new(0u64, true));
        if !lent(&lock) {
            return;
        }
        take(&lock, BIAS_AFTER + 1);
        assert_eq!(lock.bias_counts(), (1, 0));
        // A try from another thread neither waits nor revokes.
        let l = lock.clone();
        assert!(
            thread::spawn(move || l.try_lock().is_none())
                .join()
                .unwrap()
        );
        assert_eq!(lock.bias_counts(), (1, 0));
        // A lock from another thread revokes, and sees everything the owner wrote.
        let l = lock.clone();
        let seen = thread::spawn(move || *l.lock()).join().unwrap();
        assert_eq!(seen, u64::from(BIAS_AFTER) + 1);
        assert_eq!(lock.bias_counts(), (1, 1));
        // Back on this thread: the mutex path, until a run of twice the first.
        assert!(!take(&lock, 2 * BIAS_AFTER));
        assert_eq!(lock.bias_counts(), (2, 1));
        assert!(take(&lock, 1));
    }

    #[test]
    fn an_owner_inside_one_lent_lock_takes_another_through_its_mutex() {
        let (a, b) = (RootLock::new(0u64, true), RootLock::new(0u64, true));
        if !lent(&a) {
            return;
        }
        take(&a, BIAS_AFTER + 1);
        take(&b, BIAS_AFTER + 1);
        let ga = a.lock();
        assert!(ga.is_biased());
        let gb = b.lock();
        assert!(
            !gb.is_biased(),
            "a nested entry must not reuse the thread's one slot mark"
        );
        drop(gb);
        drop(ga);
        // The owner came through B's mutex, so it gave B's bias up (no revocation, no
        // barrier); its next entry takes the mutex and, its run still going, is lent B again.
        assert!(!b.lock().is_biased());
        assert_eq!(b.bias_counts(), (2, 0));
        assert!(b.lock().is_biased());
        assert!(a.lock().is_biased(), "A's bias is untouched");
    }

    #[test]
    fn a_thread_never_holds_two_guards_on_one_lock() {
        let (a, b) = (RootLock::new(0u64, true), RootLock::new(0u64, true));
        if !lent(&a) {
            return;
        }
        // The grant takes effect when the granting mutex guard drops: until then a try from
        // the same thread finds the mutex held, as with a plain mutex.
        take(&a, BIAS_AFTER - 1);
        let granting = a.lock();
        assert!(!granting.is_biased());
        assert_eq!(a.bias_counts(), (1, 0));
        assert!(
            a.try_lock().is_none(),
            "a biased entry beside the granting mutex guard"
        );
        drop(granting);
        // Inside by bias: a try answers None, a lock panics instead of handing out a second
        // guard.
        let g = a.lock();
        assert!(g.is_biased());
        assert!(a.try_lock().is_none(), "a second guard from try_lock");
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(a.lock())));
        assert!(again.is_err(), "a second guard from lock");
        drop(g);
        // Nested: inside B by bias, A (lent to us too) goes through its mutex and gives the
        // bias up, so leaving B first does not let a biased entry overlap A's mutex guard.
        take(&b, BIAS_AFTER + 1);
        let gb = b.lock();
        assert!(gb.is_biased());
        let ga = a.lock();
        assert!(!ga.is_biased());
        drop(gb);
        assert!(
            a.try_lock().is_none(),
            "a biased entry beside A's mutex guard"
        );
        drop(ga);
        assert!(
            !a.lock().is_biased(),
            "the bias given up is granted again only after a run"
        );
    }

    /// More threads than cores bump a counter with a read, a yield and a write: any overlap
    /// of two holders (a biased one and a mutex one) loses an update. The lock starts lent to
    /// the main thread, so at least one revocation races the workers; each worker takes long
    /// runs, so the bias may be granted and revoked again.
    #[test]
    fn holders_never_overlap_while_the_bias_moves() {
        const THREADS: u64 = 6;
        const RUNS: u64 = 40;
        let lock = StdArc::new(RootLock::new(0u64, true));
        let lent = lock.lendable();
        take(&lock, BIAS_AFTER);
        *lock.lock() = 0;
        let start = StdArc::new(Barrier::new(THREADS as usize));
        let run = u64::from(BIAS_AFTER) * 3;
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (lock, start) = (lock.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    for _ in 0..RUNS {
                        for i in 0..run {
                            let mut g = lock.lock();
                            let v = *g;
                            if i % 16 == 0 {
                                thread::yield_now();
                            }
                            *g = v + 1;
                        }
                        thread::yield_now();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*lock.lock(), THREADS * RUNS * run);
        let (grants, revokes) = lock.bias_counts();
        eprintln!("grants {grants}, revokes {revokes}");
        assert!(revokes <= grants && grants <= revokes + 1);
        if lent {
            assert!(revokes >= 1, "the bias was never taken back");
        }
    }
}

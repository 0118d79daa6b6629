//! The only place in this crate that names atomics, locks and threads.
//!
//! Under `--cfg lockless_loom` they come from loom, so the model checker sees every access of
//! the transmit engine; otherwise from the standard library. Locks never report poisoning: a
//! panic in the runner role must not wedge the queue (the engine repairs its own state on
//! unwind), so a poisoned lock is simply taken.

#[cfg(lockless_loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(not(lockless_loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

#[cfg(lockless_loom)]
use loom::sync as imp;
#[cfg(not(lockless_loom))]
use std::sync as imp;

pub(crate) use imp::MutexGuard;

#[cfg(lockless_loom)]
pub(crate) use loom::{hint::spin_loop, thread, thread::yield_now};
#[cfg(not(lockless_loom))]
pub(crate) use std::{hint::spin_loop, thread, thread::yield_now};

/// One thread's sleep and its wake-up, for the TX worker: `park`/`unpark` of the thread that
/// registered. Under loom a flag and a condition variable instead, because loom's `unpark`
/// also makes a thread runnable while it is blocked on a mutex, which the model then reports
/// as a failed lock.
#[cfg(not(lockless_loom))]
#[derive(Debug, Default)]
pub(crate) struct Wakeup(std::sync::OnceLock<std::thread::Thread>);

#[cfg(not(lockless_loom))]
impl Wakeup {
    /// Names the calling thread as the one [`wait`](Self::wait) puts to sleep. A wake before
    /// this is lost: register before the first look at the condition.
    pub(crate) fn register(&self) {
        let _ = self.0.set(std::thread::current());
    }

    /// Sleeps until a [`wake`](Self::wake) since the last return (or returns at once).
    pub(crate) fn wait(&self) {
        std::thread::park();
    }

    pub(crate) fn wake(&self) {
        if let Some(t) = self.0.get() {
            t.unpark();
        }
    }
}

#[cfg(lockless_loom)]
#[derive(Debug, Default)]
pub(crate) struct Wakeup {
    woken: Mutex<bool>,
    cv: Condvar,
}

#[cfg(lockless_loom)]
impl Wakeup {
    pub(crate) fn register(&self) {}

    pub(crate) fn wait(&self) {
        let mut woken = self.woken.lock();
        while !*woken {
            woken = self.cv.wait(woken);
        }
        *woken = false;
    }

    pub(crate) fn wake(&self) {
        *self.woken.lock() = true;
        self.cv.notify_all();
    }
}

/// A parking mutex that ignores poisoning.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(imp::Mutex<T>);

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Mutex(imp::Mutex::new(value))
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[inline]
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

/// A condition variable paired with [`Mutex`], ignoring poisoning.
#[derive(Debug, Default)]
pub(crate) struct Condvar(imp::Condvar);

impl Condvar {
    pub(crate) fn new() -> Self {
        Condvar(imp::Condvar::new())
    }

    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0
            .wait(guard)
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

#[cfg(lockless_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `core::cell::UnsafeCell` with loom's closure API, so the same code is checked under loom.
#[cfg(not(lockless_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(lockless_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(value))
    }

    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

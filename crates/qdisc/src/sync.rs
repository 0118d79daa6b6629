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

/// One thread's sleep and its wake-up, for the TX worker: a flag under a [`Mutex`] and a
/// [`Condvar`], so that the same code runs under loom (whose `unpark` would also make a thread
/// runnable while it is blocked on a mutex). A wake is never lost: it sets the flag, which the
/// next [`wait`](Self::wait) consumes whether it came before or during the wait.
#[derive(Debug, Default)]
pub(crate) struct Wakeup {
    woken: Mutex<bool>,
    cv: Condvar,
}

impl Wakeup {
    /// Sleeps until a [`wake`](Self::wake) since the last return (returns at once if one
    /// came meanwhile), and consumes it.
    pub(crate) fn wait(&self) {
        let mut woken = self.woken.lock();
        while !*woken {
            woken = self.cv.wait(woken);
        }
        *woken = false;
    }

    /// Wakes the sleeper, or the next [`wait`](Self::wait).
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

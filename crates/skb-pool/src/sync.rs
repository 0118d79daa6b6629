//! The only place in this crate that names atomics, `UnsafeCell`, `Mutex` and thread-locals, but
//! for `rseq.rs`, whose per-thread rseq area and one-time symbol lookup exist only outside loom
//! (its critical sections are compiled out under it). It also holds
//! [`Counter`](crate::sync::Counter), the statistics counter of slow paths.
//!
//! Under `--cfg lockless_loom` the atomics, the mutex and the thread-local macro come from
//! loom, so the model checker sees every shared access and gives each modelled thread its own
//! thread-locals; otherwise they are the standard library's. The cfg is namespaced to this
//! project so that building our loom models never flips a dependency into loom mode.
//!
//! `UnsafeCell` is the standard one in both modes: it holds an [`Skb`](crate::Skb)'s metadata,
//! which is only touched through the one owning handle, so the type system (not the model)
//! proves those accesses exclusive; loom checks the frame state word that hands ownership over.

pub(crate) use core::cell::UnsafeCell;

#[cfg(lockless_loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(lockless_loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(lockless_loom)]
pub(crate) use loom::thread;

#[cfg(not(lockless_loom))]
pub(crate) use std::sync::Mutex;
#[cfg(not(lockless_loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(not(lockless_loom))]
pub(crate) use std::thread;

/// Parks the calling thread for at most `nap` (an owner waiting for frames). loom has no timed
/// park: under it the thread parks until unparked, and its models always free what the owner
/// waits for.
#[cfg(not(lockless_loom))]
pub(crate) fn park_timeout(nap: std::time::Duration) {
    std::thread::park_timeout(nap);
}

/// See the non-loom definition.
#[cfg(lockless_loom)]
pub(crate) fn park_timeout(_nap: std::time::Duration) {
    loom::thread::park();
}

// The calling thread's registered owner handles (an intrusive list of their local states),
// consulted when an [`Skb`](crate::Skb) is dropped to find this thread's handle for its pool.
#[cfg(not(lockless_loom))]
std::thread_local! {
    pub(crate) static LOCALS: core::cell::Cell<*mut crate::handle::Local> =
        const { core::cell::Cell::new(core::ptr::null_mut()) };
}
// The calling thread's registered owner handles (see the non-loom definition).
#[cfg(lockless_loom)]
loom::thread_local! {
    pub(crate) static LOCALS: core::cell::Cell<*mut crate::handle::Local> =
        core::cell::Cell::new(core::ptr::null_mut());
}

/// The CPU the calling thread runs on (`sched_getcpu`), or `None` if the kernel cannot say.
#[cfg(not(lockless_loom))]
#[inline]
pub(crate) fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

// The simulated CPU of a modelled thread (loom has no CPUs): set by the model with
// `skb_pool::loom_set_cpu`, 0 by default.
#[cfg(lockless_loom)]
loom::thread_local! {
    pub(crate) static SIM_CPU: core::cell::Cell<u32> = core::cell::Cell::new(0);
}

/// See the non-loom definition: under loom, the thread's simulated CPU.
#[cfg(lockless_loom)]
pub(crate) fn current_cpu() -> Option<u32> {
    Some(SIM_CPU.with(core::cell::Cell::get))
}

/// A statistics counter bumped on slow paths (Relaxed: it orders nothing). Under loom it counts
/// nothing, so the models do not explore its interleavings.
#[cfg(not(lockless_loom))]
#[derive(Debug, Default)]
pub(crate) struct Counter(std::sync::atomic::AtomicU64);

#[cfg(not(lockless_loom))]
impl Counter {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// See the non-loom definition.
#[cfg(lockless_loom)]
#[derive(Debug, Default)]
pub(crate) struct Counter;

#[cfg(lockless_loom)]
impl Counter {
    #[inline]
    pub(crate) fn add(&self, _n: u64) {}

    pub(crate) fn get(&self) -> u64 {
        0
    }
}

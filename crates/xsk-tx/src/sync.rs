//! The only place in this crate that names atomics and `UnsafeCell`.
//!
//! Under `--cfg lockless_loom` the types come from loom so that the model checker sees every
//! access to a ring's cursors and slots; otherwise they are the standard library's. The cfg is
//! namespaced to this project so that building our loom models never flips a dependency into
//! loom mode.
//!
//! [`Slot`](crate::sync::Slot) is a descriptor cell of a ring. Outside loom it is
//! `#[repr(transparent)]` over the descriptor, so an array of slots can be laid over the kernel's
//! mmapped descriptor array.

#[cfg(lockless_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, Ordering, fence};
/// Statistics counters of the pool-backed driver and receiver (never modelled under loom).
#[cfg(not(lockless_loom))]
pub(crate) use std::sync::atomic::AtomicU64;
#[cfg(not(lockless_loom))]
pub(crate) use std::sync::atomic::{AtomicU32, Ordering, fence};

/// One descriptor cell of a ring, written by the producer side and read by the consumer side.
#[cfg(not(lockless_loom))]
#[repr(transparent)]
#[derive(Debug)]
pub(crate) struct Slot<T>(std::cell::UnsafeCell<T>);

#[cfg(not(lockless_loom))]
impl<T: Copy> Slot<T> {
    /// A slot holding `value` (simulated rings only).
    #[cfg(test)]
    pub(crate) fn new(value: T) -> Self {
        Slot(std::cell::UnsafeCell::new(value))
    }

    /// Reads the descriptor.
    ///
    /// # Safety
    ///
    /// - the caller is the ring's consumer and owns this slot: it is between the consumer
    ///   index and a producer index loaded with acquire ordering.
    #[inline]
    pub(crate) unsafe fn read(&self) -> T {
        // SAFETY: the caller owns the slot (see the contract), so nobody writes it concurrently;
        // a volatile read because the other side of the ring is another address space's view.
        unsafe { self.0.get().read_volatile() }
    }

    /// Writes the descriptor.
    ///
    /// # Safety
    ///
    /// - the caller is the ring's producer and owns this slot: it is between the producer
    ///   index and a consumer index (plus the ring size) loaded with acquire ordering.
    #[inline]
    pub(crate) unsafe fn write(&self, value: T) {
        // SAFETY: the caller owns the slot (see the contract), so nobody reads it concurrently.
        unsafe { self.0.get().write_volatile(value) }
    }
}

/// One descriptor cell of a ring (loom: accesses are tracked for causality).
#[cfg(lockless_loom)]
#[derive(Debug)]
pub(crate) struct Slot<T>(loom::cell::UnsafeCell<T>);

#[cfg(lockless_loom)]
impl<T: Copy> Slot<T> {
    /// A slot holding `value` (simulated rings only).
    #[cfg(test)]
    pub(crate) fn new(value: T) -> Self {
        Slot(loom::cell::UnsafeCell::new(value))
    }

    /// Reads the descriptor.
    ///
    /// # Safety
    ///
    /// - the caller is the ring's consumer and owns this slot.
    pub(crate) unsafe fn read(&self) -> T {
        self.0.with(|p| {
            // SAFETY: the caller owns the slot; loom checks the write it reads happened before.
            unsafe { *p }
        })
    }

    /// Writes the descriptor.
    ///
    /// # Safety
    ///
    /// - the caller is the ring's producer and owns this slot.
    pub(crate) unsafe fn write(&self, value: T) {
        self.0.with_mut(|p| {
            // SAFETY: the caller owns the slot; loom checks the last read happened before.
            unsafe { *p = value }
        })
    }
}

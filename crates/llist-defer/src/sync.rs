//! The only place in this crate that names atomics.
//!
//! Under `--cfg lockless_loom` the types come from loom so that the model checker sees every
//! access; otherwise they are the standard library's. The cfg is namespaced to this project so
//! that building our loom models never flips a dependency into loom mode.

#[cfg(lockless_loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, Ordering};
#[cfg(not(lockless_loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, Ordering};

/// The drain hint of a [`Link`](crate::Link): an address the drainer only prefetches, on which
/// no result depends, so it stays a standard atomic even under loom (the model need not explore
/// it).
pub(crate) use core::sync::atomic::AtomicPtr as HintPtr;

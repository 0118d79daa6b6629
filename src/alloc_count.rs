//! A counting global allocator, for tests and benches that prove something about the heap: that
//! a steady state allocates nothing, or that live memory stays flat over a long run.
//!
//! Install it in a test binary and read the counters around the code under test:
//!
//! ```
//! use lockless_xmit::alloc_count::{CountingAlloc, thread_allocs};
//!
//! #[global_allocator]
//! static GLOBAL: CountingAlloc = CountingAlloc;
//!
//! let before = thread_allocs();
//! let v: Vec<u8> = Vec::with_capacity(16);
//! assert_eq!(thread_allocs() - before, 1);
//! # drop(v);
//! ```
//!
//! It forwards every call to [`System`]. Without `#[global_allocator]` the counters stay at 0.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The allocator: [`System`] plus counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAlloc;

static LIVE: AtomicU64 = AtomicU64::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's allocation calls (a const-initialised `Cell`, which never allocates).
    static THREAD_ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count(bytes_in: usize, bytes_out: usize) {
    if bytes_out != 0 {
        LIVE.fetch_sub(bytes_out as u64, Ordering::Relaxed);
    }
    if bytes_in != 0 {
        LIVE.fetch_add(bytes_in as u64, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // `try_with`: during thread teardown the slot may be gone; that call goes uncounted.
        let _ = THREAD_ALLOCS.try_with(|c| c.set(c.get() + 1));
    }
}

// SAFETY: every call forwards to `System` with the caller's arguments unchanged; the counting
// touches only atomics and a const-initialised thread-local, none of which allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), 0);
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), 0);
        // SAFETY: forwarded as is; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(0, layout.size());
        // SAFETY: forwarded as is; `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size, layout.size());
        // SAFETY: forwarded as is; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Heap bytes live now, all threads.
pub fn live_bytes() -> u64 {
    LIVE.load(Ordering::Relaxed)
}

/// Allocation calls (alloc, alloc_zeroed, realloc) so far, all threads.
pub fn allocs() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

/// Allocation calls so far on the calling thread.
pub fn thread_allocs() -> u64 {
    THREAD_ALLOCS.with(Cell::get)
}

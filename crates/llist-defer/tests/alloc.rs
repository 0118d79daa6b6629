//! Proves the intrusive API allocates nothing per push or take: a counting global allocator
//! watches a steady-state loop of push / take_all / reverse / iterate / re-push.
#![cfg(not(lockless_loom))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use llist_defer::{Boxed, DeferList, Fifo, LList, Pushed};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; counting touches only a const-initialised
// thread-local, which itself never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn steady_state_push_and_take_allocate_nothing() {
    let list = DeferList::with_limit(1000).unwrap();
    let plain = LList::new();
    let mut spare: Fifo<Boxed<u64>> = (0..256).map(Boxed::new).collect();

    let before = allocs();
    let mut sum = 0;
    for _round in 0..1000 {
        while let Some(n) = spare.pop_front() {
            match list.push(n) {
                Ok(Pushed::First | Pushed::Queued { .. }) => {}
                Err(r) => panic!("limit 1000 refused a batch of 256: {r}"),
            }
        }
        let mut batch = list.take_all().reverse();
        sum += batch.iter().map(|n| **n).sum::<u64>();
        plain.add_batch(core::mem::take(&mut batch));
        spare.append(&mut plain.take_all().reverse());
    }
    let during = allocs() - before;
    assert_eq!(spare.len(), 256);
    assert_eq!(sum, 1000 * (0..256).sum::<u64>());
    assert_eq!(during, 0, "the intrusive hot path allocated {during} times");
}

#[test]
fn the_counter_sees_allocations() {
    // Guards the test above against a counter that never counts.
    let before = allocs();
    let b = Boxed::new(1u64);
    assert_eq!(allocs() - before, 1);
    drop(b);
}

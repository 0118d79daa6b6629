//! Loom models of the remote-free protocol (`skb_attempt_defer_free` against
//! `skb_defer_free_flush`), shrunk to 4 frames and `defer_max` 4 (kick at the 3rd deferred
//! frame, overflow from the 4th).
//!
//! Run: `RUSTFLAGS="--cfg lockless_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p skb-pool
//! --release --test loom`.
//!
//! Frames are tracked by their state word: every allocation asserts (inside the pool, under
//! this cfg) that the frame it hands out is `FREE`, so a frame on two lists at once fails the
//! model; and after the threads join, the owner must be able to allocate every frame again,
//! each exactly once, so a frame stranded anywhere fails it too.
#![cfg(lockless_loom)]

use loom::sync::Arc as LoomArc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use skb_pool::{Pool, PoolHandle, Skb};
use std::sync::Arc;

const FRAMES: usize = 4;
const DEFER_MAX: usize = 4;

fn pool() -> Pool {
    Pool::builder()
        .frame_count(FRAMES)
        .defer_max(DEFER_MAX)
        .max_owners(3)
        .cache_max(4)
        .build()
        .unwrap()
}

fn owner_with_counter(pool: &Pool) -> (PoolHandle, LoomArc<AtomicUsize>) {
    let wakes = LoomArc::new(AtomicUsize::new(0));
    let w = wakes.clone();
    let h = pool
        .handle_with_wake(Arc::new(move || {
            w.fetch_add(1, Ordering::Relaxed);
        }))
        .unwrap();
    (h, wakes)
}

/// After the run: every frame comes back to the owner exactly once.
fn assert_all_back(pool: &Pool, owner: &mut PoolHandle) {
    let all: Vec<Skb> = (0..FRAMES)
        .map(|_| owner.alloc().expect("a frame was lost"))
        .collect();
    let mut idx: Vec<u32> = all.iter().map(Skb::frame_index).collect();
    idx.sort_unstable();
    idx.dedup();
    assert_eq!(idx.len(), FRAMES, "a frame was handed out twice");
    assert!(owner.alloc().is_err());
    drop(all);
    assert_eq!(pool.stats().free, FRAMES);
}

/// The kick is never lost: frames waiting on the defer list with the count past half of
/// `defer_max` since the last drain always leave the owner's pending flag set (so the owner has
/// been, or will be, woken). This holds because the drain clears `pending` before its Release
/// reset of the count, and the freers' increments are Acquire.
fn assert_no_lost_wake(pool: &Pool, owner: &PoolHandle) {
    let st = pool.owner_state(owner.owner()).unwrap();
    if st.has_deferred && st.deferred_count > DEFER_MAX / 2 {
        assert!(
            st.wake_pending,
            "lost wake: {st:?} {:?} owner {:?}",
            pool.stats().totals,
            owner.stats()
        );
    }
}

#[test]
fn two_remote_freers_race_the_owner_drain() {
    loom::model(|| {
        let pool = pool();
        let (mut owner, wakes) = owner_with_counter(&pool);
        let mut skbs: Vec<Skb> = (0..FRAMES).map(|_| owner.alloc().unwrap()).collect();
        let b = skbs.split_off(2);
        let a = skbs;
        // Two threads without handles: each free is one kernel-style deferral.
        let ta = thread::spawn(move || drop(a));
        let tb = thread::spawn(move || drop(b));
        owner.flush_remote();
        ta.join().unwrap();
        tb.join().unwrap();
        assert_no_lost_wake(&pool, &owner);

        let t = pool.stats().totals;
        assert_eq!(t.remote_frees, FRAMES as u64);
        assert_eq!(t.deferred + t.overflow, FRAMES as u64);
        let w = wakes.load(Ordering::Relaxed) as u64;
        assert_eq!(
            w, t.wakes,
            "the callback runs exactly for the kicks that won"
        );
        // Four frees cross half of defer_max (the 3rd increment after a reset) at most once,
        // so there is at most one wake, however the drain interleaves.
        assert!(w <= 1, "{w} wakes");
        owner.flush_remote();
        assert_all_back(&pool, &mut owner);
    });
}

#[test]
fn one_fill_cycle_wakes_exactly_once() {
    loom::model(|| {
        let pool = pool();
        let (mut owner, wakes) = owner_with_counter(&pool);
        let mut skbs: Vec<Skb> = (0..FRAMES).map(|_| owner.alloc().unwrap()).collect();
        let b = skbs.split_off(2);
        let a = skbs;
        let ta = thread::spawn(move || drop(a));
        let tb = thread::spawn(move || drop(b));
        ta.join().unwrap();
        tb.join().unwrap();
        // No drain in between: counts 1, 2, 3 are deferred, the crossing (3rd) wakes, and the
        // 4th (count 4 = defer_max) overflows — whichever thread frees which.
        let t = pool.stats().totals;
        assert_eq!((t.deferred, t.overflow, t.wakes), (3, 1, 1));
        assert_eq!(wakes.load(Ordering::Relaxed), 1);
        let st = pool.owner_state(owner.owner()).unwrap();
        assert!(st.wake_pending && st.has_deferred);
        assert!(owner.flush_remote());
        assert!(!pool.owner_state(owner.owner()).unwrap().wake_pending);
        assert_all_back(&pool, &mut owner);
    });
}

#[test]
fn batched_freers_with_handles_race_the_owner() {
    loom::model(|| {
        let pool = pool();
        let (mut owner, wakes) = owner_with_counter(&pool);
        let mut skbs: Vec<Skb> = (0..FRAMES).map(|_| owner.alloc().unwrap()).collect();
        let b = skbs.split_off(2);
        let a = skbs;
        let spawn = |skbs: Vec<Skb>| {
            let pool = pool.clone();
            thread::spawn(move || {
                // A handle on the freeing thread batches (batch = defer_max / 4 = 1 here) and
                // flushes when dropped; the owner's frames go home through its defer list.
                let mut h = pool.handle().unwrap();
                h.free_bulk(skbs);
                drop(h);
            })
        };
        let ta = spawn(a);
        let tb = spawn(b);
        // The owner polls while they free: allocation drains when kicked or dry.
        let got = owner.alloc();
        ta.join().unwrap();
        tb.join().unwrap();
        drop(got);
        assert_no_lost_wake(&pool, &owner);
        let t = pool.stats().totals;
        assert_eq!(t.deferred + t.overflow, FRAMES as u64);
        assert_eq!(wakes.load(Ordering::Relaxed) as u64, t.wakes);
        owner.flush_remote();
        assert_all_back(&pool, &mut owner);
    });
}

#[test]
fn owner_dropped_while_frames_are_out() {
    loom::model(|| {
        let pool = pool();
        let mut owner = pool.handle().unwrap();
        let skbs: Vec<Skb> = (0..2).map(|_| owner.alloc().unwrap()).collect();
        let t = thread::spawn(move || drop(skbs));
        drop(owner); // races the remote frees: they must land somewhere reachable
        t.join().unwrap();
        let mut fresh = pool.handle().unwrap();
        assert_all_back(&pool, &mut fresh);
    });
}

#[test]
fn duplicate_completions_race() {
    loom::model(|| {
        let pool = pool();
        let mut owner = pool.handle().unwrap();
        let addr = owner.alloc().unwrap().into_addr();
        let p2 = pool.clone();
        let t = thread::spawn(move || p2.skb_from_addr(addr).is_ok());
        let mine = pool.skb_from_addr(addr).is_ok();
        let theirs = t.join().unwrap();
        assert!(mine ^ theirs, "exactly one completion wins");
        assert_all_back(&pool, &mut owner);
    });
}

/// An owner that has every frame out parks in `alloc_wait` (loom's park has no timeout), while
/// another thread frees one of them: the free must wake it, in every interleaving of the
/// owner's "announce, look again, park" with the freer's "add, look at the announcement". A
/// lost wake leaves the owner parked forever, which loom reports as a deadlock.
#[test]
fn a_remote_free_wakes_an_owner_parked_for_frames() {
    loom::model(|| {
        let pool = pool();
        let mut owner = pool.handle().unwrap();
        let mut skbs: Vec<Skb> = (0..FRAMES).map(|_| owner.alloc().unwrap()).collect();
        let one = skbs.pop().unwrap();
        let t = thread::spawn(move || drop(one));
        let got = owner
            .alloc_wait(std::time::Duration::from_secs(3600))
            .expect("woken with the freed frame");
        t.join().unwrap();
        drop(got);
        drop(skbs);
        assert_all_back(&pool, &mut owner);
    });
}

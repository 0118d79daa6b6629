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
use skb_pool::{Pool, PoolHandle, RefillOrder, Skb};
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

// ---- Per-CPU caches (`Pool::alloc`, the `PerCpu::Locked` protocol; loom cannot run the rseq
// asm, whose commit-or-abort replaces the try-lock one for one). Modelled threads sit on
// simulated CPUs (`skb_pool::loom_set_cpu`).

fn percpu_pool(cpus: usize, wake: Option<skb_pool::Wake>) -> Pool {
    percpu_pool_deferring(cpus, wake, DEFER_MAX)
}

/// With `defer_max` 8 the remote-free batch is 2 (`defer_max / 4`).
fn percpu_pool_deferring(cpus: usize, wake: Option<skb_pool::Wake>, defer_max: usize) -> Pool {
    percpu_pool_ordered(cpus, wake, defer_max, RefillOrder::Freed)
}

fn percpu_pool_ordered(
    cpus: usize,
    wake: Option<skb_pool::Wake>,
    defer_max: usize,
    order: RefillOrder,
) -> Pool {
    let b = Pool::builder()
        .frame_count(FRAMES)
        .defer_max(defer_max)
        .max_owners(1)
        .cache_max(4)
        .cpus(cpus)
        .per_cpu(skb_pool::PerCpu::Locked)
        .refill_order(order);
    match wake {
        Some(w) => b.cpu_wake(w),
        None => b,
    }
    .build()
    .unwrap()
}

/// One allocation on simulated CPU `cpu`, in a thread of its own.
fn alloc_on(pool: &Pool, cpu: u32) -> thread::JoinHandle<Option<Skb>> {
    let pool = pool.clone();
    thread::spawn(move || {
        skb_pool::loom_set_cpu(cpu);
        pool.alloc().ok()
    })
}

/// From CPU `cpu`, allocates until the pool is exhausted; with the frames `held` elsewhere,
/// every frame must be seen exactly once.
fn assert_all_reachable_from(pool: &Pool, cpu: u32, held: &[Skb]) {
    skb_pool::loom_set_cpu(cpu);
    let mut all: Vec<Skb> = Vec::new();
    while let Ok(s) = pool.alloc() {
        all.push(s);
    }
    let frames = pool.stats().frame_count;
    let mut idx: Vec<u32> = all.iter().chain(held).map(Skb::frame_index).collect();
    idx.sort_unstable();
    idx.dedup();
    assert_eq!(all.len() + held.len(), frames, "a frame was lost");
    assert_eq!(idx.len(), frames, "a frame was handed out twice");
    drop(all);
    assert_eq!(pool.stats().free + held.len(), frames);
}

/// Two allocations that a free frame was always waiting for: neither may have reported
/// `Exhausted`, and with them and the frames `held` elsewhere every frame is reachable.
fn assert_both_served(pool: &Pool, mut held: Vec<Skb>, got: [Option<Skb>; 2]) {
    let [a, b] = got;
    assert!(
        a.is_some() && b.is_some(),
        "Exhausted with a frame free: {:?}",
        pool.per_cpu_stats()
    );
    held.extend(a);
    held.extend(b);
    assert_all_reachable_from(pool, 0, &held);
}

/// Two threads on one CPU: either can be preempted while holding the CPU's try-lock, and the
/// other then takes the shared path (depot, overflow list) instead of waiting. No frame is
/// handed out twice (the pool asserts `FREE` on every allocation under loom) or lost.
#[test]
fn percpu_locked_slot_with_a_preempted_holder() {
    loom::model(|| {
        let pool = percpu_pool(1, None);
        let spawn = || {
            let pool = pool.clone();
            thread::spawn(move || {
                skb_pool::loom_set_cpu(0);
                let a = pool.alloc().expect("4 frames, at most 2 held");
                drop(a);
            })
        };
        let (ta, tb) = (spawn(), spawn());
        ta.join().unwrap();
        tb.join().unwrap();
        assert_all_reachable_from(&pool, 0, &[]);
    });
}

/// Frames of CPU 0 freed on CPU 1 go onto CPU 0's defer list, the free that carries the count
/// past half of defer_max kicks CPU 0's wake, and an allocation on CPU 0 racing the frees
/// drains. The kick is never lost and frames all come back.
#[test]
fn percpu_remote_free_kicks_at_half_and_the_home_cpu_drains() {
    loom::model(|| {
        let wakes = LoomArc::new(AtomicUsize::new(0));
        let w = wakes.clone();
        let pool = percpu_pool(
            2,
            Some(Arc::new(move || {
                w.fetch_add(1, Ordering::Relaxed);
            })),
        );
        skb_pool::loom_set_cpu(0);
        let skbs: Vec<Skb> = (0..3).map(|_| pool.alloc().unwrap()).collect();
        assert!(skbs.iter().all(|s| s.home_cpu() == Some(0)));
        let t = thread::spawn(move || {
            skb_pool::loom_set_cpu(1);
            drop(skbs);
        });
        let p2 = pool.clone();
        let a = thread::spawn(move || {
            skb_pool::loom_set_cpu(0);
            p2.alloc().expect("one frame never left the pool")
        });
        t.join().unwrap();
        let got = a.join().unwrap();
        let st = pool.per_cpu_stats();
        let w = wakes.load(Ordering::Relaxed);
        assert!(w <= 1, "{w} wakes for 3 frees");
        // Nothing drained since the three were deferred: the third crossed half (3 > 4 / 2).
        if st.cpus[0].deferred == 3 {
            assert_eq!(w, 1, "lost kick: {st:?}");
        }
        assert_all_reachable_from(&pool, 0, &[got]);
    });
}

/// A bulk free on CPU 1 of two frames of CPU 0 (one outgoing-batch lock for the run, a batch
/// of 2, the references given back in one update) races a single free of a third into the
/// same batch by another thread on CPU 1 (one of them may find the batch's lock taken and send
/// its frame alone) and an allocation on CPU 0: no frame is lost or handed out twice, and the
/// references balance (a frame left over fails `assert_all_reachable_from`, a reference given
/// back twice the pool's drop).
#[test]
fn percpu_bulk_remote_free_races_a_single_free_and_the_home_drain() {
    loom::model(|| {
        let pool = percpu_pool_deferring(2, None, 8);
        skb_pool::loom_set_cpu(0);
        let mut bulk: Vec<Skb> = (0..3).map(|_| pool.alloc().unwrap()).collect();
        let single = bulk.pop().unwrap();
        let t = thread::spawn(move || {
            skb_pool::loom_set_cpu(1);
            Skb::free_bulk(bulk);
        });
        let u = thread::spawn(move || {
            skb_pool::loom_set_cpu(1);
            drop(single);
        });
        let p2 = pool.clone();
        let a = thread::spawn(move || {
            skb_pool::loom_set_cpu(0);
            p2.alloc().expect("one frame never left the pool")
        });
        t.join().unwrap();
        u.join().unwrap();
        let got = a.join().unwrap();
        assert_all_reachable_from(&pool, 0, &[got]);
    });
}

/// Every frame belongs to CPU 1, where nobody allocates any more; they are freed on CPU 0 (to
/// CPU 1's defer list) by two threads, one of which then allocates on CPU 0 with its cache and
/// the depot empty: it must find frames in CPU 1's defer list, racing the other's frees.
#[test]
fn percpu_drain_of_a_cpu_nobody_allocates_on() {
    loom::model(|| {
        let pool = percpu_pool(2, None);
        skb_pool::loom_set_cpu(1);
        let mut skbs: Vec<Skb> = (0..FRAMES).map(|_| pool.alloc().unwrap()).collect();
        assert!(skbs.iter().all(|s| s.home_cpu() == Some(1)));
        let theirs = skbs.split_off(2);
        let mine = skbs;
        let t = thread::spawn(move || {
            skb_pool::loom_set_cpu(0);
            drop(theirs);
        });
        let p2 = pool.clone();
        let a = thread::spawn(move || {
            skb_pool::loom_set_cpu(0);
            drop(mine);
            // Its own two frees are somewhere reachable from here, whatever the other does.
            (0..2)
                .map(|_| {
                    p2.alloc().unwrap_or_else(|e| {
                        panic!("stranded: {e} {:?} {:?}", p2.per_cpu_stats(), p2.stats())
                    })
                })
                .collect::<Vec<_>>()
        });
        t.join().unwrap();
        let held = a.join().unwrap();
        assert_all_reachable_from(&pool, 0, &held);
    });
}

/// Two frames wait on CPU 1's defer list; allocations on CPU 0 and on CPU 1, both caches dry,
/// race for them: CPU 0's refill takes the whole list into its hands (its probe of other CPUs'
/// lists) before it stashes the frame it does not return, and CPU 1's finds its list empty
/// meanwhile. With two frames free for two allocations, neither may report `Exhausted`: the
/// one that looks while the other holds the frames must look again (`percpu/hands.rs`).
#[test]
fn percpu_allocation_waits_for_frames_in_another_refills_hands() {
    loom::model(|| {
        // defer_max 4: remote frees go home one at a time.
        let pool = percpu_pool_deferring(2, None, 4);
        skb_pool::loom_set_cpu(1);
        let mut held: Vec<Skb> = (0..FRAMES).map(|_| pool.alloc().unwrap()).collect();
        skb_pool::loom_set_cpu(0);
        held.truncate(2);
        assert_eq!(pool.per_cpu_stats().cpus[1].cached, 0);
        let (a, b) = (alloc_on(&pool, 0), alloc_on(&pool, 1));
        assert_both_served(&pool, held, [a.join().unwrap(), b.join().unwrap()]);
    });
}

/// A free that lands behind an allocation's look. CPU 0's cache holds frame `a`; a thread on
/// CPU 0 frees `b` (CPU 1's frame: it waits in CPU 0's outgoing batch, which at `defer_max` 8
/// holds two) and then allocates, popping `a`; meanwhile an allocation on CPU 1 finds its cache
/// dry and looks through every source. Neither the free nor the pop is a bracketed move, so in
/// the interleaving where the look passes the outgoing batches before `b` arrives and reaches
/// the other CPUs' caches after `a` left, only the end of the look's re-read of the places
/// frees fill (`frees_pending` in `percpu/refill.rs`) sees `b`. A frame is free at every
/// instant until both allocations are served, so neither may report `Exhausted` (without the
/// re-read, CPU 1's does).
#[test]
fn percpu_a_free_behind_a_look_is_found() {
    loom::model(|| {
        // 4 frames on 2 CPUs: caches of one frame; remote frees go home two at a time.
        let pool = percpu_pool_deferring(2, None, 8);
        skb_pool::loom_set_cpu(0);
        let a = pool.alloc().unwrap();
        skb_pool::loom_set_cpu(1);
        let mut held: Vec<Skb> = (1..FRAMES).map(|_| pool.alloc().unwrap()).collect();
        let b = held.pop().unwrap();
        skb_pool::loom_set_cpu(0);
        drop(a);
        let st = pool.per_cpu_stats();
        assert_eq!((pool.stats().free, st.cpus[0].cached), (1, 1), "{st:?}");
        let p0 = pool.clone();
        let freer = thread::spawn(move || {
            skb_pool::loom_set_cpu(0);
            drop(b);
            p0.alloc().ok()
        });
        let other = alloc_on(&pool, 1);
        assert_both_served(&pool, held, [freer.join().unwrap(), other.join().unwrap()]);
    });
}

/// A frame in the cache of CPU 1 is taken by an allocation on CPU 0 that finds every other
/// source dry (the locked pool's taking: CPU 1's try-lock, taken only if free), racing an
/// allocation and a free of that frame on CPU 1 (which may find the cache taken and take the
/// shared path instead). No frame is lost or handed out twice; after the join every frame must
/// be reachable from CPU 0, and one left in CPU 1's cache is reached only by a taking.
#[test]
fn percpu_taking_from_a_cache_races_its_cpu() {
    loom::model(|| {
        // 4 frames on 2 CPUs: caches of one frame.
        let pool = percpu_pool(2, None);
        skb_pool::loom_set_cpu(1);
        let mut held = vec![pool.alloc().unwrap()];
        let x = pool.alloc().unwrap();
        skb_pool::loom_set_cpu(0);
        held.extend((0..2).map(|_| pool.alloc().unwrap()));
        // CPU 1's cache holds x; every other source is dry.
        skb_pool::loom_set_cpu(1);
        drop(x);
        assert_eq!(pool.per_cpu_stats().cpus[1].cached, 1);
        let p1 = pool.clone();
        let a = thread::spawn(move || {
            skb_pool::loom_set_cpu(1);
            drop(p1.alloc().ok());
        });
        let b = alloc_on(&pool, 0);
        a.join().unwrap();
        held.extend(b.join().unwrap());
        assert_all_reachable_from(&pool, 0, &held);
    });
}

/// Two takers at once: CPU 1's cache holds a frame and nobody runs there; allocations on CPU 0
/// and CPU 2, with every other source dry, both try to take it (the try-lock lets one in at a
/// time; the other finds it held, or empty, and reports `Exhausted`). No frame is handed out
/// twice or lost (without the try-lock the model loses one), and after the join every frame is
/// reachable from CPU 0.
#[test]
fn percpu_two_takers_race_for_one_cache() {
    // The loser of the race looks again while the winner holds the frame (`percpu/hands.rs`),
    // and every look's loads are branches: more than loom's default 1 000 on the longest paths.
    let mut model = loom::model::Builder::new();
    model.max_branches = 10_000;
    model.check(|| {
        // 8 frames on 3 CPUs: caches of one frame (8 / 6).
        let pool = Pool::builder()
            .frame_count(8)
            .defer_max(DEFER_MAX)
            .max_owners(1)
            .cache_max(4)
            .cpus(3)
            .per_cpu(skb_pool::PerCpu::Locked)
            .build()
            .unwrap();
        skb_pool::loom_set_cpu(1);
        let x = pool.alloc().unwrap();
        skb_pool::loom_set_cpu(0);
        let mut held: Vec<Skb> = (0..7).map(|_| pool.alloc().unwrap()).collect();
        // CPU 1's cache holds x; every other source is dry.
        skb_pool::loom_set_cpu(1);
        drop(x);
        assert_eq!(pool.per_cpu_stats().cpus[1].cached, 1);
        let (a, b) = (alloc_on(&pool, 0), alloc_on(&pool, 2));
        held.extend(a.join().unwrap());
        held.extend(b.join().unwrap());
        assert_all_reachable_from(&pool, 0, &held);
    });
}

/// A wake callback holding a token: the pool drops the callback (and the token's clone) when
/// it is freed, so the token's count says whether it was.
fn freed_token() -> (LoomArc<()>, skb_pool::Wake) {
    let token = LoomArc::new(());
    let t = token.clone();
    (token, Arc::new(move || drop(t.clone())))
}

/// The last `Pool` value goes while a thread on CPU `free_cpu` frees two frames of CPU 0: the
/// per-CPU reference shares are frozen and folded in exactly once, and the pool is freed,
/// exactly when the last frame comes back (after the join the token's clone must be gone: a
/// leak fails here; a free before the last frame is a use after free in the freeing thread).
fn pool_dropped_while_frames_are_freed_on(cpus: usize, free_cpu: u32) {
    loom::model(move || {
        let (token, wake) = freed_token();
        let pool = percpu_pool(cpus, Some(wake));
        skb_pool::loom_set_cpu(0);
        let skbs: Vec<Skb> = (0..2).map(|_| pool.alloc().unwrap()).collect();
        let t = thread::spawn(move || {
            skb_pool::loom_set_cpu(free_cpu);
            drop(skbs);
        });
        drop(pool);
        t.join().unwrap();
        assert_eq!(LoomArc::strong_count(&token), 1, "the pool was not freed");
    });
}

/// Freed on another CPU: the home defer list, the reference dropped on the freeing CPU.
#[test]
fn percpu_pool_dropped_while_frames_are_freed() {
    pool_dropped_while_frames_are_freed_on(2, 1);
}

/// Freed at home: the reference leaves with the cache push's commit, racing the freeze that
/// reads the CPUs' words.
#[test]
fn percpu_pool_dropped_while_frames_are_freed_at_home() {
    pool_dropped_while_frames_are_freed_on(1, 0);
}

/// A remote free waits in its CPU's outgoing batch (of 2) for a second one that never comes;
/// an allocator on the home CPU, racing that free, must still find every frame: it takes the
/// partial batch under the batch's lock (the anti-stranding probe), or the free takes it
/// first, never both.
#[test]
fn percpu_partial_outgoing_batch_is_not_stranded() {
    loom::model(|| {
        let pool = percpu_pool_deferring(2, None, 8);
        assert_eq!(pool.remote_batch(), 2);
        skb_pool::loom_set_cpu(1);
        let mut skbs: Vec<Skb> = (0..FRAMES).map(|_| pool.alloc().unwrap()).collect();
        let one = skbs.pop().unwrap();
        let t = thread::spawn(move || {
            skb_pool::loom_set_cpu(0);
            drop(one);
        });
        let a = alloc_on(&pool, 1);
        t.join().unwrap();
        skbs.extend(a.join().unwrap());
        let st = pool.per_cpu_stats();
        assert!(st.cpus[0].outgoing <= 1, "{st:?}");
        assert_all_reachable_from(&pool, 1, &skbs);
    });
}

/// A drain bigger than the cache (caches of one frame here): CPU 0's refill takes the oldest
/// batch and puts the newer one back on its defer list (counted, no kick), racing an allocation
/// on CPU 1 that probes CPU 0's list (the anti-stranding path) and may take it before, during
/// or after. No frame is lost or handed out twice.
#[test]
fn percpu_drain_bigger_than_the_cache_races_a_probe() {
    drain_bigger_than_the_cache_races_a_probe(RefillOrder::Freed);
}

/// The same with refills sorted by address: the drain gathers the batches it takes before it
/// stashes them.
#[test]
fn percpu_sorted_drain_bigger_than_the_cache_races_a_probe() {
    drain_bigger_than_the_cache_races_a_probe(RefillOrder::Address);
}

fn drain_bigger_than_the_cache_races_a_probe(order: RefillOrder) {
    loom::model(move || {
        let pool = percpu_pool_ordered(2, None, 8, order);
        assert_eq!(pool.remote_batch(), 2);
        skb_pool::loom_set_cpu(0);
        let skbs: Vec<Skb> = (0..FRAMES).map(|_| pool.alloc().unwrap()).collect();
        // Two batches of two go home to CPU 0 (4 deferred: no kick, 4 is not past half of 8).
        skb_pool::loom_set_cpu(1);
        drop(skbs);
        let (a, b) = (alloc_on(&pool, 0), alloc_on(&pool, 1));
        let held: Vec<Skb> = [a.join().unwrap(), b.join().unwrap()]
            .into_iter()
            .flatten()
            .collect();
        assert!(
            !held.is_empty(),
            "both allocations failed with 4 frames free"
        );
        // B may have stashed frames in CPU 1's cache, which only CPU 1 reaches: take those
        // first, then everything else from CPU 0.
        skb_pool::loom_set_cpu(1);
        let mut from_1: Vec<Skb> = Vec::new();
        while let Ok(s) = pool.alloc() {
            from_1.push(s);
        }
        from_1.extend(held);
        assert_all_reachable_from(&pool, 0, &from_1);
    });
}

/// A kicked drain on CPU 0 whose cache still holds a frame (8 frames on 2 CPUs: caches of 2,
/// remote batches of 1, kicked at the third deferred) lifts that frame off, stashes the
/// drained batch beneath it and puts it back on top, while another thread on CPU 0 frees a
/// frame into the same cache (it may find the cache's try-lock held, or fill the slot the
/// lifted frame was to go back to, which then goes to the depot with its reference given
/// back). No frame is lost or handed out twice, and the references balance (one given back
/// twice or never fails the pool's drop).
#[test]
fn percpu_kicked_drain_lifts_the_cache_racing_a_free_on_the_same_cpu() {
    static DRAINED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    kicked_drain_lifts_the_cache_racing_a_free_on_the_same_cpu(RefillOrder::Freed, &DRAINED);
}

/// The same with the drained frames sorted by address before they go beneath the lifted one.
#[test]
fn percpu_sorted_kicked_drain_lifts_the_cache_racing_a_free_on_the_same_cpu() {
    static DRAINED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    kicked_drain_lifts_the_cache_racing_a_free_on_the_same_cpu(RefillOrder::Address, &DRAINED);
}

fn kicked_drain_lifts_the_cache_racing_a_free_on_the_same_cpu(
    order: RefillOrder,
    drained: &'static std::sync::atomic::AtomicUsize,
) {
    // Eight frames to take back at the end: more branches than loom's default allows.
    let mut model = loom::model::Builder::new();
    model.max_branches = 10_000;
    model.check(move || {
        let pool = Pool::builder()
            .frame_count(8)
            .defer_max(4)
            .max_owners(1)
            .cache_max(2)
            .cpus(2)
            .per_cpu(skb_pool::PerCpu::Locked)
            .refill_order(order)
            .build()
            .unwrap();
        skb_pool::loom_set_cpu(0);
        // Refills of 2 (one returned, one stashed): 6 allocations leave the cache empty, and
        // two local frees fill it.
        let mut skbs: Vec<Skb> = (0..6).map(|_| pool.alloc().unwrap()).collect();
        drop(skbs.drain(..2));
        let local = skbs.pop().unwrap();
        let remote: Vec<Skb> = std::mem::take(&mut skbs);
        skb_pool::loom_set_cpu(1);
        drop(remote);
        let st = pool.per_cpu_stats();
        assert_eq!((st.cpus[0].deferred, st.cpus[0].cached), (3, 2), "{st:?}");
        let p2 = pool.clone();
        let a = thread::spawn(move || {
            skb_pool::loom_set_cpu(0);
            p2.alloc().expect("frames are free")
        });
        let b = thread::spawn(move || {
            skb_pool::loom_set_cpu(0);
            drop(local);
        });
        b.join().unwrap();
        let got = a.join().unwrap();
        if pool.per_cpu_stats().cpus[0].deferred < 3 {
            drained.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        skbs.push(got);
        assert_all_reachable_from(&pool, 0, &skbs);
    });
    // Where B's free lands first, the cache is full again and the drain waits: at least one
    // interleaving must have drained (and lifted).
    assert!(drained.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

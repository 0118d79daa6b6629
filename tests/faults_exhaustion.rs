//! Faults: pool exhaustion and corrupt descriptors.
//!
//! - Allocation from an exhausted pool fails at once with the typed [`PoolError::Exhausted`]
//!   (never blocks, never panics), for every owner, and traffic resumes as soon as frames come
//!   back — from a handle-less thread, from another owner's flushed free batch, or from a
//!   transmit queue whose busy driver was holding them.
//! - A waiting allocator (fail fast, flush, retry) under 16 producers on a pool far smaller than
//!   the packets in flight never deadlocks, and every frame comes home. The pool starts held
//!   dry, so every producer waits at least once whatever the scheduling.
//! - Completion addresses outside the region, misaligned, or of frames not in flight are
//!   rejected with the right [`AddrError`] and counted by the caller, without touching the pool's
//!   state; of two racing completions of one frame exactly one wins.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use llist_defer::Fifo;
use qdisc::{Driver, Overflow, Pfifo, Strategy, ToFree, TxQueue, TxResult};
use skb_pool::{AddrError, Pool, PoolError, PoolHandle, Skb};

#[test]
fn exhausted_pool_fails_fast_with_a_typed_error_and_resumes() {
    let pool = Pool::builder().frame_count(64).build().unwrap();
    let mut a = pool.handle().unwrap();
    let held: Vec<Skb> = (0..64).map(|_| a.alloc().unwrap()).collect();
    // Every owner sees the same typed error, every time, at once.
    let mut b = pool.handle().unwrap();
    for _ in 0..10_000 {
        assert_eq!(a.alloc().unwrap_err(), PoolError::Exhausted);
        assert_eq!(b.alloc().unwrap_err(), PoolError::Exhausted);
    }
    let msg = PoolError::Exhausted.to_string();
    assert!(
        msg.contains("exhausted") && msg.contains("flush_frees"),
        "{msg}"
    );
    assert_eq!(a.alloc_bulk(8, &mut Vec::new()), 0);
    assert_eq!(pool.stats().in_use, 64);

    // A thread without a handle frees half: they are deferred to owner `a`, which takes them
    // on its next allocation.
    let (first, rest): (Vec<Skb>, Vec<Skb>) =
        held.into_iter()
            .enumerate()
            .fold((Vec::new(), Vec::new()), |(mut x, mut y), (i, s)| {
                if i < 32 {
                    x.push(s)
                } else {
                    y.push(s)
                }
                (x, y)
            });
    thread::spawn(move || drop(first)).join().unwrap();
    let again: Vec<Skb> = (0..32)
        .map(|_| a.alloc().expect("frames came back"))
        .collect();
    assert_eq!(a.alloc().unwrap_err(), PoolError::Exhausted);

    // Another owner frees the rest through its handle: they wait in its outgoing batch (below
    // remote_batch) until it flushes, then the owner gets them.
    let pool2 = pool.clone();
    thread::spawn(move || {
        let mut c = pool2.handle().unwrap();
        c.free_bulk(rest);
        c.flush_frees();
    })
    .join()
    .unwrap();
    let more: Vec<Skb> = (0..32)
        .map(|_| a.alloc().expect("flushed frames"))
        .collect();
    drop((again, more));
    drop((a, b));
    assert_eq!(pool.stats().free, 64);
}

/// A driver that holds back everything while `busy`, then sends (drops) it.
struct Gate {
    busy: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
}

impl Driver<Skb> for Gate {
    fn xmit(&mut self, batch: &mut Fifo<Skb>, _: &mut ToFree<Skb>) -> TxResult {
        if self.busy.load(Ordering::Acquire) {
            return TxResult {
                sent: 0,
                stopped: true,
            };
        }
        let n = batch.len();
        *batch = Fifo::new();
        self.sent.fetch_add(n as u64, Ordering::Relaxed);
        TxResult {
            sent: n,
            stopped: false,
        }
    }
    fn is_stopped(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }
}

#[test]
fn traffic_resumes_when_the_driver_gives_frames_back() {
    for strategy in [Strategy::BusyLock, Strategy::DeferList, Strategy::NoLock] {
        let pool = Pool::builder().frame_count(128).build().unwrap();
        let busy = Arc::new(AtomicBool::new(true));
        let sent = Arc::new(AtomicU64::new(0));
        let q = TxQueue::builder()
            .strategy(strategy)
            .build(
                Pfifo::<Skb>::new(),
                Gate {
                    busy: busy.clone(),
                    sent: sent.clone(),
                },
            )
            .unwrap();
        let mut h = pool.handle().unwrap();
        let mut offered = 0u64;
        // Every frame ends up queued behind the busy driver; then allocation fails, typed.
        let err = loop {
            match h.alloc() {
                Ok(skb) => {
                    q.xmit(skb);
                    offered += 1;
                }
                Err(e) => break e,
            }
        };
        assert_eq!(err, PoolError::Exhausted, "{strategy}");
        assert_eq!(offered, 128, "{strategy}");
        assert_eq!(q.backlog(), 128, "{strategy}");
        // The driver has room: the frames go out and come home, and traffic resumes.
        busy.store(false, Ordering::Release);
        while q.wake() {}
        assert_eq!(sent.load(Ordering::Relaxed), 128, "{strategy}");
        for _ in 0..1000 {
            q.xmit(h.alloc().expect("frames are back"));
            offered += 1;
        }
        let s = q.stats();
        assert_eq!(offered, s.sent + s.dropped(), "{strategy}: {s}");
        assert_eq!(s.dropped(), 0, "{strategy}");
        drop(h);
        assert_eq!(pool.stats().free, 128, "{strategy}");
    }
}

/// The waiting allocation policy an application builds on the fail-fast API: on `Exhausted`,
/// push its own pending remote frees out, take back what others returned, and retry.
fn alloc_waiting(h: &mut PoolHandle, waits: &AtomicU64) -> Skb {
    let mut counted = false;
    loop {
        match h.alloc() {
            Ok(skb) => return skb,
            Err(PoolError::Exhausted) => {
                if !counted {
                    waits.fetch_add(1, Ordering::Relaxed);
                    counted = true;
                }
                h.flush_frees();
                if !h.flush_remote() {
                    thread::yield_now();
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// Frees everything it sends on the runner's thread: remote frees into the runner's own
/// outgoing batches, the case where frames can hide from their owner.
struct FreeingDriver(Arc<AtomicU64>);

impl Driver<Skb> for FreeingDriver {
    fn xmit(&mut self, batch: &mut Fifo<Skb>, _: &mut ToFree<Skb>) -> TxResult {
        let n = batch.len();
        *batch = Fifo::new();
        self.0.fetch_add(n as u64, Ordering::Relaxed);
        TxResult {
            sent: n,
            stopped: false,
        }
    }
}

#[test]
fn waiting_for_frames_never_deadlocks() {
    use std::time::{Duration, Instant};

    const PRODUCERS: usize = 16;
    const FRAMES: usize = 256;
    let per_producer: u64 = if cfg!(debug_assertions) {
        5_000
    } else {
        50_000
    };
    for strategy in [Strategy::BusyLock, Strategy::DeferList, Strategy::NoLock] {
        // 256 frames for 16 producers whose frames are freed by whichever thread runs the
        // queue: allocations find the pool dry now and then, as often as the scheduling makes
        // them (possibly never, with frames spread over 16 caches of 16).
        let pool = Pool::builder()
            .frame_count(FRAMES)
            .cache_max(16)
            .max_owners(32)
            .build()
            .unwrap();
        // So the wait is not left to the scheduling: the pool starts dry, every frame held here
        // until each producer has found it so and is waiting. Then they all come back at once.
        let mut hog = pool.handle().unwrap();
        let held: Vec<Skb> = (0..FRAMES).map(|_| hog.alloc().unwrap()).collect();
        assert_eq!(hog.alloc().unwrap_err(), PoolError::Exhausted);
        let sent = Arc::new(AtomicU64::new(0));
        let q = Arc::new(
            TxQueue::builder()
                .strategy(strategy)
                .overflow(Overflow::Wait)
                .build(Pfifo::<Skb>::new(), FreeingDriver(sent.clone()))
                .unwrap(),
        );
        let waits = Arc::new(AtomicU64::new(0));
        let start = Arc::new(Barrier::new(PRODUCERS));
        let threads: Vec<_> = (0..PRODUCERS)
            .map(|_| {
                let (q, pool, waits, start) =
                    (q.clone(), pool.clone(), waits.clone(), start.clone());
                thread::spawn(move || {
                    let mut h = pool.handle().unwrap();
                    start.wait();
                    for _ in 0..per_producer {
                        let skb = alloc_waiting(&mut h, &waits);
                        q.xmit(skb);
                    }
                })
            })
            .collect();
        // Every producer's first allocation fails (no frame is free) and counts a wait before
        // it retries: wait for the counter, not for time. The deadline only turns a producer
        // that never gets there into a failure instead of a hang.
        let deadline = Instant::now() + Duration::from_secs(60);
        while waits.load(Ordering::Relaxed) < PRODUCERS as u64 {
            assert!(
                Instant::now() < deadline,
                "{strategy}: {} of {PRODUCERS} producers saw the held pool exhausted",
                waits.load(Ordering::Relaxed)
            );
            thread::yield_now();
        }
        assert_eq!(
            sent.load(Ordering::Relaxed),
            0,
            "{strategy}: a frame from a dry pool"
        );
        drop(held);
        drop(hog); // the frames leave its cache for the depot, where the producers find them
        for t in threads {
            t.join().unwrap();
        }
        while q.poll() {}
        let s = q.stats();
        let offered = PRODUCERS as u64 * per_producer;
        assert_eq!(offered, s.sent + s.dropped(), "{strategy}: {s}");
        assert_eq!(s.sent, sent.load(Ordering::Relaxed), "{strategy}");
        // (That every producer waited on a dry pool was established before the release.)
        assert_eq!(pool.stats().free, FRAMES, "{strategy}: {:?}", pool.stats());
    }
}

#[test]
fn corrupt_completion_addresses_are_rejected_and_counted() {
    let pool = Pool::builder().frame_count(64).build().unwrap();
    let region_len = pool.region().len() as u64;
    let frame_size = pool.region().frame_size() as u64;
    let mut h = pool.handle().unwrap();
    // 32 frames in flight (TX descriptors), 16 in use, 16 free.
    let mut in_flight: Vec<u64> = (0..32)
        .map(|i| {
            let mut s = h.alloc().unwrap();
            s.put_slice(&[i as u8; 60]).unwrap();
            s.into_addr()
        })
        .collect();
    let in_use: Vec<Skb> = (0..16).map(|_| h.alloc().unwrap()).collect();
    let before = pool.stats();

    let (mut out, mut mis, mut not) = (0u64, 0u64, 0u64);
    let mut count = |r: Result<Skb, AddrError>| match r {
        Ok(s) => panic!("a corrupt address was accepted: frame {}", s.frame_index()),
        Err(AddrError::OutOfRegion { .. }) => out += 1,
        Err(AddrError::Misaligned { .. }) => mis += 1,
        Err(AddrError::NotInFlight { .. }) => not += 1,
        Err(e) => panic!("unexpected {e:?}"),
    };
    // Outside the region: the addresses a corrupt ring entry would hold. Dereferencing any of
    // them would fault, so a passing test also shows none is touched.
    for addr in [
        region_len,
        region_len + 1,
        u64::MAX,
        u64::MAX - frame_size,
        1 << 63,
    ] {
        count(pool.skb_from_addr(addr));
        count(pool.skb_from_rx(addr, 60));
    }
    // RX windows that leave their frame.
    count(pool.skb_from_rx(in_flight[0], frame_size as u32));
    // Misaligned: inside an in-flight frame, but not the address it was handed out with.
    for &a in &in_flight {
        count(pool.skb_from_addr(a + 1));
        count(pool.skb_from_addr(a - 1));
        count(pool.skb_from_addr(a & !(frame_size - 1)));
    }
    // Not in flight: frames in use or free.
    for s in &in_use {
        count(pool.skb_from_addr(s.data_addr()));
    }
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut random_rejects = 0;
    for _ in 0..100_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let addr = rng % (2 * region_len);
        if in_flight.contains(&addr) {
            continue; // a genuine completion, by chance
        }
        count(pool.skb_from_addr(addr));
        random_rejects += 1;
    }
    assert!(out > 11 && mis >= 96 && not >= 16, "{out} {mis} {not}");
    assert_eq!(
        out + mis + not,
        11 + 32 * 3 + 16 + random_rejects as u64,
        "every corrupt address rejected exactly once"
    );
    // Nothing moved: the same frames are in flight, in use and free.
    let after = pool.stats();
    assert_eq!(
        (after.free, after.in_use, after.in_flight),
        (before.free, before.in_use, before.in_flight)
    );

    // Genuine completions still work, and two threads racing on each one: exactly one wins.
    let wins = Arc::new(AtomicU64::new(0));
    let dup = Arc::new(AtomicU64::new(0));
    let addrs = Arc::new(std::mem::take(&mut in_flight));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (pool, addrs, wins, dup) = (pool.clone(), addrs.clone(), wins.clone(), dup.clone());
            thread::spawn(move || {
                for &a in addrs.iter() {
                    match pool.skb_from_addr(a) {
                        Ok(s) => {
                            assert_eq!(s.len(), 60);
                            wins.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(AddrError::NotInFlight { .. }) => {
                            dup.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(wins.load(Ordering::Relaxed), 32);
    assert_eq!(dup.load(Ordering::Relaxed), 3 * 32);
    drop(in_use);
    drop(h);
    assert_eq!(pool.stats().free, 64);
}

/// The `Wait` policy: `alloc_wait` on an exhausted pool waits (rather than failing at once)
/// and returns a frame as soon as one comes back; with nothing coming back it fails with the
/// typed error once its timeout has passed.
#[test]
fn alloc_wait_resumes_when_frames_come_back() {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    let pool = Pool::builder().frame_count(16).build().unwrap();
    let mut a = pool.handle().unwrap();
    let held: Vec<Skb> = (0..16).map(|_| a.alloc().unwrap()).collect();

    // Nothing comes back: the wait lasts the whole timeout, then fails with the typed error.
    let t = Instant::now();
    assert_eq!(
        a.alloc_wait(Duration::from_millis(20)).unwrap_err(),
        PoolError::Exhausted
    );
    assert!(
        t.elapsed() >= Duration::from_millis(20),
        "{:?}",
        t.elapsed()
    );

    // Eight waiters; the frames come back only after every one has seen the pool exhausted.
    let exhausted = Arc::new(Barrier::new(9));
    let (got_tx, got_rx) = mpsc::channel();
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let (pool, exhausted, got) = (pool.clone(), exhausted.clone(), got_tx.clone());
            thread::spawn(move || {
                let mut h = pool.handle().unwrap();
                assert_eq!(h.alloc().unwrap_err(), PoolError::Exhausted);
                exhausted.wait();
                let skb = h
                    .alloc_wait(Duration::from_secs(60))
                    .expect("a frame came back");
                got.send(()).unwrap();
                // Traffic resumes: the frame is usable and goes home on drop.
                drop(skb);
                h.flush_frees();
            })
        })
        .collect();
    drop(got_tx);
    exhausted.wait();
    // No waiter can have a frame yet: every one is still held here.
    assert!(got_rx.try_recv().is_err());
    drop(held);
    drop(a); // the frames leave this owner's cache for the depot, where the waiters find them
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(got_rx.iter().count(), 8);
    assert_eq!(pool.stats().free, 16);
}

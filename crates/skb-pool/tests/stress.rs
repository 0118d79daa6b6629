//! Stress: 16 threads (on however few cores), producer/consumer and all-to-all, asserting the
//! conservation law — every frame allocated is freed or still outstanding, and at the end every
//! frame is back and reachable. Runs under AddressSanitizer too:
//! `RUSTC_BOOTSTRAP=1 RUSTFLAGS=-Zsanitizer=address cargo test -p skb-pool
//! --target x86_64-unknown-linux-gnu --test stress`.
#![cfg(not(lockless_loom))]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;

use llist_defer::LList;
use skb_pool::{Pool, PoolError, PoolStats, Skb};

const THREADS: usize = 16;

/// Small xorshift, so the tests need no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn stamp(skb: &mut Skb, producer: usize, seq: u64) {
    let mut b = [0u8; 64];
    b[..8].copy_from_slice(&(producer as u64).to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b[16..20].copy_from_slice(&skb.frame_index().to_le_bytes());
    skb.put_slice(&b).unwrap();
    skb.set_priority(producer as u32);
    skb.set_flow_hash(seq as u32);
}

fn check(skb: &Skb) -> usize {
    let d = skb.data();
    assert_eq!(d.len(), 64);
    let producer = u64::from_le_bytes(d[..8].try_into().unwrap()) as usize;
    let seq = u64::from_le_bytes(d[8..16].try_into().unwrap());
    assert_eq!(
        u32::from_le_bytes(d[16..20].try_into().unwrap()),
        skb.frame_index()
    );
    assert_eq!(skb.priority(), producer as u32);
    assert_eq!(skb.flow_hash(), seq as u32);
    producer
}

/// Every frame back, counters conserved, and a fresh owner reaches every frame.
fn assert_full(pool: &Pool) -> PoolStats {
    let s = pool.stats();
    assert_eq!(
        (s.free, s.in_use, s.in_flight, s.owners),
        (s.frame_count, 0, 0, 0),
        "{s:?}"
    );
    let t = s.totals;
    assert_eq!(
        t.allocs,
        t.local_frees + t.remote_frees,
        "allocated = freed: {t:?}"
    );
    assert_eq!(t.remote_frees, t.deferred + t.overflow, "{t:?}");
    let mut h = pool.handle().unwrap();
    let all: Vec<_> = (0..s.frame_count)
        .map(|_| h.alloc().expect("frame stranded"))
        .collect();
    let mut idx: Vec<u32> = all.iter().map(Skb::frame_index).collect();
    idx.sort_unstable();
    idx.dedup();
    assert_eq!(idx.len(), s.frame_count, "a frame handed out twice");
    assert_eq!(h.alloc().unwrap_err(), PoolError::Exhausted);
    drop(all);
    drop(h);
    s
}

#[test]
fn producer_consumer() {
    const PRODUCERS: usize = 8;
    const PER_PRODUCER: u64 = 25_000;
    let pool = Pool::builder()
        .frame_count(512)
        .defer_max(32)
        .remote_batch(8)
        .build()
        .unwrap();
    let queue: Arc<LList<Skb>> = Arc::new(LList::new());
    let addrs: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(Vec::new()));
    let consumed = Arc::new(AtomicUsize::new(0));
    let total = PRODUCERS * PER_PRODUCER as usize;
    let start = Arc::new(Barrier::new(THREADS));
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    for p in 0..PRODUCERS {
        let (pool, queue, addrs, start) =
            (pool.clone(), queue.clone(), addrs.clone(), start.clone());
        producers.push(thread::spawn(move || {
            let me = thread::current();
            let mut h = if p % 2 == 0 {
                pool.handle_with_wake(Arc::new(move || me.unpark()))
                    .unwrap()
            } else {
                pool.handle().unwrap()
            };
            start.wait();
            let mut seq = 0;
            while seq < PER_PRODUCER {
                let mut skb = match h.alloc() {
                    Ok(s) => s,
                    Err(PoolError::Exhausted) => {
                        h.flush_remote();
                        thread::yield_now();
                        continue;
                    }
                    Err(e) => panic!("{e}"),
                };
                stamp(&mut skb, p, seq);
                if seq % 4 == 3 {
                    // Through the "kernel": in flight, completed by address.
                    let addr = skb.into_addr();
                    addrs.lock().unwrap().push(addr);
                } else {
                    queue.add(skb);
                }
                seq += 1;
                if seq % 64 == 0 {
                    h.flush_remote();
                }
            }
            h.stats()
        }));
    }
    for c in 0..THREADS - PRODUCERS {
        let (pool, queue, addrs, consumed, start) = (
            pool.clone(),
            queue.clone(),
            addrs.clone(),
            consumed.clone(),
            start.clone(),
        );
        consumers.push(thread::spawn(move || {
            // Half the consumers batch through a handle, half free one by one without one.
            let mut h = (c % 2 == 0).then(|| pool.handle().unwrap());
            start.wait();
            let mut seen = [0u64; PRODUCERS];
            while consumed.load(Ordering::Relaxed) < total {
                let mut n = 0;
                let batch: Vec<Skb> = queue.take_all().collect();
                let done: Vec<u64> = std::mem::take(&mut *addrs.lock().unwrap());
                for skb in &batch {
                    seen[check(skb)] += 1;
                }
                n += batch.len();
                match h.as_mut() {
                    Some(h) => h.free_bulk(batch),
                    None => drop(batch),
                }
                for addr in done {
                    let skb = pool.skb_from_addr(addr).expect("completion");
                    seen[check(&skb)] += 1;
                    assert!(
                        pool.skb_from_addr(addr).is_err(),
                        "duplicate completion accepted"
                    );
                    n += 1;
                }
                if let Some(h) = h.as_mut() {
                    h.flush_frees();
                }
                consumed.fetch_add(n, Ordering::Relaxed);
                if n == 0 {
                    thread::yield_now();
                }
            }
            drop(h);
            seen
        }));
    }
    for s in producers.into_iter().map(|t| t.join().unwrap()) {
        assert_eq!(s.allocs, PER_PRODUCER);
    }
    let mut seen = [0u64; PRODUCERS];
    for per in consumers.into_iter().map(|t| t.join().unwrap()) {
        for (a, b) in seen.iter_mut().zip(per) {
            *a += b;
        }
    }
    assert_eq!(
        seen, [PER_PRODUCER; PRODUCERS],
        "every packet consumed exactly once"
    );
    assert_eq!(consumed.load(Ordering::Relaxed), total);
    let s = assert_full(&pool);
    assert_eq!(s.totals.allocs, total as u64);
    assert!(
        s.totals.deferred > 0 && s.totals.wakes > 0,
        "{:?}",
        s.totals
    );
}

#[test]
fn all_to_all() {
    const ROUNDS: usize = 2_000;
    let pool = Pool::builder()
        .frame_count(1024)
        .defer_max(8)
        .cache_max(32)
        .build()
        .unwrap();
    let inboxes: Arc<Vec<LList<Skb>>> = Arc::new((0..THREADS).map(|_| LList::new()).collect());
    let start = Arc::new(Barrier::new(THREADS));
    let stop = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (pool, inboxes, start, stop, finished) = (
                pool.clone(),
                inboxes.clone(),
                start.clone(),
                stop.clone(),
                finished.clone(),
            );
            thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((t as u64 + 1) * 0x1234_5678));
                let me = thread::current();
                let mut h = pool
                    .handle_with_wake(Arc::new(move || me.unpark()))
                    .unwrap();
                start.wait();
                let mut held: Vec<Skb> = Vec::new();
                for round in 0..ROUNDS {
                    // Allocate a burst, send each packet to a random thread.
                    let want = (rng.next() % 32) as usize;
                    h.alloc_bulk(want, &mut held);
                    for (i, mut skb) in held.drain(..).enumerate() {
                        stamp(&mut skb, t, (round * 64 + i) as u64);
                        inboxes[(rng.next() % THREADS as u64) as usize].add(skb);
                    }
                    // Free what others sent us: through the handle, or by plain drop.
                    let mine: Vec<Skb> = inboxes[t].take_all().collect();
                    for skb in &mine {
                        check(skb);
                    }
                    if round % 2 == 0 {
                        h.free_bulk(mine)
                    } else {
                        drop(mine)
                    }
                    match rng.next() % 8 {
                        0 => h.flush_frees(),
                        1 => {
                            h.flush_remote();
                        }
                        2 if round % 50 == 25 => {
                            // Owner churn: frames still out return through the vacant slot.
                            drop(h);
                            let me = thread::current();
                            h = pool
                                .handle_with_wake(Arc::new(move || me.unpark()))
                                .unwrap();
                        }
                        _ => {}
                    }
                    thread::yield_now();
                }
                // Keep draining our inbox until every thread is done sending.
                finished.fetch_add(1, Ordering::AcqRel);
                while finished.load(Ordering::Acquire) < THREADS {
                    h.free_bulk(inboxes[t].take_all());
                    h.flush_frees();
                    thread::yield_now();
                }
                h.free_bulk(inboxes[t].take_all());
                drop(h);
                stop.load(Ordering::Relaxed)
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for inbox in inboxes.iter() {
        assert!(inbox.is_empty());
    }
    let s = assert_full(&pool);
    assert!(
        s.totals.remote_frees > 0 && s.totals.overflow > 0,
        "{:?}",
        s.totals
    );
}

#[test]
fn conservation_mid_run() {
    // allocated = freed + outstanding while frames are out, in use and in flight.
    let pool = Pool::builder().frame_count(256).build().unwrap();
    let pool2 = pool.clone();
    let (held, inflight) = thread::spawn(move || {
        let mut h = pool2.handle().unwrap();
        let mut held = Vec::new();
        for i in 0..200 {
            let skb = h.alloc().unwrap();
            if i % 3 == 0 {
                drop(skb)
            } else {
                held.push(skb)
            }
        }
        let inflight: Vec<u64> = held.drain(..20).map(Skb::into_addr).collect();
        h.publish_stats();
        (held, inflight)
    })
    .join()
    .unwrap();
    let s = pool.stats();
    let t = s.totals;
    assert_eq!(
        t.allocs,
        t.local_frees + t.remote_frees + s.outstanding() as u64,
        "{s:?}"
    );
    assert_eq!((s.in_use, s.in_flight), (held.len(), inflight.len()));
    drop(held);
    for a in inflight {
        drop(pool.skb_from_addr(a).unwrap());
    }
    assert_full(&pool);
}

//! Owners coming and going: pool handles are created and dropped over and over while other
//! threads still hold, pass around and free their frames (with a handle of their own, or
//! without one). No frame is lost or freed twice: frames freed after their owner left reach the
//! next owner of the slot or the shared overflow, the pool never stays exhausted while frames
//! are free, and at the end every frame is back and every slot released.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;

use skb_pool::{Pool, PoolError, PoolHandle, Skb};

const OWNERS: usize = 12;
const FREERS: usize = 6;
const FRAMES: usize = 1024;

/// Allocates, retrying while the pool is dry. Fails the test if it stays dry for millions of
/// attempts while other threads keep freeing (frames lost).
fn alloc(h: &mut PoolHandle) -> Skb {
    for _ in 0..2_000_000u64 {
        match h.alloc() {
            Ok(skb) => return skb,
            Err(PoolError::Exhausted) => {
                h.flush_frees();
                if !h.flush_remote() {
                    thread::yield_now();
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
    let pool = h.pool();
    panic!(
        "the pool stayed exhausted: frames were lost: {:?} me {:?} {:?}",
        pool.stats(),
        h.owner(),
        pool.owner_state(h.owner())
    );
}

/// Registers a handle, retrying while every slot is taken by a live handle.
fn handle(pool: &Pool) -> PoolHandle {
    loop {
        match pool.handle() {
            Ok(h) => return h,
            Err(PoolError::TooManyOwners { .. }) => thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Takes what is waiting without blocking; true if nothing more was there.
fn rx_is_idle(rx: &mpsc::Receiver<Vec<Skb>>, held: &mut Vec<Skb>) -> bool {
    let mut idle = true;
    while let Ok(more) = rx.try_recv() {
        held.extend(more);
        idle = false;
    }
    idle
}

#[test]
fn handles_come_and_go_while_others_hold_their_frames() {
    let rounds: u64 = if cfg!(debug_assertions) { 200 } else { 2_000 };
    // Fewer slots than owner + freer threads: slots are reused by new owners while frames of
    // the previous one are still out.
    let pool = Pool::builder()
        .frame_count(FRAMES)
        .max_owners(8)
        .defer_max(16)
        .remote_batch(8)
        .cache_max(32)
        .build()
        .unwrap();
    let allocated = Arc::new(AtomicU64::new(0));
    let freed = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(OWNERS + FREERS));
    let mut to_freers = Vec::new();
    let mut freers = Vec::new();
    for f in 0..FREERS {
        let (tx, rx) = mpsc::channel::<Vec<Skb>>();
        to_freers.push(tx);
        let (pool, freed, start) = (pool.clone(), freed.clone(), start.clone());
        freers.push(thread::spawn(move || {
            start.wait();
            // Even freers keep a handle (batched remote frees, re-registered now and then);
            // odd ones free without one.
            let mut h = if f % 2 == 0 { pool.handle().ok() } else { None };
            let mut held: Vec<Skb> = Vec::new();
            let mut n = 0u64;
            while let Ok(batch) = rx.recv() {
                held.extend(batch);
                n += 1;
                // Keep some frames across the owners' comings and goings, but never sit on
                // them while idle (owners wait for frames while holding a partial batch).
                let k = if rx_is_idle(&rx, &mut held) {
                    held.len()
                } else if held.len() > 48 || n % 3 == 0 {
                    held.len() / 2 + 1
                } else {
                    0
                };
                let out: Vec<Skb> = held.drain(..k.min(held.len())).collect();
                freed.fetch_add(out.len() as u64, Ordering::Relaxed);
                match &mut h {
                    Some(h) => h.free_bulk(out),
                    None => drop(out),
                }
                if f % 2 == 0 && n % 17 == 0 {
                    // The old handle leaves, a new one arrives if a slot is free (never wait
                    // for one: owners waiting for frames hold the slots).
                    drop(h.take());
                    h = pool.handle().ok();
                }
                if let Some(h) = &mut h {
                    h.flush_frees();
                }
            }
            freed.fetch_add(held.len() as u64, Ordering::Relaxed);
            drop(held);
        }));
    }
    let owners: Vec<_> = (0..OWNERS)
        .map(|o| {
            let (pool, allocated, start) = (pool.clone(), allocated.clone(), start.clone());
            let txs = to_freers.clone();
            thread::spawn(move || {
                start.wait();
                for r in 0..rounds {
                    let mut h = handle(&pool);
                    let n = 1 + (o * 7 + r as usize) % 24;
                    let mut batch: Vec<Skb> = Vec::with_capacity(n);
                    for i in 0..n {
                        let mut skb = alloc(&mut h);
                        skb.put_slice(&[(o + i) as u8; 16]).unwrap();
                        batch.push(skb);
                    }
                    allocated.fetch_add(n as u64, Ordering::Relaxed);
                    // Keep one frame past the handle's drop, free it on this thread after.
                    let kept = batch.pop();
                    txs[(o + r as usize) % FREERS].send(batch).unwrap();
                    drop(h);
                    if let Some(skb) = kept {
                        assert_eq!(skb.data(), &[(o + n - 1) as u8; 16], "frame contents");
                        drop(skb); // handle-less free of a frame whose owner is gone
                    }
                }
            })
        })
        .collect();
    for t in owners {
        t.join().unwrap();
    }
    drop(to_freers);
    for t in freers {
        t.join().unwrap();
    }
    let s = pool.stats();
    assert_eq!(s.owners, 0, "every slot released: {s:?}");
    assert_eq!(s.in_use, 0, "{s:?}");
    assert_eq!(s.free, FRAMES, "every frame home: {s:?}");
    assert_eq!(s.totals.allocs, allocated.load(Ordering::Relaxed), "{s:?}");
    // A fresh owner can take every frame: none is stranded in a dead slot.
    let mut h = pool.handle().unwrap();
    let all: Vec<Skb> = (0..FRAMES).map(|_| alloc(&mut h)).collect();
    assert_eq!(h.alloc().unwrap_err(), PoolError::Exhausted);
    drop(all);
    drop(h);
    assert_eq!(pool.stats().free, FRAMES);
}

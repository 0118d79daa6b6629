//! Stress with more threads than cores: 16 pushers on (typically) 2 cores, the kernel protocol
//! (first pusher drains under a lock), a small burst limit so refusals really happen.
//! Asserts exactly-once delivery, per-pusher FIFO order and pushed = drained + refused.
#![cfg(not(lockless_loom))]

use std::sync::{Arc, Barrier, Mutex};
use std::thread;

use llist_defer::{Boxed, DeferList, LList, Pushed};

const PUSHERS: usize = 16;
const PER_PUSHER: usize = if cfg!(debug_assertions) {
    20_000
} else {
    100_000
};

#[test]
fn defer_list_16_pushers_conservation_and_order() {
    let list = Arc::new(DeferList::with_limit(32).unwrap());
    let delivered = Arc::new(Mutex::new(Vec::with_capacity(PUSHERS * PER_PUSHER)));
    let start = Arc::new(Barrier::new(PUSHERS));
    let threads: Vec<_> = (0..PUSHERS)
        .map(|p| {
            let (list, delivered, start) = (list.clone(), delivered.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let mut refused = Vec::new();
                for s in 0..PER_PUSHER {
                    match list.push(Boxed::new((p, s))) {
                        Ok(Pushed::First) => {
                            let mut out = delivered.lock().unwrap();
                            out.extend(
                                list.take_all().reverse().into_iter().map(Boxed::into_inner),
                            );
                        }
                        Ok(Pushed::Queued { burst }) => assert!(burst <= list.limit()),
                        Err(rejected) => {
                            assert!(rejected.burst > list.limit());
                            refused.push(rejected.into_inner().1);
                        }
                    }
                }
                refused
            })
        })
        .collect();
    let refused: Vec<Vec<usize>> = threads.into_iter().map(|t| t.join().unwrap()).collect();

    assert!(
        list.is_empty(),
        "items stranded after every pusher returned"
    );
    let delivered = delivered.lock().unwrap();
    let refused_total: usize = refused.iter().map(Vec::len).sum();
    assert_eq!(
        delivered.len() + refused_total,
        PUSHERS * PER_PUSHER,
        "pushed = drained + refused"
    );

    // Exactly once and in order: per pusher, the delivered and refused sequences interleave to
    // exactly 0..PER_PUSHER, and the delivered ones are increasing.
    let mut per: Vec<Vec<usize>> = vec![Vec::new(); PUSHERS];
    for &(p, s) in delivered.iter() {
        per[p].push(s);
    }
    for (p, seqs) in per.iter().enumerate() {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "pusher {p}: FIFO order broken"
        );
        let mut all: Vec<usize> = seqs.iter().chain(&refused[p]).copied().collect();
        all.sort_unstable();
        assert!(
            all.iter().copied().eq(0..PER_PUSHER),
            "pusher {p}: lost or duplicated"
        );
    }
    eprintln!("delivered {} refused {}", delivered.len(), refused_total);
}

#[test]
fn llist_16_adders_4_takers_exactly_once() {
    const TAKERS: usize = 4;
    let list: Arc<LList<Boxed<(usize, usize)>>> = Arc::new(LList::new());
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let adders: Vec<_> = (0..PUSHERS)
        .map(|p| {
            let (list, done) = (list.clone(), done.clone());
            thread::spawn(move || {
                for s in 0..PER_PUSHER / 4 {
                    list.add(Boxed::new((p, s)));
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Release);
            })
        })
        .collect();
    let takers: Vec<_> = (0..TAKERS)
        .map(|_| {
            let (list, done) = (list.clone(), done.clone());
            thread::spawn(move || {
                let mut got = Vec::new();
                while done.load(std::sync::atomic::Ordering::Acquire) < PUSHERS {
                    let batch: Vec<_> = list
                        .take_all()
                        .reverse()
                        .into_iter()
                        .map(Boxed::into_inner)
                        .collect();
                    // Within one batch each adder's items keep their order.
                    let mut last = vec![None; PUSHERS];
                    for &(p, s) in &batch {
                        assert!(last[p].is_none_or(|l| l < s), "order broken in a batch");
                        last[p] = Some(s);
                    }
                    got.extend(batch);
                    thread::yield_now();
                }
                got
            })
        })
        .collect();
    for a in adders {
        a.join().unwrap();
    }
    let mut all: Vec<(usize, usize)> = takers.into_iter().flat_map(|t| t.join().unwrap()).collect();
    all.extend(list.take_all().map(Boxed::into_inner));
    all.sort_unstable();
    let expected: Vec<_> = (0..PUSHERS)
        .flat_map(|p| (0..PER_PUSHER / 4).map(move |s| (p, s)))
        .collect();
    assert_eq!(all, expected, "every item taken exactly once");
}

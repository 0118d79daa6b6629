//! How a downstream crate model-checks its own code built on these crates, written the way such
//! a crate would write it: only public APIs, its own types, `loom` as a dev-dependency under the
//! same cfg. It is CI's check that the loom switch works from outside our crates.
//!
//! The downstream crate's `Cargo.toml`:
//!
//! ```toml
//! [target.'cfg(lockless_loom)'.dev-dependencies]
//! loom = "0.7"
//! ```
//!
//! and its run (`--cfg lockless_loom` switches every lockless-xmit crate to loom's atomics,
//! locks and threads; a bare `--cfg loom` would not, and would flip other crates instead):
//!
//! ```sh
//! RUSTFLAGS="--cfg lockless_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true cargo test --release --test loom_downstream
//! ```
//!
//! Shrink what the model explores: two threads, one or two items each, a burst limit of 1 or 2
//! instead of 1000. Each model below finishes in seconds at `LOOM_MAX_PREEMPTIONS=2`.
#![cfg(lockless_loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;

use llist_defer::Fifo;
use llist_defer::{Boxed, DeferList, Pushed};
use qdisc::{Driver, Pfifo, Strategy, TestPacket, ToFree, TxQueue, TxResult};

/// A user's batching stage: producers push work items onto a `DeferList`; the producer that
/// finds the list empty drains it into the user's own output under the user's own lock, as the
/// kernel's first pusher does. Every item must come out exactly once, in each producer's order,
/// or be refused back to its producer (over the burst limit), with nothing left on the list.
fn first_pusher_drains(limit: usize) {
    loom::model(move || {
        let list = Arc::new(DeferList::with_limit(limit).unwrap());
        let out = Arc::new(Mutex::new(Vec::new()));
        let producers: Vec<_> = (0..2u32)
            .map(|t| {
                let (list, out) = (list.clone(), out.clone());
                thread::spawn(move || {
                    let mut refused = Vec::new();
                    for i in 0..2u32 {
                        let item = t << 8 | i;
                        match list.push(Boxed::new(item)) {
                            Ok(Pushed::First) => {
                                let mut out = out.lock().unwrap();
                                let batch = list.take_all().reverse();
                                out.extend(batch.into_iter().map(Boxed::into_inner));
                            }
                            Ok(Pushed::Queued { .. }) => {}
                            Err(back) => refused.push(back.into_inner().into_inner()),
                        }
                    }
                    refused
                })
            })
            .collect();
        let refused: Vec<u32> = producers
            .into_iter()
            .flat_map(|p| p.join().unwrap())
            .collect();
        // A queued item is drained by the first pusher of its batch, which pushed before it
        // and drains after its own push: by the time both producers are done, it is out.
        assert!(list.is_empty(), "an item was stranded on the list");
        let out = out.lock().unwrap();
        assert_eq!(
            out.len() + refused.len(),
            4,
            "out {out:?} refused {refused:?}"
        );
        for t in 0..2u32 {
            let mine: Vec<u32> = out.iter().copied().filter(|x| x >> 8 == t).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "reordered: {out:?}");
        }
    });
}

#[test]
fn users_defer_list_stage_loses_nothing() {
    first_pusher_drains(2);
}

#[test]
fn users_defer_list_stage_at_a_limit_of_one_refuses_but_loses_nothing() {
    first_pusher_drains(1);
}

/// A user's own driver: it records what the engine hands it. The engine calls it from one
/// runner at a time, so it needs no lock of its own.
#[derive(Debug, Default)]
struct Wire {
    sent: Vec<u64>,
}

impl Driver<TestPacket> for Wire {
    fn xmit(&mut self, batch: &mut Fifo<TestPacket>, _: &mut ToFree<TestPacket>) -> TxResult {
        let mut sent = 0;
        while let Some(p) = batch.pop_front() {
            self.sent.push(p.id());
            sent += 1;
        }
        TxResult {
            sent,
            stopped: false,
        }
    }
}

/// Two producers transmit through a `TxQueue` (each strategy) in front of the user's driver:
/// once both have returned, with no poll, every packet is on the wire or counted as dropped.
#[test]
fn users_driver_behind_a_tx_queue_gets_every_packet() {
    for strategy in [Strategy::DeferList, Strategy::BusyLock, Strategy::NoLock] {
        loom::model(move || {
            let q = Arc::new(
                TxQueue::builder()
                    .strategy(strategy)
                    .build(Pfifo::new(), Wire::default())
                    .unwrap(),
            );
            let producers: Vec<_> = (0..2u64)
                .map(|t| {
                    let q = q.clone();
                    thread::spawn(move || {
                        q.xmit(TestPacket::new(t, 60));
                    })
                })
                .collect();
            for p in producers {
                p.join().unwrap();
            }
            assert_eq!(q.backlog(), 0, "{strategy}: a packet stayed in the qdisc");
            let sent = q.with_driver(|w| w.sent.clone());
            let stats = q.stats();
            assert_eq!(
                sent.len() as u64 + stats.dropped(),
                2,
                "{strategy}: sent {sent:?}, {stats:?}"
            );
        });
    }
}

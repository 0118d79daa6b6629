//! Stress: 16 producers on (typically) 2 cores, every strategy, a driver that takes a random
//! part of each batch and sometimes reports busy. Asserts the conservation law (offered =
//! transmitted + dropped by reason, nothing left queued) and per-producer FIFO order on pfifo.
#![cfg(not(lockless_loom))]

use std::sync::{Arc, Barrier};
use std::thread;

use llist_defer::Fifo;
use qdisc::{
    Driver, FifoBuilder, Overflow, Strategy, TestPacket, ToFree, TxQueue, TxQueueBuilder, TxResult,
    Verdict,
};

const PRODUCERS: u64 = 16;
const PER_PRODUCER: u64 = if cfg!(debug_assertions) {
    10_000
} else {
    100_000
};

/// Accepts a pseudo-random prefix of each batch; reports busy now and then.
struct FlakyDriver {
    rng: u64,
    sent: Vec<u64>,
}

impl FlakyDriver {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic per run, no dependency.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

impl Driver<TestPacket> for FlakyDriver {
    fn xmit(&mut self, batch: &mut Fifo<TestPacket>, _: &mut ToFree<TestPacket>) -> TxResult {
        let take = (self.next() % (batch.len() as u64 + 2)) as usize; // sometimes all, sometimes 0
        let mut sent = 0;
        while sent < take {
            let Some(p) = batch.pop_front() else { break };
            self.sent.push(p.id());
            sent += 1;
        }
        let busy = !batch.is_empty() && self.next() % 4 == 0;
        TxResult {
            sent,
            stopped: busy,
        }
    }
}

fn stress(name: &str, builder: TxQueueBuilder, pfifo_limit: u64) -> qdisc::XmitStats {
    stress_bursts(name, builder, pfifo_limit, 1)
}

/// [`stress`] with producers that send bursts through `xmit_bulk`, of sizes cycling through
/// `1..=max_burst` (1: `xmit` per packet), so that short bursts push onto the defer list and
/// long ones are sent by their own producer (`self_send_burst`).
fn stress_bursts(
    name: &str,
    builder: TxQueueBuilder,
    pfifo_limit: u64,
    max_burst: u64,
) -> qdisc::XmitStats {
    let q = Arc::new(
        builder
            .build(
                FifoBuilder::pfifo()
                    .limit(pfifo_limit)
                    .build::<TestPacket>()
                    .unwrap(),
                FlakyDriver {
                    rng: 0x9e37_79b9_7f4a_7c15,
                    sent: Vec::new(),
                },
            )
            .unwrap(),
    );
    let start = Arc::new(Barrier::new(PRODUCERS as usize));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|t| {
            let (q, start) = (q.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let mut refused = 0u64;
                let mut i = 0;
                let mut size = 0;
                while i < PER_PRODUCER {
                    if max_burst == 1 {
                        if let Verdict::Dropped(_) = q.xmit(TestPacket::new(t << 32 | i, 100)) {
                            refused += 1;
                        }
                        i += 1;
                        continue;
                    }
                    size = size % max_burst + 1;
                    let end = (i + size).min(PER_PRODUCER);
                    let v = q.xmit_bulk((i..end).map(|i| TestPacket::new(t << 32 | i, 100)));
                    assert_eq!(v.handed_on + v.dropped, (end - i) as usize);
                    refused += v.dropped as u64;
                    i = end;
                }
                refused
            })
        })
        .collect();
    let refused: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
    // The driver may have said busy on the last batch: run the queue dry, as a poll loop would.
    while q.poll() {}

    let stats = q.stats();
    let sent: Vec<u64> = q.with_driver(|d| std::mem::take(&mut d.sent));
    let offered = PRODUCERS * PER_PRODUCER;
    assert_eq!(q.backlog(), 0, "{name}: packets left queued");
    assert!(
        q.defer_list_is_empty(),
        "{name}: packets left on the defer list"
    );
    assert_eq!(
        sent.len() as u64,
        stats.sent,
        "{name}: driver and counters disagree"
    );
    assert_eq!(
        stats.sent + stats.dropped(),
        offered,
        "{name}: conservation broken: {stats}"
    );
    assert!(
        refused <= stats.dropped(),
        "{name}: a refused packet was not counted"
    );
    let mut last = vec![None::<u64>; PRODUCERS as usize];
    for id in &sent {
        let (t, i) = ((id >> 32) as usize, id & 0xffff_ffff);
        assert!(
            last[t].is_none_or(|l| l < i),
            "{name}: producer {t} reordered at {i}"
        );
        last[t] = Some(i);
    }
    eprintln!(
        "{name}: sent {} dropped {} requeues {}",
        stats.sent,
        stats.dropped(),
        stats.requeues
    );
    stats
}

#[test]
fn busylock_16_producers() {
    stress(
        "busylock",
        TxQueue::builder().strategy(Strategy::BusyLock),
        1000,
    );
}

#[test]
fn nolock_16_producers() {
    stress(
        "nolock",
        TxQueue::builder().strategy(Strategy::NoLock),
        1000,
    );
}

#[test]
fn defer_list_16_producers() {
    stress(
        "defer",
        TxQueue::builder().strategy(Strategy::DeferList),
        1000,
    );
}

#[test]
fn defer_list_kernel_exact_16_producers() {
    stress(
        "defer-kernel",
        TxQueue::builder().kernel_exact().burst_limit(64),
        1000,
    );
}

#[test]
fn defer_list_wait_policy_never_drops() {
    // A qdisc large enough for everything: with Overflow::Wait nothing may be dropped at all.
    let builder = TxQueue::builder().burst_limit(8).overflow(Overflow::Wait);
    let q_limit = PRODUCERS * PER_PRODUCER;
    let stats = stress("defer-wait", builder, q_limit);
    assert_eq!(stats.dropped(), 0, "Overflow::Wait dropped: {stats}");
}

#[test]
fn defer_list_bursts_16_producers() {
    // Bursts of 1..=40: those of 16 or more are sent by their producer under the root lock,
    // the rest pushed; the batched runner hands drained chains to the qdisc whole.
    stress_bursts("defer-bursts", TxQueue::builder(), 1000, 40);
}

#[test]
fn defer_list_bursts_per_packet_runner() {
    stress_bursts(
        "defer-bursts-per-packet",
        TxQueue::builder().qdisc_batch(false),
        1000,
        40,
    );
}

#[test]
fn defer_list_bursts_small_qdisc_drops_in_batches() {
    // A pfifo of 64: drained chains overflow it part-way, so enqueue_batch tail-drops, and
    // every drop must be counted.
    stress_bursts(
        "defer-bursts-small",
        TxQueue::builder().self_send_burst(8),
        64,
        40,
    );
}

#[test]
fn busylock_and_nolock_with_the_batched_runner_bursts() {
    for strategy in [Strategy::BusyLock, Strategy::NoLock] {
        stress_bursts(
            strategy.name(),
            TxQueue::builder().strategy(strategy),
            1000,
            40,
        );
    }
}

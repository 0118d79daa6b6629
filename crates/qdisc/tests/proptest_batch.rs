//! `Qdisc::enqueue_batch` and `Qdisc::dequeue_batch` against the same packets one by one:
//! random batches (1–300 packets, random lengths and priorities) into pfifo, bfifo,
//! pfifo_head_drop and pfifo_fast with limits small enough to drop, interleaved with random
//! dequeues. The batched qdisc and its per-packet twin must give identical verdict counts,
//! to-free lists (packets and reasons, in order), stats and dequeue order.

use llist_defer::Fifo;
use proptest::prelude::*;
use qdisc::{BatchVerdict, DropReason, FifoBuilder, PfifoFastBuilder, Qdisc, TestPacket, ToFree};

#[derive(Debug, Clone)]
enum Op {
    /// (length, priority) of each packet.
    Batch(Vec<(usize, u32)>),
    Deq(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let pkt = (1usize..3000, 0u32..16);
    let op = prop_oneof![
        3 => prop::collection::vec(pkt, 1..=300).prop_map(Op::Batch),
        2 => (0usize..400).prop_map(Op::Deq),
    ];
    prop::collection::vec(op, 1..40)
}

type Boxed = Box<dyn Qdisc<TestPacket>>;

/// Every reason's count and every dropped id, in order.
fn drained(tf: &mut ToFree<TestPacket>) -> (Vec<u64>, Vec<u64>) {
    let counts = DropReason::ALL.iter().map(|r| tf.count(*r)).collect();
    let (pkts, _) = tf.take();
    (counts, pkts.into_iter().map(|p| p.id()).collect())
}

/// Runs `ops` through `batched` (enqueue_batch / dequeue_batch, through a `Box<dyn Qdisc>` so
/// the forwarding is covered too) and `single` (enqueue / dequeue), comparing all the way.
fn check(mut batched: Boxed, mut single: Boxed, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut next_id = 0u64;
    for op in ops {
        match op {
            Op::Batch(pkts) => {
                let mut batch = Fifo::new();
                let mut want = BatchVerdict::default();
                let (mut tf_a, mut tf_b) = (ToFree::new(), ToFree::new());
                for &(len, prio) in &pkts {
                    let id = next_id;
                    next_id += 1;
                    batch.push_back(TestPacket::new(id, len).with_priority(prio));
                    want.record(
                        single.enqueue(TestPacket::new(id, len).with_priority(prio), &mut tf_b),
                    );
                }
                let got = batched.enqueue_batch(&mut batch, &mut tf_a);
                prop_assert!(batch.is_empty(), "enqueue_batch left packets in the batch");
                prop_assert_eq!(got, want);
                prop_assert_eq!(got.total(), pkts.len());
                prop_assert_eq!(drained(&mut tf_a), drained(&mut tf_b));
            }
            Op::Deq(k) => {
                let mut out = Fifo::new();
                let n = batched.dequeue_batch(&mut out, k);
                prop_assert_eq!(n, out.len());
                let got: Vec<u64> = out.into_iter().map(|p| p.id()).collect();
                let want: Vec<u64> = (0..k)
                    .map_while(|_| single.dequeue())
                    .map(|p| p.id())
                    .collect();
                prop_assert_eq!(got, want);
            }
        }
        prop_assert_eq!(batched.stats(), single.stats());
        prop_assert_eq!(batched.len(), single.len());
        prop_assert_eq!(batched.backlog(), single.backlog());
    }
    // Drain both: the rest comes out in the same order.
    let mut out = Fifo::new();
    batched.dequeue_batch(&mut out, usize::MAX);
    let rest: Vec<u64> = out.into_iter().map(|p| p.id()).collect();
    let want: Vec<u64> = core::iter::from_fn(|| single.dequeue())
        .map(|p| p.id())
        .collect();
    prop_assert_eq!(rest, want);
    prop_assert_eq!(batched.stats(), single.stats());
    Ok(())
}

fn fifo(b: fn() -> FifoBuilder, limit: u64) -> Boxed {
    Box::new(b().limit(limit).build::<TestPacket>().unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn pfifo_batch_is_per_packet(limit in 0u64..600, ops in ops()) {
        check(fifo(FifoBuilder::pfifo, limit), fifo(FifoBuilder::pfifo, limit), ops)?;
    }

    #[test]
    fn bfifo_batch_is_per_packet(limit in 0u64..600_000, ops in ops()) {
        check(fifo(FifoBuilder::bfifo, limit), fifo(FifoBuilder::bfifo, limit), ops)?;
    }

    #[test]
    fn head_drop_batch_is_per_packet(limit in 0u64..600, ops in ops()) {
        check(fifo(FifoBuilder::head_drop, limit), fifo(FifoBuilder::head_drop, limit), ops)?;
    }

    #[test]
    fn pfifo_fast_batch_is_per_packet(txqlen in 1u32..300, ops in ops()) {
        let q = || -> Boxed { Box::new(PfifoFastBuilder::new().tx_queue_len(txqlen).build::<TestPacket>().unwrap()) };
        check(q(), q(), ops)?;
    }
}

/// The generators above reach the cases that matter: a batch that overflows each kind's
/// limit part-way (so the batched paths' split between queued and dropped is exercised).
#[test]
fn a_batch_that_overflows_part_way_matches_per_packet() {
    let pkts: Vec<(usize, u32)> = (0..300)
        .map(|i| (100 + i % 1400, (i % 16) as u32))
        .collect();
    let ops = vec![Op::Batch(pkts.clone()), Op::Deq(50), Op::Batch(pkts)];
    for (a, b) in [
        (fifo(FifoBuilder::pfifo, 200), fifo(FifoBuilder::pfifo, 200)),
        (
            fifo(FifoBuilder::bfifo, 100_000),
            fifo(FifoBuilder::bfifo, 100_000),
        ),
        (
            fifo(FifoBuilder::head_drop, 200),
            fifo(FifoBuilder::head_drop, 200),
        ),
    ] {
        check(a, b, ops.clone()).unwrap();
    }
    let q = || -> Boxed {
        Box::new(
            PfifoFastBuilder::new()
                .tx_queue_len(60)
                .build::<TestPacket>()
                .unwrap(),
        )
    };
    check(q(), q(), ops).unwrap();
}

/// pfifo: 10 queued, limit 12, a batch of 5: two queued, three dropped on arrival
/// (`pfifo_enqueue`: `if (likely(sch->q.qlen < READ_ONCE(sch->limit)))` else `qdisc_drop`).
/// pfifo_head_drop, same: two queued, three congested, the three oldest queued dropped
/// (`pfifo_tail_enqueue`: `__qdisc_queue_drop_head` then `qdisc_enqueue_tail`, `NET_XMIT_CN`).
#[test]
fn batch_verdicts_follow_sch_fifo() {
    for (b, want) in [
        (
            FifoBuilder::pfifo as fn() -> FifoBuilder,
            (2, 0, 3, vec![12, 13, 14]),
        ),
        (FifoBuilder::head_drop, (2, 3, 0, vec![0, 1, 2])),
    ] {
        let mut q = b().limit(12).build::<TestPacket>().unwrap();
        let mut tf = ToFree::new();
        for id in 0..10 {
            q.enqueue(TestPacket::new(id, 100), &mut tf);
        }
        let mut batch: Fifo<TestPacket> = (10..15).map(|id| TestPacket::new(id, 100)).collect();
        let v = q.enqueue_batch(&mut batch, &mut tf);
        assert_eq!((v.queued, v.congested, v.dropped), (want.0, want.1, want.2));
        let ids: Vec<u64> = tf.iter().map(|p| p.id()).collect();
        assert_eq!(ids, want.3);
        assert_eq!(tf.count(DropReason::QdiscOverlimit), 3);
        assert_eq!(q.len(), 12);
    }
}

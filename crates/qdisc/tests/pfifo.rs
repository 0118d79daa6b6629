//! pfifo, bfifo and pfifo_head_drop behaviour (`sch_fifo.c`).

mod common;

use common::enq;
use qdisc::{DropReason, FifoBuilder, FifoKind, Pfifo, Qdisc, TestPacket, ToFree, Verdict};

fn ids(q: &mut Pfifo<TestPacket>) -> Vec<u64> {
    std::iter::from_fn(|| q.dequeue().map(|p| p.id())).collect()
}

#[test]
fn pfifo_defaults_to_tx_queue_len() {
    let q: Pfifo<TestPacket> = Pfifo::new();
    assert_eq!(
        (q.kind(), q.limit(), q.fifo_kind()),
        ("pfifo", 1000, FifoKind::Pfifo)
    );
    let q: Pfifo<TestPacket> = FifoBuilder::pfifo().tx_queue_len(7).build().unwrap();
    assert_eq!(q.limit(), 7);
}

/// A limit above the ring's first room (1024 slots): the queue grows twice on the way to 3000
/// packets with the head moved into the middle of the ring, keeps its order and its counters,
/// and still tail-drops exactly at the limit.
#[test]
fn pfifo_grows_past_its_first_room_and_drops_at_the_limit() {
    const LIMIT: u64 = 3000;
    let mut q: Pfifo<TestPacket> = FifoBuilder::pfifo().limit(LIMIT).build().unwrap();
    let mut tf = ToFree::new();
    // Move the head off slot 0 first, so the growth must unwrap a wrapped ring.
    for i in 0..700 {
        assert_eq!(q.enqueue(TestPacket::new(i, 60), &mut tf), Verdict::Success);
    }
    let front: Vec<u64> = (0..500).map(|_| q.dequeue().unwrap().id()).collect();
    assert_eq!(front, (0..500).collect::<Vec<_>>());
    let mut next = 700;
    while (q.len() as u64) < LIMIT {
        assert_eq!(
            q.enqueue(TestPacket::new(next, 60), &mut tf),
            Verdict::Success
        );
        next += 1;
    }
    assert_eq!(
        q.enqueue(TestPacket::new(next, 60), &mut tf),
        Verdict::Dropped(DropReason::QdiscOverlimit),
        "full at the limit"
    );
    assert_eq!(q.backlog(), LIMIT * 60);
    assert_eq!(ids(&mut q), (500..next).collect::<Vec<_>>());
    assert_eq!(
        (q.stats().drops, tf.count(DropReason::QdiscOverlimit)),
        (1, 1)
    );
}

#[test]
fn pfifo_tail_drops_the_arrival() {
    let mut q: Pfifo<TestPacket> = FifoBuilder::pfifo().limit(3).build().unwrap();
    let mut tf = ToFree::new();
    for i in 0..3 {
        assert_eq!(
            q.enqueue(TestPacket::new(i, 100), &mut tf),
            Verdict::Success
        );
    }
    assert_eq!(
        q.enqueue(TestPacket::new(3, 100), &mut tf),
        Verdict::Dropped(DropReason::QdiscOverlimit)
    );
    assert_eq!(tf.count(DropReason::QdiscOverlimit), 1);
    let (dropped, _) = tf.take();
    assert_eq!(dropped.iter().map(|p| p.id()).collect::<Vec<_>>(), [3]);
    assert_eq!(q.stats().drops, 1);
    assert_eq!(ids(&mut q), [0, 1, 2]);
}

#[test]
fn bfifo_limits_bytes() {
    let mut q: Pfifo<TestPacket> = FifoBuilder::bfifo().limit(1000).build().unwrap();
    assert_eq!(enq(&mut q, TestPacket::new(0, 600)), Verdict::Success);
    assert_eq!(
        enq(&mut q, TestPacket::new(1, 401)),
        Verdict::Dropped(DropReason::QdiscOverlimit)
    );
    assert_eq!(enq(&mut q, TestPacket::new(2, 400)), Verdict::Success); // exactly the limit
    assert_eq!(q.backlog(), 1000);
    assert_eq!(ids(&mut q), [0, 2]);
    assert_eq!(q.backlog(), 0);
}

#[test]
fn bfifo_default_is_txqlen_times_mtu() {
    let q: Pfifo<TestPacket> = Pfifo::bfifo();
    assert_eq!(q.limit(), 1000 * 1514);
    let q: Pfifo<TestPacket> = FifoBuilder::bfifo()
        .tx_queue_len(2)
        .psched_mtu(9014)
        .build()
        .unwrap();
    assert_eq!(q.limit(), 2 * 9014);
}

#[test]
fn head_drop_drops_the_oldest() {
    let mut q: Pfifo<TestPacket> = FifoBuilder::head_drop().limit(2).build().unwrap();
    let mut tf = ToFree::new();
    q.enqueue(TestPacket::new(0, 10), &mut tf);
    q.enqueue(TestPacket::new(1, 20), &mut tf);
    assert_eq!(
        q.enqueue(TestPacket::new(2, 30), &mut tf),
        Verdict::Congested(DropReason::QdiscOverlimit)
    );
    let (dropped, _) = tf.take();
    assert_eq!(dropped.iter().map(|p| p.id()).collect::<Vec<_>>(), [0]);
    assert_eq!(q.backlog(), 50);
    assert_eq!(q.stats().drops, 1);
    assert_eq!(ids(&mut q), [1, 2]);
}

#[test]
fn head_drop_limit_zero_drops_everything() {
    let mut q: Pfifo<TestPacket> = FifoBuilder::head_drop().limit(0).build().unwrap();
    assert_eq!(
        enq(&mut q, TestPacket::new(0, 10)),
        Verdict::Dropped(DropReason::QdiscOverlimit)
    );
    assert!(q.is_empty());
    assert!(!q.can_bypass());
}

#[test]
fn bypass_rules_follow_fifo_init() {
    let b = |f: FifoBuilder| f.build::<TestPacket>().unwrap().can_bypass();
    assert!(b(FifoBuilder::pfifo().limit(1)));
    assert!(!b(FifoBuilder::pfifo().limit(0)));
    assert!(b(FifoBuilder::head_drop().limit(1)));
    assert!(b(FifoBuilder::bfifo().limit(1514)));
    assert!(!b(FifoBuilder::bfifo().limit(1513)));
    assert!(!b(FifoBuilder::bfifo().limit(8999).psched_mtu(9000)));
}

#[test]
fn config_errors_name_the_option() {
    let e = FifoBuilder::pfifo()
        .limit(1 << 33)
        .build::<TestPacket>()
        .unwrap_err();
    assert_eq!((e.qdisc(), e.option()), ("pfifo", "limit"));
    assert!(e.to_string().contains("0..=4294967295"), "{e}");
    let e = FifoBuilder::bfifo()
        .psched_mtu(0)
        .build::<TestPacket>()
        .unwrap_err();
    assert_eq!(e.option(), "psched_mtu");
}

#[test]
fn peek_reset_and_stats() {
    let mut q: Pfifo<TestPacket> = Pfifo::new();
    enq(&mut q, TestPacket::new(5, 100));
    enq(&mut q, TestPacket::new(6, 200));
    assert_eq!(q.peek().map(|p| p.id()), Some(5));
    assert_eq!(q.dequeue().map(|p| p.id()), Some(5));
    let mut tf = ToFree::new();
    q.reset(&mut tf, DropReason::Deactivated);
    assert_eq!(tf.count(DropReason::Deactivated), 1);
    let s = q.stats();
    // `qdisc_reset_queue` frees the packets without counting drops.
    assert_eq!(
        (s.packets, s.bytes, s.drops, s.qlen, s.backlog),
        (1, 100, 0, 0, 0)
    );
}

/// A batch far larger than what a bfifo can take grows the ring only for what it queues: the
/// ring never shrinks, and reserving the batch's length kept a 2^20-slot ring for a queue of
/// one packet.
#[test]
fn a_huge_batch_at_a_small_bfifo_grows_the_ring_only_for_what_it_queues() {
    let mut q: Pfifo<TestPacket> = FifoBuilder::bfifo().limit(3000).build().unwrap();
    let before = q.ring_capacity();
    let mut batch: llist_defer::Fifo<TestPacket> =
        (0..100_000).map(|i| TestPacket::new(i, 1500)).collect();
    let mut tf = ToFree::new();
    let v = q.enqueue_batch(&mut batch, &mut tf);
    assert_eq!((q.len(), tf.len()), (2, 99_998));
    assert_eq!(v.dropped, 99_998);
    assert!(
        q.ring_capacity() <= before.max(2),
        "ring of {} slots for 2 packets (had {before})",
        q.ring_capacity()
    );
}

/// Without a limit a bfifo takes `tx_queue_len × psched_mtu` bytes, computed in 32 bits as
/// `__fifo_init` does (`u32 limit = tx_queue_len; limit *= psched_mtu(dev);`): 3 000 000 ×
/// 1514 wraps to 247 032 704.
#[test]
fn the_default_bfifo_limit_wraps_in_32_bits_as_fifo_init() {
    let q: Pfifo<TestPacket> = FifoBuilder::bfifo()
        .tx_queue_len(3_000_000)
        .psched_mtu(1514)
        .build()
        .unwrap();
    assert_eq!(q.limit(), 247_032_704);
    assert_eq!(q.limit(), u64::from(3_000_000u32.wrapping_mul(1514)));
}

#[test]
fn display_is_tc_shaped() {
    let mut q: Pfifo<TestPacket> = FifoBuilder::pfifo().limit(1).build().unwrap();
    enq(&mut q, TestPacket::new(0, 1500));
    enq(&mut q, TestPacket::new(1, 1500));
    let s = q.to_string();
    assert_eq!(
        s,
        "qdisc pfifo 0: root refcnt 2 limit 1p\n Sent 0 bytes 0 pkt (dropped 1, overlimits 0 requeues 0) \n backlog 1500b 1p requeues 0"
    );
    let b: Pfifo<TestPacket> = FifoBuilder::bfifo().limit(64 * 1024).build().unwrap();
    assert!(
        b.to_string()
            .starts_with("qdisc bfifo 0: root refcnt 2 limit 64Kb\n")
    );
}

//! pfifo_fast behaviour (`sch_generic.c`).

mod common;

use common::enq;
use qdisc::{
    DropReason, PRIO2BAND, PfifoFast, PfifoFastBuilder, Qdisc, TestPacket, ToFree, Verdict,
};

#[test]
fn prio2band_matches_the_kernel_table() {
    let table = [1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    assert_eq!(PRIO2BAND, table);
    for prio in 0..64u32 {
        let mut q: PfifoFast<TestPacket> = PfifoFast::new();
        enq(&mut q, TestPacket::new(0, 1).with_priority(prio));
        let band = (0..3).find(|&b| q.band_len(b) == 1).unwrap();
        assert_eq!(
            band,
            usize::from(table[(prio & 15) as usize]),
            "priority {prio}"
        );
    }
}

#[test]
fn strict_priority_between_bands_fifo_within() {
    let mut q: PfifoFast<TestPacket> = PfifoFast::new();
    // priorities: 1 -> band 2, 0 -> band 1, 6 -> band 0
    let order = [(0, 1), (1, 0), (2, 6), (3, 1), (4, 0), (5, 7)];
    for (id, prio) in order {
        enq(&mut q, TestPacket::new(id, 10).with_priority(prio));
    }
    let out: Vec<u64> = std::iter::from_fn(|| q.dequeue().map(|p| p.id())).collect();
    assert_eq!(out, [2, 5, 1, 4, 0, 3]);
}

#[test]
fn full_band_drops_the_arrival_other_bands_still_accept() {
    let mut q: PfifoFast<TestPacket> = PfifoFastBuilder::new().tx_queue_len(2).build().unwrap();
    let mut tf = ToFree::new();
    for i in 0..2 {
        assert_eq!(q.enqueue(TestPacket::new(i, 10), &mut tf), Verdict::Success);
    }
    assert_eq!(
        q.enqueue(TestPacket::new(2, 10), &mut tf),
        Verdict::Dropped(DropReason::QdiscOverlimit)
    );
    assert_eq!(
        q.enqueue(TestPacket::new(3, 10).with_priority(6), &mut tf),
        Verdict::Success
    );
    assert_eq!(
        q.enqueue(TestPacket::new(4, 10).with_priority(1), &mut tf),
        Verdict::Success
    );
    assert_eq!((q.len(), q.stats().drops), (4, 1));
    assert_eq!(tf.take().0.iter().map(|p| p.id()).collect::<Vec<_>>(), [2]);
}

#[test]
fn zero_tx_queue_len_is_refused() {
    let e = PfifoFast::<TestPacket>::builder()
        .tx_queue_len(0)
        .build::<TestPacket>()
        .unwrap_err();
    assert_eq!((e.qdisc(), e.option()), ("pfifo_fast", "tx_queue_len"));
    assert!(
        e.to_string()
            .starts_with("pfifo_fast: invalid tx_queue_len 0: accepted 1..="),
        "{e}"
    );
}

#[test]
fn peek_reset_bypass_display() {
    let mut q: PfifoFast<TestPacket> = PfifoFast::new();
    assert!(q.can_bypass());
    enq(&mut q, TestPacket::new(1, 100).with_priority(2));
    enq(&mut q, TestPacket::new(2, 100).with_priority(6));
    assert_eq!(q.peek().map(|p| p.id()), Some(2));
    assert_eq!(q.dequeue().map(|p| p.id()), Some(2));
    assert_eq!(
        q.to_string(),
        "qdisc pfifo_fast 0: root refcnt 2 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n Sent 100 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 100b 1p requeues 0"
    );
    let mut tf = ToFree::new();
    q.reset(&mut tf, DropReason::Deactivated);
    // `pfifo_fast_reset` frees the packets without counting drops.
    assert_eq!(
        (q.len(), q.backlog(), tf.len(), q.stats().drops),
        (0, 0, 1, 0)
    );
}

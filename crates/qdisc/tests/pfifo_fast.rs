//! pfifo_fast behaviour (`sch_generic.c`).

mod common;

use common::enq;
use qdisc::{
    DropReason, PFIFO_FAST_MAX_TX_QUEUE_LEN, PRIO2BAND, PfifoFast, PfifoFastBuilder, Qdisc,
    TestPacket, ToFree, Verdict,
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

fn ring(txqlen: u32) -> PfifoFast<TestPacket> {
    PfifoFastBuilder::new()
        .tx_queue_len(txqlen)
        .build()
        .unwrap()
}

/// Enqueues priority-0 packets (band 1) until one is refused; returns how many were taken.
fn fill_band_1(q: &mut PfifoFast<TestPacket>, first_id: u64) -> usize {
    let mut tf = ToFree::new();
    let mut n = 0;
    while q.enqueue(TestPacket::new(first_id + n, 10), &mut tf) == Verdict::Success {
        n += 1;
    }
    assert_eq!(tf.count(DropReason::QdiscOverlimit), 1);
    n as usize
}

fn dequeue_n(q: &mut PfifoFast<TestPacket>, n: usize) {
    for _ in 0..n {
        q.dequeue().expect("a queued packet");
    }
}

#[test]
fn a_band_refuses_until_its_ring_clears_a_batch_of_read_slots() {
    // A 64-slot ring clears read slots 16 at a time (`__ptr_ring_set_size`: batch =
    // SMP_CACHE_BYTES * 2 / sizeof(void *)): `__ptr_ring_discard_one` zeroes them only once
    // `consumer_head - consumer_tail >= r->batch`, and `__ptr_ring_produce` refuses while
    // `r->queue[r->producer]` is still set.
    let mut q = ring(64);
    assert_eq!(fill_band_1(&mut q, 0), 64);
    dequeue_n(&mut q, 15);
    assert_eq!((q.band_len(1), q.band_room(1)), (49, 0));
    assert_eq!(
        fill_band_1(&mut q, 100),
        0,
        "15 read slots are not cleared yet"
    );
    dequeue_n(&mut q, 1);
    assert_eq!((q.band_len(1), q.band_room(1)), (48, 16));
    assert_eq!(fill_band_1(&mut q, 200), 16);
    // The other bands' rings are untouched.
    assert_eq!((q.band_room(0), q.band_room(2)), (64, 64));
    assert_eq!(q.stats().drops, 3);
}

#[test]
fn a_ring_clears_its_read_slots_at_its_end_and_small_rings_at_once() {
    // `consumer_head >= r->size` also clears, and the consumer starts over at slot 0.
    let mut q = ring(40);
    assert_eq!(fill_band_1(&mut q, 0), 40);
    dequeue_n(&mut q, 34); // cleared at 16 and 32; slots 32 and 33 still set
    assert_eq!((q.band_len(1), q.band_room(1)), (6, 32));
    dequeue_n(&mut q, 6); // head reaches 40: everything cleared
    assert_eq!((q.band_len(1), q.band_room(1)), (0, 40));

    // Fewer than 32 slots: `r->batch > r->size / 2` sets batch 1, every read slot is cleared
    // at once and the room is exactly the free length.
    let mut q = ring(31);
    assert_eq!(fill_band_1(&mut q, 0), 31);
    dequeue_n(&mut q, 1);
    assert_eq!(q.band_room(1), 1);
    assert_eq!(fill_band_1(&mut q, 100), 1);
}

#[test]
fn reset_consumes_through_the_ring_as_dequeues_do() {
    // pfifo_fast_reset frees with `__skb_array_consume`, the dequeue's discard path: 20 packets
    // read leave 4 slots uncleared (cleared at 16).
    let mut q = ring(64);
    let mut tf = ToFree::new();
    for i in 0..20 {
        assert_eq!(q.enqueue(TestPacket::new(i, 10), &mut tf), Verdict::Success);
    }
    q.reset(&mut tf, DropReason::Deactivated);
    assert_eq!((q.len(), q.band_room(1)), (0, 60));
    assert_eq!(fill_band_1(&mut q, 100), 60);
}

#[test]
fn batched_calls_keep_the_rings_slots() {
    // enqueue_batch and dequeue_batch move each band's ring exactly as one-by-one calls do.
    let mut q = ring(64);
    let mut tf = ToFree::new();
    let mut batch = llist_defer::Fifo::new();
    for i in 0..70 {
        batch.push_back(TestPacket::new(i, 10));
    }
    let v = q.enqueue_batch(&mut batch, &mut tf);
    assert_eq!((v.queued, v.dropped), (64, 6));
    let mut out = llist_defer::Fifo::new();
    assert_eq!(q.dequeue_batch(&mut out, 15), 15);
    assert_eq!(q.band_room(1), 0);
    for i in 100..110 {
        batch.push_back(TestPacket::new(i, 10));
    }
    let v = q.enqueue_batch(&mut batch, &mut tf);
    assert_eq!((v.queued, v.dropped), (0, 10));
    assert_eq!(q.dequeue_batch(&mut out, 1), 1);
    assert_eq!(q.band_room(1), 16);
}

#[test]
fn tx_queue_len_past_what_the_kernel_can_allocate_is_refused() {
    // `__ptr_ring_init_queue_alloc` returns NULL past KMALLOC_MAX_SIZE / sizeof(void *) slots
    // (4 MiB / 8 on x86_64), and pfifo_fast_init fails with ENOMEM.
    assert_eq!(PFIFO_FAST_MAX_TX_QUEUE_LEN, 4 << 20 >> 3);
    assert!(
        PfifoFastBuilder::new()
            .tx_queue_len(PFIFO_FAST_MAX_TX_QUEUE_LEN)
            .build::<TestPacket>()
            .is_ok()
    );
    let e = PfifoFastBuilder::new()
        .tx_queue_len(PFIFO_FAST_MAX_TX_QUEUE_LEN + 1)
        .build::<TestPacket>()
        .unwrap_err();
    assert_eq!((e.qdisc(), e.option()), ("pfifo_fast", "tx_queue_len"));
    assert!(e.to_string().contains("ENOMEM"), "{e}");
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

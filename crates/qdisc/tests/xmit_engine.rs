//! The transmit engine's rules, one strategy at a time, single-threaded where the rule is about
//! order and accounting.
#![cfg(not(lockless_loom))]

use qdisc::{
    DropReason, FifoBuilder, LATENCY_SAMPLE_EVERY, Overflow, Pfifo, RecordingDriver, Strategy,
    TestPacket, TxQueue, Verdict,
};

const STRATEGIES: [Strategy; 3] = [Strategy::BusyLock, Strategy::DeferList, Strategy::NoLock];

type Txq = TxQueue<TestPacket, Pfifo<TestPacket>, RecordingDriver<TestPacket>>;

fn txq(strategy: Strategy) -> Txq {
    TxQueue::builder()
        .strategy(strategy)
        .build(Pfifo::new(), RecordingDriver::new())
        .unwrap()
}

fn sent_ids(q: &Txq) -> Vec<u64> {
    q.with_driver(|d| d.sent.iter().map(TestPacket::id).collect())
}

#[test]
fn idle_queue_bypasses_the_qdisc_and_keeps_order() {
    for s in STRATEGIES {
        let q = txq(s);
        for id in 0..100 {
            assert_eq!(q.xmit(TestPacket::new(id, 100)), Verdict::Success);
        }
        assert_eq!(sent_ids(&q), (0..100).collect::<Vec<_>>(), "{s}");
        let st = q.stats();
        assert_eq!((st.sent, st.sent_bytes), (100, 10_000), "{s}");
        assert_eq!(
            st.bypass, 100,
            "{s}: an idle work-conserving qdisc is bypassed"
        );
        // `__dev_xmit_skb`'s bypass branch calls `qdisc_bstats_update(q, skb)`: the qdisc's
        // basic stats count the bypassed packet's bytes as well as the packet.
        let qs = q.qdisc_stats();
        assert_eq!(
            (qs.packets, qs.bytes),
            (st.sent, st.sent_bytes),
            "{s}: bypassed packets and bytes count as sent by the qdisc"
        );
        assert_eq!(st.bypass_bytes, st.sent_bytes, "{s}");
    }
}

#[test]
fn partial_driver_requeues_at_the_head_in_order() {
    for s in STRATEGIES {
        let q = txq(s);
        q.with_driver(|d| d.stopped = true);
        for id in 0..50 {
            q.xmit(TestPacket::new(id, 60));
        }
        q.with_driver(|d| {
            d.stopped = false;
            d.accept_per_call = Some(3);
        });
        while q.poll() {}
        assert_eq!(
            sent_ids(&q),
            (0..50).collect::<Vec<_>>(),
            "{s}: requeue broke the order"
        );
        assert!(
            q.stats().requeues > 0,
            "{s}: a partial driver must cause requeues"
        );
        assert_eq!(q.backlog(), 0);
    }
}

#[test]
fn stopped_driver_holds_packets_until_woken() {
    for s in STRATEGIES {
        let q = txq(s);
        q.with_driver(|d| d.stopped = true);
        for id in 0..10 {
            assert_eq!(q.xmit(TestPacket::new(id, 60)), Verdict::Success);
        }
        assert!(sent_ids(&q).is_empty(), "{s}: a stopped driver was called");
        assert_eq!(q.backlog(), 10, "{s}: the packets wait in the qdisc");
        q.with_driver(|d| d.stopped = false);
        q.wake();
        assert_eq!(sent_ids(&q), (0..10).collect::<Vec<_>>(), "{s}");
        assert!(q.stats().driver_stops > 0);
    }
}

#[test]
fn driver_refusals_are_counted_drops() {
    for s in STRATEGIES {
        let q = txq(s);
        q.with_driver(|d| d.mtu = Some(1500));
        q.xmit(TestPacket::new(1, 1500));
        q.xmit(TestPacket::new(2, 9000));
        q.xmit(TestPacket::new(3, 64));
        assert_eq!(sent_ids(&q), [1, 3], "{s}");
        assert_eq!(q.stats().drops_for(DropReason::DriverError), 1, "{s}");
    }
}

#[test]
fn qdisc_tail_drop_is_counted() {
    for s in STRATEGIES {
        let q: Txq = TxQueue::builder()
            .strategy(s)
            .build(
                FifoBuilder::pfifo().limit(5).build().unwrap(),
                RecordingDriver::new(),
            )
            .unwrap();
        q.with_driver(|d| d.stopped = true);
        let verdicts: Vec<Verdict> = (0..8).map(|id| q.xmit(TestPacket::new(id, 60))).collect();
        let dropped = verdicts
            .iter()
            .filter(|v| matches!(v, Verdict::Dropped(_)))
            .count();
        // As in the kernel, a packet that takes the bypass onto a stopped queue is requeued:
        // it counts in qlen but not against the qdisc's limit (NoLock sees DRAINING and does
        // not bypass at all). So 5 sit in the qdisc, plus any requeued, and the rest drop.
        let requeued = q.stats().requeues as usize;
        assert!(requeued <= 1, "{s}");
        assert_eq!(q.backlog(), 5 + requeued, "{s}");
        let tail_drops = q.stats().drops_for(DropReason::QdiscOverlimit) as usize;
        assert_eq!(tail_drops, 3 - requeued, "{s}");
        assert_eq!(
            dropped, tail_drops,
            "{s}: a single packet's verdict is the qdisc's"
        );
    }
}

#[test]
fn deactivate_drops_everything_queued_and_arriving() {
    for s in STRATEGIES {
        let q = txq(s);
        q.with_driver(|d| d.stopped = true);
        for id in 0..7 {
            q.xmit(TestPacket::new(id, 60));
        }
        assert_eq!(q.deactivate(), 7, "{s}");
        assert_eq!(q.backlog(), 0);
        assert_eq!(
            q.xmit(TestPacket::new(99, 60)),
            Verdict::Dropped(DropReason::Deactivated)
        );
        assert_eq!(q.stats().drops_for(DropReason::Deactivated), 8, "{s}");
        q.activate();
        q.with_driver(|d| d.stopped = false);
        assert_eq!(q.xmit(TestPacket::new(100, 60)), Verdict::Success);
        assert_eq!(sent_ids(&q), [100], "{s}");
    }
}

#[test]
fn replace_qdisc_drops_the_old_queue_and_keeps_going() {
    for s in STRATEGIES {
        let q = txq(s);
        q.with_driver(|d| d.stopped = true);
        for id in 0..4 {
            q.xmit(TestPacket::new(id, 60));
        }
        let old = q.replace_qdisc(FifoBuilder::pfifo().limit(10).build().unwrap());
        assert_eq!(qdisc::Qdisc::len(&old), 0, "{s}: the old qdisc was reset");
        // A packet requeued by the bypass onto the stopped queue belongs to the device queue,
        // not the qdisc, and survives the replacement; the qdisc's packets are dropped.
        let requeued = q.stats().requeues;
        assert_eq!(
            q.stats().drops_for(DropReason::Deactivated),
            4 - requeued,
            "{s}"
        );
        q.with_driver(|d| d.stopped = false);
        q.xmit(TestPacket::new(10, 60));
        let expected: Vec<u64> = (0..requeued).chain([10]).collect();
        assert_eq!(sent_ids(&q), expected, "{s}");
    }
}

#[test]
fn burst_limit_drops_the_arrival_or_waits() {
    // With the kernel's protocol and a limit of 1, a push that finds one item already counted
    // behind the first pusher is refused (Drop) or parks until a drain (Wait). The qdisc is
    // large enough that only the burst limit can drop.
    use std::sync::{Arc, Barrier};
    for overflow in [Overflow::Drop, Overflow::Wait] {
        let q: Arc<Txq> = Arc::new(
            TxQueue::builder()
                .strategy(Strategy::DeferList)
                .burst_limit(1)
                .early_bypass(false)
                .overflow(overflow)
                .build(
                    FifoBuilder::pfifo().limit(100_000).build().unwrap(),
                    RecordingDriver::new(),
                )
                .unwrap(),
        );
        let go = Arc::new(Barrier::new(5));
        let producers: Vec<_> = (0..4u64)
            .map(|t| {
                let (q, go) = (q.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    (0..2000)
                        .map(|i| q.xmit(TestPacket::new(t << 32 | i, 60)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        go.wait();
        let verdicts: Vec<Verdict> = producers
            .into_iter()
            .flat_map(|p| p.join().unwrap())
            .collect();
        while q.poll() {}
        let st = q.stats();
        let sent = sent_ids(&q).len() as u64;
        assert_eq!(sent + st.dropped(), 8000, "{overflow:?}: conservation");
        let refused = verdicts
            .iter()
            .filter(|v| **v == Verdict::Dropped(DropReason::QdiscBurst));
        assert_eq!(refused.count() as u64, st.drops_for(DropReason::QdiscBurst));
        if overflow == Overflow::Wait {
            assert_eq!(st.dropped(), 0, "Wait never drops");
        }
    }
}

/// A DeferList queue whose defer list holds one packet at most, with `overflow`.
fn burst_limit_one(overflow: Overflow) -> std::sync::Arc<Txq> {
    std::sync::Arc::new(
        TxQueue::builder()
            .strategy(Strategy::DeferList)
            .burst_limit(1)
            .early_bypass(false)
            .overflow(overflow)
            .build(Pfifo::new(), RecordingDriver::new())
            .unwrap(),
    )
}

/// `q.xmit` of packet `id` on a thread of its own.
fn spawn_xmit(q: &std::sync::Arc<Txq>, id: u64) -> std::thread::JoinHandle<Verdict> {
    let q = q.clone();
    std::thread::spawn(move || q.xmit(TestPacket::new(id, 60)))
}

/// Waits (20 s at most, yielding) until `ok`.
fn until(q: &Txq, what: &str, ok: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "never: {what}; {}",
            q.stats()
        );
        std::thread::yield_now();
    }
}

/// Under `Overflow::Wait` a producer refused by a full defer list parks until a drain resets
/// the count, instead of spinning on the push. With the root lock held (so nobody drains), the
/// first pusher waits for it, a second push fills the list (limit 1) and a third is refused:
/// it must be counted parked, then released by the drain when the lock comes free.
#[test]
fn a_producer_refused_under_wait_parks_until_the_drain() {
    let q = burst_limit_one(Overflow::Wait);
    let (first, third) = q.with_qdisc(|_| {
        // The first pusher, waiting for the root lock this closure holds.
        let first = spawn_xmit(&q, 1);
        until(&q, "the first push", || !q.defer_list_is_empty());
        // Counted behind it: the list is at its limit.
        assert_eq!(spawn_xmit(&q, 2).join().unwrap(), Verdict::Success);
        // Refused: parks.
        let third = spawn_xmit(&q, 3);
        until(&q, "the refused producer parked", || {
            q.stats().overflow_waits >= 1
        });
        (first, third)
    });
    assert_eq!(first.join().unwrap(), Verdict::Success);
    assert_eq!(third.join().unwrap(), Verdict::Success);
    while q.poll() {}
    assert_eq!(sent_ids(&q), [1, 2, 3]);
    assert_eq!(q.stats().dropped(), 0);
}

/// The same under `Overflow::Drop`, set up so that the refusal is certain: the first pusher
/// waits for the root lock the test holds, the second is counted behind it (the list at its
/// limit of 1), and the third is refused at once with `QdiscBurst` and counted.
#[test]
fn a_producer_refused_under_drop_gets_qdisc_burst() {
    let q = burst_limit_one(Overflow::Drop);
    let (first, third) = q.with_qdisc(|_| {
        let first = spawn_xmit(&q, 1);
        until(&q, "the first push", || !q.defer_list_is_empty());
        assert_eq!(spawn_xmit(&q, 2).join().unwrap(), Verdict::Success);
        (first, spawn_xmit(&q, 3).join().unwrap())
    });
    assert_eq!(third, Verdict::Dropped(DropReason::QdiscBurst));
    assert_eq!(first.join().unwrap(), Verdict::Success);
    while q.poll() {}
    assert_eq!(sent_ids(&q), [1, 2]);
    let st = q.stats();
    assert_eq!((st.dropped(), st.drops_for(DropReason::QdiscBurst)), (1, 1));
}

#[test]
fn bad_config_is_a_typed_error() {
    let e = TxQueue::builder()
        .burst_limit(0)
        .build(Pfifo::<TestPacket>::new(), RecordingDriver::new());
    assert_eq!(e.unwrap_err().option(), "burst_limit");
    let e = TxQueue::builder()
        .burst_limit(llist_defer::MAX_BURST_LIMIT + 1)
        .build(Pfifo::<TestPacket>::new(), RecordingDriver::new())
        .unwrap_err();
    assert_eq!(e.option(), "burst_limit");
    assert!(e.to_string().contains("65535"), "{e}");
    let e = TxQueue::builder()
        .quota(0)
        .build(Pfifo::<TestPacket>::new(), RecordingDriver::new());
    assert_eq!(e.unwrap_err().option(), "quota");
    let e = TxQueue::builder()
        .burst_limit(10)
        .help_threshold(11)
        .build(Pfifo::<TestPacket>::new(), RecordingDriver::new());
    assert!(e.unwrap_err().to_string().contains("1..=10"));
}

#[test]
fn latency_histogram_times_one_call_in_n() {
    // A fresh thread, so its call counter starts at zero and the sample count is exact.
    let counts = std::thread::spawn(|| {
        let on = TxQueue::builder()
            .latency_histogram(true)
            .build(Pfifo::new(), RecordingDriver::new())
            .unwrap();
        let off = txq(Strategy::DeferList);
        let calls = 10 * LATENCY_SAMPLE_EVERY as u64 + 3;
        for id in 0..calls {
            on.xmit(TestPacket::new(id, 100));
            off.xmit(TestPacket::new(id, 100));
        }
        assert_eq!(off.stats().latency_ns, None, "off unless asked for");
        let h = on.stats().latency_ns.expect("the histogram was asked for");
        (h.iter().sum::<u64>(), on.stats().sent)
    })
    .join()
    .unwrap();
    assert_eq!(counts, (10, 10 * LATENCY_SAMPLE_EVERY as u64 + 3));
}

#[test]
fn batch_bypass_skips_an_empty_pfifo_and_keeps_order() {
    for batch_bypass in [true, false] {
        let mut driver = RecordingDriver::new();
        driver.accept_per_call = Some(2);
        let q: Txq = TxQueue::builder()
            .strategy(Strategy::DeferList)
            .bulk(3)
            .batch_bypass(batch_bypass)
            .build(Pfifo::new(), driver)
            .unwrap();
        // While the driver is held, the runner role is taken: the pushes pile up on the defer
        // list, and the runner that lets go of the driver drains them as one batch.
        q.with_driver(|_| {
            for id in 0..10 {
                assert_eq!(q.xmit(TestPacket::new(id, 60)), Verdict::Success);
            }
        });
        assert_eq!(sent_ids(&q), (0..10).collect::<Vec<_>>(), "{batch_bypass}");
        let st = q.stats();
        assert_eq!(st.sent, 10);
        // The driver takes 2 of each 3 handed to it: the third is handed back and goes first.
        assert!(st.requeues > 0, "{st:?}");
        let expect_bypass = if batch_bypass { 10 } else { 0 };
        assert_eq!(st.bypass, expect_bypass, "batch bypass {batch_bypass}");
        assert_eq!(
            q.qdisc_stats().packets,
            10,
            "bypassed or dequeued, all count as sent"
        );
    }
}

#[test]
fn bulk_keeps_order_and_goes_to_an_idle_driver_in_one_call() {
    for s in STRATEGIES {
        let q = txq(s);
        for b in 0..3u64 {
            let v = q.xmit_bulk((b * 64..(b + 1) * 64).map(|id| TestPacket::new(id, 100)));
            assert_eq!((v.handed_on, v.dropped), (64, 0), "{s}");
        }
        assert_eq!(sent_ids(&q), (0..192).collect::<Vec<_>>(), "{s}");
        let st = q.stats();
        assert_eq!(
            (st.sent, st.sent_bytes, st.bypass),
            (192, 19_200, 192),
            "{s}"
        );
        let calls = q.with_driver(|d| d.calls);
        assert_eq!(st.driver_calls, calls as u64, "{s}");
        if matches!(s, Strategy::DeferList | Strategy::BusyLock) {
            assert_eq!(calls, 3, "{s}: one driver call per batch");
        } else {
            assert_eq!(calls, 192, "{s} sends one by one");
        }
        // An empty batch is nothing; a batch of one is `xmit`.
        assert_eq!(q.xmit_bulk(None).handed_on, 0);
        assert_eq!(q.xmit_bulk(Some(TestPacket::new(192, 100))).handed_on, 1);
        assert_eq!(sent_ids(&q).len(), 193);
    }
}

#[test]
fn busylock_bulk_behind_a_runner_keeps_per_packet_verdicts() {
    // While the driver is held the run role is taken, so the burst cannot bypass: it takes
    // the busylock and the root lock once and goes to the qdisc (limit 10) whole, or packet by
    // packet with the per-packet runner. pfifo's tail drop (`qdisc_drop` past `sch->limit`)
    // refuses the last 6 either way, as 16 `xmit`s would.
    for qdisc_batch in [true, false] {
        let q: Txq = TxQueue::builder()
            .strategy(Strategy::BusyLock)
            .qdisc_batch(qdisc_batch)
            .build(
                FifoBuilder::pfifo().limit(10).build().unwrap(),
                RecordingDriver::new(),
            )
            .unwrap();
        let v = q.with_driver(|_| q.xmit_bulk((0..16).map(|id| TestPacket::new(id, 100))));
        assert_eq!((v.handed_on, v.dropped), (10, 6));
        assert_eq!(sent_ids(&q), (0..10).collect::<Vec<_>>());
        let st = q.stats();
        assert_eq!(st.drops_for(DropReason::QdiscOverlimit), 6);
        assert_eq!((st.sent, st.bypass), (10, 0));
        assert_eq!(q.qdisc_stats().drops, 6);
        let calls = if qdisc_batch { 1 } else { 16 };
        assert_eq!(
            (st.enqueued, st.enqueue_calls),
            (16, calls),
            "{qdisc_batch}"
        );
        assert_eq!(st.driver_calls, q.with_driver(|d| d.calls) as u64);
    }
}

#[test]
fn bulk_behind_a_runner_is_one_push_counted_by_its_length() {
    for overflow in [Overflow::Drop, Overflow::Wait] {
        let q: Txq = TxQueue::builder()
            .strategy(Strategy::DeferList)
            .burst_limit(10)
            .help_threshold(10) // nobody helps drain before the limit: the count stays up
            .overflow(overflow)
            .build(Pfifo::new(), RecordingDriver::new())
            .unwrap();
        let ids = |r: std::ops::Range<u64>| r.map(|id| TestPacket::new(id, 60));
        // While the driver is held the run role is taken, so everything waits on the defer
        // list: the first push, then a batch of 8 (count 8), then a batch of 5 (8 + 5 > 10).
        let (a, b) = q.with_driver(|_| {
            assert_eq!(q.xmit(TestPacket::new(0, 60)), Verdict::Success);
            let a = q.xmit_bulk(ids(1..9));
            let b = (overflow == Overflow::Drop).then(|| q.xmit_bulk(ids(9..14)));
            (a, b)
        });
        assert_eq!((a.handed_on, a.dropped), (8, 0), "{overflow:?}");
        let st = q.stats();
        match b {
            // Refused whole, counted by reason, and the queue goes on.
            Some(b) => {
                assert_eq!((b.handed_on, b.dropped), (0, 5));
                assert_eq!(st.drops_for(DropReason::QdiscBurst), 5);
            }
            None => assert_eq!(st.dropped(), 0),
        }
        assert_eq!(sent_ids(&q), (0..9).collect::<Vec<_>>(), "{overflow:?}");
        // Past a drain the count is reset: a batch as long as the limit goes through.
        let v = q.xmit_bulk(ids(20..30));
        assert_eq!(v.handed_on, 10);
        assert_eq!(sent_ids(&q).len(), 19);
    }
}

#[test]
fn bulk_from_many_threads_loses_nothing_and_keeps_each_producers_order() {
    use std::sync::{Arc, Barrier};
    const THREADS: u64 = 8;
    const PER: u64 = 5000;
    for s in STRATEGIES {
        // A short pfifo and burst limit, so that both drop; the accounting must still close.
        let q: Arc<Txq> = Arc::new(
            TxQueue::builder()
                .strategy(s)
                .burst_limit(64)
                .build(
                    FifoBuilder::pfifo().limit(128).build().unwrap(),
                    RecordingDriver::new(),
                )
                .unwrap(),
        );
        let go = Arc::new(Barrier::new(THREADS as usize));
        let producers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (q, go) = (q.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    let (mut next, mut dropped, mut k) = (0u64, 0usize, t);
                    while next < PER {
                        // Batch sizes 1..=37, varying per thread and call.
                        k = (k * 31 + 7) % 37;
                        let end = (next + k + 1).min(PER);
                        let v = q.xmit_bulk((next..end).map(|i| TestPacket::new(t << 32 | i, 60)));
                        assert_eq!(v.handed_on + v.dropped, (end - next) as usize);
                        dropped += v.dropped;
                        next = end;
                    }
                    dropped
                })
            })
            .collect();
        let refused: usize = producers.into_iter().map(|p| p.join().unwrap()).sum();
        while q.poll() {}
        let st = q.stats();
        let sent = sent_ids(&q);
        assert_eq!(
            sent.len() as u64 + st.dropped(),
            THREADS * PER,
            "{s}: sent + dropped by reason = offered"
        );
        assert!(refused as u64 <= st.dropped(), "{s}");
        if s == Strategy::DeferList {
            assert_eq!(refused as u64, st.drops_for(DropReason::QdiscBurst), "{s}");
        }
        for t in 0..THREADS {
            let mine: Vec<u64> = sent
                .iter()
                .filter(|id| *id >> 32 == t)
                .map(|id| id & 0xffff_ffff)
                .collect();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "{s}: producer {t} out of order"
            );
        }
    }
}

/// A pfifo that never may be bypassed and counts the dequeue calls the runner makes.
#[derive(Default)]
struct CountingFifo {
    inner: Pfifo<TestPacket>,
    dequeues: usize,
    batch_dequeues: usize,
}

impl qdisc::Qdisc<TestPacket> for CountingFifo {
    fn kind(&self) -> &'static str {
        "counting_fifo"
    }
    fn enqueue(&mut self, pkt: TestPacket, to_free: &mut qdisc::ToFree<TestPacket>) -> Verdict {
        self.inner.enqueue(pkt, to_free)
    }
    fn dequeue(&mut self) -> Option<TestPacket> {
        self.dequeues += 1;
        self.inner.dequeue()
    }
    fn dequeue_batch(&mut self, out: &mut llist_defer::Fifo<TestPacket>, max: usize) -> usize {
        self.batch_dequeues += 1;
        self.inner.dequeue_batch(out, max)
    }
    fn peek(&mut self) -> Option<llist_defer::NodeRef<'_, TestPacket>> {
        self.inner.peek()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn backlog(&self) -> u64 {
        self.inner.backlog()
    }
    fn reset(&mut self, to_free: &mut qdisc::ToFree<TestPacket>, reason: DropReason) {
        self.inner.reset(to_free, reason)
    }
    fn can_bypass(&self) -> bool {
        false
    }
    fn stats(&self) -> qdisc::QdiscStats {
        self.inner.stats()
    }
}

#[test]
fn batched_runner_sends_a_lone_packet_as_the_per_packet_runner_does() {
    // One producer: each drain brings one packet into an empty qdisc. The batched runner takes
    // it with one `dequeue` (no batch set-up) and, finding the qdisc empty, calls nothing more;
    // the per-packet runner dequeues until `None`. A backlog still goes out in batches.
    for qdisc_batch in [true, false] {
        let q = TxQueue::builder()
            .strategy(Strategy::DeferList)
            .qdisc_batch(qdisc_batch)
            .build(CountingFifo::default(), RecordingDriver::new())
            .unwrap();
        for id in 0..8 {
            assert_eq!(q.xmit(TestPacket::new(id, 60)), Verdict::Success);
        }
        let (dequeues, batches) = q.with_qdisc(|f| (f.dequeues, f.batch_dequeues));
        if qdisc_batch {
            assert_eq!((dequeues, batches), (8, 0));
        } else {
            assert!(dequeues > 8 && batches == 0, "{dequeues} {batches}");
        }
        q.with_driver(|d| d.stopped = true);
        for id in 8..40 {
            assert_eq!(q.xmit(TestPacket::new(id, 60)), Verdict::Success);
        }
        q.with_driver(|d| d.stopped = false);
        q.wake();
        let sent: Vec<u64> = q.with_driver(|d| d.sent.iter().map(TestPacket::id).collect());
        assert_eq!(sent, (0..40).collect::<Vec<_>>(), "{qdisc_batch}");
        let batches = q.with_qdisc(|f| f.batch_dequeues);
        assert_eq!(batches > 0, qdisc_batch, "{batches}");
    }
}

/// A lone producer is lent the root lock (`TxQueueBuilder::biased_root`) and its packets keep
/// going out in order by bias; a second thread's `xmit` takes the lock back, and everything
/// either sent is in the driver, in order per thread. Without `membarrier` nothing is lent and
/// the same holds through the mutex.
#[test]
fn a_lone_producer_is_lent_the_root_lock_and_another_takes_it_back() {
    for s in STRATEGIES {
        let q = std::sync::Arc::new(txq(s));
        for id in 0..200 {
            q.xmit(TestPacket::new(id, 100));
        }
        let lent = q.root_lendable();
        let st = q.stats();
        assert_eq!(st.root_bias_grants, u64::from(lent), "{s}: {st:?}");
        assert_eq!(st.root_bias_revokes, 0, "{s}");
        let q2 = q.clone();
        std::thread::spawn(move || {
            for id in 0..10 {
                q2.xmit(TestPacket::new(1000 + id, 100));
            }
        })
        .join()
        .unwrap();
        let st = q.stats();
        assert_eq!(st.root_bias_revokes, u64::from(lent), "{s}: {st:?}");
        for id in 200..210 {
            q.xmit(TestPacket::new(id, 100));
        }
        let sent = sent_ids(&q);
        let mine: Vec<u64> = sent.iter().copied().filter(|&id| id < 1000).collect();
        let theirs: Vec<u64> = sent.iter().copied().filter(|&id| id >= 1000).collect();
        assert_eq!(mine, (0..210).collect::<Vec<_>>(), "{s}");
        assert_eq!(theirs, (1000..1010).collect::<Vec<_>>(), "{s}");
        assert_eq!(q.stats().sent, 220, "{s}");
    }
    // Asked not to: never lent.
    let q = TxQueue::builder()
        .biased_root(false)
        .build(Pfifo::new(), RecordingDriver::new())
        .unwrap();
    for id in 0..200 {
        q.xmit(TestPacket::new(id, 100));
    }
    assert!(!q.root_lendable());
    assert_eq!(q.stats().root_bias_grants, 0);
}

/// A [`TxWorker`](qdisc::TxWorker) stopped while its driver stays stopped returns (the packets
/// stay queued for a later wake), and once it is gone a runner that uses up its quota carries
/// on itself instead of handing the rest to the thread that no longer runs.
#[test]
fn a_stopped_worker_leaves_no_work_to_a_thread_that_is_gone() {
    use std::sync::mpsc;
    use std::time::Duration;
    for strategy in STRATEGIES {
        let w = qdisc::TxWorker::spawn(
            TxQueue::builder().strategy(strategy),
            Pfifo::<TestPacket>::new(),
            RecordingDriver::new(),
        )
        .unwrap();
        let q = w.queue().clone();
        q.with_driver(|d| d.stopped = true);
        for id in 0..200 {
            assert_eq!(q.xmit(TestPacket::new(id, 60)), Verdict::Success);
        }
        let (done, stopped) = mpsc::channel();
        std::thread::spawn(move || done.send(w.stop()).unwrap());
        let q2 = stopped
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{strategy:?}: stop() never returned"));
        assert!(std::sync::Arc::ptr_eq(&q, &q2));
        assert_eq!(q.backlog(), 200, "{strategy:?}: kept for the driver");
        // More than a quota (64) waits; one wake sends all of it.
        q.with_driver(|d| d.stopped = false);
        q.wake();
        assert_eq!(q.backlog(), 0, "{strategy:?}: {}", q.stats());
        let sent: Vec<u64> = q.with_driver(|d| d.sent.iter().map(|p| p.id()).collect());
        assert_eq!(sent, (0..200).collect::<Vec<_>>(), "{strategy:?}");
    }
}

/// A burst that bypasses the empty qdisc reaches the driver in calls of at most `bulk`
/// packets, as any runner's batch does, in order.
#[test]
fn a_bypassed_burst_goes_to_the_driver_in_bulk_sized_calls() {
    let q = txq(Strategy::DeferList);
    let v = q.xmit_bulk((0..200).map(|id| TestPacket::new(id, 60)));
    assert_eq!((v.handed_on, v.dropped), (200, 0));
    assert_eq!(q.backlog(), 0);
    assert_eq!(q.stats().bypass, 200, "{}", q.stats());
    let (calls, sent) =
        q.with_driver(|d| (d.calls, d.sent.iter().map(|p| p.id()).collect::<Vec<_>>()));
    assert_eq!(calls, 200usize.div_ceil(64), "bulk is 64 by default");
    assert_eq!(sent, (0..200).collect::<Vec<_>>());
}

/// A driver that, on its first call, says so and waits for a go, then hands the whole batch
/// back and reports the queue stopped.
struct HandsBackOnce {
    entered: std::sync::mpsc::Sender<()>,
    go: std::sync::mpsc::Receiver<()>,
    stopped: bool,
}

impl qdisc::Driver<TestPacket> for HandsBackOnce {
    fn xmit(
        &mut self,
        _batch: &mut llist_defer::Fifo<TestPacket>,
        _to_free: &mut qdisc::ToFree<TestPacket>,
    ) -> qdisc::TxResult {
        if !self.stopped {
            self.entered.send(()).unwrap();
            self.go.recv().unwrap();
            self.stopped = true;
        }
        qdisc::TxResult {
            sent: 0,
            stopped: true,
        }
    }
    fn is_stopped(&self) -> bool {
        self.stopped
    }
}

/// `deactivate` waits for a runner that is in the driver (as `dev_deactivate` waits while
/// `some_qdisc_is_busy`) and drops what its driver hands back: BusyLock and NoLock let go of
/// the root lock around the driver call, so the packet comes back after the first sweep.
#[test]
fn deactivate_drops_what_a_running_driver_hands_back() {
    use std::sync::{Arc, mpsc};
    for strategy in [Strategy::BusyLock, Strategy::NoLock] {
        let (entered_tx, entered) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        let q = Arc::new(
            TxQueue::builder()
                .strategy(strategy)
                .build(
                    Pfifo::<TestPacket>::new(),
                    HandsBackOnce {
                        entered: entered_tx,
                        go: go_rx,
                        stopped: false,
                    },
                )
                .unwrap(),
        );
        let runner = {
            let q = q.clone();
            std::thread::spawn(move || q.xmit(TestPacket::new(1, 60)))
        };
        entered.recv().unwrap();
        let deactivating = {
            let q = q.clone();
            std::thread::spawn(move || q.deactivate())
        };
        // Once a packet is refused as deactivated, the flag is up and the first sweep done
        // (both under one hold of the root lock); the probes queued before it are swept.
        let (mut queued, mut id) = (0u64, 100);
        loop {
            id += 1;
            match q.xmit(TestPacket::new(id, 60)) {
                Verdict::Dropped(DropReason::Deactivated) => break,
                Verdict::Dropped(_) => {} // past the qdisc's limit: not queued
                _ => queued += 1,
            }
            std::thread::yield_now();
        }
        go.send(()).unwrap();
        runner.join().unwrap();
        let swept = deactivating.join().unwrap() as u64;
        assert_eq!(
            swept,
            queued + 1,
            "{strategy:?}: the handed-back packet too"
        );
        assert_eq!(q.backlog(), 0, "{strategy:?}: {}", q.stats());
        assert_eq!(q.stats().drops_for(DropReason::Deactivated), queued + 2);
    }
}

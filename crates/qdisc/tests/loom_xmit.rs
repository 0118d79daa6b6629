//! loom models of the transmit engine's hand-offs (run with `--cfg lockless_loom`).
//!
//! Two producers, one or two packets each, a recording driver: small enough to explore every
//! interleaving within `LOOM_MAX_PREEMPTIONS=2`, large enough to hit each race.
#![cfg(lockless_loom)]

use loom::sync::Arc;
use loom::thread;

use qdisc::{
    DropReason, Pfifo, RecordingDriver, Strategy, TestPacket, TxQueue, TxQueueBuilder, TxWorker,
};

type Txq = TxQueue<TestPacket, Pfifo<TestPacket>, RecordingDriver<TestPacket>>;

fn queue(builder: TxQueueBuilder) -> Arc<Txq> {
    Arc::new(builder.build(Pfifo::new(), RecordingDriver::new()).unwrap())
}

/// A recording driver that takes one packet per call, so a runner keeps the qdisc non-empty
/// and goes round its loop.
fn one_per_call() -> RecordingDriver<TestPacket> {
    let mut driver = RecordingDriver::new();
    driver.accept_per_call = Some(1);
    driver
}

/// Explores `f` with at most two preemptions per execution, whatever `LOOM_MAX_PREEMPTIONS`
/// says: the models that need the bound to finish in time.
fn bounded(f: impl Fn() + Sync + Send + 'static) {
    bounded_by(2, f);
}

/// Explores `f` with at most `preemptions` preemptions per execution.
fn bounded_by(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(preemptions);
    model.check(f);
}

/// Both producers transmit; then, *without* any poll or flush, every packet must be in the
/// driver or a drop counter: nothing stranded in the defer list, the qdisc or the requeue list.
fn two_producers_nothing_stranded(builder: TxQueueBuilder, per_producer: u64) {
    two_producers_nothing_stranded_with(builder, per_producer, RecordingDriver::new());
}

fn two_producers_nothing_stranded_with(
    builder: TxQueueBuilder,
    per_producer: u64,
    driver: RecordingDriver<TestPacket>,
) {
    let q = Arc::new(builder.build(Pfifo::new(), driver).unwrap());
    let producers: Vec<_> = (0..2u64)
        .map(|t| {
            let q = q.clone();
            thread::spawn(move || {
                for i in 0..per_producer {
                    q.xmit(TestPacket::new(t << 8 | i, 60));
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    all_out_in_order(&q, 2 * per_producer);
}

/// Every producer has returned: every packet must be in the driver or a drop counter, with
/// nothing stranded in the defer list, the qdisc or the requeue list (checked without any
/// poll), and each producer's packets (`id >> 8`) sent in order. Returns what was sent.
fn all_out_in_order(q: &Txq, offered: u64) -> (Vec<u64>, qdisc::XmitStats) {
    // Checked before `with_driver`, which runs the queue itself once it holds the role (and
    // would send, or drop as deactivated, a packet left on the defer list or in the qdisc).
    assert_eq!(
        q.backlog(),
        0,
        "a packet was left in the qdisc: {:?}",
        q.stats()
    );
    assert!(
        q.defer_list_is_empty(),
        "a packet was left on the defer list"
    );
    let stats = q.stats();
    let sent: Vec<u64> = q.with_driver(|d| d.sent.iter().map(TestPacket::id).collect());
    assert_eq!(
        sent.len() as u64 + stats.dropped(),
        offered,
        "lost: sent {sent:?} stats {stats:?}"
    );
    for t in 0..2u64 {
        let mine: Vec<u64> = sent.iter().copied().filter(|id| id >> 8 == t).collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "producer {t} reordered: {sent:?}"
        );
    }
    (sent, stats)
}

/// (1a) The real NoLock handshake (MISSED retry) strands nothing.
#[test]
fn nolock_missed_handshake_strands_nothing() {
    loom::model(|| {
        two_producers_nothing_stranded(TxQueue::builder().strategy(Strategy::NoLock), 1)
    });
}

/// (1b) The naive NoLock protocol, a bare try-lock without MISSED (the 2021 "packet stuck"
/// bug), must be caught by loom stranding a packet: this test passes only if the model fails.
#[test]
fn nolock_without_missed_strands_a_packet() {
    let result = std::panic::catch_unwind(|| {
        loom::model(|| {
            two_producers_nothing_stranded(TxQueue::builder().strategy(Strategy::NoLockNaive), 1)
        })
    });
    let payload = result.expect_err("loom found no stranded packet in the naive NoLock protocol");
    // And it failed for the right reason: a packet left in the qdisc after every producer
    // returned, not some other assertion.
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    assert!(
        msg.contains("a packet was left in the qdisc"),
        "the naive NoLock model failed, but not by stranding a packet: {msg:?}"
    );
}

/// (2) DeferList hand-off as the kernel does it: first pusher drains under the root lock.
#[test]
fn defer_list_kernel_protocol_strands_nothing() {
    loom::model(|| {
        two_producers_nothing_stranded(
            TxQueue::builder()
                .strategy(Strategy::DeferList)
                .kernel_exact(),
            1,
        )
    });
}

/// (2b) DeferList with our user-space additions: early bypass and a runner that absorbs the
/// defer list, with the PENDING hand-off from first pushers that find it at work.
#[test]
fn defer_list_runner_absorbs_strands_nothing() {
    loom::model(|| {
        two_producers_nothing_stranded(TxQueue::builder().strategy(Strategy::DeferList), 1)
    });
}

/// (2b') The root lock lent and taken back. Under loom a thread is lent the root lock at its
/// first acquisition (`TxQueueBuilder::biased_root`, on by default), so in every model here
/// the second thread to want it revokes the first one's bias: the owner's store-then-reload
/// against the revoker's clear-fence-wait. Producer 0 sends two packets (the second one
/// entering by bias), producer 1 one; a biased holder and a mutex holder that overlapped would
/// touch the root's cell concurrently, which loom reports. Without either side's fence this
/// model and most others here fail so.
#[test]
fn defer_list_lent_root_lock_is_taken_back_safely() {
    bounded(|| {
        let q = queue(TxQueue::builder().strategy(Strategy::DeferList));
        let q1 = q.clone();
        let second = thread::spawn(move || q1.xmit(TestPacket::new(1 << 8, 60)));
        q.xmit(TestPacket::new(0, 60));
        q.xmit(TestPacket::new(1, 60));
        second.join().unwrap();
        let (_, stats) = all_out_in_order(&q, 3);
        // Under loom the first acquisition earns the bias (`BIAS_AFTER` 1): whichever thread
        // takes the root lock first is lent it, and the other takes it back.
        assert!(
            stats.root_bias_grants >= 1 && stats.root_bias_revokes >= 1,
            "lent and taken back: {stats:?}"
        );
        assert!(stats.root_bias_revokes <= stats.root_bias_grants);
    });
}

/// (2b''') One producer lent the root locks of two queues, and a second thread taking the
/// first one back. The owner leaves queue 1 and enters queue 2 by bias, so the revoker of queue
/// 1 may read the owner's mark for queue 2 rather than its exit: that mark's store must carry
/// the owner's work in queue 1 to the revoker too (a relaxed store there fails this model).
#[test]
fn one_owner_of_two_lent_root_locks_is_taken_back_safely() {
    bounded(|| {
        let q1 = queue(TxQueue::builder().strategy(Strategy::DeferList));
        let q2 = queue(TxQueue::builder().strategy(Strategy::DeferList));
        let r1 = q1.clone();
        let revoker = thread::spawn(move || r1.xmit(TestPacket::new(1 << 8, 60)));
        for i in 0..2 {
            q1.xmit(TestPacket::new(i, 60));
            q2.xmit(TestPacket::new(i, 60));
        }
        revoker.join().unwrap();
        all_out_in_order(&q1, 3);
        let sent2: Vec<u64> = q2.with_driver(|d| d.sent.iter().map(TestPacket::id).collect());
        assert_eq!(sent2, [0, 1]);
    });
}

/// (2b'') The plain mutex, for the build that never lends the root lock.
#[test]
fn defer_list_unlent_root_lock_strands_nothing() {
    loom::model(|| {
        two_producers_nothing_stranded(
            TxQueue::builder()
                .strategy(Strategy::DeferList)
                .biased_root(false),
            1,
        )
    });
}

/// (2c) The same with a burst limit of 1 and two packets each, so the counted limit and its
/// drops are in the model too (a drop is fine, a stranded packet is not).
#[test]
fn defer_list_burst_limit_strands_nothing() {
    bounded(|| {
        two_producers_nothing_stranded(
            TxQueue::builder()
                .strategy(Strategy::DeferList)
                .burst_limit(1)
                .early_bypass(false),
            2,
        )
    });
}

/// (2d) Batch bypass with a driver that takes one packet per call: a drained batch of several
/// skips the empty pfifo, and what the driver hands back must go out before the rest of the
/// batch and before anything newer, with nothing stranded.
#[test]
fn defer_list_batch_bypass_keeps_order() {
    bounded(|| {
        two_producers_nothing_stranded_with(
            TxQueue::builder().strategy(Strategy::DeferList),
            2,
            one_per_call(),
        )
    });
}

/// (2e) BusyLock, for completeness.
#[test]
fn busylock_strands_nothing() {
    loom::model(|| {
        two_producers_nothing_stranded(TxQueue::builder().strategy(Strategy::BusyLock), 1)
    });
}

/// (3) Deactivate racing xmit: each packet is sent or dropped with a reason, none stays queued,
/// and after deactivation returns every arriving packet is dropped.
#[test]
fn deactivate_races_xmit() {
    for strategy in [Strategy::DeferList, Strategy::NoLock, Strategy::BusyLock] {
        loom::model(move || {
            let q = queue(TxQueue::builder().strategy(strategy));
            let producer = {
                let q = q.clone();
                thread::spawn(move || {
                    q.xmit(TestPacket::new(1, 60));
                    q.xmit(TestPacket::new(2, 60));
                })
            };
            q.deactivate();
            producer.join().unwrap();
            // Before `with_driver`, which would run the queue itself.
            assert_eq!(
                q.backlog(),
                0,
                "{strategy}: a packet stayed queued after deactivate"
            );
            assert!(
                q.defer_list_is_empty(),
                "{strategy}: left on the defer list"
            );
            let dropped = q.stats().drops_for(DropReason::Deactivated);
            let sent = q.with_driver(|d| d.sent.len() as u64);
            assert_eq!(sent + dropped, 2, "{strategy}: lost a packet");
            assert_eq!(
                q.xmit(TestPacket::new(3, 60)),
                qdisc::Verdict::Dropped(DropReason::Deactivated)
            );
        });
    }
}

/// (2f) `xmit_bulk` racing `xmit`, with a driver that takes one packet per call: the batch goes
/// through the early bypass, the defer list (one push) or the qdisc, and either way each
/// producer's packets leave in order and nothing is stranded without a poll.
#[test]
fn defer_list_bulk_races_xmit() {
    bounded(|| {
        let driver = one_per_call();
        let q = Arc::new(
            TxQueue::builder()
                .strategy(Strategy::DeferList)
                .build(Pfifo::new(), driver)
                .unwrap(),
        );
        let bulk = {
            let q = q.clone();
            thread::spawn(move || q.xmit_bulk((0..2).map(|i| TestPacket::new(i, 60))))
        };
        q.xmit(TestPacket::new(1 << 8, 60));
        let v = bulk.join().unwrap();
        assert_eq!(v.handed_on + v.dropped, 2);
        assert_eq!(q.backlog(), 0, "a packet was left in the qdisc");
        let sent: Vec<u64> = q.with_driver(|d| d.sent.iter().map(TestPacket::id).collect());
        assert!(
            q.defer_list_is_empty(),
            "a packet was left on the defer list"
        );
        assert_eq!(sent.len() as u64 + q.stats().dropped(), 3, "lost: {sent:?}");
        let batch: Vec<u64> = sent.iter().copied().filter(|id| id >> 8 == 0).collect();
        assert_eq!(batch, [0, 1], "the batch was reordered: {sent:?}");
    });
}

/// (4) The batched drain (`qdisc_batch`, the default): two producers each send a burst of two
/// (no early bypass, no batch bypass, so every chain of several goes through
/// `Qdisc::enqueue_batch` and out through `Qdisc::dequeue_batch`): with DeferList onto the
/// defer list, drained as one chain; with BusyLock under the busylock and the root lock, one
/// batch enqueue each. A driver that takes one packet per call keeps the qdisc non-empty, and
/// a deactivate races them all. Every packet is sent or dropped with a reason, each producer's
/// packets leave in order, and nothing is stranded in the defer list, the qdisc or the
/// requeue list.
fn batched_drain_races_producers_and_deactivate(strategy: Strategy) {
    bounded(move || {
        let driver = one_per_call();
        let q = Arc::new(
            TxQueue::builder()
                .strategy(strategy)
                .early_bypass(false)
                .batch_bypass(false)
                .qdisc_batch(true)
                .build(Pfifo::new(), driver)
                .unwrap(),
        );
        let producers: Vec<_> = (0..2u64)
            .map(|t| {
                let q = q.clone();
                thread::spawn(move || q.xmit_bulk((0..2).map(|i| TestPacket::new(t << 8 | i, 60))))
            })
            .collect();
        let deactivated = q.deactivate() as u64;
        for p in producers {
            let v = p.join().unwrap();
            assert_eq!(v.handed_on + v.dropped, 2);
        }
        let (_, stats) = all_out_in_order(&q, 4);
        assert!(stats.drops_for(DropReason::Deactivated) >= deactivated);
    });
}

#[test]
fn defer_list_batched_drain_races_producers_and_deactivate() {
    batched_drain_races_producers_and_deactivate(Strategy::DeferList);
}

#[test]
fn busylock_batch_enqueue_races_producers_and_deactivate() {
    batched_drain_races_producers_and_deactivate(Strategy::BusyLock);
}

/// (5) A burst sent by its own producer (`self_send_burst`) racing another producer's first
/// push: the burst's producer pushed a packet just before (so it may still sit on the defer
/// list behind the other producer's pending drain), then sends a burst of two itself under
/// the root lock. That earlier packet must leave before the burst, the other producer's
/// packet must not be stranded, and nothing is lost; with a deactivate racing it all, every
/// packet is sent or counted as deactivated.
#[test]
fn self_sent_burst_keeps_order_behind_the_defer_list() {
    for deactivate in [false, true] {
        bounded(move || {
            let q = Arc::new(
                TxQueue::builder()
                    .strategy(Strategy::DeferList)
                    .early_bypass(false)
                    .self_send_burst(2)
                    .build(Pfifo::new(), RecordingDriver::new())
                    .unwrap(),
            );
            let other = {
                let q = q.clone();
                thread::spawn(move || {
                    q.xmit(TestPacket::new(1 << 8, 60));
                })
            };
            let deactivator = deactivate.then(|| {
                let q = q.clone();
                thread::spawn(move || {
                    q.deactivate();
                })
            });
            q.xmit(TestPacket::new(0, 60));
            q.xmit_bulk((1..3).map(|i| TestPacket::new(i, 60)));
            if let Some(d) = deactivator {
                d.join().unwrap();
            }
            other.join().unwrap();
            // The burst's producer is producer 0: its packet 0 must leave before 1 and 2.
            let (_, stats) = all_out_in_order(&q, 4);
            if !deactivate {
                assert_eq!(stats.dropped(), 0);
            }
        });
    }
}

/// (6) A [`TxWorker`] stopping while a runner uses up its quota (1 packet) with a packet
/// still queued and hands the rest over: the runner asks the worker's `alive` flag whether
/// anyone will take the work, and the stop runs the queue after the thread is gone. Whichever
/// way the race goes, every packet is sent once the producer's burst and `stop` have returned,
/// with no poll after them: a hand-over to a worker that is gone leaves a packet in the qdisc.
fn worker_stop_races_a_hand_over(strategy: Strategy) {
    bounded_by(1, move || {
        let builder = TxQueue::builder()
            .strategy(strategy)
            .early_bypass(false)
            .batch_bypass(false)
            .quota(1);
        let worker = TxWorker::spawn(builder, Pfifo::new(), RecordingDriver::new()).unwrap();
        let producer = {
            let q = worker.queue().clone();
            thread::spawn(move || q.xmit_bulk((0..2).map(|i| TestPacket::new(i, 60))))
        };
        let q = worker.stop();
        assert_eq!(producer.join().unwrap().handed_on, 2);
        let (sent, stats) = all_out_in_order(&q, 2);
        assert_eq!((sent.len(), stats.dropped()), (2, 0));
    });
}

#[test]
fn defer_list_worker_stop_races_a_hand_over() {
    worker_stop_races_a_hand_over(Strategy::DeferList);
}

#[test]
fn busylock_worker_stop_races_a_hand_over() {
    worker_stop_races_a_hand_over(Strategy::BusyLock);
}

/// (6b) The same race under NoLock, whose runner decides the hand-over after letting go of
/// the seqlock (`qdisc_run_end` found MISSED): two producers, one packet each, quota 1, so a
/// runner that sends one packet may hand the other's over; the second producer then stops the
/// worker. At a preemption bound of 2 it fails if the runner ignores the worker's `alive`
/// flag, or reads it without the root lock (`nolock_hand_over`).
///
/// The root lock is not lent here: under loom a lock is lent after one uncontended
/// acquisition, and lending and taking it back multiply the interleavings (the lent variant
/// below ran for tens of minutes at a bound of 1); the lent lock's own protocol has the
/// models above.
fn nolock_worker_stop(lent_root: bool, preemptions: usize) {
    bounded_by(preemptions, move || {
        let builder = TxQueue::builder()
            .strategy(Strategy::NoLock)
            .early_bypass(false)
            .biased_root(lent_root)
            .quota(1);
        let worker = TxWorker::spawn(builder, Pfifo::new(), RecordingDriver::new()).unwrap();
        let producer = {
            let q = worker.queue().clone();
            thread::spawn(move || {
                q.xmit(TestPacket::new(0, 60));
            })
        };
        worker.queue().xmit(TestPacket::new(1 << 8, 60));
        let q = worker.stop();
        producer.join().unwrap();
        let (sent, stats) = all_out_in_order(&q, 2);
        assert_eq!((sent.len(), stats.dropped()), (2, 0));
    });
}

#[test]
fn nolock_worker_stop_races_a_hand_over() {
    nolock_worker_stop(false, 2);
}

/// (6b) with the root lock lent as by default. Not in CI: it explores for tens of minutes at
/// a preemption bound of 1. Run it with `RUSTFLAGS="--cfg lockless_loom" cargo test --release
/// -p qdisc --test loom_xmit nolock_worker -- --ignored`.
#[test]
#[ignore = "tens of minutes; run by hand with --ignored"]
fn nolock_worker_stop_races_a_hand_over_with_a_lent_root_lock() {
    nolock_worker_stop(true, 1);
}

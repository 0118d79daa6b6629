//! Faults: a panic inside the runner role. A driver, a qdisc callback, the wake callback or a
//! `with_driver` closure panics while a thread holds the root lock or the run role; for every
//! strategy the role and the lock are released on unwind, the packets in that thread's hands are
//! counted as [`DropReason::Panic`], their frames go home, and the next `xmit` proceeds.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Once};
use std::thread;
use std::time::Duration;

use llist_defer::{Fifo, NodeRef};
use qdisc::{
    Driver, DropReason, Pfifo, Qdisc, QdiscStats, Strategy, ToFree, TxQueue, TxQueueBuilder,
    TxResult, Verdict,
};
use skb_pool::{Pool, PoolHandle, Skb};

/// The payload of every panic these tests cause; the hook stays quiet for it only.
/// How long a producer waits for a frame to come home: far longer than backpressure ever
/// holds one, so that a stranded frame fails the test instead of hanging it.
const FRAME_WAIT: Duration = Duration::from_secs(30);
const BOOM: &str = "injected fault";

fn quiet_injected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let ours = info.payload().downcast_ref::<&str>() == Some(&BOOM);
            if !ours {
                default(info);
            }
        }));
    });
}

/// What the test tells the driver and the qdisc to do.
#[derive(Default)]
struct Faults {
    /// The driver reports its queue stopped.
    stopped: AtomicBool,
    /// The driver panics on its next call, after taking this many packets (dropped in its
    /// hands); `usize::MAX`: no panic.
    driver_panic_after: AtomicUsize,
    /// The qdisc panics on its next enqueue (the packet dies in its hands).
    enqueue_panic: AtomicBool,
    /// The qdisc panics on its next dequeue, before touching anything.
    dequeue_panic: AtomicBool,
    /// The qdisc panics on its next dequeue with the packet it took in its hands (lost, as
    /// when a packet's method panics inside a qdisc's dequeue).
    dequeue_lose_panic: AtomicBool,
    /// The wake callback panics on its next call.
    waker_panic: AtomicBool,
    /// Random faults: one driver call in this many panics (0: never).
    driver_one_in: AtomicU64,
    /// Random faults: one enqueue in this many panics (0: never).
    enqueue_one_in: AtomicU64,
    /// Packets the driver accepted.
    sent: AtomicU64,
    ticket: AtomicU64,
}

impl Faults {
    fn new() -> Arc<Self> {
        let f = Faults::default();
        f.driver_panic_after.store(usize::MAX, Ordering::Relaxed);
        Arc::new(f)
    }

    /// A deterministic pseudo-random draw: true about once in `n`.
    fn one_in(&self, n: u64) -> bool {
        if n == 0 {
            return false;
        }
        let mut x = self.ticket.fetch_add(1, Ordering::Relaxed) ^ 0x9e37_79b9_7f4a_7c15;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (x ^ (x >> 31)) % n == 0
    }
}

struct FaultyDriver(Arc<Faults>);

impl Driver<Skb> for FaultyDriver {
    fn xmit(&mut self, batch: &mut Fifo<Skb>, _: &mut ToFree<Skb>) -> TxResult {
        let f = &self.0;
        let take = f.driver_panic_after.swap(usize::MAX, Ordering::Relaxed);
        if take != usize::MAX {
            let in_hand: Vec<Skb> = (0..take).map_while(|_| batch.pop_front()).collect();
            drop(in_hand); // frames go home during the unwind below, uncounted by the driver
            std::panic::panic_any(BOOM);
        }
        if f.one_in(f.driver_one_in.load(Ordering::Relaxed)) {
            let _first = batch.pop_front();
            std::panic::panic_any(BOOM);
        }
        let mut sent = 0;
        while let Some(p) = batch.pop_front() {
            drop(p);
            sent += 1;
        }
        f.sent.fetch_add(sent as u64, Ordering::Relaxed);
        TxResult {
            sent,
            stopped: false,
        }
    }

    fn is_stopped(&self) -> bool {
        self.0.stopped.load(Ordering::Relaxed)
    }
}

/// A pfifo that panics on demand.
struct FaultyQdisc {
    inner: Pfifo<Skb>,
    faults: Arc<Faults>,
}

impl Qdisc<Skb> for FaultyQdisc {
    fn kind(&self) -> &'static str {
        "faulty"
    }
    fn enqueue(&mut self, pkt: Skb, to_free: &mut ToFree<Skb>) -> Verdict {
        let f = &self.faults;
        if f.enqueue_panic.swap(false, Ordering::Relaxed)
            || f.one_in(f.enqueue_one_in.load(Ordering::Relaxed))
        {
            drop(pkt);
            std::panic::panic_any(BOOM);
        }
        self.inner.enqueue(pkt, to_free)
    }
    fn dequeue(&mut self) -> Option<Skb> {
        if self.faults.dequeue_panic.swap(false, Ordering::Relaxed) {
            std::panic::panic_any(BOOM);
        }
        if self
            .faults
            .dequeue_lose_panic
            .swap(false, Ordering::Relaxed)
        {
            drop(self.inner.dequeue());
            std::panic::panic_any(BOOM);
        }
        self.inner.dequeue()
    }
    fn peek(&mut self) -> Option<NodeRef<'_, Skb>> {
        self.inner.peek()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn backlog(&self) -> u64 {
        self.inner.backlog()
    }
    fn reset(&mut self, to_free: &mut ToFree<Skb>, reason: DropReason) {
        self.inner.reset(to_free, reason)
    }
    fn can_bypass(&self) -> bool {
        true
    }
    fn stats(&self) -> QdiscStats {
        self.inner.stats()
    }
}

type Txq = TxQueue<Skb, FaultyQdisc, FaultyDriver>;

fn strategies() -> Vec<(&'static str, TxQueueBuilder)> {
    vec![
        ("busylock", TxQueue::builder().strategy(Strategy::BusyLock)),
        ("defer", TxQueue::builder().strategy(Strategy::DeferList)),
        (
            "defer-kernel-exact",
            TxQueue::builder()
                .strategy(Strategy::DeferList)
                .kernel_exact(),
        ),
        ("nolock", TxQueue::builder().strategy(Strategy::NoLock)),
    ]
}

fn build(builder: TxQueueBuilder, faults: &Arc<Faults>) -> Txq {
    let qdisc = FaultyQdisc {
        inner: Pfifo::new(),
        faults: faults.clone(),
    };
    builder.build(qdisc, FaultyDriver(faults.clone())).unwrap()
}

fn packet(h: &mut PoolHandle, seq: u64) -> Skb {
    let mut skb = h.alloc().expect("pool has frames");
    skb.put_slice(&seq.to_le_bytes()).unwrap();
    skb
}

/// offered = sent + dropped (by reason) + still queued, and the engine's `sent` agrees with
/// the driver's.
fn assert_conserved(name: &str, q: &Txq, faults: &Faults, offered: u64) {
    let s = q.stats();
    let sent = faults.sent.load(Ordering::Relaxed);
    assert_eq!(s.sent, sent, "{name}: engine and driver disagree on sent");
    assert_eq!(
        offered,
        sent + s.dropped() + q.backlog() as u64,
        "{name}: conservation: {s}"
    );
}

#[test]
fn driver_panic_with_a_batch_in_hand() {
    quiet_injected_panics();
    for (name, builder) in strategies() {
        let pool = Pool::builder().frame_count(256).build().unwrap();
        let mut h = pool.handle().unwrap();
        let faults = Faults::new();
        let q = build(builder, &faults);
        faults.stopped.store(true, Ordering::Relaxed);
        for i in 0..10 {
            assert_eq!(q.xmit(packet(&mut h, i)), Verdict::Success, "{name}");
        }
        assert_eq!(
            q.backlog(),
            10,
            "{name}: a stopped driver leaves all queued"
        );
        // The runner takes all ten, the driver takes three of them and panics.
        faults.driver_panic_after.store(3, Ordering::Relaxed);
        faults.stopped.store(false, Ordering::Relaxed);
        assert!(
            catch_unwind(AssertUnwindSafe(|| q.wake())).is_err(),
            "{name}"
        );
        let s = q.stats();
        assert_eq!(
            s.drops_for(DropReason::Panic),
            10,
            "{name}: 3 in the driver + 7 in hand"
        );
        assert_eq!(q.backlog(), 0, "{name}");
        assert_eq!(pool.stats().in_use, 0, "{name}: every frame went home");
        // The next xmit proceeds: the role is free again.
        assert_eq!(q.xmit(packet(&mut h, 10)), Verdict::Success, "{name}");
        assert_eq!(
            faults.sent.load(Ordering::Relaxed),
            1,
            "{name}: next packet sent"
        );
        assert_conserved(name, &q, &faults, 11);
        drop(q);
        drop(h);
        assert_eq!(pool.stats().free, 256, "{name}");
    }
}

#[test]
fn qdisc_enqueue_panic_under_the_root_lock() {
    quiet_injected_panics();
    for (name, builder) in strategies() {
        let pool = Pool::builder().frame_count(256).build().unwrap();
        let mut h = pool.handle().unwrap();
        let faults = Faults::new();
        let q = build(builder, &faults);
        faults.stopped.store(true, Ordering::Relaxed);
        for i in 0..5 {
            q.xmit(packet(&mut h, i));
        }
        faults.enqueue_panic.store(true, Ordering::Relaxed);
        let skb = packet(&mut h, 5);
        assert!(
            catch_unwind(AssertUnwindSafe(|| q.xmit(skb))).is_err(),
            "{name}"
        );
        assert_eq!(q.stats().drops_for(DropReason::Panic), 1, "{name}");
        assert_eq!(
            pool.stats().in_use,
            5,
            "{name}: the lost packet's frame went home"
        );
        // No poisoned lock, no stuck role: the next xmit sends everything.
        faults.stopped.store(false, Ordering::Relaxed);
        assert_eq!(q.xmit(packet(&mut h, 6)), Verdict::Success, "{name}");
        while q.poll() {}
        assert_eq!(faults.sent.load(Ordering::Relaxed), 6, "{name}");
        assert_conserved(name, &q, &faults, 7);
        drop(q);
        drop(h);
        assert_eq!(pool.stats().free, 256, "{name}");
    }
}

/// Five packets queued behind a stopped driver (the first, bypassed, requeued: the batch in
/// hand), then the qdisc panics on the dequeue that follows: before touching anything, or
/// (`loses`) with the packet it took in its hands. Every packet lost is counted as a Panic
/// drop, and the queue works on.
fn qdisc_dequeue_panic(loses: bool) {
    quiet_injected_panics();
    let lost = 1 + u64::from(loses);
    for (name, builder) in strategies() {
        let pool = Pool::builder().frame_count(256).build().unwrap();
        let mut h = pool.handle().unwrap();
        let faults = Faults::new();
        let q = build(builder, &faults);
        faults.stopped.store(true, Ordering::Relaxed);
        for i in 0..5 {
            q.xmit(packet(&mut h, i));
        }
        let fault = if loses {
            &faults.dequeue_lose_panic
        } else {
            &faults.dequeue_panic
        };
        fault.store(true, Ordering::Relaxed);
        faults.stopped.store(false, Ordering::Relaxed);
        assert!(
            catch_unwind(AssertUnwindSafe(|| q.wake())).is_err(),
            "{name}"
        );
        assert_eq!(q.stats().drops_for(DropReason::Panic), lost, "{name}");
        assert_eq!(q.backlog() as u64, 5 - lost, "{name}");
        assert_conserved(name, &q, &faults, 5);
        assert_eq!(q.xmit(packet(&mut h, 5)), Verdict::Success, "{name}");
        while q.poll() {}
        assert_eq!(faults.sent.load(Ordering::Relaxed), 6 - lost, "{name}");
        assert_conserved(name, &q, &faults, 6);
        drop(q);
        drop(h);
        assert_eq!(pool.stats().free, 256, "{name}");
    }
}

#[test]
fn qdisc_dequeue_panic_in_the_runner() {
    qdisc_dequeue_panic(false);
}

/// A dequeue that panics with a packet in the qdisc's hands loses that packet too: the
/// engine counts it from the qdisc's length (it left the queue and never reached the batch),
/// besides the batch in hand (before, conservation came up one short).
#[test]
fn qdisc_dequeue_panic_that_loses_a_packet_counts_it() {
    qdisc_dequeue_panic(true);
}

#[test]
fn waker_panic_after_the_role_was_handed_over() {
    quiet_injected_panics();
    for (name, builder) in strategies() {
        let pool = Pool::builder().frame_count(256).build().unwrap();
        let mut h = pool.handle().unwrap();
        let faults = Faults::new();
        let f = faults.clone();
        let wakes = Arc::new(AtomicU64::new(0));
        let w = wakes.clone();
        let qdisc = FaultyQdisc {
            inner: Pfifo::new(),
            faults: faults.clone(),
        };
        let q = builder
            .quota(1)
            .bulk(1)
            .build_with_waker(qdisc, FaultyDriver(faults.clone()), move || {
                w.fetch_add(1, Ordering::Relaxed);
                if f.waker_panic.swap(false, Ordering::Relaxed) {
                    std::panic::panic_any(BOOM);
                }
            })
            .unwrap();
        faults.stopped.store(true, Ordering::Relaxed);
        for i in 0..5 {
            q.xmit(packet(&mut h, i));
        }
        faults.waker_panic.store(true, Ordering::Relaxed);
        faults.stopped.store(false, Ordering::Relaxed);
        assert!(
            catch_unwind(AssertUnwindSafe(|| q.wake())).is_err(),
            "{name}"
        );
        assert_eq!(wakes.load(Ordering::Relaxed), 1, "{name}");
        assert_eq!(faults.sent.load(Ordering::Relaxed), 1, "{name}: quota 1");
        assert_eq!(
            q.stats().drops_for(DropReason::Panic),
            0,
            "{name}: nothing was in hand"
        );
        q.xmit(packet(&mut h, 5));
        while q.poll() {}
        assert_eq!(faults.sent.load(Ordering::Relaxed), 6, "{name}");
        assert_conserved(name, &q, &faults, 6);
        drop(q);
        drop(h);
        assert_eq!(pool.stats().free, 256, "{name}");
    }
}

#[test]
fn with_driver_panic_releases_the_role() {
    quiet_injected_panics();
    for (name, builder) in strategies() {
        let pool = Pool::builder().frame_count(64).build().unwrap();
        let mut h = pool.handle().unwrap();
        let faults = Faults::new();
        let q = build(builder, &faults);
        let r = catch_unwind(AssertUnwindSafe(|| {
            q.with_driver(|_| std::panic::panic_any::<&str>(BOOM))
        }));
        assert!(r.is_err(), "{name}");
        assert_eq!(q.xmit(packet(&mut h, 0)), Verdict::Success, "{name}");
        assert_eq!(
            faults.sent.load(Ordering::Relaxed),
            1,
            "{name}: the next xmit ran"
        );
        // And the role can be taken again by the control path.
        q.with_driver(|d| assert!(!d.is_stopped()));
        assert_conserved(name, &q, &faults, 1);
    }
}

#[test]
fn random_panics_under_load_lose_nothing() {
    quiet_injected_panics();
    const PRODUCERS: u64 = 16;
    let per_producer: u64 = if cfg!(debug_assertions) {
        3_000
    } else {
        20_000
    };
    for (name, builder) in strategies() {
        let frames = 16_384;
        let pool = Pool::builder()
            .frame_count(frames)
            .max_owners(32)
            .build()
            .unwrap();
        let faults = Faults::new();
        faults.driver_one_in.store(97, Ordering::Relaxed);
        faults.enqueue_one_in.store(1_009, Ordering::Relaxed);
        let q = Arc::new(build(builder, &faults));
        let start = Arc::new(Barrier::new(PRODUCERS as usize));
        let panics_seen = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (q, pool, start, seen) =
                    (q.clone(), pool.clone(), start.clone(), panics_seen.clone());
                thread::spawn(move || {
                    let mut h = pool.handle().unwrap();
                    start.wait();
                    for i in 0..per_producer {
                        let mut skb = h
                            .alloc_wait(FRAME_WAIT)
                            .expect("no frame came home within 30 s: one is stranded");
                        skb.put_slice(&(p << 32 | i).to_le_bytes()).unwrap();
                        if catch_unwind(AssertUnwindSafe(|| q.xmit(skb))).is_err() {
                            seen.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        faults.driver_one_in.store(0, Ordering::Relaxed);
        faults.enqueue_one_in.store(0, Ordering::Relaxed);
        while q.poll() {}
        let offered = PRODUCERS * per_producer;
        assert!(
            panics_seen.load(Ordering::Relaxed) > 0,
            "{name}: no fault fired"
        );
        assert!(q.stats().drops_for(DropReason::Panic) > 0, "{name}");
        assert_eq!(q.backlog(), 0, "{name}");
        assert!(q.defer_list_is_empty(), "{name}");
        assert_conserved(name, &q, &faults, offered);
        assert_eq!(pool.stats().in_use, 0, "{name}: {:?}", pool.stats());
        assert_eq!(pool.stats().free, frames, "{name}");
    }
}

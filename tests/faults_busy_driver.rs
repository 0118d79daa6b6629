//! Faults: a driver that stays busy. For every strategy, with and without a [`TxWorker`], the
//! backlog stays bounded by the qdisc's limit (plus one requeued batch), the excess is counted
//! as drops, and while nothing can progress no thread burns a core: the process's CPU time
//! (getrusage) over a window stays far below the window. When the driver says it has room
//! ([`TxQueue::wake`]) everything left is sent and the conservation law holds exactly.
//!
//! Two busy drivers: one that also reports itself stopped (`Driver::is_stopped`, the kernel's
//! `netif_tx_stop_queue`), and one that only answers "busy" from `xmit` (`TxResult::stopped`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use llist_defer::Fifo;
use qdisc::{
    Driver, DropReason, FifoBuilder, Pfifo, Strategy, ToFree, TxQueue, TxQueueBuilder, TxResult,
    TxWorker,
};
use skb_pool::{Pool, Skb};

const PRODUCERS: usize = 16;
const PER_PRODUCER: u64 = 200;
const LIMIT: u64 = 100;
const BULK: usize = 16;

/// CPU-time assertions need the process to themselves: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[derive(Default)]
struct Link {
    busy: AtomicBool,
    sent: AtomicU64,
    calls: AtomicU64,
}

struct BusyDriver {
    link: Arc<Link>,
    /// Whether `is_stopped` tells the truth, or only `xmit` says "busy".
    reports_stopped: bool,
}

impl Driver<Skb> for BusyDriver {
    fn xmit(&mut self, batch: &mut Fifo<Skb>, _: &mut ToFree<Skb>) -> TxResult {
        self.link.calls.fetch_add(1, Ordering::Relaxed);
        if self.link.busy.load(Ordering::Acquire) {
            return TxResult {
                sent: 0,
                stopped: true,
            };
        }
        let n = batch.len();
        *batch = Fifo::new();
        self.link.sent.fetch_add(n as u64, Ordering::Relaxed);
        TxResult {
            sent: n,
            stopped: false,
        }
    }

    fn is_stopped(&self) -> bool {
        self.reports_stopped && self.link.busy.load(Ordering::Acquire)
    }
}

fn cpu_time() -> Duration {
    // SAFETY: `rusage` is plain old data, and getrusage only writes into the struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut ru), 0);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time the whole process uses over `window` of wall time (the window is a measurement
/// interval, not synchronization).
fn cpu_over(window: Duration) -> Duration {
    let c0 = cpu_time();
    thread::sleep(window);
    cpu_time() - c0
}

fn strategies() -> Vec<(&'static str, TxQueueBuilder)> {
    let b = || TxQueue::builder().quota(8).bulk(BULK);
    vec![
        ("busylock", b().strategy(Strategy::BusyLock)),
        ("defer", b().strategy(Strategy::DeferList)),
        (
            "defer-kernel-exact",
            b().strategy(Strategy::DeferList).kernel_exact(),
        ),
        ("nolock", b().strategy(Strategy::NoLock)),
    ]
}

/// Runs `f` on a thread and fails the test if it has not finished within `limit`: a livelocked
/// engine (a thread spinning inside `xmit`) fails instead of hanging the suite.
fn within<T: Send + 'static>(
    name: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{name}: did not finish in {limit:?}: livelock"))
}

fn pfifo() -> Pfifo<Skb> {
    FifoBuilder::pfifo().limit(LIMIT).build().unwrap()
}

/// 16 producers offer 200 packets each to a queue whose driver is busy, then wait. Returns the
/// pool, the link and the packets offered.
fn offer_to_busy<Q: qdisc::Qdisc<Skb> + 'static, D: Driver<Skb> + 'static>(
    q: Arc<TxQueue<Skb, Q, D>>,
    pool: &Pool,
) -> u64 {
    let start = Arc::new(Barrier::new(PRODUCERS));
    let threads: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (q, pool, start) = (q.clone(), pool.clone(), start.clone());
            thread::spawn(move || {
                let mut h = pool.handle().unwrap();
                start.wait();
                for i in 0..PER_PRODUCER {
                    let mut skb = h.alloc().expect("enough frames for every packet");
                    skb.put_slice(&((p as u64) << 32 | i).to_le_bytes())
                        .unwrap();
                    q.xmit(skb);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    PRODUCERS as u64 * PER_PRODUCER
}

fn check_bounded_and_idle<Q: qdisc::Qdisc<Skb>, D: Driver<Skb>>(
    name: &str,
    q: &TxQueue<Skb, Q, D>,
    offered: u64,
) {
    let backlog = q.backlog() as u64;
    assert!(
        backlog <= LIMIT + BULK as u64,
        "{name}: backlog {backlog} over the qdisc limit {LIMIT} + one batch"
    );
    let s = q.stats();
    assert!(s.drops_for(DropReason::QdiscOverlimit) > 0, "{name}: {s}");
    assert_eq!(offered, s.sent + s.dropped() + backlog, "{name}: {s}");
    let window = Duration::from_millis(300);
    let used = cpu_over(window);
    assert!(
        used < window / 10,
        "{name}: {used:?} of CPU in a {window:?} window while the driver is busy: a thread spins"
    );
}

fn run_busy(worker: bool, reports_stopped: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for (name, builder) in strategies() {
        let name = format!(
            "{name}{}{}",
            if worker { "+worker" } else { "" },
            if reports_stopped {
                "+is_stopped"
            } else {
                "+busy-only"
            }
        );
        let n = name.clone();
        within(&name, Duration::from_secs(60), move || {
            let name = n;
            let frames = PRODUCERS * PER_PRODUCER as usize + 64;
            let pool = Pool::builder()
                .frame_count(frames.next_power_of_two())
                .max_owners(32)
                .build()
                .unwrap();
            let link = Arc::new(Link::default());
            link.busy.store(true, Ordering::Release);
            let driver = BusyDriver {
                link: link.clone(),
                reports_stopped,
            };
            let (q, w) = if worker {
                let w = TxWorker::spawn(builder, pfifo(), driver).unwrap();
                (w.queue().clone(), Some(w))
            } else {
                (Arc::new(builder.build(pfifo(), driver).unwrap()), None)
            };
            let offered = offer_to_busy(q.clone(), &pool);
            check_bounded_and_idle(&name, &q, offered);
            let calls = link.calls.load(Ordering::Relaxed);
            assert!(
                calls <= offered * 2,
                "{name}: {calls} driver calls for {offered} packets: the engine polls a busy driver"
            );
            // The driver has room again: one wake sends everything left.
            link.busy.store(false, Ordering::Release);
            while q.wake() {}
            if let Some(w) = w {
                w.stop();
            }
            let s = q.stats();
            assert_eq!(q.backlog(), 0, "{name}");
            assert_eq!(s.sent, link.sent.load(Ordering::Relaxed), "{name}");
            assert!(s.sent >= LIMIT, "{name}: the backlog went out: {s}");
            assert_eq!(offered, s.sent + s.dropped(), "{name}: {s}");
            drop(q);
            assert_eq!(
                pool.stats().free,
                pool.stats().frame_count,
                "{name}: frames home"
            );
        });
    }
}

#[test]
fn busy_driver_that_reports_stopped() {
    run_busy(false, true);
}

#[test]
fn busy_driver_that_reports_stopped_with_worker() {
    run_busy(true, true);
}

#[test]
fn busy_driver_that_only_answers_busy() {
    run_busy(false, false);
}

#[test]
fn busy_driver_that_only_answers_busy_with_worker() {
    run_busy(true, false);
}

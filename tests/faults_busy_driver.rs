//! Faults: a driver that stays busy. For every strategy, with and without a [`TxWorker`], the
//! backlog stays bounded by the qdisc's limit (plus one requeued batch), the excess is counted
//! as drops, and while nothing can progress no thread polls the driver or burns a core. When
//! the driver says it has room ([`TxQueue::wake`]) everything left is sent and the conservation
//! law holds exactly.
//!
//! "Nobody polls" is checked by counting: the driver counts every call into it (`xmit` and
//! `is_stopped`, the two things a runner asks), and once the producers have returned the count
//! must stay put over a quiet window (a worker may finish the poll it was handed, a bounded
//! handful of calls). A thread polling the stopped queue calls the driver at every pass, so
//! it shows however little CPU a busy machine gives it. The process's CPU time over the same
//! window (getrusage: time on a CPU, not time waiting for one) is a backstop for a spin that
//! does not reach the driver, with a bound far above what an idle process uses.
//!
//! Two busy drivers: one that also reports itself stopped (`Driver::is_stopped`, the kernel's
//! `netif_tx_stop_queue`), and one that only answers "busy" from `xmit` (`TxResult::stopped`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

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

/// Calls into the driver per packet offered while it is busy, at most. A runner that finds the
/// driver busy asks it at most four times before it lets go (`is_stopped` before dequeuing, then
/// `is_stopped` and `xmit` for the batch, `is_stopped` once more on the way out), and every run
/// is started by an `xmit` (or by the one reschedule an `xmit` that found the role taken asks
/// for): at most 4 a packet, whatever the interleaving. Twice that leaves room; a thread that
/// retried a busy driver would call it thousands of times a packet.
const TOUCHES_PER_PACKET: u64 = 8;
/// Calls into the driver after the producers have returned, at most: none without a worker
/// (no thread of ours runs the queue), with one the poll it may still be finishing plus the one
/// that may be pending, a few calls each.
const TRAILING_TOUCHES_WITH_WORKER: u64 = 32;
/// The quiet window over which nothing may poll. A measurement interval, not a wait for
/// anything.
const WINDOW: Duration = Duration::from_millis(300);
/// CPU time the whole process may use over [`WINDOW`]. Measured idle (2 cores, load 3-4):
/// 37-250 µs, so this is over 100 times that; a thread spinning through the window uses far
/// more unless it got less than a tenth of one core over the whole 300 ms. CPU time counts
/// only time on a CPU, so a busy machine does not add to it (it can only hide a spin, which the
/// call count above does not depend on).
const WINDOW_CPU_BUDGET: Duration = Duration::from_millis(30);

/// The CPU-time backstop needs the process to itself: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[derive(Default)]
struct Link {
    busy: AtomicBool,
    sent: AtomicU64,
    /// `xmit` calls.
    calls: AtomicU64,
    /// Every call into the driver, `xmit` and `is_stopped` alike: what a runner does at each
    /// pass over the queue, so what a thread polling it would do over and over.
    touches: AtomicU64,
}

struct BusyDriver {
    link: Arc<Link>,
    /// Whether `is_stopped` tells the truth, or only `xmit` says "busy".
    reports_stopped: bool,
}

impl Driver<Skb> for BusyDriver {
    fn xmit(&mut self, batch: &mut Fifo<Skb>, _: &mut ToFree<Skb>) -> TxResult {
        self.link.calls.fetch_add(1, Ordering::Relaxed);
        self.link.touches.fetch_add(1, Ordering::Relaxed);
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
        self.link.touches.fetch_add(1, Ordering::Relaxed);
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

fn check_bounded<Q: qdisc::Qdisc<Skb>, D: Driver<Skb>>(
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
}

/// With the producers returned and the driver still busy: over [`WINDOW`] nothing calls the
/// driver (beyond a worker's trailing poll) and the process stays idle.
fn check_idle(name: &str, link: &Link, worker: bool) {
    let trailing = if worker {
        TRAILING_TOUCHES_WITH_WORKER
    } else {
        0
    };
    let (touches0, cpu0, t0) = (
        link.touches.load(Ordering::Relaxed),
        cpu_time(),
        Instant::now(),
    );
    thread::sleep(WINDOW);
    let (touches, cpu, elapsed) = (
        link.touches.load(Ordering::Relaxed) - touches0,
        cpu_time() - cpu0,
        t0.elapsed(),
    );
    assert!(
        touches <= trailing,
        "{name}: {touches} calls into the busy driver in {elapsed:?} after the producers \
         returned (at most {trailing}): a thread polls the stopped queue"
    );
    assert!(
        cpu < WINDOW_CPU_BUDGET,
        "{name}: {cpu:?} of CPU in {elapsed:?} while the driver is busy (budget \
         {WINDOW_CPU_BUDGET:?}): a thread spins"
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
            check_bounded(&name, &q, offered);
            let calls = link.calls.load(Ordering::Relaxed);
            assert!(
                calls <= offered * 2,
                "{name}: {calls} driver calls for {offered} packets: the engine polls a busy driver"
            );
            // `calls` stays 0 for a driver that reports itself stopped (nobody calls `xmit`);
            // every question counts here.
            let touches = link.touches.load(Ordering::Relaxed);
            assert!(
                touches <= offered * TOUCHES_PER_PACKET,
                "{name}: {touches} calls into the driver for {offered} packets (at most \
                 {TOUCHES_PER_PACKET} a packet): the engine polls a busy driver"
            );
            check_idle(&name, &link, worker);
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

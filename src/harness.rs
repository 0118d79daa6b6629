//! The transmit workload shared by the `xmit` criterion bench and the `pktgen` example: P
//! producer threads allocate pool frames, write a packet and transmit it through one queue,
//! using one of the engine's strategies or a peer a Rust user would pick instead.
//!
//! Each producer owns the frames it allocates, so in-flight packets are bounded by the pool: a
//! producer with none left flushes its pending frees and waits (backpressure), as a real
//! dataplane does. Every packet ends sent, dropped with a reason, or still queued; a [`Cell`]
//! counts all three so callers can check the conservation law.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_queue::SegQueue;
use llist_defer::Fifo;
use qdisc::{
    Driver, NullDriver, Overflow, Pfifo, PfifoFast, Qdisc, Strategy, ToFree, TxQueue, Verdict,
};
use skb_pool::{Pool, Skb};

/// What transmits: one of our strategies, or a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// `TxQueue` with this strategy and the qdisc in the path.
    Engine(Strategy),
    /// `std::sync::Mutex<VecDeque>`: each producer pushes, then drains inline under the lock.
    Mutex,
    /// `crossbeam_queue::SegQueue` to a dedicated TX thread.
    SegQueue,
}

impl Contender {
    /// The stable name used in tables and JSON: `busylock`, `defer`, `nolock`, `mutex`,
    /// `segqueue`.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Engine(s) => s.name(),
            Contender::Mutex => "mutex",
            Contender::SegQueue => "segqueue",
        }
    }

    /// Every contender of the comparison, ours first.
    pub const ALL: [Contender; 5] = [
        Contender::Engine(Strategy::BusyLock),
        Contender::Engine(Strategy::DeferList),
        Contender::Engine(Strategy::NoLock),
        Contender::Mutex,
        Contender::SegQueue,
    ];
}

/// The qdisc in front of the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QdiscKind {
    /// `pfifo`, limit 1000.
    Pfifo,
    /// `pfifo_fast`, 3 bands of 1000.
    PfifoFast,
    /// `fq` with the kernel's defaults.
    Fq,
}

impl QdiscKind {
    /// Builds the qdisc, boxed so one queue type serves all kinds.
    pub fn build(self) -> Box<dyn Qdisc<Skb>> {
        match self {
            QdiscKind::Pfifo => Box::new(Pfifo::new()),
            QdiscKind::PfifoFast => Box::new(PfifoFast::new()),
            QdiscKind::Fq => Box::new(
                qdisc::Fq::<Skb>::builder()
                    .build::<Skb>()
                    .expect("fq defaults"),
            ),
        }
    }

    /// The `tc` name.
    pub fn name(self) -> &'static str {
        match self {
            QdiscKind::Pfifo => "pfifo",
            QdiscKind::PfifoFast => "pfifo_fast",
            QdiscKind::Fq => "fq",
        }
    }
}

/// One measurement's settings.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Who transmits.
    pub contender: Contender,
    /// Producer threads.
    pub producers: usize,
    /// Packets each producer offers (`None`: until `stop`).
    pub packets_per_producer: Option<u64>,
    /// Frames in the pool, shared by all producers (in-flight packets are bounded by it: keep it
    /// at or below the qdisc's limit and backpressure, not tail drop, governs overload).
    pub frames: usize,
    /// Packet length, bytes.
    pub size: usize,
    /// Distinct flows, spread round-robin over each producer's packets.
    pub flows: u32,
    /// The qdisc (engine only).
    pub qdisc: QdiscKind,
    /// Null driver work per packet, ns.
    pub driver_ns: u32,
    /// Defer list burst limit (engine only).
    pub burst_limit: usize,
    /// Over-limit policy (engine only).
    pub overflow: Overflow,
    /// Keep the xmit latency histogram.
    pub latency_histogram: bool,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            contender: Contender::Engine(Strategy::DeferList),
            producers: 2,
            packets_per_producer: Some(100_000),
            frames: 1000,
            size: 64,
            flows: 1,
            qdisc: QdiscKind::Pfifo,
            driver_ns: NullDriver::DEFAULT_COST_NS,
            burst_limit: 1000,
            overflow: Overflow::Drop,
            latency_histogram: false,
        }
    }
}

/// Live counters, readable while a run goes on (for per-second progress lines).
#[derive(Debug, Default)]
pub struct Live {
    /// Packets offered to `xmit` (or the peer's push).
    pub offered: AtomicU64,
    /// Packets whose `xmit` returned `Dropped`.
    pub dropped_now: AtomicU64,
    /// Set to stop an open-ended run.
    pub stop: AtomicBool,
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    /// Packets offered.
    pub offered: u64,
    /// Packets the driver accepted.
    pub sent: u64,
    /// Packets dropped, any reason.
    pub dropped: u64,
    /// Packets still queued at the end (0 after a clean finish).
    pub queued: u64,
    /// Wall time from start to the last packet handled.
    pub elapsed: Duration,
    /// Process CPU time (user + system) over the same span.
    pub cpu: Duration,
    /// The engine's stats (engine only).
    pub xmit: Option<qdisc::XmitStats>,
    /// The qdisc's `tc -s` text (engine only).
    pub qdisc_show: Option<String>,
    /// The pool's counters at the end.
    pub pool: Option<skb_pool::PoolStats>,
}

impl Cell {
    /// Transmitted packets per second.
    pub fn pps(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU nanoseconds per transmitted packet.
    pub fn cpu_ns_per_pkt(&self) -> f64 {
        self.cpu.as_nanos() as f64 / (self.sent.max(1)) as f64
    }

    /// Whether offered = sent + dropped + queued.
    pub fn conserved(&self) -> bool {
        self.offered == self.sent + self.dropped + self.queued
    }
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offered {} sent {} dropped {} queued {} in {:.3} s: {:.3} Mpps, {:.1} CPU ns/pkt",
            self.offered,
            self.sent,
            self.dropped,
            self.queued,
            self.elapsed.as_secs_f64(),
            self.pps() / 1e6,
            self.cpu_ns_per_pkt()
        )
    }
}

/// Process CPU time (user + system).
pub fn process_cpu_time() -> Duration {
    let mut ru = core::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` into the pointer we pass, which is valid and large
    // enough; RUSAGE_SELF is always a valid `who`.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } == 0;
    if !ok {
        return Duration::ZERO;
    }
    // SAFETY: getrusage succeeded and filled the struct (it was zeroed besides).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// A frame source for one producer thread: allocation with backpressure.
struct Source {
    handle: skb_pool::PoolHandle,
    seq: u64,
    flows: u32,
    size: usize,
    producer: u64,
}

impl Source {
    /// A filled packet, waiting for a frame if the producer has none left.
    fn next(&mut self, stop: &AtomicBool) -> Option<Skb> {
        loop {
            match self.handle.alloc() {
                Ok(mut skb) => {
                    let data = skb.put(self.size).ok()?;
                    let head = (self.producer << 48 | self.seq).to_be_bytes();
                    let n = head.len().min(data.len());
                    data[..n].copy_from_slice(&head[..n]);
                    skb.set_flow_hash((self.seq % u64::from(self.flows.max(1))) as u32);
                    self.seq += 1;
                    return Some(skb);
                }
                Err(_) => {
                    if stop.load(Ordering::Relaxed) {
                        return None;
                    }
                    // Our frames are in flight: send home the ones we freed for others, take
                    // back ours, and let the thread holding them run.
                    self.handle.flush_frees();
                    self.handle.flush_remote();
                    thread::yield_now();
                }
            }
        }
    }
}

/// Runs one workload to completion (or until `live.stop`), returning what it measured.
///
/// # Panics
///
/// If the pool cannot be built (the workload asks for an impossible frame count).
pub fn run(w: &Workload, live: &Arc<Live>) -> Cell {
    let pool = Pool::builder()
        .frame_count(w.frames.max(64))
        .frame_size(2048)
        .remote_batch(16)
        .max_owners(w.producers + 2)
        .build()
        .expect("building the frame pool");
    let size = w.size.clamp(14, 2048 - pool.headroom());
    match w.contender {
        Contender::Engine(strategy) => run_engine(w, strategy, &pool, size, live),
        Contender::Mutex => run_mutex(w, &pool, size, live),
        Contender::SegQueue => run_segqueue(w, &pool, size, live),
    }
}

fn spawn_producers<F>(
    w: &Workload,
    pool: &Pool,
    size: usize,
    live: &Arc<Live>,
    start: &Arc<Barrier>,
    send: F,
) -> Vec<thread::JoinHandle<()>>
where
    F: Fn(Skb) -> bool + Send + Sync + Clone + 'static,
{
    (0..w.producers)
        .map(|p| {
            let (pool, live, start, send) =
                (pool.clone(), live.clone(), start.clone(), send.clone());
            let (quota, flows) = (w.packets_per_producer, w.flows);
            thread::spawn(move || {
                let handle = pool.handle().expect("a pool handle per producer");
                let mut src = Source {
                    handle,
                    seq: 0,
                    flows,
                    size,
                    producer: p as u64,
                };
                start.wait();
                let mut offered = 0u64;
                let mut dropped = 0u64;
                while quota.is_none_or(|q| offered < q) && !live.stop.load(Ordering::Relaxed) {
                    let Some(skb) = src.next(&live.stop) else {
                        break;
                    };
                    offered += 1;
                    if !send(skb) {
                        dropped += 1;
                    }
                    if offered % 1024 == 0 {
                        live.offered.fetch_add(1024, Ordering::Relaxed);
                        live.dropped_now.fetch_add(dropped, Ordering::Relaxed);
                        dropped = 0;
                    }
                }
                live.offered.fetch_add(offered % 1024, Ordering::Relaxed);
                live.dropped_now.fetch_add(dropped, Ordering::Relaxed);
                src.handle.flush_frees();
            })
        })
        .collect()
}

fn run_engine(
    w: &Workload,
    strategy: Strategy,
    pool: &Pool,
    size: usize,
    live: &Arc<Live>,
) -> Cell {
    let txq = Arc::new(
        TxQueue::builder()
            .strategy(strategy)
            .burst_limit(w.burst_limit)
            .overflow(w.overflow)
            .latency_histogram(w.latency_histogram)
            .build(w.qdisc.build(), NullDriver::with_cost_ns(w.driver_ns))
            .expect("valid engine settings"),
    );
    let start = Arc::new(Barrier::new(w.producers + 1));
    let q = txq.clone();
    let producers = spawn_producers(w, pool, size, live, &start, move |skb| {
        !matches!(q.xmit(skb), Verdict::Dropped(_))
    });
    start.wait();
    let (t0, c0) = (Instant::now(), process_cpu_time());
    for p in producers {
        p.join().expect("producer thread");
    }
    while txq.poll() {}
    let (elapsed, cpu) = (t0.elapsed(), process_cpu_time() - c0);
    let stats = txq.stats();
    let merged = txq.qdisc_stats();
    let show = txq.with_qdisc(|q| format!("{}", ShowQdisc(&**q, merged)));
    Cell {
        offered: live.offered.load(Ordering::Relaxed),
        sent: stats.sent,
        dropped: stats.dropped(),
        queued: txq.backlog() as u64,
        elapsed,
        cpu,
        xmit: Some(stats),
        qdisc_show: Some(show),
        pool: Some(pool.stats()),
    }
}

/// `tc -s qdisc show`-shaped text for a boxed qdisc plus the engine-merged counters.
struct ShowQdisc<'a>(&'a dyn Qdisc<Skb>, qdisc::QdiscStats);

impl fmt::Display for ShowQdisc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "qdisc {} 0: root refcnt 2", self.0.kind())?;
        write!(f, "{}", self.1)?;
        self.0.fmt_xstats(f)
    }
}

fn run_mutex(w: &Workload, pool: &Pool, size: usize, live: &Arc<Live>) -> Cell {
    struct Shared {
        queue: VecDeque<Skb>,
        driver: NullDriver,
        batch: Fifo<Skb>,
    }
    let shared = Arc::new(Mutex::new(Shared {
        queue: VecDeque::with_capacity(w.frames),
        driver: NullDriver::with_cost_ns(w.driver_ns),
        batch: Fifo::new(),
    }));
    let start = Arc::new(Barrier::new(w.producers + 1));
    let s = shared.clone();
    let producers = spawn_producers(w, pool, size, live, &start, move |skb| {
        let mut g = s.lock().unwrap_or_else(|e| e.into_inner());
        g.queue.push_back(skb);
        let Shared {
            queue,
            driver,
            batch,
        } = &mut *g;
        batch.extend(queue.drain(..));
        let mut to_free = ToFree::new();
        driver.xmit(batch, &mut to_free);
        true
    });
    start.wait();
    let (t0, c0) = (Instant::now(), process_cpu_time());
    for p in producers {
        p.join().expect("producer thread");
    }
    let (elapsed, cpu) = (t0.elapsed(), process_cpu_time() - c0);
    let g = shared.lock().unwrap_or_else(|e| e.into_inner());
    Cell {
        offered: live.offered.load(Ordering::Relaxed),
        sent: g.driver.sent(),
        dropped: 0,
        queued: g.queue.len() as u64,
        elapsed,
        cpu,
        pool: Some(pool.stats()),
        ..Cell::default()
    }
}

fn run_segqueue(w: &Workload, pool: &Pool, size: usize, live: &Arc<Live>) -> Cell {
    let queue = Arc::new(SegQueue::<Skb>::new());
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(w.producers + 2));
    let tx = {
        let (queue, done, start, pool) = (queue.clone(), done.clone(), start.clone(), pool.clone());
        let driver_ns = w.driver_ns;
        thread::spawn(move || {
            let mut handle = pool.handle().expect("a pool handle for the TX thread");
            let mut driver = NullDriver::with_cost_ns(driver_ns);
            let mut batch = Fifo::new();
            let mut to_free = ToFree::new();
            start.wait();
            loop {
                while batch.len() < 64 {
                    let Some(skb) = queue.pop() else { break };
                    batch.push_back(skb);
                }
                if batch.is_empty() {
                    if done.load(Ordering::Acquire) && queue.is_empty() {
                        break;
                    }
                    handle.flush_frees();
                    thread::yield_now();
                    continue;
                }
                driver.xmit(&mut batch, &mut to_free);
            }
            handle.flush_frees();
            driver.sent()
        })
    };
    let q = queue.clone();
    let producers = spawn_producers(w, pool, size, live, &start, move |skb| {
        q.push(skb);
        true
    });
    start.wait();
    let (t0, c0) = (Instant::now(), process_cpu_time());
    for p in producers {
        p.join().expect("producer thread");
    }
    done.store(true, Ordering::Release);
    let sent = tx.join().expect("TX thread");
    let (elapsed, cpu) = (t0.elapsed(), process_cpu_time() - c0);
    Cell {
        offered: live.offered.load(Ordering::Relaxed),
        sent,
        dropped: 0,
        queued: queue.len() as u64,
        elapsed,
        cpu,
        pool: Some(pool.stats()),
        ..Cell::default()
    }
}

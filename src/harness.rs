//! The transmit workload shared by the `xmit` criterion bench and the `pktgen` example: P
//! producer threads allocate pool frames, write a packet and transmit it through one target,
//! which is our engine (a [`TxQueue`](qdisc::TxQueue) in front of any driver) or a peer a Rust user would pick
//! instead.
//!
//! Producers allocate from one frame pool, so in-flight packets are bounded by it: a producer
//! with no frame left flushes its pending frees and waits (backpressure), as a real dataplane
//! does. Every packet ends sent, dropped with a reason, or still queued; a [`Cell`](crate::harness::Cell) counts all
//! three so callers can check the conservation law.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_queue::SegQueue;
use llist_defer::Fifo;
use qdisc::{
    Driver, NullDriver, Overflow, Pfifo, PfifoFast, Qdisc, Strategy, ToFree, TxQueue, Verdict,
    XmitStats,
};
use skb_pool::{PerCpuStats, Pool, PoolStats, RefillOrder, Skb};

/// What transmits: one of our strategies, or a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// `TxQueue` with this strategy and the qdisc in the path.
    Engine(Strategy),
    /// `std::sync::Mutex<VecDeque>`: each producer pushes, then drains inline under the lock.
    Mutex,
    /// `crossbeam_queue::SegQueue` to a dedicated TX thread.
    SegQueue,
    /// The bound, not a contender: every producer sends through a null driver of its own (one
    /// NIC queue per producer), with no queue and no lock. No design that shares one queue can
    /// send more; at one producer it is what any queue costs on top of the driver.
    OwnQueue,
}

impl Contender {
    /// The stable name used in tables and JSON: `busylock`, `defer`, `nolock`, `mutex`,
    /// `segqueue`, `bound`.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Engine(s) => s.name(),
            Contender::Mutex => "mutex",
            Contender::SegQueue => "segqueue",
            Contender::OwnQueue => "bound",
        }
    }

    /// Every contender of the comparison, ours first, then the peers, then the bound.
    pub const ALL: [Contender; 6] = [
        Contender::Engine(Strategy::BusyLock),
        Contender::Engine(Strategy::DeferList),
        Contender::Engine(Strategy::NoLock),
        Contender::Mutex,
        Contender::SegQueue,
        Contender::OwnQueue,
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
            QdiscKind::Fq => Box::new(qdisc::FqBuilder::new().build::<Skb>().expect("fq defaults")),
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

/// Makes the driver behind the engine (called once per run).
pub type DriverFactory = Arc<dyn Fn() -> Box<dyn Driver<Skb>> + Send + Sync>;

/// Writes a packet into a fresh frame: `(frame, producer, sequence, flow)`. The default writes
/// the producer and sequence into the first bytes.
pub type PacketWriter = Arc<dyn Fn(&mut Skb, u64, u64, u32) + Send + Sync>;

/// One measurement's settings.
#[derive(Clone)]
pub struct Workload {
    /// Who transmits.
    pub contender: Contender,
    /// Producer threads.
    pub producers: usize,
    /// Packets each producer offers (`None`: until the duration ends).
    pub packets_per_producer: Option<u64>,
    /// How long to run (`None`: until every producer offered its packets).
    pub duration: Option<Duration>,
    /// Frames in the pool, shared by all producers (in-flight packets are bounded by it: keep it
    /// at or below the qdisc's limit and backpressure, not tail drop, governs overload).
    pub frames: usize,
    /// Packet length, bytes (the frame's data, headers included).
    pub size: usize,
    /// Distinct flows, round-robin over each producer's packets (the flow hash).
    pub flows: u32,
    /// Per-producer pacing, packets per second (`None`: as fast as possible).
    pub rate_pps: Option<u64>,
    /// The qdisc (engine only).
    pub qdisc: QdiscKind,
    /// Null driver work per packet, ns (when no `driver` factory is given, and for the peers).
    pub driver_ns: u32,
    /// The engine's driver; `None`: a [`NullDriver`] of `driver_ns`.
    pub driver: Option<DriverFactory>,
    /// How packets are written; `None`: producer and sequence in the first bytes.
    pub writer: Option<PacketWriter>,
    /// Defer list burst limit (engine only).
    pub burst_limit: usize,
    /// Over-limit policy (engine only).
    pub overflow: Overflow,
    /// Keep the xmit latency histogram.
    pub latency_histogram: bool,
    /// How producers allocate frames: a [`PoolHandle`](skb_pool::PoolHandle) each, or the
    /// pool's per-CPU caches ([`Pool::alloc`]).
    pub pool: PoolKind,
    /// Packets per transmit call: 1 sends each with `xmit`; more hands bursts to
    /// [`Target::xmit_burst`] (`TxQueue::xmit_bulk` for the engine).
    pub burst: usize,
    /// A producer out of frames sleeps until one of its frames is freed (if the target
    /// [may park](Target::may_park)) instead of yielding between polls: less CPU per packet,
    /// but the freeing thread pays the wake-ups.
    pub park: bool,
    /// The engine's runner hands drained batches to the qdisc whole and dequeues in batches
    /// (`TxQueueBuilder::qdisc_batch`, the default); `false`: one packet at a time, for the A/B.
    pub qdisc_batch: bool,
    /// `TxQueueBuilder::self_send_burst`: bursts of at least this many packets are sent by
    /// their own producer under the root lock (`usize::MAX`: never).
    pub self_send_burst: usize,
    /// `TxQueueBuilder::drain_hints`: pushes leave drain hints for the runner.
    pub drain_hints: bool,
    /// `TxQueueBuilder::biased_root`: the root lock is lent to a lone thread.
    pub biased_root: bool,
    /// `PoolBuilder::refill_order`: the order per-CPU caches hand out frames that came home.
    pub refill_order: RefillOrder,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            contender: Contender::Engine(Strategy::DeferList),
            producers: 2,
            packets_per_producer: Some(100_000),
            duration: None,
            frames: 1000,
            size: 64,
            burst: 1,
            park: false,
            qdisc_batch: true,
            self_send_burst: qdisc::DEFAULT_SELF_SEND_BURST,
            drain_hints: true,
            biased_root: true,
            refill_order: RefillOrder::Freed,
            flows: 1,
            rate_pps: None,
            qdisc: QdiscKind::Pfifo,
            driver_ns: NullDriver::DEFAULT_COST_NS,
            driver: None,
            writer: None,
            burst_limit: 1000,
            overflow: Overflow::Drop,
            latency_histogram: false,
            pool: PoolKind::Owner,
        }
    }
}

/// How the producers of a [`Workload`] allocate frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    /// One [`PoolHandle`](skb_pool::PoolHandle) per producer thread (per-owner caches).
    Owner,
    /// No handle: [`Pool::alloc`] from the cache of the CPU the producer runs on.
    PerCpu,
}

impl PoolKind {
    /// The name `pktgen --pool` takes.
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Owner => "owner",
            PoolKind::PerCpu => "percpu",
        }
    }
}

/// Where a producer gets frames: its own handle, or the pool's per-CPU caches.
enum FrameSource {
    Owner(skb_pool::PoolHandle),
    PerCpu(Pool),
}

impl FrameSource {
    fn new(pool: &Pool, kind: PoolKind) -> FrameSource {
        match kind {
            PoolKind::Owner => {
                FrameSource::Owner(pool.handle().expect("a pool handle per producer"))
            }
            PoolKind::PerCpu => FrameSource::PerCpu(pool.clone()),
        }
    }

    #[inline]
    fn alloc(&mut self) -> Result<Skb, skb_pool::PoolError> {
        match self {
            FrameSource::Owner(h) => h.alloc(),
            FrameSource::PerCpu(p) => p.alloc(),
        }
    }

    /// Waits up to `WAIT_NAP` for a frame (both paths drain every source they can reach).
    fn alloc_wait(&mut self) -> Result<Skb, skb_pool::PoolError> {
        let nap = skb_pool::PoolHandle::WAIT_NAP;
        match self {
            FrameSource::Owner(h) => h.alloc_wait(nap),
            FrameSource::PerCpu(p) => p.alloc_wait(nap),
        }
    }

    /// Sends home the frames this producer freed for others and takes back its own (a
    /// handle's batches; the per-CPU path holds nothing back).
    fn flush(&mut self) {
        if let FrameSource::Owner(h) = self {
            h.flush_frees();
            h.flush_remote();
        }
    }
}

impl fmt::Debug for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workload")
            .field("contender", &self.contender)
            .field("producers", &self.producers)
            .field("pool", &self.pool)
            .field("refill_order", &self.refill_order)
            .field("qdisc", &self.qdisc)
            .field("size", &self.size)
            .field("burst", &self.burst)
            .field("park", &self.park)
            .field("qdisc_batch", &self.qdisc_batch)
            .finish_non_exhaustive()
    }
}

/// A progress sample, cumulative since the start.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tick {
    /// Time since the start.
    pub elapsed: Duration,
    /// Packets offered.
    pub offered: u64,
    /// Packets sent.
    pub sent: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Packets dropped.
    pub dropped: u64,
    /// Process CPU time.
    pub cpu: Duration,
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
    pub xmit: Option<XmitStats>,
    /// The qdisc's `tc -s qdisc show` text (engine only).
    pub qdisc_show: Option<String>,
    /// The pool's counters at the end.
    pub pool: Option<PoolStats>,
    /// The pool's per-CPU counters at the end.
    pub per_cpu: Option<PerCpuStats>,
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

    /// Records `pool`'s counters as they are at the end of the run (every thread that held
    /// its frames joined).
    fn with_pool_stats(mut self, pool: &Pool) -> Cell {
        self.pool = Some(pool.stats());
        self.per_cpu = Some(pool.per_cpu_stats());
        self
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

/// The median of `xs` (the mean of the middle two for an even count), for benches that
/// repeat a measurement on a noisy machine. Panics on an empty slice.
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
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

/// Where producers send, and what it has done so far: our engine, a peer, or anything a caller
/// wraps (an AF_XDP device).
pub trait Target: Send + Sync + 'static {
    /// Transmits; `false` if the packet was dropped on the spot.
    fn xmit(&self, skb: Skb) -> bool;
    /// Transmits a burst, leaving `skbs` empty; returns how many were dropped on the spot.
    /// By default one by one through [`xmit`](Target::xmit).
    fn xmit_burst(&self, skbs: &mut Vec<Skb>) -> usize {
        skbs.drain(..).map(|s| usize::from(!self.xmit(s))).sum()
    }
    /// Sent so far (packets, bytes) and dropped so far.
    fn progress(&self) -> (u64, u64, u64);
    /// Called by a producer that found no free frame: a chance to reap completions and kick.
    fn poll(&self) {}
    /// Whether a producer that found no free frame may sleep until one comes back
    /// ([`PoolHandle::alloc_wait`](skb_pool::PoolHandle::alloc_wait), woken by the free):
    /// only if frames come back without that producer's [`poll`](Target::poll), because some
    /// other thread frees them once sent. Otherwise it yields between polls. By default `false`.
    fn may_park(&self) -> bool {
        false
    }
}

impl<Q: Qdisc<Skb> + 'static, D: Driver<Skb> + 'static> Target for TxQueue<Skb, Q, D> {
    #[inline]
    fn xmit(&self, skb: Skb) -> bool {
        !matches!(TxQueue::xmit(self, skb), Verdict::Dropped(_))
    }
    fn xmit_burst(&self, skbs: &mut Vec<Skb>) -> usize {
        self.xmit_bulk(skbs.drain(..)).dropped
    }
    fn progress(&self) -> (u64, u64, u64) {
        let s = self.stats();
        (s.sent, s.sent_bytes, s.dropped())
    }
    /// The runner frees what the driver took (the null and UDP drivers free in `xmit`), so
    /// frames come back while producers sleep. A driver whose completions need a poll belongs
    /// behind a target that says `false` (pktgen's AF_XDP target does).
    fn may_park(&self) -> bool {
        true
    }
}

/// The `Mutex<VecDeque>` peer: push, then drain inline through the driver, under the lock.
struct MutexPeer {
    inner: Mutex<MutexInner>,
}

struct MutexInner {
    queue: VecDeque<Skb>,
    driver: NullDriver,
    batch: Fifo<Skb>,
}

impl Target for MutexPeer {
    fn xmit(&self, skb: Skb) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.queue.push_back(skb);
        let MutexInner {
            queue,
            driver,
            batch,
        } = &mut *g;
        batch.extend(queue.drain(..));
        driver.xmit(batch, &mut ToFree::new());
        true
    }
    /// A burst under one lock: what a `Mutex<VecDeque>` user with a burst in hand would write.
    fn xmit_burst(&self, skbs: &mut Vec<Skb>) -> usize {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let MutexInner {
            queue,
            driver,
            batch,
        } = &mut *g;
        queue.extend(skbs.drain(..));
        batch.extend(queue.drain(..));
        driver.xmit(batch, &mut ToFree::new());
        0
    }
    fn progress(&self) -> (u64, u64, u64) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (g.driver.sent(), g.driver.bytes(), 0)
    }
    fn may_park(&self) -> bool {
        true
    }
}

/// The `SegQueue` peer: producers push, a dedicated TX thread pops and sends.
struct SegQueuePeer {
    queue: SegQueue<Skb>,
    sent: AtomicU64,
    bytes: AtomicU64,
}

impl Target for SegQueuePeer {
    fn xmit(&self, skb: Skb) -> bool {
        self.queue.push(skb);
        true
    }
    fn progress(&self) -> (u64, u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
            0,
        )
    }
    fn may_park(&self) -> bool {
        true
    }
}

/// The frame pool a workload allocates from: `frames` frames of 2048 bytes.
///
/// # Errors
///
/// The pool's [`skb_pool::BuildError`] (for instance, no memory for the mapping).
pub fn build_pool(w: &Workload) -> Result<Pool, skb_pool::BuildError> {
    Pool::builder()
        .frame_count(w.frames.max(64))
        .frame_size(2048)
        .remote_batch(16)
        .defer_max(512)
        .max_owners(w.producers + 2)
        .refill_order(w.refill_order)
        .build()
}

/// [`run`] for our engine over qdisc `Q` and driver `D`.
fn run_engine<Q: Qdisc<Skb> + 'static, D: Driver<Skb> + 'static>(
    w: &Workload,
    strategy: Strategy,
    pool: &Pool,
    qdisc: Q,
    driver: D,
    on_tick: &mut dyn FnMut(&Tick),
) -> Cell {
    let txq = Arc::new(
        TxQueue::builder()
            .strategy(strategy)
            .burst_limit(w.burst_limit)
            .overflow(w.overflow)
            .latency_histogram(w.latency_histogram)
            .qdisc_batch(w.qdisc_batch)
            .self_send_burst(w.self_send_burst)
            .drain_hints(w.drain_hints)
            .biased_root(w.biased_root)
            .build(qdisc, driver)
            .expect("valid engine settings"),
    );
    let mut cell = drive(w, pool, txq.clone(), on_tick, &|| {
        while txq.poll() {}
    });
    let stats = txq.stats();
    let merged = txq.qdisc_stats();
    cell.queued = txq.backlog() as u64;
    cell.qdisc_show = Some(txq.with_qdisc(|q| ShowQdisc(&*q, merged).to_string()));
    cell.xmit = Some(stats);
    cell.with_pool_stats(pool)
}

/// The bound ([`Contender::OwnQueue`]): each producer thread sends through a driver of its own,
/// kept in a thread local and created at its first send.
struct OwnQueueBound {
    driver_ns: u32,
    /// Packets and bytes sent by each producer's driver, one cache line per producer, written
    /// only by that producer.
    sent: Box<[OwnSent]>,
    next_slot: AtomicUsize,
}

#[repr(align(128))]
struct OwnSent([AtomicU64; 2]);

/// One producer thread's driver for the bound, and whose it is.
struct OwnDriver {
    /// The address of the [`OwnQueueBound`] it serves (a thread serves one per run).
    target: usize,
    slot: usize,
    driver: NullDriver,
    batch: Fifo<Skb>,
}

thread_local! {
    static OWN_DRIVER: RefCell<Option<OwnDriver>> = const { RefCell::new(None) };
}

impl OwnQueueBound {
    fn new(producers: usize, driver_ns: u32) -> Self {
        OwnQueueBound {
            driver_ns,
            sent: (0..producers.max(1))
                .map(|_| OwnSent([AtomicU64::new(0), AtomicU64::new(0)]))
                .collect(),
            next_slot: AtomicUsize::new(0),
        }
    }

    /// Sends what `fill` puts in the batch through this thread's own driver.
    #[inline]
    fn send(&self, fill: impl FnOnce(&mut Fifo<Skb>)) {
        let me = self as *const Self as usize;
        OWN_DRIVER.with_borrow_mut(|own| {
            let d = match own {
                Some(d) if d.target == me => d,
                _ => {
                    let slot = self.next_slot.fetch_add(1, Ordering::Relaxed);
                    assert!(
                        slot < self.sent.len(),
                        "more sending threads than producers"
                    );
                    own.insert(OwnDriver {
                        target: me,
                        slot,
                        driver: NullDriver::with_cost_ns(self.driver_ns),
                        batch: Fifo::new(),
                    })
                }
            };
            fill(&mut d.batch);
            d.driver.xmit(&mut d.batch, &mut ToFree::new());
            let line = &self.sent[d.slot].0;
            line[0].store(d.driver.sent(), Ordering::Relaxed);
            line[1].store(d.driver.bytes(), Ordering::Relaxed);
        });
    }
}

impl Target for OwnQueueBound {
    #[inline]
    fn xmit(&self, skb: Skb) -> bool {
        self.send(|b| b.push_back(skb));
        true
    }
    fn xmit_burst(&self, skbs: &mut Vec<Skb>) -> usize {
        self.send(|b| b.extend(skbs.drain(..)));
        0
    }
    /// Nothing is ever dropped: each driver takes every packet.
    fn progress(&self) -> (u64, u64, u64) {
        let sum = |i: usize| -> u64 {
            self.sent
                .iter()
                .map(|s| s.0[i].load(Ordering::Relaxed))
                .sum()
        };
        (sum(0), sum(1), 0)
    }
    fn may_park(&self) -> bool {
        true
    }
}

/// Runs one workload, calling `on_tick` about once a second, and returns what it measured.
///
/// # Panics
///
/// If the pool or the queue cannot be built from the workload's settings (callers validate
/// user input before).
pub fn run(w: &Workload, on_tick: &mut dyn FnMut(&Tick)) -> Cell {
    let pool = build_pool(w).expect("building the frame pool");
    match w.contender {
        Contender::Engine(strategy) => match (&w.driver, w.qdisc) {
            // The headline configuration with concrete types, as the peers have them: no
            // virtual call per packet into the qdisc or the driver.
            (None, QdiscKind::Pfifo) => run_engine(
                w,
                strategy,
                &pool,
                Pfifo::new(),
                NullDriver::with_cost_ns(w.driver_ns),
                on_tick,
            ),
            (driver, kind) => {
                let driver = match driver {
                    Some(make) => make(),
                    None => Box::new(NullDriver::with_cost_ns(w.driver_ns)) as Box<dyn Driver<Skb>>,
                };
                run_engine(w, strategy, &pool, kind.build(), driver, on_tick)
            }
        },
        Contender::Mutex => {
            let peer = Arc::new(MutexPeer {
                inner: Mutex::new(MutexInner {
                    queue: VecDeque::with_capacity(w.frames),
                    driver: NullDriver::with_cost_ns(w.driver_ns),
                    batch: Fifo::new(),
                }),
            });
            let mut cell = drive(w, &pool, peer.clone(), on_tick, &|| {});
            cell.queued = peer.inner.lock().map(|g| g.queue.len() as u64).unwrap_or(0);
            cell.with_pool_stats(&pool)
        }
        Contender::OwnQueue => {
            let bound = Arc::new(OwnQueueBound::new(w.producers, w.driver_ns));
            drive(w, &pool, bound, on_tick, &|| {}).with_pool_stats(&pool)
        }
        Contender::SegQueue => {
            let peer = Arc::new(SegQueuePeer {
                queue: SegQueue::new(),
                sent: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
            });
            let done = Arc::new(AtomicBool::new(false));
            let tx = std::sync::Mutex::new(Some(spawn_tx_thread(&peer, &done, &pool, w.driver_ns)));
            // The TX thread drains what is queued and is joined inside the timed region, as
            // the engine's cells drain their queue (`while txq.poll()`) before the clock
            // stops: its packets count in the rate and its time in the CPU per packet.
            let mut cell = drive(w, &pool, peer.clone(), on_tick, &|| {
                done.store(true, Ordering::Release);
                if let Some(tx) = tx.lock().map(|mut g| g.take()).unwrap_or(None) {
                    tx.join().expect("TX thread");
                }
            });
            cell.queued = peer.queue.len() as u64;
            cell.with_pool_stats(&pool)
        }
    }
}

fn spawn_tx_thread(
    peer: &Arc<SegQueuePeer>,
    done: &Arc<AtomicBool>,
    pool: &Pool,
    driver_ns: u32,
) -> thread::JoinHandle<()> {
    let (peer, done, pool) = (peer.clone(), done.clone(), pool.clone());
    thread::spawn(move || {
        let mut handle = pool.handle().expect("a pool handle for the TX thread");
        let mut driver = NullDriver::with_cost_ns(driver_ns);
        let mut batch = Fifo::new();
        let mut to_free = ToFree::new();
        loop {
            while batch.len() < 64 {
                let Some(skb) = peer.queue.pop() else { break };
                batch.push_back(skb);
            }
            if batch.is_empty() {
                if done.load(Ordering::Acquire) && peer.queue.is_empty() {
                    break;
                }
                handle.flush_frees();
                thread::yield_now();
                continue;
            }
            driver.xmit(&mut batch, &mut to_free);
            peer.sent.store(driver.sent(), Ordering::Relaxed);
            peer.bytes.store(driver.bytes(), Ordering::Relaxed);
        }
        handle.flush_frees();
    })
}

/// Starts the producers against `target`, samples progress once a second, stops them at the
/// end of the duration, runs `finish` (the target's flush) and measures. `pool` must be the
/// pool the target's frames come from (for AF_XDP, the UMEM).
pub fn drive<T: Target>(
    w: &Workload,
    pool: &Pool,
    target: Arc<T>,
    on_tick: &mut dyn FnMut(&Tick),
    finish: &dyn Fn(),
) -> Cell {
    let size = w.size.clamp(14, 2048 - pool.headroom());
    let stop = Arc::new(AtomicBool::new(false));
    let offered = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(w.producers + 1));
    let producers: Vec<_> = (0..w.producers)
        .map(|p| {
            let ctx = Producer {
                pool: pool.clone(),
                stop: stop.clone(),
                offered: offered.clone(),
                start: start.clone(),
                quota: w.packets_per_producer,
                flows: w.flows.max(1),
                size,
                rate: w.rate_pps,
                writer: w.writer.clone(),
                burst: w.burst.max(1),
                park: w.park && target.may_park(),
                id: p as u64,
                kind: w.pool,
            };
            let target = target.clone();
            thread::spawn(move || ctx.run(&*target))
        })
        .collect();
    start.wait();
    let (t0, c0) = (Instant::now(), process_cpu_time());
    let deadline = w.duration.map(|d| t0 + d);
    let mut next_tick = t0 + Duration::from_secs(1);
    while !producers.iter().all(|p| p.is_finished()) {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            stop.store(true, Ordering::Relaxed);
            break;
        }
        if now >= next_tick {
            let (sent, sent_bytes, dropped) = target.progress();
            on_tick(&Tick {
                elapsed: now - t0,
                offered: offered.load(Ordering::Relaxed),
                sent,
                sent_bytes,
                dropped,
                cpu: process_cpu_time() - c0,
            });
            next_tick += Duration::from_secs(1);
        }
        // Sampling cadence of the progress meter, not synchronization: joins follow.
        let wake = deadline.map_or(next_tick, |d| d.min(next_tick));
        thread::sleep(
            wake.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(20)),
        );
    }
    for p in producers {
        p.join().expect("producer thread");
    }
    finish();
    let (elapsed, cpu) = (t0.elapsed(), process_cpu_time() - c0);
    let (sent, _, dropped) = target.progress();
    Cell {
        offered: offered.load(Ordering::Relaxed),
        sent,
        dropped,
        elapsed,
        cpu,
        ..Cell::default()
    }
}

/// One producer thread's settings.
struct Producer {
    pool: Pool,
    stop: Arc<AtomicBool>,
    offered: Arc<AtomicU64>,
    start: Arc<Barrier>,
    quota: Option<u64>,
    flows: u32,
    size: usize,
    rate: Option<u64>,
    writer: Option<PacketWriter>,
    burst: usize,
    park: bool,
    id: u64,
    kind: PoolKind,
}

impl Producer {
    fn run<T: Target>(self, target: &T) {
        let mut source = FrameSource::new(&self.pool, self.kind);
        self.start.wait();
        let t0 = Instant::now();
        let gap = self
            .rate
            .map(|r| Duration::from_secs_f64(1.0 / r.max(1) as f64));
        let mut seq = 0u64;
        let mut unpublished = 0u64;
        let mut burst: Vec<Skb> = Vec::with_capacity(self.burst);
        while self.quota.is_none_or(|q| seq < q) && !self.stop.load(Ordering::Relaxed) {
            if let Some(gap) = gap {
                pace(t0 + gap.mul_f64(seq as f64), &self.stop);
            }
            let skb = match source.alloc() {
                Ok(skb) => Some(skb),
                Err(_) => {
                    // Send what this producer holds before waiting: frames held in partial
                    // bursts by every producer could otherwise exhaust the pool for good.
                    if !burst.is_empty() {
                        target.xmit_burst(&mut burst);
                    }
                    alloc(&mut source, &self.stop, target, self.park)
                }
            };
            let Some(mut skb) = skb else {
                break;
            };
            let flow = (seq % u64::from(self.flows)) as u32;
            if skb.put(self.size).is_err() {
                break;
            }
            match &self.writer {
                Some(write) => write(&mut skb, self.id, seq, flow),
                None => {
                    let head = (self.id << 48 | seq).to_be_bytes();
                    let data = skb.data_mut();
                    let n = head.len().min(data.len());
                    data[..n].copy_from_slice(&head[..n]);
                }
            }
            skb.set_flow_hash(flow.wrapping_mul(0x9e37_79b9) ^ self.id as u32);
            seq += 1;
            unpublished += 1;
            if self.burst == 1 {
                target.xmit(skb);
            } else {
                burst.push(skb);
                if burst.len() == self.burst {
                    target.xmit_burst(&mut burst);
                }
            }
            if unpublished == 1024 {
                self.offered.fetch_add(unpublished, Ordering::Relaxed);
                unpublished = 0;
            }
        }
        if !burst.is_empty() {
            target.xmit_burst(&mut burst);
        }
        self.offered.fetch_add(unpublished, Ordering::Relaxed);
        source.flush();
    }
}

/// A frame, waiting for one if every frame is in flight (backpressure).
fn alloc<T: Target>(
    source: &mut FrameSource,
    stop: &AtomicBool,
    target: &T,
    park: bool,
) -> Option<Skb> {
    loop {
        match source.alloc() {
            Ok(skb) => return Some(skb),
            Err(_) if stop.load(Ordering::Relaxed) => return None,
            Err(_) if park => {
                target.poll();
                // Asleep until one of ours is freed; `alloc_wait` itself sends home the frames
                // we freed for others and drains every source ours come back through.
                if let Ok(skb) = source.alloc_wait() {
                    return Some(skb);
                }
            }
            Err(_) => {
                // Send home the frames we freed for others, take back ours, let the thread
                // holding them run.
                source.flush();
                target.poll();
                thread::yield_now();
            }
        }
    }
}

/// Waits until `at` (sleeping when far, spinning when near), or until stopped.
fn pace(at: Instant, stop: &AtomicBool) {
    loop {
        let now = Instant::now();
        if now >= at || stop.load(Ordering::Relaxed) {
            return;
        }
        let left = at - now;
        if left > Duration::from_micros(100) {
            thread::sleep(left - Duration::from_micros(50));
        } else {
            std::hint::spin_loop();
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Producers without handles (`PoolKind::PerCpu`), more of them than cores and more
    /// packets than frames, through the engine, both peers and the bound, with refills in
    /// either order: every packet offered is sent, dropped or queued, every frame comes home,
    /// and the frames came from per-CPU caches.
    #[test]
    fn per_cpu_producers_conserve_packets_and_frames() {
        let contenders = [
            Contender::Engine(Strategy::DeferList),
            Contender::Mutex,
            Contender::SegQueue,
            Contender::OwnQueue,
        ];
        for (contender, refill_order) in contenders
            .into_iter()
            .map(|c| (c, RefillOrder::Freed))
            .chain([(Contender::Engine(Strategy::DeferList), RefillOrder::Address)])
        {
            let w = Workload {
                contender,
                producers: 5,
                packets_per_producer: Some(20_000),
                frames: 256,
                pool: PoolKind::PerCpu,
                refill_order,
                ..Workload::default()
            };
            let cell = run(&w, &mut |_| {});
            let what = format!("{contender:?}, {refill_order:?}");
            assert!(cell.conserved(), "{what}: {cell}");
            assert_eq!(cell.offered, 100_000, "{what}: {cell}");
            let pool = cell.pool.expect("pool stats");
            assert_eq!(pool.outstanding(), 0, "{what}: {pool:?}");
            // Handle-less producers: no handle allocated a frame (with PoolKind::Owner every
            // packet's frame would be counted here).
            assert_eq!(pool.totals.allocs, 0, "{what}: {pool:?}");
            let per_cpu = cell.per_cpu.expect("per-CPU stats");
            assert_eq!(per_cpu.refill_order, refill_order, "{what}");
        }
    }
}

//! What a run is asked to do: the contender (`Contender`), its qdisc, its frames (`PoolKind`)
//! and the whole `Workload`.
//!
//! Owns: the workload's fields and their defaults. Must not: run anything (`drive.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use qdisc::{Driver, NullDriver, Overflow, Pfifo, PfifoFast, Qdisc, Strategy};
use skb_pool::{RefillOrder, Skb};

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
    /// pool's per-CPU caches ([`Pool::alloc`](skb_pool::Pool::alloc)).
    pub pool: PoolKind,
    /// Packets per transmit call: 1 sends each with `xmit`; more hands bursts to
    /// [`Target::xmit_burst`](crate::harness::Target::xmit_burst) (`TxQueue::xmit_bulk` for the engine).
    pub burst: usize,
    /// A producer out of frames sleeps until one of its frames is freed (if the target
    /// [may park](crate::harness::Target::may_park)) instead of yielding between polls: less CPU per packet,
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
    /// No handle: [`Pool::alloc`](skb_pool::Pool::alloc) from the cache of the CPU the producer runs on.
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

//! pktgen's command line: the options (`Cli`), their value types and their parsers, and the
//! one-line form of a parse error.
//!
//! Owns: what each option means and accepts. Must not: run anything.

use std::net::SocketAddrV4;

use clap::{Parser, ValueEnum};
use lockless_xmit::harness::{PoolKind, QdiscKind};
use qdisc::Strategy;

/// Multi-threaded packet generator over lockless-xmit's transmit engine.
#[derive(Debug, Parser)]
#[command(name = "pktgen", version, about, long_about = None)]
pub(crate) struct Cli {
    /// Where packets go: `null` (a driver doing --driver-ns of work per packet, no privileges
    /// needed), `xsk:IFACE[:QUEUES]` (AF_XDP on an interface's first QUEUES queues, default 1;
    /// needs root; frames go to the broadcast MAC and 255.255.255.255:9), or `udp:ADDR:PORT`
    /// (UDP datagrams through sendmmsg to ADDR:PORT).
    #[arg(long, default_value = "null", value_parser = parse_driver)]
    pub(crate) driver: DriverSpec,

    /// Create a private pair of network namespaces joined by a veth pair, send through AF_XDP
    /// on one end and count what a kernel UDP socket on the other end receives and what the
    /// kernel dropped on the way (a receiver too slow for the rate); fails if any datagram is
    /// in neither; tear it all down at the end (needs root).
    #[arg(long)]
    pub(crate) veth: bool,

    /// Producer threads (default: as many as cores).
    #[arg(long)]
    pub(crate) threads: Option<usize>,

    /// Locking strategy of the transmit queue.
    #[arg(long, value_enum, default_value_t = StrategyArg::Defer)]
    pub(crate) strategy: StrategyArg,

    /// Queueing discipline in front of the driver.
    #[arg(long, value_enum, default_value_t = QdiscArg::Pfifo)]
    pub(crate) qdisc: QdiscArg,

    /// Distinct flows per producer (flow hashes, for fq and queue selection).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) flows: u32,

    /// Packet size in bytes (frame data, headers included), 14..=1792.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(14..=1792))]
    pub(crate) size: u64,

    /// Per-thread rate limit in packets per second (default: unlimited).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) rate: Option<u64>,

    /// Run time in seconds.
    #[arg(long, default_value_t = 5.0, value_parser = parse_duration)]
    pub(crate) duration: f64,

    /// Packets per transmit call: 1 sends each with `TxQueue::xmit` (the kernel's
    /// `dev_queue_xmit`); N hands bursts of N to `TxQueue::xmit_bulk` (one defer-list push or one
    /// driver call per burst). With --compare the mutex peer then takes its lock once per burst;
    /// SegQueue has no bulk push and pushes one by one.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(crate) burst: u64,

    /// With --burst: a burst of at least this many packets is sent by its own producer under
    /// the root lock (`TxQueueBuilder::self_send_burst`) instead of being pushed to the
    /// runner; 0 turns it off (every burst goes through the defer list).
    #[arg(long, default_value_t = qdisc::DEFAULT_SELF_SEND_BURST as u64)]
    pub(crate) self_send_burst: u64,

    /// Pushes leave drain hints for the runner (`TxQueueBuilder::drain_hints`); `off` is for
    /// the A/B comparison.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub(crate) drain_hints: OnOff,

    /// The root lock is lent to a thread that takes it alone, again and again
    /// (`TxQueueBuilder::biased_root`); `off` is for the A/B comparison.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub(crate) biased_root: OnOff,

    /// A producer out of frames sleeps until one of its frames is freed
    /// (`PoolHandle::alloc_wait`) instead of yielding between polls. Less CPU per packet; the
    /// thread that frees pays the wake-ups. Ignored with the xsk driver (its completions need
    /// the producers' polls).
    #[arg(long)]
    pub(crate) park: bool,

    /// Defer list burst limit (the kernel's net.core.qdisc_max_burst).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) burst_limit: u64,

    /// What a producer does when the defer list is over its burst limit.
    #[arg(long, value_enum, default_value_t = OverflowArg::Drop)]
    pub(crate) overflow: OverflowArg,

    /// Frames in the pool (in-flight packets are bounded by it).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(64..=1_048_576))]
    pub(crate) frames: u64,

    /// Work per packet of the null driver, in nanoseconds (10: like writing one descriptor).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub(crate) driver_ns: u32,

    /// Compare busylock, defer, nolock and the mutex / segqueue peers at these thread counts
    /// (comma-separated, e.g. 1,2,4,8,16), each for --duration seconds (in --slice slices), and
    /// print a table. A `bound` row runs beside them: each producer sends through a driver of
    /// its own (one queue per producer, no lock), which no design sharing one queue can beat.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(crate) compare: Option<Vec<u64>>,

    /// With --compare: run the whole matrix this many times, each round in a rotated order, and
    /// print per cell the median rate and CPU, and each ratio as the median (range) of the
    /// in-round ratios: the noise of a shared machine falls on every contender alike.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub(crate) repeat: u64,

    /// With --compare: each cell's --duration runs in slices of about this many seconds, the
    /// contenders of one thread count taking turns slice by slice (in a rotated order), and
    /// every slice counts as a round of its own: rates are medians over the slices, ratios
    /// medians of in-slice ratios. A shared machine changes speed within seconds; slices put
    /// each change on every contender instead of on whichever ran then. 0: one slice per cell.
    #[arg(long, default_value_t = 1.0, value_parser = parse_slice)]
    pub(crate) slice: f64,

    /// How producers allocate frames: `owner` (a pool handle per producer thread), `percpu`
    /// (`Pool::alloc` from the per-CPU caches, no handle), or, with --compare, `both` (every
    /// cell with each, plus a table of percpu / owner in the same run).
    #[arg(long, value_enum, default_value_t = PoolArg::Owner)]
    pub(crate) pool: PoolArg,

    /// With per-CPU frames: the order a CPU's cache hands out frames that came home to it
    /// (`PoolBuilder::refill_order`): `freed` (oldest free first) or `address` (lowest address
    /// first, sorted at every refill).
    #[arg(long, value_enum, default_value_t = RefillOrderArg::Freed)]
    pub(crate) refill_order: RefillOrderArg,

    /// How the engine's runner feeds the qdisc: `batched` hands each drained batch to the
    /// qdisc whole and dequeues in batches; `per-packet` one packet at a time (the kernel's
    /// way); `both` (with --compare) runs every engine cell both ways, back to back, and adds
    /// a table of the same-run ratios.
    #[arg(long, value_enum, default_value_t = RunnerArg::Batched)]
    pub(crate) runner: RunnerArg,

    /// Print the final figures (and each compare cell) as one JSON object per line.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PoolArg {
    /// A pool handle per producer thread.
    Owner,
    /// The pool's per-CPU caches.
    Percpu,
    /// Both, cell by cell (--compare only).
    Both,
}

impl PoolArg {
    pub(crate) fn kinds(self) -> &'static [PoolKind] {
        match self {
            PoolArg::Owner => &[PoolKind::Owner],
            PoolArg::Percpu => &[PoolKind::PerCpu],
            PoolArg::Both => &[PoolKind::Owner, PoolKind::PerCpu],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StrategyArg {
    /// The pre-2025 kernel: busylock, then the root lock.
    Busylock,
    /// The Linux 6.19 defer list (llist): one CAS per packet, the first pusher drains.
    Defer,
    /// A lockless qdisc run with the MISSED / DRAINING handshake.
    Nolock,
}

impl StrategyArg {
    pub(crate) fn strategy(self) -> Strategy {
        match self {
            StrategyArg::Busylock => Strategy::BusyLock,
            StrategyArg::Defer => Strategy::DeferList,
            StrategyArg::Nolock => Strategy::NoLock,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum QdiscArg {
    /// Tail-drop FIFO, limit 1000.
    Pfifo,
    /// Three strict-priority bands of 1000.
    #[value(name = "pfifo_fast")]
    PfifoFast,
    /// Fair queueing with pacing, kernel defaults.
    Fq,
}

impl QdiscArg {
    pub(crate) fn kind(self) -> QdiscKind {
        match self {
            QdiscArg::Pfifo => QdiscKind::Pfifo,
            QdiscArg::PfifoFast => QdiscKind::PfifoFast,
            QdiscArg::Fq => QdiscKind::Fq,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RunnerArg {
    /// Batches into and out of the qdisc (`TxQueueBuilder::qdisc_batch(true)`).
    Batched,
    /// One packet at a time (`TxQueueBuilder::qdisc_batch(false)`).
    PerPacket,
    /// Both, in the same run (--compare only).
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RefillOrderArg {
    /// The order frames were freed in (`RefillOrder::Freed`).
    Freed,
    /// Lowest address first (`RefillOrder::Address`).
    Address,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OverflowArg {
    /// Drop the arriving packet (the kernel's QDISC_BURST_DROP).
    Drop,
    /// Help drain, or park until there is room; never drop.
    Wait,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DriverSpec {
    Null,
    Xsk { ifname: String, queues: u32 },
    Udp(SocketAddrV4),
}

impl DriverSpec {
    pub(crate) fn name(&self) -> String {
        match self {
            DriverSpec::Null => "null".into(),
            DriverSpec::Xsk { ifname, queues } => format!("xsk:{ifname}:{queues}"),
            DriverSpec::Udp(addr) => format!("udp:{addr}"),
        }
    }
}

pub(crate) const DRIVER_VALUES: &str = "accepted: null, xsk:IFACE[:QUEUES], udp:ADDR:PORT";

pub(crate) fn parse_driver(s: &str) -> Result<DriverSpec, String> {
    if s == "null" {
        return Ok(DriverSpec::Null);
    }
    if let Some(rest) = s.strip_prefix("xsk:") {
        let (ifname, queues) = match rest.split_once(':') {
            Some((i, q)) => (i, q.parse::<u32>().ok().filter(|q| (1..=256).contains(q))),
            None => (rest, Some(1)),
        };
        return match queues {
            Some(queues) if !ifname.is_empty() && ifname.len() < 16 => Ok(DriverSpec::Xsk {
                ifname: ifname.to_string(),
                queues,
            }),
            _ => Err(format!(
                "{DRIVER_VALUES} (IFACE up to 15 characters, QUEUES 1..=256)"
            )),
        };
    }
    if let Some(rest) = s.strip_prefix("udp:") {
        return rest
            .parse::<SocketAddrV4>()
            .map(DriverSpec::Udp)
            .map_err(|_| {
                format!("{DRIVER_VALUES} (ADDR:PORT an IPv4 address and port, e.g. 127.0.0.1:9000)")
            });
    }
    Err(DRIVER_VALUES.into())
}

pub(crate) fn parse_slice(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v == 0.0 || (0.05..=3600.0).contains(&v) => Ok(v),
        _ => Err("accepted: 0 (no slicing), or seconds from 0.05 to 3600".into()),
    }
}

pub(crate) fn parse_duration(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err("accepted: seconds, more than 0 and at most 86400".into()),
    }
}

/// clap's error as one line: `error: <what> (<accepted values>)`.
pub(crate) fn one_line(err: &clap::Error) -> String {
    let text = err.render().to_string();
    let mut parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
        .collect();
    if parts.is_empty() {
        parts.push("error: bad arguments");
    }
    parts.join(" ")
}

//! `pktgen`: the project's main job. Producer threads allocate pool frames, write packets and
//! transmit them through a `TxQueue` (our defer list, the kernel's busylock, or a lockless
//! qdisc) and a driver, printing a progress line per second and, at the end, the qdisc's
//! `tc -s qdisc show` block, the pool and lock statistics and the `xmit` latency histogram.
//!
//! ```text
//! cargo run --release --example pktgen                       # 5 s, null driver, defer list
//! cargo run --release --example pktgen -- --compare 1,2,4,8,16
//! cargo run --release --example pktgen -- --json --duration 1
//! ```
//! Run with `--help` for every option and its default.
//!
//! If stdout's reader goes away (`pktgen ... | head`), pktgen writes nothing more, a
//! `--compare` stops before its next cell, and it exits with status 141 (what a shell reports
//! for a writer killed by `SIGPIPE`) once its run has cleaned up; any other write error to
//! stdout exits with status 1.
//!
//! `--json` prints one object per line (the final figures, or one per `--compare` cell):
//! `threads`, `round` (with `--compare`, the cell's slice, numbered on through every
//! `--repeat`, from 0), `strategy` (`busylock`, `defer`, `nolock`, `mutex`, `segqueue`,
//! `bound`), `pool` (`owner` or `percpu`), `qdisc`, `burst` (packets per transmit call), `park`
//! (producers out of frames sleep), `offered`, `sent`, `dropped`, `queued`, `duration_s`, `pps`,
//! `cpu_ns_per_pkt`, and for the engine's strategies `drops_by_reason` (an object keyed by
//! kernel drop reason), `requeues` and `root_contended`; with `--veth`, also
//! `received` (datagrams the kernel UDP socket in the peer namespace got) and `kernel_drops`
//! (what the kernel dropped on the way there, by its own counters: `udp_no_room`, the receiving
//! socket's buffer or UDP's memory full; `veth`, the veth's backlog; `udp_other`, any other UDP
//! error, which makes the run fail); with `--compare`,
//! `pingpong_ns` (what [`lockless_xmit::pingpong::probe`] read before the cell's group: the
//! machine's state, `null` if it could not run). `offered = sent + dropped + queued` always
//! holds.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use clap::{Parser, ValueEnum};
use lockless_xmit::harness::{
    self, Cell, Contender, PacketWriter, PoolKind, QdiscKind, Target, Tick, Workload,
};
use qdisc::{Driver, DropReason, Overflow, Qdisc, Strategy, TxQueue, Verdict};
use skb_pool::{RefillOrder, Skb};
use xsk_tx::netns::{UdpCounter, VethPair};
use xsk_tx::packet::UdpFlow;
use xsk_tx::{UdpSendmmsg, XskDevice};

/// What became of stdout: [`STDOUT_OK`], [`STDOUT_GONE`] (a write found its reader gone, as
/// in `pktgen ... | head`) or [`STDOUT_FAILED`] (any other write error). Once it is not OK,
/// nothing more is written, a `--compare` stops before its next cell, and `main` exits with
/// 141 (what a shell reports for a writer killed by `SIGPIPE`) or 1. A single run still runs
/// to its end: its cleanup (the namespaces of `--veth`) happens as on every other exit path.
static STDOUT: AtomicU8 = AtomicU8::new(STDOUT_OK);
const STDOUT_OK: u8 = 0;
const STDOUT_GONE: u8 = 1;
const STDOUT_FAILED: u8 = 2;

/// `print!` that never panics on a closed stdout (see [`STDOUT`]).
macro_rules! out {
    ($($arg:tt)*) => {
        write_stdout(format_args!($($arg)*))
    };
}

/// `println!` that never panics on a closed stdout (see [`STDOUT`]).
macro_rules! outln {
    () => {
        write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes to stdout unless an earlier write failed; a failure is recorded in [`STDOUT`], and
/// one that is not a broken pipe is reported on stderr.
fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    if STDOUT.load(Ordering::Relaxed) != STDOUT_OK {
        return;
    }
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            STDOUT.store(STDOUT_GONE, Ordering::Relaxed);
        } else {
            STDOUT.store(STDOUT_FAILED, Ordering::Relaxed);
            eprintln!("pktgen: cannot write to stdout: {e}");
        }
    }
}

/// Whether stdout still takes output.
fn stdout_ok() -> bool {
    STDOUT.load(Ordering::Relaxed) == STDOUT_OK
}

/// Multi-threaded packet generator over lockless-xmit's transmit engine.
#[derive(Debug, Parser)]
#[command(name = "pktgen", version, about, long_about = None)]
struct Cli {
    /// Where packets go: `null` (a driver doing --driver-ns of work per packet, no privileges
    /// needed), `xsk:IFACE[:QUEUES]` (AF_XDP on an interface's first QUEUES queues, default 1;
    /// needs root; frames go to the broadcast MAC and 255.255.255.255:9), or `udp:ADDR:PORT`
    /// (UDP datagrams through sendmmsg to ADDR:PORT).
    #[arg(long, default_value = "null", value_parser = parse_driver)]
    driver: DriverSpec,

    /// Create a private pair of network namespaces joined by a veth pair, send through AF_XDP
    /// on one end and count what a kernel UDP socket on the other end receives and what the
    /// kernel dropped on the way (a receiver too slow for the rate); fails if any datagram is
    /// in neither; tear it all down at the end (needs root).
    #[arg(long)]
    veth: bool,

    /// Producer threads (default: as many as cores).
    #[arg(long)]
    threads: Option<usize>,

    /// Locking strategy of the transmit queue.
    #[arg(long, value_enum, default_value_t = StrategyArg::Defer)]
    strategy: StrategyArg,

    /// Queueing discipline in front of the driver.
    #[arg(long, value_enum, default_value_t = QdiscArg::Pfifo)]
    qdisc: QdiscArg,

    /// Distinct flows per producer (flow hashes, for fq and queue selection).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    flows: u32,

    /// Packet size in bytes (frame data, headers included), 14..=1792.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(14..=1792))]
    size: u64,

    /// Per-thread rate limit in packets per second (default: unlimited).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    rate: Option<u64>,

    /// Run time in seconds.
    #[arg(long, default_value_t = 5.0, value_parser = parse_duration)]
    duration: f64,

    /// Packets per transmit call: 1 sends each with `TxQueue::xmit` (the kernel's
    /// `dev_queue_xmit`); N hands bursts of N to `TxQueue::xmit_bulk` (one defer-list push or one
    /// driver call per burst). With --compare the mutex peer then takes its lock once per burst;
    /// SegQueue has no bulk push and pushes one by one.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    burst: u64,

    /// With --burst: a burst of at least this many packets is sent by its own producer under
    /// the root lock (`TxQueueBuilder::self_send_burst`) instead of being pushed to the
    /// runner; 0 turns it off (every burst goes through the defer list).
    #[arg(long, default_value_t = qdisc::DEFAULT_SELF_SEND_BURST as u64)]
    self_send_burst: u64,

    /// Pushes leave drain hints for the runner (`TxQueueBuilder::drain_hints`); `off` is for
    /// the A/B comparison.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    drain_hints: OnOff,

    /// The root lock is lent to a thread that takes it alone, again and again
    /// (`TxQueueBuilder::biased_root`); `off` is for the A/B comparison.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    biased_root: OnOff,

    /// A producer out of frames sleeps until one of its frames is freed
    /// (`PoolHandle::alloc_wait`) instead of yielding between polls. Less CPU per packet; the
    /// thread that frees pays the wake-ups. Ignored with the xsk driver (its completions need
    /// the producers' polls).
    #[arg(long)]
    park: bool,

    /// Defer list burst limit (the kernel's net.core.qdisc_max_burst).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    burst_limit: u64,

    /// What a producer does when the defer list is over its burst limit.
    #[arg(long, value_enum, default_value_t = OverflowArg::Drop)]
    overflow: OverflowArg,

    /// Frames in the pool (in-flight packets are bounded by it).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(64..=1_048_576))]
    frames: u64,

    /// Work per packet of the null driver, in nanoseconds (10: like writing one descriptor).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    driver_ns: u32,

    /// Compare busylock, defer, nolock and the mutex / segqueue peers at these thread counts
    /// (comma-separated, e.g. 1,2,4,8,16), each for --duration seconds (in --slice slices), and
    /// print a table. A `bound` row runs beside them: each producer sends through a driver of
    /// its own (one queue per producer, no lock), which no design sharing one queue can beat.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=1024))]
    compare: Option<Vec<u64>>,

    /// With --compare: run the whole matrix this many times, each round in a rotated order, and
    /// print per cell the median rate and CPU, and each ratio as the median (range) of the
    /// in-round ratios: the noise of a shared machine falls on every contender alike.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    repeat: u64,

    /// With --compare: each cell's --duration runs in slices of about this many seconds, the
    /// contenders of one thread count taking turns slice by slice (in a rotated order), and
    /// every slice counts as a round of its own: rates are medians over the slices, ratios
    /// medians of in-slice ratios. A shared machine changes speed within seconds; slices put
    /// each change on every contender instead of on whichever ran then. 0: one slice per cell.
    #[arg(long, default_value_t = 1.0, value_parser = parse_slice)]
    slice: f64,

    /// How producers allocate frames: `owner` (a pool handle per producer thread), `percpu`
    /// (`Pool::alloc` from the per-CPU caches, no handle), or, with --compare, `both` (every
    /// cell with each, plus a table of percpu / owner in the same run).
    #[arg(long, value_enum, default_value_t = PoolArg::Owner)]
    pool: PoolArg,

    /// With per-CPU frames: the order a CPU's cache hands out frames that came home to it
    /// (`PoolBuilder::refill_order`): `freed` (oldest free first) or `address` (lowest address
    /// first, sorted at every refill).
    #[arg(long, value_enum, default_value_t = RefillOrderArg::Freed)]
    refill_order: RefillOrderArg,

    /// How the engine's runner feeds the qdisc: `batched` hands each drained batch to the
    /// qdisc whole and dequeues in batches; `per-packet` one packet at a time (the kernel's
    /// way); `both` (with --compare) runs every engine cell both ways, back to back, and adds
    /// a table of the same-run ratios.
    #[arg(long, value_enum, default_value_t = RunnerArg::Batched)]
    runner: RunnerArg,

    /// Print the final figures (and each compare cell) as one JSON object per line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PoolArg {
    /// A pool handle per producer thread.
    Owner,
    /// The pool's per-CPU caches.
    Percpu,
    /// Both, cell by cell (--compare only).
    Both,
}

impl PoolArg {
    fn kinds(self) -> &'static [PoolKind] {
        match self {
            PoolArg::Owner => &[PoolKind::Owner],
            PoolArg::Percpu => &[PoolKind::PerCpu],
            PoolArg::Both => &[PoolKind::Owner, PoolKind::PerCpu],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StrategyArg {
    /// The pre-2025 kernel: busylock, then the root lock.
    Busylock,
    /// The Linux 6.19 defer list (llist): one CAS per packet, the first pusher drains.
    Defer,
    /// A lockless qdisc run with the MISSED / DRAINING handshake.
    Nolock,
}

impl StrategyArg {
    fn strategy(self) -> Strategy {
        match self {
            StrategyArg::Busylock => Strategy::BusyLock,
            StrategyArg::Defer => Strategy::DeferList,
            StrategyArg::Nolock => Strategy::NoLock,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum QdiscArg {
    /// Tail-drop FIFO, limit 1000.
    Pfifo,
    /// Three strict-priority bands of 1000.
    #[value(name = "pfifo_fast")]
    PfifoFast,
    /// Fair queueing with pacing, kernel defaults.
    Fq,
}

impl QdiscArg {
    fn kind(self) -> QdiscKind {
        match self {
            QdiscArg::Pfifo => QdiscKind::Pfifo,
            QdiscArg::PfifoFast => QdiscKind::PfifoFast,
            QdiscArg::Fq => QdiscKind::Fq,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RunnerArg {
    /// Batches into and out of the qdisc (`TxQueueBuilder::qdisc_batch(true)`).
    Batched,
    /// One packet at a time (`TxQueueBuilder::qdisc_batch(false)`).
    PerPacket,
    /// Both, in the same run (--compare only).
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RefillOrderArg {
    /// The order frames were freed in (`RefillOrder::Freed`).
    Freed,
    /// Lowest address first (`RefillOrder::Address`).
    Address,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OverflowArg {
    /// Drop the arriving packet (the kernel's QDISC_BURST_DROP).
    Drop,
    /// Help drain, or park until there is room; never drop.
    Wait,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum DriverSpec {
    Null,
    Xsk { ifname: String, queues: u32 },
    Udp(SocketAddrV4),
}

impl DriverSpec {
    fn name(&self) -> String {
        match self {
            DriverSpec::Null => "null".into(),
            DriverSpec::Xsk { ifname, queues } => format!("xsk:{ifname}:{queues}"),
            DriverSpec::Udp(addr) => format!("udp:{addr}"),
        }
    }
}

const DRIVER_VALUES: &str = "accepted: null, xsk:IFACE[:QUEUES], udp:ADDR:PORT";

fn parse_driver(s: &str) -> Result<DriverSpec, String> {
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

fn parse_slice(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v == 0.0 || (0.05..=3600.0).contains(&v) => Ok(v),
        _ => Err("accepted: 0 (no slicing), or seconds from 0.05 to 3600".into()),
    }
}

fn parse_duration(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err("accepted: seconds, more than 0 and at most 86400".into()),
    }
}

/// clap's error as one line: `error: <what> (<accepted values>)`.
fn one_line(err: &clap::Error) -> String {
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

fn main() -> ExitCode {
    let code = run();
    match STDOUT.load(Ordering::Relaxed) {
        STDOUT_GONE => ExitCode::from(141),
        STDOUT_FAILED => ExitCode::FAILURE,
        _ => code,
    }
}

/// Everything `main` does but the exit status of a failed stdout.
fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            out!("{}", e.render());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("pktgen: {}", one_line(&e));
            return ExitCode::from(2);
        }
    };
    let threads = cli.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(2)
    });
    if threads == 0 || threads > 1024 {
        eprintln!("pktgen: error: invalid value '{threads}' for '--threads': accepted 1..=1024");
        return ExitCode::from(2);
    }
    let base = Workload {
        contender: Contender::Engine(cli.strategy.strategy()),
        producers: threads,
        packets_per_producer: None,
        duration: Some(Duration::from_secs_f64(cli.duration)),
        frames: cli.frames as usize,
        size: cli.size as usize,
        flows: cli.flows,
        rate_pps: cli.rate,
        qdisc: cli.qdisc.kind(),
        driver_ns: cli.driver_ns,
        driver: None,
        writer: None,
        burst_limit: cli.burst_limit as usize,
        overflow: match cli.overflow {
            OverflowArg::Drop => Overflow::Drop,
            OverflowArg::Wait => Overflow::Wait,
        },
        latency_histogram: cli.compare.is_none(),
        burst: cli.burst as usize,
        park: cli.park,
        pool: cli.pool.kinds()[0],
        qdisc_batch: cli.runner != RunnerArg::PerPacket,
        drain_hints: cli.drain_hints == OnOff::On,
        biased_root: cli.biased_root == OnOff::On,
        refill_order: match cli.refill_order {
            RefillOrderArg::Freed => RefillOrder::Freed,
            RefillOrderArg::Address => RefillOrder::Address,
        },
        self_send_burst: match cli.self_send_burst {
            0 => usize::MAX,
            n => n as usize,
        },
    };
    if cli.pool == PoolArg::Both && cli.compare.is_none() {
        eprintln!("pktgen: error: '--pool both' needs '--compare': use owner or percpu");
        return ExitCode::from(2);
    }
    let needs_frames = cli.veth || cli.driver != DriverSpec::Null;
    if needs_frames && cli.size < MIN_UDP_FRAME as u64 {
        eprintln!(
            "pktgen: error: invalid value '{}' for '--size': accepted {MIN_UDP_FRAME}..=1792 with \
             the xsk, udp and veth drivers (Ethernet, IPv4 and UDP headers plus 16 bytes)",
            cli.size
        );
        return ExitCode::from(2);
    }
    if cli.runner == RunnerArg::Both && cli.compare.is_none() {
        eprintln!(
            "pktgen: error: '--runner both' needs '--compare' (it runs each engine cell twice): \
             add '--compare 1,2,4' or pick '--runner batched' or '--runner per-packet'"
        );
        return ExitCode::from(2);
    }
    if cli.compare.is_some() && needs_frames {
        eprintln!(
            "pktgen: error: '--compare' runs on the null driver only: drop '--driver' and '--veth'"
        );
        return ExitCode::from(2);
    }
    match (&cli.compare, cli.veth, &cli.driver) {
        (Some(counts), _, _) => compare(&cli, &base, counts),
        (None, true, _) => veth(&cli, &base),
        (None, false, DriverSpec::Xsk { ifname, queues }) => xsk(&cli, &base, ifname, *queues),
        (None, false, DriverSpec::Udp(dest)) => {
            let dest = *dest;
            let w = Workload {
                driver: Some(Arc::new(move || {
                    let bind = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
                    match UdpSendmmsg::new(bind, dest) {
                        Ok(s) => Box::new(s) as Box<dyn Driver<Skb>>,
                        Err(e) => {
                            eprintln!("pktgen: udp:{dest}: {e}");
                            std::process::exit(1);
                        }
                    }
                })),
                writer: Some(udp_writer(flow_to(dest))),
                ..base
            };
            single(&cli, &w)
        }
        (None, false, DriverSpec::Null) => single(&cli, &base),
    }
}

/// Ethernet + IPv4 + UDP headers and the 16-byte (producer, sequence) payload head.
const MIN_UDP_FRAME: usize = 42 + 16;

/// A flow from an unspecified source to `dest` (the UDP driver sends only the payload).
fn flow_to(dest: SocketAddrV4) -> UdpFlow {
    UdpFlow {
        src_mac: [0x02, 0, 0, 0, 0, 1],
        dst_mac: [0xff; 6],
        src_ip: Ipv4Addr::new(0, 0, 0, 0),
        dst_ip: *dest.ip(),
        src_port: 9,
        dst_port: dest.port(),
    }
}

/// Writes well-formed Ethernet/IPv4/UDP frames whose payload starts with (producer, sequence);
/// each flow gets its own source port so receivers and FQ see distinct flows.
fn udp_writer(flow: UdpFlow) -> PacketWriter {
    Arc::new(
        move |skb: &mut Skb, producer: u64, seq: u64, flow_id: u32| {
            let mut payload = [0u8; 1792];
            let n = skb.len().saturating_sub(42).min(payload.len());
            payload[..8].copy_from_slice(&producer.to_be_bytes());
            payload[8..16].copy_from_slice(&seq.to_be_bytes());
            let f = UdpFlow {
                src_port: 10_000 + (flow_id % 50_000) as u16,
                ..flow
            };
            let _ = f.write(skb.data_mut(), &payload[..n]);
        },
    )
}

type XskDev = XskDevice<Box<dyn Qdisc<Skb>>>;

/// An AF_XDP device (one `TxQueue` per NIC queue) behind the harness's producers.
struct XskTarget(XskDev);

impl Target for XskTarget {
    fn xmit(&self, skb: Skb) -> bool {
        !matches!(self.0.xmit(skb), Verdict::Dropped(_))
    }
    fn xmit_burst(&self, skbs: &mut Vec<Skb>) -> usize {
        self.0.xmit_bulk(skbs.drain(..)).dropped
    }
    fn progress(&self) -> (u64, u64, u64) {
        let s = self.0.stats();
        let bytes = s.queues.iter().map(|q| q.driver.bytes).sum();
        (s.sent(), bytes, s.dropped())
    }
    fn poll(&self) {
        self.0.poll();
    }
}

/// Opens the device over the workload's pool (its UMEM), runs the producers through it and
/// closes it (every frame back in the pool). Errors come back as their one-line message.
fn run_xsk(
    w: &Workload,
    open: impl FnOnce(&skb_pool::Pool) -> xsk_tx::Result<XskDev>,
    json: bool,
) -> Result<Cell, String> {
    let pool = harness::build_pool(w).map_err(|e| e.to_string())?;
    let dev = Arc::new(XskTarget(open(&pool).map_err(|e| e.to_string())?));
    if !json {
        outln!(
            "AF_XDP: {} queue(s) on {}, {:?} mode",
            dev.0.queue_count(),
            dev.0.ifname(),
            dev.0.mode()
        );
    }
    let mut last = Tick::default();
    let d = dev.clone();
    let mut cell = harness::drive(
        w,
        &pool,
        dev.clone(),
        &mut |t: &Tick| {
            if !json {
                progress_line(&last, t);
            }
            last = *t;
        },
        &|| while d.0.poll() {},
    );
    drop(d);
    let stats = dev.0.stats();
    cell.sent = stats.sent();
    cell.dropped = stats.dropped();
    cell.xmit = stats.queues.first().map(|q| q.xmit.clone());
    let dev = Arc::try_unwrap(dev).map_err(|_| "the device is still shared".to_string())?;
    cell.queued = dev.0.close().dropped_queued as u64;
    cell.pool = Some(pool.stats());
    Ok(cell)
}

fn engine_builder(w: &Workload) -> qdisc::TxQueueBuilder {
    let strategy = match w.contender {
        Contender::Engine(s) => s,
        _ => Strategy::DeferList,
    };
    TxQueue::builder()
        .strategy(strategy)
        .burst_limit(w.burst_limit)
        .overflow(w.overflow)
}

fn xsk(cli: &Cli, base: &Workload, ifname: &str, queues: u32) -> ExitCode {
    let src_mac = std::fs::read_to_string(format!("/sys/class/net/{ifname}/address"))
        .ok()
        .and_then(|m| parse_mac(m.trim()))
        .unwrap_or([0x02, 0, 0, 0, 0, 1]);
    let flow = UdpFlow {
        src_mac,
        ..flow_to(SocketAddrV4::new(Ipv4Addr::BROADCAST, 9))
    };
    let w = Workload {
        writer: Some(udp_writer(flow)),
        ..base.clone()
    };
    let (qdisc, builder) = (w.qdisc, engine_builder(&w));
    announce(cli, &w);
    let open =
        |pool: &skb_pool::Pool| XskDevice::open(ifname, queues, pool, |_| qdisc.build(), builder);
    match run_xsk(&w, open, cli.json) {
        Ok(cell) => finish(cli, &w, &cell, None),
        Err(e) => {
            eprintln!("pktgen: xsk:{ifname}: {e} (or use --driver null)");
            ExitCode::from(1)
        }
    }
}

fn veth(cli: &Cli, base: &Workload) -> ExitCode {
    let queues = match &cli.driver {
        DriverSpec::Xsk { queues, .. } => *queues,
        _ => 1,
    };
    let pair = match VethPair::create(queues) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "pktgen: --veth: cannot create the namespaces and veth pair: {e} (run as root \
                 with iproute2 installed, or use --driver null)"
            );
            return ExitCode::from(1);
        }
    };
    let dest = SocketAddrV4::new(pair.b.ip, 9000);
    let counter = match UdpCounter::start(&pair.b.ns, dest) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pktgen: --veth: cannot open the receiving UDP socket: {e}");
            return ExitCode::from(1);
        }
    };
    let flow = UdpFlow {
        src_mac: pair.a.mac,
        dst_mac: pair.b.mac,
        src_ip: pair.a.ip,
        dst_ip: pair.b.ip,
        src_port: 9,
        dst_port: 9000,
    };
    let w = Workload {
        writer: Some(udp_writer(flow)),
        ..base.clone()
    };
    let (qdisc, builder, ifname) = (w.qdisc, engine_builder(&w), pair.a.ifname.clone());
    announce(cli, &w);
    let ns = &pair.a.ns;
    let open = |pool: &skb_pool::Pool| {
        ns.run(|| XskDevice::open(&ifname, queues, pool, |_| qdisc.build(), builder))
            .map_err(|source| xsk_tx::Error::Io {
                op: "setns into the veth namespace",
                source,
            })?
    };
    let cell = match run_xsk(&w, open, cli.json) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pktgen: --veth: {e} (run as root, or use --driver null)");
            return ExitCode::from(1);
        }
    };
    // Until every datagram is counted, or none arrived for 2 s (a receiver starved that long
    // on a busy machine still counts what its socket holds when it stops).
    counter.wait_for(cell.sent, Duration::from_secs(2));
    // What it counted by the time it stopped (a datagram read after the wait counts too).
    let received = counter.stop();
    let drops = match VethDrops::read(&pair) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("pktgen: --veth: cannot read the kernel's drop counters: {e}");
            return ExitCode::from(1);
        }
    };
    let code = finish(cli, &w, &cell, Some((received, drops)));
    drop(pair); // the namespaces and the veth pair go away here
    if drops.accounts_for(cell.sent, received) {
        code
    } else {
        ExitCode::FAILURE
    }
}

/// What the kernel dropped between our AF_XDP socket and the UDP socket in the peer namespace,
/// by its own counters (the namespaces are new, so every count is this run's). A datagram the
/// receiver was too slow for is one of these, not a loss of ours; a datagram in none of them
/// and not received is.
#[derive(Clone, Copy)]
struct VethDrops {
    /// No room for the datagram: the receiving socket's buffer was full, or UDP's memory limit
    /// was reached (`Udp: RcvbufErrors` and `MemErrors` in the peer namespace).
    udp_no_room: u64,
    /// Any other UDP delivery error there (`InErrors` beyond those: a checksum, say).
    udp_other: u64,
    /// Dropped crossing the veth: the larger of the receiving end's receive drops and the
    /// sending end's transmit drops, since a drop at the receiver's backlog counts on both.
    veth: u64,
}

impl VethDrops {
    fn read(pair: &VethPair) -> std::io::Result<VethDrops> {
        let (a, b) = (pair.a.ns.kernel_drops()?, pair.b.ns.kernel_drops()?);
        let no_room = b.udp_rcvbuf_errors + b.udp_mem_errors;
        Ok(VethDrops {
            udp_no_room: no_room,
            udp_other: b.udp_in_errors.saturating_sub(no_room),
            veth: b.rx_dropped.max(a.tx_dropped),
        })
    }

    fn total(&self) -> u64 {
        self.udp_no_room + self.udp_other + self.veth
    }

    /// The datagrams accounted for: `received`, and those dropped for lack of room.
    fn accounted(&self, received: u64) -> u64 {
        received + self.udp_no_room + self.veth
    }

    /// Whether every datagram sent is accounted for, and no other UDP error occurred.
    fn accounts_for(&self, sent: u64, received: u64) -> bool {
        self.udp_other == 0 && self.accounted(received) == sent
    }
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn announce(cli: &Cli, w: &Workload) {
    if !cli.json {
        outln!(
            "pktgen: {} threads, strategy {}, qdisc {}, driver {}, {} B packets, {} flows, {:.1} s",
            w.producers,
            w.contender.name(),
            w.qdisc.name(),
            if cli.veth {
                "xsk on a private veth pair".to_string()
            } else {
                cli.driver.name()
            },
            w.size,
            w.flows,
            cli.duration
        );
    }
}

fn single(cli: &Cli, w: &Workload) -> ExitCode {
    announce(cli, w);
    let mut last = Tick::default();
    let json = cli.json;
    let cell = harness::run(w, &mut |t: &Tick| {
        if !json {
            progress_line(&last, t);
        }
        last = *t;
    });
    finish(cli, w, &cell, None)
}

fn finish(cli: &Cli, w: &Workload, cell: &Cell, received: Option<(u64, VethDrops)>) -> ExitCode {
    if cli.json {
        let mut line = json_cell(cell, w, None, 0);
        if let Some((r, d)) = received {
            line = json_with(line, "received", &r.to_string());
            let drops = format!(
                "{{\"udp_no_room\":{},\"veth\":{},\"udp_other\":{}}}",
                d.udp_no_room, d.veth, d.udp_other
            );
            line = json_with(line, "kernel_drops", &drops);
        }
        outln!("{line}");
    } else {
        report(cell, w);
        if let Some((r, d)) = received {
            outln!();
            let accounted = d.accounted(r);
            outln!(
                "veth: sent {} received {} by a kernel UDP socket in the peer namespace; the \
                 kernel dropped {} (no room in the receiving socket: {}, the veth's backlog: \
                 {}, other UDP errors: {}); {}",
                cell.sent,
                r,
                d.total(),
                d.udp_no_room,
                d.veth,
                d.udp_other,
                if d.accounts_for(cell.sent, r) {
                    "nothing lost".to_string()
                } else if accounted < cell.sent {
                    format!("LOSS: {} datagrams in no counter", cell.sent - accounted)
                } else {
                    format!(
                        "MISMATCH: {} more accounted for than sent",
                        accounted - cell.sent
                    )
                }
            );
        }
    }
    if cell.conserved() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn progress_line(last: &Tick, t: &Tick) {
    let dt = (t.elapsed - last.elapsed).as_secs_f64().max(1e-9);
    let pps = (t.sent - last.sent) as f64 / dt;
    let bps = (t.sent_bytes - last.sent_bytes) as f64 * 8.0 / dt;
    let cpu = (t.cpu - last.cpu).as_secs_f64() / dt * 100.0;
    outln!(
        "{:>6.1}s {:>9.3} Mpps {:>8.3} Gbit/s  drops {:>9}  CPU {:>4.0}%",
        t.elapsed.as_secs_f64(),
        pps / 1e6,
        bps / 1e9,
        t.dropped - last.dropped,
        cpu
    );
}

fn report(cell: &Cell, w: &Workload) {
    outln!();
    outln!("{cell}");
    outln!(
        "conservation: offered {} = sent {} + dropped {} + queued {}: {}",
        cell.offered,
        cell.sent,
        cell.dropped,
        cell.queued,
        if cell.conserved() { "holds" } else { "BROKEN" }
    );
    if let Some(show) = &cell.qdisc_show {
        outln!();
        out!("{show}");
    }
    if let Some(x) = &cell.xmit {
        outln!();
        out!("{x}");
    }
    if let Some(p) = &cell.pool {
        let t = &p.totals;
        outln!();
        outln!(
            "pool: {} frames, {} free, {} in use, {} in flight, {} owners",
            p.frame_count,
            p.free,
            p.in_use,
            p.in_flight,
            p.owners
        );
        outln!(
            "  allocs {} local frees {} remote frees {} deferred {} overflow {} wakes {} drains {}",
            t.allocs,
            t.local_frees,
            t.remote_frees,
            t.deferred,
            t.overflow,
            t.wakes,
            t.drains
        );
    }
    if let Some(c) = &cell.per_cpu {
        outln!(
            "per-CPU ({:?}, refill order {:?}): aborts {} shared path {} refills {} cache takings \
             {} exhausted {} drains {} flushes {} remote frees {} in {} sends",
            c.mode,
            c.refill_order,
            c.aborts,
            c.shared_path,
            c.refills,
            c.cache_takings,
            c.exhausted,
            c.drains,
            c.flushes,
            c.remote_frees,
            c.sends
        );
    }
    let _ = w;
}

fn compare(cli: &Cli, base: &Workload, counts: &[u64]) -> ExitCode {
    let mut rows: Vec<CompareRow> = Vec::new();
    let both_runners = cli.runner == RunnerArg::Both;
    let slices = slices(cli.duration, cli.slice);
    let slice_len = Duration::from_secs_f64(cli.duration / slices as f64);
    if !cli.json {
        outln!(
            "pktgen --compare: qdisc {}, null driver {} ns/pkt, {} B, {:.1} s per cell in {} \
             slice(s) of {:.2} s, pool {:?}, runner {:?}, {} round(s)",
            base.qdisc.name(),
            base.driver_ns,
            base.size,
            cli.duration,
            slices,
            slice_len.as_secs_f64(),
            cli.pool,
            cli.runner,
            cli.repeat
        );
    }
    let mut ok = true;
    // What the cross-core probe read before each group of cells (round of --repeat, producer
    // count): on a shared VM the state can change between groups, and every cross-core rate
    // with it.
    let mut states: Vec<(usize, u64, Option<f64>)> = Vec::new();
    for repeat in 0..cli.repeat as usize {
        for &threads in counts {
            let state = lockless_xmit::pingpong::probe();
            states.push((repeat, threads, state));
            // A thread count's slices run back to back, each a round of the tables.
            for slice in 0..slices {
                let round = repeat * slices + slice;
                for (w, per_packet) in round_cells(cli, base, threads, round, slice_len) {
                    if !stdout_ok() {
                        // Nobody reads the cells or the tables any more.
                        return ExitCode::FAILURE;
                    }
                    let cell = harness::run(&w, &mut |_| {});
                    ok &= cell.conserved();
                    if cli.json {
                        let line = json_cell(&cell, &w, Some(threads), round);
                        let ns = state.map_or("null".to_string(), |ns| format!("{ns:.1}"));
                        outln!("{}", json_with(line, "pingpong_ns", &ns));
                    }
                    rows.push(CompareRow {
                        round,
                        threads,
                        contender: w.contender,
                        pool: w.pool,
                        per_packet,
                        cell,
                    });
                }
            }
        }
    }
    if !cli.json {
        let main: Vec<&CompareRow> = rows.iter().filter(|r| !r.per_packet).collect();
        out!("{}", compare_table(&main, counts, cli.pool.kinds()));
        if cli.pool == PoolArg::Both {
            out!("{}", pool_table(&main, counts));
        }
        if both_runners {
            out!("{}", runner_table(&rows, counts, cli.pool.kinds()));
        }
        out!("{}", state_table(&states, counts, cli.repeat as usize));
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The cells of round `round` at `threads` producers, each for `duration`, in the order they
/// run, each with whether it is the per-packet twin of an engine cell (`--runner both`). The
/// order rotates each round so that no contender always runs first or last, and reverses
/// (with the pools' and runners' order) every other round so that no contender always
/// follows the same one.
fn round_cells(
    cli: &Cli,
    base: &Workload,
    threads: u64,
    round: usize,
    duration: Duration,
) -> Vec<(Workload, bool)> {
    let n = Contender::ALL.len();
    let backwards = round % 2 == 1;
    let mut pools = cli.pool.kinds().to_vec();
    if backwards {
        pools.reverse();
    }
    let mut cells = Vec::new();
    for k in 0..n {
        let k = if backwards { n - 1 - k } else { k };
        let contender = Contender::ALL[(k + round) % n];
        for &pool in &pools {
            let w = Workload {
                contender,
                producers: threads as usize,
                pool,
                duration: Some(duration),
                ..base.clone()
            };
            // --runner both: each engine cell again with the per-packet runner, right after
            // its batched twin, so that both see the same machine state.
            let twin = cli.runner == RunnerArg::Both && matches!(contender, Contender::Engine(_));
            let runners: &[bool] = match (twin, backwards) {
                (true, false) => &[true, false],
                (true, true) => &[false, true],
                (false, _) => &[w.qdisc_batch],
            };
            for &qdisc_batch in runners {
                let w = Workload {
                    qdisc_batch,
                    ..w.clone()
                };
                cells.push((w, twin && !qdisc_batch));
            }
        }
    }
    cells
}

/// How many slices a cell of `duration` seconds runs in, for slices of about `slice` seconds
/// (0: one).
fn slices(duration: f64, slice: f64) -> usize {
    if slice == 0.0 {
        return 1;
    }
    ((duration / slice).round() as usize).clamp(1, 10_000)
}

/// What the cross-core probe read before each group of cells, a row per producer count and a
/// column per round of `--repeat` (the group's slices ran right after the probe), so that a
/// reader can tell which rounds ran on which machine state.
fn state_table(states: &[(usize, u64, Option<f64>)], counts: &[u64], rounds: usize) -> String {
    let mut out = String::from(
        "\nping-pong before each group (ns one way between the first two CPUs; `-`: no probe):\n\n| threads |",
    );
    for r in 0..rounds {
        let _ = write!(out, " repeat {r} |");
    }
    out.push_str("\n|---:|");
    out.push_str(&"---:|".repeat(rounds));
    out.push('\n');
    for &t in counts {
        let _ = write!(out, "| {t} |");
        for r in 0..rounds {
            let ns = states
                .iter()
                .find(|&&(round, threads, _)| round == r && threads == t)
                .and_then(|&(_, _, ns)| ns);
            match ns {
                Some(ns) => {
                    let _ = write!(out, " {ns:.0} |");
                }
                None => out.push_str(" - |"),
            }
        }
        out.push('\n');
    }
    out
}

/// One cell of one round of `--compare`.
struct CompareRow {
    round: usize,
    threads: u64,
    contender: Contender,
    pool: PoolKind,
    /// The per-packet twin of an engine cell (`--runner both`); the main tables leave it out.
    per_packet: bool,
    cell: Cell,
}

/// The rate of one cell of one round (NaN if it did not run).
fn cell_pps(rows: &[&CompareRow], round: usize, threads: u64, c: Contender, pool: PoolKind) -> f64 {
    rows.iter()
        .find(|r| r.round == round && r.threads == threads && r.contender == c && r.pool == pool)
        .map_or(f64::NAN, |r| r.cell.pps())
}

/// `1.02x (0.95–1.10)`: the median of in-round ratios and their range (just the ratio for one
/// round).
fn ratio_cell(xs: &[f64]) -> String {
    let (lo, hi) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    if xs.len() > 1 {
        format!("{:.2}x ({lo:.2}–{hi:.2})", harness::median(xs))
    } else {
        format!("{:.2}x", harness::median(xs))
    }
}

/// The number of rounds in `rows`.
fn rounds(rows: &[&CompareRow]) -> usize {
    rows.iter().map(|r| r.round + 1).max().unwrap_or(0)
}

/// The before/after table: per thread count, contender and pool kind the median rate, CPU per
/// packet and the largest drop count over the rounds, then the contender against busylock and
/// against the best peer (mutex or segqueue, same pool kind) and against the bound (a driver per
/// producer) of the same round, as the median and range of those ratios.
fn compare_table(rows: &[&CompareRow], counts: &[u64], pools: &[PoolKind]) -> String {
    let rounds = rounds(rows);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| threads | strategy | pool | Mpps | drops | CPU ns/pkt | vs busylock | vs best peer | vs bound |"
    );
    let _ = writeln!(out, "|---:|---|---|---:|---:|---:|---:|---:|---:|");
    for &threads in counts {
        for contender in Contender::ALL {
            for &pool in pools {
                let mine: Vec<&&CompareRow> = rows
                    .iter()
                    .filter(|r| r.threads == threads && r.contender == contender && r.pool == pool)
                    .collect();
                let mpps: Vec<f64> = mine.iter().map(|r| r.cell.pps() / 1e6).collect();
                let cpu: Vec<f64> = mine.iter().map(|r| r.cell.cpu_ns_per_pkt()).collect();
                let drops = mine.iter().map(|r| r.cell.dropped).max().unwrap_or(0);
                let pps = |k: usize, c: Contender| cell_pps(rows, k, threads, c, pool);
                // This contender's rate over `other`'s, round by round.
                let vs = |other: &dyn Fn(usize) -> f64| -> Vec<f64> {
                    (0..rounds).map(|k| pps(k, contender) / other(k)).collect()
                };
                let vs_busy = vs(&|k| pps(k, Contender::Engine(Strategy::BusyLock)));
                let vs_peer = vs(&|k| pps(k, Contender::Mutex).max(pps(k, Contender::SegQueue)));
                let vs_bound = vs(&|k| pps(k, Contender::OwnQueue));
                let _ = writeln!(
                    out,
                    "| {threads} | {} | {} | {:.2} | {drops} | {:.0} | {} | {} | {} |",
                    contender.name(),
                    pool.name(),
                    harness::median(&mpps),
                    harness::median(&cpu),
                    ratio_cell(&vs_busy),
                    ratio_cell(&vs_peer),
                    ratio_cell(&vs_bound)
                );
            }
        }
    }
    out
}

/// `--pool both`: each cell's per-CPU rate over its per-owner rate in the same round, as the
/// median and range over the rounds.
fn pool_table(rows: &[&CompareRow], counts: &[u64]) -> String {
    let rounds = rounds(rows);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| threads | strategy | percpu Mpps | owner Mpps | percpu / owner |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|");
    for &threads in counts {
        for contender in Contender::ALL {
            let pps = |pool: PoolKind| -> Vec<f64> {
                (0..rounds)
                    .map(|k| cell_pps(rows, k, threads, contender, pool))
                    .collect()
            };
            let (percpu, owner) = (pps(PoolKind::PerCpu), pps(PoolKind::Owner));
            let ratios: Vec<f64> = percpu.iter().zip(&owner).map(|(p, o)| p / o).collect();
            let _ = writeln!(
                out,
                "| {threads} | {} | {:.2} | {:.2} | {} |",
                contender.name(),
                harness::median(&percpu) / 1e6,
                harness::median(&owner) / 1e6,
                ratio_cell(&ratios)
            );
        }
    }
    out
}

/// `--runner both`: each engine cell with the batched runner against its per-packet twin of the
/// same round (median and range over the rounds), with the median CPU per packet of each.
fn runner_table(rows: &[CompareRow], counts: &[u64], pools: &[PoolKind]) -> String {
    let batched: Vec<&CompareRow> = rows.iter().filter(|r| !r.per_packet).collect();
    let per_packet: Vec<&CompareRow> = rows.iter().filter(|r| r.per_packet).collect();
    let rounds = rounds(&batched);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| threads | strategy | pool | batched Mpps | per-packet Mpps | batched / per-packet | \
         CPU ns/pkt batched | per-packet |"
    );
    let _ = writeln!(out, "|---:|---|---|---:|---:|---:|---:|---:|");
    for &threads in counts {
        for contender in Contender::ALL {
            if !matches!(contender, Contender::Engine(_)) {
                continue;
            }
            for &pool in pools {
                let series = |rows: &[&CompareRow]| -> (Vec<f64>, Vec<f64>) {
                    (0..rounds)
                        .filter_map(|k| {
                            rows.iter().find(|r| {
                                r.round == k
                                    && r.threads == threads
                                    && r.contender == contender
                                    && r.pool == pool
                            })
                        })
                        .map(|r| (r.cell.pps(), r.cell.cpu_ns_per_pkt()))
                        .unzip()
                };
                let (b_pps, b_cpu) = series(&batched);
                let (p_pps, p_cpu) = series(&per_packet);
                let ratios: Vec<f64> = b_pps.iter().zip(&p_pps).map(|(b, p)| b / p).collect();
                let _ = writeln!(
                    out,
                    "| {threads} | {} | {} | {:.2} | {:.2} | {} | {:.0} | {:.0} |",
                    contender.name(),
                    pool.name(),
                    harness::median(&b_pps) / 1e6,
                    harness::median(&p_pps) / 1e6,
                    ratio_cell(&ratios),
                    harness::median(&b_cpu),
                    harness::median(&p_cpu)
                );
            }
        }
    }
    out
}

/// `object` (one JSON object, as [`json_cell`] writes it) with one more field, `key` set to the
/// JSON value `value`.
fn json_with(mut object: String, key: &str, value: &str) -> String {
    object.pop();
    let _ = write!(object, ",\"{key}\":{value}}}");
    object
}

fn json_cell(cell: &Cell, w: &Workload, threads: Option<u64>, round: usize) -> String {
    let mut s = String::from("{");
    let mut field = |k: &str, v: String| {
        if s.len() > 1 {
            s.push(',');
        }
        let _ = write!(s, "\"{k}\":{v}");
    };
    if let Some(t) = threads {
        field("threads", t.to_string());
    } else {
        field("threads", w.producers.to_string());
    }
    field("round", round.to_string());
    field("strategy", format!("\"{}\"", w.contender.name()));
    field("pool", format!("\"{}\"", w.pool.name()));
    field("qdisc", format!("\"{}\"", w.qdisc.name()));
    field("burst", w.burst.to_string());
    field("park", w.park.to_string());
    field(
        "runner",
        format!(
            "\"{}\"",
            if w.qdisc_batch {
                "batched"
            } else {
                "per-packet"
            }
        ),
    );
    field("offered", cell.offered.to_string());
    field("sent", cell.sent.to_string());
    field("dropped", cell.dropped.to_string());
    field("queued", cell.queued.to_string());
    field("duration_s", format!("{:.6}", cell.elapsed.as_secs_f64()));
    field("pps", format!("{:.1}", cell.pps()));
    field("cpu_ns_per_pkt", format!("{:.1}", cell.cpu_ns_per_pkt()));
    if let Some(x) = &cell.xmit {
        let reasons: Vec<String> = DropReason::ALL
            .iter()
            .filter(|r| x.drops_for(**r) != 0)
            .map(|r| format!("\"{}\":{}", r.name(), x.drops_for(*r)))
            .collect();
        field("drops_by_reason", format!("{{{}}}", reasons.join(",")));
        field("requeues", x.requeues.to_string());
        field("root_contended", x.root_contended.to_string());
    }
    s.push('}');
    s
}

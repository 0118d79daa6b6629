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

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use lockless_xmit::harness::{self, Cell, Contender, QdiscKind, Tick, Workload};
use qdisc::{DropReason, Overflow, Strategy};

/// Multi-threaded packet generator over lockless-xmit's transmit engine.
#[derive(Debug, Parser)]
#[command(name = "pktgen", version, about, long_about = None)]
struct Cli {
    /// Where packets go: `null` (a driver doing --driver-ns of work per packet, no privileges
    /// needed).
    #[arg(long, default_value = "null", value_parser = parse_driver)]
    driver: DriverSpec,

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
    /// (comma-separated, e.g. 1,2,4,8,16), each for --duration seconds, and print a table.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=1024))]
    compare: Option<Vec<u64>>,

    /// Print the final figures (and each compare cell) as one JSON object per line.
    #[arg(long)]
    json: bool,
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
enum OverflowArg {
    /// Drop the arriving packet (the kernel's QDISC_BURST_DROP).
    Drop,
    /// Help drain, or park until there is room; never drop.
    Wait,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum DriverSpec {
    Null,
}

impl DriverSpec {
    fn name(&self) -> String {
        match self {
            DriverSpec::Null => "null".into(),
        }
    }
}

fn parse_driver(s: &str) -> Result<DriverSpec, String> {
    match s {
        "null" => Ok(DriverSpec::Null),
        _ => Err("accepted: null".into()),
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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            print!("{}", e.render());
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
    };
    match &cli.compare {
        Some(counts) => compare(&cli, &base, counts),
        None => single(&cli, &base),
    }
}

fn single(cli: &Cli, w: &Workload) -> ExitCode {
    if !cli.json {
        println!(
            "pktgen: {} threads, strategy {}, qdisc {}, driver {}, {} B packets, {} flows, {:.1} s",
            w.producers,
            w.contender.name(),
            w.qdisc.name(),
            cli.driver.name(),
            w.size,
            w.flows,
            cli.duration
        );
    }
    let mut last = Tick::default();
    let json = cli.json;
    let cell = harness::run(w, &mut |t: &Tick| {
        if !json {
            progress_line(&last, t);
        }
        last = *t;
    });
    if json {
        println!("{}", json_cell(&cell, w, None));
    } else {
        report(&cell, w);
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
    println!(
        "{:>6.1}s {:>9.3} Mpps {:>8.3} Gbit/s  drops {:>9}  CPU {:>4.0}%",
        t.elapsed.as_secs_f64(),
        pps / 1e6,
        bps / 1e9,
        t.dropped - last.dropped,
        cpu
    );
}

fn report(cell: &Cell, w: &Workload) {
    println!();
    println!("{cell}");
    println!(
        "conservation: offered {} = sent {} + dropped {} + queued {}: {}",
        cell.offered,
        cell.sent,
        cell.dropped,
        cell.queued,
        if cell.conserved() { "holds" } else { "BROKEN" }
    );
    if let Some(show) = &cell.qdisc_show {
        println!();
        print!("{show}");
    }
    if let Some(x) = &cell.xmit {
        println!();
        print!("{x}");
    }
    if let Some(p) = &cell.pool {
        let t = &p.totals;
        println!();
        println!(
            "pool: {} frames, {} free, {} in use, {} in flight, {} owners",
            p.frame_count, p.free, p.in_use, p.in_flight, p.owners
        );
        println!(
            "  allocs {} local frees {} remote frees {} deferred {} overflow {} wakes {} drains {}",
            t.allocs, t.local_frees, t.remote_frees, t.deferred, t.overflow, t.wakes, t.drains
        );
    }
    let _ = w;
}

fn compare(cli: &Cli, base: &Workload, counts: &[u64]) -> ExitCode {
    let mut rows: Vec<(u64, Contender, Cell)> = Vec::new();
    if !cli.json {
        println!(
            "pktgen --compare: qdisc {}, null driver {} ns/pkt, {} B, {:.1} s per cell",
            base.qdisc.name(),
            base.driver_ns,
            base.size,
            cli.duration
        );
    }
    let mut ok = true;
    for &threads in counts {
        for contender in Contender::ALL {
            let w = Workload {
                contender,
                producers: threads as usize,
                ..base.clone()
            };
            let cell = harness::run(&w, &mut |_| {});
            ok &= cell.conserved();
            if cli.json {
                println!("{}", json_cell(&cell, &w, Some(threads)));
            }
            rows.push((threads, contender, cell));
        }
    }
    if !cli.json {
        print!("{}", compare_table(&rows));
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The before/after table: every cell, then each strategy against busylock and the best peer.
fn compare_table(rows: &[(u64, Contender, Cell)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| threads | strategy | Mpps | drops | CPU ns/pkt | vs busylock | vs best peer |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|");
    for &(threads, contender, ref cell) in rows {
        let same = |c: Contender| {
            rows.iter()
                .find(|(t, k, _)| *t == threads && *k == c)
                .map(|(_, _, cell)| cell.pps())
        };
        let busy = same(Contender::Engine(Strategy::BusyLock)).unwrap_or(f64::NAN);
        let peer = same(Contender::Mutex)
            .unwrap_or(0.0)
            .max(same(Contender::SegQueue).unwrap_or(0.0));
        let _ = writeln!(
            out,
            "| {threads} | {} | {:.2} | {} | {:.0} | {:.2}x | {:.2}x |",
            contender.name(),
            cell.pps() / 1e6,
            cell.dropped,
            cell.cpu_ns_per_pkt(),
            cell.pps() / busy,
            cell.pps() / peer
        );
    }
    out
}

fn json_cell(cell: &Cell, w: &Workload, threads: Option<u64>) -> String {
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
    field("strategy", format!("\"{}\"", w.contender.name()));
    field("qdisc", format!("\"{}\"", w.qdisc.name()));
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

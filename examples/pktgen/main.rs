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
//!
//! Its files: `cli.rs`, the options; `compare.rs`, `--compare` and its tables; `net.rs`, the
//! runs that reach a network (UDP, AF_XDP, `--veth`); `report.rs`, what a run prints; `out.rs`,
//! stdout writes that never panic. This one picks the run the options ask for.

#[macro_use]
mod out;
mod cli;
mod compare;
mod net;
mod report;

use std::process::ExitCode;
use std::time::Duration;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use clap::Parser;
use lockless_xmit::harness::{self, Contender, Tick, Workload};
use qdisc::{Driver, Overflow};
use skb_pool::{RefillOrder, Skb};
use xsk_tx::UdpSendmmsg;

use crate::cli::{
    Cli, DriverSpec, OnOff, OverflowArg, PoolArg, RefillOrderArg, RunnerArg, one_line,
};
use crate::compare::compare;
use crate::net::{MIN_UDP_FRAME, flow_to, udp_writer, veth, xsk};
use crate::out::{STDOUT, STDOUT_FAILED, STDOUT_GONE};
use crate::report::{announce, finish, progress_line};

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

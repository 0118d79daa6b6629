//! What a single run prints: the progress line each second, the summary, the `tc -s`
//! style statistics, and the JSON object of a run or a `--compare` cell.
//!
//! Owns: the formats. Must not: run anything.

use std::fmt::Write as _;
use std::process::ExitCode;

use lockless_xmit::harness::{Cell, Tick, Workload};
use qdisc::DropReason;

use crate::cli::Cli;
use crate::net::VethDrops;

pub(crate) fn finish(
    cli: &Cli,
    w: &Workload,
    cell: &Cell,
    received: Option<(u64, VethDrops)>,
) -> ExitCode {
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

pub(crate) fn progress_line(last: &Tick, t: &Tick) {
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

pub(crate) fn report(cell: &Cell, w: &Workload) {
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

/// `object` (one JSON object, as [`json_cell`] writes it) with one more field, `key` set to the
/// JSON value `value`.
pub(crate) fn json_with(mut object: String, key: &str, value: &str) -> String {
    object.pop();
    let _ = write!(object, ",\"{key}\":{value}}}");
    object
}

pub(crate) fn json_cell(cell: &Cell, w: &Workload, threads: Option<u64>, round: usize) -> String {
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

pub(crate) fn announce(cli: &Cli, w: &Workload) {
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

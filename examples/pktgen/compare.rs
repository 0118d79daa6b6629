//! `--compare`: every contender at every thread count, in rounds and slices whose order
//! rotates, and the tables of same-round ratios and machine states.
//!
//! Owns: the order of the cells and the tables. Must not: format a single run's report
//! (`report.rs`).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use lockless_xmit::harness::{self, Cell, Contender, PoolKind, Workload};
use qdisc::Strategy;

use crate::cli::{Cli, PoolArg, RunnerArg};
use crate::out::stdout_ok;
use crate::report::{json_cell, json_with};

pub(crate) fn compare(cli: &Cli, base: &Workload, counts: &[u64]) -> ExitCode {
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
            if !stdout_ok() {
                // Nobody reads the cells or the tables any more (the header or a JSON line
                // failed to write): not even the probe runs.
                return ExitCode::FAILURE;
            }
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
pub(crate) fn round_cells(
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
pub(crate) fn slices(duration: f64, slice: f64) -> usize {
    if slice == 0.0 {
        return 1;
    }
    ((duration / slice).round() as usize).clamp(1, 10_000)
}

/// What the cross-core probe read before each group of cells, a row per producer count and a
/// column per round of `--repeat` (the group's slices ran right after the probe), so that a
/// reader can tell which rounds ran on which machine state.
pub(crate) fn state_table(
    states: &[(usize, u64, Option<f64>)],
    counts: &[u64],
    rounds: usize,
) -> String {
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
pub(crate) struct CompareRow {
    pub(crate) round: usize,
    pub(crate) threads: u64,
    pub(crate) contender: Contender,
    pub(crate) pool: PoolKind,
    /// The per-packet twin of an engine cell (`--runner both`); the main tables leave it out.
    pub(crate) per_packet: bool,
    pub(crate) cell: Cell,
}

/// The rate of one cell of one round (NaN if it did not run).
pub(crate) fn cell_pps(
    rows: &[&CompareRow],
    round: usize,
    threads: u64,
    c: Contender,
    pool: PoolKind,
) -> f64 {
    rows.iter()
        .find(|r| r.round == round && r.threads == threads && r.contender == c && r.pool == pool)
        .map_or(f64::NAN, |r| r.cell.pps())
}

/// `1.02x (0.95–1.10)`: the median of in-round ratios and their range (just the ratio for one
/// round).
pub(crate) fn ratio_cell(xs: &[f64]) -> String {
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
pub(crate) fn rounds(rows: &[&CompareRow]) -> usize {
    rows.iter().map(|r| r.round + 1).max().unwrap_or(0)
}

/// The before/after table: per thread count, contender and pool kind the median rate, CPU per
/// packet and the largest drop count over the rounds, then the contender against busylock and
/// against the best peer (mutex or segqueue, same pool kind) and against the bound (a driver per
/// producer) of the same round, as the median and range of those ratios.
pub(crate) fn compare_table(rows: &[&CompareRow], counts: &[u64], pools: &[PoolKind]) -> String {
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
pub(crate) fn pool_table(rows: &[&CompareRow], counts: &[u64]) -> String {
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
pub(crate) fn runner_table(rows: &[CompareRow], counts: &[u64], pools: &[PoolKind]) -> String {
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

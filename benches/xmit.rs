//! The headline comparison: P producers transmitting pool frames through one queue, with the
//! engine's three strategies (pfifo in the path) against a `Mutex<VecDeque>` drained inline and
//! a `SegQueue` to a dedicated TX thread, at the null driver's 10 ns and 100 ns per packet.
//!
//! Criterion reports transmitted packets/s per cell. After it, the bench prints one table of
//! every cell over all its runs: transmitted Mpps, drops, and CPU nanoseconds per transmitted
//! packet (process CPU time, `getrusage`). `cargo run --release --example pktgen -- --compare`
//! measures the same cells on a fixed duration instead of a fixed packet count.
//!
//! Run: `cargo bench --bench xmit`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use lockless_xmit::harness::{Cell, Contender, Workload, run};

/// Packets per criterion iteration.
const PACKETS: u64 = 20_000;

/// One cell's totals over all its runs.
#[derive(Default)]
struct Totals {
    sent: u64,
    dropped: u64,
    elapsed: Duration,
    cpu: Duration,
}

/// `(driver ns, producers, contender)` → totals, for the table after criterion's report.
static TABLE: Mutex<BTreeMap<(u32, usize, &'static str), Totals>> = Mutex::new(BTreeMap::new());

fn record(driver_ns: u32, producers: usize, contender: Contender, cell: &Cell) {
    let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let a = t
        .entry((driver_ns, producers, contender.name()))
        .or_default();
    a.sent += cell.sent;
    a.dropped += cell.dropped;
    a.elapsed += cell.elapsed;
    a.cpu += cell.cpu;
}

fn bench(c: &mut Criterion) {
    for driver_ns in [10u32, 100] {
        let mut g = c.benchmark_group(format!("xmit_{driver_ns}ns"));
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2))
            .throughput(Throughput::Elements(PACKETS));
        for producers in [1usize, 2, 4, 8, 16] {
            for contender in Contender::ALL {
                let id = BenchmarkId::new(contender.name(), producers);
                g.bench_with_input(id, &producers, |b, &p| {
                    b.iter_custom(|iters| {
                        let total = iters * PACKETS;
                        let w = Workload {
                            contender,
                            producers: p,
                            packets_per_producer: Some(total.div_ceil(p as u64)),
                            driver_ns,
                            ..Workload::default()
                        };
                        let cell = run(&w, &mut |_| {});
                        assert!(cell.conserved(), "{contender:?}: lost packets: {cell}");
                        record(driver_ns, p, contender, &cell);
                        // Time per *transmitted* packet, scaled to the iteration count.
                        cell.elapsed.mul_f64(total as f64 / cell.sent.max(1) as f64)
                    })
                });
            }
        }
        g.finish();
    }
}

/// Every cell over all its runs (warm-up included): Mpps, drops, CPU ns per sent packet.
fn print_table() {
    let t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    if t.is_empty() {
        return;
    }
    println!();
    println!("| driver ns | producers | contender | Mpps | drops | CPU ns/pkt |");
    println!("|---:|---:|---|---:|---:|---:|");
    for (&(ns, p, name), a) in t.iter() {
        let mpps = a.sent as f64 / a.elapsed.as_secs_f64().max(1e-9) / 1e6;
        let cpu = a.cpu.as_nanos() as f64 / a.sent.max(1) as f64;
        println!(
            "| {ns} | {p} | {name} | {mpps:.2} | {} | {cpu:.0} |",
            a.dropped
        );
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    print_table();
}

//! The headline comparison: P producers transmitting pool frames through one queue, with the
//! engine's three strategies (pfifo in the path) against a `Mutex<VecDeque>` drained inline and
//! a `SegQueue` to a dedicated TX thread, at the null driver's 10 ns and 100 ns per packet.
//!
//! Criterion reports transmitted packets/s; `cargo run --release --example pktgen -- --compare`
//! prints the same cells with drops and CPU time per packet.
//!
//! Run: `cargo bench --bench xmit`.

// criterion_group! generates an undocumented `benches` function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use lockless_xmit::harness::{Contender, Workload, run};

/// Packets per criterion iteration.
const PACKETS: u64 = 20_000;

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
                        // Time per *transmitted* packet, scaled to the iteration count.
                        cell.elapsed.mul_f64(total as f64 / cell.sent.max(1) as f64)
                    })
                });
            }
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

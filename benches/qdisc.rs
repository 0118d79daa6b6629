//! Enqueue + dequeue cost per packet of pfifo, pfifo_fast and fq with 1, 100, 10 000 and
//! 100 000 active flows, against a plain `VecDeque` of the same boxed packets.
//!
//! Each flow has a fixed priority (flow id mod 16, so the bands of pfifo_fast and fq all see
//! traffic). Each qdisc is filled with one packet per flow (at least 64) before timing; a timed
//! iteration dequeues one packet and enqueues it again, so the qdisc stays in steady state with
//! every flow active and nothing is allocated in the timed region. `fq` reads the real monotonic
//! clock (twice per packet, as the kernel does); `fq_manual_clock` is the same scheduler on a
//! clock that costs one atomic load.
//!
//! Run: `cargo bench --bench qdisc`.

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use qdisc::{
    FifoBuilder, FlowKey, FqBuilder, ManualClock, MonotonicClock, PfifoFastBuilder, Qdisc,
    TestPacket, ToFree,
};

const FLOWS: [usize; 4] = [1, 100, 10_000, 100_000];

fn packets(flows: usize) -> Vec<TestPacket> {
    let n = flows.max(64);
    (0..n)
        .map(|i| {
            let f = (i % flows) as u64;
            TestPacket::new(i as u64, 1514)
                .with_flow(FlowKey::Socket {
                    id: f,
                    hash: f as u32,
                })
                .with_priority((f % 16) as u32)
        })
        .collect()
}

fn run_qdisc<Q: Qdisc<TestPacket>>(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    flows: usize,
    mut q: Q,
) {
    let mut to_free = ToFree::new();
    for p in packets(flows) {
        q.enqueue(p, &mut to_free);
    }
    assert!(to_free.is_empty(), "{name}: the prefill must fit");
    c.bench_function(BenchmarkId::new(name, flows), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let p = q.dequeue().expect("backlogged");
                black_box(q.enqueue(p, &mut to_free));
            }
            start.elapsed()
        })
    });
    assert!(
        to_free.is_empty(),
        "{name}: nothing dropped in steady state"
    );
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("qdisc");
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    for flows in FLOWS {
        let mut dq: VecDeque<TestPacket> = packets(flows).into_iter().collect();
        g.bench_function(BenchmarkId::new("vecdeque", flows), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let p = dq.pop_front().expect("backlogged");
                    dq.push_back(black_box(p));
                }
                start.elapsed()
            })
        });
        let pfifo = FifoBuilder::pfifo().limit(1 << 20).build().expect("valid");
        run_qdisc(&mut g, "pfifo", flows, pfifo);
        let fast = PfifoFastBuilder::new()
            .tx_queue_len(1 << 20)
            .build()
            .expect("valid");
        run_qdisc(&mut g, "pfifo_fast", flows, fast);
        let fq = FqBuilder::new()
            .clock(Arc::new(MonotonicClock))
            .limit(1 << 20)
            .build()
            .expect("valid");
        run_qdisc(&mut g, "fq", flows, fq);
        // The same scheduler on a clock that costs one atomic load, to separate FQ's own work
        // from `clock_gettime` (about 60 ns a call on this VM).
        let fq = FqBuilder::new()
            .clock(Arc::new(ManualClock::new(1)))
            .limit(1 << 20)
            .build()
            .expect("valid");
        run_qdisc(&mut g, "fq_manual_clock", flows, fq);
    }
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}

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
//! pfifo is compared with `VecDeque` twice. `vecdeque` is the plain push/pop the target names:
//! it moves pointers and never reads a packet. An intrusive FIFO cannot do that (its link lives
//! in the packet, so a dequeue reads the head packet), and neither can any real dequeuer, which
//! reads at least the length of what it sends. So `vecdeque_len` and `pfifo_len` also read the
//! dequeued packet's length, as a driver does, and compare what a sender pays in each case. Both
//! pairs are reported; neither replaces the other.
//!
//! `pfifo_batch32` is pfifo moved in batches of 32 through a chain (`Qdisc::dequeue_batch`
//! into a `Fifo`, then `Qdisc::enqueue_batch` of that `Fifo`), the shape of the engine's
//! batched runner: a drained chain in, a chain out to the driver. `pfifo_loop32` is the same
//! work one packet at a time (each dequeued packet pushed onto the chain, each chained packet
//! popped and enqueued), the engine's per-packet runner; their ratio is the batching speed-up.
//! `pfifo` (no chain at all) stays as the floor.
//!
//! Run: `cargo bench --bench qdisc`; on a loaded machine, `QDISC_BENCH_ROUNDS=15 cargo bench
//! --bench qdisc` interleaves the variants instead (see [`interleaved`]).

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use llist_defer::Fifo;
use lockless_xmit::harness::median;
use qdisc::{
    FifoBuilder, FlowKey, FqBuilder, ManualClock, MonotonicClock, Packet, Pfifo, PfifoFastBuilder,
    Qdisc, TestPacket, ToFree,
};

const FLOWS: [usize; 4] = [1, 100, 10_000, 100_000];

/// Packets per batch in the batched variants (the engine's drain hands over a chain of about
/// this many under load; the kernel's `dev_tx_weight` is 64).
const BATCH: usize = 32;

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

/// pfifo's loop with the sender's read of the length, the peer of `vecdeque_len`.
fn run_pfifo_len(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    flows: usize,
    mut q: Pfifo<TestPacket>,
) {
    let mut to_free = ToFree::new();
    for p in packets(flows) {
        q.enqueue(p, &mut to_free);
    }
    c.bench_function(BenchmarkId::new("pfifo_len", flows), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let p = q.dequeue().expect("backlogged");
                black_box(p.len());
                black_box(q.enqueue(p, &mut to_free));
            }
            start.elapsed()
        })
    });
    assert!(to_free.is_empty(), "pfifo_len: nothing dropped");
}

/// Fills `q` with one packet per flow (at least 64); returns the (empty) to-free list.
fn prefill<Q: Qdisc<TestPacket>>(q: &mut Q, flows: usize) -> ToFree<TestPacket> {
    let mut to_free = ToFree::new();
    for p in packets(flows) {
        q.enqueue(p, &mut to_free);
    }
    assert!(to_free.is_empty(), "the prefill must fit");
    to_free
}

/// About `n` packets through `q` in chains of [`BATCH`]: [`batched_steps`] or
/// [`looped_steps`].
fn chain_steps<Q: Qdisc<TestPacket>>(
    q: &mut Q,
    to_free: &mut ToFree<TestPacket>,
    n: u64,
    batched: bool,
) -> Duration {
    if batched {
        batched_steps(q, to_free, n)
    } else {
        looped_steps(q, to_free, n)
    }
}

/// [`BATCH`] packets at a time: dequeue a batch, enqueue it again. Returns the time for about
/// `n` packets. Not inlined, like [`looped_steps`]: each timed loop keeps its own code, so
/// neither variant's speed depends on where the other lands.
#[inline(never)]
fn batched_steps<Q: Qdisc<TestPacket>>(
    q: &mut Q,
    to_free: &mut ToFree<TestPacket>,
    n: u64,
) -> Duration {
    let mut chain = Fifo::new();
    let start = Instant::now();
    for _ in 0..n.div_ceil(BATCH as u64) {
        black_box(q.dequeue_batch(&mut chain, BATCH));
        black_box(q.enqueue_batch(&mut chain, to_free));
    }
    start.elapsed()
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
        // The same loop, reading each dequeued packet's length as a sender does.
        g.bench_function(BenchmarkId::new("vecdeque_len", flows), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let p = dq.pop_front().expect("backlogged");
                    black_box(p.len());
                    dq.push_back(black_box(p));
                }
                start.elapsed()
            })
        });
        let pfifo = FifoBuilder::pfifo().limit(1 << 20).build().expect("valid");
        run_qdisc(&mut g, "pfifo", flows, pfifo);
        let pfifo = FifoBuilder::pfifo().limit(1 << 20).build().expect("valid");
        run_pfifo_len(&mut g, flows, pfifo);
        for (name, batched) in [("pfifo_batch32", true), ("pfifo_loop32", false)] {
            let mut pfifo: Pfifo<TestPacket> =
                FifoBuilder::pfifo().limit(1 << 20).build().expect("valid");
            let mut to_free = prefill(&mut pfifo, flows);
            // Per packet: `iters` packets in chains of 32.
            g.bench_function(BenchmarkId::new(name, flows), |b| {
                b.iter_custom(|iters| chain_steps(&mut pfifo, &mut to_free, iters, batched))
            });
            assert!(to_free.is_empty(), "{name}: nothing dropped");
        }
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
        run_qdisc(&mut g, "fq_manual_clock", flows, fq_manual());
    }
    g.finish();
}

/// One variant of the interleaved mode: runs `n` dequeue+enqueue steps and returns the time.
type Step = Box<dyn FnMut(u64) -> Duration>;

/// A prefilled qdisc as a [`Step`]; `read_len` adds the sender's read of the length.
fn step_qdisc<Q: Qdisc<TestPacket> + 'static>(flows: usize, mut q: Q, read_len: bool) -> Step {
    let mut to_free = ToFree::new();
    for p in packets(flows) {
        q.enqueue(p, &mut to_free);
    }
    assert!(to_free.is_empty(), "the prefill must fit");
    Box::new(move |n| {
        let start = Instant::now();
        for _ in 0..n {
            let p = q.dequeue().expect("backlogged");
            if read_len {
                black_box(p.len());
            }
            black_box(q.enqueue(p, &mut to_free));
        }
        let t = start.elapsed();
        assert!(to_free.is_empty(), "nothing dropped in steady state");
        t
    })
}

/// [`batched_steps`] one packet at a time: the engine's per-packet runner on the same chain.
#[inline(never)]
fn looped_steps<Q: Qdisc<TestPacket>>(
    q: &mut Q,
    to_free: &mut ToFree<TestPacket>,
    n: u64,
) -> Duration {
    let mut chain = Fifo::new();
    let start = Instant::now();
    for _ in 0..n.div_ceil(BATCH as u64) {
        for _ in 0..BATCH {
            let Some(p) = q.dequeue() else { break };
            chain.push_back(p);
        }
        while let Some(p) = chain.pop_front() {
            black_box(q.enqueue(p, to_free));
        }
    }
    start.elapsed()
}

/// A prefilled qdisc moved in batches of [`BATCH`] as a [`Step`], batched or one by one.
fn step_batched<Q: Qdisc<TestPacket> + 'static>(flows: usize, mut q: Q, batched: bool) -> Step {
    let mut to_free = prefill(&mut q, flows);
    Box::new(move |n| {
        let t = chain_steps(&mut q, &mut to_free, n, batched);
        assert!(to_free.is_empty(), "nothing dropped in steady state");
        t
    })
}

/// The `VecDeque` baseline as a [`Step`].
fn step_vecdeque(flows: usize, read_len: bool) -> Step {
    let mut dq: VecDeque<TestPacket> = packets(flows).into_iter().collect();
    Box::new(move |n| {
        let start = Instant::now();
        for _ in 0..n {
            let p = dq.pop_front().expect("backlogged");
            if read_len {
                black_box(p.len());
            }
            dq.push_back(black_box(p));
        }
        start.elapsed()
    })
}

/// FQ on a clock that costs one atomic load, with room for a million queued packets.
fn fq_manual() -> qdisc::Fq<TestPacket> {
    FqBuilder::new()
        .clock(Arc::new(ManualClock::new(1)))
        .limit(1 << 20)
        .build()
        .expect("valid")
}

/// fq on the manual clock moved in batches of [`BATCH`]: `fq_loop32` one packet at a time (the
/// per-packet runner), `fq_batch32` through `dequeue_batch` + `enqueue_batch` with the default
/// prefetch distances, and, for each `K` of `QDISC_BENCH_FQ_K=K1,K2,..`, `fq_batch32_kK` with
/// the enqueue pipeline at distance `K` (the flow line prefetched at `K/2`) and the dequeue's
/// look-ahead at `K` flows (0: no prefetch), or for `E/D` enqueue distance `E` and dequeue
/// look-ahead `D`, to pick the distances by measurement.
fn fq_batch_variants(flows: usize) -> Vec<(&'static str, Step)> {
    let mut v: Vec<(&'static str, Step)> = vec![
        ("fq_loop32", step_batched(flows, fq_manual(), false)),
        ("fq_batch32", step_batched(flows, fq_manual(), true)),
    ];
    let ks = std::env::var("QDISC_BENCH_FQ_K").unwrap_or_default();
    for k in ks.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        // `K` (both distances) or `E/D` (enqueue distance E, dequeue look-ahead D).
        let (e, d) = k.split_once('/').unwrap_or((k, k));
        let (Ok(e), Ok(d)) = (e.parse::<usize>(), d.parse::<usize>()) else {
            panic!("QDISC_BENCH_FQ_K: {k:?} is not K or E/D");
        };
        let mut q = fq_manual();
        q.set_prefetch_distances(e, d);
        let name: &'static str = Box::leak(format!("fq_batch32_k{k}").into_boxed_str());
        v.push((name, step_batched(flows, q, true)));
    }
    v
}

/// The variants beyond the FIFO pair: pfifo_fast, fq on the real clock, fq on a manual clock.
fn others(flows: usize) -> Vec<(&'static str, Step)> {
    let mut v: Vec<(&'static str, Step)> = Vec::new();
    let fast = PfifoFastBuilder::new()
        .tx_queue_len(1 << 20)
        .build()
        .expect("valid");
    v.push(("pfifo_fast", step_qdisc(flows, fast, false)));
    let fq: qdisc::Fq<TestPacket> = FqBuilder::new()
        .clock(Arc::new(MonotonicClock))
        .limit(1 << 20)
        .build()
        .expect("valid");
    v.push(("fq", step_qdisc(flows, fq, false)));
    v.push(("fq_manual_clock", step_qdisc(flows, fq_manual(), false)));
    v.extend(fq_batch_variants(flows));
    v
}

/// `QDISC_BENCH_ROUNDS=N cargo bench --bench qdisc`: instead of criterion, every variant of
/// one flow count runs a short slice in turn, N rounds, so that load from other processes on a
/// shared machine falls on all of them alike. Prints each variant's median and minimum ns per
/// packet over the rounds, and the median over rounds of the in-round ratios pfifo/vecdeque,
/// pfifo_len/vecdeque_len, pfifo_loop32/pfifo_batch32 (the batching speed-up),
/// pfifo/pfifo_batch32 and
/// fq_manual_clock/vecdeque. `QDISC_BENCH_ONLY=fifo` runs just the
/// FIFO pair, `QDISC_BENCH_ONLY=fq` just `vecdeque`, `fq_manual_clock` and the batched fq
/// variants of [`fq_batch_variants`] (for the flow curve, printed as each fq variant's median
/// over its own at the first flow count, and the in-round ratio fq_loop32/fq_batch32), and
/// `QDISC_BENCH_FLOWS=1,100` just those flow counts.
fn interleaved(rounds: usize) {
    let only = std::env::var("QDISC_BENCH_ONLY").unwrap_or_default();
    let flow_counts: Vec<usize> = std::env::var("QDISC_BENCH_FLOWS")
        .ok()
        .map(|v| v.split(',').filter_map(|f| f.trim().parse().ok()).collect())
        .unwrap_or_else(|| FLOWS.to_vec());
    println!("flows variant median_ns min_ns");
    let first_flows = flow_counts.first().copied().unwrap_or(0);
    let mut fq_base: std::collections::HashMap<&str, f64> = std::collections::HashMap::new();
    for flows in flow_counts {
        let mut variants: Vec<(&str, Step)> = vec![("vecdeque", step_vecdeque(flows, false))];
        let pfifo = || FifoBuilder::pfifo().limit(1 << 20).build().expect("valid");
        if only == "fq" {
            variants.push(("fq_manual_clock", step_qdisc(flows, fq_manual(), false)));
            variants.extend(fq_batch_variants(flows));
        } else {
            variants.push(("vecdeque_len", step_vecdeque(flows, true)));
            variants.push(("pfifo", step_qdisc(flows, pfifo(), false)));
            variants.push(("pfifo_len", step_qdisc(flows, pfifo(), true)));
            variants.push(("pfifo_loop32", step_batched(flows, pfifo(), false)));
            variants.push(("pfifo_batch32", step_batched(flows, pfifo(), true)));
            if only != "fifo" {
                variants.extend(others(flows));
            }
        }
        // Each slice cycles through every queued packet a few times (at least 200 000 steps).
        let n = (4 * flows.max(64)).max(200_000) as u64;
        for (_, step) in &mut variants {
            step(n); // warm-up: one pass
        }
        let mut ns: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        for _ in 0..rounds {
            for (i, (_, step)) in variants.iter_mut().enumerate() {
                ns[i].push(step(n).as_nanos() as f64 / n as f64);
            }
        }
        for (i, (name, _)) in variants.iter().enumerate() {
            let min = ns[i].iter().copied().fold(f64::INFINITY, f64::min);
            println!("{flows} {name} {:.2} {min:.2}", median(&ns[i]));
        }
        let index = |name: &str| variants.iter().position(|(n, _)| *n == name);
        // The flow curve: each fq variant's median against its own at the run's first flow count.
        for (i, (name, _)) in variants.iter().enumerate() {
            if !name.starts_with("fq") {
                continue;
            }
            let m = median(&ns[i]);
            let base = *fq_base.entry(*name).or_insert(m);
            println!("{flows} curve:{name}/{name}@{first_flows} {:.2}", m / base);
        }
        for (a, b) in [
            ("pfifo", "vecdeque"),
            ("pfifo_len", "vecdeque_len"),
            ("pfifo_loop32", "pfifo_batch32"),
            ("pfifo", "pfifo_batch32"),
            ("fq_manual_clock", "vecdeque"),
            ("fq_loop32", "fq_batch32"),
        ] {
            let (Some(a), Some(b)) = (index(a), index(b)) else {
                continue;
            };
            let r: Vec<f64> = ns[a].iter().zip(&ns[b]).map(|(x, y)| x / y).collect();
            println!(
                "{flows} ratio:{}/{} {:.2}",
                variants[a].0,
                variants[b].0,
                median(&r)
            );
        }
    }
}

fn main() {
    if let Some(rounds) = std::env::var("QDISC_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        interleaved(rounds);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}

//! FQ's `enqueue_batch` / `dequeue_batch` (the prefetch pipelines of `fq/batch.rs`) against
//! the same packets through `enqueue` / `dequeue` one by one, on two identical `Fq`s whose
//! manual clocks are stepped identically: random batches of 1–300 packets over up to 120 flows
//! (sockets, reused socket identities, unconnected and orphan hashes) in 2–16 buckets (so a
//! bucket holds more than the 8 flows one GC may free), random priorities, lengths, EDT stamps
//! (some beyond the horizon), pacing rates and caps, TCP or not, limits and flow limits that
//! drop, a flow-count cap, random prefetch and flow-line distances (0, 1, the defaults, the
//! largest; set explicitly, so the pipelines run at these few flows, where by default they would
//! not), with dequeues, peeks and time steps between batches (sub-ms, past `refill_delay`, past
//! the 3 s GC age).
//!
//! After every step the two must agree on: the batch's verdict counts and last verdict, the
//! to-free list (ids in order, and counts per reason), the basic stats, every `FqStats` field
//! (GC, fast path, throttling, flow counts, horizon, CE, band counts), the next wakeup, and the
//! dequeued packets (ids in order and CE marks); the batched one must pass its invariant check.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use llist_defer::Fifo;
use proptest::prelude::*;
use qdisc::{
    BatchVerdict, Clock, DropReason, FlowKey, ManualClock, Packet, Qdisc, TestPacket, ToFree,
};

const MS: u64 = 1_000_000;

/// One packet: flow selector, length, priority, stamp, socket properties.
#[derive(Debug, Clone, Copy)]
struct Spec {
    flow: u8,
    /// Socket identity generation (a new `hash` for the same id: a reused socket).
    generation: u8,
    len: usize,
    priority: u32,
    /// Offset of the EDT stamp from `now - 2 ms` (ns); `Some(u64::MAX)`: far beyond any horizon.
    stamp: Option<u64>,
    pacing: Option<u64>,
    max_pacing: Option<u64>,
    tcp: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Batch(Vec<Spec>),
    Deq(usize),
    Advance(u64),
    /// `peek` on both (a peeked packet waits in the stash, which `dequeue_batch` serves first).
    Peek,
}

fn rate() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        4 => Just(None),
        1 => Just(Some(0)),
        1 => Just(Some(50_000)),
        1 => Just(Some(10_000_000)),
        1 => Just(Some(u64::MAX)),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        (0u8..120, 0u8..2, 40usize..3000, 0u32..16),
        prop_oneof![
            6 => Just(None),
            3 => (0u64..6 * MS).prop_map(Some),
            1 => Just(Some(u64::MAX)),
        ],
        (rate(), rate(), any::<bool>()),
    )
        .prop_map(
            |((flow, generation, len, priority), stamp, (pacing, max_pacing, tcp))| Spec {
                flow,
                generation,
                len,
                priority,
                stamp,
                pacing,
                max_pacing,
                tcp,
            },
        )
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => prop::collection::vec(spec(), 1..=300).prop_map(Op::Batch),
        3 => (0usize..400).prop_map(Op::Deq),
        3 => prop_oneof![
            0u64..2 * MS,
            39 * MS..45 * MS,
            2_998 * MS..3_010 * MS,
        ]
        .prop_map(Op::Advance),
        1 => Just(Op::Peek),
    ];
    prop::collection::vec(op, 1..30)
}

#[derive(Debug, Clone)]
struct Opts {
    hz: u32,
    buckets_log: u32,
    limit: u32,
    flow_limit: u32,
    maxrate: Option<u64>,
    initial_quantum: u32,
    horizon_drop: bool,
    offload_us: u64,
    max_flows: Option<usize>,
    enqueue_distance: usize,
    /// The enqueue's flow-line distance, if not half the enqueue distance.
    flow_distance: Option<usize>,
    dequeue_distance: usize,
}

fn opts() -> impl Strategy<Value = Opts> {
    (
        (
            prop::sample::select(vec![100u32, 250, 1000]),
            1u32..5,
            prop_oneof![1u32..60, 200u32..400, Just(10_000)],
            prop_oneof![1u32..8, Just(100)],
        ),
        (
            prop_oneof![Just(None), Just(Some(1 << 20)), Just(Some(u64::MAX))],
            0u32..20_000,
            any::<bool>(),
            prop_oneof![Just(0u64), 1u64..1000],
            prop_oneof![3 => Just(None), 1 => (1usize..60).prop_map(Some)],
        ),
        (
            prop::sample::select(vec![0usize, 1, 2, 3, 8, 16, 32, 1000]),
            prop::sample::select(vec![None, Some(0usize), Some(1), Some(4), Some(1000)]),
        ),
        prop::sample::select(vec![0usize, 1, 2, 8, 64, 1000]),
    )
        .prop_map(
            |(
                (hz, buckets_log, limit, flow_limit),
                (maxrate, initial_quantum, horizon_drop, offload_us, max_flows),
                (enqueue_distance, flow_distance),
                dequeue_distance,
            )| Opts {
                hz,
                buckets_log,
                limit,
                flow_limit,
                maxrate,
                initial_quantum,
                horizon_drop,
                offload_us,
                max_flows,
                enqueue_distance,
                flow_distance,
                dequeue_distance,
            },
        )
}

fn build(o: &Opts, c: &Arc<ManualClock>) -> TestFq {
    let mut b = fq_builder(c)
        .hz(o.hz)
        .buckets_log(o.buckets_log)
        .limit(o.limit)
        .flow_limit(o.flow_limit)
        .initial_quantum(o.initial_quantum)
        .horizon(Duration::from_millis(5))
        .horizon_drop(o.horizon_drop)
        .max_pacing_offload_horizon(Duration::from_millis(1))
        .offload_horizon(Duration::from_micros(o.offload_us));
    if let Some(r) = o.maxrate {
        b = b.maxrate(r);
    }
    if let Some(n) = o.max_flows {
        b = b.max_flows(n);
    }
    b.build().unwrap()
}

fn flow_of(s: &Spec) -> FlowKey {
    match s.flow {
        0..=79 => FlowKey::Socket {
            id: u64::from(s.flow),
            hash: u32::from(s.generation),
        },
        80..=99 => FlowKey::Unconnected {
            hash: u32::from(s.flow) * 977,
        },
        _ => FlowKey::Orphan {
            hash: u32::from(s.flow) * 131,
        },
    }
}

fn make(id: u64, s: &Spec, now: u64) -> TestPacket {
    let mut p = TestPacket::new(id, s.len)
        .with_flow(flow_of(s))
        .with_priority(s.priority)
        .with_tcp(s.tcp);
    match s.stamp {
        Some(u64::MAX) => p = p.with_tstamp(now + 3_600_000 * MS),
        Some(off) => p = p.with_tstamp((now - 2 * MS).wrapping_add(off)),
        None => {}
    }
    if let Some(r) = s.pacing {
        p = p.with_pacing_rate(r);
    }
    if let Some(r) = s.max_pacing {
        p = p.with_max_pacing_rate(r);
    }
    p
}

/// Every reason's count and every dropped id, in order.
fn drained(tf: &mut ToFree<TestPacket>) -> (Vec<u64>, Vec<u64>) {
    let counts = DropReason::ALL.iter().map(|r| tf.count(*r)).collect();
    let (pkts, _) = tf.take();
    (counts, pkts.into_iter().map(|p| p.id()).collect())
}

fn sent(p: TestPacket) -> (u64, bool, usize) {
    (p.id(), p.ce(), p.len())
}

/// Runs `ops` on a batched and a per-packet twin, comparing after every step.
fn check(o: &Opts, ops: &[Op]) -> Result<(), TestCaseError> {
    let (ca, cb) = (clock(), clock());
    let (mut batched, mut single) = (build(o, &ca), build(o, &cb));
    batched.set_prefetch_distances(o.enqueue_distance, o.dequeue_distance);
    if let Some(h) = o.flow_distance {
        batched.set_flow_prefetch_distance(h);
    }
    let mut next_id = 0u64;
    for op in ops {
        match op {
            Op::Batch(specs) => {
                let now = ca.now_ns();
                let mut batch = Fifo::new();
                let mut want = BatchVerdict::default();
                let (mut tf_a, mut tf_b) = (ToFree::new(), ToFree::new());
                for s in specs {
                    batch.push_back(make(next_id, s, now));
                    want.record(single.enqueue(make(next_id, s, now), &mut tf_b));
                    next_id += 1;
                }
                let got = batched.enqueue_batch(&mut batch, &mut tf_a);
                prop_assert!(batch.is_empty(), "enqueue_batch left packets in the batch");
                prop_assert_eq!(got, want);
                prop_assert_eq!(drained(&mut tf_a), drained(&mut tf_b));
            }
            Op::Deq(k) => {
                let mut out = Fifo::new();
                let n = batched.dequeue_batch(&mut out, *k);
                prop_assert_eq!(n, out.len());
                let got: Vec<_> = out.into_iter().map(sent).collect();
                let want: Vec<_> = (0..*k).map_while(|_| single.dequeue()).map(sent).collect();
                prop_assert_eq!(got, want);
            }
            Op::Advance(ns) => {
                ca.advance(*ns);
                cb.advance(*ns);
            }
            Op::Peek => {
                let a = batched.peek().map(|p| p.id());
                let b = single.peek().map(|p| p.id());
                prop_assert_eq!(a, b);
            }
        }
        prop_assert_eq!(batched.stats(), single.stats());
        prop_assert_eq!(batched.fq_stats(), single.fq_stats());
        prop_assert_eq!(batched.next_wakeup(), single.next_wakeup());
        prop_assert_eq!(batched.gc_queue_len(), single.gc_queue_len());
        if let Err(e) = batched.check_invariants() {
            prop_assert!(false, "batched fq: {}", e);
        }
    }
    // Drain both, time moving on until nothing is left: the rest comes out in the same order.
    for _ in 0..64 {
        let mut out = Fifo::new();
        batched.dequeue_batch(&mut out, usize::MAX);
        let got: Vec<_> = out.into_iter().map(sent).collect();
        let want: Vec<_> = core::iter::from_fn(|| single.dequeue()).map(sent).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(batched.fq_stats(), single.fq_stats());
        if batched.is_empty() {
            break;
        }
        ca.advance(100 * MS);
        cb.advance(100 * MS);
    }
    prop_assert_eq!(batched.stats(), single.stats());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn fq_batch_is_per_packet(o in opts(), ops in ops()) {
        check(&o, &ops)?;
    }
}

/// The cases the generator must reach, made sure of: a bucket with more than 8 flows whose
/// flows have all aged past the GC age, revisited by one batch (GC frees 8 per lookup, flows
/// come back, the fast path opens and closes as the queue fills and drains within the batch),
/// then a batch that overflows the per-band limit part-way.
#[test]
fn gc_fast_path_and_limits_inside_one_batch_match_per_packet() {
    let spec = |flow: u8, priority: u32| Spec {
        flow,
        generation: 0,
        len: 1000,
        priority,
        stamp: None,
        pacing: None,
        max_pacing: None,
        tcp: true,
    };
    // 80 socket flows in 2 buckets, dozens per bucket, 5 packets each: each runs out of its
    // 3000-byte credit after 3, goes to the old list with 2 left, sends them, and is detached
    // (`fq_dequeue`: an empty flow on the old list).
    let first: Vec<Spec> = (0..400).map(|i| spec((i % 80) as u8, 0)).collect();
    let again: Vec<Spec> = (0..80).rev().map(|f| spec(f, f as u32 % 16)).collect();
    // 30 packets of one flow in band 1 (over flow_limit 10), then 10 each for 60 flows in
    // band 2 (over limit 500).
    let flood: Vec<Spec> = (0..30)
        .map(|_| spec(100, 0))
        .chain((0..600).map(|i| spec((i % 60) as u8, 1)))
        .collect();
    let ops = vec![
        Op::Batch(first),
        Op::Deq(1000),
        Op::Advance(40 * MS),
        Op::Deq(1000),
        Op::Advance(3_100 * MS),
        Op::Batch(again),
        Op::Deq(7),
        Op::Batch(flood),
        Op::Deq(50),
    ];
    let opts = |enqueue_distance, flow_distance, dequeue_distance| Opts {
        hz: 1000,
        buckets_log: 1,
        limit: 500,
        flow_limit: 10,
        maxrate: None,
        initial_quantum: 3000,
        horizon_drop: true,
        offload_us: 0,
        max_flows: None,
        enqueue_distance,
        flow_distance,
        dequeue_distance,
    };
    // The last: the default distances (16, flow line at 4, 8).
    for (e, h, d) in [
        (0, None, 0),
        (1, None, 1),
        (8, None, 8),
        (32, None, 64),
        (16, Some(4), 8),
    ] {
        check(&opts(e, h, d), &ops).unwrap();
    }
    // The scenario does exercise GC and the fast path (so the comparison above means something).
    let c = clock();
    let mut q = build(&opts(8, None, 8), &c);
    let mut tf = ToFree::new();
    let mut id = 0;
    for op in &ops {
        match op {
            Op::Batch(specs) => {
                let mut b: Fifo<TestPacket> = specs
                    .iter()
                    .map(|s| {
                        id += 1;
                        make(id, s, c.now_ns())
                    })
                    .collect();
                q.enqueue_batch(&mut b, &mut tf);
            }
            Op::Deq(k) => {
                q.dequeue_batch(&mut Fifo::new(), *k);
            }
            Op::Advance(ns) => c.advance(*ns),
            Op::Peek => {
                q.peek();
            }
        }
    }
    let s = q.fq_stats();
    assert!(s.gc_flows > 8, "GC freed {} flows", s.gc_flows);
    assert!(s.fastpath_packets > 0);
    assert!(s.band_drops[2] > 0, "{:?}", s.band_drops);
    assert!(s.flows_plimit > 0);
}

//! FQ invariants on random operation sequences with random options: no packet lost or
//! duplicated, per-flow send-time order kept (FIFO for unstamped flows), limits respected,
//! counters consistent with a full scan, and no packet stranded without a wakeup.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use qdisc::{Clock, DropReason, FlowKey, Packet, Qdisc, TestPacket, ToFree, Verdict};

#[derive(Debug, Clone)]
enum Op {
    /// flow selector, len, priority, stamp offset (ns) if any
    Enq(u8, usize, u32, Option<u64>),
    Deq,
    Peek,
    Advance(u64),
    Reset,
    SocketCap(u8, Option<u64>),
    /// A live `Fq::change`.
    Change(Changed),
}

/// Options of a live change (`maxrate` `None`: unlimited).
#[derive(Debug, Clone)]
struct Changed {
    limit: u32,
    flow_limit: u32,
    quantum: u32,
    buckets_log: u32,
    weights: [u32; 3],
    orphan_mask: u32,
    maxrate: Option<u64>,
    pacing: bool,
}

fn changed() -> impl Strategy<Value = Changed> {
    (
        (1u32..30, 1u32..8, 256u32..5000, 1u32..19),
        prop::array::uniform3(16_384u32..200_000),
        (
            0u32..8,
            prop::option::of(100_000u64..10_000_000),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (limit, flow_limit, quantum, buckets_log),
                weights,
                (orphan_mask, maxrate, pacing),
            )| {
                Changed {
                    limit,
                    flow_limit,
                    quantum,
                    buckets_log,
                    weights,
                    orphan_mask,
                    maxrate,
                    pacing,
                }
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        200 => (0u8..12, 40usize..4000, 0u32..16, prop::option::weighted(0.3, 0u64..40_000_000))
            .prop_map(|(f, l, p, t)| Op::Enq(f, l, p, t)),
        160 => Just(Op::Deq),
        20 => Just(Op::Peek),
        60 => prop_oneof![0u64..2_000_000, Just(4_000_000_000u64)].prop_map(Op::Advance),
        20 => (0u8..4, prop::option::of(50_000u64..5_000_000)).prop_map(|(s, r)| Op::SocketCap(s, r)),
        1 => Just(Op::Reset),
        6 => changed().prop_map(Op::Change),
    ]
}

#[derive(Debug, Clone)]
struct Opts {
    limit: u32,
    flow_limit: u32,
    quantum: u32,
    maxrate: Option<u64>,
    pacing: bool,
    horizon_drop: bool,
    weights: [u32; 3],
    orphan_mask: u32,
    max_flows: usize,
}

fn opts() -> impl Strategy<Value = Opts> {
    (
        (1u32..30, 1u32..8, 256u32..5000),
        (
            prop::option::of(100_000u64..10_000_000),
            any::<bool>(),
            any::<bool>(),
        ),
        (
            prop::array::uniform3(16_384u32..200_000),
            0u32..8,
            1usize..20,
        ),
    )
        .prop_map(
            |(
                (limit, flow_limit, quantum),
                (maxrate, pacing, horizon_drop),
                (weights, orphan_mask, max_flows),
            )| Opts {
                limit,
                flow_limit,
                quantum,
                maxrate,
                pacing,
                horizon_drop,
                weights,
                orphan_mask,
                max_flows,
            },
        )
}

/// Flow selectors: sockets 0..4 (0 and 1 never stamped; socket 3 changes hash now and then),
/// unconnected and orphan hashes.
fn flow_of(sel: u8, id: u64) -> FlowKey {
    match sel {
        0..=3 => FlowKey::Socket {
            id: u64::from(sel),
            hash: if sel == 3 { (id / 50) as u32 } else { 0 },
        },
        4..=7 => FlowKey::Unconnected {
            hash: u32::from(sel) * 3,
        },
        _ => FlowKey::Orphan {
            hash: u32::from(sel) * 5,
        },
    }
}

/// The flow as FQ keys it (socket id, or masked hash).
fn fq_key(k: FlowKey, mask: u32) -> (bool, u64) {
    match k {
        FlowKey::Socket { id, .. } => (true, id),
        FlowKey::Unconnected { hash } | FlowKey::Orphan { hash } => (false, u64::from(hash & mask)),
    }
}

struct Info {
    key: (bool, u64),
    tts: u64,
    seq: u64,
    stamped_flow: bool,
    /// Sent to the internal queue, by the fast path or because `max_flows` was reached (the
    /// kernel's allocation failure): it bypasses its flow's queue, so it may overtake that
    /// flow's earlier packets (as in the kernel); only flow-queued packets are order-checked.
    bypass: bool,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fq_invariants(o in opts(), ops in prop::collection::vec(op(), 1..300)) {
        let c = clock();
        let mut b = fq_builder(&c)
            .limit(o.limit)
            .flow_limit(o.flow_limit)
            .quantum(o.quantum)
            .pacing(o.pacing)
            .horizon(Duration::from_millis(30))
            .horizon_drop(o.horizon_drop)
            .weights(o.weights)
            .orphan_mask(o.orphan_mask)
            .max_flows(o.max_flows);
        if let Some(r) = o.maxrate { b = b.maxrate(r) }
        let mut q: TestFq = b.build().unwrap();
        let horizon = 30_000_000;
        // Changed live by `Op::Change`; `limit_bound` is the highest limit in force since the
        // qdisc was last empty (a lowered limit keeps packets admitted under the old one while
        // only throttled flows hold them).
        let (mut mask, mut limit, mut limit_bound) = (o.orphan_mask, o.limit, o.limit);

        let mut inside: HashMap<u64, Info> = HashMap::new();
        let mut gone: HashSet<u64> = HashSet::new();
        let mut last_out: HashMap<(bool, u64), (u64, u64)> = HashMap::new();
        let (mut sent_bytes, mut drops, mut seq) = (0u64, 0u64, 0u64);

        let depart = |p: TestPacket, inside: &mut HashMap<u64, Info>, gone: &mut HashSet<u64>, last_out: &mut HashMap<(bool, u64), (u64, u64)>| -> Result<(), TestCaseError> {
            let info = inside.remove(&p.id());
            prop_assert!(info.is_some(), "packet {} left twice or was never queued", p.id());
            let info = info.unwrap();
            prop_assert!(gone.insert(p.id()));
            if info.bypass {
                return Ok(());
            }
            if let Some(&(tts, s)) = last_out.get(&info.key) {
                prop_assert!(info.tts >= tts, "flow {:?}: send time went back", info.key);
                if !info.stamped_flow {
                    prop_assert!(info.seq > s, "flow {:?}: FIFO broken", info.key);
                }
            }
            last_out.insert(info.key, (info.tts, info.seq));
            Ok(())
        };

        for (i, op) in ops.into_iter().enumerate() {
            let id = i as u64;
            let now = c.now_ns();
            match op {
                Op::Enq(sel, len, prio, stamp) => {
                    let flow = flow_of(sel, id);
                    let stamped_flow = sel >= 2;
                    let stamp = if stamped_flow { stamp } else { None };
                    let mut p = pkt(id, len, flow).with_priority(prio);
                    if let Some(off) = stamp { p = p.with_tstamp(now + 1 + off) }
                    if sel == 2 { p = p.with_pacing_rate(1_000_000) }
                    let tts = match stamp {
                        None => now,
                        Some(off) => (now + 1 + off).min(now + horizon),
                    };
                    let mut tf = ToFree::new();
                    seq += 1;
                    let before = q.fq_stats();
                    let internal = |st: &qdisc::FqStats| st.allocation_errors + st.fastpath_packets;
                    match q.enqueue(p, &mut tf) {
                        Verdict::Success => {
                            prop_assert!(tf.is_empty());
                            let bypass = internal(&q.fq_stats()) != internal(&before);
                            inside.insert(id, Info { key: fq_key(flow, mask), tts, seq, stamped_flow, bypass });
                        }
                        Verdict::Dropped(r) => {
                            prop_assert_eq!(tf.len(), 1);
                            prop_assert!(matches!(r, DropReason::FqBandLimit | DropReason::FqFlowLimit | DropReason::FqHorizonLimit));
                            if r == DropReason::FqHorizonLimit {
                                prop_assert!(o.horizon_drop && stamp.unwrap() + 1 > horizon);
                            }
                            drops += 1;
                            gone.insert(id);
                        }
                        Verdict::Congested(_) => prop_assert!(false, "FQ never drops another packet"),
                    }
                }
                Op::Deq => {
                    if let Some(p) = q.dequeue() {
                        sent_bytes += p.len() as u64;
                        depart(p, &mut inside, &mut gone, &mut last_out)?;
                    } else if !q.is_empty() {
                        let w = q.next_wakeup();
                        prop_assert!(w.is_some(), "packets queued, none eligible, no wakeup");
                        prop_assert!(w.unwrap() > c.now_ns());
                    }
                }
                Op::Peek => {
                    let peeked = q.peek().map(|p| p.id());
                    if let Some(pid) = peeked {
                        prop_assert!(inside.contains_key(&pid));
                        let p = q.dequeue().unwrap();
                        prop_assert_eq!(p.id(), pid, "dequeue returns what peek showed");
                        sent_bytes += p.len() as u64;
                        depart(p, &mut inside, &mut gone, &mut last_out)?;
                    }
                }
                Op::Advance(ns) => c.advance(ns),
                Op::Reset => {
                    let mut tf = ToFree::new();
                    q.reset(&mut tf, DropReason::Deactivated);
                    prop_assert_eq!(tf.len(), inside.len());
                    for (k, _) in inside.drain() { gone.insert(k); }
                    last_out.clear();
                }
                Op::SocketCap(s, r) => q.set_socket_max_pacing_rate(u64::from(s), r),
                Op::Change(ch) => {
                    let b = q
                        .to_builder()
                        .limit(ch.limit)
                        .flow_limit(ch.flow_limit)
                        .quantum(ch.quantum)
                        .buckets_log(ch.buckets_log)
                        .weights(ch.weights)
                        .orphan_mask(ch.orphan_mask)
                        .maxrate(ch.maxrate.unwrap_or(u64::MAX))
                        .pacing(ch.pacing);
                    let mut tf = ToFree::new();
                    let before = q.len();
                    let n = q.change(b, &mut tf).unwrap();
                    prop_assert_eq!(q.config().maxrate, ch.maxrate);
                    prop_assert_eq!(tf.len(), n);
                    prop_assert_eq!(tf.count(DropReason::QdiscOverlimit), n as u64);
                    prop_assert_eq!(q.len(), before - n);
                    if n > 0 {
                        prop_assert!(q.len() >= ch.limit as usize, "trimmed below the limit");
                    }
                    // Trimmed packets leave in scheduling order, like sent ones.
                    let (dropped, _) = tf.take();
                    for p in dropped {
                        depart(p, &mut inside, &mut gone, &mut last_out)?;
                        drops += 1;
                    }
                    if q.len() > ch.limit as usize {
                        prop_assert!(q.peek().is_none(), "over the limit with an eligible packet");
                    }
                    mask = ch.orphan_mask;
                    limit = ch.limit;
                    limit_bound = limit_bound.max(limit);
                }
            }
            if q.is_empty() {
                limit_bound = limit;
            }
            if let Err(e) = q.check_invariants() {
                prop_assert!(false, "{}", e);
            }
            let s = q.stats();
            prop_assert_eq!(s.qlen as usize, inside.len());
            prop_assert_eq!((s.bytes, s.drops), (sent_bytes, drops));
            let st = q.fq_stats();
            prop_assert!(st.flows as usize <= o.max_flows);
            prop_assert!(st.band_pkt_count.iter().all(|&n| n <= limit_bound));
            prop_assert!(st.inactive_flows + st.throttled_flows <= st.flows);
        }

        // Drain: everything still queued leaves, following the wakeups.
        let mut guard = 0;
        while !q.is_empty() {
            guard += 1;
            prop_assert!(guard < 100_000);
            match q.dequeue() {
                Some(p) => depart(p, &mut inside, &mut gone, &mut last_out)?,
                None => {
                    let w = q.next_wakeup();
                    prop_assert!(w.is_some(), "stranded packets");
                    c.set(w.unwrap());
                }
            }
        }
        prop_assert!(inside.is_empty());
        q.check_invariants().unwrap();
    }
}

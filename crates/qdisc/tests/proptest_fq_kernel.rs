//! FQ against rules read off Linux v6.19 `sch_fq.c`, on random enqueue/dequeue/time sequences:
//! idle gaps around `refill_delay` and the 3 s GC age, an offload horizon, rates 0, 1 and
//! `u64::MAX`, TCP and other sockets with and without `SO_MAX_PACING_RATE`, `HZ` 100..1000.
//!
//! Checked at every step: conservation (every packet queued, sent or dropped with its reason,
//! once), FIFO order of unstamped packets within a flow, per-band packet counts, the fast-path
//! decision (`fq_fastpath_check`, recomputed here from the state before the enqueue), and that
//! GC frees only detached flows of the looked-up bucket (`hash_ptr(sk, buckets_log)` with
//! `GOLDEN_RATIO_64`), never the looked-up flow, at most 8, none on the fast path, each idle
//! for more than 3·HZ jiffies.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use qdisc::{Clock, DropReason, FlowKey, PRIO2BAND, Packet, Qdisc, TestPacket, ToFree, Verdict};

const MS: u64 = 1_000_000;
const GOLDEN_RATIO_64: u64 = 0x61C8_8646_80B5_83EB;
const ORPHAN_MASK: u32 = 1023;

/// A socket's fixed properties: TCP or not, `sk_pacing_rate`, `sk_max_pacing_rate`.
#[derive(Debug, Clone, Copy)]
struct Sock {
    tcp: bool,
    pacing: Option<u64>,
    max: Option<u64>,
}

fn rate() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        Just(None),
        Just(Some(0)),
        Just(Some(1)),
        Just(Some(50_000)),
        Just(Some(10_000_000)),
        Just(Some(u64::MAX)),
    ]
}

fn socks() -> impl Strategy<Value = Vec<Sock>> {
    prop::collection::vec(
        (any::<bool>(), rate(), rate()).prop_map(|(tcp, pacing, max)| Sock { tcp, pacing, max }),
        6,
    )
}

#[derive(Debug, Clone)]
enum Op {
    /// flow selector, len, priority, stamp offset from now - 2 ms (ns) if any
    Enq(u8, usize, u32, Option<u64>),
    Deq,
    Advance(u64),
    /// `set_socket_max_pacing_rate` on a socket
    Cap(u8, Option<u64>),
    Reset,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        200 => (0u8..11, 40usize..3000, 0u32..16, prop::option::weighted(0.3, 1u64..6 * MS))
            .prop_map(|(f, l, p, t)| Op::Enq(f, l, p, t)),
        160 => Just(Op::Deq),
        60 => prop_oneof![
            0u64..2 * MS,
            39 * MS..43 * MS,
            2_998 * MS..3_004 * MS,
        ]
        .prop_map(Op::Advance),
        10 => (0u8..6, rate()).prop_map(|(s, r)| Op::Cap(s, r)),
        1 => Just(Op::Reset),
    ]
}

#[derive(Debug, Clone)]
struct Opts {
    hz: u32,
    buckets_log: u32,
    offload_us: u64,
    maxrate: Option<u64>,
    limit: u32,
    flow_limit: u32,
    initial_quantum: u32,
}

fn opts() -> impl Strategy<Value = Opts> {
    (
        prop::sample::select(vec![100u32, 250, 300, 1000]),
        1u32..4,
        prop_oneof![Just(0u64), 1u64..1000],
        prop_oneof![
            Just(None),
            Just(Some(1)),
            Just(Some(u64::MAX)),
            Just(Some(1 << 40))
        ],
        (1u32..40, 1u32..10, 0u32..20_000),
    )
        .prop_map(
            |(hz, buckets_log, offload_us, maxrate, (limit, flow_limit, initial_quantum))| Opts {
                hz,
                buckets_log,
                offload_us,
                maxrate,
                limit,
                flow_limit,
                initial_quantum,
            },
        )
}

/// The flow universe: sockets 0..6, unconnected hashes 3, 1027 (= 3 under the mask) and 7,
/// orphan hashes 5 and 9.
fn flow_of(sel: u8) -> FlowKey {
    match sel {
        0..=5 => FlowKey::Socket {
            id: u64::from(sel),
            hash: 0,
        },
        6 => FlowKey::Unconnected { hash: 3 },
        7 => FlowKey::Unconnected { hash: 1027 },
        8 => FlowKey::Unconnected { hash: 7 },
        9 => FlowKey::Orphan { hash: 5 },
        _ => FlowKey::Orphan { hash: 9 },
    }
}

/// The kernel's `sk` of a flow (the model's: socket id << 1, or the odd masked hash).
fn sk_of(k: FlowKey) -> u64 {
    match k {
        FlowKey::Socket { id, .. } => id << 1,
        FlowKey::Unconnected { hash } | FlowKey::Orphan { hash } => {
            (u64::from(hash & ORPHAN_MASK) << 1) | 1
        }
    }
}

/// `hash_ptr(sk, bits)`: `sk * GOLDEN_RATIO_64 >> (64 - bits)`.
fn bucket(k: FlowKey, bits: u32) -> u64 {
    sk_of(k).wrapping_mul(GOLDEN_RATIO_64) >> (64 - bits)
}

fn jiffies(ns: u64, hz: u32) -> u64 {
    ns / 1_000_000_000 * u64::from(hz) + ns % 1_000_000_000 * u64::from(hz) / 1_000_000_000
}

struct Info {
    key: u64,
    seq: u64,
    stamped: bool,
    band: usize,
    /// In the internal queue (fast path or allocation failure): outside flows and bands.
    internal: bool,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fq_follows_the_kernel(o in opts(), socks in socks(), ops in prop::collection::vec(op(), 1..300)) {
        let c = clock();
        let off = o.offload_us * 1000;
        let mut b = fq_builder(&c)
            .hz(o.hz)
            .buckets_log(o.buckets_log)
            .max_pacing_offload_horizon(Duration::from_millis(1))
            .offload_horizon(Duration::from_micros(o.offload_us))
            .limit(o.limit)
            .flow_limit(o.flow_limit)
            .initial_quantum(o.initial_quantum);
        if let Some(r) = o.maxrate { b = b.maxrate(r) }
        let mut q: TestFq = b.build().unwrap();
        let maxrate_unlimited = o.maxrate.is_none_or(|r| r == u64::MAX);
        let mut caps: HashMap<u8, u64> = HashMap::new();

        let mut inside: HashMap<u64, Info> = HashMap::new();
        let mut last_seq: HashMap<u64, u64> = HashMap::new();
        // When each flow last had a packet enqueued (a detached flow's age is not earlier).
        let mut last_enq: HashMap<u8, u64> = HashMap::new();
        let (mut sent, mut drops, mut seq) = (0u64, 0u64, 0u64);

        let depart = |p: TestPacket, inside: &mut HashMap<u64, Info>, last_seq: &mut HashMap<u64, u64>| -> Result<(), TestCaseError> {
            let info = inside.remove(&p.id());
            prop_assert!(info.is_some(), "packet {} left twice or was never queued", p.id());
            let info = info.unwrap();
            if !info.internal && !info.stamped {
                if let Some(&s) = last_seq.get(&info.key) {
                    prop_assert!(info.seq > s, "flow {:#x}: unstamped packets reordered", info.key);
                }
                last_seq.insert(info.key, info.seq);
            }
            Ok(())
        };

        for (i, op) in ops.into_iter().enumerate() {
            let id = i as u64;
            let now = c.now_ns();
            match op {
                Op::Enq(sel, len, prio, stamp) => {
                    let flow = flow_of(sel);
                    let mut p = pkt(id, len, flow).with_priority(prio);
                    let sock = (sel < 6).then(|| socks[usize::from(sel)]);
                    if let Some(s) = sock {
                        p = p.with_tcp(s.tcp);
                        if let Some(r) = s.pacing { p = p.with_pacing_rate(r) }
                        if let Some(r) = s.max { p = p.with_max_pacing_rate(r) }
                    }
                    let ts = stamp.map(|o| (now + o).saturating_sub(2 * MS).max(1));
                    if let Some(t) = ts { p = p.with_tstamp(t) }
                    let band = usize::from(PRIO2BAND[(prio & 15) as usize]);

                    // The kernel's fast-path decision from the state before the enqueue.
                    let st = q.fq_stats();
                    let tts = ts.unwrap_or(now);
                    let horizon = now.wrapping_add(off);
                    let tndf = st.next_delayed_flow_ns.unwrap_or(u64::MAX);
                    let idle_enough = q.is_empty()
                        || (st.flows == st.inactive_flows + st.throttled_flows
                            && q.internal_len() < 8
                            && tndf > horizon);
                    let has_sk = !matches!(flow, FlowKey::Orphan { .. });
                    let max = match (sock, caps.get(&sel)) {
                        (Some(s), cap) => s.max.unwrap_or(u64::MAX).min(cap.copied().unwrap_or(u64::MAX)),
                        (None, _) => u64::MAX,
                    };
                    let capped_non_tcp = has_sk && !sock.is_some_and(|s| s.tcp) && max != u64::MAX;
                    let band_full = st.band_pkt_count[band] >= o.limit;
                    let fast = !band_full && tts <= horizon && idle_enough && !capped_non_tcp && maxrate_unlimited;

                    // One selector per flow key (7 is 6's key under the mask).
                    let existed: Vec<u8> = (0..11).filter(|&s| s != 7 && q.has_flow(flow_of(s))).collect();
                    let mut tf = ToFree::new();
                    seq += 1;
                    let verdict = q.enqueue(p, &mut tf);
                    let after = q.fq_stats();
                    prop_assert_eq!(after.fastpath_packets - st.fastpath_packets, u64::from(fast),
                        "fast path: tts {} now {} idle_enough {} capped_non_tcp {}", tts, now, idle_enough, capped_non_tcp);

                    // GC: only candidates of this packet's bucket, never its own flow, at most 8.
                    let vanished: Vec<u8> = existed.iter().copied().filter(|&s| !q.has_flow(flow_of(s))).collect();
                    prop_assert_eq!(vanished.len() as u64, after.gc_flows - st.gc_flows);
                    prop_assert!(vanished.len() <= 8);
                    if fast || band_full {
                        prop_assert!(vanished.is_empty(), "GC on the fast path or before a band drop");
                    }
                    let j = jiffies(now, o.hz);
                    for &v in &vanished {
                        let vk = flow_of(v);
                        prop_assert!(sk_of(vk) != sk_of(flow), "GC freed the looked-up flow");
                        prop_assert_eq!(bucket(vk, o.buckets_log), bucket(flow, o.buckets_log),
                            "GC freed a flow of another bucket");
                        prop_assert!(q.bucket_of(vk) as u64 == bucket(vk, o.buckets_log));
                        let last = jiffies(last_enq.get(&v).copied().unwrap_or(0), o.hz);
                        prop_assert!(j > last + 3 * u64::from(o.hz), "freed a flow idle under 3 s");
                    }

                    match verdict {
                        Verdict::Success => {
                            prop_assert!(tf.is_empty());
                            let internal = after.fastpath_packets + after.allocation_errors
                                != st.fastpath_packets + st.allocation_errors;
                            inside.insert(id, Info { key: sk_of(flow), seq, stamped: ts.is_some(), band, internal });
                            // The flow was used (selectors sharing a key share a flow); a packet
                            // sent to the internal queue touches no flow.
                            if !internal {
                                for s in 0..11 {
                                    if sk_of(flow_of(s)) == sk_of(flow) {
                                        last_enq.insert(s, now);
                                    }
                                }
                            }
                        }
                        Verdict::Dropped(r) => {
                            prop_assert_eq!(tf.len(), 1);
                            prop_assert!(matches!(r, DropReason::FqBandLimit | DropReason::FqFlowLimit));
                            prop_assert_eq!(r == DropReason::FqBandLimit, band_full);
                            drops += 1;
                        }
                        Verdict::Congested(_) => prop_assert!(false, "FQ never drops another packet"),
                    }
                }
                Op::Deq => {
                    if let Some(p) = q.dequeue() {
                        sent += p.len() as u64;
                        depart(p, &mut inside, &mut last_seq)?;
                    } else if !q.is_empty() {
                        let w = q.next_wakeup();
                        prop_assert!(w.is_some(), "packets queued, none eligible, no wakeup");
                    }
                }
                Op::Advance(ns) => c.advance(ns),
                Op::Cap(s, r) => {
                    q.set_socket_max_pacing_rate(u64::from(s), r);
                    match r {
                        Some(r) => caps.insert(s, r),
                        None => caps.remove(&s),
                    };
                }
                Op::Reset => {
                    let mut tf = ToFree::new();
                    q.reset(&mut tf, DropReason::Deactivated);
                    prop_assert_eq!(tf.len(), inside.len());
                    inside.clear();
                    last_seq.clear();
                }
            }
            if let Err(e) = q.check_invariants() {
                prop_assert!(false, "{}", e);
            }
            let s = q.stats();
            prop_assert_eq!(s.qlen as usize, inside.len());
            prop_assert_eq!((s.bytes, s.drops), (sent, drops));
            let mut bands = [0u32; 3];
            for info in inside.values().filter(|i| !i.internal) {
                bands[info.band] += 1;
            }
            prop_assert_eq!(q.fq_stats().band_pkt_count, bands);
            prop_assert_eq!(q.internal_len() as usize, inside.values().filter(|i| i.internal).count());
        }

        // Drain: everything still queued leaves, following the wakeups.
        let mut guard = 0;
        while !q.is_empty() {
            guard += 1;
            prop_assert!(guard < 100_000);
            match q.dequeue() {
                Some(p) => depart(p, &mut inside, &mut last_seq)?,
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

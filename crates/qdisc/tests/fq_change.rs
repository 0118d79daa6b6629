//! `Fq::change`, the live `tc qdisc change ... fq ...` (`fq_change`, `fq_resize`): the limit
//! trim, validation that changes nothing on a bad value, the flow index resize, and each option
//! taking effect on a running qdisc, measured on a manual clock.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use qdisc::{
    Clock, DropReason, FlowKey, FqBuilder, ManualClock, Packet, Qdisc, RecordingDriver, Strategy,
    TestPacket, ToFree, TxQueue, Verdict,
};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// Changes `q` to the options in force edited by `edit`; the drop count and the dropped.
fn change(
    q: &mut TestFq,
    edit: impl FnOnce(FqBuilder) -> FqBuilder,
) -> (usize, ToFree<TestPacket>) {
    let mut tf = ToFree::new();
    let n = q
        .change(edit(q.to_builder()), &mut tf)
        .expect("valid change");
    (n, tf)
}

/// Fills `q` with `per_flow` packets of each of `flows` sockets (interleaved), ids from 1.
fn fill(q: &mut TestFq, flows: u64, per_flow: u64, len: usize) -> u64 {
    let mut id = 0;
    for _ in 0..per_flow {
        for f in 0..flows {
            id += 1;
            assert_eq!(enq(q, pkt(id, len + f as usize, sock(f))), Verdict::Success);
        }
    }
    id
}

/// Dequeues everything that is eligible now.
fn drain_now(q: &mut TestFq) -> Vec<TestPacket> {
    std::iter::from_fn(|| q.dequeue()).collect()
}

#[test]
fn lower_limit_trims_in_dequeue_order_counts_drops_and_conserves_packets() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    let mut twin: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    let n = fill(&mut q, 6, 40, 500);
    fill(&mut twin, 6, 40, 500);
    let mut out = 0;
    for _ in 0..17 {
        assert_eq!(q.dequeue().unwrap().id(), twin.dequeue().unwrap().id());
        out += 1;
    }
    let queued = q.len();
    assert_eq!(queued as u64, n - out);

    let (dropped, tf) = change(&mut q, |b| b.limit(100));
    assert_eq!(dropped, queued - 100);
    assert_eq!(q.len(), 100);
    assert_eq!(tf.len(), dropped);
    assert_eq!(tf.count(DropReason::QdiscOverlimit), dropped as u64);
    assert_eq!(q.stats().drops, dropped as u64);
    assert_eq!(
        q.stats().packets,
        out,
        "trimmed packets do not count as sent"
    );
    let dropped_bytes: u64 = tf.iter().map(|p| p.len() as u64).sum();
    let twin_backlog = twin.backlog();
    assert_eq!(q.backlog(), twin_backlog - dropped_bytes);
    q.check_invariants().unwrap();

    // The kernel trims through fq_dequeue: the dropped packets are exactly the ones a dequeue
    // would have sent next.
    let want: Vec<u64> = (0..dropped).map(|_| twin.dequeue().unwrap().id()).collect();
    let got: Vec<u64> = tf.iter().map(|p| p.id()).collect();
    assert_eq!(got, want);

    // The rest leaves in per-flow order; in = out + dropped + queued at the end.
    let rest = drain_now(&mut q);
    out += rest.len() as u64;
    assert_eq!(n, out + dropped as u64 + q.len() as u64);
    assert!(q.is_empty());
    let mut last: HashMap<FlowKey, u64> = HashMap::new();
    for p in rest {
        let prev = last.insert(p.flow(), p.id()).unwrap_or(0);
        assert!(p.id() > prev, "flow {:?} reordered", p.flow());
    }

    // The new limit holds per band for later enqueues; raising it again drops nothing.
    fill(&mut q, 1, 100, 100);
    assert_eq!(
        enq(&mut q, pkt(9999, 100, sock(0))),
        Verdict::Dropped(DropReason::FqBandLimit)
    );
    let (dropped, _) = change(&mut q, |b| b.limit(1000));
    assert_eq!((dropped, q.len()), (0, 100));
    assert_eq!(enq(&mut q, pkt(10_000, 100, sock(1))), Verdict::Success);
    q.check_invariants().unwrap();
}

#[test]
fn trim_takes_the_fast_path_queue_and_a_peeked_packet_first() {
    let c = clock();
    // Default options: an idle qdisc sends its first packets through the internal queue.
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    for id in 1..=20 {
        enq(&mut q, pkt(id, 100, sock(id % 3)));
    }
    assert_eq!(q.fq_stats().fastpath_packets, 8);
    assert_eq!(q.peek().map(|p| p.id()), Some(1));
    let (dropped, tf) = change(&mut q, |b| b.limit(10));
    assert_eq!(dropped, 10);
    let got: Vec<u64> = tf.iter().map(|p| p.id()).collect();
    assert_eq!(&got[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
    q.check_invariants().unwrap();
    assert_eq!(drain_now(&mut q).len(), 10);
}

#[test]
fn trim_stops_at_throttled_flows_and_they_still_leave_in_time() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    let now = c.now_ns();
    // 10 packets due now and 20 stamped 5 ms ahead (EDT): only the first 10 are eligible.
    for id in 1..=10 {
        enq(&mut q, pkt(id, 100, sock(1)));
    }
    for id in 11..=30 {
        enq(&mut q, pkt(id, 100, sock(2)).with_tstamp(now + 5 * MS));
    }
    let (dropped, tf) = change(&mut q, |b| b.limit(5));
    assert_eq!(dropped, 10, "only eligible packets can be trimmed");
    assert!(tf.iter().all(|p| p.flow() == sock(1)));
    assert_eq!(
        q.len(),
        20,
        "the qdisc stays over its limit until they leave"
    );
    assert_eq!(q.next_wakeup(), Some(now + 5 * MS));
    q.check_invariants().unwrap();
    // Meanwhile the full band refuses packets.
    assert_eq!(
        enq(&mut q, pkt(31, 100, sock(3))),
        Verdict::Dropped(DropReason::FqBandLimit)
    );
    c.set(now + 5 * MS);
    let ids: Vec<u64> = drain_now(&mut q).iter().map(|p| p.id()).collect();
    assert_eq!(ids, (11..=30).collect::<Vec<_>>());
    assert_eq!(q.stats().drops, 11);
    q.check_invariants().unwrap();
}

#[test]
fn bad_values_return_the_typed_error_and_change_nothing() {
    let c = clock();
    let build = || {
        no_fastpath(fq_builder(&c))
            .quantum(2000)
            .max_pacing_offload_horizon(Duration::from_millis(1))
            .build()
            .unwrap()
    };
    let mut q: TestFq = build();
    let mut twin: TestFq = build();
    fill(&mut q, 5, 30, 700);
    fill(&mut twin, 5, 30, 700);
    for _ in 0..7 {
        q.dequeue();
        twin.dequeue();
    }
    let before = q.config().clone();
    let too_long = Duration::from_micros(u64::from(u32::MAX) + 1);
    // Each bad value comes with a lowered limit that must not be applied either.
    let cases: Vec<(&str, FqBuilder)> = vec![
        ("quantum", q.to_builder().quantum(0)),
        ("quantum", q.to_builder().quantum((1 << 20) + 1)),
        (
            "initial_quantum",
            q.to_builder().initial_quantum(i32::MAX as u32 + 1),
        ),
        ("rate_enable", q.to_builder().rate_enable(2)),
        ("buckets", q.to_builder().buckets_log(0)),
        ("buckets", q.to_builder().buckets_log(19)),
        ("buckets", q.to_builder().buckets(1000)),
        ("weights", q.to_builder().weights([589_824, 16_383, 65_536])),
        ("priomap", q.to_builder().priomap([3; 16])),
        ("timer_slack", q.to_builder().timer_slack_ns(1 << 32)),
        ("horizon", q.to_builder().horizon(too_long)),
        ("refill_delay", q.to_builder().refill_delay(too_long)),
        ("ce_threshold", q.to_builder().ce_threshold(too_long)),
        (
            "offload_horizon",
            q.to_builder().offload_horizon(Duration::from_millis(2)),
        ),
        // The device's maximum stays this qdisc's, whatever the builder says.
        (
            "offload_horizon",
            FqBuilder::new()
                .max_pacing_offload_horizon(Duration::from_secs(1))
                .offload_horizon(Duration::from_millis(2)),
        ),
    ];
    for (option, b) in cases {
        let mut tf = ToFree::new();
        let err = q.change(b.limit(3).flow_limit(1), &mut tf).unwrap_err();
        assert_eq!(err.option(), option, "{err}");
        assert_eq!(err.qdisc(), "fq");
        assert!(tf.is_empty());
        assert_eq!(q.config(), &before, "{option}: config changed");
        assert_eq!(q.len(), twin.len());
        q.check_invariants().unwrap();
    }
    // The device maximum itself allows 1 ms.
    let mut tf = ToFree::new();
    q.change(
        q.to_builder().offload_horizon(Duration::from_millis(1)),
        &mut tf,
    )
    .unwrap();
    q.change(q.to_builder().offload_horizon(Duration::ZERO), &mut tf)
        .unwrap();
    assert_eq!(q.config(), &before);
    // And the qdisc behaves exactly like one that was never asked to change.
    for id in 1000..1040 {
        assert_eq!(
            enq(&mut q, pkt(id, 900, sock(id % 7))),
            enq(&mut twin, pkt(id, 900, sock(id % 7)))
        );
    }
    let a: Vec<u64> = drain_now(&mut q).iter().map(|p| p.id()).collect();
    let b: Vec<u64> = drain_now(&mut twin).iter().map(|p| p.id()).collect();
    assert_eq!(a, b);
    assert_eq!(q.stats().drops, 0);
}

#[test]
fn to_builder_round_trips_the_options() {
    let c = clock();
    let q: TestFq = fq_builder(&c)
        .psched_mtu(9000)
        .limit(77)
        .flow_limit(9)
        .maxrate(123_456)
        .pacing(false)
        .buckets_log(5)
        .refill_delay(Duration::from_millis(7))
        .orphan_mask(63)
        .low_rate_threshold(1000)
        .ce_threshold(Duration::from_micros(250))
        .timer_slack_ns(3)
        .horizon(Duration::from_secs(2))
        .horizon_drop(false)
        .priomap([2; 16])
        .weights([20_000, 30_000, 40_000])
        .max_pacing_offload_horizon(Duration::from_millis(1))
        .offload_horizon(Duration::from_micros(10))
        .max_flows(55)
        .build()
        .unwrap();
    let again: TestFq = q.to_builder().build().unwrap();
    assert_eq!(again.config(), q.config());
    assert_eq!(q.config().quantum, 18_000, "from the device's psched_mtu");
    // A fresh builder in a change takes the defaults, with quanta from this device's MTU.
    let mut q = q;
    change(&mut q, |_| FqBuilder::new());
    assert_eq!(q.config().quantum, 18_000);
    assert_eq!(q.config().initial_quantum, 90_000);
    assert_eq!(q.config().limit, 10_000);
}

/// A device MTU so large that 2 x MTU passes quantum's 1 MiB bound: the default quantum stops
/// at the bound, so the options in force still validate when a change carries them all.
#[test]
fn a_huge_mtu_keeps_the_default_quantum_within_its_bound() {
    let c = clock();
    let mut q: TestFq = fq_builder(&c).psched_mtu(600_000).build().unwrap();
    assert_eq!(q.config().quantum, 1 << 20);
    assert_eq!(
        q.config().initial_quantum,
        6_000_000,
        "10 x MTU, under INT_MAX"
    );
    change(&mut q, |b| b.limit(20));
    assert_eq!(q.config().limit, 20);
}

/// Every flow's packets, in the order the qdisc sends them, by flow.
fn per_flow(out: &[TestPacket]) -> HashMap<FlowKey, Vec<u64>> {
    let mut m: HashMap<FlowKey, Vec<u64>> = HashMap::new();
    for p in out {
        m.entry(p.flow()).or_default().push(p.id());
    }
    m
}

#[test]
fn buckets_change_keeps_every_flow_its_packets_and_order() {
    let c = clock();
    let b = || no_fastpath(fq_builder(&c)).buckets_log(4).limit(100_000);
    let mut q: TestFq = b().build().unwrap();
    let mut twin: TestFq = b().build().unwrap();
    let now = c.now_ns();
    // 3000 flows: sockets, unconnected and orphan hashes; some stamped ahead (throttled).
    let key = |i: u64| match i % 3 {
        0 => sock(i),
        1 => FlowKey::Unconnected { hash: i as u32 },
        _ => orphan(i as u32),
    };
    let mut id = 0;
    for round in 0..4 {
        for i in 0..3000u64 {
            id += 1;
            let make = || {
                let p = pkt(id, 200 + (i % 50) as usize, key(i));
                if i % 10 == 0 {
                    p.with_tstamp(now + (round + 1) * MS)
                } else {
                    p
                }
            };
            assert_eq!(enq(&mut q, make()), Verdict::Success);
            enq(&mut twin, make());
        }
    }
    // Some rounds of service first, so flows are spread over lists, credits and the delayed set.
    for _ in 0..2500 {
        assert_eq!(q.dequeue().unwrap().id(), twin.dequeue().unwrap().id());
    }
    let flows = q.fq_stats().flows;
    assert!(q.fq_stats().throttled_flows > 0);
    for log in [18, 1, 10, 4] {
        let (dropped, _) = change(&mut q, |b| b.buckets_log(log));
        assert_eq!(dropped, 0);
        assert_eq!(q.config().buckets_log, log as u8);
        assert_eq!(q.fq_stats().flows, flows);
        q.check_invariants().unwrap();
    }
    assert_eq!(q.len(), twin.len());
    // Same scheduling as the qdisc that was never resized, to the last packet.
    let mut out = vec![];
    let mut twin_out = vec![];
    while !twin.is_empty() {
        out.extend(drain_now(&mut q));
        twin_out.extend(drain_now(&mut twin));
        if let Some(t) = twin.next_wakeup() {
            assert_eq!(q.next_wakeup(), Some(t));
            c.set(t);
        }
    }
    assert!(q.is_empty());
    let ids = |v: &[TestPacket]| v.iter().map(|p| p.id()).collect::<Vec<_>>();
    assert_eq!(ids(&out), ids(&twin_out));
    assert_eq!(out.len() + 2500, 12_000);
    for (flow, v) in per_flow(&out) {
        assert!(v.windows(2).all(|w| w[0] < w[1]), "{flow:?} reordered");
    }
    q.check_invariants().unwrap();
}

#[test]
fn buckets_change_frees_flows_idle_over_three_seconds_like_the_rehash() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    // 20 short flows and a long one (socket 50) that keeps the round robin turning, so the
    // short flows are found empty on the old lists and detached.
    fill(&mut q, 20, 2, 100);
    for id in 1000..1100 {
        enq(&mut q, pkt(id, 1500, sock(50)));
    }
    for _ in 0..100 {
        q.dequeue().unwrap();
    }
    assert_eq!(q.fq_stats().flows, 21);
    // Detached at jiffy 1000 (HZ 1000), age 1001: candidates once time_after(jiffies,
    // 1001 + 3000), from jiffy 4002 on.
    c.advance(3 * S + 2_000_000);
    enq(&mut q, pkt(100, 100, sock(99)));
    // The lookup above collected the candidates of sock 99's bucket, at most 8 (`fq_gc`), and
    // created the new flow.
    let same_bucket = (0..20)
        .filter(|&f| q.bucket_of(sock(f)) == q.bucket_of(sock(99)))
        .count()
        .min(8) as u32;
    let left = q.fq_stats().flows;
    assert_eq!(left, 21 - same_bucket + 1);
    // Same size: no rehash, nothing freed.
    change(&mut q, |b| b.limit(500));
    assert_eq!(q.fq_stats().flows, left);
    let gc = q.fq_stats().gc_flows;
    change(&mut q, |b| b.buckets_log(12));
    let st = q.fq_stats();
    assert_eq!(
        st.flows, 2,
        "every idle detached flow freed, the busy ones kept"
    );
    assert_eq!(st.gc_flows, gc + u64::from(left) - 2);
    q.check_invariants().unwrap();
    assert_eq!(drain_now(&mut q).len(), 41);
}

/// Average bytes a flow sends per turn (consecutive packets of the same flow) over `n`
/// dequeues of two backlogged flows.
fn bytes_per_turn(q: &mut TestFq, c: &Arc<ManualClock>, id: &mut u64, n: usize) -> f64 {
    let (mut turns, mut bytes) = (0u64, 0u64);
    let mut last = None;
    for _ in 0..n {
        let p = q.dequeue().unwrap();
        c.advance(p.len() as u64);
        bytes += p.len() as u64;
        if last != Some(p.flow()) {
            turns += 1;
            last = Some(p.flow());
        }
        *id += 1;
        enq(q, pkt(*id, 1000, p.flow()));
    }
    bytes as f64 / turns as f64
}

#[test]
fn quantum_change_takes_effect_on_the_following_rounds() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).quantum(3000).build().unwrap();
    let mut id = fill(&mut q, 2, 50, 1000);
    // Skip the initial_quantum bursts, then measure.
    bytes_per_turn(&mut q, &c, &mut id, 100);
    let before = bytes_per_turn(&mut q, &c, &mut id, 6000);
    assert!((before - 3000.0).abs() < 60.0, "{before}");
    change(&mut q, |b| b.quantum(20_000));
    // The credit left from the old quantum is spent first: at most one turn each.
    bytes_per_turn(&mut q, &c, &mut id, 10);
    let after = bytes_per_turn(&mut q, &c, &mut id, 6000);
    assert!((after - 20_000.0).abs() < 400.0, "{after}");
    q.check_invariants().unwrap();
}

/// Bytes sent per band over `rounds` dequeues of three backlogged bands (priorities 6, 0, 1 on
/// the default priomap), the clock advancing by each packet's wire time.
fn band_bytes(q: &mut TestFq, c: &Arc<ManualClock>, id: &mut u64, rounds: usize) -> [f64; 3] {
    let prio = [6, 0, 1];
    let mut sent = [0u64; 3];
    for _ in 0..rounds {
        let p = q.dequeue().unwrap();
        let b = q.band_of(p.priority());
        sent[b] += p.len() as u64;
        c.advance(p.len() as u64 * 8 / 10);
        *id += 1;
        enq(q, pkt(*id, 1000, p.flow()).with_priority(prio[b]));
    }
    let t: u64 = sent.iter().sum();
    sent.map(|s| s as f64 / t as f64)
}

fn assert_shares(weights: [u32; 3], got: [f64; 3]) {
    let total: f64 = weights.iter().map(|&w| f64::from(w)).sum();
    for b in 0..3 {
        let want = f64::from(weights[b]) / total;
        assert!(
            (got[b] - want).abs() / want < 0.02,
            "band {b}: {got:?}, want weights {weights:?}"
        );
    }
}

#[test]
fn weights_change_takes_effect_on_the_following_rounds() {
    let c = clock();
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    let prio = [6, 0, 1];
    let mut id = 0;
    for i in 0..6u64 {
        for _ in 0..20 {
            id += 1;
            enq(
                &mut q,
                pkt(id, 1000, sock(i)).with_priority(prio[i as usize % 3]),
            );
        }
    }
    band_bytes(&mut q, &c, &mut id, 5_000);
    let w0 = q.config().weights;
    assert_shares(w0, band_bytes(&mut q, &c, &mut id, 200_000));
    let w1 = [65_536, 131_072, 393_216];
    change(&mut q, |b| b.weights(w1));
    // One WRR cycle with the old credits, then the new shares.
    band_bytes(&mut q, &c, &mut id, 1_000);
    assert_shares(w1, band_bytes(&mut q, &c, &mut id, 200_000));
    q.check_invariants().unwrap();
}

/// Departure times and lengths of one backlogged flow, from now to `end`.
fn paced_run(q: &mut TestFq, c: &Arc<ManualClock>, id: &mut u64, end: u64) -> Vec<(u64, u64)> {
    let mut out = vec![];
    while c.now_ns() < end {
        match q.dequeue() {
            Some(p) => {
                out.push((c.now_ns(), p.len() as u64));
                *id += 1;
                enq(q, pkt(*id, p.len(), p.flow()));
            }
            None => c.set(q.next_wakeup().expect("a backlogged flow is throttled")),
        }
    }
    out
}

fn rate(out: &[(u64, u64)], from: u64, to: u64) -> f64 {
    let b: u64 = out
        .iter()
        .filter(|d| d.0 >= from && d.0 < to)
        .map(|d| d.1)
        .sum();
    b as f64 * S as f64 / (to - from) as f64
}

#[test]
fn maxrate_change_takes_effect_after_the_flow_s_current_delay() {
    let c = clock();
    let mut q: TestFq = fq_builder(&c).maxrate(1_000_000).build().unwrap();
    let flow = sock(1);
    let mut id = 0;
    for _ in 0..50 {
        id += 1;
        enq(&mut q, pkt(id, 1500, flow));
    }
    let t0 = c.now_ns();
    let out = paced_run(&mut q, &c, &mut id, t0 + 4 * S);
    let r = rate(&out, t0 + S, t0 + 4 * S);
    assert!((r / 1_000_000.0 - 1.0).abs() < 0.01, "{r}");

    // Four times the rate; the flow is throttled now under the old rate and keeps that time.
    let t1 = c.now_ns();
    change(&mut q, |b| b.maxrate(4_000_000));
    let out = paced_run(&mut q, &c, &mut id, t1 + 4 * S);
    let r = rate(&out, t1 + S, t1 + 4 * S);
    assert!((r / 4_000_000.0 - 1.0).abs() < 0.01, "{r}");

    // nopacing: the next packets leave back to back once the current delay is over.
    change(&mut q, |b| b.pacing(false));
    let t2 = q.next_wakeup().unwrap_or(c.now_ns()).max(c.now_ns());
    c.set(t2);
    let burst = drain_now(&mut q);
    assert!(burst.len() >= 40, "{} packets", burst.len());
    q.check_invariants().unwrap();

    // maxrate u64::MAX (tc's ~0) lifts the cap, which reopens the fast path of an idle qdisc.
    change(&mut q, |b| b.pacing(true).maxrate(u64::MAX));
    assert_eq!(q.config().maxrate, None);
    assert!(q.is_empty());
    let fast = q.fq_stats().fastpath_packets;
    enq(&mut q, pkt(1 << 40, 100, sock(2)));
    assert_eq!(q.fq_stats().fastpath_packets, fast + 1);
}

#[test]
fn priomap_change_sends_new_packets_to_the_new_band() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).limit(10).build().unwrap();
    assert_eq!(q.band_of(0), 1);
    for id in 1..=10 {
        assert_eq!(enq(&mut q, pkt(id, 100, sock(id))), Verdict::Success);
    }
    assert_eq!(
        enq(&mut q, pkt(11, 100, sock(11))),
        Verdict::Dropped(DropReason::FqBandLimit)
    );
    let mut map = q.config().priomap;
    map[0] = 2;
    change(&mut q, |b| b.priomap(map));
    assert_eq!(q.band_of(0), 2);
    // Band 2 has room, so priority 0 is accepted again, and counts in band 2.
    assert_eq!(enq(&mut q, pkt(12, 100, sock(12))), Verdict::Success);
    assert_eq!(q.fq_stats().band_pkt_count, [0, 10, 1]);
    // Queued packets stay counted in the band they came in by.
    assert_eq!(drain_now(&mut q).len(), 11);
    assert_eq!(q.fq_stats().band_pkt_count, [0, 0, 0]);
    q.check_invariants().unwrap();
}

#[test]
fn lowered_flow_limit_drops_nothing_now_and_refuses_later_packets() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    fill(&mut q, 1, 50, 100);
    let (dropped, _) = change(&mut q, |b| b.flow_limit(10));
    assert_eq!((dropped, q.len()), (0, 50));
    q.check_invariants().unwrap();
    assert_eq!(
        enq(&mut q, pkt(100, 100, sock(0))),
        Verdict::Dropped(DropReason::FqFlowLimit)
    );
    for _ in 0..40 {
        q.dequeue().unwrap();
    }
    assert_eq!(
        enq(&mut q, pkt(101, 100, sock(0))),
        Verdict::Dropped(DropReason::FqFlowLimit)
    );
    q.dequeue().unwrap();
    assert_eq!(enq(&mut q, pkt(102, 100, sock(0))), Verdict::Success);
    assert_eq!(q.fq_stats().flows_plimit, 2);
    q.check_invariants().unwrap();
}

#[test]
fn change_through_txqueue_with_qdisc_while_running() {
    for s in [Strategy::BusyLock, Strategy::DeferList, Strategy::NoLock] {
        let c = clock();
        let fq: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
        let txq = TxQueue::builder()
            .strategy(s)
            .build(fq, RecordingDriver::new())
            .unwrap();
        txq.with_driver(|d| d.stopped = true);
        for id in 0..200 {
            assert_eq!(txq.xmit(pkt(id, 300, sock(id % 4))), Verdict::Success);
        }
        let dropped = txq
            .change_qdisc(|q, tf| q.change(q.to_builder().limit(50).quantum(9000), tf))
            .unwrap();
        assert!(dropped >= 140, "{s}: {dropped}");
        assert_eq!(
            txq.stats().drops_for(DropReason::QdiscOverlimit),
            dropped as u64,
            "{s}: the change's drops are the engine's too"
        );
        assert_eq!(txq.with_qdisc(|q| q.config().quantum), 9000);
        txq.with_driver(|d| d.stopped = false);
        while txq.poll() {}
        let sent = txq.with_driver(|d| d.sent.len());
        let st = txq.stats();
        assert_eq!(
            sent as u64 + st.dropped(),
            200,
            "{s}: every packet sent or counted as dropped: {st:?}"
        );
        assert_eq!(txq.qdisc_stats().drops, dropped as u64, "{s}");
        txq.with_qdisc(|q| q.check_invariants()).unwrap();
    }
}

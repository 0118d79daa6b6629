//! FQ classification, limits, flow life cycle and garbage collection (`fq_classify`, `fq_gc`,
//! `fq_enqueue`), all on a manual clock.

mod common;

use common::*;
use qdisc::{DropReason, FlowKey, FqBuilder, Qdisc, TestPacket, ToFree, Verdict};

const S: u64 = 1_000_000_000;

fn drain(q: &mut TestFq) -> Vec<u64> {
    std::iter::from_fn(|| q.dequeue().map(|p| p.id())).collect()
}

#[test]
fn idle_qdisc_uses_the_fast_path_up_to_eight_packets() {
    let c = clock();
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    for i in 0..12 {
        assert_eq!(enq(&mut q, pkt(i, 100, sock(i % 3))), Verdict::Success);
    }
    let st = q.fq_stats();
    // Packet 0 finds the qdisc empty; 1..8 find no eligible flow and a short internal queue;
    // the 9th finds the internal queue full (8) and creates a flow.
    assert_eq!(st.fastpath_packets, 8);
    assert_eq!(st.flows, 3);
    assert_eq!(st.band_pkt_count, [0, 4, 0]);
    // The internal queue leaves first, unpaced, in order.
    assert_eq!(drain(&mut q)[..8], [0, 1, 2, 3, 4, 5, 6, 7]);
    q.check_invariants().unwrap();
}

#[test]
fn fast_path_refused_for_maxrate_future_stamps_and_capped_non_tcp_sockets() {
    let c = clock();
    let now = 1_000_000_000;
    let mut q: TestFq = fq_builder(&c).maxrate(1_000_000).build().unwrap();
    enq(&mut q, pkt(0, 100, sock(1)));
    assert_eq!(q.fq_stats().fastpath_packets, 0);

    let mut q: TestFq = fq_builder(&c).build().unwrap();
    enq(&mut q, pkt(0, 100, sock(1)).with_tstamp(now + 1_000));
    assert_eq!(q.fq_stats().fastpath_packets, 0);

    // fq_fastpath_check tests sk_max_pacing_rate, not sk_pacing_rate: a socket's pacing rate
    // alone leaves the fast path open.
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    enq(
        &mut q,
        pkt(0, 100, FlowKey::Unconnected { hash: 9 }).with_pacing_rate(1_000_000),
    );
    assert_eq!(q.fq_stats().fastpath_packets, 1);
    // A finite SO_MAX_PACING_RATE on an unconnected (non-TCP) socket closes it.
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    enq(
        &mut q,
        pkt(0, 100, FlowKey::Unconnected { hash: 9 }).with_max_pacing_rate(1_000_000),
    );
    assert_eq!(q.fq_stats().fastpath_packets, 0);

    let mut q: TestFq = fq_builder(&c).build().unwrap();
    q.set_socket_max_pacing_rate(4, Some(1_000_000));
    enq(&mut q, pkt(0, 100, sock(4)));
    assert_eq!(q.fq_stats().fastpath_packets, 0);
    enq(&mut q, pkt(1, 100, orphan(4))); // an orphan has no socket: the cap does not apply
    // ... but a flow now has a packet, so the qdisc is not idle
    assert_eq!(q.fq_stats().fastpath_packets, 0);
    q.set_socket_max_pacing_rate(4, None);

    // The same cap on a TCP socket does not (!sk_is_tcp(sk) in fq_fastpath_check).
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    q.set_socket_max_pacing_rate(4, Some(1_000_000));
    enq(&mut q, pkt(0, 100, sock(4)).with_tcp(true));
    assert_eq!(q.fq_stats().fastpath_packets, 1);

    // A stamp within the offload horizon is fine.
    let mut q: TestFq = fq_builder(&c)
        .max_pacing_offload_horizon(std::time::Duration::from_micros(50))
        .offload_horizon(std::time::Duration::from_micros(50))
        .build()
        .unwrap();
    enq(&mut q, pkt(0, 100, sock(1)).with_tstamp(now + 40_000));
    assert_eq!(q.fq_stats().fastpath_packets, 1);
}

#[test]
fn fast_path_refused_when_a_flow_is_eligible_or_a_delayed_flow_is_due() {
    let c = clock();
    let now = c_now(&c);
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    enq(&mut q, pkt(0, 100, sock(1)));
    assert_eq!(q.fq_stats().fastpath_packets, 0);

    // A throttled flow that is not yet due leaves the fast path open...
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    for i in 0..9 {
        enq(&mut q, pkt(i, 100, sock(50)));
    }
    assert_eq!(q.fq_stats().fastpath_packets, 8);
    while q.dequeue().is_some() {}
    enq(&mut q, pkt(20, 100, sock(1)).with_tstamp(now + 1_000_000)); // its own flow, future
    assert_eq!(q.dequeue().map(|p| p.id()), None); // throttles flow 1
    assert_eq!(q.fq_stats().throttled_flows, 1);
    enq(&mut q, pkt(21, 100, sock(2)));
    assert_eq!(q.fq_stats().fastpath_packets, 9);
    assert_eq!(q.dequeue().map(|p| p.id()), Some(21));
    // ...until it is due.
    c.advance(1_000_000);
    enq(&mut q, pkt(22, 100, sock(3)));
    assert_eq!(q.fq_stats().fastpath_packets, 9);
    q.check_invariants().unwrap();
}

fn c_now(c: &std::sync::Arc<qdisc::ManualClock>) -> u64 {
    use qdisc::Clock;
    c.now_ns()
}

#[test]
fn orphan_hash_is_masked_and_odd_keys_never_hit_sockets() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c))
        .orphan_mask(0xff)
        .build()
        .unwrap();
    enq(&mut q, pkt(0, 100, orphan(5)));
    enq(&mut q, pkt(1, 100, orphan(5 + 0x100))); // same masked hash
    enq(&mut q, pkt(2, 100, FlowKey::Unconnected { hash: 5 })); // same key, a socket but hashed
    assert_eq!(q.fq_stats().flows, 1);
    enq(&mut q, pkt(3, 100, FlowKey::Socket { id: 5, hash: 5 }));
    enq(&mut q, pkt(4, 100, FlowKey::Socket { id: 2, hash: 0 })); // key 4
    enq(&mut q, pkt(5, 100, orphan(2))); // key 5
    enq(&mut q, pkt(6, 100, FlowKey::Socket { id: 11, hash: 0 })); // key 22 vs orphan 11 → 23
    enq(&mut q, pkt(7, 100, orphan(11)));
    assert_eq!(q.fq_stats().flows, 6);
    q.check_invariants().unwrap();
}

#[test]
fn flow_limit_drops_and_counts() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).flow_limit(3).build().unwrap();
    let mut tf = ToFree::new();
    for i in 0..3 {
        assert_eq!(q.enqueue(pkt(i, 100, sock(1)), &mut tf), Verdict::Success);
    }
    assert_eq!(
        q.enqueue(pkt(3, 100, sock(1)), &mut tf),
        Verdict::Dropped(DropReason::FqFlowLimit)
    );
    assert_eq!(q.enqueue(pkt(4, 100, sock(2)), &mut tf), Verdict::Success);
    assert_eq!(q.fq_stats().flows_plimit, 1);
    assert_eq!(q.stats().drops, 1);
    assert_eq!(tf.count(DropReason::FqFlowLimit), 1);
}

#[test]
fn limit_is_per_band() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).limit(2).build().unwrap();
    // priority 0 → band 1, priority 6 → band 0, priority 1 → band 2
    for i in 0..2 {
        assert_eq!(enq(&mut q, pkt(i, 100, sock(i))), Verdict::Success);
    }
    assert_eq!(
        enq(&mut q, pkt(2, 100, sock(9))),
        Verdict::Dropped(DropReason::FqBandLimit)
    );
    assert_eq!(
        enq(&mut q, pkt(3, 100, sock(3)).with_priority(6)),
        Verdict::Success
    );
    assert_eq!(
        enq(&mut q, pkt(4, 100, sock(4)).with_priority(1)),
        Verdict::Success
    );
    let st = q.fq_stats();
    assert_eq!(st.band_drops, [0, 1, 0]);
    assert_eq!(st.band_pkt_count, [1, 2, 1]);
    assert_eq!(q.len(), 4);
}

#[test]
fn reset_gives_a_full_band_its_room_back() {
    // The band check is `band_pkt_count[band] >= sch->limit` (fq_enqueue); upstream's
    // "net_sched: sch_fq: clear q->band_pkt_count[] in fq_reset()" makes a reset give the room
    // back (v6.19 kept the freed packets counted, and this band would refuse every packet).
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).limit(3).build().unwrap();
    for i in 0..3 {
        assert_eq!(enq(&mut q, pkt(i, 100, sock(i))), Verdict::Success);
    }
    assert_eq!(
        enq(&mut q, pkt(3, 100, sock(3))),
        Verdict::Dropped(DropReason::FqBandLimit)
    );
    let mut tf = ToFree::new();
    q.reset(&mut tf, DropReason::Deactivated);
    for i in 4..7 {
        assert_eq!(enq(&mut q, pkt(i, 100, sock(i))), Verdict::Success);
    }
    assert_eq!(q.fq_stats().band_drops, [0, 1, 0]);
    assert_eq!(drain(&mut q), [4, 5, 6]);
}

#[test]
fn priomap_is_configurable() {
    let c = clock();
    let mut map = [2u8; 16];
    map[3] = 0;
    let mut q: TestFq = no_fastpath(fq_builder(&c)).priomap(map).build().unwrap();
    enq(&mut q, pkt(0, 100, sock(1)).with_priority(3));
    enq(&mut q, pkt(1, 100, sock(2)).with_priority(19)); // 19 & 15 = 3
    enq(&mut q, pkt(2, 100, sock(3)).with_priority(4));
    assert_eq!(q.fq_stats().band_pkt_count, [2, 0, 1]);
}

/// Runs `rounds` dequeues while keeping flow `bulk` backlogged.
fn churn(q: &mut TestFq, bulk: u64, rounds: usize, next_id: &mut u64) {
    for _ in 0..rounds {
        while q.fq_stats().band_pkt_count[1] < 4 {
            *next_id += 1;
            enq(q, pkt(*next_id, 1000, sock(bulk)));
        }
        q.dequeue();
    }
}

#[test]
fn emptied_flows_detach_and_gc_frees_at_most_eight_per_lookup_in_its_bucket() {
    let c = clock();
    // Two buckets, so that each holds about half of the idle flows.
    let mut q: TestFq = no_fastpath(fq_builder(&c)).buckets_log(1).build().unwrap();
    let mut id = 0;
    churn(&mut q, 1000, 10, &mut id);
    for f in 0..20 {
        enq(&mut q, pkt(5000 + f, 100, sock(f)));
    }
    churn(&mut q, 1000, 400, &mut id);
    let st = q.fq_stats();
    assert_eq!(st.flows, 21);
    assert_eq!(st.inactive_flows, 20, "every short flow emptied");
    assert_eq!(st.gc_flows, 0);

    // Detached at jiffy 1000: age 1001, a candidate from jiffy 4002 on
    // (time_after(jiffies, f->age + FQ_GC_AGE) in fq_gc_candidate). Not yet at 4001.
    c.advance(3 * S + 1_000_000);
    enq(&mut q, pkt(9000, 100, sock(100)));
    assert_eq!(q.fq_stats().gc_flows, 0);

    c.advance(1_000_000);
    let in_bucket = |q: &TestFq, b: usize| -> Vec<u64> {
        (0..20)
            .filter(|&f| q.bucket_of(sock(f)) == b && q.has_flow(sock(f)))
            .collect()
    };
    for b in [0, 1] {
        let other = in_bucket(&q, 1 - b);
        let mut want = in_bucket(&q, b).len();
        assert!(want > 0, "both buckets hold idle flows");
        let probes: Vec<u64> = (200..)
            .filter(|&s| q.bucket_of(sock(s)) == b)
            .take(3)
            .collect();
        for p in probes {
            let before = q.fq_stats().gc_flows;
            enq(&mut q, pkt(9100 + p, 100, sock(p)));
            let freed = q.fq_stats().gc_flows - before;
            assert_eq!(freed as usize, want.min(8), "bucket {b}");
            want -= freed as usize;
            // fq_gc only looks in the bucket of the lookup.
            assert_eq!(in_bucket(&q, 1 - b), other);
        }
        assert!(in_bucket(&q, b).is_empty());
    }
    let st = q.fq_stats();
    assert_eq!(st.flows, 21 + 1 + 6 - 20);
    assert_eq!(
        st.inactive_flows,
        st.flows - 8,
        "bulk, 9000 and the six probes have packets"
    );
    q.check_invariants().unwrap();
    // The bookkeeping queue stays small.
    assert!(q.gc_queue_len() <= 40, "{}", q.gc_queue_len());
}

#[test]
fn a_flow_back_from_idle_is_reused_not_collected() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    let mut id = 0;
    enq(&mut q, pkt(1, 100, sock(7)));
    churn(&mut q, 1000, 50, &mut id);
    assert_eq!(q.fq_stats().inactive_flows, 1);
    c.advance(4 * S);
    enq(&mut q, pkt(2, 100, sock(7))); // its own lookup never frees it
    let st = q.fq_stats();
    assert_eq!((st.gc_flows, st.flows), (0, 2));
}

#[test]
fn reused_socket_restarts_its_flow() {
    let c = clock();
    let now = c_now(&c);
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    enq(
        &mut q,
        pkt(1, 100, FlowKey::Socket { id: 1, hash: 5 }).with_tstamp(now + S),
    );
    assert!(q.dequeue().is_none());
    assert_eq!(q.fq_stats().throttled_flows, 1);
    // Same socket, same hash: still throttled.
    enq(&mut q, pkt(2, 100, FlowKey::Socket { id: 1, hash: 5 }));
    assert!(q.dequeue().is_none());
    assert_eq!(q.fq_stats().throttled_flows, 1);
    // Same id, new hash: a reused socket; the flow is unthrottled and the new packet leaves.
    enq(&mut q, pkt(3, 100, FlowKey::Socket { id: 1, hash: 6 }));
    assert_eq!(q.fq_stats().throttled_flows, 0);
    assert_eq!(q.fq_stats().flows, 1);
    assert_eq!(q.dequeue().map(|p| p.id()), Some(2));
    assert_eq!(q.dequeue().map(|p| p.id()), Some(3));
    assert!(q.dequeue().is_none());
    q.check_invariants().unwrap();
}

#[test]
fn max_flows_stands_in_for_allocation_failure() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).max_flows(2).build().unwrap();
    for i in 0..4 {
        assert_eq!(enq(&mut q, pkt(i, 100, sock(i))), Verdict::Success);
    }
    let st = q.fq_stats();
    assert_eq!(
        (st.flows, st.allocation_errors, st.fastpath_packets),
        (2, 2, 0)
    );
    // The overflow went to the internal queue, which leaves first.
    assert_eq!(drain(&mut q), [2, 3, 0, 1]);
}

#[test]
fn peek_stashes_and_reset_drops_everything() {
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    for i in 0..5 {
        enq(&mut q, pkt(i, 100, sock(i % 2)));
    }
    let first = q.peek().map(|p| p.id());
    assert!(first.is_some());
    assert_eq!(q.len(), 5);
    assert_eq!(q.dequeue().map(|p| p.id()), first);
    q.peek();
    let mut tf = ToFree::new();
    q.reset(&mut tf, DropReason::Deactivated);
    assert_eq!(tf.count(DropReason::Deactivated), 4);
    let st = q.fq_stats();
    // band_pkt_count back to 0: upstream's "net_sched: sch_fq: clear q->band_pkt_count[] in
    // fq_reset()" (v6.19's fq_reset kept the counts of the freed packets).
    assert_eq!(
        (q.len(), q.backlog(), st.flows, st.band_pkt_count),
        (0, 0, 0, [0; 3])
    );
    // `fq_reset` frees the packets (`fq_flow_purge`) without counting drops.
    assert_eq!(q.stats().drops, 0);
    q.check_invariants().unwrap();
    enq(&mut q, pkt(9, 100, sock(1)));
    assert_eq!(drain(&mut q), [9]);
}

#[test]
fn builder_validates_like_tc() {
    let cases: Vec<(FqBuilder, &str)> = vec![
        (FqBuilder::new().quantum(0), "quantum"),
        (FqBuilder::new().quantum((1 << 20) + 1), "quantum"),
        (
            FqBuilder::new().initial_quantum(i32::MAX as u32 + 1),
            "initial_quantum",
        ),
        (FqBuilder::new().buckets_log(0), "buckets"),
        (FqBuilder::new().buckets_log(19), "buckets"),
        (FqBuilder::new().buckets(1000), "buckets"),
        (FqBuilder::new().weights([16383, 65536, 65536]), "weights"),
        (FqBuilder::new().priomap([3; 16]), "priomap"),
        (FqBuilder::new().rate_enable(2), "rate_enable"),
        (
            FqBuilder::new().horizon(std::time::Duration::from_secs(5000)),
            "horizon",
        ),
        (
            FqBuilder::new().offload_horizon(std::time::Duration::from_micros(1)),
            "offload_horizon",
        ),
        (FqBuilder::new().timer_slack_ns(1 << 40), "timer_slack"),
        (FqBuilder::new().psched_mtu(0), "psched_mtu"),
    ];
    for (b, opt) in cases {
        let e = b.build::<TestPacket>().unwrap_err();
        assert_eq!((e.qdisc(), e.option()), ("fq", opt), "{e}");
        assert!(
            e.to_string().starts_with(&format!("fq: invalid {opt} ")),
            "{e}"
        );
        assert!(!e.accepted().is_empty());
    }
    let e = FqBuilder::new()
        .weights([65536, 100, 65536])
        .build::<TestPacket>()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "fq: invalid weights [1] = 100: accepted 16384..=2147483647"
    );
    let e = FqBuilder::new()
        .buckets_log(19)
        .build::<TestPacket>()
        .unwrap_err();
    assert!(e.to_string().contains("log 1..=18"), "{e}");

    let ok = FqBuilder::new()
        .buckets(262_144)
        .quantum(100)
        .build::<TestPacket>()
        .unwrap();
    assert_eq!(ok.config().buckets_log, 18);
    assert_eq!(
        ok.config().quantum,
        100,
        "fq_change keeps a small quantum as given (fq_codel raises it to 256, fq does not)"
    );
    let big = FqBuilder::new()
        .initial_quantum(i32::MAX as u32)
        .build::<TestPacket>()
        .unwrap();
    assert_eq!(
        big.config().initial_quantum,
        i32::MAX as u32,
        "up to INT_MAX"
    );
    let d = FqBuilder::new()
        .psched_mtu(9014)
        .build::<TestPacket>()
        .unwrap();
    assert_eq!(
        (d.config().quantum, d.config().initial_quantum),
        (18028, 90140)
    );
    let d = FqBuilder::new().build::<TestPacket>().unwrap();
    let cfg = d.config();
    assert_eq!(
        (
            cfg.limit,
            cfg.flow_limit,
            cfg.quantum,
            cfg.initial_quantum,
            cfg.orphan_mask
        ),
        (10_000, 100, 3028, 15_140, 1023)
    );
    assert_eq!(
        (cfg.low_rate_threshold, cfg.refill_delay_ns, cfg.horizon_ns),
        (68_750, 40_000_000, 10 * S)
    );
    assert_eq!(cfg.weights, [589_824, 196_608, 65_536]);
}

#[test]
fn display_is_tc_shaped() {
    let c = clock();
    let mut q: TestFq = fq_builder(&c).limit(1).build().unwrap();
    // 8 fast-path packets (no band), one in band 1, then band 1 is full.
    for i in 0..10 {
        enq(&mut q, pkt(i, 1000, sock(1)));
    }
    q.dequeue();
    let s = q.to_string();
    let want_head = "qdisc fq 0: root refcnt 2 limit 1p flow_limit 100p buckets 1024 orphan_mask 1023 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1 weights 589824 196608 65536 quantum 3028b initial_quantum 15140b low_rate_threshold 550Kbit refill_delay 40ms timer_slack 10us horizon 10s horizon_drop\n";
    assert!(s.starts_with(want_head), "{s}");
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(
        lines[1],
        " Sent 1000 bytes 1 pkt (dropped 1, overlimits 0 requeues 0) "
    );
    assert_eq!(lines[2], " backlog 8000b 8p requeues 0");
    assert_eq!(
        lines[3],
        "  flows 1 (inactive 0 throttled 0) band0_pkts 0 band1_pkts 1 band2_pkts 0"
    );
    assert_eq!(lines[4], "  gc 0 highprio 0 fastpath 8 throttled 0");
    assert_eq!(lines[5], " band1_drops 1");
    assert_eq!(lines.len(), 6);
}

#[test]
fn gc_bookkeeping_stays_bounded_when_flows_empty_and_refill_fast() {
    // Three flows that empty and refill 30 000 times within one clock instant: emptied flows
    // detach and queue GC entries, none old enough to be collected, and each refill makes the
    // previous entry stale. The queue must not keep them all (it held 29 722 before the sweep).
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    for round in 0..30_000u64 {
        for f in 0..3 {
            enq(&mut q, pkt(round * 3 + f, 100, sock(f)));
        }
        for _ in 0..3 {
            assert!(q.dequeue().is_some());
        }
        assert!(q.gc_queue_len() <= 2 * 3 + 64 + 1, "{}", q.gc_queue_len());
    }
    // One more dequeue finds them empty on the old list and detaches them.
    assert!(q.dequeue().is_none());
    let st = q.fq_stats();
    assert_eq!((st.flows, st.inactive_flows), (3, 3));
    q.check_invariants().unwrap();
}

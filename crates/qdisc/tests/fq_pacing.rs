//! FQ pacing, EDT timestamps, horizon, CE marking and throttling (`fq_dequeue`'s pacing step,
//! `fq_check_throttled`), simulated on a manual clock: no test sleeps.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use qdisc::{Clock, DropReason, FlowKey, ManualClock, Packet, Qdisc, TestPacket, Verdict};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// Departures `(time, id, len)` of a run that dequeues whenever something is eligible and
/// otherwise jumps the clock to `next_wakeup()`, until `end`; `refill` is called after each
/// departure to keep flows backlogged.
fn simulate(
    q: &mut TestFq,
    c: &Arc<ManualClock>,
    end: u64,
    mut refill: impl FnMut(&mut TestFq, &TestPacket),
) -> Vec<(u64, u64, usize)> {
    let mut out = vec![];
    loop {
        if c.now_ns() >= end {
            break;
        }
        match q.dequeue() {
            Some(p) => {
                out.push((c.now_ns(), p.id(), p.len()));
                refill(q, &p);
            }
            None => match q.next_wakeup() {
                Some(t) => {
                    assert!(t > c.now_ns(), "a wakeup in the past means a stuck flow");
                    c.set(t);
                }
                None => break,
            },
        }
    }
    out
}

fn rate_over(out: &[(u64, u64, usize)], from: u64, to: u64) -> f64 {
    let bytes: usize = out
        .iter()
        .filter(|d| d.0 >= from && d.0 < to)
        .map(|d| d.2)
        .sum();
    bytes as f64 * S as f64 / (to - from) as f64
}

fn backlogged(
    q: &mut TestFq,
    flow: FlowKey,
    n: u64,
    len: usize,
    f: impl Fn(TestPacket) -> TestPacket,
) {
    for i in 0..n {
        enq(q, f(pkt(i, len, flow)));
    }
}

#[test]
fn maxrate_paces_a_flow_within_one_percent_over_ten_seconds() {
    // Unstamped packets are paced per quantum after an initial_quantum burst (15140 B, which
    // is 0.15% of 10 s at 1 MB/s); stamped ones per packet, so a slow rate is exact too.
    for (rate, len, edt) in [
        (1_000_000u64, 1000usize, false),
        (12_500_000, 1514, false),
        (80_000, 200, true),
    ] {
        let c = clock();
        let t0 = c.now_ns();
        let mut q: TestFq = fq_builder(&c).maxrate(rate).build().unwrap();
        let stamp =
            |p: TestPacket, c: &ManualClock| if edt { p.with_tstamp(c.now_ns()) } else { p };
        backlogged(&mut q, sock(1), 20, len, |p| stamp(p, &c));
        let mut next = 100;
        let c2 = c.clone();
        let out = simulate(&mut q, &c, t0 + 10 * S, |q, _| {
            next += 1;
            enq(q, stamp(pkt(next, len, sock(1)), &c2));
        });
        let got = rate_over(&out, t0, t0 + 10 * S);
        let err = (got - rate as f64).abs() / rate as f64;
        assert!(
            err < 0.01,
            "rate {rate}: got {got:.0} B/s ({:.3}% off)",
            err * 100.0
        );
        assert!(q.fq_stats().throttled > 0);
        q.check_invariants().unwrap();
    }
}

#[test]
fn socket_pacing_rate_and_so_max_pacing_rate() {
    let rate = 500_000;
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    // A TCP socket with a pacing rate (what tcp_update_pacing_rate sets).
    let mk = |i| pkt(i, 1200, sock(3)).with_pacing_rate(rate).with_tcp(true);
    for i in 0..20 {
        enq(&mut q, mk(i));
    }
    let mut next = 100;
    let out = simulate(&mut q, &c, t0 + 10 * S, |q, _| {
        next += 1;
        enq(q, mk(next));
    });
    let got = rate_over(&out, t0, t0 + 10 * S);
    assert!(
        (got - rate as f64).abs() / (rate as f64) < 0.01,
        "got {got}"
    );
    // fq_fastpath_check tests sk_max_pacing_rate, and only for sockets that are not TCP, and
    // `if (q->internal.qlen >= 8) return false;` caps the internal queue: the first 8 packets
    // into the idle qdisc went out unpaced through it.
    assert_eq!(q.fq_stats().fastpath_packets, 8);

    // SO_MAX_PACING_RATE caps the socket's own rate (and on a TCP socket leaves the fast
    // path open).
    let cap = 200_000;
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    q.set_socket_max_pacing_rate(3, Some(cap));
    for i in 0..20 {
        enq(&mut q, mk(i));
    }
    let out = simulate(&mut q, &c, t0 + 10 * S, |q, _| {
        next += 1;
        enq(q, mk(next));
    });
    // Measured after the first second: the unpaced fast-path start is 9600 B.
    let got = rate_over(&out, t0 + S, t0 + 10 * S);
    assert!((got - cap as f64).abs() / (cap as f64) < 0.01, "got {got}");
}

#[test]
fn nopacing_ignores_rates() {
    let c = clock();
    let mut q: TestFq = fq_builder(&c).pacing(false).maxrate(1000).build().unwrap();
    for i in 0..50 {
        enq(&mut q, pkt(i, 1000, sock(1)).with_pacing_rate(1000));
    }
    let n = std::iter::from_fn(|| q.dequeue()).count();
    assert_eq!(n, 50);
    assert_eq!(q.fq_stats().throttled, 0);
    assert!(q.to_string().contains(" nopacing "));
}

#[test]
fn below_low_rate_threshold_every_packet_is_paced() {
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    for i in 0..10 {
        enq(
            &mut q,
            pkt(i, 1000, sock(1))
                .with_pacing_rate(50_000)
                .with_max_pacing_rate(50_000),
        );
    }
    let out = simulate(&mut q, &c, t0 + S, |_, _| {});
    let times: Vec<u64> = out.iter().map(|d| d.0 - t0).collect();
    // 1000 B at 50 kB/s: 20 ms apart, from the very first packet (credit forced to 0).
    assert_eq!(times, (0..10).map(|i| i * 20 * MS).collect::<Vec<_>>());

    // Just above the threshold (fq_init: `q->low_rate_threshold = 550000 / 8`, 68 750 B/s),
    // pacing is per quantum: the initial quantum leaves at once.
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    for i in 0..10 {
        enq(
            &mut q,
            pkt(i, 1000, sock(1))
                .with_pacing_rate(68_751)
                .with_max_pacing_rate(68_751),
        );
    }
    let out = simulate(&mut q, &c, t0 + S, |_, _| {});
    assert_eq!(out.len(), 10);
    assert!(
        out.iter().all(|d| d.0 == t0),
        "15140 B of initial credit covers 10 packets"
    );
}

#[test]
fn delay_is_clamped_to_one_second() {
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    for i in 0..3 {
        enq(
            &mut q,
            pkt(i, 1500, sock(1))
                .with_pacing_rate(1000)
                .with_max_pacing_rate(1000),
        ); // 1.5 s each
    }
    let out = simulate(&mut q, &c, t0 + 10 * S, |_, _| {});
    let times: Vec<u64> = out.iter().map(|d| d.0 - t0).collect();
    assert_eq!(times, [0, S, 2 * S]);
    assert_eq!(q.fq_stats().pkts_too_long, 3);
}

#[test]
fn drift_credit_forgives_up_to_half_the_delay() {
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    for i in 0..4 {
        enq(
            &mut q,
            pkt(i, 1000, sock(1))
                .with_pacing_rate(50_000)
                .with_max_pacing_rate(50_000),
        ); // 20 ms per packet
    }
    assert_eq!(q.dequeue().map(|p| p.id()), Some(0));
    assert!(q.dequeue().is_none());
    assert_eq!(q.next_wakeup(), Some(t0 + 20 * MS));
    c.set(t0 + 25 * MS); // 5 ms late
    assert_eq!(q.dequeue().map(|p| p.id()), Some(1));
    assert!(q.dequeue().is_none());
    assert_eq!(q.next_wakeup(), Some(t0 + 25 * MS + 20 * MS - 5 * MS));
    c.set(t0 + 100 * MS); // 60 ms late: only half of 20 ms is forgiven
    assert_eq!(q.dequeue().map(|p| p.id()), Some(2));
    assert!(q.dequeue().is_none());
    assert_eq!(q.next_wakeup(), Some(t0 + 100 * MS + 10 * MS));
}

#[test]
fn edt_stamps_order_a_flow_and_only_maxrate_spaces_them() {
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    for (id, at) in [(1, 1), (5, 5), (3, 3), (4, 4), (2, 2)] {
        enq(
            &mut q,
            pkt(id, 100, sock(1))
                .with_tstamp(t0 + at * MS)
                .with_pacing_rate(1),
        );
    }
    let out = simulate(&mut q, &c, t0 + S, |_, _| {});
    let got: Vec<(u64, u64)> = out.iter().map(|d| (d.0 - t0, d.1)).collect();
    // The socket's tiny rate is ignored for stamped packets.
    assert_eq!(
        got,
        [(MS, 1), (2 * MS, 2), (3 * MS, 3), (4 * MS, 4), (5 * MS, 5)]
    );

    // With maxrate, stamped packets are spaced per packet (no quantum batching).
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = fq_builder(&c).maxrate(1_000_000).build().unwrap();
    for i in 0..5 {
        enq(&mut q, pkt(i, 1000, sock(1)).with_tstamp(t0));
    }
    let out = simulate(&mut q, &c, t0 + S, |_, _| {});
    let times: Vec<u64> = out.iter().map(|d| d.0 - t0).collect();
    assert_eq!(times, [0, MS, 2 * MS, 3 * MS, 4 * MS]);
}

#[test]
fn horizon_drop() {
    let c = clock();
    let now = c.now_ns();
    let mut q: TestFq = fq_builder(&c)
        .horizon(Duration::from_secs(2))
        .build()
        .unwrap();
    assert_eq!(
        enq(&mut q, pkt(1, 100, sock(1)).with_tstamp(now + 2 * S + 1)),
        Verdict::Dropped(DropReason::FqHorizonLimit)
    );
    assert_eq!(
        enq(&mut q, pkt(2, 100, sock(1)).with_tstamp(now + 2 * S)),
        Verdict::Success
    );
    let st = q.fq_stats();
    assert_eq!((st.horizon_drops, st.horizon_caps), (1, 0));
    assert_eq!(q.stats().drops, 1);
    assert!(q.to_string().contains(" horizon_drops 1"));
}

#[test]
fn horizon_cap() {
    let c = clock();
    let now = c.now_ns();
    let mut q: TestFq = fq_builder(&c).horizon_drop(false).build().unwrap();
    assert_eq!(
        enq(&mut q, pkt(1, 100, sock(1)).with_tstamp(now + 60 * S)),
        Verdict::Success
    );
    assert!(q.dequeue().is_none());
    // Capped to now + 10 s (the default horizon).
    assert_eq!(q.next_wakeup(), Some(now + 10 * S));
    assert_eq!(q.fq_stats().horizon_caps, 1);
    c.set(now + 10 * S);
    assert_eq!(q.dequeue().map(|p| p.id()), Some(1));
    assert!(q.to_string().contains("horizon_cap\n"));
}

#[test]
fn ce_threshold_marks_late_packets() {
    let c = clock();
    let mut q: TestFq = fq_builder(&c)
        .ce_threshold(Duration::from_millis(1))
        .build()
        .unwrap();
    for i in 0..20 {
        enq(&mut q, pkt(i, 100, sock(1)));
    }
    c.advance(MS); // exactly the threshold: not marked
    let p = q.dequeue().unwrap();
    assert!(!p.ce() && p.id() == 0);
    c.advance(1);
    let out: Vec<TestPacket> = std::iter::from_fn(|| q.dequeue()).collect();
    // The eight fast-path packets are never marked; the flow's twelve are.
    assert!(out[..7].iter().all(|p| !p.ce()));
    assert!(out[7..].iter().all(|p| p.ce()));
    assert_eq!(q.fq_stats().ce_mark, 12);
    assert!(q.to_string().contains(" ce_mark 12"));
}

#[test]
fn throttled_flows_wake_in_time_order_and_latency_is_tracked() {
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    enq(&mut q, pkt(1, 100, sock(1)).with_tstamp(t0 + 3 * MS));
    enq(&mut q, pkt(2, 100, sock(2)).with_tstamp(t0 + MS));
    enq(&mut q, pkt(3, 100, sock(3)).with_tstamp(t0 + 2 * MS));
    assert!(q.dequeue().is_none());
    let st = q.fq_stats();
    assert_eq!(
        (st.throttled_flows, st.throttled, st.inactive_flows),
        (3, 3, 0)
    );
    assert_eq!(st.time_next_delayed_flow, (MS + 10_000) as i64);
    // iproute2 prints it with `sprint_time64`, `%.3gms`: 1 010 000 ns is "1.01ms".
    assert!(q.to_string().contains(" next_packet_delay 1.01ms"), "{q}");
    assert_eq!(q.next_wakeup(), Some(t0 + MS));
    c.set(t0 + MS + 80_000); // the watchdog fired 80 us late
    assert_eq!(q.dequeue().map(|p| p.id()), Some(2));
    assert_eq!(q.fq_stats().unthrottle_latency_ns, 10_000); // 80 us / 8
    assert!(q.dequeue().is_none());
    assert_eq!(q.next_wakeup(), Some(t0 + 2 * MS));
    c.set(t0 + 3 * MS);
    let rest: Vec<u64> = std::iter::from_fn(|| q.dequeue().map(|p| p.id())).collect();
    assert_eq!(rest, [3, 1]);
    assert_eq!(q.next_wakeup(), None);
    let st = q.fq_stats();
    assert_eq!((st.throttled_flows, st.inactive_flows), (0, 3));
    assert!(st.time_next_delayed_flow <= 0);
    q.check_invariants().unwrap();
}

#[test]
fn offload_horizon_releases_early() {
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = no_fastpath(fq_builder(&c))
        .max_pacing_offload_horizon(Duration::from_millis(1))
        .offload_horizon(Duration::from_millis(1))
        .build()
        .unwrap();
    enq(&mut q, pkt(1, 100, sock(1)).with_tstamp(t0 + MS / 2));
    enq(&mut q, pkt(2, 100, sock(2)).with_tstamp(t0 + 3 * MS));
    assert_eq!(
        q.dequeue().map(|p| p.id()),
        Some(1),
        "within the offload horizon"
    );
    assert!(q.dequeue().is_none());
    c.set(t0 + 2 * MS);
    assert_eq!(
        q.dequeue().map(|p| p.id()),
        Some(2),
        "3 ms stamp leaves at 2 ms"
    );
}

/// The watchdog is `time_next_delayed_flow` (`fq_dequeue`: `qdisc_watchdog_schedule_range_ns(...,
/// q->time_next_delayed_flow, ...)`), even when a reused socket took its flow out of the delayed
/// tree and that time is now earlier than every throttled flow's: the kernel wakes then, finds
/// nothing due, and recomputes it.
#[test]
fn next_wakeup_is_time_next_delayed_flow_even_when_stale() {
    let c = clock();
    let t0 = c.now_ns();
    // Every packet paced at 1 MB/s: 1 ms per 1000 bytes.
    let mut q: TestFq = fq_builder(&c)
        .maxrate(1_000_000)
        .low_rate_threshold(1_000_000)
        .build()
        .unwrap();
    let s1 = |hash| FlowKey::Socket { id: 1, hash };
    enq(&mut q, pkt(0, 1000, s1(1)));
    enq(&mut q, pkt(1, 1000, s1(1)));
    enq(&mut q, pkt(2, 1000, sock(2)).with_tstamp(t0 + 5 * MS));
    assert_eq!(q.dequeue().map(|p| p.id()), Some(0));
    assert!(q.dequeue().is_none());
    assert_eq!(q.fq_stats().throttled_flows, 2);
    assert_eq!(q.next_wakeup(), Some(t0 + MS));
    // Socket 1 reused (new hash) half a millisecond later: its flow leaves the delayed tree,
    // sends packet 1 and is throttled again at 1.5 ms; the earliest delayed time stays 1 ms.
    c.set(t0 + MS / 2);
    enq(&mut q, pkt(3, 1000, s1(9)));
    assert_eq!(q.dequeue().map(|p| p.id()), Some(1));
    assert!(q.dequeue().is_none());
    assert_eq!(q.next_wakeup(), Some(t0 + MS), "the kernel's watchdog time");
    // At 1 ms nothing is due; the time is recomputed from the delayed flows.
    c.set(t0 + MS);
    assert!(q.dequeue().is_none());
    assert_eq!(q.next_wakeup(), Some(t0 + 3 * MS / 2));
    c.set(t0 + 3 * MS / 2);
    assert_eq!(q.dequeue().map(|p| p.id()), Some(3));
}

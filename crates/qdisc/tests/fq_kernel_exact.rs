//! Scenarios where `Fq` once differed from Linux v6.19 `net/sched/sch_fq.c` (issue 15): the
//! fast-path eligibility of paced sockets, flow ages in jiffies, the kernel's integer wraps, and
//! garbage collection confined to the looked-up bucket. Each test names the kernel line that
//! decides its expected value; each failed on the ns/saturating/global-GC model it replaced.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use qdisc::{Clock, ConfigError, FlowKey, FqBuilder, ManualClock, Qdisc, TestPacket};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// `GOLDEN_RATIO_64` (`include/linux/hash.h`).
const GOLDEN_RATIO_64: u64 = 0x61C8_8646_80B5_83EB;

/// The kernel's bucket of a connected socket: `hash_ptr(sk, q->fq_trees_log)`, that is
/// `hash_64_generic(sk) = sk * GOLDEN_RATIO_64 >> (64 - bits)`, with the model's `sk = id << 1`.
fn kernel_bucket(id: u64, log: u32) -> usize {
    ((id << 1).wrapping_mul(GOLDEN_RATIO_64) >> (64 - log)) as usize
}

fn ids(q: &mut TestFq, n: usize) -> Vec<u64> {
    (0..n).filter_map(|_| q.dequeue().map(|p| p.id())).collect()
}

// --- 1. Fast-path eligibility -------------------------------------------------------------

#[test]
fn a_paced_tcp_flow_starts_on_the_unpaced_fast_path() {
    // fq_fastpath_check: `if (sk && sk_fullsock(sk) && !sk_is_tcp(sk) &&
    // sk->sk_max_pacing_rate != ~0UL) return false;` -- sk_pacing_rate is not looked at, so
    // the first packets of a paced TCP flow into an idle qdisc go to q->internal and leave
    // unpaced (fq_dequeue returns q->internal's head before any flow).
    let c = clock();
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    for i in 0..3 {
        // 1000 B at 50 kB/s: a flow would space them 20 ms apart.
        enq(
            &mut q,
            pkt(i, 1000, sock(1))
                .with_pacing_rate(50_000)
                .with_tcp(true),
        );
    }
    assert_eq!(q.fq_stats().fastpath_packets, 3);
    assert_eq!(ids(&mut q, 4), [0, 1, 2], "all three leave at once");
    assert_eq!(q.fq_stats().flows, 0, "no flow was created");
}

#[test]
fn a_rate_of_u64_max_is_no_rate() {
    // `~0UL` is "unlimited" for sk_max_pacing_rate (fq_fastpath_check) and sk_pacing_rate
    // (fq_dequeue: `if (rate != ~0UL)` skips pacing).
    let c = clock();
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    q.set_socket_max_pacing_rate(4, Some(u64::MAX));
    enq(&mut q, pkt(0, 1000, sock(4)));
    enq(&mut q, pkt(1, 1000, sock(5)).with_pacing_rate(u64::MAX));
    enq(
        &mut q,
        pkt(2, 1000, FlowKey::Unconnected { hash: 3 }).with_max_pacing_rate(u64::MAX),
    );
    assert_eq!(q.fq_stats().fastpath_packets, 3);
    // A finite cap on a socket that is not TCP is what closes it.
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    enq(
        &mut q,
        pkt(0, 1000, sock(6)).with_max_pacing_rate(u64::MAX - 1),
    );
    assert_eq!(q.fq_stats().fastpath_packets, 0);
    // maxrate u64::MAX is no maxrate (`q->flow_max_rate != ~0UL`).
    let mut q: TestFq = fq_builder(&c).maxrate(u64::MAX).build().unwrap();
    enq(&mut q, pkt(0, 1000, sock(6)));
    assert_eq!(q.fq_stats().fastpath_packets, 1);
    // Nor is tc's ~0, the u32 attribute's all-ones: fq_change stores
    // `(rate == ~0U) ? ~0UL : rate`.
    let mut q: TestFq = fq_builder(&c).maxrate(4_294_967_295).build().unwrap();
    assert_eq!(q.config().maxrate, None);
    enq(&mut q, pkt(0, 1000, sock(6)));
    assert_eq!(q.fq_stats().fastpath_packets, 1);
    assert!(!q.to_string().contains("maxrate"), "{q}");
}

// --- 2. Flow ages in jiffies --------------------------------------------------------------

/// Flow X (credit `initial_quantum` 100) sends 50 B and is detached at `detach` (two more
/// dequeues: new list -> old list -> detached); after `idle`, X gets two 1000 B packets and a new
/// flow Y one. The first two departures are X, X if X's credit was refilled to a quantum (3028),
/// and X, Y if it kept its 50 B. `opts` sets further options; the clock starts at `detach`.
fn refilled(opts: impl Fn(FqBuilder) -> FqBuilder, detach: u64, idle: u64) -> bool {
    let c = Arc::new(ManualClock::new(detach));
    let mut q: TestFq = opts(no_fastpath(fq_builder(&c)))
        .pacing(false)
        .initial_quantum(100)
        .build()
        .unwrap();
    // fq_dequeue returns at once when qlen is 0, so a flow only detaches while another packet
    // waits: flow 9's, stamped 5 s ahead. Everything is in band 0 (priority 6).
    enq(
        &mut q,
        pkt(9, 50, sock(9))
            .with_priority(6)
            .with_tstamp(detach + 5 * S),
    );
    enq(&mut q, pkt(1, 50, sock(1)).with_priority(6));
    assert_eq!(ids(&mut q, 3), [1]);
    let st = q.fq_stats();
    assert_eq!((st.inactive_flows, st.throttled_flows), (1, 1));
    c.set(detach + idle);
    enq(&mut q, pkt(2, 1000, sock(1)).with_priority(6));
    enq(&mut q, pkt(3, 1000, sock(1)).with_priority(6));
    enq(&mut q, pkt(4, 1000, sock(2)).with_priority(6));
    match ids(&mut q, 2)[..] {
        [2, 3] => true,
        [2, 4] => false,
        ref other => panic!("unexpected order {other:?}"),
    }
}

#[test]
fn refill_waits_for_whole_jiffies_and_the_odd_age() {
    // fq_flow_set_detached: `f->age = jiffies | 1UL;` fq_enqueue:
    // `if (time_after(jiffies, f->age + q->flow_refill_delay)) f->credit = max_t(u32,
    // f->credit, q->quantum);` with flow_refill_delay = usecs_to_jiffies(40 000) = 40 (HZ 1000).
    let b = |b: FqBuilder| b;
    // Detached at jiffy 1000 (even): age 1001, refilled from jiffy 1042 on.
    assert!(!refilled(b, S, 41 * MS + 999 * US));
    assert!(refilled(b, S, 42 * MS));
    // Detached at jiffy 1001 (odd): age 1001 too, so the same jiffy 1042 decides, 1 ms sooner.
    assert!(!refilled(b, S + MS, 40 * MS + 999 * US));
    assert!(refilled(b, S + MS, 41 * MS));
    // Detached late in jiffy 1000 (1000.9 ms): age 1001; 40.1 ms later is 1041.0 ms, jiffy
    // 1041, and time_after(1041, 1001 + 40) is false: no refill (in ns it would be).
    assert!(!refilled(b, S + 900 * US, 40 * MS + 100 * US));
}

#[test]
fn refill_delay_rounds_up_to_jiffies_of_the_configured_hz() {
    // fq_change: `q->flow_refill_delay = usecs_to_jiffies(usecs_delay);` rounds up: 15 ms at
    // HZ 100 is 2 jiffies (20 ms). Detached at jiffy 100 (1 s): age 101, refill from jiffy 104
    // (time_after(jiffies, 101 + 2)), i.e. 40 ms later.
    let b = |b: FqBuilder| b.hz(100).refill_delay(Duration::from_millis(15));
    assert!(!refilled(b, S, 30 * MS));
    assert!(!refilled(b, S, 39 * MS));
    assert!(refilled(b, S, 40 * MS));
    // tc shows what the kernel dumps: jiffies_to_usecs(flow_refill_delay).
    let q: TestFq = b(FqBuilder::new()).build().unwrap();
    assert!(q.to_string().contains(" refill_delay 20ms "), "{q}");
    assert_eq!(q.config().refill_delay_jiffies, 2);
}

#[test]
fn hz_is_validated() {
    for hz in [100, 250, 300, 1000] {
        let q: TestFq = FqBuilder::new().hz(hz).build().unwrap();
        assert_eq!(q.config().hz, hz);
        assert_eq!(
            q.config().refill_delay_jiffies,
            40 * hz / 1000,
            "msecs_to_jiffies(40)"
        );
    }
    let e: ConfigError = FqBuilder::new().hz(200).build::<TestPacket>().unwrap_err();
    assert_eq!((e.qdisc(), e.option()), ("fq", "hz"));
}

// --- 3. Wrapping arithmetic ---------------------------------------------------------------

#[test]
fn drift_credit_wraps_when_a_packet_leaves_early_under_offload_horizon() {
    // fq_dequeue: `len -= min(len/2, now - f->time_next_packet);` on u64. With an offload
    // horizon a flow leaves up to 500 us before its time_next_packet; `now - tnp` then wraps
    // to a huge value and half the delay is forgiven.
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = fq_builder(&c)
        .max_pacing_offload_horizon(Duration::from_micros(500))
        .offload_horizon(Duration::from_micros(500))
        // 1000 B at 1 MB/s: 1 ms per packet, every packet paced (rate <= low_rate_threshold
        // sets f->credit = 0).
        .maxrate(1_000_000)
        .low_rate_threshold(10_000_000)
        .build()
        .unwrap();
    for i in 0..3 {
        enq(&mut q, pkt(i, 1000, sock(1)));
    }
    assert_eq!(ids(&mut q, 2), [0], "time_next_packet = t0 + 1 ms");
    assert_eq!(q.fq_stats().next_delayed_flow_ns, Some(t0 + MS));
    // 500 us later the flow is within the offload horizon: packet 1 leaves 500 us early, and its
    // delay is 1 ms - min(500 us, now - tnp wrapped) = 500 us: tnp stays t0 + 1 ms, which is
    // within the horizon too, so packet 2 follows at once.
    c.set(t0 + 500 * US);
    assert_eq!(ids(&mut q, 3), [1, 2]);
}

#[test]
fn flow_credit_is_an_int_that_wraps() {
    // fq_dequeue: `plen = qdisc_pkt_len(skb); f->credit -= plen;` on int (the kernel builds
    // with -fno-strict-overflow): 15 140 - 3 000 000 000 wraps to 1 294 982 436 > 0, so the
    // flow keeps the head of the new list and sends its second packet before flow B.
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).pacing(false).build().unwrap();
    enq(&mut q, pkt(1, 3_000_000_000, sock(1)));
    enq(&mut q, pkt(2, 3_000_000_000, sock(1)));
    enq(&mut q, pkt(3, 100, sock(2)));
    assert_eq!(ids(&mut q, 3), [1, 2, 3]);
}

#[test]
fn band_credit_is_an_int_that_wraps() {
    // fq_dequeue's band rotation: `pband->credit = min(pband->credit + pband->quantum,
    // pband->quantum); if (pband->credit > 0) goto begin; retry = 0;` on int. Band 0 has weight
    // INT_MAX and leftover credit INT_MAX - 1000: its refill wraps negative, so the rotation
    // passes it once more and serves band 1 first.
    let c = clock();
    let mut q: TestFq = no_fastpath(fq_builder(&c))
        .pacing(false)
        .initial_quantum(100)
        .weights([i32::MAX as u32, 16_384, 16_384])
        .build()
        .unwrap();
    // Flow F (priority 0, band 1). A new flow joins band 0's new list (f->band is still 0 when
    // fq_enqueue calls fq_flow_add_tail), so F1 leaves from band 0 (whose credit becomes
    // INT_MAX - 1000); F, out of credit, then moves to band 1's old list, and F2 (20 000 B)
    // leaves from band 1, whose credit goes negative.
    for (id, len) in [(1, 1000), (2, 20_000), (3, 1000)] {
        enq(&mut q, pkt(id, len, sock(2)));
    }
    assert_eq!(ids(&mut q, 2), [1, 2]);
    // A, priority 6 (band 0). Band 1 is out of credit; band 2 is empty; band 0's refill wraps;
    // band 1, refilled, serves F3 (F refills its own credit on the way) before A.
    enq(&mut q, pkt(4, 100, sock(1)).with_priority(6));
    assert_eq!(ids(&mut q, 3), [3, 4]);
}

// --- 4. GC in the looked-up bucket only, in jiffies -----------------------------------------

/// Sockets `0..` in bucket `b` of `2^log` buckets.
fn socks_in(b: usize, log: u32) -> impl Iterator<Item = u64> {
    (0..).filter(move |&id| kernel_bucket(id, log) == b)
}

/// The socket of a flow whose one packet is stamped 9 s ahead: it keeps qlen above 0 (so that
/// dequeues run and detach emptied flows; `fq_dequeue` returns at once when qlen is 0) and is
/// never collected.
const HOLD: u64 = 1 << 40;

/// An FQ with one idle (detached) flow per socket of `idle`, detached at jiffy 1000, and the
/// throttled [`HOLD`] flow; `b` sets further options.
fn idle_flows_with(
    c: &Arc<ManualClock>,
    b: FqBuilder,
    idle: &[u64],
    hold_cap: Option<u64>,
) -> TestFq {
    c.set(S);
    let mut q: TestFq = b.build().unwrap();
    q.set_socket_max_pacing_rate(HOLD, hold_cap);
    enq(&mut q, pkt(HOLD, 100, sock(HOLD)).with_tstamp(10 * S));
    for &s in idle {
        enq(&mut q, pkt(s, 100, sock(s)));
    }
    while q.dequeue().is_some() {}
    let st = q.fq_stats();
    let n = idle.len() as u32;
    assert_eq!(
        (st.flows, st.inactive_flows, st.throttled_flows),
        (n + 1, n, 1)
    );
    assert!(q.gc_queue_len() >= idle.len(), "every idle flow detached");
    q
}

/// [`idle_flows_with`] on `2^log` buckets, the fast path closed by `maxrate`.
fn with_idle_flows(c: &Arc<ManualClock>, log: u32, idle: &[u64]) -> TestFq {
    idle_flows_with(c, no_fastpath(fq_builder(c)).buckets_log(log), idle, None)
}

#[test]
fn gc_frees_only_flows_of_the_looked_up_bucket() {
    // fq_classify: `root = &q->fq_root[hash_ptr(sk, q->fq_trees_log)]; fq_gc(q, root, sk);`
    // and fq_gc walks that root only.
    let c = clock();
    let a = socks_in(0, 2).next().unwrap();
    let mut q = with_idle_flows(&c, 2, &[a]);
    assert_eq!(q.bucket_of(sock(a)), 0);
    c.set(4 * S + 2 * MS); // jiffy 4002: a candidate (see the next test)
    let other = socks_in(1, 2).find(|&s| s != a).unwrap();
    enq(&mut q, pkt(100, 100, sock(other)));
    let st = q.fq_stats();
    assert_eq!((st.gc_flows, st.flows), (0, 3), "bucket 0 untouched");
    let same = socks_in(0, 2).find(|&s| s != a).unwrap();
    enq(&mut q, pkt(101, 100, sock(same)));
    let st = q.fq_stats();
    assert_eq!((st.gc_flows, st.flows), (1, 3));
    q.check_invariants().unwrap();
}

#[test]
fn gc_age_is_three_hz_jiffies_after_the_odd_age() {
    // fq_gc_candidate: `time_after(jiffies, f->age + FQ_GC_AGE)`, FQ_GC_AGE = 3*HZ. Detached at
    // jiffy 1000: age 1001, a candidate from jiffy 4002 on (3.0015 s later is jiffy 4001).
    let c = clock();
    let idle: Vec<u64> = socks_in(0, 1).take(2).collect();
    let probes: Vec<u64> = socks_in(0, 1).skip(2).take(2).collect();
    let mut q = with_idle_flows(&c, 1, &idle);
    c.set(4 * S + 1_500 * US);
    enq(&mut q, pkt(100, 100, sock(probes[0])));
    assert_eq!(q.fq_stats().gc_flows, 0);
    c.set(4 * S + 2 * MS);
    enq(&mut q, pkt(101, 100, sock(probes[1])));
    assert_eq!(q.fq_stats().gc_flows, 2);
}

/// Not kernel-exact, the port's documented rule (`fq/table.rs`): the kernel's `fq_gc` takes
/// at most `FQ_GC_MAX` (8) candidates met on the rbtree search path toward the key, and stops
/// there at the looked-up flow (`if (f->sk == sk) break;`); this table has no trees and takes
/// up to 8 candidates of the same bucket, oldest first, never the looked-up flow. The cap and
/// the bucket are the kernel's; which candidates, when the path would meet fewer, are not.
#[test]
fn gc_takes_at_most_eight_per_lookup_never_the_looked_up_flow() {
    let c = clock();
    let idle: Vec<u64> = socks_in(1, 3).take(11).collect();
    let mut q = with_idle_flows(&c, 3, &idle);
    c.set(5 * S);
    // A lookup of an idle flow itself frees 8 of the other 10 and reuses its own.
    enq(&mut q, pkt(100, 100, sock(idle[3])));
    assert!(q.has_flow(sock(idle[3])));
    assert_eq!(q.fq_stats().gc_flows, 8);
    let probe = socks_in(1, 3).nth(20).unwrap();
    enq(&mut q, pkt(101, 100, sock(probe)));
    assert_eq!(q.fq_stats().gc_flows, 10);
    assert_eq!(q.fq_stats().flows, 3);
    q.check_invariants().unwrap();
}

#[test]
fn fast_path_enqueues_collect_nothing() {
    // fq_classify returns &q->internal before computing the root and calling fq_gc.
    let c = clock();
    let idle: Vec<u64> = socks_in(0, 1).take(3).collect();
    // The HOLD socket (not TCP) has a cap, so its packet goes to a flow and keeps qlen > 0.
    let b = fq_builder(&c).buckets_log(1);
    let mut q = idle_flows_with(&c, b, &idle, Some(1 << 40));
    // Candidates now; HOLD is throttled and not yet due, every other flow inactive: a packet
    // of an uncapped socket takes the fast path.
    c.set(5 * S);
    let probe = socks_in(0, 1).nth(10).unwrap();
    enq(&mut q, pkt(51, 100, sock(probe)));
    let st = q.fq_stats();
    assert_eq!((st.fastpath_packets, st.gc_flows), (1, 0));
    // A packet of the capped socket goes through a flow lookup in its bucket, 0 like the idle
    // flows', and collects them (all three: the port's rule, see
    // `gc_takes_at_most_eight_per_lookup_never_the_looked_up_flow`; the kernel's walk takes
    // those on the search path only).
    assert_eq!(kernel_bucket(HOLD, 1), 0);
    assert_eq!(q.bucket_of(sock(HOLD)), 0);
    enq(&mut q, pkt(52, 100, sock(HOLD)));
    let st = q.fq_stats();
    assert_eq!((st.fastpath_packets, st.gc_flows), (1, 3));
}

// --- Socket reuse and the dumped wake-up time --------------------------------------------

#[test]
fn reused_socket_restarts_its_flow_and_leaves_the_delayed_time_stale() {
    // fq_classify: `if (unlikely(skb->sk == sk && f->socket_hash != sk->sk_hash)) {
    // f->credit = q->initial_quantum; ... if (fq_flow_is_throttled(f))
    // fq_flow_unset_throttled(q, f); f->time_next_packet = 0ULL; }`. fq_flow_unset_throttled
    // does not touch q->time_next_delayed_flow.
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = no_fastpath(fq_builder(&c)).build().unwrap();
    let s = |hash| FlowKey::Socket { id: 1, hash };
    enq(&mut q, pkt(1, 100, s(5)).with_tstamp(t0 + S));
    assert!(q.dequeue().is_none());
    let st = q.fq_stats();
    assert_eq!(st.next_delayed_flow_ns, Some(t0 + S));
    assert_eq!(
        st.time_next_delayed_flow,
        (S + 10 * US) as i64,
        "tndf + slack - now"
    );
    // Socket 1 is freed and its memory reused by a socket with another sk_hash.
    enq(&mut q, pkt(2, 100, s(6)));
    let st = q.fq_stats();
    assert_eq!(st.throttled_flows, 0);
    assert_eq!(
        st.next_delayed_flow_ns,
        Some(t0 + S),
        "stale, as in the kernel"
    );
    // Packet 2 (time_to_send t0, earlier than the tail's t0 + 1 s) went to the flow's rbtree
    // and fq_peek takes it first; with time_next_packet reset it leaves now.
    assert_eq!(ids(&mut q, 2), [2]);
    c.set(t0 + S);
    assert_eq!(ids(&mut q, 2), [1]);
    q.check_invariants().unwrap();
}

#[test]
fn reset_keeps_the_stale_delayed_time_which_closes_the_fast_path_until_a_dequeue() {
    // fq_reset clears the flows, lists, counters and the delayed tree, not
    // q->time_next_delayed_flow; fq_fastpath_check refuses a packet when qlen != 0 and
    // `q->time_next_delayed_flow <= now + q->offload_horizon`; fq_check_throttled (in the
    // next fq_dequeue) finds it due and sets it to ~0ULL.
    let c = clock();
    let t0 = c.now_ns();
    let mut q: TestFq = fq_builder(&c).build().unwrap();
    enq(&mut q, pkt(1, 100, sock(1)).with_tstamp(t0 + MS));
    assert!(q.dequeue().is_none());
    assert_eq!(q.fq_stats().next_delayed_flow_ns, Some(t0 + MS));
    let mut tf = qdisc::ToFree::new();
    q.reset(&mut tf, qdisc::DropReason::Deactivated);
    assert_eq!(q.fq_stats().next_delayed_flow_ns, Some(t0 + MS));
    c.set(t0 + 2 * MS);
    enq(&mut q, pkt(2, 100, sock(2))); // qlen 0: fast path
    enq(&mut q, pkt(3, 100, sock(3))); // the stale time is due: a flow
    let st = q.fq_stats();
    assert_eq!((st.fastpath_packets, st.flows), (1, 1));
    assert_eq!(ids(&mut q, 3), [2, 3]);
    assert_eq!(q.fq_stats().next_delayed_flow_ns, None);
    enq(&mut q, pkt(4, 100, sock(4)));
    assert_eq!(q.fq_stats().fastpath_packets, 2);
}

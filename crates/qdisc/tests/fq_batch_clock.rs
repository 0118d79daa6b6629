//! FQ reads its clock once per batch call: `enqueue_batch` and `dequeue_batch` take the time
//! once and handle every packet of the batch at that instant, while `enqueue` and `dequeue`
//! read it once per packet (as the kernel's `fq_enqueue` / `fq_dequeue` do per call). On a
//! clock that does not move within a call the two give identical results (the property tests
//! of `proptest_fq_batch.rs`); here a clock that counts its reads checks the count, with the
//! prefetch pipelines both off (few flows) and forced on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use llist_defer::Fifo;
use qdisc::{Clock, FlowKey, Fq, Qdisc, TestPacket, ToFree, Verdict};

/// A clock standing still at 1 s that counts how often it was read.
#[derive(Debug, Default)]
struct CountingClock(AtomicU64);

impl CountingClock {
    fn reads(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Clock for CountingClock {
    fn now_ns(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed);
        1_000_000_000
    }
}

const N: u64 = 32;

fn fq(clock: &Arc<CountingClock>, pipelines: bool) -> Fq<TestPacket> {
    let mut fq = Fq::<TestPacket>::builder()
        .clock(clock.clone())
        .build::<TestPacket>()
        .expect("default fq");
    if pipelines {
        fq.set_prefetch_distances(8, 8);
    }
    fq
}

fn packets() -> impl Iterator<Item = TestPacket> {
    (0..N).map(|i| TestPacket::new(i, 100).with_flow(FlowKey::Orphan { hash: i as u32 }))
}

#[test]
fn a_batch_reads_the_clock_once_each_way() {
    for pipelines in [false, true] {
        let clock = Arc::new(CountingClock::default());
        let mut q = fq(&clock, pipelines);
        let mut to_free = ToFree::new();
        let mut batch: Fifo<TestPacket> = packets().collect();
        let v = q.enqueue_batch(&mut batch, &mut to_free);
        assert_eq!(v.queued, N as usize, "pipelines {pipelines}");
        assert_eq!(clock.reads(), 1, "enqueue_batch, pipelines {pipelines}");

        let mut out = Fifo::new();
        assert_eq!(q.dequeue_batch(&mut out, N as usize), N as usize);
        assert_eq!(clock.reads(), 2, "dequeue_batch, pipelines {pipelines}");
        let ids: Vec<u64> = out.iter().map(|p| p.id()).collect();
        assert_eq!(
            ids,
            (0..N).collect::<Vec<_>>(),
            "one packet per new flow, in order"
        );
        assert!(to_free.is_empty());
    }
}

#[test]
fn packet_by_packet_reads_the_clock_per_packet() {
    let clock = Arc::new(CountingClock::default());
    let mut q = fq(&clock, false);
    let mut to_free = ToFree::new();
    for p in packets() {
        assert_eq!(q.enqueue(p, &mut to_free), Verdict::Success);
    }
    assert_eq!(clock.reads(), N);
    let mut got = 0;
    while q.dequeue().is_some() {
        got += 1;
    }
    assert_eq!(got, N);
    let reads = clock.reads();
    // The first packets took the fast path (`fq_fastpath_check`: an idle qdisc), whose
    // dequeue serves them from the internal queue before the clock is read; every other
    // packet's dequeue reads it once; the final call finds the qdisc empty before reading.
    let fast = q.fq_stats().fastpath_packets;
    assert!(fast > 0 && fast < N, "fast path packets: {fast}");
    assert_eq!(reads, N + (N - fast));
}

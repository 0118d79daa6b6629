//! The panic promise of pfifo's batch calls (`Qdisc::enqueue_batch` / `dequeue_batch` in
//! `qdisc.rs`): if a packet's `len` panics in the middle of a batch, that one packet is lost,
//! the packets not yet taken stay where they were, in order, and the queue's counts (qlen,
//! backlog) describe exactly the packets it holds. The batched paths keep their counts in
//! registers and store them once, from a guard that also runs on unwind; this checks that
//! guard, for the enqueue run and the dequeue chain (against one-by-one dequeues).

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

use llist_defer::{Fifo, Link, Node};
use qdisc::{FifoBuilder, FlowKey, Packet, Pfifo, Qdisc, TestPacket, ToFree};

thread_local! {
    /// The id whose `len` panics, if any.
    static FUSE: Cell<Option<u64>> = const { Cell::new(None) };
}

/// A test packet whose `len` panics while its id is the armed one.
struct Fused(TestPacket);

// SAFETY: forwarded to `TestPacket`, whose link this wrapper owns and hands over unchanged.
unsafe impl Node for Fused {
    fn into_link(self) -> NonNull<Link> {
        self.0.into_link()
    }
    unsafe fn from_link(link: NonNull<Link>) -> Self {
        // SAFETY: forwarded from our caller: `link` came from `into_link`.
        Fused(unsafe { TestPacket::from_link(link) })
    }
}

impl Packet for Fused {
    fn len(&self) -> usize {
        if FUSE.with(Cell::get) == Some(self.0.id()) {
            panic!("len of packet {}", self.0.id());
        }
        self.0.len()
    }
    fn priority(&self) -> u32 {
        self.0.priority()
    }
    fn flow(&self) -> FlowKey {
        self.0.flow()
    }
    fn tstamp(&self) -> Option<u64> {
        self.0.tstamp()
    }
    fn mark_ce(&mut self) {
        self.0.mark_ce();
    }
}

const LEN: usize = 100;

fn packets(ids: std::ops::Range<u64>) -> Fifo<Fused> {
    ids.map(|i| Fused(TestPacket::new(i, LEN))).collect()
}

fn ids(f: &Fifo<Fused>) -> Vec<u64> {
    f.iter().map(|p| p.0.id()).collect()
}

/// Dequeues everything, one call at a time, disarmed.
fn drain(q: &mut impl Qdisc<Fused>) -> Vec<u64> {
    FUSE.with(|f| f.set(None));
    core::iter::from_fn(|| q.dequeue())
        .map(|p| p.0.id())
        .collect()
}

#[test]
fn a_panicking_len_in_enqueue_batch_loses_one_packet_and_keeps_the_counts() {
    // A small limit makes the ring wrap: the run is written as two slices.
    for (queued_before, boom) in [(0u64, 5u64), (6, 9), (6, 6)] {
        let mut q: Pfifo<Fused> = FifoBuilder::pfifo().limit(16).build().unwrap();
        let mut to_free = ToFree::new();
        // Wrap the ring's head past its start, then queue `queued_before` packets.
        for round in 0..3 {
            let mut b = packets(100 * (round + 1)..100 * (round + 1) + 10);
            q.enqueue_batch(&mut b, &mut to_free);
            drain(&mut q);
        }
        let mut before = packets(1000..1000 + queued_before);
        q.enqueue_batch(&mut before, &mut to_free);
        let mut batch = packets(queued_before..queued_before + 8);
        FUSE.with(|f| f.set(Some(boom)));
        let r = catch_unwind(AssertUnwindSafe(|| {
            q.enqueue_batch(&mut batch, &mut to_free)
        }));
        assert!(r.is_err(), "the armed packet's len panicked");
        // The packets after the armed one are still in the batch, in order.
        assert_eq!(
            ids(&batch),
            ((boom + 1)..queued_before + 8).collect::<Vec<_>>()
        );
        let expect: Vec<u64> = (1000..1000 + queued_before)
            .chain(queued_before..boom)
            .collect();
        assert_eq!(q.len(), expect.len(), "qlen counts what the ring holds");
        assert_eq!(
            q.backlog(),
            (expect.len() * LEN) as u64,
            "and so does the backlog"
        );
        assert_eq!(drain(&mut q), expect);
        assert_eq!((q.len(), q.backlog()), (0, 0));
        assert!(to_free.is_empty());
    }
}

/// The same 40 packets in two queues made by `make`; packet 10's `len` panics while the first
/// takes a batch of 32 and the second dequeues one at a time. The lost packet left the queue,
/// but its length could not be read, so its bytes stay in the backlog in both; the length
/// counts exactly what the queue holds, the sent count what was sent, and batch and loop
/// agree.
fn a_panicking_len_in_a_dequeue<Q: Qdisc<Fused>>(make: impl Fn() -> Q) {
    let mut got = Vec::new();
    for batched in [true, false] {
        let mut q = make();
        let mut to_free = ToFree::new();
        let mut b = packets(0..40);
        q.enqueue_batch(&mut b, &mut to_free);
        let mut out = packets(900..902);
        FUSE.with(|f| f.set(Some(10)));
        let r = catch_unwind(AssertUnwindSafe(|| {
            if batched {
                q.dequeue_batch(&mut out, 32);
            } else {
                for _ in 0..32 {
                    let p = q.dequeue().expect("queued");
                    out.push_back(p);
                }
            }
        }));
        assert!(r.is_err(), "the armed packet's len panicked");
        // What was dequeued before it reached `out`, after what `out` held.
        assert_eq!(ids(&out), (900..902).chain(0..10).collect::<Vec<_>>());
        let st = q.stats();
        assert_eq!(
            (q.len(), st.qlen),
            (29, 29),
            "{} batched {batched}",
            q.kind()
        );
        assert_eq!(
            q.backlog(),
            30 * LEN as u64,
            "{} batched {batched}",
            q.kind()
        );
        assert_eq!(drain(&mut q), (11..40).collect::<Vec<_>>());
        assert!(q.is_empty());
        // Sent: the 10 before it and the 29 after; the lost one is not (the runner counts it
        // as a `Panic` drop).
        assert_eq!(
            q.stats().packets,
            39,
            "{} batched {batched}: the lost packet counted as sent",
            q.kind()
        );
        got.push((q.backlog(), q.stats().packets, q.stats().bytes));
    }
    assert_eq!(got[0], got[1], "batch and loop agree after the panic");
}

#[test]
fn a_panicking_len_in_dequeue_batch_loses_one_packet_as_the_loop_does() {
    a_panicking_len_in_a_dequeue(|| FifoBuilder::pfifo().limit(64).build::<Fused>().unwrap());
}

/// pfifo_fast under the same promise: its length is its bands'. A separate packet count left
/// the length 11 above what the bands held after this, so an empty queue reported packets
/// (and the engine never bypassed it again).
#[test]
fn a_panicking_len_in_a_pfifo_fast_dequeue_loses_one_packet_and_keeps_its_length() {
    a_panicking_len_in_a_dequeue(|| {
        qdisc::PfifoFastBuilder::new()
            .tx_queue_len(64)
            .build::<Fused>()
            .unwrap()
    });
}

/// pfifo_head_drop, one packet at a time, full: the arrival goes in and the head is dropped
/// (`pfifo_tail_enqueue`). If the head's `len` panics, only the head is lost: the arrival is
/// queued. Before, the arrival was held while the head was removed, and both were lost.
#[test]
fn a_panicking_head_in_a_full_pfifo_head_drop_loses_only_the_head() {
    let mut q: Pfifo<Fused> = FifoBuilder::head_drop().limit(2).build().unwrap();
    let mut to_free = ToFree::new();
    for p in packets(0..2) {
        q.enqueue(p, &mut to_free);
    }
    FUSE.with(|f| f.set(Some(0)));
    let r = catch_unwind(AssertUnwindSafe(|| {
        q.enqueue(Fused(TestPacket::new(2, LEN)), &mut to_free)
    }));
    assert!(r.is_err(), "the head's len panicked");
    assert_eq!(q.len(), 2, "the arrival is queued behind packet 1");
    assert_eq!(drain(&mut q), [1, 2]);
    assert!(to_free.is_empty());
}

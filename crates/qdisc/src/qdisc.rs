//! The [`Qdisc`] trait, its verdicts (per packet and per batch), the list of packets to free
//! outside the lock, and the basic statistics every discipline keeps.

use core::fmt;

use llist_defer::{Fifo, NodeRef};

use crate::packet::{DropReason, Packet};

/// The result of an enqueue (the kernel's `NET_XMIT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Queued (`NET_XMIT_SUCCESS`).
    Success,
    /// The arriving packet was dropped and put on the to-free list (`NET_XMIT_DROP`).
    Dropped(DropReason),
    /// Queued, but another packet was dropped to make room (`NET_XMIT_CN`).
    Congested(DropReason),
}

/// What [`Qdisc::enqueue_batch`] did with a batch: the verdicts it would have returned for
/// the packets one by one, counted, and the last of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchVerdict {
    /// Packets queued with [`Verdict::Success`].
    pub queued: usize,
    /// Packets queued with [`Verdict::Congested`] (another packet was dropped for each).
    pub congested: usize,
    /// Packets dropped on arrival ([`Verdict::Dropped`]).
    pub dropped: usize,
    /// The verdict of the batch's last packet (`None` for an empty batch).
    pub last: Option<Verdict>,
}

impl BatchVerdict {
    /// Counts one packet's verdict.
    #[inline]
    pub fn record(&mut self, v: Verdict) {
        match v {
            Verdict::Success => self.queued += 1,
            Verdict::Congested(_) => self.congested += 1,
            Verdict::Dropped(_) => self.dropped += 1,
        }
        self.last = Some(v);
    }

    /// Counts `n` packets with the same verdict `v`.
    #[inline]
    pub fn record_n(&mut self, v: Verdict, n: usize) {
        if n == 0 {
            return;
        }
        match v {
            Verdict::Success => self.queued += n,
            Verdict::Congested(_) => self.congested += n,
            Verdict::Dropped(_) => self.dropped += n,
        }
        self.last = Some(v);
    }

    /// Packets of the batch, all verdicts.
    pub fn total(&self) -> usize {
        self.queued + self.congested + self.dropped
    }
}

/// Packets a qdisc or the engine dropped, to be freed after the root lock is released, with a
/// count per [`DropReason`] (the kernel's `to_free` list plus `kfree_skb_reason`).
pub struct ToFree<P: Packet> {
    packets: Fifo<P>,
    counts: [u64; DropReason::ALL.len()],
}

impl<P: Packet> ToFree<P> {
    /// An empty list.
    pub const fn new() -> Self {
        ToFree {
            packets: Fifo::new(),
            counts: [0; DropReason::ALL.len()],
        }
    }

    /// Records `pkt` as dropped for `reason`.
    #[inline]
    pub fn drop_packet(&mut self, pkt: P, reason: DropReason) {
        self.counts[reason.index()] += 1;
        self.packets.push_back(pkt);
    }

    /// Views of the dropped packets, oldest first.
    pub fn iter(&self) -> llist_defer::Iter<'_, P> {
        self.packets.iter()
    }

    /// Packets dropped, all reasons.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// Whether nothing was dropped.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// Packets dropped for `reason` since the last [`take`](ToFree::take).
    pub fn count(&self, reason: DropReason) -> u64 {
        self.counts[reason.index()]
    }

    /// Takes the packets and the per-reason counts, leaving the list empty.
    pub fn take(&mut self) -> (Fifo<P>, [u64; DropReason::ALL.len()]) {
        let counts = core::mem::replace(&mut self.counts, [0; DropReason::ALL.len()]);
        (core::mem::take(&mut self.packets), counts)
    }
}

impl<P: Packet> Default for ToFree<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Packet> fmt::Debug for ToFree<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToFree").field("len", &self.len()).finish()
    }
}

/// The counters `tc -s qdisc show` prints for every qdisc (`gnet_stats_basic` + `queue`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QdiscStats {
    /// Bytes dequeued (sent).
    pub bytes: u64,
    /// Packets dequeued (sent).
    pub packets: u64,
    /// Packets dropped by the qdisc.
    pub drops: u64,
    /// Times the qdisc was over a limit.
    pub overlimits: u64,
    /// Packets handed back by the driver and requeued.
    pub requeues: u64,
    /// Bytes queued now.
    pub backlog: u64,
    /// Packets queued now.
    pub qlen: u64,
}

/// A packet scheduler (the kernel's `Qdisc_ops`), used under the transmit engine's root lock.
pub trait Qdisc<P: Packet>: Send {
    /// The `tc` kind: `"pfifo"`, `"pfifo_fast"`, `"fq"`, ...
    fn kind(&self) -> &'static str;
    /// Queues `pkt`. Drops (of `pkt` or of another packet) go to `to_free`.
    fn enqueue(&mut self, pkt: P, to_free: &mut ToFree<P>) -> Verdict;
    /// Queues the packets of `batch` in order, with exactly the verdicts, drops (in the same
    /// order on `to_free`), counters and later dequeue order that [`enqueue`](Qdisc::enqueue)
    /// called on each of them in turn would give. A discipline overrides it to amortise its
    /// checks over the batch (one room check, one ring reservation); the default is that loop.
    ///
    /// `batch` is empty on return. A qdisc takes each packet from the front of `batch` before
    /// it calls anything that may panic on it (the packet's own methods included): if it
    /// panics, the packets not yet taken are still in `batch`, and only the one in its hands
    /// is lost. The transmit engine counts a panic's losses on that promise.
    fn enqueue_batch(&mut self, batch: &mut Fifo<P>, to_free: &mut ToFree<P>) -> BatchVerdict {
        let mut v = BatchVerdict::default();
        while let Some(p) = batch.pop_front() {
            v.record(self.enqueue(p, to_free));
        }
        v
    }
    /// The next packet to send now, if any is eligible.
    fn dequeue(&mut self) -> Option<P>;
    /// Moves up to `max` packets, in the order [`dequeue`](Qdisc::dequeue) would give them,
    /// to the back of `out` (the kernel's bulk dequeue for `xmit_more`); returns how many.
    /// The default is that loop; a discipline overrides it where it can do better.
    fn dequeue_batch(&mut self, out: &mut Fifo<P>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(p) = self.dequeue() else { break };
            out.push_back(p);
            n += 1;
        }
        n
    }
    /// A view of the packet [`dequeue`](Qdisc::dequeue) would return.
    fn peek(&mut self) -> Option<NodeRef<'_, P>>;
    /// Packets queued. While it is 0, [`dequeue`](Qdisc::dequeue) returns `None` (the
    /// engine's batched runner asks `len` instead of calling `dequeue` on an empty qdisc).
    fn len(&self) -> usize;
    /// Whether nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes queued.
    fn backlog(&self) -> u64;
    /// Removes every queued packet into `to_free` with `reason`. They are not counted in the
    /// qdisc's `drops`: the kernel's `qdisc_reset` frees them without touching
    /// `qstats.drops` (the engine counts them under `reason`).
    fn reset(&mut self, to_free: &mut ToFree<P>, reason: DropReason);
    /// Whether the qdisc is work-conserving, so an empty one may be bypassed
    /// (`TCQ_F_CAN_BYPASS`).
    fn can_bypass(&self) -> bool;
    /// Whether a batch of `packets` packets (`bytes` bytes in all) arriving at this qdisc
    /// while it is empty may skip it: enqueueing them and dequeueing them again would give
    /// back all of them in arrival order, none dropped. True only for a FIFO the batch fits
    /// in; the default allows a single packet, the kernel's bypass rule.
    fn can_bypass_batch(&self, packets: usize, bytes: u64) -> bool {
        let _ = bytes;
        packets <= 1 && self.can_bypass()
    }
    /// The basic counters.
    fn stats(&self) -> QdiscStats;
    /// When a qdisc with packets but none eligible now (paced) next has one, in clock ns.
    fn next_wakeup(&self) -> Option<u64> {
        None
    }
    /// Writes the qdisc-specific statistics lines of `tc -s qdisc show` (may write nothing).
    fn fmt_xstats(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let _ = f;
        Ok(())
    }
}

/// A boxed qdisc is a qdisc, so a queue can hold `Box<dyn Qdisc<P>>` and change kinds with
/// `replace_qdisc` (`tc qdisc replace ... fq`).
impl<P: Packet, Q: Qdisc<P> + ?Sized> Qdisc<P> for Box<Q> {
    fn kind(&self) -> &'static str {
        (**self).kind()
    }
    fn enqueue(&mut self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        (**self).enqueue(pkt, to_free)
    }
    fn enqueue_batch(&mut self, batch: &mut Fifo<P>, to_free: &mut ToFree<P>) -> BatchVerdict {
        (**self).enqueue_batch(batch, to_free)
    }
    fn dequeue(&mut self) -> Option<P> {
        (**self).dequeue()
    }
    fn dequeue_batch(&mut self, out: &mut Fifo<P>, max: usize) -> usize {
        (**self).dequeue_batch(out, max)
    }
    fn peek(&mut self) -> Option<NodeRef<'_, P>> {
        (**self).peek()
    }
    fn len(&self) -> usize {
        (**self).len()
    }
    fn backlog(&self) -> u64 {
        (**self).backlog()
    }
    fn reset(&mut self, to_free: &mut ToFree<P>, reason: DropReason) {
        (**self).reset(to_free, reason)
    }
    fn can_bypass(&self) -> bool {
        (**self).can_bypass()
    }
    fn can_bypass_batch(&self, packets: usize, bytes: u64) -> bool {
        (**self).can_bypass_batch(packets, bytes)
    }
    fn stats(&self) -> QdiscStats {
        (**self).stats()
    }
    fn next_wakeup(&self) -> Option<u64> {
        (**self).next_wakeup()
    }
    fn fmt_xstats(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt_xstats(f)
    }
}

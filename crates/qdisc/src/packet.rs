//! What a qdisc needs of a packet: the [`Packet`] trait, flow identity and drop reasons.

use core::fmt;

use core::ptr::NonNull;

use llist_defer::{Fifo, Link, Node};

/// How FQ identifies the flow of a packet (the kernel keys flows by socket, or by the packet
/// hash for packets without a full socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowKey {
    /// A connected socket (the kernel's `skb->sk` pointer): `id` names it, `hash` is its
    /// `sk_hash`. FQ models the socket's address as `id << 1` (even, like an aligned pointer;
    /// it picks the flow's bucket, `hash_ptr(sk, buckets_log)`).
    ///
    /// A new `hash` on a known `id` is how this model says "the socket was freed and its
    /// memory reused for another socket" (`fq_classify`'s `f->socket_hash != sk->sk_hash`
    /// branch): FQ then restarts the flow with `initial_quantum` credit, takes it out of the
    /// delayed set if it was throttled (onto its band's old list) and forgets its pacing time
    /// (`time_next_packet = 0`). It is the only way to reach that branch.
    Socket {
        /// A stable identity of the socket.
        id: u64,
        /// The socket's hash.
        hash: u32,
    },
    /// An unconnected socket (`TCP_CLOSE`, e.g. unconnected UDP): keyed by the packet hash like
    /// an orphan, but still a socket (not orphaned).
    Unconnected {
        /// The packet's flow hash (`skb_get_hash`).
        hash: u32,
    },
    /// No socket (forwarded traffic, SYNACK, RST): keyed by the masked packet hash
    /// (`orphan_mask`), with the odd-key trick so it never collides with a socket id.
    Orphan {
        /// The packet's flow hash (`skb_get_hash`).
        hash: u32,
    },
}

impl FlowKey {
    /// The flow hash of the packet (or socket), as used for queue selection.
    pub fn hash(&self) -> u32 {
        match *self {
            FlowKey::Socket { hash, .. }
            | FlowKey::Unconnected { hash }
            | FlowKey::Orphan { hash } => hash,
        }
    }
}

/// What a qdisc needs of a packet. The packet is an owning handle with an intrusive link
/// ([`Node`]), so queueing it allocates nothing.
pub trait Packet: Node + Send {
    /// Length in bytes as sent on the wire (`qdisc_pkt_len`). It must not change while the
    /// packet is queued: qdiscs read it on the way in and again on the way out to keep their
    /// byte counters.
    fn len(&self) -> usize;
    /// Starts loading what a qdisc reads of the queued packet whose link is `link` (its length,
    /// flow, stamp and rates): a hint for the batched paths, which call it a few packets ahead
    /// (fq's dequeue, for the head packets of the flows it serves next). It must only prefetch,
    /// never read or write through `link`. The default loads the link's cache line, which is
    /// all a packet whose fields sit beside its link needs; a packet whose fields span more
    /// lines should load each of them.
    #[inline]
    fn prefetch_link(link: NonNull<Link>) {
        llist_defer::hint::prefetch(link.as_ptr());
    }
    /// Whether the packet has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `skb->priority` (the low 4 bits select a band through the priomap).
    fn priority(&self) -> u32;
    /// The flow this packet belongs to.
    fn flow(&self) -> FlowKey;
    /// The earliest departure time in monotonic ns (`skb->tstamp` as EDT), if stamped.
    fn tstamp(&self) -> Option<u64>;
    /// Marks the packet ECN Congestion Experienced (FQ's `ce_threshold`).
    fn mark_ce(&mut self);
    /// The sending socket's pacing rate in bytes per second (`sk->sk_pacing_rate`, what TCP's
    /// `tcp_update_pacing_rate` sets), if it has one. FQ paces a socket's packets without an
    /// EDT stamp at this rate (capped by [`max_pacing_rate`](Packet::max_pacing_rate), as the
    /// socket layer caps `sk_pacing_rate`); `None` and `Some(u64::MAX)` (`~0UL`) mean
    /// unlimited. Orphan packets have no socket, so FQ ignores it for them.
    fn pacing_rate(&self) -> Option<u64> {
        None
    }
    /// The sending socket's `SO_MAX_PACING_RATE` in bytes per second
    /// (`sk->sk_max_pacing_rate`), the user's cap; `None` and `Some(u64::MAX)` mean unlimited.
    /// Besides capping the pacing rate, a finite cap on a socket that is not TCP keeps its
    /// packets off FQ's unpaced fast path (`fq_fastpath_check`). Ignored for orphans.
    fn max_pacing_rate(&self) -> Option<u64> {
        None
    }
    /// Whether the sending socket is TCP (`sk_is_tcp(skb->sk)`): FQ's fast path ignores the
    /// `SO_MAX_PACING_RATE` of a TCP socket, which paces itself. Ignored for orphans.
    fn is_tcp(&self) -> bool {
        false
    }
    /// Frees packets a driver is done with, all at once, so that a pool can take them back in
    /// bulk (the kernel frees a completed TX list with one call); the default drops them one by
    /// one, in order.
    fn free_batch(batch: Fifo<Self>)
    where
        Self: Sized,
    {
        drop(batch);
    }
}

/// Why a packet was dropped; every drop counter is keyed by one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// The qdisc was full (`QDISC_DROP` / tail or head drop on a FIFO limit).
    QdiscOverlimit,
    /// The defer list's burst limit was exceeded (`QDISC_BURST_DROP`).
    QdiscBurst,
    /// FQ: the band's packet limit (`FQ_BAND_LIMIT`).
    FqBandLimit,
    /// FQ: the flow's packet limit (`FQ_FLOW_LIMIT`).
    FqFlowLimit,
    /// FQ: the timestamp was beyond the horizon (`FQ_HORIZON_LIMIT`).
    FqHorizonLimit,
    /// The queue was deactivated or reset with the packet in it (`QDISC_DROP` on deactivate).
    Deactivated,
    /// The driver refused the packet for good (bad length, link gone).
    DriverError,
    /// A panic unwound through the thread holding the packet.
    Panic,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 8] = [
        DropReason::QdiscOverlimit,
        DropReason::QdiscBurst,
        DropReason::FqBandLimit,
        DropReason::FqFlowLimit,
        DropReason::FqHorizonLimit,
        DropReason::Deactivated,
        DropReason::DriverError,
        DropReason::Panic,
    ];

    /// The index of this reason's counter.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The kernel-style name (`SKB_DROP_REASON_*` without the prefix).
    pub fn name(self) -> &'static str {
        match self {
            DropReason::QdiscOverlimit => "QDISC_DROP",
            DropReason::QdiscBurst => "QDISC_BURST_DROP",
            DropReason::FqBandLimit => "FQ_BAND_LIMIT",
            DropReason::FqFlowLimit => "FQ_FLOW_LIMIT",
            DropReason::FqHorizonLimit => "FQ_HORIZON_LIMIT",
            DropReason::Deactivated => "QDISC_DEACTIVATED",
            DropReason::DriverError => "DRIVER_ERROR",
            DropReason::Panic => "PANIC",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

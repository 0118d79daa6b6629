//! pfifo, bfifo and pfifo_head_drop: one FIFO with a packet or byte limit (`sch_fifo.c`:
//! `pfifo_enqueue`, `bfifo_enqueue`, `pfifo_tail_enqueue`, `fifo_init`).
//!
//! - pfifo: at most `limit` packets; a full queue drops the **arriving** packet.
//! - bfifo: at most `limit` bytes of backlog; the arriving packet is dropped if it would exceed it.
//! - pfifo_head_drop: at most `limit` packets; a full queue drops the **oldest** packet, queues
//!   the new one and reports [`Verdict::Congested`]; limit 0 drops everything.
//!
//! Without a limit the kernel takes `tx_queue_len` packets (1000), times `psched_mtu` bytes for
//! bfifo (1514 on Ethernet). The qdisc may be bypassed when empty if it can hold at least one
//! packet (pfifo: limit ≥ 1; bfifo: limit ≥ `psched_mtu`), as `fifo_init` sets
//! `TCQ_F_CAN_BYPASS`.
//!
//! Packets wait in a ring of link slots (see `ring.rs`), not in a list through the packets: a
//! dequeue finds the next packet in the ring, so a deep queue costs what a `VecDeque` of
//! pointers does plus one read of each packet's length (for the byte counters), which its
//! sender makes anyway. The ring starts with room for `min(limit, 1024)` packets and doubles
//! when a longer queue needs it: it allocates only when the queue passes its longest length so
//! far.

use core::fmt;
use core::mem::ManuallyDrop;

use llist_defer::{Fifo, NodeRef};

use crate::config::ConfigError;
use crate::packet::{DropReason, Packet};
use crate::qdisc::{BatchVerdict, Qdisc, QdiscStats, ToFree, Verdict};
use crate::ring::Ring;
use crate::show::Size;

/// The default `tx_queue_len` of a network device.
pub const DEFAULT_TX_QUEUE_LEN: u32 = 1000;
/// The default `psched_mtu`: an Ethernet MTU of 1500 plus its 14-byte hard header.
pub const DEFAULT_PSCHED_MTU: u32 = 1514;

/// Which of the three `sch_fifo.c` disciplines a [`Pfifo`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FifoKind {
    /// Packet limit, tail drop (`pfifo`).
    Pfifo,
    /// Byte limit, tail drop (`bfifo`).
    Bfifo,
    /// Packet limit, head drop (`pfifo_head_drop`).
    PfifoHeadDrop,
}

impl FifoKind {
    /// The `tc` kind.
    pub fn name(self) -> &'static str {
        match self {
            FifoKind::Pfifo => "pfifo",
            FifoKind::Bfifo => "bfifo",
            FifoKind::PfifoHeadDrop => "pfifo_head_drop",
        }
    }
}

/// Builds a [`Pfifo`] (any of the three kinds) the way `fifo_init` reads its options.
///
/// ```
/// use qdisc::{FifoBuilder, Qdisc, TestPacket};
///
/// let q = FifoBuilder::bfifo().tx_queue_len(10).build::<TestPacket>().unwrap();
/// assert_eq!(q.limit(), 10 * 1514); // txqlen × psched_mtu
/// assert_eq!(q.kind(), "bfifo");
/// ```
#[derive(Debug, Clone)]
pub struct FifoBuilder {
    kind: FifoKind,
    limit: Option<u64>,
    tx_queue_len: u32,
    psched_mtu: u32,
}

impl FifoBuilder {
    fn new(kind: FifoKind) -> Self {
        FifoBuilder {
            kind,
            limit: None,
            tx_queue_len: DEFAULT_TX_QUEUE_LEN,
            psched_mtu: DEFAULT_PSCHED_MTU,
        }
    }

    /// A pfifo (packet limit, tail drop).
    pub fn pfifo() -> Self {
        Self::new(FifoKind::Pfifo)
    }

    /// A bfifo (byte limit, tail drop).
    pub fn bfifo() -> Self {
        Self::new(FifoKind::Bfifo)
    }

    /// A pfifo_head_drop (packet limit, drop the oldest).
    pub fn head_drop() -> Self {
        Self::new(FifoKind::PfifoHeadDrop)
    }

    /// `limit`: packets (pfifo, pfifo_head_drop) or bytes (bfifo), up to `u32::MAX` like the
    /// kernel's `tc_fifo_qopt`. 0 is accepted and drops every packet.
    pub fn limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The device's `tx_queue_len`, the default limit when none is given (default 1000).
    pub fn tx_queue_len(mut self, len: u32) -> Self {
        self.tx_queue_len = len;
        self
    }

    /// The device's `psched_mtu` (MTU + hard header), for bfifo's default limit and its bypass
    /// rule (default 1514). Must be at least 1.
    pub fn psched_mtu(mut self, mtu: u32) -> Self {
        self.psched_mtu = mtu;
        self
    }

    /// Validates and builds.
    pub fn build<P: Packet>(self) -> Result<Pfifo<P>, ConfigError> {
        let name = self.kind.name();
        if self.psched_mtu == 0 {
            return Err(ConfigError::new(
                name,
                "psched_mtu",
                0,
                "1..=4294967295 (bytes)",
            ));
        }
        let limit = match self.limit {
            Some(l) if l > u64::from(u32::MAX) => {
                return Err(ConfigError::new(name, "limit", l, "0..=4294967295"));
            }
            Some(l) => l,
            None => match self.kind {
                // `__fifo_init`: `u32 limit = tx_queue_len; limit *= psched_mtu(dev);`, which
                // wraps in 32 bits.
                FifoKind::Bfifo => u64::from(self.tx_queue_len.wrapping_mul(self.psched_mtu)),
                _ => u64::from(self.tx_queue_len),
            },
        };
        let can_bypass = match self.kind {
            FifoKind::Bfifo => limit >= u64::from(self.psched_mtu),
            _ => limit >= 1,
        };
        // Room before the first growth: the packet limit, or for bfifo the limit in bytes
        // (an upper bound on packets), capped so that a large limit costs nothing up front.
        let initial = limit.min(INITIAL_SLOTS) as usize;
        let queue = Ring::with_capacity(initial);
        Ok(Pfifo {
            fast_room: fast_room(self.kind, limit, &queue),
            queue,
            kind: self.kind,
            limit,
            can_bypass,
            bytes_in: 0,
            removed_pkts: 0,
            removed_bytes: 0,
            stats: QdiscStats::default(),
        })
    }
}

/// pfifo / bfifo / pfifo_head_drop (`sch_fifo.c`).
///
/// - pfifo: at most `limit` packets (default `tx_queue_len`, 1000); a full queue drops the
///   arriving packet.
/// - bfifo: at most `limit` bytes of backlog (default 1000 × 1514).
/// - pfifo_head_drop: a full queue drops the oldest packet, queues the new one and reports
///   [`Verdict::Congested`].
///
/// Packets wait in a ring of link slots, so a deep queue costs what a `VecDeque` of pointers
/// does plus the read of each packet's length, on the way in and out. The ring starts with
/// room for `min(limit, 1024)` packets and doubles when a longer queue needs it, so it
/// allocates only when the queue passes its longest length so far; a queue deeper than 16 Ki
/// prefetches the packet 32 places behind the front for whoever sends it.
///
/// ```
/// use qdisc::{DropReason, Pfifo, Qdisc, TestPacket, ToFree, Verdict};
///
/// let mut q: Pfifo<TestPacket> = Pfifo::<TestPacket>::builder().limit(1).build().unwrap();
/// let mut to_free = ToFree::new();
/// assert_eq!(q.enqueue(TestPacket::new(1, 100), &mut to_free), Verdict::Success);
/// assert_eq!(
///     q.enqueue(TestPacket::new(2, 100), &mut to_free),
///     Verdict::Dropped(DropReason::QdiscOverlimit)
/// );
/// assert_eq!(q.dequeue().map(|p| p.id()), Some(1));
/// ```
pub struct Pfifo<P: Packet> {
    queue: Ring<P>,
    /// Below this queue length an arriving packet is queued without a further check: for a
    /// pfifo the lesser of the limit and the ring's room, for the other kinds 0 (every packet
    /// takes the slow path). One compare instead of the kind, the limit and the room.
    fast_room: u64,
    kind: FifoKind,
    limit: u64,
    can_bypass: bool,
    /// Bytes ever queued; with `stats.bytes` (dequeued) and the removed counts below the
    /// backlog is derived, so each dequeue updates one byte counter, not two.
    bytes_in: u64,
    /// Packets and bytes that left the queue as drops (head drop, reset), not dequeued.
    removed_pkts: u64,
    removed_bytes: u64,
    /// `bytes` and `drops`; `packets`, `backlog` and `qlen` are derived in `stats()`.
    stats: QdiscStats,
}

/// [`Pfifo::fast_room`] for a queue of `kind` with `limit` over `queue`.
fn fast_room<P: Packet>(kind: FifoKind, limit: u64, queue: &Ring<P>) -> u64 {
    match kind {
        FifoKind::Pfifo => limit.min(queue.capacity() as u64),
        FifoKind::Bfifo | FifoKind::PfifoHeadDrop => 0,
    }
}

/// The ring's room before its first growth, at most.
const INITIAL_SLOTS: u64 = 1024;

/// How far behind the front a dequeue prefetches: far enough that a load from memory lands
/// before the packet's turn comes (32 dequeues of a few nanoseconds each).
const PREFETCH_AHEAD: u64 = 32;

/// [`PREFETCH_AHEAD`] for a batched dequeue, which spends less time per packet and so needs
/// its hints further ahead to land in time: in the qdisc bench at 100 000 queued, 64 took the
/// batched round trip from 1.12x to 1.21x the per-packet one (best of 9 rounds each).
const PREFETCH_AHEAD_BATCH: u64 = 64;

/// The queue length from which dequeue prefetches: below it the queued packets (up to a couple
/// of MB with their metadata) still sit in the core's L2, and the hint only costs. Measured in
/// the qdisc bench (alternating builds): with the hint from 1024 packets, pfifo/VecDeque read
/// 1.37-1.41x at 10 000 queued, 1.25-1.32x without it; at 100 000 the hint saves a fifth.
const PREFETCH_MIN_LEN: u64 = 16 * 1024;

impl<P: Packet> Pfifo<P> {
    /// A pfifo builder (see [`FifoBuilder::bfifo`] and [`FifoBuilder::head_drop`] for the others).
    pub fn builder() -> FifoBuilder {
        FifoBuilder::pfifo()
    }

    /// A pfifo with the default limit of 1000 packets.
    pub fn new() -> Self {
        Self::from_defaults(FifoBuilder::pfifo())
    }

    /// A bfifo with the default limit of 1000 × 1514 bytes.
    pub fn bfifo() -> Self {
        Self::from_defaults(FifoBuilder::bfifo())
    }

    /// A pfifo_head_drop with the default limit of 1000 packets.
    pub fn head_drop() -> Self {
        Self::from_defaults(FifoBuilder::head_drop())
    }

    fn from_defaults(b: FifoBuilder) -> Self {
        match b.build() {
            Ok(q) => q,
            // The defaults are valid by construction.
            Err(e) => unreachable!("default fifo options rejected: {e}"),
        }
    }

    /// Which discipline this is.
    pub fn fifo_kind(&self) -> FifoKind {
        self.kind
    }

    /// Slots the queue's ring holds now (it grows as the queue passes its longest length so
    /// far, and never shrinks). For tests.
    #[doc(hidden)]
    pub fn ring_capacity(&self) -> usize {
        self.queue.capacity()
    }

    /// The limit: packets, or bytes for bfifo.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn push(&mut self, pkt: P, len: usize) {
        self.bytes_in += len as u64;
        self.queue.push_back(pkt);
    }

    /// Bytes queued now.
    #[inline]
    fn backlog_bytes(&self) -> u64 {
        self.bytes_in - self.stats.bytes - self.removed_bytes
    }

    /// Everything but a pfifo with room: the drops, bfifo, pfifo_head_drop.
    #[inline(never)]
    fn enqueue_slow(&mut self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        let len = pkt.len();
        match self.kind {
            // `enqueue` queued every pfifo packet below `fast_room`: here the queue is full,
            // or the ring is and must grow first.
            FifoKind::Pfifo => {
                if (self.queue.len() as u64) < self.limit {
                    self.push(pkt, len);
                    self.fast_room = fast_room(self.kind, self.limit, &self.queue);
                    return Verdict::Success;
                }
            }
            FifoKind::Bfifo => {
                if self.backlog_bytes() + len as u64 <= self.limit {
                    self.push(pkt, len);
                    return Verdict::Success;
                }
            }
            FifoKind::PfifoHeadDrop => {
                if self.limit == 0 {
                    // fall through to the tail drop below
                } else if (self.queue.len() as u64) < self.limit {
                    self.push(pkt, len);
                    return Verdict::Success;
                } else if !self.queue.is_empty() {
                    // `pfifo_tail_enqueue` drops the head, then queues the arrival. Queued first
                    // here, so that a panic in the head's `len` loses the head alone, as in the
                    // batch path; the outcome is the same.
                    self.push(pkt, len);
                    if let Some(old) = self.remove_front() {
                        self.stats.drops += 1;
                        to_free.drop_packet(old, DropReason::QdiscOverlimit);
                    }
                    return Verdict::Congested(DropReason::QdiscOverlimit);
                }
            }
        }
        self.stats.drops += 1;
        to_free.drop_packet(pkt, DropReason::QdiscOverlimit);
        Verdict::Dropped(DropReason::QdiscOverlimit)
    }

    /// [`Qdisc::enqueue_batch`] for pfifo: the room is `limit - qlen` for the whole batch, the
    /// ring is reserved once, the packets that fit go in without a check and the rest are
    /// dropped on arrival, as `pfifo_enqueue` would drop each of them.
    fn pfifo_batch(&mut self, batch: &mut Fifo<P>, to_free: &mut ToFree<P>) -> BatchVerdict {
        let n = batch.len();
        let room = self.limit.saturating_sub(self.queue.len() as u64);
        let take = (n as u64).min(room) as usize;
        self.queue.reserve(take);
        // SAFETY: `reserve(take)` above left room for `take` packets, and the batch holds
        // at least that many.
        unsafe { self.queue.push_back_from(batch, take, &mut self.bytes_in) };
        self.fast_room = fast_room(self.kind, self.limit, &self.queue);
        let mut v = BatchVerdict::default();
        v.record_n(Verdict::Success, take);
        self.drop_arrivals(batch, to_free, &mut v);
        v
    }

    /// [`Qdisc::enqueue_batch`] for bfifo: the backlog is read once for the batch; each
    /// packet still meets the byte limit by itself (a short packet after a dropped long one
    /// may fit, as in `bfifo_enqueue`). The ring grows only for packets queued, never for the
    /// batch's length: how many fit is not known before their lengths are read, and a ring
    /// never shrinks.
    fn bfifo_batch(&mut self, batch: &mut Fifo<P>, to_free: &mut ToFree<P>) -> BatchVerdict {
        let mut v = BatchVerdict::default();
        let mut backlog = self.backlog_bytes();
        while let Some(pkt) = batch.pop_front() {
            let len = pkt.len() as u64;
            if backlog + len <= self.limit {
                backlog += len;
                self.push(pkt, len as usize);
                v.record(Verdict::Success);
            } else {
                self.stats.drops += 1;
                to_free.drop_packet(pkt, DropReason::QdiscOverlimit);
                v.record(Verdict::Dropped(DropReason::QdiscOverlimit));
            }
        }
        v
    }

    /// [`Qdisc::enqueue_batch`] for pfifo_head_drop. One by one, the first `limit - qlen`
    /// arrivals are queued and each later one drops the queue's oldest packet: together, the
    /// oldest `qlen + n - limit` packets of (queue, batch) are dropped, in that order, and the
    /// rest queued. A batch packet dropped that way is never queued (queueing it and dropping
    /// it at once leaves the same counters). Limit 0 drops every arrival.
    fn head_drop_batch(&mut self, batch: &mut Fifo<P>, to_free: &mut ToFree<P>) -> BatchVerdict {
        let mut v = BatchVerdict::default();
        if self.limit == 0 {
            self.drop_arrivals(batch, to_free, &mut v);
            return v;
        }
        let n = batch.len() as u64;
        let qlen = self.queue.len() as u64;
        let room = self.limit.saturating_sub(qlen);
        let excess = (qlen + n).saturating_sub(self.limit);
        let congested = Verdict::Congested(DropReason::QdiscOverlimit);
        for _ in 0..excess.min(qlen) {
            if let Some(old) = self.remove_front() {
                self.stats.drops += 1;
                to_free.drop_packet(old, DropReason::QdiscOverlimit);
            }
        }
        for _ in 0..excess.saturating_sub(qlen) {
            if let Some(pkt) = batch.pop_front() {
                self.stats.drops += 1;
                to_free.drop_packet(pkt, DropReason::QdiscOverlimit);
            }
        }
        let rest = batch.len();
        self.queue.reserve(rest);
        // SAFETY: `reserve(rest)` above left room for the rest of the batch.
        unsafe { self.queue.push_back_from(batch, rest, &mut self.bytes_in) };
        let queued = n.min(room);
        v.record_n(Verdict::Success, queued as usize);
        v.record_n(congested, (n - queued) as usize);
        v
    }

    /// Drops every packet left in `batch` on arrival (tail drop).
    fn drop_arrivals(
        &mut self,
        batch: &mut Fifo<P>,
        to_free: &mut ToFree<P>,
        v: &mut BatchVerdict,
    ) {
        let dropped = batch.len();
        while let Some(pkt) = batch.pop_front() {
            to_free.drop_packet(pkt, DropReason::QdiscOverlimit);
        }
        self.stats.drops += dropped as u64;
        v.record_n(Verdict::Dropped(DropReason::QdiscOverlimit), dropped);
    }

    /// Takes the oldest packet out, not sent (head drop, reset); a head drop also counts it
    /// as a drop.
    fn remove_front(&mut self) -> Option<P> {
        let pkt = self.queue.pop_front()?;
        self.removed_pkts += 1;
        self.removed_bytes += pkt.len() as u64;
        Some(pkt)
    }
}

/// A batched dequeue in progress: the chain and the byte count stay in registers while the
/// ring is read (the caller's queue, written through on each packet, would keep its length in
/// memory), and reach `out` and the counter once, when the batch ends or a packet's `len`
/// panics (then only that packet is lost).
struct Sent<'a, P: Packet> {
    out: &'a mut Fifo<P>,
    /// Handed over by value in `drop`, never dropped here, so that no call sees its address.
    chain: ManuallyDrop<Fifo<P>>,
    bytes_out: &'a mut u64,
    bytes: u64,
}

impl<P: Packet> Drop for Sent<'_, P> {
    #[inline(always)]
    fn drop(&mut self) {
        *self.bytes_out += self.bytes;
        let mut chain = core::mem::take(&mut *self.chain);
        self.out.append(&mut chain);
    }
}

impl<P: Packet> Default for Pfifo<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Packet> Qdisc<P> for Pfifo<P> {
    fn kind(&self) -> &'static str {
        self.kind.name()
    }

    #[inline(always)]
    fn enqueue(&mut self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        // The common case inline: a pfifo under its limit with room in the ring.
        if (self.queue.len() as u64) < self.fast_room {
            let len = pkt.len();
            self.bytes_in += len as u64;
            // SAFETY: the length is below `fast_room`, which never exceeds the ring's capacity
            // (set from it at build and after each growth; nothing shrinks the ring).
            unsafe { self.queue.push_back_with_room(pkt) };
            return Verdict::Success;
        }
        self.enqueue_slow(pkt, to_free)
    }

    /// One room check and one ring reservation for the batch (see `pfifo_batch`,
    /// `bfifo_batch`, `head_drop_batch`).
    fn enqueue_batch(&mut self, batch: &mut Fifo<P>, to_free: &mut ToFree<P>) -> BatchVerdict {
        match self.kind {
            FifoKind::Pfifo => self.pfifo_batch(batch, to_free),
            FifoKind::Bfifo => self.bfifo_batch(batch, to_free),
            FifoKind::PfifoHeadDrop => self.head_drop_batch(batch, to_free),
        }
    }

    /// Pops up to `max` packets with one byte-counter update and one prefetch-depth test for
    /// the batch. The packets are linked into a chain of our own, appended to `out` once.
    fn dequeue_batch(&mut self, out: &mut Fifo<P>, max: usize) -> usize {
        let deep = self.queue.len() as u64 > PREFETCH_MIN_LEN;
        let mut sent = Sent {
            out,
            chain: ManuallyDrop::new(Fifo::new()),
            bytes_out: &mut self.stats.bytes,
            bytes: 0,
        };
        let removed = &mut self.removed_pkts;
        self.queue
            .pop_front_batch(max, PREFETCH_AHEAD_BATCH, deep, |pkt| {
                sent.bytes += len_or_lost(&pkt, removed);
                sent.chain.push_back(pkt);
            })
    }

    #[inline]
    fn dequeue(&mut self) -> Option<P> {
        let pkt = self.queue.pop_front()?;
        // Whoever sends a packet reads it, and so do we, for the byte counter: in a queue
        // deeper than the cache, start loading one further back now, so that neither stalls.
        self.queue.prefetch(PREFETCH_AHEAD, PREFETCH_MIN_LEN);
        self.stats.bytes += len_or_lost(&pkt, &mut self.removed_pkts);
        Some(pkt)
    }

    fn peek(&mut self) -> Option<NodeRef<'_, P>> {
        self.queue.front()
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn backlog(&self) -> u64 {
        self.backlog_bytes()
    }

    /// `qdisc_reset_queue`: the packets are freed, not counted as drops.
    fn reset(&mut self, to_free: &mut ToFree<P>, reason: DropReason) {
        while let Some(p) = self.remove_front() {
            to_free.drop_packet(p, reason);
        }
    }

    fn can_bypass(&self) -> bool {
        self.can_bypass
    }

    /// A FIFO gives back what it took in order, so an empty one may be skipped by any batch
    /// that it would have taken whole (no tail or head drop).
    fn can_bypass_batch(&self, packets: usize, bytes: u64) -> bool {
        self.can_bypass
            && self.queue.is_empty()
            && match self.kind {
                FifoKind::Bfifo => bytes <= self.limit,
                FifoKind::Pfifo | FifoKind::PfifoHeadDrop => packets as u64 <= self.limit,
            }
    }

    fn stats(&self) -> QdiscStats {
        QdiscStats {
            packets: self.queue.popped() - self.removed_pkts,
            backlog: self.backlog_bytes(),
            qlen: self.queue.len() as u64,
            ..self.stats
        }
    }
}

/// The length of a packet that has left the ring for a dequeue. If its `len` panics, the
/// packet reaches nobody (the runner counts it as a `Panic` drop), so it is counted in
/// `removed` (left the queue, not sent) before the unwind goes on.
#[inline]
fn len_or_lost<P: Packet>(pkt: &P, removed: &mut u64) -> u64 {
    let lost = LostOnUnwind(removed);
    let len = pkt.len() as u64;
    core::mem::forget(lost);
    len
}

/// [`len_or_lost`]'s count, made only if dropped (on unwind); forgotten otherwise.
struct LostOnUnwind<'a>(&'a mut u64);

impl Drop for LostOnUnwind<'_> {
    fn drop(&mut self) {
        *self.0 += 1;
    }
}

impl<P: Packet> fmt::Debug for Pfifo<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pfifo")
            .field("kind", &self.kind)
            .field("limit", &self.limit)
            .field("qlen", &self.queue.len())
            .field("backlog", &self.backlog_bytes())
            .finish()
    }
}

/// `tc -s qdisc show` output: `qdisc pfifo 0: root refcnt 2 limit 1000p` and the stats lines.
impl<P: Packet> fmt::Display for Pfifo<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "qdisc {} 0: root refcnt 2 limit ", self.kind.name())?;
        match self.kind {
            FifoKind::Bfifo => write!(f, "{}", Size(self.limit))?,
            _ => write!(f, "{}p", self.limit)?,
        }
        write!(f, "{}", self.stats())
    }
}

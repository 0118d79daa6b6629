//! pfifo_fast, the default qdisc (`sch_generic.c`: `pfifo_fast_enqueue`, `pfifo_fast_dequeue`,
//! `pfifo_fast_init`).
//!
//! Three bands served in strict priority, band 0 first. A packet's band is
//! `prio2band[priority & 15]` with the table [`PRIO2BAND`]. Each band is the kernel's
//! `skb_array`, a `ptr_ring` of `tx_queue_len` slots, so the qdisc holds up to three times that;
//! a band whose ring is full drops the arriving packet. `tx_queue_len` 0 is refused, as
//! `pfifo_fast_init` returns `EINVAL`, and so is one above [`PFIFO_FAST_MAX_TX_QUEUE_LEN`], whose ring the
//! kernel cannot allocate (`ENOMEM`). The qdisc is work-conserving and may be bypassed.
//!
//! A ring's room is not `tx_queue_len` minus the packets queued: the consumer
//! (`__ptr_ring_discard_one`) clears the slots it has read only in batches, once `batch` of them
//! are read (16 slots of 8 bytes, two cache lines; 1 in a ring of fewer than 32 slots) or when it
//! reaches the ring's end, and the producer (`__ptr_ring_produce`) refuses while the slot it
//! would write still holds a pointer. So after a dequeue a band may refuse up to `batch − 1`
//! packets more than its queue length says; each band here counts its read, uncleared slots
//! (`ConsumedSlots`) and admits exactly what the kernel's ring would.
//!
//! The kernel's lockless rings and MISSED re-scan belong to the transmit engine's run protocol;
//! here each band is an intrusive [`Fifo`](llist_defer::Fifo) used under the engine's lock.

use core::fmt;

use llist_defer::{Fifo, NodeRef};

use crate::config::ConfigError;
use crate::packet::{DropReason, Packet};
use crate::pfifo::DEFAULT_TX_QUEUE_LEN;
use crate::qdisc::{BatchVerdict, Qdisc, QdiscStats, ToFree, Verdict};
use crate::show::fmt_priomap;

/// Number of pfifo_fast bands.
pub const PFIFO_FAST_BANDS: usize = 3;

/// The largest `tx_queue_len` pfifo_fast accepts: `__ptr_ring_init_queue_alloc` refuses a ring
/// of more than `KMALLOC_MAX_SIZE / sizeof(void *)` slots (4 MiB / 8 on x86_64 with 4 KiB pages
/// and `MAX_PAGE_ORDER` 10), and `pfifo_fast_init` then fails with `ENOMEM`.
pub const PFIFO_FAST_MAX_TX_QUEUE_LEN: u32 = 524_288;

/// Slots a `ptr_ring` consumer clears at once (`__ptr_ring_set_size`: `SMP_CACHE_BYTES * 2 /
/// sizeof(void *)`, 64-byte lines; 1 when that exceeds half the ring).
fn ring_batch(size: u32) -> u32 {
    let batch = 64 * 2 / 8;
    if batch > size / 2 { 1 } else { batch }
}

/// The consumer side of one band's `ptr_ring`: `consumer_head` and `consumer_tail` (the slots in
/// `consumer_tail..consumer_head` were read but still hold their pointers). The producer's
/// slot is full exactly when those slots and the queued packets fill the ring.
#[derive(Debug, Clone, Copy, Default)]
struct ConsumedSlots {
    head: u32,
    tail: u32,
}

impl ConsumedSlots {
    /// Slots read and not yet cleared.
    #[inline]
    fn pending(self) -> usize {
        (self.head - self.tail) as usize
    }

    /// `__ptr_ring_discard_one` after one slot is read.
    #[inline]
    fn discard_one(&mut self, size: u32, batch: u32) {
        let head = self.head + 1;
        if head - self.tail >= batch || head >= size {
            self.tail = head;
        }
        if head >= size {
            self.head = 0;
            self.tail = 0;
        } else {
            self.head = head;
        }
    }
}

/// The kernel's `sch_default_prio2band`: the band of each `priority & 15` (also FQ's default
/// priomap).
pub const PRIO2BAND: [u8; 16] = [1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];

/// Builds a [`PfifoFast`].
///
/// ```
/// use qdisc::{PfifoFast, TestPacket};
///
/// assert!(PfifoFast::<TestPacket>::builder().tx_queue_len(0).build::<TestPacket>().is_err());
/// let q: PfifoFast<TestPacket> = PfifoFast::<TestPacket>::builder().tx_queue_len(64).build().unwrap();
/// assert_eq!(q.band_capacity(), 64);
/// ```
#[derive(Debug, Clone)]
pub struct PfifoFastBuilder {
    tx_queue_len: u32,
}

impl Default for PfifoFastBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl PfifoFastBuilder {
    /// A builder with `tx_queue_len` 1000.
    pub fn new() -> Self {
        PfifoFastBuilder {
            tx_queue_len: DEFAULT_TX_QUEUE_LEN,
        }
    }

    /// The per-band ring size, the device's `tx_queue_len` (default 1000; 1 to
    /// [`PFIFO_FAST_MAX_TX_QUEUE_LEN`]).
    pub fn tx_queue_len(mut self, len: u32) -> Self {
        self.tx_queue_len = len;
        self
    }

    /// Validates and builds.
    pub fn build<P: Packet>(self) -> Result<PfifoFast<P>, ConfigError> {
        if self.tx_queue_len == 0 || self.tx_queue_len > PFIFO_FAST_MAX_TX_QUEUE_LEN {
            return Err(ConfigError::new(
                "pfifo_fast",
                "tx_queue_len",
                self.tx_queue_len,
                format!(
                    "1..={PFIFO_FAST_MAX_TX_QUEUE_LEN} (ring slots per band: 0 is EINVAL in \
                     pfifo_fast_init, a larger ring ENOMEM in ptr_ring_init)"
                ),
            ));
        }
        Ok(PfifoFast::with_capacity(self.tx_queue_len))
    }
}

/// The default qdisc: three strict-priority bands of bounded FIFOs.
///
/// ```
/// use qdisc::{PfifoFast, Qdisc, TestPacket, ToFree};
///
/// let mut q = PfifoFast::new();
/// let mut to_free = ToFree::new();
/// q.enqueue(TestPacket::new(1, 100).with_priority(1), &mut to_free); // band 2
/// q.enqueue(TestPacket::new(2, 100).with_priority(6), &mut to_free); // band 0
/// assert_eq!(q.dequeue().map(|p| p.id()), Some(2));
/// assert_eq!(q.dequeue().map(|p| p.id()), Some(1));
/// ```
pub struct PfifoFast<P: Packet> {
    /// The bands; their lengths are the queue's (no count of its own to fall out of step when
    /// a packet's method panics).
    bands: [Fifo<P>; PFIFO_FAST_BANDS],
    /// Each band's ring slots read and not yet cleared.
    consumed: [ConsumedSlots; PFIFO_FAST_BANDS],
    /// Ring slots per band (`tx_queue_len`).
    size: u32,
    /// Slots the consumer clears at once ([`ring_batch`]).
    batch: u32,
    stats: QdiscStats,
}

impl<P: Packet> PfifoFast<P> {
    /// A builder with `tx_queue_len` 1000.
    pub fn builder() -> PfifoFastBuilder {
        PfifoFastBuilder {
            tx_queue_len: DEFAULT_TX_QUEUE_LEN,
        }
    }

    /// A pfifo_fast with 1000 packets per band.
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_TX_QUEUE_LEN)
    }

    fn with_capacity(size: u32) -> Self {
        PfifoFast {
            bands: [Fifo::new(), Fifo::new(), Fifo::new()],
            consumed: [ConsumedSlots::default(); PFIFO_FAST_BANDS],
            size,
            batch: ring_batch(size),
            stats: QdiscStats::default(),
        }
    }

    /// The band a priority maps to.
    #[inline]
    pub fn band_of(priority: u32) -> usize {
        PRIO2BAND[(priority & 15) as usize] as usize
    }

    /// Packets per band at most: the ring's size, `tx_queue_len`.
    pub fn band_capacity(&self) -> usize {
        self.size as usize
    }

    /// Packets `band` (0..3) admits now: its ring's free slots, which exclude the slots read
    /// by dequeues and not yet cleared (up to `batch − 1`, see the module docs).
    pub fn band_room(&self, band: usize) -> usize {
        match (self.bands.get(band), self.consumed.get(band)) {
            (Some(b), Some(c)) => self.size as usize - b.len() - c.pending(),
            _ => 0,
        }
    }

    /// The packet leaving `band`'s ring: `__ptr_ring_discard_one`.
    #[inline]
    fn discard_one(&mut self, band: usize) {
        self.consumed[band].discard_one(self.size, self.batch);
    }

    /// Packets queued in `band` (0..3).
    pub fn band_len(&self, band: usize) -> usize {
        self.bands.get(band).map_or(0, Fifo::len)
    }
}

impl<P: Packet> Default for PfifoFast<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Packet> Qdisc<P> for PfifoFast<P> {
    fn kind(&self) -> &'static str {
        "pfifo_fast"
    }

    #[inline]
    fn enqueue(&mut self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        let b = Self::band_of(pkt.priority());
        let band = &mut self.bands[b];
        // `__ptr_ring_produce`: refused while the producer's slot holds a pointer, a queued
        // packet's or one read and not yet cleared.
        if band.len() + self.consumed[b].pending() >= self.size as usize {
            self.stats.drops += 1;
            to_free.drop_packet(pkt, DropReason::QdiscOverlimit);
            return Verdict::Dropped(DropReason::QdiscOverlimit);
        }
        self.stats.backlog += pkt.len() as u64;
        band.push_back(pkt);
        Verdict::Success
    }

    /// Per band: the room of each band is read once for the batch and counted down, so a
    /// packet costs its band lookup and one compare; a packet over its band's room is dropped
    /// on arrival, in arrival order on `to_free`. Counters move per packet, so that a panic in
    /// a packet's method leaves them true.
    fn enqueue_batch(&mut self, batch: &mut Fifo<P>, to_free: &mut ToFree<P>) -> BatchVerdict {
        let mut room = [0usize; PFIFO_FAST_BANDS];
        for (b, r) in room.iter_mut().enumerate() {
            *r = self.band_room(b);
        }
        let mut v = BatchVerdict::default();
        while let Some(pkt) = batch.pop_front() {
            let b = Self::band_of(pkt.priority());
            if room[b] == 0 {
                self.stats.drops += 1;
                to_free.drop_packet(pkt, DropReason::QdiscOverlimit);
                v.record(Verdict::Dropped(DropReason::QdiscOverlimit));
                continue;
            }
            room[b] -= 1;
            self.stats.backlog += pkt.len() as u64;
            self.bands[b].push_back(pkt);
            v.record(Verdict::Success);
        }
        v
    }

    /// Empties the bands in priority order, one counter update for the batch (from a guard,
    /// so that if a packet's `len` panics the counters still count the packets that reached
    /// `out`; that packet is lost and its bytes stay in the backlog, as in `dequeue`).
    fn dequeue_batch(&mut self, out: &mut Fifo<P>, max: usize) -> usize {
        let mut sent = Sent {
            stats: &mut self.stats,
            n: 0,
            bytes: 0,
        };
        for (band, consumed) in self.bands.iter_mut().zip(&mut self.consumed) {
            while sent.n < max {
                let Some(pkt) = band.pop_front() else { break };
                consumed.discard_one(self.size, self.batch);
                sent.bytes += pkt.len() as u64;
                out.push_back(pkt);
                sent.n += 1;
            }
        }
        sent.n
    }

    #[inline]
    fn dequeue(&mut self) -> Option<P> {
        for b in 0..PFIFO_FAST_BANDS {
            if let Some(pkt) = self.bands[b].pop_front() {
                self.discard_one(b);
                let len = pkt.len() as u64;
                self.stats.backlog -= len;
                self.stats.bytes += len;
                self.stats.packets += 1;
                return Some(pkt);
            }
        }
        None
    }

    fn peek(&mut self) -> Option<NodeRef<'_, P>> {
        self.bands.iter().find_map(Fifo::front)
    }

    fn len(&self) -> usize {
        self.bands.iter().map(Fifo::len).sum()
    }

    fn backlog(&self) -> u64 {
        self.stats.backlog
    }

    /// `pfifo_fast_reset`: the packets are consumed from their rings (so the rings' uncleared
    /// slots move as for dequeues) and freed, not counted as drops.
    fn reset(&mut self, to_free: &mut ToFree<P>, reason: DropReason) {
        for (band, consumed) in self.bands.iter_mut().zip(&mut self.consumed) {
            while let Some(p) = band.pop_front() {
                consumed.discard_one(self.size, self.batch);
                to_free.drop_packet(p, reason);
            }
        }
        self.stats.backlog = 0;
    }

    fn can_bypass(&self) -> bool {
        true
    }

    fn stats(&self) -> QdiscStats {
        QdiscStats {
            qlen: self.len() as u64,
            ..self.stats
        }
    }
}

/// The counters of a batched dequeue, applied once when it ends, or unwinds.
struct Sent<'a> {
    stats: &'a mut QdiscStats,
    n: usize,
    bytes: u64,
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        self.stats.backlog -= self.bytes;
        self.stats.bytes += self.bytes;
        self.stats.packets += self.n as u64;
    }
}

impl<P: Packet> fmt::Debug for PfifoFast<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PfifoFast")
            .field(
                "band_len",
                &[
                    self.bands[0].len(),
                    self.bands[1].len(),
                    self.bands[2].len(),
                ],
            )
            .field("capacity", &self.size)
            .field(
                "uncleared",
                &[
                    self.consumed[0].pending(),
                    self.consumed[1].pending(),
                    self.consumed[2].pending(),
                ],
            )
            .finish()
    }
}

/// `tc -s qdisc show` output:
/// `qdisc pfifo_fast 0: root refcnt 2 bands 3 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1` and the
/// stats lines.
impl<P: Packet> fmt::Display for PfifoFast<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "qdisc pfifo_fast 0: root refcnt 2 bands {PFIFO_FAST_BANDS} priomap "
        )?;
        fmt_priomap(f, &PRIO2BAND)?;
        write!(f, "{}", self.stats())
    }
}

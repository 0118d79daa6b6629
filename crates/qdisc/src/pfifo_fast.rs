//! pfifo_fast, the default qdisc (`sch_generic.c`: `pfifo_fast_enqueue`, `pfifo_fast_dequeue`,
//! `pfifo_fast_init`).
//!
//! Three bands served in strict priority, band 0 first. A packet's band is
//! `prio2band[priority & 15]` with the table [`PRIO2BAND`]. Each band holds at most
//! `tx_queue_len` packets (the kernel's per-band `skb_array` ring), so the qdisc holds up to three
//! times that; a full band drops the arriving packet. `tx_queue_len` 0 is refused, as
//! `pfifo_fast_init` returns `EINVAL`. The qdisc is work-conserving and may be bypassed.
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

    /// The per-band capacity, the device's `tx_queue_len` (default 1000, at least 1).
    pub fn tx_queue_len(mut self, len: u32) -> Self {
        self.tx_queue_len = len;
        self
    }

    /// Validates and builds.
    pub fn build<P: Packet>(self) -> Result<PfifoFast<P>, ConfigError> {
        if self.tx_queue_len == 0 {
            return Err(ConfigError::new(
                "pfifo_fast",
                "tx_queue_len",
                0,
                "1..=4294967295 (packets per band)",
            ));
        }
        Ok(PfifoFast {
            bands: [Fifo::new(), Fifo::new(), Fifo::new()],
            capacity: self.tx_queue_len as usize,
            stats: QdiscStats::default(),
        })
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
    capacity: usize,
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
        PfifoFast {
            bands: [Fifo::new(), Fifo::new(), Fifo::new()],
            capacity: DEFAULT_TX_QUEUE_LEN as usize,
            stats: QdiscStats::default(),
        }
    }

    /// The band a priority maps to.
    #[inline]
    pub fn band_of(priority: u32) -> usize {
        PRIO2BAND[(priority & 15) as usize] as usize
    }

    /// Packets per band at most.
    pub fn band_capacity(&self) -> usize {
        self.capacity
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
        let band = &mut self.bands[Self::band_of(pkt.priority())];
        if band.len() >= self.capacity {
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
        for (r, band) in room.iter_mut().zip(&self.bands) {
            *r = self.capacity.saturating_sub(band.len());
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
        for band in &mut self.bands {
            while sent.n < max {
                let Some(pkt) = band.pop_front() else { break };
                sent.bytes += pkt.len() as u64;
                out.push_back(pkt);
                sent.n += 1;
            }
        }
        sent.n
    }

    #[inline]
    fn dequeue(&mut self) -> Option<P> {
        for band in &mut self.bands {
            if let Some(pkt) = band.pop_front() {
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

    /// `pfifo_fast_reset`: the packets are freed, not counted as drops.
    fn reset(&mut self, to_free: &mut ToFree<P>, reason: DropReason) {
        for band in &mut self.bands {
            while let Some(p) = band.pop_front() {
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
            .field("capacity", &self.capacity)
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

//! One FQ flow (`struct fq_flow`): its packets in send-time order, credit, band, round-robin
//! link and pacing state (`flow_queue_add`, `fq_peek`, `fq_erase_head`, `fq_flow_purge`).
//!
//! Packets whose `time_to_send` does not go backwards sit in an intrusive [`Fifo`] (O(1), no
//! allocation); a packet stamped earlier than the tail goes to a per-flow ordered map, as the
//! kernel puts it in the flow's rbtree, and `peek` takes whichever is earlier. The kernel keeps
//! `time_to_send` and the band in `skb->cb`; here the head packet's ride in the flow itself and the
//! others' in a ring ([`PktCb`](crate::fq::flow::PktCb)) that keeps its capacity while the flow
//! lives, so steady-state queueing allocates nothing.
//!
//! A flow is split in two for the cache. [`Flow`] holds what every enqueue and dequeue of an
//! ordinary flow reads and writes, in one 64-byte line: the packet list, the head packet's
//! metadata, credit, length, band, state, pacing time, idle time and the key's id (which the flow
//! index compares here).
//! [`FlowCold`], in a parallel array, holds what only deep flows, out-of-order stamps,
//! throttling and garbage collection need. With 100 000 flows served round robin every flow is
//! cold when its turn comes, so each line a dequeue touches is a miss.

use std::collections::{BTreeMap, VecDeque};

use llist_defer::Fifo;

use crate::packet::{DropReason, Packet};
use crate::qdisc::ToFree;

/// "No flow" in an index link.
pub(super) const NIL: u32 = u32::MAX;

/// What FQ remembers of a queued packet (`struct fq_skb_cb`).
#[derive(Debug, Clone, Copy)]
pub(super) struct PktCb {
    /// Earliest departure (ns): the EDT stamp, capped to the horizon, or the enqueue time.
    pub(super) time_to_send: u64,
    /// The band counted in `band_pkt_count` at enqueue.
    pub(super) band: u8,
    /// Whether the packet carried an EDT stamp (`skb->tstamp != 0`).
    pub(super) edt: bool,
}

/// Where a flow is (the kernel encodes this in `age`'s low bit and `next == &throttled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum FlowState {
    /// On no list: empty, waiting to be reused or garbage-collected (`fq_flow_set_detached`).
    Detached,
    /// On a band's `new_flows` or `old_flows` list.
    Listed,
    /// In the delayed set, waiting for `time_next_packet` (`fq_flow_set_throttled`).
    Throttled,
}

/// Which queue `peek` found the next packet in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Src {
    Linear,
    Tree,
}

/// `flags`: the head packet carried an EDT stamp.
const HEAD_EDT: u8 = 1;
/// `flags`: the out-of-order map (in [`FlowCold`]) holds packets.
const HAS_TREE: u8 = 2;
/// `flags`: the flow is on its bucket's GC candidate list (links in [`FlowCold`]).
const IN_GC: u8 = 4;

/// The hot part of a flow: one cache line.
#[repr(C, align(64))]
pub(super) struct Flow<P: Packet> {
    head: Fifo<P>,
    /// While the linear list holds packets, its head packet's `time_to_send`; while the flow
    /// is detached (and so holds none), when it was detached, `jiffies | 1` (`age`). The two
    /// are never needed at once, and the kernel shares a word between `age` and the list's
    /// `tail` pointer the same way. Read through [`head_tts`](Self::head_tts) and
    /// [`age`](Self::age).
    stamp: u64,
    pub(super) time_next_packet: u64,
    /// The id half of the flow key (`FlowCold::key >> 1`): the flow index compares it here,
    /// in the line a lookup loads anyway, so that an index entry need not hold it.
    pub(super) key_id: u64,
    /// DRR credit in bytes (the kernel's `int credit`, wrapping as it does).
    pub(super) credit: i32,
    pub(super) qlen: u32,
    pub(super) band: u8,
    pub(super) state: FlowState,
    /// The band of the linear list's head packet.
    head_band: u8,
    flags: u8,
    /// A fresh value of the table's position counter at each detachment of the flow in this
    /// slot (the position its GC entry takes), when the slot is freed and when it is created,
    /// so a GC entry of an earlier detachment is recognised as stale and `FlowTable::reattach`
    /// can find the current one (see `SWEEP_AT_MOST` for why 32 bits cannot wrap onto a live
    /// entry). Kept across slot reuse.
    pub(super) detach_gen: u32,
}

/// The cold part of a flow, touched off the common path.
pub(super) struct FlowCold<P: Packet> {
    /// Metadata of the linear list's packets after the head, in order.
    cbs: VecDeque<PktCb>,
    t_root: BTreeMap<(u64, u64), (P, PktCb)>,
    t_seq: u64,
    /// The flow key: a socket id `<< 1`, or `(masked hash << 1) | 1` (the odd-key trick).
    pub(super) key: u128,
    /// This flow's key in the delayed set while throttled.
    pub(super) delayed_key: (u64, u64),
    /// Neighbours on its bucket's GC candidate list while on it.
    pub(super) gc_prev: u32,
    pub(super) gc_next: u32,
}

impl<P: Packet> Flow<P> {
    pub(super) fn new() -> Self {
        Flow {
            head: Fifo::new(),
            stamp: 0,
            time_next_packet: 0,
            key_id: 0,
            credit: 0,
            qlen: 0,
            band: 0,
            state: FlowState::Detached,
            head_band: 0,
            flags: 0,
            detach_gen: 0,
        }
    }

    /// Whether the flow is on its bucket's GC candidate list.
    #[inline]
    pub(super) fn in_gc(&self) -> bool {
        self.flags & IN_GC != 0
    }

    #[inline]
    pub(super) fn set_in_gc(&mut self, on: bool) {
        self.flags = (self.flags & !IN_GC) | if on { IN_GC } else { 0 };
    }

    /// When the flow was detached, `jiffies | 1` (the kernel's `age`). Only while detached.
    #[inline]
    pub(super) fn age(&self) -> u64 {
        debug_assert_eq!(self.state, FlowState::Detached);
        self.stamp
    }

    /// Marks the flow detached at `age` (`jiffies | 1`); it holds no packet.
    #[inline]
    pub(super) fn set_detached_at(&mut self, age: u64) {
        debug_assert!(self.head.is_empty() && self.flags & HAS_TREE == 0);
        self.state = FlowState::Detached;
        self.stamp = age;
    }

    /// `time_to_send` of the linear list's head packet; only while the list holds one.
    #[inline]
    fn head_tts(&self) -> u64 {
        debug_assert!(!self.head.is_empty());
        self.stamp
    }

    /// Re-initialises a recycled slot as a fresh, detached, empty flow of key id `key_id`
    /// (`kmem_cache_zalloc` + `fq_flow_set_detached`, `age` being `jiffies | 1`).
    pub(super) fn reinit(&mut self, key_id: u64, age: u64) {
        debug_assert!(self.head.is_empty() && self.flags & HAS_TREE == 0);
        self.credit = 0;
        self.qlen = 0;
        self.band = 0;
        self.key_id = key_id;
        self.set_detached_at(age);
        self.time_next_packet = 0;
        self.flags = 0;
    }

    /// Appends a packet (`flow_queue_add`): to the linear list if it is empty or the packet is
    /// not earlier than its tail, otherwise to the ordered map (equal stamps keep arrival order).
    #[inline]
    pub(super) fn push(&mut self, cold: &mut FlowCold<P>, pkt: P, cb: PktCb) {
        let linear = match self.head.len() {
            0 => {
                self.stamp = cb.time_to_send;
                self.head_band = cb.band;
                self.flags = (self.flags & !HEAD_EDT) | if cb.edt { HEAD_EDT } else { 0 };
                self.head.push_back(pkt);
                return;
            }
            1 => cb.time_to_send >= self.head_tts(),
            _ => cold
                .cbs
                .back()
                .is_none_or(|tail| cb.time_to_send >= tail.time_to_send),
        };
        if linear {
            self.head.push_back(pkt);
            cold.cbs.push_back(cb);
        } else {
            cold.t_seq += 1;
            cold.t_root.insert((cb.time_to_send, cold.t_seq), (pkt, cb));
            self.flags |= HAS_TREE;
        }
    }

    /// Starts loading the linear list's head packet (a hint).
    #[inline]
    pub(super) fn prefetch_head(&self) {
        if let Some(link) = self.head.front_link() {
            P::prefetch_link(link);
        }
    }

    /// The head packet's metadata (meaningless while the linear list is empty).
    #[inline]
    fn head_cb(&self) -> PktCb {
        PktCb {
            time_to_send: self.stamp,
            band: self.head_band,
            edt: self.flags & HEAD_EDT != 0,
        }
    }

    /// The next packet's metadata and where it is (`fq_peek`).
    #[inline]
    pub(super) fn peek(&self, cold: &FlowCold<P>) -> Option<(Src, PktCb)> {
        let linear = (!self.head.is_empty()).then(|| self.head_cb());
        if self.flags & HAS_TREE == 0 {
            return linear.map(|h| (Src::Linear, h));
        }
        let tree = cold.t_root.first_key_value().map(|(_, (_, cb))| *cb);
        match (linear, tree) {
            (None, None) => None,
            (Some(h), None) => Some((Src::Linear, h)),
            (None, Some(t)) => Some((Src::Tree, t)),
            (Some(h), Some(t)) => {
                if t.time_to_send < h.time_to_send {
                    Some((Src::Tree, t))
                } else {
                    Some((Src::Linear, h))
                }
            }
        }
    }

    /// Removes the packet `peek` found (`fq_erase_head`).
    #[inline]
    pub(super) fn take(&mut self, cold: &mut FlowCold<P>, src: Src) -> Option<(P, PktCb)> {
        match src {
            Src::Linear => {
                let cb = self.head_cb();
                let pkt = self.head.pop_front()?;
                if !self.head.is_empty() {
                    // A deep flow: the next head's metadata moves in from the ring, and its
                    // packet starts loading.
                    let next = cold.cbs.pop_front()?;
                    self.stamp = next.time_to_send;
                    self.head_band = next.band;
                    self.flags = (self.flags & !HEAD_EDT) | if next.edt { HEAD_EDT } else { 0 };
                    self.head.prefetch_front();
                }
                Some((pkt, cb))
            }
            Src::Tree => {
                let v = cold.t_root.pop_first().map(|(_, v)| v);
                if cold.t_root.is_empty() {
                    self.flags &= !HAS_TREE;
                }
                v
            }
        }
    }

    /// Drops every packet into `to_free` (`fq_flow_purge`); returns (packets, bytes).
    pub(super) fn purge(
        &mut self,
        cold: &mut FlowCold<P>,
        to_free: &mut ToFree<P>,
        reason: DropReason,
    ) -> (u64, u64) {
        let (mut n, mut bytes) = (0, 0);
        while let Some(p) = self.head.pop_front() {
            n += 1;
            bytes += p.len() as u64;
            to_free.drop_packet(p, reason);
        }
        cold.cbs.clear();
        while let Some((_, (p, _))) = cold.t_root.pop_first() {
            n += 1;
            bytes += p.len() as u64;
            to_free.drop_packet(p, reason);
        }
        self.flags &= !HAS_TREE;
        self.qlen = 0;
        (n, bytes)
    }

    /// Visits every queued packet's metadata and length (for invariant checks).
    pub(super) fn for_each(&self, cold: &FlowCold<P>, mut f: impl FnMut(&P, &PktCb)) {
        let cbs = core::iter::once(self.head_cb()).chain(cold.cbs.iter().copied());
        for (p, cb) in self.head.iter().zip(cbs) {
            f(&p, &cb);
        }
        for (p, cb) in cold.t_root.values() {
            f(p, cb);
        }
    }

    /// Whether the hot flags agree with the cold map and the ring with the list (for
    /// invariant checks).
    pub(super) fn check_parts(&self, cold: &FlowCold<P>) -> Result<(), String> {
        let has_tree = self.flags & HAS_TREE != 0;
        if has_tree == cold.t_root.is_empty() {
            return Err("tree flag disagrees with the out-of-order map".into());
        }
        if self.head.len().saturating_sub(1) != cold.cbs.len() {
            return Err(format!(
                "{} linear packets but {} ring entries after the head",
                self.head.len(),
                cold.cbs.len()
            ));
        }
        Ok(())
    }
}

impl<P: Packet> FlowCold<P> {
    pub(super) fn new() -> Self {
        FlowCold {
            cbs: VecDeque::new(),
            t_root: BTreeMap::new(),
            t_seq: 0,
            key: 0,
            delayed_key: (0, 0),
            gc_prev: NIL,
            gc_next: NIL,
        }
    }

    /// Re-initialises a recycled slot's cold part, keeping the ring's capacity.
    pub(super) fn reinit(&mut self, key: u128) {
        debug_assert!(self.cbs.is_empty() && self.t_root.is_empty());
        self.key = key;
        self.delayed_key = (0, 0);
    }
}

#[cfg(test)]
mod layout {
    use super::Flow;
    use crate::TestPacket;

    #[test]
    fn the_hot_part_of_a_flow_is_one_cache_line() {
        assert_eq!(core::mem::size_of::<Flow<TestPacket>>(), 64);
        assert_eq!(core::mem::align_of::<Flow<TestPacket>>(), 64);
    }
}

//! One FQ flow (`struct fq_flow`): its packets in send-time order, credit, band, round-robin
//! link and pacing state (`flow_queue_add`, `fq_peek`, `fq_erase_head`, `fq_flow_purge`).
//!
//! Packets whose `time_to_send` does not go backwards sit in an intrusive [`Fifo`] (O(1), no
//! allocation); a packet stamped earlier than the tail goes to a per-flow ordered map, as the
//! kernel puts it in the flow's rbtree, and `peek` takes whichever is earlier. The kernel keeps
//! `time_to_send` and the band in `skb->cb`; here they ride in a parallel ring ([`PktCb`]),
//! which keeps its capacity while the flow lives, so steady-state queueing allocates nothing.

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

pub(super) struct Flow<P: Packet> {
    head: Fifo<P>,
    cbs: VecDeque<PktCb>,
    t_root: BTreeMap<(u64, u64), (P, PktCb)>,
    t_seq: u64,
    /// The flow key: a socket id `<< 1`, or `(masked hash << 1) | 1` (the odd-key trick).
    pub(super) key: u128,
    /// `sk_hash` of the socket when the flow was (re)started; a change means socket reuse.
    pub(super) socket_hash: u32,
    pub(super) qlen: u32,
    pub(super) credit: i64,
    pub(super) band: u8,
    /// Next flow on the round-robin list this flow is on.
    pub(super) next: u32,
    pub(super) state: FlowState,
    /// When the flow was detached (`age`, ns).
    pub(super) age: u64,
    /// Identifies the current detachment, so a stale GC entry is recognised.
    pub(super) detach_id: u64,
    pub(super) time_next_packet: u64,
    /// This flow's key in the delayed set while throttled.
    pub(super) delayed_key: (u64, u64),
}

impl<P: Packet> Flow<P> {
    pub(super) fn new() -> Self {
        Flow {
            head: Fifo::new(),
            cbs: VecDeque::new(),
            t_root: BTreeMap::new(),
            t_seq: 0,
            key: 0,
            socket_hash: 0,
            qlen: 0,
            credit: 0,
            band: 0,
            next: NIL,
            state: FlowState::Detached,
            age: 0,
            detach_id: 0,
            time_next_packet: 0,
            delayed_key: (0, 0),
        }
    }

    /// Re-initialises a recycled slot as a fresh, detached, empty flow (`kmem_cache_zalloc` +
    /// `fq_flow_set_detached`), keeping the ring's capacity.
    pub(super) fn reinit(&mut self, key: u128, now: u64, detach_id: u64) {
        debug_assert!(self.head.is_empty() && self.t_root.is_empty());
        self.key = key;
        self.socket_hash = 0;
        self.qlen = 0;
        self.credit = 0;
        self.band = 0;
        self.next = NIL;
        self.state = FlowState::Detached;
        self.age = now;
        self.detach_id = detach_id;
        self.time_next_packet = 0;
        self.delayed_key = (0, 0);
    }

    /// Appends a packet (`flow_queue_add`): to the linear list if it is empty or the packet is
    /// not earlier than its tail, otherwise to the ordered map (equal stamps keep arrival order).
    #[inline]
    pub(super) fn push(&mut self, pkt: P, cb: PktCb) {
        let linear = match self.cbs.back() {
            None => true,
            Some(tail) => cb.time_to_send >= tail.time_to_send,
        };
        if linear {
            self.head.push_back(pkt);
            self.cbs.push_back(cb);
        } else {
            self.t_seq += 1;
            self.t_root.insert((cb.time_to_send, self.t_seq), (pkt, cb));
        }
    }

    /// The next packet's metadata and where it is (`fq_peek`).
    #[inline]
    pub(super) fn peek(&self) -> Option<(Src, PktCb)> {
        let linear = self.cbs.front();
        let tree = self.t_root.first_key_value().map(|(_, (_, cb))| cb);
        match (linear, tree) {
            (None, None) => None,
            (Some(h), None) => Some((Src::Linear, *h)),
            (None, Some(t)) => Some((Src::Tree, *t)),
            (Some(h), Some(t)) => {
                if t.time_to_send < h.time_to_send {
                    Some((Src::Tree, *t))
                } else {
                    Some((Src::Linear, *h))
                }
            }
        }
    }

    /// Removes the packet `peek` found (`fq_erase_head`).
    #[inline]
    pub(super) fn take(&mut self, src: Src) -> Option<(P, PktCb)> {
        match src {
            Src::Linear => {
                let pkt = self.head.pop_front()?;
                let cb = self.cbs.pop_front()?;
                Some((pkt, cb))
            }
            Src::Tree => self.t_root.pop_first().map(|(_, v)| v),
        }
    }

    /// Drops every packet into `to_free` (`fq_flow_purge`); returns (packets, bytes).
    pub(super) fn purge(&mut self, to_free: &mut ToFree<P>, reason: DropReason) -> (u64, u64) {
        let (mut n, mut bytes) = (0, 0);
        while let Some(p) = self.head.pop_front() {
            n += 1;
            bytes += p.len() as u64;
            to_free.drop_packet(p, reason);
        }
        self.cbs.clear();
        while let Some((_, (p, _))) = self.t_root.pop_first() {
            n += 1;
            bytes += p.len() as u64;
            to_free.drop_packet(p, reason);
        }
        self.qlen = 0;
        (n, bytes)
    }

    /// Visits every queued packet's metadata and length (for invariant checks).
    pub(super) fn for_each(&self, mut f: impl FnMut(&P, &PktCb)) {
        for (p, cb) in self.head.iter().zip(self.cbs.iter()) {
            f(&p, cb);
        }
        for (p, cb) in self.t_root.values() {
            f(p, cb);
        }
    }
}

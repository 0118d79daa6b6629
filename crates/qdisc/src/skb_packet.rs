//! `impl Packet for skb_pool::Skb`: the frame pool's handle is what the transmit path queues.

use llist_defer::Fifo;
use skb_pool::Skb;

use crate::packet::{FlowKey, Packet};

impl Packet for Skb {
    #[inline]
    fn len(&self) -> usize {
        Skb::len(self)
    }

    #[inline]
    fn priority(&self) -> u32 {
        Skb::priority(self)
    }

    /// A connected socket keys its flow by identity; an unconnected one, or no socket, by the
    /// packet hash (FQ's `fq_classify`).
    #[inline]
    fn flow(&self) -> FlowKey {
        let hash = self.flow_hash();
        match self.socket() {
            Some(s) if s.connected => FlowKey::Socket { id: s.id, hash },
            Some(_) => FlowKey::Unconnected { hash },
            None => FlowKey::Orphan { hash },
        }
    }

    #[inline]
    fn tstamp(&self) -> Option<u64> {
        Skb::tstamp(self)
    }

    fn mark_ce(&mut self) {
        Skb::mark_ce(self);
    }

    /// [`Skb::free_bulk`]: runs of per-CPU frames go back with one critical section (home
    /// CPU) or one outgoing-batch lock and one reference update (another CPU). A lone packet
    /// is dropped the ordinary way: the bulk call's set-up would cost more than it saves.
    #[inline]
    fn free_batch(batch: Fifo<Self>) {
        if batch.len() > 1 {
            Skb::free_bulk(batch);
        } else {
            drop(batch);
        }
    }
}

#[cfg(all(test, not(lockless_loom)))]
mod tests {
    use super::*;
    use skb_pool::{Pool, SocketRef};

    #[test]
    fn skb_metadata_reaches_the_qdisc() {
        let pool = Pool::builder().frame_count(4).build().unwrap();
        let mut h = pool.handle().unwrap();
        let mut skb = h.alloc().unwrap();
        skb.put_slice(&[0u8; 100]).unwrap();
        skb.set_priority(6);
        skb.set_flow_hash(77);
        skb.set_tstamp(Some(5));
        assert_eq!(Packet::len(&skb), 100);
        assert_eq!(Packet::priority(&skb), 6);
        assert_eq!(Packet::tstamp(&skb), Some(5));
        assert_eq!(skb.flow(), FlowKey::Orphan { hash: 77 });
        skb.set_socket(Some(SocketRef {
            id: 9,
            connected: false,
        }));
        assert_eq!(skb.flow(), FlowKey::Unconnected { hash: 77 });
        skb.set_socket(Some(SocketRef {
            id: 9,
            connected: true,
        }));
        assert_eq!(skb.flow(), FlowKey::Socket { id: 9, hash: 77 });
        Packet::mark_ce(&mut skb);
        assert!(skb.is_ce());
    }
}

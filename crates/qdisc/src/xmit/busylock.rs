//! The [`Strategy::BusyLock`](super::Strategy::BusyLock) protocol: `__dev_xmit_skb` before
//! 2025. A producer that finds the qdisc running first takes the busylock (so that at most one
//! waiter contends with the runner for the root lock), then the root lock, and enqueues its
//! packet, or its whole burst in one [`Qdisc::enqueue_batch`] (`xmit_bulk`); it runs the qdisc
//! if nobody does.
//!
//! Owns: `xmit_busylock`, `xmit_busylock_batch`. Must not: touch the defer list or the NoLock
//! state bits; runs the qdisc only through `run` (`run.rs`).

use llist_defer::Fifo;

use crate::packet::{DropReason, Packet};
use crate::qdisc::{Qdisc, ToFree, Verdict};

use super::driver::Driver;
use super::queue::{TxQueue, lock_counted};

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> TxQueue<P, Q, D> {
    pub(super) fn xmit_busylock(&self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        let c = &self.counters;
        let mut busy = self
            .is_running()
            .then(|| lock_counted(&self.busylock, &c.busylock_contended, &c.busylock_wait_ns));
        let mut root = self.lock_root();
        if root.deactivated {
            to_free.drop_packet(pkt, DropReason::Deactivated);
            return Verdict::Dropped(DropReason::Deactivated);
        }
        if root.can_bypass() && !self.is_running() {
            self.run_begin_locked(&root);
            drop(busy); // the runner lets go of the busylock, as the kernel does
            drop(self.run(root, Fifo::from_iter([pkt]), to_free));
            return Verdict::Success;
        }
        let rc = self.enqueue_all(&mut root, Fifo::from_iter([pkt]), to_free);
        if !self.is_running() {
            self.run_begin_locked(&root);
            drop(busy.take());
            drop(self.run(root, Fifo::new(), to_free));
        }
        rc
    }

    /// [`xmit_bulk`](TxQueue::xmit_bulk)'s BusyLock path for a burst of two or more: the
    /// locks once for the burst, which then bypasses the qdisc whole (an empty, bypassable
    /// qdisc that takes the batch, as the DeferList's drained batches do) or is enqueued in one
    /// [`Qdisc::enqueue_batch`], with the verdicts of the packets one by one. Returns how many
    /// of the burst were dropped on arrival.
    pub(super) fn xmit_busylock_batch(&self, batch: Fifo<P>, to_free: &mut ToFree<P>) -> usize {
        let n = batch.len();
        let c = &self.counters;
        let mut busy = self
            .is_running()
            .then(|| lock_counted(&self.busylock, &c.busylock_contended, &c.busylock_wait_ns));
        let mut root = self.lock_root();
        if !root.deactivated && !self.is_running() && self.may_bypass(&root, &batch) {
            self.run_begin_locked(&root);
            drop(busy);
            drop(self.run(root, batch, to_free));
            return 0;
        }
        let v = self.enqueue_counted(&mut root, batch, to_free);
        if !self.is_running() && !root.deactivated {
            self.run_begin_locked(&root);
            drop(busy.take());
            drop(self.run(root, Fifo::new(), to_free));
        }
        debug_assert_eq!(v.queued + v.congested + v.dropped, n);
        v.dropped
    }
}

//! The [`Strategy::BusyLock`](super::Strategy::BusyLock) protocol: `__dev_xmit_skb` before
//! 2025. A producer that finds the qdisc running first takes the busylock (so that at most one
//! waiter contends with the runner for the root lock), then the root lock, and enqueues its
//! packet, or its whole burst in one [`Qdisc::enqueue_batch`](crate::Qdisc::enqueue_batch)
//! (`xmit_bulk`); it runs the qdisc if nobody does.
//!
//! Owns: `xmit_busylock`, `xmit_busylock_batch` and the send both make. Must not: touch the defer
//! list or the NoLock state bits; runs the qdisc only through `run` (`run.rs`).

use llist_defer::Fifo;

use crate::packet::Packet;
use crate::qdisc::{BatchVerdict, Qdisc, ToFree, Verdict};

use super::driver::Driver;
use super::queue::{TxQueue, lock_counted};

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> TxQueue<P, Q, D> {
    pub(super) fn xmit_busylock(&self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        self.busylock_send(Fifo::from_iter([pkt]), to_free)
            .last
            .unwrap_or(Verdict::Success)
    }

    /// [`xmit_bulk`](TxQueue::xmit_bulk)'s BusyLock path for a burst of two or more; returns
    /// how many of the burst were dropped on arrival.
    pub(super) fn xmit_busylock_batch(&self, batch: Fifo<P>, to_free: &mut ToFree<P>) -> usize {
        let n = batch.len();
        let v = self.busylock_send(batch, to_free);
        debug_assert!(v.last.is_none() || v.queued + v.congested + v.dropped == n);
        v.dropped
    }

    /// The busylock (if someone runs), then the root lock, once for `batch`, which then
    /// bypasses the qdisc whole (an idle, bypassable qdisc that takes it: always for one
    /// packet, as the kernel's rule) or goes to the qdisc in one
    /// [`Qdisc::enqueue_batch`] (one `enqueue` for a single packet), with the verdicts of the
    /// packets one by one; then the qdisc runs if nobody runs it. A bypass returns no
    /// verdicts (`last` is `None`: success).
    fn busylock_send(&self, batch: Fifo<P>, to_free: &mut ToFree<P>) -> BatchVerdict {
        let c = &self.counters;
        let mut busy = self.is_running().then(|| {
            lock_counted(
                || self.busylock.try_lock(),
                || self.busylock.lock(),
                &c.busylock_contended,
                &c.busylock_wait_ns,
            )
        });
        let mut root = self.lock_root();
        if !root.deactivated && !self.is_running() && self.may_bypass(&root, &batch) {
            self.run_begin_locked(&root);
            drop(busy); // the runner lets go of the busylock, as the kernel does
            drop(self.run(root, batch, to_free));
            return BatchVerdict::default();
        }
        let v = self.enqueue_counted(&mut root, batch, to_free);
        if !self.is_running() && !root.deactivated {
            self.run_begin_locked(&root);
            drop(busy.take());
            drop(self.run(root, Fifo::new(), to_free));
        }
        v
    }
}

//! The [`Strategy::BusyLock`](super::Strategy::BusyLock) protocol: `__dev_xmit_skb` before
//! 2025. A producer that finds the qdisc running first takes the busylock (so that at most one
//! waiter contends with the runner for the root lock), then the root lock, and enqueues one
//! packet; it runs the qdisc if nobody does.
//!
//! Owns: `xmit_busylock`. Must not: touch the defer list or the NoLock state bits; runs the
//! qdisc only through `run` (`run.rs`).

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
}

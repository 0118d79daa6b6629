//! The engine's unwind guards: values that hold packets (or the run role) across a call into a
//! qdisc or a driver, so that a panic in either counts the packets it cost as
//! [`DropReason::Panic`](crate::DropReason::Panic) and gives back a role it held. Every path that
//! calls user code holds one; the conservation law (each packet sent, queued, or counted as a drop)
//! rests on them.
//!
//! Owns: [`RunRole`](crate::xmit::guard::RunRole), [`InHand`](crate::xmit::guard::InHand),
//! [`Dropped`](crate::xmit::guard::Dropped), [`DriverCall`](crate::xmit::guard::DriverCall). Must
//! not: take locks or touch the qdisc; the role is given back through
//! `TxQueue::release_role_after_panic` (`run.rs`).

use llist_defer::Fifo;

use crate::packet::{DropReason, Packet};
use crate::qdisc::{Qdisc, ToFree};

use super::driver::Driver;
use super::queue::TxQueue;
use super::stats::Counter;

/// Packets on their way to the driver, owned by the runner. If a driver or qdisc panics while
/// a runner holds the role, dropping this during the unwind counts the batch as
/// [`DropReason::Panic`] and, if the role is still `held`, gives it back, so the next `xmit`
/// proceeds.
pub(super) struct RunRole<'q, P: Packet, Q: Qdisc<P>, D: Driver<P>> {
    pub(super) txq: &'q TxQueue<P, Q, D>,
    pub(super) batch: Fifo<P>,
    /// Packets that skip the qdisc (a bypass), sent before anything is dequeued.
    pub(super) direct: Fifo<P>,
    /// Whether this thread still holds the role (false once it let go, e.g. before calling
    /// the waker): a panic after that must not release a role another thread may hold now.
    pub(super) held: bool,
}

impl<'q, P: Packet, Q: Qdisc<P>, D: Driver<P>> RunRole<'q, P, Q, D> {
    pub(super) fn new(txq: &'q TxQueue<P, Q, D>, batch: Fifo<P>) -> Self {
        RunRole {
            txq,
            batch,
            direct: Fifo::new(),
            held: true,
        }
    }
}

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> Drop for RunRole<'_, P, Q, D> {
    #[inline]
    fn drop(&mut self) {
        // The common end of a bypass: nothing held, no role. Nothing to do, panicking or not.
        if !self.held && self.batch.is_empty() && self.direct.is_empty() {
            return;
        }
        if !std::thread::panicking() {
            debug_assert!(
                self.batch.is_empty() && self.direct.is_empty(),
                "a runner let go of packets it held"
            );
            return;
        }
        let lost = (self.batch.len() + self.direct.len()) as u64;
        self.txq.counters.drops[DropReason::Panic.index()].add(lost);
        drop(core::mem::take(&mut self.batch));
        drop(core::mem::take(&mut self.direct));
        if self.held {
            self.txq.release_role_after_panic();
        }
    }
}

/// Packets a thread holds under the root lock on their way into the qdisc. If the qdisc
/// panics, the rest of the batch and the packet it was handed (`in_call`) count as
/// [`DropReason::Panic`]; the batch's frames go home as it drops.
pub(super) struct InHand<'q, P: Packet, Q: Qdisc<P>, D: Driver<P>> {
    pub(super) txq: &'q TxQueue<P, Q, D>,
    pub(super) batch: Fifo<P>,
    pub(super) in_call: u64,
}

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> Drop for InHand<'_, P, Q, D> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let lost = self.batch.len() as u64 + self.in_call;
            self.txq.counters.drops[DropReason::Panic.index()].add(lost);
        }
    }
}

/// A to-free list that is freed and counted by reason when it goes out of scope, also when a
/// panic unwinds through its owner (by then the callee's lock guards are released).
pub(super) struct Dropped<'q, P: Packet, Q: Qdisc<P>, D: Driver<P>> {
    pub(super) txq: &'q TxQueue<P, Q, D>,
    pub(super) list: ToFree<P>,
}

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> Drop for Dropped<'_, P, Q, D> {
    #[inline]
    fn drop(&mut self) {
        // Nearly always empty: skip moving the list (and its per-reason counts) out.
        if !self.list.is_empty() {
            self.txq.free(core::mem::take(&mut self.list));
        }
    }
}

/// The batch while the driver has it. If the driver panics, the packets it took from the
/// batch and neither left there nor put on `to_free` died in its hands: [`DropReason::Panic`]
/// (the engine cannot know whether any of them reached the wire).
pub(super) struct DriverCall<'a, P: Packet> {
    pub(super) batch: &'a mut Fifo<P>,
    pub(super) to_free: &'a mut ToFree<P>,
    pub(super) handed: usize,
    pub(super) to_free_before: usize,
    pub(super) panics: &'a Counter,
}

impl<P: Packet> Drop for DriverCall<'_, P> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let kept = self.batch.len() + (self.to_free.len() - self.to_free_before);
            self.panics.add(self.handed.saturating_sub(kept) as u64);
        }
    }
}

//! The [`Strategy::NoLock`](super::Strategy::NoLock) protocol (`TCQ_F_NOLOCK`, as pfifo_fast
//! runs in the kernel): enqueue under the qdisc's own short lock, run under a try-lock (the
//! seqlock) with the MISSED / DRAINING handshake of `qdisc_run_begin` / `qdisc_run_end` /
//! `qdisc_maybe_clear_missed`, so a packet enqueued while another thread runs is never
//! stranded. [`Strategy::NoLockNaive`](super::Strategy::NoLockNaive) skips MISSED, for the
//! loom model that shows the 2021 "packet stuck" bug.
//!
//! Owns: the NoLock state bits ([`MISSED`](crate::xmit::nolock::MISSED),
//! [`DRAINING`](crate::xmit::nolock::DRAINING), [`BUSY`](crate::xmit::nolock::BUSY)), the seqlock's
//! begin / end, `xmit_nolock` and the NoLock run loop. Outside this file only the shared exits
//! write them: `transmit` sets `BUSY` for a stopped driver, `wake` clears it, a runner unwinding
//! from a panic sets `MISSED` and frees the seqlock (`run.rs`), and `with_driver` takes the seqlock
//! (`queue.rs`). Must not: touch the defer list or `running` (the locked strategies' role).

use llist_defer::Fifo;

use crate::packet::{DropReason, Packet};
use crate::qdisc::{Qdisc, ToFree, Verdict};
use crate::sync::{Ordering, fence};

use super::config::Strategy;
use super::driver::Driver;
use super::guard::RunRole;
use super::queue::TxQueue;
use super::run::SCHED;

/// NoLock state bits (`__QDISC_STATE_MISSED`, `__QDISC_STATE_DRAINING`).
pub(super) const MISSED: u32 = 1;
pub(super) const DRAINING: u32 = 2;
/// NoLock: the driver answered busy (`TxResult::stopped`) and no [`TxQueue::wake`] came since.
/// Stands in for `is_stopped` for drivers that do not report it, so a busy driver is not
/// retried in a MISSED storm (a thread spinning on it) but waits for its wake or the next xmit.
pub(super) const BUSY: u32 = 8;

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> TxQueue<P, Q, D> {
    /// `qdisc_run_begin` for a NOLOCK qdisc: try the seqlock; on failure flag MISSED and try
    /// once more, so that either we run or the runner sees MISSED after it lets go.
    pub(super) fn nolock_run_begin(&self) -> bool {
        let try_lock = || {
            self.seqlock
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        };
        if try_lock() {
            return true;
        }
        if self.cfg.strategy == Strategy::NoLockNaive {
            return false;
        }
        if self.state.fetch_or(MISSED, Ordering::SeqCst) & MISSED != 0 {
            return false; // someone already flagged the runner
        }
        // test_and_set_bit is a full barrier in the kernel: the retry below must not be ordered
        // before our MISSED, or a runner that lets go and finds MISSED clear (its own fence in
        // run_end) and our failed retry can both miss each other and strand the packet.
        fence(Ordering::SeqCst);
        try_lock()
    }

    /// `qdisc_run_end`: let go, then (full barrier) look for MISSED; true if we must run again.
    pub(super) fn nolock_run_end(&self) -> bool {
        self.seqlock.store(false, Ordering::Release);
        if self.cfg.strategy == Strategy::NoLockNaive {
            return false;
        }
        fence(Ordering::SeqCst);
        self.state.load(Ordering::Relaxed) & MISSED != 0
    }

    pub(super) fn xmit_nolock(&self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        let flags = self.state.load(Ordering::Relaxed);
        let mut rc = Verdict::Success;
        if self.bypass_ok.load(Ordering::Relaxed)
            && flags & (MISSED | DRAINING) == 0
            && self.nolock_run_begin()
        {
            // Re-check under the run role (the requeue race).
            let mut root = self.lock_root();
            if root.deactivated {
                to_free.drop_packet(pkt, DropReason::Deactivated);
                drop(root);
                self.nolock_finish(to_free);
                return Verdict::Dropped(DropReason::Deactivated);
            }
            if self.state.load(Ordering::Relaxed) & (MISSED | DRAINING) != 0 || root.qlen() != 0 {
                // We hold the seqlock: give it back if the qdisc panics.
                let mut role = RunRole::new(self, Fifo::new());
                rc = self.enqueue_all(&mut root, Fifo::from_iter([pkt]), to_free);
                role.held = false;
                drop(role);
                drop(root);
                self.nolock_run(Fifo::new(), false, to_free);
            } else {
                drop(root);
                self.nolock_run(Fifo::from_iter([pkt]), true, to_free);
            }
            self.nolock_finish(to_free);
            return rc;
        }
        {
            let mut root = self.lock_root();
            if root.deactivated {
                to_free.drop_packet(pkt, DropReason::Deactivated);
                return Verdict::Dropped(DropReason::Deactivated);
            }
            rc = self.enqueue_all(&mut root, Fifo::from_iter([pkt]), to_free);
        }
        if self.nolock_run_begin() {
            self.nolock_run(Fifo::new(), false, to_free);
            self.nolock_finish(to_free);
        }
        rc
    }

    /// `qdisc_run_end` plus the reschedule it may ask for: while MISSED was seen after letting
    /// go, take the role again and run (or hand over to the poll loop).
    pub(super) fn nolock_finish(&self, to_free: &mut ToFree<P>) {
        while self.nolock_run_end() {
            if let Some(wake) = self.nolock_hand_over() {
                wake();
                return;
            }
            if !self.nolock_run_begin() {
                return; // the new runner saw (or set) MISSED and will do it
            }
            self.nolock_run(Fifo::new(), false, to_free);
        }
    }

    /// Flags the poll loop (SCHED) if one still runs, and returns its wake callback to call
    /// once the lock is let go. For a worker, which can stop, decided under the root lock, as
    /// the other strategies decide: the stop takes that lock after it marks the worker gone,
    /// so either this sees it gone and the caller carries on, or the stop's own run comes
    /// after the flag and finds what was left. (A runner holding no lock could read the mark
    /// before the stop wrote it and hand over after the stop's run, to a thread that is gone.)
    fn nolock_hand_over(&self) -> Option<&(dyn Fn() + Send + Sync)> {
        let _root = self.poll_loop_can_stop().then(|| self.lock_root());
        let wake = self.poll_loop()?;
        self.state.fetch_or(SCHED, Ordering::Release);
        Some(wake)
    }

    /// `__qdisc_run` for NoLock: the caller holds the seqlock.
    pub(super) fn nolock_run(&self, first: Fifo<P>, bypass: bool, to_free: &mut ToFree<P>) {
        let mut role = RunRole::new(self, first);
        let mut bypass = bypass;
        let mut quota = self.cfg.quota;
        let mut rescanned = false;
        loop {
            if role.batch.is_empty() {
                if self.driver_stopped() {
                    self.nolock_stopped();
                    return;
                }
                let mut root = self.lock_root();
                self.dequeue_batch(&mut root, &mut role.batch, self.cfg.bulk.min(quota));
                drop(root);
                if role.batch.is_empty() {
                    // pfifo_fast_dequeue: empty while MISSED/DRAINING is set → clear both,
                    // barrier, and look once more.
                    if !rescanned && self.state.load(Ordering::Relaxed) & (MISSED | DRAINING) != 0 {
                        self.state.fetch_and(!(MISSED | DRAINING), Ordering::SeqCst);
                        rescanned = true;
                        continue;
                    }
                    return;
                }
            }
            let (sent, stopped) = self.transmit(&mut role.batch, bypass, to_free);
            bypass = false;
            if !role.batch.is_empty() {
                self.counters
                    .requeues
                    .add_by_runner(role.batch.len() as u64);
                let mut root = self.lock_root();
                root.requeue.prepend(&mut role.batch);
            }
            if stopped {
                self.nolock_stopped();
                return;
            }
            quota = quota.saturating_sub(sent.max(1));
            if quota == 0 {
                self.counters.reschedules.add_by_runner(1);
                // Quota used up: flag MISSED so run_end reschedules.
                self.state.fetch_or(MISSED, Ordering::SeqCst);
                return;
            }
        }
    }

    /// `qdisc_maybe_clear_missed`: on a stopped queue, trade MISSED for DRAINING so run_end
    /// does not reschedule in a storm, unless the queue was woken meanwhile. Runner only.
    pub(super) fn nolock_stopped(&self) {
        self.state.fetch_and(!MISSED, Ordering::SeqCst);
        // SAFETY: called by the NoLock runner, which holds the seqlock.
        let stopped = unsafe { self.driver_mut(|d| d.is_stopped()) }
            // A wake clears BUSY before it tries the role, and the RMWs above and in
            // `nolock_run_begin` are totally ordered: either we see BUSY cleared here, or
            // the waker's MISSED lands after our clear and run_end sees it.
            || self.state.load(Ordering::SeqCst) & BUSY != 0;
        let bit = if stopped { DRAINING } else { MISSED };
        self.state.fetch_or(bit, Ordering::SeqCst);
    }
}

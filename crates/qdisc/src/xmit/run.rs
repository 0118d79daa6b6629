//! The run loop of the locked strategies (`__qdisc_run` / `qdisc_restart` / `dequeue_skb` /
//! `sch_direct_xmit` / `dev_requeue_skb` in `sch_generic.c`) and what every runner shares: the run
//! role (`running`: [`RUNNING`](crate::xmit::run::RUNNING),
//! [`PENDING`](crate::xmit::run::PENDING)), the enqueue of a batch under the root lock, the dequeue
//! of a batch for the driver, the driver call with its counters, and giving the role back after a
//! panic.
//!
//! Owns: `run`, `run_begin_locked`, `enqueue_all`, `dequeue_batch`, `transmit`, `driver_mut` (the
//! one place that reaches the driver) and the reschedule bit [`SCHED`](crate::xmit::run::SCHED).
//! Must not: push to or take from the defer list except through `absorb_defer_list` (`defer.rs`),
//! nor run the NoLock handshake (`nolock.rs`). Two shared exits touch the NoLock bits for every
//! runner: a driver call that reports the queue stopped sets `BUSY`, and a runner unwinding from a
//! panic gives its role back (NoLock: `MISSED` set and the seqlock freed; DeferList: the batch a
//! first pusher left to it dropped and counted, since nobody else would take it).

use llist_defer::Fifo;

use crate::packet::{DropReason, Packet};
use crate::qdisc::{BatchVerdict, Qdisc, ToFree, Verdict};
use crate::sync::Ordering;

use super::config::Strategy;
use super::driver::Driver;
use super::guard::{DriverCall, InHand, RunRole};
use super::nolock::{BUSY, MISSED};
use super::queue::{Root, TxQueue};
use super::rootlock::RootGuard;

/// A reschedule is pending for the poll loop / TxWorker (`__QDISC_STATE_SCHED`).
pub(super) const SCHED: u32 = 4;

/// `TxQueue::running`: the locked strategies' run role is held.
pub(super) const RUNNING: u32 = 1;
/// `TxQueue::running`: a first pusher saw the role held and left its batch to the runner.
pub(super) const PENDING: u32 = 2;

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> TxQueue<P, Q, D> {
    /// `__qdisc_run` for the locked strategies. The caller holds the root lock and has set
    /// `running`; `direct` is a bypass batch (older than anything queued) to send before
    /// dequeuing anything. Returns with the role given back and the lock held.
    pub(super) fn run<'a>(
        &'a self,
        mut root: RootGuard<'a, Root<P, Q>>,
        direct: Fifo<P>,
        to_free: &mut ToFree<P>,
    ) -> RootGuard<'a, Root<P, Q>> {
        let mut role = RunRole::new(self, Fifo::new());
        role.direct = direct;
        let mut bypass = false;
        let mut quota = self.cfg.quota;
        // DeferList (with `runner_absorbs`): the runner keeps the root lock while it sends and
        // takes the defer list itself between batches, so nobody fights it for the lock per
        // batch, and a first pusher that finds it at work leaves it the batch (PENDING).
        let hold_root = self.cfg.strategy == Strategy::DeferList && self.cfg.runner_absorbs;
        loop {
            loop {
                if role.batch.is_empty() {
                    // dequeue_skb: nothing leaves the qdisc for a stopped queue. A bypass batch
                    // goes to the driver, which finds it stopped and hands it back (requeued),
                    // as `sch_direct_xmit` does for a bypass packet.
                    if role.direct.is_empty() {
                        if self.driver_stopped() {
                            break;
                        }
                        if hold_root {
                            role.direct = self.absorb_defer_list(&mut root, to_free);
                        }
                    }
                    let max = self.cfg.bulk.min(quota);
                    bypass = !role.direct.is_empty();
                    if bypass {
                        while role.batch.len() < max {
                            let Some(p) = role.direct.pop_front() else {
                                break;
                            };
                            role.batch.push_back(p);
                        }
                    } else {
                        self.dequeue_batch(&mut root, &mut role.batch, max);
                    }
                }
                if role.batch.is_empty() {
                    break;
                }
                let (sent, stopped) = if hold_root {
                    self.transmit(&mut role.batch, bypass, to_free)
                } else {
                    drop(root);
                    let r = self.transmit(&mut role.batch, bypass, to_free);
                    root = self.lock_root();
                    r
                };
                if !role.batch.is_empty() {
                    self.counters
                        .requeues
                        .add_by_runner(role.batch.len() as u64);
                    // Handed back: first in line again, ahead of the rest of its own bypass
                    // batch if it came from one.
                    let line = if bypass {
                        &mut role.direct
                    } else {
                        &mut root.requeue
                    };
                    line.prepend(&mut role.batch);
                }
                if stopped {
                    break;
                }
                quota = quota.saturating_sub(sent.max(1));
                if quota == 0 {
                    if root.qlen() == 0 && role.direct.is_empty() {
                        break;
                    }
                    self.counters.reschedules.add_by_runner(1);
                    // Decided under the root lock: a worker's shutdown runs the queue after
                    // taking it, so a hand-over it raced with is still found.
                    if let Some(wake) = self.poll_loop() {
                        // The poll loop we wake sends the rest of a bypass batch first.
                        root.requeue.append(&mut role.direct);
                        self.state.fetch_or(SCHED, Ordering::Release);
                        // PENDING goes too: the poll loop we wake drains the defer list.
                        self.running.swap(0, Ordering::AcqRel);
                        role.held = false;
                        drop(root);
                        wake();
                        return self.lock_root();
                    }
                    // No poll loop to hand over to: carry on, nothing else would.
                    quota = self.cfg.quota;
                }
            }
            // Stopped driver: the rest of a bypass batch waits first in line (the requeue list
            // is empty while one is in hand: it was only taken into an empty queue).
            debug_assert!(role.direct.is_empty() || root.requeue.is_empty());
            root.requeue.append(&mut role.direct);
            // Let go of the role, unless a first pusher left us its batch meanwhile (PENDING):
            // then take the list and go round again. Same-word RMWs order us against it.
            if self
                .running
                .compare_exchange(RUNNING, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return root;
            }
            self.running.fetch_and(!PENDING, Ordering::AcqRel);
            role.direct = self.absorb_defer_list(&mut root, to_free);
            quota = self.cfg.quota;
        }
    }

    /// `qdisc_run_begin` for a locked qdisc: the caller holds the root lock and saw the role
    /// free.
    #[inline]
    pub(super) fn run_begin_locked(&self, _root: &RootGuard<'_, Root<P, Q>>) {
        // A stale PENDING (its pusher saw no runner and drains by itself) is dropped here.
        // Every write of `running` is an RMW, so all of them fall in one total order with the
        // pushers' `fetch_or(PENDING)` (loom showed a plain store is not enough).
        let prev = self.running.swap(RUNNING, Ordering::AcqRel);
        debug_assert!(prev & RUNNING == 0, "two runners");
    }

    #[inline]
    pub(super) fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed) & RUNNING != 0
    }

    /// Enqueues `batch` in order (dropping it if deactivated); returns the last verdict (see
    /// [`enqueue_counted`](Self::enqueue_counted)).
    #[inline]
    pub(super) fn enqueue_all(
        &self,
        root: &mut Root<P, Q>,
        batch: Fifo<P>,
        to_free: &mut ToFree<P>,
    ) -> Verdict {
        self.enqueue_counted(root, batch, to_free)
            .last
            .unwrap_or(Verdict::Success)
    }

    /// Enqueues `batch` in order (dropping it if deactivated) and counts the verdicts. With
    /// `qdisc_batch` on, a batch of several goes to [`Qdisc::enqueue_batch`] whole (exact
    /// per-packet semantics); otherwise, and for a single packet, one `enqueue` each. A
    /// panicking qdisc costs the packets in hand, counted (see [`InHand`]): those still in the
    /// batch and the one in the qdisc's hands (`enqueue_batch`'s promise).
    pub(super) fn enqueue_counted(
        &self,
        root: &mut Root<P, Q>,
        batch: Fifo<P>,
        to_free: &mut ToFree<P>,
    ) -> BatchVerdict {
        let mut hand = InHand {
            txq: self,
            batch,
            in_call: 0,
        };
        let mut v = BatchVerdict::default();
        if root.deactivated {
            while let Some(p) = hand.batch.pop_front() {
                to_free.drop_packet(p, DropReason::Deactivated);
                v.record(Verdict::Dropped(DropReason::Deactivated));
            }
            return v;
        }
        hand.in_call = 1;
        let n = hand.batch.len() as u64;
        if self.cfg.qdisc_batch && n > 1 {
            self.counters.enqueue_calls.add_by_runner(1);
            v = root.qdisc.enqueue_batch(&mut hand.batch, to_free);
        } else {
            self.counters.enqueue_calls.add_by_runner(n);
            while let Some(p) = hand.batch.pop_front() {
                v.record(root.qdisc.enqueue(p, to_free));
            }
        }
        self.counters.enqueued.add_by_runner(n);
        hand.in_call = 0;
        v
    }

    /// `dequeue_skb`: requeued packets first, then the qdisc, at most `max` in `batch`; with
    /// `qdisc_batch` on, the qdisc's share through
    /// [`dequeue_qdisc_batch`](Self::dequeue_qdisc_batch).
    #[inline]
    pub(super) fn dequeue_batch(&self, root: &mut Root<P, Q>, batch: &mut Fifo<P>, max: usize) {
        while batch.len() < max {
            let Some(p) = root.requeue.pop_front() else {
                break;
            };
            batch.push_back(p);
        }
        if batch.len() >= max {
            return;
        }
        if self.cfg.qdisc_batch {
            self.dequeue_qdisc_batch(root, batch, max);
            return;
        }
        let queued = root.qdisc.len();
        self.counting_dequeue_losses(root, queued, batch, |q, batch| {
            while batch.len() < max {
                let Some(p) = q.dequeue() else { break };
                batch.push_back(p);
            }
        });
    }

    /// Runs `dequeue`, which moves packets from the qdisc (holding `queued`, its `len()` as
    /// the caller read it) to the end of `batch`. If it panics (a packet's method in the
    /// qdisc's hands), the packets that left the qdisc without
    /// reaching `batch` (the qdiscs here lose at most the one being handled, and keep their
    /// length true) count as [`DropReason::Panic`] before the unwind goes on; those in `batch`
    /// are counted by the run's [`RunRole`].
    #[inline(always)]
    fn counting_dequeue_losses(
        &self,
        root: &mut Root<P, Q>,
        queued: usize,
        batch: &mut Fifo<P>,
        dequeue: impl FnOnce(&mut Q, &mut Fifo<P>),
    ) {
        let held = batch.len();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            dequeue(&mut root.qdisc, batch)
        }));
        if let Err(panic) = run {
            let left = queued.saturating_sub(root.qdisc.len());
            let lost = left.saturating_sub(batch.len().saturating_sub(held));
            self.counters.drops[DropReason::Panic.index()].add(lost as u64);
            std::panic::resume_unwind(panic);
        }
    }

    /// The qdisc's share of a batch for the driver, `batch` holding less than `max`: one
    /// [`Qdisc::dequeue_batch`] call (the kernel's bulk dequeue for `xmit_more`), one `dequeue`
    /// for a lone packet, none for an empty qdisc. With one producer every drain brings one
    /// packet, the run sends it, and the next dequeue finds the qdisc empty: one length read
    /// answers that call, and a single packet takes one `dequeue`, since a discipline's batch
    /// set-up (fq's prefetch pipeline) has nothing to hide there. `dequeue_batch` promises the
    /// packets `dequeue` would give, and an empty qdisc gives none, so every way agrees. Kept
    /// out of line so that the per-packet runner's loop stays as small as it was.
    #[inline(never)]
    fn dequeue_qdisc_batch(&self, root: &mut Root<P, Q>, batch: &mut Fifo<P>, max: usize) {
        match root.qdisc.len() {
            0 => {}
            1 => self.counting_dequeue_losses(root, 1, batch, |q, batch| {
                batch.extend(q.dequeue());
            }),
            queued => {
                let n = queued.min(max - batch.len());
                self.counting_dequeue_losses(root, queued, batch, |q, batch| {
                    q.dequeue_batch(batch, n);
                });
            }
        }
    }

    /// `sch_direct_xmit` without the root lock: hands `batch` to the driver, counts what it
    /// took. Returns (sent, stopped).
    pub(super) fn transmit(
        &self,
        batch: &mut Fifo<P>,
        bypass: bool,
        to_free: &mut ToFree<P>,
    ) -> (usize, bool) {
        let bytes: u64 = batch.iter().map(|p| p.len() as u64).sum();
        self.transmit_sized(batch, bytes, bypass, to_free)
    }

    /// [`transmit`](Self::transmit) of a batch whose bytes the caller summed already.
    #[inline]
    pub(super) fn transmit_sized(
        &self,
        batch: &mut Fifo<P>,
        bytes_before: u64,
        bypass: bool,
        to_free: &mut ToFree<P>,
    ) -> (usize, bool) {
        let to_free_len_before = to_free.len();
        let call = DriverCall {
            handed: batch.len(),
            to_free_before: to_free_len_before,
            batch: &mut *batch,
            to_free: &mut *to_free,
            panics: &self.counters.drops[DropReason::Panic.index()],
        };
        // SAFETY: only runners call `transmit`, holding the run role, and the DeferList bypass,
        // holding the root lock with the role free (`driver_mut`'s contract).
        let res = unsafe {
            self.driver_mut(|d| (!d.is_stopped()).then(|| d.xmit(call.batch, call.to_free)))
        };
        if res.is_some() {
            self.counters.driver_calls.add_by_runner(1);
        }
        drop(call);
        let Some(res) = res else {
            self.counters.driver_stops.add_by_runner(1);
            return (0, true);
        };
        // Packets the driver refused for good went to `to_free`: counted there, not as sent.
        let bytes_left: u64 = batch.iter().map(|p| p.len() as u64).sum();
        let dropped_bytes: u64 = to_free_bytes(to_free, to_free_len_before);
        let sent_bytes = (bytes_before - bytes_left).saturating_sub(dropped_bytes);
        self.counters.sent.add_by_runner(res.sent as u64);
        self.counters.sent_bytes.add_by_runner(sent_bytes);
        if bypass {
            // `__dev_xmit_skb`'s bypass branch: `qdisc_bstats_update` counts the packet's
            // bytes as well as the packet in the qdisc's basic stats.
            self.counters.bypass.add_by_runner(res.sent as u64);
            self.counters.bypass_bytes.add_by_runner(sent_bytes);
        }
        if res.stopped {
            self.counters.driver_stops.add_by_runner(1);
            if matches!(self.cfg.strategy, Strategy::NoLock | Strategy::NoLockNaive) {
                self.state.fetch_or(BUSY, Ordering::SeqCst);
            }
        }
        (res.sent, res.stopped)
    }

    /// Runs `f` on the driver.
    ///
    /// # Safety
    ///
    /// The caller holds the run role (`running` set by itself under the root lock, or the
    /// NoLock seqlock), or holds the root lock having seen the role free (the DeferList
    /// bypass, see [`TxQueue::bypass_locked`]). Either is exclusive, so no other reference to
    /// the driver exists.
    #[inline]
    pub(super) unsafe fn driver_mut<R>(&self, f: impl FnOnce(&mut D) -> R) -> R {
        #[cfg(lockless_loom)]
        assert!(
            self.seqlock.load(Ordering::Relaxed)
                || self.is_running()
                || self.bypassing.load(Ordering::Relaxed),
            "driver touched without the run role: running={} strategy={:?}",
            self.running.load(Ordering::Relaxed),
            self.cfg.strategy
        );
        // SAFETY: per the contract, the run role makes this the only access to the driver.
        self.driver.with_mut(|d| f(unsafe { &mut *d }))
    }

    /// Whether the driver's queue is stopped (`netif_xmit_frozen_or_stopped`), counted.
    /// Runner only.
    pub(super) fn driver_stopped(&self) -> bool {
        // SAFETY: called from the run loops, whose caller holds the run role.
        let stopped = unsafe { self.driver_mut(|d| d.is_stopped()) };
        if stopped {
            self.counters.driver_stops.add_by_runner(1);
        }
        stopped
    }

    /// Gives back the run role after a panic unwound through a runner.
    pub(super) fn release_role_after_panic(&self) {
        match self.cfg.strategy {
            Strategy::NoLock | Strategy::NoLockNaive => {
                self.state.fetch_or(MISSED, Ordering::SeqCst);
                self.seqlock.store(false, Ordering::Release);
            }
            Strategy::BusyLock | Strategy::DeferList => {
                // The unwinding runner may still hold the root lock in a guard dropped after
                // this one, so no lock here: the next caller that takes the lock sees the role
                // free and runs whatever is queued.
                let prev = self.running.swap(0, Ordering::AcqRel);
                if prev & PENDING != 0 {
                    // A first pusher left its batch to us and returned; nobody else will take
                    // the defer list (later pushers see it non-empty), so it dies with us.
                    // Later first pushers see the role free and drain by themselves.
                    let lost = self.defer.take_all();
                    self.counters.drops[DropReason::Panic.index()].add(lost.len() as u64);
                    drop(lost);
                    self.notify_room();
                }
            }
        }
    }
}

/// Bytes of the packets added to `to_free` since it held `before` packets.
fn to_free_bytes<P: Packet>(to_free: &ToFree<P>, before: usize) -> u64 {
    if to_free.len() == before {
        return 0;
    }
    to_free.iter().skip(before).map(|p| p.len() as u64).sum()
}

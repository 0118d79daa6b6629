//! The [`Strategy::DeferList`](super::Strategy::DeferList) protocol (Linux 6.19's llist
//! adoption in `__dev_xmit_skb`, commit 100dfa74cad9): a producer pushes with one CAS under
//! the counted burst limit; the first pusher takes the root lock, takes the whole list,
//! reverses it to FIFO, and bypasses or enqueues and runs. Beside the kernel's protocol: the
//! bypass before the push, the runner absorbing the list between batches (`PENDING`), helping
//! drains past a burst threshold, a long burst sent by its own producer, and the
//! `Overflow::Wait` parking.
//!
//! Owns: `xmit_defer`, `xmit_defer_batch`, `drain`, `self_send` (a large burst sent by its
//! own producer), `absorb_defer_list`, the bypass of a drained batch, the overflow wait.
//! Must not: dequeue or call the driver except through `run` / `transmit` (`run.rs`), nor
//! touch the NoLock state bits.

use llist_defer::{Fifo, Pushed};

use crate::packet::{DropReason, Packet};
use crate::qdisc::{Qdisc, ToFree, Verdict};
use crate::sync::{Ordering, fence};

use super::config::Overflow;
use super::driver::Driver;
use super::guard::RunRole;
use super::queue::{Root, TxQueue};
use super::rootlock::RootGuard;
use super::run::{PENDING, RUNNING};

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> TxQueue<P, Q, D> {
    pub(super) fn xmit_defer(&self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        // The bypass before the push: only worth a CAS on the root lock when nobody is running
        // (a runner holds it anyway, and every failed try would steal its line).
        if self.cfg.early_bypass && self.defer.is_empty() && !self.is_running() {
            if let Some(root) = self.root.try_lock() {
                if root.can_bypass() && !self.is_running() {
                    let bytes = pkt.len() as u64;
                    self.bypass_locked(root, Fifo::from_iter([pkt]), bytes, to_free);
                    return Verdict::Success;
                }
            }
        }
        let mut pkt = pkt;
        loop {
            match self.defer.push(pkt) {
                Ok(Pushed::First) => {
                    // A runner takes the defer list between batches and checks PENDING before
                    // it lets go, so a first pusher that finds one at work leaves it the batch
                    // instead of queueing on the root lock (the RMW orders us against its exit).
                    if self.cfg.runner_absorbs
                        && self.running.fetch_or(PENDING, Ordering::AcqRel) & RUNNING != 0
                    {
                        return Verdict::Success;
                    }
                    let root = self.lock_root();
                    return self.drain(root, to_free);
                }
                Ok(Pushed::Queued { burst }) => {
                    if burst >= self.help_at {
                        if let Some(root) = self.root.try_lock() {
                            self.counters.helped_drains.add(1);
                            self.drain(root, to_free);
                        }
                    }
                    return Verdict::Success;
                }
                Err(rejected) => match self.cfg.overflow {
                    Overflow::Drop => {
                        to_free.drop_packet(rejected.into_inner(), DropReason::QdiscBurst);
                        return Verdict::Dropped(DropReason::QdiscBurst);
                    }
                    Overflow::Wait => {
                        pkt = rejected.into_inner();
                        self.wait_for_room(to_free);
                    }
                },
            }
        }
    }

    /// [`xmit_bulk`](Self::xmit_bulk)'s DeferList path for a batch of two or more; returns how
    /// many of it were dropped here and now.
    pub(super) fn xmit_defer_batch(
        &self,
        batch: Fifo<P>,
        bytes: u64,
        to_free: &mut ToFree<P>,
    ) -> usize {
        let n = batch.len();
        // The bypass before the push, for the whole batch (see `xmit_defer`).
        if self.cfg.early_bypass && self.defer.is_empty() && !self.is_running() {
            if let Some(root) = self.root.try_lock() {
                if !self.is_running() && self.may_bypass_sized(&root, n, || bytes) {
                    self.bypass_batch_locked(root, batch, bytes, to_free);
                    return 0;
                }
            }
        }
        if n >= self.cfg.self_send_burst {
            return self.self_send(batch, bytes, to_free);
        }
        match self.defer.push_batch(batch) {
            Ok(Pushed::First) => {
                if self.cfg.runner_absorbs
                    && self.running.fetch_or(PENDING, Ordering::AcqRel) & RUNNING != 0
                {
                    return 0;
                }
                let root = self.lock_root();
                match self.drain(root, to_free) {
                    // The drain found the queue deactivated: our batch went with the rest.
                    Verdict::Dropped(DropReason::Deactivated) => n,
                    _ => 0,
                }
            }
            Ok(Pushed::Queued { burst }) => {
                if burst >= self.help_at {
                    if let Some(root) = self.root.try_lock() {
                        self.counters.helped_drains.add(1);
                        self.drain(root, to_free);
                    }
                }
                0
            }
            Err(rejected) => {
                let mut batch = rejected.into_inner();
                match self.cfg.overflow {
                    Overflow::Drop => {
                        while let Some(p) = batch.pop_front() {
                            to_free.drop_packet(p, DropReason::QdiscBurst);
                        }
                        n
                    }
                    // One by one, each waiting for room as `xmit` does; order is kept.
                    Overflow::Wait => {
                        let mut d = 0;
                        while let Some(p) = batch.pop_front() {
                            let v = self.xmit_defer(p, to_free);
                            d += usize::from(matches!(v, Verdict::Dropped(_)));
                        }
                        d
                    }
                }
            }
        }
    }

    /// Sends `batch` straight to the driver: the caller holds the root lock and saw the qdisc
    /// empty and bypassable (for the whole batch) and the run role free. The role is not taken: nobody can take it
    /// without the root lock, which we hold for the whole send, so the uncontended path costs
    /// one lock and one unlock, as a plain mutex does. A first pusher arriving meanwhile sees
    /// the role free and queues on the root lock, then drains after us. Packets the driver
    /// hands back are requeued and, unless the driver is stopped, sent by a normal run.
    #[inline(always)]
    pub(super) fn bypass_locked<'a>(
        &'a self,
        mut root: RootGuard<'a, Root<P, Q>>,
        batch: Fifo<P>,
        bytes: u64,
        to_free: &mut ToFree<P>,
    ) {
        // If the driver panics, the packets count as panic drops; there is no role to give
        // back, and the root guard (dropped after this one) unlocks.
        let mut role = RunRole::new(self, batch);
        role.held = false;
        #[cfg(lockless_loom)]
        self.bypassing.store(true, Ordering::Relaxed);
        let (_, stopped) = self.transmit_sized(&mut role.batch, bytes, true, to_free);
        #[cfg(lockless_loom)]
        self.bypassing.store(false, Ordering::Relaxed);
        if role.batch.is_empty() {
            // The common end: the role holds no packet and no role (`held` is false), so its
            // drop would do nothing; skip the call to its drop glue on this per-packet path.
            debug_assert!(role.direct.is_empty());
            core::mem::forget(role);
            return;
        }
        self.counters
            .requeues
            .add_by_runner(role.batch.len() as u64);
        root.requeue.prepend(&mut role.batch);
        if !stopped {
            self.run_begin_locked(&root);
            drop(self.run(root, Fifo::new(), to_free));
        }
    }

    /// [`bypass_locked`](Self::bypass_locked) for a burst, which may be longer than one driver
    /// call carries: then the run loop sends it in `bulk`-sized calls within the quota, as it
    /// sends a drained bypass batch. (Kept apart so that the one-packet bypass stays small.)
    #[inline]
    fn bypass_batch_locked<'a>(
        &'a self,
        root: RootGuard<'a, Root<P, Q>>,
        batch: Fifo<P>,
        bytes: u64,
        to_free: &mut ToFree<P>,
    ) {
        if batch.len() > self.cfg.bulk.min(self.cfg.quota) {
            self.run_begin_locked(&root);
            drop(self.run(root, batch, to_free));
        } else {
            self.bypass_locked(root, batch, bytes, to_free);
        }
    }

    /// `Overflow::Wait`: help if the root lock is free, else park until a drain resets the count.
    pub(super) fn wait_for_room(&self, to_free: &mut ToFree<P>) {
        if let Some(root) = self.root.try_lock() {
            self.counters.helped_drains.add(1);
            self.drain(root, to_free);
            return;
        }
        self.waiters.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `drain`: either we see the reset count, or the drainer sees
        // us waiting and notifies under `room`.
        fence(Ordering::SeqCst);
        let mut g = self.room.lock();
        // A push is refused while the count stands at the limit (it would pass it): the count
        // never exceeds the limit (a refused push leaves no trace), so `>` here was never true
        // and a refused producer spun on the push instead of parking.
        while self.defer.burst() >= self.defer.limit() {
            self.counters.overflow_waits.add(1);
            g = self.room_cv.wait(g);
        }
        drop(g);
        self.waiters.fetch_sub(1, Ordering::Relaxed);
    }

    /// The first pusher's work, under the root lock: take the whole defer list, reverse it to
    /// FIFO, then bypass or enqueue and run.
    pub(super) fn drain<'a>(
        &'a self,
        root: RootGuard<'a, Root<P, Q>>,
        to_free: &mut ToFree<P>,
    ) -> Verdict {
        let batch = self.defer.take_all().reverse();
        self.notify_room();
        self.drain_batch(root, batch, to_free)
    }

    /// A burst sent by its own producer ([`TxQueueBuilder::self_send_burst`]): wait for the
    /// root lock as a mutex user would, take whatever other producers left on the defer list
    /// (older, so first), put `own` behind it, and bypass or enqueue and run as a drainer
    /// does. The producer's packets go to the driver from its own cache, and their frames
    /// are freed on its own thread, instead of crossing to another core's runner. Our earlier
    /// packets are on the defer list or in the qdisc, both ahead of `own`: order is kept.
    /// Returns how many of `own` were dropped here and now (all, if deactivated).
    ///
    /// [`TxQueueBuilder::self_send_burst`]: super::TxQueueBuilder::self_send_burst
    pub(super) fn self_send(&self, mut own: Fifo<P>, bytes: u64, to_free: &mut ToFree<P>) -> usize {
        let n = own.len();
        let root = self.lock_root();
        // The common case, nothing else waiting: what the early bypass does, after the wait.
        if self.defer.is_empty() && !self.is_running() && self.may_bypass_sized(&root, n, || bytes)
        {
            self.bypass_batch_locked(root, own, bytes, to_free);
            return 0;
        }
        let mut batch = if self.defer.is_empty() {
            Fifo::new()
        } else {
            let older = self.defer.take_all().reverse();
            self.notify_room();
            older
        };
        batch.append(&mut own);
        match self.drain_batch(root, batch, to_free) {
            Verdict::Dropped(DropReason::Deactivated) => n,
            _ => 0,
        }
    }

    /// [`drain`](Self::drain) after the take: `batch` is in arrival order.
    #[inline]
    fn drain_batch<'a>(
        &'a self,
        mut root: RootGuard<'a, Root<P, Q>>,
        mut batch: Fifo<P>,
        to_free: &mut ToFree<P>,
    ) -> Verdict {
        if batch.is_empty() {
            // A helper drained it already; still make sure the qdisc runs.
            if !self.is_running() && root.qlen() != 0 && !root.deactivated {
                self.run_begin_locked(&root);
                drop(self.run(root, Fifo::new(), to_free));
            }
            return Verdict::Success;
        }
        if root.deactivated {
            while let Some(p) = batch.pop_front() {
                to_free.drop_packet(p, DropReason::Deactivated);
            }
            return Verdict::Dropped(DropReason::Deactivated);
        }
        if !self.is_running() && self.may_bypass(&root, &batch) {
            self.run_begin_locked(&root);
            drop(self.run(root, batch, to_free));
            return Verdict::Success;
        }
        let single = batch.len() == 1;
        let rc = self.enqueue_all(&mut root, batch, to_free);
        if !self.is_running() {
            self.run_begin_locked(&root);
            drop(self.run(root, Fifo::new(), to_free));
        }
        if single { rc } else { Verdict::Success }
    }

    /// Takes the defer list whole (the drainer's work, done by a runner holding the root lock)
    /// and enqueues it in arrival order, or returns it if it may skip the empty qdisc.
    pub(super) fn absorb_defer_list(
        &self,
        root: &mut Root<P, Q>,
        to_free: &mut ToFree<P>,
    ) -> Fifo<P> {
        if self.defer.is_empty() {
            return Fifo::new();
        }
        let batch = self.defer.take_all().reverse();
        self.notify_room();
        if self.may_bypass(root, &batch) {
            return batch;
        }
        self.enqueue_all(root, batch, to_free);
        Fifo::new()
    }

    /// Whether a drained batch may skip the qdisc: only if it is empty and bypassable (and the
    /// queue active); then a batch of one always (the kernel's rule), a longer one if batch
    /// bypass is on and the qdisc agrees.
    pub(super) fn may_bypass(&self, root: &Root<P, Q>, batch: &Fifo<P>) -> bool {
        self.may_bypass_sized(root, batch.len(), || {
            batch.iter().map(|p| p.len() as u64).sum()
        })
    }

    /// [`may_bypass`](Self::may_bypass) for a batch of `n` packets whose byte count `bytes`
    /// gives (asked only if the qdisc's answer depends on it).
    #[inline]
    pub(super) fn may_bypass_sized(
        &self,
        root: &Root<P, Q>,
        n: usize,
        bytes: impl FnOnce() -> u64,
    ) -> bool {
        if !root.can_bypass() {
            return false;
        }
        match n {
            0 => false,
            1 => true,
            n => self.cfg.batch_bypass && root.qdisc.can_bypass_batch(n, bytes()),
        }
    }

    /// Wakes producers parked by `Overflow::Wait` after a drain reset the burst count.
    pub(super) fn notify_room(&self) {
        // Pairs with the fence in `wait_for_room`: either the waiter sees the reset count, or
        // we see it waiting and notify under `room`.
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::Relaxed) != 0 {
            let _g = self.room.lock();
            self.room_cv.notify_all();
        }
    }
}

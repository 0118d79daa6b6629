//! [`TxQueue`]: the user-space `__dev_xmit_skb` (Linux 6.19 `net/core/dev.c`) with the qdisc run
//! loop of `sch_generic.c` (`qdisc_run_begin` / `__qdisc_run` / `sch_direct_xmit` /
//! `dev_requeue_skb` / `qdisc_run_end`): the struct, its builder's `build`, and the public API
//! in one place (xmit, xmit_bulk with its [`BulkVerdict`], poll / wake, deactivate / activate,
//! replace / change the qdisc, the driver, statistics).
//!
//! Owns: the queue's fields and what the root lock guards ([`Root`](crate::xmit::queue::Root)), the
//! dispatch of a packet to its strategy, and the control calls. Must not: carry a strategy's
//! protocol (`defer.rs`, `busylock.rs`, `nolock.rs`), the run loop (`run.rs`) or the unwind guards
//! (`guard.rs`). The control calls take the root lock and call into those, with three exceptions
//! that are the kernel's own: `wake` clears the driver's `BUSY` bit (`netif_tx_wake_queue`),
//! `deactivate` takes the defer list whole under the root lock to drop it, and `with_driver` takes
//! the NoLock run role (the seqlock) as a runner would.
//!
//! Who may do what:
//! - the **root lock** guards the qdisc, the requeue list (`gso_skb`), `running` and
//!   `deactivated`; a mutex that lends itself to a thread taking it alone, again and again
//!   (`rootlock.rs`, [`TxQueueBuilder::biased_root`]), which is the same exclusion at no locked
//!   instruction;
//! - the **run role** (`running` for the locked strategies, the seqlock for NoLock) is held by at
//!   most one thread, the runner, which alone dequeues for and calls the driver;
//! - the **defer list** takes pushes from anyone; only a thread holding the root lock drains
//!   it, but for a runner unwinding from a panic, which drops (and counts) what a first pusher
//!   left to it (`release_role_after_panic`);
//! - packets dropped anywhere are freed after every lock is released, counted by reason.
//!
//! Replacing the qdisc ([`TxQueue::replace_qdisc`], `tc qdisc replace`) needs no deferred
//! reclamation. The kernel reads `txq->qdisc` on its fast path without the root lock, under
//! RCU, so a replaced qdisc must outlive those readers. Here the qdisc is a value inside the
//! root lock, not a shared pointer: every path that touches it (enqueue, dequeue, the bypass
//! test, `with_qdisc`, `qdisc_stats`, `backlog`) holds the lock, and the one fact the lock-free
//! paths need (may NoLock bypass?) is mirrored in an atomic, `bypass_ok`, rewritten under the
//! lock at every replace or change. A replacement swaps the value under the lock, so no reader
//! can hold the old one, and an epoch scheme (crossbeam-epoch) would have nothing to protect.
//! The soak test replaces and deactivates qdiscs at random under 16 producers.

use core::fmt;
use core::marker::PhantomData;

use crossbeam_utils::CachePadded;
use llist_defer::{DeferList, Fifo};

use crate::config::ConfigError;
use crate::packet::{DropReason, Packet};
use crate::qdisc::{Qdisc, QdiscStats, ToFree, Verdict};
use crate::sync::{AtomicBool, AtomicU32, AtomicUsize, Condvar, Mutex, Ordering, UnsafeCell};

use super::config::{Strategy, TxQueueBuilder};
use super::driver::Driver;
use super::guard::{Dropped, RunRole};
use super::nolock::BUSY;
use super::rootlock::{RootGuard, RootLock};
use super::run::SCHED;
use super::stats::{Counter, Stamp, XmitCounters, XmitStats};

/// What the root lock guards.
///
/// Padded on both sides (`repr(C)`, so the pads stay first and last): the root lock keeps its
/// lock words just before or just after this value, and producers that only try the lock (or
/// spin on it) must not pull the runner's qdisc head into their cache on every attempt (false
/// sharing that perf showed as misses in the runner's dequeue).
#[repr(C)]
pub(super) struct Root<P: Packet, Q> {
    pub(super) _front: CachePadded<()>,
    pub(super) qdisc: Q,
    /// Packets the driver handed back, sent before anything else (`q->gso_skb`).
    pub(super) requeue: Fifo<P>,
    /// Everything arriving is dropped (`__QDISC_STATE_DEACTIVATED`).
    pub(super) deactivated: bool,
    pub(super) _back: CachePadded<()>,
}

impl<P: Packet, Q: Qdisc<P>> Root<P, Q> {
    pub(super) fn qlen(&self) -> usize {
        self.qdisc.len() + self.requeue.len()
    }

    /// The kernel's bypass test minus `run_begin`, which the caller does.
    pub(super) fn can_bypass(&self) -> bool {
        !self.deactivated && self.qdisc.can_bypass() && self.qlen() == 0
    }
}

/// What [`TxQueue::xmit_bulk`] did with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BulkVerdict {
    /// Packets handed on: to the defer list, the qdisc or the driver (a later stage may still
    /// drop one; it is then counted in the queue's stats, as for [`Verdict::Success`]).
    pub handed_on: usize,
    /// Packets dropped here and now (burst limit, deactivated queue, or the qdisc's verdict
    /// where the caller enqueues them itself: BusyLock and NoLock), each counted with its
    /// reason.
    pub dropped: usize,
}

/// The poll loop a runner hands leftover work to (`__netif_schedule`): the wake callback, and
/// for a [`TxWorker`](crate::TxWorker) whether its thread still runs (once it stopped, runners
/// carry on themselves: a handed-over batch would wait for a thread that is gone).
pub(super) struct PollLoop {
    wake: Box<dyn Fn() + Send + Sync>,
    alive: Option<std::sync::Arc<AtomicBool>>,
}

impl PollLoop {
    fn new(
        wake: impl Fn() + Send + Sync + 'static,
        alive: Option<std::sync::Arc<AtomicBool>>,
    ) -> PollLoop {
        PollLoop {
            wake: Box::new(wake),
            alive,
        }
    }
}

/// One transmit queue: producers call [`xmit`](TxQueue::xmit) from any number of threads; a
/// qdisc orders the packets; one runner at a time hands them to the [`Driver`].
///
/// See the crate docs for the three [`Strategy`]s. The queue never loses a packet: each one is
/// sent, still queued, or counted in [`XmitStats::drops`] with its reason.
pub struct TxQueue<P: Packet, Q: Qdisc<P>, D: Driver<P>> {
    pub(super) defer: CachePadded<DeferList<P>>,
    pub(super) root: CachePadded<RootLock<Root<P, Q>>>,
    pub(super) busylock: CachePadded<Mutex<()>>,
    /// Touched only by the holder of the run role (see `TxQueue::driver_mut`).
    pub(super) driver: CachePadded<UnsafeCell<D>>,
    /// NoLock run role (`q->seqlock`).
    pub(super) seqlock: CachePadded<AtomicBool>,
    /// MISSED / DRAINING / SCHED bits.
    pub(super) state: CachePadded<AtomicU32>,
    /// The run role of the locked strategies (`q->running`, bit
    /// [`RUNNING`](crate::xmit::run::RUNNING)) and, for DeferList,
    /// [`PENDING`](crate::xmit::run::PENDING): "a first pusher left its batch to the runner". Taken
    /// only under the root lock; see [`TxQueue::run`] for the hand-off.
    pub(super) running: CachePadded<AtomicU32>,
    /// Under loom only: a bypass holds the driver (checked by `driver_mut`).
    #[cfg(lockless_loom)]
    pub(super) bypassing: AtomicBool,
    /// Whether the qdisc may be bypassed (read without the lock by NoLock).
    pub(super) bypass_ok: AtomicBool,
    pub(super) room: Mutex<()>,
    pub(super) room_cv: Condvar,
    pub(super) waiters: CachePadded<AtomicUsize>,
    pub(super) waker: Option<PollLoop>,
    pub(super) cfg: TxQueueBuilder,
    pub(super) help_at: usize,
    /// Each hot word above sits on its own cache line, away from the read-mostly settings:
    /// producers read `cfg` on every call, so a counter beside it would be false sharing.
    pub(super) counters: CachePadded<XmitCounters>,
    pub(super) _packets: PhantomData<fn(P)>,
}

impl TxQueue<crate::TestPacket, crate::Pfifo<crate::TestPacket>, super::NullDriver> {
    /// A builder with the kernel's defaults (DeferList, burst limit 1000, quota 64).
    pub fn builder() -> TxQueueBuilder {
        TxQueueBuilder::default()
    }
}

impl TxQueueBuilder {
    /// Builds the queue over `qdisc` and `driver`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the bad option (a zero burst limit, quota or bulk, a help
    /// threshold outside `1..=burst_limit`).
    pub fn build<P: Packet, Q: Qdisc<P>, D: Driver<P>>(
        self,
        qdisc: Q,
        driver: D,
    ) -> Result<TxQueue<P, Q, D>, ConfigError> {
        self.build_inner(qdisc, driver, None)
    }

    /// Builds the queue with a wake callback, called when work is left for a poll loop (quota
    /// used up, i.e. `__netif_schedule`). A [`TxWorker`](crate::TxWorker) installs one.
    ///
    /// # Errors
    ///
    /// As [`build`](TxQueueBuilder::build).
    pub fn build_with_waker<P: Packet, Q: Qdisc<P>, D: Driver<P>>(
        self,
        qdisc: Q,
        driver: D,
        waker: impl Fn() + Send + Sync + 'static,
    ) -> Result<TxQueue<P, Q, D>, ConfigError> {
        self.build_inner(qdisc, driver, Some(PollLoop::new(waker, None)))
    }

    /// [`build_with_waker`](Self::build_with_waker) for a [`TxWorker`](crate::TxWorker): while
    /// `alive` is false, runners do not hand work over (nobody would take it) but carry on.
    pub(crate) fn build_with_worker<P: Packet, Q: Qdisc<P>, D: Driver<P>>(
        self,
        qdisc: Q,
        driver: D,
        waker: impl Fn() + Send + Sync + 'static,
        alive: std::sync::Arc<AtomicBool>,
    ) -> Result<TxQueue<P, Q, D>, ConfigError> {
        self.build_inner(qdisc, driver, Some(PollLoop::new(waker, Some(alive))))
    }

    fn build_inner<P: Packet, Q: Qdisc<P>, D: Driver<P>>(
        self,
        qdisc: Q,
        driver: D,
        waker: Option<PollLoop>,
    ) -> Result<TxQueue<P, Q, D>, ConfigError> {
        self.validate()?;
        let defer = DeferList::with_limit(self.burst_limit)
            .map(|d| d.with_drain_hints(self.drain_hints))
            .map_err(|_| {
                ConfigError::new(
                    "txqueue",
                    "burst_limit",
                    self.burst_limit as u64,
                    "1..=65535",
                )
            })?;
        let bypass_ok = qdisc.can_bypass();
        Ok(TxQueue {
            defer: CachePadded::new(defer),
            root: CachePadded::new(RootLock::new(
                Root {
                    _front: CachePadded::new(()),
                    qdisc,
                    requeue: Fifo::new(),
                    deactivated: false,
                    _back: CachePadded::new(()),
                },
                self.biased_root,
            )),
            busylock: CachePadded::new(Mutex::new(())),
            driver: CachePadded::new(UnsafeCell::new(driver)),
            seqlock: CachePadded::new(AtomicBool::new(false)),
            state: CachePadded::new(AtomicU32::new(0)),
            running: CachePadded::new(AtomicU32::new(0)),
            #[cfg(lockless_loom)]
            bypassing: AtomicBool::new(false),
            bypass_ok: AtomicBool::new(bypass_ok),
            room: Mutex::new(()),
            room_cv: Condvar::new(),
            waiters: CachePadded::new(AtomicUsize::new(0)),
            waker,
            help_at: self.help_at(),
            counters: CachePadded::new(XmitCounters::new(self.latency_histogram)),
            cfg: self,
            _packets: PhantomData,
        })
    }
}

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> TxQueue<P, Q, D> {
    /// Transmits one packet (`dev_queue_xmit`). Returns the verdict the kernel would report:
    /// `Success` for a packet handed on (even if a later stage drops it, which is then counted),
    /// `Dropped` if it was dropped here and now.
    ///
    /// As in the kernel, a DeferList first pusher reports what became of the batch it drained,
    /// which is its own packet unless something else took the list first. Here that can
    /// happen (a helping drain, [`poll`](Self::poll), a burst sent by its own producer,
    /// [`deactivate`](Self::deactivate)), and a first pusher may then report the drop of
    /// another producer's lone packet while that one reports `Success`. The counters are
    /// exact either way: they, not the verdicts, are the account of every packet.
    #[inline]
    pub fn xmit(&self, pkt: P) -> Verdict {
        let Some(hist) = &self.counters.latency else {
            return self.xmit_inner(pkt);
        };
        if !super::stats::sample_this_call() {
            return self.xmit_inner(pkt);
        }
        let t0 = Stamp::now();
        let v = self.xmit_inner(pkt);
        hist.record(t0.elapsed_ns());
        v
    }

    /// Transmits a batch of packets in order: the bulk form of [`xmit`](Self::xmit), for a
    /// caller that holds several packets at once (an RX burst, a vector of frames), as DPDK's
    /// `rte_eth_tx_burst` does and the kernel's `dev_queue_xmit` does not.
    ///
    /// With [`Strategy::DeferList`] a batch costs about what one packet does: when nobody runs the
    /// queue and the qdisc is empty and takes the batch whole ([`Qdisc::can_bypass_batch`], with
    /// `batch_bypass` on) it goes to the driver in one call under the root lock; otherwise one CAS
    /// pushes it onto the defer list
    /// ([`DeferList::push_batch`](llist_defer::DeferList::push_batch): counted by its length
    /// against the burst limit, refused whole past it) and the first pusher drains as usual. A
    /// batch refused under [`Overflow::Wait`](super::Overflow::Wait) goes packet by packet, each
    /// waiting for room. A burst of at least [`self_send_burst`](TxQueueBuilder::self_send_burst)
    /// packets (16 by default) does not push: its producer waits for the root lock and sends it
    /// itself, from its own cache, as a mutex user would (under contention a runner on another core
    /// would otherwise read every packet and free every frame remotely). With
    /// [`Strategy::BusyLock`] the burst takes the busylock and the root lock once and goes to the
    /// qdisc in one [`Qdisc::enqueue_batch`] (or bypasses it whole). The NoLock strategies send the
    /// packets one by one through `xmit`'s path, as the kernel would.
    ///
    /// The packets keep their order, among themselves and after this thread's earlier calls.
    /// Allocation-free: the packets are linked through their own links.
    ///
    /// Returns how many packets were handed on and how many were dropped here and now (each
    /// counted in [`stats`](Self::stats) with its reason); as with `xmit`, a packet handed on
    /// may still be dropped by a later stage, and is then counted there.
    ///
    /// ```
    /// use qdisc::{NullDriver, Pfifo, TestPacket, TxQueue};
    ///
    /// let txq = TxQueue::builder().build(Pfifo::new(), NullDriver::new())?;
    /// let v = txq.xmit_bulk((0..64).map(|i| TestPacket::new(i, 100)));
    /// assert_eq!((v.handed_on, v.dropped), (64, 0));
    /// assert_eq!(txq.stats().sent, 64);
    /// # Ok::<(), qdisc::ConfigError>(())
    /// ```
    pub fn xmit_bulk<I: IntoIterator<Item = P>>(&self, pkts: I) -> BulkVerdict {
        // One pass links the packets and sums their bytes, which the bypass test and the
        // driver's byte counter need: neither walks the batch again.
        let mut batch = Fifo::new();
        let mut bytes = 0u64;
        for p in pkts {
            bytes += p.len() as u64;
            batch.push_back(p);
        }
        let n = batch.len();
        let dropped = match &self.counters.latency {
            Some(hist) if super::stats::sample_this_call() => {
                let t0 = Stamp::now();
                let d = self.xmit_bulk_inner(batch, bytes);
                hist.record(t0.elapsed_ns());
                d
            }
            _ => self.xmit_bulk_inner(batch, bytes),
        };
        BulkVerdict {
            handed_on: n - dropped,
            dropped,
        }
    }

    /// Returns how many packets of `batch` (`bytes` in all) were dropped here and now.
    fn xmit_bulk_inner(&self, mut batch: Fifo<P>, bytes: u64) -> usize {
        let mut dropped = self.dropped();
        let to_free = &mut dropped.list;
        match self.cfg.strategy {
            Strategy::DeferList if batch.len() > 1 => self.xmit_defer_batch(batch, bytes, to_free),
            Strategy::BusyLock if batch.len() > 1 => self.xmit_busylock_batch(batch, to_free),
            _ => {
                let mut n = 0;
                while let Some(p) = batch.pop_front() {
                    n += usize::from(matches!(self.xmit_one(p, to_free), Verdict::Dropped(_)));
                }
                n
            }
        }
    }

    #[inline]
    fn xmit_inner(&self, pkt: P) -> Verdict {
        let mut dropped = self.dropped();
        self.xmit_one(pkt, &mut dropped.list)
        // `dropped` frees here, outside every lock (and on unwind, counted).
    }

    /// One packet through the configured strategy; drops go to `to_free`.
    #[inline]
    fn xmit_one(&self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        match self.cfg.strategy {
            Strategy::DeferList => self.xmit_defer(pkt, to_free),
            Strategy::BusyLock => self.xmit_busylock(pkt, to_free),
            Strategy::NoLock | Strategy::NoLockNaive => self.xmit_nolock(pkt, to_free),
        }
    }

    /// The wake callback of the poll loop that takes over work a runner leaves, if there is
    /// one that still runs.
    pub(super) fn poll_loop(&self) -> Option<&(dyn Fn() + Send + Sync)> {
        let w = self.waker.as_ref()?;
        if w.alive.as_ref().is_some_and(|a| !a.load(Ordering::Acquire)) {
            return None;
        }
        Some(&*w.wake)
    }

    /// Whether the poll loop is a [`TxWorker`](crate::TxWorker)'s, which can stop: then a
    /// runner decides to hand over under the root lock (the stop takes it after marking the
    /// worker gone).
    pub(super) fn poll_loop_can_stop(&self) -> bool {
        self.waker.as_ref().is_some_and(|w| w.alive.is_some())
    }

    pub(super) fn dropped(&self) -> Dropped<'_, P, Q, D> {
        Dropped {
            txq: self,
            list: ToFree::new(),
        }
    }

    /// Frees dropped packets (outside every lock) and counts them by reason.
    pub(super) fn free(&self, mut to_free: ToFree<P>) {
        if to_free.is_empty() {
            return;
        }
        let (packets, counts) = to_free.take();
        self.counters.add_drops(&counts);
        drop(packets);
    }

    pub(super) fn lock_root(&self) -> RootGuard<'_, Root<P, Q>> {
        let c = &self.counters;
        lock_counted(
            || self.root.try_lock(),
            || self.root.lock(),
            &c.root_contended,
            &c.root_wait_ns,
        )
    }

    /// Runs whatever is queued if nobody else is running it: drains the defer list and the
    /// qdisc. Call it from the application's poll loop, after the driver reports room
    /// ([`wake`](TxQueue::wake)), or from a [`TxWorker`](crate::TxWorker). Returns whether
    /// anything was left queued afterwards.
    pub fn poll(&self) -> bool {
        self.state.fetch_and(!SCHED, Ordering::AcqRel);
        let mut dropped = self.dropped();
        let to_free = &mut dropped.list;
        match self.cfg.strategy {
            Strategy::NoLock | Strategy::NoLockNaive => {
                if self.nolock_run_begin() {
                    self.nolock_run(Fifo::new(), false, to_free);
                    self.nolock_finish(to_free);
                }
            }
            Strategy::DeferList => {
                let root = self.lock_root();
                self.drain(root, to_free);
            }
            Strategy::BusyLock => {
                let root = self.lock_root();
                if !self.is_running() && !root.deactivated && root.qlen() != 0 {
                    self.run_begin_locked(&root);
                    drop(self.run(root, Fifo::new(), to_free));
                }
            }
        }
        drop(dropped);
        self.backlog() != 0 || !self.defer.is_empty()
    }

    /// The driver has room again (`netif_tx_wake_queue`): run the queue.
    pub fn wake(&self) -> bool {
        self.state.fetch_and(!BUSY, Ordering::SeqCst);
        self.poll()
    }

    /// Whether a reschedule is pending for the poll loop (`__QDISC_STATE_SCHED`).
    pub fn is_scheduled(&self) -> bool {
        self.state.load(Ordering::Acquire) & SCHED != 0
    }

    /// Deactivates the queue (`dev_deactivate`): everything queued, in the qdisc, the requeue
    /// list and the defer list, is dropped with [`DropReason::Deactivated`], and so is every
    /// packet arriving until [`activate`](TxQueue::activate). Returns how many were dropped.
    ///
    /// Like the kernel's `dev_deactivate` (which waits while `some_qdisc_is_busy`), it waits for
    /// a runner that was sending when the flag went up, then drops what that runner left
    /// queued (packets its driver handed back): the strategies that let go of the root lock
    /// around the driver call could otherwise requeue them after the sweep.
    pub fn deactivate(&self) -> usize {
        let mut dropped = self.dropped();
        let to_free = &mut dropped.list;
        self.sweep_deactivated(to_free, true);
        while self.run_in_progress() {
            crate::sync::yield_now();
        }
        self.sweep_deactivated(to_free, false);
        to_free.len()
    }

    /// Under the root lock: marks the queue deactivated (`raise`) and drops everything queued
    /// with [`DropReason::Deactivated`].
    fn sweep_deactivated(&self, to_free: &mut ToFree<P>, raise: bool) {
        let mut root = self.lock_root();
        if raise {
            root.deactivated = true;
        } else if !root.deactivated {
            return; // activated again meanwhile: what is queued now is to be sent
        }
        let Root { qdisc, requeue, .. } = &mut *root;
        while let Some(p) = requeue.pop_front() {
            to_free.drop_packet(p, DropReason::Deactivated);
        }
        qdisc.reset(to_free, DropReason::Deactivated);
        for p in self.defer.take_all() {
            to_free.drop_packet(p, DropReason::Deactivated);
        }
        // Producers parked by `Overflow::Wait` on a full list: it is empty now.
        self.notify_room();
    }

    /// Whether a runner holds the run role (the NoLock seqlock for NoLock).
    fn run_in_progress(&self) -> bool {
        match self.cfg.strategy {
            Strategy::NoLock | Strategy::NoLockNaive => self.seqlock.load(Ordering::Acquire),
            // The sweep after the wait takes the root lock, under which the runner requeued
            // what its driver handed back: that orders it, not this load.
            Strategy::BusyLock | Strategy::DeferList => self.is_running(),
        }
    }

    /// Lets packets through again after [`deactivate`](TxQueue::deactivate).
    pub fn activate(&self) {
        self.lock_root().deactivated = false;
    }

    /// Replaces the qdisc while traffic flows (`tc qdisc replace`). The old qdisc's packets are
    /// dropped with [`DropReason::Deactivated`], as the kernel resets a replaced qdisc; the old
    /// qdisc is returned for its statistics. Requeued packets stay and go first.
    pub fn replace_qdisc(&self, new: Q) -> Q {
        let mut dropped = self.dropped();
        let mut root = self.lock_root();
        self.bypass_ok.store(new.can_bypass(), Ordering::Relaxed);
        let mut old = core::mem::replace(&mut root.qdisc, new);
        old.reset(&mut dropped.list, DropReason::Deactivated);
        drop(root);
        drop(dropped);
        old
    }

    /// Runs `f` on the qdisc under the root lock (for statistics or a live change).
    pub fn with_qdisc<R>(&self, f: impl FnOnce(&mut Q) -> R) -> R {
        self.change_qdisc(|q, _| f(q))
    }

    /// Runs `f` on the qdisc under the root lock with a to-free list, for a live change that
    /// may drop packets (`tc qdisc change`, e.g. [`Fq::change`](crate::Fq::change) lowering
    /// the limit). What `f` puts on the list is freed after the lock is released and counted
    /// in [`XmitStats::drops`] by reason, so the queue's conservation law still holds.
    ///
    /// ```
    /// use qdisc::{FqBuilder, NullDriver, TestPacket, TxQueue};
    ///
    /// let txq = TxQueue::builder()
    ///     .build(FqBuilder::new().build::<TestPacket>().unwrap(), NullDriver::new())
    ///     .unwrap();
    /// let dropped = txq
    ///     .change_qdisc(|fq, to_free| fq.change(fq.to_builder().limit(500), to_free))
    ///     .unwrap();
    /// assert_eq!(dropped, 0);
    /// assert_eq!(txq.with_qdisc(|fq| fq.config().limit), 500);
    /// ```
    pub fn change_qdisc<R>(&self, f: impl FnOnce(&mut Q, &mut ToFree<P>) -> R) -> R {
        let mut dropped = self.dropped();
        let r = {
            let mut root = self.lock_root();
            let r = f(&mut root.qdisc, &mut dropped.list);
            self.bypass_ok
                .store(root.qdisc.can_bypass(), Ordering::Relaxed);
            r
        };
        // `dropped` frees and counts here, outside the lock.
        drop(dropped);
        r
    }

    /// Runs `f` on the driver: takes the run role (waiting for a current runner to finish),
    /// calls `f`, then runs whatever was queued meanwhile, like any runner, and lets go.
    pub fn with_driver<R>(&self, f: impl FnOnce(&mut D) -> R) -> R {
        let mut dropped = self.dropped();
        let to_free = &mut dropped.list;
        let r = match self.cfg.strategy {
            Strategy::NoLock | Strategy::NoLockNaive => {
                while self
                    .seqlock
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    std::thread::yield_now();
                }
                // A panic in `f` gives the role back.
                let mut role = RunRole::new(self, Fifo::new());
                // SAFETY: we hold the seqlock, the NoLock run role.
                let r = unsafe { self.driver_mut(f) };
                role.held = false;
                drop(role);
                self.nolock_run(Fifo::new(), false, to_free);
                self.nolock_finish(to_free);
                r
            }
            Strategy::BusyLock | Strategy::DeferList => {
                let mut root = self.lock_root();
                while self.is_running() {
                    drop(root);
                    std::thread::yield_now();
                    root = self.lock_root();
                }
                self.run_begin_locked(&root);
                drop(root);
                // A panic in `f` gives the role back.
                let mut role = RunRole::new(self, Fifo::new());
                // SAFETY: we set `running` under the root lock after seeing it clear.
                let r = unsafe { self.driver_mut(f) };
                role.held = false;
                drop(role);
                let root = self.lock_root();
                drop(self.run(root, Fifo::new(), to_free));
                r
            }
        };
        drop(dropped);
        r
    }

    /// Packets in the qdisc and the requeue list (not the defer list, which keeps no count).
    pub fn backlog(&self) -> usize {
        self.lock_root().qlen()
    }

    /// Whether the defer list looks empty (a hint).
    pub fn defer_list_is_empty(&self) -> bool {
        self.defer.is_empty()
    }

    /// The strategy this queue runs.
    pub fn strategy(&self) -> Strategy {
        self.cfg.strategy
    }

    /// Whether the root lock may be lent to a lone thread
    /// ([`TxQueueBuilder::biased_root`] asked for it, and `membarrier` is available).
    pub fn root_lendable(&self) -> bool {
        self.root.lendable()
    }

    /// The engine's counters.
    pub fn stats(&self) -> XmitStats {
        self.counters.snapshot(self.root.bias_counts())
    }

    /// The qdisc's `tc` counters, with the engine's requeues and bypassed packets folded in as
    /// the kernel reports them.
    pub fn qdisc_stats(&self) -> QdiscStats {
        let root = self.lock_root();
        let mut s = root.qdisc.stats();
        let c = &self.counters;
        s.requeues += c.requeues.get();
        s.packets += c.bypass.get();
        s.bytes += c.bypass_bytes.get();
        s.qlen += root.requeue.len() as u64;
        s.backlog += root.requeue.iter().map(|p| p.len() as u64).sum::<u64>();
        s
    }
}

/// Takes a lock by `try_lock`, else waits for it with `lock`; if it had to wait, counts one
/// contended acquisition and the time waited (what `perf lock contention` reports). Serves the
/// root lock and the busylock alike.
#[inline]
pub(super) fn lock_counted<G>(
    try_lock: impl FnOnce() -> Option<G>,
    lock: impl FnOnce() -> G,
    contended: &Counter,
    wait_ns: &Counter,
) -> G {
    if let Some(g) = try_lock() {
        return g;
    }
    let t0 = Stamp::now();
    let g = lock();
    contended.add(1);
    wait_ns.add(t0.elapsed_ns());
    g
}

// SAFETY: the driver cell is only reached by the holder of the exclusive run role, so sharing
// the queue shares at most one `&mut D` at a time across threads: `D: Send` suffices. All other
// fields are Sync by themselves (given `P: Send`, `Q: Send`).
unsafe impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> Sync for TxQueue<P, Q, D> {}

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> fmt::Debug for TxQueue<P, Q, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxQueue")
            .field("strategy", &self.cfg.strategy)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

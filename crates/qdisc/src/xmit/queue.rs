//! [`TxQueue`]: the user-space `__dev_xmit_skb` (Linux 6.19 `net/core/dev.c`) with the qdisc run
//! loop of `sch_generic.c` (`qdisc_run_begin` / `__qdisc_run` / `sch_direct_xmit` /
//! `dev_requeue_skb` / `qdisc_run_end`).
//!
//! Who may do what:
//! - the **root lock** guards the qdisc, the requeue list (`gso_skb`), `running` and
//!   `deactivated`; it is never held while the driver runs;
//! - the **run role** (`running` for the locked strategies, the seqlock for NoLock) is held by at
//!   most one thread, the runner, which alone dequeues for and calls the driver;
//! - the **defer list** takes pushes from anyone; only a thread holding the root lock drains it;
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
use llist_defer::{DeferList, Fifo, Pushed};

use crate::config::ConfigError;
use crate::packet::{DropReason, Packet};
use crate::qdisc::{Qdisc, QdiscStats, ToFree, Verdict};
use crate::sync::{
    AtomicBool, AtomicU32, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering, UnsafeCell, fence,
};

use super::config::{Overflow, Strategy, TxQueueBuilder};
use super::driver::Driver;
use super::stats::{Counter, Stamp, XmitCounters, XmitStats};

/// NoLock state bits (`__QDISC_STATE_MISSED`, `__QDISC_STATE_DRAINING`).
const MISSED: u32 = 1;
const DRAINING: u32 = 2;
/// A reschedule is pending for the poll loop / TxWorker (`__QDISC_STATE_SCHED`).
const SCHED: u32 = 4;
/// NoLock: the driver answered busy (`TxResult::stopped`) and no [`TxQueue::wake`] came since.
/// Stands in for `is_stopped` for drivers that do not report it, so a busy driver is not
/// retried in a MISSED storm (a thread spinning on it) but waits for its wake or the next xmit.
const BUSY: u32 = 8;

/// `TxQueue::running`: the locked strategies' run role is held.
const RUNNING: u32 = 1;
/// `TxQueue::running`: a first pusher saw the role held and left its batch to the runner.
const PENDING: u32 = 2;

/// What the root lock guards.
///
/// Padded on both sides (`repr(C)`, so the pads stay first and last): the `Mutex` keeps its
/// lock word just before or just after this value, and producers that only try the lock (or
/// spin on it) must not pull the runner's qdisc head into their cache on every attempt (false
/// sharing that perf showed as misses in the runner's dequeue).
#[repr(C)]
struct Root<P: Packet, Q> {
    _front: CachePadded<()>,
    qdisc: Q,
    /// Packets the driver handed back, sent before anything else (`q->gso_skb`).
    requeue: Fifo<P>,
    /// Everything arriving is dropped (`__QDISC_STATE_DEACTIVATED`).
    deactivated: bool,
    _back: CachePadded<()>,
}

impl<P: Packet, Q: Qdisc<P>> Root<P, Q> {
    fn qlen(&self) -> usize {
        self.qdisc.len() + self.requeue.len()
    }

    /// The kernel's bypass test minus `run_begin`, which the caller does.
    fn can_bypass(&self) -> bool {
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
    /// under the strategies that send one by one), each counted with its reason.
    pub dropped: usize,
}

/// One transmit queue: producers call [`xmit`](TxQueue::xmit) from any number of threads; a
/// qdisc orders the packets; one runner at a time hands them to the [`Driver`].
///
/// See the crate docs for the three [`Strategy`]s. The queue never loses a packet: each one is
/// sent, still queued, or counted in [`XmitStats::drops`] with its reason.
pub struct TxQueue<P: Packet, Q: Qdisc<P>, D: Driver<P>> {
    defer: CachePadded<DeferList<P>>,
    root: CachePadded<Mutex<Root<P, Q>>>,
    busylock: CachePadded<Mutex<()>>,
    /// Touched only by the holder of the run role (see `TxQueue::driver_mut`).
    driver: CachePadded<UnsafeCell<D>>,
    /// NoLock run role (`q->seqlock`).
    seqlock: CachePadded<AtomicBool>,
    /// MISSED / DRAINING / SCHED bits.
    state: CachePadded<AtomicU32>,
    /// The run role of the locked strategies (`q->running`, bit [`RUNNING`]) and, for
    /// DeferList, [`PENDING`]: "a first pusher left its batch to the runner". Taken only under
    /// the root lock; see [`TxQueue::run`] for the hand-off.
    running: CachePadded<AtomicU32>,
    /// Under loom only: a bypass holds the driver (checked by `driver_mut`).
    #[cfg(lockless_loom)]
    bypassing: AtomicBool,
    /// Whether the qdisc may be bypassed (read without the lock by NoLock).
    bypass_ok: AtomicBool,
    room: Mutex<()>,
    room_cv: Condvar,
    waiters: CachePadded<AtomicUsize>,
    waker: Option<Box<dyn Fn() + Send + Sync>>,
    cfg: TxQueueBuilder,
    help_at: usize,
    /// Each hot word above sits on its own cache line, away from the read-mostly settings:
    /// producers read `cfg` on every call, so a counter beside it would be false sharing.
    counters: CachePadded<XmitCounters>,
    _packets: PhantomData<fn(P)>,
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
        self.build_inner(qdisc, driver, Some(Box::new(waker)))
    }

    fn build_inner<P: Packet, Q: Qdisc<P>, D: Driver<P>>(
        self,
        qdisc: Q,
        driver: D,
        waker: Option<Box<dyn Fn() + Send + Sync>>,
    ) -> Result<TxQueue<P, Q, D>, ConfigError> {
        self.validate()?;
        let defer = DeferList::with_limit(self.burst_limit).map_err(|_| {
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
            root: CachePadded::new(Mutex::new(Root {
                _front: CachePadded::new(()),
                qdisc,
                requeue: Fifo::new(),
                deactivated: false,
                _back: CachePadded::new(()),
            })),
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

/// Packets on their way to the driver, owned by the runner. If a driver or qdisc panics while
/// a runner holds the role, dropping this during the unwind counts the batch as
/// [`DropReason::Panic`] and, if the role is still `held`, gives it back, so the next `xmit`
/// proceeds.
struct RunRole<'q, P: Packet, Q: Qdisc<P>, D: Driver<P>> {
    txq: &'q TxQueue<P, Q, D>,
    batch: Fifo<P>,
    /// Packets that skip the qdisc (a bypass), sent before anything is dequeued.
    direct: Fifo<P>,
    /// Whether this thread still holds the role (false once it let go, e.g. before calling
    /// the waker): a panic after that must not release a role another thread may hold now.
    held: bool,
}

impl<'q, P: Packet, Q: Qdisc<P>, D: Driver<P>> RunRole<'q, P, Q, D> {
    fn new(txq: &'q TxQueue<P, Q, D>, batch: Fifo<P>) -> Self {
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
struct InHand<'q, P: Packet, Q: Qdisc<P>, D: Driver<P>> {
    txq: &'q TxQueue<P, Q, D>,
    batch: Fifo<P>,
    in_call: u64,
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
struct Dropped<'q, P: Packet, Q: Qdisc<P>, D: Driver<P>> {
    txq: &'q TxQueue<P, Q, D>,
    list: ToFree<P>,
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
struct DriverCall<'a, P: Packet> {
    batch: &'a mut Fifo<P>,
    to_free: &'a mut ToFree<P>,
    handed: usize,
    to_free_before: usize,
    panics: &'a super::stats::Counter,
}

impl<P: Packet> Drop for DriverCall<'_, P> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let kept = self.batch.len() + (self.to_free.len() - self.to_free_before);
            self.panics.add(self.handed.saturating_sub(kept) as u64);
        }
    }
}

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> TxQueue<P, Q, D> {
    /// Transmits one packet (`dev_queue_xmit`). Returns the verdict the kernel would report:
    /// `Success` for a packet handed on (even if a later stage drops it, which is then counted),
    /// `Dropped` if it was dropped here and now.
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
    /// With [`Strategy::DeferList`] a batch costs about what one packet does: when nobody runs
    /// the queue and the qdisc is empty and takes the batch whole
    /// ([`Qdisc::can_bypass_batch`], with `batch_bypass` on) it goes to the driver in one call
    /// under the root lock; otherwise one CAS pushes it onto the defer list
    /// ([`DeferList::push_batch`](llist_defer::DeferList::push_batch): counted by its length
    /// against the burst limit, refused whole past it) and the first pusher drains as usual. A
    /// batch refused under [`Overflow::Wait`] goes packet by packet, each waiting for room. The
    /// other strategies send the packets one by one through `xmit`'s path, as the kernel would.
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
        let batch: Fifo<P> = pkts.into_iter().collect();
        let n = batch.len();
        let dropped = match &self.counters.latency {
            Some(hist) if super::stats::sample_this_call() => {
                let t0 = Stamp::now();
                let d = self.xmit_bulk_inner(batch);
                hist.record(t0.elapsed_ns());
                d
            }
            _ => self.xmit_bulk_inner(batch),
        };
        BulkVerdict {
            handed_on: n - dropped,
            dropped,
        }
    }

    /// Returns how many packets of `batch` were dropped here and now.
    fn xmit_bulk_inner(&self, mut batch: Fifo<P>) -> usize {
        let mut dropped = self.dropped();
        let to_free = &mut dropped.list;
        if batch.len() <= 1 || self.cfg.strategy != Strategy::DeferList {
            let mut n = 0;
            while let Some(p) = batch.pop_front() {
                n += usize::from(matches!(self.xmit_one(p, to_free), Verdict::Dropped(_)));
            }
            return n;
        }
        self.xmit_defer_batch(batch, to_free)
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

    fn dropped(&self) -> Dropped<'_, P, Q, D> {
        Dropped {
            txq: self,
            list: ToFree::new(),
        }
    }

    /// Enqueues `batch` in order (dropping it if deactivated); returns the last verdict. A
    /// panicking qdisc costs the packets in hand, counted (see [`InHand`]).
    fn enqueue_all(
        &self,
        root: &mut Root<P, Q>,
        batch: Fifo<P>,
        to_free: &mut ToFree<P>,
    ) -> Verdict {
        let mut hand = InHand {
            txq: self,
            batch,
            in_call: 0,
        };
        let mut rc = Verdict::Success;
        while let Some(p) = hand.batch.pop_front() {
            if root.deactivated {
                to_free.drop_packet(p, DropReason::Deactivated);
                rc = Verdict::Dropped(DropReason::Deactivated);
                continue;
            }
            hand.in_call = 1;
            rc = root.qdisc.enqueue(p, to_free);
            hand.in_call = 0;
        }
        rc
    }

    /// Frees dropped packets (outside every lock) and counts them by reason.
    fn free(&self, mut to_free: ToFree<P>) {
        if to_free.is_empty() {
            return;
        }
        let (packets, counts) = to_free.take();
        self.counters.add_drops(&counts);
        drop(packets);
    }

    fn lock_root(&self) -> MutexGuard<'_, Root<P, Q>> {
        let c = &self.counters;
        lock_counted(&self.root, &c.root_contended, &c.root_wait_ns)
    }

    // ---------------------------------------------------------------- DeferList

    fn xmit_defer(&self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        // The bypass before the push: only worth a CAS on the root lock when nobody is running
        // (a runner holds it anyway, and every failed try would steal its line).
        if self.cfg.early_bypass && self.defer.is_empty() && !self.is_running() {
            if let Some(root) = self.root.try_lock() {
                if root.can_bypass() && !self.is_running() {
                    self.bypass_locked(root, Fifo::from_iter([pkt]), to_free);
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
    fn xmit_defer_batch(&self, batch: Fifo<P>, to_free: &mut ToFree<P>) -> usize {
        let n = batch.len();
        // The bypass before the push, for the whole batch (see `xmit_defer`).
        if self.cfg.early_bypass && self.defer.is_empty() && !self.is_running() {
            if let Some(root) = self.root.try_lock() {
                if !self.is_running() && self.may_bypass(&root, &batch) {
                    self.bypass_locked(root, batch, to_free);
                    return 0;
                }
            }
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
    fn bypass_locked<'a>(
        &'a self,
        mut root: MutexGuard<'a, Root<P, Q>>,
        batch: Fifo<P>,
        to_free: &mut ToFree<P>,
    ) {
        // If the driver panics, the packets count as panic drops; there is no role to give
        // back, and the root guard (dropped after this one) unlocks.
        let mut role = RunRole::new(self, batch);
        role.held = false;
        #[cfg(lockless_loom)]
        self.bypassing.store(true, Ordering::Relaxed);
        let (_, stopped) = self.transmit(&mut role.batch, true, to_free);
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

    /// `Overflow::Wait`: help if the root lock is free, else park until a drain resets the count.
    fn wait_for_room(&self, to_free: &mut ToFree<P>) {
        if let Some(root) = self.root.try_lock() {
            self.counters.helped_drains.add(1);
            self.drain(root, to_free);
            return;
        }
        self.counters.overflow_waits.add(1);
        self.waiters.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `drain`: either we see the reset count, or the drainer sees
        // us waiting and notifies under `room`.
        fence(Ordering::SeqCst);
        let mut g = self.room.lock();
        while self.defer.burst() > self.defer.limit() {
            g = self.room_cv.wait(g);
        }
        drop(g);
        self.waiters.fetch_sub(1, Ordering::Relaxed);
    }

    /// The first pusher's work, under the root lock: take the whole defer list, reverse it to
    /// FIFO, then bypass or enqueue and run.
    fn drain<'a>(
        &'a self,
        mut root: MutexGuard<'a, Root<P, Q>>,
        to_free: &mut ToFree<P>,
    ) -> Verdict {
        let mut batch = self.defer.take_all().reverse();
        self.notify_room();
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

    // ---------------------------------------------------------------- BusyLock

    fn xmit_busylock(&self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
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

    // ---------------------------------------------------------------- the locked run loop

    /// `__qdisc_run` for the locked strategies. The caller holds the root lock and has set
    /// `running`; `direct` is a bypass batch (older than anything queued) to send before
    /// dequeuing anything. Returns with the role given back and the lock held.
    fn run<'a>(
        &'a self,
        mut root: MutexGuard<'a, Root<P, Q>>,
        direct: Fifo<P>,
        to_free: &mut ToFree<P>,
    ) -> MutexGuard<'a, Root<P, Q>> {
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
                        Self::dequeue_batch(&mut root, &mut role.batch, max);
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
                    if self.waker.is_some() {
                        // The poll loop we wake sends the rest of a bypass batch first.
                        root.requeue.append(&mut role.direct);
                        self.state.fetch_or(SCHED, Ordering::Release);
                        // PENDING goes too: the poll loop we wake drains the defer list.
                        self.running.swap(0, Ordering::AcqRel);
                        role.held = false;
                        drop(root);
                        if let Some(w) = &self.waker {
                            w();
                        }
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
    fn run_begin_locked(&self, _root: &MutexGuard<'_, Root<P, Q>>) {
        // A stale PENDING (its pusher saw no runner and drains by itself) is dropped here.
        // Every write of `running` is an RMW, so all of them fall in one total order with the
        // pushers' `fetch_or(PENDING)` (loom showed a plain store is not enough).
        let prev = self.running.swap(RUNNING, Ordering::AcqRel);
        debug_assert!(prev & RUNNING == 0, "two runners");
    }

    #[inline]
    fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed) & RUNNING != 0
    }

    /// Takes the defer list whole (the drainer's work, done by a runner holding the root lock)
    /// and enqueues it in arrival order, or returns it if it may skip the empty qdisc.
    fn absorb_defer_list(&self, root: &mut Root<P, Q>, to_free: &mut ToFree<P>) -> Fifo<P> {
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
    fn may_bypass(&self, root: &Root<P, Q>, batch: &Fifo<P>) -> bool {
        if !root.can_bypass() {
            return false;
        }
        match batch.len() {
            0 => false,
            1 => true,
            n => {
                self.cfg.batch_bypass && {
                    let bytes = batch.iter().map(|p| p.len() as u64).sum();
                    root.qdisc.can_bypass_batch(n, bytes)
                }
            }
        }
    }

    /// Wakes producers parked by `Overflow::Wait` after a drain reset the burst count.
    fn notify_room(&self) {
        // Pairs with the fence in `wait_for_room`: either the waiter sees the reset count, or
        // we see it waiting and notify under `room`.
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::Relaxed) != 0 {
            let _g = self.room.lock();
            self.room_cv.notify_all();
        }
    }

    /// `dequeue_skb`: requeued packets first, then the qdisc, at most `max`.
    fn dequeue_batch(root: &mut Root<P, Q>, batch: &mut Fifo<P>, max: usize) {
        while batch.len() < max {
            let Some(p) = root.requeue.pop_front() else {
                break;
            };
            batch.push_back(p);
        }
        while batch.len() < max {
            let Some(p) = root.qdisc.dequeue() else { break };
            batch.push_back(p);
        }
    }

    /// `sch_direct_xmit` without the root lock: hands `batch` to the driver, counts what it
    /// took. Returns (sent, stopped).
    fn transmit(
        &self,
        batch: &mut Fifo<P>,
        bypass: bool,
        to_free: &mut ToFree<P>,
    ) -> (usize, bool) {
        let bytes_before: u64 = batch.iter().map(|p| p.len() as u64).sum();
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

    // ---------------------------------------------------------------- NoLock

    /// `qdisc_run_begin` for a NOLOCK qdisc: try the seqlock; on failure flag MISSED and try
    /// once more, so that either we run or the runner sees MISSED after it lets go.
    fn nolock_run_begin(&self) -> bool {
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
    fn nolock_run_end(&self) -> bool {
        self.seqlock.store(false, Ordering::Release);
        if self.cfg.strategy == Strategy::NoLockNaive {
            return false;
        }
        fence(Ordering::SeqCst);
        self.state.load(Ordering::Relaxed) & MISSED != 0
    }

    fn xmit_nolock(&self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
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
    fn nolock_finish(&self, to_free: &mut ToFree<P>) {
        while self.nolock_run_end() {
            if self.waker.is_some() {
                self.state.fetch_or(SCHED, Ordering::Release);
                if let Some(w) = &self.waker {
                    w();
                }
                return;
            }
            if !self.nolock_run_begin() {
                return; // the new runner saw (or set) MISSED and will do it
            }
            self.nolock_run(Fifo::new(), false, to_free);
        }
    }

    /// `__qdisc_run` for NoLock: the caller holds the seqlock.
    fn nolock_run(&self, first: Fifo<P>, bypass: bool, to_free: &mut ToFree<P>) {
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
                Self::dequeue_batch(&mut root, &mut role.batch, self.cfg.bulk.min(quota));
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

    /// Runs `f` on the driver.
    ///
    /// # Safety
    ///
    /// The caller holds the run role (`running` set by itself under the root lock, or the
    /// NoLock seqlock), or holds the root lock having seen the role free (the DeferList
    /// bypass, see [`TxQueue::bypass_locked`]). Either is exclusive, so no other reference to
    /// the driver exists.
    #[inline]
    unsafe fn driver_mut<R>(&self, f: impl FnOnce(&mut D) -> R) -> R {
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

    /// `qdisc_maybe_clear_missed`: on a stopped queue, trade MISSED for DRAINING so run_end
    /// does not reschedule in a storm, unless the queue was woken meanwhile. Runner only.
    fn nolock_stopped(&self) {
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

    /// Whether the driver's queue is stopped (`netif_xmit_frozen_or_stopped`), counted.
    /// Runner only.
    fn driver_stopped(&self) -> bool {
        // SAFETY: called from the run loops, whose caller holds the run role.
        let stopped = unsafe { self.driver_mut(|d| d.is_stopped()) };
        if stopped {
            self.counters.driver_stops.add_by_runner(1);
        }
        stopped
    }

    /// Gives back the run role after a panic unwound through a runner.
    fn release_role_after_panic(&self) {
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

    // ---------------------------------------------------------------- control

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
    pub fn deactivate(&self) -> usize {
        let mut dropped = self.dropped();
        let to_free = &mut dropped.list;
        {
            let mut root = self.lock_root();
            root.deactivated = true;
            let Root { qdisc, requeue, .. } = &mut *root;
            while let Some(p) = requeue.pop_front() {
                to_free.drop_packet(p, DropReason::Deactivated);
            }
            qdisc.reset(to_free, DropReason::Deactivated);
            for p in self.defer.take_all() {
                to_free.drop_packet(p, DropReason::Deactivated);
            }
        }
        to_free.len()
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

    /// The engine's counters.
    pub fn stats(&self) -> XmitStats {
        self.counters.snapshot()
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

/// Takes `lock`; if it had to wait, counts one contended acquisition and the time waited (what
/// `perf lock contention` reports).
fn lock_counted<'a, T>(
    lock: &'a Mutex<T>,
    contended: &Counter,
    wait_ns: &Counter,
) -> MutexGuard<'a, T> {
    if let Some(g) = lock.try_lock() {
        return g;
    }
    let t0 = Stamp::now();
    let g = lock.lock();
    contended.add(1);
    wait_ns.add(t0.elapsed_ns());
    g
}

/// Bytes of the packets added to `to_free` since it held `before` packets.
fn to_free_bytes<P: Packet>(to_free: &ToFree<P>, before: usize) -> u64 {
    if to_free.len() == before {
        return 0;
    }
    to_free.iter().skip(before).map(|p| p.len() as u64).sum()
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

//! [`XskDevice`]: a multi-queue AF_XDP transmit device over the frame pool — the user-space
//! `net_device` with one `netdev_queue` per NIC queue. Each queue is a [`TxQueue`](qdisc::TxQueue)
//! (its own qdisc, the lock-free xmit engine) over an [`XskDriver`] (its own AF_XDP socket); all
//! sockets share one UMEM, the pool's region. [`XskDevice::xmit`] picks the queue from the packet's
//! flow hash, as `netdev_pick_tx` / `skb_tx_hash` do without XPS maps: one flow stays on one queue,
//! so its packets stay in order.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use llist_defer::Fifo;
use qdisc::{BulkVerdict, Qdisc, TxQueue, TxQueueBuilder, Verdict, XmitStats};
use skb_pool::{Pool, Skb};

use crate::driver::{Counters, XskDriver, XskDriverStats};
use crate::error::{Error, Result};
use crate::socket::{SocketConfig, XdpMode, XskSocket, queue_count};
use crate::umem::Umem;

/// How long [`XskDevice::close`] waits for the kernel to complete frames before taking them
/// back by force.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// One queue of an [`XskDevice`]: the engine over the queue's AF_XDP driver.
pub type XskTxQueue<Q> = TxQueue<Skb, Q, XskDriver>;

/// Counters of one queue.
#[derive(Debug, Clone)]
pub struct XskQueueStats {
    /// The engine's counters (sent, drops by reason, requeues, ...).
    pub xmit: XmitStats,
    /// The driver's counters (ring, completions, refusals).
    pub driver: XskDriverStats,
}

/// Counters of a device: per queue, and summed.
#[derive(Debug, Clone)]
pub struct XskDeviceStats {
    /// One entry per queue, in queue order.
    pub queues: Vec<XskQueueStats>,
}

impl XskDeviceStats {
    /// Packets put on TX rings, all queues.
    pub fn sent(&self) -> u64 {
        self.queues.iter().map(|q| q.driver.sent).sum()
    }
    /// Completions reaped, all queues.
    pub fn completed(&self) -> u64 {
        self.queues.iter().map(|q| q.driver.completed).sum()
    }
    /// Frames in the kernel now, all queues.
    pub fn in_flight(&self) -> u64 {
        self.queues.iter().map(|q| q.driver.in_flight).sum()
    }
    /// Packets dropped anywhere (qdisc, engine, driver), all queues.
    pub fn dropped(&self) -> u64 {
        self.queues.iter().map(|q| q.xmit.dropped()).sum()
    }
}

/// What [`XskDevice::close`] did.
#[derive(Debug, Clone)]
pub struct CloseReport {
    /// Packets still queued (qdisc, requeue, defer list) dropped as `Deactivated`.
    pub dropped_queued: usize,
    /// Frames the kernel completed during the grace period.
    pub completed: u64,
    /// Frames taken back from the kernel after the sockets closed (sent or not: unknown).
    pub reclaimed: usize,
    /// Frames left out of the pool because the UMEM was still open elsewhere (a clone of it,
    /// taken through [`XskSocket::umem`](crate::XskSocket::umem), may still have a socket
    /// bound): taking them back could hand out memory the kernel still writes. 0 normally.
    pub left_in_kernel: usize,
    /// The counters at the end.
    pub stats: XskDeviceStats,
}

/// A multi-queue AF_XDP transmit device over a frame pool. `Sync`: producers on any number
/// of threads call [`xmit`](XskDevice::xmit); someone calls [`poll`](XskDevice::poll)
/// regularly (a poll loop, or producers while they wait for frames) to reap completions and
/// restart queues the TX ring stopped.
pub struct XskDevice<Q: Qdisc<Skb>> {
    queues: Vec<XskTxQueue<Q>>,
    counters: Vec<Arc<Counters>>,
    umem: Option<Umem>,
    pool: Pool,
    ifname: String,
    mode: XdpMode,
}

impl<Q: Qdisc<Skb>> fmt::Debug for XskDevice<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XskDevice")
            .field("ifname", &self.ifname)
            .field("queues", &self.queues.len())
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl<Q: Qdisc<Skb>> XskDevice<Q> {
    /// Opens queues `0..queues` of `ifname` with default sockets (TX and completion rings of
    /// 2048, [`BindMode::Auto`](crate::BindMode::Auto), need_wakeup), registering `pool`'s
    /// region as the UMEM; queue `i` gets `qdisc(i)` and an engine built by `txq`.
    ///
    /// Must run in the network namespace that holds `ifname` (the sockets keep it; the device
    /// may then be used from any thread).
    ///
    /// # Errors
    ///
    /// [`Error::BadQueueCount`], [`Error::PoolFrameSize`], [`Error::Config`], or any error of
    /// [`Umem::from_pool`] / [`XskSocket::bind`].
    pub fn open(
        ifname: &str,
        queues: u32,
        pool: &Pool,
        qdisc: impl FnMut(u32) -> Q,
        txq: TxQueueBuilder,
    ) -> Result<XskDevice<Q>> {
        Self::open_with(ifname, queues, pool, qdisc, txq, &SocketConfig::new())
    }

    /// As [`open`](XskDevice::open), with `cfg` for every socket (ring sizes, mode).
    ///
    /// # Errors
    ///
    /// As [`open`](XskDevice::open).
    pub fn open_with(
        ifname: &str,
        queues: u32,
        pool: &Pool,
        qdisc: impl FnMut(u32) -> Q,
        txq: TxQueueBuilder,
        cfg: &SocketConfig,
    ) -> Result<XskDevice<Q>> {
        Self::open_range(ifname, 0..queues, pool, qdisc, txq, cfg)
    }

    /// As [`open_with`](XskDevice::open_with), on NIC queues `queues` (device queue `i` is NIC
    /// queue `queues.start + i`; `qdisc` is called with the NIC queue id), leaving the others
    /// to other users.
    ///
    /// # Errors
    ///
    /// As [`open`](XskDevice::open).
    pub fn open_range(
        ifname: &str,
        queues: std::ops::Range<u32>,
        pool: &Pool,
        mut qdisc: impl FnMut(u32) -> Q,
        txq: TxQueueBuilder,
        cfg: &SocketConfig,
    ) -> Result<XskDevice<Q>> {
        cfg.validate()?;
        let available = queue_count(ifname).unwrap_or(queues.end);
        if queues.is_empty() || queues.end > available {
            return Err(Error::BadQueueCount {
                asked: queues.end,
                available,
            });
        }
        let umem = Umem::from_pool(pool, 0)?;
        let mut out = Vec::with_capacity(queues.len());
        let mut counters = Vec::with_capacity(queues.len());
        let mut mode = XdpMode::Copy;
        for q in queues {
            let sock = XskSocket::bind(&umem, ifname, q, cfg)?;
            mode = sock.mode();
            let driver = XskDriver::new(sock, pool)?;
            counters.push(driver.counters());
            out.push(txq.clone().build(qdisc(q), driver).map_err(Error::Config)?);
        }
        Ok(XskDevice {
            queues: out,
            counters,
            umem: Some(umem),
            pool: pool.clone(),
            ifname: ifname.to_owned(),
            mode,
        })
    }

    /// The queue `skb` goes to: its flow hash scaled onto the queue count (the kernel's
    /// `reciprocal_scale(skb_get_hash(skb), real_num_tx_queues)`).
    pub fn select_queue(&self, skb: &Skb) -> usize {
        ((u64::from(skb.flow_hash()) * self.queues.len() as u64) >> 32) as usize
    }

    /// Transmits `skb` on the queue its flow hash selects (`dev_queue_xmit`); the `Skb`'s queue
    /// mapping records it. The data window must be the whole frame, Ethernet header first.
    pub fn xmit(&self, mut skb: Skb) -> Verdict {
        let q = self.select_queue(&skb);
        skb.set_queue_mapping(q as u16);
        self.queues[q].xmit(skb)
    }

    /// Transmits a batch of frames (`TxQueue::xmit_bulk`): each goes to the queue its flow hash
    /// selects, and each run of consecutive frames for one queue is handed to that queue as one
    /// batch, so a burst of one flow costs one defer-list push or one driver call, not one per
    /// frame. Order is kept per queue. Allocation-free. Returns the sums over the runs.
    pub fn xmit_bulk<I: IntoIterator<Item = Skb>>(&self, skbs: I) -> BulkVerdict {
        let mut total = BulkVerdict::default();
        let mut add = |v: BulkVerdict| {
            total.handed_on += v.handed_on;
            total.dropped += v.dropped;
        };
        let (mut run, mut run_q) = (Fifo::new(), 0);
        for mut skb in skbs {
            let q = self.select_queue(&skb);
            skb.set_queue_mapping(q as u16);
            if q != run_q && !run.is_empty() {
                add(self.queues[run_q].xmit_bulk(core::mem::take(&mut run)));
            }
            run_q = q;
            run.push_back(skb);
        }
        if !run.is_empty() {
            add(self.queues[run_q].xmit_bulk(run));
        }
        total
    }

    /// Reaps the completions of every queue (frames go home to their owners), kicks the kernel
    /// where descriptors wait, and runs queues that were stopped or rescheduled
    /// (`netif_tx_wake_queue` / `net_tx_action`). Returns whether any queue still holds packets
    /// or frames in the kernel.
    ///
    /// A queue whose link went down or disappeared ([`link_error`](XskDevice::link_error)) is
    /// deactivated (`dev_deactivate`): what it holds and every later packet is dropped as
    /// `Deactivated`, counted in its stats. Its frames in the kernel do not count as busy: they
    /// come back to the pool at [`close`](XskDevice::close).
    pub fn poll(&self) -> bool {
        let mut busy = false;
        for (q, c) in self.queues.iter().zip(&self.counters) {
            // with_driver runs whatever is queued once the driver is serviced.
            let was_stopped = q.with_driver(|d| d.service());
            if c.link_error(&self.ifname).is_some() {
                q.deactivate();
                continue;
            }
            if was_stopped || q.is_scheduled() {
                q.wake();
            }
            busy |= q.backlog() != 0 || !q.defer_list_is_empty() || c.snapshot().in_flight != 0;
        }
        busy
    }

    /// As [`poll`](XskDevice::poll), reporting a failed link as an error.
    ///
    /// # Errors
    ///
    /// [`Error::LinkDown`] once a queue's link went down or disappeared (the queue is then
    /// deactivated; close the device and open a new one when the link is back).
    pub fn try_poll(&self) -> Result<bool> {
        let busy = self.poll();
        match self.link_error() {
            Some(e) => Err(e),
            None => Ok(busy),
        }
    }

    /// The first queue's link failure ([`Error::LinkDown`]: a kick found the interface down or
    /// gone), if any. It stays set until the device is closed.
    pub fn link_error(&self) -> Option<Error> {
        self.counters
            .iter()
            .find_map(|c| c.link_error(&self.ifname))
    }

    /// Stops every queue on our side: packets stay in the qdiscs until
    /// [`resume`](XskDevice::resume) (`netif_tx_stop_all_queues`).
    pub fn pause(&self) {
        for q in &self.queues {
            q.with_driver(|d| d.set_paused(true));
        }
    }

    /// Restarts the queues after [`pause`](XskDevice::pause) and runs them.
    pub fn resume(&self) {
        for q in &self.queues {
            q.with_driver(|d| d.set_paused(false));
            q.wake();
        }
    }

    /// The per-queue transmit queues: entry `i` sends on NIC queue `i`, through its own
    /// `TxQueue`, socket and driver.
    pub fn queues(&self) -> &[XskTxQueue<Q>] {
        &self.queues
    }

    /// How many NIC queues this device transmits on (one socket each).
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The mode the kernel gave the sockets (veth: copy).
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// The pool whose region is the UMEM.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Per-queue engine and driver counters.
    pub fn stats(&self) -> XskDeviceStats {
        XskDeviceStats {
            queues: self
                .queues
                .iter()
                .zip(&self.counters)
                .map(|(q, c)| XskQueueStats {
                    xmit: q.stats(),
                    driver: c.snapshot(),
                })
                .collect(),
        }
    }

    /// Closes the device: deactivates every queue (queued packets are dropped as
    /// `Deactivated`, back to the pool), lets the kernel complete what it holds for up to a
    /// second, closes every socket and the UMEM, and then takes back every frame still in the
    /// kernel, so that all of them are in the pool again (unless a clone of the UMEM keeps it
    /// open: see [`CloseReport::left_in_kernel`]).
    pub fn close(mut self) -> CloseReport {
        let mut dropped_queued = 0;
        for q in &self.queues {
            dropped_queued += q.deactivate();
        }
        let before: u64 = self.stats().completed();
        let deadline = Instant::now() + CLOSE_GRACE;
        while self.poll() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let completed = self.stats().completed() - before;
        let mut sockets: Vec<XskSocket> = Vec::with_capacity(self.queues.len());
        for q in &self.queues {
            if let Some(s) = q.with_driver(|d| d.close_socket()) {
                sockets.push(s);
            }
        }
        // The UMEM's own socket closes with its last reference: after every shared socket and
        // the device's handle go, the kernel unbinds them all and touches no frame again.
        drop(sockets);
        let last = self.umem.take().is_some_and(|u| u.is_last_handle());
        let (mut reclaimed, mut left_in_kernel) = (0, 0);
        for q in &self.queues {
            if last {
                reclaimed += q.with_driver(|d| d.reclaim());
            } else {
                left_in_kernel += q.with_driver(|d| d.in_flight());
            }
        }
        CloseReport {
            dropped_queued,
            completed,
            reclaimed,
            left_in_kernel,
            stats: self.stats(),
        }
    }
}

impl<Q: Qdisc<Skb>> Drop for XskDevice<Q> {
    fn drop(&mut self) {
        if self.umem.is_some() {
            // Dropped without `close`: do the same, so no frame stays out of the pool.
            let queues = std::mem::take(&mut self.queues);
            let counters = std::mem::take(&mut self.counters);
            let dev = XskDevice {
                queues,
                counters,
                umem: self.umem.take(),
                pool: self.pool.clone(),
                ifname: std::mem::take(&mut self.ifname),
                mode: self.mode,
            };
            dev.close();
        }
    }
}

//! [`XskDriver`]: one AF_XDP socket as a `qdisc::Driver<Skb>` — the user-space `ndo_start_xmit`
//! of an AF_XDP-capable NIC queue, after libxdp's `xdpsock` TX loop: reap the completion ring
//! (each frame goes home to its owner through the pool's remote-free path), write one
//! descriptor per packet, kick only when the kernel asks (`XDP_RING_NEED_WAKEUP`), and report
//! the queue stopped when the TX ring is full (`NETDEV_TX_BUSY`).

use std::fmt;
use std::sync::Arc;

use llist_defer::Fifo;
use qdisc::{Driver, DropReason, ToFree, TxResult};
use skb_pool::{Pool, Skb};

use crate::error::{Error, Result};
use crate::pool_umem::InFlight;
use crate::socket::{XdpDesc, XskSocket};
use crate::sync::{AtomicU64, Ordering};

/// Ethernet header length: not counted by the MTU.
const ETH_HLEN: u32 = 14;
/// Completions taken per ring peek.
const REAP_BATCH: u32 = 256;
/// Descriptors queued between kicks: the kernel's copy-mode budget per `sendto` (32). A kick
/// per packet would make a lone producer, whose packets bypass the qdisc one at a time, pay a
/// system call per packet; the remainder is kicked by [`XskDriver::service`]
/// (`XskDevice::poll`), the doorbell of the kernel's `xmit_more`.
pub const KICK_BATCH: u32 = 32;

/// Counters of one [`XskDriver`], readable from any thread while it runs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XskDriverStats {
    /// Packets put on the TX ring.
    pub sent: u64,
    /// Bytes put on the TX ring.
    pub bytes: u64,
    /// Completions reaped (frames returned to the pool).
    pub completed: u64,
    /// Frames in the kernel now (TX ring, in transmission, completion ring).
    pub in_flight: u64,
    /// Packets refused for good (`DropReason::DriverError`): empty, longer than the MTU plus the
    /// Ethernet header, or from another pool.
    pub refused: u64,
    /// Times the TX ring was full with packets left (the queue stopped).
    pub ring_full: u64,
    /// Completion addresses that matched no frame of ours (a kernel or ring bug; never freed).
    pub bad_completions: u64,
    /// Kicks that failed with a real error (link down, ...); the frames stay in the ring. A
    /// link failure is also kept as [`XskDriver::link_error`].
    pub kick_errors: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    sent: AtomicU64,
    bytes: AtomicU64,
    completed: AtomicU64,
    in_flight: AtomicU64,
    refused: AtomicU64,
    ring_full: AtomicU64,
    bad_completions: AtomicU64,
    kick_errors: AtomicU64,
    /// The errno of the last kick that found the link down or gone (0: none). Sticky: the
    /// socket is not used again once its link failed.
    link_errno: AtomicU64,
    /// The socket's NIC queue.
    queue: u32,
}

impl Counters {
    /// Single writer (the run-role holder): a relaxed load and store, no read-modify-write.
    fn add(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> XskDriverStats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        XskDriverStats {
            sent: l(&self.sent),
            bytes: l(&self.bytes),
            completed: l(&self.completed),
            in_flight: l(&self.in_flight),
            refused: l(&self.refused),
            ring_full: l(&self.ring_full),
            bad_completions: l(&self.bad_completions),
            kick_errors: l(&self.kick_errors),
        }
    }

    /// The link failure a kick reported, as [`Error::LinkDown`] on `ifname`, if any.
    pub(crate) fn link_error(&self, ifname: &str) -> Option<Error> {
        let errno = self.link_errno.load(Ordering::Acquire) as i32;
        (errno != 0).then(|| Error::LinkDown {
            ifname: ifname.to_owned(),
            queue: self.queue,
            gone: errno != libc::ENETDOWN,
            source: std::io::Error::from_raw_os_error(errno),
        })
    }

    /// Records a failed kick (and a link failure, when it is one).
    fn kick_failed(&self, e: &Error) {
        Self::add(&self.kick_errors, 1);
        if let (Error::LinkDown { .. }, Some(errno)) = (e, e.raw_os_error()) {
            self.link_errno.store(errno as u64, Ordering::Release);
        }
    }
}

/// One AF_XDP socket (one NIC queue) transmitting pool frames: implements
/// [`qdisc::Driver<Skb>`](qdisc::Driver).
///
/// The `Skb`'s data window is the frame as it goes on the wire (Ethernet header first). The
/// frame itself is the descriptor's buffer: nothing is copied on our side.
pub struct XskDriver {
    sock: Option<XskSocket>,
    pool: Pool,
    inflight: InFlight,
    max_len: u32,
    descs: Vec<XdpDesc>,
    stopped: bool,
    paused: bool,
    unkicked: u32,
    kick_batch: u32,
    counters: Arc<Counters>,
}

impl fmt::Debug for XskDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XskDriver")
            .field("sock", &self.sock)
            .field("stopped", &self.stopped)
            .field("paused", &self.paused)
            .field("stats", &self.counters.snapshot())
            .finish_non_exhaustive()
    }
}

impl XskDriver {
    /// A driver over `sock`, whose UMEM must be `pool`'s region ([`Umem::from_pool`]).
    ///
    /// # Errors
    ///
    /// [`Error::WrongPool`] if `sock`'s UMEM is not `pool`'s region.
    ///
    /// [`Umem::from_pool`]: crate::Umem::from_pool
    pub fn new(sock: XskSocket, pool: &Pool) -> Result<XskDriver> {
        if !sock.umem().is_region_of(pool) {
            return Err(Error::WrongPool {
                what: "XskDriver::new",
            });
        }
        let frame = sock.umem().frame_size();
        let max_len = (sock.mtu() + ETH_HLEN).min(frame);
        let counters = Arc::new(Counters {
            queue: sock.queue(),
            ..Counters::default()
        });
        Ok(XskDriver {
            sock: Some(sock),
            pool: pool.clone(),
            inflight: InFlight::new(pool),
            max_len,
            descs: Vec::with_capacity(64),
            stopped: false,
            paused: false,
            unkicked: 0,
            kick_batch: KICK_BATCH,
            counters,
        })
    }

    pub(crate) fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// The socket (`None` once closed).
    pub fn socket(&self) -> Option<&XskSocket> {
        self.sock.as_ref()
    }

    /// Longest packet accepted: the MTU plus the Ethernet header, at most a frame.
    pub fn max_len(&self) -> u32 {
        self.max_len
    }

    /// This driver's counters: packets and bytes put on the TX ring, completions reaped,
    /// frames in the kernel, refusals, ring-full stops and kick errors.
    pub fn stats(&self) -> XskDriverStats {
        self.counters.snapshot()
    }

    /// The link failure a kick of this socket reported ([`Error::LinkDown`]: the interface went
    /// down or disappeared), if any; it stays set for the socket's life.
    pub fn link_error(&self) -> Option<Error> {
        let ifname = self.sock.as_ref().map_or("?", |s| s.ifname());
        self.counters.link_error(ifname)
    }

    /// Frames in the kernel now.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Descriptors queued between kicks (default [`KICK_BATCH`]; 1 kicks on every `xmit`).
    pub fn set_kick_batch(&mut self, n: u32) {
        self.kick_batch = n.max(1);
    }

    /// Kicks the kernel if descriptors wait and it asks for a wakeup.
    fn kick(&mut self) {
        self.unkicked = 0;
        if let Some(sock) = self.sock.as_mut() {
            if let Err(e) = sock.kick_if_needed() {
                self.counters.kick_failed(&e);
            }
        }
    }

    /// Stops or restarts the queue on our side (`netif_tx_stop_queue`): while paused the
    /// engine leaves packets queued in the qdisc.
    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// Kicks the kernel if TX descriptors wait and it asks for a wakeup, then reaps
    /// completions in batches, each frame going home to its owner; returns how many. A failed
    /// kick is counted ([`link_error`](Self::link_error) keeps a link failure) and the
    /// completions that did arrive are reaped all the same.
    pub fn reap(&mut self) -> usize {
        self.kick();
        self.take_completions()
    }

    /// [`reap`](Self::reap) without the kick.
    fn take_completions(&mut self) -> usize {
        let Some(sock) = self.sock.as_mut() else {
            return 0;
        };
        let (pool, inflight) = (&self.pool, &mut self.inflight);
        let (mut done, mut bad) = (0u64, 0u64);
        loop {
            let n = sock.take_completions(REAP_BATCH, |addr| match inflight.take(addr) {
                Some(a) => match pool.skb_from_addr(a) {
                    // The remote-free path: back to the owner's cache or defer list.
                    Ok(skb) => {
                        drop(skb);
                        done += 1;
                    }
                    Err(_) => bad += 1,
                },
                None => bad += 1,
            });
            if n < REAP_BATCH as usize {
                break;
            }
        }
        Counters::add(&self.counters.completed, done);
        Counters::add(&self.counters.bad_completions, bad);
        self.counters
            .in_flight
            .store(self.inflight.len() as u64, Ordering::Relaxed);
        done as usize
    }

    /// Kicks the kernel if TX descriptors wait, reaps completions, and re-evaluates whether the
    /// TX ring is full. Returns whether the queue was stopped before (the caller then wakes it).
    pub fn service(&mut self) -> bool {
        let was = self.stopped;
        // Kick, then reap, which kicks again if descriptors still wait: one kick moves at most
        // the copy-mode budget (32 frames by default).
        self.kick();
        self.reap();
        if let Some(sock) = self.sock.as_mut() {
            self.stopped = sock.tx_free(1) == 0;
        }
        was
    }

    /// Closes the socket (dropping this driver's reference to the UMEM).
    pub(crate) fn close_socket(&mut self) -> Option<XskSocket> {
        self.reap();
        self.stopped = true;
        self.sock.take()
    }

    /// Takes back every frame still in the kernel. Call only once every socket of the UMEM is
    /// closed (the kernel then no longer touches the frames). Returns how many.
    pub(crate) fn reclaim(&mut self) -> usize {
        debug_assert!(self.sock.is_none());
        let pool = &self.pool;
        let mut n = 0;
        for addr in self.inflight.drain() {
            if let Ok(skb) = pool.skb_from_addr(addr) {
                drop(skb);
                n += 1;
            }
        }
        self.counters.in_flight.store(0, Ordering::Relaxed);
        n
    }
}

impl Driver<Skb> for XskDriver {
    fn xmit(&mut self, batch: &mut Fifo<Skb>, to_free: &mut ToFree<Skb>) -> TxResult {
        if self.paused {
            return TxResult {
                sent: 0,
                stopped: true,
            };
        }
        let Some(sock) = self.sock.as_mut() else {
            // Closed: nothing can be sent any more.
            while let Some(skb) = batch.pop_front() {
                to_free.drop_packet(skb, DropReason::DriverError);
            }
            return TxResult {
                sent: 0,
                stopped: true,
            };
        };
        let want = batch.len() as u32;
        if sock.tx_free(want) < want {
            // The kernel takes TX descriptors on a kick (copy mode), freeing ring room; reaping
            // first frees the completion-ring room it needs for that.
            self.reap();
        }
        let Some(sock) = self.sock.as_mut() else {
            return TxResult {
                sent: 0,
                stopped: true,
            };
        };
        let room = sock.tx_free(want);
        self.descs.clear();
        let (mut refused, mut bytes) = (0u64, 0u64);
        while (self.descs.len() as u32) < room {
            let Some(skb) = batch.pop_front() else { break };
            let len = skb.len() as u32;
            if len == 0 || len > self.max_len || !skb.belongs_to(&self.pool) {
                refused += 1;
                to_free.drop_packet(skb, DropReason::DriverError);
                continue;
            }
            bytes += u64::from(len);
            let addr = self.inflight.send(skb);
            self.descs.push(XdpDesc::new(addr, len));
        }
        let n = sock.produce_tx(&self.descs);
        // `room` entries were free and only this producer fills the ring.
        debug_assert_eq!(n, self.descs.len());
        self.unkicked += n as u32;
        if self.unkicked >= self.kick_batch || !batch.is_empty() {
            self.kick();
            // Keep the completion ring short, as the minimal loop does: a full one makes the
            // kernel refuse to send, and every frame reaped here is one the producer can reuse.
            // It kicks again if descriptors still wait (one kick moves at most the budget).
            self.reap();
        }
        let c = &self.counters;
        Counters::add(&c.sent, n as u64);
        Counters::add(&c.bytes, bytes);
        Counters::add(&c.refused, refused);
        c.in_flight
            .store(self.inflight.len() as u64, Ordering::Relaxed);
        self.stopped = !batch.is_empty();
        if self.stopped {
            Counters::add(&c.ring_full, 1);
        }
        TxResult {
            sent: n,
            stopped: self.stopped,
        }
    }

    fn is_stopped(&self) -> bool {
        self.paused || self.stopped
    }
}

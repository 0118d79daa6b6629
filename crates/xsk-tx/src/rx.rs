//! [`XskRx`]: AF_XDP receive into pool frames — the fill ring is fed with frames allocated from the
//! pool (`Skb::into_addr`), and each RX descriptor becomes the same frame's `Skb` again
//! ([`Pool::skb_from_rx`](skb_pool::Pool::skb_from_rx)) with its data window set to the packet.
//! Dropping that `Skb` on any thread returns the frame to the pool through its remote-free path,
//! like a completed TX frame: the page_pool recycling of a NIC driver's RX path.

use skb_pool::{Pool, PoolHandle, Skb};

use crate::error::{Error, Result};
use crate::pool_umem::InFlight;
use crate::socket::{SocketConfig, XskSocket};
use crate::umem::Umem;

/// Counters of an [`XskRx`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XskRxStats {
    /// Frames given to the kernel through the fill ring.
    pub filled: u64,
    /// Packets received.
    pub received: u64,
    /// RX descriptors that matched no frame of ours (nothing freed), or named one with a length
    /// past its frame (that frame went home unread).
    pub bad_descs: u64,
    /// Frames in the kernel now (fill ring, or being written).
    pub in_kernel: u64,
}

/// One receiving AF_XDP socket over a pool's region (its own UMEM).
#[derive(Debug)]
pub struct XskRx {
    sock: Option<XskSocket>,
    umem: Option<Umem>,
    pool: Pool,
    inflight: InFlight,
    stats: XskRxStats,
    addrs: Vec<u64>,
}

impl XskRx {
    /// Registers `pool`'s region as a UMEM and binds a socket with an RX ring on `queue` of
    /// `ifname` (`cfg`'s TX ring may be 0). Received packets start `XDP_PACKET_HEADROOM`
    /// (256) bytes into their frame. Traffic reaches it only once an
    /// [`XdpRedirect`](crate::XdpRedirect) program is attached and the socket registered.
    ///
    /// # Errors
    ///
    /// As [`Umem::from_pool`] and [`XskSocket::bind`].
    pub fn open(pool: &Pool, ifname: &str, queue: u32, cfg: &SocketConfig) -> Result<XskRx> {
        let umem = Umem::from_pool(pool, 0)?;
        let sock = XskSocket::bind(&umem, ifname, queue, cfg)?;
        Ok(XskRx {
            sock: Some(sock),
            umem: Some(umem),
            pool: pool.clone(),
            inflight: InFlight::new(pool),
            stats: XskRxStats::default(),
            addrs: Vec::with_capacity(64),
        })
    }

    /// The socket, to register in an XSKMAP (`None` once closed).
    pub fn socket(&self) -> Option<&XskSocket> {
        self.sock.as_ref()
    }

    /// Allocates up to `max` frames from `handle` (as many as the fill ring takes) and gives
    /// them to the kernel; returns how many. Frames the ring did not take go back to the pool
    /// at once, so a short fill loses nothing: it can happen right after a receive, before the
    /// kernel has released the fill-ring slots of the frames it just wrote (see
    /// [`XskSocket::fill`]); call again on the next poll.
    ///
    /// # Errors
    ///
    /// [`Error::WrongPool`] if `handle` is not of this receiver's pool (nothing filled); as
    /// [`XskSocket::fill`]: frames that did not go on the ring come back to the pool, and if
    /// the wakeup after filling failed, those that did ([`Error::queued`] of them, counted in
    /// the stats) are the kernel's.
    pub fn fill(&mut self, handle: &mut PoolHandle, max: usize) -> Result<usize> {
        if !handle.pool().ptr_eq(&self.pool) {
            return Err(Error::WrongPool {
                what: "XskRx::fill",
            });
        }
        let mut done = 0;
        while done < max {
            let Some(sock) = self.sock.as_mut() else {
                break;
            };
            let room = (sock.fill_free() as usize).min(max - done).min(64);
            if room == 0 {
                break;
            }
            self.addrs.clear();
            for _ in 0..room {
                match handle.alloc() {
                    Ok(skb) => self.addrs.push(self.inflight.send(skb)),
                    Err(_) => break,
                }
            }
            let got = self.addrs.len();
            let n = match sock.fill(&self.addrs) {
                Ok(n) => n,
                Err(e) => {
                    // What went on the ring before the wakeup failed is the kernel's now.
                    self.take_back_unfilled(e.queued());
                    self.stats.filled += (done + e.queued()) as u64;
                    self.stats.in_kernel = self.inflight.len() as u64;
                    return Err(e);
                }
            };
            self.take_back_unfilled(n);
            done += n;
            if n < got || got < room {
                break;
            }
        }
        self.stats.filled += done as u64;
        self.stats.in_kernel = self.inflight.len() as u64;
        Ok(done)
    }

    /// Frames of `self.addrs[from..]` that did not go on the fill ring come back.
    fn take_back_unfilled(&mut self, from: usize) {
        for &a in &self.addrs[from..] {
            if self.inflight.take(a).is_some() {
                drop(self.pool.skb_from_addr(a));
            }
        }
    }

    /// Takes up to `max` received packets, handing each to `f` as an `Skb` whose data is the
    /// packet (Ethernet header first); returns how many. Drop the `Skb` (on any thread) to
    /// return the frame to the pool.
    ///
    /// # Errors
    ///
    /// As [`XskSocket::receive`].
    pub fn receive(&mut self, max: u32, mut f: impl FnMut(Skb)) -> Result<usize> {
        let Some(sock) = self.sock.as_mut() else {
            return Ok(0);
        };
        let (pool, inflight) = (&self.pool, &mut self.inflight);
        let (mut got, mut bad) = (0u64, 0u64);
        let n = sock.receive(max, |d| {
            let Some(addr) = inflight.take(d.addr) else {
                // No frame of ours went out with this address: nothing to take back.
                bad += 1;
                return;
            };
            match pool.skb_from_rx(d.addr, d.len) {
                Ok(skb) => {
                    got += 1;
                    f(skb);
                }
                Err(_) => {
                    // Ours, but the descriptor is bad (a length past the frame): the frame
                    // goes home unread rather than stay out of every list.
                    bad += 1;
                    drop(pool.skb_from_addr(addr));
                }
            }
        })?;
        self.stats.received += got;
        self.stats.bad_descs += bad;
        self.stats.in_kernel = self.inflight.len() as u64;
        Ok(n)
    }

    /// Waits up to `timeout_ms` for packets; returns whether any are ready.
    ///
    /// # Errors
    ///
    /// As [`XskSocket::poll_rx`].
    pub fn poll(&self, timeout_ms: i32) -> Result<bool> {
        match &self.sock {
            Some(s) => s.poll_rx(timeout_ms),
            None => Ok(false),
        }
    }

    /// Frames filled, packets received, bad descriptors and frames now in the kernel.
    pub fn stats(&self) -> XskRxStats {
        self.stats
    }

    /// Closes the socket and the UMEM, then takes back every frame the kernel still held (in
    /// the fill ring or the RX ring); returns how many. If the UMEM is still open elsewhere (a
    /// clone taken through [`socket`](Self::socket)), the kernel may still write those frames:
    /// they stay out of the pool ([`stats`](Self::stats)' `in_kernel`) and 0 is returned.
    pub fn close(mut self) -> usize {
        self.close_inner()
    }

    fn close_inner(&mut self) -> usize {
        drop(self.sock.take());
        if !self.umem.take().is_some_and(|u| u.is_last_handle()) {
            // The UMEM is still open elsewhere (a clone taken through the socket): the kernel
            // may still write these frames, so they stay out of the pool.
            self.stats.in_kernel = self.inflight.len() as u64;
            return 0;
        }
        let pool = &self.pool;
        let mut n = 0;
        for a in self.inflight.drain() {
            if let Ok(skb) = pool.skb_from_addr(a) {
                drop(skb);
                n += 1;
            }
        }
        self.stats.in_kernel = 0;
        n
    }
}

impl Drop for XskRx {
    fn drop(&mut self) {
        self.close_inner();
    }
}

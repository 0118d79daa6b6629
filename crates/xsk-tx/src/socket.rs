//! One AF_XDP socket bound to one queue of one interface: libxdp's `xsk_socket__create` /
//! `xsk_socket__create_shared`, with the TX ring and completion ring (and optionally the RX
//! ring and fill ring) mapped, and the kick (`sendto`) and RX wakeup (`recvfrom`) of
//! `xdpsock`'s `kick_tx` / `xsk_ring_prod__needs_wakeup` logic.
//!
//! The first socket bound with a [`Umem`] is the UMEM's own socket; each later one shares it
//! (`XDP_SHARED_UMEM`) and gets its own fill and completion rings, as the kernel requires for
//! another queue or device. Shared sockets inherit the first socket's copy/zero-copy mode and
//! need_wakeup setting.

use std::fmt;
use std::mem::size_of;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::error::{Error, MIN_TX_BUDGET, NEEDS_XSK, Result};
use crate::ring::{ConsRing, ProdRing, RingParts};
use crate::sync::AtomicU32;
use crate::sys;
use crate::umem::{OwnerState, Umem, socket_error};

/// Ethernet header length: the part of a frame the MTU does not count.
const ETH_HLEN: u32 = 14;
/// `XDP_MAX_TX_SKB_BUDGET` of `if_xdp.h` (Linux 6.17): frames one copy-mode kick may send.
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// One packet descriptor of the TX and RX rings (`struct xdp_desc`): `len` bytes at UMEM offset
/// `addr`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XdpDesc {
    /// Offset of the packet's first byte in the UMEM.
    pub addr: u64,
    /// Packet length in bytes.
    pub len: u32,
    /// `XDP_PKT_CONTD` and friends; zero for single-buffer packets.
    pub options: u32,
}

impl XdpDesc {
    /// A single-buffer descriptor.
    pub fn new(addr: u64, len: u32) -> XdpDesc {
        XdpDesc {
            addr,
            len,
            options: 0,
        }
    }
}

const _: () = assert!(size_of::<XdpDesc>() == size_of::<libc::xdp_desc>());

/// How to bind: the `XDP_COPY` / `XDP_ZEROCOPY` bind flags.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// Force copy mode (`XDP_COPY`): works on every driver.
    Copy,
    /// Demand zero-copy (`XDP_ZEROCOPY`); fails with [`Error::ZeroCopyUnsupported`] if the
    /// driver cannot.
    ZeroCopy,
    /// Let the kernel try zero-copy and fall back to copy (no flag).
    #[default]
    Auto,
}

/// The mode a socket obtained (`XDP_OPTIONS_ZEROCOPY` of `getsockopt(XDP_OPTIONS)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// The kernel copies frames between the UMEM and socket buffers.
    Copy,
    /// The driver DMAs straight from and into the UMEM.
    ZeroCopy,
}

/// Ring sizes and bind flags of one socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketConfig {
    tx_size: u32,
    comp_size: u32,
    rx_size: u32,
    fill_size: u32,
    mode: BindMode,
    need_wakeup: bool,
}

impl Default for SocketConfig {
    /// TX 2048, completion 2048, no RX, fill 2048, [`BindMode::Auto`], need_wakeup on.
    fn default() -> Self {
        SocketConfig {
            tx_size: 2048,
            comp_size: 2048,
            rx_size: 0,
            fill_size: 2048,
            mode: BindMode::Auto,
            need_wakeup: true,
        }
    }
}

impl SocketConfig {
    /// The defaults (see [`SocketConfig::default`]).
    pub fn new() -> Self {
        Self::default()
    }
    /// TX ring entries (a power of two), or 0 for a receive-only socket.
    pub fn tx_size(mut self, n: u32) -> Self {
        self.tx_size = n;
        self
    }
    /// Completion ring entries (a power of two).
    pub fn comp_size(mut self, n: u32) -> Self {
        self.comp_size = n;
        self
    }
    /// RX ring entries (a power of two), or 0 (the default) for no RX ring.
    pub fn rx_size(mut self, n: u32) -> Self {
        self.rx_size = n;
        self
    }
    /// Fill ring entries (a power of two). The kernel wants a fill ring even on TX-only sockets.
    pub fn fill_size(mut self, n: u32) -> Self {
        self.fill_size = n;
        self
    }
    /// Copy, zero-copy or automatic.
    pub fn mode(mut self, mode: BindMode) -> Self {
        self.mode = mode;
        self
    }
    /// Whether to ask for `XDP_USE_NEED_WAKEUP` (kick only when the kernel asks). A socket
    /// that shares another's UMEM gets the setting that UMEM's own socket was bound with, as
    /// the kernel applies it ([`XskSocket::uses_need_wakeup`] says which).
    pub fn need_wakeup(mut self, on: bool) -> Self {
        self.need_wakeup = on;
        self
    }

    /// Checks every ring size; returns the first bad one.
    pub fn validate(&self) -> Result<()> {
        let check = |ring, size: u32, optional: bool| {
            if (optional && size == 0) || size.is_power_of_two() {
                Ok(())
            } else {
                Err(Error::BadRingSize { ring, size })
            }
        };
        check("TX", self.tx_size, true)?;
        check("completion", self.comp_size, false)?;
        check("RX", self.rx_size, true)?;
        check("fill", self.fill_size, false)?;
        if self.tx_size == 0 && self.rx_size == 0 {
            return Err(Error::BadRingSize {
                ring: "TX and RX",
                size: 0,
            });
        }
        Ok(())
    }
}

/// Kernel counters of one socket (`struct xdp_statistics`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XdpStatistics {
    /// Received packets dropped for reasons other than a full RX ring or empty fill ring.
    pub rx_dropped: u64,
    /// Invalid RX descriptors.
    pub rx_invalid_descs: u64,
    /// Invalid TX descriptors (bad address or length): a bug on our side.
    pub tx_invalid_descs: u64,
    /// Received packets dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a packet arrived.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the TX ring was found empty on a kick.
    pub tx_ring_empty_descs: u64,
}

/// Who owns the socket's descriptor.
enum SockFd {
    /// The UMEM's own socket: the descriptor lives in the [`Umem`].
    Umem,
    /// A socket sharing the UMEM.
    Own(OwnedFd),
}

/// An AF_XDP socket bound to one queue of one interface.
///
/// `Send`: create it inside the interface's network namespace, then use it from any thread.
/// The UMEM's own socket stays open (and bound) until the [`Umem`] itself is dropped, since
/// sockets sharing the UMEM refer to it.
pub struct XskSocket {
    // Rings first: they are unmapped before the descriptor closes.
    tx: Option<ProdRing<XdpDesc>>,
    comp: ConsRing<u64>,
    rx: Option<ConsRing<XdpDesc>>,
    fill: ProdRing<u64>,
    fd: SockFd,
    umem: Umem,
    ifname: String,
    ifindex: u32,
    queue: u32,
    mode: XdpMode,
    need_wakeup: bool,
    mtu: u32,
    in_flight: u64,
    kicks: u64,
}

impl fmt::Debug for XskSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XskSocket")
            .field("ifname", &self.ifname)
            .field("queue", &self.queue)
            .field("mode", &self.mode)
            .field("need_wakeup", &self.need_wakeup)
            .field("shared", &matches!(self.fd, SockFd::Own(_)))
            .field("in_flight", &self.in_flight)
            .field("tx", &self.tx)
            .field("comp", &self.comp)
            .field("rx", &self.rx)
            .field("fill", &self.fill)
            .finish_non_exhaustive()
    }
}

/// Maps one ring of `size` entries of `T` at page offset `pgoff`.
fn map_ring<T>(
    fd: BorrowedFd<'_>,
    off: &libc::xdp_ring_offset,
    size: u32,
    pgoff: libc::off_t,
) -> Result<RingParts<T>> {
    // The kernel lays a ring out as three u32 words (producer, consumer, flags) before the
    // descriptors; offsets outside that shape would make the pointers below point anywhere.
    let word = |o: u64| o % 4 == 0 && o + 4 <= off.desc;
    if !(word(off.producer)
        && word(off.consumer)
        && word(off.flags)
        && off.desc % align_of::<T>() as u64 == 0
        && off.desc < 1 << 20)
    {
        return Err(Error::Io {
            op: "getsockopt(XDP_MMAP_OFFSETS) (ring offsets out of shape)",
            source: std::io::Error::from(std::io::ErrorKind::InvalidData),
        });
    }
    let len = off.desc as usize + size as usize * size_of::<T>();
    let map = sys::Mmap::ring(fd, len, pgoff).map_err(|e| Error::Io {
        op: "mmap(ring)",
        source: e,
    })?;
    let base = map.ptr();
    let at = |o: u64| {
        // SAFETY: every offset was checked above to lie inside `len` bytes, the mapping's
        // length: the words below `desc`, the descriptors from it.
        unsafe { base.add(o as usize) }
    };
    Ok(RingParts {
        producer: at(off.producer).cast::<AtomicU32>(),
        consumer: at(off.consumer).cast::<AtomicU32>(),
        flags: at(off.flags).cast::<AtomicU32>(),
        ring: at(off.desc).cast(),
        size,
        backing: Box::new(map),
    })
}

/// Sets the size of ring `name` on `fd`.
fn set_ring(fd: BorrowedFd<'_>, name: libc::c_int, size: u32, op: &'static str) -> Result<()> {
    sys::setsockopt(fd, libc::SOL_XDP, name, &size).map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL) => Error::BadRingSize { ring: op, size },
        _ => Error::sys("setsockopt(XDP ring size)", NEEDS_XSK, e),
    })
}

/// Everything created before `bind`.
struct Unbound {
    tx: Option<ProdRing<XdpDesc>>,
    comp: ConsRing<u64>,
    rx: Option<ConsRing<XdpDesc>>,
    fill: ProdRing<u64>,
}

fn create_rings(fd: BorrowedFd<'_>, cfg: &SocketConfig) -> Result<Unbound> {
    set_ring(fd, libc::XDP_UMEM_FILL_RING, cfg.fill_size, "fill")?;
    set_ring(
        fd,
        libc::XDP_UMEM_COMPLETION_RING,
        cfg.comp_size,
        "completion",
    )?;
    if cfg.rx_size > 0 {
        set_ring(fd, libc::XDP_RX_RING, cfg.rx_size, "RX")?;
    }
    if cfg.tx_size > 0 {
        set_ring(fd, libc::XDP_TX_RING, cfg.tx_size, "TX")?;
    }
    let (off, len) =
        sys::getsockopt::<libc::xdp_mmap_offsets>(fd, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS)
            .map_err(|e| Error::sys("getsockopt(XDP_MMAP_OFFSETS)", NEEDS_XSK, e))?;
    if len < size_of::<libc::xdp_mmap_offsets>() {
        return Err(Error::KernelTooOld {
            what: "ring flags (need_wakeup, Linux 5.4)",
            source: std::io::Error::from_raw_os_error(libc::ENOPROTOOPT),
        });
    }
    // The UMEM rings' page offsets (1 << 32 and up) need a 64-bit `off_t`.
    const _: () = assert!(
        size_of::<libc::off_t>() == 8,
        "xsk-tx needs a 64-bit off_t (the AF_XDP UMEM ring offsets do not fit in 32 bits)"
    );
    let fill_pgoff = libc::XDP_UMEM_PGOFF_FILL_RING as libc::off_t;
    let comp_pgoff = libc::XDP_UMEM_PGOFF_COMPLETION_RING as libc::off_t;
    // The parts below come from `map_ring`, which maps exactly the kernel's ring of `size`
    // entries at the offsets the kernel reported; this socket is the only user-space user of
    // each ring, and the kernel follows the ring protocol.
    let fill_parts = map_ring::<u64>(fd, &off.fr, cfg.fill_size, fill_pgoff)?;
    // SAFETY: see above.
    let fill = unsafe { ProdRing::from_parts(fill_parts) };
    let comp_parts = map_ring::<u64>(fd, &off.cr, cfg.comp_size, comp_pgoff)?;
    // SAFETY: see above.
    let comp = unsafe { ConsRing::from_parts(comp_parts) };
    let rx = if cfg.rx_size > 0 {
        let parts = map_ring::<XdpDesc>(fd, &off.rx, cfg.rx_size, libc::XDP_PGOFF_RX_RING)?;
        // SAFETY: see above.
        Some(unsafe { ConsRing::from_parts(parts) })
    } else {
        None
    };
    let tx = if cfg.tx_size > 0 {
        let parts = map_ring::<XdpDesc>(fd, &off.tx, cfg.tx_size, libc::XDP_PGOFF_TX_RING)?;
        // SAFETY: see above.
        Some(unsafe { ProdRing::from_parts(parts) })
    } else {
        None
    };
    Ok(Unbound { tx, comp, rx, fill })
}

/// A wakeup's failure after `n` descriptors went onto `ring`: [`Error::Queued`] if the call
/// queued any (they are the kernel's now), else the failure itself.
fn queued(ring: &'static str, n: usize, e: Error) -> Error {
    if n == 0 {
        e
    } else {
        Error::Queued {
            ring,
            queued: n,
            source: Box::new(e),
        }
    }
}

/// Looks the interface up: index, queue count (if the driver reports it) and MTU.
fn lookup(ifname: &str) -> Result<(u32, Option<u32>, u32)> {
    let ifindex = sys::if_nametoindex(ifname).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV | libc::ENXIO) => Error::NoSuchInterface {
            name: ifname.to_owned(),
        },
        _ => Error::Io {
            op: "if_nametoindex",
            source: e,
        },
    })?;
    let queues = sys::if_channels(ifname)
        .ok()
        .map(|(rx, tx)| rx.max(tx))
        .filter(|&q| q > 0);
    let mtu = sys::if_mtu(ifname).map_err(|e| Error::Io {
        op: "ioctl(SIOCGIFMTU)",
        source: e,
    })?;
    Ok((ifindex, queues, mtu))
}

/// Number of queues of `ifname` (the larger of its RX and TX counts, from ethtool's
/// `ETHTOOL_GCHANNELS`), in the calling thread's network namespace.
pub fn queue_count(ifname: &str) -> Result<u32> {
    sys::if_nametoindex(ifname).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV | libc::ENXIO) => Error::NoSuchInterface {
            name: ifname.to_owned(),
        },
        _ => Error::Io {
            op: "if_nametoindex",
            source: e,
        },
    })?;
    let (rx, tx) = sys::if_channels(ifname).map_err(|e| Error::Io {
        op: "ioctl(ETHTOOL_GCHANNELS)",
        source: e,
    })?;
    Ok(rx.max(tx))
}

impl XskSocket {
    /// Binds one socket per queue in `queues` of `ifname`, all sharing `umem`: the first one
    /// (if the UMEM is fresh) owns it, the others share it.
    pub fn bind_queues(
        umem: &Umem,
        ifname: &str,
        queues: std::ops::Range<u32>,
        cfg: &SocketConfig,
    ) -> Result<Vec<XskSocket>> {
        queues
            .map(|q| XskSocket::bind(umem, ifname, q, cfg))
            .collect()
    }

    /// Creates a socket on queue `queue` of `ifname` with `umem` and binds it.
    ///
    /// The first socket bound with a UMEM uses the UMEM's own socket; later ones share it
    /// (`XDP_SHARED_UMEM`) and take the first one's mode. Must run in the network namespace
    /// that holds `ifname`.
    ///
    /// ```no_run
    /// use xsk_tx::{BindMode, MmapRegion, SocketConfig, Umem, XskSocket};
    ///
    /// let umem = Umem::new(MmapRegion::new(4096, 2048)?, 0)?;
    /// let sock = XskSocket::bind(&umem, "eth0", 0, &SocketConfig::new().mode(BindMode::Auto))?;
    /// println!("bound in {:?} mode", sock.mode());
    /// # Ok::<(), xsk_tx::Error>(())
    /// ```
    pub fn bind(umem: &Umem, ifname: &str, queue: u32, cfg: &SocketConfig) -> Result<XskSocket> {
        cfg.validate()?;
        let (ifindex, queues, mtu) = lookup(ifname)?;
        if let Some(count) = queues {
            if queue >= count {
                return Err(Error::QueueOutOfRange {
                    ifname: ifname.to_owned(),
                    queue,
                    count,
                });
            }
        }
        let mut owner = umem.inner.owner.lock().unwrap_or_else(|p| p.into_inner());
        let (fd, shared, need_wakeup) = match *owner {
            OwnerState::Free => (SockFd::Umem, false, cfg.need_wakeup),
            OwnerState::Bound {
                ifindex: i,
                queue: q,
                ..
            } if (i, q) == (ifindex, queue) => {
                // The kernel would share the owner's fill and completion rings here, which
                // this API does not model: one socket per queue.
                return Err(Error::Busy {
                    what: format!(
                        "queue {queue} of {ifname} is already bound by this UMEM's own socket; \
                         bind one socket per queue"
                    ),
                });
            }
            // The kernel applies the owner's need_wakeup to every socket sharing its UMEM
            // (`xp_assign_dev_shared`): a shared socket that assumed it on, with the owner
            // bound without it, would wait for a wakeup request that never comes.
            OwnerState::Bound { need_wakeup, .. } => (
                SockFd::Own(sys::xdp_socket().map_err(socket_error)?),
                true,
                need_wakeup,
            ),
            OwnerState::Spent => {
                return Err(Error::Busy {
                    what: "this UMEM's own socket failed to bind earlier and cannot be bound \
                           again; register a new Umem"
                        .into(),
                });
            }
        };
        let raw = match &fd {
            SockFd::Umem => umem.inner.fd.as_fd(),
            SockFd::Own(f) => f.as_fd(),
        };
        let spend = |owner: &mut OwnerState| {
            if !shared {
                *owner = OwnerState::Spent;
            }
        };
        let rings = match create_rings(raw, cfg) {
            Ok(r) => r,
            Err(e) => {
                spend(&mut owner);
                return Err(e);
            }
        };
        let mut flags: u16 = 0;
        if shared {
            flags |= libc::XDP_SHARED_UMEM;
        } else {
            flags |= match cfg.mode {
                BindMode::Copy => libc::XDP_COPY,
                BindMode::ZeroCopy => libc::XDP_ZEROCOPY,
                BindMode::Auto => 0,
            };
            if cfg.need_wakeup {
                flags |= libc::XDP_USE_NEED_WAKEUP;
            }
        }
        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: if shared {
                use std::os::fd::AsRawFd;
                umem.inner.fd.as_raw_fd() as u32
            } else {
                0
            },
        };
        if let Err(e) = sys::bind_xdp(raw, &addr) {
            spend(&mut owner);
            return Err(match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) if cfg.mode == BindMode::ZeroCopy && !shared => {
                    Error::ZeroCopyUnsupported {
                        ifname: ifname.to_owned(),
                    }
                }
                Some(libc::ENODEV) => Error::NoSuchInterface {
                    name: ifname.to_owned(),
                },
                Some(libc::EBUSY) => Error::Busy {
                    what: format!(
                        "queue {queue} of {ifname} already has an AF_XDP socket (or a UMEM in \
                         another mode); close it or use another queue"
                    ),
                },
                Some(libc::EINVAL) if queues.is_none() => Error::Io {
                    op: "bind(AF_XDP) (is the queue id in range?)",
                    source: e,
                },
                _ => Error::sys("bind(AF_XDP)", NEEDS_XSK, e),
            });
        }
        if !shared {
            *owner = OwnerState::Bound {
                ifindex,
                queue,
                need_wakeup,
            };
        }
        drop(owner);
        let (opts, _) = sys::getsockopt::<libc::xdp_options>(raw, libc::SOL_XDP, libc::XDP_OPTIONS)
            .map_err(|e| Error::Io {
                op: "getsockopt(XDP_OPTIONS)",
                source: e,
            })?;
        let mode = if opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0 {
            XdpMode::ZeroCopy
        } else {
            XdpMode::Copy
        };
        if cfg.mode == BindMode::ZeroCopy && mode == XdpMode::Copy {
            // A shared socket inherits the UMEM owner's copy mode.
            return Err(Error::ZeroCopyUnsupported {
                ifname: ifname.to_owned(),
            });
        }
        Ok(XskSocket {
            tx: rings.tx,
            comp: rings.comp,
            rx: rings.rx,
            fill: rings.fill,
            fd,
            umem: umem.clone(),
            ifname: ifname.to_owned(),
            ifindex,
            queue,
            mode,
            need_wakeup,
            mtu,
            in_flight: 0,
            kicks: 0,
        })
    }

    /// The socket's descriptor (for `poll`, or an XSKMAP entry).
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.fd {
            SockFd::Umem => self.umem.inner.fd.as_fd(),
            SockFd::Own(f) => f.as_fd(),
        }
    }

    /// The mode the kernel gave this socket.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// The UMEM this socket transmits from and receives into.
    pub fn umem(&self) -> &Umem {
        &self.umem
    }

    /// Interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Interface index in the socket's network namespace.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Queue id.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Whether this socket shares another socket's UMEM (`XDP_SHARED_UMEM`).
    pub fn is_shared(&self) -> bool {
        matches!(self.fd, SockFd::Own(_))
    }

    /// The interface MTU as read at bind time.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Frames transmitted whose completions have not been reaped yet.
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// Kicks (`sendto` calls) made so far.
    pub fn kicks(&self) -> u64 {
        self.kicks
    }

    /// Checks that a TX descriptor is one the kernel will send and complete: inside the UMEM,
    /// within one frame, within the MTU, at least one byte long and without option bits (the
    /// kernel's `xp_aligned_validate_desc` skips a descriptor of length 0 or with options it
    /// does not expect, and never completes it).
    pub fn check_tx(&self, desc: &XdpDesc) -> Result<()> {
        if desc.len == 0 || desc.options != 0 {
            return Err(Error::BadDescriptor {
                addr: desc.addr,
                len: desc.len,
                options: desc.options,
            });
        }
        self.umem.check(desc.addr, desc.len)?;
        if desc.len > self.mtu + ETH_HLEN {
            return Err(Error::LargerThanMtu {
                len: desc.len,
                mtu: self.mtu,
            });
        }
        Ok(())
    }

    /// Puts as many of `descs` on the TX ring as fit, in order, and kicks the kernel if it
    /// asks for it; returns how many were queued. Each queued frame belongs to the kernel until
    /// its address comes back from [`reap_completions`](Self::reap_completions).
    ///
    /// Every descriptor is checked first; a bad one fails the whole call, with nothing queued.
    ///
    /// # Errors
    ///
    /// [`check_tx`](Self::check_tx)'s errors and [`Error::NoRing`], with nothing queued; if
    /// the kick after queueing fails, [`Error::Queued`] with the count queued (those frames
    /// are the kernel's), or the kick's own error if this call queued nothing.
    pub fn transmit(&mut self, descs: &[XdpDesc]) -> Result<usize> {
        if self.tx.is_none() {
            return Err(Error::NoRing { ring: "TX" });
        }
        for d in descs {
            self.check_tx(d)?;
        }
        let tx = self.tx.as_mut().ok_or(Error::NoRing { ring: "TX" })?;
        let n = tx.produce(descs);
        self.in_flight += n as u64;
        self.kick_if_needed().map_err(|e| queued("TX", n, e))?;
        Ok(n)
    }

    /// Whether the TX ring holds descriptors the kernel has not taken and wants a kick for.
    fn tx_wants_kick(&mut self) -> bool {
        let need_wakeup = self.need_wakeup;
        match self.tx.as_mut() {
            Some(tx) => tx.outstanding() > 0 && (!need_wakeup || tx.needs_wakeup()),
            None => false,
        }
    }

    /// Free entries of the TX ring, reading the kernel's consumer index only if fewer than
    /// `want` are known to be free (`xsk_prod_nb_free`); 0 without a TX ring.
    pub fn tx_free(&mut self, want: u32) -> u32 {
        self.tx.as_mut().map_or(0, |tx| tx.nb_free(want))
    }

    /// Puts descriptors already checked by the caller on the TX ring (as many as fit) and
    /// counts them in flight, without kicking: the caller kicks (`kick_if_needed`) when it has
    /// queued enough, as a NIC driver rings its doorbell once per `xmit_more` burst.
    pub(crate) fn produce_tx(&mut self, descs: &[XdpDesc]) -> usize {
        let Some(tx) = self.tx.as_mut() else {
            return 0;
        };
        let n = tx.produce(descs);
        self.in_flight += n as u64;
        n
    }

    /// Whether this socket was configured with `XDP_USE_NEED_WAKEUP`.
    pub fn uses_need_wakeup(&self) -> bool {
        self.need_wakeup
    }

    pub(crate) fn kick_if_needed(&mut self) -> Result<()> {
        if self.tx_wants_kick() {
            self.kick()
        } else {
            Ok(())
        }
    }

    /// `sendto(MSG_DONTWAIT)`: makes the kernel process the TX ring. `EAGAIN`, `EBUSY` and
    /// `ENOBUFS` mean the kernel is busy or moved its per-call budget (32 frames by default)
    /// and wants another kick later: progress, not errors.
    ///
    /// # Errors
    ///
    /// [`Error::LinkDown`] when the interface is down (`ENETDOWN`) or gone (`ENXIO`,
    /// `ENODEV`); [`Error::Io`] for anything else.
    pub fn kick(&mut self) -> Result<()> {
        self.kicks += 1;
        match sys::kick_tx(self.as_fd()) {
            Ok(()) => Ok(()),
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR) => Ok(()),
                Some(errno @ (libc::ENETDOWN | libc::ENXIO | libc::ENODEV)) => {
                    Err(Error::LinkDown {
                        ifname: self.ifname.clone(),
                        queue: self.queue,
                        gone: errno != libc::ENETDOWN,
                        source: e,
                    })
                }
                _ => Err(Error::Io {
                    op: "sendto(AF_XDP kick)",
                    source: e,
                }),
            },
        }
    }

    /// Takes up to `max` completed TX frame addresses off the completion ring, handing each to
    /// `f`; returns how many. Kicks the kernel first if TX descriptors are still waiting.
    ///
    /// # Errors
    ///
    /// The kick's ([`kick`](Self::kick)), returned after the completions were taken anyway:
    /// every address handed to `f` is the caller's whatever the result.
    pub fn reap_completions(&mut self, max: u32, f: impl FnMut(u64)) -> Result<usize> {
        let kicked = self.kick_if_needed();
        let n = self.take_completions(max, f);
        kicked.map(|()| n)
    }

    /// Takes up to `max` completed TX frame addresses off the completion ring, without a kick
    /// (for a caller that kicks on its own schedule); returns how many.
    pub(crate) fn take_completions(&mut self, max: u32, f: impl FnMut(u64)) -> usize {
        let n = self.comp.consume(max, f);
        self.in_flight = self.in_flight.saturating_sub(n as u64);
        n
    }

    /// Gives frames to the kernel for receiving (fill ring); returns how many fit, a prefix of
    /// `addrs`. The rest are still the caller's: keep them and offer them again.
    ///
    /// A fill can take fewer addresses than offered even when the caller never has more frames
    /// out than the ring holds: the kernel publishes a received packet on the RX ring before it
    /// releases the fill-ring slot the packet's frame came from (`xsk_flush` submits RX, then
    /// releases the fill consumer), so a frame refilled the moment it shows up on RX can find
    /// the ring still full for a moment.
    ///
    /// # Errors
    ///
    /// [`Error::BadAddress`] if an address is not a frame of this socket's UMEM
    /// (nothing is filled then); if the wakeup after filling fails, [`Error::Queued`] with the
    /// count filled (`addrs[..queued]` are the kernel's, the rest still the caller's).
    pub fn fill(&mut self, addrs: &[u64]) -> Result<usize> {
        for &a in addrs {
            self.umem.check(a, 0)?;
        }
        let n = self.fill.produce(addrs);
        if n > 0 && self.need_wakeup && self.fill.needs_wakeup() {
            self.wake_rx().map_err(|e| queued("fill", n, e))?;
        }
        Ok(n)
    }

    /// Free entries of the fill ring.
    pub fn fill_free(&mut self) -> u32 {
        let size = self.fill.size();
        self.fill.nb_free(size)
    }

    /// Takes up to `max` received packets off the RX ring, handing each descriptor to `f`;
    /// returns how many. Each frame is the caller's again (to read, then refill or reuse).
    pub fn receive(&mut self, max: u32, f: impl FnMut(XdpDesc)) -> Result<usize> {
        let rx = self.rx.as_mut().ok_or(Error::NoRing { ring: "RX" })?;
        Ok(rx.consume(max, f))
    }

    /// `recvfrom(MSG_DONTWAIT)`: tells the kernel new fill entries are there.
    pub fn wake_rx(&mut self) -> Result<()> {
        match sys::wake_rx(self.as_fd()) {
            Ok(()) => Ok(()),
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR) => Ok(()),
                _ => Err(Error::Io {
                    op: "recvfrom(AF_XDP wakeup)",
                    source: e,
                }),
            },
        }
    }

    /// Waits up to `timeout_ms` for received packets (`POLLIN`); returns whether any are ready.
    pub fn poll_rx(&self, timeout_ms: i32) -> Result<bool> {
        let rev = sys::poll(self.as_fd(), libc::POLLIN, timeout_ms).map_err(|e| Error::Io {
            op: "poll(AF_XDP)",
            source: e,
        })?;
        Ok(rev & libc::POLLIN != 0)
    }

    /// Sets how many frames one kick may send in copy mode (`XDP_MAX_TX_SKB_BUDGET`, Linux
    /// 6.17; the default is 32, the TX ring size the maximum). Larger budgets mean fewer
    /// `sendto` calls per packet.
    pub fn set_tx_budget(&self, budget: u32) -> Result<()> {
        let max = self.tx.as_ref().ok_or(Error::NoRing { ring: "TX" })?.size();
        if !(MIN_TX_BUDGET..=max).contains(&budget) {
            return Err(Error::BadTxBudget { budget, max });
        }
        sys::setsockopt(self.as_fd(), libc::SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &budget).map_err(|e| {
            match e.raw_os_error() {
                Some(libc::ENOPROTOOPT) => Error::KernelTooOld {
                    what: "XDP_MAX_TX_SKB_BUDGET (Linux 6.17)",
                    source: e,
                },
                // The kernel answers EACCES for an out-of-range budget.
                Some(libc::EACCES | libc::EINVAL) => Error::BadTxBudget { budget, max },
                _ => Error::Io {
                    op: "setsockopt(XDP_MAX_TX_SKB_BUDGET)",
                    source: e,
                },
            }
        })
    }

    /// Whether the kernel currently asks for a kick on the TX ring (`XDP_RING_NEED_WAKEUP`).
    /// In copy mode it always does.
    pub fn tx_needs_wakeup(&self) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.needs_wakeup())
    }

    /// The kernel's counters for this socket.
    pub fn statistics(&self) -> Result<XdpStatistics> {
        let (s, _) = sys::getsockopt::<libc::xdp_statistics>(
            self.as_fd(),
            libc::SOL_XDP,
            libc::XDP_STATISTICS,
        )
        .map_err(|e| Error::Io {
            op: "getsockopt(XDP_STATISTICS)",
            source: e,
        })?;
        Ok(XdpStatistics {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        })
    }

    /// The TX ring itself, for callers that reserve and write descriptors in place. Frames
    /// submitted this way are not checked and not counted in [`in_flight`](Self::in_flight).
    pub fn tx_ring(&mut self) -> Option<&mut ProdRing<XdpDesc>> {
        self.tx.as_mut()
    }

    /// The completion ring itself.
    pub fn completion_ring(&mut self) -> &mut ConsRing<u64> {
        &mut self.comp
    }
}

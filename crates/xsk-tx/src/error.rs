//! The crate's error type: every failure names its cause and, where there is one, the fix.

use std::fmt;
use std::io;

/// What went wrong, with the cause and the fix in the message.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The interface does not exist in the calling thread's network namespace.
    NoSuchInterface {
        /// The name asked for.
        name: String,
    },
    /// The operation needs privileges the process lacks.
    PermissionDenied {
        /// What was attempted (`"AF_XDP socket"`, `"bpf(BPF_PROG_LOAD)"`, ...).
        op: &'static str,
        /// The privileges it needs.
        needs: &'static str,
        /// The errno.
        source: io::Error,
    },
    /// The queue id is not below the device's queue count.
    QueueOutOfRange {
        /// Interface name.
        ifname: String,
        /// Queue asked for.
        queue: u32,
        /// Queues the device has (the larger of its RX and TX counts).
        count: u32,
    },
    /// Zero-copy was demanded but the driver cannot do it for this queue.
    ZeroCopyUnsupported {
        /// Interface name.
        ifname: String,
    },
    /// A packet does not fit in a UMEM frame.
    FrameTooLarge {
        /// Packet length in bytes.
        len: u32,
        /// Largest packet a frame holds at that offset.
        max: u32,
    },
    /// A TX descriptor the kernel would skip without ever completing it, so that its frame
    /// would not come back: a zero length, or option bits (these sockets are bound without
    /// `XDP_USE_SG` and without TX metadata, so they take none).
    BadDescriptor {
        /// The descriptor's address (an offset into the UMEM).
        addr: u64,
        /// Its length in bytes.
        len: u32,
        /// Its option bits.
        options: u32,
    },
    /// Descriptors went onto a ring, and then waking the kernel for them failed. The
    /// `queued` frames belong to the kernel now: on the TX ring until their completions are
    /// reaped (or the socket closes), on the fill ring until packets arrive in them (or the
    /// socket closes). [`Error::queued`] reads the count from any error.
    Queued {
        /// Which ring (`"TX"` or `"fill"`).
        ring: &'static str,
        /// Descriptors the call put on the ring.
        queued: usize,
        /// Why the wakeup failed (for instance [`Error::LinkDown`]).
        source: Box<Error>,
    },
    /// Frames of one pool were offered to a socket whose UMEM is not that pool's region: the
    /// kernel would read or write whatever frames sit at the same offsets there.
    WrongPool {
        /// What was given the pool (`"XskRx::fill"`, `"XskDriver::new"`).
        what: &'static str,
    },
    /// A packet is longer than the interface's MTU plus the Ethernet header.
    LargerThanMtu {
        /// Packet length in bytes (with the Ethernet header).
        len: u32,
        /// The interface's MTU (without the Ethernet header).
        mtu: u32,
    },
    /// A frame address lies outside the UMEM.
    BadAddress {
        /// The address (an offset into the UMEM).
        addr: u64,
        /// The UMEM's length in bytes.
        umem_len: u64,
    },
    /// The kernel has no AF_XDP (or lacks a needed feature).
    KernelTooOld {
        /// What was missing.
        what: &'static str,
        /// The errno.
        source: io::Error,
    },
    /// A ring size is zero or not a power of two.
    BadRingSize {
        /// Which ring.
        ring: &'static str,
        /// The size asked for.
        size: u32,
    },
    /// A copy-mode TX budget outside what the kernel accepts.
    BadTxBudget {
        /// The budget asked for.
        budget: u32,
        /// The largest accepted: the TX ring size.
        max: u32,
    },
    /// The UMEM geometry is invalid.
    BadUmem {
        /// Why, and what is accepted.
        reason: String,
    },
    /// The socket has no ring of that kind (it was configured without it).
    NoRing {
        /// Which ring.
        ring: &'static str,
    },
    /// The queue is already bound by another AF_XDP socket, or the UMEM's own socket was used
    /// up by an earlier failed bind.
    Busy {
        /// What was busy.
        what: String,
    },
    /// The frame pool's frames cannot be a UMEM's chunks.
    PoolFrameSize {
        /// The pool's frame size.
        frame_size: usize,
        /// The largest chunk the kernel accepts (the page size).
        max: usize,
    },
    /// A transmit queue's configuration was refused.
    Config(qdisc::ConfigError),
    /// The device was asked for a queue it does not have, or for none.
    BadQueueCount {
        /// Queues asked for.
        asked: u32,
        /// Queues the interface has.
        available: u32,
    },
    /// The interface of a bound socket went down (`ENETDOWN`: `ip link set DEV down`) or
    /// disappeared (`ENXIO`/`ENODEV`: unregistered, e.g. its veth peer or namespace was
    /// deleted) while the socket was in use. Frames on the TX ring stay there: an
    /// [`XskDevice`](crate::XskDevice) deactivates the queue and takes every frame back when
    /// it closes; a bare [`XskSocket`](crate::XskSocket)'s caller owns them again once the
    /// socket, and every socket sharing its UMEM, is closed.
    LinkDown {
        /// Interface name.
        ifname: String,
        /// The NIC queue of the socket that saw it.
        queue: u32,
        /// Whether the interface is gone (unregistered) rather than down.
        gone: bool,
        /// The errno.
        source: io::Error,
    },
    /// Any other system call failure.
    Io {
        /// What was attempted.
        op: &'static str,
        /// The errno.
        source: io::Error,
    },
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Smallest `XDP_MAX_TX_SKB_BUDGET` the kernel accepts (its default).
pub(crate) const MIN_TX_BUDGET: u32 = 32;

/// Privileges for AF_XDP sockets.
pub(crate) const NEEDS_XSK: &str = "root, or CAP_NET_RAW and CAP_NET_ADMIN (plus CAP_IPC_LOCK \
                                    or a large enough RLIMIT_MEMLOCK for the UMEM)";
/// Privileges for loading and attaching BPF programs.
pub(crate) const NEEDS_BPF: &str = "root, or CAP_BPF and CAP_NET_ADMIN";

impl Error {
    /// Classifies a failed system call `op`: permission errnos become
    /// [`Error::PermissionDenied`] with `needs`, the rest [`Error::Io`].
    pub(crate) fn sys(op: &'static str, needs: &'static str, source: io::Error) -> Error {
        match source.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => Error::PermissionDenied { op, needs, source },
            _ => Error::Io { op, source },
        }
    }

    /// The underlying errno, if this error came from a system call.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::PermissionDenied { source, .. }
            | Error::KernelTooOld { source, .. }
            | Error::LinkDown { source, .. }
            | Error::Io { source, .. } => source.raw_os_error(),
            Error::Queued { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// Descriptors the failed call had already put on a ring ([`Error::Queued`]); 0 for every
    /// other error, which left the rings as they were.
    pub fn queued(&self) -> usize {
        match self {
            Error::Queued { queued, .. } => *queued,
            _ => 0,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoSuchInterface { name } => write!(
                f,
                "no network interface named {name:?} in this network namespace; check `ip link` \
                 (run inside the namespace the interface lives in)"
            ),
            Error::PermissionDenied { op, needs, source } => {
                write!(f, "{op}: permission denied ({source}); this needs {needs}")
            }
            Error::QueueOutOfRange {
                ifname,
                queue,
                count,
            } => write!(
                f,
                "queue {queue} is out of range: {ifname} has {count} queue(s) (0..{count}); pick \
                 a smaller queue id or raise the count (`ethtool -L {ifname} combined N`, or \
                 `numtxqueues/numrxqueues` for veth)"
            ),
            Error::ZeroCopyUnsupported { ifname } => write!(
                f,
                "zero-copy AF_XDP is not supported by the driver of {ifname}; bind in copy mode \
                 (BindMode::Copy) or let the kernel choose (BindMode::Auto)"
            ),
            Error::FrameTooLarge { len, max } => write!(
                f,
                "packet of {len} bytes does not fit in its UMEM frame (at most {max} bytes at \
                 that offset); use larger frames or shorter packets"
            ),
            Error::BadDescriptor { addr, len, options } => write!(
                f,
                "TX descriptor at {addr:#x} (length {len}, options {options:#x}) would be skipped \
                 by the kernel and never completed: a packet needs at least one byte, and these \
                 sockets take no option bits (no XDP_USE_SG, no TX metadata); use \
                 `XdpDesc::new(addr, len)` with len > 0"
            ),
            Error::Queued {
                ring,
                queued,
                source,
            } => write!(
                f,
                "{queued} descriptor(s) went onto the {ring} ring, then waking the kernel failed: \
                 {source}; those frames belong to the kernel until it hands them back (or the \
                 socket closes)"
            ),
            Error::WrongPool { what } => write!(
                f,
                "{what}: the pool is not the one whose region this socket's UMEM registers; use \
                 the Pool the UMEM was built from (`Umem::from_pool`, `XskRx::open`)"
            ),
            Error::LargerThanMtu { len, mtu } => write!(
                f,
                "packet of {len} bytes exceeds the interface MTU {mtu} plus the 14-byte Ethernet \
                 header; shorten it or raise the MTU (`ip link set DEV mtu N`)"
            ),
            Error::BadAddress { addr, umem_len } => write!(
                f,
                "frame address {addr:#x} is outside the UMEM of {umem_len} bytes; addresses are \
                 offsets from the start of the registered region"
            ),
            Error::KernelTooOld { what, source } => write!(
                f,
                "the kernel lacks {what} ({source}); AF_XDP needs Linux 5.4 or later built with \
                 CONFIG_XDP_SOCKETS=y; use the UDP drivers (UdpSendmmsg, UdpIoUring) instead"
            ),
            Error::BadRingSize { ring, size } => write!(
                f,
                "{ring} ring size {size} is invalid: it must be a non-zero power of two \
                 (e.g. 2048)"
            ),
            Error::BadTxBudget { budget, max } => write!(
                f,
                "TX budget {budget} is out of range: the kernel accepts {MIN_TX_BUDGET} to the TX \
                 ring size {max}"
            ),
            Error::BadUmem { reason } => write!(f, "invalid UMEM: {reason}"),
            Error::NoRing { ring } => write!(
                f,
                "this socket has no {ring} ring; configure one in SocketConfig before binding"
            ),
            Error::Busy { what } => write!(f, "{what}"),
            Error::PoolFrameSize { frame_size, max } => write!(
                f,
                "the frame pool's {frame_size}-byte frames cannot be UMEM chunks: AF_XDP takes \
                 a power of two from 2048 to the page size {max}; build the pool with \
                 `Pool::builder().frame_size(2048)` (or 4096)"
            ),
            Error::Config(e) => write!(f, "transmit queue configuration refused: {e}"),
            Error::BadQueueCount { asked, available } => write!(
                f,
                "cannot open {asked} queue(s): the interface has {available}; ask for 1 to \
                 {available}, or raise its queue count (`ethtool -L DEV combined N`)"
            ),
            Error::LinkDown {
                ifname,
                queue,
                gone: false,
                source,
            } => write!(
                f,
                "queue {queue} of {ifname}: the link went down under the AF_XDP socket \
                 ({source}); its queued packets are dropped; bring the link up (`ip link set \
                 {ifname} up`), close the device (every frame comes back to the pool) and open \
                 a new one"
            ),
            Error::LinkDown {
                ifname,
                queue,
                gone: true,
                source,
            } => write!(
                f,
                "queue {queue} of {ifname}: the interface disappeared under the AF_XDP socket \
                 ({source}; deleted, or its veth peer or namespace was); its queued packets are \
                 dropped and the socket is unbound for good; close the device (every frame comes \
                 back to the pool) and open a new one once the interface exists again"
            ),
            Error::Io { op, source } => write!(f, "{op} failed: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::PermissionDenied { source, .. }
            | Error::KernelTooOld { source, .. }
            | Error::LinkDown { source, .. }
            | Error::Io { source, .. } => Some(source),
            Error::Config(e) => Some(e),
            Error::Queued { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::PermissionDenied { .. } => io::ErrorKind::PermissionDenied,
            Error::NoSuchInterface { .. } => io::ErrorKind::NotFound,
            Error::Busy { .. } => io::ErrorKind::ResourceBusy,
            Error::ZeroCopyUnsupported { .. } | Error::KernelTooOld { .. } => {
                io::ErrorKind::Unsupported
            }
            Error::Io { source, .. } | Error::LinkDown { source, .. } => source.kind(),
            Error::Queued { source, .. } => match source.raw_os_error() {
                Some(errno) => io::Error::from_raw_os_error(errno).kind(),
                None => io::ErrorKind::Other,
            },
            _ => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}

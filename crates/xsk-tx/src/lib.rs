//! AF_XDP transmit (and receive) on real NIC queues, on our own thin `libc` layer.
//!
//! A [`Umem`] registers packet memory the caller owns (the frame pool's region, or an
//! [`MmapRegion`]); an [`XskSocket`] binds one queue of one interface with that UMEM and
//! exposes the kernel's rings as batch calls: [`XskSocket::transmit`] puts `(addr, len)`
//! descriptors on the TX ring and kicks the kernel when it asks, [`XskSocket::reap_completions`]
//! returns the addresses of sent frames, and [`XskSocket::fill`] / [`XskSocket::receive`] do
//! the same for RX, which needs an [`XdpRedirect`] program on the interface. [`UdpSendmmsg`] and
//! [`UdpIoUring`] send the same payloads through ordinary UDP sockets, for machines or
//! interfaces without AF_XDP.
//!
//! ```no_run
//! use std::net::Ipv4Addr;
//! use xsk_tx::packet::UdpFlow;
//! use xsk_tx::{MmapRegion, SocketConfig, Umem, XdpDesc, XskSocket};
//!
//! let umem = Umem::new(MmapRegion::new(4096, 2048)?, 0)?;
//! let mut sock = XskSocket::bind(&umem, "eth0", 0, &SocketConfig::new())?;
//! let flow = UdpFlow {
//!     src_mac: [0x02, 0, 0, 0, 0, 1],
//!     dst_mac: [0x02, 0, 0, 0, 0, 2],
//!     src_ip: Ipv4Addr::new(10, 0, 0, 1),
//!     dst_ip: Ipv4Addr::new(10, 0, 0, 2),
//!     src_port: 4000,
//!     dst_port: 5000,
//! };
//! // SAFETY: frame 0 is in no ring yet, and nothing else refers to it.
//! let frame = unsafe { umem.frame_mut(0, umem.frame_size())? };
//! let len = flow.write(frame, b"hello").expect("fits in a frame");
//! sock.transmit(&[XdpDesc::new(0, len as u32)])?;
//! while sock.in_flight() > 0 {
//!     sock.reap_completions(64, |addr| assert_eq!(addr, 0))?;
//! }
//! # Ok::<(), xsk_tx::Error>(())
//! ```

/// Ring index arithmetic of `xsk.h` (cached producer/consumer cursors), pure.
pub mod cursor;
/// Producer and consumer rings over shared memory (`xsk_ring_prod` / `xsk_ring_cons`).
#[cfg_attr(lockless_loom, allow(dead_code))]
mod ring;
/// Atomics and ring slots, switched to loom under `--cfg lockless_loom`.
mod sync;

/// `XskDevice`: N queues, each a `TxQueue` + qdisc + `XskDriver`, picked by flow hash.
#[cfg(not(lockless_loom))]
mod device;
/// `XskDriver`: one socket as a `qdisc::Driver<Skb>` (descriptors, kicks, completions).
#[cfg(not(lockless_loom))]
mod driver;
/// The error type: cause and fix in every message.
#[cfg(not(lockless_loom))]
mod error;
/// Netns/veth test harness: private namespaces, veth pairs, `setns` threads.
#[cfg(not(lockless_loom))]
#[doc(hidden)]
pub mod netns;
/// Ethernet/IPv4/UDP frame building and parsing with correct checksums.
#[cfg(not(lockless_loom))]
pub mod packet;
/// The frame pool's region as the UMEM, and the table of frames in the kernel.
#[cfg(not(lockless_loom))]
mod pool_umem;
/// `XskRx`: receiving into pool frames (fill ring fed from the pool, `skb_from_rx`).
#[cfg(not(lockless_loom))]
mod rx;
/// One AF_XDP socket per queue (`xsk_socket__create`), TX/completion/RX/fill.
#[cfg(not(lockless_loom))]
mod socket;
/// System call wrappers (`socket`, `setsockopt`, `mmap`, `bind`, `sendto`, `bpf`, ...).
#[cfg(not(lockless_loom))]
mod sys;
/// UDP senders through ordinary sockets: `sendmmsg` and io_uring.
#[cfg(not(lockless_loom))]
mod udp;
/// `qdisc::Driver<Skb>` for the UDP senders (payload after the frame's headers).
#[cfg(not(lockless_loom))]
mod udp_driver;
/// UMEM registration (`xsk_umem__create`) and an owned mmap region.
#[cfg(not(lockless_loom))]
mod umem;
/// The minimal XDP program redirecting into an XSKMAP, loaded with raw `bpf()`.
#[cfg(not(lockless_loom))]
mod xdp;

#[cfg(not(lockless_loom))]
pub use device::{CloseReport, XskDevice, XskDeviceStats, XskQueueStats, XskTxQueue};
#[cfg(not(lockless_loom))]
pub use driver::{KICK_BATCH, XskDriver, XskDriverStats};
#[cfg(not(lockless_loom))]
pub use error::{Error, Result};
#[cfg(not(lockless_loom))]
pub use pool_umem::PoolRegion;
pub use ring::{ConsRing, ProdRing};
#[cfg(not(lockless_loom))]
pub use rx::{XskRx, XskRxStats};
#[cfg(not(lockless_loom))]
pub use socket::{BindMode, SocketConfig, XdpDesc, XdpMode, XdpStatistics, XskSocket, queue_count};
#[cfg(not(lockless_loom))]
pub use udp::{UdpIoUring, UdpSendmmsg};
#[cfg(not(lockless_loom))]
pub use umem::{MIN_FRAME_SIZE, MmapRegion, Umem, UmemRegion, XDP_PACKET_HEADROOM};
#[cfg(not(lockless_loom))]
pub use xdp::{AttachMode, XdpRedirect, XskMap};

/// The crate README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

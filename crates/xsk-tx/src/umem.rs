//! UMEM registration: the packet memory the kernel reads TX frames from and writes RX frames
//! into (libxdp's `xsk_umem__create`, `XDP_UMEM_REG`).
//!
//! The memory is owned elsewhere — by the frame pool, or by [`MmapRegion`] in tests and benches
//! — and described by the [`UmemRegion`] contract, or by raw parts through
//! [`Umem::from_raw_parts`]. Registration happens on an AF_XDP socket, which becomes the first
//! [`XskSocket`](crate::XskSocket) bound with this UMEM; later sockets share it
//! (`XDP_SHARED_UMEM`). Frame addresses are byte offsets from the region's start.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::error::{Error, NEEDS_XSK, Result};
use crate::sys;

/// Smallest frame (chunk) size the kernel accepts.
pub const MIN_FRAME_SIZE: u32 = 2048;
/// `XDP_PACKET_HEADROOM`: what the kernel reserves in front of each received frame.
pub const XDP_PACKET_HEADROOM: u32 = 256;

/// Memory that can be registered as a UMEM.
///
/// # Safety
///
/// Implementors promise that:
/// - `base()` points to `len()` bytes that are valid for reads and writes and stay mapped at
///   the same address for as long as the value lives;
/// - `base()` is page-aligned and `len()` is a multiple of `frame_size()`;
/// - nothing else frees or remaps that memory while the value lives.
pub unsafe trait UmemRegion: Send + Sync {
    /// Start of the region.
    fn base(&self) -> NonNull<u8>;
    /// Length of the region in bytes.
    fn len(&self) -> usize;
    /// Size of one frame (the UMEM chunk size): a power of two from 2048 to the page size.
    fn frame_size(&self) -> u32;
    /// Whether the region is empty (never, for a valid UMEM).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An anonymous, page-aligned, zeroed mapping split into equal frames: a stand-in for the frame
/// pool's region in tests and benches.
#[derive(Debug)]
pub struct MmapRegion {
    map: sys::Mmap,
    frame_size: u32,
}

impl MmapRegion {
    /// Maps `frame_count` frames of `frame_size` bytes.
    pub fn new(frame_count: u32, frame_size: u32) -> Result<MmapRegion> {
        check_frame_size(frame_size)?;
        let len = (frame_count as usize)
            .checked_mul(frame_size as usize)
            .filter(|&l| l > 0)
            .ok_or_else(|| Error::BadUmem {
                reason: format!("{frame_count} frames of {frame_size} bytes: need at least one"),
            })?;
        let map = sys::Mmap::anonymous(len).map_err(|e| Error::Io {
            op: "mmap(UMEM)",
            source: e,
        })?;
        Ok(MmapRegion { map, frame_size })
    }
}

// SAFETY: the mapping is owned by `self`, page-aligned (mmap), `frame_count * frame_size`
// long, and unmapped only on drop.
unsafe impl UmemRegion for MmapRegion {
    fn base(&self) -> NonNull<u8> {
        self.map.ptr()
    }
    fn len(&self) -> usize {
        self.map.len()
    }
    fn frame_size(&self) -> u32 {
        self.frame_size
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

fn check_frame_size(frame_size: u32) -> Result<()> {
    let page = page_size();
    if !frame_size.is_power_of_two() || frame_size < MIN_FRAME_SIZE || frame_size as usize > page {
        return Err(Error::BadUmem {
            reason: format!(
                "frame size {frame_size} must be a power of two from {MIN_FRAME_SIZE} to the \
                 page size {page}"
            ),
        });
    }
    Ok(())
}

/// What became of the UMEM's own socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnerState {
    /// Not bound yet: the next socket bound with this UMEM is this one.
    Free,
    /// Bound to `(ifindex, queue)`: later sockets share the UMEM through it.
    Bound {
        /// Interface index it is bound to.
        ifindex: u32,
        /// Queue it is bound to.
        queue: u32,
        /// Whether it was bound with `XDP_USE_NEED_WAKEUP`: sockets sharing the UMEM inherit
        /// that setting from it, whatever their own configuration says.
        need_wakeup: bool,
    },
    /// A bind on it failed after its rings were created; it cannot be bound again.
    Spent,
}

pub(crate) struct UmemInner {
    /// The AF_XDP socket the UMEM is registered on.
    pub(crate) fd: OwnedFd,
    pub(crate) owner: Mutex<OwnerState>,
    base: NonNull<u8>,
    len: usize,
    frame_size: u32,
    headroom: u32,
    _region: Option<Box<dyn UmemRegion>>,
}

// SAFETY: the region pointer is only dereferenced through `unsafe` frame accessors whose
// callers guarantee exclusive ownership of the frame; the rest is an fd and plain numbers.
unsafe impl Send for UmemInner {}
// SAFETY: as above.
unsafe impl Sync for UmemInner {}

/// A registered UMEM; cheap to clone (shared by every socket bound with it).
#[derive(Clone)]
pub struct Umem {
    pub(crate) inner: Arc<UmemInner>,
}

impl fmt::Debug for Umem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Umem")
            .field("base", &self.inner.base)
            .field("len", &self.inner.len)
            .field("frame_size", &self.inner.frame_size)
            .field("headroom", &self.inner.headroom)
            .finish_non_exhaustive()
    }
}

impl Umem {
    /// Registers `region` with the kernel, keeping it alive for as long as the UMEM and any
    /// socket using it live. `headroom` bytes in front of each received packet are left free.
    ///
    /// Must run in the network namespace of the interfaces it will be bound to.
    pub fn new<R: UmemRegion + 'static>(region: R, headroom: u32) -> Result<Umem> {
        let (base, len, frame_size) = (region.base(), region.len(), region.frame_size());
        Self::register(base, len, frame_size, headroom, Some(Box::new(region)))
    }

    /// Registers memory described by raw parts.
    ///
    /// # Safety
    ///
    /// - `base` points to `len` bytes valid for reads and writes, page-aligned;
    /// - the memory stays mapped and is not freed until this `Umem`, all its clones and every
    ///   socket bound with it are dropped;
    /// - frames are accessed only by their owner while they are in no ring.
    pub unsafe fn from_raw_parts(
        base: NonNull<u8>,
        len: usize,
        frame_size: u32,
        headroom: u32,
    ) -> Result<Umem> {
        Self::register(base, len, frame_size, headroom, None)
    }

    fn register(
        base: NonNull<u8>,
        len: usize,
        frame_size: u32,
        headroom: u32,
        region: Option<Box<dyn UmemRegion>>,
    ) -> Result<Umem> {
        check_frame_size(frame_size)?;
        if (base.as_ptr() as usize) % page_size() != 0 {
            return Err(Error::BadUmem {
                reason: "the region must be page-aligned".into(),
            });
        }
        if len == 0 || len % frame_size as usize != 0 {
            return Err(Error::BadUmem {
                reason: format!(
                    "length {len} must be a non-zero multiple of the frame size {frame_size}"
                ),
            });
        }
        if headroom >= frame_size - XDP_PACKET_HEADROOM {
            return Err(Error::BadUmem {
                reason: format!(
                    "headroom {headroom} leaves no room for data: it must be below frame size \
                     minus {XDP_PACKET_HEADROOM} ({})",
                    frame_size - XDP_PACKET_HEADROOM
                ),
            });
        }
        let fd = sys::xdp_socket().map_err(socket_error)?;
        let reg = libc::xdp_umem_reg {
            addr: base.as_ptr() as u64,
            len: len as u64,
            chunk_size: frame_size,
            headroom,
            flags: 0,
            tx_metadata_len: 0,
        };
        sys::setsockopt(fd.as_fd(), libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)
            .map_err(|e| Error::sys("setsockopt(XDP_UMEM_REG)", NEEDS_XSK, e))?;
        Ok(Umem {
            inner: Arc::new(UmemInner {
                fd,
                owner: Mutex::new(OwnerState::Free),
                base,
                len,
                frame_size,
                headroom,
                _region: region,
            }),
        })
    }

    /// Whether this is the last handle to the UMEM: dropping it then closes the UMEM's socket,
    /// and with it the last socket bound through it (each socket holds a handle), after which
    /// the kernel writes none of its frames again.
    pub(crate) fn is_last_handle(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// Whether this UMEM registers exactly `base..base + len`.
    pub(crate) fn covers(&self, base: *const u8, len: usize) -> bool {
        core::ptr::eq(self.inner.base.as_ptr().cast_const(), base) && self.inner.len == len
    }

    /// Size of one frame in bytes.
    pub fn frame_size(&self) -> u32 {
        self.inner.frame_size
    }

    /// Headroom the kernel leaves before received packets.
    pub fn headroom(&self) -> u32 {
        self.inner.headroom
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the region is empty (never for a registered UMEM).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Number of frames.
    pub fn frame_count(&self) -> u32 {
        (self.inner.len / self.inner.frame_size as usize) as u32
    }

    /// Address (offset) of frame `index`.
    pub fn frame_addr(&self, index: u32) -> u64 {
        u64::from(index) * u64::from(self.inner.frame_size)
    }

    /// The file descriptor of the socket the UMEM is registered on.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }

    /// Start of the frame holding `addr` (RX descriptors point past the headroom).
    pub fn frame_start(&self, addr: u64) -> u64 {
        addr - addr % u64::from(self.inner.frame_size)
    }

    /// Checks that `len` bytes at `addr` lie inside one frame; returns the byte offset.
    pub fn check(&self, addr: u64, len: u32) -> Result<usize> {
        let umem_len = self.inner.len as u64;
        if addr >= umem_len {
            return Err(Error::BadAddress { addr, umem_len });
        }
        let fs = u64::from(self.inner.frame_size);
        let max = fs - addr % fs;
        if u64::from(len) > max {
            return Err(Error::FrameTooLarge {
                len,
                max: max as u32,
            });
        }
        Ok(addr as usize)
    }

    /// The bytes of a frame, `len` bytes from `addr`.
    ///
    /// # Safety
    ///
    /// - the caller owns the frame: it is in no ring, so the kernel does not write it, and no
    ///   mutable reference to it exists.
    pub unsafe fn frame(&self, addr: u64, len: u32) -> Result<&[u8]> {
        let off = self.check(addr, len)?;
        // SAFETY: `check` keeps `off + len` inside the region, which is valid for reads while
        // `self` lives (registration contract); the caller owns the frame.
        Ok(unsafe { std::slice::from_raw_parts(self.inner.base.as_ptr().add(off), len as usize) })
    }

    /// The bytes of a frame for writing, `len` bytes from `addr`.
    ///
    /// # Safety
    ///
    /// - the caller owns the frame exclusively: it is in no ring and no other reference to it
    ///   exists while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn frame_mut(&self, addr: u64, len: u32) -> Result<&mut [u8]> {
        let off = self.check(addr, len)?;
        // SAFETY: `check` keeps `off + len` inside the region, valid for writes while `self`
        // lives (registration contract); the caller owns the frame exclusively.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.inner.base.as_ptr().add(off), len as usize)
        })
    }
}

/// Maps `socket(AF_XDP)` failures: no protocol means no AF_XDP in this kernel.
pub(crate) fn socket_error(e: std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT) => Error::KernelTooOld {
            what: "AF_XDP sockets",
            source: e,
        },
        _ => Error::sys("socket(AF_XDP)", NEEDS_XSK, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_errors_are_classified() {
        let old = socket_error(std::io::Error::from_raw_os_error(libc::EAFNOSUPPORT));
        assert!(matches!(old, Error::KernelTooOld { .. }), "{old}");
        assert!(old.to_string().contains("CONFIG_XDP_SOCKETS"), "{old}");
        let perm = socket_error(std::io::Error::from_raw_os_error(libc::EPERM));
        assert!(matches!(perm, Error::PermissionDenied { .. }), "{perm}");
        assert!(perm.to_string().contains("CAP_NET_ADMIN"), "{perm}");
    }

    #[test]
    fn frame_bounds_are_checked() {
        let r = MmapRegion::new(4, 2048).unwrap();
        assert_eq!(r.len(), 8192);
        assert!(!r.is_empty());
    }
}

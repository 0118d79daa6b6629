//! The frame pool's region as the UMEM (libxdp's `xsk_umem__create` over the caller's buffer):
//! frame `i` of the pool is chunk `i` of the UMEM, so the address an [`Skb`](skb_pool::Skb) hands
//! out with [`Skb::into_addr`](skb_pool::Skb::into_addr) is the descriptor address, and
//! [`Pool::skb_from_addr`](skb_pool::Pool::skb_from_addr) /
//! [`Pool::skb_from_rx`](skb_pool::Pool::skb_from_rx) turn completion and RX addresses back into
//! the same `Skb`, metadata and all.
//!
//! [`PoolRegion`] holds a [`Pool`](skb_pool::Pool) clone, so the pool (and its mapping) outlives
//! the UMEM and every socket bound with it.

use std::ptr::NonNull;

use skb_pool::{Pool, Skb};

use crate::error::{Error, Result};
use crate::umem::{MIN_FRAME_SIZE, Umem, UmemRegion, page_size};

/// The region of a [`Pool`], registrable as a UMEM; keeps the pool alive.
#[derive(Debug, Clone)]
pub struct PoolRegion {
    pool: Pool,
    base: NonNull<u8>,
}

impl PoolRegion {
    /// Wraps `pool`'s region, checking that its frames can be UMEM chunks.
    pub fn new(pool: &Pool) -> Result<PoolRegion> {
        let r = pool.region();
        let fs = r.frame_size();
        let max = page_size();
        if !fs.is_power_of_two() || fs < MIN_FRAME_SIZE as usize || fs > max {
            return Err(Error::PoolFrameSize {
                frame_size: fs,
                max,
            });
        }
        let base = NonNull::new(r.base()).ok_or_else(|| Error::BadUmem {
            reason: "the pool's region has a null base".into(),
        })?;
        Ok(PoolRegion {
            pool: pool.clone(),
            base,
        })
    }

    /// The frame pool whose region this UMEM registers.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

// SAFETY: the region is one page-aligned mmap of `frame_count × frame_size` bytes owned by the
// pool, unmapped only when the pool's last reference goes; `self.pool` is such a reference, so
// the memory stays mapped at `base` for as long as this value (and the UMEM holding it) lives.
// Frames are written only by whoever holds them (an `Skb`, or the kernel while in flight).
unsafe impl UmemRegion for PoolRegion {
    fn base(&self) -> NonNull<u8> {
        self.base
    }
    fn len(&self) -> usize {
        self.pool.region().len()
    }
    fn frame_size(&self) -> u32 {
        self.pool.region().frame_size() as u32
    }
}

// SAFETY: `Pool` is `Send + Sync`; the pointer is only reported to the kernel, never
// dereferenced here.
unsafe impl Send for PoolRegion {}
// SAFETY: as above.
unsafe impl Sync for PoolRegion {}

impl Umem {
    /// Registers `pool`'s region as a UMEM. `rx_headroom` bytes are left free in front of each
    /// received packet, beyond the kernel's own
    /// [`XDP_PACKET_HEADROOM`](crate::XDP_PACKET_HEADROOM); TX packets start wherever their `Skb`'s
    /// data starts (the pool's headroom).
    ///
    /// Must run in the network namespace of the interfaces it will be bound to.
    ///
    /// # Errors
    ///
    /// [`Error::PoolFrameSize`] if the pool's frames are larger than a page (AF_XDP chunks are
    /// 2048 bytes to a page), or what [`Umem::new`] returns.
    pub fn from_pool(pool: &Pool, rx_headroom: u32) -> Result<Umem> {
        Umem::new(PoolRegion::new(pool)?, rx_headroom)
    }

    /// Whether this UMEM registers `pool`'s region (so that the addresses its frames hand
    /// out name those frames here).
    pub fn is_region_of(&self, pool: &Pool) -> bool {
        let r = pool.region();
        self.covers(r.base().cast_const(), r.len())
    }
}

/// Frames this UMEM's user handed to the kernel, by frame index: the address each went out
/// with, so a completion or RX descriptor is matched to exactly one `Skb`, and so every frame
/// still in the kernel when the sockets close can be taken back.
#[derive(Debug)]
pub(crate) struct InFlight {
    addrs: Box<[u64]>,
    shift: u32,
    count: usize,
}

/// An empty entry of [`InFlight`].
const NONE: u64 = u64::MAX;

impl InFlight {
    pub(crate) fn new(pool: &Pool) -> InFlight {
        let r = pool.region();
        InFlight {
            addrs: vec![NONE; r.frame_count()].into_boxed_slice(),
            shift: r.frame_size().trailing_zeros(),
            count: 0,
        }
    }

    /// Hands `skb` to the kernel; returns its descriptor address.
    pub(crate) fn send(&mut self, skb: Skb) -> u64 {
        let idx = skb.frame_index() as usize;
        let addr = skb.into_addr();
        if let Some(slot) = self.addrs.get_mut(idx) {
            *slot = addr;
            self.count += 1;
        }
        addr
    }

    /// Takes back the frame holding `addr` if it is ours and in the kernel; returns the address
    /// it went out with.
    pub(crate) fn take(&mut self, addr: u64) -> Option<u64> {
        let slot = self.addrs.get_mut((addr >> self.shift) as usize)?;
        if *slot == NONE || (*slot >> self.shift) != (addr >> self.shift) {
            return None;
        }
        self.count -= 1;
        Some(std::mem::replace(slot, NONE))
    }

    /// Frames in the kernel.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Every address still out, emptied.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = u64> + '_ {
        self.count = 0;
        self.addrs
            .iter_mut()
            .filter(|a| **a != NONE)
            .map(|a| std::mem::replace(a, NONE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_pool_frames_are_refused() {
        let pool = Pool::builder()
            .frame_size(1 << 16)
            .frame_count(4)
            .build()
            .unwrap();
        let e = PoolRegion::new(&pool).unwrap_err();
        assert!(
            matches!(
                e,
                Error::PoolFrameSize {
                    frame_size: 65536,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("frame_size(2048)"), "{e}");
    }

    #[test]
    fn in_flight_table_matches_addresses() {
        let pool = Pool::builder().frame_count(8).build().unwrap();
        let mut h = pool.handle().unwrap();
        let mut t = InFlight::new(&pool);
        let skb = h.alloc().unwrap();
        let addr = t.send(skb);
        assert_eq!(t.len(), 1);
        assert_eq!(t.take(addr + 2048 * 8), None, "outside the region");
        assert_eq!(t.take(addr ^ 2048), None, "another frame");
        assert_eq!(t.take(addr), Some(addr));
        assert_eq!(t.take(addr), None, "a duplicate");
        drop(pool.skb_from_addr(addr).unwrap());
        let skb = h.alloc().unwrap();
        let a2 = t.send(skb);
        assert_eq!(t.drain().collect::<Vec<_>>(), vec![a2]);
        assert_eq!(t.len(), 0);
        drop(pool.skb_from_addr(a2).unwrap());
        drop(h);
        assert_eq!(pool.stats().free, 8);
    }
}

//! [`Region`]: the frame memory, one contiguous page-aligned mapping usable as an AF_XDP UMEM.
//!
//! `frame_count` frames of `frame_size` bytes (a power of two) sit back to back from
//! [`base`](Region::base); frame `i` starts at offset `i × frame_size`, which is also the
//! address the AF_XDP rings use for it. The mapping is anonymous and private, optionally backed
//! by huge pages (`MAP_HUGETLB`), and prefaulted (`MAP_POPULATE`) so the first packet through a
//! frame does not take a page fault. Under `--cfg lockless_loom` a page-aligned heap allocation
//! stands in for the mapping.
//!
//! Nothing but packet bytes lives here: the per-frame metadata and the chunk headers that turn a
//! metadata pointer into `base + index × frame_size` are in the side array (`meta.rs`), outside
//! the mapping the kernel may write.

use core::fmt;
use core::ptr::NonNull;

use crate::error::BuildError;

/// Size of the huge pages `MAP_HUGETLB` maps by default on x86-64 and arm64 (2 MiB).
pub(crate) const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Whether the region is backed by huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HugePages {
    /// Normal pages (the default).
    #[default]
    No,
    /// Huge pages or fail with [`BuildError::Mmap`] (`huge: true`), whose message says how to
    /// reserve them.
    Require,
    /// Huge pages if the system has them reserved, else normal pages: a fallback the caller
    /// chose explicitly. [`Region::is_huge`] says which one it got.
    Prefer,
}

/// The frame memory of a pool: one contiguous, page-aligned mapping.
///
/// Register it as an AF_XDP UMEM with `addr = base()`, `len = len()`,
/// `chunk_size = frame_size()`; frame addresses in the rings are offsets from `base()`.
pub struct Region {
    base: NonNull<u8>,
    len: usize,
    map_len: usize,
    frame_size: usize,
    frame_count: usize,
    huge: bool,
}

// SAFETY: the region is plain memory owned by the pool; who may touch which frame is decided by
// the frame state words, not by the thread that mapped it.
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` only exposes the base pointer and sizes.
unsafe impl Sync for Region {}

impl Region {
    /// Maps `frame_count × frame_size` bytes. Sizes are validated by the caller.
    pub(crate) fn map(
        frame_count: usize,
        frame_size: usize,
        huge: HugePages,
        populate: bool,
    ) -> Result<Region, BuildError> {
        let len = frame_count * frame_size;
        match huge {
            HugePages::No => Self::map_with(len, frame_size, frame_count, false, populate),
            HugePages::Require => Self::map_with(len, frame_size, frame_count, true, populate),
            HugePages::Prefer => Self::map_with(len, frame_size, frame_count, true, populate)
                .or_else(|_| Self::map_with(len, frame_size, frame_count, false, populate)),
        }
    }

    #[cfg(not(lockless_loom))]
    fn map_with(
        len: usize,
        frame_size: usize,
        frame_count: usize,
        huge: bool,
        populate: bool,
    ) -> Result<Region, BuildError> {
        let map_len = if huge {
            len.div_ceil(HUGE_PAGE_SIZE) * HUGE_PAGE_SIZE
        } else {
            len
        };
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if huge {
            flags |= libc::MAP_HUGETLB;
        }
        if populate {
            flags |= libc::MAP_POPULATE;
        }
        // SAFETY: an anonymous mapping at an address of the kernel's choosing touches no
        // existing memory; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(BuildError::Mmap {
                errno,
                huge,
                len: map_len,
            });
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or(BuildError::Mmap {
            errno: libc::ENOMEM,
            huge,
            len: map_len,
        })?;
        Ok(Region {
            base,
            len,
            map_len,
            frame_size,
            frame_count,
            huge,
        })
    }

    #[cfg(lockless_loom)]
    fn map_with(
        len: usize,
        frame_size: usize,
        frame_count: usize,
        huge: bool,
        _populate: bool,
    ) -> Result<Region, BuildError> {
        if huge {
            return Err(BuildError::Mmap {
                errno: 12,
                huge,
                len,
            });
        }
        let layout =
            std::alloc::Layout::from_size_align(len, 4096).map_err(|_| BuildError::Mmap {
                errno: 12,
                huge,
                len,
            })?;
        // SAFETY: `len` is non-zero (frame_count ≥ 1, frame_size ≥ 2048).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(ptr).ok_or(BuildError::Mmap {
            errno: 12,
            huge,
            len,
        })?;
        Ok(Region {
            base,
            len,
            map_len: len,
            frame_size,
            frame_count,
            huge,
        })
    }

    /// First byte of the region (page aligned; huge-page aligned if [`is_huge`](Region::is_huge)).
    #[inline]
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Usable length in bytes: `frame_count × frame_size`.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: a region has at least one frame. (Present for API symmetry with `len`.)
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes per frame (a power of two): the AF_XDP `chunk_size`.
    #[inline]
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// Number of frames.
    #[inline]
    pub fn frame_count(&self) -> usize {
        self.frame_count
    }

    /// Whether the mapping is backed by huge pages.
    #[inline]
    pub fn is_huge(&self) -> bool {
        self.huge
    }

    /// Pointer to the first byte of frame `index`: the layout the side array's chunk headers
    /// compute from an entry's address instead (checked against this in the tests).
    #[cfg(all(test, not(lockless_loom)))]
    pub(crate) fn frame_ptr(&self, index: u32) -> *mut u8 {
        // SAFETY (arithmetic only): index < frame_count, so the offset stays inside the mapping.
        self.base
            .as_ptr()
            .wrapping_add((index as usize) * self.frame_size)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        #[cfg(not(lockless_loom))]
        // SAFETY: `base`/`map_len` are exactly what mmap returned and nobody uses the region any
        // more: the pool drops it last, when no frame is out and no handle lives.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
        #[cfg(lockless_loom)]
        // SAFETY: allocated in `map_with` with this very layout; nobody uses it any more.
        unsafe {
            std::alloc::dealloc(
                self.base.as_ptr(),
                std::alloc::Layout::from_size_align_unchecked(self.map_len, 4096),
            );
        }
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("base", &self.base)
            .field("len", &self.len)
            .field("frame_size", &self.frame_size)
            .field("frame_count", &self.frame_count)
            .field("huge", &self.huge)
            .finish()
    }
}

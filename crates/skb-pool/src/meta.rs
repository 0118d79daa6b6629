//! Per-frame metadata, kept in a side array beside the region, and the free-frame node.
//!
//! Each frame has one [`FrameMeta`], exactly one cache line: the intrusive [`Link`] that puts it
//! on lists, the atomic state word (`FREE`, `IN_USE`, or `IN_FLIGHT` with the data offset it was
//! handed to the kernel with), its index, a pointer back to its pool, and the `Skb` fields
//! (data window, priority, hash, socket, timestamp, queue mapping, flags, owner).
//!
//! Why beside the region and not in the frame's headroom: the region is registered with the
//! kernel as a UMEM, so the kernel (and, in zero-copy mode, the NIC) writes it; a link or a state
//! word stored there could be overwritten behind our back, and a forged completion address would
//! make us read attacker-shaped memory. In the side array every address is validated against
//! state we alone write, the whole headroom stays free for headers, and the hot fields of a
//! frame are one line that never shares a cache line with packet bytes another core is writing.

use core::ptr::NonNull;

use llist_defer::{Link, Node};

use crate::pool::PoolInner;
use crate::sync::{AtomicU32, Ordering, UnsafeCell};

/// State tag: the frame is free (in a cache, a defer list, the overflow list or the depot).
pub(crate) const FREE: u32 = 0;
/// State tag: an [`Skb`](crate::Skb) owns the frame.
pub(crate) const IN_USE: u32 = 1;
/// State tag: the frame was handed to the kernel; the bits above the tag hold the data offset.
pub(crate) const IN_FLIGHT: u32 = 2;
/// Mask of the tag bits in the state word.
pub(crate) const TAG_MASK: u32 = 3;

/// Socket identity flag bits in [`SkbMeta::flags`].
pub(crate) const F_SOCK: u8 = 1;
pub(crate) const F_CONNECTED: u8 = 2;
pub(crate) const F_TSTAMP: u8 = 4;
pub(crate) const F_CE: u8 = 8;

/// The mutable fields of an in-use frame. Only the owning `Skb` (or the pool, while the frame is
/// free and on no list another thread can reach) reads or writes them.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SkbMeta {
    pub(crate) sock_id: u64,
    pub(crate) tstamp: u64,
    /// Offset of the first data byte from the frame start.
    pub(crate) head: u32,
    /// Data length.
    pub(crate) len: u32,
    pub(crate) priority: u32,
    pub(crate) hash: u32,
    pub(crate) owner: u16,
    pub(crate) queue_mapping: u16,
    pub(crate) flags: u8,
}

/// One frame's side-array entry: one cache line, the link first so that a pointer to the entry
/// is a pointer to its link.
#[repr(C, align(64))]
pub(crate) struct FrameMeta {
    pub(crate) link: Link,
    /// `FREE`, `IN_USE`, or `IN_FLIGHT | data_offset << 2`.
    pub(crate) state: AtomicU32,
    pub(crate) index: u32,
    pub(crate) pool: *const PoolInner,
    pub(crate) data: UnsafeCell<SkbMeta>,
}

impl FrameMeta {
    pub(crate) fn new(index: u32, pool: *const PoolInner) -> Self {
        FrameMeta {
            link: Link::new(),
            state: AtomicU32::new(FREE),
            index,
            pool,
            data: UnsafeCell::new(SkbMeta::default()),
        }
    }
}

/// A free frame as the pool's lists hold it: a pointer to its metadata. Unlike an
/// [`Skb`](crate::Skb) it has no drop behaviour, so the pool's own lists and caches can be
/// dropped (with the pool) without recursing into the free path.
pub(crate) struct Frame(pub(crate) NonNull<FrameMeta>);

// SAFETY: a `Frame` is the exclusive claim on one free frame; moving the claim between threads
// is what the free lists are for, and the lists' Release/Acquire order the frame's contents.
unsafe impl Send for Frame {}

impl Frame {
    #[inline]
    pub(crate) fn meta(&self) -> &FrameMeta {
        // SAFETY: the pointer is into the pool's side array, which lives as long as the pool,
        // and the pool outlives every frame claim (the claim holder keeps a pool reference).
        unsafe { self.0.as_ref() }
    }

    /// Marks the frame free. Relaxed: the list or cache it goes on orders the store.
    #[inline]
    pub(crate) fn set_free(&self) {
        self.meta().state.store(FREE, Ordering::Relaxed);
    }

    /// The owner slot recorded at allocation.
    #[inline]
    pub(crate) fn owner(&self) -> u16 {
        // SAFETY: we hold the frame exclusively (a `Frame` or an `Skb` being freed), so no one
        // writes its metadata concurrently.
        unsafe { (*self.meta().data.get()).owner }
    }

    /// Prepares a free frame for its new `Skb`: metadata reset, owner stamped, state `IN_USE`.
    #[inline]
    pub(crate) fn init(&self, owner: u16, headroom: u32) {
        let meta = self.meta();
        debug_assert_eq!(
            meta.state.load(Ordering::Relaxed),
            FREE,
            "allocated a frame twice"
        );
        #[cfg(lockless_loom)]
        assert_eq!(
            meta.state.load(Ordering::Relaxed),
            FREE,
            "allocated a frame twice"
        );
        // SAFETY: the frame came off a free list or cache that only this thread holds now.
        unsafe {
            *meta.data.get() = SkbMeta {
                head: headroom,
                owner,
                ..SkbMeta::default()
            };
        }
        meta.state.store(IN_USE, Ordering::Relaxed);
    }
}

// SAFETY: `link` is the first field of the `repr(C)` entry, so the entry pointer is the link
// pointer; the side array keeps it alive, and a `Frame` is the only claim on it while listed.
unsafe impl Node for Frame {
    #[inline]
    fn into_link(self) -> NonNull<Link> {
        self.0.cast()
    }

    #[inline]
    unsafe fn from_link(link: NonNull<Link>) -> Self {
        Frame(link.cast())
    }
}

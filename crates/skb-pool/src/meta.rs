//! Per-frame metadata, kept in a side array beside the region, and the free-frame node.
//!
//! Each frame has one [`FrameMeta`](crate::meta::FrameMeta), exactly one cache line: the intrusive
//! [`Link`](llist_defer::Link) that puts it on lists, the atomic state word (`FREE`, `IN_USE`, or
//! `IN_FLIGHT` with the data offset it was handed to the kernel with), and the `Skb` fields (data
//! window, priority, hash, socket, timestamp, queue mapping, flags, owner).
//!
//! Why beside the region and not in the frame's headroom: the region is registered with the
//! kernel as a UMEM, so the kernel (and, in zero-copy mode, the NIC) writes it; a link or a state
//! word stored there could be overwritten behind our back, and a forged completion address would
//! make us read attacker-shaped memory. In the side array every address is validated against
//! state we alone write, the whole headroom stays free for headers, and the hot fields of a
//! frame are one line that never shares a cache line with packet bytes another core is writing.
//!
//! # Layout: addresses from the handle alone
//!
//! The side array ([`SideArray`](crate::meta::SideArray)) is one allocation aligned to
//! [`CHUNK`](crate::meta::CHUNK) (64 KiB), cut into chunks of that size. Each chunk opens with a
//! read-only [`ChunkHeader`](crate::meta::ChunkHeader) line — the pool, the address of the chunk's
//! first frame, its index, the frame shift and the headroom — followed by the entries of
//! [`PER_CHUNK`](crate::meta::PER_CHUNK) consecutive frames:
//!
//! ```text
//! chunk c (CHUNK-aligned)
//! | header | meta c·N | meta c·N+1 | ... | meta c·N+N−1 |      N = PER_CHUNK
//! ```
//!
//! So a pointer to an entry (an [`Skb`](crate::Skb), a [`Frame`](crate::meta::Frame)) finds its
//! header by masking (`ptr & !(CHUNK − 1)`), and its frame index and frame address by arithmetic on
//! the pointer: no load from the entry's own line. Headers are written once, before the pool is
//! shared, and only read after, so every core keeps them cached (a handful of lines per pool); a
//! consumer that receives a frame from another core can request its metadata line and its data line
//! at once instead of learning the data address from the metadata: `Skb::data` asks for the data
//! line before it loads the data window, and [`Skb::prefetch`](crate::Skb::prefetch) asks for both
//! lines ahead of use. Nothing here lives in the region: the kernel can write neither a header nor
//! an entry, and addresses coming back from it are still validated against the entries' state.

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
/// free and on no list another thread can reach) reads or writes them. A free frame in a packed
/// batch (`packed.rs`) holds the batch's layout here instead, written by its sender before the
/// batch is published and read by the thread that takes it.
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

/// How many allocations ahead a cache asks for the metadata line of the frame it will hand
/// out then, for a write (`PREFETCHW`): a frame sent home was freed on another core, which holds
/// its line, and the allocation's `init` would otherwise wait for it (in `perf`, most of a
/// producer's time at the first read of the fresh `Skb` in the slow cross-core state). Four
/// frames of a producer's work cover a transfer on this machine's fast state and part of one on
/// its slow state.
pub(crate) const ALLOC_AHEAD: usize = 4;

/// One frame's side-array entry: one cache line, the link first so that a pointer to the entry
/// is a pointer to its link.
#[repr(C, align(64))]
pub(crate) struct FrameMeta {
    pub(crate) link: Link,
    /// `FREE`, `IN_USE`, or `IN_FLIGHT | data_offset << 2`.
    pub(crate) state: AtomicU32,
    pub(crate) data: UnsafeCell<SkbMeta>,
}

impl FrameMeta {
    fn new() -> Self {
        FrameMeta {
            link: Link::new(),
            state: AtomicU32::new(FREE),
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
    /// The frame whose metadata entry is at `addr`: how the caches, stacks and packed
    /// batches, which hold frames as bare addresses, turn one back into a claim.
    ///
    /// # Safety
    ///
    /// `addr` is the address of a metadata entry of a live pool (so it is not null), and the
    /// caller holds the claim on that frame: no other `Frame` or `Skb` for it is in use.
    #[inline]
    pub(crate) unsafe fn from_addr(addr: usize) -> Frame {
        // SAFETY: the caller's contract: a metadata entry's address, never null.
        Frame(unsafe { NonNull::new_unchecked(addr as *mut FrameMeta) })
    }

    #[inline]
    pub(crate) fn meta(&self) -> &FrameMeta {
        // SAFETY: the pointer is into the pool's side array, which lives as long as the pool,
        // and the pool outlives every frame claim (the claim holder keeps a pool reference).
        unsafe { self.0.as_ref() }
    }

    /// The pool the frame belongs to, from its chunk header (not its metadata line).
    #[inline]
    pub(crate) fn pool(&self) -> *const PoolInner {
        place(self.0).header().pool
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

/// Alignment and size of one side-array chunk (see the module docs). 64 KiB keeps the headers
/// few (one line per 1023 frames) while a small pool wastes at most one chunk of alignment.
pub(crate) const CHUNK: usize = 1 << 16;
/// Bytes between two entries.
pub(crate) const STRIDE: usize = core::mem::size_of::<FrameMeta>();
/// Offset of a chunk's first entry: the header, rounded up to an entry's alignment.
const META_OFF: usize =
    core::mem::size_of::<ChunkHeader>().next_multiple_of(core::mem::align_of::<FrameMeta>());
/// Frames per chunk.
pub(crate) const PER_CHUNK: usize = (CHUNK - META_OFF) / STRIDE;

const _: () = assert!(CHUNK.is_power_of_two() && PER_CHUNK >= 1);
// One entry per cache line (a shift, not a division, turns an entry address into its slot);
// loom's instrumented atomics are larger, and only there may an entry span more.
#[cfg(not(lockless_loom))]
const _: () = assert!(STRIDE == 64 && META_OFF == 64 && PER_CHUNK == 1023);

/// The read-only first line of a side-array chunk: what turns an entry pointer into its frame.
#[repr(C, align(64))]
pub(crate) struct ChunkHeader {
    /// The pool the frames belong to.
    pub(crate) pool: *const PoolInner,
    /// First byte of the chunk's first frame in the region.
    frames: *mut u8,
    /// Index of the chunk's first frame.
    first: u32,
    /// log2 of the frame size.
    pub(crate) shift: u32,
    /// Headroom a new `Skb` starts with.
    pub(crate) headroom: u32,
    /// First byte of the side array (the allocation this header is in).
    array: usize,
    /// Size of the side array in bytes.
    array_len: usize,
}

/// Where an entry's frame is, computed from the entry's address and its chunk's header.
#[derive(Clone, Copy)]
pub(crate) struct Place {
    pub(crate) header: NonNull<ChunkHeader>,
    /// The frame's index in the region.
    pub(crate) index: u32,
    /// First byte of the frame.
    pub(crate) frame: *mut u8,
}

impl Place {
    /// The chunk header: the pool's constants for this frame.
    #[inline(always)]
    pub(crate) fn header(&self) -> &ChunkHeader {
        // SAFETY: a `Place` is computed from an entry of a live side array (see `place`), whose
        // chunks open with an initialised header nobody writes after the pool is built; the
        // frame claim it was computed for keeps the pool, and so the header, alive.
        unsafe { self.header.as_ref() }
    }
}

/// The header of the chunk holding the entry `meta` (of a live [`SideArray`]): its address
/// masked to the chunk.
#[inline(always)]
fn header_of(meta: NonNull<FrameMeta>) -> NonNull<ChunkHeader> {
    meta.map_addr(|a| {
        // SAFETY: entries sit after their chunk's header, so the masked address is the
        // header's, inside the same allocation, and so non-zero.
        unsafe { core::num::NonZeroUsize::new_unchecked(a.get() & !(CHUNK - 1)) }
    })
    .cast()
}

/// The entry's chunk header and frame, by arithmetic on `meta` and one load from the header line
/// (never from the entry's own line).
///
/// `meta` points to an entry of a live [`SideArray`], as every [`Frame`] and
/// [`Skb`](crate::Skb) pointer does.
#[inline(always)]
pub(crate) fn place(meta: NonNull<FrameMeta>) -> Place {
    let header = header_of(meta);
    let slot = (meta.as_ptr() as usize - header.as_ptr() as usize - META_OFF) / STRIDE;
    // SAFETY: a live side array's chunk starts with an initialised header that nobody writes
    // after the pool is built.
    let h = unsafe { header.as_ref() };
    Place {
        header,
        index: h.first + slot as u32,
        frame: h.frames.wrapping_add(slot << h.shift),
    }
}

/// Whether `other` lies in the side array of the entry `meta` (so is an entry of the same pool,
/// alive as long as that pool is), by address alone: `other` is not read.
#[inline(always)]
pub(crate) fn in_same_array(meta: NonNull<FrameMeta>, other: *const u8) -> bool {
    // SAFETY: the header of a live side array's chunk, initialised and read-only after build.
    let h = unsafe { header_of(meta).as_ref() };
    (other as usize).wrapping_sub(h.array) < h.array_len
}

/// Hints the CPU to start loading the frame's data line (at the pool's headroom: where a fresh
/// frame's data starts) and its metadata line, both at once: the lines a consumer reads next.
#[inline(always)]
pub(crate) fn prefetch_frame(meta: NonNull<FrameMeta>) {
    prefetch_data(meta);
    llist_defer::hint::prefetch(meta.as_ptr());
}

/// Hints the CPU to start loading the frame's data line at the pool's headroom (where a fresh
/// frame's data starts unless pushed or pulled), and returns the frame's first byte, both from
/// `meta` alone.
#[inline(always)]
pub(crate) fn prefetch_data(meta: NonNull<FrameMeta>) -> *mut u8 {
    let p = place(meta);
    llist_defer::hint::prefetch(p.frame.wrapping_add(p.header().headroom as usize));
    p.frame
}

/// The side array: every frame's [`FrameMeta`], in [`CHUNK`]-aligned chunks that each open
/// with a [`ChunkHeader`] (see the module docs). Owned by the pool; entries stay at their
/// address until it is dropped.
pub(crate) struct SideArray {
    base: NonNull<u8>,
    layout: std::alloc::Layout,
    len: usize,
}

impl SideArray {
    /// Builds the entries of `region`'s frames, every one `FREE`, with headers naming `pool`.
    pub(crate) fn new(
        region: &crate::region::Region,
        headroom: u32,
        pool: *const PoolInner,
    ) -> Self {
        let len = region.frame_count();
        let chunks = len.div_ceil(PER_CHUNK);
        let last = len - (chunks - 1) * PER_CHUNK;
        let size = (chunks - 1) * CHUNK + META_OFF + last * STRIDE;
        let layout = std::alloc::Layout::from_size_align(size, CHUNK).expect("side array layout");
        // SAFETY: `size` is non-zero (at least one header).
        let raw = unsafe { std::alloc::alloc(layout) };
        let Some(base) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        let shift = region.frame_size().trailing_zeros();
        for c in 0..chunks {
            let first = c * PER_CHUNK;
            let header = ChunkHeader {
                pool,
                frames: region.base().wrapping_add(first << shift),
                first: first as u32,
                shift,
                headroom,
                array: base.as_ptr() as usize,
                array_len: size,
            };
            // SAFETY: chunk `c` starts inside the allocation, CHUNK-aligned, with room for its
            // header (META_OFF ≥ its size).
            unsafe {
                base.as_ptr()
                    .add(c * CHUNK)
                    .cast::<ChunkHeader>()
                    .write(header)
            };
        }
        let array = SideArray { base, layout, len };
        for i in 0..len {
            // SAFETY: `entry` is in bounds and aligned (see `entry`); the slot is uninitialised.
            unsafe { array.entry(i).as_ptr().write(FrameMeta::new()) };
        }
        array
    }

    /// The entry of frame `index` (< `len`).
    #[inline]
    fn entry(&self, index: usize) -> NonNull<FrameMeta> {
        debug_assert!(index < self.len);
        let off = (index / PER_CHUNK) * CHUNK + META_OFF + (index % PER_CHUNK) * STRIDE;
        // SAFETY: for `index < len` the offset is inside the allocation (see `new`'s size),
        // aligned to the entry (CHUNK and META_OFF are multiples of its alignment, STRIDE its
        // size), and not null.
        unsafe { NonNull::new_unchecked(self.base.as_ptr().add(off).cast()) }
    }

    /// Number of entries (the region's frame count).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The entry of frame `index`, if there is one.
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&FrameMeta> {
        // SAFETY: initialised in `new`, alive as long as `self`.
        (index < self.len).then(|| unsafe { self.entry(index).as_ref() })
    }

    /// Every entry, lowest frame index first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &FrameMeta> + '_ {
        // SAFETY: as in `get`.
        (0..self.len).map(|i| unsafe { self.entry(i).as_ref() })
    }
}

impl Drop for SideArray {
    fn drop(&mut self) {
        for i in 0..self.len {
            // SAFETY: initialised in `new` and dropped once; the pool drops its lists (which walk
            // these entries) before its side array.
            unsafe { core::ptr::drop_in_place(self.entry(i).as_ptr()) };
        }
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) };
    }
}

// SAFETY: the entries are atomics and `UnsafeCell`s whose access is governed by the frame
// state protocol (as for a `Box<[FrameMeta]>`), and the headers are read-only after `new`.
unsafe impl Send for SideArray {}
// SAFETY: as above.
unsafe impl Sync for SideArray {}

#[cfg(all(test, not(lockless_loom)))]
mod tests {
    use super::*;
    use crate::{AddrError, Pool};

    /// Pool shapes: frame sizes, counts on and across chunk boundaries, headrooms.
    fn shapes() -> Vec<(usize, usize, usize)> {
        let mut v = Vec::new();
        for count in [
            1,
            2,
            PER_CHUNK - 1,
            PER_CHUNK,
            PER_CHUNK + 1,
            2 * PER_CHUNK + 5,
        ] {
            for (size, headroom) in [(2048, 256), (4096, 0), (2048, 2047)] {
                v.push((size, count, headroom));
            }
        }
        v.push((1 << 20, 3, 4096));
        v
    }

    fn pool(size: usize, count: usize, headroom: usize) -> Pool {
        Pool::builder()
            .frame_size(size)
            .frame_count(count)
            .headroom(headroom)
            .populate(false)
            .build()
            .expect("pool")
    }

    #[test]
    fn computed_place_equals_stored_layout_for_every_frame() {
        for (size, count, headroom) in shapes() {
            let pool = pool(size, count, headroom);
            let inner = pool.inner();
            assert_eq!(inner.metas.len(), count);
            for (i, m) in inner.metas.iter().enumerate() {
                let p = place(NonNull::from(m));
                let h = p.header();
                assert_eq!(
                    p.index as usize, i,
                    "index, shape {size}/{count}/{headroom}"
                );
                assert_eq!(p.frame, inner.region.frame_ptr(i as u32), "frame of {i}");
                assert_eq!(p.header.as_ptr() as usize % CHUNK, 0);
                assert!(core::ptr::eq(h.pool, pool.inner.as_ptr()));
                assert_eq!(
                    (h.shift, h.headroom as usize),
                    (size.trailing_zeros(), headroom)
                );
                assert!(core::ptr::eq(m, inner.metas.get(i).expect("entry")));
            }
            assert!(inner.metas.get(count).is_none());
        }
    }

    #[test]
    fn skb_addresses_match_the_region_across_chunks() {
        for (size, count, headroom) in shapes() {
            let pool = pool(size, count, headroom);
            let mut h = pool.handle().expect("handle");
            let all: Vec<_> = (0..count).map(|_| h.alloc().expect("frame")).collect();
            let base = pool.region().base() as usize;
            for mut skb in all {
                let i = skb.frame_index() as usize;
                assert!(skb.belongs_to(&pool));
                assert_eq!(skb.frame_addr(), (i * size) as u64);
                assert_eq!(skb.data_addr(), (i * size + headroom) as u64);
                assert_eq!(skb.capacity(), size);
                skb.prefetch();
                skb.put_slice(&[i as u8]).expect("room");
                assert_eq!(skb.data().as_ptr() as usize, base + i * size + headroom);
                assert_eq!(skb.data(), &[i as u8]);
                let addr = skb.into_addr();
                let back = pool.skb_from_addr(addr).expect("in flight");
                assert_eq!(back.frame_index() as usize, i);
                assert_eq!(back.data(), &[i as u8]);
            }
            drop(h);
            assert_eq!(pool.stats().free, count);
        }
    }

    #[test]
    fn forged_addresses_are_refused_across_chunks() {
        let count = 2 * PER_CHUNK + 5;
        let pool = pool(2048, count, 256);
        let mut h = pool.handle().expect("handle");
        let mut all: Vec<_> = (0..count).map(|_| h.alloc().expect("frame")).collect();
        // In flight: the first frame of the second chunk and the last frame of the pool.
        let last = all.pop().expect("frame");
        let first_of_1 = all.remove(PER_CHUNK);
        assert_eq!(first_of_1.frame_index() as usize, PER_CHUNK);
        let (a, b) = (first_of_1.into_addr(), last.into_addr());
        let region_len = pool.region().len() as u64;
        let forged = [
            (a - 2048, "the chunk's neighbour, in use"),
            (a + 1, "the right frame, the wrong offset"),
            (region_len, "the first byte past the region"),
            (
                region_len + (PER_CHUNK as u64) * 2048,
                "a frame the side array lacks",
            ),
            (u64::MAX, "the top of the address space"),
        ];
        for (addr, what) in forged {
            assert!(
                pool.skb_from_addr(addr).is_err(),
                "{what} ({addr:#x}) accepted"
            );
        }
        assert!(matches!(
            pool.skb_from_addr(region_len),
            Err(AddrError::OutOfRegion { .. })
        ));
        assert!(matches!(
            pool.skb_from_rx(b + 2048, 1),
            Err(AddrError::OutOfRegion { .. })
        ));
        let (x, y) = (pool.skb_from_addr(a), pool.skb_from_addr(b));
        assert_eq!(x.expect("a").frame_index() as usize, PER_CHUNK);
        assert_eq!(y.expect("b").frame_index() as usize, count - 1);
        assert!(
            pool.skb_from_addr(a).is_err(),
            "a duplicate completion is refused"
        );
        drop(all);
    }
}

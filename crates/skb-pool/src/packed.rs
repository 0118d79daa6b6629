//! A packed batch: free frames sent to a CPU's defer list as one node whose receiver learns
//! every frame's address from a few metadata lines, not one dependent load per frame.
//!
//! A remote free gathers frames in the freeing CPU's outgoing batch as an array of addresses
//! (`outgoing.rs`). Linked through their own metadata, the frames would cost their home CPU one
//! dependent miss each to walk: the link of frame i is in frame i's line, which the freeing core
//! wrote last. Packed, only the head is linked; it records how many frames the batch holds, and
//! the free frames' unused `Skb` fields carry the addresses: node i (in the sender's order, the
//! head is node 0) names frames `FANOUT·i + 1 ..= FANOUT·i + FANOUT`, as line deltas from the
//! head. The receiver reads the head, then every interior node at once (their addresses are all
//! in the head for batches of up to `FANOUT·(FANOUT + 1)` frames), and never reads a leaf: a
//! batch of 16 costs two miss latencies instead of sixteen, and the leaves' lines are fetched
//! when they are allocated, by stores that need not wait.
//!
//! The defer lists hold packed heads, the per-CPU ones and the owner slots' (a handle's batch
//! is packed by `OwnerSlot::defer`); everything else (the overflow list, the depot, the caches)
//! holds plain frames. Every place that takes a defer list unpacks (`percpu/refill.rs`,
//! `handle.rs`), and a packed batch bound for the overflow list is unpacked first. A handle's
//! drain hands its frames out in the order they were freed (`unpack_oldest_first` gives that
//! order), as the per-CPU caches do: frames circulate in the order they left, at the stride the
//! hardware prefetcher follows.
//!
//! This file owns the layout of a packed batch only; it must not touch a frame's state word,
//! and writes links only where it hands a batch's frames out as a plain list (`unpack_into`,
//! `unpack_all`), as any list of free frames is linked.

use core::ptr::NonNull;

use llist_defer::{Chain, Fifo};

use crate::meta::{Frame, FrameMeta, SkbMeta};

/// Addresses one node carries.
const FANOUT: usize = 9;
/// Frames one packed batch holds at most (a larger outgoing batch is sent as several).
pub(crate) const MAX_PACK: usize = 64;
/// Bytes a line delta counts in: every entry is aligned to it.
const UNIT: isize = 64;

/// What a free frame's `Skb` fields hold while it is in a packed batch.
#[repr(C)]
struct Node {
    /// In the head: frames in the batch, the head included. Unused in other nodes.
    total: u32,
    /// Line deltas, from the head, of the frames this node names.
    next: [i32; FANOUT],
}

const _: () = assert!(
    core::mem::size_of::<Node>() <= core::mem::size_of::<SkbMeta>()
        && core::mem::align_of::<Node>() <= core::mem::align_of::<SkbMeta>()
        && core::mem::align_of::<FrameMeta>() as isize % UNIT == 0
        && 1 + FANOUT * (FANOUT + 1) >= MAX_PACK
);

/// The node view of a free frame's `Skb` fields.
///
/// # Safety
///
/// `meta` is an entry of a live side array, of a free frame the caller holds exclusively (or,
/// for reading, a frame of a batch the caller took whole).
#[inline(always)]
unsafe fn node(meta: NonNull<FrameMeta>) -> *mut Node {
    // SAFETY: the caller's contract keeps the entry alive; `data` is an `UnsafeCell` large and
    // aligned enough for a `Node` (the assertion above).
    unsafe { (*meta.as_ptr()).data.get().cast::<Node>() }
}

/// Packs the free frames at the metadata addresses `items` (1 ≤ len ≤ [`MAX_PACK`], all of
/// one pool) into one batch and returns its head, the frame of `items[0]`.
///
/// # Safety
///
/// Every address in `items` is the entry of a free frame of one live pool that the caller
/// holds exclusively, each once.
pub(crate) unsafe fn pack(items: &[usize]) -> Frame {
    let n = items.len();
    debug_assert!((1..=MAX_PACK).contains(&n));
    let head = items[0] as isize;
    let mut i = 0;
    while i == 0 || FANOUT * i + 1 < n {
        // SAFETY: the caller's contract: an entry of a free frame we hold.
        let nd = unsafe { node(NonNull::new_unchecked(items[i] as *mut FrameMeta)) };
        let first = FANOUT * i + 1;
        for (k, j) in (first..n.min(first + FANOUT)).enumerate() {
            let delta = (items[j] as isize - head) / UNIT;
            debug_assert!(i32::try_from(delta).is_ok());
            // SAFETY: `nd` is a node of a frame we hold; nobody else reads it before the
            // batch is published.
            unsafe { (*nd).next[k] = delta as i32 };
        }
        if i == 0 {
            // SAFETY: as above; `n` ≤ MAX_PACK fits.
            unsafe { (*nd).total = n as u32 };
        }
        i += 1;
    }
    // SAFETY: the caller's contract: a non-null entry address.
    unsafe { Frame::from_addr(items[0]) }
}

/// How many frames the packed batch at `head` holds (the head included).
///
/// # Safety
///
/// As [`unpack`].
pub(crate) unsafe fn total(head: &Frame) -> usize {
    // SAFETY: the caller's contract: the head of a batch we hold; the sender wrote `total`
    // before it published the head.
    unsafe { (*node(head.0)).total as usize }.clamp(1, MAX_PACK)
}

/// Writes the metadata addresses of the packed batch at `head` to `out`, in the order they
/// were packed (the head first), and returns how many there are.
///
/// # Safety
///
/// `head` is the head of a packed batch of one live pool, taken whole by the caller (so no
/// other thread reads or writes any of its frames).
pub(crate) unsafe fn unpack(head: Frame, out: &mut [usize; MAX_PACK]) -> usize {
    let base = head.0.as_ptr() as isize;
    // SAFETY: the caller's contract: the head of a batch we hold.
    let hd = unsafe { node(head.0) };
    // SAFETY: as above; the sender wrote `total` before it published the head.
    let n = unsafe { (*hd).total } as usize;
    debug_assert!((1..=MAX_PACK).contains(&n));
    let n = n.clamp(1, MAX_PACK);
    out[0] = base as usize;
    let mut i = 0;
    while i == 0 || FANOUT * i + 1 < n {
        let first = FANOUT * i + 1;
        // SAFETY: node `i` is a frame of the batch (its address came from an earlier node).
        let nd = unsafe { node(NonNull::new_unchecked(out[i] as *mut FrameMeta)) };
        for (k, j) in (first..n.min(first + FANOUT)).enumerate() {
            // SAFETY: as above: the sender wrote this delta before it published the batch.
            let a = base + unsafe { (*nd).next[k] } as isize * UNIT;
            out[j] = a as usize;
            if FANOUT * j + 1 < n {
                // An interior node: ask for its line now, with its siblings'.
                llist_defer::hint::prefetch(a as *const FrameMeta);
            }
        }
        i += 1;
    }
    n
}

/// Appends the frames of the packed batch at `head` to `out`, in the order they were packed,
/// each linked through its own metadata (stores that do not wait for one another).
///
/// # Safety
///
/// As [`unpack`].
pub(crate) unsafe fn unpack_into(head: Frame, out: &mut Fifo<Frame>) {
    let mut addr = [0usize; MAX_PACK];
    // SAFETY: forwarded contract.
    let n = unsafe { unpack(head, &mut addr) };
    // SAFETY: `unpack` wrote the entries of the batch's free frames, each once.
    unsafe { push_frames(out, addr[..n].iter()) };
}

/// Appends the frames whose metadata addresses `addrs` yields to `out`, in that order.
///
/// # Safety
///
/// Every address is the metadata entry of a free frame of one live pool that the caller
/// holds, each once.
unsafe fn push_frames<'a>(out: &mut Fifo<Frame>, addrs: impl Iterator<Item = &'a usize>) {
    for &a in addrs {
        // SAFETY: the caller's contract.
        out.push_back(unsafe { Frame::from_addr(a) });
    }
}

/// A plain FIFO of every frame in a chain of packed heads (as a CPU's defer list holds them).
///
/// # Safety
///
/// Every node of `heads` is the head of a packed batch of one live pool, taken whole by the
/// caller.
pub(crate) unsafe fn unpack_all(heads: impl IntoIterator<Item = Frame>) -> Fifo<Frame> {
    let mut out = Fifo::new();
    for h in heads {
        // SAFETY: forwarded contract.
        unsafe { unpack_into(h, &mut out) };
    }
    out
}

/// Every frame of one send's packed heads (a single head, or heads as [`pack_fifo`] orders
/// them, newest chunk first), newest first: what the shared overflow list, a LIFO that a
/// per-CPU refill takes whole and reverses, must be given for the refill to see the frames in
/// the order they were freed.
///
/// # Safety
///
/// As [`unpack_all`].
pub(crate) unsafe fn unpack_newest_first(heads: impl IntoIterator<Item = Frame>) -> Fifo<Frame> {
    let mut out = Fifo::new();
    let mut addr = [0usize; MAX_PACK];
    for h in heads {
        // SAFETY: forwarded contract.
        let n = unsafe { unpack(h, &mut addr) };
        // SAFETY: `unpack` wrote the entries of the batch's free frames, each once.
        unsafe { push_frames(&mut out, addr[..n].iter().rev()) };
    }
    out
}

/// Packs a plain batch of free frames (in the order they were freed) into heads of at most
/// [`MAX_PACK`] frames each, for an owner slot's defer list: the newest chunk's head first, so
/// that [`unpack_oldest_first`] of what a drain takes hands every frame back in the order it
/// was freed.
///
/// # Safety
///
/// Every frame of `batch` is a free frame of one live pool that the caller holds exclusively.
pub(crate) unsafe fn pack_fifo(mut batch: Fifo<Frame>) -> Fifo<Frame> {
    let mut heads = Fifo::new();
    let mut addr = [0usize; MAX_PACK];
    loop {
        let mut n = 0;
        while n < MAX_PACK {
            let Some(f) = batch.pop_front() else { break };
            addr[n] = f.0.as_ptr() as usize;
            n += 1;
        }
        if n == 0 {
            return heads;
        }
        // SAFETY: forwarded contract: `n` ≥ 1 free frames we hold, each once.
        heads.push_front(unsafe { pack(&addr[..n]) });
    }
}

/// Every frame of a chain of packed heads taken whole from an owner slot's defer list (newest
/// send first, as the list holds them, each send's heads as [`pack_fifo`] ordered them), as a
/// plain FIFO in the order the frames were freed.
///
/// # Safety
///
/// As [`unpack_all`].
pub(crate) unsafe fn unpack_oldest_first(heads: Chain<Frame>) -> Fifo<Frame> {
    // SAFETY: forwarded contract.
    unsafe { unpack_all(heads.reverse()) }
}

/// [`unpack_oldest_first`] as addresses, linking nothing: calls `each` with the metadata
/// addresses of every batch, oldest batch first.
///
/// # Safety
///
/// As [`unpack_all`].
pub(crate) unsafe fn unpack_each_oldest_first(heads: Chain<Frame>, mut each: impl FnMut(&[usize])) {
    let mut addr = [0usize; MAX_PACK];
    for head in heads.reverse() {
        // SAFETY: forwarded contract.
        let n = unsafe { unpack(head, &mut addr) };
        each(&addr[..n]);
    }
}

#[cfg(all(test, not(lockless_loom)))]
mod tests {
    use super::*;
    use crate::{Pool, Skb};

    /// Every batch size from 1 to `MAX_PACK` comes back whole, in order, each frame once, with
    /// frames from across the side array (deltas of both signs, across chunks). The frames are
    /// taken out of the pool first, so that no list of the pool links them while the test
    /// writes their fields; their `Skb` fields are saved and put back before they go home.
    #[test]
    fn a_packed_batch_unpacks_to_the_same_frames_in_order() {
        const N: usize = 3000;
        let pool = Pool::builder().frame_count(N).build().unwrap();
        let mut frames: Vec<Frame> = (0..N).map(|_| pool.alloc().unwrap().into_frame()).collect();
        frames.sort_unstable_by_key(|f| f.0.as_ptr() as usize);
        // SAFETY: we hold every frame; nobody else reads their fields.
        let saved: Vec<SkbMeta> = frames
            .iter()
            .map(|f| unsafe { *f.meta().data.get() })
            .collect();
        for n in 1..=MAX_PACK {
            // Spread over the array, the head in the middle, both directions.
            let items: Vec<usize> = (0..n)
                .map(|k| {
                    let i = (N / 2 + k * 37 * if k % 2 == 0 { 1 } else { N - 1 }) % N;
                    frames[i].0.as_ptr() as usize
                })
                .collect();
            let mut uniq = items.clone();
            uniq.sort_unstable();
            uniq.dedup();
            assert_eq!(uniq.len(), n, "test batch {n} repeats a frame");
            // SAFETY: frames we hold, each once; only their Skb fields are written.
            let head = unsafe { pack(&items) };
            let mut addr = [0usize; MAX_PACK];
            // SAFETY: the head of the batch just packed, held by us.
            let got = unsafe { unpack(head, &mut addr) };
            assert_eq!(&addr[..got], &items[..], "batch of {n}");
        }
        for (f, m) in frames.into_iter().zip(saved) {
            // SAFETY: as above; then the frame goes home as the Skb it was.
            unsafe {
                *f.meta().data.get() = m;
                drop(Skb::from_meta(f.0));
            }
        }
        assert_eq!(pool.stats().free, N);
    }
}

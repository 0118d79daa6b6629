//! Prefetch hints of a sent batch: what lets a drain walk its chain at the speed of parallel
//! misses instead of one dependent miss a frame.
//!
//! A batch of remote frees travels as a chain linked through the frames' metadata lines, which
//! the freeing core wrote last. Walking it on the home core is a pointer chase: each link is
//! in the line the previous step had to fetch, so the misses come one after another (with
//! sixteen producers on two cores the engine spent 30% of its CPU time in that walk). The
//! sender knows every frame of the batch, so before it links them it writes, into each frame's
//! entry, the address of the frame [`AHEAD`] places further on, and into the first frame's
//! (the batch head's) idle `Skb` fields the addresses of the next [`RAMP`] frames. A walker
//! that reaches a frame prefetches what it names: after the head's one miss, [`AHEAD`] lines
//! are in flight at every step.
//!
//! Hints are only ever prefetched, never dereferenced: a stale or missing hint costs a wasted
//! prefetch, never a wrong result, so no list protocol depends on them. A hint is 0 or the
//! address of an entry of the same pool's side array (only [`mark`] writes one, with the
//! entries of the batch it links), so computing a hinted frame's data address from its chunk
//! header reads a live header, whatever the hint's age. They are written by the
//! frames' holder before the batch is published (Release) and read by the holder after taking
//! it (Acquire), like the links; an allocation clears them ([`Frame::init`]), and so does every
//! walker, so a frame that later joins an unhinted list (the depot, a cache) carries none.
//!
//! This file owns the hint format and the two walks over it; it must not decide where a batch
//! goes (`percpu.rs`, `handle.rs`, `remote.rs` do).

use core::ptr::NonNull;

use llist_defer::{Chain, Fifo, hint::prefetch_write};

use crate::meta::{Frame, FrameMeta, prefetch_data_write};

/// Frames after a batch head whose addresses the head carries.
pub(crate) const RAMP: usize = 4;
/// How far ahead (in frames of the same batch) every frame's `ahead` hint points.
pub(crate) const AHEAD: usize = RAMP + 1;

/// Writes the hints of a batch that is about to be sent in `batch`'s order.
///
/// The caller holds every frame of `batch` (free, on no list another thread can reach). One
/// pass over lines the caller wrote last; a batch of one frame gets no hints.
pub(crate) fn mark(batch: &Fifo<Frame>) {
    if batch.len() < 2 {
        return;
    }
    // The last `AHEAD` entries seen, by position modulo `AHEAD`.
    let mut behind = [core::ptr::null::<FrameMeta>(); AHEAD];
    for (i, node) in batch.iter().enumerate() {
        let here = node.0.as_ptr().cast_const();
        if (1..=RAMP).contains(&i) {
            // SAFETY: `behind[0]` is the batch head, a frame the caller holds.
            unsafe { set_ramp(behind[0], i - 1, here as usize) };
        }
        if i >= AHEAD {
            // SAFETY: a frame of this batch, held by the caller.
            unsafe { (*(*behind[i % AHEAD]).ahead.get()) = here as usize };
        }
        behind[i % AHEAD] = here;
    }
}

/// Writes the head's ramp slot `k` (and its ramp length).
///
/// # Safety
///
/// `head` is the entry of a free frame the caller holds exclusively.
unsafe fn set_ramp(head: *const FrameMeta, k: usize, addr: usize) {
    // SAFETY: the caller holds the frame, so nobody else reads or writes its entry. While the
    // frame is free its `Skb` fields mean nothing; they are 8-aligned and at least
    // `RAMP` words long (asserted below), and every bit pattern is a valid `SkbMeta`, so
    // integers written over them leave it valid.
    unsafe {
        let ramp = (*head).data.get().cast::<usize>();
        ramp.add(k).write(addr);
        *(*head).ramp.get() = k as u32 + 1;
    }
}

const _: () = assert!(
    core::mem::size_of::<crate::meta::SkbMeta>() >= RAMP * core::mem::size_of::<usize>()
        && core::mem::align_of::<crate::meta::SkbMeta>() >= core::mem::align_of::<usize>()
);

/// Prefetches what `frame`'s hints name — each named frame's metadata line and data line, for
/// writing, as allocation writes both — and clears them; and takes `frame`'s own data line,
/// which no hint names when it heads a batch. The caller holds `frame`.
#[inline]
pub(crate) fn follow(frame: &Frame) {
    let meta = frame.0.as_ptr();
    prefetch_data_write(frame.0);
    // SAFETY: the caller holds the frame exclusively (it just took it off a chain), so nobody
    // else touches its entry; the ramp slots are read only when `ramp` says the sender wrote
    // them (see `set_ramp`).
    unsafe {
        let ahead = *(*meta).ahead.get();
        if ahead != 0 {
            take(ahead);
            *(*meta).ahead.get() = 0;
        }
        let n = *(*meta).ramp.get() as usize;
        if n != 0 {
            let ramp = (*meta).data.get().cast::<usize>();
            for k in 0..n.min(RAMP) {
                take(ramp.add(k).read());
            }
            *(*meta).ramp.get() = 0;
        }
    }
}

/// Prefetches, for writing, the entry at `addr` and its frame's data line. `addr` is a hint:
/// 0 or an entry of the walker's pool (see the module docs), so its chunk header is live.
#[inline(always)]
fn take(addr: usize) {
    let Some(meta) = NonNull::new(addr as *mut FrameMeta) else {
        return;
    };
    prefetch_write(meta.as_ptr());
    prefetch_data_write(meta);
}

/// [`Chain::reverse`] that follows the hints: the same frames, oldest first, with the lines of
/// the frames ahead requested while this one is relinked.
pub(crate) fn reverse(mut chain: Chain<Frame>) -> Fifo<Frame> {
    let mut out = Fifo::new();
    while let Some(frame) = chain.pop() {
        follow(&frame);
        out.push_front(frame);
    }
    out
}

#[cfg(all(test, not(lockless_loom)))]
mod tests {
    use super::*;
    use crate::Pool;
    use crate::skb::Skb;
    use llist_defer::LList;

    fn ramp_of(f: *const FrameMeta) -> Vec<usize> {
        // SAFETY: the test holds every frame it inspects.
        unsafe {
            let n = *(*f).ramp.get() as usize;
            let words = (*f).data.get().cast::<usize>();
            (0..n).map(|k| words.add(k).read()).collect()
        }
    }

    fn ahead_of(f: *const FrameMeta) -> usize {
        // SAFETY: as above.
        unsafe { *(*f).ahead.get() }
    }

    /// For batches of every size up to past two ramps: the head names the next `RAMP` frames,
    /// each frame the one `AHEAD` places on (none past the batch), a walk through a list takes
    /// every frame once, in reverse, and leaves no hint behind.
    #[test]
    fn a_batch_names_its_frames_ahead_and_a_walk_clears_them() {
        let pool = Pool::builder()
            .frame_count(64)
            .populate(false)
            .build()
            .expect("pool");
        let mut h = pool.handle().expect("handle");
        for n in 1..=2 * AHEAD + 3 {
            let frames: Vec<Frame> = (0..n)
                .map(|_| h.alloc().expect("frame").into_frame())
                .collect();
            let owner = frames[0].owner();
            let addrs: Vec<usize> = frames.iter().map(|f| f.0.as_ptr() as usize).collect();
            let mut batch = Fifo::new();
            for f in frames {
                f.set_free();
                batch.push_back(f);
            }
            mark(&batch);
            let head = addrs[0] as *const FrameMeta;
            let want_ramp: Vec<usize> = addrs.iter().skip(1).take(RAMP).copied().collect();
            assert_eq!(ramp_of(head), want_ramp, "ramp of a batch of {n}");
            for (i, &a) in addrs.iter().enumerate() {
                let want = addrs.get(i + AHEAD).copied().unwrap_or(0);
                assert_eq!(ahead_of(a as *const FrameMeta), want, "frame {i} of {n}");
            }
            let list = LList::new();
            list.add_batch(batch);
            let walked = reverse(list.take_all());
            let got: Vec<usize> = walked.iter().map(|f| f.0.as_ptr() as usize).collect();
            let mut want = addrs.clone();
            want.reverse();
            assert_eq!(got, want, "a walk of {n} frames");
            for f in walked {
                let m = f.0.as_ptr().cast_const();
                assert!(ramp_of(m).is_empty() && ahead_of(m) == 0, "hints left");
                f.init(owner, pool.headroom() as u32);
                // SAFETY: the frame is in use again, ours, and still carries its reference.
                drop(unsafe { Skb::from_meta(f.0) });
            }
        }
        drop(h);
        assert_eq!(pool.stats().free, 64);
    }
}

//! `Pool::alloc` and `Pool::alloc_bulk` through the per-CPU caches: the inlined fast path, the
//! slow path over every mode and source, and the pool reference a frame from past the caches
//! takes.
//!
//! This file must not free frames (`free.rs`) nor fill a cache (`refill.rs`).

use super::{NO_HOME, Op, POP_ALLOC, PerCpu, REF, Res, home_stamp};
use crate::meta::Frame;
use crate::pool::PoolInner;

impl PoolInner {
    /// `Pool::alloc`: a frame from this CPU's cache, else refilled, else the shared path.
    /// The frame is stamped, in use, and carries one pool reference.
    #[inline(always)]
    pub(crate) fn percpu_alloc(&self) -> Option<Frame> {
        let pc = &self.percpu;
        if let Ok((item, cpu)) = pc.try_fast(None, Op::Pop(POP_ALLOC)) {
            return Some(self.hand_out(item, cpu));
        }
        self.percpu_alloc_slow()
    }

    /// The frame an allocation's pop took from CPU `cpu`'s cache (a section committed there,
    /// so `cpu` is in the table), stamped and in use; a kicked defer list of `cpu` is drained
    /// first.
    #[inline(always)]
    fn hand_out(&self, item: usize, cpu: u32) -> Frame {
        // SAFETY: the caches hold only addresses of this pool's metadata entries.
        let frame = unsafe { Frame::from_addr(item) };
        if self.percpu.slots[cpu as usize].is_pending() {
            self.drain_cpu(cpu as usize);
        }
        frame.init(home_stamp(cpu), self.cfg.headroom);
        frame
    }

    /// `Pool::alloc_bulk`'s fast path: up to `out.len()` frames from this CPU's cache with one
    /// critical section, each stamped, in use and carrying one pool reference, their metadata
    /// addresses in `out[..k]`; returns `k`, 0 when the caller must allocate one frame the
    /// ordinary way (an empty cache, a busy try-lock, an abort).
    #[inline]
    pub(crate) fn percpu_alloc_bulk(&self, out: &mut [usize]) -> usize {
        let pc = &self.percpu;
        let Some((k, cpu)) = pc.try_pop_bulk(out) else {
            return 0;
        };
        if pc.slots[cpu as usize].is_pending() {
            self.drain_cpu(cpu as usize);
        }
        for &item in &out[..k] {
            // SAFETY: the caches hold only addresses of this pool's metadata entries.
            let frame = unsafe { Frame::from_addr(item) };
            frame.init(home_stamp(cpu), self.cfg.headroom);
        }
        k
    }

    /// [`percpu_alloc`](Self::percpu_alloc) past its inlined attempt: every mode, every source.
    #[cold]
    #[inline(never)]
    pub(super) fn percpu_alloc_slow(&self) -> Option<Frame> {
        let pc = &self.percpu;
        let headroom = self.cfg.headroom;
        let mut waited = false;
        loop {
            match pc.run(None, Op::Pop(POP_ALLOC)) {
                Res::Done(item, cpu) => return Some(self.hand_out(item, cpu)),
                Res::Refused(cpu) => {
                    let frame = self.refill(cpu as usize)?;
                    self.take_ref();
                    frame.init(home_stamp(cpu), headroom);
                    return Some(frame);
                }
                Res::NotHere | Res::NoCache => {
                    pc.counters().shared.add(1);
                    if let Some(frame) = self.refill(usize::MAX) {
                        self.acquire(1);
                        frame.init(NO_HOME, headroom);
                        return Some(frame);
                    }
                    // Shared sources dry: this CPU's cache may still hold frames, out of reach
                    // only for a moment. A locked cache whose try-lock we lost: wait for its
                    // holder (preempted mid-operation) rather than fail.
                    if pc.mode == PerCpu::Locked {
                        return match pc.run_locked(None, Op::Pop(POP_ALLOC), true) {
                            Res::Done(item, cpu) => {
                                // SAFETY: the caches hold only addresses of this pool's metadata.
                                let frame = unsafe { Frame::from_addr(item) };
                                frame.init(home_stamp(cpu), headroom);
                                Some(frame)
                            }
                            Res::Refused(_) | Res::NotHere | Res::NoCache => None,
                        };
                    }
                    // An rseq cache another CPU's taker holds: wait for the taking to end, then
                    // try once more.
                    if waited || !pc.wait_untaken() {
                        return None;
                    }
                    waited = true;
                }
            }
        }
    }

    /// Takes the pool reference of a frame handed out past the caches: into this CPU's share
    /// (a section on a line of this CPU's), so that refills on different cores do not pass the
    /// atomic count's line between them; the atomic count if there is no cache for the thread.
    pub(super) fn take_ref(&self) {
        match self.percpu.run(None, Op::Add(REF)) {
            Res::Done(..) => {}
            Res::Refused(_) | Res::NotHere | Res::NoCache => self.acquire(1),
        }
    }
}

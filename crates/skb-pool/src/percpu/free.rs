//! Freeing a per-CPU frame: onto its home cache when the thread runs there (one section, or one
//! bulk section for a run of frames), else home through the outgoing stacks (rseq pools) or the
//! outgoing batches (locked pools), a full batch pushed onto the home CPU's defer list with the
//! kick at half (`skb_attempt_defer_free`); the shared path's overflow list; the pool
//! references given back on the freeing CPU.
//!
//! This file must not allocate or refill (`alloc.rs`, `refill.rs`).

use core::ptr::NonNull;

use super::hands::InHand;
use super::{DROP_REF, HOME_FLAG, NO_HOME, Op, PUSH_FREE, Res};
use crate::meta::Frame;
use crate::outgoing::{Full, Outgoing};
use crate::pool::PoolInner;
use crate::remote::{Deferred, Kick, Wake};

impl PoolInner {
    /// `Pool::free_bulk`'s fast path: frees `frames` (in-use frames of this pool, all stamped
    /// home CPU `home` by [`percpu_alloc`](Self::percpu_alloc), each carrying a reference)
    /// into `home`'s cache with one critical section if the thread runs there; returns how
    /// many went (the first ones, already marked free). The caller frees the rest one by one.
    ///
    /// # Safety
    ///
    /// Each address in `frames` is an exclusively held in-use frame of this pool, stamped with
    /// home `home`, carrying one reference, and given up by the caller.
    #[inline]
    pub(crate) unsafe fn percpu_free_bulk(&self, home: u32, frames: &[usize]) -> usize {
        for &f in frames {
            // SAFETY: the caller's contract: a frame of this pool.
            unsafe { Frame::from_addr(f) }.set_free();
        }
        // The references go with the commit; the frames not pushed keep the pool alive, and if
        // all went, nothing touches it after the commit.
        self.percpu.try_push_bulk(Some(home), frames, PUSH_FREE)
    }

    /// Frees a frame stamped by the per-CPU path: home cache, home defer list, or overflow.
    ///
    /// # Safety
    ///
    /// `frame` is an exclusively held in-use frame of the pool at `this`, stamped by
    /// [`percpu_alloc`](Self::percpu_alloc), carrying one reference to it.
    #[inline]
    pub(crate) unsafe fn percpu_free(this: NonNull<PoolInner>, frame: Frame) {
        let home = frame.owner();
        if home != NO_HOME {
            frame.set_free();
            // SAFETY: the frame's reference keeps the pool alive for this attempt; if it
            // commits, the reference went with it and the pool is not touched again.
            let pc = unsafe { &this.as_ref().percpu };
            let push = Op::Push(frame.0.as_ptr() as usize, PUSH_FREE);
            let home = u32::from(home & !HOME_FLAG);
            match pc.try_fast(Some(home), push) {
                Ok(_) => return,
                // Running on another CPU: remote, decided once from the home stamp and the
                // CPU number the attempt read (a migration since only changes which CPU's
                // outgoing batch takes the frame; the batch has its own lock).
                Err(Some(cpu)) if (home as usize) < pc.slots.len() => {
                    // SAFETY: forwarded contract, the frame marked free; `home` is in the
                    // table.
                    unsafe {
                        if pc.stacks.enabled() {
                            PoolInner::percpu_free_stacked(this, frame, home);
                        } else {
                            PoolInner::percpu_free_remote(this, frame, home as usize, Some(cpu));
                        }
                    }
                    return;
                }
                Err(_) => {}
            }
        }
        // SAFETY: forwarded contract.
        unsafe { PoolInner::percpu_free_slow(this, frame) };
    }

    /// [`percpu_free`](Self::percpu_free) past its inlined attempt.
    ///
    /// # Safety
    ///
    /// As [`percpu_free`](Self::percpu_free).
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn percpu_free_slow(this: NonNull<PoolInner>, frame: Frame) {
        // SAFETY: the frame's reference keeps the pool alive until we drop it below.
        let pool = unsafe { this.as_ref() };
        let pc = &pool.percpu;
        let home = frame.owner();
        frame.set_free();
        let addr = frame.0.as_ptr() as usize;
        if home != NO_HOME {
            let home = u32::from(home & !HOME_FLAG);
            for _ in 0..2 {
                match pc.run(Some(home), Op::Push(addr, PUSH_FREE)) {
                    // The reference went with the commit: the pool may be gone now.
                    Res::Done(..) => return,
                    Res::Refused(_) => pool.flush_half(),
                    Res::NotHere => {
                        // SAFETY: forwarded contract; `home` came from this pool's table.
                        unsafe {
                            PoolInner::percpu_free_remote(this, frame, home as usize, pc.cpu_now())
                        };
                        return;
                    }
                    Res::NoCache => break,
                }
            }
        }
        pc.counters().shared.add(1);
        pool.overflow.add(frame);
        // SAFETY: the frame's reference is ours to drop, and we are done with the pool.
        unsafe { PoolInner::release(this, 1) };
    }

    /// A remote free: into CPU `cpu`'s outgoing batch for `home` (the CPU the thread was seen
    /// on; alone onto `home`'s defer list if the batch is busy or there is none), a full batch
    /// sent with one `skb_attempt_defer_free`, then the reference dropped on the freeing CPU.
    /// A frame that goes into a batch is counted by the batch, under its lock.
    ///
    /// # Safety
    ///
    /// As [`percpu_free`](Self::percpu_free) (the frame already marked free); `home` is in the
    /// table.
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn percpu_free_remote(
        this: NonNull<PoolInner>,
        frame: Frame,
        home: usize,
        cpu: Option<u32>,
    ) {
        // SAFETY: the frame's reference keeps the pool alive until we drop it below.
        let pool = unsafe { this.as_ref() };
        let out = cpu
            .and_then(|c| pool.percpu.out.get(c as usize))
            .map(|o| &**o);
        pool.send_remote(out, &[frame.0.as_ptr() as usize], home as u32);
        // SAFETY: the frame's reference is ours to drop; the pool is not used after.
        unsafe { PoolInner::drop_refs(this, 1) };
    }

    /// A remote free through the outgoing stacks (rseq pools, `outstack.rs`): one section pushes
    /// the frame onto the stack of the CPU the thread runs on for `home`, its reference given up
    /// there. The free that fills a stack sends it home instead, with its own frame, while it
    /// still holds that frame's reference (after a commit the pool may be gone). A stack being
    /// taken (or frozen) sends the frame the lock-based way; on `home` itself (a migration) it
    /// is a local free.
    ///
    /// # Safety
    ///
    /// As [`percpu_free`](Self::percpu_free) (the frame already marked free); `home` is in the
    /// table.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[inline(never)]
    pub(super) unsafe fn percpu_free_stacked(this: NonNull<PoolInner>, frame: Frame, home: u32) {
        use crate::rseq::{self, Status};
        // SAFETY: the frame's reference keeps the pool alive until a push commits it.
        let pool = unsafe { this.as_ref() };
        let pc = &pool.percpu;
        let addr = frame.0.as_ptr() as usize;
        let cap = pc.stacks.cap();
        let Some(area) = rseq::area() else {
            // SAFETY: forwarded contract.
            return unsafe { PoolInner::percpu_free_slow(this, frame) };
        };
        loop {
            let cpu = rseq::cpu(area);
            let Some(stack) = pc.stacks.cache_ref(cpu, home).filter(|_| cpu != home) else {
                // SAFETY: forwarded contract (on the home CPU now, or a CPU past the table).
                return unsafe { PoolInner::percpu_free_slow(this, frame) };
            };
            // A snapshot: a stale count only sends the batch one free early or late.
            if pc.stacks.len_of(cpu, home) + 1 >= cap {
                let mut buf = [0usize; crate::packed::MAX_PACK];
                let want = cap.min(buf.len() - 1);
                // The stack's frames are in this thread's hands from the pop until they are
                // sent.
                let mut hand = pc.in_hand();
                // SAFETY: as below; `buf` is ours, valid for `want` writes.
                let (st, k) = unsafe { rseq::pop_bulk(area, cpu, stack, buf.as_mut_ptr(), want) };
                match st {
                    Status::Done => {
                        hand.carried();
                        // The popped frames carry references again: ours and theirs go home
                        // together, then all are given back; nothing touches the pool after.
                        buf[k] = addr;
                        pc.counters_at(cpu as usize).remote_frees.add(k as u64 + 1);
                        pool.send_packed(&buf[..=k], home, Some(hand));
                        // SAFETY: the `k + 1` references are ours to drop; the pool is not used
                        // after.
                        return unsafe { PoolInner::drop_refs(this, k + 1) };
                    }
                    // Nothing taken; and the bracket ends before any reference is given back.
                    st => {
                        drop(hand);
                        match st {
                            Status::Refused if cap <= 1 => {
                                pc.counters_at(cpu as usize).remote_frees.add(1);
                                pool.send_packed(&[addr], home, None);
                                // SAFETY: as above.
                                return unsafe { PoolInner::drop_refs(this, 1) };
                            }
                            // Emptied meanwhile: push as usual.
                            Status::Refused | Status::Done => {}
                            Status::WrongCpu => continue,
                            Status::Abort => {
                                pc.count_abort();
                                continue;
                            }
                            Status::Flagged => {
                                // SAFETY: forwarded contract.
                                return unsafe {
                                    PoolInner::percpu_free_remote(
                                        this,
                                        frame,
                                        home as usize,
                                        Some(cpu),
                                    )
                                };
                            }
                        }
                    }
                }
            }
            // SAFETY: `area` is this thread's registered area; the stack lives as long as the
            // pool, which the frame's reference keeps alive; only these sections, on CPU
            // `cpu`, write it (a taker only once it flagged the stack and restarted them all).
            match unsafe { rseq::push(area, cpu, stack, addr, PUSH_FREE) } {
                // The reference went with the commit: the pool may be gone now.
                Status::Done => return,
                // Filled meanwhile (a thread preempted on this CPU): the next turn sends it.
                Status::Refused | Status::WrongCpu => {}
                Status::Abort => pc.count_abort(),
                Status::Flagged => {
                    // SAFETY: forwarded contract.
                    return unsafe {
                        PoolInner::percpu_free_remote(this, frame, home as usize, Some(cpu))
                    };
                }
            }
        }
    }

    /// See the rseq build's definition; stacks exist only there.
    ///
    /// # Safety
    ///
    /// As [`percpu_free`](Self::percpu_free) (the frame already marked free); `home` is in the
    /// table.
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
    pub(super) unsafe fn percpu_free_stacked(this: NonNull<PoolInner>, frame: Frame, home: u32) {
        // SAFETY: forwarded contract.
        unsafe { PoolInner::percpu_free_remote(this, frame, home as usize, None) };
    }

    /// [`percpu_free_remote_bulk`](Self::percpu_free_remote_bulk) through the outgoing stacks:
    /// whole stacks' worth go home at once from the caller's array; the rest goes onto the
    /// stack with one section if it does not fill it, else the stack is taken whole and sent
    /// home topped up from the rest, while the rest still holds references (a commit that gives
    /// up the last of them is the end of the pool's use). What a stack being taken (or frozen)
    /// refuses, and frames freed on `home` itself (a migration), are returned for the caller's
    /// other paths, still carrying their references (marked free); empty when every frame went
    /// and the pool may be gone.
    ///
    /// # Safety
    ///
    /// As [`percpu_free_remote_bulk`](Self::percpu_free_remote_bulk); `home` is in the table.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    pub(super) unsafe fn percpu_free_stacked_bulk(
        this: NonNull<PoolInner>,
        home: u32,
        frames: &[usize],
    ) -> &[usize] {
        use crate::rseq::{self, Status};
        // SAFETY: the frames' references keep the pool alive while any is left.
        let pool = unsafe { this.as_ref() };
        let pc = &pool.percpu;
        let cap = pc.stacks.cap();
        for &f in frames {
            // SAFETY: the caller's contract: a frame of this pool that we hold.
            unsafe { Frame::from_addr(f) }.set_free();
        }
        let mut rest = frames;
        while !rest.is_empty() {
            let Some(area) = rseq::area() else { break };
            let cpu = rseq::cpu(area);
            let Some(stack) = pc.stacks.cache_ref(cpu, home).filter(|_| cpu != home) else {
                break;
            };
            let mut buf = [0usize; crate::packed::MAX_PACK];
            // Frames taken from the stack into `buf` (each carrying a reference again). A run of
            // a whole batch goes straight home only past an empty stack: frames waiting there
            // were freed first, and go first (overtaken, they would come home out of order).
            let stacked = pc.stacks.len_of(cpu, home);
            let (k, hand) = if stacked == 0 && rest.len() >= cap {
                (0, None)
            } else if stacked + rest.len() < cap {
                // SAFETY: as in `percpu_free_stacked`; `rest` is valid for `rest.len()` reads.
                let (st, k) = unsafe {
                    rseq::push_bulk(area, cpu, stack, rest.as_ptr(), rest.len(), PUSH_FREE)
                };
                match st {
                    // All of them: their references went with the commit, the pool may be gone.
                    Status::Done if k == rest.len() => return &[],
                    Status::Done => rest = &rest[k..],
                    Status::Refused | Status::WrongCpu => {}
                    Status::Abort => pc.count_bulk_abort(),
                    Status::Flagged => break,
                }
                continue;
            } else {
                // The stack's frames are in this thread's hands from the pop until they are
                // sent (the frames of `rest` keep the pool alive while the bracket lasts).
                let mut hand = pc.in_hand();
                // SAFETY: as above; `buf` is ours, valid for `cap` writes.
                match unsafe { rseq::pop_bulk(area, cpu, stack, buf.as_mut_ptr(), cap) } {
                    (Status::Done, k) => {
                        hand.carried();
                        (k, Some(hand))
                    }
                    // Emptied meanwhile (a taker).
                    (Status::Refused, _) => (0, None),
                    (Status::WrongCpu, _) => continue,
                    (Status::Abort, _) => {
                        pc.count_bulk_abort();
                        continue;
                    }
                    (Status::Flagged, _) => break,
                }
            };
            // A batch: the stack's frames, topped up from the rest (up to `cap` in all).
            let m = (cap - k).min(rest.len());
            buf[k..k + m].copy_from_slice(&rest[..m]);
            rest = &rest[m..];
            pool.send_packed(&buf[..k + m], home, hand);
            pc.counters_at(cpu as usize)
                .remote_frees
                .add((k + m) as u64);
            // SAFETY: the references of the frames sent are ours to drop; the rest's keep the
            // pool alive, and with no rest this is the pool's last use here.
            unsafe { PoolInner::drop_refs(this, k + m) };
        }
        rest
    }

    /// See the rseq build's definition; stacks exist only there.
    ///
    /// # Safety
    ///
    /// As [`percpu_free_remote_bulk`](Self::percpu_free_remote_bulk).
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
    pub(super) unsafe fn percpu_free_stacked_bulk(
        this: NonNull<PoolInner>,
        home: u32,
        frames: &[usize],
    ) -> &[usize] {
        let _ = (this, home);
        frames
    }

    /// Sends free frames (at most [`MAX_PACK`](crate::packed::MAX_PACK), all for `home`, whose
    /// references the caller gives back after) home as one packed batch, oldest first as given:
    /// the home CPU hands them out in that order; then ends `hand`, as
    /// [`send_home_from`](Self::send_home_from).
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    pub(super) fn send_packed(&self, frames: &[usize], home: u32, hand: Option<InHand<'_>>) {
        // SAFETY: free frames of this pool, each once, that the caller gave up.
        self.send_home_from(unsafe { Full::packed(frames, home) }, hand);
    }

    /// Frees a run of per-CPU frames that [`percpu_free_bulk`](Self::percpu_free_bulk) did
    /// not put back (all stamped home CPU `home`, each carrying a reference): from another
    /// CPU, onto that CPU's outgoing stack for `home` (rseq pools of up to 32 CPUs) or into its
    /// outgoing batch with one lock per batch, full batches sent home, and every reference
    /// dropped with one critical section; on `home` itself (a full cache,
    /// a migration), or a CPU past the table, one by one.
    ///
    /// # Safety
    ///
    /// Each address in `frames` is an exclusively held in-use frame of the pool at `this`,
    /// stamped with home `home`, carrying one reference, and given up by the caller.
    pub(crate) unsafe fn percpu_free_remote_bulk(
        this: NonNull<PoolInner>,
        home: u32,
        frames: &[usize],
    ) {
        // SAFETY: the frames' references keep the pool alive until we drop them at the end.
        let pool = unsafe { this.as_ref() };
        let pc = &pool.percpu;
        let frames = if pc.stacks.enabled() && (home as usize) < pc.slots.len() {
            // SAFETY: forwarded contract.
            let rest = unsafe { PoolInner::percpu_free_stacked_bulk(this, home, frames) };
            if rest.is_empty() {
                // Every reference went: the pool may be gone.
                return;
            }
            rest
        } else {
            frames
        };
        let batch = match pc.cpu_now() {
            Some(cpu) if cpu != home && (home as usize) < pc.slots.len() => {
                pc.out.get(cpu as usize)
            }
            _ => None,
        };
        let Some(out) = batch else {
            for &f in frames {
                // SAFETY: the caller's contract, frame by frame.
                let frame = unsafe { Frame::from_addr(f) };
                // SAFETY: forwarded contract.
                unsafe { PoolInner::percpu_free(this, frame) };
            }
            return;
        };
        for &f in frames {
            // SAFETY: the caller's contract: a frame of this pool that we hold.
            unsafe { Frame::from_addr(f) }.set_free();
        }
        pool.send_remote(Some(out), frames, home);
        // SAFETY: the references are ours to drop; the pool is not used after.
        unsafe { PoolInner::drop_refs(this, frames.len()) };
    }

    /// Sends free frames (metadata addresses, carrying no references, all for `home`) through
    /// `out`, this CPU's outgoing batch: appended under one lock per batch, full batches sent
    /// home; if there is no batch or it is busy (its holder was preempted), each frame alone
    /// onto `home`'s defer list.
    pub(super) fn send_remote(&self, out: Option<&Outgoing>, frames: &[usize], home: u32) {
        let mut rest = frames;
        if let Some(out) = out {
            while !rest.is_empty() {
                // The batch leaves the lock in this thread's hands until it is sent.
                let Ok((n, full)) = out.add_many(rest, home, || self.percpu.in_hand()) else {
                    break;
                };
                rest = &rest[n..];
                if let Some((full, mut hand)) = full {
                    hand.carried();
                    self.send_home_from(full, Some(hand));
                }
            }
        }
        for &f in rest {
            self.percpu.counters().remote_frees.add(1);
            // SAFETY: a free frame of this pool that the caller gave up.
            let frame = unsafe { Frame::from_addr(f) };
            self.send_home_from(Full::alone(frame, home), None);
        }
    }

    /// Gives back `k` pool references of frames freed on this CPU: one critical section, or
    /// the atomic count if there is no cache for the thread.
    ///
    /// # Safety
    ///
    /// The caller owns `k` references to the pool at `this`, and does not use the pool after
    /// unless it holds another reference besides them.
    pub(super) unsafe fn drop_refs(this: NonNull<PoolInner>, k: usize) {
        // SAFETY: the caller's references keep the pool alive for this attempt; if it commits,
        // they went with it and the pool is not touched again.
        let pc = unsafe { &this.as_ref().percpu };
        match pc.run(None, Op::Add(DROP_REF.wrapping_mul(k as u64))) {
            Res::Done(..) => {}
            Res::Refused(_) | Res::NotHere | Res::NoCache => {
                // SAFETY: the references are ours to drop.
                unsafe { PoolInner::release(this, k) };
            }
        }
    }

    /// `skb_attempt_defer_free` of a packed batch to its home CPU's defer list (kick at
    /// half); past `defer_max`, its frames go to the overflow list unpacked. Then ends `hand`,
    /// the bracket of the move that took those frames out of a place other allocations look
    /// (`hands.rs`), if there is one, and only then calls the home CPU's wake if this send
    /// kicked it: a slow callback, or one that allocates, holds no allocation's look open.
    pub(super) fn send_home_from(&self, full: Full, hand: Option<InHand<'_>>) {
        let wake = self.send_home(full);
        drop(hand);
        if let Some(w) = wake {
            w();
        }
    }

    /// The send of [`send_home_from`](Self::send_home_from): the wake to call, if it kicked.
    fn send_home(&self, full: Full) -> Option<Wake> {
        self.percpu.counters().sends.add(1);
        let slot = &self.percpu.slots[full.home as usize];
        // SAFETY: a `Full` holds packed heads of free frames of this pool, given up to us.
        match unsafe { slot.defer_packed(full.heads, full.n, self.cfg.defer_max, &self.overflow) } {
            Deferred::Queued(Kick::Won(w)) => w,
            Deferred::Queued(Kick::None | Kick::AlreadyPending) | Deferred::Overflow => None,
        }
    }
}

//! Filling a dry cache and draining a kicked defer list: the sources a refill tries in order
//! (its CPU's defer list, the overflow list, the depot, other CPUs' defer lists, vacant owner
//! slots, the outgoing batches and stacks, a taking), and the stashing that puts what it found
//! into the cache in the order the frames are to go out (the oldest first); a full cache's
//! flush to the depot.
//!
//! This file must not free frames (`free.rs`) nor write another CPU's cache (`take.rs`).

use core::ptr::NonNull;

use llist_defer::{Chain, Fifo};

use super::hands::{InHand, Look, Patience};
use super::{
    LIFT_MAX, Op, POP_ALLOC, POP_SPARE, PUSH_FREE, PUSH_SPARE, PerCpu, RefillOrder, Res, SORT_MAX,
};
use crate::meta::Frame;
use crate::packed;
use crate::pool::PoolInner;
use crate::remote::OwnerSlot;

impl PoolInner {
    /// Finds free frames for a dry cache (of CPU `cpu`, or none if `cpu` is out of range),
    /// returns one and stashes the rest: its defer list, the overflow list, the depot, other
    /// CPUs' defer lists (one probe each), vacant owner slots, the outgoing batches and stacks,
    /// and last half of another CPU's cache (`take.rs`). `None` (counted as exhausted) only
    /// after a look that saw every free frame (`hands.rs`), or when looks that did not see them
    /// all have found nothing for a while.
    #[cold]
    #[inline(never)]
    pub(super) fn refill(&self, cpu: usize) -> Option<Frame> {
        let pc = &self.percpu;
        pc.counters_at(cpu).refills.add(1);
        let mut patience = Patience::default();
        let mut first = true;
        loop {
            let mut look = pc.look();
            if !first {
                // The cache of the CPU the thread runs on now, which a look does not take from:
                // a move may have ended there (another thread on this CPU, or a migration).
                if let Res::Done(item, _) = pc.run(None, Op::Pop(POP_SPARE)) {
                    // SAFETY: the caches hold only addresses of this pool's metadata entries.
                    return Some(unsafe { Frame::from_addr(item) });
                }
            }
            first = false;
            if let Some(frame) = self.refill_once(cpu, &mut look) {
                return Some(frame);
            }
            // None of the places a free fills without a bracket holds frames now (a frame freed
            // into one the look had passed is found here, not missed), and the look, this
            // re-read included, was whole (a move during the re-read is seen).
            if !self.frees_pending() && pc.look_was_whole(&look) {
                break;
            }
            if patience.spent() {
                pc.counters_at(cpu).exhausted_moving.add(1);
                break;
            }
            pc.before_looking_again();
        }
        pc.counters_at(cpu).exhausted.add(1);
        None
    }

    /// Whether a place that frees fill without a move's bracket holds frames: a cache (not
    /// even this CPU's, filled meanwhile), an outgoing batch or stack, a CPU's defer list (a
    /// remote free that goes home alone), the overflow list, a vacant owner's defer list, the
    /// depot (a handle's cache spilling, a handle's last give-back).
    /// Read after a look, it covers the frames freed behind it.
    fn frees_pending(&self) -> bool {
        self.percpu.others_cached(usize::MAX)
            || self.outgoing_hold_frames()
            || self.cpu_lists_hold_frames()
            || !self.overflow.is_empty()
            || self.vacant_owners_hold_frames()
            || self.lock_depot().iter().any(|b| !b.is_empty())
    }

    /// Whether a CPU's defer list looks non-empty.
    fn cpu_lists_hold_frames(&self) -> bool {
        self.percpu.slots.iter().any(|s| !s.looks_empty())
    }

    /// The owner slots no handle holds.
    fn vacant_owners(&self) -> impl Iterator<Item = &OwnerSlot> {
        self.slots.iter().filter(|s| !s.is_claimed())
    }

    /// Whether a vacant owner's defer list looks non-empty.
    fn vacant_owners_hold_frames(&self) -> bool {
        self.vacant_owners().any(|s| !s.looks_empty())
    }

    /// Whether an outgoing batch or stack holds frames.
    fn outgoing_hold_frames(&self) -> bool {
        let pc = &self.percpu;
        pc.out.iter().any(|o| o.len() != 0) || pc.stacks.len() != 0
    }

    /// One look through the sources of [`refill`](Self::refill), in order: the first that
    /// yields frames is taken (inside a move's bracket, until what is not returned is
    /// stashed); a source skipped because another thread held it is noted in `look`.
    fn refill_once(&self, cpu: usize, look: &mut Look) -> Option<Frame> {
        let pc = &self.percpu;
        if cpu < pc.slots.len() && !pc.slots[cpu].looks_empty() {
            // Frames sent home come back in the order they were freed: newest batch first
            // (as the list holds them), each pushed newest frame first, the oldest of all
            // returned. Their lines are in another core's cache, so no order is hotter here;
            // this one keeps the circulation in the order frames were handed out, and a pool
            // handing out frames at a fixed stride lets the hardware prefetcher fetch the next
            // frame's lines, on both cores, ahead of use (the skb_pool bench's pipeline:
            // LIFO here scrambled the order every lap).
            let mut hand = pc.in_hand();
            if let Some(got) = self.stash_drained(cpu, true, 0, &mut hand) {
                return Some(got);
            }
        }
        // Every source below yields its frames oldest first (freed, or put in the depot,
        // first), and `stash_oldest_on_top` keeps that order. The bracket begins before the
        // first source that looks non-empty is taken.
        let mut hand = None;
        let mut got = Fifo::new();
        if !self.overflow.is_empty() {
            hand.get_or_insert_with(|| pc.in_hand());
            got = self.overflow.take_all().reverse();
        }
        if got.is_empty() {
            // Refill by half a cache (plus the frame returned), and leave the rest of the
            // batch in the depot: carried through this CPU's hands to be stashed, it would be
            // out of every other allocator's reach meanwhile.
            let mut depot = self.lock_depot();
            if let Some(mut batch) = depot.pop() {
                hand.get_or_insert_with(|| pc.in_hand());
                let want = pc.cap.div_ceil(2) + 1;
                while got.len() < want {
                    let Some(f) = batch.pop_front() else { break };
                    got.push_back(f);
                }
                if !batch.is_empty() {
                    depot.push(batch);
                }
            }
        }
        if got.is_empty() && self.cpu_lists_hold_frames() {
            hand.get_or_insert_with(|| pc.in_hand());
            got = self.probe_cpus();
        }
        if got.is_empty() && self.vacant_owners_hold_frames() {
            hand.get_or_insert_with(|| pc.in_hand());
            // SAFETY: an owner slot's list holds only packed heads of this pool.
            got = unsafe { packed::unpack_oldest_first(first_drained(self.vacant_owners())) };
        }
        if got.is_empty() && self.outgoing_hold_frames() {
            hand.get_or_insert_with(|| pc.in_hand());
            got = self.take_outgoing_looking(Some(look));
        }
        // Every cache but the one of the CPU the thread runs on now (which the next look pops
        // before anything else): after a migration, the dry cache of CPU `cpu` is another
        // CPU's, and frames freed into it since are reached by taking.
        let here = pc.cpu_now().map_or(usize::MAX, |c| c as usize);
        if got.is_empty() && pc.others_cached(here) {
            hand.get_or_insert_with(|| pc.in_hand());
            got = pc.take_cached(here, look);
        }
        let first = got.pop_front()?;
        if let Some(h) = hand.as_mut() {
            h.carried();
        }
        self.stash_oldest_on_top(got);
        Some(first)
    }

    /// Frames of an outgoing batch that no free on its CPU will complete: the first non-empty
    /// batch whose lock is free (one probe per CPU), else the outgoing stacks' frames.
    pub(crate) fn take_outgoing(&self) -> Fifo<Frame> {
        self.take_outgoing_looking(None)
    }

    /// [`take_outgoing`](Self::take_outgoing), noting in `look` a non-empty batch or stack it
    /// could not take (held by another thread, or stacks taken less than `TAKE_EVERY` ago).
    fn take_outgoing_looking(&self, mut look: Option<&mut Look>) -> Fifo<Frame> {
        let pc = &self.percpu;
        for o in pc.out.iter() {
            match o.try_take() {
                Some(got) if !got.is_empty() => return got,
                Some(_) => {}
                None => {
                    if let Some(l) = look.as_deref_mut() {
                        l.skipped = true;
                    }
                }
            }
        }
        if !pc.stacks.enabled() {
            return Fifo::new();
        }
        let got = pc.stacks.take_all(restart_sections);
        if got.is_empty() && pc.stacks.len() != 0 {
            if let Some(l) = look {
                l.skipped = true;
            }
        }
        pc.counters().remote_frees.add(got.len() as u64);
        got
    }

    /// The frames of the first non-empty CPU defer list, unpacked oldest first (one probe per
    /// CPU).
    pub(crate) fn probe_cpus(&self) -> Fifo<Frame> {
        // SAFETY: a CPU's defer list holds only packed heads of this pool, taken whole here.
        unsafe { packed::unpack_oldest_first(first_drained(self.percpu.slots.iter())) }
    }

    /// Moves CPU `cpu`'s kicked defer list into its cache (`skb_defer_free_flush`), once the
    /// cache is at most half full or has room for the half of `defer_max` that kicked it:
    /// until then the kick stays pending and the next allocation on `cpu` looks again (a full
    /// cache would take nothing, put the list back and be kicked again by the next remote
    /// free). Waiting for half a cache alone let a list that would fit grow past `defer_max`,
    /// and the frames past it go to the shared overflow list, out of the order the home hands
    /// its frames out in. The list's own count is not read here: the freers write its line at
    /// every send, and this runs at every allocation while a kick waits.
    #[cold]
    #[inline(never)]
    pub(super) fn drain_cpu(&self, cpu: usize) {
        let pc = &self.percpu;
        let cached = pc.cached(cpu);
        if cached > pc.cap / 2 && cached + self.cfg.defer_max / 2 > pc.cap {
            return;
        }
        pc.counters_at(cpu).drains.add(1);
        // The lifted frames and the drained ones are in this thread's hands until stashed.
        let mut hand = pc.in_hand();
        // The frames still cached were freed before those on the defer list, so they must be
        // handed out first (see `refill`): lift them off, stash the drained frames beneath,
        // and put them back on top in the order they had. Stashed on top instead, every kick
        // would permute the circulation for good (frames come back in the order they left),
        // and a pool whose frames come in no order loses the hardware prefetcher (the
        // skb_pool bench's shuffled bound).
        let mut lifted = [0usize; LIFT_MAX];
        let k = self.lift(cpu, &mut lifted, &mut hand);
        self.stash_drained(cpu, false, k, &mut hand);
        self.put_back_lifted(&lifted[..k]);
    }

    /// Pops up to `LIFT_MAX` frames off the top of CPU `cpu`'s cache into `out`, the top one
    /// last, each carrying a reference (as an allocation's); returns how many, 0 if the
    /// thread no longer runs on `cpu` (the frames it popped then are put back). `hand` is
    /// marked as having carried frames if any were popped, put back or not.
    pub(super) fn lift(
        &self,
        cpu: usize,
        out: &mut [usize; LIFT_MAX],
        hand: &mut InHand<'_>,
    ) -> usize {
        let pc = &self.percpu;
        match pc.try_pop_bulk(out) {
            Some((k, on)) if on as usize == cpu => {
                hand.carried();
                return k;
            }
            Some((k, _)) => {
                // Migrated since the allocation: back where they came from (out of every
                // look's sight meanwhile).
                hand.carried();
                self.put_back_lifted(&out[..k]);
                return 0;
            }
            None if pc.mode == PerCpu::Rseq => return 0,
            // A locked cache that was empty, or whose try-lock was busy: one by one, waiting
            // for nothing.
            None => {}
        }
        let mut k = 0;
        while k < LIFT_MAX {
            match pc.run(Some(cpu as u32), Op::Pop(POP_ALLOC)) {
                Res::Done(item, _) => out[k] = item,
                Res::Refused(_) | Res::NotHere | Res::NoCache => break,
            }
            k += 1;
        }
        if k > 0 {
            hand.carried();
        }
        out[..k].reverse();
        k
    }

    /// Pushes frames [`lift`](Self::lift)ed off a cache (free, each carrying a reference)
    /// back onto the cache of the CPU the thread runs on, the last one on top; what does not
    /// fit goes to [`stash`](Self::stash), its references given up.
    pub(super) fn put_back_lifted(&self, frames: &[usize]) {
        let rest = &frames[self.percpu.push_all(frames, PUSH_FREE)..];
        if rest.is_empty() {
            return;
        }
        self.stash(
            rest.iter()
                // SAFETY: addresses of this pool's free frames, lifted off a cache, each once.
                .map(|&a| unsafe { Frame::from_addr(a) })
                .collect(),
        );
        // SAFETY: the references the pops gave them are ours to drop; the caller's `Pool`
        // holds another, so they are not the last and the pool stays alive.
        unsafe { PoolInner::drop_refs(NonNull::from(self), rest.len()) };
    }

    /// Drains CPU `cpu`'s defer list into this CPU's cache: the newest batches beyond the
    /// cache's room go back on the list still packed (for the next drain, or another CPU's
    /// probe) instead of overflowing the cache into the depot, where they would wait as chains
    /// that take one dependent miss a frame to walk. The rest is stashed newest batch first, so
    /// that the oldest frame freed ends on top (see `refill`), or, in [`RefillOrder::Address`],
    /// lowest address on top; with `keep_last`, the oldest batch is always taken and its oldest
    /// (or lowest) frame returned instead of stashed. `reserve` frames' room is kept free
    /// (frames lifted off the cache, to be put back on top). The caller's move (`hand`) is
    /// marked as having carried frames if the list held any.
    pub(super) fn stash_drained(
        &self,
        cpu: usize,
        keep_last: bool,
        reserve: usize,
        hand: &mut InHand<'_>,
    ) -> Option<Frame> {
        if self.percpu.order == RefillOrder::Address {
            let (mut gathered, mut n) = ([0usize; SORT_MAX], 0);
            self.take_drained(cpu, keep_last, reserve, SORT_MAX, hand, |head, _| {
                let mut one = [0usize; packed::MAX_PACK];
                // SAFETY: `take_drained` hands over packed heads of this pool, taken whole.
                let k = unsafe { packed::unpack(head, &mut one) };
                gathered[n..n + k].copy_from_slice(&one[..k]);
                n += k;
                None
            });
            return self.stash_sorted(&mut gathered[..n], keep_last);
        }
        self.take_drained(cpu, keep_last, reserve, usize::MAX, hand, |head, keep| {
            // SAFETY: `take_drained` hands over packed heads of this pool, taken whole.
            unsafe { self.stash_packed(head, keep) }
        })
    }

    /// [`stash_drained`](Self::stash_drained)'s take: empties CPU `cpu`'s defer list and hands
    /// the packed heads that fit (the cache's room less `reserve`, at most `limit` frames) to
    /// `each`, newest first, with `true` for the last one if `keep_last`; puts the others back
    /// on the list. Returns what `each` returned last. If the list held frames, `hand` is
    /// marked as having carried them, whatever the caller gets: frames put back were out of
    /// every look's sight meanwhile too, and a look that passed the list then must look again.
    pub(super) fn take_drained(
        &self,
        cpu: usize,
        keep_last: bool,
        reserve: usize,
        limit: usize,
        hand: &mut InHand<'_>,
        mut each: impl FnMut(Frame, bool) -> Option<Frame>,
    ) -> Option<Frame> {
        let pc = &self.percpu;
        let slot = &pc.slots[cpu];
        // The frames taken, counted from the heads themselves: the list's count errs high
        // after overflows and, for a moment, low (a freer counts before it links), and a
        // count too low would overfill the cache into the depot.
        let (mut taken, mut total) = (Fifo::new(), 0);
        for head in slot.drain_counted().0 {
            // SAFETY: a CPU's defer list holds only packed heads of this pool, taken whole.
            total += unsafe { packed::total(&head) };
            taken.push_back(head);
        }
        if total > 0 {
            hand.carried();
        }
        // What does not fit, or is past `limit`, goes back: the newest batches first, so that
        // the oldest are taken (they are to go out first).
        let room = pc.cap.saturating_sub(pc.cached(cpu) + reserve) + usize::from(keep_last);
        let mut excess = total.saturating_sub(room.min(limit));
        let (mut back, mut back_n) = (Fifo::new(), 0);
        let (mut got, mut given) = (None, 0);
        let mut next = taken.pop_front();
        while let Some(head) = next {
            next = taken.pop_front();
            let last = next.is_none();
            // SAFETY: as above.
            let k = unsafe { packed::total(&head) };
            // `given + k > limit` only guards the caller's array: with `excess` counted
            // against `limit`, the batches left fit under it (and a kept last batch alone does,
            // being at most one pack).
            if (excess > 0 && !(last && keep_last)) || given + k > limit {
                excess = excess.saturating_sub(k);
                back_n += k;
                back.push_back(head);
                continue;
            }
            excess = 0;
            given += k;
            got = each(head, last && keep_last);
        }
        slot.requeue(back, back_n);
        got
    }

    /// Puts free frames (carrying no references, oldest first) into this CPU's cache so that
    /// it hands them out in that order: the oldest `LIFT_MAX` (at most a cache) pushed newest
    /// first, with one critical section (or one acquisition of a locked cache); the newer rest,
    /// and what does not
    /// fit, to the depot in order. (Pushed as they come, a cache would hand each refill out
    /// newest first, and the circulation would stay reversed from then on.)
    pub(super) fn stash_oldest_on_top(&self, mut frames: Fifo<Frame>) {
        let mut addr = [0usize; LIFT_MAX];
        let mut k = 0;
        while k < addr.len().min(self.percpu.cap) {
            let Some(f) = frames.pop_front() else { break };
            addr[k] = f.0.as_ptr() as usize;
            k += 1;
        }
        if !frames.is_empty() {
            self.lock_depot().push(frames);
        }
        addr[..k].reverse();
        let pushed = self.percpu.push_all(&addr[..k], PUSH_SPARE);
        if pushed < k {
            // No cache (the shared path) or no room: the rest to the depot, oldest first again.
            let rest: Fifo<Frame> = addr[pushed..k]
                .iter()
                .rev()
                // SAFETY: addresses of this pool's free frames the caller gave us, each once.
                .map(|&a| unsafe { Frame::from_addr(a) })
                .collect();
            self.lock_depot().push(rest);
        }
    }

    /// Puts the frames of the packed batch at `head` (free, carrying no references) into this
    /// CPU's cache so that it hands them out in the order they were freed (the oldest on top),
    /// but the oldest one if `keep_last`, which it returns; with one critical section (or one
    /// acquisition of a locked cache) per batch, and what does not fit through [`stash`].
    ///
    /// # Safety
    ///
    /// `head` is the head of a packed batch of this pool, taken whole by the caller.
    ///
    /// [`stash`]: Self::stash
    pub(super) unsafe fn stash_packed(&self, head: Frame, keep_last: bool) -> Option<Frame> {
        let mut addr = [0usize; packed::MAX_PACK];
        // SAFETY: forwarded contract.
        let n = unsafe { packed::unpack(head, &mut addr) };
        // Newest first: the last one pushed (or kept) is the oldest.
        addr[..n].reverse();
        // SAFETY: entries of free frames of the batch, taken whole by the caller, each once.
        unsafe { self.stash_spare(&addr[..n], keep_last) }
    }

    /// Pushes the free frames at `addrs` (carrying no references, at least one) onto this
    /// CPU's cache in that order, the last on top, but the last one if `keep_last`, which it
    /// returns; with one critical section (or one acquisition of a locked cache), and what does
    /// not fit through [`stash`](Self::stash).
    ///
    /// # Safety
    ///
    /// Each address is a free frame of this pool that the caller took whole and gives up, each
    /// once.
    pub(super) unsafe fn stash_spare(&self, addrs: &[usize], keep_last: bool) -> Option<Frame> {
        let m = addrs.len() - usize::from(keep_last);
        let pushed = self.percpu.try_push_bulk(None, &addrs[..m], PUSH_SPARE);
        if pushed < m {
            let rest: Fifo<Frame> = addrs[pushed..m]
                .iter()
                // SAFETY: the caller's contract: free frames of this pool, each once.
                .map(|&a| unsafe { Frame::from_addr(a) })
                .collect();
            self.stash(rest);
        }
        // SAFETY: as above.
        keep_last.then(|| unsafe { Frame::from_addr(addrs[m]) })
    }

    /// Puts free frames (carrying no references) into this CPU's cache; what does not fit goes
    /// to the depot.
    #[cold]
    #[inline(never)]
    pub(super) fn stash(&self, mut frames: Fifo<Frame>) {
        while let Some(f) = frames.pop_front() {
            let addr = f.0.as_ptr() as usize;
            match self.percpu.run(None, Op::Push(addr, PUSH_SPARE)) {
                Res::Done(..) => {}
                Res::Refused(_) | Res::NotHere | Res::NoCache => {
                    frames.push_front(f);
                    self.lock_depot().push(frames);
                    return;
                }
            }
        }
    }

    /// Moves half of this CPU's (full) cache to the depot.
    #[cold]
    #[inline(never)]
    pub(super) fn flush_half(&self) {
        self.percpu.counters().flushes.add(1);
        // The popped half is in this thread's hands until the depot has it.
        let mut hand = self.percpu.in_hand();
        let mut out = Fifo::new();
        for _ in 0..self.percpu.cap.div_ceil(2) {
            match self.percpu.run(None, Op::Pop(POP_SPARE)) {
                // SAFETY: the caches hold only addresses of this pool's metadata entries.
                Res::Done(item, _) => out.push_back(unsafe { Frame::from_addr(item) }),
                Res::Refused(_) | Res::NotHere | Res::NoCache => break,
            }
        }
        if !out.is_empty() {
            hand.carried();
            self.lock_depot().push(out);
        }
    }
}

/// Restarts every rseq section in progress (a stack taker's second step); `false` if it
/// cannot, and then nothing may be taken.
pub(super) fn restart_sections() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    {
        crate::rseq::membarrier_rseq()
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
    {
        false
    }
}

/// Takes the first non-empty defer list among `slots` (one probe each), as it was pushed.
pub(super) fn first_drained<'a>(slots: impl Iterator<Item = &'a OwnerSlot>) -> Chain<Frame> {
    for s in slots {
        if !s.looks_empty() {
            let chain = s.drain();
            if !chain.is_empty() {
                return chain;
            }
        }
    }
    Chain::new()
}

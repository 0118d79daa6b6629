//! [`Ring`](crate::ring::Ring): the FIFO storage of pfifo, bfifo and pfifo_head_drop.
//!
//! A packet's queue position is a slot in a power-of-two array holding its link, not a link
//! through the packet itself. Queueing writes only the ring, and a dequeue finds the next packet
//! in the ring, not in the packet before it: a queue deeper than the cache costs what a
//! `VecDeque` of pointers costs plus the read of each packet that its sender makes anyway,
//! instead of a dependent cache miss per packet (an intrusive list must read each head packet
//! to find the next). The slots are one pointer wide: a slot that also carried the length would
//! spare the dequeue that read but double the ring, and measured (pfifo against `VecDeque` at
//! 10 000 and 100 000 queued packets) the wider ring cost more than the read it saved.
//!
//! `head` and `tail` count up forever (a `u64` does not wrap in practice); a slot is
//! `index & mask`. The array starts at a capacity chosen by the qdisc and doubles when a push
//! finds it full, so it allocates only when the queue passes its longest length so far, never
//! in steady state.

use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;

use llist_defer::{Fifo, Link, NodeRef};

use crate::packet::Packet;

/// One queue position: the packet's link.
#[derive(Clone, Copy)]
struct Slot {
    link: *mut Link,
}

const EMPTY: Slot = Slot {
    link: core::ptr::null_mut(),
};

/// An owning FIFO of packets in a growable ring of link slots.
pub(crate) struct Ring<P: Packet> {
    slots: Box<[Slot]>,
    mask: u64,
    head: u64,
    tail: u64,
    _owns: PhantomData<P>,
}

// SAFETY: the ring exclusively owns its packets, like a `VecDeque<P>`; the raw links are only
// turned back into packets by the ring's owner.
unsafe impl<P: Packet> Send for Ring<P> {}

impl<P: Packet> Ring<P> {
    /// An empty ring with room for `capacity` packets (rounded up to a power of two, at
    /// least 2) before its first growth.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let cap = capacity.max(2).next_power_of_two();
        Ring {
            slots: vec![EMPTY; cap].into_boxed_slice(),
            mask: cap as u64 - 1,
            head: 0,
            tail: 0,
            _owns: PhantomData,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        (self.tail - self.head) as usize
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.tail == self.head
    }

    /// Slots before the next growth.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Makes room for `additional` more packets without a further growth: one reservation for
    /// a batch, so that its pushes may use [`push_back_with_room`](Self::push_back_with_room).
    #[inline]
    pub(crate) fn reserve(&mut self, additional: usize) {
        while self.slots.len() - self.len() < additional {
            self.grow();
        }
    }

    /// Queues `pkt` at the back.
    #[inline]
    pub(crate) fn push_back(&mut self, pkt: P) {
        if self.len() == self.slots.len() {
            self.grow();
        }
        // SAFETY: a full ring grew just above, so it has room.
        unsafe { self.push_back_with_room(pkt) };
    }

    /// [`push_back`](Self::push_back) without the growth check, for a caller that knows the
    /// ring has room.
    ///
    /// # Safety
    ///
    /// The ring's length is below its [`capacity`](Self::capacity). On a full ring the write
    /// would land on the front packet's slot, and that slot would then be popped twice (two
    /// owning handles of one packet). Debug builds check.
    #[inline]
    pub(crate) unsafe fn push_back_with_room(&mut self, pkt: P) {
        debug_assert!(
            self.len() < self.slots.len(),
            "push_back_with_room on a full ring"
        );
        let link = pkt.into_link().as_ptr();
        *self.slot_mut(self.tail) = Slot { link };
        self.tail += 1;
    }

    /// Moves the first `n` packets of `src` to the back, in order, and returns the sum of
    /// their lengths. The slots are written as one contiguous run, or two at the wrap, with the
    /// tail and the source queue kept in registers and stored once: no growth check, no index
    /// mask per packet. One pass reads each packet once (its link and its length).
    ///
    /// If a packet's `len` panics, the packets moved before it stay queued and counted in
    /// `*bytes_in`, the ones after it stay in `src`, and only that one is lost.
    ///
    /// # Safety
    ///
    /// The ring has room for `n` more packets (after [`reserve`](Self::reserve)`(n)`) and
    /// `src` holds at least `n`. A shorter `src` stops the move early (safe); too little room
    /// would overwrite queued slots (two owning handles of one packet). Debug builds check.
    #[inline(always)]
    pub(crate) unsafe fn push_back_from(
        &mut self,
        src: &mut Fifo<P>,
        n: usize,
        bytes_in: &mut u64,
    ) {
        debug_assert!(
            self.slots.len() - self.len() >= n,
            "push_back_from without room"
        );
        let start = (self.tail & self.mask) as usize;
        let first = n.min(self.slots.len() - start);
        // The runs are cut before the move starts: nothing but a packet's `len` may panic
        // while it is under way, so the move's state needs no memory of its own.
        let (front, back) = self.slots.split_at_mut(start);
        let (run1, run2) = (&mut back[..first], &mut front[..n - first]);
        let mut m = Move {
            rest: ManuallyDrop::new(core::mem::take(src)),
            src,
            tail: &mut self.tail,
            moved: 0,
            bytes_in,
            bytes: 0,
        };
        m.fill(run1);
        m.fill(run2);
    }

    /// Takes the front packet.
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<P> {
        if self.is_empty() {
            return None;
        }
        let slot = *self.slot(self.head);
        self.head += 1;
        // SAFETY: a slot between head and tail holds a non-null link from `into_link` that only
        // this ring owns; moving `head` past it gives ownership back exactly once.
        Some(unsafe { P::from_link(NonNull::new_unchecked(slot.link)) })
    }

    /// Takes up to `max` packets from the front, oldest first, handing each to `f`; returns
    /// how many. With `prefetch` set (a queue deeper than the cache), each take also hints the
    /// packet `ahead` places further back, as [`prefetch`](Self::prefetch) does one by one; the
    /// depth test is made once for the batch. The front position stays in a register and is
    /// stored once, when the batch ends or `f` panics (then the packet in `f`'s hands is its
    /// own, and the rest stay queued).
    #[inline]
    pub(crate) fn pop_front_batch(
        &mut self,
        max: usize,
        ahead: u64,
        prefetch: bool,
        mut f: impl FnMut(P),
    ) -> usize {
        let n = max.min(self.len());
        // Hints past the tail would read stale slots: only while `ahead` packets remain. The
        // hinted takes come first and the rest follow in a loop without the test.
        let hinted = if prefetch {
            (self.tail.saturating_sub(ahead).saturating_sub(self.head) as usize).min(n)
        } else {
            0
        };
        let Ring {
            slots, mask, head, ..
        } = self;
        let slot = |pos: u64| {
            // SAFETY: as in `slot`: `mask` is `slots.len() - 1` for a power-of-two length.
            unsafe { slots.get_unchecked((pos & *mask) as usize) }.link
        };
        let mut front = Front { pos: *head, head };
        for _ in 0..hinted {
            llist_defer::hint::prefetch(slot(front.pos + ahead));
            let link = slot(front.pos);
            front.pos += 1;
            // SAFETY: at most `len()` packets are taken; a slot between head and tail holds a
            // non-null link from `into_link` that only this ring owns, and `front` moves past
            // it before `f` runs, so it is given back exactly once.
            f(unsafe { P::from_link(NonNull::new_unchecked(link)) });
        }
        for _ in hinted..n {
            let link = slot(front.pos);
            front.pos += 1;
            // SAFETY: as above.
            f(unsafe { P::from_link(NonNull::new_unchecked(link)) });
        }
        n
    }

    /// Packets ever taken from the front (dequeued or dropped from the queue).
    #[inline]
    pub(crate) fn popped(&self) -> u64 {
        self.head
    }

    /// Hints the CPU to load the packet `ahead` places behind the front, so that whoever sends
    /// it finds it in cache, if more than `min_len` packets are queued (a shorter queue's
    /// packets are still in cache, and the hint would only cost). Only a hint.
    #[inline]
    pub(crate) fn prefetch(&self, ahead: u64, min_len: u64) {
        if self.tail - self.head > ahead.max(min_len) {
            llist_defer::hint::prefetch(self.slot(self.head + ahead).link);
        }
    }

    /// A view of the front packet.
    #[inline]
    pub(crate) fn front(&self) -> Option<NodeRef<'_, P>> {
        if self.is_empty() {
            return None;
        }
        // SAFETY: the slot at head holds a non-null link from `into_link` (the ring is not
        // empty); the ring owns that packet and stays borrowed while the view lives.
        Some(unsafe { NodeRef::new(NonNull::new_unchecked(self.slot(self.head).link)) })
    }

    /// The slot that position `pos` (a head or tail count) maps to.
    #[inline(always)]
    fn slot(&self, pos: u64) -> &Slot {
        // SAFETY: `mask` is `slots.len() - 1` for a power-of-two length (set together in
        // `with_capacity` and `grow`), so `pos & mask` is always in bounds. The hot loops of
        // every FIFO qdisc run through here; the checked index cost two loads and a branch.
        unsafe { self.slots.get_unchecked((pos & self.mask) as usize) }
    }

    /// [`slot`](Self::slot), writable.
    #[inline(always)]
    fn slot_mut(&mut self, pos: u64) -> &mut Slot {
        // SAFETY: as in `slot`.
        unsafe { self.slots.get_unchecked_mut((pos & self.mask) as usize) }
    }

    /// Doubles the array, keeping the order (the slots are re-laid from the new mask).
    #[cold]
    fn grow(&mut self) {
        let cap = self.slots.len() * 2;
        let mut slots = vec![EMPTY; cap].into_boxed_slice();
        let mask = cap as u64 - 1;
        for i in self.head..self.tail {
            slots[(i & mask) as usize] = self.slots[(i & self.mask) as usize];
        }
        self.slots = slots;
        self.mask = mask;
    }
}

/// [`Ring::pop_front_batch`] in progress: the front position, stored back once, when the batch
/// ends or unwinds.
struct Front<'a> {
    head: &'a mut u64,
    pos: u64,
}

impl Drop for Front<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        *self.head = self.pos;
    }
}

/// [`Ring::push_back_from`] in progress: the source queue and the counts live here, in
/// registers, and are stored back once, when the move ends or unwinds.
struct Move<'a, P: Packet> {
    src: &'a mut Fifo<P>,
    /// The packets not yet moved, taken out of `src` for the move. Handed back by value in
    /// `drop`, never dropped here: so that no call sees its address and it stays in registers.
    rest: ManuallyDrop<Fifo<P>>,
    tail: &'a mut u64,
    /// Slots written past `*tail`.
    moved: u64,
    bytes_in: &'a mut u64,
    /// Their lengths, summed.
    bytes: u64,
}

impl<P: Packet> Move<'_, P> {
    /// Fills `run` (free slots, in ring order) from the front of `rest`.
    #[inline(always)]
    fn fill(&mut self, run: &mut [Slot]) {
        for slot in run {
            let Some(pkt) = self.rest.pop_front() else {
                return;
            };
            self.bytes += pkt.len() as u64;
            slot.link = pkt.into_link().as_ptr();
            self.moved += 1;
        }
    }
}

impl<P: Packet> Drop for Move<'_, P> {
    #[inline(always)]
    fn drop(&mut self) {
        *self.tail += self.moved;
        *self.bytes_in += self.bytes;
        // `src` was emptied when the move began: what is left goes back in order, and `rest`
        // is left empty.
        *self.src = core::mem::take(&mut *self.rest);
    }
}

impl<P: Packet> Drop for Ring<P> {
    fn drop(&mut self) {
        while self.pop_front().is_some() {}
    }
}

#[cfg(all(test, not(lockless_loom)))]
mod tests {
    use super::Ring;
    use crate::{Packet, TestPacket};
    use llist_defer::Fifo;

    #[test]
    fn grows_when_full_keeping_order_across_the_wrap() {
        let mut r = Ring::with_capacity(4);
        let (mut next_in, mut next_out) = (0u64, 0u64);
        // Move head into the middle of the array so that the live slots wrap, then overfill.
        for _ in 0..3 {
            r.push_back(TestPacket::new(next_in, 60));
            next_in += 1;
        }
        for _ in 0..2 {
            assert_eq!(r.pop_front().unwrap().id(), next_out);
            next_out += 1;
        }
        for _ in 0..20 {
            r.push_back(TestPacket::new(next_in, 60));
            next_in += 1;
        }
        assert_eq!(r.len(), 21);
        assert_eq!(r.front().unwrap().id(), next_out);
        while let Some(p) = r.pop_front() {
            assert_eq!(p.id(), next_out);
            next_out += 1;
        }
        assert_eq!(next_out, next_in);
        assert_eq!(r.popped(), next_in);
        assert!(r.front().is_none());
    }

    #[test]
    fn batch_moves_keep_order_and_bytes_across_the_wrap() {
        let mut r = Ring::with_capacity(8);
        let (mut next_in, mut next_out) = (0u64, 0u64);
        // Head at 5 of 8: a move of 6 writes slots 5..8 then 0..3 (two runs).
        for _ in 0..5 {
            r.push_back(TestPacket::new(next_in, 60));
            next_in += 1;
        }
        for _ in 0..5 {
            assert_eq!(r.pop_front().unwrap().id(), next_out);
            next_out += 1;
        }
        let mut src: Fifo<TestPacket> = (0..7)
            .map(|i| TestPacket::new(next_in + i, 100 + i as usize))
            .collect();
        let mut bytes_in = 0;
        r.reserve(6);
        // SAFETY: `reserve(6)` above, and `src` holds 7.
        unsafe { r.push_back_from(&mut src, 6, &mut bytes_in) };
        next_in += 6;
        assert_eq!(bytes_in, (100..106).sum::<u64>());
        assert_eq!(r.len(), 6);
        // The packet not moved stays in the source, in place.
        assert_eq!(src.len(), 1);
        assert_eq!(src.front().unwrap().id(), next_in);

        let mut out = Fifo::new();
        let mut bytes_out = 0;
        let n = r.pop_front_batch(4, 2, true, |p| {
            bytes_out += p.len() as u64;
            out.push_back(p);
        });
        assert_eq!(n, 4);
        assert_eq!(bytes_out, (100..104).sum::<u64>());
        let n = r.pop_front_batch(32, 2, false, |p| out.push_back(p));
        assert_eq!(n, 2);
        assert!(r.is_empty());
        assert_eq!(r.popped(), next_in);
        for p in out {
            assert_eq!(p.id(), next_out);
            next_out += 1;
        }
        assert_eq!(next_out, next_in);
    }
}

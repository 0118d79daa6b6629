//! [`FlowList`]: one of a band's round-robin lists of flows (`struct fq_flow_head`), as a ring of
//! flow indices. Owns only the order of the indices; it must not read or write the flows.
//!
//! A ring rather than links through the flows: appending a flow does not write its
//! predecessor's line, and a dequeue knows the flows after the head without reading them, so the
//! batched dequeue can start loading them (see `batch`). The kernel's lists are only appended to
//! and popped from the front, so a ring holds the same sequence.
//!
//! The first index is kept apart, as the kernel keeps `first`: is-empty and front, asked several
//! times a dequeue, read one field. The indices behind it are in a power-of-two array indexed by
//! free-running `u32` positions, so a push or pop is an add and a mask: no wrap-around test and
//! no capacity that is not a power of two. (A `VecDeque` here cost the per-packet path of the
//! `qdisc` bench's fq loop about 7 % at 1 and 1 000 flows.) The array doubles
//! when a push finds it full, so it allocates only when the list passes its longest length so
//! far, never in steady state.

use core::fmt;

use super::flow::NIL;

/// Capacity of the first allocation.
const MIN_CAPACITY: usize = 16;

/// A FIFO of flow indices.
#[derive(Clone)]
pub(super) struct FlowList {
    /// The first index, or [`NIL`] when the list is empty: beside `head` and `tail` in the
    /// band's line, so the scheduler's most frequent questions (empty? which flow first?) are one
    /// load, as with the kernel's `first` pointer.
    first: u32,
    /// Free-running positions of the indices after the first: `head .. tail` (wrapping), slot
    /// `pos & mask`.
    head: u32,
    tail: u32,
    /// Power-of-two length, or empty before the first push behind a first index.
    slots: Box<[u32]>,
}

impl Default for FlowList {
    fn default() -> Self {
        FlowList {
            first: NIL,
            head: 0,
            tail: 0,
            slots: Box::default(),
        }
    }
}

impl FlowList {
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// Indices behind the first.
    #[inline]
    fn rest(&self) -> usize {
        self.tail.wrapping_sub(self.head) as usize
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        usize::from(self.first != NIL) + self.rest()
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.first == NIL
    }

    /// The slot of position `pos`.
    #[inline]
    fn slot(&self, pos: u32) -> usize {
        pos as usize & self.slots.len().wrapping_sub(1)
    }

    /// The index at position `pos`, which must be in `head .. tail`.
    #[inline]
    fn at(&self, pos: u32) -> u32 {
        debug_assert!(pos.wrapping_sub(self.head) < self.tail.wrapping_sub(self.head));
        // SAFETY: a position in `head .. tail` means the ring is not empty, so `slots` is
        // allocated, and `slot` masks with `slots.len() - 1`, which is below `slots.len()`.
        unsafe { *self.slots.get_unchecked(self.slot(pos)) }
    }

    #[inline]
    pub(super) fn front(&self) -> Option<u32> {
        (self.first != NIL).then_some(self.first)
    }

    /// The index `i` places behind the head.
    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<u32> {
        if i == 0 {
            self.front()
        } else if i - 1 < self.rest() {
            // `i - 1 < rest <= u32::MAX`, so the cast keeps it.
            Some(self.at(self.head.wrapping_add((i - 1) as u32)))
        } else {
            None
        }
    }

    /// The indices `i ≥ 1` and `i + 1` places behind the head, if both are in the list
    /// (when only the first is, the look-ahead it serves is near the list's end, where the
    /// lines are few; a hint, so both or neither).
    #[inline]
    pub(super) fn two_behind(&self, i: usize) -> Option<(u32, u32)> {
        debug_assert!(i >= 1);
        // Positions head + i - 1 and head + i of the ring, both below tail.
        if i >= self.rest() {
            return None;
        }
        let pos = self.head.wrapping_add((i - 1) as u32);
        Some((self.at(pos), self.at(pos.wrapping_add(1))))
    }

    #[inline]
    pub(super) fn push_back(&mut self, idx: u32) {
        debug_assert_ne!(idx, NIL);
        if self.first == NIL {
            debug_assert_eq!(self.head, self.tail);
            self.first = idx;
            return;
        }
        if self.rest() == self.slots.len() {
            self.grow();
        }
        let at = self.slot(self.tail);
        // SAFETY: after the check above `slots` is allocated and has room, and `slot` masks
        // with `slots.len() - 1`, which is below `slots.len()`.
        unsafe { *self.slots.get_unchecked_mut(at) = idx };
        self.tail = self.tail.wrapping_add(1);
    }

    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<u32> {
        let idx = self.front()?;
        if self.head == self.tail {
            self.first = NIL;
        } else {
            self.first = self.at(self.head);
            self.head = self.head.wrapping_add(1);
        }
        Some(idx)
    }

    pub(super) fn clear(&mut self) {
        self.first = NIL;
        self.head = 0;
        self.tail = 0;
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Doubles the ring, the indices behind the first moved to its start in order.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let cap = (2 * self.slots.len()).max(MIN_CAPACITY);
        // A full ring of 2^32 positions would have `tail == head`, as an empty one has.
        assert!(cap < 1 << 32, "more flows on one list than u32 positions");
        let mut slots = vec![0u32; cap].into_boxed_slice();
        let rest = self.rest();
        for (s, pos) in slots.iter_mut().zip(0..rest as u32) {
            *s = self.at(self.head.wrapping_add(pos));
        }
        self.slots = slots;
        self.head = 0;
        self.tail = rest as u32;
    }
}

impl fmt::Debug for FlowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::FlowList;

    /// Pushes and pops across wrap-arounds and growths agree with a `VecDeque`.
    #[test]
    fn matches_vecdeque() {
        let mut l = FlowList::new();
        let mut m = VecDeque::new();
        let mut x = 1u32;
        for step in 0..20_000u32 {
            // xorshift: a push-heavy phase, then a pop-heavy one, then balanced.
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let push = match step / 5000 {
                0 => x % 4 != 0,
                1 => x % 4 == 0,
                _ => x % 2 == 0,
            };
            if push {
                l.push_back(step);
                m.push_back(step);
            } else {
                assert_eq!(l.pop_front(), m.pop_front());
            }
            assert_eq!(l.len(), m.len());
            assert_eq!(l.front(), m.front().copied());
            for i in [1, 7, m.len().saturating_sub(1), m.len()] {
                assert_eq!(l.get(i), m.get(i).copied());
                if i >= 1 {
                    let both = m.get(i).copied().zip(m.get(i + 1).copied());
                    assert_eq!(l.two_behind(i), both);
                }
            }
        }
        assert!(l.iter().eq(m.iter().copied()));
        l.clear();
        assert!(l.is_empty() && l.pop_front().is_none());
    }
}

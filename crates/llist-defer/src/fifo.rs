//! [`Fifo`]: a single-owner intrusive queue over the same [`Link`], with O(1) push at both ends,
//! pop, append and length.
//!
//! It is what a drained [`Chain`](crate::Chain) becomes after reversal, what a qdisc band or flow
//! queues its packets in, and what a driver is handed as a batch, so a packet moves from a
//! producer to the wire without one allocation.

use core::fmt;
use core::marker::PhantomData;
use core::ptr::{self, NonNull};

use crate::link::{Link, Node, NodeRef};
use crate::llist::Iter;

/// A non-atomic intrusive FIFO of owned nodes (head, tail and length).
///
/// ```
/// use llist_defer::{Boxed, Fifo};
///
/// let mut q = Fifo::new();
/// q.push_back(Boxed::new(2));
/// q.push_back(Boxed::new(3));
/// q.push_front(Boxed::new(1));
/// assert_eq!(q.len(), 3);
/// assert_eq!(**q.front().unwrap(), 1);
/// let all: Vec<i32> = q.into_iter().map(Boxed::into_inner).collect();
/// assert_eq!(all, [1, 2, 3]);
/// ```
pub struct Fifo<N: Node> {
    head: *mut Link,
    tail: *mut Link,
    len: usize,
    _owns: PhantomData<N>,
}

// SAFETY: a Fifo exclusively owns its nodes, like a `VecDeque<N>`.
unsafe impl<N: Node + Send> Send for Fifo<N> {}
// SAFETY: shared access only gives `&N` views.
unsafe impl<N: Node + Sync> Sync for Fifo<N> {}

impl<N: Node> Fifo<N> {
    /// An empty queue.
    pub const fn new() -> Self {
        Fifo {
            head: ptr::null_mut(),
            tail: ptr::null_mut(),
            len: 0,
            _owns: PhantomData,
        }
    }

    /// # Safety
    ///
    /// `head..=tail` is a null-terminated chain of `len` links made by `N::into_link`, owned by
    /// nobody else (or all three are null/0).
    pub(crate) unsafe fn from_raw_parts(head: *mut Link, tail: *mut Link, len: usize) -> Self {
        Fifo {
            head,
            tail,
            len,
            _owns: PhantomData,
        }
    }

    /// Gives up the nodes as a raw `(first, last)` chain, for [`LList::add_batch`](crate::LList::add_batch).
    pub(crate) fn into_raw_ends(self) -> Option<(NonNull<Link>, NonNull<Link>)> {
        let ends = NonNull::new(self.head).zip(NonNull::new(self.tail));
        core::mem::forget(self);
        ends
    }

    /// Relinks the nodes back to front and gives them up as a raw `(newest, oldest, len)`
    /// chain: the shape [`LList`](crate::LList) stores, so that a detached list reversed to FIFO
    /// yields them in this queue's order. O(n), touching each link once. `None` if empty.
    pub(crate) fn into_raw_newest_first(self) -> Option<(NonNull<Link>, NonNull<Link>, usize)> {
        let (oldest, newest, len) = (NonNull::new(self.head)?, NonNull::new(self.tail)?, self.len);
        core::mem::forget(self);
        let (mut prev, mut before): (*mut Link, *mut Link) = (ptr::null_mut(), ptr::null_mut());
        let mut cur = oldest.as_ptr();
        while let Some(link) = NonNull::new(cur) {
            // SAFETY: `link` is a node of the chain we own (the queue gave it up above).
            let link = unsafe { link.as_ref() };
            cur = link.next();
            link.set_next(prev);
            // The drain hint inside the chain (two nodes older); a push sets the oldest's.
            link.set_hint(before);
            before = prev;
            prev = link as *const Link as *mut Link;
        }
        Some((newest, oldest, len))
    }

    /// Number of nodes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the queue has no node.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a node at the back.
    #[inline]
    pub fn push_back(&mut self, node: N) {
        let link = node.into_link();
        // SAFETY: the node was just given to us; its link is ours to write.
        unsafe { link.as_ref() }.set_next(ptr::null_mut());
        match NonNull::new(self.tail) {
            // SAFETY: the tail is a node we own.
            Some(tail) => unsafe { tail.as_ref() }.set_next(link.as_ptr()),
            None => self.head = link.as_ptr(),
        }
        self.tail = link.as_ptr();
        self.len += 1;
    }

    /// Puts a node at the front (a requeue: it leaves first).
    #[inline]
    pub fn push_front(&mut self, node: N) {
        let link = node.into_link();
        // SAFETY: the node was just given to us; its link is ours to write.
        unsafe { link.as_ref() }.set_next(self.head);
        if self.head.is_null() {
            self.tail = link.as_ptr();
        }
        self.head = link.as_ptr();
        self.len += 1;
    }

    /// Removes the front node.
    #[inline]
    pub fn pop_front(&mut self) -> Option<N> {
        let link = NonNull::new(self.head)?;
        // SAFETY: the head is a node we own.
        self.head = unsafe { link.as_ref() }.next();
        if self.head.is_null() {
            self.tail = ptr::null_mut();
        }
        self.len -= 1;
        // SAFETY: it came from `into_link` and leaves the queue exactly once.
        Some(unsafe { N::from_link(link) })
    }

    /// The front node's link, if any: for a caller that prefetches more of the node than its
    /// link's line (see [`prefetch_front`](Self::prefetch_front)). Reading the pointer touches
    /// no node.
    #[inline]
    pub fn front_link(&self) -> Option<NonNull<Link>> {
        NonNull::new(self.head)
    }

    /// Hints the CPU to load the front node's link (and so the start of the node) now, so that
    /// the next [`pop_front`](Self::pop_front) does not wait for memory. Call it after a pop,
    /// when the queue is long enough that its head has left the cache. Only a hint: see
    /// [`hint::prefetch`](crate::hint::prefetch); an empty queue prefetches nothing.
    #[inline]
    pub fn prefetch_front(&self) {
        if !self.head.is_null() {
            crate::hint::prefetch(self.head);
        }
    }

    /// A view of the front node.
    #[inline]
    pub fn front(&self) -> Option<NodeRef<'_, N>> {
        // SAFETY: the node is ours and `self` stays borrowed while the view lives.
        NonNull::new(self.head).map(|link| unsafe { NodeRef::new(link) })
    }

    /// A view of the back node.
    #[inline]
    pub fn back(&self) -> Option<NodeRef<'_, N>> {
        // SAFETY: as in `front`.
        NonNull::new(self.tail).map(|link| unsafe { NodeRef::new(link) })
    }

    /// Moves every node of `other` to the back of `self` in O(1), leaving `other` empty.
    pub fn append(&mut self, other: &mut Fifo<N>) {
        if other.is_empty() {
            return;
        }
        match NonNull::new(self.tail) {
            // SAFETY: our tail is a node we own.
            Some(tail) => unsafe { tail.as_ref() }.set_next(other.head),
            None => self.head = other.head,
        }
        self.tail = other.tail;
        self.len += other.len;
        // Plain field writes: assigning a new `Fifo` would drop the nodes we just took.
        other.head = ptr::null_mut();
        other.tail = ptr::null_mut();
        other.len = 0;
    }

    /// Moves every node of `other` to the front of `self` in O(1) (a batch requeue), leaving
    /// `other` empty; `other`'s order is kept.
    pub fn prepend(&mut self, other: &mut Fifo<N>) {
        other.append(self);
        core::mem::swap(self, other);
    }

    /// Borrowing iterator, front to back.
    pub fn iter(&self) -> Iter<'_, N> {
        // SAFETY: the chain is ours and `self` stays borrowed while the iterator lives.
        unsafe { Iter::from_raw(self.head) }
    }
}

impl<N: Node> Default for Fifo<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<N: Node> Drop for Fifo<N> {
    fn drop(&mut self) {
        while self.pop_front().is_some() {}
    }
}

impl<N: Node> Extend<N> for Fifo<N> {
    fn extend<I: IntoIterator<Item = N>>(&mut self, iter: I) {
        for n in iter {
            self.push_back(n);
        }
    }
}

impl<N: Node> FromIterator<N> for Fifo<N> {
    fn from_iter<I: IntoIterator<Item = N>>(iter: I) -> Self {
        let mut q = Fifo::new();
        q.extend(iter);
        q
    }
}

impl<N: Node> IntoIterator for Fifo<N> {
    type Item = N;
    type IntoIter = IntoIter<N>;
    fn into_iter(self) -> IntoIter<N> {
        IntoIter(self)
    }
}

/// By-value iterator over a [`Fifo`], front to back.
pub struct IntoIter<N: Node>(Fifo<N>);

impl<N: Node> Iterator for IntoIter<N> {
    type Item = N;
    #[inline]
    fn next(&mut self) -> Option<N> {
        self.0.pop_front()
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.0.len, Some(self.0.len))
    }
}

impl<N: Node> ExactSizeIterator for IntoIter<N> {}

impl<N: Node> fmt::Debug for IntoIter<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntoIter")
            .field("remaining", &self.0.len)
            .finish()
    }
}

impl<N: Node> fmt::Debug for Fifo<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fifo").field("len", &self.len).finish()
    }
}

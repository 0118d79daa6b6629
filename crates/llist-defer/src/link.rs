//! The intrusive link and the [`Node`] contract that lets an owning handle live on a list.
//!
//! The kernel's `struct llist_node` is one pointer embedded in the object it links (in an skb it
//! shares a union with `next`/`prev`). [`Link`] is the same pointer plus a second word, the
//! drain hint, inside the item, so putting an item on a list allocates nothing. [`Node`] is
//! implemented by the *owning handle* of such an item (a `Box`, a frame handle): giving the
//! handle to a list turns it into a pointer to its link, and taking it off turns the pointer
//! back into the handle.

use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use crate::sync::{AtomicPtr, HintPtr, Ordering};

/// One intrusive link: the `next` pointer of the kernel's `llist_node`, and a drain hint.
///
/// Embed it in the item an owning handle points at, and implement [`Node`] for the handle.
/// While the item is on a list the list owns the link; the handle's user never touches it.
///
/// # The drain hint
///
/// A drainer walks a detached chain one dependent load at a time: the next node's address is in
/// the node it is reading, and when the pushers ran on another core every step is a cache miss.
/// So a push onto a [`DeferList`](crate::DeferList) also records, in its own link, the node two
/// places further down (the `next` of the head it links to), and
/// [`Chain::reverse`](crate::Chain::reverse) prefetches that node while it reads the one in
/// between: two misses in flight instead of one. The pusher reads the old head's `next` only
/// if that head is the node the same thread pushed last (so the read hits this core's cache),
/// only where the node type says that memory cannot have been freed meanwhile
/// ([`Node::peek_next`]; by default it never does, and the hint stays null), and only if the
/// list has hints on ([`DeferList::with_drain_hints`](crate::DeferList::with_drain_hints)). A
/// hint is only ever prefetched, never followed: a stale or wrong one costs a wasted load,
/// nothing else.
pub struct Link {
    // An atomic only so that loom tracks it: every access is `Relaxed`, because the list's own
    // head CAS (Release) and swap (Acquire) order the link writes before the reads; a pusher's
    // `Node::peek_next` may read it while another thread owns the node, which an atomic allows.
    next: AtomicPtr<Link>,
    // The node two places down the chain when this one was pushed, or null: only prefetched.
    hint: HintPtr<Link>,
}

impl Link {
    /// A fresh, unlinked link.
    pub fn new() -> Self {
        Link {
            next: AtomicPtr::new(ptr::null_mut()),
            hint: HintPtr::new(ptr::null_mut()),
        }
    }

    #[inline]
    pub(crate) fn next(&self) -> *mut Link {
        self.next.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn set_next(&self, next: *mut Link) {
        self.next.store(next, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn hint(&self) -> *mut Link {
        self.hint.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn set_hint(&self, hint: *mut Link) {
        self.hint.store(hint, Ordering::Relaxed);
    }

    /// Reads the `next` pointer of a link that may belong to a list or a thread other than the
    /// caller's, as a drain hint (for implementations of [`Node::peek_next`]). The value may be
    /// stale by the time it is used, or belong to another list; it is fit only to be
    /// prefetched.
    ///
    /// # Safety
    ///
    /// `link` points to a [`Link`] whose memory is allocated for the whole call (it need not be
    /// the caller's, and another thread may be writing it: the read is atomic).
    #[inline]
    pub unsafe fn peek_next(link: NonNull<Link>) -> *mut Link {
        // SAFETY: the caller guarantees the memory is allocated; the field is an atomic, so a
        // concurrent write by the link's owner is not a data race.
        unsafe { link.as_ref() }.next()
    }
}

impl Default for Link {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link").finish_non_exhaustive()
    }
}

/// An owning handle whose item embeds a [`Link`], so it can sit on an [`LList`](crate::LList),
/// a [`DeferList`](crate::DeferList), a [`Chain`](crate::Chain) or a [`Fifo`](crate::Fifo)
/// without allocating.
///
/// # Safety
///
/// Implementors promise that:
/// - [`into_link`](Node::into_link) gives up ownership and returns a pointer to a [`Link`] that
///   stays valid, and is read or written by nobody but the list, until
///   [`from_link`](Node::from_link) is called with that pointer;
/// - `from_link(into_link(x))` gives back a handle equivalent to `x`, and creating a handle with
///   `from_link` has no side effect other than taking ownership (so a borrowed view made by
///   wrapping it in `ManuallyDrop` is harmless);
/// - each item has one link, so a handle is on at most one list at a time.
///
/// # Examples
///
/// ```
/// use core::ptr::NonNull;
/// use llist_defer::{Link, Node};
///
/// #[repr(C)] // the link first, so a pointer to the item is a pointer to its link
/// struct Packet {
///     link: Link,
///     len: u32,
/// }
///
/// struct PacketBox(Box<Packet>);
///
/// // SAFETY: the box's allocation keeps the link alive and unaliased while the list holds the
/// // raw pointer, and `from_link` rebuilds the very same box.
/// unsafe impl Node for PacketBox {
///     fn into_link(self) -> NonNull<Link> {
///         NonNull::from(Box::leak(self.0)).cast()
///     }
///     unsafe fn from_link(link: NonNull<Link>) -> Self {
///         // SAFETY: the caller passes a pointer made by `into_link`, i.e. a leaked box.
///         PacketBox(unsafe { Box::from_raw(link.cast::<Packet>().as_ptr()) })
///     }
/// }
///
/// let list = llist_defer::LList::new();
/// assert!(list.add(PacketBox(Box::new(Packet { link: Link::new(), len: 60 }))));
/// let got: Vec<u32> = list.take_all().into_iter().map(|p| p.0.len).collect();
/// assert_eq!(got, [60]);
/// ```
pub unsafe trait Node: Sized {
    /// Gives up the handle and returns its item's link.
    fn into_link(self) -> NonNull<Link>;

    /// Rebuilds the handle from its link.
    ///
    /// # Safety
    ///
    /// - `link` was returned by [`into_link`](Node::into_link) of this same type;
    /// - no handle has been rebuilt from it since (ownership is taken back exactly once).
    unsafe fn from_link(link: NonNull<Link>) -> Self;

    /// The drain hint of a push (see [`Link`]): the `next` of `head`, the node
    /// the pushed chain is about to be linked in front of, if this type can read it safely
    /// (with [`Link::peek_next`]), else null. The default returns null: no hint.
    ///
    /// `head` was at the head of the list a moment ago, but another thread may have taken it
    /// since and may even have dropped it. Override this only for a type whose memory outlives
    /// that: for example items in an arena that `mine`'s handle keeps alive, checked by address.
    /// What it returns is only ever prefetched.
    ///
    /// # Safety
    ///
    /// Callers: `mine` is a link of this type that the caller owns (a node it is pushing), and
    /// `head` a link of this type that was on a list (not necessarily still there). The
    /// implementation may read `head` only through [`Link::peek_next`], and only if `head`'s
    /// memory is certain to stay allocated during the call.
    #[inline]
    unsafe fn peek_next(mine: NonNull<Link>, head: NonNull<Link>) -> *mut Link {
        let _ = (mine, head);
        ptr::null_mut()
    }
}

/// A shared view of a node that a container still owns (for `peek` and `iter`).
///
/// It derefs to the handle, so `peek.len()` calls the handle's own methods.
pub struct NodeRef<'a, N: Node> {
    node: ManuallyDrop<N>,
    _owner: PhantomData<&'a N>,
}

impl<N: Node> NodeRef<'_, N> {
    /// A view of the node whose link is `link`, for a container of nodes (this crate's, or one
    /// written elsewhere over [`Node::into_link`]) to hand out from `peek` or `iter`.
    ///
    /// # Safety
    ///
    /// `link` came from [`Node::into_link`] of `N`, is owned by a container that stays
    /// borrowed (shared) for `'a`, and the container does not hand the node out meanwhile.
    #[inline]
    pub unsafe fn new(link: NonNull<Link>) -> Self {
        // SAFETY: per the `Node` contract a rebuilt handle that is never dropped is only a view;
        // the container keeps ownership and is borrowed for as long as this view lives.
        let node = ManuallyDrop::new(unsafe { N::from_link(link) });
        NodeRef {
            node,
            _owner: PhantomData,
        }
    }
}

impl<N: Node> Deref for NodeRef<'_, N> {
    type Target = N;
    #[inline]
    fn deref(&self) -> &N {
        &self.node
    }
}

impl<N: Node + fmt::Debug> fmt::Debug for NodeRef<'_, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

#[repr(C)]
struct BoxedItem<T> {
    link: Link,
    value: T,
}

/// The convenience node for any `T`: a box holding a [`Link`] and the value.
///
/// Each `Boxed::new` allocates once; pushing and taking it afterwards does not. Hot paths embed
/// a [`Link`] in their own items instead (the frame pool's `Skb` does).
///
/// ```
/// use llist_defer::{Boxed, LList};
///
/// let list = LList::new();
/// list.add(Boxed::new(1));
/// list.add(Boxed::new(2));
/// let fifo: Vec<i32> = list.take_all().reverse().into_iter().map(Boxed::into_inner).collect();
/// assert_eq!(fifo, [1, 2]);
/// ```
pub struct Boxed<T>(Box<BoxedItem<T>>);

impl<T> Boxed<T> {
    /// Boxes `value` with a fresh link.
    pub fn new(value: T) -> Self {
        Boxed(Box::new(BoxedItem {
            link: Link::new(),
            value,
        }))
    }

    /// Unboxes the value.
    pub fn into_inner(self) -> T {
        self.0.value
    }
}

impl<T> Deref for Boxed<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0.value
    }
}

impl<T> DerefMut for Boxed<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0.value
    }
}

impl<T: fmt::Debug> fmt::Debug for Boxed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Boxed").field(&self.0.value).finish()
    }
}

// SAFETY: the link is the first field of a `repr(C)` heap item, so the item pointer is the link
// pointer; the leaked box keeps it alive and unaliased until `from_link` rebuilds the same box.
unsafe impl<T> Node for Boxed<T> {
    #[inline]
    fn into_link(self) -> NonNull<Link> {
        NonNull::from(Box::leak(self.0)).cast()
    }

    #[inline]
    unsafe fn from_link(link: NonNull<Link>) -> Self {
        // SAFETY: the caller guarantees `link` came from `into_link`, i.e. from a leaked
        // `Box<BoxedItem<T>>` whose first field is the link.
        Boxed(unsafe { Box::from_raw(link.cast::<BoxedItem<T>>().as_ptr()) })
    }
}

#[cfg(all(test, not(lockless_loom)))]
mod tests {
    use super::*;
    use crate::{DeferList, Fifo};

    /// An item of a test arena that outlives every list here, so a pusher may read any head.
    #[repr(C)]
    struct Item {
        link: Link,
        id: usize,
    }

    struct InArena(NonNull<Item>);

    // SAFETY: the handle is a pointer into an arena that outlives every thread of the test.
    unsafe impl Send for InArena {}

    // SAFETY: `into_link` gives the item's first field; `from_link` rebuilds the same pointer.
    // `peek_next` reads only through `Link::peek_next`, and every item lives in an arena that
    // outlives the lists of the test.
    unsafe impl Node for InArena {
        fn into_link(self) -> NonNull<Link> {
            self.0.cast()
        }
        unsafe fn from_link(link: NonNull<Link>) -> Self {
            InArena(link.cast())
        }
        unsafe fn peek_next(_: NonNull<Link>, head: NonNull<Link>) -> *mut Link {
            // SAFETY: the arena is alive for the whole test.
            unsafe { Link::peek_next(head) }
        }
    }

    fn hint_of(arena: &[Item], i: usize) -> Option<usize> {
        let h = arena[i].link.hint();
        arena.iter().position(|it| core::ptr::eq(&it.link, h))
    }

    #[test]
    fn a_push_records_the_node_two_places_down_and_reverse_keeps_the_order() {
        let arena: Vec<Item> = (0..7)
            .map(|id| Item {
                link: Link::new(),
                id,
            })
            .collect();
        let node = |i: usize| InArena(NonNull::from(&arena[i]));
        let list = DeferList::new();
        for i in 0..4 {
            list.push(node(i)).unwrap();
        }
        // Chain now 3 → 2 → 1 → 0: each push linked in front of the head and hinted its next.
        let hints: Vec<_> = (0..4).map(|i| hint_of(&arena, i)).collect();
        assert_eq!(hints, [None, None, Some(0), Some(1)]);
        // A batch 4, 5, 6 goes on as 6 → 5 → 4 → 3: inside it the hint is two places down,
        // its oldest gets the head's next from the push; the one after the oldest has none
        // (the head it will follow is not known when the batch is linked).
        let batch: Fifo<InArena> = (4..7).map(node).collect();
        list.push_batch(batch).unwrap();
        let hints: Vec<_> = (4..7).map(|i| hint_of(&arena, i)).collect();
        assert_eq!(hints, [Some(2), None, Some(4)]);
        let order: Vec<usize> = list
            .take_all()
            .reverse()
            .into_iter()
            // SAFETY: every handle points into the live arena.
            .map(|n| unsafe { n.0.as_ref() }.id)
            .collect();
        assert_eq!(order, [0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn a_push_reads_only_a_head_its_own_thread_pushed() {
        let arena: Vec<Item> = (0..4)
            .map(|id| Item {
                link: Link::new(),
                id,
            })
            .collect();
        let node = |i: usize| InArena(NonNull::from(&arena[i]));
        let list = DeferList::new();
        list.push(node(0)).unwrap();
        list.push(node(1)).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                // The head (1, whose next is 0) is another thread's node: no read, no hint.
                list.push(node(2)).unwrap();
                // The head is this thread's own last push: hinted two places down.
                list.push(node(3)).unwrap();
            });
        });
        let hints: Vec<_> = (0..4).map(|i| hint_of(&arena, i)).collect();
        assert_eq!(hints, [None, None, None, Some(1)]);
        let order: Vec<usize> = list
            .take_all()
            .reverse()
            .into_iter()
            // SAFETY: every handle points into the live arena.
            .map(|n| unsafe { n.0.as_ref() }.id)
            .collect();
        assert_eq!(order, [0, 1, 2, 3]);
    }

    #[test]
    fn a_type_that_cannot_vouch_for_the_head_gets_no_hint() {
        let list = DeferList::new();
        for i in 0..3 {
            list.push(Boxed::new(i)).unwrap();
        }
        let chain = list.take_all();
        assert!(chain.iter().all(|b| b.0.link.hint().is_null()));
        let got: Vec<i32> = chain.reverse().into_iter().map(Boxed::into_inner).collect();
        assert_eq!(got, [0, 1, 2]);
    }
}

//! The intrusive link and the [`Node`] contract that lets an owning handle live on a list.
//!
//! The kernel's `struct llist_node` is one pointer embedded in the object it links (in an skb it
//! shares a union with `next`/`prev`). [`Link`] is the same: one word inside the item, so putting
//! an item on a list allocates nothing. [`Node`] is implemented by the *owning handle* of such an
//! item (a `Box`, a frame handle): giving the handle to a list turns it into a pointer to its
//! link, and taking it off turns the pointer back into the handle.

use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use crate::sync::{AtomicPtr, Ordering};

/// One intrusive link: the `next` pointer of the kernel's `llist_node`.
///
/// Embed it in the item an owning handle points at, and implement [`Node`] for the handle.
/// While the item is on a list the list owns the link; the handle's user never touches it.
pub struct Link {
    // An atomic only so that loom tracks it: every access is `Relaxed`, because the list's own
    // head CAS (Release) and swap (Acquire) order the link writes before the reads.
    next: AtomicPtr<Link>,
}

impl Link {
    /// A fresh, unlinked link.
    pub fn new() -> Self {
        Link {
            next: AtomicPtr::new(ptr::null_mut()),
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

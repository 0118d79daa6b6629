//! [`LList`]: the kernel's lock-less list (`include/linux/llist.h`, `lib/llist.c`), intrusive.
//!
//! One atomic head word and nothing else. Adders CAS the head (`llist_add_batch`) and learn
//! whether the list was empty before; a consumer detaches everything with one swap
//! (`llist_del_all`) and gets the chain newest-first, to be reversed to FIFO
//! (`llist_reverse_order`). There is deliberately no multi-consumer pop: `llist_del_first` is
//! ABA-prone once nodes are recycled from a pool, and `take_all` is one swap with no ABA at all.

use core::fmt;
use core::marker::PhantomData;
use core::ptr::{self, NonNull};

use crate::Fifo;
use crate::link::{Link, Node, NodeRef};
use crate::sync::{AtomicPtr, Ordering};

/// An intrusive lock-free multi-producer list with whole-list take (the kernel's `llist_head`).
///
/// Any number of threads may [`add`](LList::add), [`add_batch`](LList::add_batch) and
/// [`take_all`](LList::take_all) at the same time.
///
/// ```
/// use llist_defer::{Boxed, LList};
///
/// let list = LList::new();
/// assert!(list.add(Boxed::new('a')), "the first add finds the list empty");
/// assert!(!list.add(Boxed::new('b')));
/// let newest_first: String = list.take_all().map(Boxed::into_inner).collect();
/// assert_eq!(newest_first, "ba");
/// assert!(list.is_empty());
/// ```
pub struct LList<N: Node> {
    head: AtomicPtr<Link>,
    _owns: PhantomData<N>,
}

// SAFETY: the list owns its nodes; moving it moves them, which is fine for `N: Send`.
unsafe impl<N: Node + Send> Send for LList<N> {}
// SAFETY: through `&LList` nodes only move in (add) and out (take_all) whole, between threads,
// so sharing the list is sending nodes: `N: Send` suffices.
unsafe impl<N: Node + Send> Sync for LList<N> {}

impl<N: Node> LList<N> {
    /// An empty list.
    pub fn new() -> Self {
        LList {
            head: AtomicPtr::new(ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// Pushes one node (`llist_add`). Returns `true` if the list was empty before.
    #[inline]
    pub fn add(&self, node: N) -> bool {
        let link = node.into_link();
        self.push_chain(link, link)
    }

    /// Pushes a whole batch with one successful CAS (`llist_add_batch`). Returns `true` if the
    /// list was empty before. An empty batch changes nothing and returns `false`.
    ///
    /// The batch keeps its internal order and lands in front of older nodes: its front becomes
    /// the newest node, so [`take_all`](LList::take_all) yields it front first.
    pub fn add_batch(&self, batch: Fifo<N>) -> bool {
        let Some((first, last)) = batch.into_raw_ends() else {
            return false;
        };
        self.push_chain(first, last)
    }

    /// The CAS loop of `add` and `add_batch`: links `last` to the observed head and swings the
    /// head to `first`. Returns whether the list was empty just before the successful CAS.
    #[inline]
    fn push_chain(&self, first: NonNull<Link>, last: NonNull<Link>) -> bool {
        // Relaxed: the value is only a guess for the CAS, which re-reads it.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `last` is a link of the caller's chain, owned by the caller until the CAS
            // below publishes it, so nobody else reads or writes it now.
            unsafe { last.as_ref() }.set_next(head);
            // Release on success: whoever takes the list (Acquire swap) sees the link written
            // above and everything the producer wrote into its items. Later CASes of other
            // producers are RMWs, so they extend this release sequence. Weak: we loop anyway.
            match self.head.compare_exchange_weak(
                head,
                first.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return head.is_null(),
                Err(seen) => head = seen,
            }
        }
    }

    /// Detaches every node with one swap (`llist_del_all`). The chain is newest-first.
    ///
    /// An empty list is seen with a plain load and left unwritten, so a consumer polling an
    /// idle list reads the head's cache line instead of taking it exclusive from the producers
    /// on every poll (the swap would write it even with nothing to take).
    #[inline]
    pub fn take_all(&self) -> Chain<N> {
        // Relaxed: seeing null takes nothing, so there is nothing to order; a push that lands
        // just after the load is taken by the next call.
        if self.head.load(Ordering::Relaxed).is_null() {
            return Chain::new();
        }
        // Acquire: pairs with the producers' Release CAS, so the links (and item contents) of
        // the whole chain are visible to us.
        let head = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: the swap detached the chain; its nodes came from `into_link` and are now ours.
        unsafe { Chain::from_raw(head) }
    }

    /// Whether the list looks empty (`llist_empty`): a relaxed snapshot, only a hint, stale as
    /// soon as it is read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed).is_null()
    }
}

impl<N: Node> Default for LList<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<N: Node> Drop for LList<N> {
    fn drop(&mut self) {
        drop(self.take_all());
    }
}

impl<N: Node> fmt::Debug for LList<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LList")
            .field("is_empty", &self.is_empty())
            .finish()
    }
}

/// A detached chain, newest node first: what [`LList::take_all`] returns.
///
/// Iterate it by value (newest first), or [`reverse`](Chain::reverse) it into a FIFO
/// (`llist_reverse_order`). Dropping it drops every node.
pub struct Chain<N: Node> {
    head: *mut Link,
    /// Whether every node's drain hint was written when it was pushed (a [`DeferList`]'s
    /// chain); an [`LList`]'s nodes may carry stale hints from an earlier list, which
    /// [`reverse`](Chain::reverse) must not prefetch.
    ///
    /// [`DeferList`]: crate::DeferList
    hinted: bool,
    _owns: PhantomData<N>,
}

// SAFETY: a chain exclusively owns its nodes, like a `Vec<N>`.
unsafe impl<N: Node + Send> Send for Chain<N> {}
// SAFETY: shared access only gives `&N` views (through `iter`).
unsafe impl<N: Node + Sync> Sync for Chain<N> {}

impl<N: Node> Chain<N> {
    /// # Safety
    ///
    /// `head` is null or the first link of a null-terminated chain of links made by
    /// `N::into_link`, owned by nobody else.
    #[inline]
    pub(crate) unsafe fn from_raw(head: *mut Link) -> Self {
        Chain {
            head,
            hinted: false,
            _owns: PhantomData,
        }
    }

    /// [`from_raw`](Self::from_raw) for a chain whose every node's drain hint was written when
    /// it was pushed.
    ///
    /// # Safety
    ///
    /// As `from_raw`.
    pub(crate) unsafe fn from_raw_hinted(head: *mut Link) -> Self {
        Chain {
            head,
            hinted: true,
            _owns: PhantomData,
        }
    }

    /// An empty chain.
    pub fn new() -> Self {
        Chain {
            head: ptr::null_mut(),
            hinted: false,
            _owns: PhantomData,
        }
    }

    /// Whether the chain has no node.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// Counts the nodes (a walk: O(n); a chain keeps no length).
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Reverses the chain in place into oldest-first order (`llist_reverse_order`) and returns it
    /// as a [`Fifo`], counting it on the way. O(n), no allocation. On a chain taken from a
    /// [`DeferList`](crate::DeferList) it prefetches each node's drain hint (see [`Link`]), so
    /// that with hints two nodes load at a time.
    pub fn reverse(self) -> Fifo<N> {
        let (mut cur, hinted) = (self.head, self.hinted);
        core::mem::forget(self);
        let tail = cur;
        let mut prev: *mut Link = ptr::null_mut();
        let mut len = 0;
        while let Some(link) = NonNull::new(cur) {
            // SAFETY: `link` is a node of the chain we own.
            let link = unsafe { link.as_ref() };
            if hinted {
                crate::hint::prefetch(link.hint());
            }
            cur = link.next();
            link.set_next(prev);
            prev = link as *const Link as *mut Link;
            len += 1;
        }
        // SAFETY: `prev` is the old last node (now first) and `tail` the old first (now last) of
        // the chain we own, relinked front to back; `len` counted it.
        unsafe { Fifo::from_raw_parts(prev, tail, len) }
    }

    /// Borrowing iterator over the nodes, newest first.
    pub fn iter(&self) -> Iter<'_, N> {
        Iter {
            cur: self.head,
            _chain: PhantomData,
        }
    }

    /// Detaches the newest node.
    #[inline]
    pub fn pop(&mut self) -> Option<N> {
        let link = NonNull::new(self.head)?;
        // SAFETY: `link` heads the chain we own.
        self.head = unsafe { link.as_ref() }.next();
        // SAFETY: it came from `into_link` and we hand ownership back exactly once.
        Some(unsafe { N::from_link(link) })
    }
}

impl<N: Node> Default for Chain<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<N: Node> Drop for Chain<N> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

impl<N: Node> Iterator for Chain<N> {
    type Item = N;
    #[inline]
    fn next(&mut self) -> Option<N> {
        self.pop()
    }
}

impl<N: Node> fmt::Debug for Chain<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chain").field("len", &self.len()).finish()
    }
}

/// Borrowing iterator over a [`Chain`] or a [`Fifo`], yielding [`NodeRef`] views.
pub struct Iter<'a, N: Node> {
    cur: *mut Link,
    _chain: PhantomData<&'a N>,
}

impl<'a, N: Node> Iter<'a, N> {
    /// # Safety
    ///
    /// `head` starts a null-terminated chain owned by a container borrowed for `'a`.
    pub(crate) unsafe fn from_raw(head: *mut Link) -> Self {
        Iter {
            cur: head,
            _chain: PhantomData,
        }
    }
}

impl<'a, N: Node> Iterator for Iter<'a, N> {
    type Item = NodeRef<'a, N>;
    #[inline]
    fn next(&mut self) -> Option<NodeRef<'a, N>> {
        let link = NonNull::new(self.cur)?;
        // SAFETY: the container owning the chain is borrowed for 'a and cannot change it.
        self.cur = unsafe { link.as_ref() }.next();
        // SAFETY: as above; the view does not outlive the borrow.
        Some(unsafe { NodeRef::new(link) })
    }
}

impl<N: Node> fmt::Debug for Iter<'_, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter").finish_non_exhaustive()
    }
}

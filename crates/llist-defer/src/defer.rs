//! [`DeferList`]: the bounded, counted defer list of `__dev_xmit_skb` (Linux v6.19, commit
//! 100dfa74cad9 "net: dev_queue_xmit() llist adoption", limit from `net.core.qdisc_max_burst`).
//!
//! A producer pushes with one CAS. The producer that finds the list empty is the *first pusher*:
//! it alone takes the consumer's lock and drains the whole batch; everyone else returns at once.
//! A counter bounds the burst: a push raises it at most once, and only if it saw the list
//! non-empty (the first pusher never counts). Over the limit, the arriving item is handed back
//! to its caller, before it touches the list; queued items are never dropped here.
//!
//! Where the kernel keeps the count in a second atomic beside the list head (an `atomic_inc`,
//! then the `llist_add` CAS: two locked operations on the line every producer fights for), we
//! keep it in the head word itself, in the 16 bits above a 48-bit address. The push's one CAS
//! moves the head and the count together, and the drainer's one swap takes the list and resets
//! the count together. Measured on the defer-list bench, the second atomic halved the rate of
//! single pushes.

use core::fmt;
use core::marker::PhantomData;
use core::ptr::{self, NonNull};

use crate::fifo::Fifo;
use crate::link::{Link, Node};
use crate::llist::Chain;
use crate::sync::{AtomicPtr, Ordering};

#[cfg(not(target_pointer_width = "64"))]
compile_error!("DeferList packs its burst count above a 48-bit address: it needs a 64-bit target");

/// The kernel's default burst limit, `net.core.qdisc_max_burst` = 1000.
pub const DEFAULT_BURST_LIMIT: usize = 1000;

/// The largest burst limit: the count lives in the head word's top 16 bits.
pub const MAX_BURST_LIMIT: usize = (1 << COUNT_BITS) - 1;

/// Bits of the head word that hold the count, above the address.
const COUNT_BITS: u32 = 16;
/// Where the count starts in the head word.
const COUNT_SHIFT: u32 = usize::BITS - COUNT_BITS;
/// The address bits of the head word.
const ADDR_MASK: usize = (1 << COUNT_SHIFT) - 1;

/// The node address in a head word.
#[inline]
fn head_node(word: *mut Link) -> *mut Link {
    word.map_addr(|a| a & ADDR_MASK)
}

/// The burst count in a head word.
#[inline]
fn head_count(word: *mut Link) -> usize {
    word.addr() >> COUNT_SHIFT
}

/// A head word naming `node` with burst count `count` (at most [`MAX_BURST_LIMIT`]).
#[inline]
fn head_word(node: NonNull<Link>, count: usize) -> *mut Link {
    debug_assert!(count <= MAX_BURST_LIMIT);
    node.as_ptr().map_addr(|a| a | (count << COUNT_SHIFT))
}

/// What a successful [`DeferList::push`] tells its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// The list was empty: this caller is the first pusher and must drain
    /// ([`take_all`](DeferList::take_all)) under the consumer's lock.
    First,
    /// The list was not empty: an earlier pusher is committed to draining this item.
    Queued {
        /// The burst count this push raised (1 for the first item behind the first pusher).
        /// A value near the limit means the drainer is falling behind.
        burst: usize,
    },
}

impl Pushed {
    /// Whether this caller became the drainer.
    #[inline]
    pub fn is_first(self) -> bool {
        matches!(self, Pushed::First)
    }
}

/// A push refused because the burst count passed the limit (the kernel's `QDISC_BURST_DROP`).
/// The item comes back untouched.
pub struct Rejected<N> {
    /// The refused item, still the caller's.
    pub item: N,
    /// The count that exceeded the limit.
    pub burst: usize,
}

impl<N> Rejected<N> {
    /// Takes the item back.
    pub fn into_inner(self) -> N {
        self.item
    }
}

impl<N> fmt::Debug for Rejected<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejected")
            .field("burst", &self.burst)
            .finish_non_exhaustive()
    }
}

impl<N> fmt::Display for Rejected<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "defer list over its burst limit (count {}): the drainer is behind; drop the item, \
             retry after it drains, or raise the limit",
            self.burst
        )
    }
}

impl<N> std::error::Error for Rejected<N> {}

/// A bad [`DeferList`] configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A burst limit of 0 would refuse every push that finds the list non-empty (the kernel bug
    /// that moved the limit to `qdisc_max_burst`).
    ZeroLimit,
    /// A burst limit above [`MAX_BURST_LIMIT`] does not fit the count's 16 bits.
    LimitTooLarge(usize),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroLimit => f.write_str(
                "burst limit 0 would refuse every push behind the first; use at least 1 \
                 (the kernel's qdisc_max_burst default is 1000)",
            ),
            ConfigError::LimitTooLarge(limit) => write!(
                f,
                "burst limit {limit} is above the largest the list can count, {MAX_BURST_LIMIT}; \
                 a drainer that far behind is better told by a lower limit"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A bounded multi-producer defer list with the kernel's burst counting.
///
/// # Protocol
///
/// ```
/// use std::sync::Mutex;
/// use llist_defer::{Boxed, DeferList, Pushed};
///
/// let list = DeferList::with_limit(1000).unwrap();
/// let consumer = Mutex::new(Vec::new()); // the qdisc root lock, say
///
/// let xmit = |pkt: u32| match list.push(Boxed::new(pkt)) {
///     Ok(Pushed::First) => {
///         // We found the list empty: drain everything, in arrival order.
///         let mut out = consumer.lock().unwrap();
///         out.extend(list.take_all().reverse().into_iter().map(Boxed::into_inner));
///     }
///     Ok(Pushed::Queued { .. }) => {} // an earlier pusher drains ours
///     Err(rejected) => drop(rejected.into_inner()), // over the burst limit: count a drop
/// };
/// xmit(1);
/// xmit(2);
/// assert_eq!(*consumer.lock().unwrap(), [1, 2]);
/// ```
///
/// # The over-limit race, and why this list has none
///
/// The kernel's `__dev_xmit_skb` resets its count with a separate store after `llist_del_all`
/// swapped the list out, so a push landing between the two counts against the old batch and
/// has its increment wiped: the next batch may pass the limit by the number of such pushes (a
/// two-instruction window for a running drainer, unbounded if it is descheduled right there),
/// and a refused push's increment stays until the next reset. Here the count is part of the
/// head word: [`take_all`](DeferList::take_all) takes the list and zeroes the count in one
/// swap, and a push raises the count in the same CAS that links its item, only if that CAS
/// succeeds. So the bound is exact: a batch holds at most `limit + 1` items (the first pusher's
/// plus `limit` counted ones, like the kernel's, where the first item behind the first pusher
/// counts 1), or `limit + n` if the first push was a [`push_batch`](DeferList::push_batch) of
/// `n` (a first push is never counted), a refused push leaves no trace, and the over-limit race
/// is zero pushes wide.
///
/// # Address space
///
/// The count takes the head word's top 16 bits, so nodes must live below 2^48, which every
/// Linux user-space address does unless the process asks `mmap` for memory above 2^47 on a
/// 5-level-paging machine. A push of a node above that panics (see [`push`](DeferList::push)).
pub struct DeferList<N: Node> {
    /// The newest node's address, with the burst count in the top [`COUNT_BITS`]; null when
    /// empty (an empty list always has count 0).
    head: AtomicPtr<Link>,
    limit: usize,
    /// Whether a push reads the head's `next` for its drain hint (see [`Link`]).
    hints: bool,
    _owns: PhantomData<N>,
}

// SAFETY: the list owns its nodes; moving it moves them, which is fine for `N: Send`.
unsafe impl<N: Node + Send> Send for DeferList<N> {}
// SAFETY: through `&DeferList` nodes only move in (push) and out (take_all) whole, between
// threads, so sharing the list is sending nodes: `N: Send` suffices.
unsafe impl<N: Node + Send> Sync for DeferList<N> {}

impl<N: Node> DeferList<N> {
    /// A defer list with the kernel's default limit, [`DEFAULT_BURST_LIMIT`].
    pub fn new() -> Self {
        DeferList {
            head: AtomicPtr::new(ptr::null_mut()),
            hints: true,
            limit: DEFAULT_BURST_LIMIT,
            _owns: PhantomData,
        }
    }

    /// A defer list refusing pushes once the burst count exceeds `limit`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroLimit`] if `limit` is 0, [`ConfigError::LimitTooLarge`] if it is
    /// above [`MAX_BURST_LIMIT`].
    pub fn with_limit(limit: usize) -> Result<Self, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if limit > MAX_BURST_LIMIT {
            return Err(ConfigError::LimitTooLarge(limit));
        }
        let mut list = Self::new();
        list.limit = limit;
        Ok(list)
    }

    /// The burst limit: a push is refused once this many items have joined a batch behind its
    /// first push (`net.core.qdisc_max_burst`).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether pushes leave drain hints where the node type can read them (default on; see
    /// [`Link`]). Off, a push never reads the head it links to; only a pushed batch's own
    /// nodes are hinted. Hints change no result, only which lines the drainer loads early.
    pub fn with_drain_hints(mut self, on: bool) -> Self {
        self.hints = on;
        self
    }

    /// Whether pushes leave drain hints ([`with_drain_hints`](Self::with_drain_hints)).
    pub fn drain_hints(&self) -> bool {
        self.hints
    }

    /// Pushes `item` with the kernel's counting rule (see the type docs).
    ///
    /// # Errors
    ///
    /// [`Rejected`], carrying the item back, if the burst count exceeds the limit. Only
    /// pushes that see a non-empty list can be refused; the first pusher never is.
    ///
    /// # Panics
    ///
    /// If the item's link lies at or above 2^48 (see "Address space" in the type docs): its
    /// address would overlap the count.
    #[inline]
    pub fn push(&self, item: N) -> Result<Pushed, Rejected<N>> {
        let link = item.into_link();
        self.push_counted(link, link, 1).map_err(|burst| {
            // SAFETY: a refused push never published the link; the node is still ours.
            let item = unsafe { N::from_link(link) };
            Rejected { item, burst }
        })
    }

    /// The counted CAS shared by [`push`](Self::push) and [`push_batch`](Self::push_batch):
    /// pushes the chain `newest ..= oldest` of `len` items. On refusal it returns the burst
    /// count that would have passed the limit; the chain was not published and is still the
    /// caller's.
    #[inline]
    fn push_counted(
        &self,
        newest: NonNull<Link>,
        oldest: NonNull<Link>,
        len: usize,
    ) -> Result<Pushed, usize> {
        if newest.as_ptr().addr() > ADDR_MASK {
            address_too_high(newest);
        }
        // This thread's last push (see the drain hint below); fixed while this push retries.
        let mine = if self.hints {
            last_pushed()
        } else {
            ptr::null_mut()
        };
        // Relaxed: the value is only a guess for the CAS, which re-reads it.
        let mut word = self.head.load(Ordering::Relaxed);
        loop {
            let next = head_node(word);
            // The first pusher does not count; any other push counts its items once, in the
            // CAS below, so a failed attempt (or a refusal) leaves the count as it was.
            let burst = if next.is_null() {
                0
            } else {
                let burst = head_count(word) + len;
                if burst > self.limit {
                    return Err(burst);
                }
                burst
            };
            // SAFETY: `oldest` is a link of the caller's chain, owned by the caller until the
            // CAS below publishes it, so nobody else reads or writes it now.
            unsafe { oldest.as_ref() }.set_next(next);
            // The drain hint: the node after the head we link to, if the type can say, and only
            // if that head is the node this thread pushed last (its line is then in this core's
            // cache, so the read costs no cross-core miss inside the CAS window).
            let hint = match NonNull::new(next) {
                // SAFETY: `oldest` is ours (see above) and `head` a link of this list's type
                // that was its head when `word` was read.
                Some(head) if head.as_ptr() == mine => unsafe { N::peek_next(oldest, head) },
                _ => ptr::null_mut(),
            };
            // SAFETY: as above.
            unsafe { oldest.as_ref() }.set_hint(hint);
            // Release on success: whoever takes the list (Acquire swap) sees the link written
            // above and everything the producer wrote into its items. Later CASes of other
            // producers are RMWs, so they extend this release sequence. Weak: we loop anyway.
            match self.head.compare_exchange_weak(
                word,
                head_word(newest, burst),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if self.hints {
                        set_last_pushed(newest.as_ptr());
                    }
                    return Ok(if next.is_null() {
                        Pushed::First
                    } else {
                        Pushed::Queued { burst }
                    });
                }
                Err(seen) => word = seen,
            }
        }
    }

    /// Pushes a whole batch with one successful CAS: the batch version of [`push`](Self::push)
    /// for a caller that has several items at once (an RX burst, a vector of packets).
    ///
    /// The items keep their order: a drainer that reverses [`take_all`](Self::take_all) to FIFO
    /// gets them in `batch` order, after everything pushed before. The counting rule is the
    /// same, in items: a push that saw the list non-empty raises the count once, by
    /// `batch.len()`, so the limit still bounds the items queued, not the pushes. The first
    /// pusher is never refused. An empty batch changes nothing and reports
    /// [`Queued`](Pushed::Queued) with a burst of 0 (there is nothing to drain for it).
    ///
    /// The batch is relinked newest-first before the CAS (one pass over links the caller just
    /// wrote); a refused batch is relinked back, so it comes back exactly as given.
    ///
    /// # Errors
    ///
    /// [`Rejected`], carrying the whole batch back in its order, if the count would pass the
    /// limit.
    ///
    /// ```
    /// use llist_defer::{Boxed, DeferList, Fifo, Pushed};
    ///
    /// let list = DeferList::with_limit(1000).unwrap();
    /// list.push(Boxed::new(0)).unwrap();
    /// let burst: Fifo<_> = (1..4).map(Boxed::new).collect();
    /// assert_eq!(list.push_batch(burst).unwrap(), Pushed::Queued { burst: 3 });
    /// let out: Vec<i32> = list.take_all().reverse().into_iter().map(Boxed::into_inner).collect();
    /// assert_eq!(out, [0, 1, 2, 3]);
    /// ```
    pub fn push_batch(&self, batch: Fifo<N>) -> Result<Pushed, Rejected<Fifo<N>>> {
        let Some((newest, oldest, len)) = batch.into_raw_newest_first() else {
            return Ok(Pushed::Queued { burst: 0 });
        };
        self.push_counted(newest, oldest, len).map_err(|burst| {
            // A refused push never published the chain: it is still ours, newest first.
            // An earlier CAS attempt may have linked `oldest` to a head it saw; cut that.
            // SAFETY: `oldest` is a node of that unpublished chain, so ours to write.
            unsafe { oldest.as_ref() }.set_next(core::ptr::null_mut());
            // SAFETY: the chain `newest ..= oldest` is ours alone (never published) and
            // null-terminated; reversing it restores the batch's order.
            let item = unsafe { Chain::from_raw(newest.as_ptr()) }.reverse();
            Rejected { item, burst }
        })
    }

    /// Detaches the whole batch, newest first, and resets the count, in one swap
    /// (`llist_del_all` and `defer_count = 0`). Call it under the consumer's lock, as the
    /// first pusher.
    ///
    /// Finding the list empty it writes nothing, so a consumer polling an idle list reads the
    /// head's cache line instead of taking it away from the producers on every poll.
    #[inline]
    pub fn take_all(&self) -> Chain<N> {
        // Relaxed: seeing it empty takes nothing, so there is nothing to order; a push that
        // lands just after is taken by the next call.
        if self.head.load(Ordering::Relaxed).is_null() {
            return Chain::new();
        }
        // Acquire: pairs with the producers' Release CAS, so the links (and item contents) of
        // the whole chain are visible to us.
        let word = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: the swap detached the chain; its nodes came from `into_link` and are now
        // ours, and the node address below the count is its newest link.
        unsafe { Chain::from_raw_hinted(head_node(word)) }
    }

    /// The burst count now (a snapshot).
    #[inline]
    pub fn burst(&self) -> usize {
        head_count(self.head.load(Ordering::Relaxed))
    }

    /// Whether the list looks empty: a relaxed hint (`llist_empty`).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed).is_null()
    }
}

/// The panic of a push whose node the head word cannot name.
#[cold]
#[inline(never)]
fn address_too_high(node: NonNull<Link>) -> ! {
    panic!(
        "DeferList: node at {node:p} lies above 2^48, where the head word keeps its burst \
         count; allocate nodes below 2^48 (no mmap hints above 2^47)"
    )
}

impl<N: Node> Drop for DeferList<N> {
    fn drop(&mut self) {
        drop(self.take_all());
    }
}

impl<N: Node> Default for DeferList<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<N: Node> fmt::Debug for DeferList<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferList")
            .field("limit", &self.limit)
            .field("burst", &self.burst())
            .field("is_empty", &self.is_empty())
            .finish()
    }
}

std::thread_local! {
    /// The newest node this thread pushed onto any `DeferList` with hints on (compared, never
    /// read): a push reads its head's `next` for the drain hint only if the head is this node.
    static LAST_PUSHED: core::cell::Cell<*mut Link> = const { core::cell::Cell::new(ptr::null_mut()) };
}

/// The newest node this thread pushed last (null if none, or during thread teardown).
#[inline]
fn last_pushed() -> *mut Link {
    LAST_PUSHED
        .try_with(core::cell::Cell::get)
        .unwrap_or(ptr::null_mut())
}

#[inline]
fn set_last_pushed(link: *mut Link) {
    let _ = LAST_PUSHED.try_with(|c| c.set(link));
}

//! [`DeferList`]: the bounded, counted defer list of `__dev_xmit_skb` (Linux v6.19, commit
//! 100dfa74cad9 "net: dev_queue_xmit() llist adoption", limit from `net.core.qdisc_max_burst`).
//!
//! A producer pushes with one CAS. The producer that finds the list empty is the *first pusher*:
//! it alone takes the consumer's lock and drains the whole batch; everyone else returns at once.
//! A counter bounds the burst: a push increments it at most once, and only if it saw the list
//! non-empty (the first pusher skips the atomic). Over the limit, the arriving item is handed
//! back to its caller, before it touches the list; queued items are never dropped here.

use core::fmt;
use core::ops::ControlFlow;
use core::ptr::NonNull;

use crate::fifo::Fifo;
use crate::link::{Link, Node};
use crate::llist::{Chain, LList};
use crate::sync::{AtomicUsize, Ordering};

/// The kernel's default burst limit, `net.core.qdisc_max_burst` = 1000.
pub const DEFAULT_BURST_LIMIT: usize = 1000;

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
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroLimit => f.write_str(
                "burst limit 0 would refuse every push behind the first; use at least 1 \
                 (the kernel's qdisc_max_burst default is 1000)",
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
/// # The documented over-limit race
///
/// [`take_all`](DeferList::take_all) swaps the list out and *then* resets the count, as the
/// kernel does; the two are not one atomic step. A push that lands in between sees a non-empty
/// list (the new one), increments, and its increment is wiped by the reset. So the list may hold
/// more than `limit` items by exactly the number of pushes that completed between a drainer's
/// swap and its reset: a two-instruction window for a running drainer, but unbounded if the
/// drainer is descheduled right there. Conversely a refused push leaves its increment in place
/// until the next reset, so the count errs high and refusals persist until a drain. Also like the
/// kernel, the first item behind the first pusher counts 1, so a batch is `count + 1` long.
pub struct DeferList<N: Node> {
    list: LList<N>,
    count: AtomicUsize,
    limit: usize,
}

impl<N: Node> DeferList<N> {
    /// A defer list with the kernel's default limit, [`DEFAULT_BURST_LIMIT`].
    pub fn new() -> Self {
        DeferList {
            list: LList::new(),
            count: AtomicUsize::new(0),
            limit: DEFAULT_BURST_LIMIT,
        }
    }

    /// A defer list refusing pushes once the burst count exceeds `limit`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroLimit`] if `limit` is 0.
    pub fn with_limit(limit: usize) -> Result<Self, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        Ok(DeferList {
            limit,
            ..Self::new()
        })
    }

    /// The burst limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Pushes `item` with the kernel's counting rule (see the type docs).
    ///
    /// # Errors
    ///
    /// [`Rejected`], carrying the item back, if the burst count exceeds the limit. Only
    /// pushes that see a non-empty list can be refused; the first pusher never is.
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
    /// count that passed the limit; the chain was not published and is still the caller's.
    #[inline]
    fn push_counted(
        &self,
        newest: NonNull<Link>,
        oldest: NonNull<Link>,
        len: usize,
    ) -> Result<Pushed, usize> {
        let mut burst = 0;
        let limit = self.limit;
        let count = &self.count;
        let pushed = self.list.push_chain(newest, oldest, |head| {
            // At most one increment per push (by its item count), and only if this push saw
            // the list non-empty; CAS retries never count again, even if the list emptied
            // meanwhile.
            if !head.is_null() && burst == 0 {
                // Relaxed: the count is a heuristic bound, it orders nothing.
                burst = count.fetch_add(len, Ordering::Relaxed) + len;
                if burst > limit {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        });
        match pushed {
            Ok(true) => Ok(Pushed::First),
            Ok(false) => Ok(Pushed::Queued { burst }),
            Err(()) => Err(burst),
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

    /// Detaches the whole batch, newest first, then resets the count (`llist_del_all` followed
    /// by `defer_count = 0`). Call it under the consumer's lock, as the first pusher.
    #[inline]
    pub fn take_all(&self) -> Chain<N> {
        let chain = self.list.take_all();
        self.count.store(0, Ordering::Relaxed);
        chain
    }

    /// The burst count now (a snapshot).
    #[inline]
    pub fn burst(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether the list looks empty: a relaxed hint (`llist_empty`).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
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

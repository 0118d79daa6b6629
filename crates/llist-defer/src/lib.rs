//! Intrusive lock-free lists for transmit paths: the kernel's `llist` and the bounded,
//! counted defer list that `__dev_xmit_skb` adopted in Linux 6.19.
//!
//! - [`LList`]: `llist_add_batch` / `llist_del_all` / `llist_reverse_order`, intrusive;
//!   add reports whether the list was empty, take is one swap, there is no multi-consumer pop.
//! - [`DeferList`]: the bounded version with the kernel's burst counting; the first pusher drains.
//!   [`DeferList::push_batch`] pushes a whole burst with one CAS, counted by its length.
//! - [`Chain`] and [`Fifo`]: detached chains (newest-first as taken, FIFO after reversal) that
//!   qdiscs and drivers queue packets in without allocating.
//! - [`Link`] and [`Node`]: the embedded link and the contract an owning handle implements;
//!   [`Boxed`] is the convenience node for any `T`.
//!
//! ```
//! use llist_defer::{Boxed, DeferList, Pushed};
//!
//! let list = DeferList::new(); // burst limit 1000, the kernel's qdisc_max_burst
//! assert_eq!(list.push(Boxed::new("a")).unwrap(), Pushed::First);
//! assert_eq!(list.push(Boxed::new("b")).unwrap(), Pushed::Queued { burst: 1 });
//! let batch: Vec<_> = list.take_all().reverse().into_iter().map(Boxed::into_inner).collect();
//! assert_eq!(batch, ["a", "b"]);
//! ```

/// Bounded, counted defer list (`__dev_xmit_skb`'s `defer_list` / `defer_count`).
mod defer;
/// Single-owner intrusive FIFO.
mod fifo;

pub mod hint;
/// The intrusive link and the node contract.
mod link;
/// The lock-free list and its detached chains.
mod llist;
/// Atomics, switched to loom under `--cfg lockless_loom`.
mod sync;

pub use defer::{ConfigError, DEFAULT_BURST_LIMIT, DeferList, MAX_BURST_LIMIT, Pushed, Rejected};
pub use fifo::{Fifo, IntoIter};
pub use link::{Boxed, Link, Node, NodeRef};
pub use llist::{Chain, Iter, LList};

/// The crate README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

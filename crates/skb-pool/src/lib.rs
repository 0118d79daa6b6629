//! Frame pool with per-CPU caches and per-owner handles, and lock-free remote-free deferral
//! (the user-space `skb_attempt_defer_free`), over one memory region usable as an AF_XDP UMEM.
//!
//! # Which allocation path
//!
//! - [`Pool::alloc`] (per-CPU caches): any thread, no registration — thread pools, async
//!   tasks that move between threads, threads that come and go. A frame goes home to the CPU
//!   that allocated it, whichever thread frees it there; frames freed on another CPU go to the
//!   home CPU's defer list, and an allocator that finds its cache and the depot dry drains
//!   other CPUs' lists, so idle threads strand nothing. On x86_64 Linux the fast path is a
//!   restartable sequence ([`PerCpu::Rseq`]); elsewhere a per-CPU try-lock
//!   ([`PerCpu::Locked`]). Remote frees are gathered per freeing CPU, up to `remote_batch`
//!   frames for one home, and an allocator that finds everything else dry takes a partial
//!   batch that no free will complete, so no thread has anything to flush; last, it takes half
//!   the frames another CPU's cache holds (at most one interrupt to that CPU in an rseq pool),
//!   so a CPU nobody runs on any more strands none either. Threads that share
//!   a CPU's cache scramble the order frames circulate in; for a pipeline whose consumer reads
//!   the frames on another core, [`RefillOrder::Address`] sorts every refill back into address
//!   order, which the hardware prefetcher follows (see its docs for what it costs elsewhere).
//! - [`PoolHandle`] (per-owner caches): one handle per pinned thread (DPDK-style lcores),
//!   no rseq, remote frees batched per owner; but every allocating thread must hold one
//!   (at most `max_owners`), and frames cached by an idle owner are out of reach of the others.
//!
//! Both paths share the region, the depot and the overflow list, and an [`Skb`] behaves the same
//! whichever allocated it (data window, [`Skb::into_addr`] / [`Pool::skb_from_addr`], drop sends
//! it home).
//!
//! A [`Pool`] maps a [`Region`] of fixed-size frames. A thread that allocates through a handle
//! registers a [`PoolHandle`] (an *owner*, the kernel's CPU) and gets [`Skb`]s: one-pointer handles of a
//! frame with a kernel-style data window (`put`/`push`/`pull`/`trim`) and the metadata a qdisc
//! and a driver need. Dropping an `Skb` returns its frame to the owner that allocated it: into
//! the owner's cache on the owner's thread, else through the owner's lock-free defer list
//! (`skb_attempt_defer_free`), which the owner drains in its poll loop (`skb_defer_free_flush`)
//! after being kicked at half of `defer_max` (`kick_defer_list_purge`). A frame handed to the
//! kernel ([`Skb::into_addr`]) comes back through [`Pool::skb_from_addr`], which validates the
//! address before touching anything.
//!
//! ```
//! use skb_pool::{Pool, SocketRef};
//!
//! let pool = Pool::builder().frame_size(2048).frame_count(1024).build()?;
//! // What an AF_XDP UMEM registration needs:
//! let (base, len, chunk) = (pool.region().base(), pool.region().len(), pool.region().frame_size());
//! assert_eq!((len, chunk), (1024 * 2048, 2048));
//! assert_eq!(base as usize % 4096, 0);
//!
//! let mut owner = pool.handle()?;
//! let mut skb = owner.alloc()?;
//! skb.put_slice(&[0u8; 64])?;
//! skb.set_priority(6);
//! skb.set_socket(Some(SocketRef { id: 7, connected: true }));
//! let len = skb.len() as u32;
//! let addr = skb.into_addr();                // into a TX descriptor {addr, len}
//! let done = pool.skb_from_addr(addr)?;      // from the completion ring
//! assert_eq!((done.len() as u32, done.priority()), (len, 6));
//! drop(done);                                // back to the owner's cache
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// `PoolBuilder`: settings, limits, defaults and their validation.
mod builder;
/// Typed errors with causes and fixes.
mod error;
/// `PoolHandle`: owner-local cache, batched remote frees, the owner's drain.
mod handle;
/// Per-frame metadata in a side array, and the free-frame node.
mod meta;
/// A CPU's outgoing batch of remote frees (locked per-CPU caches).
mod outgoing;
/// A CPU's outgoing stacks of remote frees, one per home CPU (rseq pools).
mod outstack;
/// A batch of free frames sent to a CPU's defer list as one node (per-CPU remote frees).
mod packed;
/// Per-CPU frame caches: `Pool::alloc` from any thread (rseq or locked).
mod percpu;
/// `Pool`, the shared state and its lifetime.
mod pool;
/// The frame region: one mmap, optionally huge pages, usable as an AF_XDP UMEM.
mod region;
/// Remote free: the owner's defer list, kick and drain (`skb_attempt_defer_free`).
mod remote;
/// Restartable sequences: the ABI, the thread's area, the x86_64 critical sections.
pub mod rseq;
/// `Skb`: the owned frame handle and its data window.
mod skb;
/// Handle and pool counters.
mod stats;
/// Atomics, mutex and thread-locals, switched to loom under `--cfg lockless_loom`.
mod sync;

pub use builder::{
    DEFAULT_CACHE_MAX, DEFAULT_DEFER_MAX, DEFAULT_FRAME_COUNT, DEFAULT_FRAME_SIZE,
    DEFAULT_HEADROOM, DEFAULT_MAX_OWNERS, DEFAULT_REMOTE_BATCH, MAX_FRAME_COUNT, MAX_FRAME_SIZE,
    MAX_OWNERS, MIN_FRAME_SIZE, PoolBuilder,
};
pub use error::{AddrError, BuildError, PoolError, SkbError};
pub use handle::PoolHandle;
pub use percpu::{CpuCacheStats, MAX_CPUS, PerCpu, PerCpuStats, RefillOrder};
pub use pool::{OwnerState, Pool};
pub use region::{HugePages, Region};
pub use remote::Wake;
pub use skb::{OwnerId, Skb, SocketRef};
pub use stats::{HandleStats, PoolStats};

/// Sets the simulated CPU of the calling modelled thread (loom models of the per-CPU caches).
#[cfg(lockless_loom)]
#[doc(hidden)]
pub fn loom_set_cpu(cpu: u32) {
    sync::SIM_CPU.with(|c| c.set(cpu));
}

/// The crate README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

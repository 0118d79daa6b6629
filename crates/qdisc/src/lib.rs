//! Packet schedulers with Linux semantics (pfifo, pfifo_fast, fq) and the transmit engine.
//!
//! - The [`Qdisc`] trait (enqueue with the kernel's verdicts, dequeue, peek, reset, bypass,
//!   stats, the next wake-up of a paced qdisc; [`Qdisc::enqueue_batch`] and
//!   [`Qdisc::dequeue_batch`] for a whole chain, with exact per-packet semantics) and the
//!   [`Packet`] trait it asks of a packet.
//! - [`Pfifo`] (also bfifo and pfifo_head_drop), [`PfifoFast`] and [`Fq`], each with a builder
//!   that validates like `tc` and `Display` shaped like `tc -s qdisc show`.
//! - [`TxQueue`]: the user-space `__dev_xmit_skb` in three [`Strategy`]s (the kernel's
//!   busylock, the 6.19 defer list, a lockless qdisc run), over any [`Driver`];
//!   [`TxQueue::xmit`] per packet and [`TxQueue::xmit_bulk`] per burst. Its runner hands the
//!   qdisc whole batches and takes batches for the driver.
//!
//! ```
//! use qdisc::{NullDriver, Pfifo, Strategy, TestPacket, TxQueue, Verdict};
//!
//! let txq = TxQueue::builder()
//!     .strategy(Strategy::DeferList)
//!     .build(Pfifo::<TestPacket>::new(), NullDriver::new())?;
//! assert_eq!(txq.xmit(TestPacket::new(1, 1500)), Verdict::Success);
//! assert_eq!(txq.xmit_bulk((2..10).map(|id| TestPacket::new(id, 1500))).handed_on, 8);
//! assert_eq!(txq.stats().sent, 9);
//! # Ok::<(), qdisc::ConfigError>(())
//! ```

/// What a qdisc needs of a packet, flow keys and drop reasons.
mod packet;
/// The qdisc trait, verdicts, the to-free list and basic stats.
mod qdisc;

pub use packet::{DropReason, FlowKey, Packet};
pub use qdisc::{BatchVerdict, Qdisc, QdiscStats, ToFree, Verdict};

/// A heap packet for tests and benches.
mod test_packet;
pub use test_packet::{TestMeta, TestPacket};

/// Monotonic time sources: the real clock and the manual test clock.
mod clock;
/// Typed configuration errors of the qdisc builders.
mod config;
/// FQ, the fair-queue scheduler with pacing (`sch_fq.c`).
pub mod fq;
/// pfifo, bfifo and pfifo_head_drop (`sch_fifo.c`).
mod pfifo;
/// pfifo_fast, the default three-band qdisc.
mod pfifo_fast;
/// The array-backed FIFO under pfifo.
mod ring;
/// `tc -s qdisc show` formatting helpers.
mod show;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use config::ConfigError;
pub use fq::config::{FQ_BANDS, FQ_DEFAULT_WEIGHTS, FQ_MIN_WEIGHT, FqConfig};
pub use fq::stats::FqStats;
pub use fq::{Fq, FqBuilder};
pub use pfifo::{DEFAULT_PSCHED_MTU, DEFAULT_TX_QUEUE_LEN, FifoBuilder, FifoKind, Pfifo};
pub use pfifo_fast::{
    PFIFO_FAST_BANDS, PFIFO_FAST_MAX_TX_QUEUE_LEN, PRIO2BAND, PfifoFast, PfifoFastBuilder,
};

/// Atomics, locks and threads, switched to loom under `--cfg lockless_loom`.
mod sync;
/// The transmit engine: `TxQueue` (the user-space `__dev_xmit_skb`), drivers, the TX worker.
mod xmit;
pub use xmit::{
    BulkVerdict, DEFAULT_QUOTA, DEFAULT_SELF_SEND_BURST, Driver, LATENCY_SAMPLE_EVERY, NullDriver,
    Overflow, RecordingDriver, Strategy, TxQueue, TxQueueBuilder, TxResult, TxWorker, XmitStats,
};
/// `impl Packet for skb_pool::Skb`.
mod skb_packet;

/// The crate README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

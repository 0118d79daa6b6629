//! The transmit engine: [`TxQueue`], the user-space `__dev_xmit_skb`, with its three locking
//! strategies, the [`Driver`] trait, the engine's counters and the [`TxWorker`].
//!
//! A reader looking for one thing finds it in one file: the public API in `queue.rs`, each
//! strategy's protocol in `defer.rs`, `busylock.rs` and `nolock.rs`, the run loop every runner
//! shares in `run.rs`, the root lock and its bias in `rootlock.rs`, and the unwind accounting
//! in `guard.rs`.

/// BusyLock: the pre-2025 kernel's `__dev_xmit_skb`.
mod busylock;
/// Builder, strategies and overflow policies.
mod config;
/// DeferList: the 6.19 defer list, its drain and bypasses.
mod defer;
/// The driver trait and the null / recording drivers.
mod driver;
/// Unwind guards: packets held across user code are counted if it panics.
mod guard;
/// NoLock: the lockless qdisc run with the MISSED / DRAINING handshake.
mod nolock;
/// The queue itself: its state and the public API.
mod queue;
/// The root lock: a mutex that lends itself to a lone thread (owner bias, `membarrier`).
mod rootlock;
/// The locked run loop, enqueue / dequeue of batches and the driver call.
mod run;
/// Counters, contention and the latency histogram.
mod stats;
/// A thread that finishes the work a runner rescheduled (the TX softirq).
mod worker;

pub use config::{DEFAULT_QUOTA, DEFAULT_SELF_SEND_BURST, Overflow, Strategy, TxQueueBuilder};
pub use driver::{Driver, NullDriver, RecordingDriver, TxResult};
pub use queue::{BulkVerdict, TxQueue};
pub use stats::{LATENCY_SAMPLE_EVERY, XmitStats};
pub use worker::TxWorker;

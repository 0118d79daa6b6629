//! The transmit engine: [`TxQueue`], the user-space `__dev_xmit_skb`, with its three locking
//! strategies, the [`Driver`] trait, the engine's counters and the [`TxWorker`].

/// Builder, strategies and overflow policies.
mod config;
/// The driver trait and the null / recording drivers.
mod driver;
/// The queue itself: xmit, drain, bypass, run loop, requeue, deactivate.
mod queue;
/// Counters, contention and the latency histogram.
mod stats;
/// A thread that finishes the work a runner rescheduled (the TX softirq).
mod worker;

pub use config::{DEFAULT_QUOTA, Overflow, Strategy, TxQueueBuilder};
pub use driver::{Driver, NullDriver, RecordingDriver, TxResult};
pub use queue::{BulkVerdict, TxQueue};
pub use stats::{LATENCY_SAMPLE_EVERY, XmitStats};
pub use worker::TxWorker;

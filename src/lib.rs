#![doc = include_str!("../README.md")]
//!
//! ## This crate
//!
//! This crate re-exports the workspace's four crates:
//! - [`llist_defer`]: the intrusive lock-free list and the bounded, counted defer list;
//! - [`qdisc`]: pfifo, pfifo_fast, fq and the transmit engine;
//! - [`skb_pool`]: the per-owner frame pool with remote-free deferral;
//! - [`xsk_tx`]: the AF_XDP backend.

pub use llist_defer;
pub use qdisc;
pub use skb_pool;
pub use xsk_tx;

/// The transmit workload behind the `xmit` bench and the `pktgen` example.
pub mod harness;

/// The cross-core probe that says which state a shared machine is in.
pub mod pingpong;

pub mod alloc_count;

//! Packet schedulers with Linux semantics (pfifo, pfifo_fast, fq) and the transmit engine.
//!
//! The disciplines and the engine are being written; this module currently holds the shared
//! traits.

/// What a qdisc needs of a packet, flow keys and drop reasons.
mod packet;
/// The qdisc trait, verdicts, the to-free list and basic stats.
mod qdisc;

pub use packet::{DropReason, FlowKey, Packet};
pub use qdisc::{Qdisc, QdiscStats, ToFree, Verdict};

/// A heap packet for tests and benches.
mod test_packet;
pub use test_packet::{TestMeta, TestPacket};

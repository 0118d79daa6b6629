//! The [`Driver`] trait (the kernel's `ndo_start_xmit` seen from `sch_direct_xmit`), what a
//! driver call returns ([`TxResult`]), and two drivers of our own: [`NullDriver`] for
//! benchmarks and [`RecordingDriver`] for tests.

use core::fmt;
use std::hint::black_box;

use llist_defer::Fifo;

use crate::packet::{DropReason, Packet};
use crate::qdisc::ToFree;

/// What a driver did with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxResult {
    /// Packets taken from the front of the batch and sent.
    pub sent: usize,
    /// The queue is stopped (ring full, link down): the engine requeues what is left of the batch
    /// and stops running until [`TxQueue::wake`](crate::TxQueue::wake) (`NETDEV_TX_BUSY`).
    pub stopped: bool,
}

/// The device side of a transmit queue.
///
/// The engine calls [`xmit`](Driver::xmit) from one runner at a time, which may hold the root
/// lock meanwhile (a bypass, or a runner that keeps it while it sends): a driver must not call
/// back into its own queue.
/// The driver pops the packets it accepts from the front of `batch`; whatever it leaves there is
/// requeued in order and sent first next time. Packets it cannot ever send (too long, link gone)
/// go to `to_free` with a reason and are counted as drops.
pub trait Driver<P: Packet>: Send {
    /// Sends packets from the front of `batch`.
    fn xmit(&mut self, batch: &mut Fifo<P>, to_free: &mut ToFree<P>) -> TxResult;

    /// Whether the queue is stopped now (`netif_xmit_frozen_or_stopped`): the runner does not
    /// dequeue while it is.
    fn is_stopped(&self) -> bool {
        false
    }
}

/// A driver that sends into the void after a configurable amount of work per packet (about
/// 10 ns by default: like writing one descriptor). Stands in for a NIC in benchmarks.
pub struct NullDriver {
    spins: u32,
    sent: u64,
    bytes: u64,
}

impl NullDriver {
    /// The default per-packet work: about 10 ns, like writing one descriptor.
    pub const DEFAULT_COST_NS: u32 = 10;

    /// A null driver doing the default work per packet (calibrated, see
    /// [`with_cost_ns`](NullDriver::with_cost_ns)).
    pub fn new() -> Self {
        Self::with_cost_ns(Self::DEFAULT_COST_NS)
    }

    /// A null driver doing `spins` iterations of busy work per packet (0: none).
    pub fn with_spins(spins: u32) -> Self {
        NullDriver {
            spins,
            sent: 0,
            bytes: 0,
        }
    }

    /// A null driver doing about `ns` nanoseconds of busy work per packet, calibrated once per
    /// process on this machine (the benchmarks' "10 ns, like writing one descriptor").
    pub fn with_cost_ns(ns: u32) -> Self {
        Self::with_spins((f64::from(ns) * spins_per_ns()).round() as u32)
    }

    /// Busy work iterations per packet.
    pub fn spins(&self) -> u32 {
        self.spins
    }

    /// Packets sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Bytes sent so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Busy-work iterations per nanosecond on this machine: the fastest of a few timed runs.
fn spins_per_ns() -> f64 {
    static CAL: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *CAL.get_or_init(|| {
        const N: u32 = 2_000_000;
        let best = (0..5)
            .map(|_| {
                let t0 = std::time::Instant::now();
                black_box(spin(N, 1));
                t0.elapsed().as_nanos().max(1) as f64
            })
            .fold(f64::INFINITY, f64::min);
        f64::from(N) / best
    })
}

#[inline]
fn spin(spins: u32, seed: u32) -> u32 {
    let mut x = seed;
    for _ in 0..spins {
        x = black_box(x.wrapping_mul(31).wrapping_add(7));
    }
    x
}

impl Default for NullDriver {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Packet> Driver<P> for NullDriver {
    #[inline]
    fn xmit(&mut self, batch: &mut Fifo<P>, _to_free: &mut ToFree<P>) -> TxResult {
        let sent = batch.len();
        for pkt in batch.iter() {
            self.bytes += pkt.len() as u64;
            // The "descriptor write": a dependent chain the optimiser cannot drop.
            black_box(spin(self.spins, pkt.len() as u32));
        }
        // Sent: freed together, as a NIC's completions are.
        P::free_batch(core::mem::take(batch));
        self.sent += sent as u64;
        TxResult {
            sent,
            stopped: false,
        }
    }
}

impl fmt::Debug for NullDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NullDriver")
            .field("spins", &self.spins)
            .field("sent", &self.sent)
            .finish()
    }
}

/// A test driver that keeps every packet it sends, in order, and can be told to accept only
/// part of a batch, to report busy, or to refuse packets longer than an MTU.
pub struct RecordingDriver<P: Packet> {
    /// Packets sent, in wire order.
    pub sent: Vec<P>,
    /// Accept at most this many packets per call (`None`: all).
    pub accept_per_call: Option<usize>,
    /// Report the queue stopped after each call that left packets behind.
    pub stop_when_partial: bool,
    /// Whether the queue is stopped now (set by the test; cleared before `TxQueue::wake`).
    pub stopped: bool,
    /// Packets longer than this are refused for good (`DropReason::DriverError`).
    pub mtu: Option<usize>,
    /// Calls to `xmit`.
    pub calls: usize,
}

impl<P: Packet> RecordingDriver<P> {
    /// A driver that accepts everything.
    pub fn new() -> Self {
        RecordingDriver {
            sent: Vec::new(),
            accept_per_call: None,
            stop_when_partial: false,
            stopped: false,
            mtu: None,
            calls: 0,
        }
    }
}

impl<P: Packet> Default for RecordingDriver<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Packet> Driver<P> for RecordingDriver<P> {
    fn xmit(&mut self, batch: &mut Fifo<P>, to_free: &mut ToFree<P>) -> TxResult {
        self.calls += 1;
        let budget = self.accept_per_call.unwrap_or(usize::MAX);
        let mut sent = 0;
        while sent < budget {
            let Some(pkt) = batch.pop_front() else { break };
            if self.mtu.is_some_and(|mtu| pkt.len() > mtu) {
                to_free.drop_packet(pkt, DropReason::DriverError);
                continue;
            }
            self.sent.push(pkt);
            sent += 1;
        }
        let partial = !batch.is_empty();
        if partial && self.stop_when_partial {
            self.stopped = true;
        }
        TxResult {
            sent,
            stopped: partial && self.stop_when_partial,
        }
    }

    fn is_stopped(&self) -> bool {
        self.stopped
    }
}

impl<P: Packet> fmt::Debug for RecordingDriver<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingDriver")
            .field("sent", &self.sent.len())
            .field("calls", &self.calls)
            .field("stopped", &self.stopped)
            .finish()
    }
}

impl<P: Packet, D: Driver<P> + ?Sized> Driver<P> for Box<D> {
    fn xmit(&mut self, batch: &mut Fifo<P>, to_free: &mut ToFree<P>) -> TxResult {
        (**self).xmit(batch, to_free)
    }
    fn is_stopped(&self) -> bool {
        (**self).is_stopped()
    }
}

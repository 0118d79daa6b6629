//! Live reconfiguration (`fq_change`, `fq_resize`): `tc qdisc change dev X root fq ...` on a
//! qdisc that keeps its packets, flows and counters.

use super::Fq;
use super::config::FqBuilder;
use crate::config::ConfigError;
use crate::packet::{DropReason, Packet};
use crate::qdisc::ToFree;

impl<P: Packet> Fq<P> {
    /// A builder holding the options in force, this qdisc's clock and the device properties
    /// it was built with: change some of its options and pass it to [`change`](Fq::change),
    /// as `tc qdisc change` sends only the options on its command line. Building it gives a new
    /// FQ with the same options.
    pub fn to_builder(&self) -> FqBuilder {
        FqBuilder::from_config(&self.cfg)
            .clock(self.clock.clone())
            .psched_mtu(self.psched_mtu)
            .max_pacing_offload_horizon(self.max_offload_horizon)
    }

    /// Changes the options of the running qdisc (`tc qdisc change ... fq ...`, the kernel's
    /// `fq_change`) and returns how many packets were dropped to meet a lowered `limit`.
    ///
    /// `options` is validated exactly as [`FqBuilder::build`] validates it. Every option the
    /// builder holds is applied, so start from [`to_builder`](Fq::to_builder) to change only
    /// some (a fresh [`FqBuilder::new`] means "every option back to its default"). The device
    /// properties are this qdisc's: the builder's `psched_mtu` and `max_pacing_offload_horizon`
    /// are replaced by the ones given when this FQ was built (default quanta derive from that
    /// MTU, and `offload_horizon` is checked against that maximum), as is its `hz` (a kernel
    /// property), and its clock is ignored.
    ///
    /// # Errors
    ///
    /// The [`ConfigError`] naming the first bad option. Then nothing changes and nothing is
    /// dropped. (The kernel stores the options it parsed before the bad one, and still trims;
    /// a change here is all or nothing.)
    ///
    /// # What changes, and when
    ///
    /// Like the kernel, a change touches no queued packet and no flow state except as listed:
    ///
    /// - **`limit`**: if the qdisc now holds more than `limit` packets in all (the kernel
    ///   compares its total `qlen` here, though enqueue checks the limit per band), packets are
    ///   taken in scheduling order, as a dequeue would take them (a packet held by
    ///   [`peek`](crate::Qdisc::peek) first, then the fast-path queue, then the flows by round
    ///   robin), and dropped with [`DropReason::QdiscOverlimit`] onto `to_free` until the
    ///   total is within `limit`. Throttled flows' packets are not eligible, so trimming stops
    ///   early when only they are left: the qdisc may stay over `limit` until they leave, and
    ///   meanwhile enqueues to a full band are refused. Each drop counts in the qdisc's
    ///   `drops` and leaves `qlen`/`backlog`; the dequeue's own bookkeeping happens as for a
    ///   sent packet (flow and band credit, the flow's pacing time, a CE mark if late), as the
    ///   kernel trims through `fq_dequeue`. Unlike the kernel, which also counts these packets
    ///   in the sent bytes/packets and reports the drops only to parent qdiscs, they count here
    ///   as drops and not as sent.
    /// - **`flow_limit`**: nothing is dropped at change time; a flow already over a lowered
    ///   limit keeps its packets, and its later enqueues are refused (`flows_plimit`) until it
    ///   falls below.
    /// - **`buckets`**: the flow index is rebuilt for the new size (`fq_resize`); every flow
    ///   keeps its packets, order, credit, list position and throttling. As the kernel's rehash
    ///   does, every GC candidate (a detached flow whose age is more than 3·HZ jiffies old) is
    ///   freed on the way (`gc_flows`), and later GC looks in the new buckets.
    ///   Nothing happens if the size is unchanged.
    /// - **`quantum`**, **`weights`**: existing flow and band credits are kept; the new values
    ///   apply at the next refill of each (the next round).
    /// - **`initial_quantum`**, **`refill_delay`**: apply to flows created or refilled after.
    /// - **`maxrate`**, **`pacing`**, **`low_rate_threshold`**: apply from the next dequeue's
    ///   pacing computation. A flow already throttled keeps the release time computed under
    ///   the old rate (also when pacing is switched off), and a flow's pacing time is not
    ///   recomputed. A finite `maxrate` also closes the fast path to later packets.
    /// - **`priomap`**: later packets go to their new band; queued packets stay counted in the
    ///   band they were queued in.
    /// - **`orphan_mask`**: later packets without a socket are keyed with the new mask (they
    ///   may go to other flows than earlier packets with the same hash).
    /// - **`horizon`**, **`horizon_drop`**, **`ce_threshold`**, **`timer_slack`**,
    ///   **`offload_horizon`**, `max_flows`: apply to later enqueues and dequeues. Lowering
    ///   `max_flows` below the flows that exist frees none.
    ///
    /// On a [`TxQueue`](crate::TxQueue) call it under the root lock with
    /// [`with_qdisc`](crate::TxQueue::with_qdisc); the dropped packets are then counted in
    /// the qdisc's statistics, not in the engine's [`XmitStats`](crate::XmitStats).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use qdisc::{DropReason, FlowKey, Fq, ManualClock, Qdisc, TestPacket, ToFree};
    ///
    /// let mut fq = Fq::with_clock(Arc::new(ManualClock::new(1_000_000)));
    /// let mut to_free = ToFree::new();
    /// for id in 0..50 {
    ///     let flow = FlowKey::Socket { id: id % 5, hash: 0 };
    ///     fq.enqueue(TestPacket::new(id, 1000).with_flow(flow), &mut to_free);
    /// }
    /// // tc qdisc change dev eth0 root fq limit 20 quantum 6000
    /// let dropped = fq.change(fq.to_builder().limit(20).quantum(6000), &mut to_free)?;
    /// assert_eq!((dropped, fq.len()), (30, 20));
    /// assert_eq!(to_free.count(DropReason::QdiscOverlimit), 30);
    /// assert_eq!(fq.stats().drops, 30);
    /// assert_eq!(fq.config().quantum, 6000);
    ///
    /// // A bad value is refused by name and changes nothing.
    /// let err = fq.change(fq.to_builder().limit(5).weights([1, 1, 1]), &mut to_free);
    /// assert_eq!(err.unwrap_err().option(), "weights");
    /// assert_eq!((fq.config().limit, fq.len()), (20, 20));
    /// # Ok::<(), qdisc::ConfigError>(())
    /// ```
    pub fn change(
        &mut self,
        options: FqBuilder,
        to_free: &mut ToFree<P>,
    ) -> Result<usize, ConfigError> {
        let cfg = options
            .psched_mtu(self.psched_mtu)
            .max_pacing_offload_horizon(self.max_offload_horizon)
            .hz(self.cfg.hz)
            .validate()?;

        if cfg.buckets_log != self.cfg.buckets_log {
            let jiffies = self.jiffies(self.clock.now_ns());
            let freed = self.table.resize(cfg.buckets_log, jiffies, self.gc_age());
            self.flows -= freed;
            self.inactive_flows -= freed;
            self.counters.gc_flows += u64::from(freed);
        }
        for (band, &w) in self.bands.iter_mut().zip(&cfg.weights) {
            band.quantum = w as i32;
        }
        self.admitted_limit = self.admitted_limit.max(cfg.limit);
        self.admitted_flow_limit = self.admitted_flow_limit.max(cfg.flow_limit);
        self.cfg = cfg;

        let mut dropped = 0;
        while self.qlen > self.cfg.limit as usize {
            let pkt = match self.stash.pop_front() {
                Some(p) => p,
                None => match self.fq_dequeue() {
                    Some(p) => p,
                    // Only throttled flows are left.
                    None => break,
                },
            };
            self.qlen -= 1;
            self.backlog -= pkt.len() as u64;
            to_free.drop_packet(pkt, DropReason::QdiscOverlimit);
            dropped += 1;
        }
        self.stats.drops += dropped as u64;
        if self.qlen == 0 {
            self.admitted_limit = self.cfg.limit;
            self.admitted_flow_limit = self.cfg.flow_limit;
        }
        Ok(dropped)
    }
}

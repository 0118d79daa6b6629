//! FQ, the fair-queue packet scheduler with per-flow pacing (`net/sched/sch_fq.c`:
//! `fq_enqueue`, `fq_dequeue`, `fq_classify`, `fq_gc`, `fq_check_throttled`, `fq_reset`,
//! `fq_dump_stats`).
//!
//! Packets are grouped into flows (by socket, or by masked hash for packets without one). Each
//! of three bands (chosen by `priority & 15` through a priomap) keeps a list of new flows and a
//! list of old flows, served by deficit round robin with a per-flow credit; the bands share the
//! link by weighted round robin. A flow can be paced: by the packets' EDT timestamps, by
//! `maxrate`, or by its socket's pacing rate; a flow that must wait is throttled into a
//! time-ordered set and [`next_wakeup`](crate::Qdisc::next_wakeup) tells the caller when to
//! dequeue again. An idle qdisc sends through an unpaced internal queue (the fast path).
//!
//! Options are set by [`FqBuilder`] and can be changed on a running qdisc with
//! [`Fq::change`] (`tc qdisc change ... fq ...`, the kernel's `fq_change`): validated as the
//! builder validates, the flow index resized for a new `buckets`, and packets over a lowered
//! `limit` dropped.
//!
//! Files: `flow` (one flow's packets), `flow_list` (a band's round-robin list), `table` (flow
//! lookup and per-bucket GC), `enqueue` and `dequeue` (the scheduler), `batch` (the batched
//! paths' prefetch pipelines), `pacing` (the delay formula), `jiffies` (the coarse clock of flow
//! ages), `stats`, `config` (builder), `change` (live reconfiguration), `huge` (huge pages for
//! the table's arrays).
//!
//! Integer types and wraps are the kernel's: credits are `int` and wrap (the kernel builds with
//! `-fno-strict-overflow`), times are `u64` and wrap, the horizon and CE tests cast to `s64`,
//! flow ages, `refill_delay` and the GC age are jiffies compared with `time_after`, a packet's
//! length is the `u32` `qdisc_pkt_len`, and a rate of `u64::MAX` (`~0UL`) is no rate. FQ reads time from an injected [`Clock`]; it is never
//! bypassable.

use core::fmt;
use core::time::Duration;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use llist_defer::{Fifo, NodeRef};

use crate::clock::Clock;
use crate::packet::{DropReason, FlowKey, Packet};
use crate::qdisc::{BatchVerdict, Qdisc, QdiscStats, ToFree, Verdict};
use crate::show::{Rate, Size, Time, fmt_priomap};

/// Batched enqueue and dequeue: prefetch pipelines.
mod batch;
/// `fq_change` and `fq_resize`: live reconfiguration.
mod change;
/// FQ options, defaults and validation.
pub mod config;
/// `fq_dequeue`.
mod dequeue;
/// `fq_enqueue` and `fq_classify`.
mod enqueue;
/// One flow's packet queue and state.
mod flow;
/// A band's round-robin list of flows: a ring of flow indices.
mod flow_list;
/// Huge-page hints for the flow table's arrays.
mod huge;
/// Jiffies and the kernel's conversions.
mod jiffies;
/// The pacing delay.
mod pacing;
/// `tc_fq_qd_stats`.
pub mod stats;
/// Flow lookup and garbage collection.
mod table;
/// White-box tests of flow credit and queue structure.
#[cfg(test)]
mod tests;

use config::{FQ_BANDS, FqConfig};
use flow::{Flow, FlowCold, FlowState};
use flow_list::FlowList;
pub use jiffies::{FQ_DEFAULT_HZ, FQ_HZ_CHOICES};
use stats::{Counters, FqStats};
use table::FlowTable;

/// Which of a band's two round-robin lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListSel {
    New,
    Old,
}

/// One band's lists and WRR credit (`struct fq_perband_flows`).
#[derive(Debug, Clone)]
struct BandFlows {
    new_flows: FlowList,
    old_flows: FlowList,
    /// The band's WRR credit (`int`, wrapping).
    credit: i32,
    /// The band's weight: credit added per WRR round (`int`, at most `INT_MAX`).
    quantum: i32,
}

/// The FQ packet scheduler.
///
/// ```
/// use std::sync::Arc;
/// use qdisc::{Fq, FlowKey, ManualClock, Qdisc, TestPacket, ToFree};
///
/// let clock = Arc::new(ManualClock::new(1_000_000));
/// let mut fq = Fq::with_clock(clock.clone());
/// let mut to_free = ToFree::new();
/// let flow = FlowKey::Socket { id: 1, hash: 7 };
/// // A packet stamped 1 ms ahead waits for its time.
/// fq.enqueue(TestPacket::new(1, 1000).with_flow(flow).with_tstamp(2_000_000), &mut to_free);
/// assert!(fq.dequeue().is_none());
/// assert_eq!(fq.next_wakeup(), Some(2_000_000));
/// clock.advance(1_000_000);
/// assert_eq!(fq.dequeue().map(|p| p.id()), Some(1));
/// ```
pub struct Fq<P: Packet> {
    cfg: FqConfig,
    clock: Arc<dyn Clock>,
    band_nr: usize,
    bands: [BandFlows; FQ_BANDS],
    /// The fast-path queue (`q->internal`), not in the table.
    internal: Flow<P>,
    internal_cold: FlowCold<P>,
    table: FlowTable<P>,
    /// Throttled flows by (`time_next_packet`, arrival), like the kernel's `delayed` rbtree.
    delayed: BTreeMap<(u64, u64), u32>,
    delayed_seq: u64,
    time_next_delayed_flow: u64,
    unthrottle_latency_ns: u64,
    band_pkt_count: [u32; FQ_BANDS],
    flows: u32,
    inactive_flows: u32,
    throttled_flows: u32,
    counters: Counters,
    /// `SO_MAX_PACING_RATE` per socket id.
    socket_max_rate: HashMap<u64, u64>,
    /// A packet taken by `peek` (`qdisc_peek_dequeued`'s `gso_skb`), still counted as queued.
    stash: Fifo<P>,
    qlen: usize,
    backlog: u64,
    stats: QdiscStats,
    /// The device's `psched_mtu` given at build (the default quanta of a [`change`](Fq::change)
    /// derive from it).
    psched_mtu: u32,
    /// The device's `max_pacing_offload_horizon` given at build (bounds `offload_horizon` in a
    /// [`change`](Fq::change) too).
    max_offload_horizon: Duration,
    /// The highest `limit` and `flow_limit` in force since the qdisc was last empty: a change
    /// that lowers them leaves packets admitted under the old ones (for `check_invariants`).
    admitted_limit: u32,
    admitted_flow_limit: u32,
    /// Prefetch distances of the batched paths.
    prefetch: batch::Distances,
}

impl<P: Packet> Fq<P> {
    /// An FQ with the kernel's defaults reading `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        match FqBuilder::new().clock(clock).build() {
            Ok(q) => q,
            // The defaults are valid by construction.
            Err(e) => unreachable!("default fq options rejected: {e}"),
        }
    }

    pub(crate) fn from_config(cfg: FqConfig, clock: Arc<dyn Clock>) -> Self {
        let w = cfg.weights;
        let band = |i: usize| BandFlows {
            new_flows: FlowList::new(),
            old_flows: FlowList::new(),
            credit: 0,
            quantum: w[i] as i32,
        };
        Fq {
            admitted_limit: cfg.limit,
            admitted_flow_limit: cfg.flow_limit,
            prefetch: batch::Distances::default(),
            psched_mtu: crate::pfifo::DEFAULT_PSCHED_MTU,
            max_offload_horizon: Duration::ZERO,
            bands: [band(0), band(1), band(2)],
            table: FlowTable::new(cfg.buckets_log),
            cfg,
            clock,
            band_nr: 0,
            internal: Flow::new(),
            internal_cold: FlowCold::new(),
            delayed: BTreeMap::new(),
            delayed_seq: 0,
            time_next_delayed_flow: u64::MAX,
            unthrottle_latency_ns: 0,
            band_pkt_count: [0; FQ_BANDS],
            flows: 0,
            inactive_flows: 0,
            throttled_flows: 0,
            counters: Counters::default(),
            socket_max_rate: HashMap::new(),
            stash: Fifo::new(),
            qlen: 0,
            backlog: 0,
            stats: QdiscStats::default(),
        }
    }

    /// The options in force.
    pub fn config(&self) -> &FqConfig {
        &self.cfg
    }

    /// The clock FQ reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Sets (`Some`) or clears (`None`) the `SO_MAX_PACING_RATE` of the connected socket `id`
    /// in bytes per second, for packets that do not carry one ([`Packet::max_pacing_rate`]; if
    /// both do, the lower holds). Like the packet's own, it caps the pacing rate of that
    /// socket's packets without an EDT stamp, and if finite keeps the packets of a socket that
    /// is not TCP ([`Packet::is_tcp`]) off the unpaced fast path. `Some(u64::MAX)` is no cap.
    pub fn set_socket_max_pacing_rate(&mut self, id: u64, rate: Option<u64>) {
        match rate {
            Some(r) => self.socket_max_rate.insert(id, r),
            None => self.socket_max_rate.remove(&id),
        };
    }

    /// The FQ counters (`tc_fq_qd_stats`), read now.
    pub fn fq_stats(&self) -> FqStats {
        let now = self.clock.now_ns();
        let c = &self.counters;
        FqStats {
            gc_flows: c.gc_flows,
            highprio_packets: 0,
            tcp_retrans: 0,
            throttled: c.throttled,
            flows_plimit: c.flows_plimit,
            pkts_too_long: c.pkts_too_long,
            allocation_errors: c.allocation_errors,
            time_next_delayed_flow: self
                .time_next_delayed_flow
                .wrapping_add(self.cfg.timer_slack_ns)
                .wrapping_sub(now) as i64,
            next_delayed_flow_ns: (self.time_next_delayed_flow != u64::MAX)
                .then_some(self.time_next_delayed_flow),
            flows: self.flows,
            inactive_flows: self.inactive_flows,
            throttled_flows: self.throttled_flows,
            unthrottle_latency_ns: self.unthrottle_latency_ns.min(u64::from(u32::MAX)) as u32,
            ce_mark: c.ce_mark,
            horizon_drops: c.horizon_drops,
            horizon_caps: c.horizon_caps,
            fastpath_packets: c.fastpath_packets,
            band_drops: c.band_drops,
            band_pkt_count: self.band_pkt_count,
        }
    }

    /// The hrtimer slack the watchdog may add to [`next_wakeup`](Qdisc::next_wakeup), ns.
    pub fn timer_slack_ns(&self) -> u64 {
        self.cfg.timer_slack_ns
    }

    /// The band of a priority through the priomap.
    #[inline]
    pub fn band_of(&self, priority: u32) -> usize {
        usize::from(self.cfg.priomap[(priority & 15) as usize])
    }

    /// `skb->sk->sk_max_pacing_rate` of a packet's socket: the lower of the packet's
    /// [`Packet::max_pacing_rate`] and the cap set by [`set_socket_max_pacing_rate`]
    /// (`u64::MAX`, the kernel's `~0UL`: none); `None` for an orphan, which has no `skb->sk`.
    ///
    /// [`set_socket_max_pacing_rate`]: Fq::set_socket_max_pacing_rate
    #[inline]
    fn sk_max_pacing_rate(&self, pkt: &P) -> Option<u64> {
        let set = match pkt.flow() {
            FlowKey::Orphan { .. } => return None,
            FlowKey::Socket { id, .. } if !self.socket_max_rate.is_empty() => {
                self.socket_max_rate.get(&id).copied()
            }
            _ => None,
        };
        let own = pkt.max_pacing_rate().unwrap_or(u64::MAX);
        Some(own.min(set.unwrap_or(u64::MAX)))
    }

    /// `skb->sk->sk_pacing_rate` of a packet's socket: the transport's rate capped by
    /// `sk_max_pacing_rate`, as `sock_setsockopt(SO_MAX_PACING_RATE)` and TCP cap it
    /// (`u64::MAX`: unlimited); `None` for an orphan.
    #[inline]
    fn sk_pacing_rate(&self, pkt: &P) -> Option<u64> {
        let max = self.sk_max_pacing_rate(pkt)?;
        Some(pkt.pacing_rate().unwrap_or(u64::MAX).min(max))
    }

    /// The jiffies count at `now` (ns) under this qdisc's `HZ`.
    #[inline]
    fn jiffies(&self, now: u64) -> u64 {
        jiffies::jiffies_at(now, self.cfg.hz)
    }

    /// `FQ_GC_AGE`: 3·HZ jiffies.
    #[inline]
    fn gc_age(&self) -> u64 {
        3 * u64::from(self.cfg.hz)
    }

    /// The table key of a flow (`fq_classify`'s `sk`: a socket id `<< 1`, or
    /// `(hash & orphan_mask) << 1 | 1`) and its socket hash for a connected socket.
    #[inline]
    fn key_of(&self, flow: FlowKey) -> (u128, Option<u32>) {
        match flow {
            // Socket ids shifted left, hashes shifted left with the low bit set: the kernel's
            // odd-key trick, on 128 bits so that no socket id can collide with a hash.
            FlowKey::Socket { id, hash } => (u128::from(id) << 1, Some(hash)),
            FlowKey::Unconnected { hash } | FlowKey::Orphan { hash } => {
                ((u128::from(hash & self.cfg.orphan_mask) << 1) | 1, None)
            }
        }
    }

    /// The bucket a flow's packets look up and garbage-collect in (`fq_root[]`'s index,
    /// `hash_ptr(sk, buckets_log)`; `sk` is modelled as the socket id `<< 1`, truncated to 64
    /// bits, or `(hash & orphan_mask) << 1 | 1`).
    pub fn bucket_of(&self, flow: FlowKey) -> usize {
        self.table.bucket(self.key_of(flow).0)
    }

    /// Whether a flow for `flow` exists now (listed, throttled or detached); for tests.
    #[doc(hidden)]
    pub fn has_flow(&self, flow: FlowKey) -> bool {
        self.table.lookup(self.key_of(flow).0).is_some()
    }

    /// Packets in the fast-path queue (`q->internal.qlen`); for tests.
    #[doc(hidden)]
    pub fn internal_len(&self) -> u32 {
        self.internal.qlen
    }

    /// Appends flow `idx` to its band's new or old list (`fq_flow_add_tail`).
    #[inline]
    fn flow_add_tail(&mut self, idx: u32, sel: ListSel) {
        let f = self.table.get_mut(idx);
        f.state = FlowState::Listed;
        let band = &mut self.bands[usize::from(f.band)];
        match sel {
            ListSel::New => band.new_flows.push_back(idx),
            ListSel::Old => band.old_flows.push_back(idx),
        }
    }

    /// Puts flow `idx` into the delayed set (`fq_flow_set_throttled`).
    fn flow_set_throttled(&mut self, idx: u32) {
        self.delayed_seq += 1;
        let (f, cold) = self.table.both_mut(idx);
        let key = (f.time_next_packet, self.delayed_seq);
        cold.delayed_key = key;
        f.state = FlowState::Throttled;
        self.delayed.insert(key, idx);
        self.throttled_flows += 1;
        self.counters.throttled += 1;
        if self.time_next_delayed_flow > key.0 {
            self.time_next_delayed_flow = key.0;
        }
    }

    /// Takes flow `idx` out of the delayed set onto its band's old list
    /// (`fq_flow_unset_throttled`).
    fn flow_unset_throttled(&mut self, idx: u32) {
        let key = self.table.cold(idx).delayed_key;
        self.delayed.remove(&key);
        self.throttled_flows -= 1;
        self.flow_add_tail(idx, ListSel::Old);
    }

    /// Checks every internal invariant and counter against a full scan (O(flows + packets));
    /// for tests. Returns a description of the first inconsistency.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut qlen = self.stash.len() + self.internal.qlen as usize;
        let mut backlog: u64 = self.stash.iter().map(|p| p.len() as u64).sum();
        self.internal
            .for_each(&self.internal_cold, |p, _| backlog += p.len() as u64);
        self.internal.check_parts(&self.internal_cold)?;
        let mut band_pkts = [0u32; FQ_BANDS];
        let (mut inactive, mut throttled) = (0u32, 0u32);
        let mut live = 0u32;
        for idx in self.table.live() {
            live += 1;
            let f = self.table.get(idx);
            let cold = self.table.cold(idx);
            f.check_parts(cold)
                .map_err(|e| format!("flow {idx}: {e}"))?;
            if self.table.lookup(cold.key) != Some(idx) {
                return Err(format!("flow {idx}: its key does not find it"));
            }
            let mut n = 0u32;
            f.for_each(cold, |p, cb| {
                n += 1;
                backlog += p.len() as u64;
                band_pkts[usize::from(cb.band)] += 1;
            });
            if n != f.qlen {
                return Err(format!("flow {idx}: qlen {} but {n} packets", f.qlen));
            }
            if n > self.admitted_flow_limit {
                return Err(format!("flow {idx}: {n} packets over flow_limit"));
            }
            qlen += n as usize;
            if f.qlen == 0 {
                inactive += 1;
            }
            match f.state {
                FlowState::Throttled => {
                    throttled += 1;
                    if self.delayed.get(&cold.delayed_key) != Some(&idx) {
                        return Err(format!("flow {idx} throttled but not in the delayed set"));
                    }
                }
                FlowState::Detached if f.qlen != 0 => {
                    return Err(format!("flow {idx} detached with {} packets", f.qlen));
                }
                _ => {}
            }
        }
        let checks = [
            ("qlen", self.qlen as u64, qlen as u64),
            ("backlog", self.backlog, backlog),
            ("flows", u64::from(self.flows), u64::from(live)),
            (
                "inactive_flows",
                u64::from(self.inactive_flows),
                u64::from(inactive),
            ),
            (
                "throttled_flows",
                u64::from(self.throttled_flows),
                u64::from(throttled),
            ),
            (
                "delayed set",
                self.delayed.len() as u64,
                u64::from(throttled),
            ),
        ];
        for (name, kept, counted) in checks {
            if kept != counted {
                return Err(format!("{name}: kept {kept}, counted {counted}"));
            }
        }
        if band_pkts.iter().any(|&n| n > self.admitted_limit) {
            return Err(format!(
                "band_pkt_count {band_pkts:?} over limit {}",
                self.admitted_limit
            ));
        }
        if band_pkts != self.band_pkt_count {
            return Err(format!(
                "band_pkt_count {:?}, counted {band_pkts:?}",
                self.band_pkt_count
            ));
        }
        let mut listed = 0u32;
        for b in &self.bands {
            for i in b.new_flows.iter().chain(b.old_flows.iter()) {
                listed += 1;
                if listed > live {
                    return Err("a flow is on the round-robin lists twice".into());
                }
                if self.table.get(i).state != FlowState::Listed {
                    return Err(format!("flow {i} on a list but not listed"));
                }
            }
        }
        let want = self
            .table
            .live()
            .filter(|&i| self.table.get(i).state == FlowState::Listed);
        if want.count() as u32 != listed {
            return Err("a listed flow is on no list".into());
        }
        self.table.check_gc()
    }

    /// Entries in the GC age queue (a bounded bookkeeping structure; exposed for tests).
    #[doc(hidden)]
    pub fn gc_queue_len(&self) -> usize {
        self.table.age_queue_len()
    }
}

impl<P: Packet> Fq<P> {
    /// [`Qdisc::dequeue`] at the time `now` gives (see [`fq_dequeue_at`](Self::fq_dequeue_at)).
    #[inline]
    fn dequeue_at<N: dequeue::Now>(&mut self, now: &mut N) -> Option<P> {
        let pkt = match self.stash.pop_front() {
            Some(p) => p,
            None => self.fq_dequeue_at(now)?,
        };
        let len = pkt.len() as u64;
        self.qlen -= 1;
        self.backlog -= len;
        self.stats.bytes += len;
        self.stats.packets += 1;
        Some(pkt)
    }
}

pub use config::FqBuilder;

impl<P: Packet> Qdisc<P> for Fq<P> {
    fn kind(&self) -> &'static str {
        "fq"
    }

    fn enqueue(&mut self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        self.fq_enqueue(pkt, to_free)
    }

    fn enqueue_batch(&mut self, batch: &mut Fifo<P>, to_free: &mut ToFree<P>) -> BatchVerdict {
        self.fq_enqueue_batch(batch, to_free)
    }

    fn dequeue_batch(&mut self, out: &mut Fifo<P>, max: usize) -> usize {
        self.fq_dequeue_batch(out, max)
    }

    fn dequeue(&mut self) -> Option<P> {
        self.dequeue_at(&mut dequeue::ReadEach)
    }

    /// `qdisc_peek_dequeued`: the packet is taken by `fq_dequeue` and held until the next
    /// dequeue (or `reset`), still counted in `len` and `backlog`. One difference: the kernel's
    /// `fq_dequeue` counts the packet as sent (`qdisc_bstats_update`) when the peek takes it,
    /// this port when it leaves the qdisc, so a peeked packet that `reset` frees is never
    /// counted as sent. (The kernel peeks only child qdiscs.)
    fn peek(&mut self) -> Option<NodeRef<'_, P>> {
        if self.stash.is_empty() {
            let p = self.fq_dequeue()?;
            self.stash.push_back(p);
        }
        self.stash.front()
    }

    fn len(&self) -> usize {
        self.qlen
    }

    fn backlog(&self) -> u64 {
        self.backlog
    }

    /// `fq_reset`: the packets are freed (`fq_flow_purge`), not counted as drops.
    fn reset(&mut self, to_free: &mut ToFree<P>, reason: DropReason) {
        while let Some(p) = self.stash.pop_front() {
            to_free.drop_packet(p, reason);
        }
        self.internal
            .purge(&mut self.internal_cold, to_free, reason);
        let live: Vec<u32> = self.table.live().collect();
        for idx in live {
            let (f, cold) = self.table.both_mut(idx);
            f.purge(cold, to_free, reason);
        }
        self.table.clear();
        for b in &mut self.bands {
            b.new_flows.clear();
            b.old_flows.clear();
        }
        // v6.19's fq_reset left band_pkt_count[] as it was, so every reset with packets queued
        // shrank their bands' room for good; upstream's fix ("net_sched: sch_fq: clear
        // q->band_pkt_count[] in fq_reset()", Fixes: 29f834aa326e, in the stable trees) clears
        // it, and so does this port.
        self.band_pkt_count = [0; FQ_BANDS];
        self.delayed.clear();
        // fq_reset leaves q->time_next_delayed_flow as it was: until a dequeue finds it due and
        // clears it, a stale time in the past keeps the fast path closed to a second packet.
        self.flows = 0;
        self.inactive_flows = 0;
        self.throttled_flows = 0;
        self.qlen = 0;
        self.backlog = 0;
        self.admitted_limit = self.cfg.limit;
        self.admitted_flow_limit = self.cfg.flow_limit;
    }

    fn can_bypass(&self) -> bool {
        false
    }

    fn stats(&self) -> QdiscStats {
        QdiscStats {
            qlen: self.qlen as u64,
            backlog: self.backlog,
            ..self.stats
        }
    }

    /// `fq_dequeue`'s watchdog: `time_next_delayed_flow` when set. That time can be earlier
    /// than every throttled flow's (a reused socket's flow is taken out of the delayed tree
    /// without recomputing it, see `stats.rs`); the kernel wakes at it all the same, finds
    /// nothing due and recomputes, and its latency sample is then taken against that time.
    fn next_wakeup(&self) -> Option<u64> {
        if self.qlen == 0 {
            return None;
        }
        (self.time_next_delayed_flow != u64::MAX).then_some(self.time_next_delayed_flow)
    }

    fn fmt_xstats(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.fq_stats())
    }
}

impl<P: Packet> fmt::Debug for Fq<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fq")
            .field("qlen", &self.qlen)
            .field("backlog", &self.backlog)
            .field("flows", &self.flows)
            .field("throttled_flows", &self.throttled_flows)
            .field("config", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// `tc -s qdisc show` output: the options line as `fq_print_opt` prints it, the generic stats
/// lines and FQ's own lines.
impl<P: Packet> fmt::Display for Fq<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.cfg;
        write!(
            f,
            "qdisc fq 0: root refcnt 2 limit {}p flow_limit {}p buckets {} orphan_mask {} ",
            c.limit,
            c.flow_limit,
            1u32 << c.buckets_log,
            c.orphan_mask
        )?;
        if !c.rate_enable {
            f.write_str("nopacing ")?;
        }
        write!(f, "bands {FQ_BANDS} priomap ")?;
        fmt_priomap(f, &c.priomap)?;
        write!(
            f,
            " weights {} {} {} ",
            c.weights[0], c.weights[1], c.weights[2]
        )?;
        write!(
            f,
            "quantum {} initial_quantum {} ",
            Size(c.quantum.into()),
            Size(c.initial_quantum.into())
        )?;
        if let Some(r) = c.maxrate {
            write!(f, "maxrate {} ", Rate(r))?;
        }
        if c.low_rate_threshold != 0 {
            write!(f, "low_rate_threshold {} ", Rate(c.low_rate_threshold))?;
        }
        // fq_dump: jiffies_to_usecs(q->flow_refill_delay), what the kernel really waits.
        let refill_us = jiffies::jiffies_to_usecs(u64::from(c.refill_delay_jiffies), c.hz);
        write!(f, "refill_delay {} ", Time(u64::from(refill_us) * 1000))?;
        if c.ce_threshold_ns != u64::from(u32::MAX) * 1000 {
            write!(f, "ce_threshold {} ", Time(c.ce_threshold_ns))?;
        }
        write!(
            f,
            "timer_slack {} horizon {} ",
            Time(c.timer_slack_ns),
            Time(c.horizon_ns)
        )?;
        f.write_str(if c.horizon_drop {
            "horizon_drop"
        } else {
            "horizon_cap"
        })?;
        if c.offload_horizon_ns != 0 {
            write!(f, " offload_horizon {}", Time(c.offload_horizon_ns))?;
        }
        write!(f, "{}", self.stats())?;
        self.fmt_xstats(f)
    }
}

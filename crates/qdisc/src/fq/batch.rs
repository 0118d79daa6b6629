//! FQ's batched enqueue and dequeue: software prefetch pipelines over a batch, in the manner of
//! DPDK `rte_sched`'s burst prefetch. They only start loading cache lines early: every decision
//! (limits, fast path, GC, flow creation, round robin, pacing) is still made by `fq_enqueue` /
//! `fq_dequeue` for one packet at its own turn, on the state left by the packets before it,
//! so a batch gets exactly the verdicts, drops, counters and order of the packets one by one
//! at the batch's instant. That instant is this port's approximation: a batch reads the clock
//! once, where the kernel, which has no batch calls (its bulk dequeue and the defer list's
//! drain call `->dequeue` and `->enqueue` once a packet), reads it at every packet. With a
//! real clock the later packets of a batch are timed (paced, tested against the horizon, let
//! out of throttling) as of its first, a difference of the batch's own duration.
//! This file must not decide anything itself.
//!
//! Enqueue, at packet `i`'s turn, with index distance `k` and flow distance `h < k`: the flow
//! key of packet `i + k` (read from the batch) picks its index line, which starts loading; the
//! index line of packet `i + h`, loaded by then, names its flow, whose hot line starts loading;
//! packet `i` is enqueued, its index and flow lines in cache. Before the first packet, a
//! prologue starts the index lines of packets `0 .. k` and then the flow lines of `0 .. h`, so
//! the batch's first packets find their lines loading too (without it, at `k` = 16 in batches
//! of 32, the pipeline was 9–12 % slower). The look-ahead is speculative (GC, a new flow or an
//! index growth between the prefetch and the packet's turn may make it stale), which costs a
//! miss at worst, never a wrong answer.
//!
//! Dequeue, before each packet, with distance `d`: the flows `d` and `d + 1` places behind the
//! head of the list being served start loading (two, because a dequeue may pass over a flow
//! without taking a packet: an empty or out-of-credit flow), and so does the head packet of the
//! flow `d/2` places behind it, whose address its flow line, loaded by then, holds.
//!
//! Both pipelines are kept lean, because they run on every packet and pay for themselves only
//! through the misses they hide: each packet's key is hashed once for both of its enqueue
//! prefetches (an [`IndexHint`](crate::fq::table::IndexHint)), and a hint's address is computed
//! without a bounds check (a prefetch never faults). At 100 000 flows (callgrind, the `qdisc`
//! bench's batches of 32) the pipelines add 122 instructions a packet to the 584 of the batch
//! without them (171 when each prefetch hashed the key itself).

use llist_defer::Fifo;

use super::Fq;
use super::table::IndexHint;
use crate::packet::Packet;
#[cfg(doc)]
use crate::qdisc::Qdisc;
use crate::qdisc::{BatchVerdict, ToFree};

/// Flow keys computed ahead of the enqueue pipeline (a power of two, at least twice the largest
/// distance, so a refill serves at least `KEYS / 2` packets).
const KEYS: usize = 64;
/// The largest enqueue distance.
pub(super) const MAX_ENQUEUE_DISTANCE: usize = KEYS / 2;
/// The largest dequeue look-ahead.
pub(super) const MAX_DEQUEUE_DISTANCE: usize = 64;
/// Default enqueue (index line) distance, measured with `QDISC_BENCH_FQ_K=E/D/H` in
/// `benches/qdisc.rs` (fq on the manual clock, batches of 32, one packet per flow, in-round
/// ratios over 9 rounds on a busy machine, against 8/8/4 with the prologue): 16/8/4 0.85–0.93x
/// the time at 100 000 and 300 000 flows and 0.94–0.95x at 1 000 000; 24/8/4 0.85x and 0.96x,
/// 32/8/8 0.90–0.93x at 300 000 and 1 000 000 but 1.06x at 100 000; 16/8/2 0.87x and 0.98x.
/// Before the prologue, with the flow line at half the distance: at 1 000 000 flows 4/8, 8/4,
/// 8/8 and 8/16 were within 3 % of each other, 16/8 and 16/16 5–7 % slower, 32/8 clearly
/// slower. Each pipeline pays on its own: 0/0 228 ns a packet, 8/0 165, 0/8 201, 8/8 133
/// (1 000 000 flows, one run).
pub(super) const DEFAULT_ENQUEUE_DISTANCE: usize = 16;
/// Default distance of the enqueue's flow-line prefetch (see [`DEFAULT_ENQUEUE_DISTANCE`]).
pub(super) const DEFAULT_FLOW_DISTANCE: usize = 4;
/// Default dequeue look-ahead: the flow lines 24 places ahead and the head packet of the flow
/// 12 ahead. The head packet's address is read from its flow's line, and at 8/4 that read
/// stalled (a third of the dequeue's samples at a million flows, `perf annotate`): four
/// dequeues are less than a miss here. Measured with `QDISC_BENCH_FQ_K=16/D/4` (in-round
/// ratios over 7 rounds against 16/8/4, flow tables on huge pages): D = 16 0.83–0.86x the time
/// at 100 000, 300 000 and 1 000 000 flows, D = 24 0.81–0.83x, D = 32 0.80–0.84x; at 10 000
/// and 30 000 flows 0.95–0.98x for all three.
pub(super) const DEFAULT_DEQUEUE_DISTANCE: usize = 24;
/// Fewer live flows than this and the pipelines stay off: the table is then in the caches and
/// the look-ahead only costs. Where the pipelines start to pay depends on what else uses the
/// caches. Measured (fq on the manual clock, batches of 32, one packet per flow): one qdisc
/// alone (thread CPU time, 5 rounds, pipelines 8/8 against off) 1.15x slower at 8 192 flows,
/// 1.05x at 16 384, 0.94x at 32 768; the fq-only `qdisc` bench (`QDISC_BENCH_FQ_K=0,8`)
/// 1.05x slower at 8 192, 0.96x at 16 384; the full `qdisc` bench with cold slices (before it
/// ran an untimed pass ahead of each), whose eleven variants evicted each other's tables as
/// the rest of a system would, loop/batch 1.29x at 10 000 flows with the pipelines on (1.00x
/// with them off). With the 8-byte index, and the bench timing each
/// variant's steady state (an untimed pass before each slice; `QDISC_BENCH_FQ_K=0`, two runs
/// of 7 rounds, pipelines off over on): 0.90x at 10 000 flows (off faster), 1.01–1.03x at
/// 20 000, 1.09–1.11x at 30 000, 1.16–1.26x at 50 000. So they start at 16 384, about where
/// they break even on a warm cache and still pay on a cold one.
pub(super) const PIPELINE_MIN_FLOWS: usize = 16_384;

/// The prefetch distances of the batched paths (0: no prefetch), and the number of live flows
/// from which they run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Distances {
    pub(super) enqueue: usize,
    /// The enqueue's flow-line distance (at most `enqueue`).
    pub(super) flow: usize,
    pub(super) dequeue: usize,
    pub(super) min_flows: usize,
}

impl Default for Distances {
    fn default() -> Self {
        Distances {
            enqueue: DEFAULT_ENQUEUE_DISTANCE,
            flow: DEFAULT_FLOW_DISTANCE,
            dequeue: DEFAULT_DEQUEUE_DISTANCE,
            min_flows: PIPELINE_MIN_FLOWS,
        }
    }
}

impl<P: Packet> Fq<P> {
    /// Sets the prefetch distances of [`enqueue_batch`](Qdisc::enqueue_batch) (`enqueue`, the
    /// index-line distance, the flow line then loaded at half of it; at most 32) and
    /// [`dequeue_batch`](Qdisc::dequeue_batch) (`dequeue` flows ahead in the round robin, at
    /// most 64); 0 turns a pipeline off, larger values are clamped. By default both run only
    /// while the table holds at least 16 384 flows; after this call, at any number. Only speed
    /// changes, never a result. For tuning with the `qdisc` bench and for tests.
    #[doc(hidden)]
    pub fn set_prefetch_distances(&mut self, enqueue: usize, dequeue: usize) {
        let enqueue = enqueue.min(MAX_ENQUEUE_DISTANCE);
        self.prefetch = Distances {
            enqueue,
            flow: enqueue / 2,
            dequeue: dequeue.min(MAX_DEQUEUE_DISTANCE),
            min_flows: 0,
        };
    }

    /// Sets the enqueue pipeline's flow-line distance (4 by default, half the enqueue distance
    /// after [`set_prefetch_distances`](Self::set_prefetch_distances); clamped to 1 ..= the
    /// enqueue distance when the pipeline runs). Only speed changes, never a result. For tuning
    /// with the `qdisc` bench.
    #[doc(hidden)]
    pub fn set_flow_prefetch_distance(&mut self, flow: usize) {
        self.prefetch.flow = flow;
    }

    /// [`Qdisc::enqueue_batch`] with the prefetch pipeline.
    ///
    /// The panic promise: each packet is taken from the front of `batch` before anything is
    /// called on it, and the packets further on are read (their flow key, for the look-ahead)
    /// only before the first is taken or while exactly one packet, the taken one, is in hand;
    /// so if a packet method panics, the untaken packets are all still in `batch` and at most
    /// one packet is lost, as in the loop.
    pub(super) fn fq_enqueue_batch(
        &mut self,
        batch: &mut Fifo<P>,
        to_free: &mut ToFree<P>,
    ) -> BatchVerdict {
        let mut v = BatchVerdict::default();
        // The batch arrives at one instant: one clock read for all its packets.
        let now = self.clock.now_ns();
        let k = self.prefetch.enqueue;
        if k == 0 || batch.len() <= 1 || self.table.len() < self.prefetch.min_flows {
            while let Some(pkt) = batch.pop_front() {
                v.record(self.fq_enqueue_at(pkt, now, to_free));
            }
            return v;
        }
        let h = self.prefetch.flow.clamp(1, k);
        // hints[j % KEYS] is where the lookup of the batch's packet j begins, for j < `computed`
        // (computed once a packet, for both of its prefetches).
        let mut hints = [IndexHint::default(); KEYS];
        let total = batch.len();
        // Prologue, no packet in hand yet: the first packets' index lines, then (the first of
        // them loaded by the time they are read) their flow lines, so the batch's first `k`
        // packets do not wait as a bare pipeline's would.
        let mut computed = total.min(KEYS);
        for (slot, p) in hints.iter_mut().zip(batch.iter()) {
            *slot = self.table.hint(self.key_of(p.flow()).0);
        }
        for &hint in &hints[..total.min(k)] {
            self.table.prefetch_index(hint);
        }
        for &hint in &hints[..total.min(h)] {
            self.table.prefetch_flow_of(hint);
        }
        let mut i = 0usize;
        while let Some(pkt) = batch.pop_front() {
            // Packet i is in hand; the batch holds packets i + 1 .. total.
            if i + k < total {
                if computed == i + k {
                    // Hints of packets i + k .. min(total, i + KEYS): the slot of packet i's
                    // (no longer needed) is the only one overwritten past the live ones.
                    let end = total.min(i + KEYS);
                    for (j, p) in (computed..end).zip(batch.iter().skip(computed - (i + 1))) {
                        hints[j % KEYS] = self.table.hint(self.key_of(p.flow()).0);
                    }
                    computed = end;
                }
                self.table.prefetch_index(hints[(i + k) % KEYS]);
            }
            if i + h < total {
                self.table.prefetch_flow_of(hints[(i + h) % KEYS]);
            }
            v.record(self.fq_enqueue_at(pkt, now, to_free));
            i += 1;
        }
        v
    }

    /// [`Qdisc::dequeue_batch`] with the round robin's look-ahead: [`Qdisc::dequeue`] per
    /// packet, all at the instant of the batch's first clock read (the kernel reads it at each
    /// packet's `fq_dequeue`: see the module docs), prefetches between them.
    pub(super) fn fq_dequeue_batch(&mut self, out: &mut Fifo<P>, max: usize) -> usize {
        let d = if self.table.len() < self.prefetch.min_flows {
            0
        } else {
            self.prefetch.dequeue
        };
        let mut n = 0;
        let mut now = super::dequeue::BatchTime::default();
        while n < max {
            if d != 0 {
                self.prefetch_round_robin(d);
            }
            let Some(pkt) = self.dequeue_at(&mut now) else {
                break;
            };
            out.push_back(pkt);
            n += 1;
        }
        n
    }

    /// Starts loading the flows `d` and `d + 1` places behind the head of the list the next
    /// dequeue serves (both, or neither near the list's end), and the head packet of the one
    /// `d/2` places behind it.
    ///
    /// The look-ahead stays in that list, so the first flows of a band's turn are not loaded
    /// ahead: in the `qdisc` bench (three bands, 100 000 flows) 21 % of the head-packet reads
    /// found a flow not named in the 63 dequeues before (0.2 % with one band, which runs
    /// 38.9–40.4 ns a packet against 43.8–45.5 with three). Looking into the next band's lists
    /// over the turn's last `d + 1` packets halved those reads but not the time: 40.6–42.8 ns
    /// against 40.8–42.2 at 100 000 flows, 44.6–45.2 against 44.8–50.7 at 1 000 000 (four
    /// alternated pairs, functions and blocks aligned in both builds). Not kept.
    #[inline]
    fn prefetch_round_robin(&self, d: usize) {
        // The list `head_select` picks: none if the band is out of credit; the old list if the
        // new one is empty (an empty old list yields no index below).
        let pband = &self.bands[self.band_nr];
        if pband.credit <= 0 {
            return;
        }
        let list = if pband.new_flows.is_empty() {
            &pband.old_flows
        } else {
            &pband.new_flows
        };
        if let Some((a, b)) = list.two_behind(d) {
            self.table.prefetch(a);
            self.table.prefetch(b);
        }
        if let Some(idx) = list.get(d / 2) {
            self.table.prefetch_head_packet(idx);
        }
    }
}

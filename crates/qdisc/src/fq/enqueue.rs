//! `fq_enqueue`, `fq_classify` and `fq_fastpath_check`.

use super::flow::{FlowState, PktCb};
use super::jiffies::time_after;
use super::{Fq, ListSel};
use crate::packet::{DropReason, Packet};
use crate::qdisc::{ToFree, Verdict};

/// Where `fq_classify` put a packet.
enum Class {
    /// The fast-path queue.
    Internal,
    /// A flow of the table.
    Flow(u32),
}

impl<P: Packet> Fq<P> {
    #[inline]
    fn drop(&mut self, pkt: P, to_free: &mut ToFree<P>, reason: DropReason) -> Verdict {
        self.stats.drops += 1;
        to_free.drop_packet(pkt, reason);
        Verdict::Dropped(reason)
    }

    /// `fq_enqueue` at the current time.
    #[inline(always)]
    pub(super) fn fq_enqueue(&mut self, pkt: P, to_free: &mut ToFree<P>) -> Verdict {
        let now = self.clock.now_ns();
        self.fq_enqueue_at(pkt, now, to_free)
    }

    /// `fq_enqueue` with `now` read by the caller (a batch reads the clock once). Inlined into
    /// both callers, [`Qdisc::enqueue`](crate::Qdisc::enqueue) and the batch loop: called out
    /// of line, it costs the per-packet path a call and register spills it did not pay with one
    /// caller (about 10 instructions a packet in callgrind).
    #[inline(always)]
    pub(super) fn fq_enqueue_at(&mut self, pkt: P, now: u64, to_free: &mut ToFree<P>) -> Verdict {
        let band = self.band_of(pkt.priority());
        if self.band_pkt_count[band] >= self.cfg.limit {
            self.counters.band_drops[band] += 1;
            return self.drop(pkt, to_free, DropReason::FqBandLimit);
        }

        let cb = match pkt.tstamp() {
            // A zero stamp is "no stamp", as `skb->tstamp == 0` is in the kernel.
            None | Some(0) => PktCb {
                time_to_send: now,
                band: band as u8,
                edt: false,
            },
            Some(mut ts) => {
                // fq_packet_beyond_horizon: (s64)skb->tstamp > (s64)(now + q->horizon).
                let horizon = now.wrapping_add(self.cfg.horizon_ns);
                if (ts as i64) > (horizon as i64) {
                    if self.cfg.horizon_drop {
                        self.counters.horizon_drops += 1;
                        return self.drop(pkt, to_free, DropReason::FqHorizonLimit);
                    }
                    self.counters.horizon_caps += 1;
                    ts = horizon;
                }
                PktCb {
                    time_to_send: ts,
                    band: band as u8,
                    // fq_dequeue tests the (possibly capped) skb->tstamp.
                    edt: ts != 0,
                }
            }
        };

        let len = pkt.len() as u64;
        match self.classify(&pkt, cb.time_to_send, now) {
            Class::Internal => {
                self.internal.qlen += 1;
                self.internal.push(&mut self.internal_cold, pkt, cb);
            }
            Class::Flow(idx) => {
                let f = self.table.get(idx);
                if f.qlen >= self.cfg.flow_limit {
                    if f.state == FlowState::Detached {
                        self.table.note_detached(idx);
                    }
                    self.counters.flows_plimit += 1;
                    return self.drop(pkt, to_free, DropReason::FqFlowLimit);
                }
                if f.state == FlowState::Detached {
                    // Like the kernel, the flow joins the new list of the band it last had
                    // (band 0 for a new flow) before taking this packet's band.
                    let age = f.age();
                    self.table.reattach(idx);
                    self.flow_add_tail(idx, ListSel::New);
                    // time_after(jiffies, f->age + q->flow_refill_delay)
                    let due = age.wrapping_add(u64::from(self.cfg.refill_delay_jiffies));
                    if time_after(self.jiffies(now), due) {
                        let f = self.table.get_mut(idx);
                        // max_t(u32, f->credit, q->quantum), stored back into the int.
                        f.credit = (f.credit as u32).max(self.cfg.quantum) as i32;
                    }
                }
                let (f, cold) = self.table.both_mut(idx);
                f.band = band as u8;
                if f.qlen == 0 {
                    self.inactive_flows -= 1;
                }
                f.qlen += 1;
                f.push(cold, pkt, cb);
                self.band_pkt_count[band] += 1;
            }
        }
        self.qlen += 1;
        self.backlog += len;
        Verdict::Success
    }

    /// `fq_fastpath_check`: may this packet skip flows, bands, credit and pacing?
    fn fastpath_check(&self, pkt: &P, time_to_send: u64, now: u64) -> bool {
        let horizon = now.wrapping_add(self.cfg.offload_horizon_ns);
        if time_to_send > horizon {
            return false;
        }
        if self.qlen != 0 {
            // Only if no flow is eligible now, the internal queue is short, and no delayed
            // flow is due (ordering would break otherwise).
            if self.flows != self.inactive_flows + self.throttled_flows
                || self.internal.qlen >= 8
                || self.time_next_delayed_flow <= horizon
            {
                return false;
            }
        }
        // sk && sk_fullsock(sk) && !sk_is_tcp(sk) && sk->sk_max_pacing_rate != ~0UL: only the
        // user's cap on a socket that is not TCP sends it through a flow; a TCP socket's
        // pacing rate does not (its first packets into an idle qdisc go out unpaced).
        if !pkt.is_tcp() && self.sk_max_pacing_rate(pkt).is_some_and(|r| r != u64::MAX) {
            return false;
        }
        // q->flow_max_rate != ~0UL (a maxrate of u64::MAX is stored as none)
        self.cfg.maxrate.is_none()
    }

    /// `fq_classify`: the fast path, or the packet's flow (found, reused or created), after
    /// `fq_gc` in the packet's bucket.
    #[inline(always)]
    fn classify(&mut self, pkt: &P, time_to_send: u64, now: u64) -> Class {
        let (key, socket_hash) = self.key_of(pkt.flow());

        if self.fastpath_check(pkt, time_to_send, now) {
            self.counters.fastpath_packets += 1;
            return Class::Internal;
        }

        if self.table.gc_pending() {
            let freed = self.table.gc(self.jiffies(now), self.gc_age(), key);
            if freed != 0 {
                self.flows -= freed;
                self.inactive_flows -= freed;
                self.counters.gc_flows += u64::from(freed);
            }
        }

        if let Some(hit) = self.table.find(key) {
            let idx = hit.slot;
            if let Some(hash) = socket_hash {
                if hit.socket_hash != hash {
                    // The socket was freed and its identity reused: start the flow afresh
                    // (credit, unthrottled onto the old list, no pacing time). Like the kernel,
                    // time_next_delayed_flow is left as it was.
                    self.table.set_socket_hash(hit, hash);
                    let throttled = self.table.get(idx).state == FlowState::Throttled;
                    let f = self.table.get_mut(idx);
                    f.credit = self.cfg.initial_quantum as i32;
                    if throttled {
                        self.flow_unset_throttled(idx);
                    }
                    self.table.get_mut(idx).time_next_packet = 0;
                }
            }
            return Class::Flow(idx);
        }

        if self.table.len() >= self.cfg.max_flows {
            self.counters.allocation_errors += 1;
            return Class::Internal;
        }
        let age = self.jiffies(now) | 1;
        let Some(idx) = self.table.insert(key, socket_hash.unwrap_or(0), age) else {
            self.counters.allocation_errors += 1;
            return Class::Internal;
        };
        let f = self.table.get_mut(idx);
        // initial_quantum is at most INT_MAX.
        f.credit = self.cfg.initial_quantum as i32;
        self.flows += 1;
        self.inactive_flows += 1;
        Class::Flow(idx)
    }
}

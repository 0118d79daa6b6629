//! `fq_dequeue`, `fq_check_throttled` and `fq_pband_head_select`: the internal queue first,
//! then release due throttled flows, then weighted round robin over the bands and deficit round
//! robin over each band's new and old flows, then pacing. A dequeue takes `now` from a `Now`:
//! the clock on each call (`ReadEach`) or once for a whole batch (`BatchTime`).

use super::config::FQ_BANDS;
use super::pacing::pace;
use super::{Fq, ListSel};
use crate::clock::Clock;
use crate::packet::Packet;

impl<P: Packet> Fq<P> {
    /// Moves every throttled flow that is due to its band's old list (`fq_check_throttled`).
    fn check_throttled(&mut self, now: u64) {
        if self.time_next_delayed_flow > now.wrapping_add(self.cfg.offload_horizon_ns) {
            return;
        }
        // How late the release is: a cheap EWMA (1/8) to diagnose timer problems
        // (`unsigned long sample`, used only when `(long)sample > 0`).
        let sample = now.wrapping_sub(self.time_next_delayed_flow);
        if (sample as i64) > 0 {
            let l = self.unthrottle_latency_ns;
            self.unthrottle_latency_ns = l.wrapping_sub(l >> 3).wrapping_add(sample >> 3);
        }
        let now = now.wrapping_add(self.cfg.offload_horizon_ns);
        self.time_next_delayed_flow = u64::MAX;
        while let Some((&(tnp, _), &idx)) = self.delayed.first_key_value() {
            if tnp > now {
                self.time_next_delayed_flow = tnp;
                break;
            }
            self.flow_unset_throttled(idx);
        }
    }

    /// The list to serve in the current band, if the band has credit (`fq_pband_head_select`).
    #[inline]
    pub(super) fn head_select(&self) -> Option<ListSel> {
        let pband = &self.bands[self.band_nr];
        if pband.credit <= 0 {
            None
        } else if !pband.new_flows.is_empty() {
            Some(ListSel::New)
        } else if !pband.old_flows.is_empty() {
            Some(ListSel::Old)
        } else {
            None
        }
    }

    /// A list of the current band.
    #[inline]
    pub(super) fn list(&self, sel: ListSel) -> &super::FlowList {
        let pband = &self.bands[self.band_nr];
        match sel {
            ListSel::New => &pband.new_flows,
            ListSel::Old => &pband.old_flows,
        }
    }

    /// Unlinks the first flow of a list of the current band.
    #[inline]
    fn pop_head(&mut self, sel: ListSel) {
        let pband = &mut self.bands[self.band_nr];
        match sel {
            ListSel::New => pband.new_flows.pop_front(),
            ListSel::Old => pband.old_flows.pop_front(),
        };
    }

    /// The next packet to send now, with all of FQ's bookkeeping except the generic stats.
    #[inline]
    pub(super) fn fq_dequeue(&mut self) -> Option<P> {
        self.fq_dequeue_at(&mut ReadEach)
    }

    /// [`fq_dequeue`](Self::fq_dequeue) at the time `now` gives (read where the kernel reads
    /// it, after the empty and internal checks): [`ReadEach`] reads the clock, a [`BatchTime`]
    /// reads it once for a whole batch.
    pub(super) fn fq_dequeue_at<N: Now>(&mut self, now: &mut N) -> Option<P> {
        if self.qlen == self.stash.len() {
            return None;
        }
        if let Some((src, _)) = self.internal.peek(&self.internal_cold) {
            let (pkt, _) = self.internal.take(&mut self.internal_cold, src)?;
            self.internal.qlen -= 1;
            return Some(pkt);
        }

        let now = now.get(&*self.clock);
        self.check_throttled(now);
        let mut retry = 0;
        loop {
            // begin:
            let Some(sel) = self.head_select() else {
                // Weighted round robin: give the next band its weight (never more), and keep
                // going while refills leave bands without credit (the 2024 small-weight fix).
                let mut found = false;
                loop {
                    retry += 1;
                    if retry > FQ_BANDS {
                        break;
                    }
                    self.band_nr = (self.band_nr + 1) % FQ_BANDS;
                    let pband = &mut self.bands[self.band_nr];
                    // min(pband->credit + pband->quantum, pband->quantum) on int: the sum
                    // wraps negative when a band with leftover credit has a weight near
                    // INT_MAX, and the band then waits one more round.
                    pband.credit = pband.credit.wrapping_add(pband.quantum).min(pband.quantum);
                    if pband.credit > 0 {
                        found = true;
                        break;
                    }
                    retry = 0;
                }
                if found {
                    continue;
                }
                // Nothing eligible: the caller's watchdog fires at `next_wakeup()`.
                return None;
            };
            let idx = self.list(sel).front()?;
            retry = 0;
            if self.table.get(idx).credit <= 0 {
                let f = self.table.get_mut(idx);
                // f->credit += q->quantum (int += u32, wrapping; quantum <= 2^20).
                f.credit = f.credit.wrapping_add(self.cfg.quantum as i32);
                self.pop_head(sel);
                self.flow_add_tail(idx, ListSel::Old);
                continue;
            }

            let Some((src, cb)) = self.table.get(idx).peek(self.table.cold(idx)) else {
                self.pop_head(sel);
                // A new flow that ran dry passes once through the old list (anti-starvation);
                // an old one is detached and left for GC.
                match sel {
                    ListSel::New => self.flow_add_tail(idx, ListSel::Old),
                    ListSel::Old => self.table.set_detached(idx, self.jiffies(now)),
                }
                continue;
            };

            let f = self.table.get(idx);
            let time_next_packet = cb.time_to_send.max(f.time_next_packet);
            if now.wrapping_add(self.cfg.offload_horizon_ns) < time_next_packet {
                self.pop_head(sel);
                self.table.get_mut(idx).time_next_packet = time_next_packet;
                self.flow_set_throttled(idx);
                continue;
            }
            // The round robin goes on to this flow's successor: with many flows it has left the
            // cache since its last turn, so start loading it now.
            if let Some(next) = self.list(sel).get(1) {
                self.table.prefetch(next);
            }
            let (f, cold) = self.table.both_mut(idx);
            let (mut pkt, _) = f.take(cold, src)?;
            let late = now
                .wrapping_sub(time_next_packet)
                .wrapping_sub(self.cfg.ce_threshold_ns);
            if (late as i64) > 0 {
                pkt.mark_ce();
                self.counters.ce_mark += 1;
            }
            f.qlen -= 1;
            if f.qlen == 0 {
                self.inactive_flows += 1;
            }
            self.band_pkt_count[usize::from(cb.band)] -= 1;

            // qdisc_pkt_len is a u32 (a longer packet, which the kernel cannot have, counts
            // as u32::MAX); f->credit -= plen and pband->credit -= plen wrap as ints.
            let mut plen = u32::try_from(pkt.len()).unwrap_or(u32::MAX);
            let f = self.table.get_mut(idx);
            f.credit = f.credit.wrapping_sub(plen as i32);
            let pband = &mut self.bands[self.band_nr];
            pband.credit = pband.credit.wrapping_sub(plen as i32);

            if !self.cfg.rate_enable {
                return Some(pkt);
            }
            let mut rate = self.cfg.maxrate.unwrap_or(u64::MAX);
            // With an EDT stamp only maxrate spaces packets; without one, the socket's
            // sk_pacing_rate applies too (if (skb->sk) rate = min(sk_pacing_rate, rate)), per
            // packet at or below low_rate_threshold, per quantum above it.
            if !cb.edt {
                if let Some(r) = self.sk_pacing_rate(&pkt) {
                    rate = rate.min(r);
                }
                let f = self.table.get_mut(idx);
                if rate <= self.cfg.low_rate_threshold {
                    f.credit = 0;
                } else {
                    plen = plen.max(self.cfg.quantum);
                    if f.credit > 0 {
                        return Some(pkt);
                    }
                }
            }
            if rate != u64::MAX {
                let f = self.table.get_mut(idx);
                let paced = pace(plen, rate, now, f.time_next_packet);
                f.time_next_packet = paced.time_next_packet;
                if paced.too_long {
                    self.counters.pkts_too_long += 1;
                }
            }
            return Some(pkt);
        }
    }
}

/// Where a dequeue takes `now` from.
pub(super) trait Now {
    fn get(&mut self, clock: &dyn Clock) -> u64;
}

/// Every dequeue reads the clock (`fq_dequeue`, one call a packet).
pub(super) struct ReadEach;

impl Now for ReadEach {
    #[inline(always)]
    fn get(&mut self, clock: &dyn Clock) -> u64 {
        clock.now_ns()
    }
}

/// A batch's time: read from the clock at the batch's first dequeue that needs it, then kept
/// for the rest of the batch.
#[derive(Default)]
pub(super) struct BatchTime(Option<u64>);

impl Now for BatchTime {
    #[inline(always)]
    fn get(&mut self, clock: &dyn Clock) -> u64 {
        *self.0.get_or_insert_with(|| clock.now_ns())
    }
}

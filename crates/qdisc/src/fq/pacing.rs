//! The pacing step at the end of `fq_dequeue`: how long a flow must wait after a packet.
//!
//! Written as the kernel writes it, on the same types: `len = (u64)plen * NSEC_PER_SEC`
//! (`plen` a `u32`, so no overflow), divided by the `unsigned long` rate unless it is 0,
//! clamped to 1 s because a socket's rate may change later (`pkts_too_long`); if the flow has a
//! `time_next_packet`, `len -= min(len / 2, now - time_next_packet)` on `u64`, and
//! `time_next_packet = now + len`. The drift credit is unsigned: a flow served before its time
//! (within `offload_horizon`) makes `now - time_next_packet` wrap to a huge value, so half the
//! delay is forgiven then too, exactly as in the kernel.

/// One second, the longest pacing delay.
pub(super) const MAX_DELAY_NS: u64 = 1_000_000_000;

/// What the pacing step decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Paced {
    /// The flow's new `time_next_packet`.
    pub(super) time_next_packet: u64,
    /// Whether the delay was clamped to 1 s.
    pub(super) too_long: bool,
}

/// `plen` bytes at `rate` bytes/s (`rate != ~0UL`), sent at `now` by a flow whose previous
/// `time_next_packet` was `prev_tnp` (0: none).
#[inline]
pub(super) fn pace(plen: u32, rate: u64, now: u64, prev_tnp: u64) -> Paced {
    let mut len = u64::from(plen) * MAX_DELAY_NS;
    // if (likely(rate)) len = div64_ul(len, rate);
    if let Some(per_rate) = len.checked_div(rate) {
        len = per_rate;
    }
    let too_long = len > MAX_DELAY_NS;
    if too_long {
        len = MAX_DELAY_NS;
    }
    if prev_tnp != 0 {
        len -= (len / 2).min(now.wrapping_sub(prev_tnp));
    }
    Paced {
        time_next_packet: now.wrapping_add(len),
        too_long,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_is_len_over_rate() {
        let p = pace(1500, 1_500_000, 10_000, 0);
        assert_eq!(
            p,
            Paced {
                time_next_packet: 10_000 + 1_000_000,
                too_long: false
            }
        );
    }

    #[test]
    fn clamped_to_one_second() {
        assert_eq!(
            pace(3000, 1000, 5, 0),
            Paced {
                time_next_packet: 5 + MAX_DELAY_NS,
                too_long: true
            }
        );
        assert!(pace(2, 0, 0, 0).too_long);
        assert!(!pace(1, 0, 0, 0).too_long);
    }

    #[test]
    fn drift_forgives_at_most_half() {
        // 1 ms delay; the flow was due 300 us ago: 300 us forgiven.
        assert_eq!(
            pace(1000, 1_000_000, 1_000_000, 700_000).time_next_packet,
            1_700_000
        );
        // due 5 ms ago: only half of the 1 ms forgiven.
        assert_eq!(
            pace(1000, 1_000_000, 6_000_000, 1_000_000).time_next_packet,
            6_500_000
        );
        // exactly on time: nothing forgiven.
        assert_eq!(
            pace(1000, 1_000_000, 2_000_000, 2_000_000).time_next_packet,
            3_000_000
        );
        // early (offload_horizon): now - time_next_packet wraps, so half is forgiven
        // (sch_fq.c fq_dequeue: `len -= min(len/2, now - f->time_next_packet)` on u64).
        assert_eq!(
            pace(1000, 1_000_000, 1_000_000, 2_000_000).time_next_packet,
            1_500_000
        );
    }
}

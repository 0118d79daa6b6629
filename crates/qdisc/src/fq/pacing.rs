//! The pacing step at the end of `fq_dequeue`: how long a flow must wait after a packet.
//!
//! `delay = plen · 10^9 / rate` ns (no division when the rate is 0), clamped to 1 s because a
//! socket's rate may change later (`pkts_too_long`); if the flow was already due at
//! `time_next_packet`, up to half the delay is forgiven for the time it was served late (drift),
//! and the flow's next packet may leave at `now + delay`.

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

/// `plen` bytes at `rate` bytes/s, sent at `now` by a flow whose previous `time_next_packet`
/// was `prev_tnp` (0: never paced).
#[inline]
pub(super) fn pace(plen: u64, rate: u64, now: u64, prev_tnp: u64) -> Paced {
    let mut len = u128::from(plen) * u128::from(MAX_DELAY_NS);
    if rate != 0 {
        len /= u128::from(rate);
    }
    let too_long = len > u128::from(MAX_DELAY_NS);
    let mut len = if too_long { MAX_DELAY_NS } else { len as u64 };
    if prev_tnp != 0 {
        let drift = now.wrapping_sub(prev_tnp) as i64;
        if drift > 0 {
            len -= (len / 2).min(drift as u64);
        }
    }
    Paced {
        time_next_packet: now.saturating_add(len),
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
        // not late: nothing forgiven.
        assert_eq!(
            pace(1000, 1_000_000, 1_000_000, 2_000_000).time_next_packet,
            2_000_000
        );
    }
}

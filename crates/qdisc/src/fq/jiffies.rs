//! FQ's coarse clock: jiffies derived from the monotonic ns clock, and the kernel's conversions
//! and comparison on them (`include/linux/jiffies.h`: `time_after`, `usecs_to_jiffies`,
//! `jiffies_to_usecs`; `kernel/time/time.c`: `__usecs_to_jiffies`; the `USEC_TO_HZ_*`
//! constants that `kernel/time/timeconst.bc` generates for an HZ that does not divide 10^6).
//!
//! `sch_fq.c` keeps flow ages (`age = jiffies | 1`), `flow_refill_delay` and `FQ_GC_AGE` in
//! jiffies, so the refill and GC decisions move in whole ticks. Here jiffies are
//! `floor(now_ns · HZ / 10^9)` of the qdisc's clock (the kernel's tick counter also starts at
//! `INITIAL_JIFFIES`; an offset changes no comparison below, all of which are differences).
//! This module owns only the arithmetic; it must not read a clock.

/// The `HZ` values FQ accepts (the kernel's `CONFIG_HZ` choices).
pub const FQ_HZ_CHOICES: [u32; 4] = [100, 250, 300, 1000];

/// `HZ` when none is given (`CONFIG_HZ_1000`).
pub const FQ_DEFAULT_HZ: u32 = 1000;

const NSEC_PER_SEC: u64 = 1_000_000_000;
const USEC_PER_SEC: u64 = 1_000_000;

/// `MAX_JIFFY_OFFSET` on a 64-bit kernel: `((LONG_MAX >> 1) - 1)`.
pub(super) const MAX_JIFFY_OFFSET: u64 = ((i64::MAX as u64) >> 1) - 1;

/// The jiffies count at `now_ns`: `floor(now_ns · hz / 10^9)`, exact for every `u64` (split
/// into whole seconds and the rest so that nothing overflows).
#[inline]
pub(super) fn jiffies_at(now_ns: u64, hz: u32) -> u64 {
    let hz = u64::from(hz);
    (now_ns / NSEC_PER_SEC) * hz + (now_ns % NSEC_PER_SEC) * hz / NSEC_PER_SEC
}

/// `time_after(a, b)`: `(long)((b) - (a)) < 0` on `unsigned long`.
#[inline]
pub(super) fn time_after(a: u64, b: u64) -> bool {
    (b.wrapping_sub(a) as i64) < 0
}

/// `jiffies_to_usecs(j)` on a 64-bit kernel: `(USEC_PER_SEC / HZ) * j` when HZ divides 10^6,
/// else `(j * HZ_TO_USEC_NUM) / HZ_TO_USEC_DEN`, both in `unsigned long` and returned as
/// `unsigned int` (truncated).
pub(super) fn jiffies_to_usecs(j: u64, hz: u32) -> u32 {
    let hz = u64::from(hz);
    if USEC_PER_SEC % hz == 0 {
        (USEC_PER_SEC / hz).wrapping_mul(j) as u32
    } else {
        let g = gcd(hz, USEC_PER_SEC);
        (j.wrapping_mul(USEC_PER_SEC / g) / (hz / g)) as u32
    }
}

/// `usecs_to_jiffies(u)` as `fq_change` calls it (a non-constant argument, so
/// `__usecs_to_jiffies`): `MAX_JIFFY_OFFSET` above `jiffies_to_usecs(MAX_JIFFY_OFFSET)`, else
/// rounded up: `(u + 10^6/HZ - 1) / (10^6/HZ)` when HZ divides 10^6, else the generated
/// reciprocal `(USEC_TO_HZ_MUL32 · u + USEC_TO_HZ_ADJ32) >> USEC_TO_HZ_SHR32`. The result is
/// an `unsigned long`; `fq_change` stores it in a `u32` (so the cap becomes `0xFFFF_FFFE`).
pub(super) fn usecs_to_jiffies(u: u32, hz: u32) -> u64 {
    if u > jiffies_to_usecs(MAX_JIFFY_OFFSET, hz) {
        return MAX_JIFFY_OFFSET;
    }
    let (u, hz64) = (u64::from(u), u64::from(hz));
    if USEC_PER_SEC % hz64 == 0 {
        let per = USEC_PER_SEC / hz64;
        // (u + (USEC_PER_SEC / HZ) - 1) / (USEC_PER_SEC / HZ), in unsigned long
        u.div_ceil(per)
    } else {
        let (mul, adj, shr) = usec_to_hz32(hz64);
        mul.wrapping_mul(u).wrapping_add(adj) >> shr
    }
}

/// `timeconst.bc`'s `USEC_TO_HZ_MUL32`, `_ADJ32` and `_SHR32` for `hz`: the smallest shift `s`
/// with `fmul(s) = ceil(2^s · hz / 10^6) >= 2^31`, and `fadj(s) = 2^s · (d - 1) / d` with
/// `d = 10^6 / gcd(hz, 10^6)`.
fn usec_to_hz32(hz: u64) -> (u64, u64, u32) {
    let fmul = |s: u32| ((1u128 << s) * u128::from(hz)).div_ceil(u128::from(USEC_PER_SEC));
    let mut s = 0;
    while fmul(s) < 1 << 31 {
        s += 1;
    }
    let d = u128::from(USEC_PER_SEC / gcd(hz, USEC_PER_SEC));
    let adj = (1u128 << s) * (d - 1) / d;
    (fmul(s) as u64, adj as u64, s)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jiffies_follow_the_clock_down_to_the_tick() {
        assert_eq!(jiffies_at(1_000_999_999, 1000), 1000);
        assert_eq!(jiffies_at(1_001_000_000, 1000), 1001);
        // 1 / 300 s is 3 333 333.33 ns.
        assert_eq!(jiffies_at(3_333_333, 300), 0);
        assert_eq!(jiffies_at(3_333_334, 300), 1);
        assert_eq!(jiffies_at(u64::MAX, 1000), u64::MAX / 1_000_000);
    }

    #[test]
    fn time_after_is_strict_and_wraps() {
        assert!(time_after(11, 10));
        assert!(!time_after(10, 10));
        assert!(time_after(5, u64::MAX - 5));
        assert!(!time_after(u64::MAX - 5, 5));
    }

    #[test]
    fn generated_constants_match_timeconst_h() {
        // include/generated/timeconst.h for HZ=100 and HZ=300 (as timeconst.bc prints them).
        assert_eq!(usec_to_hz32(100), (0xD1B7_1759, 0x1FFF_2E48_E8A7, 45));
        assert_eq!(usec_to_hz32(300), (0x9D49_5183, 0x7FF_CB92_3A29, 43));
    }

    #[test]
    fn usecs_to_jiffies_rounds_up_and_caps() {
        // fq_init's msecs_to_jiffies(40) and the same 40 000 us through fq_change agree.
        for (hz, j) in [(100, 4), (250, 10), (300, 12), (1000, 40)] {
            assert_eq!(usecs_to_jiffies(40_000, hz), j, "HZ={hz}");
        }
        assert_eq!(usecs_to_jiffies(1, 1000), 1);
        assert_eq!(usecs_to_jiffies(0, 1000), 0);
        assert_eq!(usecs_to_jiffies(15_000, 100), 2);
        assert_eq!(usecs_to_jiffies(3_333, 300), 1);
        assert_eq!(usecs_to_jiffies(3_334, 300), 2);
        // jiffies_to_usecs(MAX_JIFFY_OFFSET) truncates to u32: 2^32 - 2000 at HZ=1000.
        assert_eq!(jiffies_to_usecs(MAX_JIFFY_OFFSET, 1000), 4_294_965_296);
        assert_eq!(usecs_to_jiffies(4_294_965_296, 1000), 4_294_966);
        assert_eq!(usecs_to_jiffies(4_294_965_297, 1000), MAX_JIFFY_OFFSET);
        assert_eq!(jiffies_to_usecs(MAX_JIFFY_OFFSET, 300), 1_431_649_098);
        assert_eq!(usecs_to_jiffies(1_431_649_099, 300), MAX_JIFFY_OFFSET);
    }

    #[test]
    fn jiffies_to_usecs_as_fq_dump_reports_refill_delay() {
        assert_eq!(jiffies_to_usecs(40, 1000), 40_000);
        assert_eq!(jiffies_to_usecs(2, 100), 20_000);
        assert_eq!(jiffies_to_usecs(12, 300), 40_000);
        assert_eq!(jiffies_to_usecs(1, 300), 3_333);
    }
}

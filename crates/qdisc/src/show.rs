//! `tc -s qdisc show` formatting: the generic `Sent` / `backlog` lines of [`QdiscStats`] and the
//! size, rate and time spellings of iproute2 (`sprint_size`, `sprint_rate`, `sprint_time`).

use core::fmt;

use crate::qdisc::QdiscStats;

/// Prints the two generic lines of `tc -s qdisc show`, each starting with a newline:
/// ` Sent B bytes P pkt (dropped D, overlimits O requeues R)` and ` backlog Xb Np requeues R`.
///
/// ```
/// use qdisc::QdiscStats;
///
/// let s = QdiscStats { bytes: 3000, packets: 2, backlog: 1500, qlen: 1, ..Default::default() };
/// assert_eq!(
///     s.to_string(),
///     "\n Sent 3000 bytes 2 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 1500b 1p requeues 0"
/// );
/// ```
impl fmt::Display for QdiscStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "\n Sent {} bytes {} pkt (dropped {}, overlimits {} requeues {}) ",
            self.bytes, self.packets, self.drops, self.overlimits, self.requeues
        )?;
        write!(
            f,
            "\n backlog {} {}p requeues {}",
            Size(self.backlog),
            self.qlen,
            self.requeues
        )
    }
}

/// A byte count spelled like iproute2's `sprint_size`: in Mb when within 1 KiB of a whole
/// number of MiB (at least one), else in Kb when within 16 bytes of a whole number of KiB (at
/// least one), each printed with `%g`; else in bytes: `1514b`, `64Kb`, `1Kb` for 1030, `1Mb`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Size(pub(crate) u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KB: f64 = 1024.0;
        const MB: f64 = 1024.0 * 1024.0;
        let sz = self.0 as f64;
        // `rint` in the default rounding mode: halves to even.
        let (mb, kb) = ((sz / MB).round_ties_even(), (sz / KB).round_ties_even());
        if sz >= MB && (MB * mb - sz).abs() < 1024.0 {
            write!(f, "{}Mb", G(mb, 6))
        } else if sz >= KB && (KB * kb - sz).abs() < 16.0 {
            write!(f, "{}Kb", G(kb, 6))
        } else {
            write!(f, "{}b", self.0)
        }
    }
}

/// A number printed as C's `%.Pg` does (`G(v, P)`): `P` significant digits, in the shorter of
/// fixed and exponent form (the exponent form when the exponent is below −4 or at least `P`),
/// trailing zeros and a trailing point removed: `1e+06`, `1.25`, `123`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct G(pub(crate) f64, pub(crate) usize);

impl fmt::Display for G {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let G(v, p) = *self;
        let p = p.max(1);
        if v == 0.0 || !v.is_finite() {
            return write!(f, "{v}");
        }
        // The exponent after rounding to `p` digits, as `%e` would print it.
        let e = format!("{:.*e}", p - 1, v);
        let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let x: i32 = exp.parse().unwrap_or(0);
        if x < -4 || x >= p as i32 {
            let sign = if x < 0 { '-' } else { '+' };
            write!(
                f,
                "{}e{sign}{:02}",
                trim_fraction(mantissa),
                x.unsigned_abs()
            )
        } else {
            let fixed = format!("{:.*}", (p as i32 - 1 - x) as usize, v);
            f.write_str(trim_fraction(&fixed))
        }
    }
}

/// `%g`'s removal of trailing zeros (and of the point itself) from a fraction.
fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// A rate in bytes per second spelled in bits like `sprint_rate`: `550Kbit`, `10Mbit`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rate(pub(crate) u64);

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["bit", "Kbit", "Mbit", "Gbit", "Tbit"];
        let mut rate = u128::from(self.0) * 8;
        let mut i = 0;
        while i < UNITS.len() - 1 {
            if rate < 1000 || (rate % 1000 != 0 && rate < 1_000_000) {
                break;
            }
            rate /= 1000;
            i += 1;
        }
        write!(f, "{rate}{}", UNITS[i])
    }
}

/// A duration in nanoseconds spelled like `sprint_time64` (and `sprint_time`, whose
/// microseconds print the same): seconds, milliseconds or microseconds with `%.3g` (three
/// significant digits), nanoseconds as an integer: `10s`, `40ms`, `1.25ms`, `123ms`, `10us`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Time(pub(crate) u64);

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        let (unit, div) = if ns >= 1_000_000_000 {
            ("s", 1e9)
        } else if ns >= 1_000_000 {
            ("ms", 1e6)
        } else if ns >= 1_000 {
            ("us", 1e3)
        } else {
            return write!(f, "{ns}ns");
        };
        write!(f, "{}{unit}", G(ns as f64 / div, 3))
    }
}

/// Writes a priomap as `tc` does: sixteen band numbers separated by spaces.
pub(crate) fn fmt_priomap(f: &mut fmt::Formatter<'_>, map: &[u8; 16]) -> fmt::Result {
    for (i, b) in map.iter().enumerate() {
        if i > 0 {
            f.write_str(" ")?;
        }
        write!(f, "{b}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings() {
        assert_eq!(Size(3028).to_string(), "3028b");
        assert_eq!(Size(65536).to_string(), "64Kb");
        assert_eq!(Size(1 << 20).to_string(), "1Mb");
        // `sprint_size`'s tolerances, as `tc qdisc show` (iproute2 6.1.0) printed a bfifo of
        // each limit: within 16 bytes of a KiB multiple, within 1 KiB of a MiB multiple, `%g`.
        for (bytes, tc) in [
            (1030, "1Kb"),
            (1020, "1020b"),
            (1040, "1040b"),
            (1536, "1536b"),
            (2047, "2Kb"),
            (100_000, "100000b"),
            (1_048_000, "1048000b"),
            (1_049_000, "1Mb"),
            (3_146_000, "3Mb"),
            (2_000_000, "2000000b"),
            (1_024_000_000, "1e+06Kb"),
            (1_025_000_000, "1025000000b"),
            (4_294_967_295, "4096Mb"),
        ] {
            assert_eq!(Size(bytes).to_string(), tc, "{bytes} bytes");
        }
        // `sprint_time64`'s `%.3g`.
        assert_eq!(Time(1_250_000).to_string(), "1.25ms");
        assert_eq!(Time(123_456_000).to_string(), "123ms");
        assert_eq!(Time(1_234_000_000_000).to_string(), "1.23e+03s");
        assert_eq!(Time(999).to_string(), "999ns");
        assert_eq!(G(0.000_012_5, 3).to_string(), "1.25e-05");
        assert_eq!(G(0.5, 6).to_string(), "0.5");
        assert_eq!(Rate(68_750).to_string(), "550Kbit");
        assert_eq!(Rate(1_250_000).to_string(), "10Mbit");
        assert_eq!(Rate(100).to_string(), "800bit");
        assert_eq!(Time(10_000_000_000).to_string(), "10s");
        assert_eq!(Time(40_000_000).to_string(), "40ms");
        assert_eq!(Time(1_500_000).to_string(), "1.5ms");
        assert_eq!(Time(10_000).to_string(), "10us");
        assert_eq!(Time(7).to_string(), "7ns");
    }
}

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

/// A byte count spelled like iproute2's `sprint_size`: `1514b`, `64Kb`, `1Mb`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Size(pub(crate) u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KB: u64 = 1024;
        const MB: u64 = 1024 * 1024;
        let sz = self.0;
        if sz >= MB && sz % MB == 0 {
            write!(f, "{}Mb", sz / MB)
        } else if sz >= KB && sz % KB == 0 {
            write!(f, "{}Kb", sz / KB)
        } else {
            write!(f, "{sz}b")
        }
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

/// A duration in nanoseconds spelled like `sprint_time64`: `10s`, `40ms`, `1.5ms`, `10us`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Time(pub(crate) u64);

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        let (unit, div) = if ns >= 1_000_000_000 {
            ("s", 1_000_000_000)
        } else if ns >= 1_000_000 {
            ("ms", 1_000_000)
        } else if ns >= 1_000 {
            ("us", 1_000)
        } else {
            ("ns", 1)
        };
        let whole = ns / div;
        let tenth = (ns % div) * 10 / div;
        if tenth == 0 {
            write!(f, "{whole}{unit}")
        } else {
            write!(f, "{whole}.{tenth}{unit}")
        }
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

//! FQ's own counters (`struct tc_fq_qd_stats`, filled by `fq_dump_stats`) and their
//! `tc -s qdisc show` lines (iproute2's `fq_print_xstats`).

use core::fmt;

use super::config::FQ_BANDS;
use crate::show::Time;

/// Every counter of `tc_fq_qd_stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FqStats {
    /// Detached flows freed by garbage collection.
    pub gc_flows: u64,
    /// Always 0: the high-priority FIFO is gone since the 2023 band rework (kept for `tc`).
    pub highprio_packets: u64,
    /// Always 0 (kept for `tc`).
    pub tcp_retrans: u64,
    /// Times a flow was throttled (put in the delayed set).
    pub throttled: u64,
    /// Packets dropped by `flow_limit`.
    pub flows_plimit: u64,
    /// Packets whose pacing delay was clamped to 1 s.
    pub pkts_too_long: u64,
    /// New flows that could not be created (here: over `max_flows`, or past the table's
    /// 2^26 − 1 flows) and used the internal queue.
    pub allocation_errors: u64,
    /// `time_next_delayed_flow + timer_slack - now` in ns, as `fq_dump_stats` computes it on
    /// `u64` and reports it as `__s64` (negative when no flow is delayed, `~0ULL` then
    /// wrapping).
    pub time_next_delayed_flow: i64,
    /// The absolute `q->time_next_delayed_flow` in ns on the qdisc's clock, the time the
    /// watchdog is armed for (without `timer_slack`); `None` when it is `~0ULL` (no delayed
    /// flow). Like the kernel's field it is only recomputed when throttled flows are released,
    /// so after a reused socket leaves the delayed set it may name an earlier time than any
    /// flow still waits for.
    pub next_delayed_flow_ns: Option<u64>,
    /// Flows that exist.
    pub flows: u32,
    /// Flows with no packet queued.
    pub inactive_flows: u32,
    /// Flows waiting in the delayed set.
    pub throttled_flows: u32,
    /// EWMA (1/8) of how late throttled flows were released, ns.
    pub unthrottle_latency_ns: u32,
    /// Packets marked CE by `ce_threshold`.
    pub ce_mark: u64,
    /// Packets dropped for a timestamp beyond the horizon.
    pub horizon_drops: u64,
    /// Timestamps capped to the horizon.
    pub horizon_caps: u64,
    /// Packets that took the fast path (the internal queue).
    pub fastpath_packets: u64,
    /// Packets dropped by the per-band `limit`, per band.
    pub band_drops: [u64; FQ_BANDS],
    /// Packets queued now, per band (internal-queue packets are in no band).
    pub band_pkt_count: [u32; FQ_BANDS],
}

/// The FQ lines of `tc -s qdisc show`, each starting with a newline:
/// `  flows 3 (inactive 1 throttled 0) band0_pkts 0 band1_pkts 2 band2_pkts 0` and
/// `  gc 0 highprio 0 throttled 0`, then optional counters as iproute2 prints them.
impl fmt::Display for FqStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "\n  flows {} (inactive {} throttled {})",
            self.flows, self.inactive_flows, self.throttled_flows
        )?;
        for (i, n) in self.band_pkt_count.iter().enumerate() {
            write!(f, " band{i}_pkts {n}")?;
        }
        if self.time_next_delayed_flow > 0 {
            write!(
                f,
                " next_packet_delay {}",
                Time(self.time_next_delayed_flow as u64)
            )?;
        }
        write!(
            f,
            "\n  gc {} highprio {}",
            self.gc_flows, self.highprio_packets
        )?;
        if self.fastpath_packets != 0 {
            write!(f, " fastpath {}", self.fastpath_packets)?;
        }
        if self.tcp_retrans != 0 {
            write!(f, " retrans {}", self.tcp_retrans)?;
        }
        write!(f, " throttled {}", self.throttled)?;
        if self.unthrottle_latency_ns != 0 {
            write!(
                f,
                " latency {}",
                Time(u64::from(self.unthrottle_latency_ns))
            )?;
        }
        if self.ce_mark != 0 {
            write!(f, " ce_mark {}", self.ce_mark)?;
        }
        if self.flows_plimit != 0 {
            write!(f, " flows_plimit {}", self.flows_plimit)?;
        }
        let rare = self.pkts_too_long != 0
            || self.allocation_errors != 0
            || self.horizon_drops != 0
            || self.horizon_caps != 0
            || self.band_drops.iter().any(|&d| d != 0);
        if rare {
            f.write_str("\n")?;
            if self.pkts_too_long != 0 {
                write!(f, " pkts_too_long {}", self.pkts_too_long)?;
            }
            if self.allocation_errors != 0 {
                write!(f, " alloc_errors {}", self.allocation_errors)?;
            }
            if self.horizon_drops != 0 {
                write!(f, " horizon_drops {}", self.horizon_drops)?;
            }
            if self.horizon_caps != 0 {
                write!(f, "  horizon_caps {}", self.horizon_caps)?;
            }
            for (i, d) in self.band_drops.iter().enumerate() {
                if *d != 0 {
                    write!(f, " band{i}_drops {d}")?;
                }
            }
        }
        Ok(())
    }
}

/// The stat counters FQ increments (the `stat_*` fields of `fq_sched_data`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counters {
    pub(super) gc_flows: u64,
    pub(super) throttled: u64,
    pub(super) flows_plimit: u64,
    pub(super) pkts_too_long: u64,
    pub(super) allocation_errors: u64,
    pub(super) ce_mark: u64,
    pub(super) horizon_drops: u64,
    pub(super) horizon_caps: u64,
    pub(super) fastpath_packets: u64,
    pub(super) band_drops: [u64; FQ_BANDS],
}

//! FQ options and their validation (`fq_init` defaults, `fq_change` checks, `fq_policy`).

use core::time::Duration;
use std::sync::Arc;

use super::Fq;
use super::jiffies::{FQ_DEFAULT_HZ, FQ_HZ_CHOICES, usecs_to_jiffies};
use crate::clock::{Clock, MonotonicClock};
use crate::config::ConfigError;
use crate::packet::Packet;
use crate::pfifo::DEFAULT_PSCHED_MTU;
use crate::pfifo_fast::PRIO2BAND;

/// Number of FQ bands (`FQ_BANDS`).
pub const FQ_BANDS: usize = 3;
/// Smallest band weight (`FQ_MIN_WEIGHT`).
pub const FQ_MIN_WEIGHT: u32 = 16384;
/// Default band weights: 9·2^16, 3·2^16, 2^16 bytes per round.
pub const FQ_DEFAULT_WEIGHTS: [u32; FQ_BANDS] = [589_824, 196_608, 65_536];
/// Largest quantum, 1 MiB.
pub const FQ_MAX_QUANTUM: u32 = 1 << 20;

/// The largest `initial_quantum` `fq_change` accepts (`INT_MAX`).
pub const FQ_MAX_INITIAL_QUANTUM: u32 = i32::MAX as u32;

const US: u64 = 1_000;
const MAX_US: u64 = u32::MAX as u64;

/// The options an [`Fq`] runs with, as `tc qdisc show` would report them (read-only here: set
/// by [`FqBuilder`] when the qdisc is built and by [`Fq::change`] while it runs, both validated
/// the same way).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FqConfig {
    /// `limit`: packets per band (default 10000).
    pub limit: u32,
    /// `flow_limit`: packets per flow (default 100).
    pub flow_limit: u32,
    /// `quantum`: bytes a flow may send per round (default 2 × psched_mtu = 3028).
    pub quantum: u32,
    /// `initial_quantum`: credit of a new flow (default 10 × psched_mtu = 15140).
    pub initial_quantum: u32,
    /// `maxrate`: per-flow rate cap in bytes per second (`None`: unlimited).
    pub maxrate: Option<u64>,
    /// `pacing` / `nopacing` (`rate_enable`).
    pub rate_enable: bool,
    /// `buckets` as a log2 (default 10, 1024 buckets): picks a flow's bucket
    /// (`hash_ptr(sk, buckets_log)`), where garbage collection looks, and sizes the table's
    /// initial capacity.
    pub buckets_log: u8,
    /// `refill_delay` in ns as given (default 40 ms; whole µs, the unit `tc` sends).
    pub refill_delay_ns: u64,
    /// `refill_delay` as FQ uses it: `usecs_to_jiffies(refill_delay µs)`, rounded up to whole
    /// jiffies and stored in a `u32` (`q->flow_refill_delay`).
    pub refill_delay_jiffies: u32,
    /// The kernel's `HZ`, the jiffies rate of flow ages, `refill_delay` and the 3 s GC age
    /// (one of 100, 250, 300, 1000; default 1000).
    pub hz: u32,
    /// `orphan_mask` applied to the hash of packets without a socket (default 1023).
    pub orphan_mask: u32,
    /// `low_rate_threshold` in bytes per second (default 68750, 550 kbit/s; a `u32` in the
    /// kernel).
    pub low_rate_threshold: u64,
    /// `ce_threshold` in ns (default `u32::MAX` µs, effectively off).
    pub ce_threshold_ns: u64,
    /// `timer_slack` in ns (default 10 µs).
    pub timer_slack_ns: u64,
    /// `horizon` in ns (default 10 s).
    pub horizon_ns: u64,
    /// `horizon_drop` (true, default) or `horizon_cap` (false).
    pub horizon_drop: bool,
    /// `priomap`: band of each `priority & 15`.
    pub priomap: [u8; 16],
    /// `weights`: bytes of credit each band gets per WRR round.
    pub weights: [u32; FQ_BANDS],
    /// `offload_horizon` in ns (default 0).
    pub offload_horizon_ns: u64,
    /// User-space stand-in for `GFP_ATOMIC` failure: at most this many flows exist; a packet of
    /// a new flow beyond it goes to the internal queue and counts an `allocation_error`. The
    /// flow table holds at most 2^26 − 1 flows whatever this says (slot numbers have 26 bits;
    /// some 11 GB of flow state), with the same outcome past it.
    pub max_flows: usize,
}

/// Builds an [`Fq`], validating every option as `tc` / `fq_change` would. The same builder,
/// taken from a running qdisc with [`Fq::to_builder`], changes it live with [`Fq::change`].
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use qdisc::{FqBuilder, ManualClock, Qdisc, TestPacket};
///
/// let clock = Arc::new(ManualClock::new(0));
/// let fq = FqBuilder::new()
///     .clock(clock.clone())
///     .limit(5000)
///     .maxrate(1_250_000)
///     .horizon(Duration::from_secs(2))
///     .build::<TestPacket>()
///     .unwrap();
/// assert_eq!(fq.config().limit, 5000);
/// assert!(!fq.can_bypass());
///
/// let err = FqBuilder::new().weights([589_824, 196_608, 100]).build::<TestPacket>().unwrap_err();
/// assert_eq!(err.option(), "weights");
/// ```
#[derive(Debug, Clone)]
pub struct FqBuilder {
    clock: Option<Arc<dyn Clock>>,
    psched_mtu: u32,
    limit: u32,
    flow_limit: u32,
    quantum: Option<u32>,
    initial_quantum: Option<u32>,
    maxrate: Option<u64>,
    rate_enable: u32,
    buckets_log: u32,
    refill_delay: Duration,
    orphan_mask: u32,
    low_rate_threshold: u64,
    ce_threshold: Option<Duration>,
    timer_slack_ns: u64,
    horizon: Duration,
    horizon_drop: bool,
    priomap: [u8; 16],
    weights: [u32; FQ_BANDS],
    offload_horizon: Duration,
    max_offload_horizon: Duration,
    max_flows: usize,
    hz: u32,
}

impl Default for FqBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl FqBuilder {
    /// The kernel's defaults (`fq_init`) and the process monotonic clock.
    pub fn new() -> Self {
        FqBuilder {
            clock: None,
            psched_mtu: DEFAULT_PSCHED_MTU,
            limit: 10_000,
            flow_limit: 100,
            quantum: None,
            initial_quantum: None,
            maxrate: None,
            rate_enable: 1,
            buckets_log: 10,
            refill_delay: Duration::from_millis(40),
            orphan_mask: 1023,
            low_rate_threshold: 550_000 / 8,
            ce_threshold: None,
            timer_slack_ns: 10 * US,
            horizon: Duration::from_secs(10),
            horizon_drop: true,
            priomap: PRIO2BAND,
            weights: FQ_DEFAULT_WEIGHTS,
            offload_horizon: Duration::ZERO,
            max_offload_horizon: Duration::ZERO,
            max_flows: usize::MAX,
            hz: FQ_DEFAULT_HZ,
        }
    }

    /// The clock FQ reads (default [`MonotonicClock`]); tests pass an `Arc<ManualClock>`.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The device's `psched_mtu`, from which the default quanta derive (default 1514).
    pub fn psched_mtu(mut self, mtu: u32) -> Self {
        self.psched_mtu = mtu;
        self
    }

    /// `limit`: packets per band.
    pub fn limit(mut self, packets: u32) -> Self {
        self.limit = packets;
        self
    }

    /// `flow_limit`: packets per flow.
    pub fn flow_limit(mut self, packets: u32) -> Self {
        self.flow_limit = packets;
        self
    }

    /// `quantum` in bytes, 1..=1 MiB, kept as given (`fq_change`; it is fq_codel and fq_pie,
    /// not fq, that raise small quanta to 256).
    pub fn quantum(mut self, bytes: u32) -> Self {
        self.quantum = Some(bytes);
        self
    }

    /// `initial_quantum` in bytes, 0..=`i32::MAX` (`fq_policy`'s `NLA_POLICY_MAX(NLA_U32,
    /// INT_MAX)`).
    pub fn initial_quantum(mut self, bytes: u32) -> Self {
        self.initial_quantum = Some(bytes);
        self
    }

    /// `maxrate` in bytes per second (per flow). The kernel's attribute is a u32 whose `~0`
    /// (4294967295) means unlimited (`fq_change`: `rate == ~0U ? ~0UL : rate`), the way to lift
    /// a cap with [`Fq::change`]; so it is here, and `u64::MAX` too. Rates above 4294967295
    /// (34 Gbit/s) are this port's extension: the kernel cannot be given one.
    pub fn maxrate(mut self, bytes_per_sec: u64) -> Self {
        self.maxrate = Some(bytes_per_sec);
        self
    }

    /// `pacing` (true, default) or `nopacing`.
    pub fn pacing(mut self, on: bool) -> Self {
        self.rate_enable = u32::from(on);
        self
    }

    /// The raw `TCA_FQ_RATE_ENABLE` value: 0 or 1.
    pub fn rate_enable(mut self, value: u32) -> Self {
        self.rate_enable = value;
        self
    }

    /// `buckets`: a power of two, 2..=262144.
    pub fn buckets(mut self, n: u32) -> Self {
        self.buckets_log = if n.is_power_of_two() {
            n.trailing_zeros()
        } else {
            u32::MAX
        };
        self
    }

    /// `buckets` as its log2, 1..=18 (`TCA_FQ_BUCKETS_LOG`).
    pub fn buckets_log(mut self, log: u32) -> Self {
        self.buckets_log = log;
        self
    }

    /// `refill_delay`, up to `u32::MAX` µs (whole µs, as `tc` sends it; FQ waits for it in
    /// jiffies, rounded up: see [`hz`](FqBuilder::hz)).
    pub fn refill_delay(mut self, d: Duration) -> Self {
        self.refill_delay = d;
        self
    }

    /// `orphan_mask`.
    pub fn orphan_mask(mut self, mask: u32) -> Self {
        self.orphan_mask = mask;
        self
    }

    /// `low_rate_threshold` in bytes per second, up to `u32::MAX`.
    pub fn low_rate_threshold(mut self, bytes_per_sec: u64) -> Self {
        self.low_rate_threshold = bytes_per_sec;
        self
    }

    /// `ce_threshold`, up to `u32::MAX` µs (whole µs, as `tc` sends it).
    pub fn ce_threshold(mut self, d: Duration) -> Self {
        self.ce_threshold = Some(d);
        self
    }

    /// `timer_slack` in ns, up to `u32::MAX`.
    pub fn timer_slack_ns(mut self, ns: u64) -> Self {
        self.timer_slack_ns = ns;
        self
    }

    /// `horizon`, up to `u32::MAX` µs (whole µs, as `tc` sends it).
    pub fn horizon(mut self, d: Duration) -> Self {
        self.horizon = d;
        self
    }

    /// `horizon_drop` (true, default) or `horizon_cap` (false).
    pub fn horizon_drop(mut self, drop: bool) -> Self {
        self.horizon_drop = drop;
        self
    }

    /// `priomap`: the band (0..3) of each priority 0..16.
    pub fn priomap(mut self, map: [u8; 16]) -> Self {
        self.priomap = map;
        self
    }

    /// `weights` of bands 0, 1, 2: each 16384..=`i32::MAX`.
    pub fn weights(mut self, w: [u32; FQ_BANDS]) -> Self {
        self.weights = w;
        self
    }

    /// `offload_horizon`: at most the device's [`max_pacing_offload_horizon`] (default 0).
    ///
    /// [`max_pacing_offload_horizon`]: FqBuilder::max_pacing_offload_horizon
    pub fn offload_horizon(mut self, d: Duration) -> Self {
        self.offload_horizon = d;
        self
    }

    /// The device's `max_pacing_offload_horizon` (default 0: no pacing offload).
    pub fn max_pacing_offload_horizon(mut self, d: Duration) -> Self {
        self.max_offload_horizon = d;
        self
    }

    /// The kernel's `HZ` to model (100, 250, 300 or 1000; default 1000): flow ages,
    /// `refill_delay` and the GC age are kept in jiffies of `1/HZ` s, as `sch_fq.c` keeps them.
    /// A property of the kernel, not of the qdisc: [`Fq::change`] keeps the one the qdisc was
    /// built with.
    pub fn hz(mut self, hz: u32) -> Self {
        self.hz = hz;
        self
    }

    /// Most flows that may exist at once (default: no limit but the table's 2^26 − 1); see
    /// [`FqConfig::max_flows`].
    pub fn max_flows(mut self, n: usize) -> Self {
        self.max_flows = n;
        self
    }

    /// Validates the options and builds the qdisc.
    pub fn build<P: Packet>(self) -> Result<Fq<P>, ConfigError> {
        let cfg = self.validate()?;
        let clock = self.clock.unwrap_or_else(|| Arc::new(MonotonicClock));
        let mut q = Fq::from_config(cfg, clock);
        q.psched_mtu = self.psched_mtu;
        q.max_offload_horizon = self.max_offload_horizon;
        Ok(q)
    }

    /// A builder holding `cfg`'s options: validating it gives `cfg` back (for [`Fq::to_builder`]).
    /// The device properties (`psched_mtu`, `max_pacing_offload_horizon`) and the clock keep
    /// their defaults; the caller sets them.
    pub(super) fn from_config(cfg: &FqConfig) -> Self {
        let off = u64::from(u32::MAX) * US;
        FqBuilder {
            limit: cfg.limit,
            flow_limit: cfg.flow_limit,
            quantum: Some(cfg.quantum),
            initial_quantum: Some(cfg.initial_quantum),
            maxrate: cfg.maxrate,
            rate_enable: u32::from(cfg.rate_enable),
            buckets_log: u32::from(cfg.buckets_log),
            refill_delay: Duration::from_nanos(cfg.refill_delay_ns),
            orphan_mask: cfg.orphan_mask,
            low_rate_threshold: cfg.low_rate_threshold,
            ce_threshold: (cfg.ce_threshold_ns != off)
                .then(|| Duration::from_nanos(cfg.ce_threshold_ns)),
            timer_slack_ns: cfg.timer_slack_ns,
            horizon: Duration::from_nanos(cfg.horizon_ns),
            horizon_drop: cfg.horizon_drop,
            priomap: cfg.priomap,
            weights: cfg.weights,
            offload_horizon: Duration::from_nanos(cfg.offload_horizon_ns),
            max_flows: cfg.max_flows,
            hz: cfg.hz,
            ..FqBuilder::new()
        }
    }

    /// Checks every option as `fq_change` does and computes the options to run with; the first
    /// bad option is the error. Used by [`build`](FqBuilder::build) and [`Fq::change`].
    pub(super) fn validate(&self) -> Result<FqConfig, ConfigError> {
        let err = |opt, v: &dyn core::fmt::Display, acc: &str| ConfigError::new("fq", opt, v, acc);
        if self.psched_mtu == 0 {
            return Err(err("psched_mtu", &0, "1..=4294967295 (bytes)"));
        }
        let mtu = self.psched_mtu.min(FQ_MAX_QUANTUM);
        let quantum = match self.quantum {
            Some(q) if q == 0 || q > FQ_MAX_QUANTUM => {
                return Err(err("quantum", &q, "1..=1048576 (bytes)"));
            }
            Some(q) => q,
            // `fq_init`'s 2 x psched_mtu; only an MTU over 512 KiB would pass the bound that an
            // explicit quantum must meet, and `to_builder` must give back a valid builder.
            None => (2 * mtu).min(FQ_MAX_QUANTUM),
        };
        let initial_quantum = match self.initial_quantum {
            Some(q) if q > FQ_MAX_INITIAL_QUANTUM => {
                return Err(err("initial_quantum", &q, "0..=2147483647 (bytes)"));
            }
            Some(q) => q,
            None => 10 * mtu,
        };
        if self.rate_enable > 1 {
            return Err(err("rate_enable", &self.rate_enable, "0 or 1"));
        }
        if !(1..=18).contains(&self.buckets_log) {
            let shown = if self.buckets_log == u32::MAX {
                "a non-power of two".to_string()
            } else {
                format!("log {}", self.buckets_log)
            };
            return Err(err(
                "buckets",
                &shown,
                "a power of two 2..=262144 (log 1..=18)",
            ));
        }
        if !FQ_HZ_CHOICES.contains(&self.hz) {
            return Err(err("hz", &self.hz, "100, 250, 300 or 1000"));
        }
        // fq_change: a u32 attribute, whose ~0U means no cap (stored as ~0UL).
        let maxrate = self
            .maxrate
            .filter(|&r| r != u64::MAX && r != u64::from(u32::MAX));
        if self.low_rate_threshold > u64::from(u32::MAX) {
            return Err(err(
                "low_rate_threshold",
                &self.low_rate_threshold,
                "0..=4294967295 (bytes per second)",
            ));
        }
        let us = |opt, d: Duration| -> Result<u64, ConfigError> {
            let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            if ns / US > MAX_US {
                Err(err(opt, &format!("{d:?}"), "0..=4294967295 us"))
            } else {
                // The attribute is a u32 of µs: `(u64)NSEC_PER_USEC * nla_get_u32(...)`.
                Ok(ns / US * US)
            }
        };
        let refill_delay_ns = us("refill_delay", self.refill_delay)?;
        // fq_change: q->flow_refill_delay = usecs_to_jiffies(usecs_delay), into a u32.
        let refill_delay_jiffies = usecs_to_jiffies((refill_delay_ns / US) as u32, self.hz) as u32;
        let ce_threshold_ns = match self.ce_threshold {
            Some(d) => us("ce_threshold", d)?,
            None => MAX_US * US,
        };
        let horizon_ns = us("horizon", self.horizon)?;
        if self.timer_slack_ns > u64::from(u32::MAX) {
            return Err(err(
                "timer_slack",
                &self.timer_slack_ns,
                "0..=4294967295 (ns)",
            ));
        }
        for (i, &b) in self.priomap.iter().enumerate() {
            if usize::from(b) >= FQ_BANDS {
                return Err(err("priomap", &format!("[{i}] = {b}"), "bands 0..=2"));
            }
        }
        for (i, &w) in self.weights.iter().enumerate() {
            if !(FQ_MIN_WEIGHT..=i32::MAX as u32).contains(&w) {
                return Err(err(
                    "weights",
                    &format!("[{i}] = {w}"),
                    "16384..=2147483647",
                ));
            }
        }
        let offload_horizon_ns = us("offload_horizon", self.offload_horizon)?;
        // fq_change: offload_horizon <= qdisc_dev(sch)->max_pacing_offload_horizon, in ns.
        if u128::from(offload_horizon_ns) > self.max_offload_horizon.as_nanos() {
            return Err(err(
                "offload_horizon",
                &format!("{:?}", self.offload_horizon),
                &format!(
                    "0..={:?} (the device's max_pacing_offload_horizon)",
                    self.max_offload_horizon
                ),
            ));
        }
        Ok(FqConfig {
            limit: self.limit,
            flow_limit: self.flow_limit,
            quantum,
            initial_quantum,
            maxrate,
            rate_enable: self.rate_enable == 1,
            buckets_log: self.buckets_log as u8,
            refill_delay_ns,
            refill_delay_jiffies,
            hz: self.hz,
            orphan_mask: self.orphan_mask,
            low_rate_threshold: self.low_rate_threshold,
            ce_threshold_ns,
            timer_slack_ns: self.timer_slack_ns,
            horizon_ns,
            horizon_drop: self.horizon_drop,
            priomap: self.priomap,
            weights: self.weights,
            offload_horizon_ns,
            max_flows: self.max_flows,
        })
    }
}

impl<P: Packet> Fq<P> {
    /// A builder with the kernel's defaults.
    pub fn builder() -> FqBuilder {
        FqBuilder::new()
    }
}

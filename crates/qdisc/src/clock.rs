//! Monotonic time for the qdiscs that read it (FQ's `ktime_get_ns()`): the [`Clock`] trait, the
//! real [`MonotonicClock`] and the [`ManualClock`] that tests advance by hand.
//!
//! Time is injected so that pacing, horizons and garbage collection are tested exactly and
//! without sleeping: a test shares one `Arc<ManualClock>` between itself and the qdisc.

use core::fmt;
// A plain atomic: the manual clock is test scaffolding, never part of a loom model.
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// A source of monotonic time in nanoseconds (never goes backwards).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, in nanoseconds since an arbitrary fixed origin.
    fn now_ns(&self) -> u64;
}

/// The process's monotonic clock (`CLOCK_MONOTONIC` through [`Instant`]), in nanoseconds since
/// the first time any `MonotonicClock` was read in this process, so every instance agrees.
///
/// ```
/// use qdisc::{Clock, MonotonicClock};
///
/// let c = MonotonicClock;
/// let a = c.now_ns();
/// assert!(c.now_ns() >= a);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that only moves when told to; share it through an `Arc` with the qdisc under test.
///
/// ```
/// use std::sync::Arc;
/// use qdisc::{Clock, ManualClock};
///
/// let clock = Arc::new(ManualClock::new(1_000));
/// clock.advance(500);
/// assert_eq!(clock.now_ns(), 1_500);
/// clock.set(100); // never backwards
/// assert_eq!(clock.now_ns(), 1_500);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock reading `start_ns`.
    pub const fn new(start_ns: u64) -> Self {
        ManualClock {
            now: AtomicU64::new(start_ns),
        }
    }

    /// Moves the clock forward by `ns` (saturating).
    pub fn advance(&self, ns: u64) {
        let _ = self
            .now
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(ns))
            });
    }

    /// Moves the clock to `ns` if that is later than now (a monotonic clock never goes back).
    pub fn set(&self, ns: u64) {
        self.now.fetch_max(ns, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }
}

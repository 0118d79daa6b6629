//! The engine's knobs: [`TxQueueBuilder`] with the kernel's values as defaults
//! ([`DEFAULT_QUOTA`], [`DEFAULT_SELF_SEND_BURST`]), the locking [`Strategy`] and what a
//! producer does past the burst limit ([`Overflow`]). Must not: build the queue (that is
//! `queue.rs`'s `build`) or hold any runtime state.

use core::fmt;

use crate::config::ConfigError;

/// How producers get packets to the qdisc: the three locking strategies, interchangeable on
/// the same engine so benchmarks compare them on the same work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// The pre-2025 kernel: a caller that finds the qdisc running first takes the busylock, then
    /// the root lock, and enqueues one packet at a time.
    BusyLock,
    /// Linux 6.19's llist adoption: push with one CAS under the counted burst limit; the first
    /// pusher takes the root lock and drains the whole batch.
    DeferList,
    /// A lockless qdisc (`TCQ_F_NOLOCK`): enqueue under the qdisc's own short lock, run under a
    /// try-lock with the MISSED / DRAINING handshake.
    NoLock,
    /// The NoLock run protocol *without* MISSED (the 2021 "packet stuck" bug), kept only so the
    /// loom model can show that it strands a packet.
    #[doc(hidden)]
    NoLockNaive,
}

impl Strategy {
    /// The name used on the command line and in JSON (`busylock`, `defer`, `nolock`).
    pub fn name(self) -> &'static str {
        match self {
            Strategy::BusyLock => "busylock",
            Strategy::DeferList => "defer",
            Strategy::NoLock => "nolock",
            Strategy::NoLockNaive => "nolock-naive",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a producer does when the defer list is over its burst limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Overflow {
    /// The kernel's answer: drop the arriving packet (`QDISC_BURST_DROP`), counted.
    Drop,
    /// Help drain if the root lock is free, else park until a drain makes room; never drops.
    Wait,
}

/// The kernel's `dev_tx_weight`: packets a runner sends before it reschedules.
pub const DEFAULT_QUOTA: usize = 64;

/// [`TxQueueBuilder::self_send_burst`]'s default.
pub const DEFAULT_SELF_SEND_BURST: usize = 16;

/// Builds a [`TxQueue`](crate::TxQueue).
///
/// ```
/// use qdisc::{NullDriver, Pfifo, Strategy, TestPacket, TxQueue};
///
/// let txq = TxQueue::builder()
///     .strategy(Strategy::DeferList)
///     .burst_limit(1000)
///     .build(Pfifo::<TestPacket>::new(), NullDriver::new())
///     .unwrap();
/// txq.xmit(TestPacket::new(1, 64));
/// assert_eq!(txq.stats().sent, 1);
/// ```
#[derive(Debug, Clone)]
pub struct TxQueueBuilder {
    pub(crate) strategy: Strategy,
    pub(crate) burst_limit: usize,
    pub(crate) quota: usize,
    pub(crate) bulk: usize,
    pub(crate) overflow: Overflow,
    pub(crate) help_threshold: Option<usize>,
    pub(crate) helping: bool,
    pub(crate) early_bypass: bool,
    pub(crate) runner_absorbs: bool,
    pub(crate) batch_bypass: bool,
    pub(crate) qdisc_batch: bool,
    pub(crate) drain_hints: bool,
    pub(crate) self_send_burst: usize,
    pub(crate) latency_histogram: bool,
    pub(crate) biased_root: bool,
}

impl Default for TxQueueBuilder {
    fn default() -> Self {
        TxQueueBuilder {
            strategy: Strategy::DeferList,
            burst_limit: llist_defer::DEFAULT_BURST_LIMIT,
            quota: DEFAULT_QUOTA,
            bulk: DEFAULT_QUOTA,
            overflow: Overflow::Drop,
            help_threshold: None,
            helping: true,
            early_bypass: true,
            runner_absorbs: true,
            batch_bypass: true,
            qdisc_batch: true,
            drain_hints: true,
            self_send_burst: DEFAULT_SELF_SEND_BURST,
            latency_histogram: false,
            biased_root: true,
        }
    }
}

impl TxQueueBuilder {
    /// The locking strategy (default [`Strategy::DeferList`]).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// The defer list's burst limit (default 1000, `net.core.qdisc_max_burst`), at most
    /// [`llist_defer::MAX_BURST_LIMIT`] (65 535).
    pub fn burst_limit(mut self, limit: usize) -> Self {
        self.burst_limit = limit;
        self
    }

    /// Packets a runner sends before rescheduling (default 64, `dev_tx_weight`).
    pub fn quota(mut self, quota: usize) -> Self {
        self.quota = quota;
        self
    }

    /// Most packets handed to the driver per call (default 64).
    pub fn bulk(mut self, bulk: usize) -> Self {
        self.bulk = bulk;
        self
    }

    /// What to do over the burst limit (default [`Overflow::Drop`], the kernel's).
    pub fn overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }

    /// A pusher whose push raised the burst count to at least this tries the root lock and
    /// drains, covering for a descheduled first pusher (default: half the burst limit; never
    /// after [`kernel_exact`](Self::kernel_exact)).
    pub fn help_threshold(mut self, threshold: usize) -> Self {
        self.help_threshold = Some(threshold);
        self
    }

    /// DeferList only: before pushing, if the list is empty and the root lock is free, send
    /// directly (default on). Off gives the kernel's exact protocol.
    pub fn early_bypass(mut self, on: bool) -> Self {
        self.early_bypass = on;
        self
    }

    /// DeferList only: the runner holds the root lock while it sends and takes the defer list
    /// itself between batches, and a first pusher that finds a runner at work leaves it its
    /// batch instead of waiting for the root lock (default on). Off gives the kernel's exact
    /// protocol: every first pusher takes the root lock, the runner drops it around each send.
    pub fn runner_absorbs(mut self, on: bool) -> Self {
        self.runner_absorbs = on;
        self
    }

    /// DeferList only: a drained batch of several packets that finds the qdisc empty skips it
    /// when the qdisc says that enqueueing the batch and dequeueing it again would give the
    /// same packets in the same order ([`Qdisc::can_bypass_batch`](crate::Qdisc), true for an
    /// empty pfifo or bfifo the batch fits in). The runner then sends it in `bulk`-sized
    /// driver calls, counted as bypassed, saving an enqueue and a dequeue per packet (default
    /// on). Off gives the kernel's rule: only a batch of one bypasses.
    pub fn batch_bypass(mut self, on: bool) -> Self {
        self.batch_bypass = on;
        self
    }

    /// The runner hands each drained batch to the qdisc whole
    /// ([`Qdisc::enqueue_batch`](crate::Qdisc::enqueue_batch), exact per-packet semantics) and
    /// takes packets for the driver in one [`Qdisc::dequeue_batch`](crate::Qdisc::dequeue_batch)
    /// call (default on). Off: one `enqueue` and one `dequeue` per packet, as the kernel does,
    /// kept for the A/B comparison. Every strategy; the poll and [`TxWorker`](crate::TxWorker)
    /// paths run the same drain.
    pub fn qdisc_batch(mut self, on: bool) -> Self {
        self.qdisc_batch = on;
        self
    }

    /// DeferList only: each push records a drain hint, so that the runner loads two pushed
    /// packets at a time instead of one after the other
    /// ([`DeferList::with_drain_hints`](llist_defer::DeferList::with_drain_hints); default on).
    /// Only packet types that vouch for it give hints (`Skb` does, within one pool). No
    /// result changes; off is kept for the A/B comparison.
    pub fn drain_hints(mut self, on: bool) -> Self {
        self.drain_hints = on;
        self
    }

    /// DeferList only: [`TxQueue::xmit_bulk`](crate::TxQueue::xmit_bulk) with a burst of at
    /// least `min` packets that cannot bypass at once waits for the root lock and sends the
    /// burst itself (after whatever the defer list holds, and through the qdisc if it is not
    /// empty), as a `Mutex<VecDeque>` user sends its own burst, instead of pushing it onto the
    /// defer list for the runner on another core. The packets are then read by the core that
    /// wrote them and their frames freed where they were allocated. Shorter bursts and
    /// [`xmit`](crate::TxQueue::xmit) push as before. Default 16; `usize::MAX`: never.
    pub fn self_send_burst(mut self, min: usize) -> Self {
        self.self_send_burst = min;
        self
    }

    /// The kernel's exact DeferList protocol: only the first pusher takes the defer list (no
    /// helping drains past [`help_threshold`](Self::help_threshold)), no early bypass, no runner
    /// absorbing, only a batch of one bypasses the qdisc, every burst goes through the defer
    /// list, and the root lock is never lent (the kernel's is a spinlock).
    pub fn kernel_exact(mut self) -> Self {
        self.helping = false;
        self.biased_root(false)
            .early_bypass(false)
            .runner_absorbs(false)
            .batch_bypass(false)
            .self_send_burst(usize::MAX)
    }

    /// Lend the root lock to a thread that takes it alone, again and again (default on). After
    /// 64 acquisitions in a row by one thread with nobody else taking the lock in between, that
    /// thread enters with a few loads and two stores to lines nobody else writes, instead of a
    /// compare-and-swap and a swap: the cost of the lock at one producer, where the defer
    /// list's bypass takes it once a packet. Another thread that wants the lock takes it back
    /// with one `membarrier` call (a few microseconds; each revocation doubles the run the next
    /// grant needs, up to 65 536). Needs Linux's `membarrier` (4.14); without it the lock is a
    /// plain mutex. Counted in
    /// [`XmitStats::root_bias_grants`](crate::XmitStats::root_bias_grants) and
    /// [`root_bias_revokes`](crate::XmitStats::root_bias_revokes). Packets, their order and
    /// their counters are the same either way; while the lock is lent, another thread's
    /// `xmit` does not try the early bypass or a helping drain (a try does not take a loan
    /// back) and pushes onto the defer list, and its first push takes the lock back, counted
    /// in [`root_contended`](crate::XmitStats::root_contended). A qdisc or driver that calls
    /// back into its own queue panics, where the plain mutex deadlocks.
    pub fn biased_root(mut self, on: bool) -> Self {
        self.biased_root = on;
        self
    }

    /// Keep a log2 histogram of `xmit` call latency (default off). One call in
    /// [`LATENCY_SAMPLE_EVERY`](crate::LATENCY_SAMPLE_EVERY) per thread is timed, with two clock
    /// reads.
    pub fn latency_histogram(mut self, on: bool) -> Self {
        self.latency_histogram = on;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.burst_limit == 0 || self.burst_limit > llist_defer::MAX_BURST_LIMIT {
            return Err(ConfigError::new(
                "txqueue",
                "burst_limit",
                self.burst_limit as u64,
                "1..=65535 (kernel default 1000)",
            ));
        }
        if self.quota == 0 {
            return Err(ConfigError::new(
                "txqueue",
                "quota",
                0,
                "1.. (kernel default 64)",
            ));
        }
        if self.bulk == 0 {
            return Err(ConfigError::new("txqueue", "bulk", 0, "1.. (default 64)"));
        }
        if let Some(t) = self.help_threshold {
            if t == 0 || t > self.burst_limit {
                return Err(ConfigError::new(
                    "txqueue",
                    "help_threshold",
                    t,
                    format!("1..={} (the burst limit)", self.burst_limit),
                ));
            }
        }
        Ok(())
    }

    /// The burst count from which a pusher helps drain; past any count a push can reach when
    /// helping is off.
    pub(crate) fn help_at(&self) -> usize {
        if !self.helping {
            return usize::MAX;
        }
        self.help_threshold.unwrap_or((self.burst_limit / 2).max(1))
    }
}

#[cfg(all(test, not(lockless_loom)))]
mod tests {
    use super::TxQueueBuilder;

    /// In the kernel only the first pusher takes the defer list: `kernel_exact` leaves no
    /// burst count at which a later pusher helps, whatever the limit.
    #[test]
    fn kernel_exact_turns_helping_drains_off() {
        let ours = TxQueueBuilder::default().burst_limit(64);
        assert_eq!(ours.help_at(), 32);
        assert_eq!(ours.clone().help_threshold(5).help_at(), 5);
        assert_eq!(ours.kernel_exact().help_at(), usize::MAX);
    }
}

//! The transmit workload shared by the `xmit` criterion bench and the `pktgen` example: P
//! producer threads allocate pool frames, write a packet and transmit it through one target,
//! which is our engine (a [`TxQueue`](qdisc::TxQueue) in front of any driver) or a peer a Rust user would pick
//! instead.
//!
//! Producers allocate from one frame pool, so in-flight packets are bounded by it: a producer
//! with no frame left flushes its pending frees and waits (backpressure), as a real dataplane
//! does. Every packet ends sent, dropped with a reason, or still queued; a [`Cell`](crate::harness::Cell) counts all
//! three so callers can check the conservation law.
//!
//! Its files: `workload.rs`, what a run is asked to do; `cell.rs`, what it measured;
//! `targets.rs`, each contender's transmit path; `drive.rs`, the producers and the run's
//! clock. This one builds the pool and the contender a workload names, and runs it ([`run`](crate::harness::run)).

mod cell;
mod drive;
mod targets;
mod workload;

pub use cell::{Cell, Tick, median, process_cpu_time};
pub use drive::drive;
pub use targets::Target;
pub use workload::{Contender, DriverFactory, PacketWriter, PoolKind, QdiscKind, Workload};

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_queue::SegQueue;
use llist_defer::Fifo;
use qdisc::{Driver, NullDriver, Pfifo, Qdisc, Strategy, TxQueue};
use skb_pool::{Pool, Skb};

use targets::{MutexInner, MutexPeer, OwnQueueBound, SegQueuePeer, spawn_tx_thread};

/// The frame pool a workload allocates from: `frames` frames of 2048 bytes.
///
/// # Errors
///
/// The pool's [`skb_pool::BuildError`] (for instance, no memory for the mapping).
pub fn build_pool(w: &Workload) -> Result<Pool, skb_pool::BuildError> {
    Pool::builder()
        .frame_count(w.frames.max(64))
        .frame_size(2048)
        .remote_batch(16)
        .defer_max(512)
        .max_owners(w.producers + 2)
        .refill_order(w.refill_order)
        .build()
}

/// [`run`] for our engine over qdisc `Q` and driver `D`.
fn run_engine<Q: Qdisc<Skb> + 'static, D: Driver<Skb> + 'static>(
    w: &Workload,
    strategy: Strategy,
    pool: &Pool,
    qdisc: Q,
    driver: D,
    on_tick: &mut dyn FnMut(&Tick),
) -> Cell {
    let txq = Arc::new(
        TxQueue::builder()
            .strategy(strategy)
            .burst_limit(w.burst_limit)
            .overflow(w.overflow)
            .latency_histogram(w.latency_histogram)
            .qdisc_batch(w.qdisc_batch)
            .self_send_burst(w.self_send_burst)
            .drain_hints(w.drain_hints)
            .biased_root(w.biased_root)
            .build(qdisc, driver)
            .expect("valid engine settings"),
    );
    let mut cell = drive(w, pool, txq.clone(), on_tick, &|| {
        while txq.poll() {}
    });
    let stats = txq.stats();
    let merged = txq.qdisc_stats();
    cell.queued = txq.backlog() as u64;
    cell.qdisc_show = Some(txq.with_qdisc(|q| ShowQdisc(&*q, merged).to_string()));
    cell.xmit = Some(stats);
    cell.with_pool_stats(pool)
}

/// Runs one workload, calling `on_tick` about once a second, and returns what it measured.
///
/// # Panics
///
/// If the pool or the queue cannot be built from the workload's settings (callers validate
/// user input before).
pub fn run(w: &Workload, on_tick: &mut dyn FnMut(&Tick)) -> Cell {
    let pool = build_pool(w).expect("building the frame pool");
    match w.contender {
        Contender::Engine(strategy) => match (&w.driver, w.qdisc) {
            // The headline configuration with concrete types, as the peers have them: no
            // virtual call per packet into the qdisc or the driver.
            (None, QdiscKind::Pfifo) => run_engine(
                w,
                strategy,
                &pool,
                Pfifo::new(),
                NullDriver::with_cost_ns(w.driver_ns),
                on_tick,
            ),
            (driver, kind) => {
                let driver = match driver {
                    Some(make) => make(),
                    None => Box::new(NullDriver::with_cost_ns(w.driver_ns)) as Box<dyn Driver<Skb>>,
                };
                run_engine(w, strategy, &pool, kind.build(), driver, on_tick)
            }
        },
        Contender::Mutex => {
            let peer = Arc::new(MutexPeer {
                inner: Mutex::new(MutexInner {
                    queue: VecDeque::with_capacity(w.frames),
                    driver: NullDriver::with_cost_ns(w.driver_ns),
                    batch: Fifo::new(),
                }),
            });
            let mut cell = drive(w, &pool, peer.clone(), on_tick, &|| {});
            cell.queued = peer.inner.lock().map(|g| g.queue.len() as u64).unwrap_or(0);
            cell.with_pool_stats(&pool)
        }
        Contender::OwnQueue => {
            let bound = Arc::new(OwnQueueBound::new(w.producers, w.driver_ns));
            drive(w, &pool, bound, on_tick, &|| {}).with_pool_stats(&pool)
        }
        Contender::SegQueue => {
            let peer = Arc::new(SegQueuePeer {
                queue: SegQueue::new(),
                sent: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
            });
            let done = Arc::new(AtomicBool::new(false));
            let tx = std::sync::Mutex::new(Some(spawn_tx_thread(&peer, &done, &pool, w.driver_ns)));
            // The TX thread drains what is queued and is joined inside the timed region, as
            // the engine's cells drain their queue (`while txq.poll()`) before the clock
            // stops: its packets count in the rate and its time in the CPU per packet.
            let mut cell = drive(w, &pool, peer.clone(), on_tick, &|| {
                done.store(true, Ordering::Release);
                if let Some(tx) = tx.lock().map(|mut g| g.take()).unwrap_or(None) {
                    tx.join().expect("TX thread");
                }
            });
            cell.queued = peer.queue.len() as u64;
            cell.with_pool_stats(&pool)
        }
    }
}

/// `tc -s qdisc show`-shaped text for a boxed qdisc plus the engine-merged counters.
struct ShowQdisc<'a>(&'a dyn Qdisc<Skb>, qdisc::QdiscStats);

impl fmt::Display for ShowQdisc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "qdisc {} 0: root refcnt 2", self.0.kind())?;
        write!(f, "{}", self.1)?;
        self.0.fmt_xstats(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skb_pool::RefillOrder;

    /// Producers without handles (`PoolKind::PerCpu`), more of them than cores and more
    /// packets than frames, through the engine, both peers and the bound, with refills in
    /// either order: every packet offered is sent, dropped or queued, every frame comes home,
    /// and the frames came from per-CPU caches.
    #[test]
    fn per_cpu_producers_conserve_packets_and_frames() {
        let contenders = [
            Contender::Engine(Strategy::DeferList),
            Contender::Mutex,
            Contender::SegQueue,
            Contender::OwnQueue,
        ];
        for (contender, refill_order) in contenders
            .into_iter()
            .map(|c| (c, RefillOrder::Freed))
            .chain([(Contender::Engine(Strategy::DeferList), RefillOrder::Address)])
        {
            let w = Workload {
                contender,
                producers: 5,
                packets_per_producer: Some(20_000),
                frames: 256,
                pool: PoolKind::PerCpu,
                refill_order,
                ..Workload::default()
            };
            let cell = run(&w, &mut |_| {});
            let what = format!("{contender:?}, {refill_order:?}");
            assert!(cell.conserved(), "{what}: {cell}");
            assert_eq!(cell.offered, 100_000, "{what}: {cell}");
            let pool = cell.pool.expect("pool stats");
            assert_eq!(pool.outstanding(), 0, "{what}: {pool:?}");
            // Handle-less producers: no handle allocated a frame (with PoolKind::Owner every
            // packet's frame would be counted here).
            assert_eq!(pool.totals.allocs, 0, "{what}: {pool:?}");
            let per_cpu = cell.per_cpu.expect("per-CPU stats");
            assert_eq!(per_cpu.refill_order, refill_order, "{what}");
        }
    }
}

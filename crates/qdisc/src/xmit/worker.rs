//! [`TxWorker`]: the user-space `NET_TX_SOFTIRQ`. A thread parked until a runner hands over the
//! rest of its work (quota used up), then it polls the queue.

use core::fmt;
use std::sync::Arc;

use crate::sync::thread::{self, JoinHandle};
use crate::sync::{AtomicBool, Ordering, Wakeup};

use crate::packet::Packet;
use crate::qdisc::Qdisc;

use super::config::TxQueueBuilder;
use super::driver::Driver;
use super::queue::TxQueue;
use crate::config::ConfigError;

/// A transmit queue with a worker thread that finishes rescheduled work.
///
/// ```
/// use qdisc::{NullDriver, Pfifo, TestPacket, TxQueue, TxWorker};
///
/// let worker = TxWorker::spawn(TxQueue::builder(), Pfifo::<TestPacket>::new(), NullDriver::new())
///     .unwrap();
/// worker.queue().xmit(TestPacket::new(1, 64));
/// let txq = worker.stop(); // runs the queue dry, joins the thread
/// assert_eq!(txq.stats().sent, 1);
/// ```
pub struct TxWorker<P: Packet, Q: Qdisc<P>, D: Driver<P>> {
    txq: Arc<TxQueue<P, Q, D>>,
    stop: Arc<AtomicBool>,
    /// Read by runners before they hand work over: false once the thread is stopping.
    alive: Arc<AtomicBool>,
    /// The thread's sleep, woken by runners that hand work over and by the stop.
    wakeup: Arc<Wakeup>,
    handle: Option<JoinHandle<()>>,
}

impl<P: Packet + 'static, Q: Qdisc<P> + 'static, D: Driver<P> + 'static> TxWorker<P, Q, D> {
    /// Builds the queue with a waker that wakes a new worker thread, and starts the thread.
    ///
    /// # Errors
    ///
    /// The builder's [`ConfigError`].
    pub fn spawn(builder: TxQueueBuilder, qdisc: Q, driver: D) -> Result<Self, ConfigError> {
        let wakeup = Arc::new(Wakeup::default());
        let (waker, sleeper) = (wakeup.clone(), wakeup.clone());
        let alive = Arc::new(AtomicBool::new(true));
        let txq = Arc::new(builder.build_with_worker(
            qdisc,
            driver,
            move || waker.wake(),
            alive.clone(),
        )?);
        let stop = Arc::new(AtomicBool::new(false));
        let (q, s) = (txq.clone(), stop.clone());
        let handle = thread::Builder::new()
            .name("tx-worker".into())
            .spawn(move || {
                while !s.load(Ordering::Acquire) {
                    if q.is_scheduled() {
                        q.poll();
                    } else {
                        sleeper.wait();
                    }
                }
            })
            .expect("spawning the tx worker thread");
        Ok(TxWorker {
            txq,
            stop,
            alive,
            wakeup,
            handle: Some(handle),
        })
    }

    /// The queue, for `xmit` and statistics.
    pub fn queue(&self) -> &Arc<TxQueue<P, Q, D>> {
        &self.txq
    }

    /// Stops the worker, runs the queue dry on the calling thread and returns it. From then
    /// on runners send what is left after their quota themselves. Packets a stopped driver
    /// keeps refusing stay queued ([`TxQueue::wake`] sends them once it has room).
    pub fn stop(mut self) -> Arc<TxQueue<P, Q, D>> {
        self.shutdown();
        self.txq.clone()
    }
}

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> TxWorker<P, Q, D> {
    /// Stops and joins the thread, then runs whatever was handed to it (what a runner gave
    /// over before it saw the worker stopping), as long as that makes progress.
    fn shutdown(&mut self) {
        let Some(h) = self.handle.take() else { return };
        self.alive.store(false, Ordering::Release);
        // Every runner decides to hand over under the root lock: one that takes it after this
        // sees the worker gone, and one that took it before has flagged SCHED and left its
        // work queued, where the runs below find it.
        drop(self.txq.lock_root());
        self.stop.store(true, Ordering::Release);
        self.wakeup.wake();
        let _ = h.join();
        let moved = |q: &TxQueue<P, Q, D>| {
            let s = q.stats();
            s.sent + s.dropped()
        };
        loop {
            let before = moved(&self.txq);
            if !self.txq.poll() || moved(&self.txq) == before {
                break;
            }
        }
    }
}

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> Drop for TxWorker<P, Q, D> {
    /// As [`stop`](TxWorker::stop): the queue (shared with whoever holds it) is run dry first.
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl<P: Packet, Q: Qdisc<P>, D: Driver<P>> fmt::Debug for TxWorker<P, Q, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxWorker").field("txq", &self.txq).finish()
    }
}

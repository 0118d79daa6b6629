//! What producers transmit through (`Target`): our engine, the `Mutex<VecDeque>` and `SegQueue`
//! peers (with the peer's TX thread) and the bound, a queue and a driver per producer.
//!
//! Owns: each contender's transmit path. Must not: allocate frames or time anything
//! (`drive.rs`).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use crossbeam_queue::SegQueue;
use llist_defer::Fifo;
use qdisc::{Driver, NullDriver, Qdisc, ToFree, TxQueue, Verdict};
use skb_pool::{Pool, Skb};

/// Where producers send, and what it has done so far: our engine, a peer, or anything a caller
/// wraps (an AF_XDP device).
pub trait Target: Send + Sync + 'static {
    /// Transmits; `false` if the packet was dropped on the spot.
    fn xmit(&self, skb: Skb) -> bool;
    /// Transmits a burst, leaving `skbs` empty; returns how many were dropped on the spot.
    /// By default one by one through [`xmit`](Target::xmit).
    fn xmit_burst(&self, skbs: &mut Vec<Skb>) -> usize {
        skbs.drain(..).map(|s| usize::from(!self.xmit(s))).sum()
    }
    /// Sent so far (packets, bytes) and dropped so far.
    fn progress(&self) -> (u64, u64, u64);
    /// Called by a producer that found no free frame: a chance to reap completions and kick.
    fn poll(&self) {}
    /// Whether a producer that found no free frame may sleep until one comes back
    /// ([`PoolHandle::alloc_wait`](skb_pool::PoolHandle::alloc_wait), woken by the free):
    /// only if frames come back without that producer's [`poll`](Target::poll), because some
    /// other thread frees them once sent. Otherwise it yields between polls. By default `false`.
    fn may_park(&self) -> bool {
        false
    }
}

impl<Q: Qdisc<Skb> + 'static, D: Driver<Skb> + 'static> Target for TxQueue<Skb, Q, D> {
    #[inline]
    fn xmit(&self, skb: Skb) -> bool {
        !matches!(TxQueue::xmit(self, skb), Verdict::Dropped(_))
    }
    fn xmit_burst(&self, skbs: &mut Vec<Skb>) -> usize {
        self.xmit_bulk(skbs.drain(..)).dropped
    }
    fn progress(&self) -> (u64, u64, u64) {
        let s = self.stats();
        (s.sent, s.sent_bytes, s.dropped())
    }
    /// The runner frees what the driver took (the null and UDP drivers free in `xmit`), so
    /// frames come back while producers sleep. A driver whose completions need a poll belongs
    /// behind a target that says `false` (pktgen's AF_XDP target does).
    fn may_park(&self) -> bool {
        true
    }
}

/// The `Mutex<VecDeque>` peer: push, then drain inline through the driver, under the lock.
pub(super) struct MutexPeer {
    pub(super) inner: Mutex<MutexInner>,
}

pub(super) struct MutexInner {
    pub(super) queue: VecDeque<Skb>,
    pub(super) driver: NullDriver,
    pub(super) batch: Fifo<Skb>,
}

impl Target for MutexPeer {
    fn xmit(&self, skb: Skb) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.queue.push_back(skb);
        let MutexInner {
            queue,
            driver,
            batch,
        } = &mut *g;
        batch.extend(queue.drain(..));
        driver.xmit(batch, &mut ToFree::new());
        true
    }
    /// A burst under one lock: what a `Mutex<VecDeque>` user with a burst in hand would write.
    fn xmit_burst(&self, skbs: &mut Vec<Skb>) -> usize {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let MutexInner {
            queue,
            driver,
            batch,
        } = &mut *g;
        queue.extend(skbs.drain(..));
        batch.extend(queue.drain(..));
        driver.xmit(batch, &mut ToFree::new());
        0
    }
    fn progress(&self) -> (u64, u64, u64) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (g.driver.sent(), g.driver.bytes(), 0)
    }
    fn may_park(&self) -> bool {
        true
    }
}

/// The `SegQueue` peer: producers push, a dedicated TX thread pops and sends.
pub(super) struct SegQueuePeer {
    pub(super) queue: SegQueue<Skb>,
    pub(super) sent: AtomicU64,
    pub(super) bytes: AtomicU64,
}

impl Target for SegQueuePeer {
    fn xmit(&self, skb: Skb) -> bool {
        self.queue.push(skb);
        true
    }
    fn progress(&self) -> (u64, u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
            0,
        )
    }
    fn may_park(&self) -> bool {
        true
    }
}

/// The bound ([`Contender::OwnQueue`](crate::harness::Contender::OwnQueue)): each producer thread sends through a driver of its own,
/// kept in a thread local and created at its first send.
pub(super) struct OwnQueueBound {
    driver_ns: u32,
    /// Packets and bytes sent by each producer's driver, one cache line per producer, written
    /// only by that producer.
    sent: Box<[OwnSent]>,
    next_slot: AtomicUsize,
}

#[repr(align(128))]
pub(super) struct OwnSent([AtomicU64; 2]);

/// One producer thread's driver for the bound, and whose it is.
pub(super) struct OwnDriver {
    /// The address of the [`OwnQueueBound`] it serves (a thread serves one per run).
    target: usize,
    slot: usize,
    driver: NullDriver,
    batch: Fifo<Skb>,
}

thread_local! {
    static OWN_DRIVER: RefCell<Option<OwnDriver>> = const { RefCell::new(None) };
}

impl OwnQueueBound {
    pub(super) fn new(producers: usize, driver_ns: u32) -> Self {
        OwnQueueBound {
            driver_ns,
            sent: (0..producers.max(1))
                .map(|_| OwnSent([AtomicU64::new(0), AtomicU64::new(0)]))
                .collect(),
            next_slot: AtomicUsize::new(0),
        }
    }

    /// Sends what `fill` puts in the batch through this thread's own driver.
    #[inline]
    fn send(&self, fill: impl FnOnce(&mut Fifo<Skb>)) {
        let me = self as *const Self as usize;
        OWN_DRIVER.with_borrow_mut(|own| {
            let d = match own {
                Some(d) if d.target == me => d,
                _ => {
                    let slot = self.next_slot.fetch_add(1, Ordering::Relaxed);
                    assert!(
                        slot < self.sent.len(),
                        "more sending threads than producers"
                    );
                    own.insert(OwnDriver {
                        target: me,
                        slot,
                        driver: NullDriver::with_cost_ns(self.driver_ns),
                        batch: Fifo::new(),
                    })
                }
            };
            fill(&mut d.batch);
            d.driver.xmit(&mut d.batch, &mut ToFree::new());
            let line = &self.sent[d.slot].0;
            line[0].store(d.driver.sent(), Ordering::Relaxed);
            line[1].store(d.driver.bytes(), Ordering::Relaxed);
        });
    }
}

impl Target for OwnQueueBound {
    #[inline]
    fn xmit(&self, skb: Skb) -> bool {
        self.send(|b| b.push_back(skb));
        true
    }
    fn xmit_burst(&self, skbs: &mut Vec<Skb>) -> usize {
        self.send(|b| b.extend(skbs.drain(..)));
        0
    }
    /// Nothing is ever dropped: each driver takes every packet.
    fn progress(&self) -> (u64, u64, u64) {
        let sum = |i: usize| -> u64 {
            self.sent
                .iter()
                .map(|s| s.0[i].load(Ordering::Relaxed))
                .sum()
        };
        (sum(0), sum(1), 0)
    }
    fn may_park(&self) -> bool {
        true
    }
}

pub(super) fn spawn_tx_thread(
    peer: &Arc<SegQueuePeer>,
    done: &Arc<AtomicBool>,
    pool: &Pool,
    driver_ns: u32,
) -> thread::JoinHandle<()> {
    let (peer, done, pool) = (peer.clone(), done.clone(), pool.clone());
    thread::spawn(move || {
        let mut handle = pool.handle().expect("a pool handle for the TX thread");
        let mut driver = NullDriver::with_cost_ns(driver_ns);
        let mut batch = Fifo::new();
        let mut to_free = ToFree::new();
        loop {
            while batch.len() < 64 {
                let Some(skb) = peer.queue.pop() else { break };
                batch.push_back(skb);
            }
            if batch.is_empty() {
                if done.load(Ordering::Acquire) && peer.queue.is_empty() {
                    break;
                }
                handle.flush_frees();
                thread::yield_now();
                continue;
            }
            driver.xmit(&mut batch, &mut to_free);
            peer.sent.store(driver.sent(), Ordering::Relaxed);
            peer.bytes.store(driver.bytes(), Ordering::Relaxed);
        }
        handle.flush_frees();
    })
}

//! The transmit path allocates nothing per packet in steady state (DESIGN: "intrusive,
//! allocation-free hot path"): pool frames, `xmit` and `xmit_bulk` through the defer list, a
//! pfifo deep enough to need its ring grown once, the run loop and the driver, and every frame
//! back home. A counting global allocator watches this thread's allocation calls.

use lockless_xmit::alloc_count::{CountingAlloc, thread_allocs};
use qdisc::{NullDriver, Pfifo, Strategy, TxQueue, Verdict};
use skb_pool::{Pool, PoolHandle, Skb};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const DEPTH: usize = 3000;

type Txq = TxQueue<Skb, Pfifo<Skb>, NullDriver>;

/// One round: `DEPTH` frames queued while the run role is held (so they go through the defer
/// list into the pfifo, not the bypass), half one by one and half in bursts of 50, then sent
/// when the role is let go; then a burst and a packet through the idle queue's bypass.
fn round(q: &Txq, h: &mut PoolHandle, burst: &mut Vec<Skb>) {
    let frame = |h: &mut PoolHandle| {
        let mut skb = h.alloc().expect("the pool holds every frame of a round");
        skb.put_slice(&[0x5a; 64]).expect("fits");
        skb
    };
    q.with_driver(|_| {
        for _ in 0..DEPTH / 2 {
            assert_eq!(q.xmit(frame(h)), Verdict::Success);
        }
        for _ in 0..DEPTH / 2 / 50 {
            burst.extend((0..50).map(|_| frame(h)));
            assert_eq!(q.xmit_bulk(burst.drain(..)).dropped, 0);
        }
    });
    burst.extend((0..50).map(|_| frame(h)));
    assert_eq!(q.xmit_bulk(burst.drain(..)).dropped, 0);
    assert_eq!(q.xmit(frame(h)), Verdict::Success);
    while q.poll() {}
}

#[test]
fn steady_state_transmit_allocates_nothing() {
    for strategy in [Strategy::DeferList, Strategy::BusyLock, Strategy::NoLock] {
        let pool = Pool::builder().frame_count(4096).build().unwrap();
        let mut h = pool.handle().unwrap();
        let q: Txq = TxQueue::builder()
            .strategy(strategy)
            .burst_limit(DEPTH)
            .latency_histogram(true)
            .build(
                Pfifo::<Skb>::builder().limit(DEPTH as u64).build().unwrap(),
                NullDriver::with_cost_ns(0),
            )
            .unwrap();
        let mut burst = Vec::with_capacity(50);
        // Warm-up: the pfifo's ring grows to its high-water mark, the pool's caches fill.
        round(&q, &mut h, &mut burst);
        let before = thread_allocs();
        for _ in 0..5 {
            round(&q, &mut h, &mut burst);
        }
        let per_round = DEPTH + 51;
        assert_eq!(
            thread_allocs() - before,
            0,
            "{strategy}: allocations in 5 steady-state rounds of {per_round} packets"
        );
        let st = q.stats();
        assert_eq!(st.sent, 6 * per_round as u64, "{strategy}: {st:?}");
        assert_eq!(st.dropped(), 0);
        drop(q);
        assert_eq!(pool.stats().free, 4096, "every frame back home");
    }
}

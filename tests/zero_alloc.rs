//! The transmit path allocates nothing per packet in steady state (DESIGN: "intrusive,
//! allocation-free hot path"): pool frames, `xmit` and `xmit_bulk` through the defer list, a
//! pfifo deep enough to need its ring grown once, the run loop and the driver, and every frame
//! back home; and the per-CPU pool's allocation slow path, down to a cache taking, allocates
//! nothing either. A counting global allocator watches this thread's allocation calls.

use lockless_xmit::alloc_count::{CountingAlloc, thread_allocs};
use qdisc::{NullDriver, Pfifo, Strategy, TxQueue, Verdict};
use skb_pool::{PerCpu, Pool, PoolHandle, Skb};

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

/// Pins the calling thread to `cpu`; `false` if the affinity mask does not allow it.
fn pin(cpu: usize) -> bool {
    lockless_xmit::pingpong::pin(cpu).is_ok()
}

/// A skip the test harness cannot hide: written to the stderr handle, which it does not
/// capture (`eprintln!` output of a passing test is dropped).
fn skipped(why: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED per_cpu_refills_and_cache_takings_allocate_nothing: {why}"
    );
}

/// The per-CPU allocation slow path allocates nothing either, down to its last sources: a
/// thread on CPU 0 takes every frame of the pool, its refills coming from the depot and, last,
/// from the cache of CPU 1, where another thread left frames (a cache taking), and (rseq) from
/// CPU 1's outgoing stack for CPU 0, where that thread freed frames CPU 0 had allocated.
#[test]
fn per_cpu_refills_and_cache_takings_allocate_nothing() {
    const FRAMES: usize = 64;
    let mut modes = vec![PerCpu::Locked];
    if skb_pool::rseq::SUPPORTED {
        modes.push(PerCpu::Rseq);
    }
    for mode in modes {
        let pool = Pool::builder()
            .frame_count(FRAMES)
            .per_cpu(mode)
            .cpus(2)
            .build()
            .unwrap();
        let from_cpu0: Option<Vec<Skb>> = std::thread::scope(|s| {
            s.spawn(|| pin(0).then(|| (0..8).map(|_| pool.alloc().unwrap()).collect()))
                .join()
                .unwrap()
        });
        let Some(from_cpu0) = from_cpu0 else {
            skipped("CPU 0 is not in this process's affinity mask");
            return;
        };
        let left = std::thread::scope(|s| {
            s.spawn(|| {
                if !pin(1) {
                    return false;
                }
                let skbs: Vec<Skb> = (0..16).map(|_| pool.alloc().unwrap()).collect();
                drop(skbs);
                // Remote frees: fewer than a batch, so they wait on this CPU's way home.
                drop(from_cpu0);
                true
            })
            .join()
            .unwrap()
        });
        if !left {
            skipped("CPU 1 is not in this process's affinity mask");
            return;
        }
        let left = pool.per_cpu_stats().cpus[1];
        assert!(
            left.cached > 0,
            "{mode:?}: CPU 1 keeps frames in its cache: {left:?}"
        );
        assert!(
            left.outgoing > 0,
            "{mode:?}: CPU 1 holds frames for CPU 0: {left:?}"
        );
        let (got, allocs) = std::thread::scope(|s| {
            s.spawn(|| {
                assert!(pin(0), "CPU 0 was in the mask a moment ago");
                let mut got: Vec<Skb> = Vec::with_capacity(FRAMES);
                let before = thread_allocs();
                while let Ok(skb) = pool.alloc() {
                    got.push(skb);
                }
                let allocs = thread_allocs() - before;
                (got, allocs)
            })
            .join()
            .unwrap()
        });
        let stats = pool.per_cpu_stats();
        assert_eq!(got.len(), FRAMES, "{mode:?}: {stats:?}");
        assert!(stats.cache_takings >= 1, "{mode:?}: {stats:?}");
        assert_eq!(
            allocs, 0,
            "{mode:?}: heap allocations taking {FRAMES} frames"
        );
        drop(got);
        assert_eq!(pool.stats().free, FRAMES, "{mode:?}");
    }
}

//! Enqueue + dequeue cost per packet of pfifo, pfifo_fast and fq with 1, 100, 10 000 and
//! 100 000 active flows, against a plain `VecDeque` of the same boxed packets.
//!
//! Each flow has a fixed priority (flow id mod 16, so the bands of pfifo_fast and fq all see
//! traffic). Each qdisc is filled with one packet per flow (at least 64) before timing; a timed
//! iteration dequeues one packet and enqueues it again, so the qdisc stays in steady state with
//! every flow active and nothing is allocated in the timed region. `fq` reads the real monotonic
//! clock (twice per packet, as the kernel does); `fq_manual_clock` is the same scheduler on a
//! clock that costs one atomic load.
//!
//! pfifo is compared with `VecDeque` twice. `vecdeque` is the plain push/pop the target names:
//! it moves pointers and never reads a packet. An intrusive FIFO cannot do that (its link lives
//! in the packet, so a dequeue reads the head packet), and neither can any real dequeuer, which
//! reads at least the length of what it sends. So `vecdeque_len` and `pfifo_len` also read the
//! dequeued packet's length, as a driver does, and compare what a sender pays in each case. Both
//! pairs are reported; neither replaces the other.
//!
//! `pfifo_batch32` is pfifo moved in batches of 32 through a chain (`Qdisc::dequeue_batch`
//! into a `Fifo`, then `Qdisc::enqueue_batch` of that `Fifo`), the shape of the engine's
//! batched runner: a drained chain in, a chain out to the driver. `pfifo_loop32` is the same
//! work one packet at a time (each dequeued packet pushed onto the chain, each chained packet
//! popped and enqueued), the engine's per-packet runner; their ratio is the batching speed-up.
//! `pfifo` (no chain at all) stays as the floor. `fifo_chain_bound` (interleaved mode) moves
//! the same packets through the same chains with nothing of a qdisc around them, and
//! `fifo_mem_bound` moves their pointers through a ring without writing them (see
//! [`FifoBound`]): batching removes instructions, not memory work, so where the per-packet
//! loop runs near the chain bound no batched pfifo can gain much over it.
//!
//! `fq_mem_bound` (interleaved mode, with the batched fq variants) is not a qdisc: it is the
//! memory work fq cannot avoid per packet at each flow count, on the same packets in the same
//! order and batches, pipelined as well as it can be (see [`MemBound`]). Its cost at a flow
//! count is a floor for fq's there, as near as the bound's memory follows fq's: its index
//! follows fq's layout (see [`BoundIndex`]), but its arrays are plain `Vec`s without huge
//! pages, where fq's index and flow slabs ask for them, so from 100 000 flows the bound may
//! pay TLB misses fq does not. Each flow count also prints `implied_min`, an estimate
//! under an additive model: the flow curve fq_batch32 would have if its cost grew by exactly
//! the bound's growth, `(fq@first + (bound@N - bound@first)) / fq@first`, next to its measured
//! curve (a ratio of medians, where the printed `curve` rows are in-round ratios). It is not a
//! floor: fq may overlap added stalls with its own work, as its pipelines try to.
//! `fq_mem_bound_noindex` is the bound without the index line (flows found by their id), to
//! show how much of the bound's growth that one random line a packet is, and
//! `fq_mem_bound_idx4` the bound of an index half of fq's (4-byte slot numbers, the key
//! compared in the flow's line), and `fq_mem_bound_idx16` of one twice fq's (16-byte entries
//! holding the whole key, fq's layout before its entries shrank to 8 bytes), layouts fq does
//! not have.
//!
//! In the interleaved mode each timed slice follows one untimed pass over its variant's queued
//! packets, so that it times that variant's steady state rather than the other variants'
//! evictions of its data; `QDISC_BENCH_COLD=1` leaves the pass out. (Criterion's own warm-up
//! does the same for its mode.)
//!
//! Run: `cargo bench --bench qdisc`; on a loaded machine, `QDISC_BENCH_ROUNDS=15 cargo bench
//! --bench qdisc` interleaves the variants instead (see [`interleaved`]).

use std::collections::VecDeque;
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use llist_defer::{Fifo, Link, Node};
use lockless_xmit::harness::{median, process_cpu_time};
use qdisc::{
    FifoBuilder, FlowKey, FqBuilder, ManualClock, MonotonicClock, PFIFO_FAST_MAX_TX_QUEUE_LEN,
    Packet, Pfifo, PfifoFastBuilder, Qdisc, TestPacket, ToFree,
};

const FLOWS: [usize; 4] = [1, 100, 10_000, 100_000];

/// Packets per batch in the batched variants (the engine's drain hands over a chain of about
/// this many under load; the kernel's `dev_tx_weight` is 64).
const BATCH: usize = 32;

/// Whether pfifo_fast's largest ring holds the prefill of `flows`: priorities `f % 16` put
/// ten packets in sixteen in band 1.
fn pfifo_fast_fits(flows: usize) -> bool {
    flows.max(64).div_ceil(16) * 10 <= PFIFO_FAST_MAX_TX_QUEUE_LEN as usize
}

fn packets(flows: usize) -> Vec<TestPacket> {
    let n = flows.max(64);
    (0..n)
        .map(|i| {
            let f = (i % flows) as u64;
            TestPacket::new(i as u64, 1514)
                .with_flow(FlowKey::Socket {
                    id: f,
                    hash: f as u32,
                })
                .with_priority((f % 16) as u32)
        })
        .collect()
}

fn run_qdisc<Q: Qdisc<TestPacket>>(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    flows: usize,
    mut q: Q,
) {
    let mut to_free = ToFree::new();
    for p in packets(flows) {
        q.enqueue(p, &mut to_free);
    }
    assert!(to_free.is_empty(), "{name}: the prefill must fit");
    c.bench_function(BenchmarkId::new(name, flows), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let p = q.dequeue().expect("backlogged");
                black_box(q.enqueue(p, &mut to_free));
            }
            start.elapsed()
        })
    });
    assert!(
        to_free.is_empty(),
        "{name}: nothing dropped in steady state"
    );
}

/// pfifo's loop with the sender's read of the length, the peer of `vecdeque_len`.
fn run_pfifo_len(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    flows: usize,
    mut q: Pfifo<TestPacket>,
) {
    let mut to_free = ToFree::new();
    for p in packets(flows) {
        q.enqueue(p, &mut to_free);
    }
    c.bench_function(BenchmarkId::new("pfifo_len", flows), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let p = q.dequeue().expect("backlogged");
                black_box(p.len());
                black_box(q.enqueue(p, &mut to_free));
            }
            start.elapsed()
        })
    });
    assert!(to_free.is_empty(), "pfifo_len: nothing dropped");
}

/// Fills `q` with one packet per flow (at least 64); returns the (empty) to-free list.
fn prefill<Q: Qdisc<TestPacket>>(q: &mut Q, flows: usize) -> ToFree<TestPacket> {
    let mut to_free = ToFree::new();
    for p in packets(flows) {
        q.enqueue(p, &mut to_free);
    }
    assert!(to_free.is_empty(), "the prefill must fit");
    to_free
}

/// About `n` packets through `q` in chains of [`BATCH`]: [`batched_steps`] or
/// [`looped_steps`].
fn chain_steps<Q: Qdisc<TestPacket>>(
    q: &mut Q,
    to_free: &mut ToFree<TestPacket>,
    n: u64,
    batched: bool,
) -> Duration {
    if batched {
        batched_steps(q, to_free, n)
    } else {
        looped_steps(q, to_free, n)
    }
}

/// [`BATCH`] packets at a time: dequeue a batch, enqueue it again. Returns the time for about
/// `n` packets. Not inlined, like [`looped_steps`]: each timed loop keeps its own code, so
/// neither variant's speed depends on where the other lands.
#[inline(never)]
fn batched_steps<Q: Qdisc<TestPacket>>(
    q: &mut Q,
    to_free: &mut ToFree<TestPacket>,
    n: u64,
) -> Duration {
    let mut chain = Fifo::new();
    let start = Instant::now();
    for _ in 0..n.div_ceil(BATCH as u64) {
        black_box(q.dequeue_batch(&mut chain, BATCH));
        black_box(q.enqueue_batch(&mut chain, to_free));
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("qdisc");
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    for flows in FLOWS {
        let mut dq: VecDeque<TestPacket> = packets(flows).into_iter().collect();
        g.bench_function(BenchmarkId::new("vecdeque", flows), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let p = dq.pop_front().expect("backlogged");
                    dq.push_back(black_box(p));
                }
                start.elapsed()
            })
        });
        // The same loop, reading each dequeued packet's length as a sender does.
        g.bench_function(BenchmarkId::new("vecdeque_len", flows), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let p = dq.pop_front().expect("backlogged");
                    black_box(p.len());
                    dq.push_back(black_box(p));
                }
                start.elapsed()
            })
        });
        let pfifo = FifoBuilder::pfifo().limit(1 << 20).build().expect("valid");
        run_qdisc(&mut g, "pfifo", flows, pfifo);
        let pfifo = FifoBuilder::pfifo().limit(1 << 20).build().expect("valid");
        run_pfifo_len(&mut g, flows, pfifo);
        for (name, batched) in [("pfifo_batch32", true), ("pfifo_loop32", false)] {
            let mut pfifo: Pfifo<TestPacket> =
                FifoBuilder::pfifo().limit(1 << 20).build().expect("valid");
            let mut to_free = prefill(&mut pfifo, flows);
            // Per packet: `iters` packets in chains of 32.
            g.bench_function(BenchmarkId::new(name, flows), |b| {
                b.iter_custom(|iters| chain_steps(&mut pfifo, &mut to_free, iters, batched))
            });
            assert!(to_free.is_empty(), "{name}: nothing dropped");
        }
        if pfifo_fast_fits(flows) {
            let fast = PfifoFastBuilder::new()
                .tx_queue_len(PFIFO_FAST_MAX_TX_QUEUE_LEN)
                .build()
                .expect("valid");
            run_qdisc(&mut g, "pfifo_fast", flows, fast);
        }
        let fq = FqBuilder::new()
            .clock(Arc::new(MonotonicClock))
            .limit(1 << 20)
            .build()
            .expect("valid");
        run_qdisc(&mut g, "fq", flows, fq);
        // The same scheduler on a clock that costs one atomic load, to separate FQ's own work
        // from `clock_gettime` (about 60 ns a call on this VM).
        run_qdisc(&mut g, "fq_manual_clock", flows, fq_manual());
    }
    g.finish();
}

/// One variant of the interleaved mode: runs `n` dequeue+enqueue steps and returns the time.
type Step = Box<dyn FnMut(u64) -> Duration>;

/// A prefilled qdisc as a [`Step`]; `read_len` adds the sender's read of the length.
fn step_qdisc<Q: Qdisc<TestPacket> + 'static>(flows: usize, mut q: Q, read_len: bool) -> Step {
    let mut to_free = ToFree::new();
    for p in packets(flows) {
        q.enqueue(p, &mut to_free);
    }
    assert!(to_free.is_empty(), "the prefill must fit");
    Box::new(move |n| {
        let start = Instant::now();
        for _ in 0..n {
            let p = q.dequeue().expect("backlogged");
            if read_len {
                black_box(p.len());
            }
            black_box(q.enqueue(p, &mut to_free));
        }
        let t = start.elapsed();
        assert!(to_free.is_empty(), "nothing dropped in steady state");
        t
    })
}

/// [`batched_steps`] one packet at a time: the engine's per-packet runner on the same chain.
#[inline(never)]
fn looped_steps<Q: Qdisc<TestPacket>>(
    q: &mut Q,
    to_free: &mut ToFree<TestPacket>,
    n: u64,
) -> Duration {
    let mut chain = Fifo::new();
    let start = Instant::now();
    for _ in 0..n.div_ceil(BATCH as u64) {
        for _ in 0..BATCH {
            let Some(p) = q.dequeue() else { break };
            chain.push_back(p);
        }
        while let Some(p) = chain.pop_front() {
            black_box(q.enqueue(p, to_free));
        }
    }
    start.elapsed()
}

/// A prefilled qdisc moved in batches of [`BATCH`] as a [`Step`], batched or one by one.
fn step_batched<Q: Qdisc<TestPacket> + 'static>(flows: usize, mut q: Q, batched: bool) -> Step {
    let mut to_free = prefill(&mut q, flows);
    Box::new(move |n| {
        let t = chain_steps(&mut q, &mut to_free, n, batched);
        assert!(to_free.is_empty(), "nothing dropped in steady state");
        t
    })
}

/// The `VecDeque` baseline as a [`Step`].
fn step_vecdeque(flows: usize, read_len: bool) -> Step {
    let mut dq: VecDeque<TestPacket> = packets(flows).into_iter().collect();
    Box::new(move |n| {
        let start = Instant::now();
        for _ in 0..n {
            let p = dq.pop_front().expect("backlogged");
            if read_len {
                black_box(p.len());
            }
            dq.push_back(black_box(p));
        }
        start.elapsed()
    })
}

/// How far ahead [`FifoBound`] prefetches (as far as pfifo's batched dequeue hints).
const FIFO_BOUND_AHEAD: usize = 64;

/// `fifo_mem_bound` and `fifo_chain_bound`: the memory work of moving the same packets, in
/// the same order, from the front of a FIFO to its back, with nothing of a qdisc around it (no
/// counters, no limit, no call per packet or per batch) and the line of each packet's length
/// prefetched [`FIFO_BOUND_AHEAD`] packets ahead. Both read each packet's length, as pfifo's
/// byte counters must. `fifo_mem_bound` moves pointers through a ring and writes no packet;
/// `fifo_chain_bound` passes the packets in chains of [`BATCH`], as `pfifo_loop32` and
/// `pfifo_batch32` both do (each taken packet linked onto a `Fifo`, the chain then walked
/// back in), and so writes each packet's link. Batching removes instructions, not memory work:
/// `pfifo_loop32 / fifo_chain_bound` is about as much as any batched pfifo could gain over the
/// per-packet loop on the same chains, and `fifo_chain_bound / fifo_mem_bound` what the
/// chains' writes cost.
struct FifoBound {
    /// The queued packets' links: positions `head .. tail`, modulo the power-of-two length.
    ring: Vec<NonNull<Link>>,
    mask: usize,
    head: usize,
    tail: usize,
    /// The prefetch distance: [`FIFO_BOUND_AHEAD`], or less in a shorter queue.
    ahead: usize,
}

impl FifoBound {
    fn new(flows: usize) -> FifoBound {
        let mut ring: Vec<NonNull<Link>> =
            packets(flows).into_iter().map(Node::into_link).collect();
        let len = ring.len();
        ring.resize(len.next_power_of_two(), NonNull::dangling());
        FifoBound {
            mask: ring.len() - 1,
            ring,
            head: 0,
            tail: len,
            ahead: FIFO_BOUND_AHEAD.min(len - 1),
        }
    }

    /// Takes the front packet, prefetching the line of the length of the one `ahead` places
    /// behind it.
    #[inline(always)]
    fn pop(&mut self) -> TestPacket {
        let next = self.ring[(self.head + self.ahead) & self.mask];
        // The length follows the link (`Boxed`'s item and `TestMeta` are `repr(C)`, length
        // first).
        llist_defer::hint::prefetch(next.as_ptr().cast::<u8>().wrapping_add(size_of::<Link>()));
        let link = self.ring[self.head & self.mask];
        self.head += 1;
        // SAFETY: a slot between head and tail holds a link from `TestPacket::into_link` that
        // only this ring owns, and `head` has moved past it.
        unsafe { TestPacket::from_link(link) }
    }

    #[inline(always)]
    fn push(&mut self, p: TestPacket) {
        self.ring[self.tail & self.mask] = p.into_link();
        self.tail += 1;
    }

    /// `n` packets from the front to the back, one at a time (`chained`: in chains of
    /// [`BATCH`]); returns the sum of their lengths.
    #[inline(never)]
    fn step(&mut self, n: u64, chained: bool) -> u64 {
        let mut sum = 0u64;
        if !chained {
            for _ in 0..n {
                let p = self.pop();
                sum = sum.wrapping_add(p.len() as u64);
                self.push(p);
            }
            return sum;
        }
        let batch = BATCH.min(self.tail - self.head);
        let mut chain: Fifo<TestPacket> = Fifo::new();
        for _ in 0..n.div_ceil(batch as u64) {
            for _ in 0..batch {
                let p = self.pop();
                sum = sum.wrapping_add(p.len() as u64);
                chain.push_back(p);
            }
            while let Some(p) = chain.pop_front() {
                self.push(p);
            }
        }
        sum
    }
}

impl Drop for FifoBound {
    fn drop(&mut self) {
        while self.head != self.tail {
            drop(self.pop());
        }
    }
}

/// [`FifoBound`] as a [`Step`].
fn step_fifo_bound(flows: usize, chained: bool) -> Step {
    let mut b = FifoBound::new(flows);
    Box::new(move |n| {
        let start = Instant::now();
        black_box(b.step(n, chained));
        start.elapsed()
    })
}

/// An index entry of [`MemBound`]'s 16-byte layout: the key and the flow's slot.
#[derive(Clone, Copy)]
struct BoundEntry {
    id: u64,
    slot: u32,
}

/// A flow of [`MemBound`]: its one queued packet, alone in a cache line as fq's hot flow is.
#[repr(align(64))]
struct BoundFlow {
    head: Fifo<TestPacket>,
    /// The flow's key, for [`BoundIndex::Slots`] and [`BoundIndex::Slots8`].
    id: u64,
}

/// How [`MemBound`] finds a packet's flow.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BoundIndex {
    /// 16-byte entries holding the key, at most half full: a table twice fq's
    /// (`fq_mem_bound_idx16`), the layout fq had before its entries shrank to 8 bytes.
    Keys,
    /// An index of 4-byte slot numbers, as many, the key compared in the flow's line (which
    /// the packet needs anyway): a table half of fq's (`fq_mem_bound_idx4`), the bound of a
    /// layout fq does not have.
    Slots,
    /// fq's index: 8-byte entries, a slot number and the socket hash (which fq checks at every
    /// lookup), the key compared in the flow's line (`fq_mem_bound`); here the upper half holds
    /// a fingerprint of the key in place of the hash, so that, as in fq (whose entries carry
    /// both), a probe passing another flow's entry rarely reads that flow's line.
    Slots8,
    /// No index: the bench's flow ids are the slots (`fq_mem_bound_noindex`), what everything
    /// but the index line costs.
    None,
}

/// `fq_mem_bound`: only the memory work fq cannot avoid per packet, on the same packets, the
/// same flow count and the same batches, with the flows served in fq's round-robin order
/// (creation order, which the bench's steady state keeps).
///
/// Dequeue, per packet: the next flow's line (its head pointer), the head packet's link and the
/// fields fq's dequeue needs (length, the socket's pacing rates), prefetched as fq does
/// ([`Packet::prefetch_link`]). Enqueue, per packet: the
/// packet's fields fq's enqueue needs (flow key, priority, stamp, length), the index line its
/// key hashes to (the same multiplicative hash and table size as fq's index: at most half
/// full, linear probing), and the flow's line, where the packet is stored. Nothing else: no
/// band, credit, list, pacing or GC state, no counters.
///
/// Pipelined as well as it can be: the dequeue starts loading the flow `D` places ahead and
/// the head packet of the one `D/2` ahead; the enqueue, with the whole batch in hand, starts
/// loading every packet's index line first, then every flow line (each read from its loaded
/// index entry), then stores the packets.
struct MemBound {
    index: Vec<BoundEntry>,
    /// The slots of `index`, for [`BoundIndex::Slots`].
    slots: Vec<u32>,
    /// The slots of `index` with the key's fingerprint in the high half, for
    /// [`BoundIndex::Slots8`].
    slots8: Vec<u64>,
    bits: u32,
    flows: Vec<BoundFlow>,
    /// The next flow the round robin serves.
    rr: usize,
    batch: Vec<TestPacket>,
    /// Dequeue look-ahead in flows.
    d: usize,
    mode: BoundIndex,
}

impl MemBound {
    const VACANT: u32 = u32::MAX;

    fn new(flows: usize) -> MemBound {
        let bits = (2 * flows).next_power_of_two().trailing_zeros().max(4);
        let mut b = MemBound {
            index: vec![
                BoundEntry {
                    id: 0,
                    slot: Self::VACANT,
                };
                1 << bits
            ],
            slots: vec![Self::VACANT; 1 << bits],
            slots8: vec![u64::from(Self::VACANT); 1 << bits],
            bits,
            flows: (0..flows)
                .map(|id| BoundFlow {
                    head: Fifo::new(),
                    id: id as u64,
                })
                .collect(),
            rr: 0,
            batch: Vec::with_capacity(BATCH),
            d: 8,
            mode: BoundIndex::Keys,
        };
        for p in packets(flows) {
            let id = Self::id(&p);
            let slot = id as usize;
            // The bench's flows hold one packet each once the first `flows` are in; the extra
            // packets of the at-least-64 prefill (fewer than 64 flows) are not used here.
            if b.flows[slot].head.is_empty() {
                let mut pos = b.home(id);
                while b.index[pos].slot != Self::VACANT {
                    pos = (pos + 1) & (b.index.len() - 1);
                }
                b.index[pos] = BoundEntry {
                    id,
                    slot: slot as u32,
                };
                b.slots[pos] = slot as u32;
                b.slots8[pos] = slot as u64 | u64::from(Self::fingerprint(id)) << 32;
                b.flows[slot].head.push_back(p);
            }
        }
        b
    }

    #[inline]
    fn id(p: &TestPacket) -> u64 {
        match p.flow() {
            FlowKey::Socket { id, .. } => id,
            _ => unreachable!("the bench's packets are socket packets"),
        }
    }

    /// fq's index mix of a socket key's id (Fibonacci hashing).
    #[inline]
    fn mix(id: u64) -> u64 {
        id.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// fq's index hash: the top `bits` bits of the mix.
    #[inline]
    fn home(&self, id: u64) -> usize {
        (Self::mix(id) >> (64 - self.bits)) as usize
    }

    /// Five bits of the mix below the home bits, as fq's entries keep.
    #[inline]
    fn fingerprint(id: u64) -> u32 {
        (Self::mix(id) >> 32) as u32 & 0x1f
    }

    /// The slot of flow `id` (it exists).
    #[inline]
    fn find(&self, id: u64) -> usize {
        let mut pos = self.home(id);
        match self.mode {
            BoundIndex::Keys => loop {
                let e = self.index[pos];
                if e.id == id && e.slot != Self::VACANT {
                    return e.slot as usize;
                }
                pos = (pos + 1) & (self.index.len() - 1);
            },
            BoundIndex::Slots => self.probe_slots(&self.slots, pos, id, Some),
            BoundIndex::Slots8 => {
                // A vacant entry reads as slot `VACANT` with fingerprint 0: a key whose
                // fingerprint is 0 gets that slot, which `flows.get` refuses.
                let fp = Self::fingerprint(id);
                self.probe_slots(&self.slots8, pos, id, |e| {
                    ((e >> 32) as u32 == fp).then_some(e as u32)
                })
            }
            BoundIndex::None => id as usize,
        }
    }

    /// Linear probing from `pos` over an index of slot numbers (`slot_of` reads one from an
    /// entry, `None` for an entry that cannot be `id`'s), the key compared in the flow's line:
    /// the slot of flow `id` (it exists).
    #[inline]
    fn probe_slots<E: Copy>(
        &self,
        table: &[E],
        mut pos: usize,
        id: u64,
        slot_of: impl Fn(E) -> Option<u32>,
    ) -> usize {
        loop {
            if let Some(s) = slot_of(table[pos]).map(|s| s as usize) {
                if self.flows.get(s).is_some_and(|f| f.id == id) {
                    return s;
                }
            }
            pos = (pos + 1) & (table.len() - 1);
        }
    }

    /// Starts loading the index line where a lookup of `id` begins.
    #[inline]
    fn prefetch_index(&self, id: u64) {
        match self.mode {
            BoundIndex::Keys => llist_defer::hint::prefetch(&self.index[self.home(id)]),
            BoundIndex::Slots => llist_defer::hint::prefetch(&self.slots[self.home(id)]),
            BoundIndex::Slots8 => llist_defer::hint::prefetch(&self.slots8[self.home(id)]),
            BoundIndex::None => {}
        }
    }

    #[inline]
    fn flow_at(&self, ahead: usize) -> &BoundFlow {
        let (i, n) = (self.rr + ahead, self.flows.len());
        &self.flows[if i < n { i } else { i % n }]
    }

    /// One batch out and back in; returns a checksum of what was read.
    #[inline(never)]
    fn step(&mut self) -> u64 {
        let mut sum = 0u64;
        let d = self.d;
        for _ in 0..BATCH.min(self.flows.len()) {
            llist_defer::hint::prefetch(self.flow_at(d));
            if let Some(link) = self.flow_at(d / 2).head.front_link() {
                TestPacket::prefetch_link(link);
            }
            let p = self.flows[self.rr]
                .head
                .pop_front()
                .expect("one packet per flow");
            self.rr += 1;
            if self.rr == self.flows.len() {
                self.rr = 0;
            }
            sum = sum
                .wrapping_add(p.len() as u64)
                .wrapping_add(p.pacing_rate().unwrap_or(0))
                .wrapping_add(p.max_pacing_rate().unwrap_or(0));
            self.batch.push(p);
        }
        for p in &self.batch {
            self.prefetch_index(Self::id(p));
        }
        for p in &self.batch {
            llist_defer::hint::prefetch(&self.flows[self.find(Self::id(p))]);
        }
        let mut batch = std::mem::take(&mut self.batch);
        for p in batch.drain(..) {
            let slot = self.find(Self::id(&p));
            sum = sum
                .wrapping_add(u64::from(p.priority()))
                .wrapping_add(p.tstamp().unwrap_or(0))
                .wrapping_add(p.len() as u64);
            let f = &mut self.flows[slot];
            debug_assert!(f.head.is_empty());
            f.head.push_back(p);
        }
        self.batch = batch;
        sum
    }
}

/// [`MemBound`] as a [`Step`]: about `n` packets in batches of [`BATCH`] (of one packet per
/// flow, with fewer flows than that).
fn step_mem_bound(flows: usize, d: usize, mode: BoundIndex) -> Step {
    let mut b = MemBound::new(flows);
    b.d = d;
    b.mode = mode;
    let batch = BATCH.min(flows) as u64;
    Box::new(move |n| {
        let start = Instant::now();
        for _ in 0..n.div_ceil(batch) {
            black_box(b.step());
        }
        start.elapsed()
    })
}

/// FQ on a clock that costs one atomic load, with room for a million queued packets.
fn fq_manual() -> qdisc::Fq<TestPacket> {
    FqBuilder::new()
        .clock(Arc::new(ManualClock::new(1)))
        .limit(1 << 20)
        .build()
        .expect("valid")
}

/// fq on the manual clock moved in batches of [`BATCH`]: `fq_loop32` one packet at a time (the
/// per-packet runner), `fq_batch32` through `dequeue_batch` + `enqueue_batch` with the default
/// prefetch distances, and, for each `K` of `QDISC_BENCH_FQ_K=K1,K2,..`, `fq_batch32_kK` with
/// the enqueue pipeline at distance `K` (the flow line prefetched at `K/2`) and the dequeue's
/// look-ahead at `K` flows (0: no prefetch), or for `E/D` enqueue distance `E` and dequeue
/// look-ahead `D`, and for `E/D/H` the flow line at `H`, to pick the distances by
/// measurement; then `fq_mem_bound` (the memory floor, see [`MemBound`]),
/// `fq_mem_bound_idx4`, `fq_mem_bound_idx16` and `fq_mem_bound_noindex` (the same with an
/// index half and twice fq's, and without an index: what the rest costs; see [`BoundIndex`])
/// and, for each
/// `D` of `QDISC_BENCH_BOUND_D=D1,..`, `fq_mem_bound_dD` with dequeue look-ahead `D` (8 by
/// default).
fn fq_batch_variants(flows: usize) -> Vec<(&'static str, Step)> {
    let mut v: Vec<(&'static str, Step)> = vec![
        ("fq_loop32", step_batched(flows, fq_manual(), false)),
        ("fq_batch32", step_batched(flows, fq_manual(), true)),
        ("fq_mem_bound", step_mem_bound(flows, 8, BoundIndex::Slots8)),
        (
            "fq_mem_bound_idx4",
            step_mem_bound(flows, 8, BoundIndex::Slots),
        ),
        (
            "fq_mem_bound_idx16",
            step_mem_bound(flows, 8, BoundIndex::Keys),
        ),
        (
            "fq_mem_bound_noindex",
            step_mem_bound(flows, 8, BoundIndex::None),
        ),
    ];
    // `QDISC_BENCH_BOUND_D=D1,D2,..`: `fq_mem_bound_dD`, the bound with dequeue look-ahead D.
    let ds = std::env::var("QDISC_BENCH_BOUND_D").unwrap_or_default();
    for d in ds.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let Ok(d) = d.parse::<usize>() else {
            panic!("QDISC_BENCH_BOUND_D: {d:?} is not a number");
        };
        let name: &'static str = Box::leak(format!("fq_mem_bound_d{d}").into_boxed_str());
        v.push((name, step_mem_bound(flows, d, BoundIndex::Slots8)));
    }
    let ks = std::env::var("QDISC_BENCH_FQ_K").unwrap_or_default();
    for k in ks.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        // `K` (both distances), `E/D` (enqueue distance E, dequeue look-ahead D) or `E/D/H`
        // (and the enqueue's flow line at H instead of E/2).
        let mut parts = k.split('/').map(str::parse::<usize>);
        let (e, d, h) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(Ok(e)), None, None, None) => (e, e, None),
            (Some(Ok(e)), Some(Ok(d)), None, None) => (e, d, None),
            (Some(Ok(e)), Some(Ok(d)), Some(Ok(h)), None) => (e, d, Some(h)),
            _ => panic!("QDISC_BENCH_FQ_K: {k:?} is not K, E/D or E/D/H"),
        };
        let mut q = fq_manual();
        q.set_prefetch_distances(e, d);
        if let Some(h) = h {
            q.set_flow_prefetch_distance(h);
        }
        let name: &'static str = Box::leak(format!("fq_batch32_k{k}").into_boxed_str());
        v.push((name, step_batched(flows, q, true)));
    }
    v
}

/// The variants beyond the FIFO pair: pfifo_fast, fq on the real clock, fq on a manual clock.
fn others(flows: usize) -> Vec<(&'static str, Step)> {
    let mut v: Vec<(&'static str, Step)> = Vec::new();
    if pfifo_fast_fits(flows) {
        let fast = PfifoFastBuilder::new()
            .tx_queue_len(PFIFO_FAST_MAX_TX_QUEUE_LEN)
            .build()
            .expect("valid");
        v.push(("pfifo_fast", step_qdisc(flows, fast, false)));
    } else {
        println!(
            "{flows} pfifo_fast skipped: its bands hold at most {PFIFO_FAST_MAX_TX_QUEUE_LEN}"
        );
    }
    let fq: qdisc::Fq<TestPacket> = FqBuilder::new()
        .clock(Arc::new(MonotonicClock))
        .limit(1 << 20)
        .build()
        .expect("valid");
    v.push(("fq", step_qdisc(flows, fq, false)));
    v.push(("fq_manual_clock", step_qdisc(flows, fq_manual(), false)));
    v.extend(fq_batch_variants(flows));
    v
}

/// One flow count's variants in the interleaved mode, and their times.
struct Group {
    flows: usize,
    variants: Vec<(&'static str, Step)>,
    /// Nanoseconds per packet of each variant, one entry per round.
    ns: Vec<Vec<f64>>,
    /// Packets per timed slice.
    n: u64,
}

impl Group {
    fn new(flows: usize, only: &str) -> Group {
        let mut variants: Vec<(&'static str, Step)> =
            vec![("vecdeque", step_vecdeque(flows, false))];
        let pfifo = || FifoBuilder::pfifo().limit(1 << 20).build().expect("valid");
        if only == "fq" {
            variants.push(("fq_manual_clock", step_qdisc(flows, fq_manual(), false)));
            variants.extend(fq_batch_variants(flows));
        } else {
            variants.push(("vecdeque_len", step_vecdeque(flows, true)));
            variants.push(("pfifo", step_qdisc(flows, pfifo(), false)));
            variants.push(("pfifo_len", step_qdisc(flows, pfifo(), true)));
            variants.push(("pfifo_loop32", step_batched(flows, pfifo(), false)));
            variants.push(("pfifo_batch32", step_batched(flows, pfifo(), true)));
            variants.push(("fifo_mem_bound", step_fifo_bound(flows, false)));
            variants.push(("fifo_chain_bound", step_fifo_bound(flows, true)));
            if only != "fifo" {
                variants.extend(others(flows));
            }
        }
        Group {
            flows,
            ns: vec![Vec::new(); variants.len()],
            variants,
            // Each slice cycles through every queued packet a few times (at least 200 000
            // steps).
            n: (4 * flows.max(64)).max(200_000) as u64,
        }
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.variants.iter().position(|(n, _)| *n == name)
    }
}

/// `QDISC_BENCH_ROUNDS=N cargo bench --bench qdisc`: instead of criterion, every variant of
/// every flow count runs a short slice in turn, N rounds, so that load from other processes on
/// a shared machine falls on all of them alike. Prints each variant's median and minimum ns per
/// packet over the rounds, and the median over rounds of the in-round ratios pfifo/vecdeque,
/// pfifo_len/vecdeque_len, pfifo_loop32/pfifo_batch32 (the batching speed-up),
/// pfifo/pfifo_batch32, pfifo_loop32 and pfifo_batch32 over each FIFO bound, and
/// fq_manual_clock/vecdeque. `QDISC_BENCH_ONLY=fifo` runs just the FIFO variants and their
/// bounds, `QDISC_BENCH_ONLY=fq` just `vecdeque`, `fq_manual_clock` and the batched fq
/// variants of [`fq_batch_variants`] (for the flow curve: each fq variant's in-round ratio to
/// itself at the first flow count; the in-round ratios fq_loop32/fq_batch32 and of each tuned
/// variant and `fq_mem_bound` over fq_batch32; and `implied_min`), and
/// `QDISC_BENCH_FLOWS=1,100` just those flow counts. All flow counts share the rounds, so a
/// curve divides times taken seconds apart, not minutes: the machine's state moves the memory
/// bound flow counts more than the cached ones. Each slice follows an untimed pass over its
/// variant's packets (`QDISC_BENCH_COLD=1`: none). `QDISC_BENCH_CPU=1` times each slice in the
/// process's CPU time instead of wall time (the mode is single-threaded), so that a slice
/// preempted by another process's build is not charged for the wait; caches and memory are
/// still shared.
fn interleaved(rounds: usize) {
    let only = std::env::var("QDISC_BENCH_ONLY").unwrap_or_default();
    let cpu_time = std::env::var("QDISC_BENCH_CPU").is_ok_and(|v| v == "1");
    let cold = std::env::var("QDISC_BENCH_COLD").is_ok_and(|v| v == "1");
    let flow_counts: Vec<usize> = std::env::var("QDISC_BENCH_FLOWS")
        .ok()
        .map(|v| v.split(',').filter_map(|f| f.trim().parse().ok()).collect())
        .unwrap_or_else(|| FLOWS.to_vec());
    let mut groups: Vec<Group> = flow_counts.iter().map(|&f| Group::new(f, &only)).collect();
    for g in &mut groups {
        for (_, step) in &mut g.variants {
            step(g.n); // warm-up: one pass
        }
    }
    // Every (flow count, variant) pair, in one rotation.
    let slots: Vec<(usize, usize)> = groups
        .iter()
        .enumerate()
        .flat_map(|(gi, g)| (0..g.variants.len()).map(move |vi| (gi, vi)))
        .collect();
    let count = slots.len();
    for round in 0..rounds {
        // Rotated each round, and reversed every other one, so that no variant always runs
        // first, last, or right after the same other one (whose tables it finds in the cache,
        // or evicted).
        for k in 0..count {
            let k = if round % 2 == 1 { count - 1 - k } else { k };
            let (gi, vi) = slots[(k + round) % count];
            let g = &mut groups[gi];
            let (n, flows) = (g.n, g.flows);
            let step = &mut g.variants[vi].1;
            // One untimed pass over every queued packet before each slice, so that a slice
            // times its variant's steady state, not the other variants' evictions of its data
            // (from 100 000 queued packets the variants' tables and packets no longer fit the
            // cache together, and a cold first pass costs every variant the same, diluting the
            // ratios). `QDISC_BENCH_COLD=1` times the slices as they come, for the contrast.
            if !cold {
                step(flows.max(64) as u64);
            }
            let t = if cpu_time {
                let c0 = process_cpu_time();
                step(n);
                process_cpu_time() - c0
            } else {
                step(n)
            };
            g.ns[vi].push(t.as_nanos() as f64 / n as f64);
        }
    }
    println!("flows variant median_ns min_ns max_ns");
    let in_round = |a: &[f64], b: &[f64]| {
        let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
        median(&r)
    };
    let Some(first) = groups.first() else {
        return; // QDISC_BENCH_FLOWS named no flow count
    };
    for g in &groups {
        let flows = g.flows;
        for (i, (name, _)) in g.variants.iter().enumerate() {
            let min = g.ns[i].iter().copied().fold(f64::INFINITY, f64::min);
            let max = g.ns[i].iter().copied().fold(0.0, f64::max);
            println!("{flows} {name} {:.2} {min:.2} {max:.2}", median(&g.ns[i]));
        }
        // The flow curve: each fq variant against itself at the first flow count, in-round.
        for (i, (name, _)) in g.variants.iter().enumerate() {
            let Some(b) = first.index(name).filter(|_| name.starts_with("fq")) else {
                continue;
            };
            println!(
                "{flows} curve:{name}/{name}@{} {:.2}",
                first.flows,
                in_round(&g.ns[i], &first.ns[b])
            );
        }
        // fq_batch32's curve if its cost grew by exactly the growth of `fq_mem_bound`'s (fq's
        // cost at the first flow count plus that growth): an additive estimate, not a floor.
        // The same for the index layouts fq does not have (`implied_min_idx4`, ...).
        for bound in ["fq_mem_bound", "fq_mem_bound_idx4", "fq_mem_bound_idx16"] {
            let (Some(f), Some(b), Some(f0), Some(b0)) = (
                g.index("fq_batch32"),
                g.index(bound),
                first.index("fq_batch32"),
                first.index(bound),
            ) else {
                continue;
            };
            let (f0, b0) = (median(&first.ns[f0]), median(&first.ns[b0]));
            let (fm, bm) = (median(&g.ns[f]), median(&g.ns[b]));
            let layout = bound.strip_prefix("fq_mem_bound").unwrap_or_default();
            println!(
                "{flows} implied_min{layout}:fq_batch32/fq_batch32@{} {:.2} (curve {:.2})",
                first.flows,
                (f0 + (bm - b0)) / f0,
                fm / f0
            );
        }
        // Each tuned fq variant against the default, in-round.
        let tuned = g
            .variants
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| n.starts_with("fq_batch32_k") || n.starts_with("fq_mem_bound"));
        let tuned: Vec<(&str, &str)> = tuned.map(|n| (n, "fq_batch32")).collect();
        for (a, b) in [
            ("pfifo", "vecdeque"),
            ("pfifo_len", "vecdeque_len"),
            ("pfifo_loop32", "pfifo_batch32"),
            ("pfifo", "pfifo_batch32"),
            ("pfifo_loop32", "fifo_mem_bound"),
            ("pfifo_batch32", "fifo_mem_bound"),
            ("pfifo_loop32", "fifo_chain_bound"),
            ("pfifo_batch32", "fifo_chain_bound"),
            ("fq_manual_clock", "vecdeque"),
            ("fq_loop32", "fq_batch32"),
        ]
        .into_iter()
        .chain(tuned)
        {
            let (Some(a), Some(b)) = (g.index(a), g.index(b)) else {
                continue;
            };
            println!(
                "{flows} ratio:{}/{} {:.2}",
                g.variants[a].0,
                g.variants[b].0,
                in_round(&g.ns[a], &g.ns[b])
            );
        }
    }
}

fn main() {
    if let Some(rounds) = std::env::var("QDISC_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        interleaved(rounds);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}

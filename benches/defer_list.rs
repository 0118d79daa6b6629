//! Many producers, one consumer: the defer list against what a Rust user would pick instead.
//!
//! Every strategy moves the same pre-allocated boxed items (allocation is outside the timed
//! region; each producer writes its item just before pushing it, as it would write a packet) from P producer threads to one consumer thread, which reads each item and keeps it
//! in a sink. Bounded structures make a producer that finds them full yield and retry.
//!
//! - `defer_list`: `DeferList` (limit 1000) of intrusive `Boxed<u64>`; the consumer takes the
//!   whole list with one swap and reverses it to FIFO.
//! - `defer_list_batch` (a diagnostic, not a peer): the same list fed in bursts of 32 with
//!   `push_batch`, so that what remains is the consumer's walk of the chain.
//! - `llist_unbounded` (a diagnostic, not a peer): the plain `LList` with single `add`s, no
//!   count and no limit: the ceiling of any defer list fed one item per push.
//! - `segqueue`: `crossbeam_queue::SegQueue<Box<u64>>`, one pop per item.
//! - `arrayqueue`: `crossbeam_queue::ArrayQueue<Box<u64>>` of 1024, one pop per item.
//! - `mpsc`: `std::sync::mpsc::channel`, one recv per item.
//! - `mutex_vecdeque`: `Mutex<VecDeque<Box<u64>>>`; the consumer swaps the whole deque out under
//!   the lock (the strongest way to use it).
//!
//! Run: `cargo bench --bench defer_list` (criterion: each contender in turn), or
//! `DEFER_BENCH_ROUNDS=N cargo bench --bench defer_list`: N rounds in which every contender
//! moves one slice of items at each producer count, in an order rotated each round and
//! reversed every other one; it prints each contender's median M items/s and, per round, the
//! defer list's and the bound's ratio to the best peer of that round (median and range).

// criterion_group! generates an undocumented `benches` function.
#![allow(missing_docs)]

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use crossbeam_queue::{ArrayQueue, SegQueue};
use llist_defer::{Boxed, Chain, DeferList, Fifo, LList, Pushed, Rejected};

/// Items per criterion iteration.
const ITEMS: u64 = 10_000;

/// A boxed `u64` item: the intrusive `Boxed` of the lists, the plain `Box` of the peers.
trait Item: Send + 'static {
    fn make(v: u64) -> Self;
    /// Writes the item just before it is pushed, as a producer writes a packet.
    fn touch(&mut self, v: u64);
}

impl Item for Boxed<u64> {
    fn make(v: u64) -> Self {
        Boxed::new(v)
    }
    fn touch(&mut self, v: u64) {
        **self = v;
    }
}

impl Item for Box<u64> {
    fn make(v: u64) -> Self {
        Box::new(v)
    }
    fn touch(&mut self, v: u64) {
        **self = v;
    }
}

/// Pushes `item` with `push` until it is accepted, yielding after each refusal.
fn push_until_accepted<T>(mut item: T, mut push: impl FnMut(T) -> Result<Pushed, Rejected<T>>) {
    loop {
        match push(item) {
            Ok(_) => return,
            Err(rejected) => {
                item = rejected.into_inner();
                thread::yield_now();
            }
        }
    }
}

/// A transport under test: shared state, how producers push, how the consumer drains.
trait Transport: Send + Sync + 'static {
    type Item: Item;
    fn push(&self, item: Self::Item);
    /// Drains what is there, reading each item and moving it to the sink; returns how many.
    fn drain(&self, sink: &mut Sink<Self::Item>) -> u64;
    /// Called by each producer after its last push (to push what it still holds back).
    fn finish(&self) {}
}

/// Where the consumer keeps items until the timing ends (freeing is not what we measure).
struct Sink<T> {
    boxes: Vec<T>,
    nodes: Fifo<Boxed<u64>>,
    sum: u64,
}

impl Sink<Box<u64>> {
    /// Reads and keeps every item; returns how many.
    fn keep_all(&mut self, items: impl Iterator<Item = Box<u64>>) -> u64 {
        let mut n = 0;
        for b in items {
            self.sum += *b;
            self.boxes.push(b);
            n += 1;
        }
        n
    }
}

impl Sink<Boxed<u64>> {
    /// Reverses a taken chain to FIFO, reads every item and keeps them; returns how many.
    fn keep_chain(&mut self, chain: Chain<Boxed<u64>>) -> u64 {
        let mut batch = chain.reverse();
        let n = batch.len() as u64;
        self.sum += batch.iter().map(|n| **n).sum::<u64>();
        self.nodes.append(&mut batch);
        n
    }
}

struct Defer(DeferList<Boxed<u64>>);
impl Transport for Defer {
    type Item = Boxed<u64>;
    fn push(&self, item: Boxed<u64>) {
        push_until_accepted(item, |i| self.0.push(i));
    }
    fn drain(&self, sink: &mut Sink<Boxed<u64>>) -> u64 {
        sink.keep_chain(self.0.take_all())
    }
}

/// Items a `defer_list_batch` producer gathers before one `push_batch`.
const BATCH: usize = 32;

thread_local! {
    /// A `defer_list_batch` producer's burst being gathered.
    static GATHER: std::cell::RefCell<Fifo<Boxed<u64>>> = const { std::cell::RefCell::new(Fifo::new()) };
}

/// The same list fed in bursts of [`BATCH`] with `push_batch` (one CAS per burst): not a peer,
/// a diagnostic. With the producers' CAS traffic cut 32-fold, what remains is the consumer's
/// walk of a chain whose every node another core wrote, so this row is near the ceiling of any
/// single-consumer linked list on this machine.
struct DeferBatch(DeferList<Boxed<u64>>);
impl DeferBatch {
    fn push_burst(&self, burst: Fifo<Boxed<u64>>) {
        push_until_accepted(burst, |b| self.0.push_batch(b));
    }
}
impl Transport for DeferBatch {
    type Item = Boxed<u64>;
    fn push(&self, item: Boxed<u64>) {
        let full = GATHER.with(|g| {
            let mut g = g.borrow_mut();
            g.push_back(item);
            (g.len() >= BATCH).then(|| std::mem::take(&mut *g))
        });
        if let Some(burst) = full {
            self.push_burst(burst);
        }
    }
    fn finish(&self) {
        let rest = GATHER.with(|g| std::mem::take(&mut *g.borrow_mut()));
        if !rest.is_empty() {
            self.push_burst(rest);
        }
    }
    fn drain(&self, sink: &mut Sink<Boxed<u64>>) -> u64 {
        sink.keep_chain(self.0.take_all())
    }
}

/// The kernel's plain `llist` (`LList::add`, no count, no limit): not a peer, the ceiling of
/// every defer list with single pushes, which cannot push with less than this one CAS.
struct Unbounded(LList<Boxed<u64>>);
impl Transport for Unbounded {
    type Item = Boxed<u64>;
    fn push(&self, item: Boxed<u64>) {
        self.0.add(item);
    }
    fn drain(&self, sink: &mut Sink<Boxed<u64>>) -> u64 {
        sink.keep_chain(self.0.take_all())
    }
}

struct Seg(SegQueue<Box<u64>>);
impl Transport for Seg {
    type Item = Box<u64>;
    fn push(&self, item: Box<u64>) {
        self.0.push(item);
    }
    fn drain(&self, sink: &mut Sink<Box<u64>>) -> u64 {
        sink.keep_all(std::iter::from_fn(|| self.0.pop()))
    }
}

struct Array(ArrayQueue<Box<u64>>);
impl Transport for Array {
    type Item = Box<u64>;
    fn push(&self, mut item: Box<u64>) {
        while let Err(back) = self.0.push(item) {
            item = back;
            thread::yield_now();
        }
    }
    fn drain(&self, sink: &mut Sink<Box<u64>>) -> u64 {
        sink.keep_all(std::iter::from_fn(|| self.0.pop()))
    }
}

struct Channel {
    tx: Mutex<Option<mpsc::Sender<Box<u64>>>>,
    rx: Mutex<mpsc::Receiver<Box<u64>>>,
}
thread_local! {
    static SENDER: std::cell::RefCell<Option<mpsc::Sender<Box<u64>>>> = const { std::cell::RefCell::new(None) };
}
impl Transport for Channel {
    type Item = Box<u64>;
    fn push(&self, item: Box<u64>) {
        // Each producer clones the sender once, as a user would.
        SENDER.with(|s| {
            let mut s = s.borrow_mut();
            let tx = s.get_or_insert_with(|| self.tx.lock().unwrap().clone().unwrap());
            tx.send(item).unwrap();
        });
    }
    fn drain(&self, sink: &mut Sink<Box<u64>>) -> u64 {
        let rx = self.rx.lock().unwrap();
        sink.keep_all(std::iter::from_fn(|| rx.try_recv().ok()))
    }
}

struct MutexDeque(Mutex<VecDeque<Box<u64>>>);
thread_local! {
    static LOCAL: std::cell::RefCell<VecDeque<Box<u64>>> = std::cell::RefCell::new(VecDeque::with_capacity(4096));
}
impl Transport for MutexDeque {
    type Item = Box<u64>;
    fn push(&self, item: Box<u64>) {
        self.0.lock().unwrap().push_back(item);
    }
    fn drain(&self, sink: &mut Sink<Box<u64>>) -> u64 {
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            std::mem::swap(&mut *self.0.lock().unwrap(), &mut *local);
            sink.keep_all(local.drain(..))
        })
    }
}

/// Moves `total` items from `producers` threads to one consumer; returns the consumer's time.
fn run<T: Transport>(shared: Arc<T>, producers: usize, total: u64) -> Duration {
    let per = total / producers as u64;
    let total = per * producers as u64;
    let start = Arc::new(Barrier::new(producers + 2));
    let workers: Vec<_> = (0..producers)
        .map(|p| {
            let (shared, start) = (shared.clone(), start.clone());
            // Allocated before the barrier: not timed.
            let items: Vec<T::Item> = (0..per).map(|_| T::Item::make(0)).collect();
            thread::spawn(move || {
                start.wait();
                for (i, mut item) in (p as u64 * per..).zip(items) {
                    item.touch(i);
                    shared.push(item);
                }
                shared.finish();
            })
        })
        .collect();
    let consumer = {
        let (shared, start) = (shared.clone(), start.clone());
        thread::spawn(move || {
            let mut boxes = Vec::with_capacity(total as usize);
            // Touch the peers' sink before the timing: its first-touch page faults are not
            // what is measured (the lists keep their items in a chain and never touch it).
            // SAFETY: writing zeros into the spare capacity of a Vec of pointers; the length
            // stays 0, so nothing reads them as values.
            unsafe {
                core::ptr::write_bytes(boxes.as_mut_ptr(), 0, total as usize);
            }
            let mut sink = Sink {
                boxes,
                nodes: Fifo::new(),
                sum: 0,
            };
            start.wait();
            let t0 = Instant::now();
            let mut got = 0;
            while got < total {
                let n = shared.drain(&mut sink);
                if n == 0 {
                    thread::yield_now();
                }
                got += n;
            }
            let elapsed = t0.elapsed();
            assert_eq!(
                sink.sum,
                total * (total - 1) / 2,
                "lost or duplicated items"
            );
            black_box(&sink.boxes);
            (elapsed, sink)
        })
    };
    start.wait();
    for w in workers {
        w.join().unwrap();
    }
    let (elapsed, sink) = consumer.join().unwrap();
    drop(sink); // freeing happens after the timing
    elapsed
}

/// The criterion entry point.
fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("mpsc_transfer");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(ITEMS));
    for producers in [1usize, 2, 4, 8] {
        g.bench_with_input(
            BenchmarkId::new("defer_list", producers),
            &producers,
            |b, &p| {
                b.iter_custom(|iters| {
                    let q = Arc::new(Defer(DeferList::with_limit(1000).unwrap()));
                    run(q, p, iters * ITEMS)
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("defer_list_batch", producers),
            &producers,
            |b, &p| {
                b.iter_custom(|iters| {
                    let q = Arc::new(DeferBatch(DeferList::with_limit(1000).unwrap()));
                    run(q, p, iters * ITEMS)
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("llist_unbounded", producers),
            &producers,
            |b, &p| b.iter_custom(|iters| run(Arc::new(Unbounded(LList::new())), p, iters * ITEMS)),
        );
        g.bench_with_input(
            BenchmarkId::new("segqueue", producers),
            &producers,
            |b, &p| b.iter_custom(|iters| run(Arc::new(Seg(SegQueue::new())), p, iters * ITEMS)),
        );
        g.bench_with_input(
            BenchmarkId::new("arrayqueue", producers),
            &producers,
            |b, &p| {
                b.iter_custom(|iters| run(Arc::new(Array(ArrayQueue::new(1024))), p, iters * ITEMS))
            },
        );
        g.bench_with_input(BenchmarkId::new("mpsc", producers), &producers, |b, &p| {
            b.iter_custom(|iters| {
                let (tx, rx) = mpsc::channel();
                let q = Channel {
                    tx: Mutex::new(Some(tx)),
                    rx: Mutex::new(rx),
                };
                run(Arc::new(q), p, iters * ITEMS)
            })
        });
        g.bench_with_input(
            BenchmarkId::new("mutex_vecdeque", producers),
            &producers,
            |b, &p| {
                b.iter_custom(|iters| {
                    run(
                        Arc::new(MutexDeque(Mutex::new(VecDeque::new()))),
                        p,
                        iters * ITEMS,
                    )
                })
            },
        );
    }
    g.finish();
}

/// One contender of the interleaved mode: its name, whether it is a peer (else a diagnostic),
/// and one slice of `items` items from `p` producers, returning M items/s.
type Slice = (&'static str, bool, fn(usize, u64) -> f64);

fn rate(d: Duration, items: u64) -> f64 {
    items as f64 / d.as_secs_f64() / 1e6
}

const SLICES: [Slice; 7] = [
    ("defer_list", false, |p, n| {
        rate(
            run(Arc::new(Defer(DeferList::with_limit(1000).unwrap())), p, n),
            n,
        )
    }),
    ("defer_list_batch", false, |p, n| {
        rate(
            run(
                Arc::new(DeferBatch(DeferList::with_limit(1000).unwrap())),
                p,
                n,
            ),
            n,
        )
    }),
    ("llist_unbounded", false, |p, n| {
        rate(run(Arc::new(Unbounded(LList::new())), p, n), n)
    }),
    ("segqueue", true, |p, n| {
        rate(run(Arc::new(Seg(SegQueue::new())), p, n), n)
    }),
    ("arrayqueue", true, |p, n| {
        rate(run(Arc::new(Array(ArrayQueue::new(1024))), p, n), n)
    }),
    ("mpsc", true, |p, n| {
        let (tx, rx) = mpsc::channel();
        let q = Channel {
            tx: Mutex::new(Some(tx)),
            rx: Mutex::new(rx),
        };
        rate(run(Arc::new(q), p, n), n)
    }),
    ("mutex_vecdeque", true, |p, n| {
        rate(
            run(Arc::new(MutexDeque(Mutex::new(VecDeque::new()))), p, n),
            n,
        )
    }),
];

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `DEFER_BENCH_ROUNDS=N`: every contender in every round, in-round ratios.
fn interleaved(rounds: usize) {
    const ITEMS_PER_SLICE: u64 = 2_000_000;
    for p in [1usize, 2, 4, 8] {
        let n = SLICES.len();
        let mut rates = vec![Vec::new(); n];
        for round in 0..rounds {
            for k in 0..n {
                let k = if round % 2 == 1 { n - 1 - k } else { k };
                let i = (k + round) % n;
                rates[i].push((SLICES[i].2)(p, ITEMS_PER_SLICE));
            }
        }
        let best_peer: Vec<f64> = (0..rounds)
            .map(|r| {
                (0..n)
                    .filter(|&i| SLICES[i].1)
                    .map(|i| rates[i][r])
                    .fold(0.0, f64::max)
            })
            .collect();
        let mut line = format!("P={p}");
        for (i, (name, _, _)) in SLICES.iter().enumerate() {
            line += &format!(" {name} {:.1}", median(&mut rates[i].clone()));
        }
        println!("{line}");
        for (i, name) in [(0usize, "defer_list"), (2, "llist_unbounded")] {
            let mut r: Vec<f64> = (0..rounds).map(|k| rates[i][k] / best_peer[k]).collect();
            let (lo, hi) = (
                r.iter().copied().fold(f64::INFINITY, f64::min),
                r.iter().copied().fold(0.0, f64::max),
            );
            println!(
                "P={p} ratio:{name}/best_peer {:.2} ({lo:.2}-{hi:.2}) over {rounds} rounds",
                median(&mut r)
            );
        }
    }
}

criterion_group!(benches, bench);

fn main() {
    if let Some(rounds) = std::env::var("DEFER_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        interleaved(rounds.max(1));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

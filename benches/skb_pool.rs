//! The frame pool against what a Rust user would pick instead, for 2048-byte buffers.
//!
//! Strategies (same run, same work):
//! - `skb_pool`: our [`Pool`], one [`PoolHandle`] per thread (the consumer's batches remote
//!   frees per owner and pushes each batch with one `add_batch`);
//! - `box_system`: `Box<[u8; 2048]>` (uninitialised) from the system allocator (the global one);
//! - `mimalloc`: the same layout through `mimalloc::MiMalloc` called via `GlobalAlloc` directly;
//! - `arrayqueue_pool`: a global pool of 4096 buffers in a `crossbeam_queue::ArrayQueue`;
//! - `mutex_pool`: a global pool of 4096 buffers in a `Mutex<Vec<_>>`.
//!
//! Patterns:
//! - `pipeline/P`: P producers allocate a buffer, write 64 bytes, and hand it through one
//!   bounded `ArrayQueue` of pointers (256 slots, the same for every strategy) to one consumer,
//!   which reads the 64 bytes and frees the buffer. A full or empty queue makes the thread back
//!   off (spin, then yield), as does an exhausted pool.
//! - `local/P`: P threads each allocate 32 buffers, then free them, in a loop (the buffers are
//!   not touched: this measures the allocator alone).
//!
//! Threads start on a `Barrier`; each measurement is timed with `iter_custom` and its CPU time
//! is read with `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`. After criterion's own report, a table
//! gives buffers/s, CPU ns per buffer, and for `skb_pool` the share of remote frees that took
//! the overflow path.
//!
//! Run: `cargo bench --bench skb_pool`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use crossbeam_utils::Backoff;
use llist_defer::{Link, Node};
use mimalloc::MiMalloc;
use skb_pool::{Pool, PoolError, PoolHandle, Skb};

#[global_allocator]
static GLOBAL: System = System;

const BUF: usize = 2048;
const WRITE: usize = 64;
const POOL_FRAMES: usize = 4096;
/// Slots of the producer→consumer queue; `SKB_BENCH_QUEUE` overrides it.
const QUEUE_SLOTS: usize = 256;
const LOCAL_BATCH: usize = 32;
const PRODUCERS: [usize; 4] = [1, 2, 4, 8];

/// One buffer strategy. A buffer travels between threads as a `usize` token.
trait Strategy: Send + Sync + 'static {
    const NAME: &'static str;
    /// Per-thread state (our pool's owner handle; nothing for the others).
    type Local;
    fn local(&self) -> Self::Local;
    /// Allocates a buffer and writes `WRITE` bytes into it.
    fn produce(&self, l: &mut Self::Local, v: u8) -> usize;
    /// Reads the `WRITE` bytes and frees the buffer.
    fn consume(&self, l: &mut Self::Local, token: usize) -> u64;
    /// Allocates a buffer without touching it (the `local` pattern).
    fn alloc(&self, l: &mut Self::Local) -> usize;
    /// Frees a buffer without touching it (the `local` pattern).
    fn free(&self, l: &mut Self::Local, token: usize);
    /// Called while a thread backs off (queue full or empty, pool exhausted): the owner's poll
    /// loop. Only our pool has work here (draining its defer list, pushing its free batches).
    #[inline]
    fn idle(&self, _l: &mut Self::Local) {}
    /// (remote frees, overflows) so far, for strategies that have them.
    fn remote_stats(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// Reads the `WRITE` bytes a producer wrote (a fixed length, so every strategy's read
/// compiles to the same vectorised loop).
#[inline]
fn sum(bytes: &[u8; WRITE]) -> u64 {
    bytes.iter().map(|&b| u64::from(b)).sum()
}

struct SkbPool(Pool);
impl Strategy for SkbPool {
    const NAME: &'static str = "skb_pool";
    type Local = PoolHandle;
    fn local(&self) -> PoolHandle {
        self.0.handle().expect("owner slot")
    }
    #[inline]
    fn produce(&self, h: &mut PoolHandle, v: u8) -> usize {
        let backoff = Backoff::new();
        let mut skb = loop {
            match h.alloc() {
                Ok(s) => break s,
                Err(PoolError::Exhausted) => {
                    h.flush_remote();
                    backoff.snooze();
                }
                Err(e) => panic!("{e}"),
            }
        };
        skb.put(WRITE).expect("fits").fill(v);
        skb.into_link().as_ptr() as usize
    }
    #[inline]
    fn consume(&self, _h: &mut PoolHandle, token: usize) -> u64 {
        // SAFETY: the token came from `into_link` of an Skb, handed over exactly once.
        let skb = unsafe { Skb::from_link(NonNull::new_unchecked(token as *mut Link)) };
        let s = sum(skb.data()[..WRITE].try_into().expect("64 bytes"));
        drop(skb); // local free, or batched remote free through this thread's handle
        s
    }
    #[inline]
    fn alloc(&self, h: &mut PoolHandle) -> usize {
        let backoff = Backoff::new();
        loop {
            match h.alloc() {
                Ok(s) => return s.into_link().as_ptr() as usize,
                Err(_) => {
                    h.flush_remote();
                    backoff.snooze();
                }
            }
        }
    }
    #[inline]
    fn free(&self, _h: &mut PoolHandle, token: usize) {
        // SAFETY: the token came from `into_link` of an Skb, handed over exactly once.
        drop(unsafe { Skb::from_link(NonNull::new_unchecked(token as *mut Link)) });
    }
    #[inline]
    fn idle(&self, h: &mut PoolHandle) {
        h.flush_remote();
        h.flush_frees();
    }
    fn remote_stats(&self) -> (u64, u64) {
        let t = self.0.stats().totals;

        (t.remote_frees, t.overflow)
    }
}

const LAYOUT: Layout = match Layout::from_size_align(BUF, 16) {
    Ok(l) => l,
    Err(_) => panic!("layout"),
};

/// Writes and reads raw buffers the same way for every pointer-based strategy.
#[inline]
fn write_raw(p: *mut u8, v: u8) {
    // SAFETY: `p` is a live buffer of BUF ≥ WRITE bytes owned by the caller.
    unsafe { std::ptr::write_bytes(p, v, WRITE) };
}

#[inline]
fn read_raw(p: *const u8) -> u64 {
    // SAFETY: `p` is a live buffer whose first WRITE bytes were written by the producer.
    sum(unsafe { &*p.cast::<[u8; WRITE]>() })
}

struct BoxSystem;
impl Strategy for BoxSystem {
    const NAME: &'static str = "box_system";
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn alloc(&self, _: &mut ()) -> usize {
        Box::into_raw(Box::<[u8; BUF]>::new_uninit()) as usize
    }
    #[inline]
    fn free(&self, _: &mut (), token: usize) {
        // SAFETY: the token is a `Box<MaybeUninit<[u8; BUF]>>` from `alloc`, freed once.
        drop(unsafe { Box::from_raw(token as *mut std::mem::MaybeUninit<[u8; BUF]>) });
    }
    #[inline]
    fn produce(&self, _: &mut (), v: u8) -> usize {
        let mut b = Box::<[u8; BUF]>::new_uninit();
        write_raw(b.as_mut_ptr().cast(), v);
        Box::into_raw(b) as usize
    }
    #[inline]
    fn consume(&self, _: &mut (), token: usize) -> u64 {
        let s = read_raw(token as *const u8);
        // SAFETY: the token is a `Box<MaybeUninit<[u8; BUF]>>` from `produce`, freed once.
        drop(unsafe { Box::from_raw(token as *mut std::mem::MaybeUninit<[u8; BUF]>) });
        s
    }
}

struct Mimalloc;
impl Strategy for Mimalloc {
    const NAME: &'static str = "mimalloc";
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn alloc(&self, _: &mut ()) -> usize {
        // SAFETY: LAYOUT has a non-zero size.
        let p = unsafe { GlobalAlloc::alloc(&MiMalloc, LAYOUT) };
        assert!(!p.is_null());
        p as usize
    }
    #[inline]
    fn free(&self, _: &mut (), token: usize) {
        // SAFETY: allocated by MiMalloc with LAYOUT in `alloc`, freed once.
        unsafe { GlobalAlloc::dealloc(&MiMalloc, token as *mut u8, LAYOUT) };
    }
    #[inline]
    fn produce(&self, _: &mut (), v: u8) -> usize {
        // SAFETY: LAYOUT has a non-zero size.
        let p = unsafe { GlobalAlloc::alloc(&MiMalloc, LAYOUT) };
        assert!(!p.is_null());
        write_raw(p, v);
        p as usize
    }
    #[inline]
    fn consume(&self, _: &mut (), token: usize) -> u64 {
        let s = read_raw(token as *const u8);
        // SAFETY: allocated by MiMalloc with LAYOUT in `produce`, freed once.
        unsafe { GlobalAlloc::dealloc(&MiMalloc, token as *mut u8, LAYOUT) };
        s
    }
}

/// Backing memory for the two shared pools.
struct Slab(*mut u8);
// SAFETY: plain memory; which buffer a thread may touch is decided by the pool structure.
unsafe impl Send for Slab {}
// SAFETY: as above.
unsafe impl Sync for Slab {}
impl Slab {
    fn new() -> Slab {
        // SAFETY: non-zero size.
        Slab(unsafe {
            std::alloc::alloc(Layout::from_size_align(BUF * POOL_FRAMES, 4096).unwrap())
        })
    }
    fn bufs(&self) -> impl Iterator<Item = usize> + '_ {
        (0..POOL_FRAMES).map(|i| self.0 as usize + i * BUF)
    }
}

struct ArrayQueuePool(ArrayQueue<usize>, #[allow(dead_code)] Slab);
impl Strategy for ArrayQueuePool {
    const NAME: &'static str = "arrayqueue_pool";
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn alloc(&self, _: &mut ()) -> usize {
        let backoff = Backoff::new();
        loop {
            match self.0.pop() {
                Some(p) => return p,
                None => backoff.snooze(),
            }
        }
    }
    #[inline]
    fn free(&self, _: &mut (), token: usize) {
        self.0.push(token).expect("pool never overfills");
    }
    #[inline]
    fn produce(&self, _: &mut (), v: u8) -> usize {
        let backoff = Backoff::new();
        let p = loop {
            match self.0.pop() {
                Some(p) => break p,
                None => backoff.snooze(),
            }
        };
        write_raw(p as *mut u8, v);
        p
    }
    #[inline]
    fn consume(&self, _: &mut (), token: usize) -> u64 {
        let s = read_raw(token as *const u8);
        self.0.push(token).expect("pool never overfills");
        s
    }
}

struct MutexPool(Mutex<Vec<usize>>, #[allow(dead_code)] Slab);
impl Strategy for MutexPool {
    const NAME: &'static str = "mutex_pool";
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn alloc(&self, _: &mut ()) -> usize {
        let backoff = Backoff::new();
        loop {
            if let Some(p) = self.0.lock().unwrap().pop() {
                return p;
            }
            backoff.snooze();
        }
    }
    #[inline]
    fn free(&self, _: &mut (), token: usize) {
        self.0.lock().unwrap().push(token);
    }
    #[inline]
    fn produce(&self, _: &mut (), v: u8) -> usize {
        let backoff = Backoff::new();
        let p = loop {
            if let Some(p) = self.0.lock().unwrap().pop() {
                break p;
            }
            backoff.snooze();
        };
        write_raw(p as *mut u8, v);
        p
    }
    #[inline]
    fn consume(&self, _: &mut (), token: usize) -> u64 {
        let s = read_raw(token as *const u8);
        self.0.lock().unwrap().push(token);
        s
    }
}

/// CPU time of the whole process.
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[derive(Default, Clone, Copy)]
struct Acc {
    wall: Duration,
    cpu: Duration,
    buffers: u64,
    remote: u64,
    overflow: u64,
}

type Table = Mutex<BTreeMap<(&'static str, usize, &'static str), Acc>>;
static TABLE: Table = Mutex::new(BTreeMap::new());

fn record(
    pattern: &'static str,
    p: usize,
    name: &'static str,
    wall: Duration,
    cpu: Duration,
    n: u64,
    ro: (u64, u64),
) {
    let mut t = TABLE.lock().unwrap();
    let a = t.entry((pattern, p, name)).or_default();
    a.wall += wall;
    a.cpu += cpu;
    a.buffers += n;
    a.remote += ro.0;
    a.overflow += ro.1;
}

fn run_pipeline<S: Strategy>(s: &Arc<S>, p: usize, iters: u64) -> Duration {
    let per = iters.div_ceil(p as u64).max(1);
    let total = per * p as u64;
    let slots = std::env::var("SKB_BENCH_QUEUE")
        .ok()
        .and_then(|v| v.parse().ok());
    let queue = Arc::new(ArrayQueue::<usize>::new(slots.unwrap_or(QUEUE_SLOTS)));
    let start = Arc::new(Barrier::new(p + 2));
    let before = s.remote_stats();
    let mut threads = Vec::with_capacity(p + 1);
    for _ in 0..p {
        let (s, queue, start) = (s.clone(), queue.clone(), start.clone());
        threads.push(thread::spawn(move || {
            let mut l = s.local();
            start.wait();
            for i in 0..per {
                let mut tok = s.produce(&mut l, i as u8);
                let backoff = Backoff::new();
                while let Err(t) = queue.push(tok) {
                    tok = t;
                    s.idle(&mut l);
                    backoff.snooze();
                }
            }
            drop(l);
            0
        }));
    }
    {
        let (s, queue, start) = (s.clone(), queue.clone(), start.clone());
        threads.push(thread::spawn(move || {
            let mut l = s.local();
            start.wait();
            let (mut n, mut acc) = (0, 0);
            let backoff = Backoff::new();
            while n < total {
                match queue.pop() {
                    Some(tok) => {
                        acc += s.consume(&mut l, tok);
                        n += 1;
                        backoff.reset();
                    }
                    None => {
                        s.idle(&mut l);
                        backoff.snooze();
                    }
                }
            }
            drop(l);
            acc
        }));
    }
    start.wait();
    let (t0, c0) = (Instant::now(), cpu_now());
    for t in threads {
        black_box(t.join().unwrap());
    }
    let (wall, cpu) = (t0.elapsed(), cpu_now() - c0);
    let after = s.remote_stats();
    record(
        "pipeline",
        p,
        S::NAME,
        wall,
        cpu,
        total,
        (after.0 - before.0, after.1 - before.1),
    );
    wall
}

fn run_local<S: Strategy>(s: &Arc<S>, p: usize, iters: u64) -> Duration {
    let rounds = iters.div_ceil((p * LOCAL_BATCH) as u64).max(1);
    let total = rounds * (p * LOCAL_BATCH) as u64;
    let start = Arc::new(Barrier::new(p + 1));
    let threads: Vec<_> = (0..p)
        .map(|_| {
            let (s, start) = (s.clone(), start.clone());
            thread::spawn(move || {
                let mut l = s.local();
                let mut toks = [0usize; LOCAL_BATCH];
                let mut acc = 0;
                start.wait();
                for _ in 0..rounds {
                    // black_box each token, so the compiler cannot pair and elide an
                    // allocation with its free (it does for the global allocator otherwise).
                    for t in toks.iter_mut() {
                        *t = black_box(s.alloc(&mut l));
                    }
                    acc ^= toks[LOCAL_BATCH - 1];
                    for &t in &toks {
                        s.free(&mut l, black_box(t));
                    }
                }
                drop(l);
                acc
            })
        })
        .collect();
    start.wait();
    let (t0, c0) = (Instant::now(), cpu_now());
    for t in threads {
        black_box(t.join().unwrap());
    }
    let (wall, cpu) = (t0.elapsed(), cpu_now() - c0);
    record("local", p, S::NAME, wall, cpu, total, (0, 0));
    wall
}

fn bench_strategy<S: Strategy>(c: &mut Criterion, pattern: &'static str, s: Arc<S>) {
    let mut g = c.benchmark_group(format!("skb_pool/{pattern}"));
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    for p in PRODUCERS {
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::new(S::NAME, p), &p, |b, &p| {
            b.iter_custom(|iters| match pattern {
                "pipeline" => run_pipeline(&s, p, iters),
                _ => run_local(&s, p, iters),
            })
        });
    }
    g.finish();
}

fn all(c: &mut Criterion, pattern: &'static str) {
    let pool = Pool::builder()
        .frame_count(POOL_FRAMES)
        .frame_size(BUF)
        .max_owners(16)
        .build();
    bench_strategy(c, pattern, Arc::new(SkbPool(pool.expect("pool"))));
    bench_strategy(c, pattern, Arc::new(BoxSystem));
    bench_strategy(c, pattern, Arc::new(Mimalloc));
    let slab = Slab::new();
    let q = ArrayQueue::new(POOL_FRAMES);
    for b in slab.bufs() {
        q.push(b).unwrap();
    }
    bench_strategy(c, pattern, Arc::new(ArrayQueuePool(q, slab)));
    let slab = Slab::new();
    let v = Mutex::new(slab.bufs().collect());
    bench_strategy(c, pattern, Arc::new(MutexPool(v, slab)));
}

fn print_table() {
    let t = TABLE.lock().unwrap();
    println!();
    println!("| pattern | P | strategy | Mbuf/s | CPU ns/buf | vs mimalloc | overflow share |");
    println!("|---|---|---|---|---|---|---|");
    for (&(pattern, p, name), a) in t.iter() {
        let rate = a.buffers as f64 / a.wall.as_secs_f64() / 1e6;
        let cpu = a.cpu.as_nanos() as f64 / a.buffers as f64;
        let mi = t
            .get(&(pattern, p, "mimalloc"))
            .map(|m| m.buffers as f64 / m.wall.as_secs_f64() / 1e6);
        let vs = mi.map_or(String::from("-"), |m| format!("{:.2}x", rate / m));
        let ovf = if name == "skb_pool" && pattern == "pipeline" {
            format!(
                "{:.3}% ({} of {})",
                100.0 * a.overflow as f64 / a.remote.max(1) as f64,
                a.overflow,
                a.remote
            )
        } else {
            String::from("-")
        };
        println!("| {pattern} | {p} | {name} | {rate:.2} | {cpu:.1} | {vs} | {ovf} |");
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    all(&mut c, "pipeline");
    all(&mut c, "local");
    c.final_summary();
    print_table();
}

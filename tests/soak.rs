//! Soak: everything that can go wrong, at once, for a while. Duration from `LOCKLESS_SOAK_SECS`
//! (default 5 s; CI runs 60 s, the README shows 10 minutes).
//!
//! 16 producers (on however few cores there are) send to three queues, one per strategy, each
//! over a `Box<dyn Qdisc<Skb>>` that starts as `fq` and whose packets spread over 1000 flows.
//! The driver randomly takes part of a batch, or answers busy and stays stopped until a "NIC"
//! thread wakes it. A chaos thread replaces qdiscs at random (fq, pfifo, pfifo_fast) and
//! deactivates and reactivates queues. Producers drop their pool handles and register new ones
//! as they go. At the end the conservation law holds exactly per queue (offered = sent +
//! dropped by reason), every frame is back in the pool, and resident memory after warm-up grew
//! by less than 1 %.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use llist_defer::Fifo;
use qdisc::{
    Driver, DropReason, FqBuilder, Pfifo, PfifoFast, Qdisc, Strategy, ToFree, TxQueue, TxResult,
};
use skb_pool::{Pool, PoolError, PoolHandle, Skb};

/// Counts live heap bytes, so a leak shows apart from allocator fragmentation in RSS.
struct Counting;

static LIVE: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded as is; `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as u64, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded as is; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const PRODUCERS: usize = 16;
const FLOWS: u32 = 1000;
const FRAMES: usize = 16_384;

fn secs() -> u64 {
    std::env::var("LOCKLESS_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The link the driver writes to: shared with the NIC thread that wakes it.
#[derive(Default)]
struct Link {
    stopped: AtomicBool,
    sent: AtomicU64,
}

struct FlakyDriver {
    link: Arc<Link>,
    rng: Rng,
}

impl Driver<Skb> for FlakyDriver {
    fn xmit(&mut self, batch: &mut Fifo<Skb>, _: &mut ToFree<Skb>) -> TxResult {
        let r = self.rng.below(16);
        if r == 0 {
            // Ring full: stopped until the NIC thread wakes us.
            self.link.stopped.store(true, Ordering::Release);
            return TxResult {
                sent: 0,
                stopped: true,
            };
        }
        let take = if r < 4 {
            self.rng.below(batch.len() as u64 + 1) as usize
        } else {
            batch.len()
        };
        for _ in 0..take {
            drop(batch.pop_front()); // on the wire; the frame goes home
        }
        self.link.sent.fetch_add(take as u64, Ordering::Relaxed);
        TxResult {
            sent: take,
            stopped: take < batch.len() + take && r == 1,
        }
    }

    fn is_stopped(&self) -> bool {
        self.link.stopped.load(Ordering::Acquire)
    }
}

type Txq = TxQueue<Skb, Box<dyn Qdisc<Skb>>, FlakyDriver>;

fn fq() -> Box<dyn Qdisc<Skb>> {
    Box::new(FqBuilder::new().build::<Skb>().unwrap())
}

fn random_qdisc(rng: &mut Rng) -> Box<dyn Qdisc<Skb>> {
    match rng.below(4) {
        0 | 1 => fq(),
        2 => Box::new(Pfifo::new()),
        _ => Box::new(PfifoFast::new()),
    }
}

/// Resident set size in bytes (`/proc/self/statm`, second field, pages), after asking glibc to
/// give its free lists back to the kernel: memory the allocator keeps cached but unused is not
/// growth of ours, and trimming first makes RSS measure what is in use plus real fragmentation.
fn rss() -> u64 {
    // SAFETY: malloc_trim only returns free heap pages to the kernel; it is thread-safe.
    unsafe { libc::malloc_trim(0) };
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    pages * page
}

fn alloc(h: &mut PoolHandle) -> Skb {
    loop {
        match h.alloc() {
            Ok(skb) => return skb,
            Err(PoolError::Exhausted) => {
                h.flush_frees();
                if !h.flush_remote() {
                    thread::yield_now();
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn soak() {
    // One malloc arena: glibc's per-thread arenas (up to 8 per core) keep growing slowly as
    // frees land in other threads' arenas, which reads as RSS creep with a flat live heap.
    // SAFETY: mallopt only tunes the allocator; called before the test's threads start.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    let duration = Duration::from_secs(secs());
    let warmup = (duration / 5)
        .max(Duration::from_secs(1))
        .min(Duration::from_secs(30));
    let pool = Pool::builder()
        .frame_count(FRAMES)
        .max_owners(64)
        // Touch the whole region up front: frames first used late would read as growth.
        .populate(true)
        .build()
        .unwrap();
    let heap_before = LIVE.load(Ordering::Relaxed);
    let links: Vec<Arc<Link>> = (0..3).map(|_| Arc::new(Link::default())).collect();
    let queues: Arc<Vec<Txq>> = Arc::new(
        [Strategy::BusyLock, Strategy::DeferList, Strategy::NoLock]
            .into_iter()
            .zip(&links)
            .enumerate()
            .map(|(i, (s, link))| {
                TxQueue::builder()
                    .strategy(s)
                    .build(
                        fq(),
                        FlakyDriver {
                            link: link.clone(),
                            rng: Rng(0x9e37_79b9 + i as u64),
                        },
                    )
                    .unwrap()
            })
            .collect(),
    );
    let offered: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(PRODUCERS + 3));

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (pool, queues, offered, stop, start) = (
                pool.clone(),
                queues.clone(),
                offered.clone(),
                stop.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (p as u64 + 1) << 17);
                let mut h = Some(pool.handle().unwrap());
                start.wait();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Owners come and go.
                    if rng.below(20_000) == 0 {
                        drop(h.take());
                        h = Some(pool.handle().unwrap());
                    }
                    let skb = {
                        let h = h.as_mut().unwrap();
                        let mut skb = alloc(h);
                        let len = 60 + rng.below(200) as usize;
                        skb.put(len).unwrap()[..8].copy_from_slice(&i.to_le_bytes());
                        skb.set_flow_hash(rng.below(u64::from(FLOWS)) as u32);
                        skb.set_priority(rng.below(8) as u32);
                        skb
                    };
                    let q = (i % 3) as usize;
                    offered[q].fetch_add(1, Ordering::Relaxed);
                    queues[q].xmit(skb);
                    i += 1;
                }
            })
        })
        .collect();

    // The NIC: wakes a stopped driver (its completion interrupt), paced.
    let nic = {
        let (queues, links, stop, start) =
            (queues.clone(), links.clone(), stop.clone(), start.clone());
        thread::spawn(move || {
            start.wait();
            while !stop.load(Ordering::Relaxed) {
                for (q, link) in queues.iter().zip(&links) {
                    if link.stopped.swap(false, Ordering::AcqRel) {
                        q.wake();
                    }
                }
                thread::sleep(Duration::from_micros(200));
            }
        })
    };

    // Chaos: qdisc replacement, deactivation and activation.
    let chaos = {
        let (queues, stop, start) = (queues.clone(), stop.clone(), start.clone());
        thread::spawn(move || {
            let mut rng = Rng(0xdead_beef);
            let (mut replaced, mut deactivated) = (0u64, 0u64);
            start.wait();
            while !stop.load(Ordering::Relaxed) {
                let q = &queues[rng.below(3) as usize];
                if rng.below(3) == 0 {
                    q.deactivate();
                    deactivated += 1;
                    thread::sleep(Duration::from_micros(rng.below(500)));
                    q.activate();
                } else {
                    drop(q.replace_qdisc(random_qdisc(&mut rng)));
                    replaced += 1;
                }
                thread::sleep(Duration::from_millis(1 + rng.below(5)));
            }
            (replaced, deactivated)
        })
    };

    start.wait();
    let t0 = Instant::now();
    // Sample RSS as the run goes (the sleeps only pace the samples).
    let mut samples = Vec::new();
    while t0.elapsed() < duration {
        thread::sleep(Duration::from_millis(250).min(duration.saturating_sub(t0.elapsed())));
        samples.push((t0.elapsed(), rss(), LIVE.load(Ordering::Relaxed)));
    }
    let rss_warm = samples
        .iter()
        .filter(|(t, ..)| *t <= warmup)
        .map(|&(_, r, _)| r)
        .max()
        .unwrap_or(samples[0].1);
    let rss_end = samples.last().unwrap().1;
    eprintln!(
        "samples (s, RSS KiB, live heap KiB): {:?}",
        samples
            .iter()
            .step_by(4)
            .map(|(t, r, h)| (t.as_secs(), *r >> 10, *h >> 10))
            .collect::<Vec<_>>()
    );
    stop.store(true, Ordering::Relaxed);
    for t in producers {
        t.join().unwrap();
    }
    nic.join().unwrap();
    let (replaced, deactivated) = chaos.join().unwrap();

    // Drain: the driver has room, every queue runs dry.
    for (q, link) in queues.iter().zip(&links) {
        q.activate();
        loop {
            link.stopped.store(false, Ordering::Release);
            if !q.wake() && q.defer_list_is_empty() {
                break;
            }
        }
    }
    let mut total = 0;
    for (i, (q, link)) in queues.iter().zip(&links).enumerate() {
        let s = q.stats();
        let off = offered[i].load(Ordering::Relaxed);
        total += off;
        eprintln!("soak {}: offered {off}\n{s}", q.strategy());
        assert_eq!(q.backlog(), 0, "{}", q.strategy());
        assert_eq!(
            s.sent,
            link.sent.load(Ordering::Relaxed),
            "{}",
            q.strategy()
        );
        assert_eq!(
            off,
            s.sent + s.dropped(),
            "{}: conservation: offered = sent + dropped by reason: {s}",
            q.strategy()
        );
        assert!(s.sent > 0, "{}", q.strategy());
        assert_eq!(s.drops_for(DropReason::Panic), 0, "{}", q.strategy());
    }
    drop(queues);
    drop(links);
    drop(offered);
    let heap_after = LIVE.load(Ordering::Relaxed);
    let ps = pool.stats();
    assert_eq!(ps.in_use, 0, "{ps:?}");
    assert_eq!(ps.free, FRAMES, "every frame back in the pool: {ps:?}");
    assert!(replaced > 0 && deactivated > 0, "{replaced} {deactivated}");
    let growth = rss_end as f64 / rss_warm as f64 - 1.0;
    eprintln!(
        "soak: {total} packets in {duration:?}, {replaced} qdisc replacements, {deactivated} \
         deactivations, RSS {rss_warm} -> {rss_end} bytes ({:+.3} %), live heap {heap_before} -> \
         {heap_after} bytes",
        growth * 100.0
    );
    // A leak shows in the live heap: once the queues are gone it is back where it started.
    assert!(
        heap_after <= heap_before + 64 * 1024,
        "live heap {heap_before} -> {heap_after} bytes: something leaked"
    );
    let max_pct: f64 = std::env::var("LOCKLESS_SOAK_RSS_PCT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    assert!(
        growth * 100.0 < max_pct,
        "RSS grew by {:.3} % after warm-up ({rss_warm} -> {rss_end}), limit {max_pct} %",
        growth * 100.0
    );
}

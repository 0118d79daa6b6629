//! rseq under fire: threads that migrate between CPUs on every iteration
//! (`sched_setaffinity`) and take a timer signal every 20 µs while they allocate from and
//! free to the per-CPU caches, more threads than CPUs, with a quarter of the frames freed by
//! another thread. Asserts conservation — no frame held twice at once (an atomic "held" flag
//! per frame and a tag in its bytes), every frame back and reachable, each exactly once, at the
//! end — and, for `PerCpu::Rseq`, that the kernel did abort critical sections (counted by the
//! pool), in a second run the bulk sections (`Pool::alloc_bulk`, `Pool::free_bulk`) too; a
//! third run sorts every refill (`RefillOrder::Address`). In a fourth, one more thread drains the
//! pool again and again while the others run, so that its allocations take frames from the
//! caches of CPUs where the others are inside their sections (asserted: takings happened).
//! Bounded by iteration counts, never by wall time.
//!
//! Also run it with glibc's rseq registration off, so the crate registers its own areas:
//! `GLIBC_TUNABLES=glibc.pthread.rseq=0 cargo test -p skb-pool --test rseq_fire`, and under
//! ASan (see `.ci/run`). `SKB_FIRE_ITERS` sets the iterations per thread (default 20000).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};

use skb_pool::{PerCpu, Pool, RefillOrder, Skb};

const FRAMES: usize = 1024;
const THREADS: usize = 6;
const BURST: usize = 8;

static SIGNALS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_alarm(_: libc::c_int) {
    SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// A 20 µs interval timer whose SIGALRM lands on whichever thread of ours is running.
struct Timer;

impl Timer {
    fn start() -> Timer {
        // SAFETY: installing a handler that only does an atomic add (async-signal-safe), with
        // SA_RESTART so interrupted syscalls of the test harness resume.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_alarm as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            assert_eq!(libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut()), 0);
            let every = libc::timeval {
                tv_sec: 0,
                tv_usec: 20,
            };
            let it = libc::itimerval {
                it_interval: every,
                it_value: every,
            };
            assert_eq!(
                libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut()),
                0
            );
        }
        Timer
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: disarming the timer (a zero itimerval); the handler stays installed, harmless.
        unsafe {
            let it: libc::itimerval = std::mem::zeroed();
            libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut());
        }
    }
}

fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed set, filled by sched_getaffinity for the calling thread.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(rc, 0);
    // SAFETY: reading bits of an initialised set.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

fn pin(cpu: usize) {
    // SAFETY: an empty set with one bit set; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

fn iters() -> usize {
    std::env::var("SKB_FIRE_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

struct Shared {
    held: Vec<AtomicBool>,
    exchange: Mutex<Vec<Skb>>,
}

impl Shared {
    fn take(&self, skb: &mut Skb, tag: u8) {
        let was = self.held[skb.frame_index() as usize].swap(true, Ordering::AcqRel);
        assert!(!was, "frame {} handed out while held", skb.frame_index());
        skb.put(16).unwrap().fill(tag);
    }

    /// Checks the frame's tag and marks it no longer held; the caller frees it.
    fn release(&self, skb: &Skb, tag: u8) {
        assert!(
            skb.data().iter().all(|&b| b == tag),
            "frame {} written by another holder",
            skb.frame_index()
        );
        self.held[skb.frame_index() as usize].store(false, Ordering::Release);
    }

    fn give_back(&self, skb: Skb, tag: u8) {
        self.release(&skb, tag);
        drop(skb);
    }
}

/// One thread's loop; with `bulk`, frames come from `Pool::alloc_bulk` and go back through
/// `Pool::free_bulk` (the bulk critical sections), else one by one. With `drained` (a thread
/// drains the pool meanwhile), an allocation may find it exhausted.
fn worker(
    pool: &Pool,
    sh: &Shared,
    me: usize,
    cpus: &[usize],
    n: usize,
    bulk: bool,
    drained: bool,
) {
    let tag = me as u8 + 1;
    let mut mine: Vec<Skb> = Vec::with_capacity(BURST);
    let mut step = me;
    for i in 0..n {
        step += 1;
        pin(cpus[step % cpus.len()]);
        let want = 1 + (i + me) % BURST;
        if bulk {
            let got = pool.alloc_bulk(want, &mut mine);
            assert!(
                got == want || drained,
                "exhausted with at most {} frames held",
                THREADS * BURST * 2
            );
            for skb in &mut mine {
                sh.take(skb, tag);
            }
        }
        for _ in 0..if bulk { 0 } else { want } {
            match pool.alloc() {
                Ok(mut skb) => {
                    sh.take(&mut skb, tag);
                    mine.push(skb);
                }
                Err(_) if drained => break,
                Err(e) => panic!(
                    "exhausted with at most {} frames held: {e}",
                    THREADS * BURST * 2
                ),
            }
        }
        // Every fourth frame goes to another thread to free.
        if i % 4 == 0 {
            if let Some(skb) = mine.pop() {
                sh.held[skb.frame_index() as usize].store(false, Ordering::Release);
                let mut ex = sh.exchange.lock().unwrap();
                if ex.len() < BURST {
                    ex.push(skb);
                } else {
                    drop(skb);
                }
            }
        }
        let theirs = sh.exchange.lock().unwrap().pop();
        drop(theirs);
        if bulk {
            for skb in &mine {
                sh.release(skb, tag);
            }
            pool.free_bulk(mine.drain(..));
        }
        while let Some(skb) = mine.pop() {
            sh.give_back(skb, tag);
        }
    }
}

/// The draining thread: until the workers are done, allocates from one CPU after another until
/// the pool is exhausted (taking frames from the other CPUs' caches on the way), then frees
/// everything.
fn drainer(pool: &Pool, sh: &Shared, cpus: &[usize], done: &AtomicUsize) {
    let tag = THREADS as u8 + 1;
    let mut mine: Vec<Skb> = Vec::with_capacity(FRAMES);
    let mut step = 0;
    while done.load(Ordering::Acquire) < THREADS {
        step += 1;
        pin(cpus[step % cpus.len()]);
        while let Ok(mut skb) = pool.alloc() {
            sh.take(&mut skb, tag);
            mine.push(skb);
        }
        while let Some(skb) = mine.pop() {
            sh.give_back(skb, tag);
        }
    }
}

fn fire(mode: PerCpu, bulk: bool, order: RefillOrder, drained: bool) {
    let pool = Pool::builder()
        .frame_count(FRAMES)
        .cache_max(32)
        .defer_max(32)
        .per_cpu(mode)
        .refill_order(order)
        .build()
        .unwrap();
    assert_eq!(pool.per_cpu(), mode);
    let cpus = allowed_cpus();
    let sh = Shared {
        held: (0..FRAMES).map(|_| AtomicBool::new(false)).collect(),
        exchange: Mutex::new(Vec::new()),
    };
    let n = iters();
    let signals0 = SIGNALS.load(Ordering::Relaxed);
    let timer = Timer::start();
    // Rounds of `n` iterations until an abort was seen (Rseq), at most 20 rounds.
    for _round in 0..20 {
        let start = Barrier::new(THREADS);
        let done = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for me in 0..THREADS {
                let (pool, sh, cpus, start, done) = (&pool, &sh, &cpus, &start, &done);
                s.spawn(move || {
                    start.wait();
                    worker(pool, sh, me, cpus, n, bulk, drained);
                    done.fetch_add(1, Ordering::Release);
                });
            }
            if drained {
                s.spawn(|| drainer(&pool, &sh, &cpus, &done));
            }
        });
        let st = pool.per_cpu_stats();
        let aborted = st.aborts > 0 && (!bulk || st.bulk_aborts > 0);
        let took = !drained || cpus.len() < 2 || st.cache_takings > 0;
        if (mode != PerCpu::Rseq || aborted) && took {
            break;
        }
    }
    drop(timer);
    drop(sh.exchange.lock().unwrap().drain(..));
    let st = pool.per_cpu_stats();
    eprintln!(
        "{mode:?} (bulk {bulk}, {order:?} order, drained {drained}): {} signals, {} aborts ({} in \
         bulk sections), {} shared-path operations, {} cache takings, {:?}",
        SIGNALS.load(Ordering::Relaxed) - signals0,
        st.aborts,
        st.bulk_aborts,
        st.shared_path,
        st.cache_takings,
        st.cpus
    );
    if mode == PerCpu::Rseq {
        assert!(
            st.aborts > 0,
            "no rseq abort in 20 rounds of {n} iterations × {THREADS} threads"
        );
        if bulk {
            assert!(
                st.bulk_aborts > 0,
                "no bulk-section abort in 20 rounds of {n} iterations × {THREADS} threads"
            );
        }
    }
    if drained && cpus.len() >= 2 {
        assert!(
            st.cache_takings > 0,
            "no frame taken from another CPU's cache in 20 rounds of {n} iterations"
        );
    }
    assert!(
        SIGNALS.load(Ordering::Relaxed) > signals0,
        "the timer signal never fired"
    );
    let stats = pool.stats();
    assert_eq!((stats.free, stats.outstanding()), (FRAMES, 0), "{stats:?}");
    // Every frame reachable from one CPU, each once: other CPUs' caches by takings, frames
    // waiting in outgoing stacks by a stack taking (at most one a millisecond).
    let mut all = Vec::with_capacity(FRAMES);
    std::thread::scope(|s| {
        s.spawn(|| {
            pin(cpus[0]);
            // Each frame within 5 s (a generous bound, not a synchronization: the frames are
            // all free already), then none more.
            for _ in 0..FRAMES {
                match pool.alloc_wait(std::time::Duration::from_secs(5)) {
                    Ok(skb) => all.push(skb),
                    Err(e) => panic!("{} of {FRAMES} frames reached: {e}", all.len()),
                }
            }
            assert!(pool.alloc().is_err(), "a frame handed out twice");
        });
    });
    let mut idx: Vec<u32> = all.iter().map(Skb::frame_index).collect();
    idx.sort_unstable();
    idx.dedup();
    assert_eq!(
        (all.len(), idx.len()),
        (FRAMES, FRAMES),
        "a frame lost or handed out twice"
    );
}

/// One test, so the timer and the affinity changes do not meet other tests of this binary.
#[test]
fn per_cpu_caches_conserve_frames_under_migration_and_signals() {
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if tunables.contains("glibc.pthread.rseq=0") {
        // The run that exercises our own per-thread registration.
        assert!(
            !skb_pool::rseq::registered_by_glibc(),
            "glibc registered rseq despite {tunables}"
        );
    }
    eprintln!(
        "rseq areas registered by glibc: {}",
        skb_pool::rseq::registered_by_glibc()
    );
    if skb_pool::rseq::SUPPORTED {
        fire(PerCpu::Rseq, false, RefillOrder::Freed, false);
        fire(PerCpu::Rseq, true, RefillOrder::Freed, false);
        fire(PerCpu::Rseq, false, RefillOrder::Address, false);
        fire(PerCpu::Rseq, true, RefillOrder::Freed, true);
    }
    fire(PerCpu::Locked, false, RefillOrder::Freed, false);
    fire(PerCpu::Locked, true, RefillOrder::Freed, false);
    fire(PerCpu::Locked, true, RefillOrder::Address, false);
    fire(PerCpu::Locked, false, RefillOrder::Freed, true);
}

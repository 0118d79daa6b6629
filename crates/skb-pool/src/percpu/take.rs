//! Cache takings: a refill that found every other source dry takes half of another CPU's cache,
//! holding it as its own CPU would (the try-lock of a locked pool; the flag byte and a targeted
//! `membarrier` restart in an rseq pool), and an rseq allocation that finds its own cache held
//! waits for the taking to end.
//!
//! This file must not touch the defer lists, the depot or the outgoing stacks (`refill.rs`).

use llist_defer::Fifo;

use super::hands::Look;
use super::{CpuCache, PerCpu, PerCpuState};
use crate::meta::Frame;
use crate::outstack::TAKING;
use crate::sync::{Ordering, thread};

/// Most caches one taking tries (each a try-lock, or a flag and a restart) before it gives up.
const TAKE_TRIES: usize = 8;

impl PerCpuState {
    /// Takes half the frames (rounded up) of the fullest cache of a CPU other than `here` that
    /// it can hold (fullest first, by their counts as read; at most [`TAKE_TRIES`] caches), for
    /// a refill that found every
    /// other source dry: the frames a CPU's cache holds are otherwise handed out only on that
    /// CPU, and a CPU nobody runs on any more would keep them for good. The oldest half goes
    /// (the bottom of the stack: the frames that CPU would hand out last, and the coldest
    /// there). The frames carry no references (those went to the cache's share when they were
    /// freed, and stay there). A cache is skipped while it is held: by its try-lock (locked
    /// pools), or by its flag, for another taker or the pool's freeze (rseq pools).
    ///
    /// An rseq pool's cache is written without a lock, by sections that run only on its CPU: the
    /// taker sets the cache's flag, which every section checks at its start, then restarts the
    /// sections running on that CPU (`membarrier`; a section whose thread is not running there
    /// restarts when it next runs), so that no section commits on the cache until the flag is
    /// cleared, and the word and items are the taker's to read and rewrite. The restart costs an
    /// interrupt to that CPU if a thread of the process runs there (to every such CPU where the
    /// kernel cannot target one), and each taking brings half a cache.
    ///
    /// A cache that held frames but could not be held is noted in `look`.
    #[cold]
    #[inline(never)]
    pub(super) fn take_cached(&self, here: usize, look: &mut Look) -> Fifo<Frame> {
        let mut taken = Fifo::new();
        // Fullest first without a list on the heap (this runs in the allocator's slow path):
        // each pass reads the counts and tries the fullest cache not tried yet, for at most
        // `TAKE_TRIES` caches (all held at once: the allocation fails, and a retry looks again).
        let mut tried = [usize::MAX; TAKE_TRIES];
        for t in 0..TAKE_TRIES {
            let fullest = (0..self.caches.len())
                .filter(|&cpu| cpu != here && !tried[..t].contains(&cpu))
                .map(|cpu| (self.cached(cpu), cpu))
                .filter(|&(n, _)| n > 0)
                .max();
            let Some((_, cpu)) = fullest else { break };
            if !self.take_from(cpu, &mut taken) {
                look.skipped = true;
            }
            if !taken.is_empty() {
                self.counters_at(here).takings.add(1);
                break;
            }
            tried[t] = cpu;
        }
        taken
    }

    /// Takes half of CPU `cpu`'s cache into `out` if it can hold the cache (see
    /// [`take_cached`](Self::take_cached)); `false` if another thread held it (a taker, a
    /// section or the freeze; or the restart failed).
    pub(super) fn take_from(&self, cpu: usize, out: &mut Fifo<Frame>) -> bool {
        let c = &self.caches[cpu];
        match self.mode {
            PerCpu::Rseq => {
                // The flag before the restart's barrier (SeqCst); takers exclude each other, and a
                // frozen cache stays closed (the exchange fails on any bit set).
                if c.flag
                    .compare_exchange(0, TAKING, Ordering::SeqCst, Ordering::Relaxed)
                    .is_err()
                {
                    return false;
                }
                let restarted = restart_sections_on(cpu as u32);
                if restarted {
                    self.take_half(c, out);
                }
                // Release: the next section on this cache sees it as we left it.
                c.flag.fetch_and(!TAKING, Ordering::Release);
                restarted
            }
            PerCpu::Locked | PerCpu::Auto => {
                // A holder (preempted mid-operation, or running there now) is not waited for.
                if !self.lock_cache(c, false) {
                    return false;
                }
                self.take_half(c, out);
                // Release: the cache's next holder sees it as we left it.
                c.lock.store(false, Ordering::Release);
                true
            }
        }
    }

    /// Moves the bottom half (rounded up) of cache `c` into `out`, oldest first, and the rest
    /// down in its place. The caller holds the cache: its try-lock, or its flag with every
    /// section on its CPU restarted since.
    pub(super) fn take_half(&self, c: &CpuCache, out: &mut Fifo<Frame>) {
        let w = c.word.load(Ordering::Acquire);
        let n = (w as u32 as usize).min(self.cap);
        let k = n.div_ceil(2);
        for item in &c.items[..k] {
            // SAFETY: a cache holds only metadata addresses of this pool's free frames, each
            // once, below its count; these leave it with the store below.
            out.push_back(unsafe { Frame::from_addr(item.load(Ordering::Relaxed)) });
        }
        for i in k..n {
            c.items[i - k].store(c.items[i].load(Ordering::Relaxed), Ordering::Relaxed);
        }
        // Only the count changes: the reference share in the high half stays the CPU's.
        c.word.store(w - k as u64, Ordering::Relaxed);
    }

    /// Waits while a taker holds this CPU's cache (rseq pools; one `membarrier` at most) and
    /// says whether the cache is worth another try: the thread has a cache in the table, and
    /// the pool is not being frozen.
    #[cold]
    pub(super) fn wait_untaken(&self) -> bool {
        let Some(c) = self.cpu_now().and_then(|cpu| self.caches.get(cpu as usize)) else {
            return false;
        };
        loop {
            match c.flag.load(Ordering::Acquire) {
                0 => return true,
                TAKING => thread::yield_now(),
                _ => return false,
            }
        }
    }
}

/// Restarts the rseq sections running on CPU `cpu` (a cache taker's second step); `false` if
/// it cannot, and then nothing may be taken.
pub(super) fn restart_sections_on(cpu: u32) -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    {
        crate::rseq::membarrier_rseq_on(cpu)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
    {
        let _ = cpu;
        false
    }
}

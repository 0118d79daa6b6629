//! One operation on a CPU's cache, and nothing else: the rseq critical sections (`rseq.rs`) and
//! the locked fallback's try-lock, each committing with one store of the cache's word; the
//! attempt the inlined fast paths make and the full one the slow paths retry; the bulk pops and
//! pushes; the slow-path counters a section bumps.
//!
//! This file must not decide where frames come from or go (`alloc.rs`, `refill.rs`, `free.rs`),
//! nor touch another CPU's cache (`take.rs`).

use super::{Counters, CpuCache, Op, PerCpu, PerCpuState, REF, Res};
use crate::sync::{Ordering, current_cpu, thread};

impl PerCpuState {
    /// Runs `op` on the cache of the CPU the thread is on (if `want` is set, only if that is
    /// CPU `want`). Always inlined: `op` is a constant at every call site, so each use
    /// compiles to its one section.
    #[inline(always)]
    pub(super) fn run(&self, want: Option<u32>, op: Op) -> Res {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
        if self.mode == PerCpu::Rseq {
            return self.run_rseq(want, op);
        }
        self.run_locked(want, op, false)
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[inline(always)]
    pub(super) fn run_rseq(&self, want: Option<u32>, op: Op) -> Res {
        use crate::rseq::{self, Status};
        let Some(area) = rseq::area() else {
            return Res::NoCache;
        };
        loop {
            let cpu = rseq::cpu(area);
            if want.is_some_and(|w| w != cpu) {
                return Res::NotHere;
            }
            let Some(cache) = self.cache_ref(cpu) else {
                return Res::NoCache;
            };
            // SAFETY: `area` is this thread's registered area; the word, the items (`cap` of
            // them) and the flag live as long as the pool, which the caller's reference keeps
            // alive; in an Rseq pool only these sections, on CPU `cpu`, write them (and a
            // taker, only once it flagged the cache and restarted them).
            let (st, item) = unsafe {
                match op {
                    Op::Pop(d) => rseq::pop(area, cpu, cache, d),
                    Op::Push(it, d) => (rseq::push(area, cpu, cache, it, d), 0),
                    Op::Add(d) => (rseq::add(area, cpu, cache, d), 0),
                }
            };
            match st {
                Status::Done => return Res::Done(item, cpu),
                Status::Refused => return Res::Refused(cpu),
                Status::Flagged => return Res::NoCache,
                Status::WrongCpu => {}
                Status::Abort => self.counters_at(cpu as usize).aborts.add(1),
            }
        }
    }

    /// One rseq attempt of `op` on the current CPU's cache, for the inlined fast paths:
    /// `Ok` if it committed (the popped item, 0 for push, and the CPU); `Err(Some(cpu))` if the
    /// thread runs on `cpu`, not on CPU `want` (a free then goes the remote way at once);
    /// `Err(None)` for everything else — a `Locked` pool, no area, a CPU past the table, an
    /// empty or full cache, a flagged cache (a taker holds it, or the pool is dying), an abort
    /// (counted) — after which the caller takes the full path ([`run`](Self::run), out of
    /// line), which starts over: an attempt that did not commit left no trace. Kept to the
    /// rseq section alone so that it inlines into callers' loops.
    #[inline(always)]
    pub(super) fn try_fast(&self, want: Option<u32>, op: Op) -> Result<(usize, u32), Option<u32>> {
        if self.mode != PerCpu::Rseq {
            return Err(None);
        }
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
        {
            use crate::rseq::{self, Status};
            let area = rseq::area().ok_or(None)?;
            let cpu = rseq::cpu(area);
            if want.is_some_and(|w| w != cpu) {
                return Err(Some(cpu));
            }
            let cache = self.cache_ref(cpu).ok_or(None)?;
            // SAFETY: as in `run_rseq`: `area` is this thread's registered area; the word, the
            // items (`cap` of them) and the flag live as long as the pool, which the caller's
            // reference keeps alive; in an Rseq pool only these sections, on CPU `cpu`, write
            // them (and a taker, only once it flagged the cache and restarted them).
            let (st, item) = unsafe {
                match op {
                    Op::Pop(d) => rseq::pop(area, cpu, cache, d),
                    Op::Push(it, d) => (rseq::push(area, cpu, cache, it, d), 0),
                    Op::Add(d) => (rseq::add(area, cpu, cache, d), 0),
                }
            };
            if st == Status::Done {
                return Ok((item, cpu));
            }
            if st == Status::Abort {
                self.count_abort();
            }
            Err(None)
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
        {
            let _ = (want, op);
            Err(None)
        }
    }

    /// CPU `cpu`'s cache as the rseq sections see it, if the table has the CPU.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[inline(always)]
    pub(super) fn cache_ref(&self, cpu: u32) -> Option<crate::rseq::CacheRef> {
        let c = self.caches.get(cpu as usize)?;
        Some(crate::rseq::CacheRef {
            word: c.word.as_ptr(),
            items: c.items.as_ptr().cast::<usize>().cast_mut(),
            cap: self.cap as u64,
            flag: c.flag.as_ptr().cast_const(),
        })
    }

    /// Whether a cache other than CPU `here`'s holds frames (a snapshot; `usize::MAX`: any
    /// cache).
    pub(super) fn others_cached(&self, here: usize) -> bool {
        (0..self.caches.len()).any(|cpu| cpu != here && self.cached(cpu) > 0)
    }

    /// Frames in CPU `cpu`'s cache now (a snapshot; 0 past the table).
    pub(super) fn cached(&self, cpu: usize) -> usize {
        // Acquire, with the locked commit's Release: a look that reads a cache as a pop left
        // it also sees what the popping thread freed before (`hands.rs`).
        self.caches
            .get(cpu)
            .map_or(0, |c| c.word.load(Ordering::Acquire) as u32 as usize)
    }

    /// One bulk pop on the current CPU's cache: `Some((k, cpu))` with the `k ≥ 1` items in
    /// `out[..k]` (the top `k`, the top one last), each carrying a reference; `None` if nothing
    /// committed (an abort is counted, a busy try-lock is not waited for), and the caller
    /// allocates one frame the ordinary way.
    #[inline]
    pub(super) fn try_pop_bulk(&self, out: &mut [usize]) -> Option<(usize, u32)> {
        if self.mode == PerCpu::Locked {
            if out.is_empty() {
                return None;
            }
            let (k, cpu) = self.locked_bulk(None, |c, w| {
                let count = w as u32 as usize;
                let k = out.len().min(count);
                for (o, item) in out.iter_mut().zip(&c.items[count - k..count]) {
                    *o = item.load(Ordering::Relaxed);
                }
                let k64 = k as u64;
                (w.wrapping_add(k64 * REF).wrapping_sub(k64), k)
            })?;
            return (k > 0).then_some((k, cpu));
        }
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
        {
            use crate::rseq::{self, Status};
            if self.mode != PerCpu::Rseq || out.is_empty() {
                return None;
            }
            let area = rseq::area()?;
            let cpu = rseq::cpu(area);
            let cache = self.cache_ref(cpu)?;
            // SAFETY: as in `try_fast`; `out` is ours, valid for `out.len()` writes.
            let (st, k) = unsafe { rseq::pop_bulk(area, cpu, cache, out.as_mut_ptr(), out.len()) };
            match st {
                Status::Done => return Some((k, cpu)),
                Status::Abort => self.count_bulk_abort(),
                Status::WrongCpu | Status::Flagged | Status::Refused => {}
            }
            None
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
        {
            let _ = out;
            None
        }
    }

    /// Pushes free frames onto the cache of the CPU the thread runs on, the last one on top,
    /// each changing the word by `per` (as [`try_push_bulk`](Self::try_push_bulk)): one bulk
    /// section where it can, then one section a frame until the cache refuses (full, or no
    /// cache for the thread). Returns how many went (the first ones).
    pub(super) fn push_all(&self, items: &[usize], per: u64) -> usize {
        let mut pushed = self.try_push_bulk(None, items, per);
        while pushed < items.len() {
            match self.run(None, Op::Push(items[pushed], per)) {
                Res::Done(..) => pushed += 1,
                Res::Refused(_) | Res::NotHere | Res::NoCache => break,
            }
        }
        pushed
    }

    /// One bulk push of free frames onto the cache of the CPU the thread runs on (only if
    /// that is `want`, when set), each changing the word by `per` ([`PUSH_FREE`] for frames
    /// that give back a reference, [`PUSH_SPARE`] for frames that carry none): how many went
    /// (the first ones, the last of them on top), 0 if none did (a busy try-lock is not waited
    /// for).
    ///
    /// [`PUSH_FREE`]: super::PUSH_FREE
    /// [`PUSH_SPARE`]: super::PUSH_SPARE
    #[inline]
    pub(super) fn try_push_bulk(&self, want: Option<u32>, items: &[usize], per: u64) -> usize {
        if self.mode == PerCpu::Locked {
            if items.is_empty() {
                return 0;
            }
            let pushed = self.locked_bulk(want, |c, w| {
                let count = w as u32 as usize;
                let k = items.len().min(self.cap.saturating_sub(count));
                for (slot, &item) in c.items[count..count + k].iter().zip(items) {
                    slot.store(item, Ordering::Relaxed);
                }
                (w.wrapping_add(per.wrapping_mul(k as u64)), k)
            });
            return pushed.map_or(0, |(k, _)| k);
        }
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
        {
            use crate::rseq::{self, Status};
            if self.mode != PerCpu::Rseq || items.is_empty() {
                return 0;
            }
            let Some(area) = rseq::area() else { return 0 };
            let cpu = rseq::cpu(area);
            if want.is_some_and(|w| w != cpu) {
                return 0;
            }
            let Some(cache) = self.cache_ref(cpu) else {
                return 0;
            };
            // SAFETY: as in `try_fast`; `items` is valid for `items.len()` reads.
            let (st, k) =
                unsafe { rseq::push_bulk(area, cpu, cache, items.as_ptr(), items.len(), per) };
            if st == Status::Abort {
                self.count_bulk_abort();
            }
            k
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
        {
            let _ = (want, items, per);
            0
        }
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[cold]
    #[inline(never)]
    pub(super) fn count_abort(&self) {
        self.counters().aborts.add(1);
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[cold]
    #[inline(never)]
    pub(super) fn count_bulk_abort(&self) {
        let c = self.counters();
        c.aborts.add(1);
        c.bulk_aborts.add(1);
    }

    /// The counters of CPU `cpu` (those past the table for a CPU past it).
    #[inline]
    pub(super) fn counters_at(&self, cpu: usize) -> &Counters {
        &self.counters[cpu.min(self.counters.len() - 1)]
    }

    /// The counters of the CPU the calling thread runs on.
    #[inline]
    pub(super) fn counters(&self) -> &Counters {
        self.counters_at(self.cpu_now().map_or(usize::MAX, |c| c as usize))
    }

    /// The CPU the calling thread runs on, as this pool's mode reads it.
    pub(super) fn cpu_now(&self) -> Option<u32> {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
        if self.mode == PerCpu::Rseq {
            return crate::rseq::area().map(crate::rseq::cpu);
        }
        current_cpu()
    }

    /// Runs `op` on the locked cache of the CPU the thread runs on (only if that is `want`,
    /// when set; `Err(NotHere)` else): `op` gets the cache and its word and returns the word to
    /// commit (`None`: leave it) and its result, with the CPU. `Err(NoCache)` if there is no
    /// cache for the thread, the try-lock is busy and `wait` is not set (with `wait` it is
    /// waited for, yielding), or the pool is dying. After the commit the pool may be gone (if
    /// it gave back the last references): nothing here touches it after the unlock.
    pub(super) fn with_locked<R>(
        &self,
        want: Option<u32>,
        wait: bool,
        op: impl FnOnce(&CpuCache, u64) -> (Option<u64>, R),
    ) -> Result<(R, u32), Res> {
        let cpu = current_cpu().ok_or(Res::NoCache)?;
        if want.is_some_and(|w| w != cpu) {
            return Err(Res::NotHere);
        }
        let c = self.caches.get(cpu as usize).ok_or(Res::NoCache)?;
        if !self.lock_cache(c, wait) {
            return Err(Res::NoCache);
        }
        let (w, r) = op(c, c.word.load(Ordering::Relaxed));
        if let Some(w) = w {
            // Release: see `cached`.
            c.word.store(w, Ordering::Release);
        }
        // Release: the next holder (and `freeze`) sees our writes.
        c.lock.store(false, Ordering::Release);
        Ok((r, cpu))
    }

    /// Takes cache `c`'s try-lock (waiting for it, yielding, if `wait`) unless the pool is
    /// dying; `false` if it did not (then the lock is not held).
    pub(super) fn lock_cache(&self, c: &CpuCache, wait: bool) -> bool {
        // Acquire: the previous holder's stack and word writes are visible.
        while c
            .lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if !wait {
                return false;
            }
            thread::yield_now();
        }
        // Relaxed: `freeze` stores `dying` before it takes each lock, so a holder that took the
        // lock after it sees the flag, and one that took it before is waited for.
        if self.dying.load(Ordering::Relaxed) {
            c.lock.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// One bulk operation on the locked cache of the CPU the thread runs on (see
    /// [`with_locked`](Self::with_locked); a busy try-lock is not waited for): `op` returns the
    /// word to commit and its result.
    pub(super) fn locked_bulk<R>(
        &self,
        want: Option<u32>,
        op: impl FnOnce(&CpuCache, u64) -> (u64, R),
    ) -> Option<(R, u32)> {
        self.with_locked(want, false, |c, w| {
            let (w, r) = op(c, w);
            (Some(w), r)
        })
        .ok()
    }

    /// The locked section; with `wait`, a busy lock is waited for (yielding) instead of
    /// refused.
    pub(super) fn run_locked(&self, want: Option<u32>, op: Op, wait: bool) -> Res {
        let cap = self.cap;
        let done = self.with_locked(want, wait, |c, w| {
            let count = w as u32 as usize;
            match op {
                Op::Pop(d) if count > 0 => (
                    Some(w.wrapping_add(d)),
                    Some(c.items[count - 1].load(Ordering::Relaxed)),
                ),
                Op::Push(it, d) if count < cap => {
                    c.items[count].store(it, Ordering::Relaxed);
                    (Some(w.wrapping_add(d)), Some(0))
                }
                Op::Add(d) => (Some(w.wrapping_add(d)), Some(0)),
                Op::Pop(_) | Op::Push(..) => (None, None),
            }
        });
        match done {
            Ok((Some(item), cpu)) => Res::Done(item, cpu),
            Ok((None, cpu)) => Res::Refused(cpu),
            Err(res) => res,
        }
    }
}

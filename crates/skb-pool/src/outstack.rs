//! The outgoing stacks of an rseq pool: remote frees gathered per (freeing CPU, home CPU) pair,
//! one restartable section per frame and no locked instruction.
//!
//! A remote free in an rseq pool pushes the frame onto the stack of the CPU it runs on for the
//! frame's home, with the same section as a cache push: the item stored above the count, then
//! one commit of the stack's word (count + 1 in the low half, the frame's pool reference given
//! up into the high half, as a cache's word counts references). A full stack is taken whole by
//! one more section (a bulk pop) and sent home packed by the caller. The lock-based batch of
//! `outgoing.rs` costs a compare-and-swap and a second section (for the reference) per frame;
//! this costs one section, the price of a local free.
//!
//! One stack per pair (rather than one batch per CPU that switches homes) keeps the home out
//! of the section: a stack only ever holds frames of its one home. The free that would fill a
//! stack takes it whole instead and sends it home with its own frame, while it still holds
//! that frame's pool reference (after its commit a free may not touch the pool). Stacks exist
//! for pools of at most [`MAX_STACK_CPUS`](crate::outstack::MAX_STACK_CPUS) CPUs (the table
//! grows with the square); larger ones keep the lock-based batches.
//!
//! **Taking a stack from elsewhere.** A CPU where nobody frees any more leaves its stacks as
//! they are, and an allocator that finds nothing else must be able to take their frames (the
//! anti-stranding probe). Each stack's flag byte is what its sections check at their start (as
//! the cache sections check their cache's); a taker sets the flag, then
//! `membarrier(PRIVATE_EXPEDITED_RSEQ)` restarts every section in progress, so from then on no
//! section commits on the stack: the taker reads and resets it with plain accesses, and clears
//! the flag. A free that finds the flag set takes the lock-based path. The restart is an
//! interrupt to every CPU running the process, so takings are throttled to one per
//! [`TAKE_EVERY`](crate::outstack::TAKE_EVERY) per pool: a frame waits at most that long in a
//! stack nobody frees to, and a pool whose allocators run dry often (frames in flight, not in
//! stacks) does not interrupt its CPUs at every miss. Freezing the pool (its last `Pool` value
//! gone) sets every flag for good and folds the stacks' reference shares into the count with
//! the caches'.
//!
//! This file owns the stacks' memory and the taker's protocol; the sections are `rseq.rs`'s, and
//! where the frames go is the business of `percpu/`.

use crossbeam_utils::CachePadded;
use llist_defer::Fifo;

use crate::meta::Frame;
use crate::sync::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Pools on more CPUs than this keep the lock-based outgoing batches (`outgoing.rs`).
pub(crate) const MAX_STACK_CPUS: usize = 32;
/// Words of a taking's bitmap of the stacks it holds (one bit a stack).
const HELD_WORDS: usize = (MAX_STACK_CPUS * MAX_STACK_CPUS).div_ceil(64);

/// At most one taking per this long (see the module docs).
pub(crate) const TAKE_EVERY: Duration = Duration::from_millis(1);

/// A taker holds the stack (or, in `percpu/take.rs`, the cache).
pub(crate) const TAKING: u8 = 1;
/// The pool is frozen: the stack (or cache) is closed for good.
pub(crate) const FROZEN: u8 = 2;

/// One (freeing CPU, home CPU) stack.
struct Stack {
    /// Frames in `items` (low 32 bits) | the reference share given up by their frees (high 32,
    /// wrapping), as a cache's word.
    word: AtomicU64,
    /// [`TAKING`] | [`FROZEN`]; the byte the sections check at their start.
    flag: AtomicU8,
    /// Frame metadata addresses; only `[0, count)` is meaningful.
    items: Box<[AtomicUsize]>,
}

/// Every stack of a pool, `cpus × cpus` of them (none if the pool has no use for them).
pub(crate) struct OutStacks {
    cpus: usize,
    cap: usize,
    stacks: Box<[CachePadded<Stack>]>,
    /// When the stacks were made: the origin of `last_take`.
    epoch: Instant,
    /// Nanoseconds from `epoch` to the last taking (0: none yet).
    last_take: AtomicU64,
}

impl OutStacks {
    /// Stacks of `cap` frames for a pool on `cpus` CPUs, or none (`enabled` false, or too many
    /// CPUs).
    pub(crate) fn new(cpus: usize, cap: usize, enabled: bool) -> OutStacks {
        let on = enabled && cpus <= MAX_STACK_CPUS && cap > 0;
        let stacks: Box<[CachePadded<Stack>]> = if on {
            (0..cpus * cpus)
                .map(|_| {
                    CachePadded::new(Stack {
                        word: AtomicU64::new(0),
                        flag: AtomicU8::new(0),
                        items: (0..cap).map(|_| AtomicUsize::new(0)).collect(),
                    })
                })
                .collect()
        } else {
            Box::default()
        };
        OutStacks {
            cpus,
            cap,
            stacks,
            epoch: Instant::now(),
            last_take: AtomicU64::new(0),
        }
    }

    /// Whether remote frees go through the stacks.
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        !self.stacks.is_empty()
    }

    /// Frames one stack holds when full (at most `packed::MAX_PACK`: the pool builds the stacks
    /// no larger, so a full stack goes home as one packed batch).
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// The stack of frames freed on `cpu` for `home` as the sections see it (both in range).
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[inline(always)]
    pub(crate) fn cache_ref(&self, cpu: u32, home: u32) -> Option<crate::rseq::CacheRef> {
        let s = self.stacks.get(cpu as usize * self.cpus + home as usize)?;
        Some(crate::rseq::CacheRef {
            word: s.word.as_ptr(),
            items: s.items.as_ptr().cast::<usize>().cast_mut(),
            cap: self.cap as u64,
            flag: s.flag.as_ptr().cast_const(),
        })
    }

    /// Frames waiting in the stack of `cpu` for `home` (a snapshot; 0 out of range).
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    #[inline]
    pub(crate) fn len_of(&self, cpu: u32, home: u32) -> usize {
        self.stacks
            .get(cpu as usize * self.cpus + home as usize)
            .map_or(0, |s| s.word.load(Ordering::Relaxed) as u32 as usize)
    }

    /// Frames waiting in the stacks of CPU `cpu` (a snapshot).
    pub(crate) fn len_on(&self, cpu: usize) -> usize {
        self.stacks
            .iter()
            .skip(cpu * self.cpus)
            .take(self.cpus)
            .map(|s| s.word.load(Ordering::Relaxed) as u32 as usize)
            .sum()
    }

    /// Frames waiting in every stack (a snapshot).
    pub(crate) fn len(&self) -> usize {
        self.stacks
            .iter()
            .map(|s| s.word.load(Ordering::Relaxed) as u32 as usize)
            .sum()
    }

    /// Closes every stack for good (the pool is being frozen). The caller then restarts every
    /// section in progress before it reads [`shares`](Self::shares).
    pub(crate) fn freeze(&self) {
        for s in self.stacks.iter() {
            s.flag.fetch_or(FROZEN, Ordering::SeqCst);
        }
    }

    /// The reference shares of every stack, summed modulo 2^32 (after [`freeze`](Self::freeze)
    /// and the restart of every section: exact).
    pub(crate) fn shares(&self) -> u32 {
        self.stacks
            .iter()
            .map(|s| (s.word.load(Ordering::Acquire) >> 32) as u32)
            .fold(0u32, u32::wrapping_add)
    }

    /// Takes the frames of every non-empty stack that no other taker holds, from any CPU (the
    /// anti-stranding probe; nothing if another taking was less than [`TAKE_EVERY`] ago): flags
    /// them, restarts every section in progress with `restart` (`membarrier`; if it fails,
    /// nothing is taken), then empties them. The frames carry no references (their frees gave
    /// them up into the stacks' shares, which stay). Returns the frames, oldest of each stack
    /// first.
    pub(crate) fn take_all(&self, restart: impl FnOnce() -> bool) -> Fifo<Frame> {
        let mut taken = Fifo::new();
        if self.len() == 0 {
            return taken;
        }
        // One taker per `TAKE_EVERY`: the first to move `last_take` forward.
        let now = (self.epoch.elapsed().as_nanos() as u64).max(1);
        let last = self.last_take.load(Ordering::Relaxed);
        if (last != 0 && now.saturating_sub(last) < TAKE_EVERY.as_nanos() as u64)
            || self
                .last_take
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return taken;
        }
        // The stacks this taking flagged, one bit each (no list on the heap in the allocator's
        // slow path): at most `MAX_STACK_CPUS`² stacks.
        let mut held = [0u64; HELD_WORDS];
        for (i, s) in self.stacks.iter().enumerate() {
            if s.word.load(Ordering::Relaxed) as u32 == 0 {
                continue;
            }
            // The flag before the restart's barrier (SeqCst); takers exclude each other, and a
            // frozen stack stays closed (the exchange fails on any bit set).
            if s.flag
                .compare_exchange(0, TAKING, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                held[i / 64] |= 1 << (i % 64);
            }
        }
        if held.iter().all(|&w| w == 0) {
            return taken;
        }
        let held = || {
            held.iter().enumerate().flat_map(|(w, &bits)| {
                (0..64)
                    .filter(move |b| bits & (1 << b) != 0)
                    .map(move |b| &*self.stacks[w * 64 + b])
            })
        };
        if restart() {
            for s in held() {
                // No section commits on a flagged stack once the restart returned: its word and
                // items are ours until the flag is cleared.
                let w = s.word.load(Ordering::Acquire);
                let n = w as u32 as usize;
                for item in &s.items[..n.min(self.cap)] {
                    let a = item.load(Ordering::Relaxed);
                    // SAFETY: a stack holds only metadata addresses of this pool's free frames,
                    // each once, that nobody else holds (their frees gave them up).
                    taken.push_back(unsafe { Frame::from_addr(a) });
                }
                s.word.store(w - n as u64, Ordering::Relaxed);
            }
        }
        for s in held() {
            // Release: the next section on this stack sees it as we left it.
            s.flag.fetch_and(!TAKING, Ordering::Release);
        }
        taken
    }
}

impl core::fmt::Debug for OutStacks {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OutStacks")
            .field("enabled", &self.enabled())
            .field("cap", &self.cap)
            .field("frames", &self.len())
            .finish()
    }
}

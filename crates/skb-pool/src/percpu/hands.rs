//! Frames in a thread's hands, and when an allocation may call the pool exhausted.
//!
//! A refill, a kicked drain, a flush and a batch sent home each take free frames out of a
//! place other allocations look (a defer list, the overflow list, the depot, a cache, an
//! outgoing batch or stack) and put them into another a moment later. An allocation that looks
//! everywhere in that moment finds nothing, though frames are free: on two busy CPUs with one
//! frame in sixty-four to spare, hundreds of allocations a second reported `Exhausted` that
//! way. So each such move is bracketed ([`InHand`]): a count of moves in progress and a count
//! of moves done, per CPU (a move writes only the line of the CPU that began it; a look reads
//! every CPU's). An allocation calls the pool exhausted after a look during which no move was
//! in progress or ended, no place was skipped because another thread held it ([`Look`]) and
//! every cache was empty; otherwise it looks again, for at least 16 looks and then until
//! [`PATIENCE`] has passed, and then reports exhaustion anyway (counted apart:
//! `PerCpuStats::exhausted_moving`): a mover descheduled with frames in hand, or a source
//! held all that time, is not waited for longer.
//!
//! A look is not a snapshot of every frame: frees are not bracketed. So the end of a look
//! re-reads every place a free fills (the caches, the outgoing batches and stacks, the defer
//! lists a frame freed alone goes to, the overflow list, vacant owners' lists, the depot a
//! handle's cache spills into; `refill.rs`), and only then reads the move counts, so that a
//! frame freed into a place the look had passed is found, and a move during the re-read is
//! seen. A frame freed into a place after this re-read passed it, while other allocations take
//! the frames it did not see, can still be missed: the window is the re-read, not the look.
//! "Passed" needs an order between threads: a cache's commit is a release and the look's read
//! of it an acquire, so a look that found a cache emptied by a pop also finds what the popping
//! thread freed before it (the rseq sections commit with a plain store, which x86_64 orders
//! the same way). The loom model `percpu_a_free_behind_a_look_is_found` fails without the
//! re-read, and without either half of that order.
//! A move counts as having carried frames whenever frames left their place during it, even if
//! they went back (a drain that puts part of a defer list back, frames lifted off a cache
//! after a migration and pushed back).
//!
//! This file must not move frames itself: `refill.rs`, `free.rs`, `take.rs` and a handle's
//! last drain (`handle.rs`) do, inside the brackets.

use crossbeam_utils::CachePadded;

use super::PerCpuState;
use crate::sync::{AtomicU64, Ordering, fence, thread};

/// Looks an allocation makes, at least, before it reports `Exhausted` though frames kept moving
/// (or sources stayed held) during every one; past them it keeps looking for [`PATIENCE`].
/// Each look after the first yields first. Under loom, whose models are small and explore
/// every interleaving of every look, 4.
#[cfg(not(lockless_loom))]
const LOOKS_MIN: usize = 16;
#[cfg(lockless_loom)]
const LOOKS_MIN: usize = 4;
/// How long an allocation keeps looking while its looks see frames move or sources held: more
/// than the outgoing stacks' `TAKE_EVERY`, so that frames parked there are reached. Frames
/// that move all the time are taken by others as fast as they come free, so it gives up then.
#[cfg(not(lockless_loom))]
pub(super) const PATIENCE: std::time::Duration = std::time::Duration::from_millis(2);

/// One CPU's moves (and those of threads past the table, in the last entry): the moves begun
/// and not ended in the low 32 bits, the moves that ended having carried frames in the high 32
/// (wrapping), so that a move ends with one update of both.
#[derive(Debug, Default)]
pub(super) struct Hands(AtomicU64);

/// The `Hands` change of a move that ends having carried frames: one more done, one fewer held.
const ENDED_CARRYING: u64 = (1 << 32) - 1;

/// Frames out of every other allocation's sight from now until the value is dropped: the
/// bracket of one move.
pub(crate) struct InHand<'a> {
    hands: &'a Hands,
    carried: bool,
}

impl InHand<'_> {
    /// Records that the move took frames (one that took none ends unseen).
    pub(crate) fn carried(&mut self) {
        self.carried = true;
    }
}

impl Drop for InHand<'_> {
    fn drop(&mut self) {
        // Release: the move's work (the frames put where others look) before its end.
        if self.carried {
            self.hands.0.fetch_add(ENDED_CARRYING, Ordering::Release);
        } else {
            self.hands.0.fetch_sub(1, Ordering::Release);
        }
    }
}

/// How long an allocation has looked ([`LOOKS_MIN`], [`PATIENCE`]).
#[derive(Debug, Default)]
pub(super) struct Patience {
    looks: usize,
    #[cfg(not(lockless_loom))]
    since: Option<std::time::Instant>,
}

impl Patience {
    /// Counts a look that was not whole; `true` once the allocation should give up.
    pub(super) fn spent(&mut self) -> bool {
        self.looks += 1;
        if self.looks < LOOKS_MIN {
            return false;
        }
        #[cfg(not(lockless_loom))]
        {
            let since = *self.since.get_or_insert_with(std::time::Instant::now);
            since.elapsed() > PATIENCE
        }
        #[cfg(lockless_loom)]
        true
    }
}

/// One allocation's look through every source: the moves done when it began, and whether a
/// source was passed over because another thread held it.
#[derive(Debug)]
pub(crate) struct Look {
    moved: u32,
    /// A source that may hold frames was skipped (a held cache, outgoing batch or stack).
    pub(crate) skipped: bool,
}

impl PerCpuState {
    /// Begins a move on the line of the CPU the thread runs on: call it before taking the
    /// frames.
    pub(crate) fn in_hand(&self) -> InHand<'_> {
        let here = self.cpu_now().map_or(usize::MAX, |c| c as usize);
        let hands = &self.hands[here.min(self.hands.len() - 1)];
        hands.0.fetch_add(1, Ordering::Relaxed);
        // Between the count and the take. With the fence in `look_was_whole`: if a look read a
        // source as the take left it, or as any later write left it (another holder's plain
        // store of a cache word, which a release fence alone would not order), this fence
        // precedes that one in the total order of SeqCst fences, and the look sees the count.
        // (The rseq sections write cache words in `asm!`, outside the language's model; on
        // x86_64 its TSO orders them the same way.)
        fence(Ordering::SeqCst);
        InHand {
            hands,
            carried: false,
        }
    }

    /// Begins a look through the sources.
    pub(super) fn look(&self) -> Look {
        Look {
            moved: self.counts().1,
            skipped: false,
        }
    }

    /// Whether `look`, which found every source empty and holds no move of its own, saw every
    /// free frame: no move was in progress at its end, none ended since it began, and it
    /// skipped no source.
    pub(super) fn look_was_whole(&self, look: &Look) -> bool {
        // Between the look's reads of the sources and the reads of the counts (see `in_hand`).
        fence(Ordering::SeqCst);
        let (held, moved) = self.counts();
        !look.skipped && held == 0 && moved == look.moved
    }

    /// Before the next look: lets the threads holding frames run.
    pub(super) fn before_looking_again(&self) {
        thread::yield_now();
    }

    /// Moves in progress and moves done (wrapping), summed over the CPUs.
    fn counts(&self) -> (u32, u32) {
        self.hands.iter().fold((0u32, 0u32), |(held, moved), h| {
            let w = h.0.load(Ordering::Acquire);
            (
                held.wrapping_add(w as u32),
                moved.wrapping_add((w >> 32) as u32),
            )
        })
    }
}

/// The per-CPU move counts of a pool of `cpus` CPUs (one more for threads past the table).
pub(super) fn new_hands(cpus: usize) -> Box<[CachePadded<Hands>]> {
    (0..=cpus)
        .map(|_| CachePadded::new(Hands::default()))
        .collect()
}

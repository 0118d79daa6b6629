//! A CPU's outgoing remote frees (per-CPU caches): frames freed on this CPU that go home to
//! another, gathered up to `remote_batch` (at most [`RING`]) so that each home CPU's defer list
//! takes one `add_batch` (and one count update) per batch instead of one per frame — what a
//! handle's per-owner batches do, kept per CPU so that no thread has anything to flush.
//!
//! The batch is a ring, [`OutRing`], appended to by threads on its CPU and emptied whole by
//! whoever finds it full or needs its frames: a freer on its CPU when an append is refused,
//! or an allocator on any CPU that finds everything else dry (the anti-stranding probe: a
//! batch that no free on its CPU will ever complete). Appending costs no atomic
//! read-modify-write with restartable sequences (on x86 one is a full fence, and the freer
//! would wait there, frame after frame, for the misses it just took on the frame's lines);
//! with `PerCpu::Locked` appenders of one CPU exclude each other with a try-lock (a busy lock
//! sends the frame alone). Emptying is one CAS on the read index. Frames of several homes may
//! share a ring; whoever empties it sorts them.
//!
//! This file owns the ring only; where its frames go is `percpu.rs`'s business.

use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// What an append to an [`OutRing`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Appended {
    /// The frame is in the ring.
    In,
    /// The ring holds its limit: empty it, then append again.
    Full,
    /// No append possible now (the try-lock is held, the thread has no rseq area or its CPU
    /// has no ring, the pool is dying): send the frame alone.
    Busy,
}

/// Slots of an [`OutRing`]: the most frames it gathers before they are sent.
pub(crate) const RING: usize = 32;

/// One CPU's outgoing remote frees in an rseq pool: a ring that restartable sequences on its
/// CPU append to (`rseq::ring_push`: slot `bottom mod RING`, then `bottom + 1`, only while
/// fewer than the limit are in it, as seen from a possibly stale `top`) and that anyone empties
/// with [`take`](OutRing::take).
///
/// Why a reader never takes a slot being rewritten: the appender writes slot `bottom mod RING`
/// only if `bottom − top' < RING` for the `top'` it read, and `top` only grows, so the slot is
/// outside `[top, bottom)` — unless `top` moved after a reader read it, and then that reader's
/// CAS from its stale `top` fails and it discards what it read.
pub(crate) struct OutRing {
    /// The appenders' try-lock in `PerCpu::Locked` pools (rseq sections need none).
    lock: AtomicBool,
    /// Write index: advanced only by the appenders of this ring's CPU.
    bottom: AtomicU64,
    /// Read index: advanced by [`take`](OutRing::take) (CAS), never past `bottom`.
    top: AtomicU64,
    /// Frames taken out so far, counted per take (statistics).
    taken: AtomicU64,
    /// Frame metadata addresses, by index modulo `RING`.
    items: [AtomicUsize; RING],
}

impl OutRing {
    pub(crate) fn new() -> OutRing {
        OutRing {
            lock: AtomicBool::new(false),
            bottom: AtomicU64::new(0),
            top: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            items: core::array::from_fn(|_| AtomicUsize::new(0)),
        }
    }

    /// The write index word, the read index and the slots, for `rseq::ring_push`.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    pub(crate) fn parts(&self) -> (*mut u64, *const u64, *mut usize) {
        (
            self.bottom.as_ptr(),
            self.top.as_ptr().cast_const(),
            self.items.as_ptr().cast::<usize>().cast_mut(),
        )
    }

    /// Frames waiting in the ring (a snapshot).
    pub(crate) fn len(&self) -> usize {
        let t = self.top.load(Ordering::Relaxed);
        self.bottom.load(Ordering::Relaxed).saturating_sub(t) as usize
    }

    /// Frames ever appended (a snapshot): taken plus waiting.
    pub(crate) fn added(&self) -> u64 {
        self.taken.load(Ordering::Relaxed) + self.len() as u64
    }

    /// Takes every frame in the ring into `out` (from any thread); returns how many. The
    /// frames are then the caller's: free, carrying no reference, of mixed homes.
    pub(crate) fn take(&self, out: &mut [usize; RING]) -> usize {
        loop {
            // Acquire on `bottom`: the slots below it were written before it was advanced.
            let t = self.top.load(Ordering::Acquire);
            let b = self.bottom.load(Ordering::Acquire);
            if b <= t {
                return 0;
            }
            let n = (b - t) as usize;
            debug_assert!(n <= RING, "an outgoing ring over its size");
            let n = n.min(RING);
            for (i, o) in out[..n].iter_mut().enumerate() {
                *o = self.items[(t as usize + i) % RING].load(Ordering::Relaxed);
            }
            // AcqRel: the slots were read before the appender may reuse them (it reads `top`).
            if self
                .top
                .compare_exchange(t, t + n as u64, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.taken.fetch_add(n as u64, Ordering::Relaxed);
                return n;
            }
        }
    }

    /// Appends `item` under the ring's try-lock (`PerCpu::Locked`), if fewer than `limit` (at
    /// most [`RING`]) frames are in.
    pub(crate) fn append_locked(&self, item: usize, limit: usize) -> Appended {
        // Acquire: the previous appender's slot and index writes are visible.
        if self
            .lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Appended::Busy;
        }
        let b = self.bottom.load(Ordering::Relaxed);
        let t = self.top.load(Ordering::Acquire);
        let room = b - t < limit.min(RING) as u64;
        if room {
            self.items[b as usize % RING].store(item, Ordering::Relaxed);
            // Release: the slot before the index that publishes it.
            self.bottom.store(b + 1, Ordering::Release);
        }
        self.lock.store(false, Ordering::Release);
        if room { Appended::In } else { Appended::Full }
    }
}

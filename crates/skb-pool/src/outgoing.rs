//! A CPU's outgoing batch of remote frees (per-CPU caches): frames freed on this CPU that go
//! home to another, gathered up to `remote_batch` per home so the home CPU's defer list takes
//! one `add_batch` (and one count update) per batch instead of one per frame — what a handle's
//! per-owner batches do, kept per CPU so that no thread has anything to flush. Rseq pools of up
//! to `MAX_STACK_CPUS` CPUs gather on their outgoing stacks instead (`outstack.rs`, one section
//! a frame) and come here only when a stack is being taken; locked pools always come here.
//!
//! The batch is behind a try-lock (whatever the pool's `PerCpu` mode): it is taken by threads on
//! its CPU, so it is uncontended unless a holder was preempted (then the freer defers its frame
//! alone), and it lets an allocator on any CPU take the frames of a batch that no free on its
//! CPU will ever complete (the anti-stranding probe). One home at a time: a free for another
//! home sends the partial batch first.
//!
//! A full batch leaves packed (`packed.rs`): its addresses are already in hand here, so the
//! home CPU learns them from a few lines instead of walking a chain of frames.
//!
//! This file owns the batch only; where its frames go is the business of `percpu/`.

use llist_defer::Fifo;

use crate::meta::Frame;
use crate::packed::{self, MAX_PACK};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// No home: the batch is empty.
const NONE: u32 = u32::MAX;

/// One CPU's outgoing batch.
pub(crate) struct Outgoing {
    lock: AtomicBool,
    /// The home CPU of the frames in `items` (under the lock).
    home: AtomicU32,
    /// Frames in `items` (under the lock; read without it for stats).
    count: AtomicUsize,
    /// Frames ever added (written under the lock with a plain load and store, so counting a
    /// remote free costs no read-modify-write on a line shared with other CPUs; read without
    /// it for stats).
    added: AtomicU64,
    /// Frame metadata addresses.
    items: Box<[AtomicUsize]>,
}

/// A batch taken out for its home CPU: packed heads, one per [`MAX_PACK`] frames, the newest
/// chunk's head first (as [`packed::pack_fifo`] orders them), so that a defer list, which puts
/// the front of an added batch on top, holds the chunks newest first like single sends.
pub(crate) struct Full {
    pub(crate) heads: Fifo<Frame>,
    /// Frames in all the heads' batches.
    pub(crate) n: usize,
    pub(crate) home: u32,
}

impl Full {
    /// One free frame, alone, for `home`.
    pub(crate) fn alone(frame: Frame, home: u32) -> Full {
        // SAFETY: a free frame the caller gave up, alone.
        unsafe { Full::packed(&[frame.0.as_ptr() as usize], home) }
    }

    /// The free frames at the metadata addresses `frames` (1 to [`MAX_PACK`] of them, oldest
    /// first) as one packed batch for `home`.
    ///
    /// # Safety
    ///
    /// As [`packed::pack`]: every address is the entry of a free frame of one live pool that the
    /// caller gave up, each once.
    pub(crate) unsafe fn packed(frames: &[usize], home: u32) -> Full {
        let mut heads = Fifo::new();
        // SAFETY: the caller's contract.
        heads.push_back(unsafe { packed::pack(frames) });
        Full {
            heads,
            n: frames.len(),
            home,
        }
    }
}

impl Outgoing {
    pub(crate) fn new(batch: usize) -> Outgoing {
        Outgoing {
            lock: AtomicBool::new(false),
            home: AtomicU32::new(NONE),
            count: AtomicUsize::new(0),
            added: AtomicU64::new(0),
            items: (0..batch.max(1)).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// Frames waiting in the batch (a snapshot).
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Frames ever added to the batch (a snapshot).
    pub(crate) fn added(&self) -> u64 {
        self.added.load(Ordering::Relaxed)
    }

    /// Adds free frames (carrying no references) for `home` from the front of `frames` (their
    /// metadata addresses), under one lock. `Err(())` if the batch is busy (its holder was
    /// preempted); else how many went in and what must be sent now: the previous partial
    /// batch, for another home (then none went in), or the batch they filled, with what
    /// `taking` returned, called under the lock just before the batch leaves it (a prober
    /// finds the lock held until then).
    pub(crate) fn add_many<G>(
        &self,
        frames: &[usize],
        home: u32,
        taking: impl FnOnce() -> G,
    ) -> Result<(usize, Option<(Full, G)>), ()> {
        // Acquire: the previous holder's writes to the batch are visible.
        if self
            .lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(());
        }
        let n = self.count.load(Ordering::Relaxed);
        let done = if n > 0 && self.home.load(Ordering::Relaxed) != home {
            let g = taking();
            (0, Some((self.take_locked(n), g)))
        } else {
            // A full batch is sent as it fills, so there is room for at least one.
            let m = frames.len().min(self.items.len() - n);
            for (slot, &f) in self.items[n..n + m].iter().zip(frames) {
                slot.store(f, Ordering::Relaxed);
            }
            self.home.store(home, Ordering::Relaxed);
            self.count.store(n + m, Ordering::Relaxed);
            // Under the lock: only the holder writes `added`.
            let a = self.added.load(Ordering::Relaxed);
            self.added.store(a + m as u64, Ordering::Relaxed);
            (
                m,
                (n + m == self.items.len()).then(|| {
                    let g = taking();
                    (self.take_locked(n + m), g)
                }),
            )
        };
        // Release: the next holder (or a prober) sees the batch as left here.
        self.lock.store(false, Ordering::Release);
        Ok(done)
    }

    /// Takes whatever the batch holds as plain frames (the anti-stranding probe); `None` if it
    /// looked non-empty but another thread held its lock.
    pub(crate) fn try_take(&self) -> Option<Fifo<Frame>> {
        let mut frames = Fifo::new();
        if self.count.load(Ordering::Relaxed) == 0 {
            return Some(frames);
        }
        if self
            .lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let n = self.count.load(Ordering::Relaxed);
        for item in &self.items[..n] {
            let a = item.load(Ordering::Relaxed);
            // SAFETY: the batch holds only addresses of this pool's metadata entries, of free
            // frames that nobody else holds (they left their freers when they were added).
            frames.push_back(unsafe { Frame::from_addr(a) });
        }
        self.home.store(NONE, Ordering::Relaxed);
        self.count.store(0, Ordering::Relaxed);
        self.lock.store(false, Ordering::Release);
        Some(frames)
    }

    /// Empties the batch, packed; the caller holds the lock.
    fn take_locked(&self, n: usize) -> Full {
        let mut heads = Fifo::new();
        let mut buf = [0usize; MAX_PACK];
        for chunk in self.items[..n].chunks(MAX_PACK) {
            for (b, item) in buf.iter_mut().zip(chunk) {
                *b = item.load(Ordering::Relaxed);
            }
            // SAFETY: the batch holds only addresses of this pool's metadata entries, of free
            // frames that nobody else holds (they left their freers when they were added),
            // each once.
            heads.push_front(unsafe { packed::pack(&buf[..chunk.len()]) });
        }
        let home = self.home.swap(NONE, Ordering::Relaxed);
        self.count.store(0, Ordering::Relaxed);
        Full { heads, n, home }
    }
}

//! Producer and consumer rings shared with the kernel: libxdp's `struct xsk_ring_prod` and
//! `struct xsk_ring_cons` with `xsk_ring_prod__reserve` / `__submit` / `__needs_wakeup` and
//! `xsk_ring_cons__peek` / `__release`.
//!
//! Memory ordering follows the kernel's `xsk_queue.h` contract: a side reads the *other* side's
//! index with an acquire load (so the descriptors it then reads, or the slots it then
//! overwrites, are ordered after the peer's accesses) and publishes its *own* index with a
//! release store (so its descriptor writes, or reads, are ordered before). The index arithmetic
//! lives in [`crate::cursor`]. The same types run over the kernel's mmapped rings and, in tests
//! and loom models, over a simulated kernel side.

use std::fmt;
use std::ptr::NonNull;

use crate::cursor::{ConsCursor, ProdCursor, in_window};
use crate::sync::{AtomicU32, Ordering, Slot, fence};

/// `XDP_RING_NEED_WAKEUP` of `if_xdp.h`.
const XDP_RING_NEED_WAKEUP: u32 = 1;

/// Where a ring lives: the shared indices, the flags word and the descriptor array.
pub(crate) struct RingParts<T> {
    pub(crate) producer: NonNull<AtomicU32>,
    pub(crate) consumer: NonNull<AtomicU32>,
    pub(crate) flags: NonNull<AtomicU32>,
    pub(crate) ring: NonNull<Slot<T>>,
    pub(crate) size: u32,
    /// Keeps the memory above alive (an mmap, or a simulated ring).
    pub(crate) backing: Box<dyn Send + Sync>,
}

/// The producer side of a ring: TX (descriptors) and fill (frame addresses) for user space.
pub struct ProdRing<T> {
    /// `cached_prod`, `cached_cons` (consumer + size) and `size`.
    cursor: ProdCursor,
    /// Our index as last published (`*producer`), so that only reserved slots are writable.
    submitted: u32,
    mask: u32,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    ring: NonNull<Slot<T>>,
    _backing: Box<dyn Send + Sync>,
}

/// The consumer side of a ring: completion (frame addresses) and RX (descriptors).
pub struct ConsRing<T> {
    /// `cached_prod`, `cached_cons` and `size`.
    cursor: ConsCursor,
    /// Our index as last published (`*consumer`), so that only peeked slots are readable.
    released: u32,
    mask: u32,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    ring: NonNull<Slot<T>>,
    _backing: Box<dyn Send + Sync>,
}

// SAFETY: the ring owns its view of the shared memory (kept alive by `_backing`, which is
// `Send`); all access goes through `&mut self`, and the peer is the kernel or a simulated side
// that follows the same index protocol.
unsafe impl<T: Send> Send for ProdRing<T> {}
// SAFETY: as for `ProdRing`.
unsafe impl<T: Send> Send for ConsRing<T> {}

impl<T> fmt::Debug for ProdRing<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProdRing")
            .field("cached_prod", &self.cursor.cached_prod)
            .field("cached_cons", &self.cursor.cached_cons)
            .field("size", &self.cursor.size)
            .field("submitted", &self.submitted)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for ConsRing<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsRing")
            .field("cached_prod", &self.cursor.cached_prod)
            .field("cached_cons", &self.cursor.cached_cons)
            .field("size", &self.cursor.size)
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}

impl<T: Copy> ProdRing<T> {
    /// A producer over `parts`.
    ///
    /// # Safety
    ///
    /// - every pointer in `parts` is valid and aligned for as long as `parts.backing` lives;
    /// - `parts.ring` points to `parts.size` slots, and `parts.size` is a power of two;
    /// - this is the only user-space producer of the ring, and the consumer side follows the
    ///   AF_XDP index protocol (reads slots only below a producer index it acquired).
    pub(crate) unsafe fn from_parts(parts: RingParts<T>) -> Self {
        // SAFETY: the pointers are valid (contract); we read the indices once to start from
        // where the ring stands (zero for a fresh kernel ring).
        let (prod, cons) = unsafe {
            (
                parts.producer.as_ref().load(Ordering::Relaxed),
                parts.consumer.as_ref().load(Ordering::Acquire),
            )
        };
        ProdRing {
            cursor: ProdCursor::new(parts.size, prod, cons),
            submitted: prod,
            mask: parts.size - 1,
            producer: parts.producer,
            consumer: parts.consumer,
            flags: parts.flags,
            ring: parts.ring,
            _backing: parts.backing,
        }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: valid while `_backing` lives (constructor contract), i.e. as long as `self`.
        unsafe { self.consumer.as_ref() }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: valid while `_backing` lives (constructor contract), i.e. as long as `self`.
        unsafe { self.producer.as_ref() }
    }

    /// Number of entries of the ring.
    pub fn size(&self) -> u32 {
        self.cursor.size
    }

    /// `xsk_prod_nb_free`: free entries, reading the consumer index only if fewer than `nb`
    /// are known to be free.
    pub fn nb_free(&mut self, nb: u32) -> u32 {
        let consumer = self.consumer;
        // SAFETY: valid while `_backing` lives (constructor contract).
        self.cursor
            .nb_free(nb, || unsafe { consumer.as_ref() }.load(Ordering::Acquire))
    }

    /// `xsk_ring_prod__reserve`: reserves exactly `nb` entries or none; returns the first index.
    pub fn reserve(&mut self, nb: u32) -> Option<u32> {
        let consumer = self.consumer;
        // SAFETY: valid while `_backing` lives (constructor contract).
        self.cursor
            .reserve(nb, || unsafe { consumer.as_ref() }.load(Ordering::Acquire))
    }

    /// Reserves up to `nb` entries: `(first index, count)`.
    pub fn reserve_up_to(&mut self, nb: u32) -> (u32, u32) {
        let consumer = self.consumer;
        // SAFETY: valid while `_backing` lives (constructor contract).
        self.cursor
            .reserve_up_to(nb, || unsafe { consumer.as_ref() }.load(Ordering::Acquire))
    }

    /// Writes `value` into reserved entry `idx` (`*xsk_ring_prod__tx_desc(idx) = value`).
    ///
    /// # Panics
    ///
    /// If `idx` is not reserved and unsubmitted: the kernel may be reading any other slot.
    pub fn write(&mut self, idx: u32, value: T) {
        assert!(
            in_window(idx, self.submitted, self.cursor.cached_prod),
            "ring index {idx} is not reserved"
        );
        // SAFETY: `idx & mask < size` and the slot array has `size` entries (constructor
        // contract); the slot lies in our reserved window, which the consumer does not read
        // until we publish it with `submit`.
        unsafe {
            self.ring
                .add((idx & self.mask) as usize)
                .as_ref()
                .write(value)
        }
    }

    /// `xsk_ring_prod__submit`: publishes the first `nb` reserved entries (at most all of them)
    /// with a release store of the producer index.
    pub fn submit(&mut self, nb: u32) {
        let reserved = self.cursor.cached_prod.wrapping_sub(self.submitted);
        self.submitted = self.submitted.wrapping_add(nb.min(reserved));
        self.producer().store(self.submitted, Ordering::Release);
    }

    /// `xsk_ring_prod__cancel`: gives back the last `nb` reserved, unsubmitted entries.
    pub fn cancel(&mut self, nb: u32) {
        let reserved = self.cursor.cached_prod.wrapping_sub(self.submitted);
        self.cursor.cancel(nb.min(reserved));
    }

    /// `xsk_ring_prod__needs_wakeup`: whether the kernel asked for a syscall to make progress.
    ///
    /// A full fence orders our producer store before the flag load, pairing with the kernel
    /// setting the flag before its last look at the ring, so a wakeup is never missed.
    pub fn needs_wakeup(&self) -> bool {
        fence(Ordering::SeqCst);
        // SAFETY: valid while `_backing` lives (constructor contract).
        let flags = unsafe { self.flags.as_ref() }.load(Ordering::Relaxed);
        flags & XDP_RING_NEED_WAKEUP != 0
    }

    /// Reserves, writes and submits as many of `items` as fit; returns how many.
    pub fn produce(&mut self, items: &[T]) -> usize {
        let want = u32::try_from(items.len()).unwrap_or(u32::MAX);
        let (idx, n) = self.reserve_up_to(want);
        for (k, item) in items.iter().take(n as usize).enumerate() {
            self.write(idx.wrapping_add(k as u32), *item);
        }
        self.submit(n);
        n as usize
    }

    /// Entries submitted and not yet consumed by the other side, as last seen (an upper bound).
    pub fn outstanding(&mut self) -> u32 {
        let cons = self.consumer().load(Ordering::Acquire);
        self.cursor.cached_cons = cons.wrapping_add(self.cursor.size);
        self.submitted.wrapping_sub(cons)
    }
}

impl<T: Copy> ConsRing<T> {
    /// A consumer over `parts`.
    ///
    /// # Safety
    ///
    /// - every pointer in `parts` is valid and aligned for as long as `parts.backing` lives;
    /// - `parts.ring` points to `parts.size` slots, and `parts.size` is a power of two;
    /// - this is the only user-space consumer of the ring, and the producer side follows the
    ///   AF_XDP index protocol (writes slots only below a consumer index it acquired + size).
    pub(crate) unsafe fn from_parts(parts: RingParts<T>) -> Self {
        // SAFETY: the pointers are valid (contract).
        let (prod, cons) = unsafe {
            (
                parts.producer.as_ref().load(Ordering::Acquire),
                parts.consumer.as_ref().load(Ordering::Relaxed),
            )
        };
        ConsRing {
            cursor: ConsCursor::new(parts.size, prod, cons),
            released: cons,
            mask: parts.size - 1,
            producer: parts.producer,
            consumer: parts.consumer,
            flags: parts.flags,
            ring: parts.ring,
            _backing: parts.backing,
        }
    }

    /// Number of entries of the ring.
    pub fn size(&self) -> u32 {
        self.cursor.size
    }

    /// `xsk_cons_nb_avail`: up to `nb` entries ready, reading the producer index only when the
    /// cached view shows none.
    pub fn nb_avail(&mut self, nb: u32) -> u32 {
        let producer = self.producer;
        // SAFETY: valid while `_backing` lives (constructor contract).
        self.cursor
            .nb_avail(nb, || unsafe { producer.as_ref() }.load(Ordering::Acquire))
    }

    /// `xsk_ring_cons__peek`: takes up to `nb` ready entries, `(first index, count)`.
    pub fn peek(&mut self, nb: u32) -> (u32, u32) {
        let producer = self.producer;
        // SAFETY: valid while `_backing` lives (constructor contract).
        self.cursor
            .peek(nb, || unsafe { producer.as_ref() }.load(Ordering::Acquire))
    }

    /// Reads peeked entry `idx` (`*xsk_ring_cons__comp_addr(idx)` / `__rx_desc(idx)`).
    ///
    /// # Panics
    ///
    /// If `idx` is not peeked and unreleased: the kernel may be writing any other slot.
    pub fn read(&self, idx: u32) -> T {
        assert!(
            in_window(idx, self.released, self.cursor.cached_cons),
            "ring index {idx} is not peeked"
        );
        // SAFETY: `idx & mask < size` and the slot array has `size` entries (constructor
        // contract); the slot is below the producer index we acquired and above our published
        // consumer index, so the producer does not write it until we release it.
        unsafe { self.ring.add((idx & self.mask) as usize).as_ref().read() }
    }

    /// `xsk_ring_cons__release`: hands the first `nb` peeked entries (at most all of them) back
    /// to the producer with a release store of the consumer index.
    pub fn release(&mut self, nb: u32) {
        let peeked = self.cursor.cached_cons.wrapping_sub(self.released);
        self.released = self.released.wrapping_add(nb.min(peeked));
        // SAFETY: valid while `_backing` lives (constructor contract).
        unsafe { self.consumer.as_ref() }.store(self.released, Ordering::Release);
    }

    /// `xsk_ring_cons__cancel`: un-peeks the last `nb` peeked, unreleased entries.
    pub fn cancel(&mut self, nb: u32) {
        let peeked = self.cursor.cached_cons.wrapping_sub(self.released);
        self.cursor.cancel(nb.min(peeked));
    }

    /// Whether the kernel set `XDP_RING_NEED_WAKEUP` on this ring.
    pub fn needs_wakeup(&self) -> bool {
        fence(Ordering::SeqCst);
        // SAFETY: valid while `_backing` lives (constructor contract).
        let flags = unsafe { self.flags.as_ref() }.load(Ordering::Relaxed);
        flags & XDP_RING_NEED_WAKEUP != 0
    }

    /// Peeks up to `max` entries, hands each to `f`, releases them; returns how many.
    pub fn consume(&mut self, max: u32, mut f: impl FnMut(T)) -> usize {
        let (idx, n) = self.peek(max);
        for k in 0..n {
            f(self.read(idx.wrapping_add(k)));
        }
        self.release(n);
        n as usize
    }
}

/// A ring in ordinary memory with both sides in user space: the simulated kernel of the unit
/// tests and loom models.
#[cfg(test)]
pub(crate) mod sim {
    use super::*;

    struct SimRing<T> {
        producer: AtomicU32,
        consumer: AtomicU32,
        flags: AtomicU32,
        slots: Box<[Slot<T>]>,
    }

    // SAFETY: the slots are only accessed through the ring protocol, which hands each slot to
    // one side at a time.
    unsafe impl<T: Send> Sync for SimRing<T> {}

    /// A producer and a consumer over one ring of `size` entries whose indices start at `start`.
    pub(crate) fn pair<T: Copy + Default + Send + 'static>(
        size: u32,
        start: u32,
    ) -> (ProdRing<T>, ConsRing<T>) {
        assert!(size.is_power_of_two());
        let ring = std::sync::Arc::new(SimRing {
            producer: AtomicU32::new(start),
            consumer: AtomicU32::new(start),
            flags: AtomicU32::new(0),
            slots: (0..size).map(|_| Slot::new(T::default())).collect(),
        });
        let parts = |r: &std::sync::Arc<SimRing<T>>| RingParts {
            producer: NonNull::from(&r.producer),
            consumer: NonNull::from(&r.consumer),
            flags: NonNull::from(&r.flags),
            ring: NonNull::from(&r.slots[..]).cast(),
            size,
            backing: Box::new(r.clone()),
        };
        // SAFETY: the pointers point into the Arc kept alive by `backing`; `size` slots; one
        // producer and one consumer, both following the protocol.
        unsafe {
            (
                ProdRing::from_parts(parts(&ring)),
                ConsRing::from_parts(parts(&ring)),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sim::pair;

    /// Runs `f` as a loom model under `--cfg lockless_loom`, directly otherwise.
    fn model(f: impl Fn() + Send + Sync + 'static) {
        #[cfg(lockless_loom)]
        loom::model(f);
        #[cfg(not(lockless_loom))]
        f();
    }

    #[test]
    fn single_thread_round_trip() {
        model(single_thread_round_trip_body);
    }

    fn single_thread_round_trip_body() {
        let (mut p, mut c) = pair::<u64>(4, u32::MAX - 1);
        assert_eq!(p.produce(&[1, 2, 3, 4, 5]), 4);
        let mut got = Vec::new();
        assert_eq!(c.consume(2, |v| got.push(v)), 2);
        assert_eq!(p.produce(&[5, 6, 7]), 2);
        assert_eq!(c.consume(10, |v| got.push(v)), 2);
        assert_eq!(c.consume(10, |v| got.push(v)), 2);
        assert_eq!(got, [1, 2, 3, 4, 5, 6]);
        assert_eq!(p.outstanding(), 0);
    }

    #[test]
    #[cfg(not(lockless_loom))]
    #[should_panic(expected = "not reserved")]
    fn writing_an_unreserved_slot_panics() {
        let (mut p, _c) = pair::<u64>(4, 0);
        p.write(0, 1);
    }

    #[test]
    fn cancel_gives_back_reservations() {
        model(cancel_gives_back_reservations_body);
    }

    fn cancel_gives_back_reservations_body() {
        let (mut p, mut c) = pair::<u64>(4, 0);
        let idx = p.reserve(3).unwrap();
        p.write(idx, 9);
        p.cancel(2);
        p.submit(3);
        assert_eq!(c.consume(4, |v| assert_eq!(v, 9)), 1);
        assert_eq!(p.reserve(4), Some(1));
    }

    #[test]
    #[cfg(not(lockless_loom))]
    fn two_threads_transfer_in_order() {
        let (mut p, mut c) = pair::<u64>(8, u32::MAX - 3);
        const N: u64 = 100_000;
        let t = std::thread::spawn(move || {
            let mut next = 0u64;
            while next < N {
                let batch: Vec<u64> = (next..(next + 5).min(N)).collect();
                next += p.produce(&batch) as u64;
            }
        });
        let mut expect = 0u64;
        while expect < N {
            c.consume(3, |v| {
                assert_eq!(v, expect);
                expect += 1;
            });
        }
        t.join().unwrap();
    }
}

/// Loom models: the user-space side against a simulated kernel side over the same ring.
#[cfg(all(test, lockless_loom))]
mod loom_models {
    use super::sim::pair;
    use loom::thread;

    /// A TX ring of two entries: three descriptors cross it in order, none lost or torn.
    #[test]
    fn producer_and_kernel_consumer() {
        loom::model(|| {
            let (mut p, mut c) = pair::<u64>(2, u32::MAX);
            let t = thread::spawn(move || {
                let mut next = 1u64;
                while next <= 3 {
                    if p.produce(&[next]) == 1 {
                        next += 1;
                    } else {
                        thread::yield_now();
                    }
                }
            });
            let mut expect = 1u64;
            while expect <= 3 {
                if c.consume(2, |v| {
                    assert_eq!(v, expect);
                    expect += 1;
                }) == 0
                {
                    thread::yield_now();
                }
            }
            t.join().unwrap();
        });
    }

    /// A completion ring: the kernel produces in batches, user space reaps; slots are reused.
    #[test]
    fn kernel_producer_and_reaper() {
        loom::model(|| {
            let (mut p, mut c) = pair::<u64>(2, 0);
            let t = thread::spawn(move || {
                let mut sent = 0u64;
                while sent < 3 {
                    let batch = [sent + 10, sent + 11];
                    let n = p.produce(&batch[..(3 - sent).min(2) as usize]);
                    if n == 0 {
                        thread::yield_now();
                    }
                    sent += n as u64;
                }
            });
            let mut got = Vec::new();
            while got.len() < 3 {
                if c.consume(1, |v| got.push(v)) == 0 {
                    thread::yield_now();
                }
            }
            assert_eq!(got, [10, 11, 12]);
            t.join().unwrap();
        });
    }
}

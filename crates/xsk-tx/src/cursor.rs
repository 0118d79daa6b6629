//! Ring index arithmetic of libxdp's `xsk.h`, pure and free of memory accesses.
//!
//! An AF_XDP ring is a power-of-two array shared with the kernel plus two free-running `u32`
//! indices: the producer's and the consumer's. Each side keeps cached copies so that it reads
//! the other side's index (an acquire load, the only costly access) only when its cached view
//! says the batch does not fit. This module is the arithmetic of `xsk_prod_nb_free`,
//! `xsk_ring_prod__reserve`, `xsk_cons_nb_avail` and `xsk_ring_cons__peek`; the loads are passed
//! in as closures so that the same code runs on the kernel's mmapped indices, on a simulated
//! kernel under loom, and in plain unit tests. All arithmetic wraps, as the kernel's does.

/// The producer's cached view of a ring (`struct xsk_ring_prod`'s `cached_prod`/`cached_cons`).
///
/// As in libxdp, `cached_cons` holds the consumer index *plus the ring size*, so that the free
/// space is one subtraction: `cached_cons - cached_prod`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProdCursor {
    /// Next index this producer will hand out (reserved entries end here).
    pub cached_prod: u32,
    /// Last consumer index seen, plus `size`.
    pub cached_cons: u32,
    /// Ring size, a power of two.
    pub size: u32,
}

impl ProdCursor {
    /// A cursor for a ring of `size` entries whose shared indices read `producer` and `consumer`.
    pub fn new(size: u32, producer: u32, consumer: u32) -> Self {
        ProdCursor {
            cached_prod: producer,
            cached_cons: consumer.wrapping_add(size),
            size,
        }
    }

    /// Free entries according to the cached view.
    #[inline]
    pub fn cached_free(&self) -> u32 {
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// `xsk_prod_nb_free`: the free entries, refreshing the consumer index only if fewer than
    /// `nb` are known to be free. The result may exceed `nb`; it never exceeds `size` while the
    /// other side keeps the ring's rules.
    #[inline]
    pub fn nb_free(&mut self, nb: u32, load_consumer: impl FnOnce() -> u32) -> u32 {
        let free = self.cached_free();
        if free >= nb {
            return free;
        }
        self.cached_cons = load_consumer().wrapping_add(self.size);
        // A consumer index ahead of the producer would mean a broken peer; never hand out more
        // than the ring holds.
        self.cached_free().min(self.size)
    }

    /// `xsk_ring_prod__reserve`: all `nb` entries or none. Returns the first reserved index.
    #[inline]
    pub fn reserve(&mut self, nb: u32, load_consumer: impl FnOnce() -> u32) -> Option<u32> {
        if self.nb_free(nb, load_consumer) < nb {
            return None;
        }
        let idx = self.cached_prod;
        self.cached_prod = self.cached_prod.wrapping_add(nb);
        Some(idx)
    }

    /// Reserves up to `nb` entries: `(first index, count)`, count possibly zero.
    #[inline]
    pub fn reserve_up_to(&mut self, nb: u32, load_consumer: impl FnOnce() -> u32) -> (u32, u32) {
        let n = self.nb_free(nb, load_consumer).min(nb);
        let idx = self.cached_prod;
        self.cached_prod = self.cached_prod.wrapping_add(n);
        (idx, n)
    }

    /// `xsk_ring_prod__cancel`-style: gives back the last `nb` reserved, unsubmitted entries.
    #[inline]
    pub fn cancel(&mut self, nb: u32) {
        self.cached_prod = self.cached_prod.wrapping_sub(nb);
    }
}

/// The consumer's cached view of a ring (`struct xsk_ring_cons`'s `cached_prod`/`cached_cons`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsCursor {
    /// Last producer index seen.
    pub cached_prod: u32,
    /// Next index this consumer will look at (peeked entries end here).
    pub cached_cons: u32,
    /// Ring size, a power of two.
    pub size: u32,
}

impl ConsCursor {
    /// A cursor for a ring of `size` entries whose shared indices read `producer` and `consumer`.
    pub fn new(size: u32, producer: u32, consumer: u32) -> Self {
        ConsCursor {
            cached_prod: producer,
            cached_cons: consumer,
            size,
        }
    }

    /// Entries available according to the cached view.
    #[inline]
    pub fn cached_avail(&self) -> u32 {
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// `xsk_cons_nb_avail`: up to `nb` available entries, refreshing the producer index only
    /// when the cached view shows none.
    #[inline]
    pub fn nb_avail(&mut self, nb: u32, load_producer: impl FnOnce() -> u32) -> u32 {
        let mut entries = self.cached_avail();
        if entries == 0 {
            self.cached_prod = load_producer();
            entries = self.cached_avail();
        }
        // A producer index more than a ring ahead would mean a broken peer.
        entries.min(self.size).min(nb)
    }

    /// `xsk_ring_cons__peek`: takes up to `nb` entries, `(first index, count)`.
    #[inline]
    pub fn peek(&mut self, nb: u32, load_producer: impl FnOnce() -> u32) -> (u32, u32) {
        let n = self.nb_avail(nb, load_producer);
        let idx = self.cached_cons;
        self.cached_cons = self.cached_cons.wrapping_add(n);
        (idx, n)
    }

    /// `xsk_ring_cons__cancel`: un-peeks the last `nb` peeked, unreleased entries.
    #[inline]
    pub fn cancel(&mut self, nb: u32) {
        self.cached_cons = self.cached_cons.wrapping_sub(nb);
    }
}

/// Whether `idx` lies in the window `[start, end)` of free-running indices.
#[inline]
pub(crate) fn in_window(idx: u32, start: u32, end: u32) -> bool {
    idx.wrapping_sub(start) < end.wrapping_sub(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_reserves_until_full_then_refreshes() {
        let mut p = ProdCursor::new(8, 0, 0);
        assert_eq!(p.cached_free(), 8);
        assert_eq!(
            p.reserve(5, || unreachable!("cached view suffices")),
            Some(0)
        );
        assert_eq!(p.reserve(4, || 0), None, "consumer has not moved: 3 free");
        assert_eq!(p.reserve(4, || 2), Some(5), "consumer released 2: 5 free");
        assert_eq!(p.cached_prod, 9);
        assert_eq!(p.cached_free(), 1);
        assert_eq!(p.reserve_up_to(10, || 9), (9, 8));
        assert_eq!(p.cached_free(), 0);
    }

    #[test]
    fn consumer_refreshes_only_when_empty() {
        let mut c = ConsCursor::new(8, 0, 0);
        assert_eq!(c.peek(4, || 3), (0, 3));
        assert_eq!(
            c.peek(4, || 3),
            (3, 0),
            "empty again: refreshed, nothing new"
        );
        let mut c = ConsCursor::new(8, 6, 2);
        assert_eq!(c.peek(2, || unreachable!()), (2, 2));
        assert_eq!(c.peek(8, || unreachable!()), (4, 2));
        assert_eq!(c.peek(8, || 6), (6, 0));
        assert_eq!(c.peek(8, || 10), (6, 4));
    }

    #[test]
    fn indices_wrap_around_u32() {
        let start = u32::MAX - 2;
        let mut p = ProdCursor::new(4, start, start);
        let mut c = ConsCursor::new(4, start, start);
        let mut produced = 0u32;
        let mut consumed = 0u32;
        for round in 0..20u32 {
            let (i, n) = p.reserve_up_to(3, || c.cached_cons);
            assert_eq!(i, start.wrapping_add(produced));
            produced = produced.wrapping_add(n);
            let (j, m) = c.peek(round % 4 + 1, || p.cached_prod);
            assert_eq!(j, start.wrapping_add(consumed));
            consumed = consumed.wrapping_add(m);
            assert!(produced.wrapping_sub(consumed) <= 4);
        }
        assert!(consumed > 20);
    }

    #[test]
    fn broken_peer_never_yields_more_than_the_ring() {
        let mut p = ProdCursor::new(4, 0, 0);
        assert_eq!(p.nb_free(5, || 100), 4);
        let mut c = ConsCursor::new(4, 0, 0);
        assert_eq!(c.nb_avail(100, || 100), 4);
    }

    #[test]
    fn window_membership_wraps() {
        assert!(in_window(u32::MAX, u32::MAX - 1, 1));
        assert!(in_window(0, u32::MAX - 1, 1));
        assert!(!in_window(1, u32::MAX - 1, 1));
        assert!(!in_window(5, 5, 5));
    }

    /// Oracle test: random reserve/peek sequences against a `VecDeque` model.
    #[test]
    fn matches_a_queue_oracle() {
        use std::collections::VecDeque;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let size = 16u32;
        let start = u32::MAX - 40;
        let mut p = ProdCursor::new(size, start, start);
        let mut c = ConsCursor::new(size, start, start);
        let mut ring = vec![0u64; size as usize];
        let mut oracle = VecDeque::new();
        let mut next = 0u64;
        for _ in 0..10_000 {
            if rand() % 2 == 0 {
                let want = (rand() % 20) as u32;
                let (i, n) = p.reserve_up_to(want, || c.cached_cons);
                assert_eq!(
                    n as usize,
                    (want as usize).min(size as usize - oracle.len())
                );
                for k in 0..n {
                    ring[(i.wrapping_add(k) & (size - 1)) as usize] = next;
                    oracle.push_back(next);
                    next += 1;
                }
            } else {
                let want = (rand() % 20) as u32;
                let (j, m) = c.peek(want, || p.cached_prod);
                // The consumer refreshes only when its cached view is empty, so it may see
                // fewer than are there, but never more, and never none when some are.
                assert!(m as usize <= (want as usize).min(oracle.len()));
                assert_eq!(m == 0, want == 0 || oracle.is_empty());
                for k in 0..m {
                    let got = ring[(j.wrapping_add(k) & (size - 1)) as usize];
                    assert_eq!(Some(got), oracle.pop_front());
                }
            }
        }
    }
}

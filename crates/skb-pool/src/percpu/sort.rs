//! [`RefillOrder::Address`]: a drained refill's frames sorted by address (a bitmap over the
//! span of their metadata entries) before they go into the cache, so that it hands them out
//! lowest address first.
//!
//! [`RefillOrder::Address`]: super::RefillOrder::Address
//!
//! This file must not take frames from anywhere: its caller hands them over.

use crate::meta::Frame;
use crate::pool::PoolInner;

impl PoolInner {
    /// [`RefillOrder::Address`]: puts the free frames at `addrs` (carrying no references) into
    /// this CPU's cache so that it hands them out lowest address first, but the lowest one if
    /// `keep_last`, which it returns; what does not fit goes to [`stash`](Self::stash).
    ///
    /// [`RefillOrder::Address`]: super::RefillOrder::Address
    pub(super) fn stash_sorted(&self, addrs: &mut [usize], keep_last: bool) -> Option<Frame> {
        if addrs.is_empty() {
            return None;
        }
        // Highest first: the last one pushed (or kept) is the lowest.
        sort_desc(addrs);
        // SAFETY: addresses of this pool's free frames the caller took whole, each once.
        unsafe { self.stash_spare(addrs, keep_last) }
    }
}

/// Words of [`sort_desc`]'s bitmap (2 KiB, zeroed at each sort): metadata entries spanning at
/// most 16 Ki lines (1 MiB of side array, about 16 000 frames) sort by bitmap; wider spans by
/// comparison.
const SORT_WORDS: usize = 256;

/// Sorts distinct metadata addresses (entries of one side array, so whole entries apart)
/// highest first. A comparison sort costs about 9 ns a frame on frames in no order (a
/// refill's, in the transmit engine); marking each entry's line in a bitmap over the span and
/// reading the bits back from the top costs a pass over the frames and one over the span's
/// words.
fn sort_desc(addrs: &mut [usize]) {
    // Entries are `STRIDE` apart within a chunk, and chunks (and their one-entry headers) are
    // whole multiples of it (meta.rs asserts both).
    const LINE: usize = crate::meta::STRIDE;
    let (Some(&lo), Some(&hi)) = (addrs.iter().min(), addrs.iter().max()) else {
        return;
    };
    let words = (hi - lo) / LINE / 64 + 1;
    if words > SORT_WORDS || words > 4 * addrs.len() + 16 {
        addrs.sort_unstable_by(|a, b| b.cmp(a));
        return;
    }
    let mut bits = [0u64; SORT_WORDS];
    for &a in addrs.iter() {
        debug_assert_eq!((a - lo) % LINE, 0, "metadata entries are whole lines");
        let i = (a - lo) / LINE;
        bits[i / 64] |= 1 << (i % 64);
    }
    let mut k = 0;
    for w in (0..words).rev() {
        let mut b = bits[w];
        while b != 0 {
            let top = 63 - b.leading_zeros() as usize;
            b ^= 1 << top;
            addrs[k] = lo + (w * 64 + top) * LINE;
            k += 1;
        }
    }
    debug_assert_eq!(k, addrs.len(), "a metadata address given twice");
}

#[cfg(all(test, not(lockless_loom)))]
mod tests {
    use super::{SORT_WORDS, sort_desc};
    use crate::meta::STRIDE;

    /// A xorshift permutation source: deterministic, no dependency.
    fn shuffled(mut v: Vec<usize>, mut seed: u64) -> Vec<usize> {
        for i in (1..v.len()).rev() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            v.swap(i, (seed % (i as u64 + 1)) as usize);
        }
        v
    }

    #[test]
    fn sort_desc_matches_a_comparison_sort_on_narrow_and_wide_spans() {
        let base = 0x7f12_3400_0000usize;
        // A dense span, one entry, a span that nearly fills the bitmap (all by bitmap) and a
        // sparse one (the comparison sort), each from an ordered, a reversed and a shuffled
        // start.
        let cases: [(usize, usize); 4] = [
            (256, 4096),
            (1, 1),
            (300, SORT_WORDS * 64 + 1),
            (8, 1 << 20),
        ];
        for (n, span) in cases {
            let step = (span / n).max(1);
            let entries: Vec<usize> = (0..n).map(|i| base + i * step * STRIDE).collect();
            let mut want = entries.clone();
            want.sort_unstable_by(|a, b| b.cmp(a));
            for (k, start) in [entries.clone(), want.clone(), shuffled(entries.clone(), 7)]
                .into_iter()
                .enumerate()
            {
                let mut got = start;
                sort_desc(&mut got);
                assert_eq!(got, want, "n {n}, span {span}, start {k}");
            }
        }
        let mut empty: Vec<usize> = Vec::new();
        sort_desc(&mut empty);
        assert!(empty.is_empty());
    }
}

//! The AF_XDP ring cursor arithmetic (`xsk-tx`'s `cursor.rs`, used read-only) against a model
//! ring with free-running `u32` indices that start anywhere (wrap-around included): a producer
//! never reserves more than is free, a consumer never peeks more than was submitted, and every
//! entry is consumed once, in order.
#![no_main]

use std::collections::VecDeque;

use libfuzzer_sys::fuzz_target;
use xsk_tx::cursor::{ConsCursor, ProdCursor};

fuzz_target!(|data: &[u8]| {
    let [log, s0, s1, s2, s3, rest @ ..] = data else {
        return;
    };
    let size = 1u32 << (log % 12);
    let start = u32::from_le_bytes([*s0, *s1, *s2, *s3]);
    // Shared indices, as the kernel and the user see them.
    let (mut producer, mut consumer) = (start, start);
    let mut prod = ProdCursor::new(size, producer, consumer);
    let mut cons = ConsCursor::new(size, producer, consumer);
    let mut ring: VecDeque<u32> = VecDeque::new(); // submitted, not consumed (entry = index)
    let mut reserved: u32 = 0; // reserved, not submitted
    let mut peeked: u32 = 0; // peeked, not released
    let mut next_expected = start;
    for c in rest.chunks(2) {
        let nb = u32::from(c.get(1).copied().unwrap_or(0)) % (2 * size + 2);
        match c[0] % 6 {
            0 => {
                if let Some(idx) = prod.reserve(nb, || consumer) {
                    assert_eq!(idx, producer.wrapping_add(reserved));
                    reserved += nb;
                }
                assert!(ring.len() as u32 + reserved <= size, "over-reserved");
            }
            1 => {
                let (idx, n) = prod.reserve_up_to(nb, || consumer);
                assert!(n <= nb);
                assert_eq!(idx, producer.wrapping_add(reserved));
                reserved += n;
                assert!(ring.len() as u32 + reserved <= size, "over-reserved");
            }
            2 => {
                // Submit everything reserved (xsk_ring_prod__submit).
                for i in 0..reserved {
                    ring.push_back(producer.wrapping_add(i));
                }
                producer = producer.wrapping_add(reserved);
                reserved = 0;
                assert_eq!(prod.cached_prod, producer);
            }
            3 => {
                let k = nb.min(reserved);
                prod.cancel(k);
                reserved -= k;
            }
            4 => {
                let (idx, n) = cons.peek(nb, || producer);
                assert!(n <= nb);
                assert_eq!(idx, consumer.wrapping_add(peeked));
                assert!(
                    peeked + n <= ring.len() as u32,
                    "peeked unsubmitted entries"
                );
                for i in 0..n {
                    assert_eq!(ring[(peeked + i) as usize], idx.wrapping_add(i));
                }
                peeked += n;
            }
            _ => {
                // Release what was peeked (xsk_ring_cons__release), or un-peek some.
                if nb % 2 == 0 {
                    for _ in 0..peeked {
                        assert_eq!(ring.pop_front(), Some(next_expected));
                        next_expected = next_expected.wrapping_add(1);
                    }
                    consumer = consumer.wrapping_add(peeked);
                    peeked = 0;
                } else {
                    let k = nb.min(peeked);
                    cons.cancel(k);
                    peeked -= k;
                }
            }
        }
        // Both sides' cached views agree with the shared state.
        assert!(cons.cached_avail() <= size);
    }
});

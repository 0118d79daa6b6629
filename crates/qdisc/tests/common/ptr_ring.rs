//! One band of pfifo_fast as `include/linux/ptr_ring.h` writes it, slot by slot: the oracle
//! of pfifo_fast's room for the property tests (`proptest_fifo.rs`) and the fuzz target
//! (`fuzz/fuzz_targets/qdisc_fifo.rs`), which include this file by path. It models the ring
//! alone, with no qdisc code, so it must not use the crate under test.

/// One band's ring as `include/linux/ptr_ring.h` writes it, slot by slot: the oracle of
/// pfifo_fast's room. A read slot keeps its pointer until `__ptr_ring_discard_one` zeroes a
/// batch of them, and `__ptr_ring_produce` refuses while its slot is set.
pub(crate) struct PtrRing {
    queue: Vec<Option<u64>>,
    producer: usize,
    consumer_head: usize,
    consumer_tail: usize,
    batch: usize,
    /// Packets produced and not consumed.
    queued: usize,
}

impl PtrRing {
    /// An empty ring of `size` slots (`ptr_ring_init`).
    pub(crate) fn new(size: usize) -> Self {
        // __ptr_ring_set_size, with 64-byte cache lines and 8-byte pointers.
        let batch = if 64 * 2 / 8 > size / 2 { 1 } else { 64 * 2 / 8 };
        PtrRing {
            queue: vec![None; size],
            producer: 0,
            consumer_head: 0,
            consumer_tail: 0,
            batch,
            queued: 0,
        }
    }

    /// `__ptr_ring_produce`: false (refused) while the producer's slot is still set.
    pub(crate) fn produce(&mut self, id: u64) -> bool {
        if self.queue[self.producer].is_some() {
            return false;
        }
        self.queue[self.producer] = Some(id);
        self.queued += 1;
        self.producer += 1;
        if self.producer >= self.queue.len() {
            self.producer = 0;
        }
        true
    }

    /// `__ptr_ring_consume`: the oldest packet, clearing read slots in batches.
    pub(crate) fn consume(&mut self) -> Option<u64> {
        // A set slot at consumer_head is a queued packet: read slots lie behind it.
        let id = self.queue[self.consumer_head]?;
        self.queued -= 1;
        let head = self.consumer_head;
        let consumer_head = head + 1;
        if consumer_head - self.consumer_tail >= self.batch || consumer_head >= self.queue.len() {
            for slot in &mut self.queue[self.consumer_tail..=head] {
                *slot = None;
            }
            self.consumer_tail = consumer_head;
        }
        if consumer_head >= self.queue.len() {
            self.consumer_head = 0;
            self.consumer_tail = 0;
        } else {
            self.consumer_head = consumer_head;
        }
        Some(id)
    }

    /// The packet a consume would return, if any (`__ptr_ring_peek`).
    pub(crate) fn peek(&self) -> Option<u64> {
        self.queue[self.consumer_head]
    }

    /// Packets produced and not consumed.
    pub(crate) fn len(&self) -> usize {
        self.queued
    }
}

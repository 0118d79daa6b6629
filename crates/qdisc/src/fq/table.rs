//! The flow table (`fq_root[]` and `fq_gc`): flows by key in a hash map over a slab, plus an
//! age queue that bounds garbage collection.
//!
//! The kernel keeps flows in 2^`buckets_log` rbtrees and, on every lookup, frees at most
//! [`GC_MAX`] detached flows older than [`GC_AGE_NS`] met on the search path. A hash map has no
//! search path, so each detachment is recorded in a queue ordered by age; a lookup pops at most
//! [`GC_SCAN_MAX`] entries from its front, frees at most [`GC_MAX`] flows that are still the same
//! detached flow and older than 3 s, and skips entries made stale by a flow's reactivation. The
//! work per lookup is bounded, and so is the queue: every entry is one detachment, and every
//! detachment needs an earlier enqueue.
//!
//! Slots of freed flows are recycled with their per-packet ring's capacity, so a table of churning
//! flows settles into allocating nothing.

use core::hash::{BuildHasherDefault, Hasher};
use std::collections::{HashMap, VecDeque};

use super::flow::{Flow, FlowState};
use crate::packet::Packet;

/// Flows freed per lookup at most (`FQ_GC_MAX`).
pub(super) const GC_MAX: usize = 8;
/// A detached flow older than this may be freed (`FQ_GC_AGE`, 3 s).
pub(super) const GC_AGE_NS: u64 = 3_000_000_000;
/// Age-queue entries examined per lookup at most (stale ones included).
pub(super) const GC_SCAN_MAX: usize = 2 * GC_MAX;

/// A fast multiplicative hasher for flow keys (the kernel's `hash_ptr` is not keyed either).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FlowHasher(u64);

impl FlowHasher {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    #[inline]
    fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(26) ^ w).wrapping_mul(Self::K);
    }
}

impl Hasher for FlowHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // Fold high bits down: hashbrown takes both the top 7 bits and the low bits.
        self.0 ^ (self.0 >> 29)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }
    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.mix(i as u64);
        self.mix((i >> 64) as u64);
    }
}

#[derive(Debug, Clone, Copy)]
struct GcEntry {
    age: u64,
    slot: u32,
    detach_id: u64,
}

/// What one GC pass did.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct GcResult {
    pub(super) freed: u32,
}

pub(super) struct FlowTable<P: Packet> {
    slots: Vec<Flow<P>>,
    free: Vec<u32>,
    map: HashMap<u128, u32, BuildHasherDefault<FlowHasher>>,
    ages: VecDeque<GcEntry>,
    next_detach_id: u64,
}

impl<P: Packet> FlowTable<P> {
    pub(super) fn with_capacity(cap: usize) -> Self {
        FlowTable {
            slots: Vec::new(),
            free: Vec::new(),
            map: HashMap::with_capacity_and_hasher(cap, BuildHasherDefault::default()),
            ages: VecDeque::new(),
            next_detach_id: 0,
        }
    }

    #[inline]
    pub(super) fn get(&self, idx: u32) -> &Flow<P> {
        &self.slots[idx as usize]
    }

    #[inline]
    pub(super) fn get_mut(&mut self, idx: u32) -> &mut Flow<P> {
        &mut self.slots[idx as usize]
    }

    #[inline]
    pub(super) fn lookup(&self, key: u128) -> Option<u32> {
        self.map.get(&key).copied()
    }

    /// Number of live flows.
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Creates a detached, empty flow for `key` (which must be absent).
    pub(super) fn insert(&mut self, key: u128, now: u64) -> u32 {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Flow::new());
                (self.slots.len() - 1) as u32
            }
        };
        let id = self.bump_detach_id();
        self.slots[idx as usize].reinit(key, now, id);
        self.map.insert(key, idx);
        idx
    }

    /// Queues a GC entry for flow `idx` as it is now: a new flow is detached from birth, and
    /// if its first packet is refused (`flow_limit` 0) it must still age out.
    pub(super) fn note_detached(&mut self, idx: u32) {
        let f = &self.slots[idx as usize];
        self.ages.push_back(GcEntry {
            age: f.age,
            slot: idx,
            detach_id: f.detach_id,
        });
    }

    fn bump_detach_id(&mut self) -> u64 {
        self.next_detach_id += 1;
        self.next_detach_id
    }

    /// Marks flow `idx` detached at `now` (`fq_flow_set_detached`) and queues it for GC.
    pub(super) fn set_detached(&mut self, idx: u32, now: u64) {
        let id = self.bump_detach_id();
        let f = &mut self.slots[idx as usize];
        f.state = FlowState::Detached;
        f.age = now;
        f.detach_id = id;
        self.ages.push_back(GcEntry {
            age: now,
            slot: idx,
            detach_id: id,
        });
    }

    /// Frees up to [`GC_MAX`] detached flows older than 3 s, never the flow of `keep`
    /// (`fq_gc`: the search stops at the flow being looked up).
    pub(super) fn gc(&mut self, now: u64, keep: u128) -> GcResult {
        let mut res = GcResult::default();
        let mut scanned = 0;
        while (res.freed as usize) < GC_MAX && scanned < GC_SCAN_MAX {
            let Some(e) = self.ages.front().copied() else {
                break;
            };
            // time_after(now, age + 3 s)
            if (now.wrapping_sub(e.age.wrapping_add(GC_AGE_NS)) as i64) <= 0 {
                break;
            }
            let f = &self.slots[e.slot as usize];
            let live = f.state == FlowState::Detached
                && f.detach_id == e.detach_id
                && self.map.get(&f.key) == Some(&e.slot);
            if live && f.key == keep {
                break;
            }
            self.ages.pop_front();
            scanned += 1;
            if live {
                let key = f.key;
                self.map.remove(&key);
                self.slots[e.slot as usize].detach_id = 0;
                self.free.push(e.slot);
                res.freed += 1;
            }
        }
        res
    }

    /// Removes every flow (the caller has purged their packets).
    pub(super) fn clear(&mut self) {
        self.map.clear();
        self.ages.clear();
        self.free.clear();
        self.free.extend((0..self.slots.len() as u32).rev());
        for f in &mut self.slots {
            f.detach_id = 0;
            f.state = FlowState::Detached;
        }
    }

    /// Every live flow index.
    pub(super) fn live(&self) -> impl Iterator<Item = u32> + '_ {
        self.map.values().copied()
    }

    /// Entries waiting in the age queue (for tests of the bound).
    pub(super) fn age_queue_len(&self) -> usize {
        self.ages.len()
    }
}

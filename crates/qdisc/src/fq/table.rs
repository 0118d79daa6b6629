//! The flow table (`fq_root[]` and `fq_gc`): flows by key in an open-addressing index over a
//! slab, plus the bookkeeping that lets garbage collection look only where the kernel looks.
//!
//! The kernel keeps flows in 2^`buckets_log` rbtrees, the bucket of a flow being `hash_ptr(sk,
//! buckets_log)` of its key (`hash_64` with `GOLDEN_RATIO_64`), and before every lookup that is not
//! on the fast path `fq_gc` frees at most [`GC_MAX`](crate::fq::table::GC_MAX) detached flows whose
//! age is more than `FQ_GC_AGE` (3·HZ jiffies) old, met on the search path in the looked-up bucket,
//! never the flow being looked up. Here the same decision is made per bucket without trees:
//!
//! - each detachment is recorded in one queue ordered by age (`age = jiffies | 1`); entries
//!   made stale by a flow's reactivation are skipped, and the reactivation marks its entry
//!   stale where it finds it, so that GC drops it at the front at once, without reading the
//!   flow;
//! - at a GC point, every entry whose flow has become a candidate (`time_after(jiffies, age +
//!   FQ_GC_AGE)`, which stays true until the flow is used again) moves to its bucket's
//!   candidate list, in age order (amortized O(1) per detachment);
//! - then up to [`GC_MAX`](crate::fq::table::GC_MAX) candidates of the looked-up bucket are freed,
//!   oldest detachment first, skipping the flow being looked up. A flow that is used again leaves
//!   its bucket's list at once.
//!
//! So exactly the kernel's candidates of exactly the kernel's bucket are eligible, and at most
//! eight go per lookup. Which eight, when a bucket holds more, differs: the kernel takes those
//! on the rbtree path toward the key (at most the path's length), this table the oldest.
//!
//! The index is built for a table larger than the cache: each 8-byte entry holds the slot
//! number, the key's kind, a 5-bit fingerprint of the key and the socket hash, and the key's id
//! is compared in the flow's hot line, which the lookup loads next anyway. So a lookup reads one
//! index line (linear probing, at most half full) and then the flow it found; a probe passing
//! another flow's entry of the same key kind reads that flow's line only when the fingerprints
//! agree (one time in 32). Against 16-byte entries holding the whole key, the index is half the
//! size (16 MB instead of 32 at a million flows), and fq's batched cost per packet fell from
//! 51.0–52.8 to 49.0–49.5 ns at a million flows and from 48.7–54.9 to 47.1–48.5 at 300 000
//! (three alternated pairs of the `qdisc` bench with cold slices; unchanged at 100 000).
//! Placing an entry (a doubling, a deletion's backward shift) reads its flow's key id from the
//! flow's line. The index starts with 2^`buckets_log` entries and doubles as flows are created,
//! so a lookup stays O(1) at any number of flows, where the kernel's trees cost
//! O(log(flows / buckets)). Slot numbers have 26 bits: at most 2^26 − 1 flows (past that, a
//! new flow is an allocation failure, as at the kernel's `kmem_cache_alloc`).
//!
//! Slots of freed flows are recycled with their per-packet ring's capacity, so a table of churning
//! flows settles into allocating nothing.

use std::collections::VecDeque;

use super::flow::{Flow, FlowCold, FlowState, NIL};
use super::huge;
use super::jiffies::time_after;
use crate::packet::Packet;

/// Flows freed per lookup at most (`FQ_GC_MAX`).
pub(super) const GC_MAX: usize = 8;
/// `GOLDEN_RATIO_64` of `include/linux/hash.h`.
pub(super) const GOLDEN_RATIO_64: u64 = 0x61C8_8646_80B5_83EB;

/// `hash_ptr(ptr, bits)` on a 64-bit kernel: `hash_long` = `hash_64_generic`, the top `bits`
/// bits of `val · GOLDEN_RATIO_64`.
#[inline]
pub(super) fn hash_ptr(val: u64, bits: u8) -> usize {
    (val.wrapping_mul(GOLDEN_RATIO_64) >> (64 - u32::from(bits))) as usize
}

/// A bucket's candidate list (flows linked through `FlowCold::gc_prev`/`gc_next`).
#[derive(Debug, Clone, Copy)]
struct GcList {
    first: u32,
    last: u32,
}

impl GcList {
    const EMPTY: GcList = GcList {
        first: NIL,
        last: NIL,
    };
}

/// `Entry::tag` of an empty index entry.
const EMPTY: u32 = u32::MAX;
/// `Entry::tag` bit: the key is a masked packet hash (odd key), not a socket id.
const HASHED: u32 = 1 << 31;
/// `Entry::tag` bits below the fingerprint: the flow's slot.
const SLOT_BITS: u32 = 26;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;
/// `Entry::tag` bits between the slot and the kind: five bits of the key's mix that its home
/// position does not use, so that a probe passing another flow's entry reads that flow's line
/// (to compare ids) once in 32 times, not every time.
const FINGERPRINT: u32 = !(HASHED | SLOT_MASK);
/// Most flow slots: slot numbers `0 .. 2^26 - 1` (67 million flows, some 11 GB of flow
/// state), so that no entry's tag is [`EMPTY`].
const MAX_SLOTS: usize = SLOT_MASK as usize;
/// Index bits at most: an index of `2^27` entries holds `MAX_SLOTS` flows at most half full,
/// and its home positions (the mix's top 27 bits) stay clear of the fingerprint's bits.
const MAX_INDEX_BITS: u32 = 27;
// The home position (the mix's top `bits ≤ MAX_INDEX_BITS` bits) and the fingerprint (bits
// 32..37) never share a bit.
const _: () = assert!(64 - MAX_INDEX_BITS >= 37);

/// One index entry, 8 bytes: the flow's slot, the key's kind and fingerprint in `tag`, and
/// the flow's socket hash. The key's id is compared in the flow's hot line
/// ([`Flow::key_id`]), which the lookup loads next anyway.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Entry {
    tag: u32,
    socket_hash: u32,
}

impl Entry {
    const VACANT: Entry = Entry {
        tag: EMPTY,
        socket_hash: 0,
    };

    #[inline]
    fn slot(self) -> u32 {
        self.tag & SLOT_MASK
    }

    /// Whether the entry's kind and fingerprint are `sig` (a key's [`Probe::sig`]).
    #[inline]
    fn carries(self, sig: u32) -> bool {
        self.tag & !SLOT_MASK == sig
    }
}

/// Where a key's lookup begins (its home position) and the tag bits its entry carries: what
/// the batched enqueue's prefetches need, computed once a packet.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct IndexHint {
    home: u32,
    sig: u32,
}

/// A key in its index form: its id, and the tag bits its entry must carry (kind and
/// fingerprint), and the top bits that give its home position.
#[derive(Debug, Clone, Copy)]
struct Probe {
    id: u64,
    sig: u32,
    mix: u64,
}

impl Probe {
    /// Splits `key` (a socket id `<< 1`, or `(masked hash << 1) | 1`) into id and kind.
    #[inline]
    fn of(key: u128) -> Probe {
        Probe::new((key >> 1) as u64, if key & 1 == 1 { HASHED } else { 0 })
    }

    /// Mixes id and kind (`HASHED` or 0): Fibonacci hashing, whose top bits pick the home
    /// position and whose bits 32..37 are the fingerprint.
    #[inline]
    fn new(id: u64, kind: u32) -> Probe {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let mix = (id ^ (u64::from(kind) << 32)).wrapping_mul(K);
        let fingerprint = ((mix >> 32) as u32) << SLOT_BITS & FINGERPRINT;
        Probe {
            id,
            sig: kind | fingerprint,
            mix,
        }
    }

    /// The position where the probe starts in an index of `2^bits` entries.
    #[inline]
    fn home(self, bits: u32) -> usize {
        (self.mix >> (64 - bits)) as usize
    }

    /// Whether `e` may be this key's entry (kind and fingerprint agree; an empty entry never
    /// does, being tested first by every caller).
    #[inline]
    fn may_be(self, e: Entry) -> bool {
        e.carries(self.sig)
    }
}

/// One detachment: the flow's slot ([`NIL`] once known stale, see [`FlowTable::reattach`]), its
/// age then (`jiffies | 1`) and which detachment of that slot it was (`Flow::detach_gen` then).
#[derive(Debug, Clone, Copy)]
struct GcEntry {
    age: u64,
    slot: u32,
    detach_gen: u32,
}

/// The age queue is swept when it holds more than `2 · slots + 64` entries, and at most this
/// many: so between a sweep and the next fewer than `2^29 + 1` entries are queued. A slot's
/// `detach_gen` is, at each of its detachments, frees and its creation, a fresh value of the
/// table's 32-bit position counter (advanced by each queued entry, free and creation), so it
/// cannot come back to the value of a stale entry before the sweep removes it (that would take
/// 2^32 pushes and frees, and frees need either a queued entry each, GC's, or a resize).
const SWEEP_AT_MOST: usize = 1 << 29;

/// Whether a GC entry is its slot's current detachment (not made stale by a later
/// detachment, a reattachment or a free).
#[inline]
fn entry_is_current<P: Packet>(slots: &[Flow<P>], e: &GcEntry) -> bool {
    // A stale mark answers without reading the flow: the sweep of a churning table then reads
    // the queue, not a flow line per entry.
    e.slot != NIL && {
        let f = &slots[e.slot as usize];
        f.state == FlowState::Detached && f.detach_gen == e.detach_gen
    }
}

/// A lookup hit: the flow's slot, its socket hash, and where its index entry is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hit {
    pub(super) slot: u32,
    pub(super) socket_hash: u32,
    pos: usize,
}

pub(super) struct FlowTable<P: Packet> {
    slots: Vec<Flow<P>>,
    cold: Vec<FlowCold<P>>,
    free: Vec<u32>,
    index: huge::HugeArray<Entry>,
    /// log2 of `index.len()`.
    bits: u32,
    live: usize,
    ages: VecDeque<GcEntry>,
    /// The position counter: advanced by every entry queued in `ages` (so the entry queued last
    /// took `next_pos - 1`), every free and every slot creation; the source of `detach_gen`s.
    next_pos: u32,
    /// `buckets_log`: the kernel's `fq_trees_log`, which picks a flow's bucket.
    buckets_log: u8,
    /// Per bucket, the detached flows that are GC candidates, oldest first.
    gc_lists: Vec<GcList>,
    /// Flows on all candidate lists.
    candidates: usize,
}

impl<P: Packet> FlowTable<P> {
    /// A table whose index starts with `2^buckets_log` entries (at least 16).
    pub(super) fn new(buckets_log: u8) -> Self {
        let bits = u32::from(buckets_log).max(4);
        FlowTable {
            slots: Vec::new(),
            cold: Vec::new(),
            free: Vec::new(),
            index: huge::HugeArray::filled(1 << bits, Entry::VACANT),
            bits,
            live: 0,
            ages: VecDeque::new(),
            next_pos: 0,
            buckets_log,
            gc_lists: vec![GcList::EMPTY; 1 << buckets_log],
            candidates: 0,
        }
    }

    /// The bucket of `key` (`hash_ptr(sk, q->fq_trees_log)`); the model's `sk` is the key's
    /// low 64 bits: a socket id `<< 1`, or `(masked hash << 1) | 1`.
    #[inline]
    pub(super) fn bucket(&self, key: u128) -> usize {
        hash_ptr(key as u64, self.buckets_log)
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
    pub(super) fn cold(&self, idx: u32) -> &FlowCold<P> {
        &self.cold[idx as usize]
    }

    /// Both parts of flow `idx`.
    #[inline]
    pub(super) fn both_mut(&mut self, idx: u32) -> (&mut Flow<P>, &mut FlowCold<P>) {
        (&mut self.slots[idx as usize], &mut self.cold[idx as usize])
    }

    /// Starts loading flow `idx`'s hot line (a hint: a stale index or `NIL` only prefetches an
    /// address outside the slab, which a prefetch never faults on).
    #[inline]
    pub(super) fn prefetch(&self, idx: u32) {
        llist_defer::hint::prefetch(self.slots.as_ptr().wrapping_add(idx as usize));
    }

    /// Where a lookup of `key` begins in the index as it is now, for the prefetch hints below
    /// (an index that grows afterwards makes the hint stale: a useless prefetch, nothing else).
    #[inline]
    pub(super) fn hint(&self, key: u128) -> IndexHint {
        let probe = Probe::of(key);
        IndexHint {
            home: probe.home(self.bits) as u32,
            sig: probe.sig,
        }
    }

    /// Starts loading the index line where a lookup begins (a hint).
    #[inline]
    pub(super) fn prefetch_index(&self, hint: IndexHint) {
        // A prefetch never faults, so a stale position needs no check.
        llist_defer::hint::prefetch(self.index.as_ptr().wrapping_add(hint.home as usize));
    }

    /// Starts loading the hot line of the flow whose index entry is where a lookup begins, if
    /// that entry's kind and fingerprint match the key's (a hint: it is the key's flow in the
    /// common case at most half full, another one once in 32 collisions; a flow further along
    /// the probe run is not looked for).
    #[inline]
    pub(super) fn prefetch_flow_of(&self, hint: IndexHint) {
        if let Some(&e) = self.index.get(hint.home as usize) {
            if e.tag != EMPTY && e.carries(hint.sig) {
                self.prefetch(e.slot());
            }
        }
    }

    /// Starts loading the head packet of flow `idx` (a hint; reads the flow's hot line).
    #[inline]
    pub(super) fn prefetch_head_packet(&self, idx: u32) {
        if let Some(f) = self.slots.get(idx as usize) {
            f.prefetch_head();
        }
    }

    #[inline]
    fn mask(&self) -> usize {
        self.index.len() - 1
    }

    /// The flow of `key` and its socket hash, if it exists.
    #[inline]
    pub(super) fn find(&self, key: u128) -> Option<Hit> {
        let probe = Probe::of(key);
        let mask = self.mask();
        let mut pos = probe.home(self.bits);
        loop {
            let e = self.index[pos];
            if e.tag == EMPTY {
                return None;
            }
            if probe.may_be(e) && self.slots[e.slot() as usize].key_id == probe.id {
                return Some(Hit {
                    slot: e.slot(),
                    socket_hash: e.socket_hash,
                    pos,
                });
            }
            pos = (pos + 1) & mask;
        }
    }

    /// The slot of `key`'s flow, if it exists.
    #[inline]
    pub(super) fn lookup(&self, key: u128) -> Option<u32> {
        self.find(key).map(|h| h.slot)
    }

    /// Records a new socket hash for the flow `hit` found (socket reuse).
    pub(super) fn set_socket_hash(&mut self, hit: Hit, hash: u32) {
        self.index[hit.pos].socket_hash = hash;
    }

    /// Number of live flows.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// Creates a detached, empty flow for `key` (which must be absent); `None` when the slot
    /// numbers are exhausted (2^26 − 1 flows), which the caller treats as an allocation failure.
    pub(super) fn insert(&mut self, key: u128, socket_hash: u32, age: u64) -> Option<u32> {
        let idx = match self.free.pop() {
            Some(i) => i,
            None if self.slots.len() < MAX_SLOTS => {
                let mut f = Flow::new();
                f.detach_gen = self.take_pos();
                huge::reserve_one(&mut self.slots);
                huge::reserve_one(&mut self.cold);
                self.slots.push(f);
                self.cold.push(FlowCold::new());
                (self.slots.len() - 1) as u32
            }
            None => return None,
        };
        let probe = Probe::of(key);
        self.slots[idx as usize].reinit(probe.id, age);
        self.cold[idx as usize].reinit(key);
        if 2 * (self.live + 1) > self.index.len() {
            self.grow();
        }
        self.place(
            Entry {
                tag: idx | probe.sig,
                socket_hash,
            },
            probe.home(self.bits),
        );
        self.live += 1;
        Some(idx)
    }

    /// Where the probe for entry `e`'s key starts (its id read from its flow's hot line).
    fn home_of(&self, e: Entry) -> usize {
        Probe::new(self.slots[e.slot() as usize].key_id, e.tag & HASHED).home(self.bits)
    }

    /// Stores `e` at the first empty position from `home` on.
    fn place(&mut self, e: Entry, home: usize) {
        let mask = self.mask();
        let mut pos = home;
        while self.index[pos].tag != EMPTY {
            pos = (pos + 1) & mask;
        }
        self.index[pos] = e;
    }

    /// Doubles the index and rehashes every entry.
    fn grow(&mut self) {
        self.rebuild(self.bits + 1);
    }

    /// Rebuilds the index with `2^bits` entries (at least twice the live flows).
    fn rebuild(&mut self, bits: u32) {
        debug_assert!(bits <= MAX_INDEX_BITS);
        let old = core::mem::replace(
            &mut self.index,
            huge::HugeArray::filled(1 << bits, Entry::VACANT),
        );
        self.bits = bits;
        // Each entry's home needs its flow's key id, from a line of its own: load them ahead.
        const AHEAD: usize = 16;
        for (i, &e) in old.iter().enumerate() {
            if let Some(a) = old.get(i + AHEAD).filter(|a| a.tag != EMPTY) {
                self.prefetch(a.slot());
            }
            if e.tag != EMPTY {
                self.place(e, self.home_of(e));
            }
        }
    }

    /// Resizes the index for a new `buckets_log` (`fq_resize` for a live change): the new index
    /// starts from 2^`buckets_log` entries (at least 16) and keeps doubling while it would be
    /// more than half full, and every live flow is placed again under its key. Flows keep their
    /// slots, so list links, the delayed set and queued packets are untouched.
    ///
    /// As the kernel's rehash does, every GC candidate met on the way (detached, and
    /// `time_after(jiffies, age + FQ_GC_AGE)`) is freed instead of moved (no bound of
    /// [`GC_MAX`] here: the rehash visits every flow anyway). The candidate lists are rebuilt
    /// for the new bucket count. Returns how many were freed; the caller updates its flow
    /// counters.
    pub(super) fn resize(&mut self, buckets_log: u8, jiffies: u64, gc_age: u64) -> u32 {
        let old: Vec<u32> = self
            .live()
            .filter(|&i| {
                let f = &self.slots[i as usize];
                f.state == FlowState::Detached && time_after(jiffies, f.age().wrapping_add(gc_age))
            })
            .collect();
        for &idx in &old {
            self.free_slot(idx);
        }
        // Candidates not freed (none unless the clock went back) go to their new buckets.
        let keep: Vec<u32> = self
            .live()
            .filter(|&i| self.slots[i as usize].in_gc())
            .collect();
        for &idx in &keep {
            self.gc_unlink(idx);
        }
        self.buckets_log = buckets_log;
        self.gc_lists = vec![GcList::EMPTY; 1 << buckets_log];
        for &idx in &keep {
            self.gc_link(idx);
        }
        let mut bits = u32::from(buckets_log).max(4);
        while 2 * self.live > (1 << bits) {
            bits += 1;
        }
        self.rebuild(bits);
        old.len() as u32
    }

    /// The index's size (for tests of resizing).
    #[cfg(test)]
    pub(super) fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Removes the index entry at `pos`, shifting back the entries of its probe run.
    fn remove_at(&mut self, mut pos: usize) {
        let mask = self.mask();
        let mut j = pos;
        loop {
            j = (j + 1) & mask;
            let e = self.index[j];
            if e.tag == EMPTY {
                break;
            }
            let k = self.home_of(e);
            // The entry at j may stay only if its home lies cyclically in (pos, j].
            let stays = if pos <= j {
                pos < k && k <= j
            } else {
                pos < k || k <= j
            };
            if !stays {
                self.index[pos] = e;
                pos = j;
            }
        }
        self.index[pos] = Entry::VACANT;
    }

    /// Queues a GC entry for flow `idx` as it is now: a new flow is detached from birth, and
    /// if its first packet is refused (`flow_limit` 0) it must still age out.
    pub(super) fn note_detached(&mut self, idx: u32) {
        self.push_age(GcEntry {
            age: self.slots[idx as usize].age(),
            slot: idx,
            detach_gen: self.slots[idx as usize].detach_gen,
        });
    }

    /// Queues a GC entry. Entries go stale when their flow is listed again or detached anew
    /// (each detachment queues one), and are dropped lazily when they reach the front 3 s
    /// later. A flow that empties and refills thousands of times a second would so keep a
    /// queue as long as 3 s of detachments, and its capacity would stay at that high-water
    /// mark; so when the queue holds more than two entries per flow slot, the stale ones are
    /// swept out (order kept): bounded memory, amortized O(1) a push.
    fn push_age(&mut self, e: GcEntry) {
        self.ages.push_back(e);
        self.next_pos = self.next_pos.wrapping_add(1);
        if self.ages.len() > (2 * self.slots.len() + 64).min(SWEEP_AT_MOST) {
            let slots = &self.slots;
            self.ages.retain(|e| entry_is_current(slots, e));
        }
    }

    /// Marks flow `idx` detached (`fq_flow_set_detached`: `age = jiffies | 1`) and queues it
    /// for GC.
    pub(super) fn set_detached(&mut self, idx: u32, jiffies: u64) {
        // The position this detachment's entry takes, so `reattach` can find it.
        let detach_gen = self.next_pos;
        let f = &mut self.slots[idx as usize];
        f.set_detached_at(jiffies | 1);
        f.detach_gen = detach_gen;
        self.push_age(GcEntry {
            age: jiffies | 1,
            slot: idx,
            detach_gen,
        });
    }

    /// A fresh value of the position counter for a `detach_gen` that queues no entry.
    #[inline]
    fn take_pos(&mut self) -> u32 {
        let p = self.next_pos;
        self.next_pos = p.wrapping_add(1);
        p
    }

    /// A detached flow is used again: it is no GC candidate any more, and its detachment's
    /// entry is stale. If that entry is where it was queued (counted from the back: no sweep
    /// since), it is marked stale ([`NIL`] slot), so that neither the sweep nor GC reads the
    /// flow to find out, and GC drops it as soon as it is at the front. In a table whose flows
    /// empty and refill all the time (every flow, at one packet queued per flow), the entry is
    /// then a few dozen places from the back and in cache, the queue stays short, and the
    /// sweep never runs; otherwise the entry is left to the usual check.
    #[inline]
    pub(super) fn reattach(&mut self, idx: u32) {
        let f = &self.slots[idx as usize];
        let dgen = f.detach_gen;
        if f.in_gc() {
            self.gc_unlink(idx);
        }
        let back = self.next_pos.wrapping_sub(dgen) as usize;
        if let Some(j) = self.ages.len().checked_sub(back) {
            if let Some(e) = self.ages.get_mut(j) {
                if e.slot == idx && e.detach_gen == dgen {
                    e.slot = NIL;
                }
            }
        }
    }

    /// Appends flow `idx` to its bucket's candidate list.
    fn gc_link(&mut self, idx: u32) {
        let b = self.bucket(self.cold[idx as usize].key);
        let last = self.gc_lists[b].last;
        let c = &mut self.cold[idx as usize];
        c.gc_prev = last;
        c.gc_next = NIL;
        if last == NIL {
            self.gc_lists[b].first = idx;
        } else {
            self.cold[last as usize].gc_next = idx;
        }
        self.gc_lists[b].last = idx;
        self.slots[idx as usize].set_in_gc(true);
        self.candidates += 1;
    }

    /// Takes flow `idx` off its bucket's candidate list (it must be on it).
    fn gc_unlink(&mut self, idx: u32) {
        let b = self.bucket(self.cold[idx as usize].key);
        let (prev, next) = {
            let c = &self.cold[idx as usize];
            (c.gc_prev, c.gc_next)
        };
        if prev == NIL {
            self.gc_lists[b].first = next;
        } else {
            self.cold[prev as usize].gc_next = next;
        }
        if next == NIL {
            self.gc_lists[b].last = prev;
        } else {
            self.cold[next as usize].gc_prev = prev;
        }
        self.slots[idx as usize].set_in_gc(false);
        self.candidates -= 1;
    }

    /// Frees flow `idx` (detached and empty) now: its index entry, its slot.
    fn free_slot(&mut self, idx: u32) {
        if self.slots[idx as usize].in_gc() {
            self.gc_unlink(idx);
        }
        let key = self.cold[idx as usize].key;
        if let Some(hit) = self.find(key) {
            debug_assert_eq!(hit.slot, idx);
            self.remove_at(hit.pos);
        }
        // The slot's GC entries go stale.
        let dgen = self.take_pos();
        self.slots[idx as usize].detach_gen = dgen;
        self.free.push(idx);
        self.live -= 1;
    }

    /// Whether a GC point has anything to look at (a detachment queued or a candidate listed);
    /// when not, the caller need not read the clock's jiffies.
    #[inline]
    pub(super) fn gc_pending(&self) -> bool {
        self.candidates != 0 || !self.ages.is_empty()
    }

    /// `fq_gc` before a lookup of `keep`: frees up to [`GC_MAX`] candidates of `keep`'s bucket
    /// (detached flows with `time_after(jiffies, age + gc_age)`), oldest detachment first,
    /// never the flow of `keep`. Returns how many were freed.
    pub(super) fn gc(&mut self, jiffies: u64, gc_age: u64, keep: u128) -> u32 {
        while let Some(&e) = self.ages.front() {
            // An entry marked stale goes at once, due or not (it would be skipped when due).
            if e.slot != NIL && !time_after(jiffies, e.age.wrapping_add(gc_age)) {
                break;
            }
            self.ages.pop_front();
            if entry_is_current(&self.slots, &e) {
                self.gc_link(e.slot);
            }
        }
        if self.candidates == 0 {
            return 0;
        }
        let mut freed = 0;
        let mut i = self.gc_lists[self.bucket(keep)].first;
        while i != NIL && freed < GC_MAX as u32 {
            let next = self.cold[i as usize].gc_next;
            if self.cold[i as usize].key != keep {
                self.free_slot(i);
                freed += 1;
            }
            i = next;
        }
        freed
    }

    /// Whether the candidate lists hold exactly the flagged flows, each detached and in its own
    /// bucket, linked both ways (for invariant checks).
    pub(super) fn check_gc(&self) -> Result<(), String> {
        let mut n = 0;
        for (b, l) in self.gc_lists.iter().enumerate() {
            let (mut i, mut prev) = (l.first, NIL);
            while i != NIL {
                n += 1;
                if n > self.candidates {
                    return Err("GC candidate lists hold more than counted".into());
                }
                let (f, c) = (&self.slots[i as usize], &self.cold[i as usize]);
                if !f.in_gc() || f.state != FlowState::Detached || f.qlen != 0 {
                    return Err(format!(
                        "flow {i} on a GC list but not a detached candidate"
                    ));
                }
                if self.bucket(c.key) != b || c.gc_prev != prev {
                    return Err(format!("flow {i} misplaced on GC list {b}"));
                }
                (prev, i) = (i, c.gc_next);
            }
            if l.last != prev {
                return Err(format!("GC list {b}: wrong last"));
            }
        }
        let flagged = self
            .live()
            .filter(|&i| self.slots[i as usize].in_gc())
            .count();
        if n != self.candidates || flagged != n {
            return Err(format!(
                "GC candidates: {n} listed, {flagged} flagged, {} counted",
                self.candidates
            ));
        }
        Ok(())
    }

    /// Removes every flow (the caller has purged their packets).
    pub(super) fn clear(&mut self) {
        self.index.fill(Entry::VACANT);
        self.live = 0;
        self.ages.clear();
        self.gc_lists.fill(GcList::EMPTY);
        self.candidates = 0;
        self.free.clear();
        self.free.extend((0..self.slots.len() as u32).rev());
        for i in 0..self.slots.len() {
            let dgen = self.take_pos();
            let f = &mut self.slots[i];
            f.detach_gen = dgen;
            f.state = FlowState::Detached;
            f.set_in_gc(false);
        }
    }

    /// Every live flow index.
    pub(super) fn live(&self) -> impl Iterator<Item = u32> + '_ {
        self.index
            .iter()
            .filter(|e| e.tag != EMPTY)
            .map(|e| e.slot())
    }

    /// Entries waiting in the age queue (for tests of the bound).
    pub(super) fn age_queue_len(&self) -> usize {
        self.ages.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{Entry, FINGERPRINT, FlowTable, HASHED, Probe, SLOT_BITS, SLOT_MASK, hash_ptr};
    use crate::TestPacket;
    use crate::fq::flow::FlowState;
    use std::collections::HashMap;

    /// An entry is 8 bytes, and a key's tag bits are its kind and a fingerprint that takes all
    /// 32 values over keys and never touches the slot bits: a probe past another flow's entry
    /// reads that flow's line for one key in 32, not for every key.
    #[test]
    fn entries_are_8_bytes_and_fingerprints_spread() {
        assert_eq!(core::mem::size_of::<Entry>(), 8);
        let mut seen = [[0u32; 32]; 2];
        for id in 0..4096u128 {
            for kind in 0..2u128 {
                let p = Probe::of(id << 1 | kind);
                assert_eq!(p.sig & SLOT_MASK, 0);
                assert_eq!(p.sig & HASHED != 0, kind == 1);
                seen[kind as usize][((p.sig & FINGERPRINT) >> SLOT_BITS) as usize] += 1;
            }
        }
        for counts in seen {
            // 4096 keys over 32 values: 128 each on average.
            assert!(
                counts.iter().all(|&c| (64..=192).contains(&c)),
                "{counts:?}"
            );
        }
    }

    /// Inserts, frees (backward-shift deletion) and resizes on a small, crowded index agree with
    /// a map at every step, for socket (even) and hashed (odd) keys with the same id.
    #[test]
    fn index_agrees_with_a_map_through_inserts_frees_and_resizes() {
        let mut t: FlowTable<TestPacket> = FlowTable::new(1);
        let mut oracle: HashMap<u128, u32> = HashMap::new();
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for step in 0..20_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let key = u128::from(rng % 300);
            match oracle.get(&key).copied() {
                Some(slot) if rng & (1 << 40) != 0 => {
                    t.free_slot(slot);
                    oracle.remove(&key);
                }
                Some(_) => {}
                None => {
                    let slot = t.insert(key, 7, 0).expect("slots left");
                    assert!(
                        oracle.values().all(|&s| s != slot),
                        "slot {slot} reused live"
                    );
                    oracle.insert(key, slot);
                }
            }
            if step % 997 == 0 {
                assert_eq!(t.resize((rng % 5) as u8 + 1, 0, 3000), 0);
                assert!(t.index_len() >= 2 * t.len());
            }
            assert_eq!(t.len(), oracle.len());
            for k in 0..300u128 {
                assert_eq!(
                    t.lookup(k),
                    oracle.get(&k).copied(),
                    "key {k} at step {step}"
                );
            }
        }
        let mut live: Vec<u32> = t.live().collect();
        let mut want: Vec<u32> = oracle.values().copied().collect();
        live.sort_unstable();
        want.sort_unstable();
        assert_eq!(live, want);
    }

    /// A slot freed (here by a resize, which leaves the flow's age-queue entry behind) and
    /// reused by a new flow is not collected when that old entry comes due: the free bumped the
    /// slot's detachment generation. The new flow's own detachment is collected as usual.
    #[test]
    fn a_reused_slot_is_not_collected_on_its_predecessors_entry() {
        let mut t: FlowTable<TestPacket> = FlowTable::new(1);
        let a = t.insert(2, 0, 1).unwrap();
        t.set_detached(a, 10);
        assert_eq!(t.resize(1, 5000, 3000), 1);
        assert_eq!(t.age_queue_len(), 1, "the old entry is still queued");
        let b = t.insert(4, 0, 5001).unwrap();
        assert_eq!(b, a, "the slot is reused");
        // A key looked up in the new flow's bucket.
        let mate = (8u128..)
            .step_by(2)
            .find(|&k| t.bucket(k) == t.bucket(4))
            .unwrap();
        // Jiffy 6000 is past the old entry's age 11 + 3000 and before the new flow ages.
        assert_eq!(t.gc(6000, 3000, mate), 0);
        assert_eq!(t.lookup(4), Some(b));
        t.check_gc().unwrap();
        t.set_detached(b, 6000);
        assert_eq!(t.gc(9002, 3000, mate), 1);
        assert_eq!(t.lookup(4), None);
    }

    /// Flows that empty and refill all the time, as at one packet queued per flow, keep the age
    /// queue short: each reattachment marks its detachment's entry stale, and GC drops the
    /// marked entries at the front without their being due. (Unmarked, the queue would grow to
    /// its sweep threshold, 2 · 64 + 64 entries here.) A flow left detached keeps its entry,
    /// becomes a candidate when it is due and is freed; the reattached ones never are.
    #[test]
    fn churning_flows_keep_the_age_queue_short() {
        let mut t: FlowTable<TestPacket> = FlowTable::new(4);
        let slots: Vec<u32> = (0..64u128)
            .map(|k| t.insert(k << 1, 0, 1).unwrap())
            .collect();
        for &s in &slots {
            t.reattach(s);
            t.get_mut(s).state = FlowState::Listed;
        }
        let mut longest = 0;
        for round in 0..50u64 {
            // A batch out (every flow detached) and back in (every flow reattached but the
            // last, on the last round).
            for &s in &slots {
                t.set_detached(s, 100 + round);
            }
            for &s in &slots {
                if round == 49 && s == slots[63] {
                    continue;
                }
                t.reattach(s);
                t.get_mut(s).state = FlowState::Listed;
            }
            // A lookup's GC, long before anything is due.
            assert_eq!(t.gc(100 + round, 3000, 1 << 1), 0);
            if round < 49 {
                longest = longest.max(t.age_queue_len());
            }
            t.check_gc().unwrap();
        }
        assert_eq!(longest, 0, "every marked entry dropped at the next GC");
        assert_eq!(t.age_queue_len(), 1, "the detached flow's entry stays");
        // When it is due, the flow left detached is the only one freed.
        let bucket_mate = (0u128..)
            .map(|id| id << 1)
            .find(|&k| t.bucket(k) == t.bucket(63 << 1) && k != 63 << 1)
            .unwrap();
        assert_eq!(t.gc(100 + 49 + 3001, 3000, bucket_mate), 1);
        assert_eq!(t.lookup(63 << 1), None);
        assert_eq!(t.len(), 63);
        t.check_gc().unwrap();
    }

    /// GC in one bucket: candidates become so only after 3·HZ jiffies past their odd age, leave
    /// oldest detachment first, at most 8, never the looked-up key, and never from another
    /// bucket; a rebuild for a new bucket count frees every candidate.
    #[test]
    fn gc_takes_the_oldest_candidates_of_the_looked_up_bucket() {
        let log = 2;
        let bucket_of = |key: u128| hash_ptr(key as u64, log);
        let mut t: FlowTable<TestPacket> = FlowTable::new(log);
        // Socket keys (id << 1) of bucket 0 and of bucket 1.
        let keys = |b: usize| {
            (0u128..)
                .map(|id| id << 1)
                .filter(move |&k| bucket_of(k) == b)
        };
        let b0: Vec<u128> = keys(0).take(14).collect();
        let b1: Vec<u128> = keys(1).take(3).collect();
        let mut slot = HashMap::new();
        for (n, &k) in b0.iter().chain(&b1).enumerate() {
            let idx = t.insert(k, 0, 1).unwrap();
            // Detached at jiffies 100 + n: ages 101, 101, 103, 103, ...
            t.set_detached(idx, 100 + n as u64);
            slot.insert(k, idx);
        }
        let gc_age = 3000;
        // Jiffy 3101 is not after 101 + 3000: nothing yet.
        assert_eq!(t.gc(3101, gc_age, b0[10]), 0);
        // Jiffy 3104: the four oldest of bucket 0 (ages 101, 101, 103, 103) are candidates.
        assert_eq!(t.gc(3104, gc_age, b0[10]), 4);
        t.check_gc().unwrap();
        for k in &b0[..4] {
            assert_eq!(t.lookup(*k), None);
        }
        // Much later every flow is a candidate: 8 of the 10 left in bucket 0 go, oldest first,
        // skipping the looked-up key b0[5]: b0[13], the youngest, stays; bucket 1 is untouched.
        assert_eq!(t.gc(10_000, gc_age, b0[5]), 8);
        assert!(t.lookup(b0[5]).is_some());
        assert!(t.lookup(b0[13]).is_some());
        assert!(b0[6..13].iter().all(|k| t.lookup(*k).is_none()));
        assert!(b1.iter().all(|k| t.lookup(*k).is_some()));
        t.check_gc().unwrap();
        // A reattached candidate leaves its list.
        t.reattach(slot[&b1[0]]);
        t.get_mut(slot[&b1[0]]).state = FlowState::Listed;
        t.check_gc().unwrap();
        // Resizing frees every remaining candidate (b0[5], b0[13], b1[1], b1[2]), in any bucket.
        assert_eq!(t.resize(3, 10_000, gc_age), 4);
        assert_eq!(t.len(), 1);
        t.check_gc().unwrap();
    }
}

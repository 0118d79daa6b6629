//! Unit-level tests of the public API: every error path, the data-window bounds, address
//! validation, metadata, ownership and the return of every frame.
#![cfg(not(lockless_loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use llist_defer::{DeferList, Fifo};
use skb_pool::{
    AddrError, BuildError, HugePages, MAX_FRAME_SIZE, Pool, PoolError, SkbError, SocketRef,
};

fn small(n: usize) -> Pool {
    Pool::builder().frame_count(n).build().expect("pool")
}

#[test]
fn build_errors_name_cause_and_fix() {
    let e = Pool::builder().frame_count(0).build().unwrap_err();
    assert_eq!(e, BuildError::ZeroFrames);
    assert!(e.to_string().contains("at least one frame"));

    let e = Pool::builder().frame_size(3000).build().unwrap_err();
    assert_eq!(e, BuildError::FrameSizeNotPowerOfTwo(3000));
    assert!(e.to_string().contains("power of two"));

    let e = Pool::builder().frame_size(1024).build().unwrap_err();
    assert_eq!(e, BuildError::FrameSizeTooSmall(1024));
    assert!(e.to_string().contains("2048"));

    let e = Pool::builder()
        .frame_size(MAX_FRAME_SIZE * 2)
        .build()
        .unwrap_err();
    assert_eq!(e, BuildError::FrameSizeTooLarge(MAX_FRAME_SIZE * 2));

    let e = Pool::builder()
        .frame_count(usize::MAX / 1024)
        .build()
        .unwrap_err();
    assert!(matches!(e, BuildError::RegionTooLarge { .. }), "{e}");
    // One frame more than a packed batch's i32 line deltas can span.
    let e = Pool::builder()
        .frame_count(skb_pool::MAX_FRAME_COUNT + 1)
        .build()
        .unwrap_err();
    assert!(matches!(e, BuildError::RegionTooLarge { .. }), "{e}");
    assert!(e.to_string().contains("2^30"), "{e}");

    let e = Pool::builder().headroom(2048).build().unwrap_err();
    assert_eq!(
        e,
        BuildError::HeadroomTooLarge {
            headroom: 2048,
            frame_size: 2048
        }
    );

    assert_eq!(
        Pool::builder().max_owners(0).build().unwrap_err(),
        BuildError::BadOwnerCount(0)
    );
    assert_eq!(
        Pool::builder().max_owners(1 << 20).build().unwrap_err(),
        BuildError::BadOwnerCount(1 << 20)
    );
    assert_eq!(
        Pool::builder().remote_batch(0).build().unwrap_err(),
        BuildError::ZeroBatch
    );
    assert_eq!(
        Pool::builder().cache_max(0).build().unwrap_err(),
        BuildError::ZeroBatch
    );
    // Every error is a std error with a message.
    let _: &dyn std::error::Error = &e;
}

#[test]
fn mmap_failure_is_typed_with_the_fix() {
    // 2^30 frames (the most a pool holds) of 1 MiB = 1 PiB: no machine maps that.
    let e = Pool::builder()
        .frame_size(MAX_FRAME_SIZE)
        .frame_count(skb_pool::MAX_FRAME_COUNT)
        .populate(false)
        .build()
        .unwrap_err();
    match e {
        BuildError::Mmap {
            errno, huge: false, ..
        } => assert_eq!(errno, libc::ENOMEM),
        other => panic!("unexpected {other:?}"),
    }
    assert!(e.to_string().contains("errno"), "{e}");
}

#[test]
fn huge_pages_required_or_preferred() {
    match Pool::builder()
        .frame_count(1024)
        .huge_pages(HugePages::Require)
        .build()
    {
        Ok(pool) => assert!(pool.region().is_huge()),
        Err(e) => {
            assert!(matches!(e, BuildError::Mmap { huge: true, .. }), "{e:?}");
            assert!(e.to_string().contains("nr_hugepages"), "{e}");
        }
    }
    // Prefer always succeeds: huge pages if reserved, else the explicit fallback.
    let pool = Pool::builder()
        .frame_count(1024)
        .huge_pages(HugePages::Prefer)
        .build()
        .unwrap();
    assert_eq!(pool.region().len(), 1024 * 2048);
}

#[test]
fn region_geometry_for_umem() {
    let pool = Pool::builder()
        .frame_size(4096)
        .frame_count(100)
        .build()
        .unwrap();
    let r = pool.region();
    assert_eq!(r.base() as usize % 4096, 0);
    assert_eq!(
        (r.len(), r.frame_size(), r.frame_count()),
        (409_600, 4096, 100)
    );
    assert!(!r.is_empty());
    let mut h = pool.handle().unwrap();
    let skb = h.alloc().unwrap();
    assert_eq!(skb.frame_addr(), u64::from(skb.frame_index()) * 4096);
    assert_eq!(skb.data_addr(), skb.frame_addr() + 256);
    assert_eq!(skb.capacity(), 4096);
}

#[test]
fn exhaustion_is_an_error_and_frames_come_back() {
    let pool = small(4);
    let mut h = pool.handle().unwrap();
    let held: Vec<_> = (0..4).map(|_| h.alloc().unwrap()).collect();
    let mut idx: Vec<u32> = held.iter().map(|s| s.frame_index()).collect();
    idx.sort();
    assert_eq!(idx, [0, 1, 2, 3], "every frame once");
    let e = h.alloc().unwrap_err();
    assert_eq!(e, PoolError::Exhausted);
    assert!(e.to_string().contains("exhausted"));
    assert_eq!(pool.stats().in_use, 4);
    drop(held);
    assert_eq!(pool.stats().free, 4);
    assert!(h.alloc().is_ok());
}

#[test]
fn too_many_owners() {
    let pool = Pool::builder()
        .frame_count(4)
        .max_owners(2)
        .build()
        .unwrap();
    let a = pool.handle().unwrap();
    let _b = pool.handle().unwrap();
    let e = pool.handle().unwrap_err();
    assert_eq!(e, PoolError::TooManyOwners { max_owners: 2 });
    assert!(e.to_string().contains("max_owners"));
    drop(a);
    assert!(pool.handle().is_ok(), "a dropped handle frees its slot");
}

#[test]
fn put_push_pull_trim_bounds() {
    let pool = Pool::builder().frame_count(2).headroom(16).build().unwrap();
    let mut h = pool.handle().unwrap();
    let mut skb = h.alloc().unwrap();
    assert_eq!(
        (skb.headroom(), skb.len(), skb.tailroom()),
        (16, 0, 2048 - 16)
    );
    assert!(skb.is_empty());

    // put: exactly the tailroom fits, one more does not.
    assert_eq!(
        skb.put(2048 - 16 + 1).unwrap_err(),
        SkbError::NoTailroom {
            need: 2033,
            have: 2032
        }
    );
    skb.put(2032).unwrap().fill(7);
    assert_eq!((skb.len(), skb.tailroom()), (2032, 0));
    assert!(skb.put(1).is_err());
    assert!(skb.put_slice(b"x").is_err());
    assert_eq!(skb.len(), 2032, "a refused put changes nothing");

    // trim: shorter cuts, longer is a no-op.
    skb.trim(10);
    assert_eq!(skb.len(), 10);
    skb.trim(100);
    assert_eq!(skb.len(), 10);

    // push: exactly the headroom fits, one more does not.
    assert_eq!(
        skb.push(17).unwrap_err(),
        SkbError::NoHeadroom { need: 17, have: 16 }
    );
    skb.push(16).unwrap().copy_from_slice(&[1; 16]);
    assert_eq!((skb.headroom(), skb.len()), (0, 26));
    assert!(skb.push(1).is_err());

    // pull: exactly the length fits, one more does not; pulled bytes are returned.
    assert_eq!(
        skb.pull(27).unwrap_err(),
        SkbError::TooShort { need: 27, have: 26 }
    );
    assert_eq!(skb.pull(16).unwrap(), &[1; 16]);
    assert_eq!(skb.data(), &[7; 10]);
    assert_eq!(skb.pull(10).unwrap().len(), 10);
    assert!(skb.pull(1).is_err());
    assert_eq!(skb.pull(0).unwrap().len(), 0);
    assert!(skb.is_empty());

    // reserve: only while empty, within the tailroom.
    let room = skb.tailroom();
    assert_eq!(
        skb.reserve(room + 1).unwrap_err(),
        SkbError::NoTailroom {
            need: room + 1,
            have: room
        }
    );
    skb.reserve(8).unwrap();
    assert_eq!(skb.headroom(), 26 + 8);
    skb.put_slice(b"ab").unwrap();
    assert_eq!(skb.reserve(1).unwrap_err(), SkbError::NotEmpty { len: 2 });
    for e in [
        SkbError::NotEmpty { len: 2 },
        SkbError::TooShort { need: 1, have: 0 },
    ] {
        assert!(!e.to_string().is_empty());
    }
    skb.data_mut()[0] = b'z';
    assert_eq!(skb.data(), b"zb");
}

#[test]
fn a_new_skb_is_clean() {
    let pool = small(1);
    let mut h = pool.handle().unwrap();
    let mut skb = h.alloc().unwrap();
    skb.put_slice(b"abc").unwrap();
    skb.set_priority(3);
    skb.set_flow_hash(99);
    skb.set_socket(Some(SocketRef {
        id: 5,
        connected: false,
    }));
    skb.set_tstamp(Some(1_000));
    skb.set_queue_mapping(2);
    skb.mark_ce();
    drop(skb);
    let skb = h.alloc().unwrap();
    assert_eq!(
        (
            skb.len(),
            skb.headroom(),
            skb.priority(),
            skb.flow_hash(),
            skb.queue_mapping()
        ),
        (0, 256, 0, 0, 0)
    );
    assert_eq!(
        (skb.socket(), skb.tstamp(), skb.is_ce()),
        (None, None, false)
    );
}

#[test]
fn metadata_round_trip() {
    let pool = small(2);
    let mut h = pool.handle().unwrap();
    let mut skb = h.alloc().unwrap();
    assert_eq!(skb.owner(), h.owner());
    skb.set_priority(7);
    skb.set_flow_hash(0xdead_beef);
    skb.set_socket(Some(SocketRef {
        id: 42,
        connected: true,
    }));
    skb.set_tstamp(Some(123));
    skb.set_queue_mapping(3);
    skb.mark_ce();
    assert_eq!(skb.priority(), 7);
    assert_eq!(skb.flow_hash(), 0xdead_beef);
    assert_eq!(
        skb.socket(),
        Some(SocketRef {
            id: 42,
            connected: true
        })
    );
    assert_eq!(skb.tstamp(), Some(123));
    assert_eq!(skb.queue_mapping(), 3);
    assert!(skb.is_ce());
    skb.set_socket(None);
    skb.set_tstamp(None);
    assert_eq!((skb.socket(), skb.tstamp()), (None, None));
    assert!(format!("{skb:?}").contains("priority"));
    assert_eq!(
        std::mem::size_of::<skb_pool::Skb>(),
        std::mem::size_of::<usize>()
    );
    assert_eq!(
        std::mem::size_of::<Option<skb_pool::Skb>>(),
        std::mem::size_of::<usize>()
    );
}

#[test]
fn addr_round_trip_and_validation() {
    let pool = small(4);
    let mut h = pool.handle().unwrap();
    let mut skb = h.alloc().unwrap();
    skb.put_slice(&[9; 100]).unwrap();
    skb.set_priority(5);
    let frame = skb.frame_addr();
    let addr = skb.into_addr();
    assert_eq!(addr, frame + 256);
    assert_eq!(pool.stats().in_flight, 1);

    let len = pool.region().len() as u64;
    assert_eq!(
        pool.skb_from_addr(len).unwrap_err(),
        AddrError::OutOfRegion {
            addr: len,
            region_len: len
        }
    );
    assert_eq!(
        pool.skb_from_addr(u64::MAX).unwrap_err(),
        AddrError::OutOfRegion {
            addr: u64::MAX,
            region_len: len
        }
    );
    assert_eq!(
        pool.skb_from_addr(addr + 1).unwrap_err(),
        AddrError::Misaligned {
            addr: addr + 1,
            expected: addr
        }
    );
    assert_eq!(
        pool.skb_from_addr(frame).unwrap_err(),
        AddrError::Misaligned {
            addr: frame,
            expected: addr
        }
    );
    // Another frame, free or in use, is not in flight.
    let other = if frame == 0 { 2048 + 256 } else { 256 };
    assert_eq!(
        pool.skb_from_addr(other).unwrap_err(),
        AddrError::NotInFlight { addr: other }
    );
    let held = h.alloc().unwrap();
    let held_addr = held.data_addr();
    assert_eq!(
        pool.skb_from_addr(held_addr).unwrap_err(),
        AddrError::NotInFlight { addr: held_addr }
    );

    let back = h.skb_from_addr(addr).unwrap();
    assert_eq!((back.len(), back.priority(), back.data()[99]), (100, 5, 9));
    assert_eq!(
        pool.skb_from_addr(addr).unwrap_err(),
        AddrError::NotInFlight { addr }
    );
    for e in [
        AddrError::NotInFlight { addr },
        AddrError::Misaligned { addr, expected: 0 },
        AddrError::OutOfRegion {
            addr,
            region_len: len,
        },
    ] {
        assert!(!e.to_string().is_empty());
    }
    drop((back, held));
    assert_eq!(pool.stats().free, 4);
}

/// An empty data window at the very end of a frame (all the tailroom reserved, or all the data
/// pulled) is handed to the kernel as the frame's last byte, not as the next frame's address,
/// and comes back as the same frame.
#[test]
fn an_empty_window_at_the_end_of_a_frame_names_its_own_frame() {
    let pool = small(4);
    let mut h = pool.handle().unwrap();
    let mut neighbours: Vec<skb_pool::Skb> = (0..3).map(|_| h.alloc().unwrap()).collect();
    let fs = pool.region().frame_size() as u64;
    for how in ["reserve", "pull"] {
        let mut skb = h.alloc().unwrap();
        if how == "reserve" {
            let room = skb.tailroom();
            skb.reserve(room).unwrap();
        } else {
            let room = skb.tailroom();
            skb.put(room).unwrap();
            skb.pull(skb.len()).unwrap();
        }
        assert_eq!(skb.headroom() as u64, fs, "{how}");
        let (frame, index) = (skb.frame_addr(), skb.frame_index());
        let addr = skb.into_addr();
        assert_eq!(addr, frame + fs - 1, "{how}: inside its own frame");
        let back = pool.skb_from_addr(addr).unwrap();
        assert_eq!(back.frame_index(), index, "{how}");
        drop(back);
        // The next frame was not touched: it is still allocatable and freeable.
        neighbours.push(h.alloc().unwrap());
        drop(neighbours.pop());
    }
    drop(neighbours);
    drop(h);
    assert_eq!(pool.stats().free, 4);
    assert_eq!(pool.stats().in_flight, 0);
}

#[test]
fn rx_addr_anywhere_in_an_in_flight_frame() {
    let pool = small(2);
    let mut h = pool.handle().unwrap();
    let skb = h.alloc().unwrap();
    let frame = skb.frame_addr();
    let _fill = skb.into_addr();
    assert!(matches!(
        pool.skb_from_rx(frame + 2000, 100),
        Err(AddrError::OutOfRegion { .. })
    ));
    let rx = pool.skb_from_rx(frame + 512, 60).unwrap();
    assert_eq!(
        (rx.headroom(), rx.len(), rx.data_addr()),
        (512, 60, frame + 512)
    );
    assert!(matches!(
        pool.skb_from_rx(frame + 512, 60),
        Err(AddrError::NotInFlight { .. })
    ));
}

#[test]
fn in_flight_frames_keep_the_pool_alive() {
    let pool = small(2);
    let mut h = pool.handle().unwrap();
    let addr = h.alloc().unwrap().into_addr();
    let reaper = pool.clone();
    drop(h);
    drop(pool);
    // The region is still mapped: the kernel may still own the frame.
    let back = reaper.skb_from_addr(addr).unwrap();
    assert_eq!(back.headroom(), 256);
    drop(back);
    assert_eq!(reaper.stats().free, 2);
}

#[test]
fn skbs_outlive_their_handle_and_pool() {
    let pool = small(8);
    let mut h = pool.handle().unwrap();
    let skbs: Vec<_> = (0..8).map(|_| h.alloc().unwrap()).collect();
    let probe = pool.clone();
    drop(h); // owner gone with every frame out
    assert_eq!(probe.stats().owners, 0);
    drop(pool);
    drop(skbs); // to the overflow list: the owner's slot is vacant
    let s = probe.stats();
    assert_eq!((s.free, s.outstanding()), (8, 0));
    // A new owner reaches every frame.
    let mut h2 = probe.handle().unwrap();
    let again: Vec<_> = (0..8).map(|_| h2.alloc().unwrap()).collect();
    assert_eq!(again.len(), 8);
    // The last reference may even be a frame.
    drop(h2);
    drop(probe);
    drop(again);
}

#[test]
fn remote_free_defers_wakes_once_and_overflows() {
    let pool = Pool::builder()
        .frame_count(64)
        .defer_max(8)
        .build()
        .unwrap();
    let wakes = Arc::new(AtomicUsize::new(0));
    let w = wakes.clone();
    let mut owner = pool
        .handle_with_wake(Arc::new(move || {
            w.fetch_add(1, Ordering::Relaxed);
        }))
        .unwrap();
    let id = owner.owner();
    let skbs: Vec<_> = (0..10).map(|_| owner.alloc().unwrap()).collect();
    // A thread without a handle frees one at a time: kernel accounting.
    std::thread::spawn(move || drop(skbs)).join().unwrap();
    // counts 1..=7 deferred, the kick at 5 (n - 1 == 8 / 2), 8, 9, 10 overflow.
    assert_eq!(wakes.load(Ordering::Relaxed), 1);
    let st = pool.owner_state(id).unwrap();
    assert!(st.claimed && st.wake_pending);
    assert_eq!(
        st.deferred_count, 10,
        "refused frees leave the count inflated"
    );
    let t = pool.stats().totals;
    assert_eq!(
        (t.remote_frees, t.deferred, t.overflow, t.wakes),
        (10, 7, 3, 1)
    );

    assert!(owner.flush_remote());
    let st = pool.owner_state(id).unwrap();
    assert_eq!((st.deferred_count, st.wake_pending), (0, false));
    assert!(!owner.flush_remote());
    assert_eq!(owner.stats().drains, 1);
    assert!(pool.owner_state(skb_pool::OwnerId::clone(&id)).is_some());
    drop(owner);
    let s = pool.stats();
    assert_eq!(s.free, 64);
    assert_eq!(s.totals.allocs, 10);
}

#[test]
fn deferral_disabled_goes_to_overflow() {
    // 2 too: its only half-crossing batch (1 -> 2) would already overflow, so the owner
    // would never be kicked.
    for max in [0, 1, 2] {
        let pool = Pool::builder()
            .frame_count(8)
            .defer_max(max)
            .build()
            .unwrap();
        let mut owner = pool.handle().unwrap();
        let skbs: Vec<_> = (0..8).map(|_| owner.alloc().unwrap()).collect();
        std::thread::spawn(move || drop(skbs)).join().unwrap();
        let t = pool.stats().totals;
        assert_eq!((t.deferred, t.overflow), (0, 8));
        // The owner drains the overflow list when dry.
        let again: Vec<_> = (0..8).map(|_| owner.alloc().unwrap()).collect();
        assert_eq!(again.len(), 8);
        assert_eq!(owner.stats().overflow_taken, 8);
    }
}

#[test]
fn batched_remote_frees_through_a_handle() {
    let pool = Pool::builder()
        .frame_count(256)
        .defer_max(128)
        .remote_batch(32)
        .build()
        .unwrap();
    assert_eq!(pool.remote_batch(), 32);
    let mut owner = pool.handle().unwrap();
    let skbs: Vec<_> = (0..130).map(|_| owner.alloc().unwrap()).collect();
    let p2 = pool.clone();
    let stats = std::thread::spawn(move || {
        let mut freer = p2.handle().unwrap();
        drop(skbs); // through the thread-local handle: batches of 32
        let before = freer.stats();
        freer.flush_frees();
        (before, freer.stats())
    })
    .join()
    .unwrap();
    let (before, after) = stats;
    // Counts 32, 64, 96 are queued; the fourth batch makes 128 ≥ defer_max and overflows, and
    // so does the last partial batch (the count stays inflated until the owner drains).
    assert_eq!(
        (before.remote_frees, before.deferred, before.overflow),
        (130, 96, 32)
    );
    assert_eq!((after.deferred, after.overflow), (96, 34));
    assert_eq!(after.wakes, 1);
    drop(owner);
    assert_eq!(pool.stats().free, 256);
}

#[test]
fn frames_sent_home_to_a_handle_come_back_in_the_order_they_were_freed() {
    let pool = Pool::builder()
        .frame_count(256)
        .defer_max(128)
        .remote_batch(8)
        .build()
        .unwrap();
    let mut owner = pool.handle().unwrap();
    let mut skbs: Vec<Option<skb_pool::Skb>> =
        (0..48).map(|_| Some(owner.alloc().unwrap())).collect();
    let held = pool.stats().free; // the rest: in the owner's cache or the depot
    // Freed on another thread's handle in a scrambled order (7 is coprime with 48), so six
    // batches of eight go home, each with a single `add_batch`.
    let order: Vec<usize> = (0..48).map(|i| i * 7 % 48).collect();
    let freed: Vec<u64> = order
        .iter()
        .map(|&i| skbs[i].as_ref().unwrap().frame_addr())
        .collect();
    let p2 = pool.clone();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut freer = p2.handle().unwrap();
            for &i in &order {
                drop(skbs[i].take());
            }
            freer.flush_frees();
        });
    });
    // One drain takes all six batches (newest first on the list); the owner hands their frames
    // out after what its cache held, oldest free first: frames keep circulating in the order
    // they were handed out. Taken as the list holds them, the batches would come newest first.
    assert!(owner.flush_remote());
    let again: Vec<_> = (0..held + 48).map(|_| owner.alloc().unwrap()).collect();
    let got: Vec<u64> = again
        .iter()
        .map(|s| s.frame_addr())
        .filter(|a| freed.contains(a))
        .collect();
    assert_eq!(got, freed);
    drop(again);
    drop(owner);
    assert_eq!(pool.stats().free, 256);
}

#[test]
fn bulk_alloc_and_free() {
    let pool = small(64);
    let mut h = pool.handle().unwrap();
    let mut v = Vec::new();
    assert_eq!(h.alloc_bulk(40, &mut v), 40);
    let mut q: Fifo<skb_pool::Skb> = Fifo::new();
    assert_eq!(h.alloc_bulk(40, &mut q), 24, "short when exhausted");
    h.free_bulk(v);
    h.free_bulk(q);
    assert_eq!(h.stats().local_frees, 64);
    assert_eq!(pool.stats().free, 64);
}

/// An `Extend` that keeps the first three frames of each call and drops the rest as it
/// goes: frames freed on the allocating thread while the bulk call hands them over.
struct KeepsThree(Vec<skb_pool::Skb>);

impl Extend<skb_pool::Skb> for KeepsThree {
    fn extend<I: IntoIterator<Item = skb_pool::Skb>>(&mut self, it: I) {
        let mut kept = 0;
        for skb in it {
            if kept < 3 {
                self.0.push(skb);
                kept += 1;
            } else {
                drop(skb);
            }
        }
    }
}

/// An `Extend` that takes two frames of each call and stops: the bulk call must free the
/// frames it was not given a chance to hand over.
struct StopsAfterTwo(Vec<skb_pool::Skb>);

impl Extend<skb_pool::Skb> for StopsAfterTwo {
    fn extend<I: IntoIterator<Item = skb_pool::Skb>>(&mut self, it: I) {
        self.0.extend(it.into_iter().take(2));
    }
}

/// A bulk allocation hands its frames to the caller's `Extend` only after the pool's state is
/// let go: one that frees frames of the same pool as they come, or stops early, loses none.
#[test]
fn bulk_alloc_into_an_extend_that_frees_or_stops_loses_nothing() {
    for per_cpu in [false, true] {
        let pool = small(64);
        let mut h = pool.handle().unwrap();
        let mut keep = KeepsThree(Vec::new());
        let got = if per_cpu {
            pool.alloc_bulk(40, &mut keep)
        } else {
            h.alloc_bulk(40, &mut keep)
        };
        assert_eq!(got, 40, "per_cpu {per_cpu}");
        let mut stop = StopsAfterTwo(Vec::new());
        let got = if per_cpu {
            pool.alloc_bulk(40, &mut stop)
        } else {
            h.alloc_bulk(40, &mut stop)
        };
        assert_eq!(got, 40, "per_cpu {per_cpu}");
        // Every frame handed over and not kept went back: in use are exactly the kept ones.
        let kept = keep.0.len() + stop.0.len();
        assert!(
            kept < 80,
            "per_cpu {per_cpu}: the extends dropped or skipped some"
        );
        assert_eq!(
            pool.stats().in_use,
            kept,
            "per_cpu {per_cpu}: {:?}",
            pool.stats()
        );
        drop((keep, stop));
        drop(h);
        assert_eq!(
            pool.stats().free,
            64,
            "per_cpu {per_cpu}: {:?}",
            pool.stats()
        );
    }
}

#[test]
fn skb_is_an_intrusive_node() {
    let pool = small(16);
    let mut h = pool.handle().unwrap();
    let list = DeferList::with_limit(100).unwrap();
    for i in 0..10u8 {
        let mut skb = h.alloc().unwrap();
        skb.put_slice(&[i]).unwrap();
        list.push(skb).unwrap();
    }
    let order: Vec<u8> = list
        .take_all()
        .reverse()
        .into_iter()
        .map(|s| s.data()[0])
        .collect();
    assert_eq!(order, (0..10).collect::<Vec<_>>());
    assert_eq!(pool.stats().free, 16);
}

#[test]
fn owner_cache_spills_to_the_depot() {
    let pool = Pool::builder()
        .frame_count(512)
        .cache_max(16)
        .build()
        .unwrap();
    let mut a = pool.handle().unwrap();
    let skbs: Vec<_> = (0..512).map(|_| a.alloc().unwrap()).collect();
    drop(skbs); // local frees: the cache spills every time it passes 16
    let mut b = pool.handle().unwrap();
    let got: Vec<_> = (0..400).map(|_| b.alloc().unwrap()).collect();
    assert_eq!(got.len(), 400, "b reaches what a spilled");
}

#[test]
fn two_pools_on_one_thread() {
    let p1 = small(4);
    let p2 = small(4);
    let mut h1 = p1.handle().unwrap();
    let mut h2 = p2.handle().unwrap();
    let a = h1.alloc().unwrap();
    let b = h2.alloc().unwrap();
    drop(h1); // unregisters from the middle of the thread's list
    drop((a, b));
    h2.free_bulk(vec![]);
    assert_eq!((p1.stats().free, p2.stats().free), (4, 4));
    assert_eq!(h2.stats().local_frees, 1);
}

#[test]
fn publish_stats_folds_into_totals() {
    let pool = small(4);
    let mut h = pool.handle().unwrap();
    drop(h.alloc().unwrap());
    h.publish_stats();
    assert_eq!(h.stats(), Default::default());
    let t = pool.stats().totals;
    assert_eq!((t.allocs, t.local_frees), (1, 1));
    assert!(format!("{h:?} {pool:?}").contains("PoolHandle"));
}

/// An `Skb` gives a pusher the drain hint (the `next` of the head it links in front of) only
/// when that head is a frame of its own pool, whose side array its own frame keeps allocated.
#[test]
fn drain_hint_only_within_one_pool() {
    use llist_defer::Node;
    let (a, b) = (small(8), small(8));
    let mut chain = Fifo::new();
    chain.push_back(a.alloc().unwrap());
    chain.push_back(a.alloc().unwrap());
    let first = chain.pop_front().unwrap().into_link();
    let second = chain.pop_front().unwrap().into_link();
    // `first` still links to `second` (a popped node's link is left as it was).
    let mine = a.alloc().unwrap().into_link();
    let other = b.alloc().unwrap().into_link();
    // SAFETY: `mine` and `other` are ours; `first` is a frame of `a`, alive (we hold it).
    let (same, cross) = unsafe {
        (
            <skb_pool::Skb as Node>::peek_next(mine, first),
            <skb_pool::Skb as Node>::peek_next(other, first),
        )
    };
    assert_eq!(same, second.as_ptr(), "same pool: the head's next");
    assert!(cross.is_null(), "another pool's frame: no hint");
    for link in [first, second, mine, other] {
        // SAFETY: each link came from `into_link` of an `Skb` and is rebuilt once.
        drop(unsafe { <skb_pool::Skb as Node>::from_link(link) });
    }
    assert_eq!((a.stats().free, b.stats().free), (8, 8));
}

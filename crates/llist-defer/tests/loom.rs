//! loom models of the list protocols (run with `--cfg lockless_loom`, see the README).
//!
//! Capacities are shrunk so the model explores the boundaries: burst limits of 1 and 2, two or
//! three threads, one or two items each.
#![cfg(lockless_loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;

use core::ptr::NonNull;

use llist_defer::{Boxed, DeferList, LList, Link, Node, Pushed};

/// Item = (pusher, sequence).
type Item = Boxed<(usize, usize)>;

/// Checks every item arrived once and each pusher's items keep their push order.
/// `per[p]` is how many items pusher `p` pushed, with sequences `0..per[p]`.
fn assert_exactly_once_in_order(got: &[(usize, usize)], per: &[usize]) {
    assert_eq!(
        got.len(),
        per.iter().sum::<usize>(),
        "lost or duplicated: {got:?}"
    );
    for (p, &n) in per.iter().enumerate() {
        let seqs: Vec<usize> = got
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|&(_, s)| s)
            .collect();
        assert_eq!(
            seqs,
            (0..n).collect::<Vec<_>>(),
            "pusher {p} out of order in {got:?}"
        );
    }
}

/// (1) Several pushers and one taker: every item delivered exactly once, in each pusher's order.
#[test]
fn llist_push_take_all_exactly_once() {
    loom::model(|| {
        let list: Arc<LList<Item>> = Arc::new(LList::new());
        let pushers: Vec<_> = (0..2)
            .map(|p| {
                let list = list.clone();
                thread::spawn(move || {
                    for s in 0..2 {
                        list.add(Boxed::new((p, s)));
                    }
                })
            })
            .collect();
        // The taker races the pushers; each take is a FIFO batch, batches in take order.
        let mut got = Vec::new();
        for _ in 0..2 {
            got.extend(list.take_all().reverse().into_iter().map(Boxed::into_inner));
        }
        for p in pushers {
            p.join().unwrap();
        }
        got.extend(list.take_all().reverse().into_iter().map(Boxed::into_inner));
        assert_exactly_once_in_order(&got, &[2, 2]);
        assert!(list.is_empty());
    });
}

/// `add_batch` publishes a whole chain at once, racing single adds and a taker.
#[test]
fn llist_add_batch_races_add() {
    loom::model(|| {
        let list: Arc<LList<Item>> = Arc::new(LList::new());
        let l2 = list.clone();
        let batcher = thread::spawn(move || {
            // Pushed as a batch, front first: after take_all + reverse they come out back first.
            let batch = [(0, 1), (0, 0)].into_iter().map(Boxed::new).collect();
            l2.add_batch(batch)
        });
        let l3 = list.clone();
        let single = thread::spawn(move || l3.add(Boxed::new((1, 0))));
        let mut got: Vec<_> = list
            .take_all()
            .reverse()
            .into_iter()
            .map(Boxed::into_inner)
            .collect();
        let was_empty = [batcher.join().unwrap(), single.join().unwrap()];
        got.extend(list.take_all().reverse().into_iter().map(Boxed::into_inner));
        assert_exactly_once_in_order(&got, &[2, 1]);
        assert!(
            was_empty.iter().any(|&e| e),
            "someone must have found the list empty"
        );
    });
}

/// (2) The counting rule, with no drain in between: the first pusher never counts, every
/// other push counts exactly once (CAS retries included), the counts handed out are 1..=k with
/// no gaps or repeats, a push is refused exactly when its count would pass the limit, and only
/// accepted pushes raise the count, which never passes the limit. At limit 1 the second
/// counted push is refused; at limit 2 both are accepted, so one of them can lose its CAS to
/// the other and retry, which must not count it again.
#[test]
fn defer_list_counting_rule() {
    loom::model(|| counting_rule(1));
}

/// (2), at limit 2: the CAS-retry case.
#[test]
fn defer_list_counting_rule_retry_counts_once() {
    loom::model(|| counting_rule(2));
}

fn counting_rule(limit: usize) {
    let list: Arc<DeferList<Item>> = Arc::new(DeferList::with_limit(limit).unwrap());
    let threads: Vec<_> = (0..3)
        .map(|p| {
            let list = list.clone();
            thread::spawn(move || match list.push(Boxed::new((p, 0))) {
                Ok(Pushed::First) => (true, 0, false),
                Ok(Pushed::Queued { burst }) => (false, burst, false),
                Err(rejected) => (false, rejected.burst, true),
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let firsts = results.iter().filter(|r| r.0).count();
    assert_eq!(
        firsts, 1,
        "exactly one pusher found the list empty: {results:?}"
    );
    let mut bursts: Vec<usize> = results.iter().filter(|r| !r.0).map(|r| r.1).collect();
    bursts.sort_unstable();
    assert_eq!(
        bursts,
        [1, 2],
        "one increment per non-first push: {results:?}"
    );
    let accepted_counted = results.iter().filter(|r| !r.0 && !r.2).count();
    assert_eq!(
        list.burst(),
        accepted_counted,
        "the count is the accepted pushes behind the first: none by the first pusher, none \
         repeated, none by a refused push: {results:?}"
    );
    assert!(list.burst() <= limit, "the count passed the limit");
    for &(_, burst, refused) in &results {
        assert_eq!(
            refused,
            burst > limit,
            "refused iff over the limit: {results:?}"
        );
    }
    let kept = list.take_all().count();
    assert_eq!(
        kept,
        3 - results.iter().filter(|r| r.2).count(),
        "refused items stay out"
    );
    assert_eq!(list.burst(), 0, "take_all resets the count");
}

/// (2b) The counting rule with a drain racing the pushes: two pushers at limit 1 while a third
/// thread takes everything once, so a push's CAS can fail because the list was taken and retry
/// on an empty list. Each push counts at most once (so the count never passes the number of
/// pushes, and a `Queued` or `Rejected` push reports its one count), a push is refused exactly
/// when its count passed the limit, and every item ends up taken once or handed back, never
/// both. The kernel's own corner does not arise: there a push that saw the list non-empty and
/// counted, then lost its CAS to the take and retried onto the emptied list, keeps a count the
/// take's reset may already have passed; here the count moves only with a successful CAS and
/// the take zeroes it in the same swap, so the count never passes the limit.
#[test]
fn defer_list_counting_rule_with_a_racing_take() {
    loom::model(|| {
        const LIMIT: usize = 1;
        let list: Arc<DeferList<Item>> = Arc::new(DeferList::with_limit(LIMIT).unwrap());
        let pushers: Vec<_> = (0..2)
            .map(|p| {
                let list = list.clone();
                thread::spawn(move || match list.push(Boxed::new((p, 0))) {
                    Ok(Pushed::First) => (p, true, 0, false),
                    Ok(Pushed::Queued { burst }) => (p, false, burst, false),
                    Err(rejected) => (p, false, rejected.burst, true),
                })
            })
            .collect();
        let taker = {
            let list = list.clone();
            thread::spawn(move || -> Vec<(usize, usize)> {
                list.take_all().map(Boxed::into_inner).collect()
            })
        };
        let results: Vec<_> = pushers.into_iter().map(|t| t.join().unwrap()).collect();
        let mut got = taker.join().unwrap();
        let firsts = results.iter().filter(|r| r.1).count();
        assert!(firsts >= 1, "some push found the list empty: {results:?}");
        assert!(
            list.burst() <= LIMIT,
            "the count passed the limit: burst {} after {results:?}",
            list.burst()
        );
        for &(_, first, burst, refused) in &results {
            if !first {
                assert!(burst >= 1, "a counted push reports its count: {results:?}");
            }
            assert_eq!(
                refused,
                burst > LIMIT,
                "refused iff over the limit: {results:?}"
            );
        }
        got.extend(list.take_all().map(Boxed::into_inner));
        let kept: Vec<usize> = results.iter().filter(|r| !r.3).map(|r| r.0).collect();
        let mut got_ids: Vec<usize> = got.iter().map(|&(p, _)| p).collect();
        got_ids.sort_unstable();
        assert_eq!(
            got_ids, kept,
            "each accepted item taken once, refused ones never"
        );
        assert_eq!(list.burst(), 0, "take_all resets the count");
    });
}

/// (3) First pusher drains: pushers follow the kernel protocol (the first takes the lock and
/// drains, the others return at once), racing. After every thread returns nothing is stranded:
/// each item was delivered once or refused, per-pusher order is kept, the list is empty.
#[test]
fn defer_list_first_pusher_drains_nothing_stranded() {
    loom::model(|| first_pusher_drains(|p, s| Boxed::new((p, s)), Boxed::into_inner));
}

/// An item of an arena that outlives the model's lists, so its node type lets a pusher read the
/// head's `next` for the drain hint (`Node::peek_next`).
#[repr(C)]
struct ArenaItem {
    link: Link,
    value: (usize, usize),
}

struct InArena(NonNull<ArenaItem>);

// SAFETY: the handle is a pointer into an arena that every thread of the model keeps alive.
unsafe impl Send for InArena {}

// SAFETY: `into_link` gives the item's first field and `from_link` the same pointer back;
// `peek_next` reads through `Link::peek_next` only, and the arena outlives every list.
unsafe impl Node for InArena {
    fn into_link(self) -> NonNull<Link> {
        self.0.cast()
    }
    unsafe fn from_link(link: NonNull<Link>) -> Self {
        InArena(link.cast())
    }
    unsafe fn peek_next(_: NonNull<Link>, head: NonNull<Link>) -> *mut Link {
        // SAFETY: the arena is alive for the whole model.
        unsafe { Link::peek_next(head) }
    }
}

/// (5b) The same protocol with drain hints: every push reads the `next` of the head it links
/// to, racing the drainer that is relinking that very node. The hint is only prefetched, so
/// delivery must be exactly as without it.
#[test]
fn defer_list_drain_hints_race_the_drainer() {
    loom::model(|| {
        let arena: Arc<Vec<ArenaItem>> = Arc::new(
            (0..4)
                .map(|i| ArenaItem {
                    link: Link::new(),
                    value: (i / 2, i % 2),
                })
                .collect(),
        );
        let a = arena.clone();
        first_pusher_drains(
            move |p, s| InArena(NonNull::from(&a[2 * p + s])),
            // SAFETY: the handle points into the arena, alive until the model ends.
            |n| unsafe { n.0.as_ref() }.value,
        );
        drop(arena);
    });
}

/// Two pushers of two items each, limit 2; whoever pushes first drains: nothing refused,
/// nothing stranded, every item delivered once and in its pusher's order.
fn first_pusher_drains<N: Node + Send + 'static>(
    make: impl Fn(usize, usize) -> N + Clone + Send + 'static,
    value: fn(N) -> (usize, usize),
) {
    let list: Arc<DeferList<N>> = Arc::new(DeferList::with_limit(2).unwrap());
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..2)
        .map(|p| {
            let (list, delivered, make) = (list.clone(), delivered.clone(), make.clone());
            thread::spawn(move || {
                let mut refused = 0;
                for s in 0..2 {
                    match list.push(make(p, s)) {
                        Ok(Pushed::First) => {
                            let mut out = delivered.lock().unwrap();
                            let batch = list.take_all().reverse();
                            out.extend(batch.into_iter().map(value));
                        }
                        Ok(Pushed::Queued { .. }) => {}
                        Err(_) => refused += 1,
                    }
                }
                refused
            })
        })
        .collect();
    let refused: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(
        refused, 0,
        "a limit of 2 cannot be passed by 4 pushes with drains"
    );
    assert!(list.is_empty(), "an item was stranded on the list");
    let got = delivered.lock().unwrap().clone();
    assert_exactly_once_in_order(&got, &[2, 2]);
}

/// `push_batch` under the first-pusher protocol, racing single pushes, with a limit of 1 that
/// both the batch and a single push can pass: the batch is delivered whole and in order or refused whole and handed back, the
/// count rises once per push by the items pushed, and nothing is stranded.
#[test]
fn defer_list_push_batch_races_push() {
    loom::model(|| {
        let list: Arc<DeferList<Item>> = Arc::new(DeferList::with_limit(1).unwrap());
        let delivered = Arc::new(Mutex::new(Vec::new()));
        let drain = |list: &DeferList<Item>, delivered: &Mutex<Vec<(usize, usize)>>| {
            let mut out = delivered.lock().unwrap();
            let batch = list.take_all().reverse();
            out.extend(batch.into_iter().map(Boxed::into_inner));
        };
        let (l, d) = (list.clone(), delivered.clone());
        let batcher = thread::spawn(move || {
            let batch = [(0, 0), (0, 1)].into_iter().map(Boxed::new).collect();
            match l.push_batch(batch) {
                Ok(Pushed::First) => {
                    drain(&l, &d);
                    Vec::new()
                }
                Ok(Pushed::Queued { burst }) => {
                    assert!(burst >= 2, "a batch of 2 raises the count by 2");
                    Vec::new()
                }
                Err(rejected) => {
                    assert!(rejected.burst > 1);
                    let back: Vec<_> = rejected
                        .into_inner()
                        .into_iter()
                        .map(Boxed::into_inner)
                        .collect();
                    assert_eq!(
                        back,
                        [(0, 0), (0, 1)],
                        "a refused batch comes back whole, in order"
                    );
                    back
                }
            }
        });
        let mut refused = Vec::new();
        for s in 0..2 {
            match list.push(Boxed::new((1, s))) {
                Ok(Pushed::First) => drain(&list, &delivered),
                Ok(Pushed::Queued { .. }) => {}
                Err(r) => refused.push(r.into_inner().into_inner()),
            }
        }
        refused.extend(batcher.join().unwrap());
        assert!(list.is_empty(), "an item was stranded on the list");
        let got = delivered.lock().unwrap().clone();
        // Everything delivered once or refused once; each pusher's delivered items in order.
        let mut all: Vec<_> = got.iter().chain(&refused).copied().collect();
        all.sort_unstable();
        assert_eq!(
            all,
            [(0, 0), (0, 1), (1, 0), (1, 1)],
            "got {got:?} refused {refused:?}"
        );
        for p in 0..2 {
            let seqs: Vec<usize> = got.iter().filter(|i| i.0 == p).map(|i| i.1).collect();
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "pusher {p} out of order: {got:?}"
            );
        }
    });
}

//! Single-threaded checks of the DeferList rules and the detached-chain helpers.
#![cfg(not(lockless_loom))]

use llist_defer::{
    Boxed, Chain, ConfigError, DEFAULT_BURST_LIMIT, DeferList, LList, MAX_BURST_LIMIT, Pushed,
};

#[test]
fn limit_zero_is_a_config_error_naming_the_fix() {
    let err = DeferList::<Boxed<u8>>::with_limit(0).unwrap_err();
    assert_eq!(err, ConfigError::ZeroLimit);
    assert!(err.to_string().contains("at least 1"), "{err}");
    let err = DeferList::<Boxed<u8>>::with_limit(MAX_BURST_LIMIT + 1).unwrap_err();
    assert_eq!(err, ConfigError::LimitTooLarge(MAX_BURST_LIMIT + 1));
    assert!(err.to_string().contains("65535"), "{err}");
    assert_eq!(
        DeferList::<Boxed<u8>>::with_limit(MAX_BURST_LIMIT)
            .unwrap()
            .limit(),
        MAX_BURST_LIMIT
    );
    assert_eq!(DeferList::<Boxed<u8>>::new().limit(), DEFAULT_BURST_LIMIT);
}

#[test]
fn first_pusher_never_counts_and_only_the_arrival_is_refused() {
    let list = DeferList::with_limit(2).unwrap();
    assert_eq!(list.push(Boxed::new(0)).unwrap(), Pushed::First);
    assert_eq!(
        list.burst(),
        0,
        "the push that found the list empty must not count"
    );
    assert_eq!(
        list.push(Boxed::new(1)).unwrap(),
        Pushed::Queued { burst: 1 }
    );
    assert_eq!(
        list.push(Boxed::new(2)).unwrap(),
        Pushed::Queued { burst: 2 }
    );
    let refused = list.push(Boxed::new(3)).unwrap_err();
    assert_eq!((refused.burst, *refused.item), (3, 3));
    assert!(refused.to_string().contains("burst limit"), "{refused}");
    // A refused push leaves no trace in the count (the kernel's increment would stay until
    // the next drain): the count is raised only by the CAS that links an item.
    assert_eq!(list.burst(), 2);
    assert_eq!(list.push(Boxed::new(4)).unwrap_err().burst, 3);
    let queued: Vec<i32> = list
        .take_all()
        .reverse()
        .into_iter()
        .map(Boxed::into_inner)
        .collect();
    assert_eq!(
        queued,
        [0, 1, 2],
        "queued items are never dropped by the limit"
    );
    assert_eq!(list.burst(), 0);
    assert_eq!(
        list.push(Boxed::new(5)).unwrap(),
        Pushed::First,
        "after a drain, first again"
    );
}

#[test]
fn chain_pop_count_and_drop_release_every_node() {
    use std::rc::Rc;
    let token = Rc::new(());
    let list = LList::new();
    for _ in 0..5 {
        list.add(Boxed::new(token.clone()));
    }
    let mut chain: Chain<_> = list.take_all();
    assert_eq!(chain.len(), 5);
    assert!(chain.pop().is_some());
    assert_eq!(Rc::strong_count(&token), 5);
    drop(chain);
    assert_eq!(
        Rc::strong_count(&token),
        1,
        "dropping a chain drops its nodes"
    );
    list.add(Boxed::new(token.clone()));
    drop(list);
    assert_eq!(
        Rc::strong_count(&token),
        1,
        "dropping a list drops its nodes"
    );
}

#[test]
fn add_batch_reports_was_empty_and_keeps_batch_order() {
    let list = LList::new();
    assert!(
        !list.add_batch(Default::default()),
        "an empty batch changes nothing"
    );
    assert!(list.add_batch([1, 2].into_iter().map(Boxed::new).collect()));
    assert!(!list.add_batch([3, 4].into_iter().map(Boxed::new).collect()));
    let newest_first: Vec<i32> = list.take_all().map(Boxed::into_inner).collect();
    assert_eq!(newest_first, [3, 4, 1, 2]);
}

#[test]
fn push_batch_keeps_order_counts_items_and_never_refuses_the_first() {
    let list = DeferList::with_limit(4).unwrap();
    // The first pusher is never refused, however long its batch, and does not count.
    let first: llist_defer::Fifo<_> = (0..6).map(Boxed::new).collect();
    assert_eq!(list.push_batch(first).unwrap(), Pushed::First);
    assert_eq!(list.burst(), 0);
    // Behind it, a batch counts its items, once.
    let second: llist_defer::Fifo<_> = (6..9).map(Boxed::new).collect();
    assert_eq!(
        list.push_batch(second).unwrap(),
        Pushed::Queued { burst: 3 }
    );
    // 3 + 2 > 4: refused whole, and handed back in its order.
    let third: llist_defer::Fifo<_> = (9..11).map(Boxed::new).collect();
    let rejected = list.push_batch(third).unwrap_err();
    assert_eq!(rejected.burst, 5);
    let back: Vec<i32> = rejected
        .into_inner()
        .into_iter()
        .map(Boxed::into_inner)
        .collect();
    assert_eq!(back, [9, 10]);
    // The refused batch left no count behind: a single push still fits (3 + 1 = 4), lands
    // after both batches, and the next one is refused.
    assert_eq!(
        list.push(Boxed::new(99)).unwrap(),
        Pushed::Queued { burst: 4 }
    );
    assert_eq!(list.push(Boxed::new(100)).unwrap_err().burst, 5);
    let got: Vec<i32> = list
        .take_all()
        .reverse()
        .into_iter()
        .map(Boxed::into_inner)
        .collect();
    assert_eq!(got, [0, 1, 2, 3, 4, 5, 6, 7, 8, 99]);
    assert_eq!(list.burst(), 0, "take_all resets the count");
    // An empty batch is a no-op: nothing to drain, no count.
    let empty = llist_defer::Fifo::<Boxed<i32>>::new();
    assert_eq!(list.push_batch(empty).unwrap(), Pushed::Queued { burst: 0 });
    assert!(list.is_empty());
    assert_eq!(list.push(Boxed::new(1)).unwrap(), Pushed::First);
}

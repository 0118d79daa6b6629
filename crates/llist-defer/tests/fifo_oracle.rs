//! Property test: `Fifo`, `Chain::reverse` and `LList` against a `VecDeque` oracle.
#![cfg(not(lockless_loom))]

use std::collections::VecDeque;

use llist_defer::{Boxed, Fifo, LList};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    PushBack(u32),
    PushFront(u32),
    PopFront,
    AppendFresh(Vec<u32>),
    PrependFresh(Vec<u32>),
    RoundTripThroughList,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u32>().prop_map(Op::PushBack),
        any::<u32>().prop_map(Op::PushFront),
        Just(Op::PopFront),
        prop::collection::vec(any::<u32>(), 0..5).prop_map(Op::AppendFresh),
        prop::collection::vec(any::<u32>(), 0..5).prop_map(Op::PrependFresh),
        Just(Op::RoundTripThroughList),
    ]
}

proptest! {
    #[test]
    fn fifo_matches_vecdeque(ops in prop::collection::vec(op(), 0..200)) {
        let mut fifo: Fifo<Boxed<u32>> = Fifo::new();
        let mut oracle = VecDeque::new();
        for op in ops {
            match op {
                Op::PushBack(v) => { fifo.push_back(Boxed::new(v)); oracle.push_back(v); }
                Op::PushFront(v) => { fifo.push_front(Boxed::new(v)); oracle.push_front(v); }
                Op::PopFront => {
                    prop_assert_eq!(fifo.pop_front().map(Boxed::into_inner), oracle.pop_front());
                }
                Op::AppendFresh(vs) => {
                    let mut other: Fifo<_> = vs.iter().copied().map(Boxed::new).collect();
                    fifo.append(&mut other);
                    prop_assert!(other.is_empty());
                    oracle.extend(vs);
                }
                Op::PrependFresh(vs) => {
                    let mut other: Fifo<_> = vs.iter().copied().map(Boxed::new).collect();
                    fifo.prepend(&mut other);
                    for v in vs.into_iter().rev() { oracle.push_front(v); }
                }
                Op::RoundTripThroughList => {
                    // One by one onto a list, taken whole and reversed: FIFO order survives.
                    let list = LList::new();
                    while let Some(n) = fifo.pop_front() { list.add(n); }
                    fifo = list.take_all().reverse();
                }
            }
            prop_assert_eq!(fifo.len(), oracle.len());
            prop_assert_eq!(fifo.front().map(|n| **n), oracle.front().copied());
            prop_assert_eq!(fifo.back().map(|n| **n), oracle.back().copied());
            let seen: Vec<u32> = fifo.iter().map(|n| **n).collect();
            prop_assert_eq!(&seen, &oracle.iter().copied().collect::<Vec<_>>());
        }
    }
}

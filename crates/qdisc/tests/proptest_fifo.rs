//! pfifo, bfifo and pfifo_head_drop against `VecDeque` oracles, and pfifo_fast against three
//! slot-by-slot `ptr_ring`s, on random operation sequences.

use std::collections::VecDeque;

use proptest::prelude::*;

#[path = "common/ptr_ring.rs"]
mod ptr_ring;
use ptr_ring::PtrRing;
use qdisc::{
    DropReason, FifoBuilder, PRIO2BAND, Packet, Pfifo, PfifoFast, PfifoFastBuilder, Qdisc,
    TestPacket, ToFree, Verdict,
};

#[derive(Debug, Clone)]
enum Op {
    Enq { len: usize, prio: u32 },
    Deq,
    Peek,
    Reset,
}

/// Up to `max` operations, enqueues and dequeues weighted `enq` and `deq` against one peek and
/// one reset.
fn op_mix(enq: u32, deq: u32, max: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        enq => (1usize..3000, 0u32..32).prop_map(|(len, prio)| Op::Enq { len, prio }),
        deq => Just(Op::Deq),
        1 => Just(Op::Peek),
        1 => Just(Op::Reset),
    ];
    prop::collection::vec(op, 0..max)
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    op_mix(6, 4, 400)
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    P,
    B,
    H,
}

fn check_fifo(kind: Kind, limit: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let b = match kind {
        Kind::P => FifoBuilder::pfifo(),
        Kind::B => FifoBuilder::bfifo(),
        Kind::H => FifoBuilder::head_drop(),
    };
    let mut q: Pfifo<TestPacket> = b.limit(limit).build().unwrap();
    let mut oracle: VecDeque<(u64, usize)> = VecDeque::new();
    let (mut sent, mut drops) = (0u64, 0u64);
    for (id, op) in ops.into_iter().enumerate() {
        let id = id as u64;
        let mut tf = ToFree::new();
        match op {
            Op::Enq { len, .. } => {
                let backlog: usize = oracle.iter().map(|p| p.1).sum();
                let want = match kind {
                    Kind::P if (oracle.len() as u64) < limit => Verdict::Success,
                    Kind::B if (backlog + len) as u64 <= limit => Verdict::Success,
                    Kind::H if limit > 0 && (oracle.len() as u64) < limit => Verdict::Success,
                    Kind::H if limit > 0 => Verdict::Congested(DropReason::QdiscOverlimit),
                    _ => Verdict::Dropped(DropReason::QdiscOverlimit),
                };
                let got = q.enqueue(TestPacket::new(id, len), &mut tf);
                prop_assert_eq!(got, want);
                let dropped: Vec<u64> = tf.take().0.iter().map(|p| p.id()).collect();
                match want {
                    Verdict::Success => {
                        oracle.push_back((id, len));
                        prop_assert!(dropped.is_empty());
                    }
                    Verdict::Congested(_) => {
                        let old = oracle.pop_front().unwrap();
                        oracle.push_back((id, len));
                        prop_assert_eq!(dropped, vec![old.0]);
                        drops += 1;
                    }
                    Verdict::Dropped(_) => {
                        prop_assert_eq!(dropped, vec![id]);
                        drops += 1;
                    }
                }
            }
            Op::Deq => {
                let got = q.dequeue().map(|p| (p.id(), p.len()));
                let want = oracle.pop_front();
                prop_assert_eq!(got, want);
                if let Some((_, l)) = want {
                    sent += l as u64;
                }
            }
            Op::Peek => prop_assert_eq!(q.peek().map(|p| p.id()), oracle.front().map(|p| p.0)),
            Op::Reset => {
                q.reset(&mut tf, DropReason::Deactivated);
                prop_assert_eq!(tf.len(), oracle.len());
                oracle.clear();
            }
        }
        let s = q.stats();
        prop_assert_eq!(s.qlen as usize, oracle.len());
        prop_assert_eq!(s.backlog, oracle.iter().map(|p| p.1 as u64).sum::<u64>());
        prop_assert_eq!((s.bytes, s.drops), (sent, drops));
        if let Kind::B = kind {
            prop_assert!(s.backlog <= limit);
        } else {
            prop_assert!(s.qlen <= limit);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every verdict, dequeue and band length matches three literal `ptr_ring`s: rings below
    /// 32 slots, cleared slot by slot, and larger ones, whose consumer clears read slots 16 at
    /// a time. Enqueues outnumber dequeues two to one, so that bands fill.
    #[test]
    fn pfifo_fast_matches_three_ptr_rings(txqlen in 1u32..72, ops in op_mix(16, 8, 800)) {
        let mut q: PfifoFast<TestPacket> =
            PfifoFastBuilder::new().tx_queue_len(txqlen).build().unwrap();
        let mut rings: Vec<PtrRing> = (0..3).map(|_| PtrRing::new(txqlen as usize)).collect();
        let mut refused = 0;
        for (id, op) in ops.into_iter().enumerate() {
            let id = id as u64;
            let mut tf = ToFree::new();
            match op {
                Op::Enq { len, prio } => {
                    let b = usize::from(PRIO2BAND[(prio & 15) as usize]);
                    let got = q.enqueue(TestPacket::new(id, len).with_priority(prio), &mut tf);
                    if rings[b].produce(id) {
                        prop_assert_eq!(got, Verdict::Success);
                    } else {
                        refused += 1;
                        prop_assert_eq!(got, Verdict::Dropped(DropReason::QdiscOverlimit));
                    }
                }
                Op::Deq => {
                    let want = rings.iter_mut().find_map(PtrRing::consume);
                    prop_assert_eq!(q.dequeue().map(|p| p.id()), want);
                }
                Op::Peek => {
                    let want = rings.iter().find_map(PtrRing::peek);
                    prop_assert_eq!(q.peek().map(|p| p.id()), want);
                }
                Op::Reset => {
                    q.reset(&mut tf, DropReason::Deactivated);
                    let mut freed = 0;
                    for r in &mut rings {
                        while r.consume().is_some() {
                            freed += 1;
                        }
                    }
                    prop_assert_eq!(tf.len(), freed);
                }
            }
            for (b, r) in rings.iter().enumerate() {
                prop_assert_eq!(q.band_len(b), r.len());
            }
        }
        prop_assert_eq!(q.stats().drops, refused);
    }

    #[test]
    fn pfifo_matches_vecdeque(limit in 0u64..20, ops in ops()) {
        check_fifo(Kind::P, limit, ops)?;
    }

    #[test]
    fn bfifo_matches_vecdeque(limit in 0u64..20_000, ops in ops()) {
        check_fifo(Kind::B, limit, ops)?;
    }

    #[test]
    fn head_drop_matches_vecdeque(limit in 0u64..20, ops in ops()) {
        check_fifo(Kind::H, limit, ops)?;
    }
}

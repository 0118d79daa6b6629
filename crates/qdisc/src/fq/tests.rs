//! White-box checks of state the public API does not show: flow credit (`refill_delay`,
//! `initial_quantum`, DRR refill) and the per-flow linear list / ordered map split.

use std::sync::Arc;

use super::flow::{Flow, FlowCold, FlowState, PktCb, Src};
use super::{Fq, FqBuilder};
use crate::clock::ManualClock;
use crate::packet::{FlowKey, Packet};
use crate::qdisc::{Qdisc, ToFree};
use crate::test_packet::TestPacket;

const MS: u64 = 1_000_000;

fn sock(id: u64) -> FlowKey {
    FlowKey::Socket { id, hash: 0 }
}

fn credit(q: &Fq<TestPacket>, id: u64) -> (i64, FlowState) {
    let f = q.table.get(q.table.lookup(u128::from(id) << 1).unwrap());
    (i64::from(f.credit), f.state)
}

/// An FQ with a bulk flow (socket 1000) kept backlogged so the round robin keeps turning.
fn setup() -> (Arc<ManualClock>, Fq<TestPacket>, ToFree<TestPacket>) {
    let c = Arc::new(ManualClock::new(1_000 * MS));
    let q = FqBuilder::new()
        .clock(c.clone())
        .maxrate(u64::MAX / 2)
        .build()
        .unwrap();
    (c, q, ToFree::new())
}

fn turn(q: &mut Fq<TestPacket>, tf: &mut ToFree<TestPacket>, rounds: usize) {
    for i in 0..rounds {
        while q.band_pkt_count[1] < 4 {
            q.enqueue(TestPacket::new(i as u64, 1000).with_flow(sock(1000)), tf);
        }
        q.dequeue();
    }
}

#[test]
fn new_flow_starts_with_initial_quantum_and_refills_by_quantum() {
    let (_c, mut q, mut tf) = setup();
    q.enqueue(TestPacket::new(1, 100).with_flow(sock(7)), &mut tf);
    assert_eq!(credit(&q, 7).0, 15_140);
    for i in 0..20 {
        q.enqueue(TestPacket::new(i, 1000).with_flow(sock(8)), &mut tf);
    }
    // Flow 8 spends its 15140 B of initial credit: 16 packets, then credit -860.
    let mut n = 0;
    while credit(&q, 8).0 > 0 {
        let p = q.dequeue().unwrap();
        if p.flow() == sock(8) {
            n += 1;
        }
    }
    assert_eq!((n, credit(&q, 8).0), (16, 15_140 - 16_000));
    // Its next turn adds one quantum first.
    while q.dequeue().map(|p| p.flow()) != Some(sock(8)) {}
    assert_eq!(credit(&q, 8).0, 15_140 - 16_000 + 3028 - 1000);
}

#[test]
fn refill_delay_tops_up_an_idle_flow_to_one_quantum() {
    // Detached at 1 s + 0 = jiffy 1000 (HZ 1000): age = 1000 | 1 = 1001, and the refill needs
    // time_after(jiffies, 1001 + 40), so jiffy 1042 (sch_fq.c fq_enqueue).
    for (idle, want_refill) in [(10 * MS, false), (41 * MS, false), (42 * MS, true)] {
        let (c, mut q, mut tf) = setup();
        q.enqueue(TestPacket::new(1, 100).with_flow(sock(7)), &mut tf);
        turn(&mut q, &mut tf, 50);
        assert_eq!(credit(&q, 7).1, FlowState::Detached);
        let idx = q.table.lookup(7 << 1).unwrap();
        q.table.get_mut(idx).credit = 100;
        c.advance(idle);
        q.enqueue(TestPacket::new(2, 100).with_flow(sock(7)), &mut tf);
        let want = if want_refill { 3028 } else { 100 };
        assert_eq!(credit(&q, 7), (want, FlowState::Listed), "idle {idle}");
    }
}

#[test]
fn linear_list_and_ordered_map_split() {
    let mut f: Flow<TestPacket> = Flow::new();
    let mut cold: FlowCold<TestPacket> = FlowCold::new();
    let cb = |t| PktCb {
        time_to_send: t,
        band: 0,
        edt: true,
    };
    f.push(&mut cold, TestPacket::new(1, 1), cb(10));
    f.push(&mut cold, TestPacket::new(2, 1), cb(20));
    f.push(&mut cold, TestPacket::new(3, 1), cb(15)); // earlier than the tail: ordered map
    f.push(&mut cold, TestPacket::new(4, 1), cb(20)); // equal to the tail: linear
    f.push(&mut cold, TestPacket::new(5, 1), cb(15)); // ties in the map keep arrival order
    f.check_parts(&cold).unwrap();
    let mut out = vec![];
    while let Some((src, _)) = f.peek(&cold) {
        let (p, cb) = f.take(&mut cold, src).unwrap();
        f.check_parts(&cold).unwrap();
        out.push((p.id(), cb.time_to_send, src));
    }
    assert_eq!(
        out,
        [
            (1, 10, Src::Linear),
            (3, 15, Src::Tree),
            (5, 15, Src::Tree),
            (2, 20, Src::Linear),
            (4, 20, Src::Linear)
        ]
    );
}

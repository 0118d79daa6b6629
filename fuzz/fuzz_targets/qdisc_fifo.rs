//! pfifo, bfifo and pfifo_head_drop against `VecDeque` oracles, and pfifo_fast against three
//! literal `ptr_ring`s (rings of 1 to 96 slots: below 32 a read slot is cleared at once, from
//! 32 in batches of 16), on operation sequences decoded from the fuzzer's bytes.
#![no_main]

#[path = "../../crates/qdisc/tests/common/ptr_ring.rs"]
mod ptr_ring;

use std::collections::VecDeque;

use libfuzzer_sys::fuzz_target;
use ptr_ring::PtrRing;
use qdisc::{
    DropReason, FifoBuilder, PRIO2BAND, Packet, Pfifo, PfifoFast, PfifoFastBuilder, Qdisc,
    TestPacket, ToFree, Verdict,
};

enum Op {
    Enq { len: usize, prio: u32 },
    Deq,
    Peek,
    Reset,
}

fn ops(data: &[u8]) -> impl Iterator<Item = Op> + '_ {
    data.chunks(3).map(|c| {
        let b = |i: usize| c.get(i).copied().unwrap_or(0);
        match b(0) % 8 {
            0..=3 => Op::Enq {
                len: 1 + (usize::from(b(1)) << 4 | usize::from(b(2) >> 4)) % 3000,
                prio: u32::from(b(2) & 31),
            },
            4 | 5 => Op::Deq,
            6 => Op::Peek,
            _ => Op::Reset,
        }
    })
}

fn fifo(kind: u8, limit: u64, data: &[u8]) {
    let b = match kind {
        0 => FifoBuilder::pfifo(),
        1 => FifoBuilder::bfifo(),
        _ => FifoBuilder::head_drop(),
    };
    let mut q: Pfifo<TestPacket> = b.limit(limit).build().unwrap();
    let mut oracle: VecDeque<(u64, usize)> = VecDeque::new();
    let (mut sent, mut drops) = (0u64, 0u64);
    for (id, op) in ops(data).enumerate() {
        let id = id as u64;
        let mut tf = ToFree::new();
        match op {
            Op::Enq { len, .. } => {
                let backlog: usize = oracle.iter().map(|p| p.1).sum();
                let want = match kind {
                    0 if (oracle.len() as u64) < limit => Verdict::Success,
                    1 if (backlog + len) as u64 <= limit => Verdict::Success,
                    2 if limit > 0 && (oracle.len() as u64) < limit => Verdict::Success,
                    2 if limit > 0 => Verdict::Congested(DropReason::QdiscOverlimit),
                    _ => Verdict::Dropped(DropReason::QdiscOverlimit),
                };
                assert_eq!(q.enqueue(TestPacket::new(id, len), &mut tf), want);
                let dropped: Vec<u64> = tf.take().0.iter().map(|p| p.id()).collect();
                match want {
                    Verdict::Success => {
                        oracle.push_back((id, len));
                        assert!(dropped.is_empty());
                    }
                    Verdict::Congested(_) => {
                        let old = oracle.pop_front().unwrap();
                        oracle.push_back((id, len));
                        assert_eq!(dropped, vec![old.0]);
                        drops += 1;
                    }
                    Verdict::Dropped(_) => {
                        assert_eq!(dropped, vec![id]);
                        drops += 1;
                    }
                }
            }
            Op::Deq => {
                let want = oracle.pop_front();
                assert_eq!(q.dequeue().map(|p| (p.id(), p.len())), want);
                if let Some((_, l)) = want {
                    sent += l as u64;
                }
            }
            Op::Peek => assert_eq!(q.peek().map(|p| p.id()), oracle.front().map(|p| p.0)),
            Op::Reset => {
                q.reset(&mut tf, DropReason::Deactivated);
                assert_eq!(tf.len(), oracle.len());
                // qdisc_reset frees them without counting drops.
                oracle.clear();
            }
        }
        let s = q.stats();
        assert_eq!(s.qlen as usize, oracle.len());
        assert_eq!(s.backlog, oracle.iter().map(|p| p.1 as u64).sum::<u64>());
        assert_eq!((s.bytes, s.drops), (sent, drops));
        if kind == 1 {
            assert!(s.backlog <= limit);
        } else {
            assert!(s.qlen <= limit);
        }
    }
}

fn pfifo_fast(txqlen: u32, data: &[u8]) {
    let mut q: PfifoFast<TestPacket> = PfifoFastBuilder::new()
        .tx_queue_len(txqlen)
        .build()
        .unwrap();
    let mut bands: Vec<PtrRing> = (0..3).map(|_| PtrRing::new(txqlen as usize)).collect();
    let mut refused = 0;
    for (id, op) in ops(data).enumerate() {
        let id = id as u64;
        let mut tf = ToFree::new();
        match op {
            Op::Enq { len, prio } => {
                let b = usize::from(PRIO2BAND[(prio & 15) as usize]);
                let got = q.enqueue(TestPacket::new(id, len).with_priority(prio), &mut tf);
                if bands[b].produce(id) {
                    assert_eq!(got, Verdict::Success);
                } else {
                    refused += 1;
                    assert_eq!(got, Verdict::Dropped(DropReason::QdiscOverlimit));
                }
            }
            Op::Deq => {
                let want = bands.iter_mut().find_map(PtrRing::consume);
                assert_eq!(q.dequeue().map(|p| p.id()), want);
            }
            Op::Peek => {
                let want = bands.iter().find_map(PtrRing::peek);
                assert_eq!(q.peek().map(|p| p.id()), want);
            }
            Op::Reset => {
                q.reset(&mut tf, DropReason::Deactivated);
                let mut freed = 0;
                for band in &mut bands {
                    while band.consume().is_some() {
                        freed += 1;
                    }
                }
                assert_eq!(tf.len(), freed);
            }
        }
        for (b, band) in bands.iter().enumerate() {
            assert_eq!(q.band_len(b), band.len());
        }
        assert_eq!(q.len(), bands.iter().map(PtrRing::len).sum::<usize>());
    }
    assert_eq!(q.stats().drops, refused);
}

fuzz_target!(|data: &[u8]| {
    let [kind, l0, l1, rest @ ..] = data else {
        return;
    };
    let raw = u64::from(*l0) | u64::from(*l1) << 8;
    match kind % 4 {
        0 => fifo(0, raw % 40, rest),
        1 => fifo(1, raw % 20_000, rest),
        2 => fifo(2, raw % 40, rest),
        _ => pfifo_fast(1 + (raw % 96) as u32, rest),
    }
});

//! FQ on operation sequences decoded from the fuzzer's bytes, with a manual clock: after every
//! step `check_invariants` holds, and packets are conserved (enqueued = dequeued + dropped +
//! queued).
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use qdisc::{DropReason, FlowKey, FqBuilder, ManualClock, Qdisc, TestPacket, ToFree, Verdict};

fuzz_target!(|data: &[u8]| {
    let [cfg0, cfg1, rest @ ..] = data else {
        return;
    };
    let clock = Arc::new(ManualClock::new(1_000_000));
    let Ok(mut q) = FqBuilder::new()
        .clock(clock.clone())
        .limit(1 + u32::from(*cfg0 % 64))
        .flow_limit(1 + u32::from(*cfg1 % 16))
        .quantum(64 + u32::from(*cfg1) * 8)
        .max_flows(1 + usize::from(*cfg0))
        .build::<TestPacket>()
    else {
        return;
    };
    let (mut offered, mut out, mut dropped) = (0u64, 0u64, 0u64);
    for (id, c) in rest.chunks(4).enumerate() {
        let b = |i: usize| c.get(i).copied().unwrap_or(0);
        let mut tf = ToFree::new();
        match b(0) % 8 {
            0..=3 => {
                let len = 1 + usize::from(b(1)) * 6;
                let flow = match b(2) % 3 {
                    0 => FlowKey::Orphan {
                        hash: u32::from(b(3) % 32),
                    },
                    1 => FlowKey::Unconnected {
                        hash: u32::from(b(3) % 32),
                    },
                    _ => FlowKey::Socket {
                        id: u64::from(b(3) % 16),
                        hash: u32::from(b(3) >> 4),
                    },
                };
                let mut p = TestPacket::new(id as u64, len)
                    .with_flow(flow)
                    .with_priority(u32::from(b(2) >> 2) & 15);
                if b(0) & 0x80 != 0 {
                    p = p.with_tstamp(1_000_000 + u64::from(b(3)) * 1_000_000);
                }
                if b(0) & 0x40 != 0 {
                    p = p.with_pacing_rate(1 + u64::from(b(1)) * 1000);
                }
                offered += 1;
                let v = q.enqueue(p, &mut tf);
                if let Verdict::Dropped(_) = v {
                    assert!(tf.len() >= 1);
                }
            }
            4 | 5 => {
                if q.dequeue().is_some() {
                    out += 1;
                }
            }
            6 => clock.advance(u64::from(b(1)) * u64::from(b(2)) * 1000),
            _ => {
                let _ = q.peek().map(|p| p.id());
            }
        }
        if b(0) == 0xff {
            q.reset(&mut tf, DropReason::Deactivated);
        }
        dropped += tf.len() as u64;
        q.check_invariants().unwrap();
        assert_eq!(offered, out + dropped + q.len() as u64);
    }
    // Everything left comes out eventually, given time.
    for _ in 0..100_000 {
        if q.is_empty() {
            break;
        }
        if q.dequeue().is_some() {
            out += 1;
        } else {
            clock.advance(q.next_wakeup().map_or(1_000_000_000, |t| {
                t.saturating_sub(clock_now(&clock)).max(1)
            }));
        }
        q.check_invariants().unwrap();
    }
    assert_eq!(offered, out + dropped + q.len() as u64);
});

fn clock_now(c: &ManualClock) -> u64 {
    qdisc::Clock::now_ns(c)
}

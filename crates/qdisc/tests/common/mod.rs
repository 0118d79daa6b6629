//! Helpers shared by the qdisc integration tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use qdisc::{FlowKey, Fq, FqBuilder, ManualClock, Qdisc, TestPacket, ToFree, Verdict};

/// A manual clock starting at 1 s (so that "0" never means "unset").
pub fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_000_000_000))
}

/// An FQ builder reading `clock`.
pub fn fq_builder(clock: &Arc<ManualClock>) -> FqBuilder {
    FqBuilder::new().clock(clock.clone())
}

/// An FQ that never takes the fast path: a finite (but huge) `maxrate` disables it, as the
/// kernel's `fq_fastpath_check` requires, while pacing at it adds no measurable delay.
pub fn no_fastpath(b: FqBuilder) -> FqBuilder {
    b.maxrate(u64::MAX / 2)
}

pub fn sock(id: u64) -> FlowKey {
    FlowKey::Socket {
        id,
        hash: id as u32,
    }
}

pub fn orphan(hash: u32) -> FlowKey {
    FlowKey::Orphan { hash }
}

pub fn pkt(id: u64, len: usize, flow: FlowKey) -> TestPacket {
    TestPacket::new(id, len).with_flow(flow)
}

pub fn enq<Q: Qdisc<TestPacket>>(q: &mut Q, p: TestPacket) -> Verdict {
    let mut tf = ToFree::new();
    q.enqueue(p, &mut tf)
}

/// Jain's fairness index of `x`.
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    s * s / (x.len() as f64 * s2)
}

pub type TestFq = Fq<TestPacket>;

//! Scratch micro-benchmark (not committed).
use std::hint::black_box;
use std::time::Instant;
fn main() {
    let mode = match std::env::args().nth(1).as_deref() {
        Some("locked") => skb_pool::PerCpu::Locked,
        _ => skb_pool::PerCpu::Rseq,
    };
    let pool = skb_pool::Pool::builder()
        .frame_count(4096)
        .per_cpu(mode)
        .build()
        .unwrap();
    let mut h = pool.handle().unwrap();
    let mut v = Vec::with_capacity(32);
    for round in 0..3 {
        let t = Instant::now();
        for _ in 0..100_000 {
            for _ in 0..32 {
                v.push(black_box(pool.alloc().unwrap()));
            }
            v.clear();
        }
        let a = t.elapsed().as_secs_f64() / 3.2e6 * 1e9;
        let t = Instant::now();
        for _ in 0..100_000 {
            for _ in 0..32 {
                v.push(black_box(h.alloc().unwrap()));
            }
            v.clear();
        }
        let b = t.elapsed().as_secs_f64() / 3.2e6 * 1e9;
        println!(
            "round {round}: percpu {a:.1} ns/op, owner {b:.1} ns/op, {:?}",
            pool.per_cpu_stats().shared_path
        );
    }
}

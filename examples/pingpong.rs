//! How long one cache line takes to go from one core to another on this machine: two threads,
//! pinned to two CPUs, hand a counter back and forth through one line
//! ([`lockless_xmit::pingpong`]).
//!
//! ```sh
//! cargo run --release --example pingpong -- 0 1
//! ```
//!
//! It prints the one-way time, the price every packet pays when it crosses cores. On a shared VM
//! it can change under a run (the benchmarks' machine reads about 30 ns on some minutes and
//! about 180 ns on others, when its two virtual CPUs are placed apart), so `BENCHMARKS.md` quotes
//! ratios measured in the same run, never one absolute rate, and `pktgen --compare` prints what
//! this probe read before each group of cells.

const ROUND_TRIPS: u64 = 200_000;

fn main() -> Result<(), String> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().map_err(|_| format!("not a CPU number: {a}")))
        .collect::<Result<_, _>>()?;
    let (a, b) = match args[..] {
        [] => (0, 1),
        [a, b] => (a, b),
        _ => return Err("usage: pingpong [CPU CPU] (default 0 1)".into()),
    };
    let ns = lockless_xmit::pingpong::one_way_ns(a, b, ROUND_TRIPS)?;
    println!("{ns:.1} ns one-way between CPU {a} and CPU {b}");
    Ok(())
}

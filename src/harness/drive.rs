//! The producers of a run: each allocates frames (a handle or the per-CPU caches), writes
//! packets and transmits them through one `Target`, paced or flat out, with backpressure when
//! frames run out; `drive` starts them, ticks each second and stops them.
//!
//! Owns: the producer loop and the run's clock. Must not: know which contender it drives.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use skb_pool::{Pool, Skb};

use super::cell::{Cell, Tick, process_cpu_time};
use super::targets::Target;
use super::workload::{PacketWriter, PoolKind, Workload};

/// Where a producer gets frames: its own handle, or the pool's per-CPU caches.
pub(super) enum FrameSource {
    Owner(skb_pool::PoolHandle),
    PerCpu(Pool),
}

impl FrameSource {
    fn new(pool: &Pool, kind: PoolKind) -> FrameSource {
        match kind {
            PoolKind::Owner => {
                FrameSource::Owner(pool.handle().expect("a pool handle per producer"))
            }
            PoolKind::PerCpu => FrameSource::PerCpu(pool.clone()),
        }
    }

    #[inline]
    fn alloc(&mut self) -> Result<Skb, skb_pool::PoolError> {
        match self {
            FrameSource::Owner(h) => h.alloc(),
            FrameSource::PerCpu(p) => p.alloc(),
        }
    }

    /// Waits up to `WAIT_NAP` for a frame (both paths drain every source they can reach).
    fn alloc_wait(&mut self) -> Result<Skb, skb_pool::PoolError> {
        let nap = skb_pool::PoolHandle::WAIT_NAP;
        match self {
            FrameSource::Owner(h) => h.alloc_wait(nap),
            FrameSource::PerCpu(p) => p.alloc_wait(nap),
        }
    }

    /// Sends home the frames this producer freed for others and takes back its own (a
    /// handle's batches; the per-CPU path holds nothing back).
    fn flush(&mut self) {
        if let FrameSource::Owner(h) = self {
            h.flush_frees();
            h.flush_remote();
        }
    }
}

/// Starts the producers against `target`, samples progress once a second, stops them at the
/// end of the duration, runs `finish` (the target's flush) and measures. `pool` must be the
/// pool the target's frames come from (for AF_XDP, the UMEM).
pub fn drive<T: Target>(
    w: &Workload,
    pool: &Pool,
    target: Arc<T>,
    on_tick: &mut dyn FnMut(&Tick),
    finish: &dyn Fn(),
) -> Cell {
    let size = w.size.clamp(14, 2048 - pool.headroom());
    let stop = Arc::new(AtomicBool::new(false));
    let offered = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(w.producers + 1));
    let producers: Vec<_> = (0..w.producers)
        .map(|p| {
            let ctx = Producer {
                pool: pool.clone(),
                stop: stop.clone(),
                offered: offered.clone(),
                start: start.clone(),
                quota: w.packets_per_producer,
                flows: w.flows.max(1),
                size,
                rate: w.rate_pps,
                writer: w.writer.clone(),
                burst: w.burst.max(1),
                park: w.park && target.may_park(),
                id: p as u64,
                kind: w.pool,
            };
            let target = target.clone();
            thread::spawn(move || ctx.run(&*target))
        })
        .collect();
    start.wait();
    let (t0, c0) = (Instant::now(), process_cpu_time());
    let deadline = w.duration.map(|d| t0 + d);
    let mut next_tick = t0 + Duration::from_secs(1);
    while !producers.iter().all(|p| p.is_finished()) {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            stop.store(true, Ordering::Relaxed);
            break;
        }
        if now >= next_tick {
            let (sent, sent_bytes, dropped) = target.progress();
            on_tick(&Tick {
                elapsed: now - t0,
                offered: offered.load(Ordering::Relaxed),
                sent,
                sent_bytes,
                dropped,
                cpu: process_cpu_time() - c0,
            });
            next_tick += Duration::from_secs(1);
        }
        // Sampling cadence of the progress meter, not synchronization: joins follow.
        let wake = deadline.map_or(next_tick, |d| d.min(next_tick));
        thread::sleep(
            wake.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(20)),
        );
    }
    for p in producers {
        p.join().expect("producer thread");
    }
    finish();
    let (elapsed, cpu) = (t0.elapsed(), process_cpu_time() - c0);
    let (sent, _, dropped) = target.progress();
    Cell {
        offered: offered.load(Ordering::Relaxed),
        sent,
        dropped,
        elapsed,
        cpu,
        ..Cell::default()
    }
}

/// One producer thread's settings.
struct Producer {
    pool: Pool,
    stop: Arc<AtomicBool>,
    offered: Arc<AtomicU64>,
    start: Arc<Barrier>,
    quota: Option<u64>,
    flows: u32,
    size: usize,
    rate: Option<u64>,
    writer: Option<PacketWriter>,
    burst: usize,
    park: bool,
    id: u64,
    kind: PoolKind,
}

impl Producer {
    fn run<T: Target>(self, target: &T) {
        let mut source = FrameSource::new(&self.pool, self.kind);
        self.start.wait();
        let t0 = Instant::now();
        let gap = self
            .rate
            .map(|r| Duration::from_secs_f64(1.0 / r.max(1) as f64));
        let mut seq = 0u64;
        let mut unpublished = 0u64;
        let mut burst: Vec<Skb> = Vec::with_capacity(self.burst);
        while self.quota.is_none_or(|q| seq < q) && !self.stop.load(Ordering::Relaxed) {
            if let Some(gap) = gap {
                pace(t0 + gap.mul_f64(seq as f64), &self.stop);
            }
            let skb = match source.alloc() {
                Ok(skb) => Some(skb),
                Err(_) => {
                    // Send what this producer holds before waiting: frames held in partial
                    // bursts by every producer could otherwise exhaust the pool for good.
                    if !burst.is_empty() {
                        target.xmit_burst(&mut burst);
                    }
                    alloc(&mut source, &self.stop, target, self.park)
                }
            };
            let Some(mut skb) = skb else {
                break;
            };
            let flow = (seq % u64::from(self.flows)) as u32;
            if skb.put(self.size).is_err() {
                break;
            }
            match &self.writer {
                Some(write) => write(&mut skb, self.id, seq, flow),
                None => {
                    let head = (self.id << 48 | seq).to_be_bytes();
                    let data = skb.data_mut();
                    let n = head.len().min(data.len());
                    data[..n].copy_from_slice(&head[..n]);
                }
            }
            skb.set_flow_hash(flow.wrapping_mul(0x9e37_79b9) ^ self.id as u32);
            seq += 1;
            unpublished += 1;
            if self.burst == 1 {
                target.xmit(skb);
            } else {
                burst.push(skb);
                if burst.len() == self.burst {
                    target.xmit_burst(&mut burst);
                }
            }
            if unpublished == 1024 {
                self.offered.fetch_add(unpublished, Ordering::Relaxed);
                unpublished = 0;
            }
        }
        if !burst.is_empty() {
            target.xmit_burst(&mut burst);
        }
        self.offered.fetch_add(unpublished, Ordering::Relaxed);
        source.flush();
    }
}

/// A frame, waiting for one if every frame is in flight (backpressure).
fn alloc<T: Target>(
    source: &mut FrameSource,
    stop: &AtomicBool,
    target: &T,
    park: bool,
) -> Option<Skb> {
    loop {
        match source.alloc() {
            Ok(skb) => return Some(skb),
            Err(_) if stop.load(Ordering::Relaxed) => return None,
            Err(_) if park => {
                target.poll();
                // Asleep until one of ours is freed; `alloc_wait` itself sends home the frames
                // we freed for others and drains every source ours come back through.
                if let Ok(skb) = source.alloc_wait() {
                    return Some(skb);
                }
            }
            Err(_) => {
                // Send home the frames we freed for others, take back ours, let the thread
                // holding them run.
                source.flush();
                target.poll();
                thread::yield_now();
            }
        }
    }
}

/// Waits until `at` (sleeping when far, spinning when near), or until stopped.
fn pace(at: Instant, stop: &AtomicBool) {
    loop {
        let now = Instant::now();
        if now >= at || stop.load(Ordering::Relaxed) {
            return;
        }
        let left = at - now;
        if left > Duration::from_micros(100) {
            thread::sleep(left - Duration::from_micros(50));
        } else {
            std::hint::spin_loop();
        }
    }
}

//! Transmit to a kernel UDP socket over a veth pair: AF_XDP against what a user would pick
//! instead, on the same link, in one run.
//!
//! Namespace A sends 64-byte-payload UDP/IPv4 datagrams to a kernel UDP socket in namespace B
//! (a thread that drains it and counts what arrives). Variants:
//!
//! - `af_xdp`: a minimal AF_XDP loop in copy mode (veth has no zero-copy): frames pre-built in
//!   the UMEM, descriptors put on the TX ring 64 at a time, completions reaped back onto a free
//!   list, the kernel kicked when it asks. No pool, no qdisc.
//! - `af_xdp_b256`: the same with `XDP_MAX_TX_SKB_BUDGET` 256 (one kick sends up to 256 frames
//!   instead of 32), on the veth's second queue.
//! - `af_xdp_q3`: the minimal loop again, on the veth's fourth queue: the control. Its ratio to
//!   `af_xdp` is what the method reads when nothing differs but the queue, i.e. the noise floor.
//! - `sendmmsg`: one `sendmmsg(2)` per 64 datagrams on a connected UDP socket.
//! - `io_uring`: one submission of 64 `IORING_OP_SEND` per batch on a connected UDP socket.
//! - `pipeline`: the full path — a frame allocated from the `skb-pool` per packet (the
//!   Ethernet/IPv4/UDP frame copied in from a template), `XskDevice::xmit` through the
//!   `TxQueue` engine (DeferList) and a `pfifo`, the `XskDriver` writing descriptors and kicking
//!   every 32, completions reaped back to the producer's pool cache — on the veth's third queue.
//! - `pipeline_bulk`: the same path fed `BATCH` frames at a time through
//!   `XskDevice::xmit_bulk`, on the veth's fifth queue.
//!
//! To add a variant implement [`TxVariant`] and push it in `variants()`. The bench needs root for the namespaces; without it it prints a
//! skip line and exits 0. After criterion's report it prints a table of packets/s sent, the
//! share the receiver got, process CPU time per packet and the ratio to the minimal loop: the
//! medians of `XSK_BENCH_ROUNDS` (default 5) rounds of 1 s per variant, the order rotated each
//! round. Then each variant is paired with the minimal loop in `XSK_BENCH_PAIRED_SLICES`
//! (default 40) alternating slices of 100 ms, and the ratio of their send rates (flush
//! included) is printed: the most noise-proof figure on a shared machine. `XSK_BENCH_TABLE_ONLY=1` skips
//! criterion and prints just these tables; `XSK_BENCH_ONLY=af_xdp,pipeline` keeps just the
//! variants named (the first is the base of the ratios).
//!
//! Run: `cargo bench --bench xsk`.

use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::cell::RefCell;

use criterion::{Criterion, Throughput};
use lockless_xmit::harness::{median, process_cpu_time};
use qdisc::{Pfifo, TxQueue, Verdict};
use skb_pool::{Pool, PoolHandle, Skb};
use xsk_tx::netns::{self, VethPair};
use xsk_tx::packet::UdpFlow;
use xsk_tx::{
    BindMode, MmapRegion, SocketConfig, UdpIoUring, UdpSendmmsg, Umem, XdpDesc, XskDevice,
    XskSocket,
};

/// UDP payload bytes per datagram.
const PAYLOAD: usize = 64;
/// Datagrams per batch handed to the kernel.
const BATCH: usize = 64;
/// Datagrams per criterion iteration.
const PER_ITER: u64 = 4096;
const PORT: u16 = 9300;

/// One way of sending datagrams from namespace A to the receiver in B.
trait TxVariant: Send {
    /// Name in reports.
    fn name(&self) -> &'static str;
    /// Sends `n` datagrams (blocking or spinning until the kernel took them all).
    fn send(&mut self, n: u64);
    /// Waits until everything sent has left the sender (completions reaped, ...).
    fn finish(&mut self) {}
}

/// The minimal AF_XDP loop.
struct AfXdp {
    name: &'static str,
    sock: XskSocket,
    free: Vec<u64>,
    frame_len: u32,
    descs: Vec<XdpDesc>,
}

impl AfXdp {
    fn new(name: &'static str, ifname: &str, queue: u32, budget: u32, flow: UdpFlow) -> AfXdp {
        let frames = 4096;
        let umem = Umem::new(MmapRegion::new(frames, 2048).expect("UMEM region"), 0).expect("UMEM");
        let cfg = SocketConfig::new()
            .tx_size(2048)
            .comp_size(2048)
            .mode(BindMode::Copy);
        let sock = XskSocket::bind(&umem, ifname, queue, &cfg).expect("bind AF_XDP socket");
        if budget != 32 {
            sock.set_tx_budget(budget).expect("XDP_MAX_TX_SKB_BUDGET");
        }
        let payload = [0x5au8; PAYLOAD];
        let mut frame_len = 0;
        let free: Vec<u64> = (0..frames).map(|i| umem.frame_addr(i)).collect();
        for &addr in &free {
            // SAFETY: no frame is in any ring yet.
            let buf = unsafe { umem.frame_mut(addr, 2048) }.expect("frame");
            frame_len = flow.write(buf, &payload).expect("frame fits") as u32;
        }
        AfXdp {
            name,
            sock,
            free,
            frame_len,
            descs: Vec::with_capacity(BATCH),
        }
    }
}

impl TxVariant for AfXdp {
    fn name(&self) -> &'static str {
        self.name
    }
    fn send(&mut self, n: u64) {
        let mut sent = 0u64;
        while sent < n {
            let free = &mut self.free;
            self.sock
                .reap_completions(256, |a| free.push(a))
                .expect("reap");
            let want = (BATCH as u64).min(n - sent).min(self.free.len() as u64) as usize;
            self.descs.clear();
            let at = self.free.len() - want;
            self.descs.extend(
                self.free
                    .drain(at..)
                    .map(|a| XdpDesc::new(a, self.frame_len)),
            );
            let queued = self.sock.transmit(&self.descs).expect("transmit");
            self.free
                .extend(self.descs[queued..].iter().map(|d| d.addr));
            sent += queued as u64;
        }
    }
    fn finish(&mut self) {
        while self.sock.in_flight() > 0 {
            let free = &mut self.free;
            self.sock
                .reap_completions(256, |a| free.push(a))
                .expect("reap");
        }
    }
}

thread_local! {
    /// The bench thread's pool handles, one per pipeline's pool (`PoolHandle` is `!Send`: made
    /// on first use).
    static HANDLES: RefCell<Vec<PoolHandle>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's handle on `pool`.
fn with_handle<R>(pool: &Pool, f: impl FnOnce(&mut PoolHandle) -> R) -> R {
    HANDLES.with(|hs| {
        let mut hs = hs.borrow_mut();
        let i = match hs.iter().position(|h| h.pool().ptr_eq(pool)) {
            Some(i) => i,
            None => {
                hs.push(pool.handle().expect("pool handle"));
                hs.len() - 1
            }
        };
        f(&mut hs[i])
    })
}

/// The full pipeline: pool + `TxQueue` + pfifo + AF_XDP.
struct Pipeline {
    dev: XskDevice<Pfifo<Skb>>,
    pool: Pool,
    template: Vec<u8>,
}

impl Pipeline {
    fn new(ifname: &str, queue: u32, flow: UdpFlow) -> Pipeline {
        let pool = Pool::builder().frame_count(4096).build().expect("pool");
        let cfg = SocketConfig::new()
            .tx_size(2048)
            .comp_size(2048)
            .mode(BindMode::Copy);
        // One queue of its own: the other AF_XDP variants hold queues 0 and 1.
        let dev = XskDevice::open_range(
            ifname,
            queue..queue + 1,
            &pool,
            |_| Pfifo::<Skb>::builder().limit(4096).build().expect("pfifo"),
            TxQueue::builder(),
            &cfg,
        )
        .expect("XskDevice");
        let mut template = vec![0u8; 2048];
        let len = flow.write(&mut template, &[0x5au8; PAYLOAD]).expect("fits");
        template.truncate(len);
        Pipeline {
            dev,
            pool,
            template,
        }
    }
}

impl Pipeline {
    /// A frame from `h` with the datagram copied in, polling the device (completions come
    /// home) while the pool is dry.
    fn frame(&self, h: &mut PoolHandle) -> Skb {
        let mut skb = loop {
            match h.alloc() {
                Ok(skb) => break skb,
                Err(_) => {
                    self.dev.poll();
                }
            }
        };
        skb.put_slice(&self.template).expect("frame fits");
        skb.set_flow_hash(0x9e37_79b9);
        skb
    }
}

impl TxVariant for Pipeline {
    fn name(&self) -> &'static str {
        "pipeline"
    }
    fn send(&mut self, n: u64) {
        with_handle(&self.pool, |h| {
            for _ in 0..n {
                let v = self.dev.xmit(self.frame(h));
                // Counted as sent by the caller: a drop would make the pipeline look faster.
                assert_eq!(v, Verdict::Success, "the pipeline dropped a frame");
            }
        });
    }
    fn finish(&mut self) {
        while self.dev.poll() {}
    }
}

/// The full pipeline fed in bursts: the same as [`Pipeline`], but frames go to
/// `XskDevice::xmit_bulk` `BATCH` at a time (one defer-list push or one driver call per
/// burst instead of per frame), as a dataplane that holds a burst would send them.
struct PipelineBulk {
    inner: Pipeline,
    burst: Vec<Skb>,
}

impl TxVariant for PipelineBulk {
    fn name(&self) -> &'static str {
        "pipeline_bulk"
    }
    fn send(&mut self, n: u64) {
        let p = &self.inner;
        with_handle(&p.pool, |h| {
            let mut sent = 0u64;
            while sent < n {
                let k = (BATCH as u64).min(n - sent);
                self.burst.extend((0..k).map(|_| p.frame(h)));
                let v = p.dev.xmit_bulk(self.burst.drain(..));
                // Counted as sent by the caller: a drop would make the pipeline look faster.
                assert_eq!(v.dropped, 0, "the pipeline dropped frames");
                sent += k;
            }
        });
    }
    fn finish(&mut self) {
        self.inner.finish();
    }
}

/// Sends `n` datagrams of the bench payload in batches of up to `BATCH` with `send_batch`,
/// which returns how many of a batch went out (the UDP peers' common loop).
fn send_payloads(n: u64, mut send_batch: impl FnMut(&[&[u8]]) -> usize) {
    let payload = [0x5au8; PAYLOAD];
    let batch = [&payload[..]; BATCH];
    let mut sent = 0u64;
    while sent < n {
        let k = (BATCH as u64).min(n - sent) as usize;
        sent += send_batch(&batch[..k]) as u64;
    }
}

/// Plain `sendmmsg`.
struct Sendmmsg(UdpSendmmsg);

impl TxVariant for Sendmmsg {
    fn name(&self) -> &'static str {
        "sendmmsg"
    }
    fn send(&mut self, n: u64) {
        send_payloads(n, |b| self.0.send_batch(b).expect("sendmmsg"));
    }
}

/// io_uring `IORING_OP_SEND`.
struct IoUringSend(UdpIoUring);

impl TxVariant for IoUringSend {
    fn name(&self) -> &'static str {
        "io_uring"
    }
    fn send(&mut self, n: u64) {
        send_payloads(n, |b| self.0.send_batch(b).expect("io_uring send"));
    }
}

/// Every variant, created inside namespace A.
fn variants(veth: &VethPair) -> Vec<Box<dyn TxVariant>> {
    let flow = UdpFlow {
        src_mac: veth.a.mac,
        dst_mac: veth.b.mac,
        src_ip: veth.a.ip,
        dst_ip: veth.b.ip,
        src_port: 40000,
        dst_port: PORT,
    };
    let ifname = veth.a.ifname.clone();
    let (from, to) = (
        SocketAddrV4::new(veth.a.ip, 0),
        SocketAddrV4::new(veth.b.ip, PORT),
    );
    veth.a
        .ns
        .run(move || -> Vec<Box<dyn TxVariant>> {
            vec![
                Box::new(AfXdp::new("af_xdp", &ifname, 0, 32, flow)),
                Box::new(AfXdp::new("af_xdp_b256", &ifname, 1, 256, flow)),
                Box::new(AfXdp::new("af_xdp_q3", &ifname, 3, 32, flow)),
                Box::new(Pipeline::new(&ifname, 2, flow)),
                Box::new(PipelineBulk {
                    inner: Pipeline::new(&ifname, 4, flow),
                    burst: Vec::with_capacity(BATCH),
                }),
                Box::new(Sendmmsg(
                    UdpSendmmsg::new(from, to).expect("sendmmsg socket"),
                )),
                Box::new(IoUringSend(
                    UdpIoUring::new(from, to, BATCH as u32).expect("io_uring"),
                )),
            ]
        })
        .expect("enter namespace A")
}

/// The kernel UDP socket in namespace B, drained by a thread that counts datagrams.
struct Receiver {
    count: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    fn start(veth: &VethPair) -> Receiver {
        let count = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let addr = SocketAddrV4::new(veth.b.ip, PORT);
        let (c, s) = (count.clone(), stop.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = veth.b.ns.spawn(move || {
            let sock = UdpSocket::bind(addr).expect("bind receiver");
            let bytes: i32 = 64 << 20;
            // SAFETY: setsockopt with a valid int option.
            unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUFFORCE,
                    (&bytes as *const i32).cast(),
                    4,
                )
            };
            sock.set_read_timeout(Some(Duration::from_millis(50)))
                .expect("timeout");
            ready_tx.send(()).expect("ready");
            let mut buf = [0u8; 2048];
            while !s.load(Ordering::Relaxed) {
                if sock.recv(&mut buf).is_ok() {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        ready_rx.recv().expect("receiver started");
        Receiver {
            count,
            stop,
            thread: Some(thread),
        }
    }

    /// Waits until the count stops moving; returns it.
    fn settle(&self) -> u64 {
        let mut last = self.count.load(Ordering::Relaxed);
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = self.count.load(Ordering::Relaxed);
            if now == last {
                return now;
            }
            last = now;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One second of one variant: (sent Mpps, share received in percent, process CPU ns/pkt).
fn one_second(v: &mut dyn TxVariant, receiver: &Receiver) -> (f64, f64, f64) {
    let before = receiver.settle();
    let cpu0 = process_cpu_time();
    let (sent, wall) = send_for(v, Duration::from_secs(1), PER_ITER);
    let cpu = process_cpu_time() - cpu0;
    let got = receiver.settle() - before;
    (
        sent as f64 / wall.as_secs_f64() / 1e6,
        100.0 * got as f64 / sent as f64,
        cpu.as_nanos() as f64 / sent as f64,
    )
}

/// Sends in chunks of `chunk` until `span` has passed, then flushes; returns the packets sent
/// and the time taken, flush included.
fn send_for(v: &mut dyn TxVariant, span: Duration, chunk: u64) -> (u64, Duration) {
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < span {
        v.send(chunk);
        sent += chunk;
    }
    v.finish();
    (sent, t0.elapsed())
}

fn main() {
    // A visible skip, or a failure under LOCKLESS_XMIT_REQUIRE_NETNS=1, as in the tests.
    let Some(veth) = netns::veth_or_skip("bench xsk", 5) else {
        return;
    };
    let receiver = Receiver::start(&veth);
    let mut variants = variants(&veth);
    // `XSK_BENCH_ONLY=af_xdp,pipeline`: just these variants (the first one listed is the base
    // of the ratios).
    if let Ok(only) = std::env::var("XSK_BENCH_ONLY") {
        let names: Vec<&str> = only.split(',').map(str::trim).collect();
        variants.retain(|v| names.contains(&v.name()));
        variants.sort_by_key(|v| names.iter().position(|n| *n == v.name()));
        if variants.is_empty() {
            println!("XSK_BENCH_ONLY={only}: no such variant");
            return;
        }
    }

    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    if std::env::var_os("XSK_BENCH_TABLE_ONLY").is_none() {
        let mut g = c.benchmark_group(format!("xsk_tx_udp_{PAYLOAD}B"));
        g.throughput(Throughput::Elements(PER_ITER));
        for v in variants.iter_mut() {
            g.bench_function(v.name(), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        v.send(PER_ITER);
                    }
                    v.finish();
                    start.elapsed()
                })
            });
        }
        g.finish();
    }
    c.final_summary();

    // The table: `XSK_BENCH_ROUNDS` rounds (default 5) of 1 s per variant, the variants'
    // order rotated each round, so that a noisy neighbour hits every variant alike; medians.
    let rounds: usize = std::env::var("XSK_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(1);
    let n = variants.len();
    // Per variant, per round: (Mpps, received share, CPU ns/pkt).
    let mut runs: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); n];
    for round in 0..rounds {
        for k in 0..n {
            let i = (round + k) % n;
            runs[i].push(one_second(&mut *variants[i], &receiver));
        }
    }
    println!(
        "\nveth copy mode, {PAYLOAD}-byte UDP payloads, {rounds} rounds of 1 s per variant \
         (order rotated), medians:"
    );
    println!(
        "{:<12} {:>10} {:>12} {:>14} {:>12}  Mpps per round",
        "variant", "sent Mpps", "min recv", "CPU ns/pkt", "vs af_xdp"
    );
    let base: Vec<f64> = runs[0].iter().map(|r| r.0).collect();
    let paired_slices: usize = std::env::var("XSK_BENCH_PAIRED_SLICES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    for (v, r) in variants.iter().zip(&runs) {
        let mpps: Vec<f64> = r.iter().map(|x| x.0).collect();
        // The ratio to the minimal loop, round by round (same seconds of machine noise).
        let ratio: Vec<f64> = mpps.iter().zip(&base).map(|(a, b)| a / b).collect();
        let per_round: Vec<String> = mpps.iter().map(|m| format!("{m:.3}")).collect();
        println!(
            "{:<12} {:>10.3} {:>11.1}% {:>14.0} {:>11.2}x  {}",
            v.name(),
            median(&mpps),
            r.iter().map(|x| x.1).fold(f64::INFINITY, f64::min),
            median(&r.iter().map(|x| x.2).collect::<Vec<_>>()),
            median(&ratio),
            per_round.join(" / "),
        );
    }
    // Paired: each variant against the minimal loop in alternating 100 ms slices, so machine
    // noise falls on both sides alike; the ratio of the packets each sent in its slices.
    println!(
        "\npaired with af_xdp, {paired_slices} alternating slices of 100 ms each \
         (ratio of send rates, final flush included):"
    );
    let (first, rest) = variants.split_at_mut(1);
    for v in rest.iter_mut() {
        // (packets, seconds including the final flush) for this variant and for af_xdp, in
        // total and per slice pair.
        let (mut mine, mut theirs) = ((0u64, 0f64), (0u64, 0f64));
        let mut pair_ratios = Vec::with_capacity(paired_slices);
        for slice in 0..paired_slices {
            // Alternate who goes first, so neither always follows the other's backlog.
            let order: [&mut dyn TxVariant; 2] = if slice % 2 == 0 {
                [&mut *first[0], &mut **v]
            } else {
                [&mut **v, &mut *first[0]]
            };
            let mut rates = [0f64; 2];
            for (k, var) in order.into_iter().enumerate() {
                let (sent, took) = send_for(var, Duration::from_millis(100), PER_ITER / 4);
                let is_mine = (k == 1) == (slice % 2 == 0);
                let side = if is_mine { &mut mine } else { &mut theirs };
                side.0 += sent;
                side.1 += took.as_secs_f64();
                rates[usize::from(is_mine)] = sent as f64 / took.as_secs_f64().max(1e-9);
            }
            pair_ratios.push(rates[1] / rates[0]);
        }
        let rate = |(n, t): (u64, f64)| n as f64 / t.max(1e-9);
        println!(
            "{:<12} {:>6.3}x  median of slice pairs {:.3}x  ({:.3} vs {:.3} Mpps)",
            v.name(),
            rate(mine) / rate(theirs),
            median(&pair_ratios),
            rate(mine) / 1e6,
            rate(theirs) / 1e6
        );
    }
    drop(variants);
    drop(receiver);
}

//! The whole transmit path on a real veth: frames from the pool, producers on several threads,
//! `TxQueue` + qdisc, AF_XDP through `XskDevice`, an ordinary kernel UDP socket in the peer
//! namespace checking every payload byte for byte, and the pool full again at the end. Producers
//! take frames through pool handles or, in one test, from the per-CPU caches (`Pool::alloc`,
//! no handle): the completions free both kinds where the reaping thread runs.

mod common;

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{big_rcvbuf, spawn_udp_receiver, write_payload};
use qdisc::{FifoBuilder, Fq, Overflow, Qdisc, TxQueue, TxQueueBuilder, Verdict};
use skb_pool::{Pool, PoolHandle, Skb};
use xsk_tx::netns::{self, VethPair};
use xsk_tx::packet::UdpFlow;
use xsk_tx::{XdpMode, XskDevice};

/// Datagrams sent but not yet received that producers allow: far below the peer's
/// `netdev_max_backlog` (1000), so the kernel never drops.
const WINDOW: u64 = 256;
const FRAMES: usize = 4096;
const DEADLINE: Duration = Duration::from_secs(120);

fn flow(veth: &VethPair, src_port: u16, dst_port: u16) -> UdpFlow {
    UdpFlow {
        src_mac: veth.a.mac,
        dst_mac: veth.b.mac,
        src_ip: veth.a.ip,
        dst_ip: veth.b.ip,
        src_port,
        dst_port,
    }
}

fn pool() -> Pool {
    Pool::builder().frame_count(FRAMES).build().unwrap()
}

fn engine() -> TxQueueBuilder {
    // Producers wait instead of dropping over the burst limit: this test loses nothing.
    TxQueue::builder().overflow(Overflow::Wait)
}

/// Where producers take their frames.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Frames {
    /// A `PoolHandle` per producer thread.
    Handles,
    /// The per-CPU caches (`Pool::alloc`).
    PerCpu,
}

/// Allocates a frame (through `h`, else from the per-CPU caches), polling the device
/// (completions go home) while the pool is dry.
fn alloc<Q: Qdisc<Skb>>(
    pool: &Pool,
    mut h: Option<&mut PoolHandle>,
    dev: &XskDevice<Q>,
    deadline: Instant,
) -> Skb {
    loop {
        let got = match h.as_deref_mut() {
            Some(h) => h.alloc(),
            None => pool.alloc(),
        };
        match got {
            Ok(skb) => return skb,
            Err(_) => {
                assert!(
                    Instant::now() < deadline,
                    "pool stays dry: {:?}",
                    dev.stats()
                );
                dev.poll();
                std::thread::yield_now();
            }
        }
    }
}

/// Pins the calling thread to the `n`-th CPU (modulo their number) of its affinity mask.
fn pin_to_nth_allowed_cpu(n: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; the size is the set's.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: reading a bit of an initialised set, below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    let cpu = allowed[n % allowed.len()];
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from the set, so it is below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: pid 0 is the calling thread; the size is the set's.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&one), &one) };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

/// Builds datagram `seq` of `flow` in a pool frame.
fn build(skb: &mut Skb, flow: &UdpFlow, seq: u64, hash: u32) {
    let mut payload = [0u8; 2048];
    let len = write_payload(seq, &mut payload);
    let frame = skb.put(UdpFlow::frame_len(len)).unwrap();
    flow.write(frame, &payload[..len]).unwrap();
    skb.set_flow_hash(hash);
}

/// Producers on `producers` threads send datagrams `0..n` through `dev`, flow `flow_of(seq)`,
/// paced on the receiver's progress; then everything is drained and the device closed. Returns
/// the close report. `batch` 1 sends with `xmit`; more sends runs of that many consecutive
/// datagrams with `xmit_bulk`.
#[allow(clippy::too_many_arguments)]
fn produce<Q: Qdisc<Skb>>(
    dev: XskDevice<Q>,
    pool: &Pool,
    frames: Frames,
    producers: u64,
    n: u64,
    batch: u64,
    flow_of: &(dyn Fn(u64) -> (UdpFlow, u32) + Sync),
    progress: &AtomicU64,
) -> xsk_tx::CloseReport {
    let next = AtomicU64::new(0);
    let deadline = Instant::now() + DEADLINE;
    std::thread::scope(|s| {
        for k in 0..producers {
            let (next, dev) = (&next, &dev);
            s.spawn(move || {
                if frames == Frames::PerCpu {
                    // Producers on different CPUs reap each other's completions: frames go
                    // home to another CPU (the remote free path), not only to their own.
                    pin_to_nth_allowed_cpu(k as usize);
                }
                let mut h = (frames == Frames::Handles).then(|| pool.handle().unwrap());
                let mut skbs = Vec::with_capacity(batch as usize);
                loop {
                    let first = next.fetch_add(batch, Ordering::Relaxed);
                    if first >= n {
                        break;
                    }
                    let end = (first + batch).min(n);
                    while end > progress.load(Ordering::Acquire) + WINDOW {
                        assert!(
                            Instant::now() < deadline,
                            "stuck at {first}: {:?}",
                            dev.stats()
                        );
                        dev.poll();
                        std::thread::yield_now();
                    }
                    for seq in first..end {
                        let mut skb = alloc(pool, h.as_mut(), dev, deadline);
                        let (f, hash) = flow_of(seq);
                        build(&mut skb, &f, seq, hash);
                        skbs.push(skb);
                    }
                    if batch == 1 {
                        assert_eq!(dev.xmit(skbs.pop().unwrap()), Verdict::Success);
                    } else {
                        let v = dev.xmit_bulk(skbs.drain(..));
                        assert_eq!((v.handed_on, v.dropped), ((end - first) as usize, 0));
                    }
                }
            });
        }
    });
    while dev.poll() {
        assert!(Instant::now() < deadline, "not drained: {:?}", dev.stats());
        std::thread::yield_now();
    }
    dev.close()
}

/// Opens `queues` queues of the veth's end A, each with a pfifo of `FRAMES`, inside namespace
/// A, and runs [`produce`] through them (2 producers); returns the close report.
#[allow(clippy::too_many_arguments)]
fn pfifo_producers(
    veth: &VethPair,
    queues: u32,
    pool: &Pool,
    frames: Frames,
    n: u64,
    batch: u64,
    flow_of: &(dyn Fn(u64) -> (UdpFlow, u32) + Sync),
    progress: &AtomicU64,
) -> xsk_tx::CloseReport {
    let ifname = veth.a.ifname.clone();
    veth.a
        .ns
        .run(|| {
            let limit = FifoBuilder::pfifo().limit(FRAMES as u64);
            let dev = XskDevice::open(
                &ifname,
                queues,
                pool,
                |_| limit.clone().build::<Skb>().unwrap(),
                engine(),
            )
            .unwrap();
            assert_eq!(dev.mode(), XdpMode::Copy, "veth has no zero-copy");
            produce(dev, pool, frames, 2, n, batch, flow_of, progress)
        })
        .unwrap()
}

fn assert_pool_full(pool: &Pool) {
    let st = pool.stats();
    assert_eq!(
        (st.free, st.in_use, st.in_flight),
        (FRAMES, 0, 0),
        "every frame is back in the pool: {st:?}"
    );
}

#[test]
fn pool_pfifo_af_xdp_100k_from_producers() {
    pfifo_100k(
        "pool_pfifo_af_xdp_100k_from_producers",
        Frames::Handles,
        9400,
    );
}

/// The same with per-CPU frames: UMEM addresses of frames no handle owns, completions that
/// send them home to the CPU that allocated them, from whichever thread reaps.
#[test]
fn per_cpu_frames_pfifo_af_xdp_100k_from_producers() {
    pfifo_100k(
        "per_cpu_frames_pfifo_af_xdp_100k_from_producers",
        Frames::PerCpu,
        9409,
    );
}

/// 100 000 datagrams from 2 producers over one queue with a pfifo: every one arrives, byte
/// for byte, and every frame is back in the pool.
fn pfifo_100k(name: &str, frames: Frames, port: u16) {
    const N: u64 = 100_000;
    let Some(veth) = netns::veth_or_skip(name, 1) else {
        return;
    };
    let progress = Arc::new(AtomicU64::new(0));
    let receiver = spawn_udp_receiver(
        &veth.b.ns,
        SocketAddrV4::new(veth.b.ip, port),
        N,
        progress.clone(),
    );
    let flows = [
        (flow(&veth, 40000, port), 0x1234_5678),
        (flow(&veth, 40001, port), 0x8765_4321),
    ];
    let pool = pool();
    let flow_of = |seq: u64| flows[(seq % flows.len() as u64) as usize];
    let report = pfifo_producers(&veth, 1, &pool, frames, N, 1, &flow_of, &progress);
    let got = receiver.join().unwrap();
    eprintln!("pfifo: {report:?}");
    assert_eq!(got.count, N, "lost {} datagrams", N - got.count);
    assert!(got.seen.iter().all(|&s| s));
    let st = &report.stats;
    assert_eq!(st.sent(), N);
    assert_eq!(st.dropped(), 0);
    assert_eq!(report.dropped_queued, 0);
    assert_eq!(st.queues[0].driver.bad_completions, 0);
    assert_eq!(st.queues[0].driver.refused, 0);
    assert_eq!(st.completed() + report.reclaimed as u64, N);
    assert_pool_full(&pool);
    let pcs = pool.per_cpu_stats();
    eprintln!("{frames:?}: {pcs:?}");
    // Per-CPU frames came from the CPUs' caches, which refilled from the depot; handle frames
    // never touch them.
    assert_eq!(pcs.refills > 0, frames == Frames::PerCpu, "{pcs:?}");
}

/// Two flows, both backlogged in FQ (enqueued while the device is paused, flow A's packets all
/// before flow B's), share the link: each gets half of the first packets out.
///
/// FQ is deficit round robin with a quantum of 2 × 1514 bytes and an initial quantum of
/// 10 × 1514 bytes: with equal 1042-byte frames, in any prefix of the departures one flow leads
/// the other by at most an initial quantum plus a quantum plus a packet, about 18 packets. Of
/// the first 1500 received that is 1.2 %; the test allows 3 %. A FIFO would give flow A 100 %.
#[test]
fn fq_shares_the_link_between_two_backlogged_flows() {
    const PER_FLOW: u64 = 1500;
    const PORT: u16 = 9401;
    const PAYLOAD: usize = 1000;
    let Some(veth) = netns::veth_or_skip("fq_shares_the_link_between_two_backlogged_flows", 1)
    else {
        return;
    };
    let total = 2 * PER_FLOW;
    let addr = SocketAddrV4::new(veth.b.ip, PORT);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = veth.b.ns.spawn(move || {
        let sock = UdpSocket::bind(addr).unwrap();
        big_rcvbuf(&sock, 64 << 20);
        sock.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        ready_tx.send(()).unwrap();
        let mut order = Vec::new();
        let mut buf = [0u8; 2048];
        while (order.len() as u64) < total {
            match sock.recv_from(&mut buf) {
                Ok((len, from)) => {
                    let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
                    assert_eq!(&buf[..len], &fixed_payload(seq)[..], "datagram {seq}");
                    order.push(from.port());
                }
                Err(_) => break,
            }
        }
        order
    });
    ready_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let (fa, fb) = (flow(&veth, 41000, PORT), flow(&veth, 41001, PORT));
    let pool = pool();
    let ifname = veth.a.ifname.clone();
    let report = veth
        .a
        .ns
        .run(|| {
            let dev = XskDevice::open(
                &ifname,
                1,
                &pool,
                |_| {
                    Fq::<Skb>::builder()
                        .limit(10_000)
                        .flow_limit(10_000)
                        .build::<Skb>()
                        .unwrap()
                },
                engine(),
            )
            .unwrap();
            dev.pause();
            let deadline = Instant::now() + DEADLINE;
            let mut h = pool.handle().unwrap();
            for (i, (f, hash)) in [(fa, 0x1111_1111u32), (fb, 0x2222_2222)].iter().enumerate() {
                for k in 0..PER_FLOW {
                    let seq = i as u64 * PER_FLOW + k;
                    let mut skb = alloc(&pool, Some(&mut h), &dev, deadline);
                    // Fixed-size payloads, so FQ's byte credits map to packet counts.
                    let frame = skb.put(UdpFlow::frame_len(PAYLOAD)).unwrap();
                    f.write(frame, &fixed_payload(seq)).unwrap();
                    skb.set_flow_hash(*hash);
                    assert_eq!(dev.xmit(skb), Verdict::Success);
                }
            }
            assert_eq!(dev.stats().sent(), 0, "paused: everything waits in FQ");
            assert_eq!(dev.queues()[0].backlog() as u64, total);
            dev.resume();
            while dev.poll() {
                assert!(Instant::now() < deadline, "not drained: {:?}", dev.stats());
                std::thread::yield_now();
            }
            drop(h);
            dev.close()
        })
        .unwrap();
    let order = receiver.join().unwrap();
    assert_eq!(order.len() as u64, total, "lost datagrams: {report:?}");
    let first = &order[..PER_FLOW as usize];
    let a = first.iter().filter(|&&p| p == 41000).count() as f64 / first.len() as f64;
    eprintln!("fq: flow A got {:.1}% of the first {PER_FLOW}", a * 100.0);
    assert!((a - 0.5).abs() <= 0.03, "flow A got {:.1}%", a * 100.0);
    assert_eq!(report.stats.dropped(), 0);
    assert_pool_full(&pool);
}

/// Payload of datagram `seq` in the FQ test: 1000 bytes, the sequence number first.
fn fixed_payload(seq: u64) -> Vec<u8> {
    let mut v: Vec<u8> = (0..1000u32)
        .map(|i| (seq as u8).wrapping_mul(13).wrapping_add(i as u8))
        .collect();
    v[..8].copy_from_slice(&seq.to_le_bytes());
    v
}

#[test]
fn device_spreads_flows_over_queues_by_hash() {
    const N: u64 = 40_000;
    const Q: u32 = 4;
    const PORT: u16 = 9402;
    let Some(veth) = netns::veth_or_skip("device_spreads_flows_over_queues_by_hash", Q) else {
        return;
    };
    let progress = Arc::new(AtomicU64::new(0));
    let receiver = spawn_udp_receiver(
        &veth.b.ns,
        SocketAddrV4::new(veth.b.ip, PORT),
        N,
        progress.clone(),
    );
    let flows: Vec<(UdpFlow, u32)> = (0..8u16)
        .map(|i| {
            let hash = u32::from(i)
                .wrapping_mul(0x9E37_79B9)
                .wrapping_add(0x7f4a_7c15);
            (flow(&veth, 42000 + i, PORT), hash)
        })
        .collect();
    let pool = pool();
    let flow_of = |seq: u64| flows[(seq % flows.len() as u64) as usize];
    let report = pfifo_producers(&veth, Q, &pool, Frames::Handles, N, 1, &flow_of, &progress);
    let got = receiver.join().unwrap();
    assert_eq!(got.count, N, "lost {} datagrams", N - got.count);
    // The queue each packet should have taken: reciprocal_scale(hash, Q).
    let mut want = [0u64; Q as usize];
    for seq in 0..N {
        let hash = flows[(seq % flows.len() as u64) as usize].1;
        want[((u64::from(hash) * u64::from(Q)) >> 32) as usize] += 1;
    }
    let sent: Vec<u64> = report.stats.queues.iter().map(|q| q.driver.sent).collect();
    eprintln!("multiqueue: per queue {sent:?}, expected {want:?}");
    assert_eq!(sent, want);
    assert!(
        sent.iter().filter(|&&s| s > 0).count() >= 3,
        "traffic is spread: {sent:?}"
    );
    assert_eq!(report.stats.dropped(), 0);
    assert_pool_full(&pool);
}

/// `xmit_bulk` from two producers over two queues: runs of 8 datagrams per flow inside batches
/// of 32, so each batch is split across both queues; every datagram arrives, each queue sent
/// exactly its flow's share, and the pool is full again.
#[test]
fn bulk_from_producers_over_two_queues() {
    const N: u64 = 50_000;
    const PORT: u16 = 9403;
    let Some(veth) = netns::veth_or_skip("bulk_from_producers_over_two_queues", 2) else {
        return;
    };
    let progress = Arc::new(AtomicU64::new(0));
    let receiver = spawn_udp_receiver(
        &veth.b.ns,
        SocketAddrV4::new(veth.b.ip, PORT),
        N,
        progress.clone(),
    );
    // reciprocal_scale onto 2 queues: the first hash picks queue 0, the second queue 1.
    let flows = [
        (flow(&veth, 40010, PORT), 0x1234_5678),
        (flow(&veth, 40011, PORT), 0x8765_4321),
    ];
    let flow_of = |seq: u64| flows[((seq / 8) % 2) as usize];
    let pool = pool();
    let report = pfifo_producers(&veth, 2, &pool, Frames::Handles, N, 32, &flow_of, &progress);
    let got = receiver.join().unwrap();
    assert_eq!(got.count, N, "lost {} datagrams", N - got.count);
    assert!(got.seen.iter().all(|&s| s));
    let st = &report.stats;
    let sent: Vec<u64> = st.queues.iter().map(|q| q.driver.sent).collect();
    assert_eq!(sent, [N / 2, N / 2], "each flow on its own queue");
    assert_eq!(st.dropped(), 0);
    assert_eq!(report.dropped_queued, 0);
    assert_pool_full(&pool);
}

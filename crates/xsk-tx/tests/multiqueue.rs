//! One AF_XDP socket per queue of a 4-queue veth, all sharing one UMEM (`XDP_SHARED_UMEM`):
//! traffic from many kernel UDP sockets in namespace B spreads over the queues by flow hash and
//! arrives on the matching sockets, and each socket transmits its share to a kernel receiver.
//! Nothing is lost either way. A socket sharing the UMEM takes its owner's need_wakeup setting.

mod common;

use std::collections::HashSet;
use std::net::{SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{FreeFrames, Refill, check_payload, spawn_udp_receiver, write_payload};
use xsk_tx::packet::{UdpFlow, parse_udp};
use xsk_tx::{AttachMode, MmapRegion, SocketConfig, Umem, XdpDesc, XdpRedirect, XskSocket, netns};

const QUEUES: u32 = 4;
const FRAMES_PER_QUEUE: u32 = 1024;
const N: u64 = 40_000;
const WINDOW: u64 = 256;
const RX_PORT: u16 = 9200;
const TX_PORT: u16 = 9201;
const FLOWS: u64 = 16;

#[test]
fn one_socket_per_queue_with_shared_umem() {
    let Some(veth) = netns::veth_or_skip("one_socket_per_queue_with_shared_umem", QUEUES) else {
        return;
    };
    let (a_ip, b_ip) = (veth.a.ip, veth.b.ip);
    let rx_progress = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(AtomicBool::new(false));
    // B: FLOWS kernel sockets, one source port each, round-robin over the sequence numbers.
    let sender = {
        let (progress, ready) = (rx_progress.clone(), ready.clone());
        veth.b.ns.spawn(move || {
            // Bounded: a receiving side that panics before it is ready never sets `ready`.
            let deadline = Instant::now() + Duration::from_secs(60);
            while !ready.load(Ordering::Acquire) {
                assert!(Instant::now() < deadline, "AF_XDP receiver never ready");
                std::thread::sleep(Duration::from_millis(1));
            }
            let socks: Vec<UdpSocket> = (0..FLOWS)
                .map(|_| {
                    let s = UdpSocket::bind(SocketAddrV4::new(b_ip, 0)).unwrap();
                    common::no_udp_checksum(&s);
                    s.connect(SocketAddrV4::new(a_ip, RX_PORT)).unwrap();
                    s
                })
                .collect();
            let mut buf = vec![0u8; 2048];
            for seq in 0..N {
                while seq - progress.load(Ordering::Acquire) >= WINDOW {
                    assert!(Instant::now() < deadline, "AF_XDP receiver stuck at {seq}");
                    std::thread::yield_now();
                }
                let len = write_payload(seq, &mut buf);
                socks[(seq % FLOWS) as usize].send(&buf[..len]).unwrap();
            }
        })
    };
    let tx_progress = Arc::new(AtomicU64::new(0));
    let receiver = spawn_udp_receiver(
        &veth.b.ns,
        SocketAddrV4::new(b_ip, TX_PORT),
        N,
        tx_progress.clone(),
    );
    let flow = UdpFlow {
        src_mac: veth.a.mac,
        dst_mac: veth.b.mac,
        src_ip: a_ip,
        dst_ip: b_ip,
        src_port: 0,
        dst_port: TX_PORT,
    };
    let ifname = veth.a.ifname.clone();
    let (per_queue_rx, per_queue_tx, frames_ok) = veth
        .a
        .ns
        .run(move || {
            // Frames [0, Q*F) are for RX fill rings, [Q*F, 2*Q*F) for TX.
            let umem = Umem::new(
                MmapRegion::new(2 * QUEUES * FRAMES_PER_QUEUE, 2048).unwrap(),
                0,
            )
            .unwrap();
            let cfg = SocketConfig::new()
                .tx_size(1024)
                .comp_size(1024)
                .rx_size(1024)
                .fill_size(1024);
            let mut socks = XskSocket::bind_queues(&umem, &ifname, 0..QUEUES, &cfg).unwrap();
            assert_eq!(xsk_tx::queue_count(&ifname).unwrap(), QUEUES);
            assert!(!socks[0].is_shared());
            assert!(socks[1..].iter().all(|s| s.is_shared()));
            let prog = XdpRedirect::attach(&ifname, AttachMode::Native, QUEUES).unwrap();
            let mut in_kernel = HashSet::new();
            for (q, s) in socks.iter_mut().enumerate() {
                prog.register(s).unwrap();
                let base = q as u32 * FRAMES_PER_QUEUE;
                let addrs: Vec<u64> = (base..base + FRAMES_PER_QUEUE)
                    .map(|i| umem.frame_addr(i))
                    .collect();
                assert_eq!(s.fill(&addrs).unwrap(), addrs.len());
                in_kernel.extend(addrs);
            }

            // RX: every datagram arrives once, on some queue.
            ready.store(true, Ordering::Release);
            let mut seen = vec![false; N as usize];
            let mut count = 0u64;
            let mut per_queue_rx = vec![0u64; QUEUES as usize];
            let mut back = Vec::new();
            let mut refills: Vec<Refill> = socks.iter().map(|_| Refill::default()).collect();
            let deadline = Instant::now() + Duration::from_secs(60);
            while count < N {
                assert!(Instant::now() < deadline, "RX stuck at {count}");
                for (q, s) in socks.iter_mut().enumerate() {
                    refills[q].offer(s);
                    back.clear();
                    s.receive(64, |d| back.push(d)).unwrap();
                    for d in &back {
                        let frame = umem.frame_start(d.addr);
                        assert!(in_kernel.remove(&frame), "frame {frame:#x} returned twice");
                        // SAFETY: the kernel handed the frame back; it is in no ring.
                        let bytes = unsafe { umem.frame(d.addr, d.len) }.unwrap();
                        if let Some(p) = parse_udp(bytes).filter(|p| p.flow.dst_port == RX_PORT) {
                            let seq = check_payload(p.payload);
                            assert!(!seen[seq as usize], "datagram {seq} twice");
                            seen[seq as usize] = true;
                            count += 1;
                            per_queue_rx[q] += 1;
                        }
                        in_kernel.insert(frame);
                        refills[q].give(s, frame);
                    }
                }
                rx_progress.store(count, Ordering::Release);
            }
            for (s, refill) in socks.iter_mut().zip(&mut refills) {
                refill.finish(s, deadline);
            }

            // TX: each socket sends the sequence numbers congruent to its queue, from its own
            // source port; frames come from the TX half of the shared UMEM.
            let tx_base = QUEUES * FRAMES_PER_QUEUE;
            let mut free = FreeFrames::new(
                (tx_base..tx_base + QUEUES * FRAMES_PER_QUEUE).map(|i| umem.frame_addr(i)),
            );
            let mut next: Vec<u64> = (0..QUEUES as u64).collect();
            let mut per_queue_tx = vec![0u64; QUEUES as usize];
            let mut sent = 0u64;
            let mut payload = vec![0u8; 2048];
            let deadline = Instant::now() + Duration::from_secs(120);
            while sent < N {
                assert!(Instant::now() < deadline, "TX stuck at {sent}");
                for (q, s) in socks.iter_mut().enumerate() {
                    s.reap_completions(256, |a| free.addrs.push(a)).unwrap();
                    let room = WINDOW.saturating_sub(sent - tx_progress.load(Ordering::Acquire));
                    let mut descs = Vec::new();
                    while (descs.len() as u64) < room.min(16) && next[q] < N {
                        let Some(addr) = free.addrs.pop() else { break };
                        let len = write_payload(next[q], &mut payload);
                        let f = UdpFlow {
                            src_port: 41000 + q as u16,
                            ..flow
                        };
                        // SAFETY: `addr` came off our free list: it is in no ring.
                        let buf = unsafe { umem.frame_mut(addr, 2048) }.unwrap();
                        let n = f.write(buf, &payload[..len]).unwrap();
                        descs.push(XdpDesc::new(addr, n as u32));
                        next[q] += u64::from(QUEUES);
                    }
                    let queued = s.transmit(&descs).unwrap();
                    for d in &descs[queued..] {
                        free.addrs.push(d.addr);
                        next[q] -= u64::from(QUEUES);
                    }
                    sent += queued as u64;
                    per_queue_tx[q] += queued as u64;
                }
            }
            for s in socks.iter_mut() {
                while s.in_flight() > 0 {
                    assert!(Instant::now() < deadline, "completions missing on {s:?}");
                    s.reap_completions(256, |a| free.addrs.push(a)).unwrap();
                }
            }
            drop(prog);
            (
                per_queue_rx,
                per_queue_tx,
                free.all_home() && in_kernel.len() == (QUEUES * FRAMES_PER_QUEUE) as usize,
            )
        })
        .unwrap();
    sender.join().unwrap();
    let got = receiver.join().unwrap();
    eprintln!("RX per queue {per_queue_rx:?}, TX per queue {per_queue_tx:?}");
    assert_eq!(per_queue_rx.iter().sum::<u64>(), N);
    assert!(
        per_queue_rx.iter().filter(|&&n| n > 0).count() >= 2,
        "flows should spread over several queues: {per_queue_rx:?}"
    );
    assert_eq!(got.count, N, "TX lost {} datagrams", N - got.count);
    assert!(per_queue_tx.iter().all(|&n| n == N / u64::from(QUEUES)));
    assert!(
        frames_ok,
        "every frame is back: TX half on the free list, RX half in fill rings"
    );
}

/// A socket sharing a UMEM takes the need_wakeup setting the UMEM's own socket was bound with,
/// as the kernel does (`xp_assign_dev_shared`): asking for it on a shared socket whose owner went
/// without it must not leave transmits waiting for a wakeup request the kernel never makes.
#[test]
fn a_shared_socket_takes_the_umem_owners_need_wakeup() {
    let Some(veth) = netns::veth_or_skip("a_shared_socket_takes_the_umem_owners_need_wakeup", 2)
    else {
        return;
    };
    let ifname = veth.a.ifname.clone();
    veth.a
        .ns
        .run(move || {
            let umem = Umem::new(MmapRegion::new(64, 2048).unwrap(), 0).unwrap();
            let cfg = SocketConfig::new().tx_size(64).comp_size(64).fill_size(64);
            let owner =
                XskSocket::bind(&umem, &ifname, 0, &cfg.clone().need_wakeup(false)).unwrap();
            assert!(!owner.uses_need_wakeup());
            let mut shared =
                XskSocket::bind(&umem, &ifname, 1, &cfg.clone().need_wakeup(true)).unwrap();
            assert!(shared.is_shared());
            assert!(!shared.uses_need_wakeup(), "the owner's setting applies");
            // One frame out through the shared socket comes back as a completion.
            assert_eq!(shared.transmit(&[XdpDesc::new(0, 60)]).unwrap(), 1);
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut done = Vec::new();
            while done.is_empty() {
                assert!(
                    Instant::now() < deadline,
                    "the transmit was never completed"
                );
                shared.reap_completions(8, |a| done.push(a)).unwrap();
                std::thread::yield_now();
            }
            assert_eq!(done, [0]);
            drop(owner);
        })
        .unwrap();
}

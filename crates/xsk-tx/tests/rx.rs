//! AF_XDP receive on a real veth: datagrams sent from namespace B with an ordinary UDP socket
//! arrive intact on the AF_XDP RX ring in namespace A, through the XSKMAP redirect program.

mod common;

use std::collections::HashSet;
use std::net::{SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Refill, check_payload, write_payload};
use xsk_tx::packet::parse_udp;
use xsk_tx::{AttachMode, MmapRegion, SocketConfig, Umem, XdpRedirect, XskSocket, netns};

const N: u64 = 20_000;
const WINDOW: u64 = 256;
const PORT: u16 = 9100;

fn receive_on(mode: AttachMode, test: &str) {
    let Some(veth) = netns::veth_or_skip(test, 1) else {
        return;
    };
    let progress = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(AtomicBool::new(false));
    let (a_ip, b_ip) = (veth.a.ip, veth.b.ip);
    let sender = {
        let (progress, ready) = (progress.clone(), ready.clone());
        veth.b.ns.spawn(move || {
            // Bounded: a receiving side that panics before it is ready never sets `ready`.
            let deadline = Instant::now() + Duration::from_secs(60);
            while !ready.load(Ordering::Acquire) {
                assert!(Instant::now() < deadline, "receiver never ready");
                std::thread::sleep(Duration::from_millis(1));
            }
            let sock = UdpSocket::bind(SocketAddrV4::new(b_ip, 0)).unwrap();
            // veth offloads the UDP checksum (CHECKSUM_PARTIAL), so an XDP program would see
            // only the pseudo-header sum; sending without a checksum keeps frames verifiable.
            common::no_udp_checksum(&sock);
            sock.connect(SocketAddrV4::new(a_ip, PORT)).unwrap();
            let mut buf = vec![0u8; 2048];
            for seq in 0..N {
                while seq - progress.load(Ordering::Acquire) >= WINDOW {
                    assert!(Instant::now() < deadline, "receiver stuck at {seq}");
                    std::thread::yield_now();
                }
                let len = write_payload(seq, &mut buf);
                sock.send(&buf[..len]).unwrap();
            }
        })
    };
    let ifname = veth.a.ifname.clone();
    let dbg_a = veth.a.ns.name().to_owned();
    let dbg_b = veth.b.ns.name().to_owned();
    let (received, held, stats) = veth
        .a
        .ns
        .run(move || {
            let umem = Umem::new(MmapRegion::new(4096, 2048).unwrap(), 0).unwrap();
            let cfg = SocketConfig::new().tx_size(0).rx_size(2048).fill_size(4096);
            let mut sock = XskSocket::bind(&umem, &ifname, 0, &cfg).unwrap();
            let prog = XdpRedirect::attach(&ifname, mode, 1).unwrap();
            prog.register(&sock).unwrap();
            let all: Vec<u64> = (0..umem.frame_count())
                .map(|i| umem.frame_addr(i))
                .collect();
            assert_eq!(sock.fill(&all).unwrap(), all.len());
            let mut in_kernel: HashSet<u64> = all.iter().copied().collect();
            ready.store(true, Ordering::Release);
            let mut seen = vec![false; N as usize];
            let mut count = 0u64;
            let mut back = Vec::new();
            let mut refill = Refill::default();
            let deadline = Instant::now() + Duration::from_secs(60);
            while count < N {
                if Instant::now() > deadline {
                    // Diagnostics only: a failure here must not hide the one below.
                    for ns in [&dbg_a, &dbg_b] {
                        if let Ok(links) = netns::ip_output(&["-n", ns, "-s", "-d", "link"]) {
                            eprintln!("{links}");
                        }
                    }
                    panic!("only {count} received; {:?}", sock.statistics());
                }
                refill.offer(&mut sock);
                sock.poll_rx(100).unwrap();
                back.clear();
                sock.receive(64, |d| back.push(d)).unwrap();
                for d in &back {
                    let frame_addr = umem.frame_start(d.addr);
                    assert!(
                        in_kernel.remove(&frame_addr),
                        "frame {frame_addr:#x} returned twice"
                    );
                    // SAFETY: the kernel handed this frame back; it is in no ring until refilled.
                    let bytes = unsafe { umem.frame(d.addr, d.len) }.unwrap();
                    // Anything else (stray IPv6/ARP) is tolerated, but must come back too.
                    if let Some(p) = parse_udp(bytes).filter(|p| p.flow.dst_port == PORT) {
                        let seq = check_payload(p.payload);
                        assert!(!seen[seq as usize], "datagram {seq} twice");
                        seen[seq as usize] = true;
                        count += 1;
                    }
                    in_kernel.insert(frame_addr);
                    refill.give(&mut sock, frame_addr);
                }
                progress.store(count, Ordering::Release);
            }
            refill.finish(&mut sock, deadline);
            (count, in_kernel.len(), sock.statistics().unwrap())
        })
        .unwrap();
    sender.join().unwrap();
    eprintln!("{mode:?}: received {received}, stats {stats:?}");
    assert_eq!(received, N);
    assert_eq!(held, 4096, "every frame is back in the fill ring");
    assert_eq!(stats.rx_dropped, 0);
    assert_eq!(stats.rx_ring_full, 0);
}

#[test]
fn receives_udp_through_native_xdp_redirect() {
    receive_on(
        AttachMode::Native,
        "receives_udp_through_native_xdp_redirect",
    );
}

#[test]
fn receives_udp_through_generic_xdp_redirect() {
    receive_on(
        AttachMode::Generic,
        "receives_udp_through_generic_xdp_redirect",
    );
}

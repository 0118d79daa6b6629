//! AF_XDP transmit on a real veth: 100 000 UDP/IPv4 frames from namespace A, received by an
//! ordinary kernel UDP socket in namespace B, payloads compared byte for byte.

mod common;

use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{FreeFrames, spawn_udp_receiver, write_payload};
use xsk_tx::packet::UdpFlow;
use xsk_tx::{BindMode, MmapRegion, SocketConfig, Umem, XdpDesc, XdpMode, XskSocket, netns};

const N: u64 = 100_000;
/// Datagrams sent but not yet received that the sender allows: far below the peer's
/// `netdev_max_backlog` (1000), so the kernel never drops.
const WINDOW: u64 = 256;
const PORT: u16 = 9000;

#[test]
fn transmits_100k_frames_to_a_kernel_udp_socket() {
    let Some(veth) = netns::veth_or_skip("transmits_100k_frames_to_a_kernel_udp_socket", 1) else {
        return;
    };
    let progress = Arc::new(AtomicU64::new(0));
    let receiver = spawn_udp_receiver(
        &veth.b.ns,
        SocketAddrV4::new(veth.b.ip, PORT),
        N,
        progress.clone(),
    );
    let flow = UdpFlow {
        src_mac: veth.a.mac,
        dst_mac: veth.b.mac,
        src_ip: veth.a.ip,
        dst_ip: veth.b.ip,
        src_port: 40000,
        dst_port: PORT,
    };
    let ifname = veth.a.ifname.clone();
    let (mode, free_ok, stats, kicks) = veth
        .a
        .ns
        .run(move || {
            let umem = Umem::new(MmapRegion::new(4096, 2048).unwrap(), 0).unwrap();
            let cfg = SocketConfig::new()
                .tx_size(2048)
                .comp_size(2048)
                .mode(BindMode::Auto);
            let mut sock = XskSocket::bind(&umem, &ifname, 0, &cfg).unwrap();
            // Copy mode asks for a kick on every check (DESIGN.md).
            assert!(sock.tx_needs_wakeup());
            let budget = std::env::var("XSK_TX_BUDGET")
                .ok()
                .and_then(|b| b.parse().ok());
            if let Some(b) = budget {
                sock.set_tx_budget(b).unwrap();
            }
            let mut free = FreeFrames::new((0..umem.frame_count()).map(|i| umem.frame_addr(i)));
            let mut payload = vec![0u8; 2048];
            let mut descs = Vec::with_capacity(64);
            let mut sent = 0u64;
            let deadline = Instant::now() + Duration::from_secs(120);
            while sent < N {
                assert!(
                    Instant::now() < deadline,
                    "stuck at {sent} sent, {:?}",
                    sock
                );
                sock.reap_completions(256, |a| free.addrs.push(a)).unwrap();
                let room = WINDOW.saturating_sub(sent - progress.load(Ordering::Acquire));
                let batch = room.min(64).min(N - sent).min(free.addrs.len() as u64);
                descs.clear();
                for k in 0..batch {
                    let addr = free.addrs.pop().unwrap();
                    let len = write_payload(sent + k, &mut payload);
                    // SAFETY: `addr` came off our free list: it is in no ring.
                    let frame = unsafe { umem.frame_mut(addr, 2048) }.unwrap();
                    let n = flow.write(frame, &payload[..len]).unwrap();
                    descs.push(XdpDesc::new(addr, n as u32));
                }
                let queued = sock.transmit(&descs).unwrap();
                for d in &descs[queued..] {
                    free.addrs.push(d.addr);
                }
                sent += queued as u64;
                if batch == 0 {
                    std::thread::yield_now();
                }
            }
            while sock.in_flight() > 0 {
                assert!(Instant::now() < deadline, "completions missing: {:?}", sock);
                sock.reap_completions(256, |a| free.addrs.push(a)).unwrap();
            }
            (
                sock.mode(),
                free.all_home(),
                sock.statistics().unwrap(),
                sock.kicks(),
            )
        })
        .unwrap();
    let got = receiver.join().unwrap();
    eprintln!("mode {mode:?}, kicks {kicks}, stats {stats:?}");
    assert_eq!(mode, XdpMode::Copy, "veth has no zero-copy");
    assert_eq!(got.count, N, "lost {} datagrams", N - got.count);
    assert!(got.seen.iter().all(|&s| s));
    assert!(free_ok, "every UMEM frame is back on the free list");
    assert_eq!(stats.tx_invalid_descs, 0);
}

//! AF_XDP receive into pool frames: datagrams sent from namespace B arrive as `Skb`s of the
//! pool (fill ring fed from a `PoolHandle`), are checked byte for byte and freed on a worker
//! thread (the pool's remote-free path), and every frame is back in the pool at the end.

mod common;

use std::net::{SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{check_payload, write_payload};
use skb_pool::{Pool, Skb};
use xsk_tx::packet::parse_udp;
use xsk_tx::{AttachMode, SocketConfig, XdpRedirect, XskRx, netns};

const N: u64 = 20_000;
const WINDOW: u64 = 256;
const PORT: u16 = 9500;
const FRAMES: usize = 4096;

#[test]
fn receives_into_pool_frames_freed_by_a_worker() {
    let Some(veth) = netns::veth_or_skip("receives_into_pool_frames_freed_by_a_worker", 1) else {
        return;
    };
    let progress = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(AtomicBool::new(false));
    let (a_ip, b_ip) = (veth.a.ip, veth.b.ip);
    let sender = {
        let (progress, ready) = (progress.clone(), ready.clone());
        veth.b.ns.spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !ready.load(Ordering::Acquire) {
                assert!(Instant::now() < deadline, "receiver never ready");
                std::thread::yield_now();
            }
            let sock = UdpSocket::bind(SocketAddrV4::new(b_ip, 0)).unwrap();
            common::no_udp_checksum(&sock);
            sock.connect(SocketAddrV4::new(a_ip, PORT)).unwrap();
            let mut buf = vec![0u8; 2048];
            for seq in 0..N {
                while seq >= progress.load(Ordering::Acquire) + WINDOW {
                    assert!(Instant::now() < deadline, "receiver stuck at {seq}");
                    std::thread::yield_now();
                }
                let len = write_payload(seq, &mut buf);
                sock.send(&buf[..len]).unwrap();
            }
        })
    };
    let pool = Pool::builder().frame_count(FRAMES).build().unwrap();
    let ifname = veth.a.ifname.clone();
    let (stats, reclaimed) = veth
        .a
        .ns
        .run(|| {
            let cfg = SocketConfig::new().tx_size(0).rx_size(2048).fill_size(2048);
            let mut rx = XskRx::open(&pool, &ifname, 0, &cfg).unwrap();
            let prog = XdpRedirect::attach(&ifname, AttachMode::Native, 1).unwrap();
            prog.register(rx.socket().unwrap()).unwrap();
            // A handle of another pool is refused: its frames' addresses would name this
            // pool's frames to the kernel.
            let other = Pool::builder().frame_count(64).build().unwrap();
            let e = rx.fill(&mut other.handle().unwrap(), 8).unwrap_err();
            assert!(matches!(e, xsk_tx::Error::WrongPool { .. }), "{e}");
            assert_eq!(other.stats().free, 64);
            assert_eq!(rx.stats().in_kernel, 0);
            let mut h = pool.handle().unwrap();
            assert_eq!(rx.fill(&mut h, 2048).unwrap(), 2048);
            let (to_worker, from_rx) = mpsc::channel::<Skb>();
            std::thread::scope(|s| {
                let worker = s.spawn(|| {
                    let mut seen = vec![false; N as usize];
                    let mut count = 0u64;
                    for skb in from_rx {
                        // Stray frames (none expected with neighbours fixed) are freed too.
                        if let Some(p) = parse_udp(skb.data()).filter(|p| p.flow.dst_port == PORT) {
                            let seq = check_payload(p.payload);
                            assert!(!seen[seq as usize], "datagram {seq} twice");
                            seen[seq as usize] = true;
                            count += 1;
                            progress.store(count, Ordering::Release);
                        }
                        drop(skb); // the remote free: this thread has no handle
                    }
                    count
                });
                ready.store(true, Ordering::Release);
                let deadline = Instant::now() + Duration::from_secs(60);
                while progress.load(Ordering::Acquire) < N {
                    assert!(Instant::now() < deadline, "stuck: {:?}", rx.stats());
                    rx.poll(100).unwrap();
                    rx.receive(64, |skb| to_worker.send(skb).unwrap()).unwrap();
                    // Frames the worker freed come back through this owner's defer list.
                    h.flush_remote();
                    let want = 2048usize.saturating_sub(rx.stats().in_kernel as usize);
                    rx.fill(&mut h, want).unwrap();
                }
                drop(to_worker);
                assert_eq!(worker.join().unwrap(), N);
            });
            drop(prog);
            let stats = rx.stats();
            let reclaimed = rx.close();
            drop(h);
            (stats, reclaimed)
        })
        .unwrap();
    sender.join().unwrap();
    eprintln!("rx: {stats:?}, reclaimed {reclaimed}");
    assert_eq!(stats.bad_descs, 0);
    assert!(stats.received >= N);
    assert_eq!(
        reclaimed as u64, stats.in_kernel,
        "fill-ring frames come back on close"
    );
    let st = pool.stats();
    assert_eq!((st.free, st.in_use, st.in_flight), (FRAMES, 0, 0), "{st:?}");
}

/// Closing a receiver whose UMEM is still open elsewhere (a clone taken through its socket)
/// leaves the frames the kernel held out of the pool: it may still write them.
#[test]
fn frames_stay_out_while_a_clone_keeps_the_umem_open() {
    let Some(veth) = netns::veth_or_skip("frames_stay_out_while_a_clone_keeps_the_umem_open", 2)
    else {
        return;
    };
    let pool = Pool::builder().frame_count(256).build().unwrap();
    let ifname = veth.a.ifname.clone();
    veth.a
        .ns
        .run(|| {
            let cfg = SocketConfig::new().tx_size(0).rx_size(64).fill_size(64);
            let mut rx = XskRx::open(&pool, &ifname, 0, &cfg).unwrap();
            let mut h = pool.handle().unwrap();
            assert_eq!(rx.fill(&mut h, 64).unwrap(), 64);
            drop(h);
            let umem = rx.socket().unwrap().umem().clone();
            assert_eq!(rx.close(), 0, "nothing taken back while the UMEM is open");
            assert_eq!(pool.stats().free, 256 - 64);
            drop(umem);
            // Without the clone, close takes everything back (on queue 1: the kernel lets go
            // of queue 0's binding in deferred work).
            let mut rx = XskRx::open(&pool, &ifname, 1, &cfg).unwrap();
            let mut h = pool.handle().unwrap();
            assert_eq!(rx.fill(&mut h, 64).unwrap(), 64);
            drop(h);
            assert_eq!(rx.close(), 64);
            assert_eq!(pool.stats().free, 256 - 64);
        })
        .unwrap();
}

//! The UDP fallback senders on a real veth: every datagram sent with `UdpSendmmsg` and
//! `UdpIoUring` from namespace A reaches a kernel UDP socket in namespace B, byte for byte.

mod common;

use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{spawn_udp_receiver, write_payload};
use xsk_tx::{UdpIoUring, UdpSendmmsg, netns};

const N: u64 = 20_000;
const WINDOW: u64 = 512;

/// Sends `0..N` in batches of up to 64 through `send`, paced by the receiver's progress.
fn send_all(progress: &AtomicU64, mut send: impl FnMut(&[&[u8]]) -> usize) {
    let bufs: Vec<Vec<u8>> = (0..N)
        .map(|seq| {
            let mut b = vec![0u8; 2048];
            let n = write_payload(seq, &mut b);
            b.truncate(n);
            b
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sent = 0u64;
    while sent < N {
        assert!(Instant::now() < deadline, "stuck at {sent}");
        let room = WINDOW.saturating_sub(sent - progress.load(Ordering::Acquire));
        let k = room.min(64).min(N - sent) as usize;
        if k == 0 {
            std::thread::yield_now();
            continue;
        }
        let batch: Vec<&[u8]> = bufs[sent as usize..sent as usize + k]
            .iter()
            .map(|b| &b[..])
            .collect();
        sent += send(&batch) as u64;
    }
}

fn run(test: &str, port: u16, io_uring: bool) {
    let Some(veth) = netns::veth_or_skip(test, 1) else {
        return;
    };
    let progress = Arc::new(AtomicU64::new(0));
    let dest = SocketAddrV4::new(veth.b.ip, port);
    let receiver = spawn_udp_receiver(&veth.b.ns, dest, N, progress.clone());
    let from = SocketAddrV4::new(veth.a.ip, 0);
    veth.a
        .ns
        .run(move || {
            if io_uring {
                let mut s = UdpIoUring::new(from, dest, 64).unwrap();
                send_all(&progress, |b| s.send_batch(b).unwrap());
            } else {
                let mut s = UdpSendmmsg::new(from, dest).unwrap();
                send_all(&progress, |b| s.send_batch(b).unwrap());
            }
        })
        .unwrap();
    let got = receiver.join().unwrap();
    assert_eq!(got.count, N, "lost {} datagrams", N - got.count);
}

#[test]
fn sendmmsg_delivers_every_datagram() {
    run("sendmmsg_delivers_every_datagram", 9400, false);
}

#[test]
fn io_uring_delivers_every_datagram() {
    run("io_uring_delivers_every_datagram", 9401, true);
}

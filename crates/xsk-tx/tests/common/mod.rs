//! Shared pieces of the real-kernel tests: payloads with sequence numbers, a paced kernel UDP
//! receiver in the peer namespace, and a frame free list.
#![allow(dead_code, unreachable_pub)]

use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use xsk_tx::netns::NetNs;

/// Length of datagram `seq`'s payload: 16..=1015 bytes, varying.
pub fn payload_len(seq: u64) -> usize {
    16 + (seq.wrapping_mul(7919) % 1000) as usize
}

/// Writes datagram `seq`'s payload into `buf` (which must hold `payload_len(seq)` bytes);
/// returns its length. The sequence number leads, a seq-dependent pattern follows.
pub fn write_payload(seq: u64, buf: &mut [u8]) -> usize {
    let len = payload_len(seq);
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in buf[8..len].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    len
}

/// Checks a received payload byte for byte; returns its sequence number.
pub fn check_payload(p: &[u8]) -> u64 {
    assert!(p.len() >= 16, "short payload of {} bytes", p.len());
    let seq = u64::from_le_bytes(p[..8].try_into().unwrap());
    let mut want = vec![0u8; payload_len(seq)];
    write_payload(seq, &mut want);
    assert_eq!(p, &want[..], "payload of datagram {seq} differs");
    seq
}

/// Raises the socket's receive buffer past `rmem_max` (`SO_RCVBUFFORCE`, root only).
pub fn big_rcvbuf(sock: &UdpSocket, bytes: i32) {
    // SAFETY: setsockopt with a valid int option.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const i32).cast(),
            std::mem::size_of::<i32>() as u32,
        )
    };
    assert_eq!(r, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
}

/// Sends without a UDP checksum (`SO_NO_CHECK`): the field is 0 on the wire.
///
/// Over veth the stack leaves the checksum to "hardware" (`CHECKSUM_PARTIAL`), so a frame seen
/// by XDP carries only the pseudo-header sum; with no checksum it parses cleanly.
pub fn no_udp_checksum(sock: &UdpSocket) {
    let one: i32 = 1;
    // SAFETY: setsockopt with a valid int option.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            (&one as *const i32).cast(),
            std::mem::size_of::<i32>() as u32,
        )
    };
    assert_eq!(r, 0, "SO_NO_CHECK: {}", std::io::Error::last_os_error());
}

/// What a receiver saw.
#[derive(Debug)]
pub struct Received {
    pub count: u64,
    pub seen: Vec<bool>,
}

/// Starts a kernel UDP receiver on `addr` inside `ns` expecting datagrams `0..n`; counts them
/// in `progress` as they arrive (the sender paces on it). Returns once it is bound.
pub fn spawn_udp_receiver(
    ns: &NetNs,
    addr: SocketAddrV4,
    n: u64,
    progress: Arc<AtomicU64>,
) -> std::thread::JoinHandle<Received> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let h = ns.spawn(move || {
        let sock = UdpSocket::bind(addr).expect("bind receiver");
        big_rcvbuf(&sock, 64 << 20);
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        ready_tx.send(()).unwrap();
        let mut seen = vec![false; n as usize];
        let mut count = 0u64;
        let mut buf = vec![0u8; 65536];
        let mut last = Instant::now();
        while count < n {
            match sock.recv(&mut buf) {
                Ok(len) => {
                    let seq = check_payload(&buf[..len]);
                    assert!(seq < n, "unexpected sequence {seq}");
                    assert!(!seen[seq as usize], "datagram {seq} arrived twice");
                    seen[seq as usize] = true;
                    count += 1;
                    progress.store(count, Ordering::Release);
                    last = Instant::now();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if last.elapsed() > Duration::from_secs(30) {
                        break;
                    }
                }
                Err(e) => panic!("recv: {e}"),
            }
        }
        Received { count, seen }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("receiver did not start");
    h
}

/// Frame addresses owned by user space.
#[derive(Debug)]
pub struct FreeFrames {
    pub addrs: Vec<u64>,
    pub total: usize,
}

impl FreeFrames {
    pub fn new(addrs: impl IntoIterator<Item = u64>) -> Self {
        let addrs: Vec<u64> = addrs.into_iter().collect();
        let total = addrs.len();
        FreeFrames { addrs, total }
    }
    pub fn all_home(&self) -> bool {
        let mut a = self.addrs.clone();
        a.sort_unstable();
        a.dedup();
        a.len() == self.total && self.addrs.len() == self.total
    }
}

/// Received frames waiting to go back on one socket's fill ring.
///
/// A fill may take fewer addresses than offered even when the frames in flight could never
/// overflow the ring: the kernel publishes the RX producer index before it releases the fill
/// ring's consumer index (`xsk_flush`: `xskq_prod_submit(rx)`, then `__xskq_cons_release(fq)`),
/// so right after a frame shows up on RX the fill ring can still look full. What did not fit
/// stays here and is offered again on the next call.
#[derive(Debug, Default)]
pub struct Refill {
    pending: Vec<u64>,
}

impl Refill {
    /// Queues `addr` and offers everything pending to `sock`'s fill ring.
    pub fn give(&mut self, sock: &mut xsk_tx::XskSocket, addr: u64) {
        self.pending.push(addr);
        self.offer(sock);
    }

    /// Offers everything pending; returns how many are still waiting.
    pub fn offer(&mut self, sock: &mut xsk_tx::XskSocket) -> usize {
        if !self.pending.is_empty() {
            let n = sock.fill(&self.pending).unwrap();
            self.pending.drain(..n);
        }
        self.pending.len()
    }

    /// Offers until nothing is pending; panics past `deadline` (the kernel releases the fill
    /// ring's consumer index within its current flush, so this ends at once on a sane kernel).
    pub fn finish(&mut self, sock: &mut xsk_tx::XskSocket, deadline: std::time::Instant) {
        while self.offer(sock) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{} frames never fit back on the fill ring",
                self.pending.len()
            );
            std::thread::yield_now();
        }
    }
}

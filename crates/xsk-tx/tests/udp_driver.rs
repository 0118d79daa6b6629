//! The UDP fallback drivers under the same pipeline: pool frames holding whole Ethernet/IPv4/UDP
//! frames go through `TxQueue` + pfifo to `UdpSendmmsg` / `UdpIoUring`, which send the payload
//! after the headers; a kernel UDP socket in the peer namespace receives them.

mod common;

use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{spawn_udp_receiver, write_payload};
use qdisc::{Driver, FifoBuilder, Overflow, TxQueue, Verdict};
use skb_pool::{Pool, Skb};
use xsk_tx::netns::{self, UdpCounter};
use xsk_tx::packet::UdpFlow;
use xsk_tx::{UdpIoUring, UdpSendmmsg};

const N: u64 = 20_000;
const WINDOW: u64 = 256;

fn run<D: Driver<Skb>>(driver: D, flow: UdpFlow, progress: &AtomicU64, pool: &Pool) -> u64 {
    let txq = TxQueue::builder()
        .overflow(Overflow::Wait)
        .build(
            FifoBuilder::pfifo().limit(1024).build::<Skb>().unwrap(),
            driver,
        )
        .unwrap();
    let mut h = pool.handle().unwrap();
    let mut payload = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(60);
    for seq in 0..N {
        while seq >= progress.load(Ordering::Acquire) + WINDOW {
            assert!(Instant::now() < deadline, "stuck at {seq}");
            std::thread::yield_now();
        }
        let mut skb = h.alloc().unwrap();
        let len = write_payload(seq, &mut payload);
        let frame = skb.put(UdpFlow::frame_len(len)).unwrap();
        flow.write(frame, &payload[..len]).unwrap();
        assert_eq!(txq.xmit(skb), Verdict::Success);
    }
    // One malformed frame: refused with DriverError, freed, counted.
    let mut bad = h.alloc().unwrap();
    bad.put_slice(&[0u8; 20]).unwrap();
    txq.xmit(bad);
    while txq.poll() {}
    let st = txq.stats();
    assert_eq!(st.drops_for(qdisc::DropReason::DriverError), 1);
    st.sent
}

#[test]
fn sendmmsg_and_io_uring_drivers_send_the_udp_payload() {
    let Some(veth) = netns::veth_or_skip("sendmmsg_and_io_uring_drivers_send_the_udp_payload", 1)
    else {
        return;
    };
    let pool = Pool::builder().frame_count(2048).build().unwrap();
    for (i, port) in [(0, 9600u16), (1, 9601)] {
        let progress = Arc::new(AtomicU64::new(0));
        let dest = SocketAddrV4::new(veth.b.ip, port);
        let receiver = spawn_udp_receiver(&veth.b.ns, dest, N, progress.clone());
        let flow = UdpFlow {
            src_mac: veth.a.mac,
            dst_mac: veth.b.mac,
            src_ip: veth.a.ip,
            dst_ip: veth.b.ip,
            src_port: 40000,
            dst_port: port,
        };
        let from = SocketAddrV4::new(veth.a.ip, 0);
        let sent = veth
            .a
            .ns
            .run(|| {
                if i == 0 {
                    run(
                        UdpSendmmsg::new(from, dest).unwrap(),
                        flow,
                        &progress,
                        &pool,
                    )
                } else {
                    run(
                        UdpIoUring::new(from, dest, 64).unwrap(),
                        flow,
                        &progress,
                        &pool,
                    )
                }
            })
            .unwrap();
        let got = receiver.join().unwrap();
        assert_eq!(sent, N);
        assert_eq!(got.count, N, "driver {i}: lost {}", N - got.count);
    }
    assert_eq!(pool.stats().free, 2048);
}

#[test]
fn udp_counter_counts_datagrams_in_the_peer_namespace() {
    let Some(veth) = netns::veth_or_skip("udp_counter_counts_datagrams_in_the_peer_namespace", 1)
    else {
        return;
    };
    let dest = SocketAddrV4::new(veth.b.ip, 9602);
    let counter = UdpCounter::start(&veth.b.ns, dest).unwrap();
    let from = SocketAddrV4::new(veth.a.ip, 0);
    veth.a
        .ns
        .run(|| {
            let mut s = UdpSendmmsg::new(from, dest).unwrap();
            let p = [7u8; 32];
            assert_eq!(s.send_batch(&[&p[..]; 50]).unwrap(), 50);
        })
        .unwrap();
    assert_eq!(counter.wait_for(50, Duration::from_secs(30)), 50);
    assert_eq!(counter.stop(), 50);
}

/// `struct __user_cap_header_struct` of `linux/capability.h`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`; version 3 passes two (capabilities 0-31, then 32-63).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// `CAP_NET_ADMIN`, which `SO_RCVBUFFORCE` needs.
const CAP_NET_ADMIN: u32 = 12;

/// Clears `cap` from the calling thread's effective set. The raw syscalls act on one thread
/// (glibc's wrappers would not broadcast them either), and threads it spawns inherit the set.
fn drop_effective_capability(cap: u32) -> std::io::Result<()> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: `header` and the two `data` entries that version 3 writes are valid, writable
    // `#[repr(C)]` values for the duration of the call.
    let got = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if got != 0 {
        return Err(std::io::Error::last_os_error());
    }
    data[(cap / 32) as usize].effective &= !(1 << (cap % 32));
    // SAFETY: as above; capset only reads them.
    let set = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    if set != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Started from a thread without `CAP_NET_ADMIN`, the counter cannot force its receive buffer
/// and says so instead of counting with the default one.
#[test]
fn udp_counter_reports_a_receive_buffer_it_cannot_force() {
    let Some(veth) = netns::veth_or_skip("udp_counter_reports_a_receive_buffer_it_cannot_force", 1)
    else {
        return;
    };
    let dest = SocketAddrV4::new(veth.b.ip, 9603);
    let started = std::thread::scope(|s| {
        s.spawn(|| {
            drop_effective_capability(CAP_NET_ADMIN).expect("capset");
            UdpCounter::start(&veth.b.ns, dest).map(UdpCounter::stop)
        })
        .join()
        .unwrap()
    });
    let err = started.expect_err("SO_RCVBUFFORCE without CAP_NET_ADMIN must fail");
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    assert!(err.to_string().contains("SO_RCVBUFFORCE"), "{err}");
}

//! Faults: the link goes down (`ip link set DEV down`) or disappears (the peer namespace is
//! deleted, which destroys the veth pair) while producers send through an `XskDevice`.
//!
//! Each test checks that the device reports a typed [`xsk_tx::Error::LinkDown`], that the queue
//! deactivates and counts what it drops, that every packet offered is accounted for (sent or
//! dropped by reason), that every frame is back in the pool once the device is closed, and that
//! a new device (new socket) on the same pool delivers every packet once the link is back.

mod common;

use std::net::SocketAddrV4;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::write_payload;
use qdisc::{DropReason, FifoBuilder, Pfifo, TxQueue, Verdict};
use skb_pool::{Pool, PoolHandle, Skb};
use xsk_tx::netns::{self, UdpCounter, VethEnd, VethPair};
use xsk_tx::packet::UdpFlow;
use xsk_tx::{CloseReport, Error, XskDevice};

const FRAMES: usize = 4096;
/// Datagrams sent but not yet received that producers allow while the link is up: far below
/// the peer's `netdev_max_backlog` (1000), so the kernel drops nothing.
const WINDOW: u64 = 256;
const DEADLINE: Duration = Duration::from_secs(60);
const PORT: u16 = 9600;

type Dev = XskDevice<Pfifo<Skb>>;

fn flow(a: &VethEnd, b: &VethEnd, src_port: u16) -> UdpFlow {
    UdpFlow {
        src_mac: a.mac,
        dst_mac: b.mac,
        src_ip: a.ip,
        dst_ip: b.ip,
        src_port,
        dst_port: PORT,
    }
}

/// Opens a one-queue device on `ifname`. The kernel releases a closed socket's hold on its
/// queue in deferred work (`xp_release_deferred`), so binding the same queue right after a
/// close may see `EBUSY` for a moment: retried for up to 30 s.
fn open(ifname: &str, pool: &Pool) -> Dev {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match XskDevice::open(
            ifname,
            1,
            pool,
            |_| FifoBuilder::pfifo().limit(FRAMES as u64).build().unwrap(),
            TxQueue::builder(),
        ) {
            Ok(dev) => return dev,
            Err(Error::Busy { .. }) if Instant::now() < deadline => std::thread::yield_now(),
            Err(e) => panic!("cannot open {ifname}: {e}"),
        }
    }
}

/// Allocates a frame, polling the device while the pool is dry; `None` once `stop` is set.
fn alloc(h: &mut PoolHandle, dev: &Dev, stop: &AtomicBool, deadline: Instant) -> Option<Skb> {
    loop {
        if let Ok(skb) = h.alloc() {
            return Some(skb);
        }
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        assert!(
            Instant::now() < deadline,
            "pool stays dry: {:?}",
            dev.stats()
        );
        dev.poll();
        std::thread::yield_now();
    }
}

fn build(skb: &mut Skb, flow: &UdpFlow, seq: u64) {
    let mut payload = [0u8; 2048];
    let len = write_payload(seq, &mut payload);
    let frame = skb.put(UdpFlow::frame_len(len)).unwrap();
    flow.write(frame, &payload[..len]).unwrap();
    skb.set_flow_hash(0x1234_5678);
}

/// What producers saw from `xmit`.
#[derive(Debug, Default)]
struct Offered {
    offered: AtomicU64,
    accepted: AtomicU64,
    deactivated: AtomicU64,
    /// Shed at the defer list's burst limit: unpaced producers can outrun a runner whose kicks
    /// fail, more so on a slow or busy machine; load shedding, not a fault of the link path.
    burst: AtomicU64,
    other_drops: AtomicU64,
    /// Set when the fault starts: producers stop pacing on the receiver.
    unpaced: AtomicBool,
}

/// Datagrams the receiver has counted so far.
type Received<'a> = &'a (dyn Fn() -> u64 + Sync);

/// Two producers send through `dev` until `fault` returns: paced on `received` until `fault`
/// sets `offered.unpaced`, freely after. `fault` runs on this thread. Returns what was offered.
fn traffic(
    dev: &Dev,
    pool: &Pool,
    flow: &UdpFlow,
    received: Received<'_>,
    fault: impl FnOnce(&Offered),
) -> Offered {
    let offered = Offered::default();
    let stop = AtomicBool::new(false);
    let next = AtomicU64::new(0);
    let deadline = Instant::now() + DEADLINE;
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut h = pool.handle().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let seq = next.fetch_add(1, Ordering::Relaxed);
                    // Paced on the receiver while the link is up; once the fault starts nothing
                    // arrives, and producers keep the TX ring busy so that kicks see the fault.
                    while !offered.unpaced.load(Ordering::Relaxed) && seq >= received() + WINDOW {
                        assert!(Instant::now() < deadline, "stuck: {:?}", dev.stats());
                        dev.poll();
                        std::thread::yield_now();
                    }
                    let Some(mut skb) = alloc(&mut h, dev, &stop, deadline) else {
                        break;
                    };
                    build(&mut skb, flow, seq);
                    offered.offered.fetch_add(1, Ordering::Relaxed);
                    match dev.xmit(skb) {
                        Verdict::Success => &offered.accepted,
                        Verdict::Dropped(DropReason::Deactivated) => &offered.deactivated,
                        Verdict::Dropped(DropReason::QdiscBurst) => &offered.burst,
                        _ => &offered.other_drops,
                    }
                    .fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        fault(&offered);
        stop.store(true, Ordering::Relaxed);
    });
    offered
}

/// Polls until the device reports a failed link; returns the error.
fn wait_link_error(dev: &Dev) -> Error {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match dev.try_poll() {
            Err(e) => return e,
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "no link error reported: {:?}",
                    dev.stats()
                );
                std::thread::yield_now();
            }
        }
    }
}

/// Waits until `received()` reaches `n` (30 s at most).
fn wait_received(received: Received<'_>, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while received() < n {
        assert!(Instant::now() < deadline, "received {} of {n}", received());
        std::thread::yield_now();
    }
}

/// The fault sequence shared by both tests, on the AF_XDP side: traffic, `fault` once the
/// receiver counted 2000 datagrams, the typed error (polled until `want(&err)`), deactivation
/// drops, conservation, close.
fn fault_phase(
    ifname: &str,
    pool: &Pool,
    flow: &UdpFlow,
    received: Received<'_>,
    fault: impl FnOnce(),
    want: impl Fn(&Error) -> bool,
) -> (Error, CloseReport) {
    let dev = open(ifname, pool);
    let mut err = None;
    let offered = traffic(&dev, pool, flow, received, |offered| {
        wait_received(received, 2000);
        offered.unpaced.store(true, Ordering::Relaxed);
        fault();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut e = wait_link_error(&dev);
        while !want(&e) {
            assert!(Instant::now() < deadline, "not the error expected: {e:?}");
            std::thread::yield_now();
            e = wait_link_error(&dev);
        }
        err = Some(e);
        // The queue is deactivated: later packets are dropped, counted, as they arrive.
        let deadline = Instant::now() + Duration::from_secs(30);
        let seen = offered.deactivated.load(Ordering::Relaxed);
        while offered.deactivated.load(Ordering::Relaxed) < seen + 1000 {
            assert!(Instant::now() < deadline, "no Deactivated drops");
            dev.poll();
            std::thread::yield_now();
        }
    });
    let err = err.unwrap();
    let before = dev.stats();
    let q = &before.queues[0];
    eprintln!("before close: {offered:?} {q:?}");
    assert!(q.xmit.drops_for(DropReason::Deactivated) >= 1000, "{q:?}");
    assert!(q.driver.kick_errors > 0, "{q:?}");
    let report = dev.close();
    eprintln!("close: {report:?}");
    let q = &report.stats.queues[0];
    let o = |c: &AtomicU64| c.load(Ordering::Relaxed);
    // Conservation: every packet offered was sent to the driver or dropped with a reason.
    assert_eq!(o(&offered.offered), q.xmit.sent + q.xmit.dropped(), "{q:?}");
    assert_eq!(
        o(&offered.offered),
        o(&offered.accepted)
            + o(&offered.deactivated)
            + o(&offered.burst)
            + o(&offered.other_drops)
    );
    assert_eq!(
        o(&offered.other_drops),
        0,
        "only Deactivated and burst-limit drops: {q:?}"
    );
    assert!(q.xmit.drops_for(DropReason::Deactivated) >= o(&offered.deactivated));
    assert_eq!(q.xmit.drops_for(DropReason::QdiscBurst), o(&offered.burst));
    assert_eq!(
        q.xmit.dropped(),
        q.xmit.drops_for(DropReason::Deactivated) + q.xmit.drops_for(DropReason::QdiscBurst)
    );
    // Of what the driver took, every frame came back: completed by the kernel, or in its
    // rings until the socket closed and then reclaimed.
    assert_eq!(q.driver.refused, 0);
    assert_eq!(q.driver.bad_completions, 0);
    assert_eq!(q.driver.sent, q.xmit.sent);
    assert_eq!(q.driver.sent, q.driver.completed + report.reclaimed as u64);
    assert_eq!(q.driver.in_flight, 0);
    // Nothing arrives that was not sent. (Not `<= completed`: once kicks fail, completions
    // left on the completion ring are not reaped but reclaimed at close.)
    assert!(received() <= q.driver.sent);
    assert_pool_full(pool);
    (err, report)
}

/// Opens a new device (new socket) on `pool` and sends `n` datagrams, paced; `rx` must count
/// every one.
fn resume_phase(ifname: &str, pool: &Pool, flow: &UdpFlow, rx: &UdpCounter, n: u64) {
    let base = rx.count();
    let dev = open(ifname, pool);
    let deadline = Instant::now() + DEADLINE;
    let stop = AtomicBool::new(false);
    let mut h = pool.handle().unwrap();
    for seq in 0..n {
        while base + seq >= rx.count() + WINDOW {
            assert!(Instant::now() < deadline, "stuck: {:?}", dev.stats());
            dev.poll();
            std::thread::yield_now();
        }
        let mut skb = alloc(&mut h, &dev, &stop, deadline).unwrap();
        build(&mut skb, flow, seq);
        assert_eq!(dev.xmit(skb), Verdict::Success);
    }
    while dev.try_poll().expect("the link is back") {
        assert!(Instant::now() < deadline, "not drained: {:?}", dev.stats());
        std::thread::yield_now();
    }
    let got = rx.wait_for(base + n, Duration::from_secs(30)) - base;
    drop(h);
    let report = dev.close();
    assert_eq!(
        got,
        n,
        "lost {} after the link came back: {report:?}",
        n - got
    );
    assert_eq!(report.stats.sent(), n);
    assert_eq!(report.stats.dropped(), 0);
    assert_pool_full(pool);
}

fn assert_pool_full(pool: &Pool) {
    let st = pool.stats();
    assert_eq!(
        (st.free, st.in_use, st.in_flight),
        (FRAMES, 0, 0),
        "every frame is back in the pool: {st:?}"
    );
}

fn pool() -> Pool {
    Pool::builder().frame_count(FRAMES).build().unwrap()
}

#[test]
fn link_set_down_mid_traffic_then_up_with_a_new_socket() {
    let Some(veth) = netns::veth_or_skip("link_set_down_mid_traffic_then_up_with_a_new_socket", 1)
    else {
        return;
    };
    let rx = UdpCounter::start(&veth.b.ns, SocketAddrV4::new(veth.b.ip, PORT)).unwrap();
    let f = flow(&veth.a, &veth.b, 40000);
    let pool = pool();
    let ifname = veth.a.ifname.clone();
    veth.a
        .ns
        .run(|| {
            let down = || veth.a.ns.ip(&["link", "set", &ifname, "down"]).unwrap();
            let (err, _) = fault_phase(&ifname, &pool, &f, &|| rx.count(), down, |_| true);
            let msg = err.to_string();
            eprintln!("error: {msg}");
            match &err {
                Error::LinkDown {
                    ifname: name,
                    queue: 0,
                    gone: false,
                    ..
                } => assert_eq!(name, &ifname),
                e => panic!("expected LinkDown (down), got {e:?}"),
            }
            assert_eq!(err.raw_os_error(), Some(libc::ENETDOWN));
            assert!(
                msg.contains(&format!("ip link set {ifname} up")) && msg.contains("open a new one"),
                "{msg}"
            );

            veth.a.ns.ip(&["link", "set", &ifname, "up"]).unwrap();
            resume_phase(&ifname, &pool, &f, &rx, 5000);
        })
        .unwrap();
}

#[test]
fn peer_namespace_deleted_mid_traffic_then_new_pair_with_a_new_socket() {
    let name = "peer_namespace_deleted_mid_traffic_then_new_pair_with_a_new_socket";
    let Some(veth) = netns::veth_or_skip(name, 1) else {
        return;
    };
    let VethPair { a, b, .. } = veth;
    let rx = UdpCounter::start(&b.ns, SocketAddrV4::new(b.ip, PORT)).unwrap();
    let f = flow(&a, &b, 40001);
    let pool = pool();
    let ifname = a.ifname.clone();
    // The receiver's thread lives in the peer namespace and would keep it (and the veth)
    // alive: the fault stops it first, then deletes the namespace.
    let rx = Mutex::new(Some(rx));
    let last = AtomicU64::new(0);
    let received = || match rx.lock().unwrap().as_ref() {
        Some(r) => r.count(),
        None => last.load(Ordering::Relaxed),
    };
    let delete_peer = || {
        let r = rx.lock().unwrap().take().unwrap();
        last.store(r.stop(), Ordering::Relaxed);
        drop(b);
    };
    let (err, _) =
        a.ns.run(|| {
            // Unregistering closes the interface first, so a kick may see ENETDOWN before
            // ENXIO; poll until the socket reports the interface gone.
            let gone = |e: &Error| matches!(e, Error::LinkDown { gone: true, .. });
            fault_phase(&ifname, &pool, &f, &received, delete_peer, gone)
        })
        .unwrap();
    let msg = err.to_string();
    eprintln!("error: {msg}");
    assert!(
        matches!(&err, Error::LinkDown { ifname: n, queue: 0, gone: true, .. } if *n == ifname),
        "{err:?}"
    );
    assert!(
        matches!(err.raw_os_error(), Some(libc::ENXIO | libc::ENODEV)),
        "{err:?}"
    );
    assert!(
        msg.contains("disappeared") && msg.contains("open a new one"),
        "{msg}"
    );
    drop(a);

    // The link comes back as a new pair: a new device (new socket) on the same pool.
    let veth = VethPair::create(1).unwrap();
    let rx = UdpCounter::start(&veth.b.ns, SocketAddrV4::new(veth.b.ip, PORT)).unwrap();
    let f = flow(&veth.a, &veth.b, 40002);
    let ifname = veth.a.ifname.clone();
    veth.a
        .ns
        .run(|| resume_phase(&ifname, &pool, &f, &rx, 5000))
        .unwrap();
}

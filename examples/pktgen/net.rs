//! The runs that reach a real network: the UDP driver's frames, AF_XDP on an interface
//! (`--driver xsk:IFACE`) and through a private veth pair (`--veth`), with the kernel's drop
//! counters on the way.
//!
//! Owns: those runs' set-up and teardown. Must not: print the figures (`report.rs`).

use std::process::ExitCode;
use std::time::Duration;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use lockless_xmit::harness::{self, Cell, Contender, PacketWriter, Target, Tick, Workload};
use qdisc::{Qdisc, Strategy, TxQueue, Verdict};
use skb_pool::Skb;
use xsk_tx::XskDevice;
use xsk_tx::netns::{UdpCounter, VethPair};
use xsk_tx::packet::UdpFlow;

use crate::cli::{Cli, DriverSpec};
use crate::report::{announce, finish, progress_line};

/// Ethernet + IPv4 + UDP headers and the 16-byte (producer, sequence) payload head.
pub(crate) const MIN_UDP_FRAME: usize = 42 + 16;

/// A flow from an unspecified source to `dest` (the UDP driver sends only the payload).
pub(crate) fn flow_to(dest: SocketAddrV4) -> UdpFlow {
    UdpFlow {
        src_mac: [0x02, 0, 0, 0, 0, 1],
        dst_mac: [0xff; 6],
        src_ip: Ipv4Addr::new(0, 0, 0, 0),
        dst_ip: *dest.ip(),
        src_port: 9,
        dst_port: dest.port(),
    }
}

/// Writes well-formed Ethernet/IPv4/UDP frames whose payload starts with (producer, sequence);
/// each flow gets its own source port so receivers and FQ see distinct flows.
pub(crate) fn udp_writer(flow: UdpFlow) -> PacketWriter {
    Arc::new(
        move |skb: &mut Skb, producer: u64, seq: u64, flow_id: u32| {
            let mut payload = [0u8; 1792];
            let n = skb.len().saturating_sub(42).min(payload.len());
            payload[..8].copy_from_slice(&producer.to_be_bytes());
            payload[8..16].copy_from_slice(&seq.to_be_bytes());
            let f = UdpFlow {
                src_port: 10_000 + (flow_id % 50_000) as u16,
                ..flow
            };
            let _ = f.write(skb.data_mut(), &payload[..n]);
        },
    )
}

pub(crate) type XskDev = XskDevice<Box<dyn Qdisc<Skb>>>;

/// An AF_XDP device (one `TxQueue` per NIC queue) behind the harness's producers.
pub(crate) struct XskTarget(XskDev);

impl Target for XskTarget {
    fn xmit(&self, skb: Skb) -> bool {
        !matches!(self.0.xmit(skb), Verdict::Dropped(_))
    }
    fn xmit_burst(&self, skbs: &mut Vec<Skb>) -> usize {
        self.0.xmit_bulk(skbs.drain(..)).dropped
    }
    fn progress(&self) -> (u64, u64, u64) {
        let s = self.0.stats();
        let bytes = s.queues.iter().map(|q| q.driver.bytes).sum();
        (s.sent(), bytes, s.dropped())
    }
    fn poll(&self) {
        self.0.poll();
    }
}

/// Opens the device over the workload's pool (its UMEM), runs the producers through it and
/// closes it (every frame back in the pool). Errors come back as their one-line message.
pub(crate) fn run_xsk(
    w: &Workload,
    open: impl FnOnce(&skb_pool::Pool) -> xsk_tx::Result<XskDev>,
    json: bool,
) -> Result<Cell, String> {
    let pool = harness::build_pool(w).map_err(|e| e.to_string())?;
    let dev = Arc::new(XskTarget(open(&pool).map_err(|e| e.to_string())?));
    if !json {
        outln!(
            "AF_XDP: {} queue(s) on {}, {:?} mode",
            dev.0.queue_count(),
            dev.0.ifname(),
            dev.0.mode()
        );
    }
    let mut last = Tick::default();
    let d = dev.clone();
    let mut cell = harness::drive(
        w,
        &pool,
        dev.clone(),
        &mut |t: &Tick| {
            if !json {
                progress_line(&last, t);
            }
            last = *t;
        },
        &|| while d.0.poll() {},
    );
    drop(d);
    let stats = dev.0.stats();
    cell.sent = stats.sent();
    cell.dropped = stats.dropped();
    cell.xmit = stats.queues.first().map(|q| q.xmit.clone());
    let dev = Arc::try_unwrap(dev).map_err(|_| "the device is still shared".to_string())?;
    cell.queued = dev.0.close().dropped_queued as u64;
    cell.pool = Some(pool.stats());
    Ok(cell)
}

pub(crate) fn engine_builder(w: &Workload) -> qdisc::TxQueueBuilder {
    let strategy = match w.contender {
        Contender::Engine(s) => s,
        _ => Strategy::DeferList,
    };
    TxQueue::builder()
        .strategy(strategy)
        .burst_limit(w.burst_limit)
        .overflow(w.overflow)
}

pub(crate) fn xsk(cli: &Cli, base: &Workload, ifname: &str, queues: u32) -> ExitCode {
    let src_mac = std::fs::read_to_string(format!("/sys/class/net/{ifname}/address"))
        .ok()
        .and_then(|m| parse_mac(m.trim()))
        .unwrap_or([0x02, 0, 0, 0, 0, 1]);
    let flow = UdpFlow {
        src_mac,
        ..flow_to(SocketAddrV4::new(Ipv4Addr::BROADCAST, 9))
    };
    let w = Workload {
        writer: Some(udp_writer(flow)),
        ..base.clone()
    };
    let (qdisc, builder) = (w.qdisc, engine_builder(&w));
    announce(cli, &w);
    let open =
        |pool: &skb_pool::Pool| XskDevice::open(ifname, queues, pool, |_| qdisc.build(), builder);
    match run_xsk(&w, open, cli.json) {
        Ok(cell) => finish(cli, &w, &cell, None),
        Err(e) => {
            eprintln!("pktgen: xsk:{ifname}: {e} (or use --driver null)");
            ExitCode::from(1)
        }
    }
}

pub(crate) fn veth(cli: &Cli, base: &Workload) -> ExitCode {
    let queues = match &cli.driver {
        DriverSpec::Xsk { queues, .. } => *queues,
        _ => 1,
    };
    let pair = match VethPair::create(queues) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "pktgen: --veth: cannot create the namespaces and veth pair: {e} (run as root \
                 with iproute2 installed, or use --driver null)"
            );
            return ExitCode::from(1);
        }
    };
    let dest = SocketAddrV4::new(pair.b.ip, 9000);
    let counter = match UdpCounter::start(&pair.b.ns, dest) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pktgen: --veth: cannot open the receiving UDP socket: {e}");
            return ExitCode::from(1);
        }
    };
    let flow = UdpFlow {
        src_mac: pair.a.mac,
        dst_mac: pair.b.mac,
        src_ip: pair.a.ip,
        dst_ip: pair.b.ip,
        src_port: 9,
        dst_port: 9000,
    };
    let w = Workload {
        writer: Some(udp_writer(flow)),
        ..base.clone()
    };
    let (qdisc, builder, ifname) = (w.qdisc, engine_builder(&w), pair.a.ifname.clone());
    announce(cli, &w);
    let ns = &pair.a.ns;
    let open = |pool: &skb_pool::Pool| {
        ns.run(|| XskDevice::open(&ifname, queues, pool, |_| qdisc.build(), builder))
            .map_err(|source| xsk_tx::Error::Io {
                op: "setns into the veth namespace",
                source,
            })?
    };
    let cell = match run_xsk(&w, open, cli.json) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pktgen: --veth: {e} (run as root, or use --driver null)");
            return ExitCode::from(1);
        }
    };
    // Until every datagram is counted, or none arrived for 2 s (a receiver starved that long
    // on a busy machine still counts what its socket holds when it stops).
    counter.wait_for(cell.sent, Duration::from_secs(2));
    // What it counted by the time it stopped (a datagram read after the wait counts too).
    let received = counter.stop();
    let drops = match VethDrops::read(&pair) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("pktgen: --veth: cannot read the kernel's drop counters: {e}");
            return ExitCode::from(1);
        }
    };
    let code = finish(cli, &w, &cell, Some((received, drops)));
    drop(pair); // the namespaces and the veth pair go away here
    if drops.accounts_for(cell.sent, received) {
        code
    } else {
        ExitCode::FAILURE
    }
}

/// What the kernel dropped between our AF_XDP socket and the UDP socket in the peer namespace,
/// by its own counters (the namespaces are new, so every count is this run's). A datagram the
/// receiver was too slow for is one of these, not a loss of ours; a datagram in none of them
/// and not received is.
#[derive(Clone, Copy)]
pub(crate) struct VethDrops {
    /// No room for the datagram: the receiving socket's buffer was full, or UDP's memory limit
    /// was reached (`Udp: RcvbufErrors` and `MemErrors` in the peer namespace).
    pub(crate) udp_no_room: u64,
    /// Any other UDP delivery error there (`InErrors` beyond those: a checksum, say).
    pub(crate) udp_other: u64,
    /// Dropped crossing the veth: the larger of the receiving end's receive drops and the
    /// sending end's transmit drops, since a drop at the receiver's backlog counts on both.
    pub(crate) veth: u64,
}

impl VethDrops {
    fn read(pair: &VethPair) -> std::io::Result<VethDrops> {
        let (a, b) = (pair.a.ns.kernel_drops()?, pair.b.ns.kernel_drops()?);
        let no_room = b.udp_rcvbuf_errors + b.udp_mem_errors;
        Ok(VethDrops {
            udp_no_room: no_room,
            udp_other: b.udp_in_errors.saturating_sub(no_room),
            veth: b.rx_dropped.max(a.tx_dropped),
        })
    }

    pub(crate) fn total(&self) -> u64 {
        self.udp_no_room + self.udp_other + self.veth
    }

    /// The datagrams accounted for: `received`, and those dropped for lack of room.
    pub(crate) fn accounted(&self, received: u64) -> u64 {
        received + self.udp_no_room + self.veth
    }

    /// Whether every datagram sent is accounted for, and no other UDP error occurred.
    pub(crate) fn accounts_for(&self, sent: u64, received: u64) -> bool {
        self.udp_other == 0 && self.accounted(received) == sent
    }
}

pub(crate) fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

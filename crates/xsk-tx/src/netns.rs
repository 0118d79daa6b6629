//! Test harness: private network namespaces joined by a veth pair, so AF_XDP tests and benches
//! send real packets without touching any other interface.
//!
//! [`VethPair::create`][create] makes two namespaces with names unique to this process (prefix,
//! pid, counter), a veth pair with explicit queue counts across them (`ip link add ...
//! numtxqueues N numrxqueues N type veth peer ...`), fixed MACs and addresses, permanent
//! neighbour entries (an XDP program that redirects every packet would swallow ARP) and IPv6
//! off (no stray router solicitations). Dropping it deletes both namespaces, which destroys the
//! veth — also on panic, since `Drop` runs while unwinding. Namespaces left by a killed run
//! (dead pid) are removed on the next run.
//!
//! Code runs inside a namespace on a dedicated thread that `setns`es into it
//! ([`NetNs::run`][run], [`NetNs::spawn`][spawn]); the test's other threads stay where they
//! were. Sockets keep the namespace they were created in, so they may be used from any thread
//! afterwards.
//!
//! [`veth_or_skip`][skip] is the entry point for tests: it returns `None` with a visible
//! `SKIPPED:` line when the machine cannot run them (not root, no `ip`), and fails instead when
//! `LOCKLESS_XMIT_REQUIRE_NETNS=1` is set, as in CI.
//!
//! [create]: crate::netns::VethPair::create
//! [run]: crate::netns::NetNs::run
//! [spawn]: crate::netns::NetNs::spawn
//! [skip]: crate::netns::veth_or_skip

use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;

use crate::sys;

/// Environment variable that turns a skip into a failure.
pub const REQUIRE_ENV: &str = "LOCKLESS_XMIT_REQUIRE_NETNS";

/// How long a new veth end may take to be up with its qdisc attached. The kernel attaches the
/// qdisc from link-watch work (normally within a second); a loaded machine can delay that work.
const LINK_READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
/// Prefix of every namespace this harness creates.
pub const PREFIX: &str = "lxx-";

static COUNTER: AtomicU32 = AtomicU32::new(0);
static REAP: Once = Once::new();

/// The `ip` binary: from `PATH`, or iproute2's usual places when `PATH` lacks the sbin dirs.
fn ip_binary() -> &'static str {
    static IP: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    IP.get_or_init(|| {
        ["ip", "/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
            .into_iter()
            .find(|p| {
                Command::new(p)
                    .arg("-V")
                    .output()
                    .is_ok_and(|o| o.status.success())
            })
            .unwrap_or("ip")
    })
}

/// Runs `ip ARGS`, failing with its stderr.
pub fn ip(args: &[&str]) -> io::Result<()> {
    ip_output(args).map(drop)
}

/// Runs `ip ARGS` and returns its stdout, failing with its stderr.
fn ip_output(args: &[&str]) -> io::Result<String> {
    let out = Command::new(ip_binary()).args(args).output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(io::Error::other(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Whether this process can create namespaces and veth pairs; `Err` says why not.
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not running as root".into());
    }
    match Command::new(ip_binary()).arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("the `ip` command (iproute2) is not installed".into()),
    }
}

/// Reports a test that cannot run: `SKIPPED:` on stderr, or a panic when
/// `LOCKLESS_XMIT_REQUIRE_NETNS=1`.
pub fn skip(test: &str, reason: &str) {
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
        panic!("{test}: cannot run: {reason}, and {REQUIRE_ENV}=1 forbids skipping");
    }
    // Straight to the stderr handle, not `eprintln!`: the test harness captures the macros'
    // output of passing tests, and a skip must be seen.
    let line = format!("SKIPPED: {test}: {reason} (needs root and iproute2)\n");
    let _ = io::Write::write_all(&mut io::stderr(), line.as_bytes());
}

/// A veth pair for `test`, or `None` after reporting a skip (see [`skip`]).
pub fn veth_or_skip(test: &str, queues: u32) -> Option<VethPair> {
    if let Err(reason) = available() {
        skip(test, &reason);
        return None;
    }
    match VethPair::create(queues) {
        Ok(v) => Some(v),
        Err(e) => {
            skip(test, &format!("cannot create namespaces/veth: {e}"));
            None
        }
    }
}

/// Removes namespaces of earlier runs whose process is gone.
fn reap_stale() {
    let Ok(dir) = std::fs::read_dir("/var/run/netns") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

/// A named network namespace owned by this value; deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates namespace `name` (`ip netns add`) with its loopback up.
    pub fn create(name: &str) -> io::Result<NetNs> {
        ip(&["netns", "add", name])?;
        let ns = NetNs {
            name: name.to_owned(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> io::Result<()> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Waits (up to [`LINK_READY_TIMEOUT`]) until `ifname` in this namespace is operationally up with its qdisc
    /// attached, polling `ip link show`: the kernel gives no event to wait on short of a
    /// netlink listener.
    fn wait_link_ready(&self, ifname: &str) -> io::Result<()> {
        let deadline = std::time::Instant::now() + LINK_READY_TIMEOUT;
        loop {
            let line = ip_output(&[
                "-n",
                self.name.as_str(),
                "-o",
                "link",
                "show",
                "dev",
                ifname,
            ])?;
            if line.contains("state UP") && !line.contains("qdisc noop") {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(io::Error::other(format!(
                    "{ifname} in {} did not come up within {:?}: {}",
                    self.name,
                    LINK_READY_TIMEOUT,
                    line.trim()
                )));
            }
            thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    fn enter(name: &str) -> io::Result<()> {
        let f = File::open(format!("/var/run/netns/{name}"))?;
        sys::setns_net(f.as_fd())
    }

    /// Runs `f` on a thread inside the namespace and returns its result; a panic in `f` is
    /// resumed here.
    pub fn run<T: Send, F: FnOnce() -> T + Send>(&self, f: F) -> io::Result<T> {
        let name = self.name.as_str();
        thread::scope(|s| {
            let h = s.spawn(move || {
                Self::enter(name)?;
                Ok(f())
            });
            match h.join() {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }

    /// Spawns a thread inside the namespace running `f`. The thread panics if it cannot enter.
    pub fn spawn<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(
        &self,
        f: F,
    ) -> thread::JoinHandle<T> {
        let name = self.name.clone();
        thread::spawn(move || {
            if let Err(e) = Self::enter(&name) {
                panic!("cannot enter network namespace {name}: {e}");
            }
            f()
        })
    }

    /// Writes a sysctl under `/proc/sys` as seen from inside the namespace.
    pub fn sysctl(&self, key: &str, value: &str) -> io::Result<()> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let value = value.to_owned();
        self.run(move || std::fs::write(path, value))?
    }

    /// The kernel's own drop counters in this namespace, read from `/proc/net/snmp` and
    /// `/proc/net/dev` as seen from inside it: where a datagram sent into it and not received
    /// went.
    pub fn kernel_drops(&self) -> io::Result<KernelDrops> {
        self.run(|| {
            let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
            let dev = std::fs::read_to_string("/proc/thread-self/net/dev")?;
            KernelDrops::parse(&snmp, &dev).ok_or_else(|| {
                io::Error::other("unexpected layout of /proc/net/snmp or /proc/net/dev")
            })
        })?
    }
}

/// A namespace's kernel drop counters ([`NetNs::kernel_drops`]); each is a count of packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelDrops {
    /// UDP datagrams dropped because the receiving socket's buffer was full
    /// (`UDP_MIB_RCVBUFERRORS`, `Udp: RcvbufErrors`).
    pub udp_rcvbuf_errors: u64,
    /// UDP datagrams dropped because UDP's memory limit (`net.ipv4.udp_mem`) was reached
    /// (`Udp: MemErrors`; 0 where the kernel does not report it).
    pub udp_mem_errors: u64,
    /// UDP datagrams dropped for any reason at delivery (`Udp: InErrors`, which includes
    /// `RcvbufErrors` and `MemErrors`).
    pub udp_in_errors: u64,
    /// Packets the namespace's interfaces dropped on receive (the `drop` column of
    /// `/proc/net/dev`, summed: a full backlog queue, for a veth end).
    pub rx_dropped: u64,
    /// Packets the namespace's interfaces dropped on transmit.
    pub tx_dropped: u64,
}

impl KernelDrops {
    fn parse(snmp: &str, dev: &str) -> Option<KernelDrops> {
        // `Udp:` comes as a header line of names and a line of values.
        let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
        let (names, values) = (udp.next()?, udp.next()?);
        let field = |name: &str| -> Option<u64> {
            let i = names.split_whitespace().position(|n| n == name)?;
            values.split_whitespace().nth(i)?.parse().ok()
        };
        let (mut rx_dropped, mut tx_dropped) = (0, 0);
        // Two header lines, then `name: rx bytes packets errs drop ... tx bytes packets errs
        // drop ...` (8 receive columns, then 8 transmit).
        for line in dev.lines().skip(2) {
            let (_, cols) = line.split_once(':')?;
            let cols: Vec<u64> = cols
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            rx_dropped += cols.get(3)?;
            tx_dropped += cols.get(11)?;
        }
        Some(KernelDrops {
            udp_rcvbuf_errors: field("RcvbufErrors")?,
            udp_mem_errors: field("MemErrors").unwrap_or(0),
            udp_in_errors: field("InErrors")?,
            rx_dropped,
            tx_dropped,
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!(
                "warning: could not delete network namespace {}: {e}",
                self.name
            );
        }
    }
}

/// One end of a veth pair.
#[derive(Debug)]
pub struct VethEnd {
    /// The namespace this end lives in.
    pub ns: NetNs,
    /// Interface name (at most 15 bytes).
    pub ifname: String,
    /// MAC address.
    pub mac: [u8; 6],
    /// IPv4 address (/24).
    pub ip: Ipv4Addr,
}

/// Two namespaces joined by a veth pair: `a` (where AF_XDP runs) and `b` (the peer).
#[derive(Debug)]
pub struct VethPair {
    /// The AF_XDP side.
    pub a: VethEnd,
    /// The kernel-socket side.
    pub b: VethEnd,
    /// RX and TX queues on each end.
    pub queues: u32,
}

impl VethPair {
    /// Creates the namespaces and the pair with `queues` RX and TX queues on each end.
    pub fn create(queues: u32) -> io::Result<VethPair> {
        REAP.call_once(reap_stale);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let base = format!("{PREFIX}{pid}-{n}");
        let ns_a = NetNs::create(&format!("{base}-a"))?;
        let ns_b = NetNs::create(&format!("{base}-b"))?;
        // Interfaces live only in our namespaces, so short fixed names cannot collide.
        let (if_a, if_b) = (format!("xa{n}"), format!("xb{n}"));
        let subnet = (n % 250) as u8 + 1;
        let a = VethEnd {
            ns: ns_a,
            ifname: if_a,
            mac: [0x02, 0x58, 0x53, 0x4b, subnet, 0x0a],
            ip: Ipv4Addr::new(10, 201, subnet, 1),
        };
        let b = VethEnd {
            ns: ns_b,
            ifname: if_b,
            mac: [0x02, 0x58, 0x53, 0x4b, subnet, 0x0b],
            ip: Ipv4Addr::new(10, 201, subnet, 2),
        };
        let q = queues.max(1).to_string();
        a.ns.ip(&[
            "link",
            "add",
            &a.ifname,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &b.ifname,
            "netns",
            b.ns.name(),
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ])?;
        for (me, peer) in [(&a, &b), (&b, &a)] {
            // Best effort: without it the tests filter stray IPv6 frames anyway.
            let _ = me.ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1");
            let _ = me.ns.sysctl("net.ipv6.conf.default.disable_ipv6", "1");
            me.ns
                .ip(&["link", "set", &me.ifname, "address", &mac_str(&me.mac)])?;
            me.ns
                .ip(&["addr", "add", &format!("{}/24", me.ip), "dev", &me.ifname])?;
            me.ns.ip(&["link", "set", &me.ifname, "up"])?;
            me.ns.ip(&[
                "neigh",
                "replace",
                &peer.ip.to_string(),
                "lladdr",
                &mac_str(&peer.mac),
                "dev",
                &me.ifname,
                "nud",
                "permanent",
            ])?;
        }
        // The kernel turns the carrier on and attaches the real qdisc (until then `noop`,
        // which drops silently) from its link-watch work, up to a second after `link set up`:
        // traffic sent before that vanishes. Wait until both ends say so.
        for me in [&a, &b] {
            me.ns.wait_link_ready(&me.ifname)?;
        }
        Ok(VethPair {
            a,
            b,
            queues: queues.max(1),
        })
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_str(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A kernel UDP receiver on a thread inside a namespace, counting datagrams: what
/// `pktgen --veth` reports "received" from. Stops (and joins its thread) on drop.
#[derive(Debug)]
pub struct UdpCounter {
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl UdpCounter {
    /// Binds `addr` inside `ns` (receive buffer forced to 64 MiB) and starts counting; returns
    /// once the socket is bound.
    pub fn start(ns: &NetNs, addr: std::net::SocketAddrV4) -> io::Result<UdpCounter> {
        use std::sync::atomic::{AtomicBool, AtomicU64};
        let count = std::sync::Arc::new(AtomicU64::new(0));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (c, s) = (count.clone(), stop.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = ns.spawn(move || {
            let sock = match std::net::UdpSocket::bind(addr) {
                Ok(s) => s,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let bytes: libc::c_int = 64 << 20;
            // SAFETY: setsockopt on a live socket with a valid int option; failure only leaves
            // the default buffer size.
            unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&sock),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUFFORCE,
                    (&bytes as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            let _ = sock.set_read_timeout(Some(std::time::Duration::from_millis(50)));
            let _ = ready_tx.send(Ok(()));
            let mut buf = [0u8; 65536];
            while !s.load(Ordering::Relaxed) {
                if sock.recv(&mut buf).is_ok() {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(UdpCounter {
                count,
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::other(
                "the UDP counter thread died before binding",
            )),
        }
    }

    /// Datagrams received so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Waits until `expected` datagrams arrived, or until none arrived for `idle`; returns the
    /// count.
    pub fn wait_for(&self, expected: u64, idle: std::time::Duration) -> u64 {
        let mut last = self.count();
        let mut since = std::time::Instant::now();
        loop {
            let now = self.count();
            if now >= expected {
                return now;
            }
            if now != last {
                last = now;
                since = std::time::Instant::now();
            } else if since.elapsed() >= idle {
                return now;
            }
            thread::yield_now();
        }
    }

    /// Stops the receiver; returns the final count.
    pub fn stop(mut self) -> u64 {
        self.shutdown();
        self.count()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for UdpCounter {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::KernelDrops;

    /// The layouts of a 6.x kernel's `/proc/net/snmp` (its `Udp:` lines) and `/proc/net/dev`.
    #[test]
    fn kernel_drops_parse_the_udp_and_device_counters() {
        let snmp = "Ip: Forwarding DefaultTTL InReceives\n\
                    Ip: 1 64 12\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors \
                    InCsumErrors IgnoredMulti MemErrors\n\
                    Udp: 1757359 0 362199 0 362196 0 3 0 0\n\
                    UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors \
                    InCsumErrors IgnoredMulti MemErrors\n\
                    UdpLite: 0 0 0 0 0 0 0 0 0\n";
        let dev = "Inter-|   Receive                                                |  Transmit\n \
                   face |bytes    packets errs drop fifo frame compressed multicast|bytes    \
                   packets errs drop fifo colls carrier compressed\n    \
                   lo:       0       0    0    0    0     0          0         0        0       \
                   0    0    0    0     0       0          0\n\
                   lxb12:  9000     100    0    7    0     0          0         0      500       \
                   5    0    2    0     0       0          0\n";
        let d = KernelDrops::parse(snmp, dev).expect("parses");
        assert_eq!(
            d,
            KernelDrops {
                udp_rcvbuf_errors: 362_196,
                udp_mem_errors: 0,
                udp_in_errors: 362_199,
                rx_dropped: 7,
                tx_dropped: 2,
            }
        );
        assert_eq!(KernelDrops::parse("Ip: x\n", dev), None, "no Udp: lines");
        assert_eq!(KernelDrops::parse(snmp, "h\nh\nbad line\n"), None);
    }
}

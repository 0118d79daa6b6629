//! Test harness: private network namespaces joined by a veth pair, so AF_XDP tests and benches
//! send real packets without touching any other interface.
//!
//! [`VethPair::create`][create] makes two namespaces named `lxx-<token>-<n>-a|b`, a veth pair
//! with explicit queue counts across them (`ip link add ... numtxqueues N numrxqueues N type
//! veth peer ...`), fixed MACs and addresses, permanent neighbour entries (an XDP program that
//! redirects every packet would swallow ARP) and IPv6 off (no stray router solicitations).
//! Dropping it deletes both namespaces, which destroys the veth — also on panic, since `Drop`
//! runs while unwinding. A name already taken moves creation on to the next counter value.
//!
//! The owner token (`<pid>-<8 random hex digits>`) is unique across pid reuse and across PID
//! namespaces that share `/run/netns`. Before the process creates its first namespace it locks
//! `/run/lockless-xmit/<token>.lock` with `flock(LOCK_EX)` and keeps the lock for its whole life,
//! so the kernel releases it exactly when the process dies. Namespaces left by a killed run are
//! removed on the next run: those of a token whose lock can be taken without blocking (with the
//! lock file), never this process's own, and those in the earlier `lxx-<pid>-<n>-a|b` format
//! when no process `pid` is visible. A namespace whose token has no lock file is left alone: its
//! owner may keep its lock files where this process cannot see them.
//!
//! Code runs inside a namespace on a dedicated thread that `setns`es into it
//! ([`NetNs::run`][run], [`NetNs::spawn`][spawn]); the test's other threads stay where they
//! were. Sockets keep the namespace they were created in, so they may be used from any thread
//! afterwards.
//!
//! [`veth_or_skip`][skip] is the entry point for tests: it returns `None` with a visible
//! `SKIPPED:` line when the machine cannot run them (not root, no `ip`), and fails instead when
//! `LOCKLESS_XMIT_REQUIRE_NETNS=1` is set, as in CI. Failures to clean up are written to the
//! process's stderr directly, where the test harness's capture does not hide them.
//!
//! [create]: crate::netns::VethPair::create
//! [run]: crate::netns::NetNs::run
//! [spawn]: crate::netns::NetNs::spawn
//! [skip]: crate::netns::veth_or_skip

use std::fs::File;
use std::io::{self, Read};
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once, OnceLock, PoisonError};
use std::thread;

use crate::sys;

/// Environment variable that turns a skip into a failure.
pub const REQUIRE_ENV: &str = "LOCKLESS_XMIT_REQUIRE_NETNS";

/// How long a new veth end may take to be up with its qdisc attached. The kernel attaches the
/// qdisc from link-watch work (normally within a second); a loaded machine can delay that work.
const LINK_READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
/// Prefix of every namespace this harness creates.
pub const PREFIX: &str = "lxx-";
/// Directory of the owner lock files, `<token>.lock`.
pub const LOCK_DIR: &str = "/run/lockless-xmit";
/// Where `ip netns` keeps its named namespaces.
const NETNS_DIR: &str = "/var/run/netns";
/// Counter values one [`VethPair::create`] tries when names are taken (`EEXIST`).
const NAME_ATTEMPTS: u32 = 16;
/// Tokens tried for this process's lock when a token's lock file exists already or is taken
/// away by a reaper between its creation and its lock.
const TOKEN_ATTEMPTS: u32 = 8;

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
pub fn ip_output(args: &[&str]) -> io::Result<String> {
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
    report(&format!(
        "SKIPPED: {test}: {reason} (needs root and iproute2)"
    ));
}

/// Writes `line` to the process's stderr handle, not through `eprintln!`: the test harness
/// captures the macros' output of passing tests, and a skip or a failed cleanup must be seen.
fn report(line: &str) {
    let _ = io::Write::write_all(&mut io::stderr(), format!("{line}\n").as_bytes());
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

/// This process's owner token and the open, locked lock file that says the process is alive.
#[derive(Debug)]
struct Owner {
    token: String,
    /// Held (`LOCK_EX`) until the process exits; the kernel releases it then.
    _lock: File,
}

/// The process's owner: its lock is taken on the first call and kept for the process's life.
fn owner() -> io::Result<&'static Owner> {
    static OWNER: OnceLock<Owner> = OnceLock::new();
    static INIT: Mutex<()> = Mutex::new(());
    if let Some(o) = OWNER.get() {
        return Ok(o);
    }
    // One creator: a second token locked by the same process would never be released.
    let _init = INIT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(o) = OWNER.get() {
        return Ok(o);
    }
    let (token, lock) = lock_new_token(std::process::id())?;
    Ok(OWNER.get_or_init(|| Owner { token, _lock: lock }))
}

/// The lock file of `token`.
fn lock_path(token: &str) -> PathBuf {
    Path::new(LOCK_DIR).join(format!("{token}.lock"))
}

/// A fresh token `<pid>-<8 hex digits>` whose lock file this call created and locked.
fn lock_new_token(pid: u32) -> io::Result<(String, File)> {
    std::fs::create_dir_all(LOCK_DIR)?;
    let mut last = None;
    for _ in 0..TOKEN_ATTEMPTS {
        let token = format!("{pid}-{:08x}", random_u32()?);
        match lock_token(&token) {
            Ok(f) => return Ok((token, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "no free owner token in {TOKEN_ATTEMPTS} tries under {LOCK_DIR}: {}",
            last.map_or_else(String::new, |e| e.to_string())
        ),
    ))
}

/// Creates `token`'s lock file (which must not exist) and locks it. A reaper can open the
/// file and take the lock between the two steps, judge the owner dead and remove the file:
/// the path is checked once the lock is ours, and a file that is no longer there is
/// `AlreadyExists`, so that the caller takes another token.
fn lock_token(token: &str) -> io::Result<File> {
    let path = lock_path(token);
    let f = File::options().write(true).create_new(true).open(&path)?;
    sys::flock(f.as_fd(), libc::LOCK_EX)?;
    if same_file(&f, &path)? {
        Ok(f)
    } else {
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} was removed before it was locked", path.display()),
        ))
    }
}

/// Whether `path` still names the open file `f` (false when `path` is gone).
fn same_file(f: &File, path: &Path) -> io::Result<bool> {
    let open = f.metadata()?;
    match std::fs::metadata(path) {
        Ok(named) => Ok(named.dev() == open.dev() && named.ino() == open.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// 32 random bits: `getrandom`, or `/dev/urandom` where the syscall is missing.
fn random_u32() -> io::Result<u32> {
    sys::getrandom_u32().or_else(|_| {
        let mut b = [0u8; 4];
        File::open("/dev/urandom")?.read_exact(&mut b)?;
        Ok(u32::from_ne_bytes(b))
    })
}

/// Whether `t` has the shape of an owner token, `<pid>-<8 hex digits>`.
fn is_token(t: &str) -> bool {
    t.split_once('-').is_some_and(|(pid, hex)| {
        pid.parse::<u32>().is_ok()
            && pid.bytes().all(|b| b.is_ascii_digit())
            && hex.len() == 8
            && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// Who owns a namespace, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NameOwner<'a> {
    /// `lxx-<token>-<n>-a|b`: the holder of `<token>`'s lock.
    Token(&'a str),
    /// `lxx-<pid>-<n>-a|b`, the format before owner tokens: process `pid`.
    Pid(u32),
}

/// The owner a namespace name under [`PREFIX`] names; `None` for any other name.
fn name_owner(name: &str) -> Option<NameOwner<'_>> {
    let rest = name.strip_prefix(PREFIX)?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let side = |s: &str| s == "a" || s == "b";
    match rest.split('-').collect::<Vec<_>>()[..] {
        [pid, n, end] if digits(pid) && digits(n) && side(end) => {
            pid.parse().ok().map(NameOwner::Pid)
        }
        [pid, hex, n, end] if digits(n) && side(end) => {
            let token = &rest[..pid.len() + 1 + hex.len()];
            is_token(token).then_some(NameOwner::Token(token))
        }
        _ => None,
    }
}

/// The names under [`NETNS_DIR`] (none when it does not exist).
fn netns_names() -> io::Result<Vec<String>> {
    let dir = match std::fs::read_dir(NETNS_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    dir.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// Whether namespace `name` exists.
fn netns_exists(name: &str) -> bool {
    Path::new(NETNS_DIR).join(name).exists()
}

/// Removes namespaces (and lock files) of earlier runs whose owner is gone, never those of
/// token `own`; reports what it cannot remove or read.
fn reap_stale(own: &str) {
    let names = match netns_names() {
        Ok(n) => n,
        Err(e) => {
            report(&format!(
                "warning: cannot list {NETNS_DIR} to remove stale namespaces: {e}"
            ));
            return;
        }
    };
    for name in &names {
        if let Some(NameOwner::Pid(pid)) = name_owner(name) {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                reap_netns(name);
            }
        }
    }
    let locks = match std::fs::read_dir(LOCK_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => {
            report(&format!(
                "warning: cannot list {LOCK_DIR} to remove stale namespaces: {e}"
            ));
            return;
        }
    };
    for entry in locks {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                report(&format!("warning: cannot read an entry of {LOCK_DIR}: {e}"));
                continue;
            }
        };
        let file_name = entry.file_name();
        let Some(token) = file_name.to_str().and_then(|f| f.strip_suffix(".lock")) else {
            continue;
        };
        if token == own || !is_token(token) {
            continue;
        }
        // Held while the owner's namespaces go, so that a concurrent reaper skips them.
        let Some(_dead) = take_dead_lock(&entry.path()) else {
            continue;
        };
        let mut all_gone = true;
        for name in names
            .iter()
            .filter(|n| name_owner(n) == Some(NameOwner::Token(token)))
        {
            all_gone &= reap_netns(name);
        }
        // Kept while a namespace of the token is left, so that a later run tries again.
        if all_gone {
            match std::fs::remove_file(entry.path()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => report(&format!(
                    "warning: cannot remove the stale lock file {}: {e}",
                    entry.path().display()
                )),
                _ => {}
            }
        }
    }
}

/// The lock of the lock file at `path` when it can be taken without blocking — its owner is
/// dead — and `path` still names the file locked; `None` otherwise.
fn take_dead_lock(path: &Path) -> Option<File> {
    let taken =
        File::open(path).and_then(
            |f| match sys::flock(f.as_fd(), libc::LOCK_EX | libc::LOCK_NB) {
                Ok(()) => Ok(same_file(&f, path)?.then_some(f)),
                Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(None),
                Err(e) => Err(e),
            },
        );
    match taken {
        Ok(f) => f,
        // Removed by a concurrent reaper since the directory was listed.
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            report(&format!(
                "warning: cannot check the lock file {}: {e}",
                path.display()
            ));
            None
        }
    }
}

/// Deletes the stale namespace `name`; whether it is gone. A failure is reported unless the
/// namespace is gone anyway (a concurrent reaper got there first).
fn reap_netns(name: &str) -> bool {
    match ip(&["netns", "del", name]) {
        Ok(()) => true,
        Err(_) if !netns_exists(name) => true,
        Err(e) => {
            report(&format!(
                "warning: cannot remove the stale network namespace {name}: {e}"
            ));
            false
        }
    }
}

/// A named network namespace owned by this value; deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates namespace `name` (`ip netns add`) with its loopback up; a name already taken
    /// is an error of kind [`io::ErrorKind::AlreadyExists`].
    pub fn create(name: &str) -> io::Result<NetNs> {
        if let Err(e) = ip(&["netns", "add", name]) {
            // `ip netns add` removes what it made when it fails: a file left is someone else's.
            return Err(if netns_exists(name) {
                io::Error::new(io::ErrorKind::AlreadyExists, e.to_string())
            } else {
                e
            });
        }
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
            report(&format!(
                "warning: could not delete network namespace {}: {e}",
                self.name
            ));
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
        // The lock first: from the first namespace on, a reaper must see this owner alive.
        let owner = owner()?;
        REAP.call_once(|| reap_stale(&owner.token));
        let (n, ns_a, ns_b) = Self::namespaces(&owner.token)?;
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

    /// Namespaces `lxx-<token>-<n>-a` and `-b` for the first counter value `n` whose names are
    /// free, trying at most [`NAME_ATTEMPTS`] values.
    fn namespaces(token: &str) -> io::Result<(u32, NetNs, NetNs)> {
        let mut taken = Vec::new();
        for _ in 0..NAME_ATTEMPTS {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let base = format!("{PREFIX}{token}-{n}");
            let pair = NetNs::create(&format!("{base}-a"))
                .and_then(|a| Ok((a, NetNs::create(&format!("{base}-b"))?)));
            match pair {
                Ok((a, b)) => return Ok((n, a, b)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => taken.push(base),
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "network namespace names taken: {}-a|b",
                taken.join("-a|b, ")
            ),
        ))
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

/// The receive buffer a [`UdpCounter`] forces (`SO_RCVBUFFORCE`).
const RCVBUF_BYTES: libc::c_int = 64 << 20;

impl UdpCounter {
    /// Binds `addr` inside `ns` (receive buffer forced to 64 MiB, which needs `CAP_NET_ADMIN`)
    /// and starts counting; returns once the socket is bound and set up, or the error of the
    /// step that failed.
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
            // The read timeout is what lets the loop see `stop`: without it, shutdown would
            // wait forever for a datagram.
            let setup = sys::setsockopt(
                sock.as_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &RCVBUF_BYTES,
            )
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "SO_RCVBUFFORCE ({RCVBUF_BYTES} bytes) on the UDP counter's socket: {e} \
                         (needs CAP_NET_ADMIN)"
                    ),
                )
            })
            .and_then(|()| sock.set_read_timeout(Some(std::time::Duration::from_millis(50))));
            if let Err(e) = setup {
                let _ = ready_tx.send(Err(e));
                return;
            }
            let _ = ready_tx.send(Ok(()));
            let mut buf = [0u8; 65536];
            while !s.load(Ordering::Relaxed) {
                if sock.recv(&mut buf).is_ok() {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            }
            // What the socket still holds arrived before the stop: counted too, so that a
            // receiver that fell behind does not turn queued datagrams into lost ones.
            if sock.set_nonblocking(true).is_ok() {
                while sock.recv(&mut buf).is_ok() {
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
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(io::Error::other(
                "the UDP counter thread died before it was ready",
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

    /// Stops the receiver, after it counted what its socket still held; returns the final
    /// count.
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
    use super::*;

    /// A namespace made by a test: deleted at the end unless something removed it already.
    struct TestNs(String);

    impl TestNs {
        fn create(name: String) -> io::Result<TestNs> {
            ip(&["netns", "add", &name])?;
            Ok(TestNs(name))
        }
    }

    impl Drop for TestNs {
        fn drop(&mut self) {
            if netns_exists(&self.0) {
                if let Err(e) = ip(&["netns", "del", &self.0]) {
                    report(&format!("warning: test namespace {} left: {e}", self.0));
                }
            }
        }
    }

    /// A file made by a test, removed at the end.
    struct TestFile(PathBuf);

    impl Drop for TestFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// The owner's lock, or `None` after reporting a skip.
    fn owner_or_skip(test: &str) -> Option<&'static Owner> {
        if let Err(why) = available() {
            skip(test, &why);
            return None;
        }
        match owner() {
            Ok(o) => Some(o),
            Err(e) => {
                skip(
                    test,
                    &format!("cannot take the owner lock under {LOCK_DIR}: {e}"),
                );
                None
            }
        }
    }

    #[test]
    fn names_say_who_owns_them() {
        assert_eq!(
            name_owner("lxx-4242-0badc0de-7-a"),
            Some(NameOwner::Token("4242-0badc0de"))
        );
        assert_eq!(name_owner("lxx-4242-7-b"), Some(NameOwner::Pid(4242)));
        for other in [
            "lxx-4242-7-c",
            "lxx-4242-0badc0d-7-a",
            "lxx-4242-0badc0dg-7-a",
            "lxx-x-7-a",
            "lxx-4242",
            "lxx--0badc0de-7-a",
            "netns-4242-7-a",
        ] {
            assert_eq!(name_owner(other), None, "{other}");
        }
        assert!(is_token("1-00000000") && !is_token("1-0000000") && !is_token("-00000000"));
    }

    /// A dead owner that had this process's pid (pid reuse: `/proc/<pid>` exists) and a live
    /// owner whose pid is not visible here (another PID namespace sharing `/run/netns`): the
    /// first's namespace and lock file go, the second's stay. A namespace in the earlier
    /// format of a pid that does not exist goes too.
    #[test]
    fn reaper_removes_dead_owners_namespaces_and_keeps_live_ones() {
        let test = "reaper_removes_dead_owners_namespaces_and_keeps_live_ones";
        let Some(own) = owner_or_skip(test) else {
            return;
        };
        // No process has pid u32::MAX: the kernel's pid_max is at most 2^22.
        let (live, live_lock) = lock_new_token(u32::MAX).expect("a live token");
        let _live_file = TestFile(lock_path(&live));
        let live_ns = TestNs::create(format!("{PREFIX}{live}-0-a")).expect("live namespace");
        // The namespace before its lock file, as its owner made them; then a lock nobody holds.
        let stale = format!("{}-{:08x}", std::process::id(), random_u32().unwrap());
        let stale_ns = TestNs::create(format!("{PREFIX}{stale}-0-a")).expect("stale namespace");
        let stale_file = TestFile(lock_path(&stale));
        File::options()
            .write(true)
            .create_new(true)
            .open(&stale_file.0)
            .expect("stale lock file");
        let old_ns = TestNs::create(format!("{PREFIX}{}-0-a", u32::MAX)).expect("old format");

        reap_stale(&own.token);

        assert!(!netns_exists(&stale_ns.0), "{} left", stale_ns.0);
        assert!(!stale_file.0.exists(), "{} left", stale_file.0.display());
        assert!(!netns_exists(&old_ns.0), "{} left", old_ns.0);
        assert!(netns_exists(&live_ns.0), "{} removed", live_ns.0);
        assert!(lock_path(&live).exists(), "the live lock file was removed");
        // This process's own lock is never taken from it.
        assert!(lock_path(&own.token).exists());
        drop(live_lock);
    }

    /// Names of this owner's next counter values are taken (`-b` of the first, `-a` of the
    /// second): the pair is made under the third.
    #[test]
    fn pair_creation_moves_past_names_already_taken() {
        let test = "pair_creation_moves_past_names_already_taken";
        let Some(own) = owner_or_skip(test) else {
            return;
        };
        // The only test of this binary that takes counter values.
        let n = COUNTER.load(Ordering::Relaxed);
        let taken = [
            format!("{PREFIX}{}-{n}-b", own.token),
            format!("{PREFIX}{}-{}-a", own.token, n + 1),
        ];
        let _blockers: Vec<TestNs> = taken
            .iter()
            .map(|t| TestNs::create(t.clone()).expect("blocking namespace"))
            .collect();
        let pair = VethPair::create(1).expect("a pair under free names");
        let expect = format!("{PREFIX}{}-{}", own.token, n + 2);
        assert_eq!(pair.a.ns.name(), format!("{expect}-a"));
        assert_eq!(pair.b.ns.name(), format!("{expect}-b"));
        assert!(
            !netns_exists(&format!("{PREFIX}{}-{n}-a", own.token)),
            "the half-made pair's namespace was not deleted"
        );
    }

    /// Set in the child process of the test below.
    const DROP_CHILD_ENV: &str = "LOCKLESS_XMIT_NETNS_DROP_CHILD";

    /// In the child only: drops a `NetNs` whose namespace does not exist, so its delete fails.
    #[test]
    fn drop_of_a_missing_namespace_child() {
        if std::env::var_os(DROP_CHILD_ENV).is_none() {
            return;
        }
        drop(NetNs {
            name: format!("{PREFIX}missing-{}", std::process::id()),
        });
    }

    /// The harness captures a passing test's `eprintln!` output; a failed delete must still
    /// reach stderr.
    #[test]
    fn a_failed_delete_is_reported_though_output_is_captured() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "netns::tests::drop_of_a_missing_namespace_child",
                "--test-threads=1",
            ])
            .env(DROP_CHILD_ENV, "1")
            .env_remove("RUST_TEST_NOCAPTURE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "could not delete network namespace {PREFIX}missing-"
            )),
            "stderr: {stderr}"
        );
    }

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

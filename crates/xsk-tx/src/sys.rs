//! Thin safe wrappers over the system calls AF_XDP needs: `socket`, `setsockopt`/`getsockopt`,
//! `mmap`, `bind`, `sendto` (the TX kick), `recvfrom` (the RX wakeup), `poll`, the raw `bpf()`
//! syscall, interface lookups (`if_nametoindex`, `SIOCGIFMTU`, ethtool `ETHTOOL_GCHANNELS`),
//! and for the netns test harness `setns`, `flock` and `getrandom`. Each returns `io::Error`
//! with the errno; [`crate::Error`] classifies them.
//!
//! `libc` 0.2 already carries the `if_xdp.h` uapi (`sockaddr_xdp`, `xdp_umem_reg`,
//! `xdp_mmap_offsets`, `xdp_desc`, the `XDP_*` constants); what it lacks (the `bpf()` command
//! numbers and attribute layouts, `ethtool_channels`) is defined here, as in the kernel's
//! `include/uapi/linux/bpf.h` and `ethtool.h`.

use std::ffi::CString;
use std::io;
use std::mem::{MaybeUninit, size_of};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// Turns a `-1` return into the thread's errno.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0)`.
pub(crate) fn xdp_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments.
    let fd = cvt(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)`: a handle for interface ioctls in the
/// calling thread's network namespace.
fn inet_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(fd, level, name, &value, sizeof value)`.
pub(crate) fn setsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to `size_of::<T>()` readable bytes for the duration of the call.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// `getsockopt(fd, level, name)` into a zero-initialised `T` (a plain-old-data uapi struct);
/// returns the value and the length the kernel wrote.
pub(crate) fn getsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<(T, usize)> {
    let mut value = MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` has room for `len` bytes and `len` is a valid in/out length.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    // SAFETY: callers use uapi structs of integers, for which all-zero and any bytes the
    // kernel wrote are valid values.
    Ok((unsafe { value.assume_init() }, len as usize))
}

/// `bind(fd, &sockaddr_xdp)`.
pub(crate) fn bind_xdp(fd: BorrowedFd<'_>, addr: &libc::sockaddr_xdp) -> io::Result<()> {
    // SAFETY: `addr` is a valid `sockaddr_xdp` and the length matches it.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (addr as *const libc::sockaddr_xdp).cast(),
            size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// `sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0)`: asks the kernel to process the TX ring.
pub(crate) fn kick_tx(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a zero-length send with null buffers and no address is valid for AF_XDP.
    let ret = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL)`: asks the kernel to refill from the fill
/// ring (the RX wakeup).
pub(crate) fn wake_rx(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a zero-length receive with null buffers and no address is valid for AF_XDP.
    let ret = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `poll` on one descriptor; returns the revents (0 on timeout).
pub(crate) fn poll(fd: BorrowedFd<'_>, events: libc::c_short, timeout_ms: i32) -> io::Result<i16> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    cvt(unsafe { libc::poll(&mut pfd, 1, timeout_ms) })?;
    Ok(pfd.revents)
}

/// An owned memory mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; it may be unmapped from any thread.
unsafe impl Send for Mmap {}
// SAFETY: `Mmap` hands out only raw pointers; synchronisation is the users' business.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// `mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, offset)`: maps one
    /// of an AF_XDP socket's rings.
    pub(crate) fn ring(fd: BorrowedFd<'_>, len: usize, offset: libc::off_t) -> io::Result<Mmap> {
        Self::map(
            len,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            offset,
        )
    }

    /// Anonymous private memory, page-aligned and zeroed.
    pub(crate) fn anonymous(len: usize) -> io::Result<Mmap> {
        Self::map(
            len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    }

    fn map(len: usize, flags: libc::c_int, fd: RawFd, offset: libc::off_t) -> io::Result<Mmap> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(ptr.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(Mmap { ptr, len })
    }

    /// Start of the mapping.
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length of the mapping in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: we own the mapping and nothing refers to it once its owner drops it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// An interface name as a C string, if it is a valid one (1..=15 bytes, no NUL, `/` or space).
pub(crate) fn ifname_cstr(name: &str) -> Option<CString> {
    let ok = !name.is_empty()
        && name.len() < libc::IFNAMSIZ
        && !name
            .bytes()
            .any(|b| b == 0 || b == b'/' || b.is_ascii_whitespace());
    if ok { CString::new(name).ok() } else { None }
}

/// `if_nametoindex` in the calling thread's network namespace.
pub(crate) fn if_nametoindex(name: &str) -> io::Result<u32> {
    let c = ifname_cstr(name).ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

fn ifreq_for(name: &str) -> io::Result<libc::ifreq> {
    let c = ifname_cstr(name).ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))?;
    // SAFETY: `ifreq` is plain old data; all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(c.as_bytes()) {
        *dst = *src as libc::c_char;
    }
    Ok(req)
}

/// The interface's MTU (`SIOCGIFMTU`) in the calling thread's network namespace.
pub(crate) fn if_mtu(name: &str) -> io::Result<u32> {
    let sock = inet_socket()?;
    let mut req = ifreq_for(name)?;
    // SAFETY: `req` is a valid ifreq with the name set; SIOCGIFMTU writes `ifru_mtu`.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) })?;
    // SAFETY: the kernel filled the `ifru_mtu` member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as u32)
}

/// `ETHTOOL_GCHANNELS`.
const ETHTOOL_GCHANNELS: u32 = 0x0000_003c;

/// `struct ethtool_channels` of `linux/ethtool.h`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// The interface's queue counts `(rx, tx)` via ethtool `ETHTOOL_GCHANNELS`, in the calling
/// thread's network namespace. Drivers report either separate rx/tx channels or combined ones.
pub(crate) fn if_channels(name: &str) -> io::Result<(u32, u32)> {
    let sock = inet_socket()?;
    let mut req = ifreq_for(name)?;
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    req.ifr_ifru.ifru_data = (&mut ch as *mut EthtoolChannels).cast();
    // SAFETY: `req` names the interface and points at a valid `ethtool_channels` that lives
    // across the call.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut req) })?;
    Ok((
        ch.rx_count + ch.combined_count,
        ch.tx_count + ch.combined_count,
    ))
}

/// `setns(fd, CLONE_NEWNET)`: moves the calling thread into the network namespace `fd` names.
pub(crate) fn setns_net(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain syscall on a valid descriptor; it affects only the calling thread.
    cvt(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}

/// `flock(fd, op)` (`LOCK_EX`, `LOCK_EX | LOCK_NB`, ...), retried when a signal interrupts it.
/// A lock held elsewhere under `LOCK_NB` is `EWOULDBLOCK`.
pub(crate) fn flock(fd: BorrowedFd<'_>, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: plain syscall on a valid descriptor; it touches no memory of ours.
        match cvt(unsafe { libc::flock(fd.as_raw_fd(), op) }) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r.map(drop),
        }
    }
}

/// Four bytes from the kernel's random source (`getrandom`, blocking until it is seeded).
pub(crate) fn getrandom_u32() -> io::Result<u32> {
    let mut buf = [0u8; 4];
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes during the call.
        let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n == buf.len() as isize {
            return Ok(u32::from_ne_bytes(buf));
        }
        let e = if n < 0 {
            io::Error::last_os_error()
        } else {
            // Requests of at most 256 bytes are never cut short once the pool is seeded.
            io::Error::other(format!("getrandom returned {n} of {} bytes", buf.len()))
        };
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Raw `bpf(cmd, attr, sizeof attr)`; returns the syscall's non-negative result.
///
/// `A` must be the `union bpf_attr` member layout for `cmd` (a `#[repr(C)]` struct of
/// integers); the kernel zero-extends shorter attributes.
pub(crate) fn bpf<A: Copy>(cmd: u32, attr: &mut A) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is valid for reads and writes of `size_of::<A>()` bytes during the call;
    // any pointers inside it are the caller's and point to live buffers.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut A,
            size_of::<A>() as libc::c_long,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Takes ownership of a descriptor a syscall returned.
pub(crate) fn owned_fd(ret: libc::c_long) -> io::Result<OwnedFd> {
    let fd = RawFd::try_from(ret).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: the kernel just returned this descriptor to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

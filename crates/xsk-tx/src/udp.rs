//! UDP senders through ordinary kernel sockets, for machines or interfaces without AF_XDP and
//! as the baseline AF_XDP is measured against: [`UdpSendmmsg`] (one `sendmmsg(2)` per batch)
//! and [`UdpIoUring`] (one `io_uring_enter(2)` per batch of `IORING_OP_SEND`). Both send each
//! payload as one datagram to a fixed destination, over a connected socket.

use std::fmt;
use std::io;
use std::mem::MaybeUninit;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

use io_uring::{IoUring, opcode, types};

/// Datagrams per `sendmmsg` call (the kernel's `UIO_MAXIOV` allows 1024; 64 keeps the headers
/// on the stack).
pub(crate) const MMSG_BATCH: usize = 64;

/// Sends batches of datagrams with `sendmmsg(2)`.
#[derive(Debug)]
pub struct UdpSendmmsg {
    sock: UdpSocket,
    dest: SocketAddrV4,
    /// Packets of the batch being sent as a `qdisc::Driver` (allocated once).
    pub(crate) scratch: Vec<skb_pool::Skb>,
}

impl UdpSendmmsg {
    /// A socket bound to `bind` (port 0: any) and connected to `dest`.
    pub fn new(bind: SocketAddrV4, dest: SocketAddrV4) -> io::Result<UdpSendmmsg> {
        let sock = UdpSocket::bind(bind)?;
        sock.connect(dest)?;
        Ok(Self::from_socket(sock, dest))
    }

    /// Wraps a socket already connected to `dest`.
    pub fn from_socket(sock: UdpSocket, dest: SocketAddrV4) -> UdpSendmmsg {
        UdpSendmmsg {
            sock,
            dest,
            scratch: Vec::with_capacity(MMSG_BATCH),
        }
    }

    /// The socket.
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// The destination.
    pub fn dest(&self) -> SocketAddrV4 {
        self.dest
    }

    /// Sends every payload as one datagram, in order; blocks while the socket buffer is full.
    /// Returns the number sent (all of them unless an error stops the batch; an error after
    /// some were sent returns the count, an error before any returns the error).
    pub fn send_batch(&mut self, payloads: &[&[u8]]) -> io::Result<usize> {
        let mut sent = 0;
        while sent < payloads.len() {
            let chunk = &payloads[sent..(sent + MMSG_BATCH).min(payloads.len())];
            let mut iov = [MaybeUninit::<libc::iovec>::uninit(); MMSG_BATCH];
            // SAFETY: `mmsghdr` is plain old data; all-zero is a valid (empty) header.
            let mut msgs: [libc::mmsghdr; MMSG_BATCH] = unsafe { std::mem::zeroed() };
            for (i, p) in chunk.iter().enumerate() {
                let v = iov[i].write(libc::iovec {
                    iov_base: p.as_ptr() as *mut _,
                    iov_len: p.len(),
                });
                msgs[i].msg_hdr.msg_iov = v;
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: the first `chunk.len()` headers point to initialised iovecs over live
            // payload slices; the socket is connected so no address is needed.
            let n = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    chunk.len() as u32,
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return if sent > 0 { Ok(sent) } else { Err(e) };
            }
            sent += n as usize;
        }
        Ok(sent)
    }
}

/// Sends batches of datagrams with io_uring `IORING_OP_SEND`, one submission per batch.
pub struct UdpIoUring {
    ring: IoUring,
    sock: UdpSocket,
    dest: SocketAddrV4,
    depth: u32,
    /// Packets of the batch being sent as a `qdisc::Driver` (allocated once).
    pub(crate) scratch: Vec<skb_pool::Skb>,
}

impl fmt::Debug for UdpIoUring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpIoUring")
            .field("sock", &self.sock)
            .field("dest", &self.dest)
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl UdpIoUring {
    /// A socket bound to `bind` (port 0: any), connected to `dest`, with a ring of `depth`
    /// entries (the largest batch one submission carries).
    pub fn new(bind: SocketAddrV4, dest: SocketAddrV4, depth: u32) -> io::Result<UdpIoUring> {
        let sock = UdpSocket::bind(bind)?;
        sock.connect(dest)?;
        Self::from_socket(sock, dest, depth)
    }

    /// Wraps a socket already connected to `dest`.
    pub fn from_socket(sock: UdpSocket, dest: SocketAddrV4, depth: u32) -> io::Result<UdpIoUring> {
        let depth = depth.clamp(1, 4096).next_power_of_two();
        let ring = IoUring::new(depth)?;
        Ok(UdpIoUring {
            ring,
            sock,
            dest,
            depth,
            scratch: Vec::with_capacity(MMSG_BATCH),
        })
    }

    /// The socket.
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// The destination.
    pub fn dest(&self) -> SocketAddr {
        SocketAddr::V4(self.dest)
    }

    /// Sends every payload as one datagram; returns the number sent. Sends may complete out of
    /// order within a batch (each is its own SQE); the first failed send's error is returned if
    /// none succeeded.
    pub fn send_batch(&mut self, payloads: &[&[u8]]) -> io::Result<usize> {
        let fd = types::Fd(self.sock.as_raw_fd());
        let mut sent = 0usize;
        let mut first_err = None;
        for chunk in payloads.chunks(self.depth as usize) {
            {
                let mut sq = self.ring.submission();
                // Every earlier call reaped all it submitted, so the queue is empty; checked
                // before the first push, so that an error leaves no entry behind for the next
                // call to submit.
                if sq.capacity() - sq.len() < chunk.len() {
                    return Err(io::Error::other("io_uring submission queue full"));
                }
                for (i, p) in chunk.iter().enumerate() {
                    let sqe = opcode::Send::new(fd, p.as_ptr(), p.len() as u32)
                        .build()
                        .user_data(i as u64);
                    // SAFETY: the payload buffer outlives the operation: every entry pushed
                    // here is completed below before this call returns or touches `payloads`
                    // again (`wait_for`, on every path). The room was checked above.
                    let pushed = unsafe { sq.push(&sqe) };
                    assert!(
                        pushed.is_ok(),
                        "the submission queue had room for the chunk"
                    );
                }
            }
            self.wait_for(chunk.len(), |res| {
                if res >= 0 {
                    sent += 1;
                } else if first_err.is_none() {
                    first_err = Some(io::Error::from_raw_os_error(-res));
                }
            });
        }
        match first_err {
            Some(e) if sent == 0 => Err(e),
            _ => Ok(sent),
        }
    }

    /// Submits what is queued and waits for `n` completions, handing each result to `each`. Never
    /// returns before all `n` arrived: the kernel reads the callers' buffers until then.
    /// Transient failures of the wait (`EINTR`, `EAGAIN`, `EBUSY`) are retried; any other
    /// means the ring itself is broken, and the process aborts rather than return while the
    /// kernel may still read memory the caller is about to free.
    fn wait_for(&mut self, n: usize, mut each: impl FnMut(i32)) {
        let mut done = 0;
        while done < n {
            match self.ring.submit_and_wait(n - done) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) =>
                {
                    std::thread::yield_now();
                }
                Err(e) => {
                    eprintln!(
                        "io_uring_enter failed with {} sends in flight ({e}); aborting: the \
                         kernel may still read their buffers",
                        n - done
                    );
                    std::process::abort();
                }
            }
            for cqe in self.ring.completion() {
                done += 1;
                each(cqe.result());
            }
        }
    }
}

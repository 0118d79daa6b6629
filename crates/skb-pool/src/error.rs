//! Typed errors: each names its cause and the fix, and none of them is ever a panic.

use core::fmt;

/// Why a [`Pool`](crate::Pool) could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// `frame_count` was 0.
    ZeroFrames,
    /// `frame_size` was not a power of two (AF_XDP aligned chunks and the address arithmetic
    /// need one).
    FrameSizeNotPowerOfTwo(usize),
    /// `frame_size` was below [`MIN_FRAME_SIZE`](crate::MIN_FRAME_SIZE).
    FrameSizeTooSmall(usize),
    /// `frame_size` was above [`MAX_FRAME_SIZE`](crate::MAX_FRAME_SIZE).
    FrameSizeTooLarge(usize),
    /// `frame_count × frame_size` overflows, or `frame_count` exceeds `u32::MAX`.
    RegionTooLarge {
        /// Requested frame count.
        frame_count: usize,
        /// Requested frame size.
        frame_size: usize,
    },
    /// The default headroom leaves no room for data.
    HeadroomTooLarge {
        /// Requested headroom.
        headroom: usize,
        /// The frame size it must stay below.
        frame_size: usize,
    },
    /// `max_owners` was 0 or above [`MAX_OWNERS`](crate::MAX_OWNERS).
    BadOwnerCount(usize),
    /// `remote_batch` or `cache_max` was 0.
    ZeroBatch,
    /// `PerCpu::Rseq` was requested but restartable sequences are not usable here.
    RseqUnavailable(&'static str),
    /// `cpus` was 0 or above [`MAX_CPUS`](crate::MAX_CPUS).
    BadCpuCount(usize),
    /// `mmap` of the region failed.
    Mmap {
        /// The OS error number.
        errno: i32,
        /// Whether huge pages (`MAP_HUGETLB`) were requested.
        huge: bool,
        /// The mapping length in bytes.
        len: usize,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BuildError::ZeroFrames => f.write_str(
                "frame_count is 0: a pool needs at least one frame (the default is 4096)",
            ),
            BuildError::FrameSizeNotPowerOfTwo(s) => write!(
                f,
                "frame_size {s} is not a power of two: use 2048 or 4096 (AF_XDP aligned chunks)"
            ),
            BuildError::FrameSizeTooSmall(s) => write!(
                f,
                "frame_size {s} is below the minimum {}: use 2048 or 4096",
                crate::MIN_FRAME_SIZE
            ),
            BuildError::FrameSizeTooLarge(s) => write!(
                f,
                "frame_size {s} is above the maximum {}: use 2048 or 4096",
                crate::MAX_FRAME_SIZE
            ),
            BuildError::RegionTooLarge {
                frame_count,
                frame_size,
            } => write!(
                f,
                "{frame_count} frames of {frame_size} bytes do not fit one region (at most \
                 2^30 frames and usize::MAX bytes): use fewer frames"
            ),
            BuildError::HeadroomTooLarge {
                headroom,
                frame_size,
            } => write!(
                f,
                "headroom {headroom} leaves no data room in a {frame_size}-byte frame: use a \
                 smaller headroom (256, XDP_PACKET_HEADROOM, is the default)"
            ),
            BuildError::BadOwnerCount(n) => write!(
                f,
                "max_owners {n} is out of range: use 1..={} (one per thread that allocates or \
                 frees with a handle)",
                crate::MAX_OWNERS
            ),
            BuildError::ZeroBatch => {
                f.write_str("remote_batch and cache_max must be at least 1 (defaults 32 and 256)")
            }
            BuildError::RseqUnavailable(why) => write!(
                f,
                "PerCpu::Rseq is not available: {why}; use PerCpu::Auto (falls back to the \
                 locked per-CPU caches) or PerCpu::Locked"
            ),
            BuildError::BadCpuCount(n) => write!(
                f,
                "cpus {n} is out of range: use 1..={} (the default is the highest CPU of the \
                 affinity mask + 1)",
                crate::MAX_CPUS
            ),
            BuildError::Mmap {
                errno,
                huge: true,
                len,
            } => write!(
                f,
                "mmap of {len} bytes with MAP_HUGETLB failed: {} (errno {errno}); reserve huge \
                 pages (`echo N > /proc/sys/vm/nr_hugepages`, N ≥ {} for 2 MiB pages), or choose \
                 HugePages::Prefer to fall back to normal pages",
                std::io::Error::from_raw_os_error(errno),
                len.div_ceil(crate::region::HUGE_PAGE_SIZE)
            ),
            BuildError::Mmap {
                errno,
                huge: false,
                len,
            } => write!(
                f,
                "mmap of {len} bytes failed: {} (errno {errno}); use fewer or smaller frames, or \
                 raise the memory limit (`ulimit -v`, vm.overcommit_memory)",
                std::io::Error::from_raw_os_error(errno)
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// Why an owner handle could not allocate or register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolError {
    /// Every frame is in use, in flight, or waiting in another thread's unflushed free batch.
    Exhausted,
    /// Every owner slot is taken by a live [`PoolHandle`](crate::PoolHandle).
    TooManyOwners {
        /// The configured `max_owners`.
        max_owners: usize,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PoolError::Exhausted => f.write_str(
                "frame pool exhausted: every frame is in use or in flight; free or complete \
                 frames (freeing threads should call PoolHandle::flush_frees in their idle \
                 loop), or build the pool with more frames",
            ),
            PoolError::TooManyOwners { max_owners } => write!(
                f,
                "all {max_owners} owner slots are taken: drop an idle PoolHandle, or build the \
                 pool with a larger max_owners"
            ),
        }
    }
}

impl std::error::Error for PoolError {}

/// Why an AF_XDP ring address could not be turned back into an [`Skb`](crate::Skb).
/// The address was validated without dereferencing anything in the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddrError {
    /// The address (plus length, for RX) lies outside the region.
    OutOfRegion {
        /// The address given.
        addr: u64,
        /// The region length.
        region_len: u64,
    },
    /// The frame is in flight, but was handed out with a different address.
    Misaligned {
        /// The address given.
        addr: u64,
        /// The address the frame was handed out with.
        expected: u64,
    },
    /// The frame is not in flight: a duplicate completion, or a forged address.
    NotInFlight {
        /// The address given.
        addr: u64,
    },
}

impl fmt::Display for AddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AddrError::OutOfRegion { addr, region_len } => write!(
                f,
                "address {addr:#x} is outside the {region_len}-byte region: the ring entry is \
                 corrupt or belongs to another UMEM"
            ),
            AddrError::Misaligned { addr, expected } => write!(
                f,
                "address {addr:#x} does not match the frame's in-flight address {expected:#x}: \
                 pass back exactly what Skb::into_addr returned"
            ),
            AddrError::NotInFlight { addr } => write!(
                f,
                "frame at {addr:#x} is not in flight: a duplicate or forged completion (each \
                 address from Skb::into_addr comes back once)"
            ),
        }
    }
}

impl std::error::Error for AddrError {}

/// A refused [`Skb`](crate::Skb) data operation (`skb_put`, `skb_push`, `skb_pull`,
/// `skb_reserve`); the buffer is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkbError {
    /// `put` asked for more bytes than the tailroom holds.
    NoTailroom {
        /// Bytes asked for.
        need: usize,
        /// Tailroom left.
        have: usize,
    },
    /// `push` asked for more bytes than the headroom holds.
    NoHeadroom {
        /// Bytes asked for.
        need: usize,
        /// Headroom left.
        have: usize,
    },
    /// `pull` asked for more bytes than the data holds.
    TooShort {
        /// Bytes asked for.
        need: usize,
        /// Data length.
        have: usize,
    },
    /// `reserve` on a buffer that already holds data.
    NotEmpty {
        /// Data length.
        len: usize,
    },
}

impl fmt::Display for SkbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SkbError::NoTailroom { need, have } => write!(
                f,
                "put of {need} bytes exceeds the tailroom of {have}: the packet is larger than \
                 a frame; use a larger frame_size or a smaller headroom"
            ),
            SkbError::NoHeadroom { need, have } => write!(
                f,
                "push of {need} bytes exceeds the headroom of {have}: reserve more headroom \
                 (PoolBuilder::headroom) before writing the payload"
            ),
            SkbError::TooShort { need, have } => write!(
                f,
                "pull of {need} bytes from a {have}-byte packet: the packet is truncated; check \
                 its length before parsing"
            ),
            SkbError::NotEmpty { len } => write!(
                f,
                "reserve on a buffer holding {len} bytes: reserve headroom before putting data"
            ),
        }
    }
}

impl std::error::Error for SkbError {}

//! [`PoolBuilder`]: a pool's settings, their limits and defaults, and their validation, which
//! turns every bad value into a [`BuildError`] naming it before anything is mapped.
//!
//! This file must not touch a built pool's state: [`PoolBuilder::build`] hands the validated
//! settings to `pool.rs`.

use core::fmt;

use crate::error::BuildError;
use crate::percpu::{MAX_CPUS, PerCpu, PerCpuState, RefillOrder};
use crate::pool::{Config, Pool, PoolInner};
use crate::region::{HugePages, Region};
use crate::remote::Wake;

/// Smallest frame size: 2048 (an AF_XDP chunk must be at least that).
pub const MIN_FRAME_SIZE: usize = 2048;
/// Largest frame size: 1 MiB.
pub const MAX_FRAME_SIZE: usize = 1 << 20;
/// Most owner handles a pool can have at once (owner ids are `u16`).
pub const MAX_OWNERS: usize = 4096;
/// Most frames one pool holds: a packed batch names its frames by metadata-line deltas in an
/// `i32`, which must span the whole side array.
pub const MAX_FRAME_COUNT: usize = 1 << 30;
/// Default frame size.
pub const DEFAULT_FRAME_SIZE: usize = 2048;
/// Default frame count.
pub const DEFAULT_FRAME_COUNT: usize = 4096;
/// Default headroom reserved in front of the data: 256, the kernel's `XDP_PACKET_HEADROOM`.
pub const DEFAULT_HEADROOM: usize = 256;
/// Default defer limit per owner: the kernel's `net.core.skb_defer_max` (128 since Linux 6.19).
pub const DEFAULT_DEFER_MAX: usize = 128;
/// Default number of frames a freeing thread batches per owner before pushing them.
pub const DEFAULT_REMOTE_BATCH: usize = 32;
/// Default owner cache size above which half the cache goes back to the depot.
pub const DEFAULT_CACHE_MAX: usize = 256;
/// Default number of owner slots.
pub const DEFAULT_MAX_OWNERS: usize = 64;

/// Builder for a [`Pool`]; every value is validated by [`build`](PoolBuilder::build).
#[derive(Clone)]
pub struct PoolBuilder {
    frame_size: usize,
    frame_count: usize,
    headroom: usize,
    huge_pages: HugePages,
    populate: bool,
    defer_max: usize,
    remote_batch: usize,
    cache_max: usize,
    max_owners: usize,
    per_cpu: PerCpu,
    refill_order: RefillOrder,
    cpus: Option<usize>,
    cpu_wake: Option<Wake>,
}

impl fmt::Debug for PoolBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuilder")
            .field("frame_size", &self.frame_size)
            .field("frame_count", &self.frame_count)
            .field("per_cpu", &self.per_cpu)
            .field("refill_order", &self.refill_order)
            .field("cpus", &self.cpus)
            .finish_non_exhaustive()
    }
}

impl Default for PoolBuilder {
    fn default() -> Self {
        PoolBuilder {
            frame_size: DEFAULT_FRAME_SIZE,
            frame_count: DEFAULT_FRAME_COUNT,
            headroom: DEFAULT_HEADROOM,
            huge_pages: HugePages::No,
            populate: true,
            defer_max: DEFAULT_DEFER_MAX,
            remote_batch: DEFAULT_REMOTE_BATCH,
            cache_max: DEFAULT_CACHE_MAX,
            max_owners: DEFAULT_MAX_OWNERS,
            per_cpu: PerCpu::Auto,
            refill_order: RefillOrder::Freed,
            cpus: None,
            cpu_wake: None,
        }
    }
}

impl PoolBuilder {
    /// Bytes per frame: a power of two in `2048..=1 MiB` (default 2048).
    pub fn frame_size(mut self, bytes: usize) -> Self {
        self.frame_size = bytes;
        self
    }

    /// Number of frames (default 4096).
    pub fn frame_count(mut self, n: usize) -> Self {
        self.frame_count = n;
        self
    }

    /// Headroom every new `Skb` starts with, below the frame size (default 256).
    pub fn headroom(mut self, bytes: usize) -> Self {
        self.headroom = bytes;
        self
    }

    /// Huge-page backing (default [`HugePages::No`]).
    pub fn huge_pages(mut self, huge: HugePages) -> Self {
        self.huge_pages = huge;
        self
    }

    /// Prefault the region with `MAP_POPULATE` (default `true`).
    pub fn populate(mut self, yes: bool) -> Self {
        self.populate = yes;
        self
    }

    /// Per-owner defer limit, the kernel's `skb_defer_max` (default 128); 0, 1 or 2 disables
    /// deferral, sending every remote free to the overflow list (with 2 no batch could cross
    /// the half mark and kick the owner without passing the limit).
    ///
    /// Size it for the handoff that brings frames back: a thread owner can be off the CPU for
    /// a whole time slice (a kernel owner is run by its IPI within microseconds), and every
    /// frame of it that comes back meanwhile must fit. With a handoff queue of `q` slots, a
    /// freer batching `remote_batch` frames and an owner that drains every poll iteration,
    /// that is `defer_max > q + remote_batch + 2`; anything less sends the excess to the
    /// overflow list by construction (128 with a 256-slot queue: 5 of 8 batches).
    pub fn defer_max(mut self, n: usize) -> Self {
        self.defer_max = n;
        self
    }

    /// Frames a freeing thread batches per owner before pushing them (default 32, clamped to
    /// `defer_max / 4`, at least 1).
    pub fn remote_batch(mut self, n: usize) -> Self {
        self.remote_batch = n;
        self
    }

    /// Owner cache size above which half of it goes back to the shared depot (default 256).
    pub fn cache_max(mut self, n: usize) -> Self {
        self.cache_max = n;
        self
    }

    /// Number of owner slots, i.e. handles alive at once (default 64, at most [`MAX_OWNERS`]).
    pub fn max_owners(mut self, n: usize) -> Self {
        self.max_owners = n;
        self
    }

    /// How the per-CPU caches behind [`Pool::alloc`] work (default [`PerCpu::Auto`]).
    pub fn per_cpu(mut self, mode: PerCpu) -> Self {
        self.per_cpu = mode;
        self
    }

    /// In which order a per-CPU cache hands out frames that came home to it (default
    /// [`RefillOrder::Freed`]; see [`RefillOrder`] for when [`RefillOrder::Address`] pays).
    /// Per-owner handles keep their own order.
    pub fn refill_order(mut self, order: RefillOrder) -> Self {
        self.refill_order = order;
        self
    }

    /// Size of the per-CPU table (default: the highest CPU of the building thread's affinity
    /// mask + 1). Threads on a CPU past it take the shared path.
    pub fn cpus(mut self, n: usize) -> Self {
        self.cpus = Some(n);
        self
    }

    /// The callback a CPU's defer list kicks when remote frees fill it past half of
    /// `defer_max` (once per fill cycle), like [`Pool::handle_with_wake`]'s.
    pub fn cpu_wake(mut self, wake: Wake) -> Self {
        self.cpu_wake = Some(wake);
        self
    }

    /// Validates the configuration, maps the region and builds the pool.
    ///
    /// # Errors
    ///
    /// A [`BuildError`] naming the bad value or the failed `mmap` and how to fix it.
    pub fn build(self) -> Result<Pool, BuildError> {
        let PoolBuilder {
            frame_size,
            frame_count,
            headroom,
            ..
        } = self;
        if frame_count == 0 {
            return Err(BuildError::ZeroFrames);
        }
        if !frame_size.is_power_of_two() {
            return Err(BuildError::FrameSizeNotPowerOfTwo(frame_size));
        }
        if frame_size < MIN_FRAME_SIZE {
            return Err(BuildError::FrameSizeTooSmall(frame_size));
        }
        if frame_size > MAX_FRAME_SIZE {
            return Err(BuildError::FrameSizeTooLarge(frame_size));
        }
        if frame_count > MAX_FRAME_COUNT || frame_count.checked_mul(frame_size).is_none() {
            return Err(BuildError::RegionTooLarge {
                frame_count,
                frame_size,
            });
        }
        if headroom >= frame_size {
            return Err(BuildError::HeadroomTooLarge {
                headroom,
                frame_size,
            });
        }
        if self.max_owners == 0 || self.max_owners > MAX_OWNERS {
            return Err(BuildError::BadOwnerCount(self.max_owners));
        }
        if self.remote_batch == 0 || self.cache_max == 0 {
            return Err(BuildError::ZeroBatch);
        }
        let cpus = self.cpus.unwrap_or_else(crate::percpu::cpus_from_affinity);
        if cpus == 0 || cpus > MAX_CPUS {
            return Err(BuildError::BadCpuCount(cpus));
        }
        let mode = crate::percpu::resolve(self.per_cpu).map_err(BuildError::RseqUnavailable)?;
        // At most half the pool in per-CPU caches (one frame a CPU at least, so a pool of fewer
        // than two frames a CPU may have them all cached): a cached frame is handed out by its
        // CPU, and reached from another only by a taking (an interrupt), when all else is dry.
        let cpu_cap = self.cache_max.min(frame_count / (2 * cpus)).max(1);
        let region = Region::map(frame_count, frame_size, self.huge_pages, self.populate)?;
        let cfg = Config {
            headroom: headroom as u32,
            defer_max: self.defer_max,
            remote_batch: self.remote_batch.min((self.defer_max / 4).max(1)),
            cache_max: self.cache_max,
            shift: frame_size.trailing_zeros(),
        };
        Ok(Pool {
            inner: PoolInner::create(
                region,
                cfg,
                self.max_owners,
                PerCpuState::new(
                    mode,
                    self.refill_order,
                    cpus,
                    cpu_cap,
                    cfg.remote_batch,
                    self.cpu_wake,
                ),
            ),
        })
    }
}

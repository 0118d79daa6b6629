//! Restartable sequences (Linux `rseq(2)`): the ABI structs, finding or registering the calling
//! thread's rseq area, the process's `membarrier` registration, and the per-CPU critical
//! sections the per-CPU caches use (pop, push, their bulk forms, add), written in x86_64 `asm!`.
//!
//! This file owns nothing of the pool: it knows a per-CPU word (`count | ref delta`), an item
//! array and a flag byte, and commits one store to the word. What the word means is
//! the business of `percpu/`. Under `--cfg lockless_loom` and on other architectures the critical
//! sections are compiled out ([`SUPPORTED`](crate::rseq::SUPPORTED) is `false`): `PerCpu::Auto`
//! pools fall back to `PerCpu::Locked`, and building one with `PerCpu::Rseq` fails with
//! `BuildError::RseqUnavailable`.
//!
//! # The area
//!
//! glibc ≥ 2.35 registers one area per thread and exports where it is: `__rseq_offset` (from the
//! thread pointer) and `__rseq_size` (0 when it did not register, e.g. with
//! `GLIBC_TUNABLES=glibc.pthread.rseq=0`). We look both up with `dlsym`, so the same binary runs
//! on older glibc and musl; when glibc registered nothing, we register a thread-local area of our
//! own (and unregister it in that thread-local's destructor). Either way the abort signature is
//! glibc's x86_64 `RSEQ_SIG`, `0x53053053`, which the kernel checks in the 4 bytes before every
//! abort handler.
//!
//! # A critical section
//!
//! Each section stores the address of its `struct rseq_cs` descriptor into `rseq->rseq_cs`,
//! then, between `start_ip` and the commit, checks that the thread still runs on the CPU whose
//! cache it indexes (`rseq->cpu_id`) and that the cache's flag byte is clear (no taker holds it,
//! the pool is not dying), loads the word, does its work and commits with one store. If the
//! thread is preempted, migrated or signalled inside that range, the kernel moves it to the
//! abort handler instead of resuming it, and the section reports `ABORT`; the caller retries.
//! No atomic read-modify-write anywhere.

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
use core::cell::Cell;

/// Whether this build has rseq critical sections (x86_64 Linux, not under loom).
pub const SUPPORTED: bool = cfg!(all(
    target_arch = "x86_64",
    target_os = "linux",
    not(lockless_loom)
));

/// The abort-handler signature (glibc's `RSEQ_SIG` for x86_64).
pub const RSEQ_SIG: u32 = 0x5305_3053;

/// `struct rseq` of `linux/rseq.h` (the original 32-byte ABI; later kernels append fields
/// after `flags` within the registered size, which we never read).
#[repr(C, align(32))]
#[derive(Debug)]
pub struct RseqAbi {
    /// `cpu_id_start`: a CPU number, always valid once registered.
    pub cpu_id_start: u32,
    /// `cpu_id`: the current CPU, or `RSEQ_CPU_ID_UNINITIALIZED` (-1) /
    /// `RSEQ_CPU_ID_REGISTRATION_FAILED` (-2).
    pub cpu_id: u32,
    /// `rseq_cs`: the address of the current critical section's descriptor, or 0.
    pub rseq_cs: u64,
    /// `flags` (deprecated restart flags; 0).
    pub flags: u32,
}

/// `struct rseq_cs` of `linux/rseq.h`: one critical section's descriptor.
#[repr(C, align(32))]
#[derive(Debug)]
pub struct RseqCs {
    /// `version`: 0.
    pub version: u32,
    /// `flags`: 0.
    pub flags: u32,
    /// `start_ip`: first instruction of the section.
    pub start_ip: u64,
    /// `post_commit_offset`: the section's length, up to just after the commit store.
    pub post_commit_offset: u64,
    /// `abort_ip`: where the kernel sends an interrupted thread (preceded by [`RSEQ_SIG`]).
    pub abort_ip: u64,
}

/// What a critical section reports.
#[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Committed.
    Done,
    /// The thread was not on the expected CPU (checked inside the section).
    WrongCpu,
    /// The flag byte is set: a taker holds the cache (or stack), or the pool is dying and
    /// per-CPU reference counts are frozen. The caller takes another path.
    Flagged,
    /// Pop of an empty cache, or push to a full one.
    Refused,
    /// The kernel aborted the section (preemption, migration, signal).
    Abort,
}

/// The per-CPU cache a section works on: its commit word, its item array of `cap` slots, and
/// its flag byte (set while a taker holds it, and for good once the pool is dying).
#[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
#[derive(Clone, Copy)]
pub(crate) struct CacheRef {
    pub(crate) word: *mut u64,
    pub(crate) items: *mut usize,
    pub(crate) cap: u64,
    pub(crate) flag: *const u8,
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
mod imp {
    use super::{CacheRef, Cell, RSEQ_SIG, RseqAbi, Status};
    use std::sync::OnceLock;

    /// A thread's own area, for when glibc registered none. Unregistered when the thread-local
    /// is destroyed, before the thread's TLS goes away.
    struct OwnArea(Box<RseqAbi>);

    impl Drop for OwnArea {
        fn drop(&mut self) {
            AREA.with(|a| a.set(UNAVAILABLE));
            let p: *mut RseqAbi = &mut *self.0;
            // SAFETY: unregistering the area registered in `own_area` with the same arguments;
            // the kernel stops writing it before the box is freed below.
            unsafe { libc::syscall(libc::SYS_rseq, p, 32u32, 1i32, RSEQ_SIG) };
        }
    }

    /// Marker: this thread has no usable area.
    const UNAVAILABLE: *mut RseqAbi = core::ptr::dangling_mut();

    std::thread_local! {
        static AREA: Cell<*mut RseqAbi> = const { Cell::new(core::ptr::null_mut()) };
        static OWN: Cell<Option<OwnArea>> = const { Cell::new(None) };
    }

    /// glibc's `(__rseq_offset, __rseq_size)`, if it exports them.
    fn glibc() -> Option<(isize, u32)> {
        static GLIBC: OnceLock<Option<(isize, u32)>> = OnceLock::new();
        *GLIBC.get_or_init(|| {
            // SAFETY: dlsym with NUL-terminated names; a null result means not exported.
            let (off, size) = unsafe {
                (
                    libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()),
                    libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()),
                )
            };
            if off.is_null() || size.is_null() {
                return None;
            }
            // SAFETY: glibc defines these as `const ptrdiff_t` and `const unsigned int`, set
            // before any user code runs.
            Some(unsafe { (*(off as *const isize), *(size as *const u32)) })
        })
    }

    /// Whether glibc registered the areas (as opposed to us).
    pub(crate) fn glibc_registered() -> bool {
        glibc().is_some_and(|(_, size)| size > 0)
    }

    fn thread_pointer() -> *mut u8 {
        let tp: *mut u8;
        // SAFETY: on x86_64 Linux `%fs:0` holds the thread pointer (the TCB's self pointer),
        // which is how glibc defines `__rseq_offset`'s base; a plain load, no side effects.
        unsafe {
            core::arch::asm!("movq %fs:0, {}", out(reg) tp, options(att_syntax, nostack, readonly, preserves_flags));
        }
        tp
    }

    #[cold]
    fn find_area() -> *mut RseqAbi {
        let area = match glibc() {
            Some((off, size)) if size > 0 => {
                let p = thread_pointer().wrapping_offset(off).cast::<RseqAbi>();
                // SAFETY: glibc registered this thread's area at tp + offset; reading its cpu_id.
                let cpu = unsafe { core::ptr::read_volatile(&raw const (*p).cpu_id) };
                if (cpu as i32) < 0 { UNAVAILABLE } else { p }
            }
            _ => own_area(),
        };
        // A destroyed thread-local: no area, nothing to record.
        let _ = AREA.try_with(|a| a.set(area));
        area
    }

    fn own_area() -> *mut RseqAbi {
        let mut boxed = Box::new(RseqAbi {
            cpu_id_start: 0,
            cpu_id: u32::MAX,
            rseq_cs: 0,
            flags: 0,
        });
        let p: *mut RseqAbi = &mut *boxed;
        // SAFETY: registering a 32-byte, 32-aligned area that lives until `OwnArea::drop`
        // unregisters it (the thread-local below owns it).
        let rc = unsafe { libc::syscall(libc::SYS_rseq, p, 32u32, 0i32, RSEQ_SIG) };
        if rc != 0 {
            return UNAVAILABLE;
        }
        if OWN.try_with(|o| o.set(Some(OwnArea(boxed)))).is_err() {
            // Thread-locals are being destroyed: undo, and go without.
            // SAFETY: the registration just made, with the same arguments.
            unsafe { libc::syscall(libc::SYS_rseq, p, 32u32, 1i32, RSEQ_SIG) };
            return UNAVAILABLE;
        }
        p
    }

    /// The calling thread's registered area, registering one if needed; `None` if this thread
    /// cannot have one (registration refused, thread-locals already destroyed).
    #[inline(always)]
    pub(crate) fn area() -> Option<*mut RseqAbi> {
        let p = AREA.try_with(Cell::get).unwrap_or(UNAVAILABLE);
        let p = if p.is_null() { find_area() } else { p };
        (p != UNAVAILABLE).then_some(p)
    }

    /// The CPU the kernel last stored in `area`.
    #[inline]
    pub(crate) fn cpu(area: *mut RseqAbi) -> u32 {
        // SAFETY: `area` is this thread's registered area; the kernel updates `cpu_id` before
        // returning to user space, so a volatile load sees the latest value.
        unsafe { core::ptr::read_volatile(&raw const (*area).cpu_id) }
    }

    /// Registers the process for `MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ` (idempotent).
    pub(crate) fn register_membarrier() -> bool {
        static OK: OnceLock<bool> = OnceLock::new();
        // SAFETY: membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0).
        *OK.get_or_init(
            || unsafe { libc::syscall(libc::SYS_membarrier, 1i32 << 8, 0u32, 0i32) } == 0,
        )
    }

    /// Restarts every rseq critical section of this process running on any CPU, and orders
    /// every thread's memory accesses (`MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ`).
    pub(crate) fn membarrier_rseq() -> bool {
        // SAFETY: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0); the process
        // registered in `register_membarrier` when the pool was built.
        unsafe { libc::syscall(libc::SYS_membarrier, 1i32 << 7, 0u32, 0i32) == 0 }
    }

    /// Restarts every rseq critical section of this process running on CPU `cpu`, and orders
    /// that CPU's memory accesses with the caller's (`MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ`
    /// with `MEMBARRIER_CMD_FLAG_CPU`, Linux 5.10); every CPU where the kernel cannot target one.
    /// A section on a CPU's cache commits only while running on that CPU (a preempted or
    /// migrated thread restarts when it runs again), so this one interrupt is enough.
    pub(crate) fn membarrier_rseq_on(cpu: u32) -> bool {
        let Ok(cpu) = i32::try_from(cpu) else {
            return membarrier_rseq();
        };
        // SAFETY: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, MEMBARRIER_CMD_FLAG_CPU,
        // cpu); the process registered in `register_membarrier` when the pool was built.
        (unsafe { libc::syscall(libc::SYS_membarrier, 1i32 << 7, 1u32, cpu) } == 0)
            || membarrier_rseq()
    }

    #[inline(always)]
    fn status(st: u32) -> Status {
        if st == 0 {
            return Status::Done;
        }
        failed(st)
    }

    #[cold]
    #[inline(never)]
    fn failed(st: u32) -> Status {
        match st {
            1 => Status::WrongCpu,
            2 => Status::Flagged,
            3 => Status::Refused,
            _ => Status::Abort,
        }
    }

    /// The frame of every section: the descriptor, its installation, the CPU and flag checks
    /// at the start, the body (ending in the commit store) falling through with status 0, the
    /// other status exits and the abort handler behind its signature out of line (in
    /// `__rseq_failure`, so the committed path takes no jump), with the operands every section
    /// has (`rseq`, `cpu`, `flag`, `word`, the scratch `tmp` and `w`, and the status `st`).
    /// `cpu` and `flag` are clobbered: past the checks a body may use them as scratch.
    macro_rules! section {
        ($area:expr, $cpu:expr, $c:expr, $st:ident; $($body:literal,)* ; $($ops:tt)*) => {
            core::arch::asm!(
                ".pushsection __rseq_cs, \"aw\"",
                ".balign 32",
                "3:",
                ".long 0, 0",
                ".quad 4f, (5f - 4f), 6f",
                ".popsection",
                "leaq 3b(%rip), {tmp}",
                "movq {tmp}, 8({rseq})",
                "4:",
                "cmpl {cpu:e}, 4({rseq})",
                "jne 7f",
                "cmpb $0, ({flag})",
                "jne 8f",
                $($body,)*
                "5:",
                "xorl {st:e}, {st:e}",
                ".pushsection __rseq_failure, \"ax\"",
                "7:",
                "movl $1, {st:e}",
                "jmp 10f",
                "8:",
                "movl $2, {st:e}",
                "jmp 10f",
                "9:",
                "movl $3, {st:e}",
                "jmp 10f",
                ".byte 0x0f, 0xb9, 0x3d",
                ".long 0x53053053",
                "6:",
                "movl $4, {st:e}",
                "jmp 10f",
                ".popsection",
                "10:",
                $($ops)*
                rseq = in(reg) $area,
                cpu = inout(reg) $cpu => _,
                flag = inout(reg) $c.flag => _,
                word = in(reg) $c.word,
                tmp = out(reg) _,
                w = out(reg) _,
                st = lateout(reg) $st,
                options(att_syntax, nostack)
            )
        };
    }

    /// Pops the top item of a per-CPU cache if the count (low 32 bits of `*word`) is not zero,
    /// committing `*word += delta`, and asks for the line of the item
    /// [`ALLOC_AHEAD`](crate::meta::ALLOC_AHEAD) below it for a write (the frame the cache hands
    /// out that many pops later).
    ///
    /// # Safety
    ///
    /// `area` is the calling thread's registered area; `c`'s word, items (`cap` slots) and
    /// flag are live, and the word and items are only ever written by sections on CPU `cpu` and
    /// by a taker that set the flag and then restarted every section on that CPU (never mixed
    /// with the locked path).
    #[inline(always)]
    pub(crate) unsafe fn pop(
        area: *mut RseqAbi,
        cpu: u32,
        c: CacheRef,
        delta: u64,
    ) -> (Status, usize) {
        let st: u32;
        let item: usize;
        // SAFETY: the caller's contract; the section reads `*word`, `items[count - 1]`,
        // `items[count - 1 - ALLOC_AHEAD]` (when `count` is larger; an address it only
        // prefetches) and `*flag`, writes only `*word` (its commit) and `area->rseq_cs`, and a
        // preempted, migrated or signalled thread is sent to the abort label instead of
        // committing.
        unsafe {
            section!(
                area, cpu, c, st;
                "movq ({word}), {w}",
                "testl {w:e}, {w:e}",
                "jz 9f",
                "movl {w:e}, {tmp:e}",
                "movq -8({items},{tmp},8), {item}",
                // Ask for the line of the item `ALLOC_AHEAD` below for a write (a hint: an
                // abort after it changes nothing).
                "cmpl ${ahead}, {tmp:e}",
                "jbe 12f",
                "movq -{below}({items},{tmp},8), {pf}",
                "prefetchw ({pf})",
                "12:",
                "addq {delta}, {w}",
                "movq {w}, ({word})",
                ;
                items = in(reg) c.items,
                delta = in(reg) delta,
                item = inout(reg) 0usize => item,
                pf = out(reg) _,
                ahead = const crate::meta::ALLOC_AHEAD,
                below = const 8 * (crate::meta::ALLOC_AHEAD + 1),
            );
        }
        (status(st), item)
    }

    /// Pushes `item` onto a per-CPU cache if its count is below `cap`, committing
    /// `*word += delta`.
    ///
    /// # Safety
    ///
    /// As [`pop`].
    #[inline(always)]
    pub(crate) unsafe fn push(
        area: *mut RseqAbi,
        cpu: u32,
        c: CacheRef,
        item: usize,
        delta: u64,
    ) -> Status {
        let st: u32;
        // SAFETY: as in `pop`; the item store lands above the committed count, where nobody
        // looks until a later commit on this CPU, so an aborted push leaves no trace.
        unsafe {
            section!(
                area, cpu, c, st;
                "movq ({word}), {w}",
                "movl {w:e}, {tmp:e}",
                "cmpq {cap}, {tmp}",
                "jae 9f",
                "movq {item}, ({items},{tmp},8)",
                "addq {delta}, {w}",
                "movq {w}, ({word})",
                ;
                items = in(reg) c.items,
                cap = in(reg) c.cap,
                item = in(reg) item,
                delta = in(reg) delta,
            );
        }
        status(st)
    }

    /// Pops up to `n ≥ 1` items of a per-CPU cache into `out` — `k = min(n, count)`, the top
    /// `k` items, the top one last — and commits `count − k` and `k` more references
    /// (`*word += k·2^32 − k`). Returns the status and `k` (0 unless `Done`).
    ///
    /// # Safety
    ///
    /// As [`pop`]; `out` is valid for `n` writes and no other thread reads it meanwhile.
    #[inline(always)]
    pub(crate) unsafe fn pop_bulk(
        area: *mut RseqAbi,
        cpu: u32,
        c: CacheRef,
        out: *mut usize,
        n: usize,
    ) -> (Status, usize) {
        let st: u32;
        let k: usize;
        // SAFETY: as in `pop`; besides, the section writes `out[..k]` (the caller's, private),
        // which an aborted attempt leaves for the retry to overwrite.
        unsafe {
            section!(
                area, cpu, c, st;
                "movq ({word}), {w}",
                "movl {w:e}, {tmp:e}",
                "testl {tmp:e}, {tmp:e}",
                "jz 9f",
                "cmpq {k}, {tmp}",
                "cmovbq {tmp}, {k}",
                "subq {k}, {tmp}",
                "leaq ({items},{tmp},8), {tmp}",
                "xorl {cpu:e}, {cpu:e}",
                "11:",
                "movq ({tmp},{cpu:r},8), {flag}",
                "movq {flag}, ({out},{cpu:r},8)",
                "incq {cpu:r}",
                "cmpq {k}, {cpu:r}",
                "jb 11b",
                "movq {k}, {tmp}",
                "shlq $32, {tmp}",
                "subq {k}, {tmp}",
                "addq {tmp}, {w}",
                "movq {w}, ({word})",
                ;
                items = in(reg) c.items,
                out = in(reg) out,
                k = inout(reg) n => k,
            );
        }
        let st = status(st);
        (st, if st == Status::Done { k } else { 0 })
    }

    /// Pushes up to `n ≥ 1` items from `items_in` onto a per-CPU cache — `k = min(n, cap −
    /// count)`, the first `k` — and commits `*word += k · per` (wrapping: `per` is the word
    /// delta of one item, e.g. `1 − 2^32` for a frame that gives back its reference). Returns
    /// the status and `k` (0 unless `Done`).
    ///
    /// # Safety
    ///
    /// As [`pop`]; `items_in` is valid for `n` reads.
    #[inline(always)]
    pub(crate) unsafe fn push_bulk(
        area: *mut RseqAbi,
        cpu: u32,
        c: CacheRef,
        items_in: *const usize,
        n: usize,
        per: u64,
    ) -> (Status, usize) {
        let st: u32;
        let k: usize;
        // SAFETY: as in `push`: the item stores land above the committed count, where nobody
        // looks until a later commit on this CPU, so an aborted push leaves no trace.
        unsafe {
            section!(
                area, cpu, c, st;
                "movq ({word}), {w}",
                "movl {w:e}, {tmp:e}",
                "movq {cap}, {flag}",
                "subq {tmp}, {flag}",
                "jbe 9f",
                "cmpq {k}, {flag}",
                "cmovbq {flag}, {k}",
                "leaq ({items},{tmp},8), {tmp}",
                "xorl {cpu:e}, {cpu:e}",
                "11:",
                "movq ({src},{cpu:r},8), {flag}",
                "movq {flag}, ({tmp},{cpu:r},8)",
                "incq {cpu:r}",
                "cmpq {k}, {cpu:r}",
                "jb 11b",
                "movq {k}, {tmp}",
                "imulq {per}, {tmp}",
                "addq {tmp}, {w}",
                "movq {w}, ({word})",
                ;
                items = in(reg) c.items,
                cap = in(reg) c.cap,
                src = in(reg) items_in,
                per = in(reg) per,
                k = inout(reg) n => k,
            );
        }
        let st = status(st);
        (st, if st == Status::Done { k } else { 0 })
    }

    /// Commits `*word += delta` on CPU `cpu`.
    ///
    /// # Safety
    ///
    /// As [`pop`].
    #[inline(always)]
    pub(crate) unsafe fn add(area: *mut RseqAbi, cpu: u32, c: CacheRef, delta: u64) -> Status {
        let st: u32;
        // SAFETY: as in `pop`; the section writes only `*word`.
        unsafe {
            section!(
                area, cpu, c, st;
                "movq ({word}), {w}",
                "addq {delta}, {w}",
                "movq {w}, ({word})",
                ;
                delta = in(reg) delta,
            );
        }
        status(st)
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
pub(crate) use imp::{
    add, area, cpu, glibc_registered, membarrier_rseq, membarrier_rseq_on, pop, pop_bulk, push,
    push_bulk, register_membarrier,
};

/// Whether glibc registered this process's rseq areas (as opposed to this crate, per thread).
/// `false` where rseq is not supported.
pub fn registered_by_glibc() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom)))]
    {
        glibc_registered()
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(lockless_loom))))]
    {
        false
    }
}

//! Cache hints.

/// Asks the CPU to start loading the cache line holding `ptr` into this core's caches
/// (`PREFETCHT0`, x86_64), because this thread will read it soon.
///
/// Use it one step ahead of a pointer chase whose next target is known but not needed yet (a
/// queue's new head after a pop). It is a hint only: it changes no value, never faults, not
/// even on a null or unmapped address, and does nothing on other architectures.
#[inline(always)]
pub fn prefetch<T>(ptr: *const T) {
    #[cfg(all(target_arch = "x86_64", not(lockless_loom)))]
    // SAFETY: PREFETCHT0 (0F 18 /1) neither reads nor writes memory as far as the program can
    // tell and raises no exception for any address; it is part of the x86_64 baseline (SSE).
    // It touches no register but its address operand.
    unsafe {
        core::arch::asm!(
            "prefetcht0 [{p}]",
            p = in(reg) ptr,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(lockless_loom))))]
    let _ = ptr;
}

/// Asks the CPU to start loading the cache line holding `ptr` into this core's caches for a
/// write (`PREFETCHW`, x86_64): the line arrives exclusive, so the store that follows does not
/// wait for another core to give it up. Use it ahead of the first write to a line another
/// core wrote last (a recycled buffer's header). A hint only, as [`prefetch`]; decoded as a
/// no-op by x86_64 CPUs that predate it.
#[inline(always)]
pub fn prefetch_write<T>(ptr: *const T) {
    #[cfg(all(target_arch = "x86_64", not(lockless_loom)))]
    // SAFETY: PREFETCHW (0F 0D /1) neither reads nor writes memory as far as the program can
    // tell and raises no exception for any address; CPUs without it execute it as a NOP (the
    // 0F 0D opcode is a hint-NOP). It touches no register but its address operand.
    unsafe {
        core::arch::asm!(
            "prefetchw [{p}]",
            p = in(reg) ptr,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(lockless_loom))))]
    let _ = ptr;
}

//! Transparent huge pages for the flow table's large arrays (the index, the hot and cold flow
//! slabs). Owns how their buffers are allocated: the slabs' `Vec`s grown (moving the elements,
//! as `Vec` growth does), the index's fixed-length [`HugeArray`](crate::fq::huge::HugeArray)
//! (allocated, filled, freed), and the `madvise` hint on both. It must not read the elements,
//! and nothing the table decides depends on it.
//!
//! A table of a million flows spreads its lookups over about 100 MB. With 4 KiB pages every
//! lookup's index line and flow line is also a TLB miss, and the page walk competes with the
//! batched paths' prefetches. `MADV_HUGEPAGE` asks the kernel to back the buffer with 2 MiB
//! pages where it can (`/sys/kernel/mm/transparent_hugepage/enabled` = `always` or `madvise`, the
//! usual defaults); the hint is given before the buffer's pages are first written, because
//! pages already faulted in as 4 KiB stay so until `khugepaged` collapses them. Where the kernel
//! refuses (THP `never`, no contiguous memory) or on other systems the table works the same:
//! the hint costs one system call per growth and is never an error.
//!
//! Only the whole 2 MiB-aligned pages inside a buffer can be huge, so a slab of 2–4 MiB may get
//! none; the index's buffer starts on a 2 MiB boundary from 2 MiB on, so every page of it can
//! be huge (glibc then reserves up to 2 MiB more address space for it, never touched). The hint
//! is a property of the address range, not of the buffer: glibc serves a buffer this large
//! with its own mapping, which dies with the buffer, but after freeing one it raises its
//! mapping threshold (up to 32 MiB), and a later buffer below that comes from the heap, whose
//! range keeps the hint after the buffer is freed (later allocations there may get huge pages
//! too, and the heap's mapping is split at the advised range's ends).

use core::alloc::Layout;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

/// Buffers smaller than this are left alone: they cannot hold a whole huge page.
const HUGE_PAGE: usize = 2 << 20;

/// A fixed-length array whose buffer, from 2 MiB on, starts on a 2 MiB boundary, so that every
/// whole huge page of it can be huge (a `Vec` of exactly 2 MiB, unaligned, gets none). For
/// the flow index, which is replaced whole when it grows, never resized in place.
pub(super) struct HugeArray<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    layout: Layout,
}

// SAFETY: a `HugeArray` owns its elements as a `Box<[T]>` would.
unsafe impl<T: Copy + Send> Send for HugeArray<T> {}
// SAFETY: shared access gives only `&[T]`.
unsafe impl<T: Copy + Sync> Sync for HugeArray<T> {}

impl<T: Copy> HugeArray<T> {
    /// `n` copies of `value` (room for at least one element is allocated), the buffer advised
    /// before it is written.
    pub(super) fn filled(n: usize, value: T) -> Self {
        let bytes = n.max(1).checked_mul(core::mem::size_of::<T>().max(1));
        let align = match bytes {
            Some(b) if b >= HUGE_PAGE => HUGE_PAGE.max(core::mem::align_of::<T>()),
            _ => core::mem::align_of::<T>(),
        };
        let layout = bytes
            .and_then(|b| Layout::from_size_align(b, align).ok())
            .expect("flow index size overflows the address space");
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) }.cast::<T>();
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        advise_range(raw as usize, layout.size());
        for i in 0..n {
            // SAFETY: `i < n`, and the allocation has room for `n` elements of `T` (`n` bytes
            // for a zero-sized `T`, where a write touches none) at an alignment of at least
            // `T`'s.
            unsafe { raw.add(i).write(value) };
        }
        HugeArray {
            ptr,
            len: n,
            layout,
        }
    }
}

impl<T: Copy> Deref for HugeArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` holds `len` initialised elements for as long as `self` lives.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for HugeArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for HugeArray<T> {
    fn drop(&mut self) {
        // SAFETY: allocated in `filled` with this layout; `T: Copy` has no destructor.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) };
    }
}

/// Reserves room for one more element in `v`, doubling its capacity as `Vec::push` would, and
/// advises the new buffer before the elements are moved into it.
pub(super) fn reserve_one<T>(v: &mut Vec<T>) {
    if v.len() < v.capacity() {
        return;
    }
    let mut grown = Vec::with_capacity((2 * v.capacity()).max(4));
    advise(&grown);
    grown.append(v);
    *v = grown;
}

/// Asks for huge pages over the whole pages inside `v`'s capacity (a hint); whether the kernel
/// took it (false also for a buffer too small to ask for, and off Linux).
fn advise<T>(v: &Vec<T>) -> bool {
    let bytes = v.capacity().saturating_mul(core::mem::size_of::<T>());
    advise_range(v.as_ptr() as usize, bytes)
}

/// Asks for huge pages over the whole pages inside the `bytes` at `start`, a buffer the caller
/// owns (a hint; whether the kernel took it).
fn advise_range(start: usize, bytes: usize) -> bool {
    if bytes < HUGE_PAGE {
        return false;
    }
    #[cfg(not(target_os = "linux"))]
    let _ = start;
    #[cfg(target_os = "linux")]
    {
        let page = 4096;
        let first = start.next_multiple_of(page);
        let end = (start + bytes) & !(page - 1);
        if end > first {
            // SAFETY: `[first, end)` lies inside the caller's buffer (page-aligned inward), and
            // MADV_HUGEPAGE only changes how the kernel backs those pages, never their contents
            // or protection; a refusal is returned as an error code, which a hint ignores.
            let rc = unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE)
            };
            return rc == 0;
        }
    }
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The `VmFlags` line of the mapping of `/proc/self/smaps` that holds `addr`.
    fn vm_flags_at(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= addr && addr < hi;
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.to_string();
                }
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    #[test]
    fn large_buffers_are_advised_and_keep_their_elements() {
        // 2 MiB of 8-byte entries (the flow index at 100 000 flows): the buffer starts on a
        // huge-page boundary, so its one huge page can be whole.
        let mut v = HugeArray::filled(1 << 18, [7u32; 2]);
        assert!(v.iter().all(|e| *e == [7, 7]));
        assert_eq!(
            v.as_ptr() as usize % HUGE_PAGE,
            0,
            "index buffer not aligned"
        );
        // A kernel without THP (or a sandbox that ignores the hint) refuses it: skip the rest
        // there. `hg` in the mapping's flags is the kernel's record of MADV_HUGEPAGE.
        if !advise(&Vec::<u8>::with_capacity(4 << 20)) {
            eprintln!("SKIP: this kernel does not take MADV_HUGEPAGE");
            return;
        }
        assert!(
            vm_flags_at(v.as_ptr() as usize)
                .split_whitespace()
                .any(|f| f == "hg"),
            "index buffer not advised"
        );
        v[5] = [1, 2];
        assert_eq!((v.len(), v[5], v[6]), (1 << 18, [1, 2], [7, 7]));

        let mut w: Vec<u64> = (0..(1 << 18)).collect();
        w.shrink_to_fit();
        reserve_one(&mut w);
        assert!(w.capacity() >= 2 << 18);
        w.push(1 << 18);
        assert!(w.iter().enumerate().all(|(i, &x)| x == i as u64));
        let page = (w.as_ptr() as usize).next_multiple_of(4096);
        assert!(
            vm_flags_at(page).split_whitespace().any(|f| f == "hg"),
            "grown slab not advised"
        );

        // A small buffer is left alone (no system call), and keeps its elements too.
        let s = HugeArray::filled(16, 3u8);
        assert_eq!(&s[..], &[3u8; 16][..]);
    }
}

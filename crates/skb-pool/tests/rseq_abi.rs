//! The rseq ABI structs against `linux/rseq.h` (uapi, unchanged since Linux 4.18): sizes,
//! alignments and field offsets, and the header itself where it is installed.

use core::mem::{align_of, offset_of, size_of};
use skb_pool::rseq::{RSEQ_SIG, RseqAbi, RseqCs};

#[test]
fn struct_rseq_matches_the_uapi_header() {
    // linux/rseq.h: struct rseq { __u32 cpu_id_start; __u32 cpu_id; __u64 rseq_cs;
    // __u32 flags; ... } __attribute__((aligned(4 * sizeof(__u64))));
    assert_eq!(offset_of!(RseqAbi, cpu_id_start), 0);
    assert_eq!(offset_of!(RseqAbi, cpu_id), 4);
    assert_eq!(offset_of!(RseqAbi, rseq_cs), 8);
    assert_eq!(offset_of!(RseqAbi, flags), 16);
    assert_eq!(align_of::<RseqAbi>(), 32);
    // The original registration size (ORIG_RSEQ_SIZE in kernel/rseq.c), which the critical
    // sections' `4(%rseq)` and `8(%rseq)` operands assume.
    assert_eq!(size_of::<RseqAbi>(), 32);
}

#[test]
fn struct_rseq_cs_matches_the_uapi_header() {
    // linux/rseq.h: struct rseq_cs { __u32 version; __u32 flags; __u64 start_ip;
    // __u64 post_commit_offset; __u64 abort_ip; } __attribute__((aligned(4 * sizeof(__u64))));
    // The asm's descriptor is `.long 0, 0` then `.quad start, length, abort`, `.balign 32`.
    assert_eq!(offset_of!(RseqCs, version), 0);
    assert_eq!(offset_of!(RseqCs, flags), 4);
    assert_eq!(offset_of!(RseqCs, start_ip), 8);
    assert_eq!(offset_of!(RseqCs, post_commit_offset), 16);
    assert_eq!(offset_of!(RseqCs, abort_ip), 24);
    assert_eq!(size_of::<RseqCs>(), 32);
    assert_eq!(align_of::<RseqCs>(), 32);
}

#[test]
fn signature_is_glibc_x86_64_rseq_sig() {
    // glibc sysdeps/unix/sysv/linux/x86/bits/rseq.h: #define RSEQ_SIG 0x53053053
    assert_eq!(RSEQ_SIG, 0x5305_3053);
}

/// Where the uapi header is installed, its field order is the one asserted above.
#[test]
fn installed_header_declares_the_same_fields_in_order() {
    let Ok(h) = std::fs::read_to_string("/usr/include/linux/rseq.h") else {
        eprintln!("/usr/include/linux/rseq.h not installed: the offsets above are the check");
        return;
    };
    let body = |name: &str| -> Vec<String> {
        let start = h
            .find(&format!("struct {name} {{"))
            .expect("struct in header");
        let end = start + h[start..].find("} __attribute__").expect("struct end");
        h[start..end]
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l
                    .strip_prefix("__u32 ")
                    .or_else(|| l.strip_prefix("__u64 "))?;
                Some(l.trim_end_matches(';').to_string())
            })
            .collect()
    };
    let rseq = body("rseq");
    assert_eq!(&rseq[..4], ["cpu_id_start", "cpu_id", "rseq_cs", "flags"]);
    assert_eq!(
        body("rseq_cs"),
        [
            "version",
            "flags",
            "start_ip",
            "post_commit_offset",
            "abort_ip"
        ]
    );
}

//! The XDP side of AF_XDP receive: an XSKMAP (`BPF_MAP_TYPE_XSKMAP`) and the minimal program
//! libxdp loads by default (`xsk_def_prog`), redirecting each packet to the socket registered
//! for its receive queue, or passing it to the stack when none is. Everything goes through the
//! raw `bpf()` syscall — `BPF_MAP_CREATE`, `BPF_PROG_LOAD`, `BPF_MAP_UPDATE_ELEM` and
//! `BPF_LINK_CREATE` — without libbpf. The program is attached with a BPF link, so closing the
//! link (dropping [`XdpRedirect`]) detaches it, even if the process dies.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use crate::error::{Error, NEEDS_BPF, Result};
use crate::socket::XskSocket;
use crate::sys;

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_DELETE_ELEM: u32 = 3;
const BPF_PROG_LOAD: u32 = 5;
const BPF_LINK_CREATE: u32 = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`'s `BPF_XDP`.
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_PASS: i32 = 2;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `offsetof(struct xdp_md, rx_queue_index)`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;
/// `BPF_PSEUDO_MAP_FD`: the `ld_imm64` immediate is a map descriptor.
const BPF_PSEUDO_MAP_FD: u8 = 1;

/// `union bpf_attr` for `BPF_MAP_CREATE` (the fields we use).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `union bpf_attr` for the `BPF_MAP_*_ELEM` commands.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_PROG_LOAD` (the fields we use).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` for `BPF_LINK_CREATE` (the fields we use).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// One eBPF instruction (`struct bpf_insn`); `regs` is `dst_reg | src_reg << 4`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct BpfInsn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> BpfInsn {
    BpfInsn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

/// The redirect program for an XSKMAP whose descriptor is `map_fd`:
///
/// ```text
/// r2 = *(u32 *)(r1 + offsetof(struct xdp_md, rx_queue_index))
/// r1 = map_fd ll                 ; ld_imm64, BPF_PSEUDO_MAP_FD
/// r3 = XDP_PASS                  ; the action when the queue has no socket
/// call bpf_redirect_map
/// exit
/// ```
fn redirect_program(map_fd: i32) -> [BpfInsn; 6] {
    [
        insn(0x61, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0), // BPF_LDX | BPF_MEM | BPF_W
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd), // BPF_LD | BPF_DW | BPF_IMM
        insn(0x00, 0, 0, 0, 0),                     // second half of ld_imm64
        insn(0xb7, 3, 0, 0, XDP_PASS),              // BPF_ALU64 | BPF_MOV | BPF_K
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // BPF_JMP | BPF_CALL
        insn(0x95, 0, 0, 0, 0),                     // BPF_JMP | BPF_EXIT
    ]
}

fn bpf_err(op: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |e| match e.raw_os_error() {
        Some(libc::ENOSYS) => Error::KernelTooOld {
            what: "the bpf() syscall",
            source: e,
        },
        _ => Error::sys(op, NEEDS_BPF, e),
    }
}

/// How the XDP program runs on the interface.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (`XDP_FLAGS_DRV_MODE`), before an skb exists. veth supports it.
    #[default]
    Native,
    /// On the skb in the core receive path (`XDP_FLAGS_SKB_MODE`): every driver, slower.
    Generic,
}

/// A `BPF_MAP_TYPE_XSKMAP`: queue id → AF_XDP socket.
#[derive(Debug)]
pub struct XskMap {
    fd: OwnedFd,
    max_entries: u32,
}

impl XskMap {
    /// Creates a map with room for queues `0..max_entries`.
    pub fn new(max_entries: u32) -> Result<XskMap> {
        let mut name = [0u8; 16];
        name[..7].copy_from_slice(b"xsks_mp");
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: max_entries.max(1),
            map_name: name,
            ..Default::default()
        };
        let fd = sys::bpf(BPF_MAP_CREATE, &mut attr).map_err(bpf_err("bpf(BPF_MAP_CREATE)"))?;
        let fd = sys::owned_fd(fd).map_err(|e| Error::Io {
            op: "bpf(BPF_MAP_CREATE)",
            source: e,
        })?;
        Ok(XskMap {
            fd,
            max_entries: attr.max_entries,
        })
    }

    /// Routes packets received on `sock`'s queue to `sock`.
    pub fn insert(&self, sock: &XskSocket) -> Result<()> {
        let queue = sock.queue();
        if queue >= self.max_entries {
            return Err(Error::QueueOutOfRange {
                ifname: sock.ifname().to_owned(),
                queue,
                count: self.max_entries,
            });
        }
        let key: u32 = queue;
        let value: u32 = sock.as_fd().as_raw_fd() as u32;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            ..Default::default()
        };
        sys::bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map_err(bpf_err("bpf(BPF_MAP_UPDATE_ELEM)"))?;
        Ok(())
    }

    /// Stops routing queue `queue` to any socket (its packets go to the stack again).
    pub fn remove(&self, queue: u32) -> Result<()> {
        let key: u32 = queue;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            ..Default::default()
        };
        sys::bpf(BPF_MAP_DELETE_ELEM, &mut attr).map_err(bpf_err("bpf(BPF_MAP_DELETE_ELEM)"))?;
        Ok(())
    }
}

/// The redirect program attached to one interface, with its map. Dropping it detaches.
#[derive(Debug)]
pub struct XdpRedirect {
    // The link first: detach before the program and map are released.
    _link: OwnedFd,
    _prog: OwnedFd,
    map: XskMap,
    ifindex: u32,
    mode: AttachMode,
}

impl XdpRedirect {
    /// Loads the redirect program for queues `0..queues` and attaches it to `ifname` in `mode`.
    /// Must run in the network namespace that holds `ifname`.
    pub fn attach(ifname: &str, mode: AttachMode, queues: u32) -> Result<XdpRedirect> {
        let ifindex = sys::if_nametoindex(ifname).map_err(|e| match e.raw_os_error() {
            Some(libc::ENODEV | libc::ENXIO) => Error::NoSuchInterface {
                name: ifname.to_owned(),
            },
            _ => Error::Io {
                op: "if_nametoindex",
                source: e,
            },
        })?;
        let map = XskMap::new(queues)?;
        let prog = load_program(&map)?;
        let mut attr = LinkCreateAttr {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: match mode {
                AttachMode::Native => XDP_FLAGS_DRV_MODE,
                AttachMode::Generic => XDP_FLAGS_SKB_MODE,
            },
        };
        let link = sys::bpf(BPF_LINK_CREATE, &mut attr).map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY | libc::EEXIST) => Error::Busy {
                what: format!(
                    "{ifname} already has an XDP program attached; detach it (`ip link set \
                     {ifname} xdp off`) or use that one"
                ),
            },
            Some(libc::EOPNOTSUPP) => Error::Io {
                op: "bpf(BPF_LINK_CREATE): the driver has no native XDP; use AttachMode::Generic",
                source: e,
            },
            _ => bpf_err("bpf(BPF_LINK_CREATE)")(e),
        })?;
        let link = sys::owned_fd(link).map_err(|e| Error::Io {
            op: "bpf(BPF_LINK_CREATE)",
            source: e,
        })?;
        Ok(XdpRedirect {
            _link: link,
            _prog: prog,
            map,
            ifindex,
            mode,
        })
    }

    /// Routes packets received on `sock`'s queue to `sock`.
    pub fn register(&self, sock: &XskSocket) -> Result<()> {
        self.map.insert(sock)
    }

    /// The XSKMAP.
    pub fn map(&self) -> &XskMap {
        &self.map
    }

    /// Interface index the program is attached to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The attach mode.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }
}

fn load_program(map: &XskMap) -> Result<OwnedFd> {
    let insns = redirect_program(map.fd.as_fd().as_raw_fd());
    let license = b"Dual MIT/GPL\0";
    let mut name = [0u8; 16];
    name[..8].copy_from_slice(b"xsk_redi");
    let mut log = vec![0u8; 4096];
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_XDP,
        ..Default::default()
    };
    match sys::bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => sys::owned_fd(fd).map_err(|e| Error::Io {
            op: "bpf(BPF_PROG_LOAD)",
            source: e,
        }),
        Err(e)
            if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::EACCES) =>
        {
            // Reload with the verifier log so that the error says why.
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            let again = sys::bpf(BPF_PROG_LOAD, &mut attr);
            let text =
                String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)])
                    .trim()
                    .to_owned();
            match again {
                Ok(fd) => sys::owned_fd(fd).map_err(|e| Error::Io {
                    op: "bpf(BPF_PROG_LOAD)",
                    source: e,
                }),
                Err(_) if e.raw_os_error() == Some(libc::EACCES) && text.is_empty() => {
                    Err(bpf_err("bpf(BPF_PROG_LOAD)")(e))
                }
                Err(_) => Err(Error::Io {
                    op: "bpf(BPF_PROG_LOAD) rejected by the verifier",
                    source: io::Error::new(e.kind(), format!("{e}: {text}")),
                }),
            }
        }
        Err(e) => Err(bpf_err("bpf(BPF_PROG_LOAD)")(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_encoding() {
        let p = redirect_program(7);
        assert_eq!(std::mem::size_of::<BpfInsn>(), 8);
        assert_eq!((p[0].code, p[0].regs, p[0].off), (0x61, 0x12, 16));
        assert_eq!((p[1].code, p[1].regs, p[1].imm), (0x18, 0x11, 7));
        assert_eq!((p[3].regs, p[3].imm), (3, XDP_PASS));
        assert_eq!((p[4].code, p[4].imm), (0x85, 51));
        assert_eq!(p[5].code, 0x95);
    }
}

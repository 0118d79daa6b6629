//! A wakeup that fails after descriptors went onto a ring: `XskSocket::transmit` on a link
//! that is down queues its descriptors, and the kick that follows fails (`ENETDOWN`). The call
//! must say how many it queued (`Error::Queued`, `Error::queued`), because those frames are the
//! kernel's now: once the link is back, each of them comes back exactly once on the completion
//! ring, and none of the others does. (The fill ring's wakeup cannot be made to fail here: in
//! copy mode the kernel never asks for it, so `XskSocket::fill` makes no `recvfrom`.)

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use xsk_tx::packet::UdpFlow;
use xsk_tx::{BindMode, Error, MmapRegion, SocketConfig, Umem, XdpDesc, XskSocket, netns};

const PORT: u16 = 9700;
const QUEUED: usize = 8;

#[test]
fn a_kick_that_fails_after_queueing_reports_what_it_queued() {
    let Some(veth) =
        netns::veth_or_skip("a_kick_that_fails_after_queueing_reports_what_it_queued", 1)
    else {
        return;
    };
    let flow = UdpFlow {
        src_mac: veth.a.mac,
        dst_mac: veth.b.mac,
        src_ip: veth.a.ip,
        dst_ip: veth.b.ip,
        src_port: 40100,
        dst_port: PORT,
    };
    let ifname = veth.a.ifname.clone();
    let ns = &veth.a.ns;
    let (err_queued, err_text, link_down_source, completed, want) = ns
        .run(|| {
            let umem = Umem::new(MmapRegion::new(64, 2048).unwrap(), 0).unwrap();
            let cfg = SocketConfig::new()
                .tx_size(64)
                .comp_size(64)
                .mode(BindMode::Auto);
            let mut sock = XskSocket::bind(&umem, &ifname, 0, &cfg).unwrap();
            let descs: Vec<XdpDesc> = (0..QUEUED)
                .map(|i| {
                    let addr = umem.frame_addr(i as u32);
                    // SAFETY: frame `i` is in no ring: nothing was queued yet.
                    let frame = unsafe { umem.frame_mut(addr, 2048) }.unwrap();
                    let len = flow.write(frame, &[i as u8; 32]).unwrap();
                    XdpDesc {
                        addr,
                        len: len as u32,
                        options: 0,
                    }
                })
                .collect();
            ns.ip(&["link", "set", &ifname, "down"]).unwrap();
            let err = sock
                .transmit(&descs)
                .expect_err("a kick on a link that is down fails");
            let link_down_source = matches!(
                &err,
                Error::Queued { source, .. } if matches!(**source, Error::LinkDown { .. })
            );
            let (err_queued, err_text) = (err.queued(), err.to_string());
            ns.ip(&["link", "set", &ifname, "up"]).unwrap();
            // The queued frames come back once the kernel sends them.
            let mut completed = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(30);
            while completed.len() < err_queued && Instant::now() < deadline {
                // A kick right after the link comes up may still see it down.
                let _ = sock.reap_completions(64, |a| completed.push(a));
                std::thread::yield_now();
            }
            // Another look: a frame the kernel completed twice would show now.
            let _ = sock.reap_completions(64, |a| completed.push(a));
            let want: BTreeSet<u64> = descs.iter().map(|d| d.addr).collect();
            (err_queued, err_text, link_down_source, completed, want)
        })
        .unwrap();
    assert_eq!(err_queued, QUEUED, "queued count of the error: {err_text}");
    assert!(
        link_down_source,
        "the kick's own error is LinkDown: {err_text}"
    );
    let got: BTreeSet<u64> = completed.iter().copied().collect();
    assert_eq!(
        got.len(),
        completed.len(),
        "a frame completed twice: {completed:?}"
    );
    assert_eq!(got, want, "completions after the link came back");
}

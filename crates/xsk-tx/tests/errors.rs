//! Bad input produces typed errors that name the cause and the fix, never panics: a missing
//! interface, a queue out of range, bad ring sizes and UMEM geometry, packets larger than a
//! frame or the MTU, zero-copy demanded on veth, a busy queue, no permission.

use xsk_tx::{BindMode, Error, MmapRegion, SocketConfig, Umem, XdpDesc, XdpMode, XskSocket, netns};

#[test]
fn bad_ring_sizes_are_rejected_before_any_syscall() {
    for (cfg, ring, size) in [
        (SocketConfig::new().tx_size(1000), "TX", 1000),
        (SocketConfig::new().comp_size(0), "completion", 0),
        (SocketConfig::new().rx_size(3), "RX", 3),
        (SocketConfig::new().fill_size(4095), "fill", 4095),
    ] {
        match cfg.validate() {
            Err(Error::BadRingSize { ring: r, size: s }) => assert_eq!((r, s), (ring, size)),
            other => panic!("expected BadRingSize for {ring}, got {other:?}"),
        }
        let msg = cfg.validate().unwrap_err().to_string();
        assert!(msg.contains("power of two"), "{msg}");
    }
    assert!(matches!(
        SocketConfig::new().tx_size(0).rx_size(0).validate(),
        Err(Error::BadRingSize { .. })
    ));
    assert!(SocketConfig::new().validate().is_ok());
}

#[test]
fn bad_umem_geometry_is_rejected() {
    for fs in [1000, 1024, 3000, 8192] {
        let e = MmapRegion::new(16, fs).unwrap_err();
        assert!(matches!(e, Error::BadUmem { .. }), "{e}");
        assert!(e.to_string().contains("power of two"), "{e}");
    }
    assert!(matches!(
        MmapRegion::new(0, 2048),
        Err(Error::BadUmem { .. })
    ));
}

#[test]
fn typed_errors_on_a_real_veth() {
    let Some(veth) = netns::veth_or_skip("typed_errors_on_a_real_veth", 1) else {
        return;
    };
    let ifname = veth.a.ifname.clone();
    veth.a
        .ns
        .run(move || {
            let cfg = SocketConfig::new();
            let umem = Umem::new(MmapRegion::new(64, 2048).unwrap(), 0).unwrap();

            // Headroom that leaves no room for data.
            let e = Umem::new(MmapRegion::new(64, 2048).unwrap(), 1792).unwrap_err();
            assert!(matches!(e, Error::BadUmem { .. }), "{e}");

            // No such interface, and a name no interface can have.
            for name in ["nope0", "", "this-name-is-far-too-long"] {
                let e = XskSocket::bind(&umem, name, 0, &cfg).unwrap_err();
                assert!(
                    matches!(&e, Error::NoSuchInterface { name: n } if n == name),
                    "{e}"
                );
                assert!(e.to_string().contains("ip link"), "{e}");
            }

            // Queue out of range: the veth has one queue.
            let e = XskSocket::bind(&umem, &ifname, 5, &cfg).unwrap_err();
            assert!(
                matches!(
                    &e,
                    Error::QueueOutOfRange {
                        queue: 5,
                        count: 1,
                        ..
                    }
                ),
                "{e}"
            );
            assert!(e.to_string().contains("numtxqueues"), "{e}");

            // Bad ring size through bind.
            let e = XskSocket::bind(&umem, &ifname, 0, &cfg.clone().tx_size(1000)).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::BadRingSize {
                        ring: "TX",
                        size: 1000
                    }
                ),
                "{e}"
            );

            // Zero-copy demanded on veth.
            let e = XskSocket::bind(&umem, &ifname, 0, &cfg.clone().mode(BindMode::ZeroCopy))
                .unwrap_err();
            assert!(
                matches!(&e, Error::ZeroCopyUnsupported { ifname: n } if *n == ifname),
                "{e}"
            );
            assert!(e.to_string().contains("BindMode::Copy"), "{e}");
            // That UMEM's own socket is spent; the error says to register a new one.
            let e = XskSocket::bind(&umem, &ifname, 0, &cfg).unwrap_err();
            assert!(matches!(e, Error::Busy { .. }), "{e}");

            // A fresh UMEM in copy mode works and says so.
            let umem = Umem::new(MmapRegion::new(64, 2048).unwrap(), 0).unwrap();
            let mut sock =
                XskSocket::bind(&umem, &ifname, 0, &cfg.clone().mode(BindMode::Copy)).unwrap();
            assert_eq!(sock.mode(), XdpMode::Copy);
            assert_eq!(sock.mtu(), 1500);

            // The same UMEM on the same queue again: one socket per queue.
            let e = XskSocket::bind(&umem, &ifname, 0, &cfg).unwrap_err();
            assert!(matches!(e, Error::Busy { .. }), "{e}");

            // Another UMEM on the same queue: busy.
            let other = Umem::new(MmapRegion::new(64, 2048).unwrap(), 0).unwrap();
            let e = XskSocket::bind(&other, &ifname, 0, &cfg).unwrap_err();
            assert!(matches!(e, Error::Busy { .. }), "{e}");

            // Packets larger than a frame, than the MTU, or outside the UMEM.
            let e = sock.transmit(&[XdpDesc::new(0, 3000)]).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::FrameTooLarge {
                        len: 3000,
                        max: 2048
                    }
                ),
                "{e}"
            );
            let e = sock
                .transmit(&[XdpDesc::new(2048 + 1024, 1500)])
                .unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::FrameTooLarge {
                        len: 1500,
                        max: 1024
                    }
                ),
                "{e}"
            );
            let e = sock
                .transmit(&[XdpDesc::new(0, 60), XdpDesc::new(2048, 1600)])
                .unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::LargerThanMtu {
                        len: 1600,
                        mtu: 1500
                    }
                ),
                "{e}"
            );
            assert!(e.to_string().contains("mtu"), "{e}");
            let e = sock.transmit(&[XdpDesc::new(64 * 2048, 60)]).unwrap_err();
            assert!(matches!(e, Error::BadAddress { .. }), "{e}");
            // Descriptors the kernel would skip without a completion (xp_aligned_validate_desc:
            // `!desc->len`, option bits the socket did not enable): refused here, or their
            // frames would never come back.
            let e = sock
                .transmit(&[XdpDesc::new(0, 60), XdpDesc::new(2048, 0)])
                .unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::BadDescriptor {
                        addr: 2048,
                        len: 0,
                        options: 0
                    }
                ),
                "{e}"
            );
            let contd = XdpDesc {
                options: 1,
                ..XdpDesc::new(0, 60)
            };
            let e = sock.transmit(&[contd]).unwrap_err();
            assert!(matches!(e, Error::BadDescriptor { options: 1, .. }), "{e}");
            assert!(e.to_string().contains("XdpDesc::new"), "{e}");
            assert_eq!(e.queued(), 0);
            assert_eq!(sock.in_flight(), 0, "a failed call queues nothing");

            // Copy-mode TX budget: 32 up to the TX ring size.
            for bad in [0, 31, 4097] {
                let e = sock.set_tx_budget(bad).unwrap_err();
                assert!(matches!(e, Error::BadTxBudget { max: 2048, .. }), "{e}");
            }
            match sock.set_tx_budget(256) {
                Ok(()) | Err(Error::KernelTooOld { .. }) => {}
                Err(e) => panic!("budget 256: {e}"),
            }

            // No RX ring configured.
            let e = sock.receive(1, |_| {}).unwrap_err();
            assert!(matches!(e, Error::NoRing { ring: "RX" }), "{e}");

            // A driver over a UMEM that is not the pool's region: its frames' addresses would
            // name other memory to the kernel.
            let pool = skb_pool::Pool::builder().frame_count(64).build().unwrap();
            let e = xsk_tx::XskDriver::new(sock, &pool).unwrap_err();
            assert!(matches!(e, Error::WrongPool { .. }), "{e}");
            assert!(e.to_string().contains("Umem::from_pool"), "{e}");
        })
        .unwrap();
}

/// `capset(2)` for the calling thread only: drops every capability.
fn drop_all_capabilities() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: valid header and two data words, as _LINUX_CAPABILITY_VERSION_3 wants; this
    // changes only the calling thread's capabilities.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn no_permission_is_a_typed_error() {
    let Some(veth) = netns::veth_or_skip("no_permission_is_a_typed_error", 1) else {
        return;
    };
    veth.a
        .ns
        .run(|| {
            drop_all_capabilities().unwrap();
            let e = Umem::new(MmapRegion::new(64, 2048).unwrap(), 0).unwrap_err();
            assert!(matches!(e, Error::PermissionDenied { .. }), "{e}");
            assert!(e.to_string().contains("CAP_NET_RAW"), "{e}");
            let e = xsk_tx::XskMap::new(1).unwrap_err();
            assert!(matches!(e, Error::PermissionDenied { .. }), "{e}");
            assert!(e.to_string().contains("CAP_BPF"), "{e}");
        })
        .unwrap();
}

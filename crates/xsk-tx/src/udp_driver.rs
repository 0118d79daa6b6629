//! `qdisc::Driver<Skb>` for the UDP senders, so the same pool + `TxQueue` + qdisc pipeline runs
//! on machines or interfaces without AF_XDP.
//!
//! The `Skb` holds the same thing as for [`XskDriver`](crate::XskDriver): a whole
//! Ethernet/IPv4/UDP frame. These drivers send the UDP payload that follows the headers as one
//! datagram on their connected socket; the frame's addresses and ports are not used (the
//! socket's destination is), and the kernel builds its own headers and checksums. A frame that
//! is not Ethernet/IPv4/UDP with consistent lengths is refused with `DropReason::DriverError`,
//! and so is a batch the kernel refuses outright (the first packet, so the queue moves on).

use llist_defer::Fifo;
use qdisc::{Driver, DropReason, ToFree, TxResult};
use skb_pool::Skb;

use crate::packet::{ETH_HLEN, IPV4_HLEN, UDP_HLEN};
use crate::udp::{MMSG_BATCH, UdpIoUring, UdpSendmmsg};

/// The UDP payload of an Ethernet/IPv4/UDP frame, lengths checked (checksums are not).
pub(crate) fn udp_payload(frame: &[u8]) -> Option<&[u8]> {
    let eth = frame.get(..ETH_HLEN)?;
    if eth[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[ETH_HLEN..];
    let ihl = usize::from(*ip.first()? & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl < IPV4_HLEN || *ip.get(9)? != 17 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let udp = ip.get(ihl..total)?;
    let udp_len = usize::from(u16::from_be_bytes([*udp.get(4)?, *udp.get(5)?]));
    if udp_len < UDP_HLEN || udp_len != udp.len() {
        return None;
    }
    Some(&udp[UDP_HLEN..])
}

/// Moves up to `MMSG_BATCH` well-formed frames from `batch` into `scratch`, refusing the rest.
fn take_batch(batch: &mut Fifo<Skb>, scratch: &mut Vec<Skb>, to_free: &mut ToFree<Skb>) {
    scratch.clear();
    while scratch.len() < MMSG_BATCH {
        let Some(skb) = batch.pop_front() else { break };
        if udp_payload(skb.data()).is_some() {
            scratch.push(skb);
        } else {
            to_free.drop_packet(skb, DropReason::DriverError);
        }
    }
}

/// Sends `scratch` with `send`; frees what was sent, refuses the first packet of a batch the
/// kernel refused, and puts anything else back at the front of `batch`.
fn send_scratch(
    scratch: &mut Vec<Skb>,
    batch: &mut Fifo<Skb>,
    to_free: &mut ToFree<Skb>,
    send: impl FnOnce(&[&[u8]]) -> std::io::Result<usize>,
) -> usize {
    let mut slices: [&[u8]; MMSG_BATCH] = [&[]; MMSG_BATCH];
    for (s, skb) in slices.iter_mut().zip(scratch.iter()) {
        *s = udp_payload(skb.data()).unwrap_or(&[]);
    }
    let k = scratch.len();
    let sent = match send(&slices[..k]) {
        Ok(n) => n.min(k),
        Err(_) => 0,
    };
    let mut rest = scratch.drain(..).skip(sent);
    if sent == 0 {
        if let Some(first) = rest.next() {
            to_free.drop_packet(first, DropReason::DriverError);
        }
    }
    let mut back = Fifo::new();
    for skb in rest {
        back.push_back(skb);
    }
    batch.prepend(&mut back);
    scratch.clear(); // the sent frames go home here
    sent
}

/// The body both UDP drivers share: takes sendable packets from `batch` in chunks and sends
/// each chunk's payloads with `send`, until the batch is empty (a failed send drops one packet
/// as a `DriverError`, so every round makes progress).
fn xmit_chunks(
    scratch: &mut Vec<Skb>,
    batch: &mut Fifo<Skb>,
    to_free: &mut ToFree<Skb>,
    mut send: impl FnMut(&[&[u8]]) -> std::io::Result<usize>,
) -> TxResult {
    let mut sent = 0;
    loop {
        take_batch(batch, scratch, to_free);
        if scratch.is_empty() {
            break;
        }
        sent += send_scratch(scratch, batch, to_free, &mut send);
    }
    TxResult {
        sent,
        stopped: false,
    }
}

impl Driver<Skb> for UdpSendmmsg {
    fn xmit(&mut self, batch: &mut Fifo<Skb>, to_free: &mut ToFree<Skb>) -> TxResult {
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = xmit_chunks(&mut scratch, batch, to_free, |p| self.send_batch(p));
        self.scratch = scratch;
        r
    }
}

impl Driver<Skb> for UdpIoUring {
    fn xmit(&mut self, batch: &mut Fifo<Skb>, to_free: &mut ToFree<Skb>) -> TxResult {
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = xmit_chunks(&mut scratch, batch, to_free, |p| self.send_batch(p));
        self.scratch = scratch;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::UdpFlow;
    use std::net::Ipv4Addr;

    #[test]
    fn payload_follows_the_headers() {
        let flow = UdpFlow {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            dst_ip: Ipv4Addr::new(10, 0, 0, 2),
            src_port: 1,
            dst_port: 2,
        };
        let mut buf = [0u8; 128];
        let n = flow.write(&mut buf, b"hello").unwrap();
        assert_eq!(udp_payload(&buf[..n]), Some(&b"hello"[..]));
        assert_eq!(udp_payload(&buf[..n - 1]), None, "truncated");
        let mut arp = buf;
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(udp_payload(&arp[..n]), None);
        assert_eq!(udp_payload(&[]), None);
    }
}

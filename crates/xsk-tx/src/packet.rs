//! Well-formed Ethernet II / IPv4 / UDP frames, built in place with correct IPv4 header and UDP
//! checksums (RFC 791, RFC 768, the RFC 1071 one's-complement sum), and parsed back with both
//! checksums verified. AF_XDP sends frames as they are, so every header is ours to get right;
//! the receiving kernel stack drops a datagram whose checksum is wrong.

use std::net::Ipv4Addr;

/// Ethernet header length.
pub const ETH_HLEN: usize = 14;
/// IPv4 header length without options.
pub const IPV4_HLEN: usize = 20;
/// UDP header length.
pub const UDP_HLEN: usize = 8;
/// Bytes in front of the UDP payload.
pub const HEADERS_LEN: usize = ETH_HLEN + IPV4_HLEN + UDP_HLEN;
/// Largest UDP payload an IPv4 datagram carries.
pub const MAX_UDP_PAYLOAD: usize = 65_507;

const ETHERTYPE_IPV4: u16 = 0x0800;
const IPPROTO_UDP: u8 = 17;

/// Addresses and ports of one UDP/IPv4 flow over Ethernet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFlow {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// Source UDP port.
    pub src_port: u16,
    /// Destination UDP port.
    pub dst_port: u16,
}

/// RFC 1071 sum of `data` added to `acc` (not folded, not complemented).
fn sum16(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The IPv4 header checksum of `header` (its checksum field taken as is; zero it first when
/// computing, leave it when verifying: a valid header then yields 0).
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    !fold(sum16(0, header))
}

/// The UDP checksum over the IPv4 pseudo-header and `segment` (UDP header + payload, checksum
/// field as is). A computed 0 is sent as `0xffff`, as RFC 768 says.
pub fn udp_checksum(src: Ipv4Addr, dst: Ipv4Addr, segment: &[u8]) -> u16 {
    let mut acc = sum16(0, &src.octets());
    acc = sum16(acc, &dst.octets());
    acc += u32::from(IPPROTO_UDP);
    acc += segment.len() as u32;
    !fold(sum16(acc, segment))
}

impl UdpFlow {
    /// Length of the frame carrying `payload_len` bytes.
    pub fn frame_len(payload_len: usize) -> usize {
        HEADERS_LEN + payload_len
    }

    /// The same flow seen from the other end.
    pub fn reversed(&self) -> UdpFlow {
        UdpFlow {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_port: self.dst_port,
            dst_port: self.src_port,
        }
    }

    /// Writes the frame for `payload` at the start of `buf`; returns its length, or `None` if
    /// `buf` is too small or the payload too large for one datagram.
    pub fn write(&self, buf: &mut [u8], payload: &[u8]) -> Option<usize> {
        if payload.len() > MAX_UDP_PAYLOAD {
            return None;
        }
        let len = Self::frame_len(payload.len());
        let frame = buf.get_mut(..len)?;
        let (eth, rest) = frame.split_at_mut(ETH_HLEN);
        eth[0..6].copy_from_slice(&self.dst_mac);
        eth[6..12].copy_from_slice(&self.src_mac);
        eth[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());

        let (ip, udp) = rest.split_at_mut(IPV4_HLEN);
        let ip_len = (IPV4_HLEN + UDP_HLEN + payload.len()) as u16;
        ip[0] = 0x45; // version 4, IHL 5
        ip[1] = 0; // DSCP/ECN
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip[4..6].copy_from_slice(&0u16.to_be_bytes()); // identification (DF set)
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF, offset 0
        ip[8] = 64; // TTL
        ip[9] = IPPROTO_UDP;
        ip[10..12].copy_from_slice(&[0, 0]);
        ip[12..16].copy_from_slice(&self.src_ip.octets());
        ip[16..20].copy_from_slice(&self.dst_ip.octets());
        let csum = ipv4_checksum(ip);
        ip[10..12].copy_from_slice(&csum.to_be_bytes());

        let udp_len = (UDP_HLEN + payload.len()) as u16;
        udp[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        udp[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        udp[6..8].copy_from_slice(&[0, 0]);
        udp[UDP_HLEN..].copy_from_slice(payload);
        let mut csum = udp_checksum(self.src_ip, self.dst_ip, udp);
        if csum == 0 {
            csum = 0xffff;
        }
        udp[6..8].copy_from_slice(&csum.to_be_bytes());
        Some(len)
    }
}

/// A parsed, checksum-verified UDP/IPv4 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<'a> {
    /// Addresses and ports as sent.
    pub flow: UdpFlow,
    /// The UDP payload.
    pub payload: &'a [u8],
}

/// Parses an Ethernet/IPv4/UDP frame, verifying lengths and both checksums; `None` for
/// anything else (another protocol, IP options are accepted, fragments are not).
///
/// A UDP checksum of 0 means "none" and is accepted. Frames that a local stack sent through a
/// device with checksum offload (veth does this) carry only the pseudo-header sum when XDP sees
/// them, and fail here: send those without a checksum (`SO_NO_CHECK`) or turn the offload off.
pub fn parse_udp(frame: &[u8]) -> Option<UdpPacket<'_>> {
    let eth = frame.get(..ETH_HLEN)?;
    if u16::from_be_bytes([eth[12], eth[13]]) != ETHERTYPE_IPV4 {
        return None;
    }
    let rest = &frame[ETH_HLEN..];
    let ihl = usize::from(*rest.first()? & 0x0f) * 4;
    if rest[0] >> 4 != 4 || ihl < IPV4_HLEN {
        return None;
    }
    let ip = rest.get(..ihl)?;
    if ip[9] != IPPROTO_UDP || ipv4_checksum(ip) != 0 {
        return None;
    }
    if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
        return None; // a fragment
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let udp = rest.get(ihl..total)?;
    let udp_len = usize::from(u16::from_be_bytes([*udp.get(4)?, *udp.get(5)?]));
    if udp_len < UDP_HLEN || udp_len != udp.len() {
        return None;
    }
    let src_ip = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst_ip = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let sent_csum = u16::from_be_bytes([udp[6], udp[7]]);
    if sent_csum != 0 && udp_checksum(src_ip, dst_ip, udp) != 0 {
        return None;
    }
    let mac = |s: &[u8]| <[u8; 6]>::try_from(s).ok();
    Some(UdpPacket {
        flow: UdpFlow {
            dst_mac: mac(&eth[0..6])?,
            src_mac: mac(&eth[6..12])?,
            src_ip,
            dst_ip,
            src_port: u16::from_be_bytes([udp[0], udp[1]]),
            dst_port: u16::from_be_bytes([udp[2], udp[3]]),
        },
        payload: &udp[UDP_HLEN..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> UdpFlow {
        UdpFlow {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            dst_ip: Ipv4Addr::new(10, 0, 0, 2),
            src_port: 1234,
            dst_port: 5678,
        }
    }

    #[test]
    fn checksum_matches_a_known_header() {
        // The worked example of RFC 1071-style IPv4 checksums (Wikipedia's header).
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(ipv4_checksum(&h), 0);
    }

    #[test]
    fn round_trip_odd_and_even_payloads() {
        for len in [0usize, 1, 17, 64, 1472] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let mut buf = vec![0u8; 2048];
            let n = flow().write(&mut buf, &payload).unwrap();
            assert_eq!(n, HEADERS_LEN + len);
            let p = parse_udp(&buf[..n]).unwrap();
            assert_eq!(p.flow, flow());
            assert_eq!(p.payload, &payload[..]);
        }
    }

    #[test]
    fn corruption_is_detected() {
        let mut buf = vec![0u8; 128];
        let n = flow().write(&mut buf, b"hello world").unwrap();
        for i in ETH_HLEN..n {
            let mut bad = buf[..n].to_vec();
            bad[i] ^= 0x10;
            assert!(
                parse_udp(&bad)
                    .map(|p| p.payload != b"hello world")
                    .unwrap_or(true),
                "byte {i}"
            );
        }
    }

    #[test]
    fn too_small_buffer_is_refused() {
        let mut buf = [0u8; 50];
        assert_eq!(flow().write(&mut buf, &[0; 9]), None);
        assert_eq!(flow().write(&mut buf, &[0; 8]), Some(50));
    }
}

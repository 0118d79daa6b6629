//! [`TestPacket`]: a small heap packet implementing [`Packet`], for tests, examples and benches
//! that need no frame pool.

use core::ptr::NonNull;

use llist_defer::{Boxed, Link, Node};

use crate::packet::{FlowKey, Packet};

/// The fields of a [`TestPacket`].
///
/// Laid out in declaration order, the length first: it then shares the packet's first cache
/// line with the link in front of it, as an `Skb`'s length shares its metadata line, so a qdisc
/// that reads the length of a packet it queues (pfifo's byte counter) touches one line, the one
/// a prefetch of the link loads.
#[derive(Debug, Clone, PartialEq, Eq)]
#[repr(C)]
pub struct TestMeta {
    /// Length in bytes.
    pub len: usize,
    /// A caller-chosen identity (for instance producer << 32 | sequence).
    pub id: u64,
    /// `skb->priority`.
    pub priority: u32,
    /// Set by [`Packet::mark_ce`].
    pub ce: bool,
    /// Whether the socket is TCP ([`Packet::is_tcp`]). (It and `ce` sit in the padding after
    /// `priority`.)
    pub tcp: bool,
    /// Flow identity.
    pub flow: FlowKey,
    /// Earliest departure time, monotonic ns.
    pub tstamp: Option<u64>,
    /// The socket's pacing rate (bytes/s) reported by [`Packet::pacing_rate`].
    pub pacing_rate: Option<u64>,
    /// The socket's `SO_MAX_PACING_RATE` (bytes/s) reported by [`Packet::max_pacing_rate`],
    /// stored as the kernel stores `sk_max_pacing_rate`: `u64::MAX` (`~0UL`) is no cap. (A
    /// plain `u64` keeps the packet at the 80 bytes it had before the socket fields.)
    pub max_pacing_rate: u64,
}

/// A boxed packet with an intrusive link: one allocation at creation, none when queued.
///
/// ```
/// use qdisc::{FlowKey, Packet, TestPacket};
///
/// let p = TestPacket::new(7, 1500).with_flow(FlowKey::Orphan { hash: 42 });
/// assert_eq!((p.id(), p.len(), p.flow().hash()), (7, 1500, 42));
/// ```
#[derive(Debug)]
pub struct TestPacket(Boxed<TestMeta>);

impl TestPacket {
    /// A packet with `id` and `len`, priority 0, orphan flow hashed from `id`, no timestamp.
    pub fn new(id: u64, len: usize) -> Self {
        TestPacket(Boxed::new(TestMeta {
            id,
            len,
            priority: 0,
            flow: FlowKey::Orphan { hash: id as u32 },
            tstamp: None,
            ce: false,
            pacing_rate: None,
            max_pacing_rate: u64::MAX,
            tcp: false,
        }))
    }

    /// Sets the flow.
    pub fn with_flow(mut self, flow: FlowKey) -> Self {
        self.0.flow = flow;
        self
    }

    /// Sets the priority.
    pub fn with_priority(mut self, priority: u32) -> Self {
        self.0.priority = priority;
        self
    }

    /// Sets the EDT timestamp (ns).
    pub fn with_tstamp(mut self, tstamp: u64) -> Self {
        self.0.tstamp = Some(tstamp);
        self
    }

    /// Sets the socket pacing rate in bytes per second.
    pub fn with_pacing_rate(mut self, rate: u64) -> Self {
        self.0.pacing_rate = Some(rate);
        self
    }

    /// Sets the socket's `SO_MAX_PACING_RATE` in bytes per second.
    pub fn with_max_pacing_rate(mut self, rate: u64) -> Self {
        self.0.max_pacing_rate = rate;
        self
    }

    /// Marks the socket as TCP (or not).
    pub fn with_tcp(mut self, tcp: bool) -> Self {
        self.0.tcp = tcp;
        self
    }

    /// The caller-chosen identity.
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// Whether the packet was CE-marked.
    pub fn ce(&self) -> bool {
        self.0.ce
    }

    /// All fields.
    pub fn meta(&self) -> &TestMeta {
        &self.0
    }
}

// SAFETY: delegates to `Boxed`, whose contract holds; the newtype adds no state.
unsafe impl Node for TestPacket {
    #[inline]
    fn into_link(self) -> NonNull<Link> {
        self.0.into_link()
    }
    #[inline]
    unsafe fn from_link(link: NonNull<Link>) -> Self {
        // SAFETY: forwarded from our caller: `link` came from `into_link`, i.e. from `Boxed`.
        TestPacket(unsafe { Boxed::from_link(link) })
    }
}

impl Packet for TestPacket {
    #[inline]
    fn len(&self) -> usize {
        self.0.len
    }
    /// The link and the `TestMeta` after it: about 110 bytes, on two or three cache lines
    /// wherever the allocator put them. Loads each.
    #[inline]
    fn prefetch_link(link: NonNull<Link>) {
        let start = link.as_ptr().cast::<u8>();
        let span = size_of::<Link>() + size_of::<TestMeta>();
        llist_defer::hint::prefetch(start);
        llist_defer::hint::prefetch(start.wrapping_add(64));
        llist_defer::hint::prefetch(start.wrapping_add(span - 1));
    }
    #[inline]
    fn priority(&self) -> u32 {
        self.0.priority
    }
    #[inline]
    fn flow(&self) -> FlowKey {
        self.0.flow
    }
    #[inline]
    fn tstamp(&self) -> Option<u64> {
        self.0.tstamp
    }
    fn mark_ce(&mut self) {
        self.0.ce = true;
    }
    #[inline]
    fn pacing_rate(&self) -> Option<u64> {
        self.0.pacing_rate
    }
    #[inline]
    fn max_pacing_rate(&self) -> Option<u64> {
        (self.0.max_pacing_rate != u64::MAX).then_some(self.0.max_pacing_rate)
    }
    #[inline]
    fn is_tcp(&self) -> bool {
        self.0.tcp
    }
}

#[cfg(test)]
mod layout {
    use super::TestMeta;

    /// The socket fields added for FQ (TCP flag, max pacing rate) fit in the 80 bytes a
    /// packet's fields took before them (a larger packet moves to a larger malloc chunk).
    #[test]
    fn test_meta_stays_80_bytes() {
        assert_eq!(core::mem::size_of::<TestMeta>(), 80);
    }
}

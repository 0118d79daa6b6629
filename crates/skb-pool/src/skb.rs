//! [`Skb`]: the owned handle of one in-use frame, with the kernel's data-window operations
//! (`skb_put`, `skb_push`, `skb_pull`, `skb_trim`, `skb_reserve`) and the metadata a qdisc and
//! a driver read; with it the frame's owner as a value ([`OwnerId`]) and the socket a packet
//! was sent from, which keys its flow ([`SocketRef`]).
//!
//! The frame is laid out as the kernel lays out an skb's linear buffer:
//!
//! ```text
//! frame start      head             head + len                  frame end
//! |---- headroom ----|===== data =====|-------- tailroom --------|
//! ```
//!
//! `put` grows the data at the tail, `push` at the head, `pull` shrinks it at the head and
//! `trim` at the tail. Every operation is bounds-checked and refuses with a typed error instead
//! of the kernel's `skb_over_panic`. An `Skb` is one pointer (to its frame's metadata line), so
//! moving it through queues and defer lists is moving a word; dropping it returns the frame to
//! its owner (see [`PoolHandle`](crate::PoolHandle)). The frame's address follows from that
//! pointer alone (its side-array chunk header, see `meta.rs`), so [`Skb::prefetch`] can request
//! the metadata and data lines together.

use core::fmt;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;

use llist_defer::{Link, Node};

use crate::error::SkbError;
use crate::meta::{
    F_CE, F_CONNECTED, F_SOCK, F_TSTAMP, Frame, FrameMeta, IN_FLIGHT, Place, SkbMeta, place,
    prefetch_data, prefetch_frame,
};
use crate::pool::PoolInner;
use crate::sync::Ordering;

/// The identity of an owner handle (its slot in the pool), stamped on every frame it allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(pub(crate) u16);

impl OwnerId {
    /// The slot index, `0..max_owners`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The socket an [`Skb`] was sent from, as much as a qdisc needs to key its flow (`skb->sk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SocketRef {
    /// A stable identity of the socket (FQ keys connected sockets by it).
    pub id: u64,
    /// Whether the socket is connected; an unconnected socket (`TCP_CLOSE`, unconnected UDP)
    /// is keyed by the packet hash instead.
    pub connected: bool,
}

/// The owned handle of one frame in use: data window plus metadata.
///
/// It embeds an intrusive link and implements [`Node`], so it can sit in an
/// [`llist_defer::DeferList`] or a qdisc's [`llist_defer::Fifo`] without allocating.
///
/// ```
/// let pool = skb_pool::Pool::builder().frame_count(4).headroom(64).build()?;
/// let mut h = pool.handle()?;
/// let mut skb = h.alloc()?;
/// skb.put_slice(b"payload")?;                      // skb_put
/// skb.push(4)?.copy_from_slice(b"hdr:");           // skb_push
/// assert_eq!(skb.data(), b"hdr:payload");
/// assert_eq!(skb.pull(4)?, b"hdr:");               // skb_pull
/// skb.trim(3);                                     // skb_trim
/// assert_eq!(skb.data(), b"pay");
/// assert_eq!(skb.headroom(), 64);
/// assert!(skb.push(65).is_err(), "bounds-checked, never a panic");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Skb {
    meta: NonNull<FrameMeta>,
}

// SAFETY: an `Skb` is the exclusive claim on its frame and metadata; the pool it points into is
// `Sync`, and freeing from any thread is supported (that is the remote-free path).
unsafe impl Send for Skb {}
// SAFETY: `&Skb` only reads the frame and its metadata; every write needs `&mut Skb`.
unsafe impl Sync for Skb {}

impl Skb {
    /// # Safety
    ///
    /// `meta` is an in-use frame's metadata that nobody else holds, carrying one pool reference.
    #[inline]
    pub(crate) unsafe fn from_meta(meta: NonNull<FrameMeta>) -> Skb {
        Skb { meta }
    }

    /// Gives up the handle without freeing: the frame, and its pool reference, become the
    /// caller's `Frame`.
    #[inline]
    pub(crate) fn into_frame(self) -> Frame {
        Frame(ManuallyDrop::new(self).meta)
    }

    #[inline]
    fn frame_meta(&self) -> &FrameMeta {
        // SAFETY: the side array lives as long as the pool, which our reference keeps alive.
        unsafe { self.meta.as_ref() }
    }

    #[inline]
    fn m(&self) -> &SkbMeta {
        // SAFETY: we hold the frame exclusively; nobody writes its metadata but through us.
        unsafe { &*self.frame_meta().data.get() }
    }

    #[inline]
    fn m_mut(&mut self) -> &mut SkbMeta {
        // SAFETY: as in `m`, and `&mut self` excludes our own readers.
        unsafe { &mut *self.frame_meta().data.get() }
    }

    /// The frame's place, from the handle alone (the chunk header, not the metadata line).
    #[inline]
    fn place(&self) -> Place {
        place(self.meta)
    }

    #[inline]
    fn shift(&self) -> u32 {
        self.place().header().shift
    }

    #[inline]
    fn frame_size(&self) -> usize {
        1 << self.shift()
    }

    #[inline]
    fn frame_ptr(&self) -> *mut u8 {
        self.place().frame
    }

    /// Hints the CPU to start loading this frame's metadata line and the line where a fresh
    /// frame's data starts (the pool's headroom), both at once. Both addresses come from the
    /// handle itself, so a thread that receives an `Skb` from another core waits for one miss,
    /// not for the metadata before it can ask for the data. [`data`](Self::data) and
    /// [`data_mut`](Self::data_mut) ask for the data line themselves, and [`Node::from_link`]
    /// (how an `Skb` leaves a queue, a defer list or a qdisc) for the metadata line; call this
    /// one packet ahead of use to hide the misses entirely. Only a hint: it changes nothing and
    /// never faults. Do not call it for a frame whose data this core will not read: the line
    /// would leave the core that writes it next.
    #[inline]
    pub fn prefetch(&self) {
        prefetch_frame(self.meta);
    }

    /// Sets the data window (RX).
    #[inline]
    pub(crate) fn set_window(&mut self, head: u32, len: u32) {
        let m = self.m_mut();
        m.head = head;
        m.len = len;
    }

    /// Data length in bytes (`skb->len`).
    #[inline]
    pub fn len(&self) -> usize {
        self.m().len as usize
    }

    /// Whether the data is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.m().len == 0
    }

    /// Bytes free in front of the data (`skb_headroom`).
    #[inline]
    pub fn headroom(&self) -> usize {
        self.m().head as usize
    }

    /// Bytes free after the data (`skb_tailroom`).
    #[inline]
    pub fn tailroom(&self) -> usize {
        let m = self.m();
        self.frame_size() - m.head as usize - m.len as usize
    }

    /// Size of the whole frame: headroom + data + tailroom.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.frame_size()
    }

    /// The data bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // Ask for the data line (where a fresh frame's data starts) before the metadata load
        // that says where the data is: on a frame from another core, both misses overlap.
        let frame = self.prefetch_data();
        let m = self.m();
        // SAFETY: head + len ≤ frame_size (every operation keeps it so), the frame is ours, and
        // the region outlives this borrow of the handle.
        unsafe { core::slice::from_raw_parts(frame.add(m.head as usize), m.len as usize) }
    }

    /// The data bytes, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let frame = self.prefetch_data();
        let (head, len) = (self.m().head as usize, self.m().len as usize);
        // SAFETY: as in `data`, and `&mut self` makes the view unique.
        unsafe { core::slice::from_raw_parts_mut(frame.add(head), len) }
    }

    /// Starts loading the line at the pool's headroom (where data starts unless pushed or
    /// pulled) and returns the frame's first byte, both from the handle alone.
    #[inline]
    fn prefetch_data(&self) -> *mut u8 {
        prefetch_data(self.meta)
    }

    #[inline]
    fn bytes_mut(&mut self, from: usize, len: usize) -> &mut [u8] {
        // SAFETY: callers pass a range inside the frame; the frame is ours and `&mut self`
        // makes the view unique.
        unsafe { core::slice::from_raw_parts_mut(self.frame_ptr().add(from), len) }
    }

    /// `skb_reserve`: moves the (empty) data window `n` bytes further from the frame start.
    ///
    /// # Errors
    ///
    /// [`SkbError::NotEmpty`] if data was already put, [`SkbError::NoTailroom`] if `n` exceeds
    /// the tailroom.
    #[inline]
    pub fn reserve(&mut self, n: usize) -> Result<(), SkbError> {
        if !self.is_empty() {
            return Err(SkbError::NotEmpty { len: self.len() });
        }
        let have = self.tailroom();
        if n > have {
            return Err(SkbError::NoTailroom { need: n, have });
        }
        self.m_mut().head += n as u32;
        Ok(())
    }

    /// `skb_put`: extends the data by `n` bytes at the tail and returns them (uninitialised
    /// contents: whatever the frame held before).
    ///
    /// # Errors
    ///
    /// [`SkbError::NoTailroom`] if `n` exceeds the tailroom.
    #[inline]
    pub fn put(&mut self, n: usize) -> Result<&mut [u8], SkbError> {
        let have = self.tailroom();
        if n > have {
            return Err(SkbError::NoTailroom { need: n, have });
        }
        let m = self.m_mut();
        let from = (m.head + m.len) as usize;
        m.len += n as u32;
        Ok(self.bytes_mut(from, n))
    }

    /// `skb_put_data`: appends `bytes` at the tail.
    ///
    /// # Errors
    ///
    /// [`SkbError::NoTailroom`] if they do not fit.
    #[inline]
    pub fn put_slice(&mut self, bytes: &[u8]) -> Result<(), SkbError> {
        self.put(bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }

    /// `skb_push`: extends the data by `n` bytes at the head (for a header) and returns them.
    ///
    /// # Errors
    ///
    /// [`SkbError::NoHeadroom`] if `n` exceeds the headroom.
    #[inline]
    pub fn push(&mut self, n: usize) -> Result<&mut [u8], SkbError> {
        let have = self.headroom();
        if n > have {
            return Err(SkbError::NoHeadroom { need: n, have });
        }
        let m = self.m_mut();
        m.head -= n as u32;
        m.len += n as u32;
        let from = m.head as usize;
        Ok(self.bytes_mut(from, n))
    }

    /// `skb_pull`: removes `n` bytes from the head (a parsed header) and returns them; they
    /// stay in the headroom, so a later `push` of the same size restores them.
    ///
    /// # Errors
    ///
    /// [`SkbError::TooShort`] if the data holds fewer than `n` bytes.
    #[inline]
    pub fn pull(&mut self, n: usize) -> Result<&[u8], SkbError> {
        let have = self.len();
        if n > have {
            return Err(SkbError::TooShort { need: n, have });
        }
        let m = self.m_mut();
        let from = m.head as usize;
        m.head += n as u32;
        m.len -= n as u32;
        Ok(self.bytes_mut(from, n))
    }

    /// `skb_trim`: cuts the data to `len` bytes. Like the kernel's, a no-op if the data is
    /// already that short; it never fails.
    #[inline]
    pub fn trim(&mut self, len: usize) {
        if len < self.len() {
            self.m_mut().len = len as u32;
        }
    }

    /// `skb->priority` (its low 4 bits select a band through the priomap).
    #[inline]
    pub fn priority(&self) -> u32 {
        self.m().priority
    }

    /// Sets `skb->priority`.
    #[inline]
    pub fn set_priority(&mut self, priority: u32) {
        self.m_mut().priority = priority;
    }

    /// The flow hash (`skb_get_hash`), 0 if never set.
    #[inline]
    pub fn flow_hash(&self) -> u32 {
        self.m().hash
    }

    /// Sets the flow hash.
    #[inline]
    pub fn set_flow_hash(&mut self, hash: u32) {
        self.m_mut().hash = hash;
    }

    /// The sending socket, if any (`skb->sk`). With [`flow_hash`](Skb::flow_hash) it gives a
    /// qdisc its flow key: connected socket, unconnected socket, or no socket (orphan).
    #[inline]
    pub fn socket(&self) -> Option<SocketRef> {
        let m = self.m();
        (m.flags & F_SOCK != 0).then_some(SocketRef {
            id: m.sock_id,
            connected: m.flags & F_CONNECTED != 0,
        })
    }

    /// Sets or clears the sending socket.
    #[inline]
    pub fn set_socket(&mut self, sock: Option<SocketRef>) {
        let m = self.m_mut();
        m.flags &= !(F_SOCK | F_CONNECTED);
        if let Some(s) = sock {
            m.flags |= F_SOCK | if s.connected { F_CONNECTED } else { 0 };
            m.sock_id = s.id;
        } else {
            m.sock_id = 0;
        }
    }

    /// The earliest departure time in monotonic ns (`skb->tstamp` as EDT), if stamped.
    #[inline]
    pub fn tstamp(&self) -> Option<u64> {
        let m = self.m();
        (m.flags & F_TSTAMP != 0).then_some(m.tstamp)
    }

    /// Sets or clears the departure time.
    #[inline]
    pub fn set_tstamp(&mut self, ns: Option<u64>) {
        let m = self.m_mut();
        match ns {
            Some(t) => {
                m.flags |= F_TSTAMP;
                m.tstamp = t;
            }
            None => {
                m.flags &= !F_TSTAMP;
                m.tstamp = 0;
            }
        }
    }

    /// The TX queue this packet is mapped to (`skb->queue_mapping`).
    #[inline]
    pub fn queue_mapping(&self) -> u16 {
        self.m().queue_mapping
    }

    /// Sets the TX queue mapping.
    #[inline]
    pub fn set_queue_mapping(&mut self, queue: u16) {
        self.m_mut().queue_mapping = queue;
    }

    /// Whether the packet was marked ECN Congestion Experienced.
    #[inline]
    pub fn is_ce(&self) -> bool {
        self.m().flags & F_CE != 0
    }

    /// Marks the packet ECN Congestion Experienced (FQ's `ce_threshold`). A flag for the
    /// driver or stack to apply to the IP header; the bytes are not touched here.
    #[inline]
    pub fn mark_ce(&mut self) {
        self.m_mut().flags |= F_CE;
    }

    /// The owner handle that allocated the frame, which it returns to when dropped (for a
    /// frame from [`Pool::alloc`](crate::Pool::alloc), see [`home_cpu`](Self::home_cpu)
    /// instead: its id is not an owner slot).
    #[inline]
    pub fn owner(&self) -> OwnerId {
        OwnerId(self.m().owner)
    }

    /// The CPU whose cache the frame goes home to, if [`Pool::alloc`](crate::Pool::alloc)
    /// allocated it from a per-CPU cache (`None` for a handle's frame, and for one from the
    /// shared path, which goes to the overflow list).
    #[inline]
    pub fn home_cpu(&self) -> Option<u32> {
        let o = self.m().owner;
        (o & crate::percpu::HOME_FLAG != 0 && o != crate::percpu::NO_HOME)
            .then_some(u32::from(o & !crate::percpu::HOME_FLAG))
    }

    /// Whether this frame belongs to `pool` (an AF_XDP driver must not put another pool's
    /// frame on its rings: the address would name a different frame of its UMEM).
    #[inline]
    pub fn belongs_to(&self, pool: &crate::Pool) -> bool {
        core::ptr::eq(self.place().header().pool, pool.inner.as_ptr().cast_const())
    }

    /// The frame's index in the region.
    #[inline]
    pub fn frame_index(&self) -> u32 {
        self.place().index
    }

    /// The frame's start as a region offset (the AF_XDP chunk address).
    #[inline]
    pub fn frame_addr(&self) -> u64 {
        let p = self.place();
        u64::from(p.index) << p.header().shift
    }

    /// The first data byte as a region offset: the `addr` of an AF_XDP descriptor. An empty
    /// data window at the very end of the frame (all of it reserved, or all the data pulled)
    /// is named by the frame's last byte: its own offset would be the next frame's address.
    #[inline]
    pub fn data_addr(&self) -> u64 {
        self.frame_addr() + u64::from(self.desc_offset())
    }

    /// The data window's offset in the frame as a descriptor names it (see
    /// [`data_addr`](Skb::data_addr)).
    #[inline]
    fn desc_offset(&self) -> u32 {
        self.m().head.min(self.frame_size() as u32 - 1)
    }

    /// Hands the frame to the kernel: marks it in flight and returns [`data_addr`](Skb::data_addr)
    /// for a TX (or fill) descriptor; read [`len`](Skb::len) first for the descriptor length.
    /// The frame stays out of the pool (and keeps it alive) until
    /// [`Pool::skb_from_addr`](crate::Pool::skb_from_addr) (or `skb_from_rx`) takes it back.
    #[inline]
    pub fn into_addr(self) -> u64 {
        let addr = self.data_addr();
        let head = self.desc_offset();
        // Release: the metadata (and data) written so far is visible to whoever takes the
        // frame back with the Acquire CAS in `skb_from_addr`.
        self.frame_meta()
            .state
            .store((head << 2) | IN_FLIGHT, Ordering::Release);
        core::mem::forget(self);
        addr
    }
}

impl Skb {
    /// Frees many frames at once, what a driver does with a batch it has sent (the kernel's
    /// bulk free of a completed list). Consecutive frames of one pool go in runs of up to
    /// [`Pool::BULK`](crate::Pool::BULK): per-CPU frames with the same home CPU back into its
    /// cache with one critical section when the thread runs there (one rseq section, or one
    /// acquisition of the cache's try-lock), else onto this CPU's outgoing stack for their
    /// home (rseq pools) or into its outgoing batch with one lock per batch, their references
    /// given back together; handle frames through this
    /// thread's handle, looked up once a run. Frames of the shared path are dropped as usual.
    /// If the iterator panics, the frames of the run being gathered (at most
    /// [`Pool::BULK`](crate::Pool::BULK), already taken from their `Skb`s: a full run is sent
    /// when the next frame comes) are leaked: never handed out again, never counted free.
    ///
    /// ```
    /// use skb_pool::{Pool, Skb};
    ///
    /// let pool = Pool::builder().frame_count(256).build()?;
    /// let skbs: Vec<Skb> = (0..40).map(|_| pool.alloc()).collect::<Result<_, _>>()?;
    /// Skb::free_bulk(skbs);
    /// assert_eq!(pool.stats().free, 256);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn free_bulk<I: IntoIterator<Item = Skb>>(skbs: I) {
        let mut buf = [0usize; crate::Pool::BULK];
        let mut n = 0;
        let mut run = (core::ptr::null::<PoolInner>(), 0u16);
        for skb in skbs {
            let frame = skb.into_frame();
            let owner = frame.owner();
            if owner == crate::percpu::NO_HOME {
                crate::handle::free_frame(frame);
                continue;
            }
            // Handle frames of one pool make one run (0: no home flag), whatever their owner.
            let stamp = if owner & crate::percpu::HOME_FLAG == 0 {
                0
            } else {
                owner
            };
            let key = (frame.pool(), stamp);
            if n == buf.len() || (n > 0 && key != run) {
                free_run(run.0, run.1, &buf[..n]);
                n = 0;
            }
            run = key;
            buf[n] = frame.0.as_ptr() as usize;
            n += 1;
        }
        free_run(run.0, run.1, &buf[..n]);
    }
}

/// Frees a run of frames of the pool at `pool`: handle frames (`home` 0) through the thread's
/// handle state, looked up once; per-CPU frames all stamped `home` with one bulk push if the
/// thread runs there, else (or for what did not fit) the remote path in bulk.
fn free_run(pool: *const PoolInner, home: u16, frames: &[usize]) {
    if frames.is_empty() {
        return;
    }
    if home & crate::percpu::HOME_FLAG == 0 {
        crate::handle::free_owned_run(pool, frames);
        return;
    }
    let cpu = u32::from(home & !crate::percpu::HOME_FLAG);
    // SAFETY: `free_bulk` gathered these from `Skb`s it consumed: in-use frames of the pool at
    // `pool`, stamped `home`, one reference each, which keep the pool alive; a commit that gives
    // references back is the last use of the pool on each path.
    unsafe {
        let this = NonNull::new_unchecked(pool.cast_mut());
        let k = this.as_ref().percpu_free_bulk(cpu, frames);
        if k < frames.len() {
            PoolInner::percpu_free_remote_bulk(this, cpu, &frames[k..]);
        }
    }
}

/// Frames a bulk allocation took, handed to the caller's `Extend` after every pool structure
/// it touched is let go (an `Extend` is user code: it may drop an `Skb` of the same pool on
/// this thread, or stop early). Whatever it does not take is freed; if it panics, those are
/// leaked instead (never handed out twice).
pub(crate) struct Handout {
    metas: [usize; crate::Pool::BULK],
    next: usize,
    len: usize,
}

impl Handout {
    pub(crate) fn new() -> Handout {
        Handout {
            metas: [0; crate::Pool::BULK],
            next: 0,
            len: 0,
        }
    }

    /// Room for [`Pool::BULK`](crate::Pool::BULK) metadata addresses, to be filled from the
    /// front and then declared with [`set_len`](Self::set_len).
    pub(crate) fn slots(&mut self) -> &mut [usize; crate::Pool::BULK] {
        &mut self.metas
    }

    /// Declares the first `k` slots filled.
    ///
    /// # Safety
    ///
    /// Each of `slots()[..k]` is the metadata address of an in-use frame, carrying one pool
    /// reference, that the caller gives up (each becomes one `Skb`).
    pub(crate) unsafe fn set_len(&mut self, k: usize) {
        debug_assert!(k <= self.metas.len() && self.next == 0 && self.len == 0);
        self.len = k;
    }
}

impl Handout {
    /// Hands the frames to `out` as `Skb`s, through an iterator of exact length (so that a
    /// `Vec` reserves once and writes straight in), frees those it does not take, and leaves
    /// this empty for the next [`set_len`](Self::set_len).
    #[inline]
    pub(crate) fn hand_to<E: Extend<Skb>>(&mut self, out: &mut E) {
        let Handout { metas, next, len } = self;
        // Counted in a local, so that the loop keeps it in a register; until `out` returns,
        // `next` says all were taken (if `out` panics the rest are not freed twice: they leak).
        *next = *len;
        let mut taken = 0;
        out.extend(metas[..*len].iter().map(|&m| {
            taken += 1;
            // SAFETY: `set_len`'s contract: an in-use frame with one reference, taken once
            // (`next` is past it, so it is not freed below).
            unsafe { Skb::from_meta(NonNull::new_unchecked(m as *mut FrameMeta)) }
        }));
        *next = taken;
        self.free_rest();
    }

    /// Frees the frames not handed out and empties this.
    fn free_rest(&mut self) {
        while self.next < self.len {
            let m = self.metas[self.next];
            self.next += 1;
            // SAFETY: as in `hand_to`: not handed out, so ours to free, once.
            drop(unsafe { Skb::from_meta(NonNull::new_unchecked(m as *mut FrameMeta)) });
        }
        self.next = 0;
        self.len = 0;
    }
}

impl Drop for Handout {
    fn drop(&mut self) {
        // Frames declared but never handed over go back to the pool. After a panic in the
        // caller's `Extend`, `next` is past them all: nothing is freed twice.
        self.free_rest();
    }
}

impl Drop for Skb {
    #[inline]
    fn drop(&mut self) {
        crate::handle::free_frame(Frame(self.meta));
    }
}

// SAFETY: the link is the first field of the `repr(C)` metadata entry, which lives in the
// pool's side array for as long as the frame's pool reference (held by the listed handle) lasts;
// `from_link` rebuilds the same claim.
unsafe impl Node for Skb {
    #[inline]
    fn into_link(self) -> NonNull<Link> {
        ManuallyDrop::new(self).meta.cast()
    }

    #[inline]
    unsafe fn from_link(link: NonNull<Link>) -> Self {
        let meta: NonNull<FrameMeta> = link.cast();
        // A handle leaving a queue is about to be used, often on another core than the one
        // that wrote it: ask for its metadata line now. Not for its data line: a consumer that
        // never reads the data (a driver whose NIC or kernel copies it elsewhere) would take
        // the line from the core that writes it next; `data()` asks for it when it is read.
        llist_defer::hint::prefetch(meta.as_ptr());
        Skb { meta }
    }

    /// The drain hint: `head`'s `next`, read only if `head` is an entry of `mine`'s side array.
    /// `mine` is a frame the pusher holds, so its pool, and with it the whole side array, stays
    /// allocated; a frame of another pool could be freed with its pool meanwhile, and gets no
    /// hint.
    #[inline]
    unsafe fn peek_next(mine: NonNull<Link>, head: NonNull<Link>) -> *mut Link {
        if crate::meta::in_same_array(mine.cast(), head.as_ptr().cast()) {
            // SAFETY: `head` is inside the side array that `mine`'s reference keeps allocated.
            unsafe { Link::peek_next(head) }
        } else {
            core::ptr::null_mut()
        }
    }
}

impl fmt::Debug for Skb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Skb")
            .field("frame", &self.frame_index())
            .field("owner", &self.owner())
            .field("headroom", &self.headroom())
            .field("len", &self.len())
            .field("priority", &self.priority())
            .field("hash", &self.flow_hash())
            .field("socket", &self.socket())
            .field("tstamp", &self.tstamp())
            .field("queue", &self.queue_mapping())
            .field("ce", &self.is_ce())
            .finish()
    }
}

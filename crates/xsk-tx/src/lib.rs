//! AF_XDP backend: UMEM from the frame pool, one socket per NIC queue, TX and completion rings.
//!
//! Not written yet.

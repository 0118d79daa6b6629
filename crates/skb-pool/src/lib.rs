//! Per-owner frame pool with remote-free deferral: the user-space `skb_attempt_defer_free`.
//!
//! Not written yet. It will own the frame region (one mmap, usable as an AF_XDP UMEM), the `Skb`
//! handle whose drop returns the frame home, per-owner handles with a local cache, and the
//! lock-free remote-free path through the owner's `DeferList`.

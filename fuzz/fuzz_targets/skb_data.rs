//! The `Skb` data API (reserve / put / push / pull / trim) with arbitrary sizes against a model
//! of the frame: the data window never leaves the frame, errors are typed and change nothing,
//! and the bytes read back are the bytes written.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use skb_pool::{Pool, PoolHandle};

thread_local! {
    static HANDLE: RefCell<PoolHandle> =
        RefCell::new(Pool::builder().frame_count(4).build().unwrap().handle().unwrap());
}

fuzz_target!(|data: &[u8]| {
    HANDLE.with(|h| {
        let mut h = h.borrow_mut();
        let mut skb = h.alloc().unwrap();
        let cap = skb.capacity();
        // The model: the whole frame's known bytes, and the data window.
        let mut frame: Vec<Option<u8>> = vec![None; cap];
        let (mut head, mut len) = (skb.headroom(), 0usize);
        for (step, c) in data.chunks(3).enumerate() {
            let b = |i: usize| c.get(i).copied().unwrap_or(0);
            // Sizes up to well past the frame, including huge ones.
            let n = match b(1) >> 6 {
                0 => usize::from(b(2)),
                1 => usize::from(b(2)) * 17,
                2 => usize::from(b(1) & 63) << 8 | usize::from(b(2)),
                _ => usize::MAX - usize::from(b(2)),
            };
            let fill = step as u8;
            match b(0) % 5 {
                0 => match skb.reserve(n) {
                    Ok(()) => {
                        assert!(len == 0 && n <= cap - head - len);
                        head += n;
                    }
                    Err(_) => assert!(len != 0 || n > cap - head - len),
                },
                1 => match skb.put(n) {
                    Ok(bytes) => {
                        assert!(n <= cap - head - len);
                        bytes.fill(fill);
                        frame[head + len..head + len + n].fill(Some(fill));
                        len += n;
                    }
                    Err(_) => assert!(n > cap - head - len),
                },
                2 => match skb.push(n) {
                    Ok(bytes) => {
                        assert!(n <= head);
                        bytes.fill(fill);
                        head -= n;
                        len += n;
                        frame[head..head + n].fill(Some(fill));
                    }
                    Err(_) => assert!(n > head),
                },
                3 => match skb.pull(n) {
                    Ok(bytes) => {
                        assert!(n <= len);
                        assert_eq!(bytes.len(), n);
                        head += n;
                        len -= n;
                    }
                    Err(_) => assert!(n > len),
                },
                _ => {
                    skb.trim(n);
                    len = len.min(n);
                }
            }
            assert_eq!((skb.headroom(), skb.len()), (head, len));
            assert_eq!(skb.headroom() + skb.len() + skb.tailroom(), cap);
            for (got, want) in skb.data().iter().zip(&frame[head..head + len]) {
                if let Some(w) = want {
                    assert_eq!(got, w);
                }
            }
        }
    });
});

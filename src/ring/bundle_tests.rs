//! Recv bundles through a real ring and a loopback TCP connection: a bundle's bytes come back
//! in stream order over consecutive buffers (wrapping at the ring size), each buffer recycled
//! once keeps the ring going.

use std::{
    io::Write,
    net::{TcpListener, TcpStream},
    os::fd::AsRawFd,
};

use super::*;

const BUF: u32 = 4096;

#[test]
fn a_bundle_spans_consecutive_buffers_in_stream_order_and_wraps_at_the_ring_size() {
    let layout = BufRingLayout {
        entries: 4,
        buf_size: BUF,
        order: BufOrder::ById,
    };
    let arena = Arena::allocate_on_node(layout.arena_bytes(), 0, false).unwrap();
    let size = RingSize {
        sq_entries: 8,
        cq_entries: 64,
    };
    let mut engine = Engine::new(size, arena, probe::TCP_SINK_OPS, false, Some(layout)).unwrap();
    // Before 6.10 (Debian 12's 6.1, in the lab) the engine must say it has none, and the TCP sink
    // takes plain multishot receives instead (tests/tcp.rs).
    if probe::tests::kernel_release() < (6, 10) {
        assert!(!engine.has_recv_bundles());
        return;
    }
    assert!(engine.has_recv_bundles());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    let stream: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    let mut got = Vec::new();
    let mut next_bid = 0u16;
    let mut widest = 0;
    let mut wrapped = 0;
    // Bytes written before the receive is armed make the first completion a bundle.
    client.write_all(&stream[..10_000]).unwrap();
    assert!(engine.push_recv_multi_bundle(server.as_raw_fd(), 1));
    let mut written = 10_000;
    let mut completions = [Completion::default(); 16];
    for _ in 0..1000 {
        if got.len() == stream.len() {
            break;
        }
        engine
            .submit(Wait::One {
                timeout_ns: 100_000_000,
            })
            .unwrap();
        let n = engine.reap(&mut completions);
        for c in &completions[..n] {
            assert!(c.result > 0, "{c:?}");
            assert!(c.more(), "the multishot receive stays armed: {c:?}");
            let bid = c.buffer_id().unwrap();
            assert_eq!(bid, next_bid, "bundles start where the last one ended");
            let len = c.result as usize;
            widest = widest.max(len);
            for part in engine.received_bytes(bid, len) {
                got.extend_from_slice(part);
            }
            engine.recycle_received(bid, c.result);
            let used = len.div_ceil(BUF as usize) as u16;
            wrapped += u32::from(bid + used > 4);
            next_bid = (bid + used) % 4;
        }
        engine.publish_buffers();
        if got.len() == written && written < stream.len() {
            let more = (stream.len() - written).min(9_000);
            client.write_all(&stream[written..written + more]).unwrap();
            written += more;
        }
    }
    assert_eq!(got.len(), stream.len());
    assert!(got == stream, "bytes come back in stream order");
    assert!(widest > BUF as usize, "a bundle spanned buffers: {widest}");
    assert!(wrapped > 0, "a bundle wrapped past the last buffer");
}

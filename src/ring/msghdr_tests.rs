//! Receives through `msghdr`s in the arena: bad tables, entries and ranges are refused, the
//! bytes the kernel reads pointers from are never handed out for writing, and datagrams on a
//! real loopback UDP pair come back with the address and control messages the kernel wrote
//! (single-shot into the arena ranges, multishot into the provided buffer); a send through an
//! entry carries its control message, and its transmit stamp comes back from the error queue.

use std::{
    net::UdpSocket,
    os::fd::AsRawFd,
    time::{Duration, Instant},
};

use super::msghdr::MsghdrLengths;
use super::*;

const LAYOUT: BufRingLayout = BufRingLayout {
    entries: 4,
    buf_size: 2048,
    order: BufOrder::ById,
};
/// Where the test's receive memory starts: right after the buffer ring.
const TAIL: usize = 4096 + 4 * 2048;
const NAME: ArenaRange = ArenaRange {
    offset: TAIL + 256,
    len: RECV_NAME,
};
const CONTROL: ArenaRange = ArenaRange {
    offset: TAIL + 512,
    len: 64,
};
const RECV_NAME: usize = std::mem::size_of::<libc::sockaddr_in6>();
/// `CMSG_SPACE(1)`: one `IP_TOS` control message.
const TOS_CONTROL: usize = 24;
const TOS: u8 = 0x10;

fn engine() -> Engine {
    assert_eq!(LAYOUT.arena_bytes(), TAIL);
    let arena = Arena::allocate_on_node(TAIL + 4096, 0, false).unwrap();
    let size = RingSize {
        sq_entries: 8,
        cq_entries: 64,
    };
    Engine::new(size, arena, probe::SINK_OPS, false, Some(LAYOUT)).unwrap()
}

fn range(offset: usize, len: usize) -> ArenaRange {
    ArenaRange { offset, len }
}

/// A receiving socket that asks for `IP_TOS`, and a sender marking its datagrams with [`TOS`].
fn udp_pair() -> (UdpSocket, UdpSocket) {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket2::SockRef::from(&rx).set_recv_tos_v4(true).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket2::SockRef::from(&tx)
        .set_tos_v4(u32::from(TOS))
        .unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    (rx, tx)
}

/// Submits and reaps until `want` completions arrived (at most 2 s).
fn completions(engine: &mut Engine, want: usize) -> Vec<Completion> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut got = Vec::new();
    let mut out = [Completion::default(); 8];
    while got.len() < want && Instant::now() < deadline {
        engine
            .submit(Wait::One {
                timeout_ns: 100_000_000,
            })
            .unwrap();
        let n = engine.reap(&mut out);
        got.extend_from_slice(&out[..n]);
    }
    assert_eq!(got.len(), want, "completions: {got:?}");
    got
}

/// The `IP_TOS` value in `control` (one control message), checked field by field.
fn tos_of(control: &[u8]) -> u8 {
    assert_eq!(control.len(), TOS_CONTROL);
    let len = usize::from_ne_bytes(control[0..8].try_into().unwrap());
    let level = i32::from_ne_bytes(control[8..12].try_into().unwrap());
    let kind = i32::from_ne_bytes(control[12..16].try_into().unwrap());
    assert_eq!((len, level, kind), (17, libc::IPPROTO_IP, libc::IP_TOS));
    control[16]
}

/// The port of the `sockaddr_in` in `name`.
fn port_of(name: &[u8]) -> u16 {
    assert_eq!(name.len(), std::mem::size_of::<libc::sockaddr_in>());
    let family = u16::from_ne_bytes(name[0..2].try_into().unwrap());
    assert_eq!(i32::from(family), libc::AF_INET);
    u16::from_be_bytes(name[2..4].try_into().unwrap())
}

#[test]
fn bad_tables_entries_and_ranges_are_refused() {
    let mut engine = engine();
    assert!(
        !engine.push_recvmsg_nowait(-1, 0, NAME, CONTROL, 1),
        "no table yet"
    );
    assert!(!engine.reserve_msghdrs(TAIL + 4, 2), "misaligned");
    assert!(
        !engine.reserve_msghdrs(0, 1),
        "over the buffer-ring entries"
    );
    assert!(!engine.reserve_msghdrs(4096 + 2048, 1), "over a buffer");
    assert!(
        !engine.reserve_msghdrs(TAIL + 4096 - 56, 2),
        "leaves the arena"
    );
    assert!(!engine.reserve_msghdrs(TAIL, 0), "no entries");
    assert!(!engine.reserve_msghdrs(TAIL, usize::MAX), "overflows");
    assert!(engine.reserve_msghdrs(TAIL, 2));
    assert!(!engine.reserve_msghdrs(TAIL + 1024, 1), "reserved once");

    assert!(
        !engine.push_recvmsg_nowait(-1, 2, NAME, CONTROL, 1),
        "past the table"
    );
    assert!(
        !engine.push_recvmsg_multi(-1, 2, NAME, CONTROL, 1),
        "past the table"
    );
    let bad = [
        (range(TAIL + 4096 - 10, RECV_NAME), "leaves the arena"),
        (range(usize::MAX, 2), "overflows"),
        (range(TAIL + 100, RECV_NAME), "over the table"),
        (range(0, 16), "over the buffer-ring entries"),
        (range(4096 + 10, RECV_NAME), "over a buffer"),
    ];
    for (r, why) in bad {
        assert!(
            !engine.push_recvmsg_nowait(-1, 0, r, CONTROL, 1),
            "name {why}"
        );
        assert!(
            !engine.push_recvmsg_nowait(-1, 0, NAME, r, 1),
            "control {why}"
        );
        assert!(
            !engine.push_recvmsg_multi(-1, 0, r, CONTROL, 1),
            "name {why}"
        );
        assert!(
            !engine.push_recvmsg_multi(-1, 0, NAME, r, 1),
            "control {why}"
        );
    }
    assert_eq!(engine.msghdr_lengths(0).unwrap().name, 0, "nothing written");
    assert!(engine.push_recvmsg_nowait(-1, 1, NAME, CONTROL, 1));
    let queued = engine.msghdr_lengths(1).unwrap();
    assert_eq!((queued.name, queued.control), (RECV_NAME, 64));
    assert!(engine.msghdr_lengths(2).is_none());

    assert!(engine.arena_bytes_mut(TAIL, 8).is_none(), "a msghdr");
    assert!(
        engine.arena_bytes_mut(TAIL + 100, 20).is_none(),
        "ends in one"
    );
    assert!(
        engine.arena_bytes_mut(0, 1).is_none(),
        "a buffer-ring entry"
    );
    assert!(
        engine
            .arena_bytes_mut(TAIL + 2 * Engine::MSGHDR_BYTES, 8)
            .is_some(),
        "after the table"
    );
    assert!(engine.arena_bytes_mut(4096, 8).is_some(), "buffer bytes");
}

#[test]
fn a_nowait_recvmsg_fills_the_arena_name_and_control_and_their_lengths() {
    let mut engine = engine();
    assert!(engine.reserve_msghdrs(TAIL, 1));
    let (rx, tx) = udp_pair();
    let fd = rx.as_raw_fd();
    assert!(engine.push_recvmsg_nowait(fd, 0, NAME, CONTROL, 1));
    let empty = completions(&mut engine, 1)[0];
    assert_eq!(
        empty.result,
        -libc::EAGAIN,
        "never waits on an empty socket"
    );

    let payload = b"into the arena";
    tx.send(payload).unwrap();
    assert!(engine.push_poll_readable(fd, 2));
    let poll = completions(&mut engine, 1)[0];
    assert_eq!(poll.user_data, 2);
    assert!(poll.result & libc::POLLIN as i32 != 0, "{poll:?}");
    assert!(engine.push_recvmsg_nowait(fd, 0, NAME, CONTROL, 3));
    let c = completions(&mut engine, 1)[0];
    assert_eq!((c.user_data, c.result), (3, payload.len() as i32));
    let bid = c.buffer_id().expect("a provided buffer");
    assert_eq!(&engine.received_buffer(bid)[..payload.len()], payload);
    let lengths = engine.msghdr_lengths(0).unwrap();
    assert_eq!(
        lengths,
        MsghdrLengths {
            name: std::mem::size_of::<libc::sockaddr_in>(),
            control: TOS_CONTROL,
            flags: 0,
        }
    );
    let name = engine.arena().bytes(NAME.offset, lengths.name).unwrap();
    assert_eq!(port_of(name), tx.local_addr().unwrap().port());
    let control = engine
        .arena()
        .bytes(CONTROL.offset, lengths.control)
        .unwrap();
    assert_eq!(tos_of(control), TOS);
}

#[test]
fn a_multishot_recvmsg_writes_name_and_control_into_each_buffer() {
    let mut engine = engine();
    assert!(engine.reserve_msghdrs(TAIL, 1));
    let (rx, tx) = udp_pair();
    assert!(engine.push_recvmsg_multi(rx.as_raw_fd(), 0, NAME, CONTROL, 7));
    engine.submit(Wait::Nothing).unwrap();
    let sent: [&[u8]; 2] = [b"first", b"second datagram"];
    for datagram in sent {
        tx.send(datagram).unwrap();
    }
    for (c, datagram) in completions(&mut engine, 2).into_iter().zip(sent) {
        assert_eq!(c.user_data, 7);
        assert!(c.more(), "the multishot stays armed");
        let bid = c.buffer_id().expect("a provided buffer");
        let buffer = &engine.received_buffer(bid)[..c.result as usize];
        let out = parse_recvmsg_out(buffer, NAME.len, CONTROL.len).unwrap();
        assert_eq!(out.payload_data(), datagram);
        assert_eq!(port_of(out.name_data()), tx.local_addr().unwrap().port());
        assert_eq!(tos_of(out.control_data()), TOS);
        assert!(parse_recvmsg_out(&buffer[..20], NAME.len, CONTROL.len).is_none());
        engine.recycle_buffer(bid);
    }
    engine.publish_buffers();
}

#[test]
fn a_sendmsg_asking_for_a_transmit_stamp_gets_it_from_the_error_queue() {
    let mut engine = engine();
    assert!(engine.reserve_msghdrs(TAIL, 2));
    let (rx, tx) = udp_pair();
    let fd = tx.as_raw_fd();
    assert!(crate::net::report_software_stamps(&tx));
    // Bad ranges are refused before anything is queued.
    for bad in [
        range(TAIL + 100, 8),
        range(TAIL + 4096 - 4, 8),
        range(usize::MAX, 2),
    ] {
        assert!(!engine.push_sendmsg(fd, 0, bad, CONTROL, 1));
        assert!(!engine.push_recv_errqueue(fd, 1, bad, CONTROL, 1));
        assert!(!engine.push_sendmsg(fd, 0, NAME, bad, 1));
    }
    assert!(
        !engine.push_sendmsg(fd, 2, NAME, CONTROL, 1),
        "past the table"
    );
    assert!(engine.push_recv_errqueue(fd, 1, NAME, CONTROL, 1));
    assert_eq!(
        completions(&mut engine, 1)[0].result,
        -libc::EAGAIN,
        "nothing queued yet"
    );

    let payload = range(TAIL + 1024, 40);
    let request = range(TAIL + 2048, 24);
    let sent_before = crate::clock::realtime_ns();
    {
        let bytes = engine.arena_bytes_mut(payload.offset, payload.len).unwrap();
        bytes.copy_from_slice(&[0x5a; 40]);
        let control = engine.arena_bytes_mut(request.offset, request.len).unwrap();
        control[0..8].copy_from_slice(&20usize.to_ne_bytes());
        control[8..12].copy_from_slice(&libc::SOL_SOCKET.to_ne_bytes());
        control[12..16].copy_from_slice(&libc::SO_TIMESTAMPING.to_ne_bytes());
        control[16..20].copy_from_slice(&libc::SOF_TIMESTAMPING_TX_SOFTWARE.to_ne_bytes());
    }
    assert!(engine.push_sendmsg(fd, 0, payload, request, 2));
    let sent = completions(&mut engine, 1)[0];
    assert_eq!((sent.user_data, sent.result), (2, 40));
    let mut got = [0u8; 64];
    assert_eq!(
        rx.recv(&mut got).unwrap(),
        40,
        "the datagram itself arrived"
    );

    let data = range(TAIL + 3072, 256);
    let control = range(TAIL + 512, 256);
    assert!(engine.push_recv_errqueue(fd, 1, data, control, 3));
    let read = completions(&mut engine, 1)[0];
    assert_eq!(read.user_data, 3);
    assert!(
        read.result >= 40,
        "the packet comes back with its headers: {read:?}"
    );
    let lengths = engine.msghdr_lengths(1).unwrap();
    let packet = engine
        .arena()
        .bytes(data.offset, read.result as usize)
        .unwrap();
    assert!(packet.ends_with(&[0x5a; 40]), "{packet:?}");
    let cmsgs = engine
        .arena()
        .bytes(control.offset, lengths.control)
        .unwrap();
    let stamp = crate::net::cmsg::parse(cmsgs)
        .stamp_ns
        .expect("a software transmit stamp");
    assert!(
        stamp >= sent_before && stamp <= crate::clock::realtime_ns(),
        "{stamp}"
    );
    // One stamp per request: the queue is empty again.
    assert!(engine.push_recv_errqueue(fd, 1, data, control, 4));
    assert_eq!(completions(&mut engine, 1)[0].result, -libc::EAGAIN);
}

//! Flow steering across a sink's queues: a classic BPF program attached to the `SO_REUSEPORT`
//! group (`SO_ATTACH_REUSEPORT_CBPF`) picks the queue from the ringblast header instead of the
//! kernel's 4-tuple hash.
//!
//! The kernel's hash spreads a handful of flows unevenly (8 flows on 2 queues often land 2 and
//! 6). The program reads the header's epoch and flow id and returns
//! `(epoch mod N + flow mod N) mod N` (from the full or the compact header form): the flows of one sender alternate over the queues, so
//! `F` flows on `N` queues give every queue `F / N` of them (exactly, when `N` divides `F`), and
//! different senders (random epochs) start at different queues. A datagram that is too short
//! or lacks the magic gets an out-of-range index, and the kernel falls back to its hash for it.
//! The kernel runs the program on each datagram with its data at the UDP payload; the worker
//! loops do nothing for it.

use std::os::fd::AsFd;

use nix::sys::socket::{setsockopt, sockopt};
use socket2::Socket;

use crate::{error::Error, proto::header};

// Classic BPF opcodes (linux/filter.h), as the kernel encodes them.
const LD_LEN: u16 = 0x80; // BPF_LD | BPF_W | BPF_LEN: A = payload length
const LD_WORD: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS: A = u32 at k (big-endian)
const LD_HALF: u16 = 0x28; // BPF_LD | BPF_H | BPF_ABS: A = u16 at k (big-endian)
const JGE: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const MOD: u16 = 0x94; // BPF_ALU | BPF_MOD | BPF_K: A %= k
const ADD_X: u16 = 0x0c; // BPF_ALU | BPF_ADD | BPF_X: A += X
const TAX: u16 = 0x07; // BPF_MISC | BPF_TAX: X = A
const RET_A: u16 = 0x16; // BPF_RET | BPF_A
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

/// Header offsets the program reads (see `proto::header`): the full form ...
const FLOW_AT: u32 = 10;
const EPOCH_AT: u32 = 12;
/// ... and the compact one.
const COMPACT_FLOW_AT: u32 = 8;
const COMPACT_EPOCH_AT: u32 = 10;
/// Bytes the program needs: through the end of the full form's epoch (a compact header has 18).
const NEEDED: u32 = 16;
/// An index no group has: the kernel then uses its own hash.
const FALL_BACK: u32 = u32::MAX;

fn op(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The steering program for `queues` queues.
pub(crate) fn program(queues: u32) -> Vec<libc::sock_filter> {
    let n = queues.max(1);
    let pick = |epoch_at: u32, flow_at: u32| {
        [
            op(LD_WORD, epoch_at),
            op(MOD, n),
            op(TAX, 0),
            op(LD_HALF, flow_at),
            op(MOD, n),
            op(ADD_X, 0),
            op(MOD, n),
            op(RET_A, 0),
        ]
    };
    let mut prog = vec![
        op(LD_LEN, 0),
        jump(JGE, NEEDED, 0, 19), // too short: to the fall-back return
        op(LD_WORD, 0),
        jump(JEQ, header::MAGIC, 1, 0), // the full form: past the next test
        jump(JEQ, header::COMPACT_MAGIC, 8, 16), // compact: past the full form's 8; else fall back
    ];
    prog.extend(pick(EPOCH_AT, FLOW_AT));
    prog.extend(pick(COMPACT_EPOCH_AT, COMPACT_FLOW_AT));
    prog.push(op(RET_K, FALL_BACK));
    debug_assert_eq!(
        prog.len(),
        22,
        "the jump offsets above assume 22 instructions"
    );
    prog
}

/// Attaches the steering program for `queues` queues to `sock`'s `SO_REUSEPORT` group (any
/// member sets it for the whole group; attaching it again replaces it with the same program).
pub(crate) fn attach(sock: &Socket, queues: u32) -> Result<(), Error> {
    let mut prog = program(queues);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    setsockopt(&sock.as_fd(), sockopt::AttachReusePortCbpf, &fprog).map_err(|e| {
        Error::Unsupported(format!(
            "this kernel refuses SO_ATTACH_REUSEPORT_CBPF ({e}); run the sink with --steer hash (needs Linux 4.5)"
        ))
    })
}

#[cfg(test)]
/// The queue index the program picks for a datagram (`None`: the kernel's hash), computed the
/// same way in Rust, for tests and for reading the program.
pub(crate) fn queue_for(payload: &[u8], queues: u32) -> Option<u32> {
    let n = queues.max(1);
    let word = |at: u32| {
        let at = at as usize;
        payload
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let half = |at: u32| {
        let at = at as usize;
        payload
            .get(at..at + 2)
            .map(|b| u32::from(u16::from_be_bytes([b[0], b[1]])))
    };
    if payload.len() < NEEDED as usize {
        return None;
    }
    let (epoch_at, flow_at) = match word(0)? {
        header::MAGIC => (EPOCH_AT, FLOW_AT),
        header::COMPACT_MAGIC => (COMPACT_EPOCH_AT, COMPACT_FLOW_AT),
        _ => return None,
    };
    Some((word(epoch_at)? % n + half(flow_at)? % n) % n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::header::Header;

    fn datagram(flow: u32, epoch: u32) -> Vec<u8> {
        let h = Header {
            flags: 0,
            failed: 0,
            flow,
            epoch,
            seq: 7,
            timestamp_ns: 1,
        };
        let mut d = h.to_bytes().to_vec();
        d.extend_from_slice(&[0; 32]);
        d
    }

    #[test]
    fn jumps_land_where_they_should() {
        let prog = program(4);
        let target = |at: usize, off: u8| at + 1 + off as usize;
        let last = prog.len() - 1;
        assert_eq!(prog.last().map(|i| (i.code, i.k)), Some((RET_K, FALL_BACK)));
        // Too short: the fall-back return.
        assert_eq!(target(1, prog[1].jf), last);
        // The full form: its own epoch load; the compact form: its own; anything else: back.
        assert_eq!(prog[target(3, prog[3].jt)].k, EPOCH_AT);
        assert_eq!(prog[target(4, prog[4].jt)].k, COMPACT_EPOCH_AT);
        assert_eq!(target(4, prog[4].jf), last);
        assert_eq!(prog[target(4, prog[4].jt)].code, LD_WORD);
    }

    #[test]
    fn compact_datagrams_are_steered_too() {
        let h = Header {
            flags: 0,
            failed: 0,
            flow: 0,
            epoch: 5,
            seq: 7,
            timestamp_ns: 0,
        };
        let per_queue: Vec<u32> = (0..4)
            .map(|flow| queue_for(&Header { flow, ..h }.to_compact_bytes(), 2).unwrap())
            .collect();
        assert_eq!(per_queue, vec![1, 0, 1, 0]);
    }

    #[test]
    fn one_senders_flows_alternate_over_the_queues() {
        for epoch in [0, 1, 0x3d4f_e4ba, u32::MAX] {
            let mut per_queue = [0u32; 4];
            for flow in 0..8 {
                per_queue[queue_for(&datagram(flow, epoch), 4).unwrap() as usize] += 1;
            }
            assert_eq!(per_queue, [2, 2, 2, 2], "epoch {epoch:#x}");
        }
    }

    #[test]
    fn foreign_and_short_datagrams_fall_back_to_the_hash() {
        assert_eq!(queue_for(b"hello, this is not ringblast!", 2), None);
        assert_eq!(queue_for(&datagram(1, 2)[..15], 2), None);
        assert_eq!(queue_for(&datagram(1, 2), 1), Some(0));
    }

    #[test]
    fn the_kernel_accepts_the_program() {
        let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        let sock = crate::net::sink_socket(
            addr,
            crate::net::SinkSocketOptions {
                gro: false,
                reuse_port: true,
                receive_stamps: true,
            },
        )
        .unwrap();
        attach(&sock, 3).unwrap();
    }
}

//! The sender's send slots: fixed regions of the registered arena, one per send in flight,
//! each large enough for a GSO train of `gso` packets of the largest size. Each send takes the
//! next size class of the mix's fixed order (see `mix`), one packet per send when mixed.
//!
//! Free slots circulate through a fixed FIFO, so the loop never allocates. A slot is written
//! only while free; the kernel reads it only while it is in flight.

use super::SenderConfig;
use crate::{
    error::Error,
    proto::{
        header::{COMPACT_LEN, Header},
        proof::{FLAG_TAGGED, RunProof},
    },
    ring::Engine,
};

/// Send slots and their bookkeeping.
#[derive(Debug)]
pub(super) struct Slots {
    slot_bytes: usize,
    flow_ids: Vec<u32>,
    free: Vec<u32>,
    head: usize,
    free_count: usize,
    flow_of: Vec<u32>,
    segments: Vec<u16>,
    /// Payload bytes of each size class.
    payloads: Vec<usize>,
    /// Class index of each send of one cycle, and where the next send is in it.
    order: Vec<u8>,
    next_in_order: usize,
    class_of: Vec<u8>,
    /// With a secret, each part's proof (`proto::proof`), written after every header.
    proofs: Vec<RunProof>,
    /// The header flags: [`FLAG_TAGGED`] when the proof is a tag.
    flags: u8,
}

impl Slots {
    fn slot_bytes(config: &SenderConfig) -> usize {
        (config.size * usize::from(config.gso)).div_ceil(64) * 64
    }

    /// Arena bytes needed for `config.window` slots.
    pub(super) fn arena_bytes(config: &SenderConfig) -> usize {
        Self::slot_bytes(config) * config.window as usize
    }

    /// Lays out the slots and writes the payload fill (`--payload`) into all of them.
    pub(super) fn new(
        config: &SenderConfig,
        engine: &mut Engine,
        flow_ids: &[u32],
    ) -> Result<Slots, Error> {
        if config.sizes.classes.iter().any(|c| c.payload < COMPACT_LEN)
            || config.sizes.max_payload() > config.size
            || config.sizes.order.is_empty()
        {
            return Err(Error::Usage(format!(
                "every --size must hold the {COMPACT_LEN}-byte compact ringblast header and fit the {}-byte slot",
                config.size
            )));
        }
        let window = config.window as usize;
        let slot_bytes = Self::slot_bytes(config);
        // Nothing is in flight yet: the payload fill is written once, here.
        match engine.arena_bytes_mut(0, slot_bytes * window) {
            Some(bytes) => config.payload.fill(bytes),
            None => return Err(Error::Usage("arena smaller than the send window".into())),
        }
        Ok(Slots {
            slot_bytes,
            flow_ids: flow_ids.to_vec(),
            free: (0..config.window).collect(),
            head: 0,
            free_count: window,
            flow_of: vec![0; window],
            segments: vec![0; window],
            payloads: config.sizes.classes.iter().map(|c| c.payload).collect(),
            order: config.sizes.order.clone(),
            next_in_order: 0,
            class_of: vec![0; window],
            proofs: Vec::new(),
            flags: 0,
        })
    }

    /// Proves every packet with its part's entry of `proofs` (by the run's token, or by a tag
    /// when `tagged`).
    pub(super) fn prove(&mut self, proofs: Vec<RunProof>, tagged: bool) {
        self.proofs = proofs;
        self.flags = if tagged { FLAG_TAGGED } else { 0 };
    }

    /// Slots in flight.
    pub(super) fn in_flight(&self) -> u32 {
        (self.free.len() - self.free_count) as u32
    }

    /// Takes the oldest free slot.
    pub(super) fn take(&mut self) -> Option<u32> {
        if self.free_count == 0 {
            return None;
        }
        let slot = self.free[self.head];
        self.head = (self.head + 1) % self.free.len();
        self.free_count -= 1;
        Some(slot)
    }

    /// Returns a slot taken but never submitted, to the front of the queue.
    pub(super) fn give_back(&mut self, slot: u32) {
        self.head = (self.head + self.free.len() - 1) % self.free.len();
        self.free[self.head] = slot;
        self.free_count += 1;
    }

    /// Returns a slot whose send completed.
    pub(super) fn release(&mut self, slot: u32) {
        let tail = (self.head + self.free_count) % self.free.len();
        self.free[tail] = slot;
        self.free_count += 1;
    }

    /// Flow index (into the worker's flow list) of the send in `slot`.
    pub(super) fn flow_of(&self, slot: u32) -> usize {
        self.flow_of[slot as usize] as usize
    }

    /// Packets carried by the send in `slot`.
    pub(super) fn segments(&self, slot: u32) -> u16 {
        self.segments[slot as usize]
    }

    /// Size class of the send in `slot`.
    pub(super) fn class_of(&self, slot: u32) -> usize {
        usize::from(self.class_of[slot as usize])
    }

    /// Writes `segs` headers into `slot` for flow index `flow` in schedule part `part`: session
    /// `epoch`, sequence numbers `seq..seq+segs`, each carrying the flow's failed-send count
    /// `failed`, in packets of the next size class of the order (the full header from 32
    /// bytes, the compact one below), each followed by its part's proof when proven; returns
    /// the arena offset and length of the send.
    pub(super) fn stamp(
        &mut self,
        engine: &mut Engine,
        slot: u32,
        (flow, part): (usize, usize),
        segs: u16,
        (epoch, seq, failed): (u32, u64, u64),
        timestamp_ns: u64,
    ) -> (usize, u32) {
        let offset = slot as usize * self.slot_bytes;
        let class = self.order[self.next_in_order];
        self.next_in_order += 1;
        if self.next_in_order == self.order.len() {
            self.next_in_order = 0;
        }
        let size = self.payloads[usize::from(class)];
        let len = size * usize::from(segs);
        self.flow_of[slot as usize] = flow as u32;
        self.segments[slot as usize] = segs;
        self.class_of[slot as usize] = class;
        if let Some(bytes) = engine.arena_bytes_mut(offset, len) {
            let proof = self.proofs.get(part);
            let tagged = self.flags & FLAG_TAGGED != 0;
            let mut header = Header {
                flags: self.flags,
                failed: failed as u32,
                flow: self.flow_ids[flow],
                epoch,
                seq,
                timestamp_ns,
            };
            for packet in bytes.chunks_exact_mut(size) {
                match proof {
                    Some(proof) => proof.write(&header, tagged, packet),
                    None => header.write_fitting(packet),
                }
                header.seq += 1;
            }
        }
        (offset, len as u32)
    }
}

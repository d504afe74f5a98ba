//! How many of a UDP sink worker's provided buffers circulate. The buffer ring hands the kernel
//! the buffers given back most recently (`BufOrder::AsReturned`), so buffers the worker keeps
//! back (parks) stay untouched, and the kernel's copies, and the worker's reads of the headers
//! after them, stay inside the buffers that circulate, which then stay in cache.
//!
//! The worker keeps about [`FOOTPRINT_BYTES`] of received data in circulation, from the mean
//! fill of the buffers that come back: the whole ring when each buffer holds one small datagram,
//! down to [`MIN_CIRCULATING`] buffers when GRO fills each one with up to 64 KiB. Measured on
//! loopback (`benches/README.md`): at 1400 B with `--gso 46`, 64 buffers in circulation cost the
//! sink about two thirds of the CPU per segment that all 512 do, while at 64 B without GSO the
//! whole ring does best (fewer buffers run dry more often). Never allocates after [`new`].
//!
//! [`new`]: Circulation::new

use crate::ring::Engine;

/// Bytes of received data the circulating buffers hold, at their mean fill.
pub(super) const FOOTPRINT_BYTES: u64 = 4 << 20;
/// The fewest buffers kept in circulation: two batch waits' worth (32 completions each).
pub(super) const MIN_CIRCULATING: usize = 64;

/// The buffers a worker holds back from its ring, and how many it wants circulating.
#[derive(Debug)]
pub(super) struct Circulation {
    /// Buffer ids held back (capacity: every buffer, and a buffer is parked only while more
    /// than the target, at least one, circulate, so pushing never allocates).
    parked: Vec<u16>,
    total: usize,
    target: usize,
    /// Mean bytes per buffer given back, times 16 (an exponential mean over about 16 buffers).
    mean_x16: u64,
}

impl Circulation {
    /// All `entries` buffers circulate until the first ones come back.
    pub(super) fn new(entries: u16) -> Circulation {
        let total = usize::from(entries);
        Circulation {
            parked: Vec::with_capacity(total),
            total,
            target: total,
            mean_x16: 0,
        }
    }

    /// Buffers the kernel may fill: every one not parked.
    pub(super) fn circulating(&self) -> usize {
        self.total - self.parked.len()
    }

    /// Buffer `bid` came back holding `len` bytes: hands it back to the kernel (visible after
    /// `Engine::publish_buffers`), or parks it while more than the target circulate.
    pub(super) fn give_back(&mut self, engine: &mut Engine, bid: u16, len: usize) {
        self.mean_x16 = self.mean_x16 - self.mean_x16 / 16 + len as u64;
        if self.circulating() > self.target {
            self.parked.push(bid);
        } else {
            engine.recycle_buffer(bid);
        }
    }

    /// Sets the target from the mean fill so far and hands parked buffers back up to it. Called
    /// once per reap, before `Engine::publish_buffers`.
    pub(super) fn retarget(&mut self, engine: &mut Engine) {
        self.target = target(self.mean_x16 / 16, self.total);
        while self.circulating() < self.target {
            match self.parked.pop() {
                Some(bid) => engine.recycle_buffer(bid),
                None => break,
            }
        }
    }
}

/// Buffers to keep circulating when they come back holding `mean` bytes each, of `total`.
fn target(mean: u64, total: usize) -> usize {
    let wanted = FOOTPRINT_BYTES / mean.max(1);
    usize::try_from(wanted)
        .unwrap_or(usize::MAX)
        .clamp(MIN_CIRCULATING.min(total), total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_datagrams_keep_the_whole_ring_and_full_gro_buffers_keep_the_minimum() {
        assert_eq!(target(0, 512), 512, "nothing seen yet");
        assert_eq!(
            target(150, 512),
            512,
            "64 B datagram with its recvmsg header"
        );
        assert_eq!(target(4_300, 512), 512, "64 segments of 64 B");
        assert_eq!(target(65_000, 512), 64, "46 segments of 1400 B");
        assert_eq!(target(32_768, 512), 128);
        assert_eq!(target(65_000, 32), 32, "a ring smaller than the minimum");
        assert_eq!(target(65_000, 4096), 64);
    }
}

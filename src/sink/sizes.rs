//! The sink's size classes: each distinct UDP payload length it receives gets a class the first
//! time it is seen, shared by every queue of the sink (so per-session counts add up across
//! queues and senders), up to [`CLASSES`]; longer-tailed traffic is counted under "other". A
//! class is an exact length, so its bytes are its length times its packets.
//!
//! A worker looks a length up with relaxed loads over at most [`CLASSES`] slots and claims a
//! free one with one compare-and-swap the first time a length appears: no lock, no allocation.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use crate::control::msg::SizeCount;

/// Lengths with a class of their own; one more cell counts every other length.
pub(crate) const CLASSES: usize = 8;
/// The cell of lengths beyond [`CLASSES`].
pub(crate) const OTHER: usize = CLASSES;

/// One size class's count: an exact payload length, or every other length (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClassCount {
    /// The payload length, or `None` for lengths without a class of their own.
    pub(crate) payload: Option<u32>,
    /// Valid packets.
    pub(crate) packets: u64,
    /// Their payload bytes.
    pub(crate) bytes: u64,
}

impl From<&SizeCount> for ClassCount {
    /// A verdict's size class (payload 0: every length without a class of its own).
    fn from(c: &SizeCount) -> ClassCount {
        ClassCount {
            payload: (c.payload > 0).then_some(c.payload),
            packets: c.packets,
            bytes: c.bytes,
        }
    }
}

impl ClassCount {
    /// `{"payload": L or "other", "packets": N, "bytes": B}`.
    pub(crate) fn json(&self) -> serde_json::Value {
        let payload = self
            .payload
            .map_or_else(|| serde_json::json!("other"), |l| serde_json::json!(l));
        serde_json::json!({"payload": payload, "packets": self.packets, "bytes": self.bytes})
    }
}

/// The sink-wide length of each class (0: not yet taken).
#[derive(Debug, Default)]
pub(crate) struct SizeTable {
    lengths: [AtomicU32; CLASSES],
}

impl SizeTable {
    /// The class of a datagram of `len` payload bytes (`len` > 0), claiming one if it is new.
    #[inline]
    pub(crate) fn class_of(&self, len: usize) -> usize {
        let len = len as u32;
        for (i, slot) in self.lengths.iter().enumerate() {
            let seen = slot.load(Relaxed);
            if seen == len {
                return i;
            }
            if seen == 0 {
                match slot.compare_exchange(0, len, Relaxed, Relaxed) {
                    Ok(_) => return i,
                    Err(now) if now == len => return i,
                    Err(_) => continue,
                }
            }
        }
        OTHER
    }

    /// The length of each class taken so far, by class index.
    pub(crate) fn lengths(&self) -> Vec<(usize, u32)> {
        self.lengths
            .iter()
            .enumerate()
            .map(|(i, l)| (i, l.load(Relaxed)))
            .filter(|(_, l)| *l > 0)
            .collect()
    }

    /// The classes with packets, sorted by length, then the other lengths (`payload: None`);
    /// `bytes` is the total payload bytes of `packets`.
    pub(crate) fn counts(&self, packets: &[u64; CLASSES + 1], bytes: u64) -> Vec<ClassCount> {
        let mut out: Vec<ClassCount> = self
            .lengths()
            .into_iter()
            .map(|(i, l)| ClassCount {
                payload: Some(l),
                packets: packets[i],
                bytes: u64::from(l) * packets[i],
            })
            .filter(|c| c.packets > 0)
            .collect();
        out.sort_unstable_by_key(|c| c.payload);
        if packets[OTHER] > 0 {
            let classed: u64 = out.iter().map(|c| c.bytes).sum();
            out.push(ClassCount {
                payload: None,
                packets: packets[OTHER],
                bytes: bytes.saturating_sub(classed),
            });
        }
        out
    }

    /// `[{"payload": L, "packets": N, "bytes": L×N}, …]` sorted by length, plus an `"other"`
    /// entry when some length had no class; `bytes` is the total payload bytes of `packets`.
    pub(crate) fn json(&self, packets: &[u64; CLASSES + 1], bytes: u64) -> serde_json::Value {
        let mut rows: Vec<(u32, u64)> = self
            .lengths()
            .into_iter()
            .map(|(i, l)| (l, packets[i]))
            .filter(|(_, n)| *n > 0)
            .collect();
        rows.sort_unstable();
        let classed: u64 = rows.iter().map(|(l, n)| u64::from(*l) * n).sum();
        let mut out: Vec<serde_json::Value> = rows
            .iter()
            .map(|(l, n)| serde_json::json!({"payload": l, "packets": n, "bytes": u64::from(*l) * n}))
            .collect();
        if packets[OTHER] > 0 {
            out.push(
                serde_json::json!({"payload": "other", "packets": packets[OTHER],
                "bytes": bytes.saturating_sub(classed)}),
            );
        }
        serde_json::Value::Array(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_get_classes_first_come_and_the_rest_is_other() {
        let t = SizeTable::default();
        assert_eq!(t.class_of(18), 0);
        assert_eq!(t.class_of(1472), 1);
        assert_eq!(t.class_of(18), 0);
        for len in 100..106 {
            t.class_of(len);
        }
        assert_eq!(t.class_of(9000), OTHER);
        assert_eq!(t.lengths().len(), CLASSES);
        let mut packets = [0; CLASSES + 1];
        packets[0] = 3;
        packets[1] = 1;
        packets[OTHER] = 2;
        let json = t.json(&packets, 3 * 18 + 1472 + 2 * 9000);
        assert_eq!(json[0]["payload"], 18);
        assert_eq!(json[0]["bytes"], 54);
        assert_eq!(json[2]["payload"], "other");
        assert_eq!(json[2]["bytes"], 18_000);
    }

    #[test]
    fn concurrent_claims_give_each_length_one_class() {
        let t = std::sync::Arc::new(SizeTable::default());
        let threads: Vec<_> = (0..4)
            .map(|k| {
                let t = std::sync::Arc::clone(&t);
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        t.class_of((i + k) % 6 + 20);
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let mut lengths: Vec<u32> = t.lengths().into_iter().map(|(_, l)| l).collect();
        lengths.sort_unstable();
        assert_eq!(lengths, [20, 21, 22, 23, 24, 25]);
    }
}

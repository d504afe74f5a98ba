//! Packet sizes: one UDP payload size, or a mix of Ethernet frame sizes with weights (`--size
//! imix`, `--size 64:28,570:16,1518:4`) turned into UDP payloads and into a fixed, repeatable
//! order of size classes prepared at set-up. The sender walks that order packet by packet, so
//! the sizes are spread evenly through every batch and no random draw happens on the hot path.
//!
//! The order is a smooth weighted round-robin over the weights divided by their greatest common
//! divisor: over every whole cycle each class appears exactly its weight's share of times, and
//! no class runs in a block (7:4:1 gives `0 1 0 2 0 1 0 0 1 0 1 0`-like spacing).

use std::{net::SocketAddr, str::FromStr};

use crate::{
    config::units,
    error::Error,
    proto::header::{COMPACT_LEN, HEADER_LEN},
};

/// Size classes a mix may have (each is counted on its own at both ends).
pub(crate) const MAX_CLASSES: usize = 8;
/// Longest cycle of the order (the sum of the weights once divided by their gcd).
pub(crate) const MAX_CYCLE: u64 = 1 << 16;
/// The simple IMIX: 64, 570 and 1518-byte frames, 7:4:1.
pub(crate) const IMIX: [(usize, u32); 3] = [(64, 7), (570, 4), (1518, 1)];

/// What `--size` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SizeSpec {
    /// One UDP payload size in bytes (ringblast's header included).
    Payload(usize),
    /// Ethernet frame sizes (FCS included) with weights.
    Frames(Vec<(usize, u32)>),
}

impl FromStr for SizeSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<SizeSpec, String> {
        let text = s.trim();
        if text.eq_ignore_ascii_case("imix") {
            return Ok(SizeSpec::Frames(IMIX.to_vec()));
        }
        if !text.contains(':') {
            return units::parse_byte_size(text)
                .map(SizeSpec::Payload)
                .map_err(|e| {
                    format!("{e}; or give a mix: imix or FRAME:WEIGHT,... (e.g. 64:7,570:4,1518:1)")
                });
        }
        let mut classes: Vec<(usize, u32)> = Vec::new();
        for item in text.split(',') {
            let Some((frame, weight)) = item.split_once(':') else {
                return Err(format!(
                    "{item:?} in --size {text:?} is not FRAME:WEIGHT; write every class as FRAME:WEIGHT, e.g. 64:7,570:4,1518:1"
                ));
            };
            let frame = units::parse_byte_size(frame.trim())
                .map_err(|e| format!("{e} in --size {text:?}; frame sizes are bytes, e.g. 64:7"))?;
            let weight = match weight.trim().parse::<u32>() {
                Ok(w) if w > 0 => w,
                _ => {
                    return Err(format!(
                        "weight {:?} of frame size {frame} in --size {text:?} is not a whole number from 1; e.g. {frame}:4",
                        weight.trim()
                    ));
                }
            };
            if classes.iter().any(|(f, _)| *f == frame) {
                return Err(format!(
                    "frame size {frame} appears twice in --size {text:?}; give each size once with its total weight"
                ));
            }
            classes.push((frame, weight));
        }
        if classes.len() > MAX_CLASSES {
            return Err(format!(
                "--size {text:?} has {} size classes; ringblast counts at most {MAX_CLASSES}",
                classes.len()
            ));
        }
        Ok(SizeSpec::Frames(classes))
    }
}

/// One size class, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SizeClass {
    /// The Ethernet frame size asked for, if the class was given as a frame.
    pub(crate) frame: Option<usize>,
    /// UDP payload bytes of its datagrams.
    pub(crate) payload: usize,
    /// Its weight in the mix.
    pub(crate) weight: u32,
}

/// The sizes a sender sends and the order it sends them in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SizePlan {
    /// The classes, in the order given.
    pub(crate) classes: Vec<SizeClass>,
    /// Class index of each packet of one cycle.
    pub(crate) order: Vec<u8>,
}

impl SizePlan {
    /// One class of `payload` bytes.
    pub(crate) fn single(payload: usize) -> SizePlan {
        SizePlan {
            classes: vec![SizeClass {
                frame: None,
                payload,
                weight: 1,
            }],
            order: vec![0],
        }
    }

    /// Resolves `--size` (or `--frame-size`) for traffic to `to`: frames become UDP payloads
    /// (F − 46 over IPv4, F − 66 over IPv6) and every payload must hold at least the compact
    /// header.
    pub(crate) fn resolve(
        spec: &SizeSpec,
        frame_size: Option<usize>,
        to: SocketAddr,
    ) -> Result<SizePlan, Error> {
        let frames: Vec<(usize, u32)> = match (spec, frame_size) {
            (_, Some(frame)) => vec![(frame, 1)],
            (SizeSpec::Frames(f), None) => f.clone(),
            (SizeSpec::Payload(p), None) => {
                if *p < COMPACT_LEN {
                    return Err(Error::Usage(format!(
                        "--size {p} is below the {COMPACT_LEN}-byte compact ringblast header; use --size {COMPACT_LEN} or more (below {HEADER_LEN} bytes packets carry no timestamp)"
                    )));
                }
                return Ok(SizePlan::single(*p));
            }
        };
        let classes = frames
            .iter()
            .map(|&(frame, weight)| {
                crate::net::wire::payload_for_frame(frame, to).map(|payload| SizeClass {
                    frame: Some(frame),
                    payload,
                    weight,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let order = smooth_order(&classes.iter().map(|c| c.weight).collect::<Vec<_>>())?;
        Ok(SizePlan { classes, order })
    }

    /// The largest payload (sizes the send slots and the path-MTU check).
    pub(crate) fn max_payload(&self) -> usize {
        self.classes.iter().map(|c| c.payload).max().unwrap_or(0)
    }

    /// The mean payload over one cycle (turns a bit rate into packets per second).
    pub(crate) fn mean_payload(&self) -> f64 {
        let total: f64 = self.classes.iter().map(|c| f64::from(c.weight)).sum();
        self.classes
            .iter()
            .map(|c| c.payload as f64 * f64::from(c.weight))
            .sum::<f64>()
            / total.max(1.0)
    }

    /// More than one class.
    pub(crate) fn is_mix(&self) -> bool {
        self.classes.len() > 1
    }

    /// Some class uses the compact header (no timestamp, no latency sample).
    pub(crate) fn has_compact(&self) -> bool {
        self.classes.iter().any(|c| c.payload < HEADER_LEN)
    }

    /// `imix 64/570/1518 7:4:1 → UDP 18/524/1472 B` for the start plan.
    pub(crate) fn describe(&self) -> String {
        let list = |f: &dyn Fn(&SizeClass) -> String| {
            self.classes.iter().map(f).collect::<Vec<_>>().join("/")
        };
        let weights = self
            .classes
            .iter()
            .map(|c| c.weight.to_string())
            .collect::<Vec<_>>()
            .join(":");
        let frames = list(&|c| c.frame.map_or("-".into(), |f| f.to_string()));
        let payloads = list(&|c| c.payload.to_string());
        let mut text = format!(
            "sizes: frames {frames} B {weights} (cycle of {} packets) → UDP payload {payloads} B",
            self.order.len()
        );
        if self.has_compact() {
            text.push_str(&format!(
                "; payloads below {HEADER_LEN} B carry the {COMPACT_LEN}-byte compact header (no timestamp: no latency sample)"
            ));
        }
        text
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The smooth weighted round-robin order over `weights` divided by their gcd.
fn smooth_order(weights: &[u32]) -> Result<Vec<u8>, Error> {
    let g = weights.iter().fold(0u64, |g, &w| gcd(g, u64::from(w)));
    let reduced: Vec<i64> = weights
        .iter()
        .map(|&w| (u64::from(w) / g.max(1)) as i64)
        .collect();
    let cycle: i64 = reduced.iter().sum();
    if cycle as u64 > MAX_CYCLE {
        return Err(Error::Usage(format!(
            "the --size weights make a cycle of {cycle} packets; ringblast keeps at most {MAX_CYCLE}: use smaller weights"
        )));
    }
    let mut current = vec![0i64; reduced.len()];
    let mut order = Vec::with_capacity(cycle as usize);
    for _ in 0..cycle {
        for (c, w) in current.iter_mut().zip(&reduced) {
            *c += w;
        }
        let pick = (0..current.len())
            .max_by_key(|&i| (current[i], std::cmp::Reverse(i)))
            .unwrap_or(0);
        current[pick] -= cycle;
        order.push(pick as u8);
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4() -> SocketAddr {
        "10.0.0.1:9".parse().unwrap()
    }

    #[test]
    fn imix_resolves_to_payloads_and_an_even_order() {
        let spec: SizeSpec = "imix".parse().unwrap();
        let plan = SizePlan::resolve(&spec, None, v4()).unwrap();
        let payloads: Vec<_> = plan.classes.iter().map(|c| c.payload).collect();
        assert_eq!(payloads, [18, 524, 1472]);
        assert_eq!(plan.order.len(), 12);
        let count = |k| plan.order.iter().filter(|&&c| c == k).count();
        assert_eq!((count(0), count(1), count(2)), (7, 4, 1));
        // Evenly spread: the 64-byte class never runs more than twice in a row.
        let twice = plan
            .order
            .windows(3)
            .all(|w| !(w[0] == 0 && w[1] == 0 && w[2] == 0));
        assert!(twice, "{:?}", plan.order);
        assert!(plan.has_compact());
        assert!((plan.mean_payload() - (7.0 * 18.0 + 4.0 * 524.0 + 1472.0) / 12.0).abs() < 1e-9);
    }

    #[test]
    fn custom_mixes_reduce_their_weights() {
        let spec: SizeSpec = "64:28,570:16,1518:4".parse().unwrap();
        let plan = SizePlan::resolve(&spec, None, v4()).unwrap();
        assert_eq!(plan.order.len(), 12, "28:16:4 is 7:4:1 over a cycle");
        assert_eq!(spec, SizeSpec::Frames(vec![(64, 28), (570, 16), (1518, 4)]));
        assert_eq!("1200".parse::<SizeSpec>(), Ok(SizeSpec::Payload(1200)));
    }

    #[test]
    fn bad_mixes_name_the_fix() {
        for (input, needle) in [
            ("64:0", "from 1"),
            ("64:x", "whole number"),
            ("64:1,64:2", "appears twice"),
            ("64", ""),
            ("64:1,128", "FRAME:WEIGHT"),
            ("1:1,2:1,3:1,4:1,5:1,6:1,7:1,8:1,9:1", "at most 8"),
            ("abc:1", "frame sizes are bytes"),
        ] {
            match input.parse::<SizeSpec>() {
                Ok(SizeSpec::Payload(64)) if needle.is_empty() => {}
                Ok(other) => panic!("{input} parsed as {other:?}"),
                Err(e) => assert!(e.contains(needle), "{input}: {e}"),
            }
        }
        let small = SizePlan::resolve(&"63:1".parse().unwrap(), None, v4()).unwrap_err();
        assert!(small.to_string().contains("smallest frame"), "{small}");
        let v6: SocketAddr = "[fd00::1]:9".parse().unwrap();
        let e = SizePlan::resolve(&"imix".parse().unwrap(), None, v6).unwrap_err();
        assert!(e.to_string().contains("84 bytes over IPv6"), "{e}");
        let cycle = SizePlan::resolve(&"64:65536,128:1".parse().unwrap(), None, v4());
        assert!(cycle.unwrap_err().to_string().contains("at most 65536"));
    }
}

//! What the payload after the ringblast header carries (`--payload`): zeros, random bytes or a
//! repeated hex pattern, written once into every send slot of the registered arena at set-up.
//! Headers overwrite only their own bytes, so no packet costs any payload work.

use std::str::FromStr;

/// The payload fill.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum PayloadFill {
    /// Zero bytes (default).
    #[default]
    Zero,
    /// Random bytes (a fresh draw per run, at set-up).
    Random,
    /// These bytes, repeated.
    Pattern(Vec<u8>),
}

impl FromStr for PayloadFill {
    type Err = String;

    fn from_str(s: &str) -> Result<PayloadFill, String> {
        match s.trim() {
            "zero" => Ok(PayloadFill::Zero),
            "random" => Ok(PayloadFill::Random),
            other => {
                let hex = other.strip_prefix("pattern:").ok_or_else(|| {
                    format!("--payload {other:?}: use zero, random or pattern:HEX (e.g. pattern:deadbeef)")
                })?;
                let bytes = (hex.len() % 2 == 0 && !hex.is_empty())
                    .then(|| {
                        (0..hex.len())
                            .step_by(2)
                            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
                            .collect::<Option<Vec<u8>>>()
                    })
                    .flatten()
                    .ok_or_else(|| {
                        format!("--payload pattern:{hex}: give an even number of hex digits, e.g. pattern:deadbeef")
                    })?;
                Ok(PayloadFill::Pattern(bytes))
            }
        }
    }
}

impl PayloadFill {
    /// Fills `bytes` (a slot region) with the payload.
    pub(crate) fn fill(&self, bytes: &mut [u8]) {
        match self {
            PayloadFill::Zero => bytes.fill(0),
            PayloadFill::Random => rand::fill(bytes),
            PayloadFill::Pattern(p) => {
                for (b, v) in bytes.iter_mut().zip(p.iter().cycle()) {
                    *b = *v;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_parse_and_repeat() {
        let p: PayloadFill = "pattern:dEAdbe".parse().unwrap();
        let mut buf = [0u8; 7];
        p.fill(&mut buf);
        assert_eq!(buf, [0xde, 0xad, 0xbe, 0xde, 0xad, 0xbe, 0xde]);
        assert_eq!("zero".parse(), Ok(PayloadFill::Zero));
        for bad in ["pattern:abc", "pattern:", "pattern:zz", "ones"] {
            assert!(bad.parse::<PayloadFill>().is_err(), "{bad}");
        }
        let mut r = [0u8; 64];
        PayloadFill::Random.fill(&mut r);
        assert!(r.iter().any(|&b| b != 0));
    }
}

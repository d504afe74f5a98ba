//! Hex encoding of nonces and MACs, and the serde adapters the messages use for them.

/// Lower-case hex of `bytes`.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| {
            [
                D[usize::from(b >> 4)] as char,
                D[usize::from(b & 15)] as char,
            ]
        })
        .collect()
}

/// Parses exactly 64 hex digits.
pub(crate) fn from_hex32(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let nib = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (nib(b[2 * i])? << 4) | nib(b[2 * i + 1])?;
    }
    Some(out)
}

pub(super) mod hex32 {
    //! Serde for `[u8; 32]` as a 64-digit hex string.
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(crate) fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::to_hex(v))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        super::from_hex32(&s).ok_or_else(|| D::Error::custom("expected 64 hex digits"))
    }
}

pub(super) mod hex32_opt {
    //! Serde for `Option<[u8; 32]>` as a hex string or null.
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(crate) fn serialize<S: Serializer>(v: &Option<[u8; 32]>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_str(&super::to_hex(v)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<[u8; 32]>, D::Error> {
        let s = <Option<std::borrow::Cow<'de, str>>>::deserialize(d)?;
        s.map(|s| super::from_hex32(&s).ok_or_else(|| D::Error::custom("expected 64 hex digits")))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let n: [u8; 32] = std::array::from_fn(|i| (i * 7) as u8);
        assert_eq!(from_hex32(&to_hex(&n)), Some(n));
        assert_eq!(from_hex32("zz"), None);
        assert_eq!(from_hex32(&"g".repeat(64)), None);
    }
}

//! Shard bounds: inclusive hex prefixes of a 32-bit big-endian key.
//!
//! A bound is a hex string of at most 8 characters and even length. A short
//! lower bound is padded with `00` bytes and a short upper bound with `ff`
//! bytes: lower `"08"` is `08000000`, upper `"0f"` is `0fffffff`, upper
//! `"0800"` is `0800ffff`. A missing (or empty) lower bound is `00000000`, a
//! missing upper bound `ffffffff`.
//!
//! On output the trailing byte positions where the lower bound is `00` *and*
//! the upper bound is `ff` are dropped together, so `[00000000, 0fffffff]` is
//! written `"00"`/`"0f"` and the full keyspace as two empty strings (which the
//! model omits).

use std::fmt;

/// Which bound of a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundField {
    Lower,
    Upper,
}

impl BoundField {
    /// The JSON field name.
    pub fn as_str(self) -> &'static str {
        match self {
            BoundField::Lower => "lower_bound",
            BoundField::Upper => "upper_bound",
        }
    }
}

impl fmt::Display for BoundField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a bound string is malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BoundSyntax {
    #[error("{len} hex digits, at most 8 allowed (a key has 4 bytes)")]
    TooLong { len: usize },
    #[error("{len} hex digits, an even number is required (whole bytes)")]
    OddLength { len: usize },
    #[error("`{ch}` at position {pos} is not a hex digit")]
    NotHex { ch: char, pos: usize },
}

/// A malformed bound, naming the shard and the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shard `{shard}`: {field} `{value}`: {syntax}")]
pub struct BoundError {
    pub shard: String,
    pub field: BoundField,
    pub value: String,
    pub syntax: BoundSyntax,
}

/// Parses a bound prefix, padding it as `field` requires.
pub fn parse_bound(text: &str, field: BoundField) -> Result<u32, BoundSyntax> {
    let len = text.chars().count();
    if let Some((pos, ch)) = text.chars().enumerate().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(BoundSyntax::NotHex { ch, pos });
    }
    if len > 8 {
        return Err(BoundSyntax::TooLong { len });
    }
    if !len.is_multiple_of(2) {
        return Err(BoundSyntax::OddLength { len });
    }
    let pad_bits = 32 - 4 * len as u32;
    let prefix = if len == 0 { 0 } else { u32::from_str_radix(text, 16).expect("checked hex") };
    Ok(match field {
        // `checked_shl` because shifting a u32 by 32 is an overflow.
        BoundField::Lower => prefix.checked_shl(pad_bits).unwrap_or(0),
        BoundField::Upper => {
            let fill = 1u64.checked_shl(pad_bits).map_or(u64::MAX, |v| v - 1);
            ((u64::from(prefix) << pad_bits) | fill) as u32
        }
    })
}

/// Parses an optional bound: `None` is the whole-keyspace end.
pub fn parse_optional(text: Option<&str>, field: BoundField) -> Result<u32, BoundSyntax> {
    match text {
        Some(t) => parse_bound(t, field),
        None => Ok(match field {
            BoundField::Lower => 0,
            BoundField::Upper => u32::MAX,
        }),
    }
}

/// The shortest prefixes for `[lower, upper]`: trailing bytes where lower is
/// `00` and upper is `ff` are dropped together.
pub fn format_bounds(lower: u32, upper: u32) -> (String, String) {
    let lo = lower.to_be_bytes();
    let hi = upper.to_be_bytes();
    let mut keep = 4;
    while keep > 0 && lo[keep - 1] == 0x00 && hi[keep - 1] == 0xff {
        keep -= 1;
    }
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    (hex(&lo[..keep]), hex(&hi[..keep]))
}

/// Parses a full or prefix key given on a command line (`08` = `08000000`).
pub fn parse_key(text: &str) -> Result<u32, BoundSyntax> {
    let t = text.strip_prefix("0x").unwrap_or(text);
    parse_bound(t, BoundField::Lower)
}

#[cfg(test)]
mod tests {
    use super::*;
    use BoundField::*;

    #[test]
    fn parse_table() {
        let cases: &[(&str, BoundField, Result<u32, BoundSyntax>)] = &[
            ("", Lower, Ok(0)),
            ("", Upper, Ok(0xffff_ffff)),
            ("08", Lower, Ok(0x0800_0000)),
            ("0f", Upper, Ok(0x0fff_ffff)),
            ("0800", Upper, Ok(0x0800_ffff)),
            ("0800", Lower, Ok(0x0800_0000)),
            ("ff", Upper, Ok(0xffff_ffff)),
            ("ffffffff", Upper, Ok(0xffff_ffff)),
            ("ffffffff", Lower, Ok(0xffff_ffff)),
            ("00000000", Lower, Ok(0)),
            ("AbCd", Lower, Ok(0xabcd_0000)),
            ("123456", Upper, Ok(0x1234_56ff)),
            ("0", Lower, Err(BoundSyntax::OddLength { len: 1 })),
            ("123", Upper, Err(BoundSyntax::OddLength { len: 3 })),
            ("0000000000", Lower, Err(BoundSyntax::TooLong { len: 10 })),
            ("0g", Lower, Err(BoundSyntax::NotHex { ch: 'g', pos: 1 })),
            ("-1", Upper, Err(BoundSyntax::NotHex { ch: '-', pos: 0 })),
            (" 08", Upper, Err(BoundSyntax::NotHex { ch: ' ', pos: 0 })),
            ("0x08", Upper, Err(BoundSyntax::NotHex { ch: 'x', pos: 1 })),
        ];
        for (text, field, want) in cases {
            assert_eq!(&parse_bound(text, *field), want, "{field} {text:?}");
        }
    }

    #[test]
    fn format_table() {
        let cases: &[(u32, u32, &str, &str)] = &[
            (0, u32::MAX, "", ""),
            (0, 0x0fff_ffff, "00", "0f"),
            (0xf000_0000, u32::MAX, "f0", "ff"),
            (0x0800_0000, 0x0800_ffff, "0800", "0800"),
            (0x0800_0000, 0x08ff_ffff, "08", "08"),
            (0x1234_5678, 0x1234_56ff, "12345678", "123456ff"),
            (0x1200_0000, 0x12ff_fffe, "12000000", "12fffffe"),
            (0x0000_0001, u32::MAX, "00000001", "ffffffff"),
        ];
        for (lo, hi, wl, wh) in cases {
            let (l, h) = format_bounds(*lo, *hi);
            assert_eq!((l.as_str(), h.as_str()), (*wl, *wh), "{lo:08x}..{hi:08x}");
            // Writing then parsing gives back the same range.
            let l = if l.is_empty() { None } else { Some(l.as_str()) };
            let h = if h.is_empty() { None } else { Some(h.as_str()) };
            assert_eq!(parse_optional(l, Lower), Ok(*lo));
            assert_eq!(parse_optional(h, Upper), Ok(*hi));
        }
    }
}

//! How the benchmarks print their figures.

// Each benchmark uses a part of it.
#![allow(dead_code)]

/// A rate with thousands separators, no decimals: 12,345.
pub fn thousands(x: f64) -> String {
    let s = format!("{x:.0}");
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The `p`th percentile (nearest rank) of sorted durations.
pub fn pct(sorted: &[std::time::Duration], p: f64) -> std::time::Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

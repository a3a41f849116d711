//! How the benchmarks print their figures.

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

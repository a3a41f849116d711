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

/// Runs `redis-benchmark --csv` against `host:port` with `args` (counts,
/// pipeline, clients) and `command` → its requests per second, the same-run
/// physical limit the benchmarks compare with.
pub fn redis_benchmark(host: &str, port: u16, args: &[String], command: &[String]) -> f64 {
    let out = std::process::Command::new("redis-benchmark")
        .args(["-h", host, "-p", &port.to_string(), "--csv", "-r", "100000000"])
        .args(args)
        .args(command)
        .output()
        .expect("redis-benchmark must be installed");
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps",...  then  "SET …","145772.59",...
    let line = text
        .lines()
        .find(|l| l.starts_with('"') && !l.starts_with("\"test\""))
        .unwrap_or_else(|| panic!("redis-benchmark said:\n{text}\n{}", String::from_utf8_lossy(&out.stderr)));
    line.split("\",\"").nth(1).unwrap_or_default().trim_matches('"').parse().expect("rps")
}

/// Runs `pgbench` with `script` (SQL, one transaction) against `url`:
/// `clients` connections, and `-t N` or `-T S` as `run` says, with a
/// per-transaction log → each transaction's latency. The same-run physical
/// limit of a database write.
pub fn pgbench(url: &str, script: &str, clients: usize, run: &[&str]) -> Result<Vec<std::time::Duration>, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let file = dir.path().join("script.sql");
    std::fs::write(&file, script).map_err(|e| e.to_string())?;
    let prefix = dir.path().join("log");
    let out = std::process::Command::new("pgbench")
        .args(["-n", "-c", &clients.to_string(), "-M", "prepared", "-l", "--log-prefix"])
        .arg(&prefix)
        .args(run)
        .arg("-f")
        .arg(&file)
        .arg(url)
        .output()
        .map_err(|e| format!("cannot run pgbench: {e}"))?;
    if !out.status.success() {
        return Err(format!("pgbench failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    // Each line: client, transaction, latency µs, script, epoch s, µs.
    let mut took = Vec::new();
    for entry in std::fs::read_dir(dir.path()).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("log")) {
            for line in std::fs::read_to_string(&path).map_err(|e| e.to_string())?.lines() {
                if let Some(us) = line.split_whitespace().nth(2).and_then(|f| f.parse::<u64>().ok()) {
                    took.push(std::time::Duration::from_micros(us));
                }
            }
        }
    }
    if took.is_empty() {
        return Err("pgbench wrote no per-transaction log".into());
    }
    Ok(took)
}

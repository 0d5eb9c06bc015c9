//! Sizes and counts as people read them, for the status table, the report and the alerts; and the wall clock in
//! Unix milliseconds, as every record, proof and datagram stamps it.

/// Milliseconds since the Unix epoch by this host's clock (0 if it is set before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Bytes as MiB with one decimal, or GiB with two from 1024 MiB on.
pub fn size(b: u64) -> String {
    let mib = b as f64 / (1024.0 * 1024.0);
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else {
        format!("{mib:.1} MiB")
    }
}

/// `1 minute`, `2 minutes`.
pub fn count(n: u64, unit: &str) -> String {
    match n {
        1 => format!("1 {unit}"),
        n => format!("{n} {unit}s"),
    }
}

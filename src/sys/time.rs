//! Time formatting shared by the status file, the run logs, the config's date switches and doctor.

use std::time::SystemTime;

/// RFC 3339 UTC with milliseconds, e.g. `2026-11-08T09:12:41.902Z`.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// RFC 3339 UTC to the second, e.g. `2026-11-08T09:12:41Z`.
pub fn rfc3339_seconds(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Milliseconds since the Unix epoch; 0 for a time before it.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A span for a log line: `45 s` under two minutes, else whole minutes (`5 min`).
pub fn human_secs(secs: u64) -> String {
    if secs < 120 {
        format!("{secs} s")
    } else {
        format!("{} min", secs / 60)
    }
}

/// Today's date in UTC as `YYYY-MM-DD`.
pub fn today_utc() -> String {
    let mut ts = rfc3339_seconds(SystemTime::now());
    ts.truncate(10);
    ts
}

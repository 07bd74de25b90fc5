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

/// The machine's UTC offset (seconds east) at `unix_ms`, from the C library's local time (`TZ`,
/// else `/etc/localtime`): how `agentchat status` shows a hold's end to the person at this
/// machine. `None` when the C library cannot tell (a time outside its range).
pub fn local_offset_secs(unix_ms: i64) -> Option<i32> {
    let secs = libc::time_t::try_from(unix_ms.div_euclid(1000)).ok()?;
    // SAFETY: `tm` is plain data the call fills; both pointers are valid for the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let done = unsafe { libc::localtime_r(&secs, &mut tm) };
    if done.is_null() {
        return None;
    }
    i32::try_from(tm.tm_gmtoff).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_offset_is_a_whole_number_of_minutes_within_a_day() {
        let now = i64::try_from(unix_ms(SystemTime::now())).unwrap();
        let off = local_offset_secs(now).unwrap();
        assert!(off.abs() < 86_400 && off % 60 == 0, "{off}");
    }
}

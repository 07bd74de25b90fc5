//! Time as the state machines see it: handed in, never read. `Now` is one reading of the
//! process's two clocks, taken once by the driver (or the simulator) for each step: the
//! monotonic one for every deadline, the wall one for what is shown and for the run policy's
//! calendar. A machine compares only numbers, so a step can be replayed exactly.

use std::time::{Duration, SystemTime};

/// One reading of both clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic milliseconds since the driver's start: every deadline is on this clock.
    pub mono_ms: u64,
    /// Wall clock, Unix milliseconds: status times, the run policy's hours and days.
    pub wall_ms: i64,
}

impl Now {
    pub fn at(mono_ms: u64, wall_ms: i64) -> Now {
        Now { mono_ms, wall_ms }
    }

    /// The monotonic time `d` from now.
    pub fn after(&self, d: Duration) -> u64 {
        self.mono_ms.saturating_add(ms(d))
    }

    /// The wall clock as an unsigned Unix ms (0 before the epoch).
    pub fn wall_u64(&self) -> u64 {
        u64::try_from(self.wall_ms).unwrap_or(0)
    }

    /// The wall time `mono` stands for, reading the two clocks' offset now.
    pub fn wall_of(&self, mono: u64) -> i64 {
        let ahead = i64::try_from(mono.saturating_sub(self.mono_ms)).unwrap_or(i64::MAX);
        let behind = i64::try_from(self.mono_ms.saturating_sub(mono)).unwrap_or(i64::MAX);
        self.wall_ms.saturating_add(ahead).saturating_sub(behind)
    }
}

/// A duration in whole milliseconds, saturating.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// RFC 3339 UTC with milliseconds of a Unix ms time, e.g. `2026-11-08T09:12:41.902Z`.
pub fn rfc3339_ms(unix_ms: i64) -> String {
    humantime::format_rfc3339_millis(system_time(unix_ms)).to_string()
}

/// A Unix ms time as a `SystemTime` (no clock is read).
pub fn system_time(unix_ms: i64) -> SystemTime {
    let t = u64::try_from(unix_ms).unwrap_or(0);
    SystemTime::UNIX_EPOCH + Duration::from_millis(t)
}

/// A span for a log line: `45 s` under two minutes, else whole minutes (`5 min`).
pub fn human_secs(secs: u64) -> String {
    if secs < 120 {
        format!("{secs} s")
    } else {
        format!("{} min", secs / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_time_is_formatted_from_milliseconds_without_reading_a_clock() {
        assert_eq!(rfc3339_ms(1_794_000_000_123), "2026-11-06T21:20:00.123Z");
        assert_eq!(rfc3339_ms(-5), "1970-01-01T00:00:00.000Z");
        let now = Now::at(10_000, 1_000_000);
        assert_eq!(now.wall_of(12_500), 1_002_500);
        assert_eq!(now.wall_of(9_000), 999_000);
        assert_eq!(now.after(Duration::from_secs(2)), 12_000);
    }
}

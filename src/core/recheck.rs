//! How soon the listener looks again at a state in which no run can start and that may end
//! without a person: an unusable runtime (a program that was briefly gone, a login that was
//! briefly refused) and missing texts. Every state the listener can get stuck in has a way out
//! that needs no person; a reload (SIGHUP) still looks at once.

use std::time::Duration;

/// The first look, after the state began.
pub const FIRST: Duration = Duration::from_secs(5);
/// The longest wait between two looks.
pub const MAX: Duration = Duration::from_secs(10 * 60);

/// The wait before look number `attempt` (0-based): [`FIRST`], doubling, at most [`MAX`]:
/// 5 s, 10 s, 20 s, ... 320 s, then every 10 minutes. A look costs a file check (and for Claude
/// Code or Codex their login check, a second or two of CPU), so a runtime that stays broken
/// costs a few looks an hour.
pub fn delay(attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
    FIRST.saturating_mul(factor).min(MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_start_at_seconds_double_and_settle_at_ten_minutes() {
        let secs: Vec<u64> = (0..10).map(|a| delay(a).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 320, 600, 600, 600]);
        assert_eq!(delay(u32::MAX), MAX);
        assert!((0..200).all(|a| delay(a) >= FIRST && delay(a) <= MAX));
    }
}

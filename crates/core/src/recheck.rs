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

/// When the next look at a stuck state is due, on the caller's clock of milliseconds, and how
/// many looks came before it in this episode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recheck {
    attempt: u32,
    at: Option<u64>,
}

impl Recheck {
    /// None set, `looks` taken before: the next waits as the look after those.
    pub fn after_looks(looks: u32) -> Recheck {
        Recheck {
            attempt: looks,
            at: None,
        }
    }

    /// When the next look is due, if one is set.
    pub fn at(&self) -> Option<u64> {
        self.at
    }

    /// The looks set so far in this episode.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Sets the next look [`delay`]`(attempt)` after `now`, divided by the test time scale's
    /// `factor` (`reconnect::scaled`, the rule `config::TestTimeScale::apply` follows), unless
    /// one is set.
    pub fn schedule(&mut self, now: u64, factor: f64) {
        let wait =
            super::reconnect::scaled(delay(self.attempt), factor).max(Duration::from_millis(1));
        self.schedule_after(now, wait);
    }

    /// Sets the next look `wait` after `now`, unless one is set.
    pub fn schedule_after(&mut self, now: u64, wait: Duration) {
        if self.at.is_none() {
            let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            self.at = Some(now.saturating_add(wait_ms));
            self.attempt = self.attempt.saturating_add(1);
        }
    }

    /// A look is due at once (SIGHUP), whatever was set.
    pub fn now(&mut self, now: u64) {
        self.at = Some(now);
    }

    /// The look set is taken (it is under way, or its state ended): none is due until the next
    /// is set; the count of looks stays.
    pub fn clear(&mut self) {
        self.at = None;
    }

    /// The next look set waits from the first delay again; one already set stays.
    pub fn forget_looks(&mut self) {
        self.attempt = 0;
    }

    /// The state ended: no look is due, and the next episode starts from the first delay.
    pub fn reset(&mut self) {
        *self = Recheck::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recheck_set_twice_keeps_the_first_and_counts_one_look() {
        let mut r = Recheck::default();
        assert_eq!(r.at(), None);
        r.schedule(1_000, 1.0);
        assert_eq!((r.at(), r.attempt()), (Some(6_000), 1));
        r.schedule(2_000, 1.0);
        assert_eq!(
            (r.at(), r.attempt()),
            (Some(6_000), 1),
            "one look at a time"
        );
        r.clear();
        r.schedule(6_000, 1.0);
        assert_eq!(
            (r.at(), r.attempt()),
            (Some(16_000), 2),
            "the next look waits twice as long"
        );
        r.now(7_000);
        assert_eq!(r.at(), Some(7_000), "SIGHUP looks at once");
        r.reset();
        r.schedule(0, 1.0);
        assert_eq!(
            r.at(),
            Some(5_000),
            "a new episode starts from the first delay"
        );
    }

    #[test]
    fn a_recheck_under_a_test_time_scale_waits_the_scaled_delay() {
        let mut r = Recheck::default();
        r.schedule(0, 100.0);
        assert_eq!(r.at(), Some(50));
        let mut r = Recheck::default();
        r.schedule_after(u64::MAX - 1, Duration::from_secs(1));
        assert_eq!(r.at(), Some(u64::MAX), "saturates, never wraps");
    }

    #[test]
    fn looks_start_at_seconds_double_and_settle_at_ten_minutes() {
        let secs: Vec<u64> = (0..10).map(|a| delay(a).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 320, 600, 600, 600]);
        assert_eq!(delay(u32::MAX), MAX);
        assert!((0..200).all(|a| delay(a) >= FIRST && delay(a) <= MAX));
    }
}

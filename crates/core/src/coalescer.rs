//! Turns wakes into cycles (contract 4 step 1, `coalescer.cases.json`). Pure: the caller
//! passes the time in milliseconds and asks when the next cycle is due.
//!
//! Idle, first wake at t0: due at min(last_wake + quiet, t0 + max_delay). During a cycle any number
//! of wakes earn exactly one more, due at min(max(cycle_end, last_wake + quiet), cycle_end + max_delay).
//!
//! Both cases are one formula, min(max(anchor, last_wake + quiet), anchor + max_delay), where the
//! anchor is the first wake (idle) or the cycle's end (wakes that came during a cycle). A wake at
//! exactly the due time that the caller records after starting the cycle earns one more cycle:
//! the coalescer never guesses that a running cycle already saw it.

/// Wakes not yet served by a started cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owed {
    /// The first wake (idle) or the end of the cycle the wakes arrived during; `None` while
    /// that cycle still runs.
    anchor: Option<u64>,
    last_wake: u64,
}

#[derive(Debug, Clone)]
pub struct Coalescer {
    quiet_ms: u64,
    max_delay_ms: u64,
    running: bool,
    owed: Option<Owed>,
}

impl Coalescer {
    pub fn new(quiet_ms: u64, max_delay_ms: u64) -> Coalescer {
        Coalescer {
            quiet_ms,
            max_delay_ms,
            running: false,
            owed: None,
        }
    }

    /// Records a wake at `now`.
    pub fn wake(&mut self, now: u64) {
        match &mut self.owed {
            Some(owed) => owed.last_wake = owed.last_wake.max(now),
            None => {
                self.owed = Some(Owed {
                    anchor: (!self.running).then_some(now),
                    last_wake: now,
                })
            }
        }
    }

    /// When the next cycle should start, if one is owed and none is running.
    pub fn due(&self) -> Option<u64> {
        if self.running {
            return None;
        }
        let owed = self.owed?;
        let anchor = owed.anchor.unwrap_or(owed.last_wake);
        let after_quiet = owed.last_wake.saturating_add(self.quiet_ms).max(anchor);
        Some(after_quiet.min(anchor.saturating_add(self.max_delay_ms)))
    }

    /// Starts the owed cycle if it is due at `now`. Returns true when a cycle started.
    pub fn try_start(&mut self, now: u64) -> bool {
        match self.due() {
            Some(due) if due <= now => {
                self.running = true;
                self.owed = None;
                true
            }
            _ => false,
        }
    }

    /// The running cycle ended at `now`. Wakes that came during it are now owed one cycle,
    /// anchored at this end. Ending when nothing runs changes nothing.
    pub fn end(&mut self, now: u64) {
        if !self.running {
            return;
        }
        self.running = false;
        if let Some(owed) = &mut self.owed
            && owed.anchor.is_none()
        {
            owed.anchor = Some(now);
        }
    }

    pub fn is_running(&self) -> bool {
        self.running
    }

    /// True when wakes are waiting for a cycle (running or not).
    pub fn is_owed(&self) -> bool {
        self.owed.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_wake_is_due_after_quiet() {
        let mut c = Coalescer::new(3_000, 15_000);
        assert_eq!(c.due(), None);
        c.wake(1_000);
        assert_eq!(c.due(), Some(4_000));
        assert!(!c.try_start(3_999));
        assert!(c.try_start(4_000));
        assert!(c.is_running());
        assert_eq!(c.due(), None);
    }

    #[test]
    fn steady_stream_is_capped_by_max_delay() {
        let mut c = Coalescer::new(3_000, 15_000);
        for t in (0..=20_000).step_by(1_000) {
            c.wake(t);
            if t < 15_000 {
                assert!(!c.try_start(t));
            }
        }
        assert_eq!(c.due(), Some(15_000));
    }

    #[test]
    fn many_wakes_during_cycle_earn_exactly_one_more() {
        let mut c = Coalescer::new(3_000, 15_000);
        c.wake(0);
        assert!(c.try_start(3_000));
        for t in 4_000..4_010 {
            c.wake(t);
            assert!(!c.try_start(t));
        }
        c.end(5_000);
        // max(5000, 4009 + 3000) = 7009, min with 5000 + 15000.
        assert_eq!(c.due(), Some(7_009));
        assert!(c.try_start(7_009));
        c.end(8_000);
        assert_eq!(c.due(), None);
    }

    #[test]
    fn wake_during_cycle_after_long_run_is_due_at_end() {
        let mut c = Coalescer::new(3_000, 15_000);
        c.wake(0);
        assert!(c.try_start(3_000));
        c.wake(3_500);
        c.end(60_000);
        assert_eq!(c.due(), Some(60_000));
    }

    #[test]
    fn end_without_running_is_ignored() {
        let mut c = Coalescer::new(3_000, 15_000);
        c.end(5);
        c.wake(10);
        assert_eq!(c.due(), Some(3_010));
    }
}

//! The budgets of contract 3.1 (poll) and 3.4 (socket connects), as pure functions of server-clock
//! milliseconds. No I/O: the HTTP and socket layers ask, then spend.

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;

use super::clock::{HOUR, MIN, SEC};

/// A token bucket that refills continuously and may go negative (the no-progress budget does).
#[derive(Debug, Clone)]
pub struct Bucket {
    pub burst: f64,
    /// Server-clock ms per token.
    pub refill_ms: f64,
    pub floor: f64,
    tokens: f64,
    at: u64,
}

impl Bucket {
    pub fn new(burst: f64, refill_ms: f64, floor: f64) -> Bucket {
        Bucket {
            burst,
            refill_ms,
            floor,
            tokens: burst,
            at: 0,
        }
    }
    fn refill(&mut self, now: u64) {
        if now > self.at {
            let gained = (now - self.at) as f64 / self.refill_ms;
            self.tokens = (self.tokens + gained).min(self.burst);
            self.at = now;
        }
    }
    /// Server-clock ms until the bucket holds at least one token (0 when it does).
    pub fn wait_for_one(&mut self, now: u64) -> u64 {
        self.refill(now);
        if self.tokens >= 1.0 {
            0
        } else {
            ((1.0 - self.tokens) * self.refill_ms).ceil() as u64
        }
    }
    /// Whole tokens held at `now` (below zero for an overdrawn no-progress budget).
    pub fn level(&mut self, now: u64) -> i64 {
        self.refill(now);
        self.tokens.floor() as i64
    }
    pub fn spend(&mut self, now: u64) {
        self.refill(now);
        self.tokens = (self.tokens - 1.0).max(self.floor);
    }
}

/// The two poll budgets shared by tray and sync reads (contract 3.1).
#[derive(Debug, Clone)]
pub struct PollBudget {
    /// Burst 50, one per 30 s, spent only by a read that showed nothing with no progress; down to -170.
    pub no_progress: Bucket,
    /// Burst 120, one per second, spent by every read before it runs.
    pub ceiling: Bucket,
    /// A `rate_limit.warning` went out for the budget of that name and it has not refilled past
    /// the mark since: one warning per descent.
    warned: [bool; 2],
}

impl Default for PollBudget {
    fn default() -> Self {
        PollBudget {
            no_progress: Bucket::new(50.0, 30.0 * SEC as f64, -170.0),
            ceiling: Bucket::new(120.0, SEC as f64, 0.0),
            warned: [false; 2],
        }
    }
}

/// A budget at or below this many reads left earns a `rate_limit.warning` (`frames`).
pub const WARN_AT: i64 = 5;

/// A poll budget running low: its name, what is left, its burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LowBudget {
    pub budget: &'static str,
    pub remaining: i64,
    pub limit: u32,
}

impl PollBudget {
    /// Checks both budgets before a read: `Err(wait_ms)` (the longer of the two waits) when refused,
    /// which spends nothing; otherwise spends one from the ceiling.
    pub fn admit(&mut self, now: u64) -> Result<(), u64> {
        let wait = self
            .no_progress
            .wait_for_one(now)
            .max(self.ceiling.wait_for_one(now));
        if wait > 0 {
            return Err(wait);
        }
        self.ceiling.spend(now);
        Ok(())
    }
    /// A budget that has just come down to `WARN_AT` reads or fewer, once per descent: what a
    /// `rate_limit.warning` frame says before the next read is refused `429`.
    pub fn low(&mut self, now: u64) -> Option<LowBudget> {
        let levels = [
            ("no_progress", self.no_progress.level(now), 50),
            ("read_ceiling", self.ceiling.level(now), 120),
        ];
        let mut out = None;
        for ((budget, remaining, limit), warned) in levels.into_iter().zip(&mut self.warned) {
            if remaining > WARN_AT {
                *warned = false;
            } else if !*warned {
                *warned = true;
                out = out.or(Some(LowBudget {
                    budget,
                    remaining,
                    limit,
                }));
            }
        }
        out
    }
    /// After the answer: a read that showed nothing while the agent made no progress spends one.
    pub fn settle(&mut self, now: u64, showed_something: bool, progress_recently: bool) {
        if !showed_something && !progress_recently {
            self.no_progress.spend(now);
        }
    }
}

/// A sliding-window count of events (server-clock ms).
#[derive(Debug, Clone, Default)]
pub struct Window {
    times: VecDeque<u64>,
}

impl Window {
    fn prune(&mut self, now: u64, span: u64) {
        while let Some(&t) = self.times.front() {
            if t + span <= now {
                self.times.pop_front();
            } else {
                break;
            }
        }
    }
    /// `Err(ms until a slot frees)` when `limit` events already happened in the last `span`.
    pub fn check(&mut self, now: u64, span: u64, limit: u32) -> Result<(), u64> {
        self.prune(now, span);
        if (self.times.len() as u64) < limit as u64 {
            return Ok(());
        }
        let idx = self.times.len() - limit.max(1) as usize;
        let oldest = self.times.get(idx).copied().unwrap_or(now);
        Err((oldest + span).saturating_sub(now).max(1))
    }
    pub fn record(&mut self, now: u64) {
        self.times.push_back(now);
    }
}

/// Per-agent socket connect budget (contract 3.4): the minute bucket counts every attempt,
/// refused ones included; the hour bucket counts only allowed connects.
#[derive(Debug, Clone)]
pub struct ConnectBudget {
    pub per_minute: u32,
    pub per_hour: u32,
    minute: Window,
    hour: Window,
}

impl Default for ConnectBudget {
    fn default() -> Self {
        ConnectBudget {
            per_minute: 20,
            per_hour: 200,
            minute: Window::default(),
            hour: Window::default(),
        }
    }
}

impl ConnectBudget {
    /// Counts one attempt; `Err(wait_ms)` when it is over budget.
    pub fn attempt(&mut self, now: u64) -> Result<(), u64> {
        counted_attempt(&mut self.minute, now, MIN, self.per_minute)?;
        self.hour.check(now, HOUR, self.per_hour)?;
        self.hour.record(now);
        Ok(())
    }
}

/// The per-IP connect budget (300 a minute, every attempt counted), checked first.
#[derive(Debug, Clone, Default)]
pub struct IpBudget {
    minute: Window,
}

impl IpBudget {
    pub fn attempt(&mut self, now: u64) -> Result<(), u64> {
        counted_attempt(&mut self.minute, now, MIN, IP_CONNECTS_PER_MINUTE)
    }
    /// Attempts in the last minute (this one included, after `attempt`).
    fn in_window(&self) -> u64 {
        self.minute.times.len() as u64
    }
}

/// Contract 3.4: "Per client IP: 300 socket connects a minute".
pub const IP_CONNECTS_PER_MINUTE: u32 = 300;

/// The per-IP connect budgets, one per client IP (contract 3.4), and what each counted: every
/// attempt, the refused ones, and the most attempts one minute ever held (the peak a test of
/// connect pacing reads, `GET /_sim/refusals`).
#[derive(Debug, Clone, Default)]
pub struct IpBudgets {
    by_ip: BTreeMap<IpAddr, IpCount>,
}

#[derive(Debug, Clone, Default)]
pub struct IpCount {
    budget: IpBudget,
    pub attempts: u64,
    pub refused: u64,
    /// The most attempts any one minute (sliding, server clock) held, refused ones included.
    pub peak_per_minute: u64,
}

impl IpBudgets {
    /// Counts one attempt from `ip`; `Err(wait_ms)` when it is over the budget.
    pub fn attempt(&mut self, ip: IpAddr, now: u64) -> Result<(), u64> {
        let c = self.by_ip.entry(ip).or_default();
        let r = c.budget.attempt(now);
        c.attempts += 1;
        c.refused += u64::from(r.is_err());
        c.peak_per_minute = c.peak_per_minute.max(c.budget.in_window());
        r
    }

    pub fn counts(&self) -> impl Iterator<Item = (&IpAddr, &IpCount)> {
        self.by_ip.iter()
    }
}

/// One attempt in a window that counts every attempt, refused ones included. A refused attempt's
/// wait is counted with the attempt itself in the window, so a client that comes back after it is
/// let in: the wait names the moment a retry is admitted, not the moment one slot frees (which
/// this very attempt would fill again).
fn counted_attempt(window: &mut Window, now: u64, span: u64, limit: u32) -> Result<(), u64> {
    let admitted = window.check(now, span, limit);
    window.record(now);
    match admitted {
        Ok(()) => Ok(()),
        Err(_) => Err(window.check(now, span, limit).err().unwrap_or(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_minute_bucket_counts_refused_attempts_and_hour_counts_allowed_only() {
        let mut b = ConnectBudget {
            per_minute: 2,
            per_hour: 3,
            ..Default::default()
        };
        assert!(b.attempt(0).is_ok());
        assert!(b.attempt(1).is_ok());
        let wait = b.attempt(2).unwrap_err();
        assert_eq!(
            wait,
            MIN - 1,
            "counting the refused attempt itself, the minute has room again when the attempt at \
             t=1 leaves it, at t=60_001"
        );
        assert!(
            b.attempt(MIN - 1).is_err(),
            "the refused attempt at t=2 still fills the minute"
        );
        assert!(b.attempt(2 * MIN + 10).is_ok());
        assert!(
            b.attempt(4 * MIN).is_err(),
            "hour bucket holds only the 3 allowed connects"
        );
    }

    #[test]
    fn a_retry_after_the_budget_wait_is_admitted() {
        let mut b = ConnectBudget {
            per_minute: 2,
            ..Default::default()
        };
        b.attempt(0).unwrap();
        b.attempt(1_000).unwrap();
        let mut now = 2_000;
        // A client that always comes back exactly when told is refused once, then let in.
        let wait = b.attempt(now).unwrap_err();
        now += wait;
        assert_eq!(b.attempt(now), Ok(()), "admitted at {now} ms");
        let mut ip = IpBudget::default();
        for t in 0..300 {
            ip.attempt(t).unwrap();
        }
        let wait = ip.attempt(300).unwrap_err();
        assert_eq!(ip.attempt(300 + wait), Ok(()));
    }

    #[test]
    fn each_client_ip_has_its_own_budget_and_its_peak_is_counted() {
        let mut b = IpBudgets::default();
        let one: IpAddr = [127, 0, 0, 1].into();
        let two: IpAddr = [127, 0, 0, 2].into();
        for t in 0..300 {
            b.attempt(one, t).unwrap();
        }
        assert!(b.attempt(one, 300).is_err(), "the 301st in a minute");
        assert_eq!(b.attempt(two, 300), Ok(()), "another IP is counted apart");
        let counts: Vec<_> = b.counts().collect();
        assert_eq!(counts[0].1.attempts, 301);
        assert_eq!(counts[0].1.refused, 1);
        assert_eq!(counts[0].1.peak_per_minute, 301);
        assert_eq!(counts[1].1.peak_per_minute, 1);
    }

    #[test]
    fn poll_budget_refuses_when_no_progress_runs_out_and_spends_nothing_when_refused() {
        let mut p = PollBudget::default();
        for _ in 0..50 {
            p.admit(0).unwrap();
            p.settle(0, false, false);
        }
        let wait = p.admit(0).unwrap_err();
        assert_eq!(wait, 30 * SEC);
        assert!(p.admit(30 * SEC).is_ok());
    }

    #[test]
    fn poll_budget_parallel_reads_are_all_spent_below_zero_and_let_in_again_only_at_one() {
        let mut p = PollBudget::default();
        // 60 reads admitted before any of them is answered (in flight at once).
        for _ in 0..60 {
            p.admit(0).unwrap();
        }
        for _ in 0..60 {
            p.settle(0, false, false);
        }
        assert_eq!(
            p.admit(0).unwrap_err(),
            11 * 30 * SEC,
            "at -10, back to one takes 11 refills"
        );
        // Never below the floor of -170.
        let mut q = PollBudget::default();
        for _ in 0..300 {
            q.settle(0, false, false);
        }
        assert_eq!(q.admit(0).unwrap_err(), 171 * 30 * SEC);
    }

    #[test]
    fn poll_ceiling_refused_reads_spend_nothing() {
        let mut p = PollBudget::default();
        for _ in 0..120 {
            p.admit(0).unwrap();
        }
        for _ in 0..10 {
            assert_eq!(
                p.admit(0).unwrap_err(),
                SEC,
                "a refused read spends nothing"
            );
        }
        assert!(p.admit(SEC).is_ok());
    }

    #[test]
    fn poll_ceiling_spends_on_every_read() {
        let mut p = PollBudget::default();
        for _ in 0..120 {
            p.admit(0).unwrap();
            p.settle(0, true, false);
        }
        assert_eq!(p.admit(0).unwrap_err(), SEC);
    }
}

//! The listener's own memory of its runs, for the caps and the loop guard: when each run
//! started, what it reported it cost (`core::run_report`), and which conversations its tray
//! showed moving. Never a message body. Bounded: at most [`MAX_RUNS`] runs in detail; older runs
//! are folded into one total for their local day, and conversation lists are dropped once the loop
//! guard's window has passed.

use super::clock::{self, Offsets};
use serde::{Deserialize, Serialize};

/// The most runs kept in detail. A run takes seconds at least, so this is more than an hour of
/// back-to-back runs; older ones only count towards their day's totals.
pub const MAX_RUNS: usize = 4096;

/// The most conversations remembered for one run (the tray shows at most 50 cards, contract 3.1).
pub const MAX_CONVERSATIONS_PER_RUN: usize = 64;

/// One run as the policy counts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEntry {
    /// When the run started (Unix ms): a run counts in the hour and day it started.
    pub started_ms: i64,
    /// Its own report of what it cost, once it ended (`None`: not ended, or not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Its own report of the tokens it used (input and output, `core::run_report`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// The conversations its tray showed that the loop guard counts (see
    /// `policy::loop_conversations`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conversations: Vec<String>,
}

/// The runs older than those kept in detail, summed for one local day.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DayTotal {
    pub day: i64,
    pub runs: u64,
    pub cost_usd: f64,
    pub tokens: u64,
}

/// What the policy remembers of past runs. Serialisable, so the daemon can keep it in the state
/// dir across restarts (a restart must not reset a cap).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    #[serde(default)]
    runs: Vec<RunEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    folded: Option<DayTotal>,
}

/// Runs, cost and tokens in one window (an hour or a day).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Totals {
    pub runs: u64,
    pub cost_usd: f64,
    pub tokens: u64,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// A run starts: it counts from now. `conversations` beyond the cap are not remembered.
    pub fn started(
        &mut self,
        started_ms: i64,
        mut conversations: Vec<String>,
        offsets: &dyn Offsets,
    ) {
        conversations.truncate(MAX_CONVERSATIONS_PER_RUN);
        self.runs.push(RunEntry {
            started_ms,
            cost_usd: None,
            tokens: None,
            conversations,
        });
        while self.runs.len() > MAX_RUNS {
            self.fold_oldest(offsets);
        }
    }

    /// The run that started at `started_ms` ended with this report (either part may be missing:
    /// Codex reports no cost). A run not found (folded already) is ignored.
    pub fn ended(&mut self, started_ms: i64, cost_usd: Option<f64>, tokens: Option<u64>) {
        if let Some(run) = self
            .runs
            .iter_mut()
            .rev()
            .find(|r| r.started_ms == started_ms)
        {
            run.cost_usd = cost_usd.filter(|c| c.is_finite() && *c >= 0.0);
            run.tokens = tokens;
        }
    }

    /// The runs kept in detail, oldest first.
    pub fn runs(&self) -> &[RunEntry] {
        &self.runs
    }

    /// Forgets what no rule can need at `now_ms`: conversation lists older than `keep_lists_ms`
    /// (the loop guard's window), runs before yesterday (local), and a folded total of another day.
    pub fn prune(&mut self, now_ms: i64, keep_lists_ms: i64, offsets: &dyn Offsets) {
        let today = clock::local_day(offsets, now_ms);
        self.runs
            .retain(|r| clock::local_day(offsets, r.started_ms) >= today.saturating_sub(1));
        for run in &mut self.runs {
            if now_ms.saturating_sub(run.started_ms) >= keep_lists_ms {
                run.conversations = Vec::new();
            }
        }
        if self.folded.as_ref().is_some_and(|f| f.day != today) {
            self.folded = None;
        }
    }

    /// Runs, cost and tokens of the runs that started in the local day of `at_ms` (up to it).
    pub fn day(&self, at_ms: i64, offsets: &dyn Offsets) -> Totals {
        let day = clock::local_day(offsets, at_ms);
        let mut totals = self.sum(at_ms, |t| clock::local_day(offsets, t) == day);
        if let Some(f) = self.folded.as_ref().filter(|f| f.day == day) {
            totals.runs = totals.runs.saturating_add(f.runs);
            totals.cost_usd += f.cost_usd;
            totals.tokens = totals.tokens.saturating_add(f.tokens);
        }
        totals
    }

    /// Runs, cost and tokens of the runs that started in the local hour of `at_ms` (up to it).
    pub fn hour(&self, at_ms: i64, offsets: &dyn Offsets) -> Totals {
        let hour = clock::local_hour(offsets, at_ms);
        self.sum(at_ms, |t| clock::local_hour(offsets, t) == hour)
    }

    /// The start times, oldest first, of the runs within `within_ms` before `now_ms` whose list
    /// names `conversation`.
    pub(super) fn saw(&self, conversation: &str, now_ms: i64, within_ms: i64) -> Vec<i64> {
        self.runs
            .iter()
            .filter(|r| r.started_ms <= now_ms && now_ms - r.started_ms < within_ms)
            .filter(|r| r.conversations.iter().any(|c| c == conversation))
            .map(|r| r.started_ms)
            .collect()
    }

    fn sum(&self, at_ms: i64, in_window: impl Fn(i64) -> bool) -> Totals {
        let mut totals = Totals::default();
        for r in self.runs.iter().filter(|r| r.started_ms <= at_ms) {
            if in_window(r.started_ms) {
                totals.runs = totals.runs.saturating_add(1);
                totals.cost_usd += r.cost_usd.unwrap_or(0.0);
                totals.tokens = totals.tokens.saturating_add(r.tokens.unwrap_or(0));
            }
        }
        totals
    }

    fn fold_oldest(&mut self, offsets: &dyn Offsets) {
        if self.runs.is_empty() {
            return;
        }
        let run = self.runs.remove(0);
        let day = clock::local_day(offsets, run.started_ms);
        let total = match self.folded.take() {
            Some(f) if f.day == day => f,
            Some(f) if f.day > day => {
                // An older day than the one already folded: it no longer counts anywhere.
                self.folded = Some(f);
                return;
            }
            _ => DayTotal {
                day,
                ..DayTotal::default()
            },
        };
        self.folded = Some(DayTotal {
            day,
            runs: total.runs.saturating_add(1),
            cost_usd: total.cost_usd + run.cost_usd.unwrap_or(0.0),
            tokens: total.tokens.saturating_add(run.tokens.unwrap_or(0)),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::clock::FixedOffset;
    use super::*;

    #[test]
    fn a_run_counts_in_its_hour_and_day_with_its_reported_cost() {
        let z = FixedOffset(0);
        let mut l = Ledger::new();
        l.started(3_600_000, vec![], &z);
        l.ended(3_600_000, Some(0.25), Some(1000));
        l.started(7_200_000, vec![], &z);
        assert_eq!(l.hour(7_200_001, &z).runs, 1);
        let day = l.day(7_200_001, &z);
        assert_eq!((day.runs, day.cost_usd, day.tokens), (2, 0.25, 1000));
        assert_eq!(l.day(86_400_000, &z).runs, 0);
    }

    #[test]
    fn past_the_cap_old_runs_fold_into_their_days_total() {
        let z = FixedOffset(0);
        let mut l = Ledger::new();
        for i in 0..(MAX_RUNS as i64 + 10) {
            l.started(i, vec!["c".into()], &z);
            l.ended(i, Some(0.5), Some(2));
        }
        assert_eq!(l.runs().len(), MAX_RUNS);
        let day = l.day(MAX_RUNS as i64 + 10, &z);
        assert_eq!(day.runs, MAX_RUNS as u64 + 10);
        assert_eq!(day.tokens, 2 * (MAX_RUNS as u64 + 10));
    }

    #[test]
    fn prune_drops_old_lists_and_old_days() {
        let z = FixedOffset(0);
        let mut l = Ledger::new();
        l.started(0, vec!["c".into()], &z);
        l.started(2 * 86_400_000, vec!["c".into()], &z);
        l.prune(2 * 86_400_000 + 60_000, 60_000, &z);
        assert_eq!(l.runs().len(), 1);
        assert!(l.runs().iter().all(|r| r.conversations.is_empty()));
        let back: Ledger = serde_json::from_str(&serde_json::to_string(&l).unwrap()).unwrap();
        assert_eq!(back, l);
    }
}

//! The listener's own memory of its runs, for the caps and the loop guard: when each run
//! started, what it reported it cost (`core::run_report`), and which conversations its tray
//! showed moving, and besides the runs what the policy learnt on the way (the loop guard's marks,
//! `policy::loops`; the contacts the trays showed, `policy::contacts`; since when runs are held).
//! Never a message body. Bounded: at most [`MAX_RUNS`] runs in detail; older runs are folded into
//! one total for their local day, in one pass however many there are (a file read back with more
//! is cut the same way, so a huge file costs its parse and no more: issue 38 item 7), and
//! conversation lists are dropped once the loop guard's window has passed.

use super::clock::{self, Offsets};
use super::contacts::Contacts;
use super::loops::Loops;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};

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
    /// `cost_usd` is not the run's report but an estimate: it ended before its runtime reported
    /// (a timeout, a crash), and its cost is counted as its per-run budget.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
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
    /// Of `runs`, those whose cost is an estimate.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub estimated: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the policy remembers of past runs. Serialisable, so the daemon can keep it in the state
/// dir across restarts (a restart must not reset a cap). Its JSON is `runs` and `folded` only:
/// the loop guard's index is rebuilt when it is read back.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(from = "Stored")]
pub struct Ledger {
    runs: Vec<RunEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    folded: Option<DayTotal>,
    /// The conversations the loop guard saw loop.
    #[serde(skip_serializing_if = "Loops::is_empty")]
    loops: Loops,
    /// The handles the trays showed as contacts (for `first_contact` where no card tells).
    #[serde(skip_serializing_if = "Contacts::is_empty")]
    contacts: Contacts,
    /// Since when runs are held (Unix ms), so a restart does not make the hold look new.
    #[serde(skip_serializing_if = "Option::is_none")]
    held_since: Option<i64>,
    /// An id for each run, in step with `runs` and rising: what the index names a run by (two
    /// runs may share a start time).
    #[serde(skip)]
    ids: Vec<u64>,
    #[serde(skip)]
    next_id: u64,
    /// For each conversation a run's list names, those runs (id, start) in `runs`' order, so the
    /// loop guard reads one card's runs without a scan of every run (`saw`). Bounded by the
    /// lists: at most [`MAX_RUNS`] x [`MAX_CONVERSATIONS_PER_RUN`] entries.
    #[serde(skip)]
    seen: Seen,
}

type Seen = HashMap<String, VecDeque<(u64, i64)>>;

/// A ledger as it is stored: what `Ledger` reads back before it indexes the lists.
#[derive(Deserialize, Default)]
struct Stored {
    #[serde(default)]
    runs: Vec<RunEntry>,
    #[serde(default)]
    folded: Option<DayTotal>,
    #[serde(default)]
    loops: Loops,
    #[serde(default)]
    contacts: Contacts,
    #[serde(default)]
    held_since: Option<i64>,
}

/// A ledger read back, indexed in one pass. A file with more than [`MAX_RUNS`] runs (written
/// by hand, or by another program) is cut to them by the first [`Ledger::prune`], which knows
/// the zone their days are folded in.
impl From<Stored> for Ledger {
    fn from(stored: Stored) -> Ledger {
        let mut ledger = Ledger {
            runs: stored.runs,
            folded: stored.folded,
            loops: stored.loops,
            contacts: stored.contacts,
            held_since: stored.held_since,
            ..Ledger::default()
        };
        ledger.reindex();
        ledger
    }
}

/// Two ledgers are equal when they remember the same things (the index follows from them).
impl PartialEq for Ledger {
    fn eq(&self, other: &Ledger) -> bool {
        self.runs == other.runs
            && self.folded == other.folded
            && self.loops == other.loops
            && self.contacts == other.contacts
            && self.held_since == other.held_since
    }
}

/// What the policy learnt besides runs: the loop guard's marks, the contacts, since when runs
/// are held ([`Ledger::memory`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    #[serde(default, skip_serializing_if = "Loops::is_empty")]
    pub loops: Loops,
    #[serde(default, skip_serializing_if = "Contacts::is_empty")]
    pub contacts: Contacts,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_since: Option<i64>,
}

/// Adds `run` to the folded total of its day; a run of an older day than the one folded already
/// counts nowhere any more.
fn fold(folded: &mut Option<DayTotal>, run: &RunEntry, offsets: &dyn Offsets) {
    let day = clock::local_day(offsets, run.started_ms);
    let total = match folded.take() {
        Some(f) if f.day == day => f,
        Some(f) if f.day > day => {
            *folded = Some(f);
            return;
        }
        _ => DayTotal {
            day,
            ..DayTotal::default()
        },
    };
    *folded = Some(DayTotal {
        day,
        runs: total.runs.saturating_add(1),
        cost_usd: total.cost_usd + run.cost_usd.unwrap_or(0.0),
        tokens: total.tokens.saturating_add(run.tokens.unwrap_or(0)),
        estimated: total.estimated.saturating_add(u64::from(run.estimated)),
    });
}

/// Each conversation a run's list names, once (a list may repeat a name; the run counts once).
fn distinct(conversations: &[String]) -> Vec<&String> {
    let mut names: Vec<&String> = conversations.iter().collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Adds run `id` (newer than every run already in) to its conversations' entries.
fn index(seen: &mut Seen, id: u64, run: &RunEntry) {
    for c in distinct(&run.conversations) {
        seen.entry(c.clone())
            .or_default()
            .push_back((id, run.started_ms));
    }
}

/// Takes run `id` out of its conversations' entries (each sorted by id; the oldest run, the one
/// a fold takes, is at the front, so that removal is O(1)).
fn unindex(seen: &mut Seen, id: u64, run: &RunEntry) {
    for c in distinct(&run.conversations) {
        if let Some(entries) = seen.get_mut(c) {
            if entries.front().is_some_and(|e| e.0 == id) {
                entries.pop_front();
            } else if let Ok(at) = entries.binary_search_by_key(&id, |e| e.0) {
                entries.remove(at);
            }
            if entries.is_empty() {
                seen.remove(c);
            }
        }
    }
}

/// Runs, cost and tokens in one window (an hour or a day).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Totals {
    pub runs: u64,
    pub cost_usd: f64,
    pub tokens: u64,
    /// Of `runs`, those whose cost is an estimate (`RunEntry::estimated`).
    pub estimated: u64,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// A ledger rebuilt from what the state dir's history kept (`crate::history::ledger`): the
    /// runs the caps count, oldest first, and the total of a day's runs the history no longer
    /// holds one by one. Runs past [`MAX_RUNS`] fold into their day's total as they do at
    /// [`started`](Self::started).
    pub fn restore(runs: Vec<RunEntry>, folded: Option<DayTotal>, offsets: &dyn Offsets) -> Ledger {
        let mut ledger = Ledger::from(Stored {
            runs,
            folded,
            ..Stored::default()
        });
        ledger.fold_excess(offsets);
        ledger
    }

    /// A run starts: it counts from now. `conversations` beyond the cap are not remembered.
    pub fn started(
        &mut self,
        started_ms: i64,
        mut conversations: Vec<String>,
        offsets: &dyn Offsets,
    ) {
        conversations.truncate(MAX_CONVERSATIONS_PER_RUN);
        let run = RunEntry {
            started_ms,
            cost_usd: None,
            tokens: None,
            estimated: false,
            conversations,
        };
        self.push(run);
        self.fold_excess(offsets);
    }

    /// The run that started at `started_ms` ended with this report (either part may be missing:
    /// Codex reports no cost). A run not found (folded already) is ignored.
    pub fn ended(&mut self, started_ms: i64, cost_usd: Option<f64>, tokens: Option<u64>) {
        self.ended_as(started_ms, cost_usd, tokens, false);
    }

    /// [`ended`](Self::ended) for a run that ended before its runtime reported its cost:
    /// `cost_usd` is the estimate the listener counts for it (its per-run budget).
    pub fn ended_estimated(&mut self, started_ms: i64, cost_usd: f64, tokens: Option<u64>) {
        self.ended_as(started_ms, Some(cost_usd), tokens, true);
    }

    fn ended_as(&mut self, started_ms: i64, cost: Option<f64>, tokens: Option<u64>, est: bool) {
        if let Some(run) = self
            .runs
            .iter_mut()
            .rev()
            .find(|r| r.started_ms == started_ms)
        {
            run.cost_usd = cost.filter(|c| c.is_finite() && *c >= 0.0);
            run.tokens = tokens;
            run.estimated = est && run.cost_usd.is_some();
        }
    }

    /// The run that started at `started_ms` did not run after all (its runtime refused it
    /// before a model was asked: not logged in, a refused key): forgotten when it is the last
    /// one, so it counts toward no cap. True when it was.
    pub fn forget_last(&mut self, started_ms: i64) -> bool {
        if self.runs.last().is_none_or(|r| r.started_ms != started_ms) {
            return false;
        }
        if let (Some(run), Some(id)) = (self.runs.pop(), self.ids.pop()) {
            unindex(&mut self.seen, id, &run);
        }
        true
    }

    /// The runs kept in detail, oldest first.
    pub fn runs(&self) -> &[RunEntry] {
        &self.runs
    }

    /// Forgets what no rule can need at `now_ms`: conversation lists older than `keep_lists_ms`
    /// (the loop guard's window), runs before yesterday (local), and a folded total of another day.
    /// A run stamped after `now_ms` was stamped by a clock that was ahead and has been set back:
    /// it happened before now, so it counts from now (in today's caps, not a later day's).
    pub fn prune(&mut self, now_ms: i64, keep_lists_ms: i64, offsets: &dyn Offsets) {
        self.fold_excess(offsets);
        if self.runs.iter().any(|r| r.started_ms > now_ms) {
            for run in &mut self.runs {
                run.started_ms = run.started_ms.min(now_ms);
            }
            self.reindex();
        }
        let today = clock::local_day(offsets, now_ms);
        let runs = std::mem::take(&mut self.runs);
        let ids = std::mem::take(&mut self.ids);
        self.runs.reserve(runs.len());
        self.ids.reserve(ids.len());
        for (mut run, id) in runs.into_iter().zip(ids) {
            if clock::local_day(offsets, run.started_ms) < today.saturating_sub(1) {
                unindex(&mut self.seen, id, &run);
                continue;
            }
            if now_ms.saturating_sub(run.started_ms) >= keep_lists_ms {
                unindex(&mut self.seen, id, &run);
                run.conversations = Vec::new();
            }
            self.runs.push(run);
            self.ids.push(id);
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
            totals.estimated = totals.estimated.saturating_add(f.estimated);
        }
        totals
    }

    /// The loop guard's marks.
    pub fn loops(&self) -> &Loops {
        &self.loops
    }

    pub fn loops_mut(&mut self) -> &mut Loops {
        &mut self.loops
    }

    /// The handles the trays showed as contacts.
    pub fn contacts(&self) -> &Contacts {
        &self.contacts
    }

    pub fn contacts_mut(&mut self) -> &mut Contacts {
        &mut self.contacts
    }

    /// Since when runs are held, as the ledger kept it across a restart.
    pub fn held_since(&self) -> Option<i64> {
        self.held_since
    }

    pub fn set_held_since(&mut self, since: Option<i64>) {
        self.held_since = since;
    }

    /// What the policy learnt besides runs, as the state dir's `policy.json` keeps it (the runs
    /// are in the history, `crate::history`, and never written twice).
    pub fn memory(&self) -> Memory {
        Memory {
            loops: self.loops.clone(),
            contacts: self.contacts.clone(),
            held_since: self.held_since,
        }
    }

    /// Takes back what [`memory`](Self::memory) kept.
    pub fn remember(&mut self, memory: Memory) {
        self.loops = memory.loops;
        self.contacts = memory.contacts;
        self.held_since = memory.held_since;
    }

    /// Runs, cost and tokens of the runs that started in the local hour of `at_ms` (up to it).
    pub fn hour(&self, at_ms: i64, offsets: &dyn Offsets) -> Totals {
        let hour = clock::local_hour(offsets, at_ms);
        self.sum(at_ms, |t| clock::local_hour(offsets, t) == hour)
    }

    /// The start times, oldest first, of the runs within `within_ms` before `now_ms` whose list
    /// names `conversation`.
    ///
    /// Reads the index: as long as what it returns plus the conversation's runs outside the
    /// window, which `prune` keeps short.
    pub(super) fn saw(&self, conversation: &str, now_ms: i64, within_ms: i64) -> Vec<i64> {
        self.seen
            .get(conversation)
            .into_iter()
            .flatten()
            .map(|&(_, t)| t)
            .filter(|&t| t <= now_ms && now_ms - t < within_ms)
            .collect()
    }

    /// [`saw`](Self::saw) as the loop guard counts it: only the runs after the user last let the
    /// conversation go (`policy::loops`).
    pub(super) fn saw_since_release(
        &self,
        conversation: &str,
        now_ms: i64,
        within_ms: i64,
    ) -> Vec<i64> {
        let after = self.loops.released_at(conversation);
        let mut seen = self.saw(conversation, now_ms, within_ms);
        if let Some(at) = after {
            seen.retain(|t| *t > at);
        }
        seen
    }

    /// [`saw`](Self::saw) by a scan of every run: what the index must agree with.
    #[cfg(test)]
    pub(super) fn saw_by_scan(&self, conversation: &str, now_ms: i64, within_ms: i64) -> Vec<i64> {
        self.runs
            .iter()
            .filter(|r| r.started_ms <= now_ms && now_ms - r.started_ms < within_ms)
            .filter(|r| r.conversations.iter().any(|c| c == conversation))
            .map(|r| r.started_ms)
            .collect()
    }

    /// Appends a run, newest, to the runs and the index.
    fn push(&mut self, run: RunEntry) {
        let id = self.next_id;
        self.next_id = id.saturating_add(1);
        index(&mut self.seen, id, &run);
        self.runs.push(run);
        self.ids.push(id);
    }

    /// Builds the index from the runs' lists (a ledger read back from its JSON).
    fn reindex(&mut self) {
        let runs = std::mem::take(&mut self.runs);
        self.ids.clear();
        self.seen.clear();
        for run in runs {
            self.push(run);
        }
    }

    fn sum(&self, at_ms: i64, in_window: impl Fn(i64) -> bool) -> Totals {
        let mut totals = Totals::default();
        for r in self.runs.iter().filter(|r| r.started_ms <= at_ms) {
            if in_window(r.started_ms) {
                totals.runs = totals.runs.saturating_add(1);
                totals.cost_usd += r.cost_usd.unwrap_or(0.0);
                totals.tokens = totals.tokens.saturating_add(r.tokens.unwrap_or(0));
                totals.estimated = totals.estimated.saturating_add(u64::from(r.estimated));
            }
        }
        totals
    }

    /// Folds the runs past [`MAX_RUNS`], oldest first, into their day's total: one pass over the
    /// runs kept, however many go.
    fn fold_excess(&mut self, offsets: &dyn Offsets) {
        let excess = self.runs.len().saturating_sub(MAX_RUNS);
        if excess == 0 {
            return;
        }
        let ids: Vec<u64> = self.ids.drain(..excess.min(self.ids.len())).collect();
        for (run, id) in self.runs.drain(..excess).zip(ids) {
            unindex(&mut self.seen, id, &run);
            fold(&mut self.folded, &run, offsets);
        }
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

    #[test]
    fn the_json_holds_the_runs_only_and_the_index_is_rebuilt_when_read() {
        let z = FixedOffset(0);
        let mut l = Ledger::new();
        l.started(1_000, vec!["a".into(), "b".into()], &z);
        l.started(2_000, vec!["a".into()], &z);
        let json = serde_json::to_value(&l).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"runs": [
                {"started_ms": 1_000, "conversations": ["a", "b"]},
                {"started_ms": 2_000, "conversations": ["a"]},
            ]})
        );
        let back: Ledger = serde_json::from_value(json).unwrap();
        assert_eq!(back.saw("a", 2_000, 10_000), vec![1_000, 2_000]);
        assert_eq!(back.saw("b", 2_000, 10_000), vec![1_000]);
        let empty: Ledger = serde_json::from_str("{}").unwrap();
        assert!(empty.saw("a", 2_000, 10_000).is_empty());
    }

    /// What a random ledger goes through: runs starting (at any time, lists with repeats),
    /// runs ending, prunes, a JSON round trip, and a burst of runs past [`MAX_RUNS`].
    #[derive(Debug, Clone)]
    enum Op {
        Start(i64, Vec<u8>),
        End(usize),
        Prune(i64, i64),
        RoundTrip,
        Burst(i64, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0i64..200, proptest::collection::vec(0u8..6, 0..8))
                .prop_map(|(t, cs)| Op::Start(t, cs)),
            1 => (0usize..50).prop_map(Op::End),
            2 => (0i64..200, 1i64..100).prop_map(|(t, keep)| Op::Prune(t, keep)),
            1 => Just(Op::RoundTrip),
            1 => (0i64..200, 0u8..6).prop_map(|(t, c)| Op::Burst(t, c)),
        ]
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn the_loop_guard_index_agrees_with_a_scan_of_every_run(
            ops in proptest::collection::vec(op(), 1..40),
            now in 0i64..260,
            within in 1i64..120,
        ) {
            // Times in hours, so prunes also drop whole days.
            const H: i64 = 3_600_000;
            let z = FixedOffset(0);
            let name = |c: &u8| format!("conv_{c}");
            let mut l = Ledger::new();
            for op in ops {
                match op {
                    Op::Start(t, cs) => l.started(t * H, cs.iter().map(name).collect(), &z),
                    Op::End(i) => {
                        if let Some(t) = l.runs().get(i).map(|r| r.started_ms) {
                            l.ended(t, Some(0.1), Some(5));
                        }
                    }
                    Op::Prune(t, keep) => l.prune(t * H, keep * H, &z),
                    Op::RoundTrip => {
                        let back: Ledger =
                            serde_json::from_str(&serde_json::to_string(&l).unwrap()).unwrap();
                        prop_assert_eq!(&back, &l);
                        l = back;
                    }
                    Op::Burst(t, c) => {
                        for i in 0..(MAX_RUNS as i64 + 3) {
                            l.started(t * H + i, vec![name(&c), name(&c)], &z);
                        }
                    }
                }
                prop_assert_eq!(l.ids.len(), l.runs.len());
            }
            for c in 0u8..7 {
                let c = name(&c);
                for (at, window) in [(now * H, within * H), (i64::MAX, i64::MAX), (0, 1)] {
                    prop_assert_eq!(l.saw(&c, at, window), l.saw_by_scan(&c, at, window));
                }
            }
        }
    }
}

//! The run policy of one profile (`[listen.policy]`, issue 26), owned by its listener: the rules,
//! the zone's offsets, the ledger of past runs (built at start from the state dir's history,
//! `crate::history`, which every run's start and end is written to, so a restart does not reset
//! a cap) and the current hold. A cycle asks it after
//! `crate::decision` chose a run ([`RunPolicy::judge`]); it hears what the cycle did, and says
//! when the hold ends, so every hold ends in a read of the tray (a wake of its own,
//! `hold_ended`). The rules themselves are `crate::policy`; the choices are in docs/decisions.md,
//! "Run policy". Its clock is the wall clock the machine is handed.
//!
//! Besides the runs, the ledger keeps what the policy learnt (the loop guard's marks, the
//! contacts, since when runs are held): not runs, so not history; a change is handed to the
//! driver with the next [`RunPolicy::unsaved`] and kept in the state dir's `policy.json`.

use crate::log_events;
use crate::policy::{self, Heard, Hold, Ledger, OffsetTable, Policy};
use crate::status::{Held, RunKind, Status, Usage, UsageTotals};
use crate::time::rfc3339_ms;
use crate::tray::Tray;
use std::sync::Arc;
use std::time::Duration;

/// A hold's end is looked at at least this often, so a machine that slept through it (the
/// monotonic timer does not count a suspend) reads the tray soon after it wakes.
const LOOK_EVERY: Duration = Duration::from_secs(60);
/// However close a hold's end, its timer waits this long at least (no busy loop on a clock
/// that disagrees with itself).
const LOOK_MIN: Duration = Duration::from_millis(100);

/// What the policy said of a cycle's tray.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Seen {
    /// The cycle ended before the tray was judged (unreadable, no runtime, ...): the hold, if
    /// any, stands.
    #[default]
    Unjudged,
    /// Nothing is held: a run started, or nothing waited.
    Clear,
    Held(Hold),
}

/// A hold in force, since when (wall ms), and the wall clock when it was judged (a clock set
/// back past that makes its `until` wrong: it is judged again, issue 38 item 8).
#[derive(Debug, Clone)]
struct CurrentHold {
    hold: Hold,
    since: i64,
    judged: i64,
    /// A reload that changed the rules already woke a cycle for this hold: its end, should it
    /// come before a cycle judges the tray again, ends it without a second wake (contract 4: a
    /// hold's end wakes one cycle; the simulator's `hold_end_once`, seed 95).
    woken: bool,
}

/// What a run spent, as the ledger counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    pub cost_usd: Option<f64>,
    pub tokens: Option<u64>,
    /// `cost_usd` is an estimate: the run ended before it reported its cost.
    pub estimated: bool,
}

/// One profile's policy, ledger and hold.
#[derive(Debug)]
pub struct RunPolicy {
    policy: Policy,
    offsets: Arc<OffsetTable>,
    ledger: Arc<Ledger>,
    hold: Option<CurrentHold>,
    /// The run in progress: when it started on the wall clock.
    running: Option<i64>,
    /// When (monotonic ms) the hold's end is next looked at.
    wake: Option<u64>,
    /// The ledger changed without a run (a loop marked, a contact met, a hold begun).
    unsaved: bool,
}

impl RunPolicy {
    /// The settings' policy and zone, and the ledger the state dir kept.
    pub fn new(policy: Policy, zone: OffsetTable, ledger: Ledger, now_wall: i64) -> RunPolicy {
        let mut p = RunPolicy {
            policy,
            offsets: Arc::new(zone),
            ledger: Arc::new(ledger),
            hold: None,
            running: None,
            wake: None,
            unsaved: false,
        };
        p.prune(now_wall);
        p
    }

    /// The ledger to save when it changed since it was last handed out.
    pub fn unsaved(&mut self) -> Option<Arc<Ledger>> {
        std::mem::take(&mut self.unsaved).then(|| self.ledger.clone())
    }

    /// The rules in force.
    pub fn rules(&self) -> &Policy {
        &self.policy
    }

    /// Today's runs and spending (the policy's local day).
    pub fn today(&self, now_wall: i64) -> policy::Totals {
        self.ledger.day(now_wall, self.offsets.as_ref())
    }

    /// The next local midnight after `now_wall` (a day's cap ends there).
    pub fn tomorrow(&self, now_wall: i64) -> i64 {
        policy::next_day(self.offsets.as_ref(), now_wall)
    }

    fn prune(&mut self, now_wall: i64) {
        let keep = self.policy.loop_guard.map_or(0, |g| g.within_ms);
        let offsets = self.offsets.clone();
        Arc::make_mut(&mut self.ledger).prune(now_wall, keep, offsets.as_ref());
    }

    pub fn ledger(&self) -> Arc<Ledger> {
        self.ledger.clone()
    }

    /// `Ok((kind, cards))` when the run may start (for those cards, past the cut too); else the
    /// hold. The tray is taken in first (`policy::observe`: contacts, the loop guard's marks);
    /// `heard` is what the socket heard of unread messages.
    pub fn judge(
        &mut self,
        tray: &Tray,
        kind: RunKind,
        heard: &Heard,
        now_wall: i64,
    ) -> Result<(RunKind, Vec<String>), Hold> {
        self.prune(now_wall);
        let ledger = Arc::make_mut(&mut self.ledger);
        if policy::observe(&self.policy, tray, ledger, now_wall) {
            self.unsaved = true;
        }
        policy::admit(
            &self.policy,
            tray,
            &self.ledger,
            heard,
            now_wall,
            self.offsets.as_ref(),
            kind,
        )
    }

    /// The invites on `tray` the rules let wake a run (`Policy::allowed_invites`).
    pub fn allowed_invites(&self, tray: &Tray) -> Vec<String> {
        self.policy.allowed_invites(tray, &self.ledger)
    }

    /// A run was handed to the supervisor: it counts from now (its history line keeps it).
    pub fn run_started(&mut self, conversations: &[String], now_wall: i64) {
        Arc::make_mut(&mut self.ledger).started(
            now_wall,
            conversations.to_vec(),
            self.offsets.as_ref(),
        );
        self.running = Some(now_wall);
    }

    /// A cycle's run ended: what it spent goes into the ledger (a run whose start was not heard
    /// counts from now; its history line keeps what it spent).
    pub fn run_ended(&mut self, conversations: &[String], spent: Spent, now_wall: i64) {
        let started = match self.running.take() {
            Some(t) => t,
            None => {
                Arc::make_mut(&mut self.ledger).started(
                    now_wall,
                    conversations.to_vec(),
                    self.offsets.as_ref(),
                );
                now_wall
            }
        };
        let ledger = Arc::make_mut(&mut self.ledger);
        match (spent.estimated, spent.cost_usd) {
            (true, Some(cost)) => ledger.ended_estimated(started, cost, spent.tokens),
            _ => ledger.ended(started, spent.cost_usd, spent.tokens),
        }
    }

    /// What a run that ended spent: its runtime's report, or where it reported no cost and ended
    /// before its final event could (`report.partial`), the per-run budget Claude Code was given
    /// (`max_cost_per_run_usd`), marked as an estimate: a timeout or a crash is not free.
    pub fn spent(&self, report: &crate::run_report::RunReport, budgeted: bool) -> Spent {
        let tokens = report.usage.map(|u| u.total());
        match (report.cost_usd, self.policy.max_cost_per_run_usd) {
            (None, Some(budget)) if budgeted && report.partial => Spent {
                cost_usd: Some(budget),
                tokens,
                estimated: true,
            },
            (cost, _) => Spent {
                cost_usd: cost,
                tokens,
                estimated: false,
            },
        }
    }

    /// A run its runtime refused (unusable: not logged in, a refused key) cost nothing and did
    /// not run: it leaves the ledger, and no cap counts it (its history line says `refused`).
    pub fn run_refused(&mut self) {
        if let Some(started) = self.running.take() {
            Arc::make_mut(&mut self.ledger).forget_last(started);
        }
    }

    /// What the policy said of a cycle's tray sets or ends the hold.
    pub fn seen(&mut self, seen: &Seen, now_mono: u64, now_wall: i64) {
        match seen {
            Seen::Unjudged => {}
            Seen::Clear => {
                if self.hold.take().is_some() {
                    tracing::debug!(event = %log_events::HOLD_CLEARED, "the run policy holds nothing now");
                }
                self.wake = None;
                self.keep_since(None);
            }
            Seen::Held(hold) => self.held(hold.clone(), now_mono, now_wall),
        }
    }

    /// Since when runs are held, into the ledger (so a restart keeps it).
    fn keep_since(&mut self, since: Option<i64>) {
        if self.ledger.held_since() != since {
            Arc::make_mut(&mut self.ledger).set_held_since(since);
            self.unsaved = true;
        }
    }

    /// A cycle's run is held: said once per hold (and when its reason or key changes), and its
    /// end looked at.
    fn held(&mut self, hold: Hold, now_mono: u64, now_wall: i64) {
        let same = self
            .hold
            .as_ref()
            .is_some_and(|h| h.hold.reason == hold.reason && h.hold.key == hold.key);
        if !same {
            let until = hold.until.map(rfc3339_ms);
            let cards: Vec<&str> = hold.cards.iter().take(10).map(String::as_str).collect();
            let invites: Vec<&str> = hold.invites.iter().take(10).map(String::as_str).collect();
            tracing::info!(
                event = %log_events::RUN_HELD,
                reason = hold.reason.as_str(),
                key = hold.key,
                until = until.as_deref(),
                cards = %cards.join(","),
                invites = %invites.join(","),
                "runs wait: [listen.policy] {} holds them{}",
                hold.key,
                until.as_deref().map(|u| format!(" until {u}; the tray is read again then")).unwrap_or_else(|| "; a new message, a reload or the rule lifted ends it".into())
            );
        }
        // A hold the last listener said (its ledger kept when) goes on: the same `since`.
        let since = self
            .hold
            .as_ref()
            .map(|h| h.since)
            .or(self.ledger.held_since())
            .unwrap_or(now_wall)
            .min(now_wall);
        self.keep_since(Some(since));
        self.wake = hold.until.map(|u| timer_for(u, now_mono, now_wall));
        self.hold = Some(CurrentHold {
            hold,
            since,
            judged: now_wall,
            woken: false,
        });
    }

    /// When the hold's end is next looked at (`None`: no hold ends by time).
    pub fn wake_at(&self) -> Option<u64> {
        self.wake
    }

    /// The look is due: true when the hold's end has come (the caller wakes with `hold_ended`,
    /// once: the hold is over); else the next look is set. A cycle that cannot read the tray
    /// then retries as every read does, and the server's re-wakes do the rest (contract 4: no
    /// retry ladder of the listener's own; until issue 37 a look every minute re-read the tray
    /// for as long as it could not be read).
    ///
    /// A wall clock set back before the hold was judged (by more than `LOOK_MIN`) ends it too:
    /// its `until` was reckoned on a clock that was ahead, and the tray is judged again.
    pub fn wake_due(&mut self, now_mono: u64, now_wall: i64) -> bool {
        let back = crate::time::ms(LOOK_MIN) as i64;
        if self
            .hold
            .as_ref()
            .is_some_and(|h| h.hold.until.is_some() && h.judged > now_wall.saturating_add(back))
        {
            self.wake = None;
            self.hold = None;
            tracing::info!(event = %log_events::HOLD_CLEARED, "the clock was set back since the hold was judged; reading the tray again");
            return true;
        }
        let until = self.hold.as_ref().and_then(|h| h.hold.until);
        match until {
            Some(u) if u <= now_wall => {
                self.wake = None;
                let woken = self.hold.take().is_some_and(|h| h.woken);
                tracing::debug!(event = %log_events::HOLD_CLEARED, woken, "the hold's end came");
                !woken
            }
            Some(u) => {
                self.wake = Some(timer_for(u, now_mono, now_wall));
                false
            }
            None => {
                self.wake = None;
                false
            }
        }
    }

    /// SIGHUP's settings: the rules and the zone again. True when the rules changed while runs
    /// were held: the tray is read at once (the caller wakes with `hold_ended`).
    pub fn reload(&mut self, policy: &Policy, zone: OffsetTable) -> bool {
        let changed = *policy != self.policy;
        self.policy = policy.clone();
        self.offsets = Arc::new(zone);
        let lifted = changed && self.hold.is_some();
        if lifted && let Some(h) = self.hold.as_mut() {
            h.woken = true;
        }
        lifted
    }

    /// The user lets every loop go (any SIGHUP: `listen.policy.loop_guard`'s way out, issue 38
    /// item 2): only runs from now count towards the guard. True when a conversation was held
    /// by it (the caller reads the tray at once, `hold_ended`).
    pub fn release_loops(&mut self, now_wall: i64) -> bool {
        if self.ledger.loops().is_empty() {
            return false;
        }
        let released = Arc::make_mut(&mut self.ledger)
            .loops_mut()
            .release_all(now_wall);
        if released {
            self.unsaved = true;
            // The caller wakes a cycle for it: the hold's end wakes no second one.
            if let Some(h) = self.hold.as_mut() {
                h.woken = true;
            }
            tracing::info!(event = %log_events::LOOP_RELEASED, "SIGHUP: the conversations the loop guard held are let go");
        }
        released
    }

    /// The hold in force, as the status shows it.
    pub fn current_hold(&self) -> Option<Held> {
        self.hold.as_ref().map(|h| Held {
            reason: h.hold.reason.as_str().to_string(),
            key: h.hold.key.to_string(),
            until: h.hold.until.map(rfc3339_ms),
            since: rfc3339_ms(h.since),
            cards: h.hold.cards.clone(),
            invites: h.hold.invites.clone(),
            unseen: h.hold.unseen.clone(),
            truncated: h.hold.truncated,
        })
    }

    /// `held` and `usage` of the status document.
    pub fn show(&self, status: &mut Status, now_wall: i64) {
        status.held = self.current_hold();
        let totals = |t: policy::Totals| UsageTotals {
            runs: t.runs,
            cost_usd: t.cost_usd,
            tokens: t.tokens,
            estimated: t.estimated,
        };
        status.usage = Usage {
            this_hour: totals(self.ledger.hour(now_wall, self.offsets.as_ref())),
            today: totals(self.ledger.day(now_wall, self.offsets.as_ref())),
        };
    }

    /// The hold in words (`runs wait: max_runs_per_day reached, until 00:00`), in the policy's
    /// zone: what `listen --once` prints.
    pub fn hold_said(&self, now_wall: i64) -> Option<String> {
        self.hold
            .as_ref()
            .map(|h| policy::hold_line(&h.hold, now_wall, self.offsets.as_ref()))
    }

    /// Whether a hold is in force.
    pub fn holding(&self) -> bool {
        self.hold.is_some()
    }
}

/// The monotonic time to look at a hold ending at wall `until_ms`: at the end, but at most a
/// minute from now and at least [`LOOK_MIN`].
fn timer_for(until_ms: i64, now_mono: u64, now_wall: i64) -> u64 {
    let left = u64::try_from(until_ms.saturating_sub(now_wall)).unwrap_or(0);
    let wait = Duration::from_millis(left).clamp(LOOK_MIN, LOOK_EVERY);
    now_mono.saturating_add(crate::time::ms(wait))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::HoldReason;

    fn policy(text: &str) -> Policy {
        Policy::from_toml(toml::from_str(text).unwrap(), "listen.policy").unwrap()
    }

    #[test]
    fn a_hold_is_shown_with_its_end_and_a_reload_that_changes_the_rules_lifts_it() {
        let utc = OffsetTable::new(0, vec![]);
        let mut p = RunPolicy::new(
            policy("allow = [\"@a\"]\n"),
            utc.clone(),
            Ledger::new(),
            1_000_000,
        );
        let soon = 1_000_050;
        let hold = Hold {
            reason: HoldReason::RunsPerHour,
            key: "max_runs_per_hour",
            until: Some(soon),
            cards: vec!["c1".into()],
            invites: vec![],
            unseen: vec![],
            truncated: false,
        };
        p.seen(&Seen::Held(hold), 0, 1_000_000);
        let mut status = Status::default();
        p.show(&mut status, 1_000_000);
        let held = status.held.clone().unwrap();
        assert_eq!(
            (held.reason.as_str(), held.cards.len()),
            ("runs_per_hour", 1)
        );
        assert_eq!(held.until, Some(rfc3339_ms(soon)));
        assert_eq!(p.wake_at(), Some(100), "never sooner than LOOK_MIN");
        assert!(p.wake_due(120, 1_000_120), "the hold's end has come");
        assert_eq!(
            p.wake_at(),
            None,
            "once: no look of its own after the end (issue 37 item 2)"
        );
        p.show(&mut status, 1_000_120);
        assert_eq!(status.held, None, "the hold is over");
        p.seen(&Seen::Held(hold_again()), 130, 1_000_130);
        assert!(!p.reload(&policy("allow = [\"@a\"]\n"), utc.clone()));
        assert!(
            p.reload(&Policy::default(), utc),
            "rules changed while held"
        );
        p.seen(&Seen::Clear, 200, 1_000_200);
        assert_eq!(p.wake_at(), None);
        p.show(&mut status, 1_000_200);
        assert_eq!(status.held, None);
    }

    fn hold_again() -> Hold {
        Hold {
            cards: vec!["c1".into()],
            ..Hold::by_time(HoldReason::NotAllowed, "allow", None)
        }
    }

    #[test]
    fn every_run_is_counted_even_one_whose_start_was_not_heard() {
        let utc = OffsetTable::new(0, vec![]);
        let mut p = RunPolicy::new(policy("max_runs_per_day = 5\n"), utc, Ledger::new(), 0);
        p.run_started(&["c1".to_string()], 1_000);
        let spent = Spent {
            cost_usd: Some(0.5),
            tokens: Some(10),
            estimated: false,
        };
        p.run_ended(&["c1".to_string()], spent, 2_000);
        p.run_ended(&[], Spent::default(), 3_000);
        assert_eq!(p.ledger().runs().len(), 2);
        let mut status = Status::default();
        p.show(&mut status, 4_000);
        assert_eq!(status.usage.today.runs, 2);
        assert_eq!(status.usage.today.cost_usd, 0.5);
    }
}

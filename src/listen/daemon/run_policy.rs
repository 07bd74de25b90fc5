//! The run policy of one profile (`[listen.policy]`, issue 26), owned by its listener: the rules,
//! the zone's offsets, the ledger of past runs (kept in the state dir as `ledger.json`, so a
//! restart does not reset a cap) and the current hold. The cycle asks the policy through a
//! snapshot (`cycle::gate::PolicyGate`); the daemon hears here what the cycle did, and asks when
//! the hold ends, so every hold ends in a read of the tray (a wake of its own, `hold_ended`).
//! The rules themselves are pure: `core::policy`; the choices are in docs/decisions.md,
//! "Run policy".

use crate::config::{Settings, TestTimeScale};
use crate::core::policy::{Hold, Ledger, OffsetTable, Policy};
use crate::core::status::{Held, Status, Usage, UsageTotals};
use crate::listen::cycle::CycleReport;
use crate::listen::cycle::gate::{PolicyGate, PolicySeen, now_ms};
use crate::listen::state_dir::StateDir;
use crate::log_events;
use crate::sys::{fs, time, tz};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The ledger's file in the state dir.
pub const LEDGER_FILE: &str = "ledger.json";
/// The largest `ledger.json` read: 4096 runs with their conversation lists fit well inside.
const MAX_LEDGER_BYTES: u64 = 16 * 1024 * 1024;
/// A hold's end is looked at at least this often, so a machine that slept through it (the
/// monotonic timer does not count a suspend) reads the tray soon after it wakes.
const LOOK_EVERY: Duration = Duration::from_secs(60);
/// However close a hold's end, its timer waits this long at least (no busy loop on a clock
/// that disagrees with itself).
const LOOK_MIN: Duration = Duration::from_millis(100);
/// Test-only: the policy's clock starts at this RFC 3339 instant when the listener starts (then
/// runs at the wall clock's pace), honoured only while `AGENTCHAT_TEST_TIME_SCALE` is (a
/// loopback `api_base`). Quiet hours and the day's caps need the clock itself, not a scale.
pub const TEST_CLOCK: &str = "AGENTCHAT_TEST_CLOCK";

/// A hold in force and since when.
#[derive(Debug, Clone)]
struct CurrentHold {
    hold: Hold,
    since: SystemTime,
}

/// One profile's policy, ledger and hold.
#[derive(Debug)]
pub(crate) struct RunPolicy {
    policy: Policy,
    offsets: Arc<OffsetTable>,
    /// Shared with the running cycle's snapshot (`PolicyGate`): a cycle costs no copy of it.
    ledger: Arc<Ledger>,
    hold: Option<CurrentHold>,
    /// The run in progress: when it started on the policy's clock.
    running: Option<i64>,
    /// When the main loop next looks at the hold's end.
    wake: Option<tokio::time::Instant>,
    /// The policy's clock minus the wall clock (ms): 0 but under [`TEST_CLOCK`].
    clock_offset_ms: i64,
    path: PathBuf,
    write_failing: bool,
}

impl RunPolicy {
    /// The settings' policy and zone, and the ledger the state dir keeps (a corrupt or unreadable
    /// file is said once and the ledger starts afresh).
    pub(crate) fn load(settings: &Settings, state: &StateDir) -> RunPolicy {
        let clock_offset_ms = test_clock_offset(settings.time_scale);
        let now = now_ms(clock_offset_ms);
        let path = state.path(LEDGER_FILE);
        let ledger: Ledger = match fs::read_regular_capped(&path, MAX_LEDGER_BYTES) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(event = %log_events::LEDGER_UNREADABLE, path = %path.display(), error = %e, "the run ledger is damaged; starting a new one (today's caps count from now)");
                Ledger::new()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ledger::new(),
            Err(e) => {
                tracing::warn!(event = %log_events::LEDGER_UNREADABLE, path = %path.display(), error = %e, "the run ledger cannot be read; starting a new one (today's caps count from now)");
                Ledger::new()
            }
        };
        let mut p = RunPolicy {
            policy: settings.listen.policy.clone(),
            offsets: Arc::new(zone(settings, now)),
            ledger: Arc::new(ledger),
            hold: None,
            running: None,
            wake: None,
            clock_offset_ms,
            path,
            write_failing: false,
        };
        p.prune();
        p
    }

    fn now(&self) -> i64 {
        now_ms(self.clock_offset_ms)
    }

    fn prune(&mut self) {
        let keep = self.policy.loop_guard.map_or(0, |g| g.within_ms);
        let (now, offsets) = (self.now(), self.offsets.clone());
        Arc::make_mut(&mut self.ledger).prune(now, keep, offsets.as_ref());
    }

    /// What a cycle needs to ask the policy.
    pub(crate) fn for_cycle(&mut self) -> PolicyGate {
        self.prune();
        PolicyGate {
            policy: self.policy.clone(),
            ledger: self.ledger.clone(),
            offsets: self.offsets.clone(),
            clock_offset_ms: self.clock_offset_ms,
        }
    }

    /// A run was handed to the supervisor: it counts from now.
    pub(super) fn run_started(&mut self, conversations: &[String]) {
        let now = self.now();
        Arc::make_mut(&mut self.ledger).started(now, conversations.to_vec(), self.offsets.as_ref());
        self.running = Some(now);
        self.save();
    }

    /// A cycle ended: its run's report goes into the ledger, and what the policy said of its
    /// tray sets or ends the hold.
    pub(crate) fn cycle_ended(&mut self, report: &CycleReport) {
        if report.last.run_started {
            let started = match self.running.take() {
                Some(t) => t,
                None => {
                    // The run's start was not heard (it ended as fast as it began).
                    let now = self.now();
                    let convs = report.conversations.clone();
                    Arc::make_mut(&mut self.ledger).started(now, convs, self.offsets.as_ref());
                    now
                }
            };
            // The run's own report of cost and tokens (`CycleReport::run_report`).
            let (cost, tokens) = report.run_report.as_ref().map_or((None, None), |r| {
                (r.cost_usd, r.usage.as_ref().map(|u| u.total()))
            });
            Arc::make_mut(&mut self.ledger).ended(started, cost, tokens);
            self.save();
        }
        match &report.policy {
            PolicySeen::Unjudged => {}
            PolicySeen::Clear => {
                if self.hold.take().is_some() {
                    tracing::debug!(event = %log_events::HOLD_CLEARED, "the run policy holds nothing now");
                }
                self.wake = None;
            }
            PolicySeen::Held(hold) => self.held(hold.clone()),
        }
    }

    /// A cycle's run is held: said once per hold (and when its reason or key changes), and its
    /// end looked at.
    fn held(&mut self, hold: Hold) {
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
        let since = match &self.hold {
            Some(h) => h.since,
            None => SystemTime::now(),
        };
        self.wake = hold.until.map(|u| self.timer_for(u));
        self.hold = Some(CurrentHold { hold, since });
    }

    fn timer_for(&self, until_ms: i64) -> tokio::time::Instant {
        let left = u64::try_from(until_ms.saturating_sub(self.now())).unwrap_or(0);
        let wait = Duration::from_millis(left).clamp(LOOK_MIN, LOOK_EVERY);
        tokio::time::Instant::now() + wait
    }

    /// When the main loop next looks at the hold's end (`None`: no hold ends by time).
    pub(super) fn wake_at(&self) -> Option<tokio::time::Instant> {
        self.wake
    }

    /// The look is due: true when the hold's end has come (the caller wakes with `hold_ended`);
    /// else the next look is set. After an end, a look a minute later stays set until a cycle
    /// judges the tray, so a cycle that could not read it does not leave the hold for ever.
    pub(super) fn wake_due(&mut self) -> bool {
        let until = self.hold.as_ref().and_then(|h| h.hold.until);
        match until {
            Some(u) if u <= self.now() => {
                self.wake = Some(tokio::time::Instant::now() + LOOK_EVERY);
                true
            }
            Some(u) => {
                self.wake = Some(self.timer_for(u));
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
    pub(super) fn reload(&mut self, settings: &Settings) -> bool {
        let changed = settings.listen.policy != self.policy;
        self.policy = settings.listen.policy.clone();
        self.offsets = Arc::new(zone(settings, self.now()));
        changed && self.hold.is_some()
    }

    /// `held` and `usage` of the status document.
    pub(super) fn show(&self, status: &mut Status) {
        status.held = self.hold.as_ref().map(|h| Held {
            reason: h.hold.reason.as_str().to_string(),
            key: h.hold.key.to_string(),
            until: h.hold.until.map(rfc3339_ms),
            since: time::rfc3339(h.since),
            cards: h.hold.cards.clone(),
            invites: h.hold.invites.clone(),
        });
        let now = self.now();
        let totals = |t: crate::core::policy::Totals| UsageTotals {
            runs: t.runs,
            cost_usd: t.cost_usd,
            tokens: t.tokens,
        };
        status.usage = Usage {
            this_hour: totals(self.ledger.hour(now, self.offsets.as_ref())),
            today: totals(self.ledger.day(now, self.offsets.as_ref())),
        };
    }

    /// Writes `ledger.json` atomically; a failure is said once per episode, and the listener
    /// keeps the ledger in memory. Without an `fsync`, as `status.json`: it is written on the
    /// listener's one thread right after a run's spawn, where a slow disk's flush would hold up
    /// the socket's acks and heartbeats; a machine crash may leave the file one run behind, which
    /// a cap then counts short by that run.
    fn save(&mut self) {
        let written = serde_json::to_vec(self.ledger.as_ref())
            .map_err(std::io::Error::other)
            .and_then(|bytes| fs::write_atomic_unsynced(&self.path, &bytes).map(drop));
        match written {
            Ok(()) if self.write_failing => {
                self.write_failing = false;
                tracing::info!(event = %log_events::LEDGER_WRITE_RECOVERED, "ledger.json is written again");
            }
            Ok(()) => {}
            Err(e) if !self.write_failing => {
                self.write_failing = true;
                tracing::warn!(event = %log_events::LEDGER_WRITE_FAILED, error = %e, "could not write ledger.json; the caps count from memory and this is said once until a write succeeds");
            }
            Err(_) => {}
        }
    }
}

/// RFC 3339 of a Unix ms instant.
fn rfc3339_ms(ms: i64) -> String {
    let t = u64::try_from(ms).unwrap_or(0);
    time::rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(t))
}

/// The policy's zone as a table around `now_ms`: `timezone`, else the machine's own (`TZ`, else
/// `/etc/localtime`). A zone that cannot be read is said and UTC used: a named zone was checked
/// when the config was read (`config::load`), so this is a file gone since, or the machine's.
fn zone(settings: &Settings, now_ms: i64) -> OffsetTable {
    let read = match &settings.listen.policy.timezone {
        Some(name) => tz::named(name),
        None => tz::local(std::env::var("TZ").ok().as_deref()),
    };
    let zone = read.unwrap_or_else(|e| {
        tracing::warn!(event = %log_events::TIMEZONE_UNREADABLE, error = %e, "the run policy's local time is UTC instead");
        tz::Zone::utc()
    });
    let t = zone.table(now_ms);
    OffsetTable::new(t.initial, t.changes)
}

/// [`TEST_CLOCK`]'s offset from the wall clock, when it is set and the test time scale is in
/// effect; else 0.
fn test_clock_offset(scale: TestTimeScale) -> i64 {
    let Ok(text) = std::env::var(TEST_CLOCK) else {
        return 0;
    };
    let Ok(at) = humantime::parse_rfc3339_weak(&text) else {
        tracing::warn!(event = %log_events::TEST_CLOCK, "{TEST_CLOCK} is not an RFC 3339 time; ignored");
        return 0;
    };
    if !matches!(scale, TestTimeScale::On(_)) {
        tracing::warn!(event = %log_events::TEST_CLOCK, "{TEST_CLOCK} is ignored: it is honoured only while AGENTCHAT_TEST_TIME_SCALE is in effect (a loopback api_base)");
        return 0;
    }
    let at = i64::try_from(time::unix_ms(at)).unwrap_or(0);
    let offset = at.saturating_sub(now_ms(0));
    tracing::info!(event = %log_events::TEST_CLOCK, offset_ms = offset, "{TEST_CLOCK} is in effect: the run policy's clock reads {text} now");
    offset
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::HoldReason;
    use crate::core::status::LastCycle;
    use std::collections::HashMap;
    use std::path::Path;

    fn settings(toml: &str) -> Settings {
        let env = HashMap::from([("HOME".to_string(), "/home/u".to_string())]);
        crate::config::resolve(
            &crate::config::ConfigArgs::default(),
            &env,
            Some((Path::new("/etc/agentchat/config.toml"), toml)),
        )
        .unwrap()
    }

    fn ran(conversations: &[&str]) -> CycleReport {
        CycleReport {
            last: LastCycle {
                run_started: true,
                ..Default::default()
            },
            policy: PolicySeen::Clear,
            conversations: conversations.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_corrupt_ledger_starts_afresh_and_every_run_is_kept_in_the_state_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        std::fs::write(state.path(LEDGER_FILE), b"{not json").unwrap();
        let s = settings("[listen.policy]\nmax_runs_per_day = 5\n");
        let mut p = RunPolicy::load(&s, &state);
        assert!(p.ledger.runs().is_empty());
        p.run_started(&["c1".to_string()]);
        p.cycle_ended(&ran(&["c1"]));
        // A run whose start was not heard still counts, from its cycle's end.
        p.cycle_ended(&ran(&[]));
        let again = RunPolicy::load(&s, &state);
        assert_eq!(again.ledger.runs().len(), 2);
        let mut status = Status::default();
        again.show(&mut status);
        assert_eq!(status.usage.today.runs, 2);
        assert_eq!(status.held, None);
    }

    #[tokio::test]
    async fn a_hold_is_shown_with_its_end_and_a_reload_that_changes_the_rules_lifts_it() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        let s = settings("[listen.policy]\nallow = [\"@a\"]\n");
        let mut p = RunPolicy::load(&s, &state);
        let soon = p.now() + 50;
        let hold = Hold {
            reason: HoldReason::RunsPerHour,
            key: "max_runs_per_hour",
            until: Some(soon),
            cards: vec!["c1".into()],
            invites: vec![],
        };
        p.cycle_ended(&CycleReport {
            policy: PolicySeen::Held(hold),
            ..Default::default()
        });
        let mut status = Status::default();
        p.show(&mut status);
        let held = status.held.clone().unwrap();
        assert_eq!(
            (held.reason.as_str(), held.cards.len()),
            ("runs_per_hour", 1)
        );
        assert_eq!(held.until, Some(rfc3339_ms(soon)));
        assert!(p.wake_at().is_some());
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(p.wake_due(), "the hold's end has come");
        assert!(
            p.wake_at().is_some(),
            "a later look stays set until a cycle judges"
        );
        assert!(!p.reload(&s), "the same rules lift nothing");
        assert!(p.reload(&settings("")), "rules changed while held");
        p.cycle_ended(&CycleReport {
            policy: PolicySeen::Clear,
            ..Default::default()
        });
        assert_eq!(p.wake_at(), None);
        p.show(&mut status);
        assert_eq!(status.held, None);
    }
}

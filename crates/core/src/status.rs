//! The typed vocabulary of what the listener is doing, and [`Status`], the document it keeps in
//! its state dir as `status.json` (atomic writes on every change, never while nothing changes;
//! never the key, never message text). `agentchat status`, `agentchat doctor` and `listen --once`
//! read the same type back, and [`quiet_allowance`] is how long a live listener's main loop may go
//! without a turn before they call it stuck.
//!
//! Every enum is written with the snake_case name its variant's doc gives, and that name is the
//! whole format: a field added here is a field of `status.json`. Reading is tolerant, so a status
//! file written by an older or newer listener still reads: a missing field takes its default, an
//! unknown field is ignored, and an enum value this version does not know reads as the field's
//! default (`unknown` for `state`, absent for the optional ones).

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

/// How long a live listener's main loop may go without a turn before `agentchat status`,
/// `agentchat doctor` and `/healthz` call it stuck. While the socket is up the server sends a
/// `heartbeat` frame and a ping every 45 s (contract 3.4), and each turns the loop; a socket
/// silent for `idle_timeout` (100 s by default) is dropped, which turns it too. Two heartbeats and
/// that default, with slack.
pub const STALE_AFTER: Duration = Duration::from_secs(120);

/// Pure: how long after its main loop's last turn at `last_turn` a live listener may stay quiet
/// before it counts as stuck: [`STALE_AFTER`], or until [`STALE_AFTER`] past `next_retry` when it
/// waits out a reconnect delay (nothing turns the loop before the retry).
pub fn quiet_allowance(last_turn: SystemTime, next_retry: Option<SystemTime>) -> Duration {
    let until_retry = next_retry
        .and_then(|r| r.duration_since(last_turn).ok())
        .unwrap_or_default();
    STALE_AFTER.saturating_add(until_retry)
}

/// The one state `status.json` shows. When several hold, the first of `stopped`, `stopping`,
/// `starting`, `key_refused`, `runtime_unusable`, `handle_mismatch` wins, then the socket's own
/// state: a refused key comes before the profile states because nothing else can work without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListenerState {
    /// `starting`: the listener is reading its texts before it opens the socket.
    Starting,
    /// `connecting`: asking who this key is, or opening the socket.
    Connecting,
    /// `connected`: the socket is up.
    Connected,
    /// `backoff`: the socket is down; it is tried again at `next_retry_at`.
    Backoff,
    /// `key_refused`: the server refused the API key (HTTP 401/403 or close 1008); retried slowly,
    /// and at once on reload or when the key file changes.
    KeyRefused,
    /// `runtime_unusable`: the runtime said it cannot work (not logged in, missing binary), or its
    /// program was missing at start: no runs until a re-check passes (on a backoff,
    /// `core::recheck`), a reload (SIGHUP) or its binary changes; each way out reads the tray at
    /// once (`ListenerWake::Recovered`).
    RuntimeUnusable,
    /// `handle_mismatch`: the tray belongs to another agent than this key's: no runs until it
    /// matches again.
    HandleMismatch,
    /// `upgrade_required`: the server closes the socket `4426` (contract 7): this agentchat is
    /// too old for it, and no wake arrives until it is updated; re-checked every 15-30 min.
    UpgradeRequired,
    /// `queued`: with `listen --all`, a cycle found something waiting and its run waits for one
    /// of the process's run slots (`listen.max_concurrent_runs`, `listen.min_available_memory`);
    /// `detail` gives its place. The socket is up and wakes are heard meanwhile.
    Queued,
    /// `stopping`: SIGTERM or SIGINT came; a run still gets its grace (a second signal ends it at
    /// once).
    Stopping,
    /// `stopped`: the listener stopped cleanly. One that died without stopping leaves its last
    /// state behind instead; `agentchat status` tells them apart by its pid.
    Stopped,
    /// `unknown`: a state this version cannot read (a newer listener wrote it). Never written.
    #[default]
    Unknown,
}

impl ListenerState {
    pub fn as_str(self) -> &'static str {
        match self {
            ListenerState::Starting => "starting",
            ListenerState::Connecting => "connecting",
            ListenerState::Connected => "connected",
            ListenerState::Backoff => "backoff",
            ListenerState::KeyRefused => "key_refused",
            ListenerState::RuntimeUnusable => "runtime_unusable",
            ListenerState::HandleMismatch => "handle_mismatch",
            ListenerState::UpgradeRequired => "upgrade_required",
            ListenerState::Queued => "queued",
            ListenerState::Stopping => "stopping",
            ListenerState::Stopped => "stopped",
            ListenerState::Unknown => "unknown",
        }
    }

    /// A state in which no run can start until the user does something (a key, a login, a
    /// config): worth a warning while the listener runs.
    pub fn needs_the_user(self) -> bool {
        matches!(
            self,
            ListenerState::KeyRefused
                | ListenerState::RuntimeUnusable
                | ListenerState::HandleMismatch
                | ListenerState::UpgradeRequired
        )
    }
}

impl From<SocketState> for ListenerState {
    fn from(s: SocketState) -> ListenerState {
        match s {
            SocketState::Connecting => ListenerState::Connecting,
            SocketState::Connected => ListenerState::Connected,
            SocketState::Backoff => ListenerState::Backoff,
            SocketState::KeyRefused => ListenerState::KeyRefused,
            SocketState::UpgradeRequired => ListenerState::UpgradeRequired,
        }
    }
}

/// The socket's own state, which `state` hides while a listener state (starting, stopping, a
/// profile state) is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SocketState {
    /// `connecting`: asking who this key is, or opening the socket.
    Connecting,
    /// `connected`: the socket is up.
    Connected,
    /// `backoff`: down, waiting to try again.
    Backoff,
    /// `key_refused`: the server refused the key.
    KeyRefused,
    /// `upgrade_required`: the server closed the socket `4426` (contract 7): it requires a newer
    /// client; re-checked slowly (`core::reconnect::UPGRADE_RECHECK`).
    UpgradeRequired,
}

impl SocketState {
    pub fn as_str(self) -> &'static str {
        match self {
            SocketState::Connecting => "connecting",
            SocketState::Connected => "connected",
            SocketState::Backoff => "backoff",
            SocketState::KeyRefused => "key_refused",
            SocketState::UpgradeRequired => "upgrade_required",
        }
    }
}

/// Why the run was started; also `AGENTCHAT_RUN_KIND` in the run's environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// `wake`: a card waits; the run gets `wake_instruction`.
    Wake,
    /// `invite`: only invites wait; the run gets `invite_prompt`.
    Invite,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Wake => "wake",
            RunKind::Invite => "invite",
        }
    }
}

/// How a cycle ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// `completed`: the run ended and the runtime judged it a success.
    Completed,
    /// `failed`: the run failed (non-zero exit, signal, time limit, the runtime's own verdict), or
    /// it could not be started (working directory, the runtime's files); `failure` says which.
    Failed,
    /// `unusable`: the runtime said it cannot work (not logged in, missing binary); the listener
    /// shows `runtime_unusable` and starts no run until the state ends ([`ListenerState::RuntimeUnusable`]).
    Unusable,
    /// `no_run`: no run was started; `no_run_reason` says why.
    NoRun,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Unusable => "unusable",
            Outcome::NoRun => "no_run",
        }
    }
}

/// A wake the listener gives itself, named in `last_wake.reasons`, `last_cycle.reasons`, the
/// run's `AGENTCHAT_WAKE_REASONS`, the `cycle_start` log line and the `reason` label of
/// `agentchat_wakes_total`, beside the socket's `message`, `invite`, `connect` and the server's
/// wake reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListenerWake {
    /// `recovered`: a state in which no run could start ended (`runtime_unusable` by a reload,
    /// a changed binary or a passing re-check; texts back after a cycle found none), so the tray
    /// is read at once: the server's wakes that came meanwhile were spent (contract 5).
    Recovered,
    /// `backlog`: the tray read after a run was cut short (`truncated`) and the run made
    /// progress, so the next cycle starts at once (`core::decision::follow_up`).
    Backlog,
    /// `hold_ended`: a run held by `[listen.policy]` may start now (quiet hours ended, a cap's
    /// window rolled over, a loop-guarded conversation's window passed, or a reload lifted or
    /// loosened the rule), so the tray is read without waiting for a new message (issue 26).
    HoldEnded,
}

impl ListenerWake {
    pub fn as_str(self) -> &'static str {
        match self {
            ListenerWake::Recovered => "recovered",
            ListenerWake::Backlog => "backlog",
            ListenerWake::HoldEnded => "hold_ended",
        }
    }
}

/// Why a cycle started no run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoRunReason {
    /// `nothing_waiting`: no card, no invite, nothing truncated.
    NothingWaiting,
    /// `only_muted`: every card waiting is muted ("don't wake me"), and no invite waits.
    OnlyMuted,
    /// `handle_mismatch`: the tray's `you` is another agent than this key's.
    HandleMismatch,
    /// `tray_unreadable`: the tray could not be read after a few tries (the server re-wakes).
    TrayUnreadable,
    /// `no_texts`: no texts for this runtime, neither from the server nor cached.
    NoTexts,
    /// `no_prompt`: the texts lack the prompt this run needs (`wake_instruction` or
    /// `invite_prompt`).
    NoPrompt,
    /// `runtime_unusable`: the runtime said earlier that it cannot work; no run until the state
    /// ends ([`ListenerState::RuntimeUnusable`]).
    RuntimeUnusable,
    /// `stopped`: the listener stopped (SIGTERM, or SIGHUP removing its profile) while the run
    /// waited for one of `listen --all`'s run slots; no run started, so none failed.
    Stopped,
    /// `held`: `[listen.policy]` holds the run (quiet hours, a cap, the loop guard, or no card
    /// from a sender allowed to wake one); `held` in the status says why and until when.
    Held,
}

impl NoRunReason {
    /// The word used in logs and the status file.
    pub fn as_str(self) -> &'static str {
        match self {
            NoRunReason::NothingWaiting => "nothing_waiting",
            NoRunReason::OnlyMuted => "only_muted",
            NoRunReason::HandleMismatch => "handle_mismatch",
            NoRunReason::TrayUnreadable => "tray_unreadable",
            NoRunReason::NoTexts => "no_texts",
            NoRunReason::NoPrompt => "no_prompt",
            NoRunReason::RuntimeUnusable => "runtime_unusable",
            NoRunReason::Stopped => "stopped",
            NoRunReason::Held => "held",
        }
    }
}

/// Where the texts in use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextsSource {
    /// `server`: fetched from `GET /v1/texts` (and kept in the state dir).
    Server,
    /// `cache`: the last good copy in the state dir, because the server's could not be had.
    Cache,
    /// `none`: no texts for the current runtime: no run can start.
    #[default]
    #[serde(rename = "none")]
    Missing,
}

impl TextsSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TextsSource::Server => "server",
            TextsSource::Cache => "cache",
            TextsSource::Missing => "none",
        }
    }
}

/// The listener's state as `status.json` holds it. Times are RFC 3339 in UTC.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Status {
    /// What the listener is doing (see [`ListenerState`] for the values and which wins).
    #[serde(deserialize_with = "lenient")]
    pub state: ListenerState,
    /// When `state` last changed.
    pub since: String,
    /// The socket's own state, which `state` hides while a listener state is shown. Absent only
    /// in a file this version cannot read.
    #[serde(deserialize_with = "lenient")]
    pub socket: Option<SocketState>,
    /// The listener's process id.
    pub pid: u32,
    /// The config profile it runs for.
    pub profile: String,
    /// This key's agent, `@handle`, once the server said who it is.
    pub handle: Option<String>,
    /// The server it talks to.
    pub api_base: String,
    /// The runtime it starts: `claude-code`, `codex` or `script`.
    pub runtime: String,
    /// Where the key came from: `env`, `file:<path>`, `config` (never the key itself).
    pub key_source: String,
    /// When this file was last written: on every change, never while nothing changes.
    pub updated_at: String,
    /// When the listener process started.
    pub started_at: String,
    /// When the last frame of any kind came (socket liveness).
    pub last_frame_at: Option<String>,
    /// When the socket last came up.
    pub last_connected_at: Option<String>,
    /// The last wake, with the reasons pending for the next cycle.
    pub last_wake: Option<LastWake>,
    /// The cycle running now, or the last one.
    pub last_cycle: Option<LastCycle>,
    /// When the socket tries again (in `backoff` and `key_refused`).
    pub next_retry_at: Option<String>,
    /// One line on why the state is what it is (never the key, never message text).
    pub detail: Option<String>,
    /// The texts in use.
    pub texts: TextsStatus,
    /// Counts since the listener started.
    pub counters: Counters,
    /// Runs held by `[listen.policy]` (issue 26): why, until when, and the cards that wait.
    /// `null` when nothing is held. A hold is the user's choice, not a fault: `/readyz` stays 200.
    #[serde(deserialize_with = "lenient")]
    pub held: Option<Held>,
    /// The runs and what they cost, this local hour and today (the local calendar day), from the
    /// runs' own reports: the totals `[listen.policy]`'s caps are held against.
    pub usage: Usage,
    /// The capabilities this listener asks for (`ack`, `heartbeat`, `rewake`, contract 3.4) that
    /// the server's `hello.ok` did not accept: without `rewake` held and failed cards are never
    /// re-woken, without `heartbeat` a quiet socket is only proven by the idle watchdog.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capabilities_refused: Vec<String>,
    /// Not part of the document: the file's modification time, which
    /// `listen::state_dir::StateDir::read_status` fills in. The listener touches the file without
    /// rewriting it on a turn of its main loop when it was last written or touched 30 s ago or
    /// more, so the later of this and `updated_at` is its main loop's last turn, to within 30 s.
    #[serde(skip)]
    pub file_modified: Option<SystemTime>,
}

/// The last wake.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LastWake {
    /// When it came.
    pub at: String,
    /// The reasons pending for the next cycle: `message`, `invite`, `connect`, the server's
    /// `wake` reason (`reminder`, `unanswered`, ...), or the listener's own ([`ListenerWake`]:
    /// `recovered`, `backlog`).
    pub reasons: Vec<String>,
}

/// One cycle: read the tray, decide, run, read the tray again, apply the invite rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LastCycle {
    /// The cycle's id, also `AGENTCHAT_CYCLE_ID` in its run's environment and part of its run
    /// log's name.
    pub id: String,
    /// When it started.
    pub started_at: String,
    /// When it ended; absent while it runs.
    pub ended_at: Option<String>,
    /// The wake reasons it coalesced (see [`LastWake::reasons`]).
    pub reasons: Vec<String>,
    /// Whether a run was started.
    pub run_started: bool,
    /// Which prompt the run got, when one started.
    #[serde(deserialize_with = "lenient")]
    pub run_kind: Option<RunKind>,
    /// How it ended; absent while it runs.
    #[serde(deserialize_with = "lenient")]
    pub outcome: Option<Outcome>,
    /// Why no run started, with `outcome` `no_run`.
    #[serde(deserialize_with = "lenient")]
    pub no_run_reason: Option<NoRunReason>,
    /// Why the run failed or the runtime is unusable, in a line (never message text).
    pub failure: Option<String>,
    /// The run's log file, when one started.
    pub run_log: Option<String>,
    /// Invites this cycle dismissed under the single-run invite rule.
    pub invites_dismissed: u64,
}

impl LastCycle {
    /// A cycle that has just started at `started_at`; the rest is filled in as it goes.
    pub fn started(id: String, started_at: String, reasons: Vec<String>) -> LastCycle {
        LastCycle {
            id,
            started_at,
            reasons,
            ..Default::default()
        }
    }

    /// The cycle counts as a failed run: its outcome is `failed` (whether or not the run got
    /// started), or the runtime found itself unusable during a run.
    pub fn run_failed(&self) -> bool {
        match self.outcome {
            Some(Outcome::Failed) => true,
            Some(Outcome::Unusable) => self.run_started,
            _ => false,
        }
    }
}

/// The texts in use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TextsStatus {
    /// Where they came from.
    #[serde(deserialize_with = "lenient")]
    pub source: TextsSource,
    /// When they were fetched or read from the cache.
    pub fetched_at: Option<String>,
}

/// `held`: runs wait because of `[listen.policy]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Held {
    /// `quiet_hours`, `runs_per_hour`, `runs_per_day`, `cost_per_day`, `loop_guard` or
    /// `not_allowed` (`core::policy::HoldReason`).
    pub reason: String,
    /// The config key that holds them (`max_runs_per_hour`, `allow`, ...).
    pub key: String,
    /// When the hold ends and the listener reads the tray by itself; absent when no time ends
    /// it (`not_allowed`: a new message, a reload or the rule lifted).
    pub until: Option<String>,
    /// Since when runs have been held.
    pub since: String,
    /// The conversations whose cards wait (ids, never text).
    pub cards: Vec<String>,
    /// The invites that wait.
    pub invites: Vec<String>,
    /// Conversations past the tray's cut that the socket heard from and that wait too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unseen: Vec<String>,
    /// The tray was cut short: more cards wait than it showed, judged only where the socket
    /// named them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// `usage`: runs and spending in the local hour and the local day.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub this_hour: UsageTotals,
    pub today: UsageTotals,
}

/// One period's runs and what they cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UsageTotals {
    /// Runs started.
    pub runs: u64,
    /// US dollars, as the runs' own reports say (Claude Code's `total_cost_usd`); runs that
    /// report no cost add nothing.
    pub cost_usd: f64,
    /// Tokens the runs reported (input and output, cached included).
    pub tokens: u64,
    /// Of `runs`, those that ended before they reported a cost and count at the per-run budget
    /// (`listen.policy.max_cost_per_run_usd`) instead.
    #[serde(skip_serializing_if = "is_zero")]
    pub estimated: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Counts since the listener started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    /// Sockets that came up.
    pub connects: u64,
    /// Frames received, of any kind.
    pub frames: u64,
    /// Messages acked.
    pub acks: u64,
    /// Wakes registered (messages, wake frames, invites, connects, the listener's own).
    pub wakes: u64,
    /// Cycles started.
    pub cycles: u64,
    /// Runs started.
    pub runs: u64,
    /// Cycles that count as a failed run (see [`LastCycle::run_failed`]).
    pub runs_failed: u64,
    /// Invites dismissed under the single-run invite rule.
    pub invites_dismissed: u64,
    /// Frames skipped: malformed, oversized or binary.
    pub frames_skipped: u64,
}

/// Reads a field, and a value this version does not know as the field's default.
fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let v = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(v).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn the_listeners_own_wake_reasons_are_written_as_their_words() {
        for (w, word) in [
            (ListenerWake::Recovered, "recovered"),
            (ListenerWake::Backlog, "backlog"),
            (ListenerWake::HoldEnded, "hold_ended"),
        ] {
            assert_eq!(w.as_str(), word);
            assert_eq!(serde_json::to_value(w).unwrap(), json!(word));
            assert_eq!(crate::engine::WakeCause::Listener(w).label(), word);
        }
    }

    #[test]
    fn a_quiet_loop_is_allowed_two_heartbeats_and_slack_or_until_past_its_retry() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(quiet_allowance(t, None), STALE_AFTER);
        // A retry already past changes nothing.
        assert_eq!(
            quiet_allowance(t, Some(t - Duration::from_secs(5))),
            STALE_AFTER
        );
        assert_eq!(
            quiet_allowance(t, Some(t + Duration::from_secs(3_600))),
            Duration::from_secs(3_600) + STALE_AFTER
        );
    }

    /// Each enum's `as_str` is its serde name, so logs and `status.json` spell a value alike.
    #[test]
    fn as_str_is_the_serde_name() {
        fn name<T: Serialize>(v: T) -> String {
            serde_json::to_value(v)
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        }
        use ListenerState as L;
        for s in [
            L::Starting,
            L::Connecting,
            L::Connected,
            L::Backoff,
            L::KeyRefused,
            L::RuntimeUnusable,
            L::HandleMismatch,
            L::UpgradeRequired,
            L::Queued,
            L::Stopping,
            L::Stopped,
            L::Unknown,
        ] {
            assert_eq!(name(s), s.as_str());
        }
        use SocketState as S;
        for s in [
            S::Connecting,
            S::Connected,
            S::Backoff,
            S::KeyRefused,
            S::UpgradeRequired,
        ] {
            assert_eq!(name(s), s.as_str());
            assert_eq!(ListenerState::from(s).as_str(), s.as_str());
        }
        for k in [RunKind::Wake, RunKind::Invite] {
            assert_eq!(name(k), k.as_str());
        }
        use Outcome as O;
        for o in [O::Completed, O::Failed, O::Unusable, O::NoRun] {
            assert_eq!(name(o), o.as_str());
        }
        use NoRunReason as R;
        for r in [
            R::NothingWaiting,
            R::OnlyMuted,
            R::HandleMismatch,
            R::TrayUnreadable,
            R::NoTexts,
            R::NoPrompt,
            R::RuntimeUnusable,
            R::Stopped,
        ] {
            assert_eq!(name(r), r.as_str());
        }
        use TextsSource as T;
        for t in [T::Server, T::Cache, T::Missing] {
            assert_eq!(name(t), t.as_str());
        }
    }

    fn full() -> Status {
        Status {
            state: ListenerState::Connected,
            since: "2026-11-30T01:00:00Z".into(),
            socket: Some(SocketState::Connected),
            pid: 42,
            profile: "default".into(),
            handle: Some("@bob".into()),
            api_base: "http://127.0.0.1:1".into(),
            runtime: "script".into(),
            key_source: "env".into(),
            updated_at: "2026-11-30T01:00:03Z".into(),
            started_at: "2026-11-30T00:59:59Z".into(),
            last_frame_at: Some("2026-11-30T01:00:02Z".into()),
            last_connected_at: Some("2026-11-30T01:00:00Z".into()),
            last_wake: Some(LastWake {
                at: "2026-11-30T01:00:01Z".into(),
                reasons: vec!["message".into()],
            }),
            last_cycle: Some(LastCycle {
                id: "c1".into(),
                started_at: "2026-11-30T01:00:01Z".into(),
                ended_at: Some("2026-11-30T01:00:02Z".into()),
                reasons: vec!["message".into()],
                run_started: true,
                run_kind: Some(RunKind::Wake),
                outcome: Some(Outcome::Failed),
                no_run_reason: None,
                failure: Some("exited with 2".into()),
                run_log: Some("/s/runs/run-1.log".into()),
                invites_dismissed: 1,
            }),
            next_retry_at: None,
            detail: None,
            texts: TextsStatus {
                source: TextsSource::Server,
                fetched_at: Some("2026-11-30T01:00:00Z".into()),
            },
            counters: Counters {
                connects: 1,
                runs: 1,
                runs_failed: 1,
                ..Default::default()
            },
            held: None,
            usage: Usage::default(),
            capabilities_refused: vec![],
            file_modified: None,
        }
    }

    /// The document keeps the field names and value spellings `status.json` has always had, and
    /// reads back as the same value.
    #[test]
    fn status_json_keeps_its_field_names_and_values_and_round_trips() {
        let s = full();
        let v = serde_json::to_value(&s).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "state",
                "since",
                "socket",
                "pid",
                "profile",
                "handle",
                "api_base",
                "runtime",
                "key_source",
                "updated_at",
                "started_at",
                "last_frame_at",
                "last_connected_at",
                "last_wake",
                "last_cycle",
                "next_retry_at",
                "detail",
                "texts",
                "counters",
                "held",
                "usage"
            ]
        );
        assert_eq!(v["state"], "connected");
        assert_eq!(v["socket"], "connected");
        assert_eq!(
            v["next_retry_at"],
            Value::Null,
            "absent values are written as null"
        );
        assert_eq!(v["last_cycle"]["run_kind"], "wake");
        assert_eq!(v["last_cycle"]["outcome"], "failed");
        assert_eq!(v["last_cycle"]["no_run_reason"], Value::Null);
        assert_eq!(v["texts"]["source"], "server");
        assert_eq!(
            serde_json::from_value::<Status>(v).unwrap(),
            s,
            "round trip"
        );
        let none = TextsStatus::default();
        assert_eq!(serde_json::to_value(none).unwrap()["source"], "none");
    }

    /// An older file (fields missing), a newer one (fields and values this version does not know):
    /// both still read.
    #[test]
    fn older_and_newer_status_files_still_read() {
        let old: Status = serde_json::from_value(json!({
            "state": "stopping", "pid": 7, "updated_at": "2026-11-30T01:00:00Z",
            "last_cycle": {"id": "c9", "outcome": "no_run", "no_run_reason": "only_muted"}
        }))
        .unwrap();
        assert_eq!(old.state, ListenerState::Stopping);
        assert_eq!(old.socket, None);
        assert_eq!(old.texts.source, TextsSource::Missing);
        let c = old.last_cycle.unwrap();
        assert_eq!(c.outcome, Some(Outcome::NoRun));
        assert_eq!(c.no_run_reason, Some(NoRunReason::OnlyMuted));

        let newer: Status = serde_json::from_value(json!({
            "state": "hibernating", "socket": "tunnelled", "pid": 8, "mood": "fine",
            "texts": {"source": "carrier-pigeon"},
            "last_cycle": {"id": "c10", "run_kind": "dream", "outcome": "postponed",
                           "no_run_reason": "asleep", "extra": 1}
        }))
        .unwrap();
        assert_eq!(newer.state, ListenerState::Unknown);
        assert_eq!(newer.socket, None);
        assert_eq!(newer.pid, 8);
        assert_eq!(newer.texts.source, TextsSource::Missing);
        let c = newer.last_cycle.unwrap();
        assert_eq!((c.run_kind, c.outcome, c.no_run_reason), (None, None, None));

        assert!(serde_json::from_str::<Status>("[1, 2]").is_err());
        assert!(serde_json::from_value::<Status>(json!({"pid": "seven"})).is_err());
    }

    #[test]
    fn a_failed_run_counts_whether_or_not_it_started_an_unusable_one_only_if_it_did() {
        let cycle = |outcome, run_started| LastCycle {
            outcome: Some(outcome),
            run_started,
            ..Default::default()
        };
        assert!(cycle(Outcome::Failed, false).run_failed());
        assert!(cycle(Outcome::Failed, true).run_failed());
        assert!(cycle(Outcome::Unusable, true).run_failed());
        assert!(!cycle(Outcome::Unusable, false).run_failed());
        assert!(!cycle(Outcome::Completed, true).run_failed());
        assert!(!cycle(Outcome::NoRun, false).run_failed());
    }
}

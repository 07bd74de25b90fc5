//! `agentchat status [--profile P] [--json]`: what the profile's listener is doing, from the
//! `status.json` it keeps in its state dir (format: `core::status::Status`). Reading the file is
//! all it does: it never takes the listener's lock (that could make a starting listener think it
//! is already running) and never needs the API key.
//!
//! Exit codes, like `systemctl is-active`: 0 a listener is running and its main loop turns, 3
//! none is (never ran, stopping, stopped, died, or stuck), 1 the config or the status file cannot
//! be read.
//!
//! Whether the loop turns is read from the file alone: the listener rewrites `status.json` on
//! every change and, while nothing changes, touches it (its modification time) on a turn of its
//! main loop at most every 30 s; the server's heartbeat turns it every 45 s
//! (`core::status::quiet_allowance`).

use crate::config::ConfigArgs;
use crate::core::policy::{ShownZone, held_line, usage_line};
use crate::core::status::{Held, ListenerState, Outcome, Status};
use crate::listen::state_dir::{STATUS_FILE, StateDir};
use crate::sys::process::pid_alive;
use serde_json::json;
use std::time::SystemTime;

mod all;
mod zone;
pub use crate::listen::liveness::{Liveness, assess, last_turn, parse_time};
pub use all::{ProfileDir, Row, profile_dirs, render_rows};
pub use zone::{MachineZone, PolicyZone};

/// `status` reads the config only to find the profile's state dir, so it takes only the flags
/// that choose it (not `--runtime`, `--api-base` or `--metrics-addr`, which it would ignore).
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// Config file (default: config.toml in the platform config dir) [env: AGENTCHAT_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Profile whose listener to show (default "default") [env: AGENTCHAT_PROFILE].
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The profile's state dir, instead of the one the config gives [env: AGENTCHAT_STATE_DIR].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<std::path::PathBuf>,
    /// Print JSON: `{profile, state_dir, status_file, running, stale, stopping, status}`.
    #[arg(long)]
    pub json: bool,
    /// One row per profile in the config (and per state dir whose lock a live listener holds);
    /// exit 0 only if every configured profile's listener runs.
    #[arg(long)]
    pub all: bool,
}

impl StatusArgs {
    /// The config flags these stand for.
    pub fn config_args(&self) -> ConfigArgs {
        ConfigArgs {
            config: self.config.clone(),
            profile: self.profile.clone(),
            state_dir: self.state_dir.clone(),
            ..ConfigArgs::default()
        }
    }
}

/// A time or text field as shown: `?` when the file had none.
fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "?" } else { s }
}

/// How long ago (or how far ahead) `then` is from `now`, in the largest unit that fits:
/// `12 s ago`, `3 min ago`, `5 h ago`, `2 days ago`, `in 40 s`.
pub fn relative(then: SystemTime, now: SystemTime) -> String {
    let (secs, ahead) = match now.duration_since(then) {
        Ok(d) => (d.as_secs(), false),
        Err(e) => (e.duration().as_secs(), true),
    };
    let span = match secs {
        0..60 => format!("{secs} s"),
        60..3_600 => format!("{} min", secs / 60),
        3_600..172_800 => format!("{} h", secs / 3_600),
        _ => format!("{} days", secs / 86_400),
    };
    if ahead {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// An RFC 3339 time as shown: the time and, when it parses, how long ago it is
/// (`2026-11-30T01:00:00Z (3 min ago)`); `?` when the file had none.
fn when(at: &str, now: SystemTime) -> String {
    match parse_time(at) {
        Some(t) => format!("{at} ({})", relative(t, now)),
        None => or_unknown(at).to_string(),
    }
}

/// How many ids of each kind a line lists before `and N more`.
const IDS_SHOWN: usize = 5;

/// Pure: what a hold keeps waiting, `2 cards: conv_a, conv_b; 1 invite: inv_1` (ids only, at most
/// `IDS_SHOWN` of each); `None` when the file lists none.
pub fn waiting_line(held: &Held) -> Option<String> {
    let list = |ids: &[String], what: &str| -> Option<String> {
        if ids.is_empty() {
            return None;
        }
        let shown: Vec<&str> = ids.iter().take(IDS_SHOWN).map(String::as_str).collect();
        let more = ids.len().saturating_sub(IDS_SHOWN);
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        let plural = if ids.len() == 1 { "" } else { "s" };
        Some(format!(
            "{} {what}{plural}: {}{tail}",
            ids.len(),
            shown.join(", ")
        ))
    };
    let mut parts: Vec<String> = [list(&held.cards, "card"), list(&held.invites, "invite")]
        .into_iter()
        .flatten()
        .collect();
    // What waits past the tray's cut (issue 38 item 5): the conversations the socket named, and
    // that more may wait unseen.
    if let Some(unseen) = list(&held.unseen, "conversation") {
        parts.push(format!("past the tray's cut, heard from: {unseen}"));
    }
    if held.truncated {
        parts.push("more cards wait past the tray's cut than it shows".into());
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Pure: how to let a loop go (issue 38 item 2): a reload of the listener, by the unit when
/// the profile runs as a service.
pub fn release_line(profile: &str, pid: u32) -> String {
    format!(
        "a reload lets the loop go: `systemctl --user reload agentchat-listen@{profile}` for the \
         service, or `kill -HUP {pid}`"
    )
}

/// Pure: the human view of a status, its times also shown relative to `now`, a hold's end in the
/// local time `zone` gives (the policy's zone, named when it is not the machine's).
pub fn render(
    profile: &str,
    status: &Status,
    liveness: Liveness,
    now: SystemTime,
    zone: ShownZone<'_>,
) -> String {
    let mut out = Vec::new();
    let pid = status.pid;
    let updated = when(&status.updated_at, now);
    let turned = last_turn(status).map_or_else(
        || "?".to_string(),
        |t| format!("{} ({})", crate::sys::time::rfc3339(t), relative(t, now)),
    );
    out.push(format!("profile     {profile}"));
    out.push(match liveness {
        Liveness::Running => format!("listener    running (pid {pid})"),
        Liveness::Stale => format!(
            "listener    pid {pid} is alive but its main loop has not turned since {turned} (stuck?)"
        ),
        Liveness::Stopping => format!("listener    stopping (pid {pid})"),
        Liveness::NotRunning => {
            format!("listener    not running (last seen {updated}, pid {pid})")
        }
    });
    out.push(format!(
        "state       {} since {}",
        status.state.as_str(),
        when(&status.since, now)
    ));
    if let Some(d) = &status.detail {
        out.push(format!("detail      {d}"));
    }
    if let Some(h) = &status.handle {
        out.push(format!("handle      {h}"));
    }
    out.push(format!("server      {}", or_unknown(&status.api_base)));
    out.push(format!(
        "runtime     {} (key from {})",
        or_unknown(&status.runtime),
        or_unknown(&status.key_source)
    ));
    if let Some(at) = &status.last_frame_at {
        out.push(format!("last frame  {}", when(at, now)));
    }
    if let Some(w) = &status.last_wake {
        out.push(format!(
            "last wake   {}, for {}",
            when(&w.at, now),
            w.reasons.join(", ")
        ));
    }
    if let Some(c) = &status.last_cycle {
        let mut line = format!(
            "last cycle  {} at {}: {}",
            or_unknown(&c.id),
            when(&c.started_at, now),
            outcome_word(c.outcome)
        );
        if let Some(k) = c.run_kind {
            line.push_str(&format!(" ({} run)", k.as_str()));
        }
        if let Some(r) = c.no_run_reason {
            line.push_str(&format!(", {}", r.as_str()));
        }
        if let Some(f) = &c.failure {
            line.push_str(&format!(", {f}"));
        }
        out.push(line);
        if let Some(log) = &c.run_log {
            out.push(format!("run log     {log}"));
        }
    }
    if let Some(h) = &status.held {
        let now_ms = i64::try_from(crate::sys::time::unix_ms(now)).unwrap_or(i64::MAX);
        let mut line = format!("held        {}", held_line(h, now_ms, zone));
        if let Some(t) = parse_time(&h.since) {
            line.push_str(&format!(" (held since {})", relative(t, now)));
        }
        out.push(line);
        if let Some(w) = waiting_line(h) {
            out.push(format!("waiting     {w}"));
        }
        if h.reason == "loop_guard" {
            out.push(format!("release     {}", release_line(profile, pid)));
        }
    }
    out.push(format!("usage       {}", usage_line(&status.usage)));
    if let Some(at) = &status.next_retry_at {
        out.push(format!("next retry  {}", when(at, now)));
    }
    out.push(format!(
        "texts       from {}{}",
        status.texts.source.as_str(),
        status
            .texts
            .fetched_at
            .as_ref()
            .map_or(String::new(), |f| format!(", fetched {}", when(f, now)))
    ));
    let c = &status.counters;
    out.push(format!(
        "counters    connects {}, wakes {}, cycles {}, runs {} ({} failed), invites dismissed {}, frames {} ({} skipped)",
        c.connects,
        c.wakes,
        c.cycles,
        c.runs,
        c.runs_failed,
        c.invites_dismissed,
        c.frames,
        c.frames_skipped
    ));
    out.join("\n")
}

/// Pure: whether the profile's listener can do its job now, and if not, one line saying what is
/// wrong and what to do (for wrappers: the Claude Code plugin's SessionStart hook prints it). A
/// `backoff` listener counts as usable: it reconnects by itself, and what waits is kept. The line
/// never holds a double quote or a backslash, so a shell can take it out of the JSON with `sed`.
///
/// `restart` is how to restart the listener as this host runs it ([`restart_advice`]).
/// A line `problem` may carry: no double quotes or backslashes (docs/integrating.md: a shell takes
/// it out with `sed`), on one line.
fn one_line(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '"' && *c != '\\')
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect()
}

pub fn problem(
    profile: &str,
    status: Option<&Status>,
    liveness: Option<Liveness>,
    now: SystemTime,
    restart: &str,
) -> Option<String> {
    let keep = format!("`agentchat service install --profile {profile}` keeps one running");
    let doctor = format!("`agentchat doctor --profile {profile}` says why");
    let line = match (status, liveness) {
        (None, _) | (_, None) => format!(
            "the listener for profile {profile} never ran here; {keep}; not set up yet: \
             `agentchat setup --profile {profile}`"
        ),
        (Some(s), Some(Liveness::NotRunning)) => {
            let seen =
                parse_time(&s.updated_at).map_or_else(|| "never".to_string(), |t| relative(t, now));
            format!("the listener for profile {profile} is not running (last seen {seen}); {keep}")
        }
        (Some(s), Some(Liveness::Stale)) => format!(
            "the listener for profile {profile} (pid {}) is stuck: its main loop has not turned \
             for too long; restart it ({restart})",
            s.pid
        ),
        (Some(_), Some(Liveness::Stopping)) => {
            format!("the listener for profile {profile} is stopping; {keep}")
        }
        (Some(s), Some(Liveness::Running)) => match s.state {
            ListenerState::KeyRefused => {
                format!("the server refuses the API key of profile {profile}; {doctor}")
            }
            ListenerState::RuntimeUnusable => format!(
                "the listener for profile {profile} runs but its runtime ({}) cannot work, so no \
                 run starts; {doctor}",
                or_unknown(&s.runtime)
            ),
            ListenerState::HandleMismatch => format!(
                "the listener for profile {profile} reads another agent's tray than its key's, so \
                 no run starts; {doctor}"
            ),
            ListenerState::UpgradeRequired => format!(
                "the server requires a newer agentchat (it closes the socket 4426 upgrade \
                 required, or answers REMOVED), so no wake reaches profile {profile}; update \
                 agentchat"
            ),
            _ => return None,
        },
    };
    Some(line.replace(['"', '\\'], "'"))
}

/// How to restart profile `profile`'s listener (pid `pid`) as this host runs it: the one-process
/// unit when it is installed (every profile lives in that one process), else the profile's own
/// unit when it is installed, else the process itself. Never a unit this host does not use.
pub fn restart_advice(profile: &str, pid: u32) -> String {
    use crate::service::{self, ServiceKind};
    let kind = ServiceKind::native();
    let installed = |p: anyhow::Result<std::path::PathBuf>| p.is_ok_and(|p| p.exists());
    let unit = if installed(service::host_unit_path(kind)) {
        Some(service::host_unit(kind))
    } else if installed(service::unit_path(kind, profile)) {
        Some(match kind {
            ServiceKind::Systemd => service::systemd_unit_name(profile),
            ServiceKind::Launchd => service::launchd_label(profile),
        })
    } else {
        None
    };
    match (kind, unit) {
        (ServiceKind::Systemd, Some(unit)) => format!("`systemctl --user restart {unit}`"),
        (ServiceKind::Launchd, Some(label)) => {
            format!("`launchctl kickstart -k gui/$(id -u)/{label}`")
        }
        (_, None) => format!("`kill {pid}`, then start it again as you did"),
    }
}

/// A cycle's outcome as shown: `running` while it has none yet.
pub fn outcome_word(outcome: Option<Outcome>) -> &'static str {
    outcome.map_or("running", Outcome::as_str)
}

/// The schema version of `status --json` and `status --all --json` (docs/integrating.md): it
/// changes only when a field is removed or changes meaning; new fields may appear without it.
pub const JSON_VERSION: u32 = 1;

pub async fn run_command(args: StatusArgs) -> anyhow::Result<i32> {
    if args.all {
        return all::run_all(&args);
    }
    let config_args = args.config_args();
    // A config the listener could not start with does not hide a listener that runs: it keeps
    // the config it read before (a reload keeps it too), and its state dir is found without it.
    let loaded = crate::config::ConfigFile::read(&config_args)
        .and_then(|f| f.settings(None, crate::config::KeyFile::Named));
    let (settings, config_error) = match loaded {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e)),
    };
    let (profile, state_dir) = match &settings {
        Some(s) => (s.profile.clone(), s.state_dir.clone()),
        None => {
            let env = crate::config::process_env();
            let profile = crate::config::profile_name(&config_args, &env)?;
            let dir = crate::config::state_dir(&config_args, &env, &profile)?;
            (profile, dir)
        }
    };
    let state = StateDir::at(&state_dir);
    let file = state.path(STATUS_FILE);
    let status = state.read_status()?;
    let config_error = match (config_error, &status) {
        (Some(e), None) => return Err(e.into()),
        (e, _) => e.map(|e| e.to_string()),
    };
    let now = SystemTime::now();
    let policy_zone = settings.as_ref().and_then(|s| {
        PolicyZone::of(
            s,
            i64::try_from(crate::sys::time::unix_ms(now)).unwrap_or(i64::MAX),
        )
    });
    let liveness = status
        .as_ref()
        .map(|s| assess(s, pid_alive(u64::from(s.pid)), now));
    let restart = restart_advice(&profile, status.as_ref().map_or(0, |s| s.pid));
    let problem = match &config_error {
        // A config that cannot be read is what a stopped listener needs fixed first: a start
        // (or a restart) fails on it. A listener that runs keeps the config it read before.
        Some(e) if liveness != Some(Liveness::Running) => Some(one_line(&format!(
            "the config of profile {profile} cannot be read: {e}; fix it, then `agentchat doctor              --profile {profile}` checks it"
        ))),
        _ => problem(&profile, status.as_ref(), liveness, now, &restart),
    };
    let usable = problem.is_none();
    if args.json {
        let out = json!({
            "version": JSON_VERSION,
            "profile": profile,
            "state_dir": state_dir,
            "status_file": file,
            "running": liveness == Some(Liveness::Running),
            "stale": liveness == Some(Liveness::Stale),
            "stopping": liveness == Some(Liveness::Stopping),
            "usable": usable,
            "problem": problem,
            "config_error": config_error,
            "status": status,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        match &status {
            Some(s) => println!(
                "{}",
                render(
                    &profile,
                    s,
                    liveness.unwrap_or(Liveness::NotRunning),
                    now,
                    zone::shown(policy_zone.as_ref(), &MachineZone)
                )
            ),
            None => println!(
                "profile     {0}\nlistener    never ran here (no {1})\nnext        `agentchat \
                 setup --profile {0}` sets the agent up (key, runtime, service); if it is set \
                 up, `agentchat service install --profile {0}` keeps a listener running",
                profile,
                file.display()
            ),
        }
    }
    if let Some(e) = &config_error {
        eprintln!(
            "agentchat status: {e}: the listener shown keeps the config it read before (a reload \
             keeps it too); a restart fails until the file is fixed (`agentchat doctor` checks it)"
        );
    }
    Ok(if config_error.is_some() {
        1
    } else if liveness == Some(Liveness::Running) {
        0
    } else {
        3
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn doc(state: &str, updated: SystemTime) -> Status {
        serde_json::from_value(json!({
            "state": state, "since": "2026-11-30T01:00:00Z", "pid": 42, "profile": "default",
            "handle": "@bob", "api_base": "http://127.0.0.1:1", "runtime": "script",
            "key_source": "env", "updated_at": humantime::format_rfc3339_millis(updated).to_string(),
            "last_wake": {"at": "2026-11-30T01:00:01Z", "reasons": ["message", "invite"]},
            "last_cycle": {"id": "c1", "started_at": "2026-11-30T01:00:02Z", "run_kind": "wake",
                           "outcome": "completed", "run_log": "/s/runs/run-1.log"},
            "texts": {"source": "server", "fetched_at": "2026-11-30T01:00:00Z"},
            "counters": {"connects": 1, "wakes": 2, "cycles": 1, "runs": 1}
        }))
        .unwrap()
    }

    #[test]
    fn liveness_needs_a_live_pid_and_a_fresh_status() {
        let now = SystemTime::now();
        assert_eq!(assess(&doc("connected", now), true, now), Liveness::Running);
        assert_eq!(
            assess(&doc("connected", now), false, now),
            Liveness::NotRunning
        );
        let old = now - Duration::from_secs(600);
        assert_eq!(assess(&doc("connected", old), true, now), Liveness::Stale);
        // Written long ago, but touched since: the loop turns.
        let touched = Status {
            file_modified: Some(now - Duration::from_secs(40)),
            ..doc("connected", old)
        };
        assert_eq!(assess(&touched, true, now), Liveness::Running);
        // Waiting out a long reconnect delay: nothing turns the loop before the retry.
        let missed = Status {
            next_retry_at: Some(
                humantime::format_rfc3339(now - Duration::from_secs(200)).to_string(),
            ),
            ..doc("backoff", old)
        };
        assert_eq!(
            assess(&missed, true, now),
            Liveness::Stale,
            "the retry came and went"
        );
        let waiting = Status {
            next_retry_at: Some(
                humantime::format_rfc3339(now + Duration::from_secs(1_800)).to_string(),
            ),
            ..doc("backoff", now - Duration::from_secs(1_200))
        };
        assert_eq!(assess(&waiting, true, now), Liveness::Running);
        assert_eq!(assess(&doc("stopping", now), true, now), Liveness::Stopping);
        assert_eq!(
            assess(&doc("stopping", now), false, now),
            Liveness::NotRunning
        );
        assert_eq!(
            assess(&doc("stopped", now), true, now),
            Liveness::NotRunning,
            "a stopped listener's pid may be another process's now"
        );
        assert_eq!(assess(&Status::default(), true, now), Liveness::Stale);
    }

    #[test]
    fn render_shows_state_handle_wake_cycle_and_counters() {
        let now = humantime::parse_rfc3339("2026-11-30T01:03:02Z").unwrap();
        let z = crate::core::policy::FixedOffset(0);
        let text = render(
            "work",
            &doc("connected", now),
            Liveness::Running,
            now,
            ShownZone::machine(&z),
        );
        for needle in [
            "profile     work",
            "running (pid 42)",
            "state       connected since 2026-11-30T01:00:00Z (3 min ago)",
            "handle      @bob",
            "2026-11-30T01:00:01Z (3 min ago), for message, invite",
            "c1 at 2026-11-30T01:00:02Z (3 min ago): completed (wake run)",
            "fetched 2026-11-30T01:00:00Z (3 min ago)",
            "runs 1 (0 failed)",
            "usage       today: 0 runs; this hour: 0 runs",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        assert!(!text.contains("held"), "no hold, no line:\n{text}");
    }

    #[test]
    fn render_says_a_hold_with_its_local_end_the_cards_waiting_and_todays_spending() {
        let now = humantime::parse_rfc3339("2026-11-30T11:30:00Z").unwrap();
        let mut s = doc("connected", now);
        s.held = Some(Held {
            reason: "runs_per_hour".into(),
            key: "max_runs_per_hour".into(),
            until: Some("2026-11-30T12:00:00Z".into()),
            since: "2026-11-30T11:20:00Z".into(),
            cards: (1..=7).map(|i| format!("conv_{i}")).collect(),
            invites: vec!["inv_1".into()],
            ..Held::default()
        });
        s.usage.today = crate::core::status::UsageTotals {
            runs: 14,
            cost_usd: 0.834,
            tokens: 90_000,
            ..Default::default()
        };
        s.usage.this_hour.runs = 12;
        let east = crate::core::policy::FixedOffset(2 * 3600);
        let text = render(
            "work",
            &s,
            Liveness::Running,
            now,
            ShownZone::machine(&east),
        );
        for needle in [
            "held        runs wait: max_runs_per_hour reached, until 14:00 (held since 10 min ago)",
            "waiting     7 cards: conv_1, conv_2, conv_3, conv_4, conv_5 and 2 more; 1 invite: inv_1",
            "usage       today: 14 runs, $0.83; this hour: 12 runs",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    /// Issue 38 items 2 and 5: a loop hold names its conversation and how to let it go; what
    /// waits past the tray's cut is said.
    #[test]
    fn render_names_a_loop_and_its_release_and_what_waits_past_the_cut() {
        let now = humantime::parse_rfc3339("2026-11-30T11:30:00Z").unwrap();
        let mut s = doc("connected", now);
        s.held = Some(Held {
            reason: "loop_guard".into(),
            key: "loop_guard".into(),
            until: Some("2026-11-30T12:00:00Z".into()),
            since: "2026-11-30T11:20:00Z".into(),
            cards: vec!["conv_bot".into()],
            unseen: vec!["conv_far".into()],
            truncated: true,
            ..Held::default()
        });
        let text = render(
            "work",
            &s,
            Liveness::Running,
            now,
            ShownZone::machine(&crate::core::policy::FixedOffset(0)),
        );
        for needle in [
            "held        runs wait: loop_guard holds a loop in conv_bot (a reload lets it go), \
             until 12:00 unless its other side writes again",
            "waiting     1 card: conv_bot; past the tray's cut, heard from: 1 conversation: \
             conv_far; more cards wait past the tray's cut than it shows",
            "release     a reload lets the loop go: `systemctl --user reload \
             agentchat-listen@work` for the service, or `kill -HUP",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[test]
    fn relative_times_use_the_largest_unit_that_fits_both_ways() {
        let now = humantime::parse_rfc3339("2026-11-30T12:00:00Z").unwrap();
        let ago = |s: u64| relative(now - Duration::from_secs(s), now);
        assert_eq!(ago(0), "0 s ago");
        assert_eq!(ago(59), "59 s ago");
        assert_eq!(ago(180), "3 min ago");
        assert_eq!(ago(3 * 3_600 + 5), "3 h ago");
        assert_eq!(ago(3 * 86_400), "3 days ago");
        assert_eq!(relative(now + Duration::from_secs(40), now), "in 40 s");
    }

    #[test]
    fn a_problem_line_only_when_the_listener_is_down_or_unusable() {
        let now = humantime::parse_rfc3339("2026-11-30T01:03:02Z").unwrap();
        let up = doc("connected", now);
        let p = |s: Option<&Status>, l| problem("work", s, l, now, "`the restart`");
        assert_eq!(p(Some(&up), Some(Liveness::Running)), None);
        assert_eq!(p(Some(&doc("backoff", now)), Some(Liveness::Running)), None);
        let never = p(None, None).unwrap();
        assert!(
            never.contains("never ran") && never.contains("--profile work"),
            "{never}"
        );
        let gone = p(
            Some(&doc("connected", now - Duration::from_secs(180))),
            Some(Liveness::NotRunning),
        );
        assert!(gone.unwrap().contains("not running (last seen 3 min ago)"));
        for (state, needle) in [
            ("key_refused", "refuses the API key"),
            ("runtime_unusable", "runtime (script) cannot work"),
            ("handle_mismatch", "another agent"),
            ("upgrade_required", "update agentchat"),
        ] {
            let line = p(Some(&doc(state, now)), Some(Liveness::Running)).unwrap();
            assert!(line.contains(needle), "{state}: {line}");
            assert!(!line.contains('"') && !line.contains('\\'), "{line}");
        }
        let stuck = p(Some(&up), Some(Liveness::Stale)).unwrap();
        assert!(
            stuck.contains("stuck") && stuck.contains("restart it (`the restart`)"),
            "{stuck}"
        );
    }
}

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
use crate::core::status::{ListenerState, Outcome, Status, quiet_allowance};
use crate::listen::state_dir::{STATUS_FILE, StateDir};
use crate::sys::process::pid_alive;
use serde_json::json;
use std::time::SystemTime;

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

/// Whether the listener that wrote a status is alive, from facts gathered by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Its pid is alive and the status is fresh.
    Running,
    /// Its pid is alive but its main loop has not turned for longer than
    /// `core::status::quiet_allowance` allows.
    Stale,
    /// Its pid is alive and it is stopping (a run may still have its grace).
    Stopping,
    /// Its pid is gone, or it said it stopped.
    NotRunning,
}

/// Pure: judges liveness from the status, whether its pid is alive, and the time now.
pub fn assess(status: &Status, pid_alive: bool, now: SystemTime) -> Liveness {
    match status.state {
        _ if !pid_alive => return Liveness::NotRunning,
        ListenerState::Stopped => return Liveness::NotRunning,
        ListenerState::Stopping => return Liveness::Stopping,
        _ => {}
    }
    let Some(turned) = last_turn(status) else {
        return Liveness::Stale;
    };
    let next_retry = status.next_retry_at.as_deref().and_then(parse_time);
    if now.duration_since(turned).unwrap_or_default() <= quiet_allowance(turned, next_retry) {
        Liveness::Running
    } else {
        Liveness::Stale
    }
}

/// When the listener last showed that its main loop turns: the later of its last write
/// (`updated_at`) and its last touch of the file (`file_modified`).
pub fn last_turn(status: &Status) -> Option<SystemTime> {
    parse_time(&status.updated_at).max(status.file_modified)
}

fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s).ok()
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

/// Pure: the human view of a status, its times also shown relative to `now`.
pub fn render(profile: &str, status: &Status, liveness: Liveness, now: SystemTime) -> String {
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
pub fn problem(
    profile: &str,
    status: Option<&Status>,
    liveness: Option<Liveness>,
    now: SystemTime,
) -> Option<String> {
    let keep = format!("`agentchat service install --profile {profile}` keeps one running");
    let doctor = format!("`agentchat doctor --profile {profile}` says why");
    let line = match (status, liveness) {
        (None, _) | (_, None) => {
            format!("the listener for profile {profile} never ran here; {keep}")
        }
        (Some(s), Some(Liveness::NotRunning)) => {
            let seen =
                parse_time(&s.updated_at).map_or_else(|| "never".to_string(), |t| relative(t, now));
            format!("the listener for profile {profile} is not running (last seen {seen}); {keep}")
        }
        (Some(s), Some(Liveness::Stale)) => format!(
            "the listener for profile {profile} (pid {}) is stuck: its main loop has not turned \
             for too long; restart it (`systemctl --user restart {}`)",
            s.pid,
            crate::service::systemd_unit_name(profile)
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
            _ => return None,
        },
    };
    Some(line.replace(['"', '\\'], "'"))
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
        return run_all(&args);
    }
    let settings = crate::config::load_unkeyed(&args.config_args())?;
    let state = StateDir::at(&settings.state_dir);
    let file = state.path(STATUS_FILE);
    let status = state.read_status()?;
    let now = SystemTime::now();
    let liveness = status
        .as_ref()
        .map(|s| assess(s, pid_alive(u64::from(s.pid)), now));
    let problem = problem(&settings.profile, status.as_ref(), liveness, now);
    let usable = problem.is_none();
    if args.json {
        let out = json!({
            "version": JSON_VERSION,
            "profile": settings.profile,
            "state_dir": settings.state_dir,
            "status_file": file,
            "running": liveness == Some(Liveness::Running),
            "stale": liveness == Some(Liveness::Stale),
            "stopping": liveness == Some(Liveness::Stopping),
            "usable": usable,
            "problem": problem,
            "status": status,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        match &status {
            Some(s) => println!(
                "{}",
                render(
                    &settings.profile,
                    s,
                    liveness.unwrap_or(Liveness::NotRunning),
                    now
                )
            ),
            None => println!(
                "profile     {}\nlistener    never ran here (no {})",
                settings.profile,
                file.display()
            ),
        }
    }
    Ok(if liveness == Some(Liveness::Running) {
        0
    } else {
        3
    })
}

/// The profiles a config file names: `default` (its top level) and every `[profiles.<name>]`.
/// Without a config file, only `default`.
pub fn configured_profiles(config: &ConfigArgs) -> anyhow::Result<Vec<String>> {
    let env = crate::config::process_env();
    let mut out = vec![crate::config::DEFAULT_PROFILE.to_string()];
    let Some((path, named)) = crate::config::config_file_path(config, &env) else {
        return Ok(out);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => return Ok(out),
        Err(e) => anyhow::bail!("cannot read config file {}: {e}", path.display()),
    };
    // The whole file is checked (and its errors named) when each profile is loaded; here only the
    // names are wanted.
    let table: toml::Table = text
        .parse()
        .map_err(|_| anyhow::anyhow!("config file {} is not valid TOML", path.display()))?;
    if let Some(profiles) = table.get("profiles").and_then(toml::Value::as_table) {
        for name in profiles.keys() {
            if !out.contains(name) {
                out.push(name.clone());
            }
        }
    }
    Ok(out)
}

/// State dirs under the default state base whose lock a live process holds, with that pid: the
/// listeners running for profiles the config does not (or no longer) name.
fn locked_state_dirs() -> Vec<(String, std::path::PathBuf, u32)> {
    let env = crate::config::process_env();
    let Some(base) = crate::config::default_state_base(&env) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let dir = e.path();
        let lock = dir.join(crate::listen::state_dir::LOCK_FILE);
        let pid = std::fs::read_to_string(&lock)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        if let Some(pid) = pid.filter(|p| pid_alive(u64::from(*p)))
            && let Some(name) = dir.file_name().and_then(|n| n.to_str())
        {
            out.push((name.to_string(), dir.clone(), pid));
        }
    }
    out.sort();
    out
}

/// One row of `status --all`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub profile: String,
    /// Named by the config (else found by its live lock only).
    pub configured: bool,
    pub state_dir: std::path::PathBuf,
    pub running: bool,
    pub stale: bool,
    pub handle: Option<String>,
    pub state: Option<String>,
    pub since: Option<String>,
    /// The last cycle's outcome (`completed`, `failed`, `unusable`, `no_run`).
    pub last_outcome: Option<String>,
    /// The profile's systemd unit or launchd label.
    pub unit: String,
    /// Where its unit file is, when `service install` wrote one.
    pub unit_file: Option<std::path::PathBuf>,
    /// The unit in a few words: `not installed`, `enabled, running`, `disabled, inactive`,
    /// `installed, manager not asked`, `installed, no manager answers` (the manager's reason is
    /// said once for the whole table: `service_manager`).
    pub service: String,
    /// Why the row could not be read (a config error for this profile, a damaged status file).
    pub error: Option<String>,
}

/// The row, and the service manager's error if it was asked and did not answer.
fn row_for(
    profile: &str,
    configured: bool,
    state_dir: std::path::PathBuf,
    error: Option<String>,
) -> (Row, Option<String>) {
    let (status, error) = match StateDir::at(&state_dir).read_status() {
        Ok(s) => (s, error),
        Err(e) => (None, error.or(Some(e.to_string()))),
    };
    let liveness = status
        .as_ref()
        .map(|s| assess(s, pid_alive(u64::from(s.pid)), SystemTime::now()));
    let service_kind = crate::service::ServiceKind::native();
    let unit = match service_kind {
        crate::service::ServiceKind::Systemd => crate::service::systemd_unit_name(profile),
        crate::service::ServiceKind::Launchd => crate::service::launchd_label(profile),
    };
    let unit_file = crate::service::unit_path(service_kind, profile)
        .ok()
        .filter(|p| p.is_file());
    // No unit file, nothing to ask the manager about: that keeps its error (a user manager that
    // does not run) out of every row of a machine that never installed one.
    let (service, manager_error) = match &unit_file {
        None => ("not installed".to_string(), None),
        Some(_) => match crate::service::manager_view(service_kind, profile) {
            crate::service::ManagerView::NotAsked => {
                ("installed, manager not asked".to_string(), None)
            }
            crate::service::ManagerView::Unreachable(why) => {
                ("installed, no manager answers".to_string(), Some(why))
            }
            crate::service::ManagerView::Answered {
                enabled_word,
                active_word,
                ..
            } => (format!("{enabled_word}, {active_word}"), None),
        },
    };
    let row = Row {
        profile: profile.to_string(),
        configured,
        state_dir,
        running: liveness == Some(Liveness::Running),
        stale: liveness == Some(Liveness::Stale),
        handle: status.as_ref().and_then(|s| s.handle.clone()),
        state: status.as_ref().map(|s| s.state.as_str().to_string()),
        since: status
            .as_ref()
            .map(|s| s.since.clone())
            .filter(|s| !s.is_empty()),
        last_outcome: status
            .as_ref()
            .and_then(|s| s.last_cycle.as_ref())
            .and_then(|c| c.outcome)
            .map(|o| o.as_str().to_string()),
        unit,
        unit_file,
        service,
        error,
    };
    (row, manager_error)
}

/// Pure: the table `status --all` prints: columns as wide as their widest cell, two spaces
/// apart, every header in capitals; `manager_error` (the service manager's reason for not
/// answering, asked only about installed units) once under the table.
pub fn render_rows(rows: &[Row], manager_error: Option<&str>, now: SystemTime) -> String {
    let header = [
        "PROFILE", "HANDLE", "LISTENER", "STATE", "SINCE", "LAST RUN", "SERVICE",
    ];
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for r in rows {
        let listener = if r.running {
            "running"
        } else if r.stale {
            "stuck"
        } else {
            "stopped"
        };
        let mut profile = r.profile.clone();
        if !r.configured {
            profile.push('*');
        }
        let since = r.since.as_deref().and_then(parse_time);
        table.push(vec![
            profile,
            r.handle.clone().unwrap_or_else(|| "-".into()),
            listener.to_string(),
            r.state.clone().unwrap_or_else(|| "never ran".into()),
            since.map_or_else(|| "-".into(), |t| relative(t, now)),
            r.last_outcome.clone().unwrap_or_else(|| "-".into()),
            r.service.clone(),
        ]);
    }
    let mut widths = [0usize; 7];
    for line in &table {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = Vec::new();
    for (i, line) in table.iter().enumerate() {
        let cells: Vec<String> = line
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push(cells.join("  ").trim_end().to_string());
        if let Some(e) = i.checked_sub(1).and_then(|r| rows.get(r)?.error.as_ref()) {
            out.push(format!(
                "  {}: {e}",
                line.first().map_or("", String::as_str)
            ));
        }
    }
    if rows.iter().any(|r| !r.configured) {
        out.push("* not in the config: found by the live lock in its state dir".to_string());
    }
    if let Some(why) = manager_error {
        out.push(format!(
            "service manager: no service manager answers ({why})"
        ));
    }
    out.join("\n")
}

/// `status --all`: a row per configured profile, then per state dir with a live lock that no
/// configured profile uses. Exit 0 only when every configured profile's listener runs.
fn run_all(args: &StatusArgs) -> anyhow::Result<i32> {
    if args.state_dir.is_some()
        || std::env::var_os("AGENTCHAT_STATE_DIR").is_some_and(|v| !v.is_empty())
    {
        anyhow::bail!(
            "--all reads each profile's own state dir; drop --state-dir and unset AGENTCHAT_STATE_DIR"
        );
    }
    let mut rows = Vec::new();
    for profile in configured_profiles(&args.config_args())? {
        let one = ConfigArgs {
            profile: Some(profile.clone()),
            ..args.config_args()
        };
        match crate::config::load_unkeyed(&one) {
            Ok(settings) => rows.push(row_for(&profile, true, settings.state_dir, None)),
            Err(e) => {
                let env = crate::config::process_env();
                let dir = crate::config::default_state_base(&env)
                    .unwrap_or_default()
                    .join(&profile);
                rows.push(row_for(&profile, true, dir, Some(e.to_string())));
            }
        }
    }
    for (name, dir, _pid) in locked_state_dirs() {
        if !rows.iter().any(|(r, _)| r.state_dir == dir) {
            rows.push(row_for(&name, false, dir, None));
        }
    }
    let manager_error = rows.iter().find_map(|(_, e)| e.clone());
    let rows: Vec<Row> = rows.into_iter().map(|(r, _)| r).collect();
    let all_running = rows.iter().filter(|r| r.configured).all(|r| r.running);
    if args.json {
        let out = json!({
            "version": JSON_VERSION,
            "all_running": all_running,
            "service_manager_error": manager_error,
            "profiles": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        let now = SystemTime::now();
        println!("{}", render_rows(&rows, manager_error.as_deref(), now));
    }
    Ok(if all_running { 0 } else { 3 })
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
        let text = render("work", &doc("connected", now), Liveness::Running, now);
        for needle in [
            "profile     work",
            "running (pid 42)",
            "state       connected since 2026-11-30T01:00:00Z (3 min ago)",
            "handle      @bob",
            "2026-11-30T01:00:01Z (3 min ago), for message, invite",
            "c1 at 2026-11-30T01:00:02Z (3 min ago): completed (wake run)",
            "fetched 2026-11-30T01:00:00Z (3 min ago)",
            "runs 1 (0 failed)",
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

    fn row(profile: &str, handle: &str, service: &str, error: Option<&str>) -> Row {
        Row {
            profile: profile.into(),
            configured: profile != "extra",
            state_dir: "/s".into(),
            running: true,
            stale: false,
            handle: Some(handle.into()),
            state: Some("connected".into()),
            since: Some("2026-11-30T11:57:00.123Z".into()),
            last_outcome: Some("completed".into()),
            unit: format!("agentchat-listen-{profile}.service"),
            unit_file: None,
            service: service.into(),
            error: error.map(String::from),
        }
    }

    #[test]
    fn the_all_table_aligns_every_column_and_says_the_managers_error_once() {
        let now = humantime::parse_rfc3339("2026-11-30T12:00:00Z").unwrap();
        let rows = [
            row(
                "default",
                "@a-very-long-handle-indeed",
                "not installed",
                None,
            ),
            row(
                "work",
                "@b",
                "installed, no manager answers",
                Some("bad file"),
            ),
            row("extra", "@c", "not installed", None),
        ];
        let text = render_rows(&rows, Some("Failed to connect to bus"), now);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("PROFILE  HANDLE"), "{text}");
        assert_eq!(lines[0], lines[0].to_uppercase(), "{text}");
        // Every column starts where its header does.
        for header in [
            "HANDLE", "LISTENER", "STATE", "SINCE", "LAST RUN", "SERVICE",
        ] {
            let col = lines[0].find(header).unwrap();
            for line in [lines[1], lines[2], lines[4]] {
                let before = line.get(..col).unwrap();
                assert!(before.ends_with("  "), "{header} in {line:?}\n{text}");
                assert_ne!(line.get(col..col + 1), Some(" "), "{header}\n{text}");
            }
        }
        assert!(lines[1].contains("  2 min ago  "), "{text}");
        assert_eq!(lines[3], "  work: bad file");
        assert!(lines[4].starts_with("extra*"), "{text}");
        assert_eq!(
            text.matches("Failed to connect to bus").count(),
            1,
            "{text}"
        );
        assert!(
            text.ends_with(
                "service manager: no service manager answers (Failed to connect to bus)"
            )
        );
    }

    #[test]
    fn a_problem_line_only_when_the_listener_is_down_or_unusable() {
        let now = humantime::parse_rfc3339("2026-11-30T01:03:02Z").unwrap();
        let up = doc("connected", now);
        let p = |s: Option<&Status>, l| problem("work", s, l, now);
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
        ] {
            let line = p(Some(&doc(state, now)), Some(Liveness::Running)).unwrap();
            assert!(line.contains(needle), "{state}: {line}");
            assert!(!line.contains('"') && !line.contains('\\'), "{line}");
        }
        assert!(
            p(Some(&up), Some(Liveness::Stale))
                .unwrap()
                .contains("stuck")
        );
    }
}

//! `agentchat status [--profile P] [--json]`: what the profile's listener is doing, from the
//! `status.json` it keeps in its state dir (format: `core::status::Status`). Reading the file is
//! all it does: it never takes the listener's lock (that could make a starting listener think it
//! is already running) and never needs the API key.
//!
//! Exit codes, like `systemctl is-active`: 0 a listener is running and refreshing its status,
//! 3 none is (never ran, stopped, or died), 1 the config or the status file cannot be read.

use crate::config::ConfigArgs;
use crate::sys::process::pid_alive;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime};

/// The listener rewrites its status every 30 s; older than this means it is not refreshing.
pub const STALE_AFTER: Duration = Duration::from_secs(90);

#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print JSON: `{profile, state_dir, status_file, running, stale, status}`.
    #[arg(long)]
    pub json: bool,
}

/// Whether the listener that wrote a status is alive, from facts gathered by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Its pid is alive and the status is fresh.
    Running,
    /// Its pid is alive but the status has not been refreshed within `STALE_AFTER`.
    Stale,
    /// Its pid is gone (or it said it was stopping).
    NotRunning,
}

/// Pure: judges liveness from the status document, whether its pid is alive, and the time now.
pub fn assess(status: &Value, pid_alive: bool, now: SystemTime) -> Liveness {
    if !pid_alive || status.get("state").and_then(Value::as_str) == Some("stopping") {
        return Liveness::NotRunning;
    }
    let updated = status
        .get("updated_at")
        .and_then(Value::as_str)
        .and_then(|s| humantime::parse_rfc3339_weak(s).ok());
    match updated {
        Some(t) if now.duration_since(t).unwrap_or_default() <= STALE_AFTER => Liveness::Running,
        _ => Liveness::Stale,
    }
}

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn n(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Pure: the human view of a status document.
pub fn render(profile: &str, status: &Value, liveness: Liveness) -> String {
    let mut out = Vec::new();
    let state = s(status, "state").unwrap_or("unknown");
    let since = s(status, "since").unwrap_or("?");
    let pid = n(status, "pid");
    out.push(format!("profile     {profile}"));
    out.push(match liveness {
        Liveness::Running => format!("listener    running (pid {pid})"),
        Liveness::Stale => format!(
            "listener    pid {pid} is alive but has not refreshed its status since {} (stuck?)",
            s(status, "updated_at").unwrap_or("?")
        ),
        Liveness::NotRunning => format!(
            "listener    not running (last seen {}, pid {pid})",
            s(status, "updated_at").unwrap_or("?")
        ),
    });
    out.push(format!("state       {state} since {since}"));
    if let Some(d) = s(status, "detail") {
        out.push(format!("detail      {d}"));
    }
    if let Some(h) = s(status, "handle") {
        out.push(format!("handle      {h}"));
    }
    out.push(format!(
        "server      {}",
        s(status, "api_base").unwrap_or("?")
    ));
    out.push(format!(
        "runtime     {} (key from {})",
        s(status, "runtime").unwrap_or("?"),
        s(status, "key_source").unwrap_or("?")
    ));
    if let Some(at) = s(status, "last_frame_at") {
        out.push(format!("last frame  {at}"));
    }
    if let Some(w) = status.get("last_wake").filter(|w| !w.is_null()) {
        let reasons: Vec<&str> = w
            .get("reasons")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        out.push(format!(
            "last wake   {} ({})",
            s(w, "at").unwrap_or("?"),
            reasons.join(", ")
        ));
    }
    if let Some(c) = status.get("last_cycle").filter(|c| !c.is_null()) {
        let outcome = s(c, "outcome").unwrap_or("running");
        let mut line = format!(
            "last cycle  {} at {}: {outcome}",
            s(c, "id").unwrap_or("?"),
            s(c, "started_at").unwrap_or("?")
        );
        if let Some(k) = s(c, "run_kind") {
            line.push_str(&format!(" ({k} run)"));
        }
        if let Some(r) = s(c, "no_run_reason").filter(|r| !r.is_empty()) {
            line.push_str(&format!(", {r}"));
        }
        if let Some(f) = s(c, "failure") {
            line.push_str(&format!(", {f}"));
        }
        out.push(line);
        if let Some(log) = s(c, "run_log") {
            out.push(format!("run log     {log}"));
        }
    }
    if let Some(at) = s(status, "next_retry_at") {
        out.push(format!("next retry  {at}"));
    }
    if let Some(t) = status.get("texts") {
        out.push(format!(
            "texts       from {}{}",
            s(t, "source").unwrap_or("?"),
            s(t, "fetched_at").map_or(String::new(), |f| format!(" (fetched {f})"))
        ));
    }
    if let Some(c) = status.get("counters") {
        out.push(format!(
            "counters    connects {}, wakes {}, cycles {}, runs {} ({} failed), invites dismissed {}, frames {} ({} skipped)",
            n(c, "connects"),
            n(c, "wakes"),
            n(c, "cycles"),
            n(c, "runs"),
            n(c, "runs_failed"),
            n(c, "invites_dismissed"),
            n(c, "frames"),
            n(c, "frames_skipped")
        ));
    }
    out.join("\n")
}

pub async fn run_command(args: StatusArgs) -> anyhow::Result<i32> {
    let settings = crate::config::load_unkeyed(&args.config)?;
    let file = settings
        .state_dir
        .join(crate::listen::state_dir::STATUS_FILE);
    let doc = match std::fs::read(&file) {
        Ok(bytes) => Some(
            serde_json::from_slice::<Value>(&bytes)
                .map_err(|e| anyhow::anyhow!("{} is not a status file: {e}", file.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => anyhow::bail!("cannot read {}: {e}", file.display()),
    };
    let liveness = doc
        .as_ref()
        .map(|d| assess(d, pid_alive(n(d, "pid")), SystemTime::now()));
    if args.json {
        let out = json!({
            "profile": settings.profile,
            "state_dir": settings.state_dir,
            "status_file": file,
            "running": liveness == Some(Liveness::Running),
            "stale": liveness == Some(Liveness::Stale),
            "status": doc,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        match &doc {
            Some(d) => println!(
                "{}",
                render(
                    &settings.profile,
                    d,
                    liveness.unwrap_or(Liveness::NotRunning)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(state: &str, updated: SystemTime) -> Value {
        json!({
            "state": state, "since": "2026-11-30T01:00:00Z", "pid": 42, "profile": "default",
            "handle": "@bob", "api_base": "http://127.0.0.1:1", "runtime": "script",
            "key_source": "env", "updated_at": humantime::format_rfc3339_millis(updated).to_string(),
            "last_wake": {"at": "2026-11-30T01:00:01Z", "reasons": ["message", "invite"]},
            "last_cycle": {"id": "c1", "started_at": "2026-11-30T01:00:02Z", "run_kind": "wake",
                           "outcome": "completed", "run_log": "/s/runs/run-1.log"},
            "texts": {"source": "server", "fetched_at": "2026-11-30T01:00:00Z"},
            "counters": {"connects": 1, "wakes": 2, "cycles": 1, "runs": 1}
        })
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
        assert_eq!(
            assess(&doc("stopping", now), true, now),
            Liveness::NotRunning
        );
        assert_eq!(assess(&json!({}), true, now), Liveness::Stale);
    }

    #[test]
    fn render_shows_state_handle_wake_cycle_and_counters() {
        let text = render(
            "work",
            &doc("connected", SystemTime::now()),
            Liveness::Running,
        );
        for needle in [
            "profile     work",
            "running (pid 42)",
            "state       connected since",
            "handle      @bob",
            "(message, invite)",
            "c1 at 2026-11-30T01:00:02Z: completed (wake run)",
            "runs 1 (0 failed)",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }
}

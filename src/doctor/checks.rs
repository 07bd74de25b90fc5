//! The checks: each a pure function from facts to a [`Check`], so every verdict and its wording is
//! tested without a server, a state dir or a CLI.

use super::facts::{StateDirFacts, TextsFacts};
use super::probes::{Probe, describe, judge_claude_login, judge_codex_login, sanitize};
use super::{Check, Level};
use crate::client::ApiError;
use crate::config::{self, ConfigError, IntegrationSwitch, KeySource, RuntimeKind};
use crate::core::listener::NotReached;
use crate::core::status::{Outcome, Status};
use crate::listen::state_dir::STATUS_FILE;
use crate::sys::flock::LockHolder;
use crate::sys::process::ProcessEnd;
use secrecy::SecretString;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// `config`: the file read, the profile; a bad key or value names the key (config's own error).
/// `looked_for` is the default file that was absent, when no file was read.
pub fn check_config(
    result: &Result<config::Settings, ConfigError>,
    looked_for: Option<&Path>,
) -> Check {
    match result {
        Ok(s) => {
            let file = match (&s.config_path, looked_for) {
                (Some(p), _) => format!("read {}", p.display()),
                (None, Some(l)) => format!(
                    "no config file at {} (built-in defaults and the environment)",
                    l.display()
                ),
                (None, None) => {
                    "no config file (built-in defaults and the environment)".to_string()
                }
            };
            Check::pass("config", format!("profile `{}`, {file}", s.profile))
                .with("profile", s.profile.as_str())
                .with(
                    "file",
                    s.config_path
                        .as_ref()
                        .map_or(Value::Null, |p| p.display().to_string().into()),
                )
        }
        Err(e) => {
            let key = match e {
                ConfigError::UnknownKey(k) => Some(k.clone()),
                ConfigError::BadValue { key, .. } => Some(key.clone()),
                _ => None,
            };
            Check::fail("config", e.to_string()).with("key", key.map_or(Value::Null, Value::from))
        }
    }
}

/// `advice`: settings that are valid but probably unintended (`config::advice`), one WARN each.
/// Lines about the key and an empty script command are left out: `key` and `runtime` judge those.
pub fn check_advice(advice: &[String]) -> Vec<Check> {
    advice
        .iter()
        .filter(|a| !a.contains("API key") && !a.contains("`command` under [listen]"))
        .map(|a| Check::warn("advice", a.clone()))
        .collect()
}

/// `policy`: the profile's `[listen.policy]` in one line (`core::policy::summary`), then what
/// it leaves unbounded or cannot hold for this runtime (issue 38 items 1 and 6): a WARN each.
/// A mistake in the rules already fails `config`.
pub fn check_policy(
    policy: &crate::core::policy::Policy,
    runtime: crate::config::RuntimeKind,
) -> Vec<Check> {
    use crate::config::RuntimeKind;
    use crate::core::policy::{Policy, PolicyLayer};
    let summary = crate::core::policy::summary(policy);
    let set = *policy != Policy::default();
    let detail = if !set {
        format!("{summary}: every card wakes a run")
    } else if *policy == PolicyLayer::default().resolve() {
        format!("{summary} (the defaults; `0` lifts a cap)")
    } else {
        summary
    };
    let mut checks = vec![Check::pass("policy", detail).with("rules", set)];
    let mut warn = |text: String| checks.push(Check::warn("policy", text));
    let runs_capped = policy.max_runs_per_hour.is_some() || policy.max_runs_per_day.is_some();
    // A spending cap bounds runs only where the runtime reports what it counts.
    let spend_capped = match runtime {
        RuntimeKind::ClaudeCode => {
            policy.max_cost_per_day_usd.is_some() || policy.max_tokens_per_day.is_some()
        }
        RuntimeKind::Codex => policy.max_tokens_per_day.is_some(),
        RuntimeKind::Script => false,
    };
    if !runs_capped && !spend_capped {
        warn(
            "no bound on runs: every card wakes a paid run at any pace, day and night; set \
             `listen.policy.max_runs_per_day` (the default is 500; `0` lifts it)"
                .into(),
        );
    }
    if policy.loop_guard.is_none() {
        warn(
            "no loop guard: two agents that answer each other run until a cap holds them; set \
             `listen.policy.loop_guard` (the default is 30 runs in 1h)"
                .into(),
        );
    }
    let cost = policy.max_cost_per_day_usd.is_some();
    let tokens = policy.max_tokens_per_day.is_some();
    match runtime {
        RuntimeKind::Script if cost || tokens => warn(
            "`max_cost_per_day_usd` and `max_tokens_per_day` count a script's runs only when the \
             script reports its cost (its `agentchat.run_report` line, docs/runtimes.md); \
             otherwise they never hold"
                .into(),
        ),
        RuntimeKind::Codex if cost => warn(
            "`max_cost_per_day_usd` never holds with Codex: it reports tokens, no dollars; use \
             `max_tokens_per_day`"
                .into(),
        ),
        RuntimeKind::ClaudeCode if cost && policy.max_cost_per_run_usd.is_none() => warn(
            "a Claude Code run that ends before its report (a timeout, a crash) adds the tokens \
             it streamed but no dollars to `max_cost_per_day_usd`; set \
             `max_cost_per_run_usd` and such a run counts at that budget"
                .into(),
        ),
        _ => {}
    }
    if runtime != RuntimeKind::ClaudeCode && policy.max_cost_per_run_usd.is_some() {
        warn(format!(
            "`max_cost_per_run_usd` is Claude Code's own budget for a run; {} takes none, so it \
             bounds nothing here",
            runtime.as_str()
        ));
    }
    checks
}

/// `integration`: `AGENTCHAT_INTEGRATION=off` makes `listen` exit at once.
pub fn check_integration(switch: &IntegrationSwitch) -> Check {
    match switch {
        IntegrationSwitch::On => Check::pass("integration", "on"),
        IntegrationSwitch::Off => Check::warn(
            "integration",
            "AGENTCHAT_INTEGRATION=off: `agentchat listen` will exit at once without listening",
        ),
        IntegrationSwitch::OffDeprecated(w) => Check::warn(
            "integration",
            format!("{w}; `agentchat listen` will exit at once without listening"),
        ),
        IntegrationSwitch::IgnoredDeprecated(w) => Check::warn("integration", w.clone()),
    }
    .with(
        "on",
        !matches!(
            switch,
            IntegrationSwitch::Off | IntegrationSwitch::OffDeprecated(_)
        ),
    )
}

/// `key`: present, and where it came from (never the key). `key_file` is the result of reading
/// the key file, when the key comes from one; `config_mode` is the config file's mode, when the
/// key sits in the config file itself.
pub fn check_key(
    source: &KeySource,
    key_file: Option<&Result<SecretString, ConfigError>>,
    config_mode: Option<u32>,
) -> Check {
    match source {
        KeySource::Env => {
            Check::pass("key", "from the environment (AGENTCHAT_API_KEY)").with("source", "env")
        }
        KeySource::File(path) => {
            let c = match key_file {
                Some(Ok(_)) => Check::pass("key", format!("from the key file {}", path.display())),
                Some(Err(e)) => Check::fail("key", e.to_string()),
                None => Check::fail(
                    "key",
                    format!("the key file {} was not read", path.display()),
                ),
            };
            c.with("source", "file")
                .with("file", path.display().to_string())
        }
        KeySource::Config => {
            let readable_by_others = config_mode.is_some_and(|m| m & 0o077 != 0);
            let detail = if readable_by_others {
                format!(
                    "from `api_key` in the config file, which other users can read (mode {:04o}): \
                     move it to a key file (`api_key_file`, mode 0600) or `chmod 600` the config",
                    config_mode.unwrap_or(0)
                )
            } else {
                "from `api_key` in the config file (allowed, but a key file via `api_key_file` is safer)"
                    .to_string()
            };
            Check::warn("key", detail).with("source", "config")
        }
        KeySource::Missing => Check::fail(
            "key",
            "no API key: run `agentchat setup` (it signs a new agent up or takes your key), or \
             set AGENTCHAT_API_KEY, or `api_key_file` in the config",
        )
        .with("source", Value::Null),
    }
}

/// `server`: `GET /v1/agents/me` with the key.
pub fn check_me(api_base: &str, result: &Result<String, ApiError>) -> Check {
    match result {
        Ok(handle) => Check::pass("server", format!("{api_base} knows the key as @{handle}"))
            .with("api_base", api_base)
            .with("handle", format!("@{handle}")),
        Err(ApiError::Refused(code)) => Check::fail(
            "server",
            format!(
                "the server refused the key (HTTP {code} from {api_base}/v1/agents/me); \
                 check the key, or get a new one"
            ),
        )
        .with("api_base", api_base)
        .with("http_status", *code),
        // The same lines the listener logs (docs/operating.md, "When something is wrong").
        Err(e) => {
            let (detail, verdict) = match crate::listen::driver::convert::not_reached(api_base, e) {
                NotReached::Misconfigured(line) => (line, "not_agentchat"),
                NotReached::Unreachable(line) => (line, "unreachable"),
            };
            let c = Check::fail("server", detail)
                .with("api_base", api_base)
                .with("verdict", verdict);
            match e {
                ApiError::NotAgentChat {
                    status,
                    content_type,
                } => c
                    .with("http_status", *status)
                    .with("content_type", content_type.clone()),
                ApiError::Status { status, .. } => c.with("http_status", *status),
                ApiError::TooLarge {
                    status, read, cap, ..
                } => c
                    .with("http_status", *status)
                    .with("body_bytes_read", *read)
                    .with("body_cap_bytes", *cap),
                _ => c,
            }
        }
    }
}

/// `texts`: the runtime's texts have `wake_instruction` and `invite_prompt` (without them the
/// listener has no prompt and starts no run). `cached` says a last good copy is in the state dir.
pub fn check_texts(runtime: &str, result: &Result<TextsFacts, String>, cached: bool) -> Check {
    let c = match result {
        Ok(t) => {
            let missing: Vec<&str> = [
                (!t.has_wake_instruction).then_some("wake_instruction"),
                (!t.has_invite_prompt).then_some("invite_prompt"),
            ]
            .into_iter()
            .flatten()
            .collect();
            if missing.is_empty() {
                Check::pass(
                    "texts",
                    format!("runtime={runtime}: version {}, wake_instruction and invite_prompt present", t.version),
                )
            } else {
                Check::fail(
                    "texts",
                    format!(
                        "runtime={runtime}: the server's texts lack {}; the listener starts no run without them",
                        missing.join(" and ")
                    ),
                )
            }
            .with("version", t.version.as_str())
            .with("wake_instruction", t.has_wake_instruction)
            .with("invite_prompt", t.has_invite_prompt)
        }
        Err(e) if cached => Check::warn(
            "texts",
            format!(
                "runtime={runtime}: cannot fetch them ({e}); the listener would use its cached copy"
            ),
        ),
        Err(e) => Check::fail(
            "texts",
            format!("runtime={runtime}: cannot fetch them ({e})"),
        ),
    };
    c.with("runtime", runtime).with("cached", cached)
}

/// `state_dir`: exists with mode 0700, ours, writable. A missing one is fine: `listen` creates it.
pub fn check_state_dir(path: &Path, facts: &StateDirFacts) -> Check {
    let p = path.display();
    let c = match facts {
        StateDirFacts::Missing => Check::pass(
            "state_dir",
            format!("{p} does not exist yet; `agentchat listen` creates it (0700)"),
        )
        .with("exists", false),
        StateDirFacts::NotADir => {
            Check::fail("state_dir", format!("{p} exists but is not a directory"))
        }
        StateDirFacts::Unreadable(e) => {
            Check::fail("state_dir", format!("cannot inspect {p}: {e}"))
        }
        StateDirFacts::Present {
            mode,
            owner,
            you,
            writable,
        } => {
            let c = if owner != you {
                // What `listen` refuses to start with, in its words.
                Check::fail(
                    "state_dir",
                    crate::listen::state_dir::StateError::NotOurs {
                        path: path.to_path_buf(),
                        owned: path.to_path_buf(),
                        owner: *owner,
                        you: *you,
                    }
                    .to_string(),
                )
            } else if let Err(e) = writable {
                Check::fail("state_dir", format!("{p} is not writable: {e}"))
            } else if mode & 0o777 != 0o700 {
                Check::warn(
                    "state_dir",
                    format!(
                        "{p} has mode {:04o}, not 0700: run `chmod 700 {p}`",
                        mode & 0o777
                    ),
                )
            } else {
                Check::pass("state_dir", format!("{p} (0700, writable)"))
            };
            c.with("exists", true)
                .with("mode", format!("{:04o}", mode & 0o777))
                .with("writable", writable.is_ok())
        }
    };
    c.with("path", path.display().to_string())
}

/// `lock`: whether a listener is running for this profile, and its pid.
pub fn check_lock(path: &Path, facts: &LockHolder) -> Check {
    let c = match facts {
        LockHolder::NoFile => Check::pass(
            "lock",
            "no listener has run with this state dir (no lock file)",
        )
        .with("held", false),
        LockHolder::Free => {
            Check::pass("lock", "free: no listener is running for this profile").with("held", false)
        }
        LockHolder::Held { pid: Some(pid) } => {
            Check::pass("lock", format!("held by a running listener, pid {pid}"))
                .with("held", true)
                .with("pid", *pid)
        }
        LockHolder::Held { pid: None } => {
            Check::pass("lock", "held by a running listener (pid unknown)").with("held", true)
        }
        LockHolder::Unknown(e) => Check::warn(
            "lock",
            format!("cannot tell who holds {}: {e}", path.display()),
        ),
    };
    c.with("path", path.display().to_string())
}

/// `status`: a summary of `status.json` (state, since, last cycle) and whether its writer lives.
pub fn check_status(
    path: &Path,
    status: Option<&Result<Status, String>>,
    pid_alive: bool,
    now: SystemTime,
) -> Check {
    let Some(status) = status else {
        return Check::pass(
            "status",
            format!(
                "no {} yet (no listener has run with this state dir)",
                STATUS_FILE
            ),
        )
        .with("present", false);
    };
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            return Check::warn("status", format!("{} cannot be read: {e}", path.display()))
                .with("present", true);
        }
    };
    let or_unknown = |s: &str| {
        if s.is_empty() {
            "?".to_string()
        } else {
            s.to_string()
        }
    };
    let state = status.state;
    let since = or_unknown(&status.since);
    let pid = status.pid;
    let liveness = crate::status::assess(status, pid_alive, now);
    let mut detail = format!("state {} since {since}", state.as_str());
    let mut level = Level::Pass;
    match liveness {
        crate::status::Liveness::Running => {
            detail.push_str(&format!(" (listener pid {pid} running)"))
        }
        crate::status::Liveness::Stale => {
            level = Level::Warn;
            let turned = crate::status::last_turn(status)
                .map_or_else(|| "?".to_string(), crate::sys::time::rfc3339);
            detail.push_str(&format!(
                " (pid {pid} is alive but its main loop has not turned since {turned}: stuck?)"
            ));
        }
        crate::status::Liveness::Stopping => {
            detail.push_str(&format!(" (listener pid {pid} stopping)"))
        }
        crate::status::Liveness::NotRunning => detail.push_str(&format!(
            " (not running; last written {})",
            or_unknown(&status.updated_at)
        )),
    }
    let running = liveness == crate::status::Liveness::Running;
    if running && state.needs_the_user() {
        level = Level::Warn;
    }
    if let Some(d) = status.detail.as_deref().filter(|_| running) {
        detail.push_str(&format!("; {}", crate::runtime::agent_cli::clip(d)));
    }
    if running && !status.capabilities_refused.is_empty() {
        // Contract 3.4: without `rewake` held and failed cards are never re-woken.
        level = level.max(Level::Warn);
        detail.push_str(&format!(
            "; the server did not accept the capabilities {} (an old or limited server: cards \
             left unanswered are not re-woken)",
            status.capabilities_refused.join(", ")
        ));
    }
    let mut outcome_fact = Value::Null;
    match &status.last_cycle {
        Some(c) => {
            let outcome = crate::status::outcome_word(c.outcome);
            detail.push_str(&format!(
                "; last cycle {} at {}: {outcome}",
                or_unknown(&c.id),
                or_unknown(&c.started_at)
            ));
            if let Some(r) = c.no_run_reason {
                detail.push_str(&format!(" ({})", r.as_str()));
            }
            if let Some(f) = &c.failure {
                detail.push_str(&format!(" ({})", crate::runtime::agent_cli::clip(f)));
            }
            if matches!(c.outcome, Some(Outcome::Failed | Outcome::Unusable)) {
                level = level.max(Level::Warn);
                if let Some(log) = &c.run_log {
                    detail.push_str(&format!("; run log {log}"));
                }
            }
            outcome_fact = outcome.into();
        }
        None => detail.push_str("; no cycle yet"),
    }
    Check::new("status", level, detail)
        .with("present", true)
        .with("state", state.as_str())
        .with("since", since)
        .with("running", running)
        .with("pid", pid)
        .with("last_cycle_outcome", outcome_fact)
}

/// `runtime` for `script`: `command` set, its program found and executable.
pub fn check_script(
    command: &[String],
    located: Option<&Result<PathBuf, String>>,
    executable: bool,
) -> Check {
    let Some(program) = command.first() else {
        return Check::fail(
            "runtime",
            "script: `listen.command` is empty; set `command` under [listen] to the program to run",
        )
        .with("runtime", "script");
    };
    let c = match located {
        Some(Ok(p)) if executable => Check::pass("runtime", format!("script: {}", p.display()))
            .with("path", p.display().to_string()),
        Some(Ok(p)) => Check::fail(
            "runtime",
            format!(
                "script: {} (from `listen.command`) is not executable: `chmod +x` it",
                p.display()
            ),
        )
        .with("path", p.display().to_string()),
        Some(Err(e)) => Check::fail("runtime", e.clone()),
        None => Check::fail(
            "runtime",
            format!("script: `{program}` (from `listen.command`) was not looked up"),
        ),
    };
    c.with("runtime", "script")
        .with("config_key", "listen.command")
}

/// `runtime` for `claude-code` / `codex`: the resolved binary and its `--version`.
pub fn check_cli_runtime(
    runtime: RuntimeKind,
    config_key: &str,
    binary: &Result<PathBuf, String>,
    version: Option<&Probe>,
) -> Check {
    let rt = runtime.as_str();
    let c = match (binary, version) {
        (Err(e), _) => Check::fail("runtime", format!("{rt}: {e}")),
        (Ok(p), Some(probe)) if probe.end == ProcessEnd::Exited(0) => {
            let v = probe
                .stdout
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(sanitize)
                .unwrap_or_else(|| "version unknown".into());
            Check::pass("runtime", format!("{rt}: {} ({v})", p.display()))
                .with("path", p.display().to_string())
                .with("version", v)
        }
        (Ok(p), Some(probe)) => Check::fail(
            "runtime",
            format!(
                "{rt}: {} does not work: {}",
                p.display(),
                describe(&probe.end, "--version")
            ),
        )
        .with("path", p.display().to_string()),
        (Ok(p), None) => Check::warn(
            "runtime",
            format!("{rt}: {} (version not checked)", p.display()),
        )
        .with("path", p.display().to_string()),
    };
    c.with("runtime", rt).with("config_key", config_key)
}

/// `login` for `claude-code` / `codex`.
pub fn check_login(runtime: RuntimeKind, probe: &Probe) -> Check {
    let (ok, reason) = match runtime {
        RuntimeKind::Codex => judge_codex_login(probe),
        _ => judge_claude_login(probe),
    };
    let level = if ok { Level::Pass } else { Level::Fail };
    Check::new("login", level, format!("{}: {reason}", runtime.as_str()))
        .with("runtime", runtime.as_str())
        .with("logged_in", ok)
        .with(
            "exit_code",
            match probe.end {
                ProcessEnd::Exited(c) => Value::from(c),
                _ => Value::Null,
            },
        )
}

#[cfg(test)]
mod tests {
    use super::super::service_checks::*;
    use super::*;
    use crate::doctor::probes::probe_of;
    use crate::service;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn config_errors_fail_and_name_the_key() {
        let c = check_config(
            &Err(ConfigError::UnknownKey("listen.qiet_window".into())),
            None,
        );
        assert_eq!(c.level, Level::Fail);
        assert!(c.detail.contains("`listen.qiet_window`"));
        assert_eq!(c.facts["key"], "listen.qiet_window");
    }

    #[test]
    fn advice_becomes_warnings_except_what_other_checks_judge() {
        let lines = vec![
            "the API key is written in the config file (`api_key`)".to_string(),
            "runtime is `script` but `command` under [listen] is empty".to_string(),
            "`listen.max_delay` (1s) is shorter than `listen.quiet_window` (3s)".to_string(),
        ];
        let checks = check_advice(&lines);
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].level, Level::Warn);
        assert!(checks[0].detail.contains("max_delay"));
    }

    #[test]
    fn integration_off_warns_that_listen_exits() {
        let c = check_integration(&IntegrationSwitch::Off);
        assert_eq!(c.level, Level::Warn);
        assert!(c.detail.contains("exit at once"));
        assert_eq!(check_integration(&IntegrationSwitch::On).level, Level::Pass);
    }

    #[test]
    fn key_sources_are_named_never_shown() {
        assert_eq!(check_key(&KeySource::Env, None, None).level, Level::Pass);
        let missing = check_key(&KeySource::Missing, None, None);
        assert_eq!(missing.level, Level::Fail);
        assert!(missing.detail.contains("AGENTCHAT_API_KEY"));
        let open = check_key(&KeySource::Config, None, Some(0o644));
        assert_eq!(open.level, Level::Warn);
        assert!(open.detail.contains("0644") && open.detail.contains("chmod 600"));
        let bad: Result<SecretString, ConfigError> = Err(ConfigError::BadValue {
            key: "api_key_file".into(),
            problem: "k can be read by other users (mode 0644); run `chmod 600 k`".into(),
        });
        let file = check_key(&KeySource::File("k".into()), Some(&bad), None);
        assert_eq!(file.level, Level::Fail);
        assert!(file.detail.contains("chmod 600"));
    }

    #[test]
    fn a_refused_key_is_a_failure_that_says_so() {
        let c = check_me("http://x", &Err(ApiError::Refused(401)));
        assert_eq!(c.level, Level::Fail);
        assert!(c.detail.starts_with("the server refused the key"));
        let ok = check_me("http://x", &Ok("bob".into()));
        assert_eq!(ok.level, Level::Pass);
        assert_eq!(ok.facts["handle"], "@bob");
    }

    #[test]
    fn texts_without_a_prompt_fail_and_a_cache_softens_an_outage() {
        let facts = TextsFacts {
            version: "1".into(),
            has_wake_instruction: true,
            has_invite_prompt: false,
        };
        let c = check_texts("codex", &Ok(facts), false);
        assert_eq!(c.level, Level::Fail);
        assert!(c.detail.contains("invite_prompt") && !c.detail.contains("wake_instruction and"));
        assert_eq!(
            check_texts("codex", &Err("down".into()), true).level,
            Level::Warn
        );
        assert_eq!(
            check_texts("codex", &Err("down".into()), false).level,
            Level::Fail
        );
    }

    #[test]
    fn state_dir_mode_owner_and_writability_are_judged() {
        let p = Path::new("/s");
        let ok = |mode| StateDirFacts::Present {
            mode,
            owner: 1000,
            you: 1000,
            writable: Ok(()),
        };
        assert_eq!(check_state_dir(p, &ok(0o40700)).level, Level::Pass);
        let loose = check_state_dir(p, &ok(0o40755));
        assert_eq!(loose.level, Level::Warn);
        assert!(loose.detail.contains("0755") && loose.detail.contains("chmod 700 /s"));
        let ro = StateDirFacts::Present {
            mode: 0o700,
            owner: 1000,
            you: 1000,
            writable: Err("Permission denied".into()),
        };
        assert_eq!(check_state_dir(p, &ro).level, Level::Fail);
        let theirs = check_state_dir(
            p,
            &StateDirFacts::Present {
                mode: 0o40700,
                owner: 4242,
                you: 1000,
                writable: Ok(()),
            },
        );
        assert_eq!(theirs.level, Level::Fail, "listen refuses it");
        assert!(
            theirs.detail.contains("uid 4242")
                && theirs.detail.contains("chown")
                && theirs.detail.contains("--state-dir"),
            "{}",
            theirs.detail
        );
        assert_eq!(
            check_state_dir(p, &StateDirFacts::NotADir).level,
            Level::Fail
        );
        assert_eq!(
            check_state_dir(p, &StateDirFacts::Missing).level,
            Level::Pass
        );
    }

    fn status_doc(state: &str, outcome: Option<&str>) -> Status {
        let now = crate::sys::time::rfc3339(SystemTime::now());
        let mut v = json!({"state": state, "since": now, "updated_at": now, "pid": 4242,
                           "detail": "the server refused the API key"});
        if let Some(o) = outcome {
            v["last_cycle"] = json!({"id": "c-1", "started_at": now, "outcome": o,
                                     "failure": "exited with 2", "run_log": "/s/runs/run-1.log"});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn status_summary_warns_on_a_refused_key_a_failed_run_or_a_stuck_listener() {
        let p = Path::new("/s/status.json");
        let now = SystemTime::now();
        let ok = check_status(
            p,
            Some(&Ok(status_doc("connected", Some("completed")))),
            true,
            now,
        );
        assert_eq!(ok.level, Level::Pass, "{}", ok.detail);
        assert!(ok.detail.contains("state connected since") && ok.detail.contains("c-1"));
        let refused = check_status(p, Some(&Ok(status_doc("key_refused", None))), true, now);
        assert_eq!(refused.level, Level::Warn);
        assert!(refused.detail.contains("refused"));
        let failed = check_status(
            p,
            Some(&Ok(status_doc("connected", Some("failed")))),
            true,
            now,
        );
        assert_eq!(failed.level, Level::Warn);
        assert!(failed.detail.contains("run-1.log"));
        let later = now + Duration::from_secs(600);
        let stuck = check_status(p, Some(&Ok(status_doc("connected", None))), true, later);
        assert_eq!(stuck.level, Level::Warn);
        assert!(stuck.detail.contains("stuck"));
        let gone = check_status(p, Some(&Ok(status_doc("key_refused", None))), false, now);
        assert_eq!(
            gone.level,
            Level::Pass,
            "a stopped listener's old state is history"
        );
        assert!(gone.detail.contains("not running"));
        assert_eq!(check_status(p, None, false, now).level, Level::Pass);
    }

    #[test]
    fn script_runtime_needs_a_command_that_exists_and_runs() {
        let empty = check_script(&[], None, false);
        assert_eq!(empty.level, Level::Fail);
        assert!(empty.detail.contains("`listen.command`"));
        let cmd = vec!["/bin/true".to_string()];
        let found: Result<PathBuf, String> = Ok("/bin/true".into());
        assert_eq!(check_script(&cmd, Some(&found), true).level, Level::Pass);
        let noexec = check_script(&cmd, Some(&found), false);
        assert_eq!(noexec.level, Level::Fail);
        assert!(noexec.detail.contains("chmod +x"));
    }

    #[test]
    fn a_missing_cli_fails_and_a_broken_one_reports_how_it_ended() {
        let missing: Result<PathBuf, String> = Err("set listen.codex.binary".into());
        let c = check_cli_runtime(RuntimeKind::Codex, "listen.codex.binary", &missing, None);
        assert_eq!(c.level, Level::Fail);
        assert!(c.detail.contains("listen.codex.binary"));
        let found: Result<PathBuf, String> = Ok("/x/claude".into());
        let broken = probe_of(ProcessEnd::Exited(127), "", "");
        let c = check_cli_runtime(RuntimeKind::ClaudeCode, "k", &found, Some(&broken));
        assert_eq!(c.level, Level::Fail);
        assert!(c.detail.contains("exited with 127"));
    }

    #[test]
    fn unit_difference_names_the_key_not_the_value() {
        let a = "[Service]\nExecStart=\"/old/agentchat\" \"listen\"\nEnvironment=\"PATH=/secret/bin\"\n";
        let b =
            "[Service]\nExecStart=\"/old/agentchat\" \"listen\"\nEnvironment=\"PATH=/other/bin\"\n";
        assert_eq!(first_difference(a, b).as_deref(), Some("Environment="));
        assert_eq!(first_difference(a, a), None);
        let c = check_service(
            "work",
            None,
            &Ok("/u/x.service".into()),
            Some(&Ok(a.into())),
            &Ok(b.into()),
            &service::ManagerView::NotAsked,
        );
        assert_eq!(c.level, Level::Warn);
        assert!(
            c.detail
                .contains("agentchat service install --profile work")
        );
        assert!(!c.detail.contains("/secret/bin"));
        let same = check_service(
            "default",
            None,
            &Ok("/u/x".into()),
            Some(&Ok(a.into())),
            &Ok(a.into()),
            &service::ManagerView::NotAsked,
        );
        assert_eq!(same.level, Level::Pass);
        let none = check_service(
            "default",
            None,
            &Ok("/u/x".into()),
            None,
            &Err(String::new()),
            &service::ManagerView::NotAsked,
        );
        assert_eq!(none.level, Level::Pass);
        assert_eq!(none.facts["installed"], false);
    }

    #[test]
    fn a_written_unit_passes_only_when_the_manager_runs_it() {
        use service::ManagerView;
        let unit = "[Service]\n";
        let check = |manager: ManagerView| {
            check_service(
                "default",
                None,
                &Ok("/u/agentchat-listen.service".into()),
                Some(&Ok(unit.into())),
                &Ok(unit.into()),
                &manager,
            )
        };
        let answered = |enabled, running| ManagerView::Answered {
            enabled,
            running,
            enabled_word: if enabled { "enabled" } else { "disabled" }.into(),
            active_word: if running { "active" } else { "failed" }.into(),
        };
        let c = check(answered(true, true));
        assert_eq!(c.level, Level::Pass, "{}", c.detail);
        assert!(
            c.detail.starts_with("written, enabled and running"),
            "{}",
            c.detail
        );
        assert_eq!(
            (c.facts["enabled"].clone(), c.facts["running"].clone()),
            (true.into(), true.into())
        );
        let c = check(answered(true, false));
        assert_eq!(c.level, Level::Warn);
        assert!(
            c.detail.contains("not running")
                && c.detail
                    .contains("journalctl --user -u agentchat-listen@default.service"),
            "{}",
            c.detail
        );
        let c = check(answered(false, true));
        assert_eq!(c.level, Level::Warn);
        assert!(c.detail.contains("not enabled"), "{}", c.detail);
        let c = check(ManagerView::Unreachable(
            "`systemctl --user`: Failed to connect to bus".into(),
        ));
        assert_eq!(c.level, Level::Warn);
        assert!(
            c.detail.contains("Failed to connect to bus") && c.detail.contains("agentchat listen"),
            "{}",
            c.detail
        );
        assert!(
            !c.detail.contains("installed"),
            "a unit no manager runs is not installed: {}",
            c.detail
        );
        let c = check(ManagerView::NotAsked);
        assert_eq!(c.level, Level::Pass);
        assert!(c.detail.starts_with("written and current"), "{}", c.detail);
    }

    #[test]
    fn the_policy_is_a_pass_line_and_a_warn_for_each_bound_missing_or_unheld() {
        use crate::config::RuntimeKind;
        use crate::core::policy::{LoopGuard, Policy};
        let levels = |c: &[Check]| c.iter().map(|c| c.level).collect::<Vec<_>>();
        let none = check_policy(&Policy::default(), RuntimeKind::ClaudeCode);
        assert_eq!(none[0].detail, "no rules: every card wakes a run");
        assert_eq!(none[0].facts["rules"], false);
        assert_eq!(levels(&none), [Level::Pass, Level::Warn, Level::Warn]);
        assert!(
            none[1].detail.starts_with("no bound on runs"),
            "{}",
            none[1].detail
        );
        assert!(
            none[2].detail.starts_with("no loop guard"),
            "{}",
            none[2].detail
        );
        let bounded = Policy {
            max_runs_per_hour: Some(12),
            loop_guard: Some(LoopGuard {
                runs: 6,
                within_ms: 60_000,
            }),
            ..Policy::default()
        };
        let some = check_policy(&bounded, RuntimeKind::ClaudeCode);
        assert_eq!(levels(&some), [Level::Pass]);
        assert_eq!(
            some[0].detail,
            "at most 12 runs an hour; loop guard 6 runs in 1m"
        );
        assert_eq!(some[0].facts["rules"], true);
        // Caps a runtime cannot hold (issue 38 item 6).
        let costly = Policy {
            max_cost_per_day_usd: Some(5.0),
            max_tokens_per_day: Some(1000),
            max_cost_per_run_usd: Some(0.001),
            ..bounded.clone()
        };
        let script = check_policy(&costly, RuntimeKind::Script);
        assert!(
            script[0].detail.contains("$0.001 a run"),
            "{}",
            script[0].detail
        );
        assert_eq!(levels(&script), [Level::Pass, Level::Warn, Level::Warn]);
        assert!(script[1].detail.contains("agentchat.run_report"));
        assert!(script[2].detail.contains("script takes none"));
        let codex = check_policy(&costly, RuntimeKind::Codex);
        assert!(codex[1].detail.contains("never holds with Codex"));
        let claude = check_policy(
            &Policy {
                max_cost_per_run_usd: None,
                ..costly
            },
            RuntimeKind::ClaudeCode,
        );
        assert!(claude[1].detail.contains("set `max_cost_per_run_usd`"));
    }
}

//! `agentchat doctor [--profile P] [--config F] [--json]`: the check a user runs when the listener
//! misbehaves. One line per check, `PASS|WARN|FAIL <name>: <detail>`, exit 1 if any check fails.
//!
//! Each check is a pure function from facts to a [`Check`]; `run` gathers the facts (config, the
//! server, the state dir, the lock, the runtime's CLI, the service unit) and hands them over. The
//! API key is never printed, not even a prefix: details carry where it came from, and the whole
//! report is scrubbed of the key before it is shown. CLI output (`claude auth status`,
//! `codex login status`) is reduced to a verdict and a short, sanitized reason, never shown raw.

use crate::client::{Api, ApiError};
use crate::config::{self, ConfigArgs, ConfigError, IntegrationSwitch, KeySource, RuntimeKind};
use crate::core::status::{Outcome, Status};
use crate::listen::state_dir::{LOCK_FILE, STATUS_FILE, StateDir};
use crate::service::{self, ServiceKind};
use crate::sys::process::pid_alive;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long `--version` and the login probes may take before they count as hung.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server checks may take in all (each call).
const SERVER_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print one JSON document: `{ok, exit_code, profile, checks: [{name, level, detail, facts}]}`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Pass,
    Warn,
    Fail,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Pass => "PASS",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        }
    }
}

/// One check's verdict: a name, a level, one line for humans and a few facts for `--json`.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub level: Level,
    pub detail: String,
    pub facts: Map<String, Value>,
}

impl Check {
    pub fn new(name: &'static str, level: Level, detail: impl Into<String>) -> Check {
        Check {
            name,
            level,
            detail: detail.into(),
            facts: Map::new(),
        }
    }
    pub fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check::new(name, Level::Pass, detail)
    }
    pub fn warn(name: &'static str, detail: impl Into<String>) -> Check {
        Check::new(name, Level::Warn, detail)
    }
    pub fn fail(name: &'static str, detail: impl Into<String>) -> Check {
        Check::new(name, Level::Fail, detail)
    }
    /// Adds a fact for `--json`.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Check {
        self.facts.insert(key.to_string(), value.into());
        self
    }
}

/// All checks, in the order they ran.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub profile: Option<String>,
    pub checks: Vec<Check>,
}

impl Report {
    /// 1 if any check failed, else 0.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.checks.iter().any(|c| c.level == Level::Fail))
    }

    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            out.push_str(&format!("{} {}: {}\n", c.level.as_str(), c.name, c.detail));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "level": c.level.as_str(),
                    "detail": c.detail,
                    "facts": Value::Object(c.facts.clone()),
                })
            })
            .collect();
        json!({
            "ok": self.exit_code() == 0,
            "exit_code": self.exit_code(),
            "profile": self.profile,
            "checks": checks,
        })
    }

    /// Replaces every occurrence of `secret` in details and facts. The checks never put the key
    /// there; this is the last guard in case a server or CLI message quoted it.
    pub fn scrub(&mut self, secret: &str) {
        if secret.len() < 4 {
            return;
        }
        for c in &mut self.checks {
            if c.detail.contains(secret) {
                c.detail = c.detail.replace(secret, "[redacted]");
            }
            for v in c.facts.values_mut() {
                scrub_value(v, secret);
            }
        }
    }
}

fn scrub_value(v: &mut Value, secret: &str) {
    match v {
        Value::String(s) if s.contains(secret) => *s = s.replace(secret, "[redacted]"),
        Value::Array(a) => a.iter_mut().for_each(|x| scrub_value(x, secret)),
        Value::Object(o) => o.values_mut().for_each(|x| scrub_value(x, secret)),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Pure checks
// ---------------------------------------------------------------------------------------------

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
            "no API key: set AGENTCHAT_API_KEY, or `api_key_file` in the config",
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
        Err(e) => {
            Check::fail("server", format!("cannot use {api_base}: {e}")).with("api_base", api_base)
        }
    }
}

/// The facts `check_texts` needs from one `GET /v1/texts`.
#[derive(Debug, Clone)]
pub struct TextsFacts {
    pub version: String,
    pub has_wake_instruction: bool,
    pub has_invite_prompt: bool,
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

/// What the state dir looks like on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateDirFacts {
    Missing,
    NotADir,
    Present {
        mode: u32,
        owned_by_me: bool,
        /// `Err` with the reason when a file could not be created in it.
        writable: Result<(), String>,
    },
    Unreadable(String),
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
            owned_by_me,
            writable,
        } => {
            let c = if let Err(e) = writable {
                Check::fail("state_dir", format!("{p} is not writable: {e}"))
            } else if !owned_by_me {
                Check::warn("state_dir", format!("{p} belongs to another user"))
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

/// Who holds `listen.lock`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockFacts {
    /// No lock file: no listener has run with this state dir.
    NoFile,
    /// Held; `pid` is the holder (from the kernel when it can tell, else the file's pid).
    Held {
        pid: Option<u32>,
    },
    Free,
    Unknown(String),
}

/// `lock`: whether a listener is running for this profile, and its pid.
pub fn check_lock(path: &Path, facts: &LockFacts) -> Check {
    let c = match facts {
        LockFacts::NoFile => Check::pass(
            "lock",
            "no listener has run with this state dir (no lock file)",
        )
        .with("held", false),
        LockFacts::Free => {
            Check::pass("lock", "free: no listener is running for this profile").with("held", false)
        }
        LockFacts::Held { pid: Some(pid) } => {
            Check::pass("lock", format!("held by a running listener, pid {pid}"))
                .with("held", true)
                .with("pid", *pid)
        }
        LockFacts::Held { pid: None } => {
            Check::pass("lock", "held by a running listener (pid unknown)").with("held", true)
        }
        LockFacts::Unknown(e) => Check::warn(
            "lock",
            format!("cannot tell who holds {}: {e}", path.display()),
        ),
    };
    c.with("path", path.display().to_string())
}

/// Finds the pid holding a `flock` on the file with this device and inode, from the text of
/// Linux's `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`). Waiters (`->`) are
/// skipped. Reading it takes no lock, so a listener starting at the same moment is never turned away.
pub fn flock_holder(proc_locks: &str, major: u64, minor: u64, inode: u64) -> Option<u32> {
    proc_locks.lines().find_map(|line| {
        let mut f = line.split_whitespace().skip(1);
        let kind = f.next()?;
        if kind == "->" || kind != "FLOCK" {
            return None;
        }
        let _advisory = f.next()?;
        let _rw = f.next()?;
        let pid: u32 = f.next()?.parse().ok()?;
        let dev = f.next()?;
        let mut parts = dev.split(':');
        let maj = u64::from_str_radix(parts.next()?, 16).ok()?;
        let min = u64::from_str_radix(parts.next()?, 16).ok()?;
        let ino: u64 = parts.next()?.parse().ok()?;
        (maj == major && min == minor && ino == inode).then_some(pid)
    })
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
            detail.push_str(&format!(
                " (pid {pid} is alive but has not refreshed its status since {}: stuck?)",
                or_unknown(&status.updated_at)
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

/// How a probe (`--version`, a login check) ended, with its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeEnd {
    Exited(i32),
    Signalled,
    TimedOut,
    SpawnFailed(String),
}

#[derive(Debug, Clone)]
pub struct Probe {
    pub end: ProbeEnd,
    pub stdout: String,
    pub stderr: String,
}

impl ProbeEnd {
    fn describe(&self, what: &str) -> String {
        match self {
            ProbeEnd::Exited(c) => format!("`{what}` exited with {c}"),
            ProbeEnd::Signalled => format!("`{what}` was killed by a signal"),
            ProbeEnd::TimedOut => format!(
                "`{what}` did not answer within {} s",
                PROBE_TIMEOUT.as_secs()
            ),
            ProbeEnd::SpawnFailed(e) => format!("`{what}` could not start: {}", sanitize(e)),
        }
    }
}

/// Makes a line of CLI output safe to show: `runtime::agent_cli::clip` (bearer tokens, key-looking
/// words), then any long token-like word is redacted too, at most 120 characters.
pub fn sanitize(s: &str) -> String {
    let clipped = crate::runtime::agent_cli::clip(s);
    let words: Vec<String> = clipped
        .split(' ')
        .map(|w| {
            let tokenish = w
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .count()
                >= 24
                && !w.contains('/');
            if tokenish {
                "[redacted]".to_string()
            } else {
                w.to_string()
            }
        })
        .collect();
    crate::sys::text::ellipsize(words.join(" "), 120)
}

/// Keeps only a short word-like value (an auth method name), never free text.
fn word(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, ' ' | '.' | '_' | '-'))
        .take(40)
        .collect::<String>()
        .trim()
        .to_string()
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
        (Ok(p), Some(probe)) if probe.end == ProbeEnd::Exited(0) => {
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
                probe.end.describe("--version")
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

/// Judges `claude auth status`: exit 0 (and `loggedIn: true`) is logged in. Only `loggedIn` and
/// the `authMethod` name are read from its JSON.
pub fn judge_claude_login(probe: &Probe) -> (bool, String) {
    let v: Option<Value> = serde_json::from_str(probe.stdout.trim()).ok();
    let logged = v
        .as_ref()
        .and_then(|v| v.get("loggedIn"))
        .and_then(Value::as_bool);
    let method = v
        .as_ref()
        .and_then(|v| v.get("authMethod"))
        .and_then(Value::as_str)
        .map(word)
        .filter(|m| !m.is_empty() && m != "none");
    let ok = probe.end == ProbeEnd::Exited(0) && logged != Some(false);
    let reason = if ok {
        match method {
            Some(m) => format!("logged in ({m})"),
            None => "logged in".into(),
        }
    } else if logged == Some(false) {
        format!(
            "not logged in ({}); log in as the listener's user (`claude auth login`), or give the \
             listener ANTHROPIC_API_KEY",
            probe.end.describe("claude auth status")
        )
    } else {
        format!(
            "cannot tell whether Claude Code is logged in: {}",
            probe.end.describe("claude auth status")
        )
    };
    (ok, reason)
}

/// Judges `codex login status`: exit 0 is logged in; the method is the words after
/// `Logged in using`, cut before ` - ` (Codex prints a masked key there).
pub fn judge_codex_login(probe: &Probe) -> (bool, String) {
    let all = format!("{}\n{}", probe.stdout, probe.stderr);
    let ok = probe.end == ProbeEnd::Exited(0);
    if ok {
        let method = all
            .lines()
            .find_map(|l| l.trim().strip_prefix("Logged in using"))
            .map(|rest| word(rest.split(" - ").next().unwrap_or("")))
            .filter(|m| !m.is_empty());
        let reason = match method {
            Some(m) => format!("logged in (using {m})"),
            None => "logged in".into(),
        };
        return (true, reason);
    }
    let not_logged = all
        .lines()
        .any(|l| l.trim().eq_ignore_ascii_case("not logged in"));
    let reason = if not_logged {
        format!(
            "not logged in ({}); run `codex login` as the listener's user, or give the listener a provider key",
            probe.end.describe("codex login status")
        )
    } else {
        format!(
            "cannot tell whether Codex is logged in: {}",
            probe.end.describe("codex login status")
        )
    };
    (false, reason)
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
                ProbeEnd::Exited(c) => Value::from(c),
                _ => Value::Null,
            },
        )
}

/// The first line where two unit texts differ, named by its key (`ExecStart=`), never its value
/// (the PATH line is long and may be private).
pub fn first_difference(installed: &str, current: &str) -> Option<String> {
    let mut a = installed.lines();
    let mut b = current.lines();
    loop {
        match (a.next(), b.next()) {
            (None, None) => return (installed != current).then(|| "line endings".to_string()),
            (x, y) if x == y => continue,
            (x, y) => {
                let line = x.or(y).unwrap_or("").trim();
                let key = if let Some((k, _)) = line.split_once('=') {
                    format!("{}=", k.trim())
                } else if line.starts_with('<') {
                    line.chars().take(40).collect()
                } else if line.is_empty() {
                    "an empty line".into()
                } else {
                    line.chars().take(40).collect()
                };
                return Some(key);
            }
        }
    }
}

/// `service`: whether the unit for this profile is installed, and whether it is what
/// `agentchat service print` renders now.
pub fn check_service(
    profile: &str,
    config: Option<&Path>,
    path: &Result<PathBuf, String>,
    installed: Option<&Result<String, String>>,
    current: &Result<String, String>,
) -> Check {
    let path = match path {
        Ok(p) => p,
        Err(e) => {
            return Check::warn(
                "service",
                format!("cannot tell where the unit would be: {e}"),
            );
        }
    };
    let p = path.display();
    let mut reinstall = "agentchat service install".to_string();
    if profile != "default" {
        reinstall.push_str(&format!(" --profile {profile}"));
    }
    if let Some(c) = config {
        reinstall.push_str(&format!(" --config {}", c.display()));
    }
    let c = match installed {
        None => Check::pass(
            "service",
            format!("not installed ({p}); `{reinstall}` runs the listener at login"),
        )
        .with("installed", false),
        Some(Err(e)) => Check::warn(
            "service",
            format!("cannot read the installed unit {p}: {e}"),
        )
        .with("installed", true),
        Some(Ok(text)) => match current {
            Ok(now) if now == text => {
                Check::pass("service", format!("installed and current ({p})"))
                    .with("installed", true)
                    .with("current", true)
            }
            Ok(now) => {
                let diff = first_difference(text, now).unwrap_or_default();
                let hint = if config.is_none()
                    && (diff.starts_with("ExecStart") || diff.starts_with("<string>"))
                {
                    " (if it was installed with --config, give doctor the same --config)"
                } else {
                    ""
                };
                Check::warn(
                    "service",
                    format!(
                        "installed at {p} but it differs from what `agentchat service print` \
                         renders now (first difference: `{diff}`); reinstall: `{reinstall}`{hint}"
                    ),
                )
            }
            .with("installed", true)
            .with("current", false),
            Err(e) => Check::warn(
                "service",
                format!("installed at {p}; cannot render the current unit: {e}"),
            )
            .with("installed", true),
        },
    };
    c.with("path", p.to_string())
}

// ---------------------------------------------------------------------------------------------
// I/O: gathering the facts
// ---------------------------------------------------------------------------------------------

fn state_dir_facts(path: &Path) -> StateDirFacts {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return StateDirFacts::Missing,
        Err(e) => return StateDirFacts::Unreadable(e.to_string()),
    };
    if !meta.is_dir() {
        return StateDirFacts::NotADir;
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    let probe = path.join(format!(".doctor-{}", std::process::id()));
    let writable = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map(|_| {
            let _ = std::fs::remove_file(&probe);
        })
        .map_err(|e| e.to_string());
    StateDirFacts::Present {
        mode: meta.permissions().mode(),
        owned_by_me: meta.uid() == me,
        writable,
    }
}

fn lock_facts(path: &Path) -> LockFacts {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return LockFacts::NoFile,
        Err(e) => return LockFacts::Unknown(e.to_string()),
    };
    let file_pid: Option<u32> = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok());
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(meta), Ok(locks)) = (file.metadata(), std::fs::read_to_string("/proc/locks")) {
            let dev = meta.dev();
            // glibc's major()/minor() encoding of st_dev.
            let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
            let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
            return match flock_holder(&locks, major, minor, meta.ino()) {
                Some(pid) => LockFacts::Held { pid: Some(pid) },
                None => LockFacts::Free,
            };
        }
    }
    // Elsewhere: a shared lock attempt, released at once. It fails while a listener holds the
    // exclusive lock.
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            LockFacts::Free
        }
        Err(std::fs::TryLockError::WouldBlock) => LockFacts::Held { pid: file_pid },
        Err(std::fs::TryLockError::Error(e)) => LockFacts::Unknown(e.to_string()),
    }
}

/// Runs `program args…` with no stdin, its own process group and a time limit; the group is
/// killed afterwards, so nothing it started is left behind.
pub async fn probe(
    program: &Path,
    args: &[&str],
    env_remove: &[&str],
    env_set: &[(&str, &str)],
    timeout: Duration,
) -> Probe {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for k in env_remove {
        cmd.env_remove(k);
    }
    for (k, v) in env_set {
        cmd.env(k, v);
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Probe {
                end: ProbeEnd::SpawnFailed(e.to_string()),
                stdout: String::new(),
                stderr: String::new(),
            };
        }
    };
    let pgid = child.id().and_then(|p| i32::try_from(p).ok());
    let result = tokio::time::timeout(timeout, child.wait_with_output()).await;
    if let Some(pgid) = pgid {
        crate::sys::process::signal_group(pgid, libc::SIGKILL);
    }
    match result {
        Ok(Ok(out)) => Probe {
            end: match out.status.code() {
                Some(c) => ProbeEnd::Exited(c),
                None => ProbeEnd::Signalled,
            },
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
        Ok(Err(e)) => Probe {
            end: ProbeEnd::SpawnFailed(e.to_string()),
            stdout: String::new(),
            stderr: String::new(),
        },
        Err(_) => Probe {
            end: ProbeEnd::TimedOut,
            stdout: String::new(),
            stderr: String::new(),
        },
    }
}

async fn with_timeout<T>(
    fut: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    tokio::time::timeout(SERVER_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::Network(format!(
                "no answer within {} s",
                SERVER_TIMEOUT.as_secs()
            )))
        })
}

/// Runs every check and returns the report (never fails: problems are checks).
pub async fn run(args: &DoctorArgs) -> Report {
    let env: std::collections::HashMap<String, String> = std::env::vars().collect();
    let mut report = Report::default();
    let loaded = config::load_unkeyed(&args.config);
    let looked_for = config::config_file_path(&args.config, &env).map(|(p, _)| p);
    report
        .checks
        .push(check_config(&loaded, looked_for.as_deref()));
    report
        .checks
        .push(check_integration(&config::integration_switch(
            &env,
            &crate::sys::time::today_utc(),
        )));
    let settings = match loaded {
        Ok(s) => s,
        Err(_) => {
            // Without settings nothing else can be checked; still scrub an env key.
            if let Some(k) = env.get("AGENTCHAT_API_KEY") {
                report.scrub(k);
            }
            return report;
        }
    };
    report.profile = Some(settings.profile.clone());
    report
        .checks
        .extend(check_advice(&config::advice(&settings)));

    // The key.
    let key_file = match &settings.key_source {
        KeySource::File(p) => Some(config::read_key_file(p)),
        _ => None,
    };
    let config_mode = settings.config_path.as_ref().and_then(|p| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p)
            .ok()
            .map(|m| m.permissions().mode() & 0o777)
    });
    report.checks.push(check_key(
        &settings.key_source,
        key_file.as_ref(),
        config_mode,
    ));
    let key: Option<SecretString> = match key_file {
        Some(Ok(k)) => Some(k),
        Some(Err(_)) => None,
        None => settings.api_key.clone(),
    };

    // The server.
    let texts_runtime = settings.listen.runtime.texts_runtime();
    let cached = StateDir::at(&settings.state_dir)
        .texts_cache(texts_runtime)
        .is_file();
    match &key {
        Some(k) => match Api::new(&settings.api_base, k.clone()) {
            Ok(api) => {
                let me = with_timeout(api.me()).await;
                report.checks.push(check_me(&settings.api_base, &me));
                if me.is_err() {
                    let cache = if cached {
                        "; the listener would use its cached copy"
                    } else {
                        ""
                    };
                    report.checks.push(
                        Check::warn(
                            "texts",
                            format!("not checked: the server check failed{cache}"),
                        )
                        .with("cached", cached),
                    );
                } else {
                    let texts =
                        with_timeout(api.texts(texts_runtime))
                            .await
                            .map(|(t, _)| TextsFacts {
                                version: t.version,
                                has_wake_instruction: t
                                    .wake_instruction
                                    .is_some_and(|s| !s.trim().is_empty()),
                                has_invite_prompt: t
                                    .invite_prompt
                                    .is_some_and(|s| !s.trim().is_empty()),
                            });
                    report.checks.push(check_texts(
                        texts_runtime,
                        &texts.map_err(|e| e.to_string()),
                        cached,
                    ));
                }
            }
            Err(e) => report.checks.push(Check::fail("server", e.to_string())),
        },
        None => report.checks.push(Check::warn(
            "server",
            format!("not checked: no usable API key for {}", settings.api_base),
        )),
    }

    // The state dir, the lock, the status.
    let sd = &settings.state_dir;
    let sd_facts = state_dir_facts(sd);
    report.checks.push(check_state_dir(sd, &sd_facts));
    let lock_path = sd.join(LOCK_FILE);
    let lock = if matches!(sd_facts, StateDirFacts::Missing) {
        LockFacts::NoFile
    } else {
        lock_facts(&lock_path)
    };
    report.checks.push(check_lock(&lock_path, &lock));
    let status_path = sd.join(STATUS_FILE);
    let status = StateDir::at(sd)
        .read_status()
        .transpose()
        .map(|r| r.map_err(|e| e.to_string()));
    // A free lock means no listener runs, whatever process now has the status file's pid.
    let lock_says_gone = matches!(lock, LockFacts::Free | LockFacts::NoFile);
    let alive = !lock_says_gone
        && status
            .as_ref()
            .and_then(|s| s.as_ref().ok())
            .is_some_and(|s| pid_alive(u64::from(s.pid)));
    report.checks.push(check_status(
        &status_path,
        status.as_ref(),
        alive,
        SystemTime::now(),
    ));

    // The runtime.
    let workdir = StateDir::at(sd).workdir(settings.listen.workdir.as_deref());
    if let Some(w) = &settings.listen.workdir
        && !w.is_dir()
    {
        report.checks.push(
            Check::fail(
                "workdir",
                format!(
                    "{} (from `listen.workdir`) is not a directory; runs cannot start there",
                    w.display()
                ),
            )
            .with("path", w.display().to_string()),
        );
    }
    let path_var = std::env::var_os("PATH");
    match settings.listen.runtime {
        RuntimeKind::Script => {
            let located = settings.listen.command.first().map(|program| {
                crate::runtime::script::locate(program, &workdir, path_var.as_deref())
                    .map_err(|e| e.to_string())
            });
            let executable =
                matches!(&located, Some(Ok(p)) if crate::runtime::agent_cli::is_executable(p));
            report.checks.push(check_script(
                &settings.listen.command,
                located.as_ref(),
                executable,
            ));
        }
        kind @ (RuntimeKind::ClaudeCode | RuntimeKind::Codex) => {
            let (configured, default, config_key, login_args): (_, _, _, &[&str]) = match kind {
                RuntimeKind::Codex => (
                    settings.listen.codex.binary.as_deref(),
                    "codex",
                    "listen.codex.binary",
                    &["login", "status"],
                ),
                _ => (
                    settings.listen.claude.binary.as_deref(),
                    "claude",
                    "listen.claude.binary",
                    &["auth", "status"],
                ),
            };
            let binary = crate::runtime::agent_cli::resolve_binary(
                configured,
                default,
                kind.as_str(),
                config_key,
            )
            .map_err(|e| e.to_string());
            // The probes see what a run would: neither CLI's nested-session variables, no key.
            let mut removed = crate::runtime::cli_env_remove();
            removed.push("AGENTCHAT_API_KEY".into());
            let remove: Vec<&str> = removed.iter().map(String::as_str).collect();
            let set = [("DISABLE_AUTOUPDATER", "1")];
            match &binary {
                Ok(path) => {
                    let version = probe(path, &["--version"], &remove, &set, PROBE_TIMEOUT).await;
                    report.checks.push(check_cli_runtime(
                        kind,
                        config_key,
                        &binary,
                        Some(&version),
                    ));
                    let login = probe(path, login_args, &remove, &set, PROBE_TIMEOUT).await;
                    report.checks.push(check_login(kind, &login));
                }
                Err(_) => report
                    .checks
                    .push(check_cli_runtime(kind, config_key, &binary, None)),
            }
        }
    }

    // The service unit.
    report
        .checks
        .push(service_check(&settings.profile, args.config.config.clone()));

    if let Some(k) = &key {
        report.scrub(k.expose_secret());
    }
    if let Some(k) = env.get("AGENTCHAT_API_KEY") {
        report.scrub(k);
    }
    report
}

fn service_check(profile: &str, config: Option<PathBuf>) -> Check {
    let kind = ServiceKind::native();
    if let Err(e) = service::check_profile_name(profile) {
        return Check::pass("service", format!("not checked: {e}"));
    }
    let path = service::unit_path(kind, profile).map_err(|e| format!("{e:#}"));
    let installed = path
        .as_ref()
        .ok()
        .and_then(|p| match std::fs::read_to_string(p) {
            Ok(t) => Some(Ok(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => Some(Err(e.to_string())),
        });
    let current = match installed {
        Some(Ok(_)) => {
            service::render_current(kind, profile, config.clone()).map_err(|e| format!("{e:#}"))
        }
        _ => Err(String::new()),
    };
    check_service(
        profile,
        config.as_deref(),
        &path,
        installed.as_ref(),
        &current,
    )
}

pub async fn run_command(args: DoctorArgs) -> anyhow::Result<i32> {
    let report = run(&args).await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.render_text());
    }
    Ok(report.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe_of(end: ProbeEnd, stdout: &str, stderr: &str) -> Probe {
        Probe {
            end,
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    #[test]
    fn any_fail_makes_exit_code_1_and_warnings_do_not() {
        let mut r = Report::default();
        r.checks.push(Check::pass("a", "ok"));
        r.checks.push(Check::warn("b", "hm"));
        assert_eq!(r.exit_code(), 0);
        r.checks.push(Check::fail("c", "no"));
        assert_eq!(r.exit_code(), 1);
        assert_eq!(r.render_text(), "PASS a: ok\nWARN b: hm\nFAIL c: no\n");
        assert_eq!(r.to_json()["ok"], false);
    }

    #[test]
    fn scrub_removes_the_key_from_details_and_nested_facts() {
        let mut r = Report::default();
        r.checks.push(
            Check::fail("server", "echoed ac_live_0123456789 back")
                .with("nested", json!({"x": ["ac_live_0123456789"]})),
        );
        r.scrub("ac_live_0123456789");
        let text = format!("{}{}", r.render_text(), r.to_json());
        assert!(!text.contains("ac_live_0123456789"), "{text}");
        assert!(text.contains("[redacted]"));
    }

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
            owned_by_me: true,
            writable: Ok(()),
        };
        assert_eq!(check_state_dir(p, &ok(0o40700)).level, Level::Pass);
        let loose = check_state_dir(p, &ok(0o40755));
        assert_eq!(loose.level, Level::Warn);
        assert!(loose.detail.contains("0755") && loose.detail.contains("chmod 700 /s"));
        let ro = StateDirFacts::Present {
            mode: 0o700,
            owned_by_me: true,
            writable: Err("Permission denied".into()),
        };
        assert_eq!(check_state_dir(p, &ro).level, Level::Fail);
        assert_eq!(
            check_state_dir(p, &StateDirFacts::NotADir).level,
            Level::Fail
        );
        assert_eq!(
            check_state_dir(p, &StateDirFacts::Missing).level,
            Level::Pass
        );
    }

    #[test]
    fn proc_locks_gives_the_flock_holder_and_skips_waiters_and_other_files() {
        let text = "\
1: POSIX  ADVISORY  WRITE 111 08:01:42 0 EOF
2: FLOCK  ADVISORY  WRITE 222 08:01:43 0 EOF
2: -> FLOCK  ADVISORY  WRITE 333 08:01:42 0 EOF
3: FLOCK  ADVISORY  WRITE 444 fd:1a:42 0 EOF
";
        assert_eq!(
            flock_holder(text, 8, 1, 42),
            None,
            "POSIX lock and waiter ignored"
        );
        assert_eq!(flock_holder(text, 8, 1, 43), Some(222));
        assert_eq!(
            flock_holder(text, 0xfd, 0x1a, 42),
            Some(444),
            "hex major:minor"
        );
    }

    #[test]
    fn a_lock_held_in_this_process_is_reported_with_our_pid() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(LOCK_FILE);
        assert_eq!(lock_facts(&path), LockFacts::NoFile);
        let f = std::fs::File::create(&path).unwrap();
        assert_eq!(lock_facts(&path), LockFacts::Free);
        f.try_lock().unwrap();
        let held = lock_facts(&path);
        if cfg!(target_os = "linux") {
            assert_eq!(
                held,
                LockFacts::Held {
                    pid: Some(std::process::id())
                }
            );
        } else {
            assert!(matches!(held, LockFacts::Held { .. }), "{held:?}");
        }
        drop(f);
        assert_eq!(lock_facts(&path), LockFacts::Free);
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
    fn claude_login_reads_only_logged_in_and_the_method() {
        let no = probe_of(
            ProbeEnd::Exited(1),
            r#"{"loggedIn": false, "authMethod": "none", "apiProvider": "firstParty"}"#,
            "",
        );
        let (ok, reason) = judge_claude_login(&no);
        assert!(!ok);
        let c = check_login(RuntimeKind::ClaudeCode, &no);
        assert_eq!(c.level, Level::Fail);
        assert_eq!(c.facts["exit_code"], 1);
        assert!(
            !c.detail.contains("firstParty"),
            "raw output is never shown"
        );
        assert!(reason.starts_with("not logged in"), "{reason}");
        let yes = probe_of(
            ProbeEnd::Exited(0),
            r#"{"loggedIn": true, "authMethod": "claude.ai", "email": "me@example.com"}"#,
            "",
        );
        let (ok, reason) = judge_claude_login(&yes);
        assert!(ok);
        assert_eq!(reason, "logged in (claude.ai)");
        let hung = probe_of(ProbeEnd::TimedOut, "", "");
        let (ok, reason) = judge_claude_login(&hung);
        assert!(!ok);
        assert!(reason.contains("did not answer"), "{reason}");
    }

    #[test]
    fn codex_login_method_never_includes_the_masked_key() {
        let yes = probe_of(
            ProbeEnd::Exited(0),
            "",
            "Logged in using an API key - sk-proj-***ABCDE\n",
        );
        let (ok, reason) = judge_codex_login(&yes);
        assert!(ok);
        assert_eq!(reason, "logged in (using an API key)");
        let no = probe_of(
            ProbeEnd::Exited(1),
            "",
            "WARNING: something\nNot logged in\n",
        );
        let (ok, reason) = judge_codex_login(&no);
        assert!(!ok);
        assert!(reason.starts_with("not logged in"), "{reason}");
    }

    #[test]
    fn sanitize_redacts_tokens_and_clips() {
        let s = sanitize(
            "Authorization: Bearer abc.def.ghi and token eyJhbGciOiJIUzI1NiJ9xxxxxxxx end",
        );
        assert!(!s.contains("abc.def.ghi") && !s.contains("eyJhbGci"), "{s}");
        assert!(s.ends_with("end"));
        assert!(sanitize(&"word ".repeat(100)).chars().count() <= 121);
        assert_eq!(sanitize("2.1.197 (Claude Code)"), "2.1.197 (Claude Code)");
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
        let broken = probe_of(ProbeEnd::Exited(127), "", "");
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
        );
        assert_eq!(same.level, Level::Pass);
        let none = check_service(
            "default",
            None,
            &Ok("/u/x".into()),
            None,
            &Err(String::new()),
        );
        assert_eq!(none.level, Level::Pass);
        assert_eq!(none.facts["installed"], false);
    }

    #[tokio::test]
    async fn a_hung_probe_times_out_and_leaves_no_process_behind() {
        let d = tempfile::tempdir().unwrap();
        let pidfile = d.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let p = probe(
            Path::new("/bin/sh"),
            &["-c", &script],
            &[],
            &[],
            Duration::from_millis(500),
        )
        .await;
        assert_eq!(p.end, ProbeEnd::TimedOut);
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild was killed with its group: gone, or a zombie awaiting its reaper.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
            let dead = match &stat {
                None => true,
                Some(s) => s
                    .rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z')),
            };
            if dead || !cfg!(target_os = "linux") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "grandchild {pid} still alive"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn a_probe_returns_exit_code_and_output() {
        let p = probe(
            Path::new("/bin/sh"),
            &["-c", "echo out; echo err >&2; exit 3"],
            &[],
            &[],
            PROBE_TIMEOUT,
        )
        .await;
        assert_eq!(p.end, ProbeEnd::Exited(3));
        assert_eq!(p.stdout, "out\n");
        assert_eq!(p.stderr, "err\n");
        let missing = probe(Path::new("/nonexistent/x"), &[], &[], &[], PROBE_TIMEOUT).await;
        assert!(matches!(missing.end, ProbeEnd::SpawnFailed(_)));
    }
}

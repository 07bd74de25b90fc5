//! `agentchat doctor [--profile P] [--config F] [--json]`: the check a user runs when the listener
//! misbehaves. One line per check, `PASS|WARN|FAIL <name>: <detail>`, exit 1 if any check fails.
//!
//! Each check is a pure function from facts to a [`Check`] (`checks`); `run` gathers the facts
//! (`facts`: config, the server, the state dir, the lock, the service unit; `probes`: the runtime's
//! CLI) section by section and hands them over. The API key is never printed, not even a prefix:
//! details carry where it came from, and the whole report is scrubbed of the key before it is
//! shown. CLI output (`claude auth status`, `codex login status`) is reduced to a verdict and a
//! short, sanitized reason, never shown raw.

pub mod checks;
pub mod facts;
pub mod presence;
pub mod probes;
mod reach;
pub mod run;
pub mod service_checks;

use crate::client::Api;
use crate::config::{self, ConfigArgs, KeySource, RuntimeKind, Settings};
use crate::listen::state_dir::{LOCK_FILE, STATUS_FILE, StateDir};
use crate::service::{self, ServiceKind};
use crate::sys::flock::LockHolder;
use crate::sys::process::pid_alive;
use checks::*;
use facts::StateDirFacts;
use probes::{PROBE_TIMEOUT, probe};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value, json};
use service_checks::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print one JSON document: `{version, ok, exit_code, profile, checks: [{name, level, detail,
    /// facts}]}`.
    #[arg(long)]
    pub json: bool,
    /// Nothing listening for the profile is a FAIL (exit 1), not a WARN: for scripts and CI
    /// that must know the agent answers.
    #[arg(long)]
    pub strict: bool,
    /// Instead of the checks: one real run of the runtime now, on the agent's tray with the
    /// served text; says whether it started, reached the AgentChat tools and completed. It
    /// costs one model call and asks first.
    #[arg(long, conflicts_with_all = ["json", "strict"])]
    pub run: bool,
    /// With --run: do not ask.
    #[arg(long, short = 'y', requires = "run")]
    pub yes: bool,
}

/// The schema version of `doctor --json` (docs/integrating.md): it changes only when a field is
/// removed or changes meaning; new fields and new checks may appear without it.
pub const JSON_VERSION: u32 = 1;

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

    /// `doctor --json`: `{version, ok, exit_code, profile, checks: [{name, level, detail, facts}]}`
    /// (docs/integrating.md documents every field).
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
            "version": JSON_VERSION,
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

/// Runs every check and returns the report (never fails: problems are checks). One section per
/// part of the setup, in the order a listener needs them.
pub async fn run(args: &DoctorArgs) -> Report {
    let env = config::process_env();
    let mut report = Report::default();
    // Without settings nothing else can be checked.
    if let Some(settings) = config_section(args, &env, &mut report) {
        report.profile = Some(settings.profile.clone());
        let key = key_section(&settings, &mut report);
        server_section(&settings, key.as_ref(), &mut report).await;
        state_section(&settings, &mut report);
        presence_section(&settings, args.strict, &mut report);
        runtime_section(&settings, &mut report).await;
        report.checks.push(service_section(
            &settings.profile,
            args.config.config.clone(),
        ));
        report.checks.extend(service_extras(&settings.profile));
        if let Some(k) = &key {
            report.scrub(k.expose_secret());
        }
    }
    if let Some(k) = env.get("AGENTCHAT_API_KEY") {
        report.scrub(k);
    }
    report
}

/// `config`, `integration`, `advice` and `policy`. Returns the settings when they loaded.
fn config_section(
    args: &DoctorArgs,
    env: &HashMap<String, String>,
    report: &mut Report,
) -> Option<Settings> {
    let loaded = config::ConfigFile::read(&args.config)
        .and_then(|file| file.settings(None, config::KeyFile::Named));
    let looked_for = config::config_file_path(&args.config, env).map(|(p, _)| p);
    report
        .checks
        .push(check_config(&loaded, looked_for.as_deref()));
    report
        .checks
        .push(check_integration(&config::integration_switch(
            env,
            &crate::sys::time::today_utc(),
        )));
    let settings = loaded.ok()?;
    report
        .checks
        .extend(check_advice(&config::advice(&settings)));
    report.checks.extend(check_policy(
        &settings.listen.policy,
        settings.listen.runtime,
    ));
    Some(settings)
}

/// `key`: where the key comes from. Returns the key when it can be used.
fn key_section(settings: &Settings, report: &mut Report) -> Option<SecretString> {
    let key_file = match &settings.key_source {
        KeySource::File(p) => Some(config::read_key_file(p)),
        _ => None,
    };
    let config_mode = settings.config_path.as_deref().and_then(facts::file_mode);
    report.checks.push(check_key(
        &settings.key_source,
        key_file.as_ref(),
        config_mode,
    ));
    match key_file {
        Some(Ok(k)) => Some(k),
        Some(Err(_)) => None,
        None => settings.api_key.clone(),
    }
}

/// `server` and `texts`: `GET /v1/agents/me` with the key, then the runtime's texts.
async fn server_section(settings: &Settings, key: Option<&SecretString>, report: &mut Report) {
    let texts_runtime = settings.listen.runtime.texts_runtime();
    let cached = StateDir::at(&settings.state_dir)
        .texts_cache(texts_runtime)
        .is_file();
    let Some(key) = key else {
        report.checks.push(Check::warn(
            "server",
            format!("not checked: no usable API key for {}", settings.api_base),
        ));
        return;
    };
    let api = match Api::new(&settings.api_base, key.clone()) {
        Ok(api) => api,
        Err(e) => {
            report.checks.push(Check::fail("server", e.to_string()));
            return;
        }
    };
    let me = facts::with_timeout(api.me()).await;
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
        return;
    }
    let texts = facts::texts_facts(&api, texts_runtime).await;
    report
        .checks
        .push(check_texts(texts_runtime, &texts, cached));
}

/// `state_dir`, `lock` and `status`: the state dir on disk, who holds the lock, what
/// `status.json` says and whether its writer still runs.
fn state_section(settings: &Settings, report: &mut Report) {
    let sd = &settings.state_dir;
    let sd_facts = facts::state_dir_facts(sd);
    report.checks.push(check_state_dir(sd, &sd_facts));
    let lock_path = sd.join(LOCK_FILE);
    let lock = if matches!(sd_facts, StateDirFacts::Missing) {
        LockHolder::NoFile
    } else {
        crate::sys::flock::holder(&lock_path)
    };
    report.checks.push(check_lock(&lock_path, &lock));
    let status_path = sd.join(STATUS_FILE);
    let status = facts::read_status(sd);
    // A free lock means no listener runs, whatever process now has the status file's pid.
    let lock_says_gone = matches!(lock, LockHolder::Free | LockHolder::NoFile);
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
}

/// `listening`, `mcp_claude` and `mcp_codex` (`presence`): does anything answer for the profile,
/// and can the user's own Claude Code and Codex reach AgentChat through this binary.
fn presence_section(settings: &Settings, strict: bool, report: &mut Report) {
    let lock = crate::sys::flock::holder(&settings.state_dir.join(LOCK_FILE));
    report
        .checks
        .push(presence::check_listening(&settings.profile, &lock, strict));
    let env = config::process_env();
    let this = crate::service::stable_exe().unwrap_or_default();
    for (name, cli) in [
        ("mcp_claude", crate::runtime::user_cli::Cli::Claude),
        ("mcp_codex", crate::runtime::user_cli::Cli::Codex),
    ] {
        let facts = mcp_facts(cli, &env);
        report.checks.extend(presence::check_mcp(
            name,
            cli.name(),
            &settings.profile,
            &facts,
            &this,
        ));
    }
}

/// The CLI's `agentchat` entry, read from its own file (never by running it).
fn mcp_facts(
    cli: crate::runtime::user_cli::Cli,
    env: &HashMap<String, String>,
) -> presence::McpFacts {
    use crate::runtime::user_cli;
    let Some(home) = user_cli::home(cli, env) else {
        return presence::McpFacts::Absent;
    };
    match user_cli::current_entry(&home) {
        user_cli::Entry::Argv(a) => presence::McpFacts::Argv(a),
        user_cli::Entry::Other(w) => presence::McpFacts::Other(w),
        user_cli::Entry::None if user_cli::find(cli).is_some() || home.mcp_store.exists() => {
            presence::McpFacts::NoEntry
        }
        user_cli::Entry::None => presence::McpFacts::Absent,
    }
}

/// `workdir` (when one is configured) and `runtime`, plus `login` for Claude Code and Codex.
async fn runtime_section(settings: &Settings, report: &mut Report) {
    let workdir = StateDir::at(&settings.state_dir).workdir(settings.listen.workdir.as_deref());
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
    match settings.listen.runtime {
        RuntimeKind::Script => report.checks.push(script_runtime(settings, &workdir)),
        // Every other runtime runs a CLI of its own (core::runtime_kind).
        kind => {
            report.checks.extend(cli_runtime(settings, kind).await);
        }
    }
    let support = crate::runtime::landlock::support();
    report.checks.push(reach::check_confine(settings, support));
    report
        .checks
        .push(reach::check_run_reach(settings, &workdir, support));
}

/// `runtime` for `script`: the command's program, found from the workdir and `PATH`.
fn script_runtime(settings: &Settings, workdir: &Path) -> Check {
    let path_var = std::env::var_os("PATH");
    let located = settings.listen.command.first().map(|program| {
        crate::runtime::script::locate(program, workdir, path_var.as_deref())
            .map_err(|e| e.to_string())
    });
    let executable = matches!(&located, Some(Ok(p)) if crate::runtime::agent_cli::is_executable(p));
    check_script(&settings.listen.command, located.as_ref(), executable)
}

/// `runtime` and `login` for a runtime with a CLI of its own (Claude Code, Codex): the binary, its `--version`, its login check.
async fn cli_runtime(settings: &Settings, kind: RuntimeKind) -> Vec<Check> {
    let config_key = kind.descriptor().config_key;
    let login_args = kind.descriptor().login_check.unwrap_or_default();
    let binary = crate::runtime::cli_binary(settings, kind).map_err(|e| e.to_string());
    let Ok(path) = &binary else {
        return vec![check_cli_runtime(kind, config_key, &binary, None)];
    };
    // The probes see what a run would: neither CLI's nested-session variables, no key.
    let mut removed = crate::runtime::cli_env_remove();
    removed.push("AGENTCHAT_API_KEY".into());
    let remove: Vec<&str> = removed.iter().map(String::as_str).collect();
    let set = [("DISABLE_AUTOUPDATER", "1")];
    let version = probe(path, &["--version"], &remove, &set, PROBE_TIMEOUT).await;
    let runtime = check_cli_runtime(kind, config_key, &binary, Some(&version));
    let login = probe(path, login_args, &remove, &set, PROBE_TIMEOUT).await;
    vec![runtime, check_login(kind, &login)]
}

/// `service`: the installed unit for this profile against what `service print` renders now.
fn service_section(profile: &str, config: Option<PathBuf>) -> Check {
    let kind = ServiceKind::native();
    if let Err(e) = service::check_profile_name(profile) {
        return Check::pass("service", format!("not checked: {e}"));
    }
    let path = service::unit_path(kind, profile).map_err(|e| format!("{e:#}"));
    let installed = path.as_ref().ok().and_then(|p| facts::read_if_present(p));
    let host = service::host_unit_path(kind).map_err(|e| format!("{e:#}"));
    if let Some(h) = host.as_ref().ok().filter(|h| h.exists()) {
        if installed.is_some() {
            return Check::warn(
                "service",
                format!(
                    "both this profile's unit and the one-process unit {} are written: two \
                     listeners for one agent (the second exits 75 on its lock); keep one: \
                     `agentchat service uninstall --all`, then `install --all` or `install --all \
                     --one-process`",
                    h.display()
                ),
            );
        }
        let installed = facts::read_if_present(h);
        let current =
            service::render_host_current(kind, config.clone()).map_err(|e| format!("{e:#}"));
        let manager = service::host_manager_view(kind);
        return service_checks::check_host_service(
            config.as_deref(),
            &host,
            installed.as_ref(),
            &current,
            &manager,
        );
    }
    let (current, manager) = match installed {
        Some(Ok(_)) => (
            service::render_current(kind, profile, config.clone()).map_err(|e| format!("{e:#}")),
            service::manager_view(kind, profile),
        ),
        _ => (Err(String::new()), service::ManagerView::NotAsked),
    };
    check_service(
        profile,
        config.as_deref(),
        &path,
        installed.as_ref(),
        &current,
        &manager,
    )
}

/// `exec_start`, `template` and `linger`, for an installed unit: whether the binary it runs still
/// exists, whether the systemd template is this version's, and whether the user manager outlives
/// a logout.
fn service_extras(profile: &str) -> Vec<Check> {
    let kind = ServiceKind::native();
    let Ok(own) = service::unit_path(kind, profile) else {
        return Vec::new();
    };
    // A profile without a unit of its own may run in the one-process unit.
    let host = service::host_unit_path(kind)
        .ok()
        .filter(|h| !own.exists() && h.exists());
    let path = host.clone().unwrap_or(own);
    let Some(Ok(text)) = facts::read_if_present(&path) else {
        return Vec::new();
    };
    let mut checks = Vec::new();
    if let Some(program) = facts::unit_program(&text) {
        checks.push(if std::path::Path::new(&program).is_file() {
            Check::pass("exec_start", format!("ExecStart runs {program}"))
        } else {
            Check::warn(
                "exec_start",
                format!(
                    "the unit's ExecStart names {program}, which no longer exists (moved or \
                     upgraded?): run `agentchat service install` again with the binary you use"
                ),
            )
        });
    }
    if kind == ServiceKind::Systemd
        && host.is_none()
        && let Ok(template) = service::template_path()
    {
        checks.push(match facts::read_if_present(&template) {
            Some(Ok(t)) if t == service::template_text() => {
                Check::pass("template", format!("{} is current", template.display()))
            }
            Some(Ok(_)) => Check::warn(
                "template",
                format!(
                    "{} differs from this version's template: run `agentchat service install` \
                     again",
                    template.display()
                ),
            ),
            _ => Check::warn(
                "template",
                format!(
                    "{} is missing: the drop-in has no unit to apply to; run `agentchat service \
                     install` again",
                    template.display()
                ),
            ),
        });
    }
    if kind == ServiceKind::Systemd && std::env::var_os("AGENTCHAT_SERVICE_DIR").is_none() {
        checks.push(match service::linger() {
            Some(true) => Check::pass("linger", "on: the service keeps running after logout"),
            Some(false) => Check::warn("linger", service::linger_advice()),
            None => Check::pass("linger", "not known (logind did not answer)"),
        });
    }
    checks
}

pub async fn run_command(args: DoctorArgs) -> anyhow::Result<i32> {
    if args.run {
        return run::run_command(&args.config, args.yes).await;
    }
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
}

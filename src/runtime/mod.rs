//! The agent's own run: how each runtime is started (argv, environment, stdin) and how its outcome is
//! judged from its exit and output. Building a spec is pure apart from files the runtime needs
//! (the MCP config); starting and supervising the process is `supervisor`'s job.

/// Helpers shared by the Claude Code and Codex runtimes (the agents' CLIs).
pub mod agent_cli;
pub mod check;
pub mod claude;
pub mod codex;
pub mod codex_home;
pub mod confine;
pub mod instructions;
pub mod landlock;
mod leftover;
pub mod listener_env;
pub mod probe;
mod run_output;
pub mod sandbox;
pub mod script;
pub mod supervisor;
pub mod user_cli;

use crate::config::{RuntimeKind, Settings};
use crate::core::decision::RunKind;
use crate::sys::process::ProcessEnd;
pub use listener_env::ListenerEnv;
use secrecy::SecretString;
use std::path::{Path, PathBuf};

/// The cause is part of the message and not a `source`, so a chain printed with `{:#}` says it
/// once (as `config::ConfigError` does).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{0}")]
    Unusable(String),
    #[error("could not prepare the run: {0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for RuntimeError {
    fn from(e: std::io::Error) -> RuntimeError {
        RuntimeError::Io(e)
    }
}

/// What a run is for and what it may know.
pub struct RunContext<'a> {
    pub settings: &'a Settings,
    pub kind: RunKind,
    pub prompt: &'a str,
    /// This agent's handle with `@`.
    pub handle: &'a str,
    pub cycle_id: &'a str,
    /// Labels of the wakes this cycle coalesced (`message`, `reminder`, `unanswered`, `invite`, `connect`).
    pub wake_reasons: &'a [String],
    pub api_key: &'a SecretString,
    /// The profile's state dir (0700), for files like the MCP config.
    pub state_dir: &'a Path,
    /// The resolved working directory (exists).
    pub workdir: &'a Path,
    /// The served `identity_line_template`, when texts are loaded: the run is told who it is
    /// from the listener's own rendering of it (`instructions`), never from a file in the
    /// workdir.
    pub identity_template: Option<&'a str>,
}

/// A process to start. The key may appear in `env` (never in `args`).
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Set on top of what the run inherits.
    pub env: Vec<(String, String)>,
    /// Removed from what the run inherits.
    pub env_remove: Vec<String>,
    /// What the run inherits of the listener's environment beyond `core::run_env`'s allowlist
    /// (the profile's `listen.env_pass`); nothing else of it reaches the run.
    pub env_pass: Vec<String>,
    /// Written to stdin and then closed; `None` gives the child a closed stdin (/dev/null).
    pub stdin: Option<Vec<u8>>,
    pub cwd: PathBuf,
    /// Whose output events the supervisor reads for the run's own report of cost and tokens
    /// (`core::run_report`; the script runtime's output is not read).
    pub runtime: RuntimeKind,
    /// The kernel's line around the run (`core::sandbox`), entered between fork and exec;
    /// `None` only for a script the profile runs unconfined (`listen.sandbox_script = false`).
    pub sandbox: Option<crate::core::sandbox::Plan>,
    /// The run's scratch folder (`runtime::sandbox`), removed when the run ends.
    pub scratch: Option<PathBuf>,
}

/// How a run ended, as its runtime judges it (the machine's own type: `core::listener`).
pub use crate::core::listener::RunOutcome;

/// How one runtime is started and judged: the runtime's module behind a [`RuntimeKind`]. What a
/// runtime is called, which binary and config key it uses, is `core::runtime_kind`'s table.
struct Implementation {
    prepare: fn(&RunContext<'_>, &ListenerEnv) -> Result<RunSpec, RuntimeError>,
    judge: fn(&ProcessEnd, &[u8]) -> RunOutcome,
}

/// The one per-runtime dispatch: adding a runtime adds an arm here.
fn implementation(runtime: RuntimeKind) -> Implementation {
    match runtime {
        RuntimeKind::ClaudeCode => Implementation {
            prepare: claude::prepare,
            judge: claude::judge,
        },
        RuntimeKind::Codex => Implementation {
            prepare: codex::prepare,
            judge: codex::judge,
        },
        RuntimeKind::Script => Implementation {
            prepare: script::prepare,
            judge: |end, _output| script::judge(end),
        },
    }
}

/// Builds the spec for the configured runtime from this process's environment: the listener's
/// own, which the run inherits.
pub fn prepare(ctx: &RunContext<'_>) -> Result<RunSpec, RuntimeError> {
    prepare_in(ctx, &ListenerEnv::of_process())
}

/// [`prepare`] from the environment `env` the run's listener has (a test's listener, whose
/// environment is not the test process's own).
pub fn prepare_in(ctx: &RunContext<'_>, env: &ListenerEnv) -> Result<RunSpec, RuntimeError> {
    (implementation(ctx.settings.listen.runtime).prepare)(ctx, env)
}

/// A run of this profile as it would be started, built by the same code as a real one in a
/// throwaway state dir (the key a placeholder, nothing started), for `doctor`'s `reach`: its
/// command line, environment and kernel line. The dir's paths in the plan stand for the
/// profile's state dir.
pub fn dry_run(
    settings: &Settings,
    workdir: &Path,
    identity_template: Option<&str>,
) -> Result<(RunSpec, PathBuf), RuntimeError> {
    let dir = std::env::temp_dir().join(format!("agentchat-doctor-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    crate::sys::fs::create_private_dir(&dir)?;
    let key = SecretString::from("doctor-placeholder-key".to_string());
    let ctx = RunContext {
        settings,
        kind: RunKind::Wake,
        prompt: "",
        handle: "@doctor",
        cycle_id: "doctor",
        wake_reasons: &[],
        api_key: &key,
        state_dir: &dir,
        workdir,
        identity_template,
    };
    let spec = prepare(&ctx);
    let _ = std::fs::remove_dir_all(&dir);
    spec.map(|s| (s, dir))
}

/// The binary a CLI runtime runs: the configured one (`listen.claude.binary`, ...), else the
/// descriptor's default on `PATH`. A runtime without a CLI (the script runtime, whose program is
/// the user's own and only found relative to the run's workdir) has none to resolve.
pub fn cli_binary(settings: &Settings, runtime: RuntimeKind) -> Result<PathBuf, RuntimeError> {
    let path_var = std::env::var_os("PATH");
    cli_binary_in(settings, runtime, path_var.as_deref())
}

/// [`cli_binary`] searching `path_var` (the listener's `PATH`).
pub fn cli_binary_in(
    settings: &Settings,
    runtime: RuntimeKind,
    path_var: Option<&std::ffi::OsStr>,
) -> Result<PathBuf, RuntimeError> {
    let d = runtime.descriptor();
    let default = d.binary.ok_or_else(|| {
        RuntimeError::Unusable(format!("the {} runtime runs no CLI of its own", d.name))
    })?;
    agent_cli::resolve_binary_in(
        settings.listen.cli_binary(runtime),
        default,
        d.name,
        d.config_key,
        path_var,
    )
}

/// The configured CLI's binary as it is now (`None`: not found, or no CLI). The listener keeps
/// the stamp from when the runtime became unusable and tries again once it differs.
pub fn binary_stamp(settings: &Settings) -> Option<agent_cli::BinaryStamp> {
    let path = cli_binary(settings, settings.listen.runtime).ok()?;
    agent_cli::stamp(&path)
}

/// Judges a finished run from how it ended and its captured output (stdout and stderr, as logged).
pub fn judge(runtime: RuntimeKind, end: &ProcessEnd, output: &[u8]) -> RunOutcome {
    (implementation(runtime).judge)(end, output)
}

/// The variables that tie a run to the listener's context, shared by every runtime.
pub fn common_env(ctx: &RunContext<'_>) -> Vec<(String, String)> {
    vec![
        ("AGENTCHAT_HANDLE".into(), ctx.handle.to_string()),
        ("AGENTCHAT_API_BASE".into(), ctx.settings.api_base.clone()),
        ("AGENTCHAT_CYCLE_ID".into(), ctx.cycle_id.to_string()),
        ("AGENTCHAT_WAKE_REASONS".into(), ctx.wake_reasons.join(",")),
        ("AGENTCHAT_RUN_KIND".into(), ctx.kind.as_str().to_string()),
    ]
}

/// The part of `vars` a run inherits: the allowlist of `core::run_env` and the profile's
/// `env_pass` (a name that is not UTF-8 matches no pattern and stays behind).
pub fn inherited(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    env_pass: &[String],
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    vars.filter(|(k, _)| {
        k.to_str()
            .is_some_and(|k| crate::core::run_env::passes(k, env_pass))
    })
    .collect()
}

/// What a Claude Code or Codex run must not inherit: systemd's variables and both CLIs'
/// nested-session markers. Both sets go for either CLI: a listener started from a Codex shell may
/// run Claude Code and the other way round, and the run's own tools may start the other CLI.
pub fn cli_env_remove() -> Vec<String> {
    ALWAYS_REMOVED
        .iter()
        .chain(claude::NESTED_SESSION_VARS)
        .chain(codex::NESTED_SESSION_VARS)
        .map(|s| s.to_string())
        .collect()
}

/// Variables never passed to a run: systemd's, so the child cannot notify as us.
pub const ALWAYS_REMOVED: &[&str] = &[
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
];

#[cfg(test)]
mod tests {
    use super::inherited;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn a_run_inherits_the_allowlist_and_env_pass_only() {
        let vars = [
            ("PATH", "/bin"),
            ("DEPLOY_TOKEN", "t"),
            ("AGENTCHAT_API_KEY", "k"),
            ("GITHUB_TOKEN", "g"),
            ("NOTIFY_SOCKET", "/run/n"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let odd = (OsString::from_vec(vec![0xff, b'X']), OsString::from("v"));
        let got = inherited(vars.into_iter().chain([odd]), &["GITHUB_TOKEN".to_string()]);
        let names: Vec<_> = got.iter().map(|(k, _)| k.to_string_lossy()).collect();
        assert_eq!(names, ["PATH", "GITHUB_TOKEN"]);
    }
}

//! Layered configuration: defaults < file < environment (`AGENTCHAT_*`) < flags, per profile.
//! `resolve` is pure (it takes the environment as a map) so precedence is tested without touching
//! the process environment.
//!
//! - `value`: one rule per setting (URL, duration and its bounds, log filter, choices, paths),
//!   shared by the file, the environment and the flags.
//! - `file`: the config file's shape as serde types, with errors that name the key path.
//! - `env`: the process environment without panics, and the environment's layer.
//! - `keys`: each key defined once, the top level's and `[listen]`'s, `[listen.claude]`'s and
//!   `[listen.codex]`'s (its shape, its "did you mean" name, its layer field and rule, its
//!   setting and default, its variable and flag).
//! - `hint`: "did you mean" for an unknown key, and the name of a key set twice.
//! - `layer`: how sources stack (`layer!`; each table's layer is declared in `keys`), and a
//!   value with the key that set it (`Sourced`).
//! - `resolve`: the profile, the merge, defaults and bounds, `advice`.
//! - `load`: the reads: the config file (capped, counted) and the key file.
//! - `config_file`: [`ConfigFile`], the config file read once, answering every command: the
//!   profiles it names, which ones `listen --all` runs, a profile's settings, the top level.

mod config_file;
mod env;
mod file;
mod hint;
mod keys;
mod layer;
mod load;
mod resolve;
pub mod value;

pub use config_file::{ConfigFile, KeyFile, ProfileSet, Source};
pub use env::{
    ALLOW_CLEARTEXT, TEST_TIME_SCALE, VARIABLES, integration_switch, process_env, read_process_env,
};
pub use keys::{ClaudeSettings, CodexSettings, ListenSettings};
pub use load::{config_file_path, file_reads, read_key_file};
pub use resolve::{
    absolute_paths, advice, check_profile_name, default_state_base, profile_name, resolve,
    state_dir,
};

use secrecy::SecretString;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_API_BASE: &str = "https://api.agentchat.me";

pub use crate::core::runtime_kind::RuntimeKind;

/// How the listener's log lines look: `text` for people, `json` (one object per line) for
/// machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Where the API key came from (never the key itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Env,
    File(PathBuf),
    Config,
    Missing,
}

/// Claude Code's MCP wiring: ours (a config file per profile) or the user's own setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum McpMode {
    Listener,
    User,
}

impl ListenSettings {
    /// The program the config names for a CLI runtime (`listen.claude.binary`,
    /// `listen.codex.binary`); `None` when unset, and always for the script runtime, whose
    /// program is `command`'s first item.
    pub fn cli_binary(&self, runtime: RuntimeKind) -> Option<&Path> {
        match runtime {
            RuntimeKind::ClaudeCode => self.claude.binary.as_deref(),
            RuntimeKind::Codex => self.codex.binary.as_deref(),
            RuntimeKind::Script => None,
        }
    }
}

/// Everything `listen` needs, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub profile: String,
    pub config_path: Option<PathBuf>,
    pub api_base: String,
    /// `api_base` as it was written when it ended with `/v1`, which was dropped
    /// (`value::api_base_without_v1`); `advice` says so once.
    pub api_base_written: Option<String>,
    /// `allow_cleartext` (`AGENTCHAT_ALLOW_CLEARTEXT`): an `http://` `api_base` beyond loopback
    /// is allowed, and the key travels in clear text.
    pub allow_cleartext: bool,
    pub api_key: Option<SecretString>,
    pub key_source: KeySource,
    pub state_dir: PathBuf,
    /// A level or a `target=level` filter, checked by `value::log_filter`
    /// (`log_level`, `AGENTCHAT_LOG`).
    pub log_level: String,
    pub log_format: LogFormat,
    pub listen: ListenSettings,
    /// `AGENTCHAT_TEST_TIME_SCALE` as decided against `api_base`.
    pub time_scale: TestTimeScale,
}

/// `AGENTCHAT_TEST_TIME_SCALE` (tests and `agentchat demo`): divides the listener's own fixed
/// timers (invite-rule pace, key-refused retry, status and texts refresh, the ordinary reconnect
/// backoff), never the server's `retry_after` (contract 3.4). Honoured only when
/// `api_base` is a loopback address, so a listener pointed at a real server never shortens a
/// contract timer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TestTimeScale {
    /// Not set, or 1.
    Off,
    /// In effect: `api_base` is a loopback address.
    On(f64),
    /// Set, but `api_base` is not a loopback address: timers run as the contract sets them.
    Ignored(f64),
}

impl TestTimeScale {
    /// The factor timers are divided by: 1 unless in effect.
    pub fn factor(self) -> f64 {
        match self {
            TestTimeScale::On(s) => s,
            TestTimeScale::Off | TestTimeScale::Ignored(_) => 1.0,
        }
    }

    /// `d / factor`, at least 1 ms, and never a panic on an absurd scale (saturates at a day):
    /// `core::reconnect::scaled`, the rule the reconnect backoff is scaled by.
    pub fn apply(self, d: Duration) -> Duration {
        crate::core::reconnect::scaled(d, self.factor()).max(Duration::from_millis(1))
    }

    /// The invite rule's pace between single runs (`SINGLE_RUN_PACE_MS`), scaled.
    pub fn invite_pace_ms(self) -> u64 {
        self.apply(Duration::from_millis(
            crate::core::invite_rule::SINGLE_RUN_PACE_MS,
        ))
        .as_millis() as u64
    }

    /// The line to log once at start while the scale is in effect.
    pub fn notice(self) -> Option<String> {
        match self {
            TestTimeScale::On(s) => Some(format!(
                "{TEST_TIME_SCALE}={s} is in effect (api_base is a loopback address): the \
                 listener's own timers (invite pace, key-refused retry, status and texts \
                 refresh, the ordinary reconnect backoff) run {s} times faster; the server's \
                 retry_after is never shortened"
            )),
            _ => None,
        }
    }
}

/// The flags every profile-aware command takes. Flags win over the environment, which wins over
/// the file. Each help text ends with the variable it stands for, `[env: NAME]` as clap writes it
/// (config reads the variables itself, so clap's own `env` is not used: an empty one counts as
/// unset, `config::env`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// Config file (default: config.toml in the platform config dir) [env: AGENTCHAT_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Profile: its own config section, state dir, lock and status (default "default")
    /// [env: AGENTCHAT_PROFILE].
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// State dir override [env: AGENTCHAT_STATE_DIR].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The agent's runtime [env: AGENTCHAT_RUNTIME].
    #[arg(long, value_name = "RUNTIME", value_parser = value::runtime_parser(), ignore_case = true)]
    pub runtime: Option<RuntimeKind>,
    /// API base URL [env: AGENTCHAT_API_BASE].
    #[arg(long, value_name = "URL")]
    pub api_base: Option<String>,
    /// Serve /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9464 (listen only)
    /// [env: AGENTCHAT_METRICS_ADDR].
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
}

/// Why the settings cannot be resolved. Each message names the key, variable, flag or file to
/// fix, and never the key's value. The OS error of a failed read is part of the message (and not
/// a `source`), so a chain printed with `{:#}` shows it once.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A key the file set that we do not know; the message names it with its table path.
    #[error("unknown config key `{0}`{hint}", hint = hint::did_you_mean(.0))]
    UnknownKey(String),
    #[error("bad value for `{key}`: {problem}")]
    BadValue { key: String, problem: String },
    #[error("cannot read the config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: {message}")]
    Toml { path: PathBuf, message: String },
    /// The key file named by `api_key_file`: missing, unreadable, readable by others or empty.
    #[error("the key file {path} (`api_key_file`) {problem}")]
    KeyFile { path: PathBuf, problem: String },
    /// A profile other than `default` without its `[profiles.<name>]` table.
    #[error("{}", unknown_profile(name, file.as_deref(), known))]
    UnknownProfile {
        name: String,
        /// The config file read, if any.
        file: Option<PathBuf>,
        /// The profiles it defines.
        known: Vec<String>,
    },
    /// One of the variables the config reads is not valid UTF-8.
    #[error(
        "the environment variable {name} is not valid UTF-8; set it again as UTF-8 text or unset it"
    )]
    NotUnicode { name: String },
}

fn unknown_profile(name: &str, file: Option<&Path>, known: &[String]) -> String {
    let defined = if known.is_empty() {
        "only `default` exists".to_string()
    } else {
        let names: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
        format!("the profiles are `default`, {}", names.join(", "))
    };
    match file {
        Some(f) => format!(
            "profile `{name}` is not defined: {} has no [profiles.{name}] table ({defined}); \
             `agentchat setup --profile {name}` adds it",
            f.display()
        ),
        None => format!(
            "profile `{name}` is not defined: no config file was read, so {defined}; \
             `agentchat setup --profile {name}` writes one (or add a [profiles.{name}] table to \
             the config file)"
        ),
    }
}

/// Whether the integration is switched off (`AGENTCHAT_INTEGRATION=off`, or the deprecated
/// `AGENTCHAT_DOORBELL=off` until 2027-02-01).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntegrationSwitch {
    On,
    Off,
    /// Off through the deprecated variable; the string is the warning to log.
    OffDeprecated(String),
    /// The deprecated variable after its removal date: ignored; the string is the warning.
    IgnoredDeprecated(String),
}

/// The profile used when none is chosen; its settings are the file's top level.
pub const DEFAULT_PROFILE: &str = "default";

/// From this day (UTC) the deprecated `AGENTCHAT_DOORBELL=off` is ignored (contract, deprecations).
pub const DOORBELL_REMOVAL_DATE: &str = "2027-02-01";

/// A run's grace between SIGTERM and SIGKILL when the config sets no `listen.kill_grace`.
pub const DEFAULT_KILL_GRACE: Duration = value::KILL_GRACE.default;

/// Every profile's launchd label starts with this (`me.agentchat.listen`, or
/// `me.agentchat.listen.<profile>`). launchd passes the label to the job as `XPC_SERVICE_NAME`,
/// which is how `listen` knows launchd started it; `service` names the agents with it.
pub const LAUNCHD_LABEL_PREFIX: &str = "me.agentchat.listen";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_scale_divides_and_never_gives_a_zero_timer() {
        let s = TestTimeScale::On(20.0);
        assert_eq!(s.apply(Duration::from_secs(60)), Duration::from_secs(3));
        // Ignored or off, the contract's timer stands.
        assert_eq!(
            TestTimeScale::Ignored(20.0).apply(Duration::from_secs(60)),
            Duration::from_secs(60)
        );
        // Absurd but valid scales neither panic nor give a zero timer.
        assert_eq!(
            TestTimeScale::On(1e-300).apply(Duration::from_secs(60)),
            Duration::from_secs(86_400)
        );
        assert_eq!(
            TestTimeScale::On(1e300).apply(Duration::from_secs(60)),
            Duration::from_millis(1)
        );
    }
}

//! Layered configuration: defaults < file < environment (`AGENTCHAT_*`) < flags, per profile.
//! `resolve` is pure (it takes the environment as a map) so precedence is tested without touching
//! the process environment.

use secrecy::SecretString;
use std::path::PathBuf;
use std::time::Duration;

pub const DEFAULT_API_BASE: &str = "https://api.agentchat.me";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    ClaudeCode,
    Codex,
    Script,
}

impl RuntimeKind {
    /// The name used in config, flags and `GET /v1/texts?runtime=`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::ClaudeCode => "claude-code",
            RuntimeKind::Codex => "codex",
            RuntimeKind::Script => "script",
        }
    }
    /// The texts runtime this runtime reads (`generic` for scripts).
    pub fn texts_runtime(self) -> &'static str {
        match self {
            RuntimeKind::ClaudeCode => "claude-code",
            RuntimeKind::Codex => "codex",
            RuntimeKind::Script => "generic",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpMode {
    Listener,
    User,
}

#[derive(Debug, Clone)]
pub struct ClaudeSettings {
    /// `claude` on PATH unless set.
    pub binary: Option<PathBuf>,
    pub extra_args: Vec<String>,
    pub mcp: McpMode,
    /// `<api_base>/mcp` unless set.
    pub mcp_url: Option<String>,
}

#[derive(Debug, Clone)]
pub struct CodexSettings {
    pub binary: Option<PathBuf>,
    pub extra_args: Vec<String>,
    pub mcp_url: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ListenSettings {
    pub runtime: RuntimeKind,
    /// argv for the `script` runtime.
    pub command: Vec<String>,
    /// The runs' working directory; a folder in the state dir when unset.
    pub workdir: Option<PathBuf>,
    pub run_timeout: Duration,
    pub kill_grace: Duration,
    pub quiet_window: Duration,
    pub max_delay: Duration,
    /// Give the script runtime the key in `AGENTCHAT_API_KEY`.
    pub script_gets_key: bool,
    /// Keep the identity block current in CLAUDE.md / AGENTS.md inside `workdir`.
    pub identity_block: bool,
    /// Newest run logs kept.
    pub run_logs_keep: usize,
    /// No inbound traffic for this long drops the socket.
    pub idle_timeout: Duration,
    pub claude: ClaudeSettings,
    pub codex: CodexSettings,
}

/// Everything `listen` needs, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub profile: String,
    pub config_path: Option<PathBuf>,
    pub api_base: String,
    pub api_key: Option<SecretString>,
    pub key_source: KeySource,
    pub state_dir: PathBuf,
    pub log_level: String,
    pub log_format: LogFormat,
    pub listen: ListenSettings,
}

/// The flags every profile-aware command takes. Flags win over the environment, which wins over
/// the file.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// Config file (default: config.toml in the platform config dir; env AGENTCHAT_CONFIG).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Profile: its own config section, state dir, lock and status (default "default").
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// State dir override (env AGENTCHAT_STATE_DIR).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// claude-code | codex | script.
    #[arg(long, value_name = "RUNTIME")]
    pub runtime: Option<String>,
    /// API base URL (env AGENTCHAT_API_BASE).
    #[arg(long, value_name = "URL")]
    pub api_base: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A key the file or environment set that we do not know; the message names it.
    #[error("unknown config key `{0}`")]
    UnknownKey(String),
    #[error("bad value for `{key}`: {problem}")]
    BadValue { key: String, problem: String },
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: {message}")]
    Toml { path: PathBuf, message: String },
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

/// Resolves settings from flags, an environment map and the config file's text (if any).
/// Pure: no process environment, no file reads.
pub fn resolve(
    args: &ConfigArgs,
    env: &std::collections::HashMap<String, String>,
    file: Option<(&std::path::Path, &str)>,
) -> Result<Settings, ConfigError> {
    let _ = (args, env, file);
    todo!("ops: config resolve")
}

/// Reads the config file (if any) and the process environment, then `resolve`s.
pub fn load(args: &ConfigArgs) -> Result<Settings, ConfigError> {
    let _ = args;
    todo!("ops: config load")
}

/// Reads the integration switch from an environment map, on `today` (UTC, `YYYY-MM-DD`).
pub fn integration_switch(
    env: &std::collections::HashMap<String, String>,
    today: &str,
) -> IntegrationSwitch {
    let _ = (env, today);
    todo!("ops: integration switch")
}

//! Layered configuration: defaults < file < environment (`AGENTCHAT_*`) < flags, per profile.
//! `resolve` is pure (it takes the environment as a map) so precedence is tested without touching
//! the process environment.

use secrecy::SecretString;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
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
    /// Where `/metrics`, `/healthz` and `/readyz` are served (`listen.metrics_addr`,
    /// `AGENTCHAT_METRICS_ADDR`, `--metrics-addr`); off when unset.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// `listen.metrics_public`: allows a `metrics_addr` that is not loopback.
    pub metrics_public: bool,
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
    /// Serve /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9464 (listen only;
    /// env AGENTCHAT_METRICS_ADDR).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
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

/// The profile used when none is chosen; its settings are the file's top level.
pub const DEFAULT_PROFILE: &str = "default";

/// From this day (UTC) the deprecated `AGENTCHAT_DOORBELL=off` is ignored (contract, deprecations).
pub const DOORBELL_REMOVAL_DATE: &str = "2027-02-01";

/// A run's grace between SIGTERM and SIGKILL when the config sets no `listen.kill_grace`.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);

const KNOWN_TOP: &[&str] = &[
    "api_base",
    "api_key_file",
    "api_key",
    "log_level",
    "log_format",
    "listen",
    "profiles",
];
const KNOWN_LISTEN: &[&str] = &[
    "runtime",
    "command",
    "workdir",
    "run_timeout",
    "kill_grace",
    "quiet_window",
    "max_delay",
    "idle_timeout",
    "script_gets_key",
    "identity_block",
    "run_logs_keep",
    "metrics_addr",
    "metrics_public",
    "claude",
    "codex",
];
const KNOWN_CLAUDE: &[&str] = &["binary", "extra_args", "mcp", "mcp_url"];
const KNOWN_CODEX: &[&str] = &["binary", "extra_args", "mcp_url"];

/// What one source (the file's top level, a profile table, the environment, the flags) sets.
/// Every field is optional so a layer overrides only what it names. Deliberately not `Debug`:
/// it may hold the key.
#[derive(Default)]
struct Layer {
    api_base: Option<String>,
    api_key_file: Option<PathBuf>,
    api_key: Option<SecretString>,
    log_level: Option<String>,
    log_format: Option<LogFormat>,
    runtime: Option<RuntimeKind>,
    command: Option<Vec<String>>,
    workdir: Option<PathBuf>,
    run_timeout: Option<Duration>,
    kill_grace: Option<Duration>,
    quiet_window: Option<Duration>,
    max_delay: Option<Duration>,
    idle_timeout: Option<Duration>,
    script_gets_key: Option<bool>,
    identity_block: Option<bool>,
    run_logs_keep: Option<usize>,
    metrics_addr: Option<std::net::SocketAddr>,
    metrics_public: Option<bool>,
    claude_binary: Option<PathBuf>,
    claude_extra_args: Option<Vec<String>>,
    claude_mcp: Option<McpMode>,
    claude_mcp_url: Option<String>,
    codex_binary: Option<PathBuf>,
    codex_extra_args: Option<Vec<String>>,
    codex_mcp_url: Option<String>,
}

impl Layer {
    /// `self` wins wherever it sets a value.
    fn over(self, base: Layer) -> Layer {
        Layer {
            api_base: self.api_base.or(base.api_base),
            api_key_file: self.api_key_file.or(base.api_key_file),
            api_key: self.api_key.or(base.api_key),
            log_level: self.log_level.or(base.log_level),
            log_format: self.log_format.or(base.log_format),
            runtime: self.runtime.or(base.runtime),
            command: self.command.or(base.command),
            workdir: self.workdir.or(base.workdir),
            run_timeout: self.run_timeout.or(base.run_timeout),
            kill_grace: self.kill_grace.or(base.kill_grace),
            quiet_window: self.quiet_window.or(base.quiet_window),
            max_delay: self.max_delay.or(base.max_delay),
            idle_timeout: self.idle_timeout.or(base.idle_timeout),
            script_gets_key: self.script_gets_key.or(base.script_gets_key),
            identity_block: self.identity_block.or(base.identity_block),
            run_logs_keep: self.run_logs_keep.or(base.run_logs_keep),
            metrics_addr: self.metrics_addr.or(base.metrics_addr),
            metrics_public: self.metrics_public.or(base.metrics_public),
            claude_binary: self.claude_binary.or(base.claude_binary),
            claude_extra_args: self.claude_extra_args.or(base.claude_extra_args),
            claude_mcp: self.claude_mcp.or(base.claude_mcp),
            claude_mcp_url: self.claude_mcp_url.or(base.claude_mcp_url),
            codex_binary: self.codex_binary.or(base.codex_binary),
            codex_extra_args: self.codex_extra_args.or(base.codex_extra_args),
            codex_mcp_url: self.codex_mcp_url.or(base.codex_mcp_url),
        }
    }
}

fn bad(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::BadValue {
        key: key.to_string(),
        problem: problem.into(),
    }
}

fn join_key(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Rejects the first key of `table` not in `known`, naming it with its table path.
fn check_known(table: &toml::Table, prefix: &str, known: &[&str]) -> Result<(), ConfigError> {
    match table.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(ConfigError::UnknownKey(join_key(prefix, k))),
        None => Ok(()),
    }
}

fn want_str(v: &toml::Value, key: &str) -> Result<String, ConfigError> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| bad(key, format!("expected a string, found {}", v.type_str())))
}

fn want_nonempty_str(v: &toml::Value, key: &str) -> Result<String, ConfigError> {
    let s = want_str(v, key)?;
    if s.trim().is_empty() {
        return Err(bad(key, "must not be empty"));
    }
    Ok(s)
}

fn want_bool(v: &toml::Value, key: &str) -> Result<bool, ConfigError> {
    v.as_bool().ok_or_else(|| {
        bad(
            key,
            format!("expected true or false, found {}", v.type_str()),
        )
    })
}

fn want_str_array(v: &toml::Value, key: &str) -> Result<Vec<String>, ConfigError> {
    let arr = v.as_array().ok_or_else(|| {
        bad(
            key,
            format!("expected an array of strings, found {}", v.type_str()),
        )
    })?;
    arr.iter()
        .enumerate()
        .map(|(i, item)| {
            item.as_str().map(str::to_string).ok_or_else(|| {
                bad(
                    key,
                    format!("item {i} is {}, expected a string", item.type_str()),
                )
            })
        })
        .collect()
}

fn want_table<'a>(v: &'a toml::Value, key: &str) -> Result<&'a toml::Table, ConfigError> {
    v.as_table()
        .ok_or_else(|| bad(key, format!("expected a table, found {}", v.type_str())))
}

/// Parses a humantime duration (`"3s"`, `"15m"`, `"1h 30m"`).
pub fn parse_duration(raw: &str, key: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(raw.trim()).map_err(|e| {
        bad(
            key,
            format!("`{raw}` is not a duration ({e}); write e.g. \"3s\", \"15m\" or \"1h\""),
        )
    })
}

fn want_duration(v: &toml::Value, key: &str) -> Result<Duration, ConfigError> {
    let s = v.as_str().ok_or_else(|| {
        bad(
            key,
            format!(
                "expected a duration string such as \"3s\" or \"15m\", found {}",
                v.type_str()
            ),
        )
    })?;
    parse_duration(s, key)
}

fn parse_runtime(raw: &str, key: &str) -> Result<RuntimeKind, ConfigError> {
    match raw.trim() {
        "claude-code" => Ok(RuntimeKind::ClaudeCode),
        "codex" => Ok(RuntimeKind::Codex),
        "script" => Ok(RuntimeKind::Script),
        other => Err(bad(
            key,
            format!("`{other}` is not a runtime; use claude-code, codex or script"),
        )),
    }
}

/// Parses `text` or `json`.
pub fn parse_log_format(raw: &str, key: &str) -> Result<LogFormat, ConfigError> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(bad(
            key,
            format!("`{other}` is not a log format; use text or json"),
        )),
    }
}

fn parse_log_level(raw: &str, key: &str) -> Result<String, ConfigError> {
    let level = raw.trim().to_ascii_lowercase();
    match level.as_str() {
        "error" | "warn" | "info" | "debug" | "trace" => Ok(level),
        _ => Err(bad(
            key,
            format!("`{raw}` is not a log level; use error, warn, info, debug or trace"),
        )),
    }
}

/// An `ip:port` to serve on (`127.0.0.1:9464`, `[::1]:9464`).
fn parse_socket_addr(raw: &str, key: &str) -> Result<std::net::SocketAddr, ConfigError> {
    raw.trim().parse().map_err(|_| {
        bad(
            key,
            format!("`{raw}` is not an address with a port, like 127.0.0.1:9464"),
        )
    })
}

/// Checks an API base URL and drops trailing slashes, so `{api_base}/v1/...` joins cleanly.
fn parse_api_base(raw: &str, key: &str) -> Result<String, ConfigError> {
    let trimmed = raw.trim().trim_end_matches('/');
    let url =
        reqwest::Url::parse(trimmed).map_err(|e| bad(key, format!("`{raw}` is not a URL: {e}")))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(bad(
            key,
            format!("`{raw}` must start with https:// (or http:// for a local server)"),
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad(key, format!("`{raw}` has no host")));
    }
    Ok(trimmed.to_string())
}

/// `~` and `~/x` use `HOME`; other relative paths are relative to `base` (the config file's folder).
fn expand_path(
    raw: &str,
    key: &str,
    base: Option<&Path>,
    env: &HashMap<String, String>,
) -> Result<PathBuf, ConfigError> {
    if raw.trim().is_empty() {
        return Err(bad(key, "must not be empty"));
    }
    let path = if raw == "~" || raw.starts_with("~/") {
        let home = env
            .get("HOME")
            .filter(|h| !h.is_empty())
            .ok_or_else(|| bad(key, "starts with ~ but HOME is not set"))?;
        PathBuf::from(home).join(raw.trim_start_matches('~').trim_start_matches('/'))
    } else {
        PathBuf::from(raw)
    };
    Ok(match base {
        Some(b) if path.is_relative() => b.join(path),
        _ => path,
    })
}

/// A binary is looked up on PATH when bare (`claude`), else expanded like any path.
fn expand_binary(
    raw: &str,
    key: &str,
    base: Option<&Path>,
    env: &HashMap<String, String>,
) -> Result<PathBuf, ConfigError> {
    if raw.contains('/') {
        expand_path(raw, key, base, env)
    } else if raw.trim().is_empty() {
        Err(bad(key, "must not be empty"))
    } else {
        Ok(PathBuf::from(raw))
    }
}

/// Parses one settings table (the top level or `profiles.<name>`), every key named by its full path.
fn parse_layer(
    table: &toml::Table,
    prefix: &str,
    base: Option<&Path>,
    env: &HashMap<String, String>,
) -> Result<Layer, ConfigError> {
    let known: Vec<&str> = if prefix.is_empty() {
        KNOWN_TOP.to_vec()
    } else {
        KNOWN_TOP
            .iter()
            .copied()
            .filter(|k| *k != "profiles")
            .collect()
    };
    check_known(table, prefix, &known)?;
    let k = |name: &str| join_key(prefix, name);
    let mut layer = Layer::default();
    if let Some(v) = table.get("api_base") {
        let key = k("api_base");
        layer.api_base = Some(parse_api_base(&want_str(v, &key)?, &key)?);
    }
    if let Some(v) = table.get("api_key_file") {
        let key = k("api_key_file");
        layer.api_key_file = Some(expand_path(&want_str(v, &key)?, &key, base, env)?);
    }
    if let Some(v) = table.get("api_key") {
        let key = k("api_key");
        // Never echo the value: only its type can be named.
        let s = want_nonempty_str(v, &key)?;
        layer.api_key = Some(SecretString::from(s.trim().to_string()));
    }
    if let Some(v) = table.get("log_level") {
        let key = k("log_level");
        layer.log_level = Some(parse_log_level(&want_str(v, &key)?, &key)?);
    }
    if let Some(v) = table.get("log_format") {
        let key = k("log_format");
        layer.log_format = Some(parse_log_format(&want_str(v, &key)?, &key)?);
    }
    if let Some(v) = table.get("listen") {
        let lp = k("listen");
        parse_listen(want_table(v, &lp)?, &lp, base, env, &mut layer)?;
    }
    Ok(layer)
}

fn parse_listen(
    t: &toml::Table,
    prefix: &str,
    base: Option<&Path>,
    env: &HashMap<String, String>,
    layer: &mut Layer,
) -> Result<(), ConfigError> {
    check_known(t, prefix, KNOWN_LISTEN)?;
    let k = |name: &str| join_key(prefix, name);
    if let Some(v) = t.get("runtime") {
        let key = k("runtime");
        layer.runtime = Some(parse_runtime(&want_str(v, &key)?, &key)?);
    }
    if let Some(v) = t.get("command") {
        let key = k("command");
        let mut argv = want_str_array(v, &key)?;
        if let Some(first) = argv.first_mut() {
            if first.trim().is_empty() {
                return Err(bad(&key, "the program (first item) must not be empty"));
            }
            // Like `binary`: bare names are looked up on PATH at run time, paths are made
            // absolute against the config file's folder.
            let program = expand_binary(first, &key, base, env)?;
            *first = program.to_string_lossy().into_owned();
        }
        layer.command = Some(argv);
    }
    if let Some(v) = t.get("workdir") {
        let key = k("workdir");
        layer.workdir = Some(expand_path(&want_str(v, &key)?, &key, base, env)?);
    }
    let durations: [(&str, &mut Option<Duration>, bool); 5] = [
        ("run_timeout", &mut layer.run_timeout, false),
        ("kill_grace", &mut layer.kill_grace, true),
        ("quiet_window", &mut layer.quiet_window, true),
        ("max_delay", &mut layer.max_delay, false),
        ("idle_timeout", &mut layer.idle_timeout, false),
    ];
    for (name, slot, zero_ok) in durations {
        if let Some(v) = t.get(name) {
            let key = k(name);
            let d = want_duration(v, &key)?;
            if d.is_zero() && !zero_ok {
                return Err(bad(&key, "must be longer than zero"));
            }
            *slot = Some(d);
        }
    }
    if let Some(v) = t.get("script_gets_key") {
        layer.script_gets_key = Some(want_bool(v, &k("script_gets_key"))?);
    }
    if let Some(v) = t.get("identity_block") {
        layer.identity_block = Some(want_bool(v, &k("identity_block"))?);
    }
    if let Some(v) = t.get("metrics_addr") {
        let key = k("metrics_addr");
        layer.metrics_addr = Some(parse_socket_addr(&want_str(v, &key)?, &key)?);
    }
    if let Some(v) = t.get("metrics_public") {
        layer.metrics_public = Some(want_bool(v, &k("metrics_public"))?);
    }
    if let Some(v) = t.get("run_logs_keep") {
        let key = k("run_logs_keep");
        let n = v
            .as_integer()
            .ok_or_else(|| bad(&key, format!("expected a number, found {}", v.type_str())))?;
        if n < 1 {
            return Err(bad(
                &key,
                format!("{n} is too small; keep at least 1 run log"),
            ));
        }
        layer.run_logs_keep = Some(usize::try_from(n).map_err(|_| bad(&key, "is too large"))?);
    }
    if let Some(v) = t.get("claude") {
        let cp = k("claude");
        let c = want_table(v, &cp)?;
        check_known(c, &cp, KNOWN_CLAUDE)?;
        let ck = |name: &str| join_key(&cp, name);
        if let Some(v) = c.get("binary") {
            let key = ck("binary");
            layer.claude_binary = Some(expand_binary(&want_str(v, &key)?, &key, base, env)?);
        }
        if let Some(v) = c.get("extra_args") {
            layer.claude_extra_args = Some(want_str_array(v, &ck("extra_args"))?);
        }
        if let Some(v) = c.get("mcp") {
            let key = ck("mcp");
            layer.claude_mcp = Some(match want_str(v, &key)?.trim() {
                "listener" => McpMode::Listener,
                "user" => McpMode::User,
                other => {
                    return Err(bad(
                        &key,
                        format!("`{other}` is not an MCP mode; use \"listener\" or \"user\""),
                    ));
                }
            });
        }
        if let Some(v) = c.get("mcp_url") {
            let key = ck("mcp_url");
            layer.claude_mcp_url = Some(parse_api_base(&want_str(v, &key)?, &key)?);
        }
    }
    if let Some(v) = t.get("codex") {
        let cp = k("codex");
        let c = want_table(v, &cp)?;
        check_known(c, &cp, KNOWN_CODEX)?;
        let ck = |name: &str| join_key(&cp, name);
        if let Some(v) = c.get("binary") {
            let key = ck("binary");
            layer.codex_binary = Some(expand_binary(&want_str(v, &key)?, &key, base, env)?);
        }
        if let Some(v) = c.get("extra_args") {
            layer.codex_extra_args = Some(want_str_array(v, &ck("extra_args"))?);
        }
        if let Some(v) = c.get("mcp_url") {
            let key = ck("mcp_url");
            layer.codex_mcp_url = Some(parse_api_base(&want_str(v, &key)?, &key)?);
        }
    }
    Ok(())
}

/// Line and column (1-based) of a byte offset, for TOML errors. An offset inside a multi-byte
/// character counts as that character (slicing there would panic on the user's file).
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// The file's layer for `profile`: `[profiles.<profile>]` over the top level. Every profile table is
/// checked, so a typo in a profile not in use is still reported.
fn file_layer(
    path: &Path,
    text: &str,
    profile: &str,
    env: &HashMap<String, String>,
) -> Result<Layer, ConfigError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        // The message only: toml's full rendering quotes the offending line, which may hold the key.
        let message = match e.span() {
            Some(span) => {
                let (line, col) = line_col(text, span.start);
                format!("line {line}, column {col}: {}", e.message().trim())
            }
            None => e.message().trim().to_string(),
        };
        ConfigError::Toml {
            path: path.to_path_buf(),
            message,
        }
    })?;
    let base = path.parent();
    let top = parse_layer(&table, "", base, env)?;
    let mut chosen = None;
    if let Some(v) = table.get("profiles") {
        let profiles = want_table(v, "profiles")?;
        for (name, body) in profiles {
            let prefix = format!("profiles.{name}");
            validate_profile_name(name, &prefix)?;
            let layer = parse_layer(want_table(body, &prefix)?, &prefix, base, env)?;
            if name == profile {
                chosen = Some(layer);
            }
        }
    }
    Ok(match chosen {
        Some(p) => p.over(top),
        None => top,
    })
}

/// Every profile's launchd label starts with this (`me.agentchat.listen`, or
/// `me.agentchat.listen.<profile>`). launchd passes the label to the job as `XPC_SERVICE_NAME`,
/// which is how `listen` knows launchd started it; `service` names the agents with it.
pub const LAUNCHD_LABEL_PREFIX: &str = "me.agentchat.listen";

/// The profile-name rule every command shares (config, state dir, service unit names and labels),
/// so a profile `listen` accepts can always be installed as a service and the reverse.
pub fn check_profile_name(name: &str) -> Result<(), ConfigError> {
    validate_profile_name(name, "--profile")
}

/// Profile names become directory names: letters, digits, `-`, `_` and `.`, not starting with `.`.
fn validate_profile_name(name: &str, key: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(bad(
            key,
            format!(
                "`{name}` is not a usable profile name (letters, digits, '-', '_' and '.', at most 64, not starting with '.')"
            ),
        ))
    }
}

fn env_value<'a>(env: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    env.get(name).map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// The environment's layer (`AGENTCHAT_API_BASE`, `AGENTCHAT_RUNTIME`, `AGENTCHAT_LOG`,
/// `AGENTCHAT_LOG_FORMAT`). The key is handled apart (it outranks every key source).
fn env_layer(env: &HashMap<String, String>) -> Result<Layer, ConfigError> {
    let mut layer = Layer::default();
    if let Some(v) = env_value(env, "AGENTCHAT_API_BASE") {
        layer.api_base = Some(parse_api_base(v, "AGENTCHAT_API_BASE")?);
    }
    if let Some(v) = env_value(env, "AGENTCHAT_RUNTIME") {
        layer.runtime = Some(parse_runtime(v, "AGENTCHAT_RUNTIME")?);
    }
    if let Some(v) = env_value(env, "AGENTCHAT_LOG") {
        layer.log_level = Some(parse_log_level(v, "AGENTCHAT_LOG")?);
    }
    if let Some(v) = env_value(env, "AGENTCHAT_LOG_FORMAT") {
        layer.log_format = Some(parse_log_format(v, "AGENTCHAT_LOG_FORMAT")?);
    }
    if let Some(v) = env_value(env, "AGENTCHAT_METRICS_ADDR") {
        layer.metrics_addr = Some(parse_socket_addr(v, "AGENTCHAT_METRICS_ADDR")?);
    }
    Ok(layer)
}

fn flag_layer(args: &ConfigArgs) -> Result<Layer, ConfigError> {
    let mut layer = Layer::default();
    if let Some(v) = &args.api_base {
        layer.api_base = Some(parse_api_base(v, "--api-base")?);
    }
    if let Some(v) = &args.runtime {
        layer.runtime = Some(parse_runtime(v, "--runtime")?);
    }
    if let Some(v) = &args.metrics_addr {
        layer.metrics_addr = Some(parse_socket_addr(v, "--metrics-addr")?);
    }
    Ok(layer)
}

/// The chosen profile: `--profile`, else `AGENTCHAT_PROFILE`, else `default`.
pub fn profile_name(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
) -> Result<String, ConfigError> {
    let (name, key) = match (&args.profile, env_value(env, "AGENTCHAT_PROFILE")) {
        (Some(p), _) => (p.trim().to_string(), "--profile"),
        (None, Some(p)) => (p.to_string(), "AGENTCHAT_PROFILE"),
        (None, None) => (DEFAULT_PROFILE.to_string(), "profile"),
    };
    validate_profile_name(&name, key)?;
    Ok(name)
}

/// Where state lives when nothing overrides it: `$XDG_STATE_HOME/agentchat` or
/// `~/.local/state/agentchat` on Linux, the platform data-local dir elsewhere. Computed from the
/// given environment on Linux so that `resolve` stays pure.
pub fn default_state_base(env: &HashMap<String, String>) -> Option<PathBuf> {
    if cfg!(target_os = "linux") {
        if let Some(x) = env_value(env, "XDG_STATE_HOME").filter(|x| Path::new(x).is_absolute()) {
            return Some(PathBuf::from(x).join("agentchat"));
        }
        env_value(env, "HOME").map(|h| PathBuf::from(h).join(".local/state/agentchat"))
    } else {
        directories::ProjectDirs::from("", "", "agentchat").map(|d| {
            d.state_dir()
                .unwrap_or_else(|| d.data_local_dir())
                .to_path_buf()
        })
    }
}

/// The config file to read: `--config`, else `AGENTCHAT_CONFIG` (both must exist), else
/// `config.toml` in the platform config dir (optional). The bool says whether it was named
/// explicitly.
pub fn config_file_path(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
) -> Option<(PathBuf, bool)> {
    if let Some(p) = &args.config {
        return Some((p.clone(), true));
    }
    if let Some(p) = env_value(env, "AGENTCHAT_CONFIG") {
        return Some((PathBuf::from(p), true));
    }
    directories::ProjectDirs::from("", "", "agentchat")
        .map(|d| (d.config_dir().join("config.toml"), false))
}

/// Resolves settings from flags, an environment map and the config file's text (if any).
/// Pure: no process environment, no file reads. Precedence: defaults < file (top level, then
/// `[profiles.<profile>]`) < environment < flags.
///
/// The key: `AGENTCHAT_API_KEY`, else `api_key_file`, else `api_key`. A key file is only *named*
/// here (`key_source` = `File`, `api_key` = `None`); `load` reads it with [`read_key_file`].
pub fn resolve(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
    file: Option<(&Path, &str)>,
) -> Result<Settings, ConfigError> {
    let profile = profile_name(args, env)?;
    let file_layer = match file {
        Some((path, text)) => file_layer(path, text, &profile, env)?,
        None => Layer::default(),
    };
    let merged = flag_layer(args)?.over(env_layer(env)?.over(file_layer));

    let (api_key, key_source) = if let Some(k) = env_value(env, "AGENTCHAT_API_KEY") {
        (Some(SecretString::from(k.to_string())), KeySource::Env)
    } else if let Some(path) = merged.api_key_file.clone() {
        (None, KeySource::File(path))
    } else if let Some(k) = merged.api_key {
        (Some(k), KeySource::Config)
    } else {
        (None, KeySource::Missing)
    };

    let state_dir = if let Some(d) = &args.state_dir {
        d.clone()
    } else if let Some(d) = env_value(env, "AGENTCHAT_STATE_DIR") {
        PathBuf::from(d)
    } else {
        default_state_base(env)
            .ok_or_else(|| {
                bad(
                    "state_dir",
                    "no home directory to keep state in; set AGENTCHAT_STATE_DIR or --state-dir",
                )
            })?
            .join(&profile)
    };

    let listen = ListenSettings {
        runtime: merged.runtime.unwrap_or(RuntimeKind::ClaudeCode),
        command: merged.command.unwrap_or_default(),
        workdir: merged.workdir,
        run_timeout: merged.run_timeout.unwrap_or(Duration::from_secs(15 * 60)),
        kill_grace: merged.kill_grace.unwrap_or(DEFAULT_KILL_GRACE),
        quiet_window: merged.quiet_window.unwrap_or(Duration::from_secs(3)),
        max_delay: merged.max_delay.unwrap_or(Duration::from_secs(15)),
        script_gets_key: merged.script_gets_key.unwrap_or(true),
        identity_block: merged.identity_block.unwrap_or(true),
        run_logs_keep: merged.run_logs_keep.unwrap_or(50),
        idle_timeout: merged.idle_timeout.unwrap_or(Duration::from_secs(100)),
        metrics_addr: merged.metrics_addr,
        metrics_public: merged.metrics_public.unwrap_or(false),
        claude: ClaudeSettings {
            binary: merged.claude_binary,
            extra_args: merged.claude_extra_args.unwrap_or_default(),
            mcp: merged.claude_mcp.unwrap_or(McpMode::Listener),
            mcp_url: merged.claude_mcp_url,
        },
        codex: CodexSettings {
            binary: merged.codex_binary,
            extra_args: merged.codex_extra_args.unwrap_or_default(),
            mcp_url: merged.codex_mcp_url,
        },
    };

    if let Some(addr) = listen.metrics_addr
        && !addr.ip().is_loopback()
        && !listen.metrics_public
    {
        return Err(bad(
            "listen.metrics_addr",
            format!(
                "{addr} is not a loopback address; set `listen.metrics_public = true` to serve \
                 metrics beyond this machine"
            ),
        ));
    }

    Ok(Settings {
        profile,
        config_path: file.map(|(p, _)| p.to_path_buf()),
        api_base: merged
            .api_base
            .unwrap_or_else(|| DEFAULT_API_BASE.to_string()),
        api_key,
        key_source,
        state_dir,
        log_level: merged.log_level.unwrap_or_else(|| "info".to_string()),
        log_format: merged.log_format.unwrap_or(LogFormat::Text),
        listen,
    })
}

/// Settings that are valid but probably not what the user wants, as lines to log at start
/// (never containing the key).
pub fn advice(settings: &Settings) -> Vec<String> {
    let mut out = Vec::new();
    if settings.key_source == KeySource::Config {
        out.push(
            "the API key is written in the config file (`api_key`); prefer `api_key_file` \
             (chmod 600) or AGENTCHAT_API_KEY, since config files get copied and shared"
                .to_string(),
        );
    }
    if settings.key_source == KeySource::Missing {
        out.push("no API key: set AGENTCHAT_API_KEY, or `api_key_file` in the config".to_string());
    }
    let l = &settings.listen;
    if l.runtime == RuntimeKind::Script && l.command.is_empty() {
        out.push(
            "runtime is `script` but `command` under [listen] is empty: no run can start"
                .to_string(),
        );
    }
    if l.max_delay < l.quiet_window {
        out.push(format!(
            "`listen.max_delay` ({}) is shorter than `listen.quiet_window` ({}): every cycle starts \
             max_delay after its first wake",
            humantime::format_duration(l.max_delay),
            humantime::format_duration(l.quiet_window)
        ));
    }
    if l.kill_grace >= l.run_timeout {
        out.push(format!(
            "`listen.kill_grace` ({}) is not shorter than `listen.run_timeout` ({})",
            humantime::format_duration(l.kill_grace),
            humantime::format_duration(l.run_timeout)
        ));
    }
    out
}

/// Reads a key file, refusing (like ssh) one that group or others can read. The key is trimmed;
/// an empty file is an error. No error message contains the file's content.
pub fn read_key_file(path: &Path) -> Result<SecretString, ConfigError> {
    let meta = std::fs::metadata(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(bad(
                "api_key_file",
                format!(
                    "{} can be read by other users (mode {mode:04o}); run `chmod 600 {}`",
                    path.display(),
                    path.display()
                ),
            ));
        }
    }
    if !meta.is_file() {
        return Err(bad(
            "api_key_file",
            format!("{} is not a file", path.display()),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let key = text.trim();
    if key.is_empty() {
        return Err(bad("api_key_file", format!("{} is empty", path.display())));
    }
    Ok(SecretString::from(key.to_string()))
}

/// Reads the config file (if any) and the process environment, then `resolve`s; reads the key
/// file when the key comes from one.
pub fn load(args: &ConfigArgs) -> Result<Settings, ConfigError> {
    let env: HashMap<String, String> = std::env::vars().collect();
    load_with_env(args, &env)
}

/// Like `load`, but a key file is only named, never read: for commands that do not talk to the
/// server (`status`), so an unreadable key file does not stop them.
pub fn load_unkeyed(args: &ConfigArgs) -> Result<Settings, ConfigError> {
    let env: HashMap<String, String> = std::env::vars().collect();
    let text = read_config_file(args, &env)?;
    resolve(
        args,
        &env,
        text.as_ref().map(|(p, t)| (p.as_path(), t.as_str())),
    )
}

/// The config file's path and text, if there is one to read.
fn read_config_file(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
) -> Result<Option<(PathBuf, String)>, ConfigError> {
    match config_file_path(args, env) {
        Some((path, explicit)) => match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some((path, text))),
            Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ConfigError::Read { path, source }),
        },
        None => Ok(None),
    }
}

/// `load` with a given environment (for callers that already hold one, and tests).
pub fn load_with_env(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
) -> Result<Settings, ConfigError> {
    let text = read_config_file(args, env)?;
    let mut settings = resolve(
        args,
        env,
        text.as_ref().map(|(p, t)| (p.as_path(), t.as_str())),
    )?;
    if let KeySource::File(path) = &settings.key_source {
        settings.api_key = Some(read_key_file(path)?);
    }
    Ok(settings)
}

/// Reads the integration switch from an environment map, on `today` (UTC, `YYYY-MM-DD`).
pub fn integration_switch(env: &HashMap<String, String>, today: &str) -> IntegrationSwitch {
    let is_off = |name: &str| env_value(env, name).is_some_and(|v| v.eq_ignore_ascii_case("off"));
    if is_off("AGENTCHAT_INTEGRATION") {
        return IntegrationSwitch::Off;
    }
    if is_off("AGENTCHAT_DOORBELL") {
        // ISO dates compare correctly as strings.
        return if today < DOORBELL_REMOVAL_DATE {
            IntegrationSwitch::OffDeprecated(format!(
                "AGENTCHAT_DOORBELL=off is deprecated and stops working on {DOORBELL_REMOVAL_DATE}; \
                 set AGENTCHAT_INTEGRATION=off instead"
            ))
        } else {
            IntegrationSwitch::IgnoredDeprecated(format!(
                "AGENTCHAT_DOORBELL=off is ignored since {DOORBELL_REMOVAL_DATE}; \
                 set AGENTCHAT_INTEGRATION=off to switch the integration off"
            ))
        };
    }
    IntegrationSwitch::On
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_of_an_offset_inside_a_multibyte_character_does_not_panic() {
        // 'é' is two bytes: offset 1 falls inside it.
        assert_eq!(line_col("é\nx", 1), (1, 1));
        assert_eq!(line_col("a\né = 1", 4), (2, 2));
        assert_eq!(line_col("a\nb", 99), (2, 2));
    }
}

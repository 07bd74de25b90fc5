//! From the sources to `Settings`: choose the profile, stack the layers (file < environment <
//! flags), then fill in defaults and check what only the merged values can tell (a duration's
//! bounds depend on `api_base`, through the test time scale). Pure: the environment is a map
//! and the file's text is given.

use super::keys::{ClaudeLayer, CodexLayer, Layer, ListenLayer, TopSettings};
use super::value;
use super::{
    ConfigArgs, ConfigError, DEFAULT_PROFILE, KeySource, ListenSettings, RuntimeKind, Settings,
    TestTimeScale, env, file,
};
use secrecy::SecretString;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Resolves settings from flags, an environment map and the config file's text (if any).
/// Pure: no process environment, no file reads. Precedence: defaults < file (top level, then
/// `[profiles.<profile>]`) < environment < flags.
///
/// The key: `AGENTCHAT_API_KEY`, else `api_key_file`, else `api_key`. A key file is only *named*
/// here (`key_source` = `File`, `api_key` = `None`); `load` reads it with `read_key_file`.
pub fn resolve(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
    file: Option<(&Path, &str)>,
) -> Result<Settings, ConfigError> {
    let file = match file {
        Some((path, text)) => {
            // The profile's name is checked before the text, as it always was.
            profile_name(args, env)?;
            Some((path, file::parse_toml(path, text)?))
        }
        None => None,
    };
    resolve_table(args, env, file)
}

/// [`resolve`] for a file already read as TOML ([`super::ConfigFile`]): the same checks in
/// the same order, the profile's name first.
pub(super) fn resolve_table(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
    file: Option<(&Path, toml::Table)>,
) -> Result<Settings, ConfigError> {
    let profile = profile_name(args, env)?;
    let (path, file_layer) = match file {
        Some((path, table)) => (
            Some(path),
            file::layer_of_table(path, table, &profile, env)?,
        ),
        None if profile == DEFAULT_PROFILE => (None, Layer::default()),
        None => {
            return Err(ConfigError::UnknownProfile {
                name: profile,
                file: None,
                known: Vec::new(),
            });
        }
    };
    resolve_layers(args, env, profile, path, file_layer)
}

/// [`resolve`] for one profile of `listen --all` ([`super::ConfigFile::all`]): the file's top
/// level (without `profiles`) and `own`, the profile's own table (`None` for `default`).
pub(super) fn resolve_one_of_all(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
    path: &Path,
    top: toml::Table,
    own: Option<toml::Value>,
    profile: &str,
) -> Result<Settings, ConfigError> {
    let file_layer = file::layer_of_profile(path, top, own.map(|t| (profile, t)), env)?;
    resolve_layers(args, env, profile.to_string(), Some(path), file_layer)
}

/// The merge of the file's layer (for `profile`) under the environment and the flags, then the
/// defaults and bounds.
fn resolve_layers(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
    profile: String,
    config_path: Option<&Path>,
    file_layer: Layer,
) -> Result<Settings, ConfigError> {
    let mut merged = flag_layer(args)?.over(env::layer(env)?.over(file_layer));
    let mut top = merged.top();
    let (api_base, api_base_written) = api_base(&top, &merged)?;
    let time_scale = TestTimeScale::decide(env::test_time_scale(env)?, &api_base);
    let (api_key, key_source) = key(env, &mut top);
    Ok(Settings {
        state_dir: state_dir(args, env, &profile)?,
        profile,
        config_path: config_path.map(Path::to_path_buf),
        api_base,
        api_base_written,
        allow_cleartext: top.allow_cleartext,
        api_key,
        key_source,
        log_level: top.log_level,
        log_format: top.log_format,
        listen: listen_settings(merged, time_scale)?,
        time_scale,
    })
}

/// `api_base`'s rule after the merge: a trailing `/v1` dropped (the URL as written kept for
/// `advice`), and no URL the key would travel to in clear text beyond loopback, the MCP URLs
/// included, unless `allow_cleartext`.
fn api_base(top: &TopSettings, merged: &Layer) -> Result<(String, Option<String>), ConfigError> {
    let written = &top.api_base;
    let (api_base, api_base_written) = match value::api_base_without_v1(written) {
        Some(stripped) => (stripped, Some(written.clone())),
        None => (written.clone(), None),
    };
    let allow_cleartext = top.allow_cleartext;
    no_cleartext(&api_base, "api_base", allow_cleartext)?;
    for (url, key) in [
        (
            merged.claude.as_ref().and_then(|c| c.mcp_url.as_ref()),
            "listen.claude.mcp_url",
        ),
        (
            merged.codex.as_ref().and_then(|c| c.mcp_url.as_ref()),
            "listen.codex.mcp_url",
        ),
    ] {
        if let Some(url) = url {
            no_cleartext(url, key, allow_cleartext)?;
        }
    }
    Ok((api_base, api_base_written))
}

/// Makes every relative path of `settings` absolute against `cwd`: the state dir, the config
/// file, the key file, the workdir, and a program named with a slash (`bin/agent`; a bare name
/// stays bare, for `PATH`). The listener hands these to runs that start in another directory
/// (the workdir): a relative `--state-dir state` once gave Claude Code `--mcp-config
/// state/claude-mcp.json` from inside `state/workdir`.
pub fn absolute_paths(settings: &mut Settings, cwd: &Path) {
    let abs = |p: &mut PathBuf| {
        if p.is_relative() {
            *p = cwd.join(&*p);
        }
    };
    let program = |p: &mut PathBuf| {
        if p.is_relative() && p.components().count() > 1 {
            *p = cwd.join(&*p);
        }
    };
    abs(&mut settings.state_dir);
    if let Some(p) = settings.config_path.as_mut() {
        abs(p);
    }
    if let KeySource::File(p) = &mut settings.key_source {
        abs(p);
    }
    let l = &mut settings.listen;
    if let Some(p) = l.workdir.as_mut() {
        abs(p);
    }
    if let Some(p) = l.claude.binary.as_mut() {
        program(p);
    }
    if let Some(p) = l.codex.binary.as_mut() {
        program(p);
    }
    if let Some(first) = l.command.first_mut()
        && first.contains('/')
        && Path::new(first.as_str()).is_relative()
    {
        *first = cwd.join(first.as_str()).to_string_lossy().into_owned();
    }
}

/// The flags' layer: the flags the keys' lines in `config::keys` name (clap has parsed
/// `--runtime` by the same names).
fn flag_layer(args: &ConfigArgs) -> Result<Layer, ConfigError> {
    Ok(Layer {
        listen: Some(ListenLayer::from_flags(args)?),
        claude: Some(ClaudeLayer::from_flags(args)?),
        codex: Some(CodexLayer::from_flags(args)?),
        ..Layer::from_flags(args)?
    })
}

/// Refuses a URL that would carry the key in clear text beyond this machine, unless
/// `allow_cleartext` (docs/operating.md, "Configuration").
fn no_cleartext(url: &str, key: &str, allow_cleartext: bool) -> Result<(), ConfigError> {
    if allow_cleartext || !value::is_cleartext_beyond_loopback(url) {
        return Ok(());
    }
    Err(ConfigError::BadValue {
        key: key.into(),
        problem: format!(
            "`{url}` would send the API key in clear text (plain http://, and ws:// for the \
             socket): use https://, or plain http:// only to this machine (127.0.0.1, ::1, \
             localhost); set `allow_cleartext = true` (or {}=1) if this network is trusted",
            env::ALLOW_CLEARTEXT
        ),
    })
}

/// The key and where it came from: `AGENTCHAT_API_KEY` outranks every key the layers name.
fn key(env: &HashMap<String, String>, top: &mut TopSettings) -> (Option<SecretString>, KeySource) {
    if let Some(k) = env::get(env, "AGENTCHAT_API_KEY") {
        (Some(SecretString::from(k.to_string())), KeySource::Env)
    } else if let Some(path) = top.api_key_file.take() {
        (None, KeySource::File(path))
    } else if let Some(k) = top.api_key.take() {
        (Some(k), KeySource::Config)
    } else {
        (None, KeySource::Missing)
    }
}

/// `--state-dir`, else `AGENTCHAT_STATE_DIR`, else the platform's state dir plus the profile:
/// the one precedence, for the settings and for `setup`, which needs the state dir before any
/// config file exists. The file never names the state dir.
pub fn state_dir(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
    profile: &str,
) -> Result<PathBuf, ConfigError> {
    if let Some(d) = &args.state_dir {
        return Ok(d.clone());
    }
    if let Some(d) = env::get(env, "AGENTCHAT_STATE_DIR") {
        return Ok(PathBuf::from(d));
    }
    default_state_base(env)
        .map(|base| base.join(profile))
        .ok_or_else(|| ConfigError::BadValue {
            key: "state_dir".into(),
            problem: "no home directory to keep state in (HOME is not set, or not valid UTF-8); \
                      set AGENTCHAT_STATE_DIR or --state-dir"
                .into(),
        })
}

/// `[listen]` with its defaults (`config::keys`), every duration inside its bounds, and the
/// check only two keys together can make.
fn listen_settings(mut m: Layer, scale: TestTimeScale) -> Result<ListenSettings, ConfigError> {
    let l = m.listen.take().unwrap_or_default();
    let factor = scale.factor();
    if let Some(addr) = l.metrics_addr
        && !addr.ip().is_loopback()
        && !l.metrics_public.unwrap_or(false)
    {
        return Err(ConfigError::BadValue {
            key: "listen.metrics_addr".into(),
            problem: format!(
                "{addr} is not a loopback address; set `listen.metrics_public = true` to serve \
                 metrics beyond this machine"
            ),
        });
    }
    let claude = m.claude.take().unwrap_or_default().settings(factor)?;
    let codex = m.codex.take().unwrap_or_default().settings(factor)?;
    let policy = m.policy.unwrap_or_default().resolve();
    l.settings(factor, claude, codex, policy)
}

/// The chosen profile: `--profile`, else `AGENTCHAT_PROFILE`, else `default`.
pub fn profile_name(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
) -> Result<String, ConfigError> {
    let (name, key) = match (&args.profile, env::get(env, "AGENTCHAT_PROFILE")) {
        (Some(p), _) => (p.trim().to_string(), "--profile"),
        (None, Some(p)) => (p.to_string(), "AGENTCHAT_PROFILE"),
        (None, None) => (DEFAULT_PROFILE.to_string(), "profile"),
    };
    value::profile_name(&name).map_err(|problem| ConfigError::BadValue {
        key: key.into(),
        problem,
    })?;
    Ok(name)
}

/// The profile-name rule every command shares (config, state dir, service unit names and labels),
/// so a profile `listen` accepts can always be installed as a service and the reverse.
pub fn check_profile_name(name: &str) -> Result<(), ConfigError> {
    value::profile_name(name).map_err(|problem| ConfigError::BadValue {
        key: "--profile".into(),
        problem,
    })
}

/// Where state lives when nothing overrides it: `$XDG_STATE_HOME/agentchat` or
/// `~/.local/state/agentchat` on Linux, the platform data-local dir elsewhere. Computed from the
/// given environment on Linux so that `resolve` stays pure.
pub fn default_state_base(env: &HashMap<String, String>) -> Option<PathBuf> {
    if cfg!(target_os = "linux") {
        if let Some(x) = env::get(env, "XDG_STATE_HOME").filter(|x| Path::new(x).is_absolute()) {
            return Some(PathBuf::from(x).join("agentchat"));
        }
        env::get(env, "HOME").map(|h| PathBuf::from(h).join(".local/state/agentchat"))
    } else {
        directories::ProjectDirs::from("", "", "agentchat").map(|d| {
            d.state_dir()
                .unwrap_or_else(|| d.data_local_dir())
                .to_path_buf()
        })
    }
}

impl TestTimeScale {
    /// Honours a scale only against a loopback `api_base` (the demo's and the tests' local
    /// server): a listener pointed at a real server never shortens a contract timer.
    pub fn decide(scale: Option<f64>, api_base: &str) -> TestTimeScale {
        match scale {
            None | Some(1.0) => TestTimeScale::Off,
            Some(s) if value::is_loopback(api_base) => TestTimeScale::On(s),
            Some(s) => TestTimeScale::Ignored(s),
        }
    }
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
        out.push(
            "no API key: run `agentchat setup` (it signs a new agent up or takes your key), or \
             set AGENTCHAT_API_KEY, or `api_key_file` in the config"
                .to_string(),
        );
    }
    let l = &settings.listen;
    if l.runtime == RuntimeKind::Script && l.command.is_empty() {
        out.push(
            "runtime is `script` but `command` under [listen] is empty: no run can start"
                .to_string(),
        );
    }
    let show = |d| humantime::format_duration(d).to_string();
    if l.max_delay < l.quiet_window {
        out.push(format!(
            "`listen.max_delay` ({}) is shorter than `listen.quiet_window` ({}): every cycle starts \
             max_delay after its first wake",
            show(l.max_delay),
            show(l.quiet_window)
        ));
    }
    if l.kill_grace >= l.run_timeout {
        out.push(format!(
            "`listen.kill_grace` ({}) is not shorter than `listen.run_timeout` ({})",
            show(l.kill_grace),
            show(l.run_timeout)
        ));
    }
    if let Some(written) = &settings.api_base_written {
        out.push(format!(
            "api_base `{written}` ends with /v1, which the listener adds to every path itself: \
             using `{}`; drop the /v1 to silence this",
            settings.api_base
        ));
    }
    if settings.allow_cleartext && value::is_cleartext_beyond_loopback(&settings.api_base) {
        out.push(format!(
            "api_base `{}` is plain http:// beyond this machine and `allow_cleartext` is set: \
             the API key travels in clear text",
            settings.api_base
        ));
    }
    if let TestTimeScale::Ignored(s) = settings.time_scale {
        out.push(format!(
            "{}={s} is ignored: api_base {} is not a loopback address, and a real server's \
             timers are never shortened",
            env::TEST_TIME_SCALE,
            settings.api_base
        ));
    }
    out
}

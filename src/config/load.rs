//! The config's I/O: the process environment, the config file and the key file, then `resolve`.

use super::{ConfigArgs, ConfigError, KeySource, Settings, env, resolve};
use secrecy::{ExposeSecret, SecretString};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Reads of the config file by this process, for the log: `listen --all` reads it once per
/// SIGHUP for every profile (issue 27), which each profile's `reload` line shows.
static FILE_READS: AtomicU64 = AtomicU64::new(0);

/// How many times this process has read its config file.
pub fn file_reads() -> u64 {
    FILE_READS.load(Ordering::Relaxed)
}

/// Reads the config file (if any) and the process environment, then `resolve`s; reads the key
/// file when the key comes from one.
pub fn load(args: &ConfigArgs) -> Result<Settings, ConfigError> {
    load_with_env(args, &env::config_env()?)
}

/// Where a listener's settings come from, read again on `SIGHUP` and while its key is refused:
/// the one profile `args` choose, or one profile of `listen --all`, resolved on its own
/// ([`load_one_of_all`]).
#[derive(Debug, Clone)]
pub enum Source {
    One(ConfigArgs),
    OfAll { args: ConfigArgs, profile: String },
}

impl Source {
    pub fn load(&self) -> Result<Settings, ConfigError> {
        match self {
            Source::One(args) => load(args),
            Source::OfAll { args, profile } => load_one_of_all(args, profile),
        }
    }
}

/// The profiles of `listen --all` (docs/many-agents.md, "One process for many agents"): every
/// `[profiles.<name>]` table, and `default` (the file's top level) only when the top level names
/// a key of its own (`api_key_file` or `api_key`). Each profile is resolved from the top level
/// and its own table alone, so a bad value or a missing key file in one profile's table is that
/// profile's error (`Err` beside its name) and every other profile resolves. The whole set fails
/// only for what every profile shares: the environment, a config file that cannot be read or is
/// not TOML, or a `profiles` that is not a table.
pub fn load_all(args: &ConfigArgs) -> Result<ProfileSet, ConfigError> {
    let env = env::config_env()?;
    let Some((path, text)) = read_config_file(args, &env)? else {
        return Ok(ProfileSet::default());
    };
    let mut top = super::file::parse_toml(&path, &text)?;
    let tables = match top.remove("profiles") {
        None => toml::Table::new(),
        Some(toml::Value::Table(t)) => t,
        Some(other) => {
            return Err(ConfigError::BadValue {
                key: "profiles".into(),
                problem: format!("expected a table, found {}", other.type_str()),
            });
        }
    };
    let mut set = ProfileSet {
        config_path: Some(path.clone()),
        ..ProfileSet::default()
    };
    if runs_default(&top) {
        let default = super::DEFAULT_PROFILE.to_string();
        let settings = one_of_all(args, &env, &path, top.clone(), &default);
        set.profiles.push((default, settings));
    } else {
        set.default_skipped = true;
    }
    for (name, table) in tables {
        let settings = one_of_all(args, &env, &path, cut(&top, &name, table), &name);
        set.profiles.push((name, settings));
    }
    Ok(set)
}

/// Whether `listen --all` runs `default`: the top level names a key of its own (`api_key_file` or
/// `api_key`). The one rule, for [`load_all`] and for what `status --all` lists ([`all_runs_default`]).
pub fn runs_default(top: &toml::Table) -> bool {
    top.contains_key("api_key_file") || top.contains_key("api_key")
}

/// Whether `listen --all` runs `default` ([`runs_default`]) for the config `args` name; `None`
/// without a config file, or with one that cannot be read or parsed (`listen --all` refuses
/// those). No key file is read.
pub fn all_runs_default(args: &ConfigArgs) -> Option<bool> {
    let env = env::config_env().ok()?;
    let (path, text) = read_config_file(args, &env).ok()??;
    let top = super::file::parse_toml(&path, &text).ok()?;
    Some(runs_default(&top))
}

/// What [`load_all`] found: each profile's name and its settings or its own error.
#[derive(Debug, Default)]
pub struct ProfileSet {
    pub config_path: Option<PathBuf>,
    pub profiles: Vec<(String, Result<Settings, ConfigError>)>,
    /// The top level names no key of its own, so `default` is not one of the profiles.
    pub default_skipped: bool,
}

/// One profile of [`load_all`], read again on its own (a reload, a key check).
pub fn load_one_of_all(args: &ConfigArgs, profile: &str) -> Result<Settings, ConfigError> {
    let env = env::config_env()?;
    let Some((path, text)) = read_config_file(args, &env)? else {
        return Err(ConfigError::UnknownProfile {
            name: profile.to_string(),
            file: None,
            known: Vec::new(),
        });
    };
    let mut top = super::file::parse_toml(&path, &text)?;
    let mut tables = match top.remove("profiles") {
        Some(toml::Value::Table(t)) => t,
        _ => toml::Table::new(),
    };
    let table = if profile == super::DEFAULT_PROFILE {
        top
    } else {
        let Some(own) = tables.remove(profile) else {
            return Err(ConfigError::UnknownProfile {
                name: profile.to_string(),
                file: Some(path),
                known: tables.keys().cloned().collect(),
            });
        };
        cut(&top, profile, own)
    };
    one_of_all(args, &env, &path, table, profile)
}

/// The top level alone, its key file named but not read: what `listen --all` takes for the
/// process itself (its log and its metrics endpoint), whatever the profiles' tables say.
pub fn load_top_of_all(args: &ConfigArgs) -> Result<Settings, ConfigError> {
    let env = env::config_env()?;
    let args = ConfigArgs {
        profile: Some(super::DEFAULT_PROFILE.to_string()),
        ..args.clone()
    };
    let Some((path, text)) = read_config_file(&args, &env)? else {
        let mut settings = resolve(&args, &env, None)?;
        absolute_from_cwd(&mut settings);
        return Ok(settings);
    };
    let mut top = super::file::parse_toml(&path, &text)?;
    top.remove("profiles");
    let mut settings =
        super::resolve::resolve_one_of_all(&args, &env, &path, top, super::DEFAULT_PROFILE)?;
    absolute_from_cwd(&mut settings);
    Ok(settings)
}

/// The top level with `profiles` holding `name`'s table alone.
fn cut(top: &toml::Table, name: &str, own: toml::Value) -> toml::Table {
    let mut t = top.clone();
    let mut only = toml::Table::new();
    only.insert(name.to_string(), own);
    t.insert("profiles".into(), toml::Value::Table(only));
    t
}

fn one_of_all(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
    path: &Path,
    table: toml::Table,
    name: &str,
) -> Result<Settings, ConfigError> {
    super::value::profile_name(name).map_err(|problem| ConfigError::BadValue {
        key: format!("profiles.{name}"),
        problem,
    })?;
    let args = ConfigArgs {
        profile: Some(name.to_string()),
        ..args.clone()
    };
    with_key(super::resolve::resolve_one_of_all(
        &args, env, path, table, name,
    )?)
}

/// Like `load`, but a key file is only named, never read: for commands that do not talk to the
/// server (`status`), so an unreadable key file does not stop them.
pub fn load_unkeyed(args: &ConfigArgs) -> Result<Settings, ConfigError> {
    let env = env::config_env()?;
    let text = read_config_file(args, &env)?;
    let mut settings = resolve(
        args,
        &env,
        text.as_ref().map(|(p, t)| (p.as_path(), t.as_str())),
    )?;
    absolute_from_cwd(&mut settings);
    Ok(settings)
}

/// `load` with a given environment (for callers that already hold one, and tests).
pub fn load_with_env(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
) -> Result<Settings, ConfigError> {
    let text = read_config_file(args, env)?;
    let settings = resolve(
        args,
        env,
        text.as_ref().map(|(p, t)| (p.as_path(), t.as_str())),
    )?;
    with_key(settings)
}

/// The settings' paths made absolute and their key read from its file when it comes from one,
/// then checked for characters a key cannot have.
fn with_key(mut settings: Settings) -> Result<Settings, ConfigError> {
    absolute_from_cwd(&mut settings);
    // A zone the system does not know is the config's mistake, said where a bad value is (a
    // refused start, a reload that keeps the old settings), not a listener that runs on UTC.
    if let Some(zone) = &settings.listen.policy.timezone {
        crate::sys::tz::named(zone).map_err(|e| ConfigError::BadValue {
            key: "listen.policy.timezone".into(),
            problem: e.to_string(),
        })?;
    }
    if let KeySource::File(path) = &settings.key_source {
        settings.api_key = Some(read_key_file(path)?);
    }
    let named = match &settings.key_source {
        KeySource::Env => Some("AGENTCHAT_API_KEY"),
        KeySource::Config => Some("api_key"),
        KeySource::File(_) | KeySource::Missing => None,
    };
    if let (Some(key), Some(named)) = (&settings.api_key, named)
        && let Some(problem) = key_characters_problem(key.expose_secret())
    {
        return Err(ConfigError::BadValue {
            key: named.to_string(),
            problem: format!("it {problem}"),
        });
    }
    Ok(settings)
}

/// Every path of `settings` made absolute against the working directory (when it can be
/// read), so the runs, which start elsewhere (the workdir), see the same files:
/// `resolve::absolute_paths`.
fn absolute_from_cwd(settings: &mut Settings) {
    if let Ok(cwd) = std::env::current_dir() {
        super::resolve::absolute_paths(settings, &cwd);
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
    if let Some(p) = env::get(env, "AGENTCHAT_CONFIG") {
        return Some((PathBuf::from(p), true));
    }
    directories::ProjectDirs::from("", "", "agentchat")
        .map(|d| (d.config_dir().join("config.toml"), false))
}

/// The most a config file may hold: the example with every key documented is under 20 KiB.
pub const CONFIG_FILE_CAP: u64 = 1024 * 1024;
/// The most a key file may hold: a key is under 100 bytes.
pub const KEY_FILE_CAP: u64 = 16 * 1024;

/// The config file's path and text, if there is one to read: a regular file (after symlinks)
/// of at most `CONFIG_FILE_CAP`, read without blocking on a FIFO or a device
/// (`sys::fs::read_regular_capped`), so a `SIGHUP` can never wedge the listener on it.
/// The config file's bytes, the read counted ([`file_reads`]).
fn read_counted(path: &Path) -> std::io::Result<Vec<u8>> {
    FILE_READS.fetch_add(1, Ordering::Relaxed);
    crate::sys::fs::read_regular_capped(path, CONFIG_FILE_CAP)
}

fn read_config_file(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
) -> Result<Option<(PathBuf, String)>, ConfigError> {
    // Absolute, so the paths the file names relative to its folder come out absolute too.
    let absolute = |p: PathBuf| match std::env::current_dir() {
        Ok(cwd) if p.is_relative() => cwd.join(p),
        _ => p,
    };
    match config_file_path(args, env).map(|(p, explicit)| (absolute(p), explicit)) {
        Some((path, explicit)) => match read_counted(&path) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => Ok(Some((path, text))),
                Err(_) => Err(ConfigError::Read {
                    path,
                    error: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "is not UTF-8 text",
                    ),
                }),
            },
            Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(ConfigError::Read { path, error }),
        },
        None => Ok(None),
    }
}

/// Reads a key file, refusing (like ssh) one that group or others can read, and anything but a
/// regular file of at most `KEY_FILE_CAP` (read without blocking, like the config file). The key is trimmed;
/// an empty file is an error. No error message contains the file's content.
pub fn read_key_file(path: &Path) -> Result<SecretString, ConfigError> {
    let problem = |problem: String| ConfigError::KeyFile {
        path: path.to_path_buf(),
        problem,
    };
    use crate::sys::fs;
    let (file, meta) = fs::open_regular(path).map_err(|e| {
        problem(match e.kind() {
            std::io::ErrorKind::InvalidInput if path.is_dir() => {
                "is a directory; name the file that holds the key".to_string()
            }
            std::io::ErrorKind::InvalidInput => e.to_string(),
            _ => format!("cannot be read: {e}"),
        })
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 && !secret_volume_mode(&meta) {
            return Err(problem(format!(
                "can be read by other users (mode {mode:04o}); run `chmod 600 {}`",
                path.display()
            )));
        }
    }
    let bytes = fs::read_capped(file, &meta, KEY_FILE_CAP).map_err(|e| {
        problem(match e.kind() {
            std::io::ErrorKind::FileTooLarge => e.to_string(),
            _ => format!("cannot be read: {e}"),
        })
    })?;
    let text = String::from_utf8(bytes).map_err(|_| problem("is not UTF-8 text".into()))?;
    let key = text.trim();
    if key.is_empty() {
        return Err(problem("is empty".into()));
    }
    if let Some(why) = key_characters_problem(key) {
        return Err(problem(why.to_string()));
    }
    Ok(SecretString::from(key.to_string()))
}

/// A key file as Kubernetes mounts a Secret for a non-root pod (deploy/kubernetes/, docs/fleets.md):
/// owned by root, group the pod's `fsGroup` (this process's own group), and the group's read bit
/// added by the kubelet (0440). Only root and this group can read it, so it is taken like 0400;
/// anything wider (group write, any bit for others, another group) is still refused.
#[cfg(unix)]
fn secret_volume_mode(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getegid(2) cannot fail and touches no memory.
    let own_group = unsafe { libc::getegid() };
    meta.mode() & 0o037 == 0 && meta.uid() == 0 && meta.gid() == own_group
}

/// A key is one token of visible ASCII (it travels in the `Authorization` header, contract 3.4):
/// a control character, a space or a non-ASCII character inside it (a stray `\x01`, a second
/// line, a BOM) is a mistake no retry fixes, so it is a config error, said without the key.
fn key_characters_problem(key: &str) -> Option<&'static str> {
    let bad = key.bytes().any(|b| !(0x21..=0x7e).contains(&b));
    bad.then_some(
        "holds characters an API key cannot have (a control character, a space, a line break \
         or a non-ASCII character); write the key alone on one line",
    )
}

//! The config's reads: the config file (capped, counted, never blocking: [`super::ConfigFile`]
//! reads it through here, once per command) and the key file.

use super::{ConfigArgs, ConfigError, KeySource, Settings, env};
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

/// The settings' paths made absolute and their key read from its file when it comes from one,
/// then checked for characters a key cannot have.
pub(super) fn with_key(mut settings: Settings) -> Result<Settings, ConfigError> {
    absolute_from_cwd(&mut settings);
    // A zone the system does not know was found where the file set it (`config::file`, which
    // names its full path: a refused start, a reload that keeps the old settings).
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
pub(super) fn absolute_from_cwd(settings: &mut Settings) {
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

/// The config file's bytes, the read counted ([`file_reads`]).
fn read_counted(path: &Path) -> std::io::Result<Vec<u8>> {
    FILE_READS.fetch_add(1, Ordering::Relaxed);
    crate::sys::fs::read_regular_capped(path, CONFIG_FILE_CAP)
}

/// The config file's path and text, if there is one to read: a regular file (after symlinks)
/// of at most `CONFIG_FILE_CAP`, read without blocking on a FIFO or a device
/// (`sys::fs::read_regular_capped`), so a `SIGHUP` can never wedge the listener on it.
/// The one read of the file; only [`super::ConfigFile`] calls it.
pub(super) fn read_config_file(
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

//! The API key: from `--api-key-file`, stdin or a prompt without echo, checked with
//! `GET /v1/agents/me` before anything is written, stored 0600 beside the config. Never printed,
//! never in argv.

use super::manifest::Manifest;
use super::tty;
use crate::client::{Api, ApiError};
use secrecy::{ExposeSecret, SecretString};
use std::path::{Path, PathBuf};

/// Where the key comes from and where the profile will find it.
pub struct Key {
    pub key: SecretString,
    /// The file the config names (`api_key_file`).
    pub file: PathBuf,
    /// Setup must write `file` (it holds another key, or none yet).
    pub write: bool,
    /// `file` may be replaced though setup did not write it: recovery rotated the key it holds.
    pub replace: bool,
}

/// `<config dir>/<profile>.key`: beside the config, one per profile.
pub fn default_key_file(config_path: &Path, profile: &str) -> PathBuf {
    config_path
        .parent()
        .unwrap_or(Path::new("."))
        .join(format!("{profile}.key"))
}

/// The key as the user gives it: `--api-key-file`, else stdin when it is not a terminal, else
/// `AGENTCHAT_API_KEY` (`env_key`), else the profile's key file (`existing`, kept), else a prompt.
/// `ask`: questions may be asked (a terminal, no `--yes`); the key itself is asked for on a
/// terminal even with `--yes` when nothing else gives it.
pub fn obtain(
    key_file_flag: Option<&Path>,
    existing: Option<(&Path, &SecretString)>,
    env_key: Option<SecretString>,
    target: &Path,
    ask: bool,
) -> anyhow::Result<Key> {
    if let Some(f) = key_file_flag {
        let file = std::path::absolute(f)?;
        let key = crate::config::read_key_file(&file)?;
        return Ok(Key {
            key,
            file,
            write: false,
            replace: false,
        });
    }
    let given = if ask {
        if let Some((file, _)) = existing {
            let keep = tty::confirm(&format!("Keep the API key in {}?", file.display()), true)?;
            if keep {
                None
            } else {
                Some(tty::ask_secret("AgentChat API key (input hidden)")?)
            }
        } else {
            Some(tty::ask_secret("AgentChat API key (input hidden)")?)
        }
    } else if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        match env_key {
            Some(k) => Some(k),
            None if existing.is_none() && tty::interactive() => {
                Some(tty::ask_secret("AgentChat API key (input hidden)")?)
            }
            None => None,
        }
    } else {
        tty::key_from_stdin()?.or(env_key)
    };
    match (given, existing) {
        (None, Some((file, key))) => Ok(Key {
            key: key.clone(),
            file: file.to_path_buf(),
            write: false,
            replace: false,
        }),
        (None, None) => anyhow::bail!(
            "no API key: give it on stdin (`agentchat setup … < keyfile`), with --api-key-file \
             FILE, or run setup in a terminal to be asked"
        ),
        (Some(key), Some((file, old))) if old.expose_secret() == key.expose_secret() => Ok(Key {
            key,
            file: file.to_path_buf(),
            write: false,
            replace: false,
        }),
        (Some(key), _) => {
            let same = crate::config::read_key_file(target)
                .is_ok_and(|k| k.expose_secret() == key.expose_secret());
            Ok(Key {
                key,
                file: target.to_path_buf(),
                write: !same,
                replace: false,
            })
        }
    }
}

/// How long the key check may wait for the server (said before it starts).
pub const CHECK_WAIT: std::time::Duration = std::time::Duration::from_secs(40);

/// `GET /v1/agents/me` with the key: the handle, or why the key cannot be used. The message
/// never holds the key.
pub async fn check(api_base: &str, key: &SecretString) -> anyhow::Result<String> {
    let api = Api::new(api_base, key.clone())?;
    let me = tokio::time::timeout(CHECK_WAIT, api.me())
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "{api_base} did not answer GET /v1/agents/me within {} s",
                CHECK_WAIT.as_secs()
            )
        })?;
    match me {
        Ok(handle) => Ok(handle),
        Err(ApiError::Refused(status)) => anyhow::bail!(
            "the server at {api_base} refused this API key (HTTP {status} on GET \
             /v1/agents/me); nothing was written. Check that it is the whole key, for this \
             server; a lost key is replaced by `agentchat setup --recover --email EMAIL \
             --handle HANDLE` (a code is emailed; the old key stops working)"
        ),
        Err(e) => {
            let e = e.to_string();
            anyhow::bail!(
                "cannot check the key at {api_base} (GET /v1/agents/me): {e}{}; nothing was \
                 written",
                super::server::hint(api_base, &e)
            )
        }
    }
}

/// Writes the key file 0600 (refusing to replace a key file that setup did not write).
pub fn store(key: &Key, manifest: &mut Manifest) -> anyhow::Result<bool> {
    if !key.write {
        return Ok(false);
    }
    let ours = manifest.key_file.as_deref() == Some(key.file.as_path());
    if key.file.exists() && !ours && !key.replace {
        anyhow::bail!(
            "{} exists and holds another key; setup does not replace a key file it did not \
             write. Give it with --api-key-file {} to use it, or move it away",
            key.file.display(),
            key.file.display()
        );
    }
    if let Some(dir) = key.file.parent() {
        super::manifest::create_dirs(dir, manifest, true)?;
    }
    let mut bytes = key.key.expose_secret().as_bytes().to_vec();
    bytes.push(b'\n');
    crate::sys::fs::write_atomic(&key.file, &bytes)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", key.file.display()))?;
    manifest.key_file = Some(key.file.clone());
    Ok(true)
}

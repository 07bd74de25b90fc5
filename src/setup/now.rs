//! What the profile has before this run: its server, key file and runtime as the config gives
//! them, else what a setup stopped halfway stored (the manifest's server and key file, a sign-up
//! waiting for its code), else a key file at the profile's usual place (one an undo kept). The
//! config is read first, as the listener will read it: a file it cannot use is said before
//! anything is asked, with nothing written.

use super::manifest::Manifest;
use super::{Place, account};
use crate::config::{self, ConfigArgs, RuntimeKind};
use secrecy::SecretString;
use std::path::{Path, PathBuf};

/// What the profile has now.
pub struct Current {
    pub api_base: String,
    pub key: Option<(PathBuf, SecretString)>,
    pub runtime: Option<(RuntimeKind, Vec<String>)>,
    /// The config (or AGENTCHAT_ALLOW_CLEARTEXT) allows plain http:// beyond this machine.
    pub allow_cleartext: bool,
    /// The server is the one a setup stopped halfway used (the config does not say it yet).
    pub base_resumed: bool,
    /// Said when the server or the key comes from a setup stopped halfway, or a kept key file.
    pub resumed: Vec<String>,
    /// The profile's run policy as the listener would apply it (the bounds setup shows).
    pub policy: crate::core::policy::Policy,
}

/// The profile's settings as the listener would resolve them from `config_text` (an empty file
/// when there is none): what the profile has before this run, so `--api-base` is not applied
/// (setup checks the server it will use itself, `server::refuse_cleartext`). A profile the file
/// does not define yet is checked as `default` (every profile table of the file is checked
/// either way).
fn settings(
    place: &Place,
    config_text: Option<&str>,
    defined: bool,
) -> anyhow::Result<config::Settings> {
    let mut env = place.env.clone();
    env.remove("AGENTCHAT_API_KEY");
    let args = ConfigArgs {
        config: Some(place.config_path.clone()),
        profile: Some(place.profile.clone()),
        ..Default::default()
    };
    let profile = (!defined).then_some(config::DEFAULT_PROFILE);
    config::ConfigFile::parse(&args, env, &place.config_path, config_text.unwrap_or(""))
        .and_then(|file| file.settings(profile, config::KeyFile::Named))
        .map_err(|e| {
            anyhow::anyhow!(
                "{e}. Setup reads the config as the listener will before it asks anything: fix \
                 {} (or move it away) and run setup again; nothing was written",
                place.config_path.display()
            )
        })
}

fn readable(path: &Path) -> Option<(PathBuf, SecretString)> {
    config::read_key_file(path)
        .ok()
        .map(|k| (path.to_path_buf(), k))
}

pub fn read(
    place: &Place,
    config_text: Option<&str>,
    defined: bool,
    api_base_flag: Option<&str>,
    earlier: Option<&Manifest>,
    target: &Path,
) -> anyhow::Result<Current> {
    let s = settings(place, config_text, defined)?;
    let mut resumed = Vec::new();
    let set_by_user =
        defined || api_base_flag.is_some() || place.env.contains_key("AGENTCHAT_API_BASE");
    let stored = earlier.and_then(|m| {
        m.pending
            .as_ref()
            .filter(|p| account::fresh(p))
            .map(|p| p.api_base.clone())
            .or_else(|| m.api_base.clone())
    });
    let base_resumed = stored.is_some() && !set_by_user;
    let api_base = match stored.filter(|_| !set_by_user) {
        Some(b) => {
            resumed.push(format!("server: {b}, as the setup stopped before used"));
            b
        }
        None => s.api_base.clone(),
    };
    let configured = match &s.key_source {
        config::KeySource::File(p) if defined => readable(p),
        _ => None,
    };
    let key = configured.or_else(|| {
        let (file, why) = match earlier.and_then(|m| m.key_file.as_deref()) {
            Some(f) => (f, "stored by the setup stopped before"),
            None => (target, "found at the profile's usual place"),
        };
        let k = readable(file)?;
        resumed.push(format!("key: {} ({why})", file.display()));
        Some(k)
    });
    Ok(Current {
        api_base,
        key,
        runtime: defined.then(|| (s.listen.runtime, s.listen.command.clone())),
        allow_cleartext: s.allow_cleartext,
        base_resumed,
        resumed,
        policy: s.listen.policy.clone(),
    })
}

//! [`UnitConfig`]: the config as a unit's listener will read it, read once by each `service`
//! command that needs it (install, print, the host's spec, doctor's comparison).

use crate::config::{ConfigArgs, ConfigError, ConfigFile, KeyFile, Settings};
use anyhow::Context;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The variables of the installing shell the unit's listener sees too: the unit sets the XDG
/// base dirs it finds (`super::xdg_env`) and the manager gives it the same `HOME`. No
/// `AGENTCHAT_*` variable is among them: the manager passes none on.
const UNIT_VARIABLES: [&str; 3] = ["HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME"];

/// The config file a unit names and the file read as its listener will read it.
pub(crate) struct UnitConfig {
    /// What the unit passes to `listen --config`: `--config`, else the installing shell's
    /// `AGENTCHAT_CONFIG` (the manager would not pass that variable on), made absolute.
    pub path: Option<PathBuf>,
    /// The file read under the unit's environment, or why it cannot be.
    file: Result<ConfigFile, ConfigError>,
}

impl UnitConfig {
    /// Reads the config once for a unit with the `--config` flag `flag`. Fails only when the
    /// path cannot be made absolute; a config that cannot be read is kept as its error, for the
    /// caller to report or pass over.
    pub fn read(flag: Option<&Path>) -> anyhow::Result<UnitConfig> {
        let env = std::env::var_os("AGENTCHAT_CONFIG").filter(|v| !v.is_empty());
        let path = match flag.map(Path::to_path_buf).or(env.map(PathBuf::from)) {
            Some(c) => {
                Some(std::path::absolute(&c).context("cannot make the config path absolute")?)
            }
            None => None,
        };
        let unit_env: HashMap<String, String> = UNIT_VARIABLES
            .into_iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        let args = ConfigArgs {
            config: path.clone(),
            ..Default::default()
        };
        let file = ConfigFile::read_with_env(&args, unit_env);
        Ok(UnitConfig { path, file })
    }

    /// The file, or why it cannot be read.
    pub fn file(&self) -> anyhow::Result<&ConfigFile> {
        self.file
            .as_ref()
            .map_err(|e| anyhow::anyhow!(e.to_string()))
    }

    /// `profile`'s settings as its listener will resolve them; `key` as [`ConfigFile::settings`].
    pub fn settings(&self, profile: &str, key: KeyFile) -> anyhow::Result<Settings> {
        Ok(self.file()?.settings(Some(profile), key)?)
    }

    /// The run grace `profile`'s listener will use, in whole seconds rounded up: its config's
    /// `listen.kill_grace`, or the default when the config cannot be loaded (the listener itself
    /// reports why when it starts).
    pub fn kill_grace_secs(&self, profile: &str) -> u64 {
        let grace = self
            .settings(profile, KeyFile::Named)
            .map(|s| s.listen.kill_grace)
            .unwrap_or(crate::config::DEFAULT_KILL_GRACE);
        super::whole_secs(grace)
    }
}

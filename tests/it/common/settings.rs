//! A `Settings` builder for tests that call library code directly: it starts from what the real
//! config layer resolves with no config file (so a new setting never needs a test edit) and sets
//! only what a test names.

use agentchat::config::{ConfigArgs, RuntimeKind, Settings, resolve};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub struct SettingsBuilder {
    settings: Settings,
}

/// Settings with the config layer's defaults, keeping state in `state_dir`.
pub fn settings(state_dir: &Path) -> SettingsBuilder {
    let args = ConfigArgs {
        state_dir: Some(state_dir.to_path_buf()),
        ..ConfigArgs::default()
    };
    let env = HashMap::from([("HOME".to_string(), state_dir.display().to_string())]);
    let settings = resolve(&args, &env, None).expect("the defaults resolve");
    SettingsBuilder { settings }
}

impl SettingsBuilder {
    pub fn runtime(mut self, runtime: RuntimeKind) -> Self {
        self.settings.listen.runtime = runtime;
        self
    }

    pub fn api_base(mut self, api_base: &str) -> Self {
        self.settings.api_base = api_base.to_string();
        self
    }

    /// The `claude` and the `codex` binary both.
    pub fn agent_binary(mut self, binary: PathBuf) -> Self {
        self.settings.listen.claude.binary = Some(binary.clone());
        self.settings.listen.codex.binary = Some(binary);
        self
    }

    pub fn build(self) -> Settings {
        self.settings
    }
}

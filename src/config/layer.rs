//! What one source (the file's top level, a profile table, the environment, the flags) sets, and
//! how sources stack: a higher layer wins wherever it sets a value.

use super::{LogFormat, McpMode, RuntimeKind};
use secrecy::SecretString;
use std::path::PathBuf;
use std::time::Duration;

/// A value and the key, variable or flag that set it, for checks that run after the layers are
/// merged (a duration's bounds depend on the merged `api_base`).
#[derive(Debug, Clone)]
pub struct Sourced<T> {
    pub value: T,
    pub key: String,
}

/// Every field is optional so a layer overrides only what it names. Deliberately not `Debug`:
/// it may hold the key.
#[derive(Default)]
pub struct Layer {
    pub api_base: Option<String>,
    pub api_key_file: Option<PathBuf>,
    pub api_key: Option<SecretString>,
    /// `allow_cleartext`: an `http://` `api_base` beyond loopback is allowed.
    pub allow_cleartext: Option<bool>,
    pub log_level: Option<String>,
    pub log_format: Option<LogFormat>,
    pub runtime: Option<RuntimeKind>,
    pub command: Option<Vec<String>>,
    pub workdir: Option<PathBuf>,
    pub run_timeout: Option<Sourced<Duration>>,
    pub kill_grace: Option<Sourced<Duration>>,
    pub quiet_window: Option<Sourced<Duration>>,
    pub max_delay: Option<Sourced<Duration>>,
    pub idle_timeout: Option<Sourced<Duration>>,
    pub script_gets_key: Option<bool>,
    pub identity_block: Option<bool>,
    pub env_pass: Option<Vec<String>>,
    pub tools: Option<Vec<String>>,
    pub run_logs_keep: Option<usize>,
    pub run_log_max_bytes: Option<u64>,
    pub metrics_addr: Option<std::net::SocketAddr>,
    pub metrics_public: Option<bool>,
    pub max_concurrent_runs: Option<usize>,
    pub min_available_memory: Option<u64>,
    pub claude_binary: Option<PathBuf>,
    pub claude_extra_args: Option<Vec<String>>,
    pub claude_mcp: Option<McpMode>,
    pub claude_mcp_url: Option<String>,
    pub codex_binary: Option<PathBuf>,
    pub codex_extra_args: Option<Vec<String>>,
    pub codex_mcp_url: Option<String>,
    /// `[listen.policy]`, key by key: a profile's table over the top level's.
    pub policy: Option<crate::core::policy::PolicyLayer>,
}

impl Layer {
    /// `self` wins wherever it sets a value.
    pub fn over(self, base: Layer) -> Layer {
        Layer {
            api_base: self.api_base.or(base.api_base),
            api_key_file: self.api_key_file.or(base.api_key_file),
            api_key: self.api_key.or(base.api_key),
            allow_cleartext: self.allow_cleartext.or(base.allow_cleartext),
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
            env_pass: self.env_pass.or(base.env_pass),
            tools: self.tools.or(base.tools),
            run_logs_keep: self.run_logs_keep.or(base.run_logs_keep),
            run_log_max_bytes: self.run_log_max_bytes.or(base.run_log_max_bytes),
            metrics_addr: self.metrics_addr.or(base.metrics_addr),
            metrics_public: self.metrics_public.or(base.metrics_public),
            max_concurrent_runs: self.max_concurrent_runs.or(base.max_concurrent_runs),
            min_available_memory: self.min_available_memory.or(base.min_available_memory),
            claude_binary: self.claude_binary.or(base.claude_binary),
            claude_extra_args: self.claude_extra_args.or(base.claude_extra_args),
            claude_mcp: self.claude_mcp.or(base.claude_mcp),
            claude_mcp_url: self.claude_mcp_url.or(base.claude_mcp_url),
            codex_binary: self.codex_binary.or(base.codex_binary),
            codex_extra_args: self.codex_extra_args.or(base.codex_extra_args),
            codex_mcp_url: self.codex_mcp_url.or(base.codex_mcp_url),
            policy: match (self.policy, base.policy) {
                (Some(top), Some(low)) => Some(top.over(low)),
                (top, low) => top.or(low),
            },
        }
    }
}

//! The `[listen]`, `[listen.claude]` and `[listen.codex]` keys, each defined once: its name, the
//! type the file holds, the type a layer holds, the rule from one to the other, and its default.
//! From each table's one list come the file's shape (`ListenTable`, ...), the "did you mean" list
//! (`LISTEN_KEYS`, ...), the layer's fields (`ListenLayer`, ...) with how one layer stacks on
//! another, and the resolved settings (`ListenSettings`, ...) with each key's default. A new key
//! is one line here (and its entry in config/agentchat.example.toml, which a test checks).

use super::file::{ApiBase, MaxConcurrentRuns, Paths, RunLogMaxBytes, RunLogsKeep, Table, Value};
use super::layer::{Sourced, layer};
use super::value::{self, DurationRule};
use super::{ConfigError, McpMode, RuntimeKind};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// A setting's type from its default's form: `default` and `default(value)` keep the layer's
/// type, `optional` has no default (`Option` of it), `bounded(RULE)` is a checked `Duration`.
macro_rules! setting_type {
    (default, $layer:ty) => { $layer };
    (optional, $layer:ty) => { Option<$layer> };
    (bounded, $layer:ty) => { Duration };
}

/// A setting's value from the merged layer's: the type's default, the given default, none, or
/// the duration rule's default and bounds (the minimum divided by `factor` where the rule says).
macro_rules! setting_value {
    (default, $v:expr, $factor:expr) => {
        $v.unwrap_or_default()
    };
    (default, $v:expr, $factor:expr, $default:expr) => {
        $v.unwrap_or($default)
    };
    (optional, $v:expr, $factor:expr) => {
        $v
    };
    (bounded, $v:expr, $factor:expr, $rule:expr) => {
        bounded($v, &$rule, $factor)?
    };
}

/// A duration inside its rule's bounds, or the rule's default when no source set it; an error
/// names the key, variable or flag that set it.
fn bounded(
    v: Option<Sourced<Duration>>,
    rule: &DurationRule,
    factor: f64,
) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(rule.default),
        Some(Sourced { value, key }) => rule
            .check(value, factor)
            .map_err(|problem| ConfigError::BadValue { key, problem }),
    }
}

/// One table: its shape, names, layer and settings types, then `keys { key: file type => layer
/// type = rule, default, .. }` for its plain keys and `tables { name: shape => settings, .. }`
/// for its subtables, each read by its own code in `file` and resolved by its own in `resolve`.
/// The rule is a method of `file::Paths` taking the file's value and the key's full path; the
/// default is one of `setting_type!`'s forms.
macro_rules! keyed_table {
    (
        $(#[$meta:meta])*
        table $shape:ident, names $names:ident, layer $layer_name:ident;
        $(#[$smeta:meta])*
        settings $settings:ident;
        keys { $(
            $(#[$doc:meta])*
            $key:ident: $file:ty => $layer:ty = $rule:ident, $how:ident $(($default:expr))?,
        )* }
        tables { $( $(#[$tdoc:meta])* $table:ident: $tshape:ty => $tsettings:ty, )* }
    ) => {
        $(#[$meta])*
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct $shape {
            $( $key: Option<Value<$file>>, )*
            $( $(#[$tdoc])* pub(super) $table: Option<Table<$tshape>>, )*
        }

        /// The table's keys, in the shape's order (a unit test in `file` checks them against
        /// serde's own list), for "did you mean".
        pub(super) const $names: &[&str] = &[$(stringify!($key),)* $(stringify!($table),)*];

        layer! {
            /// The table's plain keys as one source (a file table, the environment, the flags)
            /// sets them.
            pub struct $layer_name {
                $( $(#[$doc])* $key: $layer, )*
            }
        }

        $(#[$smeta])*
        #[derive(Debug, Clone)]
        pub struct $settings {
            $( $(#[$doc])* pub $key: setting_type!($how, $layer), )*
            $( $(#[$tdoc])* pub $table: $tsettings, )*
        }

        impl $layer_name {
            /// The table's plain keys as a layer, each by its rule and named by its full path
            /// (`prefix` ends with the table's own path and a dot); the subtables stay in `t`.
            pub(super) fn take(
                t: &mut $shape,
                paths: Paths,
                prefix: &str,
            ) -> Result<$layer_name, ConfigError> {
                Ok($layer_name {
                    $( $key: t
                        .$key
                        .take()
                        .map(|v| paths.$rule(v.0, &format!("{prefix}{}", stringify!($key))))
                        .transpose()?, )*
                })
            }

            /// The merged layer as settings: each key's value or its default, a duration inside
            /// its bounds at the test time scale's `factor`; the subtables' settings as given.
            #[allow(unused_variables)]
            pub(super) fn settings(
                self,
                factor: f64,
                $( $table: $tsettings, )*
            ) -> Result<$settings, ConfigError> {
                Ok($settings {
                    $( $key: setting_value!($how, self.$key, factor $(, $default)?), )*
                    $( $table, )*
                })
            }
        }
    };
}

keyed_table! {
    /// `[listen]` as the file writes it; an unknown key is an error naming its path.
    table ListenTable, names LISTEN_KEYS, layer ListenLayer;
    /// `[listen]` resolved: what the listener runs and how.
    settings ListenSettings;
    keys {
        runtime: RuntimeKind => RuntimeKind = plain, default(RuntimeKind::ClaudeCode),
        /// argv for the `script` runtime; its program found like a CLI's `binary`.
        command: Vec<String> => Vec<String> = command, default,
        /// The runs' working directory; a folder in the state dir when unset.
        workdir: String => PathBuf = path, optional,
        run_timeout: Duration => Sourced<Duration> = sourced, bounded(value::RUN_TIMEOUT),
        kill_grace: Duration => Sourced<Duration> = sourced, bounded(value::KILL_GRACE),
        quiet_window: Duration => Sourced<Duration> = sourced, bounded(value::QUIET_WINDOW),
        max_delay: Duration => Sourced<Duration> = sourced, bounded(value::MAX_DELAY),
        /// No inbound traffic for this long drops the socket.
        idle_timeout: Duration => Sourced<Duration> = sourced, bounded(value::IDLE_TIMEOUT),
        /// Give the script runtime the key in `AGENTCHAT_API_KEY`.
        script_gets_key: bool => bool = plain, default(true),
        /// Keep the identity block current in CLAUDE.md / AGENTS.md inside `workdir`.
        identity_block: bool => bool = plain, default(true),
        /// `listen.env_pass`: variables (`NAME`, `PREFIX_*`) a run inherits beyond the allowlist
        /// of `core::run_env`.
        env_pass: Vec<String> => Vec<String> = env_pass, default,
        /// `listen.tools`: what a run may use beyond the AgentChat tools (Claude Code file
        /// tools, or `shell` for Codex), inside the workdir only; empty by default.
        tools: Vec<String> => Vec<String> = plain, default,
        /// Newest run logs kept.
        run_logs_keep: RunLogsKeep => usize = plain, default(50),
        /// Most bytes of a run's output kept in its log: the first half, then the last half
        /// (`runtime::supervisor`).
        run_log_max_bytes: RunLogMaxBytes => u64 = plain,
            default(value::DEFAULT_RUN_LOG_MAX_BYTES),
        /// Where `/metrics`, `/healthz` and `/readyz` are served (`listen.metrics_addr`,
        /// `AGENTCHAT_METRICS_ADDR`, `--metrics-addr`); off when unset. One that is not
        /// loopback needs `metrics_public` (`resolve`).
        metrics_addr: String => SocketAddr = socket_addr, optional,
        /// `listen.metrics_public`: allows a `metrics_addr` that is not loopback.
        metrics_public: bool => bool = plain, default(false),
        /// `listen.max_concurrent_runs`: the most runs `listen --all` starts at once, across
        /// its profiles (`core::admission`); `None` is one per CPU core, at least two. The top
        /// level's alone counts (a profile's own is ignored with a warning); a single `listen`
        /// has one run.
        max_concurrent_runs: MaxConcurrentRuns => usize = plain, optional,
        /// `listen.min_available_memory`, in bytes: `listen --all` starts no run while less is
        /// available (`core::admission::available`). Top level only, like
        /// `max_concurrent_runs`.
        min_available_memory: String => u64 = byte_size, optional,
    }
    tables {
        claude: ClaudeTable => ClaudeSettings,
        codex: CodexTable => CodexSettings,
        /// `[listen.policy]` (issue 26): who may wake a run, when, and how much the runs may
        /// spend; the default has no rule. Read by `core::policy`'s own shape, which names its
        /// keys' paths.
        policy: toml::Table => crate::core::policy::Policy,
    }
}

keyed_table! {
    /// `[listen.claude]`: Claude Code.
    table ClaudeTable, names CLAUDE_KEYS, layer ClaudeLayer;
    /// `[listen.claude]` resolved.
    settings ClaudeSettings;
    keys {
        /// `claude` on PATH unless set; a path with a `/` is relative to the config's folder.
        binary: String => PathBuf = program, optional,
        extra_args: Vec<String> => Vec<String> = plain, default,
        /// Claude Code's MCP wiring: the listener's own config file, or the user's setup.
        mcp: McpMode => McpMode = plain, default(McpMode::Listener),
        /// `<api_base>/mcp` unless set.
        mcp_url: ApiBase => String = plain, optional,
    }
    tables {}
}

keyed_table! {
    /// `[listen.codex]`: Codex.
    table CodexTable, names CODEX_KEYS, layer CodexLayer;
    /// `[listen.codex]` resolved.
    settings CodexSettings;
    keys {
        /// `codex` on PATH unless set; a path with a `/` is relative to the config's folder.
        binary: String => PathBuf = program, optional,
        extra_args: Vec<String> => Vec<String> = plain, default,
        /// `<api_base>/mcp` unless set.
        mcp_url: ApiBase => String = plain, optional,
    }
    tables {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of the example config's section `[table]` (`""`: the top level, before the
    /// first header).
    fn section<'a>(example: &'a str, table: &str) -> Vec<&'a str> {
        let mut current = String::new();
        let mut out = Vec::new();
        for line in example.lines() {
            if let Some(header) = line.strip_prefix('[') {
                current = header.trim_end().trim_end_matches(']').to_string();
            } else if current == table {
                out.push(line);
            }
        }
        out
    }

    #[test]
    fn the_example_config_documents_every_key_in_its_own_table() {
        let example = include_str!("../../config/agentchat.example.toml");
        let subtables = ["listen", "profiles", "claude", "codex", "policy"];
        for (table, keys) in [
            ("", super::super::hint::TOP_KEYS),
            ("listen", LISTEN_KEYS),
            ("listen.claude", CLAUDE_KEYS),
            ("listen.codex", CODEX_KEYS),
        ] {
            let lines = section(example, table);
            for key in keys.iter().filter(|k| !subtables.contains(k)) {
                let set = |l: &&str| {
                    let l = l.trim_start_matches('#').trim_start();
                    l.strip_prefix(*key)
                        .is_some_and(|rest| rest.trim_start().starts_with('='))
                };
                assert!(
                    lines.iter().any(set),
                    "config/agentchat.example.toml does not show `{key}` under [{table}]"
                );
            }
        }
        for header in ["[listen]", "[listen.claude]", "[listen.codex]"] {
            assert!(example.lines().any(|l| l == header), "{header}");
        }
    }
}

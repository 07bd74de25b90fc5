//! The `[listen]`, `[listen.claude]` and `[listen.codex]` keys, each defined once: its name, the
//! type the file holds, the type a layer holds, the rule from one to the other, and its default.
//! From each table's one list come the file's shape (`ListenTable`, ...), the "did you mean" list
//! (`LISTEN_KEYS`, ...), the layer's fields (`ListenLayer`, ...) with how one layer stacks on
//! another, the resolved settings (`ListenSettings`, ...) with each key's default, and the
//! environment's and the flags' layers from the variable and flag a key may have. A new key is
//! one line here (and its entry in config/agentchat.example.toml, which a test checks).

use super::file::{ApiBase, MaxConcurrentRuns, Paths, RunLogMaxBytes, RunLogsKeep, Table, Value};
use super::layer::{Sourced, layer};
use super::value::{self, DurationRule};
use super::{ConfigArgs, ConfigError, McpMode, RuntimeKind};
use std::collections::HashMap;
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

/// The duration rule a `bounded` key follows, for the test that it is the key's own.
#[cfg(test)]
macro_rules! setting_rule {
    (bounded, $rule:expr) => {
        Some($rule)
    };
    ($how:ident $(, $default:expr)?) => {
        None
    };
}

/// A key's value from its variable (`AGENTCHAT_RUNTIME`) by the line's rule, or none when the
/// line names no variable; an error names the variable.
macro_rules! setting_env {
    ($env:ident) => {
        None
    };
    ($env:ident, $var:literal, $rule:path) => {
        super::env::parse($env, $var, $rule)?
    };
}

/// A key's value from its flag (`--runtime`, the `ConfigArgs` field of the key's name) by the
/// line's rule, or none when the line names no flag; an error names the flag.
macro_rules! setting_flag {
    ($args:ident) => {
        None
    };
    ($args:ident, $key:ident, $flag:literal, $rule:path) => {
        $args
            .$key
            .as_ref()
            .map(|v| {
                $rule(v).map_err(|problem| ConfigError::BadValue {
                    key: $flag.into(),
                    problem,
                })
            })
            .transpose()?
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
/// type = rule, default [env(VARIABLE, rule)] [flag(--flag, rule)], .. }` for its plain keys
/// and `tables { name: shape => settings, .. }` for its subtables, each read by its own code in
/// `file` and resolved by its own in `resolve`. The key's rule is a method of `file::Paths`
/// taking the file's value and the key's full path; the default is one of `setting_type!`'s
/// forms; a variable's rule takes its text, a flag's the `ConfigArgs` field of the key's name
/// (both `value` functions, the same rules the file's keys follow).
macro_rules! keyed_table {
    (
        $(#[$meta:meta])*
        table $shape:ident, names $names:ident, layer $layer_name:ident;
        $(#[$smeta:meta])*
        settings $settings:ident;
        keys { $(
            $(#[$doc:meta])*
            $key:ident: $file:ty => $layer:ty = $rule:ident, $how:ident $(($default:expr))?
                $(env($var:literal, $env_rule:path))? $(flag($flag:literal, $flag_rule:path))?,
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

            /// The variables that set the table's keys (`env::VARIABLES` lists them all).
            #[cfg(test)]
            pub(super) const VARIABLES: &'static [&'static str] = &[$($($var,)?)*];

            /// The flags that set the table's keys, as `--help` spells them.
            #[cfg(test)]
            pub(super) const FLAGS: &'static [&'static str] = &[$($($flag,)?)*];

            /// Each key and the duration rule it is bounded by, if any.
            #[cfg(test)]
            pub(super) const DURATIONS: &'static [(&'static str, Option<DurationRule>)] =
                &[$((stringify!($key), setting_rule!($how $(, $default)?)),)*];

            /// The environment's layer of the table: each key its variable sets. (A table
            /// without variables never reads `env`, nor one without flags `args`.)
            #[allow(unused_variables)]
            pub(super) fn from_env(
                env: &HashMap<String, String>,
            ) -> Result<$layer_name, ConfigError> {
                Ok($layer_name {
                    $( $key: setting_env!(env $(, $var, $env_rule)?), )*
                })
            }

            /// The flags' layer of the table: each key its flag sets.
            #[allow(unused_variables)]
            pub(super) fn from_flags(args: &ConfigArgs) -> Result<$layer_name, ConfigError> {
                Ok($layer_name {
                    $( $key: setting_flag!(args $(, $key, $flag, $flag_rule)?), )*
                })
            }

            /// The merged layer as settings: each key's value or its default, a duration inside
            /// its bounds at the test time scale's `factor` (unread by a table without
            /// durations); the subtables' settings as given.
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
        runtime: RuntimeKind => RuntimeKind = plain, default(RuntimeKind::ClaudeCode)
            env("AGENTCHAT_RUNTIME", value::choice) flag("--runtime", value::given),
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
        metrics_addr: String => SocketAddr = socket_addr, optional
            env("AGENTCHAT_METRICS_ADDR", value::socket_addr)
            flag("--metrics-addr", value::socket_addr),
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

    /// The names of a value's fields as `{:#?}` shows them (its own, not its fields' fields).
    fn field_names(debug: &str) -> Vec<&str> {
        debug
            .lines()
            .filter_map(|l| l.strip_prefix("    "))
            .filter(|l| !l.starts_with(' '))
            .filter_map(|l| l.split_once(':').map(|(name, _)| name))
            .collect()
    }

    fn defaults() -> crate::config::Settings {
        let env = HashMap::from([("HOME".to_string(), "/home/u".to_string())]);
        crate::config::resolve(&ConfigArgs::default(), &env, None).unwrap()
    }

    #[test]
    fn each_settings_field_is_a_key_of_its_table_in_the_tables_order() {
        let s = defaults();
        for (settings, keys) in [
            (format!("{:#?}", s.listen), LISTEN_KEYS),
            (format!("{:#?}", s.listen.claude), CLAUDE_KEYS),
            (format!("{:#?}", s.listen.codex), CODEX_KEYS),
        ] {
            assert_eq!(field_names(&settings), keys, "{settings}");
        }
    }

    #[test]
    fn a_key_without_a_value_takes_its_lines_default() {
        let l = defaults().listen;
        assert_eq!(l.runtime, RuntimeKind::ClaudeCode);
        assert!(l.command.is_empty() && l.env_pass.is_empty() && l.tools.is_empty());
        assert_eq!(l.workdir, None);
        assert_eq!(l.run_timeout, value::RUN_TIMEOUT.default);
        assert_eq!(l.kill_grace, value::KILL_GRACE.default);
        assert_eq!(l.quiet_window, value::QUIET_WINDOW.default);
        assert_eq!(l.max_delay, value::MAX_DELAY.default);
        assert_eq!(l.idle_timeout, value::IDLE_TIMEOUT.default);
        assert!(l.script_gets_key && l.identity_block && !l.metrics_public);
        assert_eq!(l.run_logs_keep, 50);
        assert_eq!(l.run_log_max_bytes, value::DEFAULT_RUN_LOG_MAX_BYTES);
        assert_eq!(l.metrics_addr, None);
        assert_eq!(l.max_concurrent_runs, None);
        assert_eq!(l.min_available_memory, None);
        assert_eq!(l.claude.mcp, McpMode::Listener);
        assert!(l.claude.binary.is_none() && l.claude.mcp_url.is_none());
        assert!(l.codex.binary.is_none() && l.codex.mcp_url.is_none());
        assert!(l.claude.extra_args.is_empty() && l.codex.extra_args.is_empty());
    }

    #[test]
    fn the_values_the_example_config_writes_at_the_top_level_are_the_lines_defaults() {
        let env = HashMap::from([("HOME".to_string(), "/home/u".to_string())]);
        let example = include_str!("../../config/agentchat.example.toml");
        let path = std::path::Path::new("/etc/agentchat/config.toml");
        let written =
            crate::config::resolve(&ConfigArgs::default(), &env, Some((path, example))).unwrap();
        assert_eq!(
            format!("{:?}", written.listen),
            format!("{:?}", defaults().listen)
        );
    }

    #[test]
    fn each_bounded_key_follows_its_own_duration_rule_and_every_rule_has_its_key() {
        let bounded: Vec<(&str, &str)> = ListenLayer::DURATIONS
            .iter()
            .filter_map(|(key, rule)| rule.map(|r| (*key, r.key)))
            .collect();
        for (key, rule_key) in &bounded {
            assert_eq!(key, rule_key);
        }
        let ruled: Vec<&str> = value::DURATION_RULES.iter().map(|r| r.key).collect();
        let keys: Vec<&str> = bounded.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ruled);
        for table in [ClaudeLayer::DURATIONS, CodexLayer::DURATIONS] {
            assert!(table.iter().all(|(_, rule)| rule.is_none()));
        }
    }

    #[test]
    fn each_keys_variable_is_read_by_the_config_and_each_flag_is_a_config_flag() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            config: ConfigArgs,
        }
        let command = <Cli as clap::CommandFactory>::command();
        let flags: Vec<String> = command
            .get_arguments()
            .filter_map(|a| a.get_long())
            .map(|l| format!("--{l}"))
            .collect();
        for (variables, table_flags) in [
            (ListenLayer::VARIABLES, ListenLayer::FLAGS),
            (ClaudeLayer::VARIABLES, ClaudeLayer::FLAGS),
            (CodexLayer::VARIABLES, CodexLayer::FLAGS),
        ] {
            for v in variables {
                assert!(super::super::VARIABLES.contains(v), "{v}");
            }
            for f in table_flags {
                assert!(flags.iter().any(|l| l == f), "{f} in {flags:?}");
            }
        }
        assert_eq!(
            ListenLayer::VARIABLES,
            ["AGENTCHAT_RUNTIME", "AGENTCHAT_METRICS_ADDR"]
        );
        assert_eq!(ListenLayer::FLAGS, ["--runtime", "--metrics-addr"]);
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

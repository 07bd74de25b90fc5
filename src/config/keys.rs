//! Every key, each defined once: the top level's (`top_table!`: `api_base`, the key, the log) and
//! the `[listen]`, `[listen.claude]` and `[listen.codex]` keys (`keyed_table!`): its name, the
//! type the file holds, the type a layer holds, the rule from one to the other, and its default.
//! From each table's one list come the file's shape (`SettingsTable`, `ListenTable`, ...), the
//! "did you mean" list (`TOP_KEYS`, `LISTEN_KEYS`, ...), the layer's fields (`Layer`,
//! `ListenLayer`, ...) with how one layer stacks on another, the resolved settings
//! (`TopSettings`, `ListenSettings`, ...) with each key's default, and the environment's and the
//! flags' layers from the variable and flag a key may have. A new key is one line here (and its
//! entry in config/agentchat.example.toml, which a test checks). What a line cannot say stays
//! code its doc names: `api_base`'s `/v1` and clear-text checks and the choice of the key
//! (`resolve`), the `profiles` subtable (`file`), and the `ConfigArgs` flags (`config`).

use super::file::{
    ApiBase, Dollars, HostRuns, LogFilter, MaxConcurrentRuns, Paths, RunLogMaxBytes, RunLogsKeep,
    Secret, Table, Value,
};
use super::layer::{Sourced, layer};
use super::value::{self, DurationRule};
use super::{ConfigArgs, ConfigError, LogFormat, McpMode, RuntimeKind};
use secrecy::SecretString;
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
            env("AGENTCHAT_RUNTIME", value::runtime) flag("--runtime", value::given),
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
        /// `listen.sandbox_read`: more paths a run may read beyond the kernel's line
        /// (`core::sandbox`).
        sandbox_read: Vec<String> => Vec<PathBuf> = paths, default,
        /// `listen.sandbox_write`: more paths a run may read and write.
        sandbox_write: Vec<String> => Vec<PathBuf> = paths, default,
        /// `listen.sandbox_ports`: more TCP ports a run may connect to.
        sandbox_ports: Vec<u16> => Vec<u16> = plain, default,
        /// `listen.sandbox_script`: confine the script runtime's runs too (Claude Code's and
        /// Codex's always are).
        sandbox_script: bool => bool = plain, default(true),
        /// `listen.instructions`: a file whose text every run is told after the identity block,
        /// read by the listener (`runtime::instructions`).
        instructions: String => PathBuf = path, optional,
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
        /// `listen.host_max_runs_per_day`: with `--all`, the most runs its profiles start in a
        /// day together, each profile's own local day (`core::host::HostBudget`); `0` or unset
        /// is no cap. Top level only, like `max_concurrent_runs`.
        host_max_runs_per_day: HostRuns => u32 = plain, optional,
        /// `listen.host_max_cost_per_day_usd`: the same for what their runs cost (reported, or
        /// estimated at the per-run budget).
        host_max_cost_per_day_usd: Dollars => f64 = plain, optional,
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

/// The top level's table (a profile's own too): `table SHAPE<P>` (`P`: what `profiles` may
/// hold there), then `keys { .. }` written as `keyed_table!`'s, where a key's default is
/// `default(value)` or `optional` (no default: the key file and the key, which
/// `resolve::key` chooses between, with `AGENTCHAT_API_KEY` over both); then `tables { .. }`, the
/// subtables the shape reads (each by its own code in `file`), and `merged { .. }`, the layer's
/// subtables' layers, stacked key by key (`layer!`). From it come the shape, the names, the
/// `Layer` (deliberately not `Debug`: it may hold the key), and `TopSettings`, the keys with
/// their defaults (not `Debug` either), which `resolve` puts into `Settings` through the rules
/// their lines name.
macro_rules! top_table {
    (
        $(#[$meta:meta])*
        table $shape:ident<P>, names $names:ident, layer $layer_name:ident;
        $(#[$smeta:meta])*
        settings $settings:ident;
        keys { $(
            $(#[$doc:meta])*
            $key:ident: $file:ty => $layer:ty = $rule:ident, $how:ident $(($default:expr))?
                $(env($var:literal, $env_rule:path))? $(flag($flag:literal, $flag_rule:path))?,
        )* }
        tables { $( $(#[$tdoc:meta])* $table:ident: $tshape:ty, )* }
        merged { $( $(#[$mdoc:meta])* $merged:ident: $mty:ty, )* }
    ) => {
        $(#[$meta])*
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields, bound(deserialize = "P: serde::Deserialize<'de>"))]
        pub(super) struct $shape<P> {
            $( $key: Option<Value<$file>>, )*
            $( $(#[$tdoc])* pub(super) $table: Option<$tshape>, )*
        }

        /// The table's keys, in the shape's order (a unit test in `file` checks them against
        /// serde's own list), for "did you mean".
        pub(super) const $names: &[&str] = &[$(stringify!($key),)* $(stringify!($table),)*];

        layer! {
            /// What one source (the file's top level, a profile table, the environment, the
            /// flags) sets, every field optional. Deliberately not `Debug`: it may hold the key.
            pub struct $layer_name {
                $( $(#[$doc])* $key: $layer, )*
            }
            merged {
                $( $(#[$mdoc])* $merged: $mty, )*
            }
        }

        $(#[$smeta])*
        pub(super) struct $settings {
            $( $(#[$doc])* pub(super) $key: setting_type!($how, $layer), )*
        }

        impl $layer_name {
            /// The table's plain keys as a layer, each by its rule and named by its full path
            /// (`prefix`: `""` or `profiles.<name>.`); the subtables stay in `t`.
            pub(super) fn take<P>(
                t: &mut $shape<P>,
                paths: Paths,
                prefix: &str,
            ) -> Result<$layer_name, ConfigError> {
                Ok($layer_name {
                    $( $key: t
                        .$key
                        .take()
                        .map(|v| paths.$rule(v.0, &format!("{prefix}{}", stringify!($key))))
                        .transpose()?, )*
                    ..$layer_name::default()
                })
            }

            /// The variables that set the table's keys (`env::VARIABLES` lists them all).
            #[cfg(test)]
            pub(super) const VARIABLES: &'static [&'static str] = &[$($($var,)?)*];

            /// The flags that set the table's keys, as `--help` spells them.
            #[cfg(test)]
            pub(super) const FLAGS: &'static [&'static str] = &[$($($flag,)?)*];

            /// The environment's layer of the table's keys: each key its variable sets (the
            /// subtables' are their own tables', set by `env::layer`).
            pub(super) fn from_env(
                env: &HashMap<String, String>,
            ) -> Result<$layer_name, ConfigError> {
                Ok($layer_name {
                    $( $key: setting_env!(env $(, $var, $env_rule)?), )*
                    ..$layer_name::default()
                })
            }

            /// The flags' layer of the table's keys: each key its flag sets.
            pub(super) fn from_flags(args: &ConfigArgs) -> Result<$layer_name, ConfigError> {
                Ok($layer_name {
                    $( $key: setting_flag!(args $(, $key, $flag, $flag_rule)?), )*
                    ..$layer_name::default()
                })
            }

            /// The merged layer's keys, each its value or its line's default; the subtables'
            /// layers stay in `self`.
            pub(super) fn top(&mut self) -> $settings {
                $settings {
                    $( $key: setting_value!($how, self.$key.take(), 1.0 $(, $default)?), )*
                }
            }
        }
    };
}

top_table! {
    /// The top level as the file writes it, or a `[profiles.<name>]` table; an unknown key is
    /// an error naming its path.
    table SettingsTable<P>, names TOP_KEYS, layer Layer;
    /// The top level's keys resolved, before `resolve` puts them into `Settings`. Not `Debug`:
    /// it holds the key.
    settings TopSettings;
    keys {
        /// Written as it is; `resolve::api_base` drops a trailing `/v1` (keeping the URL as
        /// written in `Settings::api_base_written`) and refuses clear text beyond loopback
        /// unless `allow_cleartext`.
        api_base: ApiBase => String = plain, default(super::DEFAULT_API_BASE.to_string())
            env("AGENTCHAT_API_BASE", value::api_base) flag("--api-base", value::api_base),
        /// Named here, read by `load` (`read_key_file`); `resolve::key` chooses the key.
        api_key_file: String => PathBuf = path, optional,
        /// `resolve::key`: below `AGENTCHAT_API_KEY` and `api_key_file`.
        api_key: Secret => SecretString = plain, optional,
        /// An `http://` `api_base` beyond loopback is allowed (`resolve::no_cleartext`).
        allow_cleartext: bool => bool = plain, default(false)
            env("AGENTCHAT_ALLOW_CLEARTEXT", value::switch),
        log_level: LogFilter => String = plain, default("info".to_string())
            env("AGENTCHAT_LOG", value::log_filter),
        log_format: LogFormat => LogFormat = plain, default(LogFormat::Text)
            env("AGENTCHAT_LOG_FORMAT", value::choice),
    }
    tables {
        listen: Table<ListenTable>,
        /// The profiles' tables at the top level; in a profile's own table, an unknown key.
        profiles: P,
    }
    merged {
        /// `[listen]`'s plain keys.
        listen: ListenLayer,
        /// `[listen.claude]` and `[listen.codex]`.
        claude: ClaudeLayer,
        codex: CodexLayer,
        /// `[listen.policy]`, key by key: a profile's table over the top level's.
        policy: crate::core::policy::PolicyLayer,
    }
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
    fn each_top_level_line_but_the_key_file_is_a_settings_field() {
        let s = defaults();
        // Debug-printed only without a key (`api_key` is `None`: no variable, no file).
        assert!(s.api_key.is_none());
        let settings = format!("{s:#?}");
        let fields = field_names(&settings);
        // The key file is not a setting of its own: `resolve::key` makes it `key_source`.
        let lines: Vec<&str> = TOP_KEYS
            .iter()
            .copied()
            .filter(|k| !["api_key_file", "listen", "profiles"].contains(k))
            .collect();
        let mut in_settings: Vec<&str> = fields
            .iter()
            .copied()
            .filter(|f| lines.contains(f))
            .collect();
        // `Settings` keeps its own order (`allow_cleartext` before `api_key`).
        in_settings.sort_unstable();
        let mut lines = lines;
        lines.sort_unstable();
        assert_eq!(in_settings, lines, "{settings}");
        assert!(fields.contains(&"listen") && fields.contains(&"key_source"));
        assert_eq!(
            TOP_KEYS,
            [
                "api_base",
                "api_key_file",
                "api_key",
                "allow_cleartext",
                "log_level",
                "log_format",
                "listen",
                "profiles"
            ]
        );
    }

    #[test]
    fn a_top_level_key_without_a_value_takes_its_lines_default() {
        let s = defaults();
        assert_eq!(s.api_base, crate::config::DEFAULT_API_BASE);
        assert_eq!(s.api_base_written, None);
        assert!(!s.allow_cleartext);
        assert_eq!(s.log_level, "info");
        assert_eq!(s.log_format, LogFormat::Text);
        assert!(s.api_key.is_none());
        assert_eq!(s.key_source, crate::config::KeySource::Missing);
        // The lines' own defaults, from a layer that sets nothing.
        let top = Layer::default().top();
        assert_eq!(top.api_base, crate::config::DEFAULT_API_BASE);
        assert!(top.api_key_file.is_none() && top.api_key.is_none());
        assert!(!top.allow_cleartext);
        assert_eq!(
            (top.log_level.as_str(), top.log_format),
            ("info", LogFormat::Text)
        );
    }

    #[test]
    fn a_top_level_keys_variable_and_flag_set_it_by_its_lines_rule() {
        let env = HashMap::from([
            ("HOME".to_string(), "/home/u".to_string()),
            (
                "AGENTCHAT_API_BASE".to_string(),
                "http://127.0.0.1:9/v1".to_string(),
            ),
            ("AGENTCHAT_LOG".to_string(), "debug".to_string()),
            ("AGENTCHAT_LOG_FORMAT".to_string(), "json".to_string()),
            ("AGENTCHAT_ALLOW_CLEARTEXT".to_string(), "1".to_string()),
        ]);
        let s = crate::config::resolve(&ConfigArgs::default(), &env, None).unwrap();
        assert_eq!(s.api_base, "http://127.0.0.1:9");
        assert_eq!(s.api_base_written.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(s.log_level, "debug");
        assert_eq!(s.log_format, LogFormat::Json);
        assert!(s.allow_cleartext);
        let args = ConfigArgs {
            api_base: Some("http://127.0.0.1:8".into()),
            ..ConfigArgs::default()
        };
        let s = crate::config::resolve(&args, &env, None).unwrap();
        assert_eq!(s.api_base, "http://127.0.0.1:8", "the flag wins");
        let bad = |env: &HashMap<String, String>, args: &ConfigArgs| {
            crate::config::resolve(args, env, None)
                .err()
                .unwrap()
                .to_string()
        };
        let mut wrong = env.clone();
        wrong.insert("AGENTCHAT_LOG_FORMAT".into(), "xml".into());
        assert!(bad(&wrong, &ConfigArgs::default()).contains("`AGENTCHAT_LOG_FORMAT`"));
        let args = ConfigArgs {
            api_base: Some("ftp://x".into()),
            ..ConfigArgs::default()
        };
        assert!(bad(&env, &args).contains("`--api-base`"));
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
        let d = defaults();
        assert_eq!(
            (&written.api_base, written.allow_cleartext),
            (&d.api_base, d.allow_cleartext)
        );
        assert_eq!(
            (&written.log_level, written.log_format),
            (&d.log_level, d.log_format)
        );
        assert_eq!(written.key_source, crate::config::KeySource::Missing);
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
            (Layer::VARIABLES, Layer::FLAGS),
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
        assert_eq!(
            Layer::VARIABLES,
            [
                "AGENTCHAT_API_BASE",
                super::super::ALLOW_CLEARTEXT,
                "AGENTCHAT_LOG",
                "AGENTCHAT_LOG_FORMAT"
            ]
        );
        assert_eq!(Layer::FLAGS, ["--api-base"]);
    }

    #[test]
    fn the_example_config_documents_every_key_in_its_own_table() {
        let example = include_str!("../../config/agentchat.example.toml");
        let subtables = ["listen", "profiles", "claude", "codex", "policy"];
        for (table, keys) in [
            ("", TOP_KEYS),
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

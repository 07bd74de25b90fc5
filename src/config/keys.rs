//! The `[listen]`, `[listen.claude]` and `[listen.codex]` keys, each defined once: its name, the
//! type the file holds, the type a layer holds, and the rule from one to the other. From each
//! table's one list come the file's shape (`ListenTable`, ...), the "did you mean" list
//! (`LISTEN_KEYS`, ...), the layer's fields (`ListenLayer`, ...) and how one layer stacks on
//! another, so a new key is one line here, its field in `ListenSettings` and its default in
//! `resolve::listen_settings` (and its entry in config/agentchat.example.toml, which a test
//! checks).

use super::file::{ApiBase, MaxConcurrentRuns, Paths, RunLogMaxBytes, RunLogsKeep, Table, Value};
use super::layer::{Sourced, layer};
use super::{ConfigError, McpMode, RuntimeKind};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// One table: `keys { key: file type => layer type = rule, .. }` for its plain keys, then its
/// subtables, each read by its own code in `file`. The rule is a method of `file::Paths` taking
/// the file's value and the key's full path.
macro_rules! keyed_table {
    (
        $(#[$meta:meta])*
        table $shape:ident, names $names:ident, layer $layer_name:ident;
        keys { $( $(#[$doc:meta])* $key:ident: $file:ty => $layer:ty = $rule:ident, )* }
        tables { $( $(#[$tdoc:meta])* $table:ident: $tshape:ty, )* }
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
        }
    };
}

keyed_table! {
    /// `[listen]` as the file writes it; an unknown key is an error naming its path.
    table ListenTable, names LISTEN_KEYS, layer ListenLayer;
    keys {
        runtime: RuntimeKind => RuntimeKind = plain,
        /// argv for the `script` runtime; its program found like a CLI's `binary`.
        command: Vec<String> => Vec<String> = command,
        workdir: String => PathBuf = path,
        run_timeout: Duration => Sourced<Duration> = sourced,
        kill_grace: Duration => Sourced<Duration> = sourced,
        quiet_window: Duration => Sourced<Duration> = sourced,
        max_delay: Duration => Sourced<Duration> = sourced,
        idle_timeout: Duration => Sourced<Duration> = sourced,
        script_gets_key: bool => bool = plain,
        identity_block: bool => bool = plain,
        env_pass: Vec<String> => Vec<String> = env_pass,
        tools: Vec<String> => Vec<String> = plain,
        run_logs_keep: RunLogsKeep => usize = plain,
        run_log_max_bytes: RunLogMaxBytes => u64 = plain,
        metrics_addr: String => SocketAddr = socket_addr,
        metrics_public: bool => bool = plain,
        max_concurrent_runs: MaxConcurrentRuns => usize = plain,
        min_available_memory: String => u64 = byte_size,
    }
    tables {
        claude: ClaudeTable,
        codex: CodexTable,
        /// `[listen.policy]`: read by `core::policy`'s own shape, which names its keys' paths.
        policy: toml::Table,
    }
}

keyed_table! {
    /// `[listen.claude]`: Claude Code.
    table ClaudeTable, names CLAUDE_KEYS, layer ClaudeLayer;
    keys {
        /// `claude` on PATH unless set; a path with a `/` is relative to the config's folder.
        binary: String => PathBuf = program,
        extra_args: Vec<String> => Vec<String> = plain,
        mcp: McpMode => McpMode = plain,
        mcp_url: ApiBase => String = plain,
    }
    tables {}
}

keyed_table! {
    /// `[listen.codex]`: Codex.
    table CodexTable, names CODEX_KEYS, layer CodexLayer;
    keys {
        binary: String => PathBuf = program,
        extra_args: Vec<String> => Vec<String> = plain,
        mcp_url: ApiBase => String = plain,
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

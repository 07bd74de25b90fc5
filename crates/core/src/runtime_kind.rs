//! The runtimes a listener can start, and one table that says what each is called and needs:
//! its name in config, flags and `status.json`, the texts it reads (`GET /v1/texts?runtime=`),
//! the program it runs when the config names none, the config key that names that program, the
//! arguments that ask the CLI whether it is logged in, and the file it loads every turn inside
//! the workdir (where the listener keeps the identity block, contract 3.6).
//!
//! Adding a runtime is a row here, a variant of [`RuntimeKind`], and its module in `runtime/`
//! (how it is started and judged); everything that only needs a name or a file reads this table.

/// Which agent runs when something waits on the tray.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuntimeKind {
    ClaudeCode,
    Codex,
    Script,
}

/// What a runtime is called and what it needs, as one row of [`RUNTIMES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeDescriptor {
    pub kind: RuntimeKind,
    /// The name in config (`listen.runtime`), flags (`--runtime`), `status.json` and logs.
    pub name: &'static str,
    /// The `runtime` the served texts are asked for (`generic` for a user's own script).
    pub texts_runtime: &'static str,
    /// The program looked up on `PATH` when the config names none; `None` when the user's
    /// config must name it (the script's `listen.command`).
    pub binary: Option<&'static str>,
    /// The config key that names the program.
    pub config_key: &'static str,
    /// The arguments that make the CLI say whether it is logged in (exit 0: logged in); `None`
    /// when there is nothing to log in to.
    pub login_check: Option<&'static [&'static str]>,
    /// The file the runtime loads on every turn from its working directory, where the identity
    /// block is kept; `None` when it loads none.
    pub identity_file: Option<&'static str>,
}

/// Every runtime, in [`RuntimeKind`] order.
pub const RUNTIMES: [RuntimeDescriptor; 3] = [
    RuntimeDescriptor {
        kind: RuntimeKind::ClaudeCode,
        name: "claude-code",
        texts_runtime: "claude-code",
        binary: Some("claude"),
        config_key: "listen.claude.binary",
        login_check: Some(&["auth", "status"]),
        identity_file: Some("CLAUDE.md"),
    },
    RuntimeDescriptor {
        kind: RuntimeKind::Codex,
        name: "codex",
        texts_runtime: "codex",
        binary: Some("codex"),
        config_key: "listen.codex.binary",
        login_check: Some(&["login", "status"]),
        identity_file: Some("AGENTS.md"),
    },
    RuntimeDescriptor {
        kind: RuntimeKind::Script,
        name: "script",
        texts_runtime: "generic",
        binary: None,
        config_key: "listen.command",
        login_check: None,
        identity_file: None,
    },
];

impl RuntimeKind {
    /// Every runtime, in table order.
    pub const ALL: [RuntimeKind; 3] = [
        RuntimeKind::ClaudeCode,
        RuntimeKind::Codex,
        RuntimeKind::Script,
    ];

    /// This runtime's row of [`RUNTIMES`].
    pub fn descriptor(self) -> &'static RuntimeDescriptor {
        let [claude_code, codex, script] = &RUNTIMES;
        match self {
            RuntimeKind::ClaudeCode => claude_code,
            RuntimeKind::Codex => codex,
            RuntimeKind::Script => script,
        }
    }

    /// The name used in config, flags, `status.json` and logs.
    pub fn as_str(self) -> &'static str {
        self.descriptor().name
    }

    /// The texts runtime this runtime reads (`generic` for scripts).
    pub fn texts_runtime(self) -> &'static str {
        self.descriptor().texts_runtime
    }

    /// The file the runtime loads every turn inside its workdir, if any.
    pub fn identity_file(self) -> Option<&'static str> {
        self.descriptor().identity_file
    }

    /// The runtime named `name` exactly as config and flags spell it.
    pub fn from_name(name: &str) -> Option<RuntimeKind> {
        RUNTIMES.iter().find(|d| d.name == name).map(|d| d.kind)
    }
}

impl std::fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_row_belongs_to_its_kind_and_names_are_unique() {
        for kind in RuntimeKind::ALL {
            assert_eq!(kind.descriptor().kind, kind);
            assert_eq!(RuntimeKind::from_name(kind.as_str()), Some(kind));
        }
        let mut names: Vec<&str> = RUNTIMES.iter().map(|d| d.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RUNTIMES.len());
    }

    #[test]
    fn a_cli_runtime_has_a_binary_a_login_check_and_an_identity_file() {
        for d in &RUNTIMES {
            assert_eq!(d.binary.is_some(), d.login_check.is_some(), "{}", d.name);
            assert_eq!(d.binary.is_some(), d.identity_file.is_some(), "{}", d.name);
        }
    }
}

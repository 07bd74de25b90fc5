//! What a woken run is offered (`docs/runtimes.md`, "What a woken run can touch"): by default the
//! AgentChat MCP tools and nothing else, whatever the user's CLI settings, permissions, hooks and
//! MCP servers say; more only by the profile's `listen.tools`, and then inside the workdir.
//!
//! A stranger's message starts the run, so everything here fails closed: the switches come after
//! the user's `extra_args` (the last occurrence of a flag wins) and the integration tests pin the
//! exact tool list each pinned CLI offers (`tests/it/runtimes_confine.rs`).

use super::RuntimeError;
use crate::config::{McpMode, RuntimeKind, Settings};

/// The Claude Code tools `listen.tools` may name: they read or write files, and Claude Code keeps
/// them to the working directory when no permission rule of the user's is loaded.
pub const CLAUDE_FILE_TOOLS: &[&str] = &["Read", "Grep", "Glob", "Edit", "Write", "NotebookEdit"];

/// Of those, the ones that write.
const CLAUDE_WRITING_TOOLS: &[&str] = &["Edit", "Write", "NotebookEdit"];

/// What `listen.tools` may name for Codex: its shell (with the workspace-write sandbox).
pub const CODEX_SHELL: &str = "shell";

/// Codex features switched off for every run: the shell and its sessions, sub-agents, images,
/// goals, hooks, plugins and apps (which bring tools and MCP servers), browsers and computer
/// use, skills and tool suggestions, memories, the sleep tool. `codex features list` names them
/// for the installed version; a feature a later version adds is caught by the pinned tool list.
pub const CODEX_FEATURES_OFF: &[&str] = &[
    "shell_tool",
    "unified_exec",
    "multi_agent",
    "multi_agent_v2",
    "view_image",
    "image_generation",
    "goals",
    "hooks",
    "apps",
    "plugins",
    "computer_use",
    "browser_use",
    "browser_use_external",
    "in_app_browser",
    "skill_search",
    "tool_suggest",
    "memories",
    "sleep_tool",
];

/// The Codex features `tools = ["shell"]` leaves on.
const CODEX_SHELL_FEATURES: &[&str] = &["shell_tool", "unified_exec"];

fn unknown_tool(runtime: &str, tool: &str, allowed: &[&str]) -> RuntimeError {
    RuntimeError::Unusable(format!(
        "`listen.tools` names `{tool}`, which a {runtime} run cannot be given; it takes {}",
        allowed
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// `listen.tools` for Claude Code, each checked against [`CLAUDE_FILE_TOOLS`].
fn claude_tools(settings: &Settings) -> Result<Vec<&str>, RuntimeError> {
    settings
        .listen
        .tools
        .iter()
        .map(|t| {
            CLAUDE_FILE_TOOLS
                .iter()
                .find(|known| **known == t.as_str())
                .copied()
                .ok_or_else(|| unknown_tool("Claude Code", t, CLAUDE_FILE_TOOLS))
        })
        .collect()
}

/// Whether `listen.tools` gives a Codex run its shell (any other name is an error).
fn codex_shell(settings: &Settings) -> Result<bool, RuntimeError> {
    match settings
        .listen
        .tools
        .iter()
        .find(|t| t.as_str() != CODEX_SHELL)
    {
        Some(t) => Err(unknown_tool("Codex", t, &[CODEX_SHELL])),
        None => Ok(!settings.listen.tools.is_empty()),
    }
}

/// `extra_args` checked against the CLI's allowlist (`core::cli_args`): the first argument that
/// is not allowed makes the runtime unusable, naming it, the key and the list.
pub fn check_extra_args(
    key: &str,
    args: &[String],
    allowed: &[crate::core::cli_args::Allowed],
) -> Result<(), RuntimeError> {
    match crate::core::cli_args::problem(args, allowed) {
        None => Ok(()),
        Some(why) => Err(RuntimeError::Unusable(format!(
            "`{key}` may hold only {}: {why}; what a run is offered is `listen.tools`'s \
             (docs/runtimes.md, \"Extra arguments\")",
            crate::core::cli_args::describe(allowed)
        ))),
    }
}

/// The key and allowlist of a runtime's `extra_args` (`None`: the script runtime has none).
fn extra_args_of(
    settings: &Settings,
) -> Option<(
    &'static str,
    &[String],
    &'static [crate::core::cli_args::Allowed],
)> {
    use crate::core::cli_args::{CLAUDE, CODEX};
    match settings.listen.runtime {
        RuntimeKind::ClaudeCode => Some((
            "listen.claude.extra_args",
            &settings.listen.claude.extra_args,
            CLAUDE,
        )),
        RuntimeKind::Codex => Some((
            "listen.codex.extra_args",
            &settings.listen.codex.extra_args,
            CODEX,
        )),
        RuntimeKind::Script => None,
    }
}

/// The profile's `extra_args`, checked (`check_extra_args`).
pub fn extra_args(settings: &Settings) -> Result<Vec<String>, RuntimeError> {
    match extra_args_of(settings) {
        Some((key, args, allowed)) => {
            check_extra_args(key, args, allowed)?;
            Ok(args.to_vec())
        }
        None => Ok(Vec::new()),
    }
}

/// The settings every Claude Code run is given on the command line: no hook, no git context.
pub const CLAUDE_SETTINGS: &str = r#"{"disableAllHooks":true,"includeGitInstructions":false}"#;

/// Claude Code's switches, placed after `extra_args` and before `--allowedTools`:
/// - `--strict-mcp-config`: only the listener's `--mcp-config` server (not with `mcp = "user"`,
///   whose server is in the user's own configuration);
/// - `--setting-sources ""` (`user` with `mcp = "user"`): none of the user's, the project's or the
///   local `settings.json` (their permission rules, hooks, plugins, environment, MCP servers,
///   `CLAUDE.md`) is read; the login is not a setting;
/// - `--settings`: no hook runs, whatever a managed policy adds, and no git status or commit
///   messages of the workdir go into the system prompt;
/// - `--no-session-persistence`: no transcript is written for a later run (or the user) to find;
/// - `--tools`: no built-in tool, or the profile's file tools;
/// - `--permission-mode dontAsk` (`acceptEdits` when a writing tool is named): nothing that
///   would need a person's yes runs; Claude Code allows its file tools in the working
///   directory only.
pub fn claude_args(settings: &Settings) -> Result<Vec<String>, RuntimeError> {
    let tools = claude_tools(settings)?;
    let mut args = Vec::new();
    // `mcp = "user"`: the AgentChat server is in the user's own configuration, which Claude Code
    // reads only with the user's settings; doctor warns that every server of theirs comes along.
    let sources = match settings.listen.claude.mcp {
        McpMode::Listener => {
            args.push("--strict-mcp-config".to_string());
            ""
        }
        McpMode::User => "user",
    };
    let writes = tools.iter().any(|t| CLAUDE_WRITING_TOOLS.contains(t));
    args.extend([
        "--setting-sources".to_string(),
        sources.to_string(),
        "--settings".to_string(),
        CLAUDE_SETTINGS.to_string(),
        "--no-session-persistence".to_string(),
        "--permission-mode".to_string(),
        if writes { "acceptEdits" } else { "dontAsk" }.to_string(),
        "--tools".to_string(),
        tools.join(","),
    ]);
    Ok(args)
}

/// Codex's switches, placed after `extra_args`:
/// - the `agentchat` server (the run's home has no other: `codex_home`);
/// - [`CODEX_FEATURES_OFF`] off (the shell stays on with `tools = ["shell"]`);
/// - no web search, no approval prompts, the read-only sandbox (workspace-write with the shell:
///   the workdir only, not `/tmp` or `$TMPDIR`, no network), commands given only the core
///   environment, no execpolicy rules;
/// - no project `AGENTS.md` (`project_doc_max_bytes=0`): the run is told its instructions by the
///   run's home's `AGENTS.md`, from the listener's own copy;
/// - no session files (`--ephemeral`).
pub fn codex_args(settings: &Settings, mcp_server: &str) -> Result<Vec<String>, RuntimeError> {
    let shell = codex_shell(settings)?;
    let mut args = vec![
        "-c".to_string(),
        format!("mcp_servers={{agentchat={mcp_server}}}"),
    ];
    for feature in CODEX_FEATURES_OFF {
        if shell && CODEX_SHELL_FEATURES.contains(feature) {
            continue;
        }
        args.push("--disable".into());
        args.push((*feature).into());
    }
    for c in [
        r#"web_search="disabled""#,
        r#"approval_policy="never""#,
        r#"shell_environment_policy.inherit="core""#,
        // workspace-write lets commands write to /tmp and $TMPDIR too unless told not to.
        "sandbox_workspace_write.exclude_slash_tmp=true",
        "sandbox_workspace_write.exclude_tmpdir_env_var=true",
        "sandbox_workspace_write.network_access=false",
        "project_doc_max_bytes=0",
    ] {
        args.push("-c".into());
        args.push(c.into());
    }
    args.push("--sandbox".into());
    args.push(
        if shell {
            "workspace-write"
        } else {
            "read-only"
        }
        .into(),
    );
    args.push("--ignore-rules".into());
    args.push("--ephemeral".into());
    Ok(args)
}

/// What a run of this profile can touch beyond AgentChat, for `doctor` (pure: from the
/// settings alone).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reach {
    /// Tools offered besides AgentChat's.
    pub tools: Vec<String>,
    /// Whether those tools read files, write files, run commands.
    pub reads: bool,
    pub writes: bool,
    pub commands: bool,
    /// Other MCP servers the run is offered, in words (`None`: none).
    pub other_mcp: Option<String>,
    /// Variables passed by the profile's `env_pass`, as written.
    pub env_pass: Vec<String>,
    /// A problem with `listen.tools` (the run would not start).
    pub problem: Option<String>,
}

impl Reach {
    /// Whether a run can do more than talk to AgentChat.
    pub fn beyond_agentchat(&self) -> bool {
        self.reads || self.writes || self.commands || self.other_mcp.is_some()
    }
}

pub fn reach(settings: &Settings) -> Reach {
    let mut r = Reach {
        env_pass: settings.listen.env_pass.clone(),
        ..Reach::default()
    };
    // `extra_args` off the allowlist make every run `runtime_unusable`: doctor says so before
    // the listener starts.
    let extra = extra_args(settings);
    match settings.listen.runtime {
        RuntimeKind::ClaudeCode => {
            match claude_tools(settings) {
                Ok(tools) => {
                    r.reads = !tools.is_empty();
                    r.writes = tools.iter().any(|t| CLAUDE_WRITING_TOOLS.contains(t));
                    r.tools = tools.iter().map(|t| t.to_string()).collect();
                }
                Err(e) => r.problem = Some(e.to_string()),
            }
            if settings.listen.claude.mcp == McpMode::User {
                r.other_mcp = Some(
                    "every MCP server of your Claude Code configuration (listen.claude.mcp = \
                     \"user\")"
                        .into(),
                );
            }
        }
        RuntimeKind::Codex => match codex_shell(settings) {
            Ok(true) => {
                r.tools = vec![CODEX_SHELL.to_string()];
                r.reads = true;
                r.writes = true;
                r.commands = true;
            }
            Ok(false) => {}
            Err(e) => r.problem = Some(e.to_string()),
        },
        // The user's own program: it can do whatever the user can.
        RuntimeKind::Script => {
            r.reads = true;
            r.writes = true;
            r.commands = true;
        }
    }
    if let (None, Err(e)) = (&r.problem, extra) {
        r.problem = Some(e.to_string());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::agent_cli::test_support::Fixture;

    fn with_tools(runtime: RuntimeKind, tools: &[&str]) -> Fixture {
        let mut fx = Fixture::new(runtime);
        fx.settings.listen.tools = tools.iter().map(|t| t.to_string()).collect();
        fx
    }

    #[test]
    fn claude_by_default_gets_no_tool_no_settings_no_hooks_and_no_other_server() {
        let fx = Fixture::new(RuntimeKind::ClaudeCode);
        let args = claude_args(&fx.settings).unwrap();
        assert_eq!(
            args,
            [
                "--strict-mcp-config",
                "--setting-sources",
                "",
                "--settings",
                CLAUDE_SETTINGS,
                "--no-session-persistence",
                "--permission-mode",
                "dontAsk",
                "--tools",
                ""
            ]
        );
        assert!(!reach(&fx.settings).beyond_agentchat());
    }

    #[test]
    fn claude_file_tools_are_opt_in_and_writing_ones_accept_edits_only() {
        let fx = with_tools(RuntimeKind::ClaudeCode, &["Read", "Grep"]);
        let args = claude_args(&fx.settings).unwrap();
        assert!(args.ends_with(&["dontAsk".into(), "--tools".into(), "Read,Grep".into()]));
        let r = reach(&fx.settings);
        assert!(r.reads && !r.writes && !r.commands, "{r:?}");
        let fx = with_tools(RuntimeKind::ClaudeCode, &["Read", "Edit"]);
        let args = claude_args(&fx.settings).unwrap();
        assert!(args.contains(&"acceptEdits".to_string()), "{args:?}");
        assert!(reach(&fx.settings).writes);
    }

    #[test]
    fn a_tool_that_reaches_past_the_workdir_is_refused_naming_the_key() {
        for (runtime, tool) in [
            (RuntimeKind::ClaudeCode, "Bash"),
            (RuntimeKind::ClaudeCode, "WebFetch"),
            (RuntimeKind::Codex, "web_search"),
        ] {
            let fx = with_tools(runtime, &[tool]);
            let err = match runtime {
                RuntimeKind::Codex => codex_args(&fx.settings, "{}").unwrap_err(),
                _ => claude_args(&fx.settings).unwrap_err(),
            };
            let msg = err.to_string();
            assert!(msg.contains("listen.tools") && msg.contains(tool), "{msg}");
            assert!(reach(&fx.settings).problem.is_some());
        }
    }

    #[test]
    fn extra_args_off_the_allowlist_are_refused_naming_the_key_the_argument_and_the_list() {
        let mut fx = Fixture::new(RuntimeKind::ClaudeCode);
        for bad in ["--tools", "--managed-settings", "--continue", "extra.json"] {
            fx.settings.listen.claude.extra_args = vec![bad.into(), "x".into()];
            let msg = extra_args(&fx.settings).unwrap_err().to_string();
            assert!(
                msg.contains("listen.claude.extra_args")
                    && msg.contains(bad)
                    && msg.contains("`--fallback-model`"),
                "{msg}"
            );
        }
        fx.settings.listen.claude.extra_args = vec!["--model".into(), "opus".into()];
        assert!(extra_args(&fx.settings).is_ok());
        let mut fx = Fixture::new(RuntimeKind::Codex);
        for bad in [
            &["-pwork"][..],
            &["-c=sandbox_mode=\"danger-full-access\""],
            &["-sx"],
        ] {
            fx.settings.listen.codex.extra_args = bad.iter().map(|a| a.to_string()).collect();
            let msg = extra_args(&fx.settings).unwrap_err().to_string();
            assert!(msg.contains("listen.codex.extra_args"), "{msg}");
        }
        fx.settings.listen.codex.extra_args =
            ["-c", "model=\"o3\"", "-mo3"].map(String::from).to_vec();
        assert!(extra_args(&fx.settings).is_ok());
    }

    #[test]
    fn widening_extra_args_are_reachs_problem_naming_the_key() {
        let mut fx = Fixture::new(RuntimeKind::ClaudeCode);
        fx.settings.listen.claude.extra_args = vec!["--allowedTools=Bash".into()];
        let problem = reach(&fx.settings).problem.unwrap();
        assert!(problem.contains("listen.claude.extra_args"), "{problem}");
        let mut fx = Fixture::new(RuntimeKind::Codex);
        fx.settings.listen.codex.extra_args = vec!["--sandbox".into(), "danger-full-access".into()];
        let problem = reach(&fx.settings).problem.unwrap();
        assert!(problem.contains("listen.codex.extra_args"), "{problem}");
        // The fixture's own `--model x` widens nothing.
        assert_eq!(
            reach(&Fixture::new(RuntimeKind::Codex).settings).problem,
            None
        );
    }

    #[test]
    fn mcp_user_mode_keeps_the_users_servers_and_says_so() {
        let mut fx = Fixture::new(RuntimeKind::ClaudeCode);
        fx.settings.listen.claude.mcp = McpMode::User;
        let args = claude_args(&fx.settings).unwrap();
        assert!(!args.contains(&"--strict-mcp-config".to_string()));
        assert!(args.windows(2).any(|w| w == ["--setting-sources", "user"]));
        let r = reach(&fx.settings);
        assert!(r.beyond_agentchat() && r.other_mcp.is_some(), "{r:?}");
    }

    #[test]
    fn codex_by_default_has_its_shell_and_every_listed_feature_off_and_one_server() {
        let fx = Fixture::new(RuntimeKind::Codex);
        let args = codex_args(&fx.settings, "{url=\"u\"}").unwrap();
        assert_eq!(args[..2], ["-c", "mcp_servers={agentchat={url=\"u\"}}"]);
        assert!(args.ends_with(&["--ignore-rules".into(), "--ephemeral".into()]));
        for f in CODEX_FEATURES_OFF {
            assert!(
                args.windows(2).any(|w| w[0] == "--disable" && w[1] == *f),
                "{f}"
            );
        }
        assert!(args.windows(2).any(|w| w == ["--sandbox", "read-only"]));
        assert!(!reach(&fx.settings).beyond_agentchat());
    }

    #[test]
    fn codex_shell_opt_in_keeps_the_shell_in_the_workspace_write_sandbox() {
        let fx = with_tools(RuntimeKind::Codex, &["shell"]);
        let args = codex_args(&fx.settings, "{}").unwrap();
        assert!(
            !args
                .iter()
                .any(|a| a == "shell_tool" || a == "unified_exec")
        );
        assert!(
            args.windows(2)
                .any(|w| w == ["--sandbox", "workspace-write"])
        );
        let r = reach(&fx.settings);
        assert!(r.commands && r.reads && r.writes, "{r:?}");
    }
}

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

/// Claude Code flags `listen.claude.extra_args` may not hold: they widen what a run is offered,
/// and some (`--tools`, `--allowedTools`) add up instead of the last one winning.
const CLAUDE_RESERVED: &[&str] = &[
    "--tools",
    "--allowedTools",
    "--allowed-tools",
    "--permission-mode",
    "--dangerously-skip-permissions",
    "--allow-dangerously-skip-permissions",
    "--mcp-config",
    "--setting-sources",
    "--settings",
    "--add-dir",
    "--plugin-dir",
    "--plugin-url",
    "--agents",
    "--agent",
    "--chrome",
];

/// Codex flags `listen.codex.extra_args` may not hold, for the same reason.
const CODEX_RESERVED: &[&str] = &[
    "--enable",
    "-s",
    "--sandbox",
    "--dangerously-bypass-approvals-and-sandbox",
    "--full-auto",
    "--approve-for-me",
    "--add-dir",
    "-p",
    "--profile",
    "--remote",
    "--trust",
];

/// The `-c` keys (and their children) `listen.codex.extra_args` may not override.
const CODEX_RESERVED_KEYS: &[&str] = &[
    "mcp_servers",
    "features",
    "sandbox_mode",
    "sandbox_workspace_write",
    "shell_environment_policy",
    "web_search",
    "tools",
    "approval_policy",
    "hooks",
    "plugins",
    "apps",
    "profile",
    "profiles",
];

fn reserved(key: &str, arg: &str) -> RuntimeError {
    RuntimeError::Unusable(format!(
        "`{key}` holds `{arg}`, which would widen what a woken run is offered; use `listen.tools` \
         (docs/runtimes.md, \"What a woken run can touch\")"
    ))
}

/// Refuses an extra argument that is, or sets, one of `flags` (`--flag` or `--flag=value`).
fn check_flags(key: &str, args: &[String], flags: &[&str]) -> Result<(), RuntimeError> {
    for arg in args {
        let name = arg.split_once('=').map_or(arg.as_str(), |(n, _)| n);
        if flags.contains(&name) {
            return Err(reserved(key, arg));
        }
    }
    Ok(())
}

/// `listen.codex.extra_args`: no reserved flag, and no `-c`/`--config` of a reserved key.
fn check_codex_extra(args: &[String]) -> Result<(), RuntimeError> {
    const KEY: &str = "listen.codex.extra_args";
    check_flags(KEY, args, CODEX_RESERVED)?;
    let mut it = args.iter().peekable();
    while let Some(arg) = it.next() {
        let value = match arg.as_str() {
            "-c" | "--config" => it.peek().map(|v| v.as_str()),
            a => a.strip_prefix("--config="),
        };
        let Some(value) = value else { continue };
        let path = value.split('=').next().unwrap_or_default().trim();
        let top = path.split('.').next().unwrap_or_default().trim_matches('"');
        if CODEX_RESERVED_KEYS.contains(&top) {
            return Err(reserved(KEY, value));
        }
    }
    Ok(())
}

/// Claude Code's switches, placed after `extra_args` and before `--allowedTools`:
/// - `--strict-mcp-config`: only the listener's `--mcp-config` server (not with `mcp = "user"`,
///   whose server is in the user's own configuration);
/// - `--setting-sources ""` (`user` with `mcp = "user"`): none of the user's, the project's or the
///   local `settings.json` (their permission rules, hooks, plugins, environment, MCP servers,
///   `CLAUDE.md`) is read; the login is not a setting;
/// - `--settings {"disableAllHooks":true}`: no hook runs, whatever a managed policy adds;
/// - `--tools`: no built-in tool, or the profile's file tools;
/// - `--permission-mode dontAsk` (`acceptEdits` when a writing tool is named): nothing that
///   would need a person's yes runs; Claude Code allows its file tools in the working
///   directory only.
pub fn claude_args(settings: &Settings) -> Result<Vec<String>, RuntimeError> {
    let tools = claude_tools(settings)?;
    check_flags(
        "listen.claude.extra_args",
        &settings.listen.claude.extra_args,
        CLAUDE_RESERVED,
    )?;
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
        r#"{"disableAllHooks":true}"#.to_string(),
        "--permission-mode".to_string(),
        if writes { "acceptEdits" } else { "dontAsk" }.to_string(),
        "--tools".to_string(),
        tools.join(","),
    ]);
    Ok(args)
}

/// The most of the workdir's `CLAUDE.md` a run is given: under Linux's 128 KiB cap on one
/// argument.
pub const CLAUDE_MD_CAP: u64 = 100 * 1024;

/// The workdir's `CLAUDE.md` (which holds the identity block the listener keeps), for
/// `--append-system-prompt`: `--setting-sources ""` keeps Claude Code from loading any
/// `CLAUDE.md`, the user's global one included, so the run gets the workdir's alone, from us.
/// `None` when there is none.
pub fn claude_md(workdir: &std::path::Path) -> Result<Option<String>, RuntimeError> {
    let path = workdir.join("CLAUDE.md");
    match crate::sys::fs::read_regular_capped(&path, CLAUDE_MD_CAP) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RuntimeError::Io(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        ))),
    }
}

/// Codex's switches, placed after `extra_args`:
/// - the `agentchat` server, and every other server of the user's `config.toml` switched off
///   ([`codex_user_servers`]);
/// - [`CODEX_FEATURES_OFF`] off (the shell stays on with `tools = ["shell"]`);
/// - no web search, no approval prompts, the read-only sandbox (workspace-write with the shell:
///   the workdir only, not `/tmp` or `$TMPDIR`, no network), commands given only the core
///   environment, no execpolicy rules;
/// - no `AGENTS.md` beyond the workdir's (`project_doc_max_bytes` keeps the workdir's).
pub fn codex_args(
    settings: &Settings,
    mcp_server: &str,
    user_servers: &[String],
) -> Result<Vec<String>, RuntimeError> {
    let shell = codex_shell(settings)?;
    check_codex_extra(&settings.listen.codex.extra_args)?;
    let mut args = vec![
        "-c".to_string(),
        format!("mcp_servers={{agentchat={mcp_server}}}"),
    ];
    for name in user_servers {
        args.push("-c".into());
        args.push(format!("mcp_servers.{name}.enabled=false"));
    }
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
    Ok(args)
}

/// The MCP servers `config.toml` (Codex's, as text) names besides `agentchat`: each gets
/// `-c mcp_servers.<name>.enabled=false`, since a `-c mcp_servers=…` override is merged into the
/// user's table, not put in its place. A name that cannot be written in a dotted `-c` path, or a
/// file that does not parse, is an error: the run would not start without knowing them.
pub fn codex_user_servers(config_toml: &str) -> Result<Vec<String>, String> {
    let table: toml::Table = config_toml
        .parse()
        .map_err(|e: toml::de::Error| format!("it does not parse: {}", e.message()))?;
    let Some(servers) = table.get("mcp_servers").and_then(|v| v.as_table()) else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    for name in servers.keys().filter(|n| n.as_str() != "agentchat") {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "its MCP server `{name}` cannot be switched off for a run (rename it to letters, \
                 digits, `_` and `-`)"
            ));
        }
        names.push(name.clone());
    }
    Ok(names)
}

/// Where Codex keeps its `config.toml`: `CODEX_HOME` (when set and not empty), else
/// `~/.codex`; `None` without either. Pure, so the runs' unit tests name a scratch file instead of
/// whatever the developer running them has.
pub fn codex_config_path(
    codex_home: Option<&std::ffi::OsStr>,
    home: Option<&std::ffi::OsStr>,
) -> Option<std::path::PathBuf> {
    let dir = match (codex_home, home) {
        (Some(c), _) if !c.is_empty() => std::path::PathBuf::from(c),
        (_, Some(h)) => std::path::Path::new(h).join(".codex"),
        _ => return None,
    };
    Some(dir.join("config.toml"))
}

/// [`codex_user_servers`] of the `config.toml` at `path`, read capped; none when there is no
/// such file. A file that cannot be read or names a server that cannot be switched off makes the
/// runtime unusable, naming the file.
pub fn codex_user_servers_at(path: Option<&std::path::Path>) -> Result<Vec<String>, RuntimeError> {
    let Some(path) = path else {
        return Ok(Vec::new());
    };
    let text = match crate::sys::fs::read_regular_capped(path, 1024 * 1024) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(RuntimeError::Unusable(format!(
                "cannot read Codex's {} to keep its MCP servers out of the run: {e}",
                path.display()
            )));
        }
    };
    codex_user_servers(&text)
        .map_err(|why| RuntimeError::Unusable(format!("Codex's {}: {why}", path.display())))
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
    // `extra_args` that would widen a run make every run `runtime_unusable` (claude_args,
    // codex_args): doctor says so before the listener starts.
    let extra = match settings.listen.runtime {
        RuntimeKind::ClaudeCode => check_flags(
            "listen.claude.extra_args",
            &settings.listen.claude.extra_args,
            CLAUDE_RESERVED,
        ),
        RuntimeKind::Codex => check_codex_extra(&settings.listen.codex.extra_args),
        RuntimeKind::Script => Ok(()),
    };
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
    use std::path::Path;

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
                r#"{"disableAllHooks":true}"#,
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
                RuntimeKind::Codex => codex_args(&fx.settings, "{}", &[]).unwrap_err(),
                _ => claude_args(&fx.settings).unwrap_err(),
            };
            let msg = err.to_string();
            assert!(msg.contains("listen.tools") && msg.contains(tool), "{msg}");
            assert!(reach(&fx.settings).problem.is_some());
        }
    }

    #[test]
    fn extra_args_that_would_widen_a_run_are_refused_naming_the_key() {
        let mut fx = Fixture::new(RuntimeKind::ClaudeCode);
        for bad in ["--tools", "--allowedTools=Bash", "--settings", "--add-dir"] {
            fx.settings.listen.claude.extra_args = vec![bad.into(), "x".into()];
            let msg = claude_args(&fx.settings).unwrap_err().to_string();
            assert!(
                msg.contains("listen.claude.extra_args") && msg.contains(bad),
                "{msg}"
            );
        }
        fx.settings.listen.claude.extra_args = vec!["--model".into(), "opus".into()];
        assert!(claude_args(&fx.settings).is_ok());
        let mut fx = Fixture::new(RuntimeKind::Codex);
        for bad in [
            &["--enable", "shell_tool"][..],
            &["-s", "danger-full-access"],
            &["-c", "mcp_servers.fs.url=\"u\""],
            &["--config=features.shell_tool=true"],
            &["-c", "sandbox_mode=\"danger-full-access\""],
            &["-p", "wide"],
        ] {
            fx.settings.listen.codex.extra_args = bad.iter().map(|a| a.to_string()).collect();
            let msg = codex_args(&fx.settings, "{}", &[]).unwrap_err().to_string();
            assert!(msg.contains("listen.codex.extra_args"), "{msg}");
        }
        fx.settings.listen.codex.extra_args =
            ["-c", "model=\"o3\"", "--dangerously-bypass-hook-trust"]
                .map(String::from)
                .to_vec();
        assert!(codex_args(&fx.settings, "{}", &[]).is_ok());
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
    fn codex_config_path_is_codex_home_else_dot_codex() {
        use std::ffi::OsStr;
        let p = |c: Option<&str>, h: Option<&str>| {
            codex_config_path(c.map(OsStr::new), h.map(OsStr::new))
        };
        assert_eq!(
            p(Some("/x"), Some("/h")).unwrap(),
            Path::new("/x/config.toml")
        );
        assert_eq!(
            p(Some(""), Some("/h")).unwrap(),
            Path::new("/h/.codex/config.toml")
        );
        assert_eq!(
            p(None, Some("/h")).unwrap(),
            Path::new("/h/.codex/config.toml")
        );
        assert_eq!(p(None, None), None);
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
    fn the_workdirs_claude_md_is_read_capped_and_a_missing_one_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(claude_md(d.path()).unwrap(), None);
        std::fs::write(d.path().join("CLAUDE.md"), "block\n").unwrap();
        assert_eq!(claude_md(d.path()).unwrap().as_deref(), Some("block\n"));
        let big = vec![b'x'; CLAUDE_MD_CAP as usize + 1];
        std::fs::write(d.path().join("CLAUDE.md"), big).unwrap();
        assert!(claude_md(d.path()).is_err());
    }

    #[test]
    fn codex_by_default_has_its_shell_and_every_listed_feature_off_and_one_server() {
        let fx = Fixture::new(RuntimeKind::Codex);
        let args = codex_args(&fx.settings, "{url=\"u\"}", &["fs".into()]).unwrap();
        assert_eq!(
            args[..4],
            [
                "-c",
                "mcp_servers={agentchat={url=\"u\"}}",
                "-c",
                "mcp_servers.fs.enabled=false"
            ]
        );
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
    fn the_users_codex_servers_are_named_and_an_unswitchable_one_refused() {
        let text = "model = \"m\"\n[mcp_servers.fs]\ncommand = \"x\"\n\
                    [mcp_servers.agentchat]\nurl = \"u\"\n[mcp_servers.git-hub_2]\nurl = \"v\"\n";
        assert_eq!(codex_user_servers(text).unwrap(), ["fs", "git-hub_2"]);
        assert_eq!(
            codex_user_servers("model = \"m\"\n").unwrap(),
            Vec::<String>::new()
        );
        let err = codex_user_servers("[mcp_servers.\"a.b\"]\nurl = \"u\"\n").unwrap_err();
        assert!(err.contains("`a.b`"), "{err}");
        assert!(codex_user_servers("[[[").is_err());
    }

    #[test]
    fn codex_shell_opt_in_keeps_the_shell_in_the_workspace_write_sandbox() {
        let fx = with_tools(RuntimeKind::Codex, &["shell"]);
        let args = codex_args(&fx.settings, "{}", &[]).unwrap();
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

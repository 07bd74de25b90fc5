//! The Claude Code runtime (`docs/runtimes.md`): `claude -p --output-format stream-json --verbose
//! [--mcp-config <file>] [extra args] --allowedTools "mcp__agentchat__*"`, the prompt on stdin.
//!
//! The key reaches Claude Code only through the MCP config file (0600, in the state dir), never
//! argv or the environment. The prompt goes on stdin because the variadic `--allowedTools` would
//! swallow a trailing positional prompt. Success needs exit 0 and a final `result` event that is
//! not an error; an authentication failure (which Claude prints as assistant text) is `Unusable`.

use super::agent_cli;
use super::{ListenerEnv, RunContext, RunOutcome, RunSpec, RuntimeError};
use crate::config::McpMode;
use crate::config::RuntimeKind;
use crate::core::sandbox::Access;
use crate::sys::process::ProcessEnd;
use secrecy::ExposeSecret;
use std::path::{Path, PathBuf};

/// The MCP config file's name inside the profile's state dir.
pub const MCP_CONFIG_FILE: &str = "claude-mcp.json";

/// Variables that make Claude Code believe it runs nested inside another Claude Code session
/// (set by a parent session for its tools); a listener started from such a shell must not
/// pass them on. `CLAUDE_CONFIG_DIR` is deliberately absent: it is inherited exactly as the
/// user set it (or not), because forcing `~/.claude` is not the same as leaving it unset.
pub const NESTED_SESSION_VARS: &[&str] = &[
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_CHILD_SESSION",
    "CLAUDE_CODE_SESSION_ID",
    "CLAUDE_CODE_EXECPATH",
    "CLAUDE_CODE_SSE_PORT",
    "CLAUDE_CODE_EFFORT_LEVEL",
    "CLAUDE_EFFORT",
    "CLAUDE_AGENT_SDK_VERSION",
    "AI_AGENT",
];

pub fn prepare(ctx: &RunContext<'_>, listener: &ListenerEnv) -> Result<RunSpec, RuntimeError> {
    let claude = &ctx.settings.listen.claude;
    let program = super::cli_binary_in(
        ctx.settings,
        RuntimeKind::ClaudeCode,
        listener.var_os("PATH"),
    )?;

    let mut args: Vec<String> = ["-p", "--output-format", "stream-json", "--verbose"]
        .map(String::from)
        .to_vec();
    // The user's tuning first, each flag with its one value (`core::cli_args`), so nothing of
    // theirs can be read as a value of one of ours.
    args.extend(super::confine::extra_args(ctx.settings)?);
    let scratch = super::sandbox::fresh_scratch(ctx.state_dir, listener)?;
    let mut plan = super::sandbox::base_plan(ctx, listener, &scratch);
    super::sandbox::add_program(&mut plan, &program, listener);
    let url = agent_cli::mcp_url(&ctx.settings.api_base, claude.mcp_url.as_deref());
    if claude.mcp == McpMode::Listener {
        let file = write_mcp_config(ctx.state_dir, &url, ctx.api_key.expose_secret())?;
        // Variadic: a flag of ours follows it at once.
        args.push("--mcp-config".into());
        args.push(path_arg(&file)?);
        plan.add(&file, Access::Read, "the listener's MCP config for the run");
    }
    // After the user's arguments, so none of them widens what the run is offered.
    args.extend(super::confine::claude_args(ctx.settings)?);
    // The policy's spend for one run (issue 26) is Claude Code's own budget, after the user's
    // arguments: the last occurrence wins, so a `--max-budget-usd` of theirs counts only while
    // `max_cost_per_run_usd` is unset.
    if let Some(usd) = ctx.settings.listen.policy.max_cost_per_run_usd {
        args.extend(["--max-budget-usd".to_string(), usd.to_string()]);
    }
    // The listener's own copy, attached to its flag so no text of it is read as a flag.
    if let Some(text) = super::instructions::for_run(ctx) {
        args.push(format!("--append-system-prompt={text}"));
    }
    // Last, so the variadic flag cannot swallow anything of ours.
    args.push("--allowedTools".into());
    args.push("mcp__agentchat__*".into());

    login_plan(&mut plan, claude.mcp, listener);
    super::sandbox::add_url_port(&mut plan, &url);

    let mut env = super::common_env(ctx);
    // An unattended run must not stop to update itself.
    env.push(("DISABLE_AUTOUPDATER".into(), "1".into()));
    // The auto-memory of earlier sessions in this directory (the user's own, when the workdir
    // is their project) is not the stranger's to read (runtime::confine).
    env.push(("CLAUDE_CODE_DISABLE_AUTO_MEMORY".into(), "1".into()));
    // No git status or commit messages of the workdir in the system prompt (also `--settings`).
    env.push(("CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS".into(), "1".into()));
    env.extend(super::sandbox::tmp_env(&scratch));

    let mut env_remove = super::cli_env_remove();
    let mut env_pass = ctx.settings.listen.env_pass.clone();
    if claude.mcp == McpMode::Listener {
        // The key reaches Claude through the MCP config only; the listener's own
        // `AGENTCHAT_API_KEY` stays away from the model's tools. With `mcp = "user"` it is left
        // inherited: the user's MCP config may expand it.
        env_remove.push("AGENTCHAT_API_KEY".into());
    } else {
        env_pass.push("AGENTCHAT_API_KEY".into());
    }

    Ok(RunSpec {
        program,
        args,
        env,
        env_remove,
        env_pass,
        stdin: Some(ctx.prompt.as_bytes().to_vec()),
        cwd: ctx.workdir.to_path_buf(),
        runtime: RuntimeKind::ClaudeCode,
        sandbox: Some(plan),
        scratch: Some(scratch),
    })
}

/// The model endpoints Claude Code may be pointed at by its variables.
const MODEL_URL_VARS: &[&str] = &[
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "ANTHROPIC_VERTEX_BASE_URL",
];

/// Claude Code's login and model endpoint in the kernel's line: its credentials file (read,
/// and rewritten in place when it refreshes a token), HTTPS and the endpoints its variables
/// name. With `mcp = "user"` also the user settings and global config it then reads (which
/// hold the user's MCP servers), read only. Nothing else of its home: no transcript, memory,
/// todo or project store.
fn login_plan(plan: &mut crate::core::sandbox::Plan, mcp: McpMode, env: &ListenerEnv) {
    let home = env.home();
    let (config_dir, global) = match env.var("CLAUDE_CONFIG_DIR") {
        Some(dir) => (
            Some(PathBuf::from(dir)),
            Some(Path::new(dir).join(".claude.json")),
        ),
        None => (
            home.as_ref().map(|h| h.join(".claude")),
            home.as_ref().map(|h| h.join(".claude.json")),
        ),
    };
    if let Some(dir) = &config_dir {
        plan.add(
            dir.join(".credentials.json"),
            Access::ReadWriteFile,
            "Claude Code's login",
        );
        if mcp == McpMode::User {
            for file in ["settings.json", "CLAUDE.md"] {
                plan.add(
                    dir.join(file),
                    Access::Read,
                    "your Claude Code settings (mcp = \"user\")",
                );
            }
        }
    }
    if mcp == McpMode::User
        && let Some(global) = global
    {
        plan.add(
            global,
            Access::Read,
            "your Claude Code MCP servers (mcp = \"user\")",
        );
    }
    plan.add_port(443);
    for var in MODEL_URL_VARS {
        if let Some(url) = env.var(var) {
            super::sandbox::add_url_port(plan, url);
        }
    }
}

fn path_arg(p: &Path) -> Result<String, RuntimeError> {
    p.to_str().map(str::to_string).ok_or_else(|| {
        RuntimeError::Unusable(format!("the path {} is not valid UTF-8", p.display()))
    })
}

/// The MCP config's JSON: one server `agentchat` of type `http` with the key in a header.
pub fn mcp_config_json(url: &str, key: &str) -> String {
    serde_json::json!({
        "mcpServers": {
            "agentchat": {
                "type": "http",
                "url": url,
                "headers": { "Authorization": format!("Bearer {key}") }
            }
        }
    })
    .to_string()
}

/// Writes the MCP config to `<state_dir>/claude-mcp.json` with the state dir's atomic write
/// (created 0600 under a temporary name, then renamed), so the key is never readable by others
/// even for a moment and a concurrent reader never sees half a file.
///
/// A file that already holds exactly this, private to its owner, is left as it is: the write (and
/// its `fsync`) would stand between a wake and its run on every cycle for nothing.
pub fn write_mcp_config(state_dir: &Path, url: &str, key: &str) -> Result<PathBuf, RuntimeError> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = state_dir.join(MCP_CONFIG_FILE);
    let json = mcp_config_json(url, key);
    let unchanged = std::fs::metadata(&path)
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o077 == 0)
        && std::fs::read(&path).is_ok_and(|old| old == json.as_bytes());
    if !unchanged {
        crate::sys::fs::write_atomic(&path, json.as_bytes()).map_err(RuntimeError::Io)?;
    }
    Ok(path)
}

/// Claude's auth failure markers: the `error` field of its synthetic assistant message.
const AUTH_ERRORS: &[&str] = &["authentication_failed", "oauth_org_not_allowed"];

/// Text Claude prints for login problems (as assistant text or the result), matched lowercase.
const AUTH_TEXTS: &[&str] = &[
    "not logged in",
    "please run /login",
    "invalid api key",
    "login required",
    "oauth token has expired",
    "oauth token has been revoked",
];

pub fn judge(end: &ProcessEnd, output: &[u8]) -> RunOutcome {
    if let Some(unusable) = agent_cli::unstartable("Claude Code", end) {
        return unusable;
    }
    let events = Events::read(output);
    let clean_result = events
        .result
        .as_ref()
        .is_some_and(|r| !r.is_error && r.subtype == "success");
    if *end == ProcessEnd::Exited(0) && clean_result && events.mcp_problem.is_none() {
        return RunOutcome::Completed;
    }
    // Only a run that did not complete is read for login trouble: a retried 401 followed by
    // a good answer is not a broken login.
    if let Some(problem) = events.auth_problem() {
        return RunOutcome::Unusable(problem);
    }
    if let Some(reason) = agent_cli::end_failure(end) {
        return RunOutcome::Failed(match events.result_summary() {
            Some(s) => format!("{reason}; {s}"),
            None => reason,
        });
    }
    match (&events.result, &events.mcp_problem) {
        (None, _) => RunOutcome::Failed("exited 0 without a final result event".into()),
        (Some(_), Some(mcp)) if clean_result => RunOutcome::Failed(mcp.clone()),
        (Some(_), _) => RunOutcome::Failed(events.result_summary().unwrap_or_default()),
    }
}

struct ResultEvent {
    subtype: String,
    is_error: bool,
    api_error_status: Option<i64>,
    terminal_reason: Option<String>,
    text_says_auth: bool,
}

#[derive(Default)]
struct Events {
    /// The last `result` event.
    result: Option<ResultEvent>,
    /// An assistant message's `error` field was an auth failure.
    auth_error: bool,
    /// A synthetic (not model-written) assistant message said the user is not logged in.
    synthetic_auth_text: bool,
    /// The `init` event shows the `agentchat` MCP server missing or not connected: the run could
    /// not reach the tray, so it must not count as a completed look (the invite rule would
    /// otherwise dismiss an invite no model saw).
    mcp_problem: Option<String>,
}

impl Events {
    fn read(output: &[u8]) -> Events {
        let mut ev = Events::default();
        for v in agent_cli::json_lines(output) {
            match v.get("type").and_then(|t| t.as_str()) {
                Some("system") if v.get("subtype").and_then(|t| t.as_str()) == Some("init") => {
                    ev.mcp_problem = mcp_problem(&v);
                }
                Some("assistant") => {
                    if let Some(e) = v.get("error").and_then(|e| e.as_str())
                        && AUTH_ERRORS.contains(&e)
                    {
                        ev.auth_error = true;
                    }
                    // Only Claude's own synthetic messages are read for login text: a model's
                    // words (which may quote a peer) never decide the outcome.
                    let synthetic = v
                        .pointer("/message/model")
                        .and_then(|m| m.as_str())
                        .is_some_and(|m| m == "<synthetic>");
                    if synthetic && assistant_text(&v).is_some_and(|t| says_auth(&t)) {
                        ev.synthetic_auth_text = true;
                    }
                }
                // Claude retrying a refused model call (`"error":"authentication_failed"`).
                Some("system")
                    if v.get("subtype").and_then(|t| t.as_str()) == Some("api_retry")
                        && v.get("error")
                            .and_then(|e| e.as_str())
                            .is_some_and(|e| AUTH_ERRORS.contains(&e)) =>
                {
                    ev.auth_error = true;
                }
                Some("result") => {
                    let is_error = v.get("is_error").and_then(|b| b.as_bool()).unwrap_or(false);
                    ev.result = Some(ResultEvent {
                        subtype: v
                            .get("subtype")
                            .and_then(|s| s.as_str())
                            .unwrap_or("")
                            .to_string(),
                        is_error,
                        api_error_status: v.get("api_error_status").and_then(|s| s.as_i64()),
                        terminal_reason: v
                            .get("terminal_reason")
                            .and_then(|s| s.as_str())
                            .map(str::to_string),
                        text_says_auth: is_error
                            && v.get("result")
                                .and_then(|r| r.as_str())
                                .is_some_and(says_auth),
                    });
                }
                _ => {}
            }
        }
        ev
    }

    fn auth_problem(&self) -> Option<String> {
        let status_auth = self
            .result
            .as_ref()
            .is_some_and(|r| r.is_error && matches!(r.api_error_status, Some(401 | 403)));
        let result_text = self.result.as_ref().is_some_and(|r| r.text_says_auth);
        (self.auth_error || status_auth || result_text || self.synthetic_auth_text).then(|| {
            "Claude Code is not logged in or its credentials were refused; log in with `claude` \
             (or fix ANTHROPIC_API_KEY) as the user the listener runs as"
                .to_string()
        })
    }

    /// A short description of the result event without any of its text (which is the model's).
    fn result_summary(&self) -> Option<String> {
        let r = self.result.as_ref()?;
        let mut s = format!("result {}", r.subtype);
        if r.is_error {
            s.push_str(" (is_error)");
        }
        if let Some(code) = r.api_error_status {
            s.push_str(&format!(", model API status {code}"));
        }
        if let Some(t) = &r.terminal_reason {
            s.push_str(&format!(", {}", agent_cli::clip(t)));
        }
        Some(s)
    }
}

/// What is wrong with the `agentchat` MCP server in an `init` event, if its list says so.
fn mcp_problem(init: &serde_json::Value) -> Option<String> {
    let servers = init.get("mcp_servers")?.as_array()?;
    let status = servers
        .iter()
        .find(|s| s.get("name").and_then(|n| n.as_str()) == Some("agentchat"))
        .map(|s| {
            s.get("status")
                .and_then(|st| st.as_str())
                .unwrap_or("unknown")
        });
    match status {
        None => Some("Claude Code had no `agentchat` MCP server".into()),
        Some(st @ ("failed" | "needs-auth" | "disabled")) => Some(format!(
            "the agentchat MCP server did not connect (status {st})"
        )),
        Some(_) => None,
    }
}

fn assistant_text(v: &serde_json::Value) -> Option<String> {
    let content = v.pointer("/message/content")?.as_array()?;
    let text: Vec<&str> = content
        .iter()
        .filter(|b| b.get("type").and_then(|t| t.as_str()) == Some("text"))
        .filter_map(|b| b.get("text").and_then(|t| t.as_str()))
        .collect();
    Some(text.join("\n"))
}

fn says_auth(text: &str) -> bool {
    let lower = text.to_lowercase();
    AUTH_TEXTS.iter().any(|p| lower.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::agent_cli::test_support::Fixture;

    const SUCCESS: &str = r#"== run header
{"type":"system","subtype":"init","cwd":"/w","mcp_servers":[{"name":"agentchat","status":"connected"}]}
{"type":"assistant","message":{"model":"claude-x","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"mcp__agentchat__agentchat_inbox","input":{}}]}}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"{\"you\":\"@me\"}"}]}}
{"type":"assistant","message":{"model":"claude-x","role":"assistant","content":[{"type":"text","text":"Done."}]}}
{"type":"result","subtype":"success","is_error":false,"num_turns":3,"result":"Done.","terminal_reason":"completed"}
"#;

    // Recorded from claude 2.1.197 against a model endpoint answering 401 (CLAUDE_CODE_MAX_RETRIES=0).
    const INVALID_KEY: &str = r#"{"type":"system","subtype":"init","cwd":"/w","mcp_servers":[]}
{"type":"assistant","message":{"id":"6d3","model":"<synthetic>","role":"assistant","stop_reason":"stop_sequence","type":"message","content":[{"type":"text","text":"Invalid API key · Fix external API key"}]},"parent_tool_use_id":null,"session_id":"e","error":"authentication_failed"}
{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"num_turns":1,"result":"Invalid API key · Fix external API key","terminal_reason":"completed"}
"#;

    // Recorded from claude 2.1.197 with an empty HOME and no key.
    const NOT_LOGGED_IN: &str = r#"{"type":"assistant","message":{"model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"Not logged in · Please run /login"}]}}
{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"num_turns":1,"result":"Not logged in · Please run /login"}
"#;

    #[test]
    fn argv_has_the_documented_shape_and_no_key() {
        let fx = Fixture::new(crate::config::RuntimeKind::ClaudeCode);
        let spec = fx.prepare().unwrap();
        let cfg = fx.state_dir().join(MCP_CONFIG_FILE);
        assert_eq!(spec.program, fx.binary.clone());
        assert_eq!(
            spec.args,
            [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--model",
                "x",
                "--mcp-config",
                cfg.to_str().unwrap(),
                "--strict-mcp-config",
                "--setting-sources",
                "",
                "--settings",
                super::super::confine::CLAUDE_SETTINGS,
                "--no-session-persistence",
                "--permission-mode",
                "dontAsk",
                "--tools",
                "",
                "--allowedTools",
                "mcp__agentchat__*",
            ]
        );
        // The kernel's line: the workdir and scratch folder writable, the MCP config readable,
        // nothing of the home but the login file.
        let plan = spec.sandbox.as_ref().unwrap();
        let rw: Vec<_> = plan.with_access(Access::ReadWrite).collect();
        assert_eq!(
            rw,
            [fx.workdir().as_path(), spec.scratch.as_deref().unwrap()]
        );
        assert!(plan.with_access(Access::Read).any(|p| p == cfg));
        assert!(
            plan.ports.contains(&9) && plan.ports.contains(&443),
            "{:?}",
            plan.ports
        );
        assert!(spec.args.iter().all(|a| !a.contains(Fixture::KEY)));
        assert!(spec.env.iter().all(|(_, v)| !v.contains(Fixture::KEY)));
        assert_eq!(spec.cwd, fx.workdir());
    }

    #[test]
    fn max_cost_per_run_usd_is_passed_as_the_budget_flag_after_the_users_own() {
        let mut fx = Fixture::new(crate::config::RuntimeKind::ClaudeCode);
        let budget = |args: &[String]| -> Vec<(usize, String)> {
            args.iter()
                .enumerate()
                .filter(|(_, a)| a.starts_with("--max-budget-usd"))
                .map(|(i, _)| (i, args.get(i + 1).cloned().unwrap_or_default()))
                .collect()
        };
        assert_eq!(budget(&fx.prepare().unwrap().args), []);

        fx.settings.listen.policy.max_cost_per_run_usd = Some(0.5);
        fx.settings.listen.claude.extra_args = vec!["--max-budget-usd".into(), "9".into()];
        let args = fx.prepare().unwrap().args;
        let found = budget(&args);
        let [(users, nine), (ours, half)] = found.as_slice() else {
            panic!("{args:?}");
        };
        assert_eq!((nine.as_str(), half.as_str()), ("9", "0.5"));
        assert!(ours > users, "the policy's flag must come last: {args:?}");
        assert!(args.iter().position(|a| a == "--allowedTools").unwrap() > *ours);
    }

    #[test]
    fn prompt_goes_on_stdin() {
        let fx = Fixture::new(crate::config::RuntimeKind::ClaudeCode);
        let spec = fx.prepare().unwrap();
        assert_eq!(spec.stdin.as_deref(), Some(Fixture::PROMPT.as_bytes()));
        assert!(spec.args.iter().all(|a| a != Fixture::PROMPT));
    }

    #[test]
    fn mcp_config_file_is_0600_and_names_the_agentchat_http_server() {
        use std::os::unix::fs::PermissionsExt;
        let fx = Fixture::new(crate::config::RuntimeKind::ClaudeCode);
        fx.prepare().unwrap();
        let path = fx.state_dir().join(MCP_CONFIG_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let server = &v["mcpServers"]["agentchat"];
        assert_eq!(server["type"], "http");
        assert_eq!(server["url"], "http://127.0.0.1:9/mcp");
        assert_eq!(
            server["headers"]["Authorization"],
            format!("Bearer {}", Fixture::KEY)
        );
        // No stray temporary file is left next to it (the run's scratch folder aside).
        let mut names: Vec<_> = std::fs::read_dir(fx.state_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                std::ffi::OsString::from(MCP_CONFIG_FILE),
                std::ffi::OsString::from(crate::runtime::sandbox::SCRATCH_DIR)
            ]
        );
    }

    #[test]
    fn an_existing_world_readable_mcp_config_is_replaced_by_a_0600_one() {
        use std::os::unix::fs::PermissionsExt;
        let fx = Fixture::new(crate::config::RuntimeKind::ClaudeCode);
        let path = fx.state_dir().join(MCP_CONFIG_FILE);
        std::fs::write(&path, "stale").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        fx.prepare().unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("mcpServers")
        );
    }

    #[test]
    fn an_mcp_config_that_already_holds_the_same_is_not_written_again_and_a_new_key_is() {
        use std::os::unix::fs::MetadataExt;
        let mut fx = Fixture::new(crate::config::RuntimeKind::ClaudeCode);
        let path = fx.state_dir().join(MCP_CONFIG_FILE);
        fx.prepare().unwrap();
        let first = std::fs::metadata(&path).unwrap().ino();
        // The atomic write renames a new file into place, so a rewrite is a new inode.
        fx.prepare().unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().ino(),
            first,
            "unchanged: left as it is"
        );
        fx.settings.listen.claude.mcp_url = Some("http://example.test/other".into());
        fx.prepare().unwrap();
        assert_ne!(
            std::fs::metadata(&path).unwrap().ino(),
            first,
            "changed: written"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("http://example.test/other"), "{text}");
    }

    #[test]
    fn configured_mcp_url_wins() {
        let mut fx = Fixture::new(crate::config::RuntimeKind::ClaudeCode);
        fx.settings.listen.claude.mcp_url = Some("http://example.test/custom".into());
        fx.prepare().unwrap();
        let text = std::fs::read_to_string(fx.state_dir().join(MCP_CONFIG_FILE)).unwrap();
        assert!(text.contains("http://example.test/custom"), "{text}");
    }

    #[test]
    fn mcp_user_mode_passes_no_mcp_config_and_writes_no_key() {
        let mut fx = Fixture::new(crate::config::RuntimeKind::ClaudeCode);
        fx.settings.listen.claude.mcp = McpMode::User;
        let spec = fx.prepare().unwrap();
        assert!(!spec.args.iter().any(|a| a == "--mcp-config"));
        assert!(
            spec.args
                .ends_with(&["--allowedTools".into(), "mcp__agentchat__*".into()])
        );
        assert!(!fx.state_dir().join(MCP_CONFIG_FILE).exists());
        // The user's own MCP config may read the key from the environment.
        assert!(!spec.env_remove.iter().any(|r| r == "AGENTCHAT_API_KEY"));
        assert!(spec.env_pass.iter().any(|p| p == "AGENTCHAT_API_KEY"));
    }

    #[test]
    fn nested_session_vars_are_removed_and_config_dir_is_left_alone() {
        let fx = Fixture::new(crate::config::RuntimeKind::ClaudeCode);
        let spec = fx.prepare().unwrap();
        for v in [
            "CLAUDECODE",
            "CLAUDE_CODE_ENTRYPOINT",
            "AI_AGENT",
            "NOTIFY_SOCKET",
            "CODEX_SANDBOX",
        ] {
            assert!(spec.env_remove.iter().any(|r| r == v), "{v} not removed");
        }
        assert!(!spec.env_remove.iter().any(|r| r == "CLAUDE_CONFIG_DIR"));
        assert!(spec.env_remove.iter().any(|r| r == "AGENTCHAT_API_KEY"));
        assert!(!spec.env.iter().any(|(k, _)| k == "CLAUDE_CONFIG_DIR"));
        assert!(
            spec.env
                .iter()
                .any(|(k, v)| k == "AGENTCHAT_HANDLE" && v == "@me")
        );
        assert!(
            spec.env
                .iter()
                .any(|(k, v)| k == "AGENTCHAT_RUN_KIND" && v == "wake")
        );
    }

    #[test]
    fn missing_binary_is_unusable() {
        let mut fx = Fixture::new(crate::config::RuntimeKind::ClaudeCode);
        fx.settings.listen.claude.binary = Some(fx.dir.path().join("nope/claude"));
        assert!(matches!(fx.prepare(), Err(RuntimeError::Unusable(_))));
    }

    #[test]
    fn success_needs_exit_zero_and_a_clean_result() {
        assert_eq!(
            judge(&ProcessEnd::Exited(0), SUCCESS.as_bytes()),
            RunOutcome::Completed
        );
        assert!(matches!(
            judge(&ProcessEnd::Exited(1), SUCCESS.as_bytes()),
            RunOutcome::Failed(_)
        ));
    }

    #[test]
    fn a_run_without_a_connected_agentchat_mcp_server_is_failed() {
        // Recorded from claude 2.1.197 with the MCP endpoint unreachable: it still exits 0.
        let failed = r#"{"type":"system","subtype":"init","cwd":"/w","mcp_servers":[{"name":"agentchat","status":"failed"}]}
{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"OK","terminal_reason":"completed"}"#;
        match judge(&ProcessEnd::Exited(0), failed.as_bytes()) {
            RunOutcome::Failed(r) => assert!(r.contains("MCP server did not connect"), "{r}"),
            other => panic!("{other:?}"),
        }
        let absent = failed.replace(r#"{"name":"agentchat","status":"failed"}"#, "");
        assert!(matches!(
            judge(&ProcessEnd::Exited(0), absent.as_bytes()),
            RunOutcome::Failed(_)
        ));
    }

    #[test]
    fn no_final_result_is_failed() {
        let cut: String = SUCCESS.lines().take(4).collect::<Vec<_>>().join("\n");
        match judge(&ProcessEnd::Exited(0), cut.as_bytes()) {
            RunOutcome::Failed(r) => assert!(r.contains("without a final result"), "{r}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn error_result_is_failed_without_the_models_text() {
        let out = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"result":"SECRET PEER TEXT"}"#;
        match judge(&ProcessEnd::Exited(0), out.as_bytes()) {
            RunOutcome::Failed(r) => {
                assert!(r.contains("error_during_execution"), "{r}");
                assert!(!r.contains("SECRET PEER TEXT"), "{r}");
            }
            other => panic!("{other:?}"),
        }
        let max_turns = r#"{"type":"result","subtype":"error_max_turns","is_error":false}"#;
        assert!(matches!(
            judge(&ProcessEnd::Exited(0), max_turns.as_bytes()),
            RunOutcome::Failed(_)
        ));
    }

    #[test]
    fn invalid_key_and_not_logged_in_are_unusable() {
        for out in [INVALID_KEY, NOT_LOGGED_IN] {
            match judge(&ProcessEnd::Exited(1), out.as_bytes()) {
                RunOutcome::Unusable(m) => assert!(m.contains("not logged in"), "{m}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_model_quoting_login_text_does_not_make_it_unusable() {
        // The model (not Claude itself) wrote the words; the run completed.
        let out = r#"{"type":"assistant","message":{"model":"claude-x","content":[{"type":"text","text":"The peer says: Not logged in · Please run /login"}]}}
{"type":"result","subtype":"success","is_error":false}"#;
        assert_eq!(
            judge(&ProcessEnd::Exited(0), out.as_bytes()),
            RunOutcome::Completed
        );
    }

    #[test]
    fn a_run_stopped_while_claude_retries_a_refused_login_is_unusable() {
        // Recorded from claude 2.1.197 against a 401 endpoint that allows retries.
        let out = r#"{"type":"system","subtype":"init","cwd":"/w","mcp_servers":[]}
{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":540.8,"error_status":401,"error":"authentication_failed","session_id":"s"}"#;
        assert!(matches!(
            judge(&ProcessEnd::TimedOut, out.as_bytes()),
            RunOutcome::Unusable(_)
        ));
    }

    #[test]
    fn a_retried_refusal_followed_by_a_clean_result_is_completed() {
        let out = r#"{"type":"system","subtype":"api_retry","attempt":1,"error_status":401,"error":"authentication_failed"}
{"type":"result","subtype":"success","is_error":false}"#;
        assert_eq!(
            judge(&ProcessEnd::Exited(0), out.as_bytes()),
            RunOutcome::Completed
        );
    }

    #[test]
    fn time_limit_and_spawn_failures() {
        assert_eq!(
            judge(&ProcessEnd::TimedOut, b""),
            RunOutcome::Failed("time limit reached".into())
        );
        assert!(matches!(
            judge(
                &ProcessEnd::SpawnFailed("No such file or directory (os error 2)".into()),
                b""
            ),
            RunOutcome::Unusable(_)
        ));
    }
}

//! The Codex runtime (`docs/runtimes.md`): `codex exec --json --skip-git-repo-check` with the `agentchat`
//! MCP server given by `-c` overrides, `-C <workdir>`, the prompt as the last argument (after
//! `--`, so a prompt starting with `-` is never read as a flag) and stdin closed (an open stdin
//! makes `codex exec` wait for more input).
//!
//! The key reaches Codex only in the environment variable `AGENTCHAT_API_KEY`, which the MCP
//! override names as the bearer token's source; argv holds only the variable's name. Success
//! needs exit 0 and `turn.completed`; `turn.failed` or an error event is a failure, and a refused
//! login is `Unusable`.

use super::agent_cli;
use super::{ListenerEnv, RunContext, RunOutcome, RunSpec, RuntimeError};
use crate::config::RuntimeKind;
use crate::core::sandbox::Access;
use crate::sys::process::ProcessEnd;
use secrecy::ExposeSecret;

/// The child's environment variable that carries the key for the MCP bearer token.
pub const KEY_ENV: &str = "AGENTCHAT_API_KEY";

/// Variables a parent Codex sets for the commands it runs; a listener started from inside such
/// a command must not make its runs think they are sandboxed.
pub const NESTED_SESSION_VARS: &[&str] = &["CODEX_SANDBOX", "CODEX_SANDBOX_NETWORK_DISABLED"];

/// The run's own Codex home takes the model settings and the login from the user's
/// (`codex_home`): `CODEX_HOME`, else `~/.codex`, of the listener's environment.
pub fn prepare(ctx: &RunContext<'_>, listener: &ListenerEnv) -> Result<RunSpec, RuntimeError> {
    let codex = &ctx.settings.listen.codex;
    let program = super::cli_binary_in(ctx.settings, RuntimeKind::Codex, listener.var_os("PATH"))?;
    let url = agent_cli::mcp_url(&ctx.settings.api_base, codex.mcp_url.as_deref());
    let workdir = ctx.workdir.to_str().ok_or_else(|| {
        RuntimeError::Unusable(format!(
            "the workdir {} is not valid UTF-8",
            ctx.workdir.display()
        ))
    })?;

    let mut args: Vec<String> = ["exec", "--json", "--skip-git-repo-check"]
        .map(String::from)
        .to_vec();
    args.push("-C".into());
    args.push(workdir.to_string());
    args.extend(super::confine::extra_args(ctx.settings)?);
    // After the user's arguments, so none of them widens what the run is offered.
    args.extend(super::confine::codex_args(ctx.settings, &mcp_server(&url))?);
    args.push("--".into());
    args.push(ctx.prompt.to_string());

    let scratch = super::sandbox::fresh_scratch(ctx.state_dir, listener)?;
    let user_home =
        super::codex_home::user_home(listener.var_os("CODEX_HOME"), listener.var_os("HOME"));
    let home = super::codex_home::make(
        &scratch,
        user_home.as_deref(),
        super::instructions::for_run(ctx).as_deref(),
    )?;
    let mut plan = super::sandbox::base_plan(ctx, listener, &scratch);
    super::sandbox::add_program(&mut plan, &program, listener);
    if let Some(login) = &home.login {
        plan.add(login, Access::ReadWriteFile, "Codex's login");
    }
    if super::confine::reach(ctx.settings).commands {
        // Codex's shell sandbox (bubblewrap) mounts, which no process may do inside a line
        // that holds files: with the shell the kernel holds the run's TCP ports, signals and
        // sockets, and Codex's sandbox its files (writes in the workdir only).
        plan.files_left_to = Some("Codex's own shell sandbox (bubblewrap)");
    }
    // HTTPS (the OpenAI API, a login's refresh), the provider's endpoint, the MCP server.
    plan.add_port(443);
    let env_url = listener.var("OPENAI_BASE_URL");
    for model_url in home.model_urls.iter().map(String::as_str).chain(env_url) {
        super::sandbox::add_url_port(&mut plan, model_url);
    }
    super::sandbox::add_url_port(&mut plan, &url);

    let mut env = super::common_env(ctx);
    env.push((KEY_ENV.into(), ctx.api_key.expose_secret().to_string()));
    env.push(("CODEX_HOME".into(), home.dir.display().to_string()));
    env.extend(super::sandbox::tmp_env(&scratch));

    Ok(RunSpec {
        program,
        args,
        env,
        env_remove: super::cli_env_remove(),
        env_pass: ctx.settings.listen.env_pass.clone(),
        stdin: None,
        cwd: ctx.workdir.to_path_buf(),
        runtime: RuntimeKind::Codex,
        sandbox: Some(plan),
        scratch: Some(scratch),
    })
}

/// The `agentchat` MCP server as a TOML inline table (the value of `mcp_servers.agentchat`).
fn mcp_server(url: &str) -> String {
    let toml_str = |s: &str| toml::Value::String(s.to_string()).to_string();
    let fields = [
        ("url", toml_str(url)),
        ("bearer_token_env_var", toml_str(KEY_ENV)),
        ("default_tools_approval_mode", toml_str("approve")),
        // Without the tools the run cannot look at the tray; an unreachable server must fail
        // the run (exit 1), not let it complete having seen nothing.
        ("required", "true".into()),
    ];
    let inner: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", inner.join(","))
}

/// Lowercase fragments of Codex's error messages that mean the model provider refused the
/// login (a retry cannot fix them).
const AUTH_TEXTS: &[&str] = &[
    "401 unauthorized",
    "403 forbidden",
    "status 401",
    "status 403",
    "not logged in",
    "invalid api key",
    "incorrect api key",
    "login required",
    "please log in",
    "missing environment variable",
];

pub fn judge(end: &ProcessEnd, output: &[u8]) -> RunOutcome {
    if let Some(unusable) = agent_cli::unstartable("Codex", end) {
        return unusable;
    }
    let ev = Events::read(output);
    let clean = ev.turn_completed && ev.turn_failed.is_none() && ev.errors.is_empty();
    if *end == ProcessEnd::Exited(0) && clean {
        return RunOutcome::Completed;
    }
    if ev.auth_refused {
        return RunOutcome::Unusable(
            "Codex is not logged in or its model provider refused the credentials; run \
             `codex login` (or fix the provider's key) as the user the listener runs as"
                .into(),
        );
    }
    if let Some(reason) = agent_cli::end_failure(end) {
        return RunOutcome::Failed(match ev.last_error() {
            Some(e) => format!("{reason}; {e}"),
            None => reason,
        });
    }
    if let Some(e) = &ev.turn_failed {
        return RunOutcome::Failed(format!("turn failed: {e}"));
    }
    if let Some(e) = ev.errors.last() {
        return RunOutcome::Failed(format!("error event: {e}"));
    }
    if !ev.turn_completed {
        return RunOutcome::Failed("exited 0 without a completed turn".into());
    }
    RunOutcome::Completed
}

#[derive(Default)]
struct Events {
    turn_completed: bool,
    /// `turn.failed`'s message, clipped.
    turn_failed: Option<String>,
    /// Top-level `error` events, clipped, without the ones Codex retries by itself.
    errors: Vec<String>,
    auth_refused: bool,
}

impl Events {
    fn read(output: &[u8]) -> Events {
        let mut ev = Events::default();
        for v in agent_cli::json_lines(output) {
            match v.get("type").and_then(|t| t.as_str()) {
                Some("turn.completed") => ev.turn_completed = true,
                Some("turn.failed") => {
                    let msg = v
                        .pointer("/error/message")
                        .and_then(|m| m.as_str())
                        .unwrap_or("no message");
                    ev.note_auth(msg);
                    ev.turn_failed = Some(agent_cli::clip(msg));
                }
                Some("error") => {
                    let msg = v.get("message").and_then(|m| m.as_str()).unwrap_or("");
                    ev.note_auth(msg);
                    // "Reconnecting... n/5 (…)" is Codex retrying on its own; what finally
                    // fails arrives as its own error and `turn.failed`.
                    if !msg.starts_with("Reconnecting...") {
                        ev.errors.push(agent_cli::clip(msg));
                    }
                }
                // `item.completed` of type `error` are warnings (unknown model metadata, …).
                _ => {}
            }
        }
        ev
    }

    fn note_auth(&mut self, msg: &str) {
        let lower = msg.to_lowercase();
        // An MCP server refusing our key is not Codex's login.
        if lower.contains("mcp") {
            return;
        }
        if AUTH_TEXTS.iter().any(|p| lower.contains(p)) {
            self.auth_refused = true;
        }
    }

    fn last_error(&self) -> Option<&str> {
        self.turn_failed
            .as_deref()
            .or(self.errors.last().map(String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RuntimeKind;
    use crate::runtime::agent_cli::test_support::Fixture;

    const SUCCESS: &str = r#"== run header
{"type":"thread.started","thread_id":"t"}
{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `mock-model` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_1","type":"mcp_tool_call","server":"agentchat","tool":"agentchat_inbox","arguments":{},"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"done"}}
{"type":"turn.completed","usage":{"input_tokens":1}}
"#;

    // Recorded from codex 0.171.0 against a model endpoint answering 401.
    const UNAUTHORIZED: &str = r#"{"type":"thread.started","thread_id":"t"}
{"type":"turn.started"}
{"type":"error","message":"Reconnecting... 1/5 (unexpected status 401 Unauthorized: invalid x-api-key, url: http://127.0.0.1:18401/v1/responses)"}
{"type":"error","message":"unexpected status 401 Unauthorized: invalid x-api-key, url: http://127.0.0.1:18401/v1/responses"}
{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized: invalid x-api-key, url: http://127.0.0.1:18401/v1/responses"}}
"#;

    /// The user's Codex home a test's run reads: `~/.codex` of the fixture's listener
    /// (`Fixture::listener`: absent unless the test writes it).
    fn scratch_home(fx: &Fixture) -> std::path::PathBuf {
        fx.dir.path().join("home/.codex")
    }

    #[test]
    fn the_run_has_a_codex_home_of_its_own_with_the_users_model_settings_and_login() {
        let fx = Fixture::new(RuntimeKind::Codex);
        let user = scratch_home(&fx);
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(
            user.join("config.toml"),
            "model = \"m\"\nnotify = [\"x\"]\n[mcp_servers.fs]\ncommand = \"x\"\n",
        )
        .unwrap();
        std::fs::write(user.join("auth.json"), "{}").unwrap();
        let spec = fx.prepare().unwrap();
        let home = spec
            .env
            .iter()
            .find(|(k, _)| k == "CODEX_HOME")
            .map(|(_, v)| std::path::PathBuf::from(v))
            .unwrap();
        assert!(home.starts_with(spec.scratch.as_ref().unwrap()));
        assert_eq!(
            std::fs::read_to_string(home.join("config.toml")).unwrap(),
            "model = \"m\"\n"
        );
        let plan = spec.sandbox.as_ref().unwrap();
        assert!(
            plan.with_access(Access::ReadWriteFile)
                .any(|p| p == user.join("auth.json"))
        );
        // The user's home itself is not in the line.
        assert!(!plan.paths.iter().any(|r| r.path == user));
    }

    #[test]
    fn a_codex_config_that_does_not_parse_is_unusable_naming_the_file() {
        let fx = Fixture::new(RuntimeKind::Codex);
        let config = scratch_home(&fx).join("config.toml");
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(&config, "[tui\n").unwrap();
        match fx.prepare() {
            Err(RuntimeError::Unusable(why)) => {
                assert!(why.contains(&config.display().to_string()), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn argv_has_the_documented_shape_with_the_prompt_last() {
        let fx = Fixture::new(RuntimeKind::Codex);
        let spec = fx.prepare().unwrap();
        let work = fx.workdir();
        assert_eq!(spec.program, fx.binary.clone());
        assert_eq!(
            spec.args[..7],
            [
                "exec",
                "--json",
                "--skip-git-repo-check",
                "-C",
                work.to_str().unwrap(),
                "--model",
                "x",
            ]
        );
        // The confinement follows the user's arguments (runtime::confine pins its content),
        // then the prompt after `--`.
        let tail = &spec.args[7..];
        assert_eq!(
            tail[..2],
            [
                "-c",
                concat!(
                    r#"mcp_servers={agentchat={url="http://127.0.0.1:9/mcp","#,
                    r#"bearer_token_env_var="AGENTCHAT_API_KEY","#,
                    r#"default_tools_approval_mode="approve",required=true}}"#
                )
            ]
        );
        assert_eq!(tail[tail.len() - 2..], ["--", Fixture::PROMPT,]);
        assert_eq!(spec.stdin, None);
        assert_eq!(spec.cwd, work);
    }

    #[test]
    fn key_is_only_in_the_named_env_var() {
        let fx = Fixture::new(RuntimeKind::Codex);
        let spec = fx.prepare().unwrap();
        assert!(spec.args.iter().all(|a| !a.contains(Fixture::KEY)));
        let carriers: Vec<_> = spec
            .env
            .iter()
            .filter(|(_, v)| v.contains(Fixture::KEY))
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(carriers, [KEY_ENV]);
        assert!(spec.env_remove.iter().any(|r| r == "NOTIFY_SOCKET"));
    }

    #[test]
    fn both_clis_nested_session_vars_are_removed_and_codex_home_is_left_alone() {
        let fx = Fixture::new(RuntimeKind::Codex);
        let spec = fx.prepare().unwrap();
        for v in [
            "CODEX_SANDBOX",
            "CODEX_SANDBOX_NETWORK_DISABLED",
            "CLAUDECODE",
        ] {
            assert!(spec.env_remove.iter().any(|r| r == v), "{v} not removed");
        }
        assert!(!spec.env_remove.iter().any(|r| r == "CODEX_HOME"));
        // Codex reads the MCP bearer token from it.
        assert!(!spec.env_remove.iter().any(|r| r == KEY_ENV));
    }

    #[test]
    fn mcp_url_is_toml_quoted() {
        let mut fx = Fixture::new(RuntimeKind::Codex);
        fx.settings.listen.codex.mcp_url = Some(r#"http://h/"q"\x"#.into());
        let spec = fx.prepare().unwrap();
        let arg = spec
            .args
            .iter()
            .find(|a| a.starts_with("mcp_servers={"))
            .unwrap();
        let parsed: toml::Table = toml::from_str(arg).unwrap();
        assert_eq!(
            parsed["mcp_servers"]["agentchat"]["url"].as_str().unwrap(),
            r#"http://h/"q"\x"#
        );
    }

    #[test]
    fn missing_binary_is_unusable() {
        let mut fx = Fixture::new(RuntimeKind::Codex);
        fx.settings.listen.codex.binary = Some(fx.dir.path().join("none/codex"));
        assert!(matches!(fx.prepare(), Err(RuntimeError::Unusable(_))));
    }

    #[test]
    fn completed_turn_with_exit_zero_is_completed_despite_warning_items() {
        assert_eq!(
            judge(&ProcessEnd::Exited(0), SUCCESS.as_bytes()),
            RunOutcome::Completed
        );
    }

    #[test]
    fn non_zero_exit_is_failed_even_with_a_completed_turn() {
        assert!(matches!(
            judge(&ProcessEnd::Exited(1), SUCCESS.as_bytes()),
            RunOutcome::Failed(_)
        ));
    }

    #[test]
    fn turn_failed_is_failed_with_its_message() {
        let out = r#"{"type":"turn.started"}
{"type":"turn.failed","error":{"message":"stream disconnected before completion"}}"#;
        match judge(&ProcessEnd::Exited(0), out.as_bytes()) {
            RunOutcome::Failed(r) => assert!(r.contains("stream disconnected"), "{r}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_error_event_is_failed_but_reconnect_notices_are_not() {
        let with_error = format!("{SUCCESS}{}\n", r#"{"type":"error","message":"boom"}"#);
        assert!(matches!(
            judge(&ProcessEnd::Exited(0), with_error.as_bytes()),
            RunOutcome::Failed(_)
        ));
        let with_retry = format!(
            "{}\n{SUCCESS}",
            r#"{"type":"error","message":"Reconnecting... 1/5 (stream disconnected)"}"#
        );
        assert_eq!(
            judge(&ProcessEnd::Exited(0), with_retry.as_bytes()),
            RunOutcome::Completed
        );
    }

    #[test]
    fn no_completed_turn_is_failed() {
        let out = "{\"type\":\"thread.started\"}\n{\"type\":\"turn.started\"}\n";
        match judge(&ProcessEnd::Exited(0), out.as_bytes()) {
            RunOutcome::Failed(r) => assert!(r.contains("without a completed turn"), "{r}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refused_login_is_unusable() {
        assert!(matches!(
            judge(&ProcessEnd::Exited(1), UNAUTHORIZED.as_bytes()),
            RunOutcome::Unusable(_)
        ));
        let not_logged_in = r#"{"type":"error","message":"Not logged in. Run codex login."}"#;
        assert!(matches!(
            judge(&ProcessEnd::Exited(1), not_logged_in.as_bytes()),
            RunOutcome::Unusable(_)
        ));
    }

    #[test]
    fn an_mcp_refusal_is_not_a_codex_login_problem() {
        let out = r#"{"type":"error","message":"MCP client for `agentchat` failed to start: 401 Unauthorized"}"#;
        assert!(matches!(
            judge(&ProcessEnd::Exited(1), out.as_bytes()),
            RunOutcome::Failed(_)
        ));
    }

    #[test]
    fn time_limit_is_failed() {
        assert_eq!(
            judge(&ProcessEnd::TimedOut, b""),
            RunOutcome::Failed("time limit reached".into())
        );
    }
}

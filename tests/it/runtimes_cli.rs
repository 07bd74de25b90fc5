//! The runtimes' argv, environment and judging, proven against the real pinned `claude` and
//! `codex` CLIs (no listener): the spec `runtime::prepare` builds is started as-is, with a HOME
//! and CODEX_HOME the test owns and the scripted model server as the model provider.

use crate::common::settings::settings;
use crate::model_server::cli::{base_env, claude_bin, codex_bin, write_codex_home};
use crate::model_server::sim::{Sim, assert_answered};
use crate::model_server::{Mode, ModelServer};
use agentchat::config::{McpMode, RuntimeKind, Settings};
use agentchat::core::decision::RunKind;
use agentchat::runtime::{self, ListenerEnv, RunContext, RunOutcome, RunSpec};
use agentchat::sys::process::ProcessEnd;
use secrecy::SecretString;
use std::time::Duration;

const KEY: &str = "ac_cli_test_key_9f8e7d6c5b4a";
const PROMPT: &str = "AgentChat woke you: something is waiting for you on AgentChat.";

struct Setup {
    dir: tempfile::TempDir,
    model: ModelServer,
    runtime: RuntimeKind,
    settings: Settings,
    key: String,
    /// Added to the base environment, as if the listener had it (before the spec's removals).
    extra_env: Vec<(String, String)>,
}

impl Setup {
    async fn new(runtime: RuntimeKind, mode: Mode, api_base: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        for d in ["home", "state", "work"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        let model = ModelServer::start(mode).await;
        write_codex_home(&dir.path().join("home"), &model.base_url());
        let binary = match runtime {
            RuntimeKind::ClaudeCode => claude_bin(),
            _ => codex_bin(),
        };
        let settings = settings(&dir.path().join("state"))
            .runtime(runtime)
            .api_base(api_base)
            .agent_binary(binary)
            .build();
        Setup {
            dir,
            model,
            runtime,
            settings,
            key: KEY.to_string(),
            extra_env: vec![],
        }
    }

    /// A setup whose MCP endpoint is the sim and whose key is the sim's agent under test.
    async fn with_sim(runtime: RuntimeKind, mode: Mode, sim: &Sim) -> Setup {
        let mut s = Setup::new(runtime, mode, sim.api_base()).await;
        s.key = sim.me.1.clone();
        s
    }

    /// The environment of the listener this test stands in for: the spec is drawn from it (the
    /// run's Codex home from its `HOME`) and the run inherits it.
    fn listener_env(&self) -> Vec<(String, String)> {
        base_env(&self.dir.path().join("home"), &self.model.base_url())
            .into_iter()
            .chain(self.extra_env.iter().cloned())
            .collect()
    }

    fn spec(&self) -> RunSpec {
        let key = SecretString::from(self.key.clone());
        let reasons = vec!["message".to_string()];
        let state = self.dir.path().join("state");
        let work = self.dir.path().join("work");
        let ctx = RunContext {
            settings: &self.settings,
            kind: RunKind::Wake,
            prompt: PROMPT,
            handle: "@tester",
            cycle_id: "cyc_1",
            wake_reasons: &reasons,
            api_key: &key,
            state_dir: &state,
            workdir: &work,
            identity_template: None,
        };
        runtime::prepare_in(&ctx, &ListenerEnv::from_vars(self.listener_env())).unwrap()
    }

    /// Starts the spec exactly as built (env cleared to the test's base env first), waits at
    /// most `limit`, and judges it.
    async fn run(&self, limit: Duration) -> (ProcessEnd, Vec<u8>, RunOutcome) {
        let spec = self.spec();
        let mut cmd = tokio::process::Command::new(&spec.program);
        cmd.args(&spec.args)
            .current_dir(&spec.cwd)
            .env_clear()
            // What the supervisor passes of the listener's environment (runtime::inherited).
            .envs(
                self.listener_env()
                    .into_iter()
                    .filter(|(k, _)| agentchat::core::run_env::passes(k, &spec.env_pass)),
            )
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .stdin(if spec.stdin.is_some() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .kill_on_drop(true)
            .process_group(0);
        for k in &spec.env_remove {
            cmd.env_remove(k);
        }
        let mut child = cmd.spawn().unwrap();
        if let Some(input) = &spec.stdin {
            use tokio::io::AsyncWriteExt;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(input).await.unwrap();
            drop(stdin);
        }
        let pid = child.id().unwrap() as i32;
        let mut out_pipe = child.stdout.take().unwrap();
        let mut err_pipe = child.stderr.take().unwrap();
        let read_out = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut out_pipe, &mut buf).await;
            buf
        });
        let read_err = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut err_pipe, &mut buf).await;
            buf
        });
        let end = match tokio::time::timeout(limit, child.wait()).await {
            Ok(status) => match status.unwrap().code() {
                Some(c) => ProcessEnd::Exited(c),
                None => ProcessEnd::Signalled(9),
            },
            Err(_) => {
                // Our own child's process group.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                let _ = child.wait().await;
                ProcessEnd::TimedOut
            }
        };
        let mut output = read_out.await.unwrap();
        output.extend_from_slice(&read_err.await.unwrap());
        let outcome = runtime::judge(self.runtime, &end, &output);
        (end, output, outcome)
    }
}

fn show(output: &[u8]) -> String {
    String::from_utf8_lossy(output).chars().take(4000).collect()
}

/// An MCP endpoint that is not there: Claude Code still talks to the model and exits 0, but a
/// run that could not reach the AgentChat tools looked at nothing and must not count as completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_run_that_cannot_reach_the_mcp_tools_is_failed_not_completed() {
    let s = Setup::new(RuntimeKind::ClaudeCode, Mode::Normal, "http://127.0.0.1:1").await;
    let (end, output, outcome) = s.run(Duration::from_secs(90)).await;
    assert_eq!(end, ProcessEnd::Exited(0), "{}", show(&output));
    match outcome {
        RunOutcome::Failed(r) => assert!(r.contains("MCP server"), "{r}"),
        other => panic!("{other:?}\n{}", show(&output)),
    }
    assert!(
        s.model
            .journal()
            .requests
            .iter()
            .any(|r| r.starts_with("POST /v1/messages")),
        "{:?}",
        s.model.journal()
    );
}

/// A model endpoint answering 401 (an invalid model key): the run ends by itself (no retry
/// storm until the time limit) and is judged unusable.
async fn refused_model_key_is_judged_unusable(runtime: RuntimeKind) {
    let sim = Sim::start().await;
    let s = Setup::with_sim(runtime, Mode::Unauthorized, &sim).await;
    let (end, output, outcome) = s.run(Duration::from_secs(120)).await;
    assert_ne!(end, ProcessEnd::TimedOut, "{}", show(&output));
    assert!(
        matches!(outcome, RunOutcome::Unusable(_)),
        "{outcome:?}\n{}",
        show(&output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_refused_model_key_is_judged_unusable() {
    refused_model_key_is_judged_unusable(RuntimeKind::ClaudeCode).await;
}

/// The same for Codex: the `required` MCP server makes it stop (exit 1) instead of answering
/// without the tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_run_that_cannot_reach_the_mcp_tools_is_failed_not_completed() {
    let s = Setup::new(RuntimeKind::Codex, Mode::Normal, "http://127.0.0.1:1").await;
    let (end, output, outcome) = s.run(Duration::from_secs(90)).await;
    assert_eq!(end, ProcessEnd::Exited(1), "{}", show(&output));
    assert!(
        matches!(outcome, RunOutcome::Failed(_)),
        "{outcome:?}\n{}",
        show(&output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_refused_model_key_is_judged_unusable() {
    refused_model_key_is_judged_unusable(RuntimeKind::Codex).await;
}

/// The whole agent turn, directly (no listener): a peer's message waits on the sim; the real CLI,
/// started from the built spec, calls the sim's MCP tools as the scripted model tells it to.
async fn answers_a_peer_through_the_sims_mcp_tools(runtime: RuntimeKind) {
    let sim = Sim::start().await;
    let sent = sim.peer_sends("Can you confirm the build is green?").await;
    let conv = sent["conversation_id"].as_str().unwrap().to_string();
    let s = Setup::with_sim(runtime, Mode::Normal, &sim).await;
    let (end, output, outcome) = s.run(Duration::from_secs(120)).await;
    assert_eq!(outcome, RunOutcome::Completed, "{end:?}\n{}", show(&output));
    // The run's own report of what it used (issue 26), from the CLI's final event; the scripted
    // model reports 10 tokens in and 5 out per request. Only Claude Code prices them.
    let report = agentchat::core::run_report::parse(runtime, &output);
    let usage = report
        .usage
        .unwrap_or_else(|| panic!("no usage in\n{}", show(&output)));
    assert!(usage.input > 0 && usage.output > 0, "{usage:?}");
    assert_eq!(
        report.cost_usd.is_some_and(|c| c > 0.0),
        runtime == RuntimeKind::ClaudeCode,
        "{report:?}"
    );
    let steps = s.model.journal().steps;
    for step in [
        "call agentchat_inbox",
        "call agentchat_get_conversation",
        "call agentchat_send_message",
        "call agentchat_decide",
    ] {
        assert!(
            steps.iter().any(|s| s == step),
            "{step} missing from {steps:?}"
        );
    }
    assert_answered(&sim.my_state().await, &conv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_answers_a_peer_through_the_sims_mcp_tools() {
    answers_a_peer_through_the_sims_mcp_tools(RuntimeKind::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_answers_a_peer_through_the_sims_mcp_tools() {
    answers_a_peer_through_the_sims_mcp_tools(RuntimeKind::Codex).await;
}

/// `mcp = "user"`: no `--mcp-config`; Claude Code uses the user's own `agentchat` server from
/// `~/.claude.json`, whose header reads the key from `AGENTCHAT_API_KEY`, which the listener
/// leaves inherited in this mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_mcp_user_mode_answers_through_the_users_own_server_config() {
    let sim = Sim::start().await;
    let sent = sim.peer_sends("Ping from the user-mode test.").await;
    let conv = sent["conversation_id"].as_str().unwrap().to_string();
    let mut s = Setup::with_sim(RuntimeKind::ClaudeCode, Mode::Normal, &sim).await;
    s.settings.listen.claude.mcp = McpMode::User;
    s.extra_env = vec![("AGENTCHAT_API_KEY".into(), sim.me.1.clone())];
    let user_config = serde_json::json!({"mcpServers": {"agentchat": {
        "type": "http",
        "url": format!("{}/mcp", sim.api_base()),
        "headers": {"Authorization": "Bearer ${AGENTCHAT_API_KEY}"}
    }}});
    std::fs::write(
        s.dir.path().join("home/.claude.json"),
        user_config.to_string(),
    )
    .unwrap();
    assert!(!s.spec().args.iter().any(|a| a == "--mcp-config"));
    let (end, output, outcome) = s.run(Duration::from_secs(120)).await;
    assert_eq!(outcome, RunOutcome::Completed, "{end:?}\n{}", show(&output));
    assert!(!s.dir.path().join("state/claude-mcp.json").exists());
    assert_answered(&sim.my_state().await, &conv);
}

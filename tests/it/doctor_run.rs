//! `agentchat doctor --run`: one real run now, on the agent's tray with the served text, as the
//! real binary does it against the in-process sim: a script run (its stdin is the served
//! `wake_instruction`), a failing one, the question it asks, and the pinned `claude` under the
//! scripted model server reaching AgentChat's tools and answering a peer.

use crate::model_server::cli::{base_env, claude_bin, write_codex_home};
use crate::model_server::sim::{Sim, assert_answered};
use crate::model_server::{Mode, ModelServer};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentchat");

/// A config for `runtime` (with `extra` lines under `[listen]`) in a temp dir of its own.
fn scratch(listen: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    std::fs::write(
        dir.path().join("config.toml"),
        format!("[listen]\nrun_timeout = \"120s\"\n{listen}\n"),
    )
    .unwrap();
    dir
}

async fn doctor_run(dir: &Path, sim: &Sim, env: &[(String, String)], args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("doctor")
        .args(args)
        .env_clear()
        .envs(env.iter().cloned())
        .env("AGENTCHAT_CONFIG", dir.join("config.toml"))
        .env("AGENTCHAT_API_KEY", &sim.me.1)
        .env("AGENTCHAT_API_BASE", sim.api_base())
        .env("AGENTCHAT_STATE_DIR", dir.join("state"))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(180), cmd.output())
        .await
        .expect("doctor --run did not finish within 180 s")
        .unwrap()
}

fn plain_env(dir: &Path) -> Vec<(String, String)> {
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), dir.join("home").display().to_string()),
    ]
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_run_gets_the_served_text_and_is_reported_started_and_completed() {
    let sim = Sim::start().await;
    let got = tempfile::tempdir().unwrap();
    let prompt = got.path().join("prompt.txt");
    let dir = scratch(&format!(
        "runtime = \"script\"\ncommand = [\"/bin/sh\", \"-c\", \"cat > '{}'\"]\n\
         sandbox_write = [\"{}\"]",
        prompt.display(),
        got.path().display()
    ));
    let out = doctor_run(
        dir.path(),
        &sim,
        &plain_env(dir.path()),
        &["--run", "--yes"],
    )
    .await;
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        !said.contains("model call"),
        "a script calls no model: {said}"
    );
    assert!(said.contains("started: yes"), "{said}");
    assert!(
        said.contains("reached the AgentChat tools: not told"),
        "{said}"
    );
    assert!(said.contains("completed: yes"), "{said}");
    let served: serde_json::Value =
        reqwest::get(format!("{}/v1/texts?runtime=generic", sim.api_base()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(
        std::fs::read_to_string(&prompt).unwrap(),
        served["wake_instruction"].as_str().unwrap()
    );
    assert!(!said.contains(&sim.me.1), "the key was printed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_run_is_not_yet_with_its_log_and_exit_1() {
    let sim = Sim::start().await;
    let dir = scratch("runtime = \"script\"\ncommand = [\"/bin/sh\", \"-c\", \"exit 7\"]");
    let out = doctor_run(
        dir.path(),
        &sim,
        &plain_env(dir.path()),
        &["--run", "--yes"],
    )
    .await;
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("completed: no"), "{said}");
    let last = said.trim_end().lines().last().unwrap_or("");
    assert!(
        last.starts_with("not yet: ") && last.contains("run-"),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_yes_and_without_a_terminal_it_asks_nothing_and_starts_nothing() {
    let sim = Sim::start().await;
    let got = tempfile::tempdir().unwrap();
    let marker = got.path().join("ran");
    let dir = scratch(&format!(
        "runtime = \"script\"\ncommand = [\"/usr/bin/touch\", \"{}\"]",
        marker.display()
    ));
    let out = doctor_run(dir.path(), &sim, &plain_env(dir.path()), &["--run"]).await;
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("give --yes"), "{said}");
    assert!(!marker.exists(), "a run was started without asking");
}

/// The pinned `claude` under the scripted model: the run reads the tray, answers the peer
/// through AgentChat's tools, and doctor says all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_gets_the_identity_block_reaches_the_agentchat_tools_and_answers_a_peer() {
    let sim = Sim::start().await;
    let model = ModelServer::start(Mode::Normal).await;
    let sent = sim.peer_sends("Is the build green? (doctor run)").await;
    let conv = sent["conversation_id"].as_str().unwrap().to_string();
    let work = tempfile::tempdir().unwrap();
    let dir = scratch(&format!(
        "runtime = \"claude-code\"\nworkdir = \"{}\"\n\n[listen.claude]\nbinary = \"{}\"",
        work.path().display(),
        claude_bin().display()
    ));
    let home = dir.path().join("home");
    write_codex_home(&home, &model.base_url());
    let env = base_env(&home, &model.base_url());
    let out = doctor_run(dir.path(), &sim, &env, &["--run", "--yes"]).await;
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("reached the AgentChat tools: yes"), "{said}");
    assert!(said.contains("completed: yes"), "{said}");
    assert_answered(&sim.my_state().await, &conv);
    assert!(!said.contains(&sim.me.1), "the key was printed");
    // The run started as a cycle's does: the identity block is in the workdir's CLAUDE.md.
    let claude_md = std::fs::read_to_string(work.path().join("CLAUDE.md")).unwrap_or_default();
    let handle = format!("@{}", sim.me.0.trim_start_matches('@'));
    assert!(
        claude_md.contains("<!-- agentchat:start -->") && claude_md.contains(&handle),
        "no identity block for {handle} in the workdir's CLAUDE.md: {claude_md:?}"
    );
}

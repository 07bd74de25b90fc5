//! Issue 38 item 1: `setup` shows the bounds on runs a profile gets (the defaults until the
//! config says otherwise) and, on a terminal, asks whether to keep them; what the user changes
//! goes into the profile's `[listen.policy]`, and the listener and doctor read it back.

use super::signup::in_pty;
use super::*;

/// Interactive: the user declines the defaults and lifts the day's cap, sets ten runs an hour and
/// keeps the loop guard: exactly those two keys are written, under the profile's own table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_shows_the_bounds_on_runs_and_writes_the_ones_the_user_changes() {
    let w = World::new().await;
    let steps = serde_json::json!([
        [
            "AgentChat server [https://api.agentchat.me]: ",
            w.sim.api_base()
        ],
        ["Do you have an AgentChat API key? [Y/n]: ", "y"],
        ["AgentChat API key (input hidden): ", w.key()],
        [
            "Runtime (claude-code, codex or script) [claude-code]: ",
            "script"
        ],
        [
            "The script's command (program and arguments): ",
            "/bin/true"
        ],
        ["Keep these bounds on runs? [Y/n]: ", "n"],
        ["Most runs an hour (0: no cap) [60]: ", "10"],
        ["Most runs a day (0: no cap) [500]: ", "0"],
        [
            "Runs in 1h that make a conversation a loop (0: no loop guard) [30]: ",
            ""
        ],
        ["write the identity block? [Y/n]: ", "n"],
        [
            "Install the always-on service for this profile? [Y/n]: ",
            "n"
        ],
        ["Go ahead? [Y/n]: ", "y"],
        ["Try one real run now", "n"],
    ]);
    let (transcript, code) = in_pty(&w, steps, &[BIN, "setup", "--profile", "cap"]).await;
    assert_eq!(code, 0, "{transcript}");
    assert!(
        transcript.contains(
            "bounds: runs an hour at most 60; runs a day at most 500; loop guard 30 runs in 1h"
        ),
        "{transcript}"
    );
    let config = std::fs::read_to_string(w.config()).unwrap();
    let table: toml::Table = toml::from_str(&config).unwrap();
    let policy = &table["profiles"]["cap"]["listen"]["policy"];
    assert_eq!(
        policy["max_runs_per_hour"].as_integer(),
        Some(10),
        "{config}"
    );
    assert_eq!(policy["max_runs_per_day"].as_integer(), Some(0), "{config}");
    assert!(policy.get("loop_guard").is_none(), "{config}");
    // Doctor reads them back: ten an hour, no day's cap, the default guard.
    let out = w
        .command(Path::new(BIN), &["doctor", "--profile", "cap", "--json"])
        .output()
        .await
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let said: Vec<String> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == "policy")
        .map(|c| c["detail"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        said.first().map(String::as_str),
        Some("at most 10 runs an hour; loop guard 30 runs in 1h"),
        "{report}"
    );
}

/// Scripted (`--yes`): nothing is asked and nothing of the policy written, but the bounds are
/// said, so a script's log shows what the profile runs under.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_setup_says_the_default_bounds_and_writes_no_policy() {
    let w = World::new().await;
    let key_file = w.dir.path().join("k");
    std::fs::write(&key_file, w.key()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut args = vec![
        "setup",
        "--yes",
        "--api-base",
        w.sim.api_base(),
        "--api-key-file",
        key_file.to_str().unwrap(),
    ];
    args.extend_from_slice(&super::signup::SCRIPT);
    let out = w.command(Path::new(BIN), &args).output().await.unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("bounds: runs an hour at most 60; runs a day at most 500"),
        "{text}"
    );
    let config = std::fs::read_to_string(w.config()).unwrap();
    assert!(!config.contains("policy"), "{config}");
}

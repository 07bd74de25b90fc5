//! `agentchat status` against a real listener: the real binary listening for an agent of the
//! in-process local server, then stopped.

use crate::common::{config_in, sigterm_and_wait};
use std::path::Path;
use std::time::{Duration, Instant};

async fn status(config: &Path, state: &Path, json: bool) -> (i32, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentchat"));
    cmd.arg("status")
        .arg("--config")
        .arg(config)
        .arg("--state-dir")
        .arg(state)
        .env_remove("AGENTCHAT_API_KEY");
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().await.unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_a_running_listener_then_a_stopped_one() {
    agentchat::sys::tls::install_crypto_provider();
    let sim = agentchat::sim::start(agentchat::sim::SimConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        time_scale: 1.0,
        seed_demo: true,
    })
    .await
    .unwrap();
    let (handle, key) = sim.seeded[0].clone();
    let (dir, config) = config_in("[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n");
    let state = dir.path().join("state");

    // Nothing ran yet.
    let (code, text) = status(&config, &state, false).await;
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("never ran here"), "{text}");

    let mut listener = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentchat"))
        .arg("listen")
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(&state)
        .arg("--api-base")
        .arg(&sim.api_base)
        .env("AGENTCHAT_API_KEY", &key)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = listener.id().unwrap();

    // Poll until the listener's status says it is connected and knows its handle.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = String::new();
    let running = loop {
        let (code, text) = status(&config, &state, false).await;
        if code == 0 && text.contains("state       connected") && text.contains(&handle) {
            break true;
        }
        last = text;
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(running, "never saw a running, connected listener:\n{last}");
    let (code, text) = status(&config, &state, false).await;
    assert_eq!(code, 0);
    assert!(text.contains(&format!("running (pid {pid})")), "{text}");
    assert!(!text.contains(&key), "the key must never be shown");

    let (code, text) = status(&config, &state, true).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["running"], true);
    assert_eq!(v["status"]["handle"], handle.as_str());

    let exit = sigterm_and_wait(&mut listener, 20).await;
    assert!(exit.success(), "{exit}");
    let (code, text) = status(&config, &state, false).await;
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("not running"), "{text}");
    let (_, text) = status(&config, &state, true).await;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["running"], false);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_status_file_that_is_not_json_is_a_clear_error_with_exit_1() {
    let (dir, config) = config_in("");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::write(state.join("status.json"), "{ half a document").unwrap();
    for json in [false, true] {
        let (code, text) = status(&config, &state, json).await;
        assert_eq!(code, 1, "{text}");
        assert!(text.contains("is not a status file"), "{text}");
        assert!(!text.contains("panicked"), "{text}");
    }
}

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

#[tokio::test]
async fn status_refuses_the_flags_it_would_ignore_as_a_usage_error() {
    let home = tempfile::tempdir().unwrap();
    for flags in [
        &["--runtime", "claude-code"][..],
        &["--runtime", "claude"],
        &["--api-base", "http://127.0.0.1:9"],
        &["--metrics-addr", "127.0.0.1:9464"],
    ] {
        let out = isolated(home.path(), &["status"])
            .args(flags)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(flags[0]), "{flags:?}: {stderr}");
    }
    // The flags it uses still work: no listener ever ran in this state dir.
    let state = home.path().join("nowhere");
    let out = isolated(
        home.path(),
        &["status", "--profile", "default", "--state-dir"],
    )
    .arg(&state)
    .output()
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains("never ran here"), "{stdout}");
}

/// `agentchat` with a clean `AGENTCHAT_*` environment, the state base under `home`, and units
/// written into `home/units` (the service manager is never asked).
fn isolated(home: &Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentchat"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AGENTCHAT_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(args)
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("AGENTCHAT_SERVICE_DIR", home.join("units"))
        .kill_on_drop(true);
    cmd
}

async fn status_all(home: &Path, config: &Path) -> (i32, serde_json::Value) {
    let out = isolated(home, &["status", "--all", "--json", "--config"])
        .arg(config)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let doc = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {text}{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), doc)
}

fn row<'a>(doc: &'a serde_json::Value, profile: &str) -> &'a serde_json::Value {
    doc["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["profile"] == profile)
        .unwrap_or_else(|| panic!("no row for {profile}: {doc}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_all_shows_every_configured_profile_and_live_locks_and_exits_0_only_when_all_run() {
    agentchat::sys::tls::install_crypto_provider();
    let sim = agentchat::sim::start(agentchat::sim::SimConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        time_scale: 1.0,
        seed_demo: true,
    })
    .await
    .unwrap();
    // One agent per profile: a second listener for the same agent exits 75 (one agent, one
    // listener per machine).
    let keys = [
        sim.seeded[0].1.clone(),
        sim.seeded[1].1.clone(),
        reqwest::Client::new()
            .post(format!("{}/_sim/agents", sim.api_base))
            .json(&serde_json::json!({"handle": "carol"}))
            .send()
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()["api_key"]
            .as_str()
            .unwrap()
            .to_string(),
    ];
    let (dir, config) =
        config_in("[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n[profiles.work]\n");
    let home = dir.path();
    // A profile another config names: this config's `status --all` finds it by its lock only.
    let other = home.join("other.toml");
    std::fs::write(
        &other,
        "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n[profiles.extra]\n",
    )
    .unwrap();
    let listen = |profile: &str, config: &Path, key: &str| {
        isolated(home, &["listen", "--profile", profile, "--config"])
            .arg(config)
            .args(["--api-base", &sim.api_base])
            .env("AGENTCHAT_API_KEY", key)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };

    let (code, doc) = status_all(home, &config).await;
    assert_eq!(code, 3, "{doc}");
    assert_eq!(row(&doc, "default")["running"], false);
    assert_eq!(row(&doc, "work")["state"], serde_json::Value::Null);

    let mut listeners = vec![
        listen("default", &config, &keys[0]),
        listen("work", &config, &keys[1]),
        listen("extra", &other, &keys[2]),
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    let doc = loop {
        let (code, doc) = status_all(home, &config).await;
        let extra_found = doc["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["profile"] == "extra");
        let connected = ["default", "work"].iter().all(|p| {
            row(&doc, p)["state"] == "connected" && row(&doc, p)["last_outcome"].is_string()
        });
        if code == 0 && extra_found && connected {
            break doc;
        }
        assert!(Instant::now() < deadline, "never all running: {doc}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(doc["all_running"], true);
    let work = row(&doc, "work");
    assert_eq!(work["configured"], true);
    assert!(work["handle"].as_str().unwrap().starts_with('@'), "{work}");
    let outcome = work["last_outcome"].as_str().unwrap();
    assert!(["completed", "no_run"].contains(&outcome), "{work}");
    assert!(
        work["service"]
            .as_str()
            .unwrap()
            .starts_with("agentchat-listen@work.service: service manager not asked"),
        "{work}"
    );
    assert_eq!(row(&doc, "extra")["configured"], false);
    let text = isolated(home, &["status", "--all", "--config"])
        .arg(&config)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.starts_with("PROFILE"), "{text}");
    assert!(
        text.contains("\nextra*") && text.contains("not in the config"),
        "{text}"
    );

    // One configured listener stopped: exit 3.
    let mut work = listeners.remove(1);
    sigterm_and_wait(&mut work, 20).await;
    let (code, doc) = status_all(home, &config).await;
    assert_eq!(code, 3, "{doc}");
    assert_eq!(row(&doc, "work")["running"], false);
    assert_eq!(row(&doc, "default")["running"], true);
    for mut l in listeners {
        sigterm_and_wait(&mut l, 20).await;
    }
}

#[tokio::test]
async fn service_install_all_writes_one_unit_per_configured_profile() {
    let (dir, config) = config_in(
        "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n[profiles.work]\n[profiles.ops]\n",
    );
    let home = dir.path();
    let out = isolated(
        home,
        &[
            "service", "install", "--all", "--kind", "systemd", "--config",
        ],
    )
    .arg(&config)
    .output()
    .await
    .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    let mut units: Vec<String> = std::fs::read_dir(home.join("units"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    units.sort();
    assert_eq!(
        units,
        [
            "agentchat-listen@.service",
            "agentchat-listen@default.service.d",
            "agentchat-listen@ops.service.d",
            "agentchat-listen@work.service.d"
        ]
    );
    let work =
        std::fs::read_to_string(home.join("units/agentchat-listen@work.service.d/install.conf"))
            .unwrap();
    assert!(
        work.contains(r#""listen" "--profile" "work" "--config""#),
        "{work}"
    );
}

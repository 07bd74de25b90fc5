//! Bounded inputs (issue 17, items 9 and 14, and issue 19's `/v1`): what a hostile server
//! answers is read under a cap per route, and paths given relative to the working directory
//! reach the runtimes absolute.
//! The hostile server is the scripted one (`listen_support::fake`): a faithful server (the sim)
//! never sends an endless body.

use crate::listen_support::fake::{self, Fake};
use crate::listen_support::{BIN, Listener, Opts, Setup, eventually, listener_command_for};
use std::os::unix::process::CommandExt;

const KEY: &str = "ac_bounds_secret_key_0000";

/// Caps a child's address space at 1 GiB: were a body read without a cap (today's main read
/// 4.6 GB in 20 s), the child fails there instead of taking the machine's memory.
fn cap_memory(cmd: &mut std::process::Command) {
    unsafe {
        cmd.pre_exec(|| {
            let cap = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            libc::setrlimit(libc::RLIMIT_AS, &cap);
            Ok(())
        });
    }
}

/// The peak resident set of a live process, from /proc (kB).
fn vm_hwm_kb(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_body_on_agents_me_is_dropped_at_its_cap_by_doctor_naming_route_status_and_size()
{
    let server = Fake::start("bob", fake::tray("bob", 0)).await;
    server.shared.lock().unwrap().endless = vec!["/v1/agents/me"];
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("doctor")
        .arg("--api-base")
        .arg(&server.api_base)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--runtime")
        .arg("script")
        .env("HOME", dir.path())
        .env("AGENTCHAT_CONFIG", dir.path().join("none.toml"))
        .env("AGENTCHAT_SERVICE_DIR", dir.path().join("units"))
        .env("AGENTCHAT_API_KEY", KEY)
        .env_remove("AGENTCHAT_API_BASE")
        .env_remove("AGENTCHAT_STATE_DIR");
    std::fs::write(dir.path().join("none.toml"), "").unwrap();
    cap_memory(&mut cmd);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("server:"))
        .unwrap_or_else(|| panic!("no server line: {stdout}"));
    assert!(
        line.starts_with("FAIL")
            && line.contains("GET /v1/agents/me")
            && line.contains("HTTP 200")
            && line.contains("64 KiB cap"),
        "{line}"
    );
    assert!(
        !stdout.contains(KEY) && !stdout.contains("aaaaaaaa"),
        "{stdout}"
    );
    // It stopped reading: the server got to send little more than the cap (socket buffers aside).
    let sent = server.shared.lock().unwrap().endless_sent;
    assert!(sent < 64 * 1024 * 1024, "the server sent {sent} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_answered_with_endless_bodies_stays_small_and_says_which_route_answered() {
    let server = Fake::start("bob", fake::tray("bob", 0)).await;
    server.shared.lock().unwrap().endless = vec!["/v1/agents/me"];
    let opts = Opts {
        time_scale: 50.0,
        ..Opts::default()
    };
    let setup = Setup::new(&opts);
    let mut cmd = listener_command_for(&server.api_base, KEY, &setup, &opts);
    cap_memory(&mut cmd);
    let mut l = Listener::spawn(cmd, &setup, "");
    assert!(
        eventually(30.0, || l.count("api_base_not_agentchat") >= 1).await,
        "{}",
        l.log()
    );
    let said = l.events("api_base_not_agentchat")[0].to_string();
    assert!(
        said.contains("GET /v1/agents/me") && said.contains("64 KiB cap"),
        "{said}"
    );
    // The tray too: the handle answers now, the tray never ends.
    {
        let mut s = server.shared.lock().unwrap();
        s.endless = vec!["/v1/inbox"];
    }
    l.signal(libc::SIGHUP);
    assert!(
        eventually(30.0, || l.count("tray_unreadable") >= 1).await,
        "{}",
        l.log()
    );
    let said = l.events("tray_unreadable")[0].to_string();
    assert!(
        said.contains("GET /v1/inbox") && said.contains("1 MiB cap"),
        "{said}"
    );
    let hwm = vm_hwm_kb(l.pid());
    assert!(hwm > 0 && hwm < 256 * 1024, "peak RSS {hwm} kB");
    assert!(!l.log().contains(KEY));
    l.signal(libc::SIGTERM);
    assert_eq!(l.wait_exit(10.0), Some(0), "{}", l.log());
}

/// Issue 17 item 14: `--state-dir state` and `--config config.toml`, relative to where the
/// listener was started, with the real CLI as the run: the run starts in the default workdir
/// (`state/workdir`), so a relative MCP config path or `-C` given from there found nothing.
async fn a_relative_state_dir_and_config_reach_the_real_cli_absolute(claude: bool) {
    use crate::model_server::cli::{base_env, claude_bin, codex_bin, write_codex_home};
    use crate::model_server::sim::{Sim, assert_answered};
    use crate::model_server::{Mode, ModelServer};
    let sim = Sim::start().await;
    let model = ModelServer::start(Mode::Normal).await;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    write_codex_home(&home, &model.base_url());
    let (rt, bin) = if claude {
        ("claude-code", claude_bin())
    } else {
        ("codex", codex_bin())
    };
    std::fs::write(
        dir.path().join("config.toml"),
        format!(
            "log_level = \"debug\"\n\n[listen]\nruntime = \"{rt}\"\nquiet_window = \"200ms\"\n\
             max_delay = \"1s\"\nrun_timeout = \"120s\"\nkill_grace = \"2s\"\n\n\
             [listen.claude]\nbinary = \"{bin}\"\n\n[listen.codex]\nbinary = \"{bin}\"\n",
            bin = bin.display(),
        ),
    )
    .unwrap();
    let stderr = std::fs::File::create(dir.path().join("listener.stderr")).unwrap();
    let mut child = std::process::Command::new(BIN)
        .args([
            "listen",
            "--log-format",
            "json",
            "--config",
            "config.toml",
            "--state-dir",
            "state",
        ])
        .env_clear()
        .envs(base_env(&home, &model.base_url()))
        .env("AGENTCHAT_API_KEY", &sim.me.1)
        .env("AGENTCHAT_API_BASE", sim.api_base())
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let status = || {
        std::fs::read_to_string(dir.path().join("state/status.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .unwrap_or_default()
    };
    let log = || std::fs::read_to_string(dir.path().join("listener.stderr")).unwrap_or_default();
    let sent = sim.peer_sends("Relative paths, absolute answers?").await;
    let conv = sent["conversation_id"].as_str().unwrap().to_string();
    let done = crate::common::eventually_async(150, || async {
        status()["last_cycle"]["outcome"] == "completed"
    })
    .await;
    let explain = format!("status: {:#}\nlog:\n{}", status(), log());
    crate::common::stop_child(&mut child, std::time::Duration::from_secs(15));
    assert!(done, "no completed run\n{explain}");
    assert_answered(&sim.my_state().await, &conv);
    // What the status names is absolute.
    let run_log = status()["last_cycle"]["run_log"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(run_log.starts_with('/'), "{run_log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_answers_with_a_relative_state_dir_and_config() {
    a_relative_state_dir_and_config_reach_the_real_cli_absolute(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_answers_with_a_relative_state_dir_and_config() {
    a_relative_state_dir_and_config_reach_the_real_cli_absolute(false).await;
}

/// Issue 19: `api_base = "http://host/v1"` asked for `/v1/v1/agents/me` and reported a 404.
/// The `/v1` is dropped and said once: doctor passes its server check and warns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_base_ending_in_v1_reaches_the_server_and_doctor_says_it_was_dropped() {
    let sim = crate::listen_support::Sim::start(1.0).await;
    let bob = sim.agent("bob").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), "").unwrap();
    let with_v1 = format!("{}/v1", sim.api_base);
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("doctor")
        .arg("--config")
        .arg(dir.path().join("config.toml"))
        .arg("--api-base")
        .arg(&with_v1)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--runtime")
        .arg("script")
        .env("HOME", dir.path())
        .env("AGENTCHAT_SERVICE_DIR", dir.path().join("units"))
        .env("AGENTCHAT_API_KEY", &bob.key)
        .env_remove("AGENTCHAT_API_BASE")
        .env_remove("AGENTCHAT_STATE_DIR")
        .env_remove("AGENTCHAT_CONFIG");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let server = stdout
        .lines()
        .find(|l| l.contains("server:"))
        .unwrap_or_else(|| panic!("no server line: {stdout}"));
    assert!(
        server.starts_with("PASS") && server.contains("@bob"),
        "{stdout}"
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("WARN") && l.contains(&with_v1) && l.contains("/v1"))
            .count(),
        1,
        "{stdout}"
    );
    assert!(!stdout.contains(&bob.key), "{stdout}");
}

/// doctor runs the runtime's CLI (`--version`, its login check): one that floods its output is
/// kept to its first 64 KiB per stream and stopped at the probe's time limit, under a 1 GiB
/// address-space cap (today's main kept every byte, about a gigabyte a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_keeps_a_flooding_clis_output_to_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let cli = dir.path().join("claude");
    std::fs::write(&cli, "#!/bin/sh\nexec yes 'flood flood flood'\n").unwrap();
    std::fs::set_permissions(&cli, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.path().join("config.toml"),
        format!(
            "[listen]\nruntime = \"claude-code\"\n[listen.claude]\nbinary = \"{}\"\n",
            cli.display()
        ),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("doctor")
        .arg("--config")
        .arg(dir.path().join("config.toml"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env("HOME", dir.path())
        .env("AGENTCHAT_SERVICE_DIR", dir.path().join("units"))
        .env_remove("AGENTCHAT_API_KEY")
        .env_remove("AGENTCHAT_API_BASE")
        .env_remove("AGENTCHAT_STATE_DIR")
        .env_remove("AGENTCHAT_CONFIG");
    cap_memory(&mut cmd);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l.contains("runtime:")),
        "doctor ended without its runtime check (code {:?}): {stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.len() < 64 * 1024, "{} bytes of output", stdout.len());
}

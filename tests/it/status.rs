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
    assert!(
        text.contains("`agentchat setup"),
        "the next step is named: {text}"
    );

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
    assert!(
        text.lines()
            .any(|l| l.starts_with("state       connected since ") && l.ends_with(" ago)")),
        "no relative time on the state line:\n{text}"
    );
    assert!(!text.contains(&key), "the key must never be shown");

    let (code, text) = status(&config, &state, true).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["running"], true);
    assert_eq!(v["version"], 1);
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
    let mut cmd = tokio::process::Command::from(crate::common::isolated_command(
        env!("CARGO_BIN_EXE_agentchat"),
        &[],
    ));
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
    // `default` has no key of its own in this config, so `listen --all` would skip it: not
    // listed until a listener runs for it (then found by its lock).
    assert!(
        !doc["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["profile"] == "default"),
        "{doc}"
    );
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
        // `default` has a row only once its listener holds its lock.
        let connected = ["default", "work"].iter().all(|p| {
            doc["profiles"].as_array().unwrap().iter().any(|r| {
                r["profile"] == *p && r["state"] == "connected" && r["last_outcome"].is_string()
            })
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
    assert_eq!(
        work["unit"],
        agentchat::service::systemd_unit_name("work").as_str(),
        "{work}"
    );
    assert_eq!(work["service"], "not installed", "{work}");
    assert_eq!(doc["version"], 1);
    assert_eq!(row(&doc, "extra")["configured"], false);
    assert_eq!(row(&doc, "default")["configured"], false);
    let text = isolated(home, &["status", "--all", "--config"])
        .arg(&config)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    let header = text.lines().next().unwrap();
    assert_eq!(
        header.split_whitespace().take(2).collect::<Vec<_>>(),
        ["PROFILE", "HANDLE"],
        "{text}"
    );
    assert_eq!(header, header.to_uppercase(), "{text}");
    assert!(text.contains(" ago  "), "no relative time in\n{text}");
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
    // `status --all` now sees each unit file (and, with AGENTCHAT_SERVICE_DIR set, asks no manager).
    let (_, doc) = status_all(home, &config).await;
    let row = row(&doc, "work");
    assert_eq!(row["service"], "installed, manager not asked", "{row}");
    // The profile's own file in the unit dir (a unit, or a template's drop-in).
    let unit_file = Path::new(row["unit_file"].as_str().unwrap());
    assert!(
        unit_file.starts_with(home.join("units")) && unit_file.is_file(),
        "{row}"
    );
    assert_eq!(doc["service_manager_error"], serde_json::Value::Null);
}

#[tokio::test]
async fn status_all_without_units_says_not_installed_and_never_repeats_a_manager_error() {
    let (dir, config) = config_in("[profiles.work]\n[profiles.ops]\n");
    let home = dir.path();
    // The real service manager is in play (no AGENTCHAT_SERVICE_DIR): where no user manager runs,
    // asking it fails with "Failed to connect to bus"; no unit is installed, so it is not asked.
    let out = isolated(home, &["status", "--all", "--config"])
        .arg(&config)
        .env_remove("AGENTCHAT_SERVICE_DIR")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(3), "{text}");
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{text}");
    for row in rows {
        assert!(row.ends_with("  not installed"), "{row:?}\n{text}");
    }
    assert!(!text.contains("no service manager answers"), "{text}");
    assert!(!text.contains("bus"), "{text}");
}

/// A profile without a unit of its own that the one-process unit runs shows that unit in
/// `status --all`; `default`, which `listen --all` skips without a key of its own, is not listed.
#[tokio::test]
async fn status_all_shows_the_one_process_unit_for_the_profiles_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    for p in ["work", "ops"] {
        let key = home.join(format!("{p}.key"));
        std::fs::write(&key, format!("ac_live_{p}_0123456789\n")).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
    }
    let config = home.join("config.toml");
    std::fs::write(
        &config,
        "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n\
         [profiles.work]\napi_key_file = \"work.key\"\n\
         [profiles.ops]\napi_key_file = \"ops.key\"\n",
    )
    .unwrap();
    let out = isolated(
        home,
        &[
            "service",
            "install",
            "--all",
            "--one-process",
            "--kind",
            "systemd",
            "--config",
        ],
    )
    .arg(&config)
    .output()
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, doc) = status_all(home, &config).await;
    for p in ["work", "ops"] {
        let r = row(&doc, p);
        assert_eq!(r["unit"], "agentchat-host.service", "{r}");
        assert_eq!(r["service"], "installed, manager not asked", "{r}");
        assert!(
            r["unit_file"]
                .as_str()
                .unwrap()
                .ends_with("units/agentchat-host.service"),
            "{r}"
        );
    }
    let listed: Vec<&str> = doc["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["profile"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["ops", "work"], "{doc}");
}

/// `status --all` lists the profiles `listen --all` runs, by the same rule
/// (`config::ConfigFile::runs_default`): `default` only when the config's top level names a key of its own;
/// a config that gives `--all` no profile at all is not "all running".
#[tokio::test]
async fn status_all_lists_default_only_when_listen_all_runs_it() {
    let listed = |doc: &serde_json::Value| -> Vec<String> {
        doc["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["profile"].as_str().unwrap().to_string())
            .collect()
    };
    let (dir, config) = config_in("[profiles.work]\napi_key_file = \"work.key\"\n");
    let (_, doc) = status_all(dir.path(), &config).await;
    assert_eq!(listed(&doc), ["work"], "{doc}");

    let (dir, config) =
        config_in("api_key_file = \"default.key\"\n[profiles.work]\napi_key_file = \"work.key\"\n");
    let (_, doc) = status_all(dir.path(), &config).await;
    assert_eq!(listed(&doc), ["default", "work"], "{doc}");

    let (dir, config) = config_in("log_level = \"info\"\n");
    let (code, doc) = status_all(dir.path(), &config).await;
    assert_eq!(listed(&doc), Vec::<String>::new(), "{doc}");
    assert_eq!(
        (code, &doc["all_running"]),
        (3, &serde_json::json!(false)),
        "{doc}"
    );
}

/// A stuck listener's advice names the unit that runs it on this host: the one-process unit when
/// it is installed, never a profile's own unit this host does not use.
#[tokio::test]
async fn a_stuck_listener_under_the_one_process_unit_is_told_to_restart_that_unit() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let key = home.join("p0.key");
    std::fs::write(&key, "ac_live_p0_0123456789\n").unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let config = home.join("config.toml");
    std::fs::write(
        &config,
        "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n\
         [profiles.p0]\napi_key_file = \"p0.key\"\n",
    )
    .unwrap();
    let stuck_status = |state_dir: &Path| {
        std::fs::create_dir_all(state_dir).unwrap();
        let file = state_dir.join("status.json");
        // A live pid (this test's) whose loop last turned an hour ago.
        std::fs::write(
            &file,
            serde_json::json!({"state": "connected", "since": "2026-01-01T00:00:00Z",
                "pid": std::process::id(), "updated_at": "2026-01-01T00:00:00Z"})
            .to_string(),
        )
        .unwrap();
        let old = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(old)
            .unwrap();
    };
    stuck_status(&home.join("state").join("agentchat").join("p0"));
    let problem = || async {
        let out = isolated(home, &["status", "--profile", "p0", "--json", "--config"])
            .arg(&config)
            .output()
            .await
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["stale"], true, "{doc}");
        doc["problem"].as_str().unwrap().to_string()
    };
    // No unit installed: the process itself, never a unit.
    let bare = problem().await;
    assert!(
        bare.contains(&format!("kill {}", std::process::id())) && !bare.contains("systemctl"),
        "{bare}"
    );
    let out = isolated(
        home,
        &[
            "service",
            "install",
            "--all",
            "--one-process",
            "--kind",
            "systemd",
            "--config",
        ],
    )
    .arg(&config)
    .output()
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hosted = problem().await;
    assert!(
        hosted.contains("systemctl --user restart agentchat-host.service")
            && !hosted.contains("agentchat-listen@"),
        "{hosted}"
    );
}

/// Issue 26: `status` and `status --all` say a hold from `status.json`'s `held` (its key, its end
/// in the machine's local time, the cards waiting) and today's runs and cost from `usage`;
/// `--json` passes both through, and a held listener stays usable (a hold is the user's choice).
#[tokio::test]
async fn status_says_a_hold_with_its_local_end_the_cards_waiting_and_todays_runs_and_cost() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let mut config_text = "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n".to_string();
    for p in ["p0", "p1"] {
        let key = home.join(format!("{p}.key"));
        std::fs::write(&key, format!("ac_live_{p}_0123456789\n")).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        config_text.push_str(&format!("[profiles.{p}]\napi_key_file = \"{p}.key\"\n"));
    }
    let config = home.join("config.toml");
    std::fs::write(&config, config_text).unwrap();
    let now = std::time::SystemTime::now();
    let rfc = |t: std::time::SystemTime| humantime::format_rfc3339_seconds(t).to_string();
    // The hold ends 40 minutes from now, on a whole minute; the machine is two hours east of UTC
    // (a POSIX TZ, no zone file needed).
    let secs = now.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let until = std::time::UNIX_EPOCH + Duration::from_secs((secs + 2400) / 60 * 60);
    let local = |t: std::time::SystemTime| rfc(t + Duration::from_secs(7200));
    let (until_local, now_local) = (local(until), local(now));
    let expected_until = if until_local[..10] == now_local[..10] {
        until_local[11..16].to_string()
    } else {
        format!("{} {}", &until_local[..10], &until_local[11..16])
    };
    let write = |profile: &str, doc: serde_json::Value| {
        let state_dir = home.join("state").join("agentchat").join(profile);
        std::fs::create_dir_all(&state_dir).unwrap();
        std::fs::write(state_dir.join("status.json"), doc.to_string()).unwrap();
    };
    let base = |profile: &str| {
        serde_json::json!({"state": "connected", "since": rfc(now), "pid": std::process::id(),
            "profile": profile, "updated_at": rfc(now)})
    };
    let mut held = base("p0");
    held["held"] = serde_json::json!({"reason": "runs_per_hour", "key": "max_runs_per_hour",
        "until": rfc(until), "since": rfc(now - Duration::from_secs(600)),
        "cards": ["conv_1", "conv_2"], "invites": []});
    held["usage"] = serde_json::json!({"this_hour": {"runs": 12, "cost_usd": 0.61, "tokens": 0},
        "today": {"runs": 14, "cost_usd": 0.834, "tokens": 52000}});
    write("p0", held);
    let mut free = base("p1");
    free["usage"] = serde_json::json!({"this_hour": {"runs": 0, "cost_usd": 0.0, "tokens": 0},
        "today": {"runs": 3, "cost_usd": 0.0, "tokens": 1200}});
    write("p1", free);
    let run = |args: &[&str]| {
        let mut cmd = isolated(home, args);
        cmd.arg("--config").arg(&config).env("TZ", "XST-2");
        async move {
            let out = cmd.output().await.unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let hold = format!("runs wait: max_runs_per_hour reached, until {expected_until}");

    let p0 = run(&["status", "--profile", "p0"]).await;
    for needle in [
        format!("held        {hold} (held since 10 min ago)"),
        "waiting     2 cards: conv_1, conv_2".to_string(),
        "usage       today: 14 runs, $0.83; this hour: 12 runs".to_string(),
    ] {
        assert!(p0.contains(&needle), "missing {needle:?} in\n{p0}");
    }
    let p1 = run(&["status", "--profile", "p1"]).await;
    assert!(!p1.contains("held") && !p1.contains("waiting"), "{p1}");
    assert!(
        p1.contains("usage       today: 3 runs, 1200 tokens; this hour: 0 runs"),
        "tokens when no cost was reported:\n{p1}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&run(&["status", "--profile", "p0", "--json"]).await).unwrap();
    assert_eq!(json["usable"], true, "a hold is no fault: {json}");
    assert_eq!(json["status"]["held"]["key"], "max_runs_per_hour");
    assert_eq!(json["status"]["held"]["cards"][1], "conv_2");
    assert_eq!(json["status"]["usage"]["today"]["runs"], 14);
    assert_eq!(json["status"]["usage"]["this_hour"]["runs"], 12);

    let all = run(&["status", "--all"]).await;
    let lines: Vec<&str> = all.lines().collect();
    let at = |p: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(&format!("{p} ")))
            .unwrap()
    };
    assert!(lines[0].contains("  TODAY  "), "{all}");
    assert!(lines[at("p0")].contains("  14 runs, $0.83  "), "{all}");
    assert_eq!(lines[at("p0") + 1], format!("  p0: {hold}"), "{all}");
    assert!(lines[at("p1")].contains("  3 runs, 1200 tokens  "), "{all}");
    assert_eq!(all.matches("runs wait").count(), 1, "{all}");
    let (_, doc) = status_all(home, &config).await;
    assert_eq!(row(&doc, "p0")["held"]["reason"], "runs_per_hour");
    assert_eq!(row(&doc, "p0")["today"]["cost_usd"], 0.834);
    assert_eq!(row(&doc, "p1")["held"], serde_json::Value::Null);
    assert_eq!(row(&doc, "p1")["today"]["tokens"], 1200);
}

/// A zone file of one fixed offset (TZif version 1, no transitions): a `timezone` the test's own
/// `TZDIR` holds, so the test needs no system tzdata and no DST.
fn fixed_zone_file(dir: &Path, name: &str, offset_secs: i32) {
    let mut f = b"TZif\0".to_vec();
    f.extend([0u8; 15]);
    for n in [0u32, 0, 0, 0, 1, 4] {
        f.extend(n.to_be_bytes());
    }
    f.extend(offset_secs.to_be_bytes());
    f.extend([0, 0]);
    f.extend(b"TST\0");
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, f).unwrap();
}

/// Issue 26: a profile whose `listen.policy.timezone` is not the machine's zone has its hold's end
/// told in the policy's zone and named (`status` and `status --all`); one whose zone tells the
/// same time as the machine's is not named.
#[tokio::test]
async fn status_tells_a_holds_end_in_the_policys_own_zone_and_names_it_when_not_the_machines() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let zones = home.join("zoneinfo");
    fixed_zone_file(&zones, "Test/Nine", 9 * 3600);
    fixed_zone_file(&zones, "Test/Two", 2 * 3600);
    let mut config_text = "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n".to_string();
    for (p, zone) in [("p0", "Test/Nine"), ("p1", "Test/Two")] {
        let key = home.join(format!("{p}.key"));
        std::fs::write(&key, format!("ac_live_{p}_0123456789\n")).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        config_text.push_str(&format!(
            "[profiles.{p}]\napi_key_file = \"{p}.key\"\n\
             [profiles.{p}.listen.policy]\ntimezone = \"{zone}\"\n"
        ));
    }
    let config = home.join("config.toml");
    std::fs::write(&config, config_text).unwrap();
    let now = std::time::SystemTime::now();
    let rfc = |t: std::time::SystemTime| humantime::format_rfc3339_seconds(t).to_string();
    let secs = now.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let until = std::time::UNIX_EPOCH + Duration::from_secs((secs + 2400) / 60 * 60);
    // `until` as a zone `hours` east of UTC tells it: the time, with the date when not today.
    let told = |hours: u64| {
        let shift = |t: std::time::SystemTime| rfc(t + Duration::from_secs(hours * 3600));
        let (u, n) = (shift(until), shift(now));
        if u[..10] == n[..10] {
            u[11..16].to_string()
        } else {
            format!("{} {}", &u[..10], &u[11..16])
        }
    };
    for profile in ["p0", "p1"] {
        let state_dir = home.join("state").join("agentchat").join(profile);
        std::fs::create_dir_all(&state_dir).unwrap();
        let doc = serde_json::json!({"state": "connected", "since": rfc(now),
            "pid": std::process::id(), "profile": profile, "updated_at": rfc(now),
            "held": {"reason": "quiet_hours", "key": "quiet_hours", "until": rfc(until),
                     "since": rfc(now), "cards": ["conv_1"], "invites": []}});
        std::fs::write(state_dir.join("status.json"), doc.to_string()).unwrap();
    }
    // The machine is two hours east of UTC.
    let run = |args: &[&str]| {
        let mut cmd = isolated(home, args);
        cmd.arg("--config")
            .arg(&config)
            .env("TZ", "XST-2")
            .env("TZDIR", &zones);
        async move {
            let out = cmd.output().await.unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let nine = format!("runs wait: quiet hours, until {} Test/Nine", told(9));
    let two = format!("runs wait: quiet hours, until {}", told(2));
    assert_ne!(told(9), told(2));

    let p0 = run(&["status", "--profile", "p0"]).await;
    assert!(p0.contains(&format!("held        {nine} (")), "{p0}");
    let p1 = run(&["status", "--profile", "p1"]).await;
    assert!(p1.contains(&format!("held        {two} (")), "{p1}");
    assert!(
        !p1.contains("Test/Two"),
        "the machine's time needs no name:\n{p1}"
    );

    let all = run(&["status", "--all"]).await;
    let lines: Vec<&str> = all.lines().collect();
    assert!(lines.contains(&format!("  p0: {nine}").as_str()), "{all}");
    assert!(lines.contains(&format!("  p1: {two}").as_str()), "{all}");
}

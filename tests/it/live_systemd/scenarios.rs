//! The scenarios of the live systemd suite (see `mod.rs`), one sandbox each, every one with the
//! unit exactly as `agentchat service install` writes it unless the test says otherwise.

use super::{Live, STATE_HOME, text};
use std::time::Instant;

fn unit(profile: &str) -> String {
    agentchat::service::systemd_unit_name(profile)
}

/// `service install --config <the scratch config>` inside, which must succeed; its stdout.
fn install(l: &Live) -> String {
    l.ok(&format!(
        "agentchat service install --config {}",
        l.config.display()
    ))
}

/// The listener's own lines in `entries` at syslog priority `priority` or more urgent.
fn lines_at_most(entries: &[serde_json::Value], priority: u8) -> Vec<String> {
    entries
        .iter()
        .filter(|e| {
            e["PRIORITY"]
                .as_str()
                .and_then(|p| p.parse::<u8>().ok())
                .is_some_and(|p| p <= priority)
        })
        .filter_map(|e| e["MESSAGE"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_is_active_only_after_ready_shows_its_state_and_runs_in_the_units_cgroup() {
    let Some(l) = Live::boot("install_is_active_only_after_ready").await else {
        return;
    };
    let u = unit("default");
    // A valid config with one piece of advice (max_delay below quiet_window): a WARN line at start.
    let config = std::fs::read_to_string(&l.config).unwrap();
    std::fs::write(
        &l.config,
        config.replace("quiet_window = \"200ms\"", "quiet_window = \"2s\""),
    )
    .unwrap();
    let said = install(&l);
    assert!(said.contains(&format!("started {u}")), "{said}");
    // Type=notify: `enable --now` returned only once the listener sent READY=1, so the unit is
    // already active, not activating.
    assert_eq!(l.prop(&u, "ActiveState"), "active");
    assert_eq!(l.prop(&u, "SubState"), "running");
    // ExecStart keeps the path the binary was run by (the symlink on PATH), not its target.
    let exec = l.prop(&u, "ExecStart");
    let stable = l.bin_dir.join("agentchat").display().to_string();
    assert!(exec.contains(&format!("path={stable} ")), "{exec}");
    // STATUS= carries the listener's state.
    assert!(
        l.until(20, |l| l.prop(&u, "StatusText") == "connected")
            .await,
        "StatusText {:?}",
        l.prop(&u, "StatusText")
    );

    l.message("hello from alice").await;
    assert!(l.run_started(1, 30).await, "no run");
    let cgroup = l.record("cgroup", 1);
    assert!(
        cgroup.contains("/user@0.service/") && cgroup.contains(&format!("/{u}")),
        "the run is not in the unit's cgroup: {cgroup}"
    );

    // doctor, on the sandbox's overlayfs root, sees the unit's listener holding the lock.
    assert_eq!(
        l.ok(&format!("stat -f -c %T {STATE_HOME}/agentchat/default"))
            .trim(),
        "overlayfs"
    );
    let main_pid = l.prop(&u, "MainPID");
    let doctor = l.sh(&format!("agentchat doctor --config {}", l.config.display()));
    let doctor = text(&doctor.stdout);
    assert!(
        doctor.contains(&format!("lock: held by a running listener, pid {main_pid}")),
        "{doctor}"
    );
    assert!(!doctor.contains("not running"), "{doctor}");

    // Journald: each line has the listener's priority and no time of its own.
    let entries = l.journal_of_pid(&main_pid);
    let info: Vec<_> = entries
        .iter()
        .filter(|e| e["MESSAGE"].as_str().is_some_and(|m| m.starts_with("INFO")))
        .collect();
    assert!(!info.is_empty(), "no INFO line in {entries:?}");
    for e in &info {
        assert_eq!(e["PRIORITY"], "6", "{e}");
    }
    assert!(
        !entries
            .iter()
            .any(|e| e["MESSAGE"].as_str().is_some_and(|m| m.starts_with("20"))),
        "a line still carries its own timestamp: {entries:?}"
    );
    let warnings: Vec<_> = entries
        .iter()
        .filter(|e| e["MESSAGE"].as_str().is_some_and(|m| m.starts_with("WARN")))
        .collect();
    assert!(!warnings.is_empty(), "no WARN line in {entries:?}");
    for e in &warnings {
        assert_eq!(e["PRIORITY"], "4", "{e}");
    }
    // So `journalctl -p warning` keeps exactly those.
    let filtered = l.ok(&format!(
        "journalctl --no-pager -o json -p warning _PID={main_pid}"
    ));
    assert_eq!(filtered.lines().count(), warnings.len(), "{filtered}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_rereads_the_config_and_restarts_nothing() {
    let Some(l) = Live::boot("reload_rereads_the_config").await else {
        return;
    };
    let u = unit("default");
    install(&l);
    l.message("first").await;
    assert!(l.run_started(1, 30).await);
    assert!(l.until(10, |l| !l.record("done", 1).is_empty()).await);
    assert_eq!(l.record("arg", 1).trim(), "A");
    let pid = l.prop(&u, "MainPID");

    l.write_config("B", "");
    l.ok(&format!("systemctl --user reload {u}"));
    // The reload is done when the listener logs it; the next run is the new command.
    assert!(
        l.until(20, |l| l.journal_of_pid(&pid).iter().any(|e| e["MESSAGE"]
            .as_str()
            .is_some_and(|m| m.contains("reloading configuration"))))
            .await
    );
    l.message("second").await;
    assert!(l.run_started(2, 30).await);
    assert_eq!(
        l.record("arg", 2).trim(),
        "B",
        "the reloaded command did not run"
    );
    assert_eq!(l.prop(&u, "MainPID"), pid, "the listener was restarted");
    assert_eq!(l.prop(&u, "NRestarts"), "0");
    assert_eq!(l.prop(&u, "ActiveState"), "active");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_listener_restarts_it_and_ends_the_killed_runs_group_first() {
    let Some(l) = Live::boot("kill_9_restarts").await else {
        return;
    };
    let u = unit("default");
    install(&l);
    l.set("sleep", "300");
    l.message("a long one").await;
    assert!(l.run_started(1, 30).await);
    let pid = l.prop(&u, "MainPID");
    let t = Instant::now();
    l.ok(&format!("kill -9 {pid}"));
    assert!(
        l.until(60, |l| l.prop(&u, "NRestarts") == "1"
            && l.prop(&u, "ActiveState") == "active")
            .await,
        "not restarted: {}",
        l.ok(&format!("systemctl --user status {u} || true"))
    );
    eprintln!(
        "live_systemd: kill -9 to active again: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_ne!(l.prop(&u, "MainPID"), pid);
    l.unset("sleep");
    l.message("after the restart").await;
    assert!(l.run_started(2, 30).await);
    assert_eq!(
        l.record("previous", 2).trim(),
        "gone",
        "the killed run's process group was alive when the next run started"
    );
    assert!(
        l.record("done", 1).is_empty(),
        "the killed run went on to finish"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_main_loop_is_killed_by_the_watchdog_and_the_waiting_card_runs_after() {
    let Some(l) = Live::boot("watchdog").await else {
        return;
    };
    let u = unit("default");
    install(&l);
    // The shipped WatchdogSec=120 is too long to wait for in a test; a drop-in shortens it
    // (and RestartSec), everything else is the installed unit.
    let watchdog_secs = 4;
    l.ok(&format!(
        "mkdir -p /root/.config/systemd/user/{u}.d && printf '[Service]\\nWatchdogSec={watchdog_secs}\\nRestartSec=1\\n' \
         > /root/.config/systemd/user/{u}.d/zz-live-test.conf && systemctl --user daemon-reload \
         && systemctl --user restart {u}"
    ));
    assert_eq!(l.prop(&u, "WatchdogUSec"), format!("{watchdog_secs}s"));
    assert!(
        l.until(20, |l| l.prop(&u, "StatusText") == "connected")
            .await
    );
    let pid = l.prop(&u, "MainPID");
    let t = Instant::now();
    l.ok(&format!("kill -STOP {pid}"));
    l.message("sent while the listener is wedged").await;
    assert!(
        l.until(60, |l| l.prop(&u, "NRestarts") == "1"
            && l.prop(&u, "ActiveState") == "active")
            .await,
        "not restarted: {}",
        l.ok(&format!("systemctl --user status {u} || true"))
    );
    let took = t.elapsed().as_secs_f64();
    eprintln!("live_systemd: SIGSTOP to active again: {took:.1} s (WatchdogSec={watchdog_secs})");
    assert!(
        took < f64::from(watchdog_secs) + 15.0,
        "took {took:.1} s, WatchdogSec={watchdog_secs}"
    );
    let journal = l.journal_of_unit(&u);
    assert!(
        journal.iter().any(|e| e["MESSAGE"]
            .as_str()
            .is_some_and(|m| m.contains("Watchdog timeout"))),
        "no watchdog timeout in the journal"
    );
    assert!(
        l.run_started(1, 30).await,
        "the card that waited was never run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_78_and_75_leave_the_unit_down_without_restarts_and_say_why_in_one_line() {
    let Some(l) = Live::boot("exit_78_and_75").await else {
        return;
    };
    let u = unit("default");
    install(&l);

    // 78: a config the listener cannot start with.
    l.write_config("A", "log_format = \"xml\"");
    let out = l.sh(&format!("systemctl --user restart {u}"));
    assert!(!out.status.success());
    assert!(l.until(10, |l| l.prop(&u, "ActiveState") == "failed").await);
    assert_eq!(l.prop(&u, "ExecMainStatus"), "78");
    // RestartPreventExitStatus: no restart comes, even after RestartSec (5 s) has passed.
    let pid = l.prop(&u, "ExecMainPID");
    assert!(!l.until(7, |l| l.prop(&u, "NRestarts") != "0").await);
    assert_eq!(l.prop(&u, "ActiveState"), "failed");
    let errors = lines_at_most(&l.journal_of_pid(&pid), 3);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("log_format"), "{errors:?}");

    // 75: another listener holds the profile's lock.
    l.write_config("A", "");
    l.ok(&format!(
        "systemctl --user reset-failed {u}; systemd-run --user --unit=holder -E XDG_STATE_HOME={STATE_HOME} \
         {}/agentchat listen --config {}",
        l.bin_dir.display(),
        l.config.display()
    ));
    assert!(
        l.until(20, |l| l.status_json("default")["state"] == "connected")
            .await,
        "the holder never connected"
    );
    let out = l.sh(&format!("systemctl --user start {u}"));
    assert!(!out.status.success());
    assert!(l.until(10, |l| l.prop(&u, "ActiveState") == "failed").await);
    assert_eq!(l.prop(&u, "ExecMainStatus"), "75");
    let pid = l.prop(&u, "ExecMainPID");
    assert!(!l.until(7, |l| l.prop(&u, "NRestarts") != "0").await);
    let errors = lines_at_most(&l.journal_of_pid(&pid), 3);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("already running"), "{errors:?}");
    l.ok("systemctl --user stop holder");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_during_a_run_gives_it_its_grace_and_kills_a_setsid_escapee() {
    let Some(l) = Live::boot("stop_during_a_run").await else {
        return;
    };
    let u = unit("default");
    install(&l);
    l.set("sleep", "300");
    l.set("trap", "");
    l.set("escape", "");
    l.message("a run to interrupt").await;
    assert!(l.run_started(1, 30).await);
    assert!(l.until(10, |l| !l.record("escapee", 1).is_empty()).await);
    let escapee = l.record("escapee", 1).trim().to_string();
    let t = Instant::now();
    l.ok(&format!("systemctl --user stop {u}"));
    eprintln!(
        "live_systemd: stop during a run took {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        l.record("term", 1).trim(),
        "term",
        "the run never got SIGTERM"
    );
    assert_eq!(
        l.record("tidy", 1).trim(),
        "tidy",
        "the run was killed before its second of tidying up (kill_grace 3 s)"
    );
    assert!(
        !l.sh(&format!("kill -0 {escapee}")).status.success(),
        "the setsid child outlived the stop"
    );
    assert_eq!(l.prop(&u, "ActiveState"), "inactive");
    assert!(l.ok("pgrep -x agentchat || true").trim().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_all_three_profiles_status_all_and_uninstall_all_leave_nothing() {
    let Some(l) = Live::boot("install_all_three_profiles").await else {
        return;
    };
    let mut extra = String::new();
    for p in ["two", "three"] {
        let agent = l.sim.agent(&format!("agent-{p}")).await;
        let key = l.dir.path().join(format!("{p}.key"));
        super::write_key(&key, &agent.key);
        extra.push_str(&format!(
            "\n[profiles.{p}]\napi_key_file = \"{}\"\n",
            key.display()
        ));
    }
    l.write_config("A", "");
    let base = std::fs::read_to_string(&l.config).unwrap();
    std::fs::write(&l.config, base + &extra).unwrap();

    let c = l.config.display().to_string();
    l.ok(&format!("agentchat service install --all --config {c}"));
    for p in ["default", "two", "three"] {
        assert_eq!(l.prop(&unit(p), "ActiveState"), "active", "{p}");
    }
    let rows = l.sh(&format!("agentchat status --all --config {c}"));
    let table = text(&rows.stdout);
    assert_eq!(rows.status.code(), Some(0), "{table}{}", text(&rows.stderr));
    for p in ["default", "two", "three"] {
        assert!(
            table
                .lines()
                .any(|r| r.contains(p) && r.contains("running")),
            "{p}: {table}"
        );
    }
    l.ok(&format!("agentchat service uninstall --all --config {c}"));
    assert!(
        l.ok("ls /root/.config/systemd/user/ 2>/dev/null | grep agentchat || true")
            .trim()
            .is_empty()
    );
    assert!(
        l.ok("systemctl --user list-units --all --no-legend 'agentchat-listen*'")
            .trim()
            .is_empty()
    );
    assert!(l.ok("pgrep -x agentchat || true").trim().is_empty());
    for p in ["default", "two", "three"] {
        let out = l.sh(&format!("agentchat service status --profile {p}"));
        assert_eq!(out.status.code(), Some(4), "{p}: {}", text(&out.stdout));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_linger_install_and_doctor_say_the_listener_stops_at_logout() {
    let Some(l) = Live::boot("linger").await else {
        return;
    };
    let said = install(&l);
    assert!(said.contains("linger is off"), "{said}");
    assert!(said.contains("loginctl enable-linger"), "{said}");
    let doctor = text(
        &l.sh(&format!("agentchat doctor --config {}", l.config.display()))
            .stdout,
    );
    assert!(
        doctor
            .lines()
            .any(|r| r.starts_with("WARN linger:") && r.contains("loginctl enable-linger")),
        "{doctor}"
    );
    l.ok("loginctl enable-linger root");
    let doctor = text(
        &l.sh(&format!("agentchat doctor --config {}", l.config.display()))
            .stdout,
    );
    assert!(
        doctor.lines().any(|r| r.starts_with("PASS linger: on")),
        "{doctor}"
    );
    let said = install(&l);
    assert!(said.contains("linger is on"), "{said}");
}

/// Whether the sim holds an open socket of `agent`: its listener is connected.
async fn connected(l: &Live, agent: &crate::listen_support::Agent) -> bool {
    l.sim.state(agent).await["sockets"]
        .as_array()
        .is_some_and(|s| !s.is_empty())
}

/// Accepted socket connects of `agent` so far, as the sim counts them.
async fn accepted_connects(l: &Live, agent: &crate::listen_support::Agent) -> usize {
    crate::listen_support::accepted(&l.sim.connects(agent).await)
}

/// The one-process scene: bob (`default`) and agents for profiles `two`, `three` and `four`, each
/// with its key file; the config written with the first three. Returns the agents, and the
/// config's text in three parts: the base (with `default`), `two` and `three`'s tables, `four`'s.
async fn host_scene(l: &Live) -> (Vec<crate::listen_support::Agent>, String, String, String) {
    let mut agents = vec![crate::listen_support::Agent {
        handle: l.bob.handle.clone(),
        key: l.bob.key.clone(),
    }];
    let mut extra = String::new();
    for p in ["two", "three", "four"] {
        let agent = l.sim.agent(&format!("agent-{p}")).await;
        let key = l.dir.path().join(format!("{p}.key"));
        super::write_key(&key, &agent.key);
        agents.push(agent);
        extra.push_str(&format!(
            "\n[profiles.{p}]\napi_key_file = \"{}\"\n",
            key.display()
        ));
    }
    let (three, four) = extra.split_at(extra.find("\n[profiles.four]").unwrap());
    l.write_config("A", "");
    let base = std::fs::read_to_string(&l.config).unwrap();
    std::fs::write(&l.config, format!("{base}{three}")).unwrap();
    (agents, base, three.to_string(), four.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_one_process_unit_pings_the_watchdog_for_all_profiles_and_is_restarted_when_wedged() {
    let Some(l) = Live::boot("one_process_watchdog").await else {
        return;
    };
    let host = agentchat::service::HOST_UNIT;
    let (agents, ..) = host_scene(&l).await;
    l.ok(&format!(
        "agentchat service install --all --one-process --config {}",
        l.config.display()
    ));
    // As in the profile's watchdog scenario: a drop-in shortens WatchdogSec, nothing else.
    let watchdog_secs = 4;
    l.ok(&format!(
        "mkdir -p /root/.config/systemd/user/{host}.d && printf '[Service]\\nWatchdogSec={watchdog_secs}\\nRestartSec=1\\n' \
         > /root/.config/systemd/user/{host}.d/zz-live-test.conf && systemctl --user daemon-reload \
         && systemctl --user restart {host}"
    ));
    assert_eq!(l.prop(host, "WatchdogUSec"), format!("{watchdog_secs}s"));
    for a in &agents[..3] {
        assert!(crate::common::eventually_async(30, || connected(&l, a)).await);
    }
    // Idle with three profiles for three watchdog intervals: the host keeps pinging.
    let idle = std::time::Duration::from_secs(3 * watchdog_secs);
    assert!(
        !l.until(idle.as_secs(), |l| l.prop(host, "NRestarts") != "0")
            .await,
        "the watchdog restarted an idle host: {}",
        l.ok(&format!("systemctl --user status {host} || true"))
    );
    let pid = l.prop(host, "MainPID");
    let before = accepted_of(&l, &agents[..3]).await;
    let t = Instant::now();
    l.ok(&format!("kill -STOP {pid}"));
    assert!(
        l.until(60, |l| l.prop(host, "NRestarts") == "1"
            && l.prop(host, "ActiveState") == "active")
            .await,
        "not restarted: {}",
        l.ok(&format!("systemctl --user status {host} || true"))
    );
    let took = t.elapsed().as_secs_f64();
    eprintln!(
        "live_systemd: one-process SIGSTOP to active again: {took:.1} s (WatchdogSec={watchdog_secs})"
    );
    assert_ne!(l.prop(host, "MainPID"), pid);
    assert!(
        l.journal_of_unit(host).iter().any(|e| e["MESSAGE"]
            .as_str()
            .is_some_and(|m| m.contains("Watchdog timeout"))),
        "no watchdog timeout in the journal"
    );
    // Every profile came back: each connected once more, from the new process.
    for (a, n) in agents[..3].iter().zip(before) {
        assert!(
            crate::common::eventually_async(30, || async {
                accepted_connects(&l, a).await > n && connected(&l, a).await
            })
            .await,
            "{} did not connect again after the restart",
            a.handle
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_one_process_unit_runs_three_profiles_starts_a_fourth_on_reload_and_stops_with_grace() {
    let Some(l) = Live::boot("one_process_unit").await else {
        return;
    };
    let host = agentchat::service::HOST_UNIT;
    let (agents, base, three, four) = host_scene(&l).await;
    let c = l.config.display().to_string();

    let t = Instant::now();
    let said = l.ok(&format!(
        "agentchat service install --all --one-process --config {c}"
    ));
    eprintln!(
        "live_systemd: one-process install to active: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(said.contains(&format!("started {host}")), "{said}");
    // Type=notify: `enable --now` returned only after READY=1, so the unit is already active.
    assert_eq!(l.prop(host, "Type"), "notify");
    assert_eq!(l.prop(host, "ActiveState"), "active");
    assert_eq!(l.prop(host, "SubState"), "running");
    assert_eq!(l.prop(host, "LimitNOFILE"), "8192");
    let exec = l.prop(host, "ExecStart");
    assert!(exec.contains("listen --all --config"), "{exec}");
    // All three profiles connected, from one process.
    for a in &agents[..3] {
        assert!(
            crate::common::eventually_async(30, || connected(&l, a)).await,
            "{} never connected",
            a.handle
        );
    }
    assert_eq!(
        l.ok("pgrep -x agentchat | wc -l").trim(),
        "1",
        "not one process"
    );
    let pid = l.prop(host, "MainPID");
    let rows = l.sh(&format!("agentchat status --all --config {c}"));
    let table = text(&rows.stdout);
    for p in ["default", "two", "three"] {
        assert!(
            table
                .lines()
                .any(|r| r.starts_with(p) && r.contains("running")),
            "{p}: {table}"
        );
    }
    // A profile's own unit beside it is refused.
    let out = l.sh(&format!(
        "agentchat service install --profile two --config {c}"
    ));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("uninstall --all"),
        "{}",
        text(&out.stderr)
    );

    // Reload after adding a fourth profile: it starts, in the same process; the others stay.
    let before: Vec<usize> = accepted_of(&l, &agents[..3]).await;
    std::fs::write(&l.config, format!("{base}{three}{four}")).unwrap();
    l.ok(&format!("systemctl --user reload {host}"));
    assert!(
        crate::common::eventually_async(30, || connected(&l, &agents[3])).await,
        "the fourth profile never connected after the reload"
    );
    assert_eq!(l.prop(host, "MainPID"), pid, "the host was restarted");
    assert_eq!(l.prop(host, "NRestarts"), "0");
    assert_eq!(l.prop(host, "ActiveState"), "active");
    let after: Vec<usize> = accepted_of(&l, &agents[..3]).await;
    assert_eq!(
        before, after,
        "a profile the reload did not change reconnected"
    );

    // A run in the unit's cgroup, then a stop during it: the run gets its grace.
    l.set("sleep", "300");
    l.set("trap", "");
    l.message("a run to interrupt").await;
    assert!(l.run_started(1, 30).await, "no run");
    let cgroup = l.record("cgroup", 1);
    assert!(cgroup.contains(&format!("/{host}")), "{cgroup}");
    let t = Instant::now();
    l.ok(&format!("systemctl --user stop {host}"));
    eprintln!(
        "live_systemd: stop of the one-process unit during a run took {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        l.record("term", 1).trim(),
        "term",
        "the run never got SIGTERM"
    );
    assert_eq!(
        l.record("tidy", 1).trim(),
        "tidy",
        "the run was killed before its second of tidying up (kill_grace 3 s)"
    );
    assert_eq!(l.prop(host, "ActiveState"), "inactive");
    assert!(l.ok("pgrep -x agentchat || true").trim().is_empty());

    // Uninstall leaves nothing.
    l.ok(&format!("agentchat service uninstall --all --config {c}"));
    assert!(
        l.ok("ls /root/.config/systemd/user/ 2>/dev/null | grep agentchat || true")
            .trim()
            .is_empty()
    );
    assert!(
        l.ok("systemctl --user list-units --all --no-legend 'agentchat-*'")
            .trim()
            .is_empty()
    );
    let out = l.sh("agentchat service status --one-process");
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stdout));
}

/// Accepted connects of each of `agents`, in order.
async fn accepted_of(l: &Live, agents: &[crate::listen_support::Agent]) -> Vec<usize> {
    let mut out = Vec::new();
    for a in agents {
        out.push(accepted_connects(l, a).await);
    }
    out
}

/// `install --all --one-process` run again after a profile is added (what `agentchat setup` does
/// for a new profile) rewrites the unit for the profiles the config names now and reloads the
/// running host: the new profile starts in the same process, and the manager takes the stop
/// timeout of its longer `kill_grace` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_one_process_unit_installed_again_starts_an_added_profile_in_the_same_process() {
    let Some(l) = Live::boot("one_process_again").await else {
        return;
    };
    let host = agentchat::service::HOST_UNIT;
    let (agents, base, three, four) = host_scene(&l).await;
    let c = l.config.display().to_string();
    let install = format!("agentchat service install --all --one-process --config {c}");
    l.ok(&install);
    for a in &agents[..3] {
        assert!(
            crate::common::eventually_async(30, || connected(&l, a)).await,
            "{} never connected",
            a.handle
        );
    }
    let pid = l.prop(host, "MainPID");
    let before = accepted_of(&l, &agents[..3]).await;
    std::fs::write(
        &l.config,
        format!("{base}{three}{four}[profiles.four.listen]\nkill_grace = \"5m\"\n"),
    )
    .unwrap();
    let said = l.ok(&install);
    assert!(said.contains(&format!("reloaded {host}")), "{said}");
    assert!(
        crate::common::eventually_async(30, || connected(&l, &agents[3])).await,
        "the added profile never connected after installing again: {said}"
    );
    assert_eq!(l.prop(host, "MainPID"), pid, "the host was restarted");
    assert_eq!(l.prop(host, "NRestarts"), "0");
    assert_eq!(l.prop(host, "TimeoutStopUSec"), "5min 30s");
    assert_eq!(
        accepted_of(&l, &agents[..3]).await,
        before,
        "a profile the reload did not change reconnected"
    );
    l.ok(&format!("agentchat service uninstall --all --config {c}"));
}

/// A bare reload after a profile with a longer `kill_grace` is added: the unit's first ExecReload
/// brings its stop timeout (and open-files limit) up to the profiles and has the manager read it
/// again, then the SIGHUP starts the profile in the same process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_the_one_process_unit_brings_its_stop_timeout_up_to_an_added_profile() {
    let Some(l) = Live::boot("one_process_reload_refresh").await else {
        return;
    };
    let host = agentchat::service::HOST_UNIT;
    let (agents, base, three, four) = host_scene(&l).await;
    let c = l.config.display().to_string();
    l.ok(&format!(
        "agentchat service install --all --one-process --config {c}"
    ));
    let pid = l.prop(host, "MainPID");
    let stop_before = l.prop(host, "TimeoutStopUSec");
    std::fs::write(
        &l.config,
        format!("{base}{three}{four}[profiles.four.listen]\nkill_grace = \"5m\"\n"),
    )
    .unwrap();
    l.ok(&format!("systemctl --user reload {host}"));
    assert!(
        crate::common::eventually_async(30, || connected(&l, &agents[3])).await,
        "the added profile never connected after the reload"
    );
    assert_eq!(l.prop(host, "MainPID"), pid, "the host was restarted");
    assert_eq!(l.prop(host, "ActiveState"), "active");
    assert_eq!(
        l.prop(host, "TimeoutStopUSec"),
        "5min 30s",
        "was {stop_before}"
    );
    assert_eq!(l.prop(host, "NeedDaemonReload"), "no");
    let unit = l.ok(&format!("cat /root/.config/systemd/user/{host}"));
    assert!(unit.contains("# 4 profiles now"), "{unit}");
    l.ok(&format!("agentchat service uninstall --all --config {c}"));
}

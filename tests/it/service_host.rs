//! The one-process unit (`service install --all --one-process`: `agentchat listen --all` as
//! `agentchat-host.service`, launchd `me.agentchat.listen-host`), checked by the real tools as
//! the per-profile units are (`systemd-analyze verify`, Python's `plistlib`), installed and
//! removed in a scratch dir (`AGENTCHAT_SERVICE_DIR`) or against a stand-in `systemctl`, and kept
//! apart from the per-profile units.

use crate::common::config_in;
use crate::service::{
    agentchat, parse_plist, print_unit, refusing_systemctl, text, unit_number, without_user_manager,
};
use std::path::Path;
use std::process::Command;

/// A config with `default`, `two` (a 45 s grace) and `three` (1 min 30 s), each with a key file.
fn three_profiles() -> (tempfile::TempDir, String) {
    let (dir, config) = config_in(
        "api_key_file = \"k1\"\n[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n\n\
         [profiles.two]\napi_key_file = \"k2\"\n[profiles.two.listen]\nkill_grace = \"45s\"\n\n\
         [profiles.three]\napi_key_file = \"k3\"\n[profiles.three.listen]\nkill_grace = \"1m 30s\"\n",
    );
    for k in ["k1", "k2", "k3"] {
        crate::live_systemd::write_key(&dir.path().join(k), "ac_live_test");
    }
    let config = config.display().to_string();
    (dir, config)
}

/// `systemd-analyze verify` of the one file `unit` as `name` in `dir` (the only unit dir); its
/// diagnostics (empty = clean).
fn verify_one(dir: &Path, name: &str, unit: &str) -> String {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no", name])
        .current_dir(dir)
        .env("SYSTEMD_UNIT_PATH", format!("{}:", dir.display()))
        .output()
        .expect("systemd-analyze is needed for this test (Debian package systemd)");
    let mut diagnostics = text(&out.stderr);
    if !out.status.success() {
        diagnostics.push_str(&format!("exit status {}", out.status));
    }
    diagnostics
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn the_one_process_unit_passes_systemd_analyze_verify_and_runs_listen_all() {
    let (_c, config) = three_profiles();
    let unit = print_unit(&[
        "--kind",
        "systemd",
        "--all",
        "--one-process",
        "--config",
        &config,
    ]);
    let dir = tempfile::tempdir().unwrap();
    let diagnostics = verify_one(dir.path(), "agentchat-host.service", &unit);
    assert!(diagnostics.is_empty(), "{diagnostics}\n{unit}");
    let exec = format!("\"listen\" \"--all\" \"--config\" \"{config}\"");
    assert!(
        unit.lines()
            .any(|l| l.starts_with("ExecStart=\"") && l.ends_with(&exec)),
        "{unit}"
    );
    // A reload first brings the unit's numbers up to the profiles (failure ignored), then SIGHUP.
    let refresh = format!(
        "\"service\" \"install\" \"--all\" \"--one-process\" \"--refresh\" \"--config\" \"{config}\""
    );
    let reloads: Vec<&str> = unit
        .lines()
        .filter(|l| l.starts_with("ExecReload="))
        .collect();
    assert_eq!(reloads.len(), 2, "{unit}");
    assert!(
        reloads[0].starts_with("ExecReload=-\"") && reloads[0].ends_with(&refresh),
        "{unit}"
    );
    assert_eq!(reloads[1], "ExecReload=/bin/kill -HUP $MAINPID");
    for needed in [
        "Type=notify",
        "NotifyAccess=main",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "Restart=on-failure",
        "RestartPreventExitStatus=75 78",
        "WatchdogSec=120",
        "KillMode=mixed",
        "Environment=\"PATH=",
        "WantedBy=default.target",
    ] {
        assert!(
            unit.lines().any(|l| l == needed || l.starts_with(needed)),
            "lacks {needed}\n{unit}"
        );
    }
    // Not a template, and no profile of its own.
    assert!(
        !unit.contains("%i") && !unit.contains("--profile"),
        "{unit}"
    );
    // The largest grace of the three (90 s) plus 30 s.
    assert_eq!(unit_number(&unit, "TimeoutStopSec"), 120, "{unit}");
    // Three profiles fit in the floor.
    assert_eq!(unit_number(&unit, "LimitNOFILE"), 8192, "{unit}");
    // The same check fails on a broken copy, so the one above means something.
    let broken = unit.replace("KillMode=mixed", "KillMode=mixd");
    let diagnostics = verify_one(dir.path(), "agentchat-host.service", &broken);
    assert!(diagnostics.contains("mixd"), "{diagnostics}");
}

#[test]
fn the_open_files_limit_of_the_one_process_unit_grows_with_the_profiles() {
    let mut toml = String::new();
    for i in 0..1000 {
        toml.push_str(&format!("[profiles.p{i}]\n"));
    }
    let (_c, config) = config_in(&toml);
    let unit = print_unit(&[
        "--kind",
        "systemd",
        "--one-process",
        "--config",
        config.to_str().unwrap(),
    ]);
    // 1000 profiles (`default` is not one: the top level names no key of its own, as
    // `listen --all` reads it): at least 4 each and the process's own.
    let limit = unit_number(&unit, "LimitNOFILE");
    assert_eq!(limit, agentchat::service::limit_nofile(1000), "{unit}");
    assert!(limit >= 1000 * 4 + 1024, "{limit}");
    assert!(unit.contains("# 1000 profiles now"), "{unit}");
    let dir = tempfile::tempdir().unwrap();
    let diagnostics = verify_one(dir.path(), "agentchat-host.service", &unit);
    assert!(diagnostics.is_empty(), "{diagnostics}");
}

#[test]
fn the_one_process_plist_parses_with_a_real_plist_parser_and_carries_listen_all() {
    let (c, config) = three_profiles();
    let plist = print_unit(&[
        "--kind",
        "launchd",
        "--all",
        "--one-process",
        "--config",
        &config,
    ]);
    let parsed = parse_plist(c.path(), &plist);
    assert_eq!(parsed["Label"], "me.agentchat.listen-host");
    let args: Vec<&str> = parsed["ProgramArguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[1..], ["listen", "--all", "--config", config.as_str()]);
    assert_eq!(parsed["ExitTimeOut"], 120);
    assert_eq!(parsed["SoftResourceLimits"]["NumberOfFiles"], 8192);
    assert_eq!(parsed["HardResourceLimits"]["NumberOfFiles"], 8192);
    assert_eq!(parsed["KeepAlive"]["SuccessfulExit"], false);
    assert!(
        parsed["StandardErrorPath"]
            .as_str()
            .unwrap()
            .ends_with("agentchat-host.log")
    );
}

#[test]
fn one_process_install_writes_one_unit_and_uninstall_removes_it() {
    let (_c, config) = three_profiles();
    let dir = tempfile::tempdir().unwrap();
    let install = [
        "service",
        "install",
        "--all",
        "--one-process",
        "--kind",
        "systemd",
    ];
    let out = agentchat(
        &[&install[..], &["--config", &config]].concat(),
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("one process for 3 profiles: default, three, two"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(names(dir.path()), ["agentchat-host.service"]);
    let written = std::fs::read_to_string(dir.path().join("agentchat-host.service")).unwrap();
    let printed = print_unit(&["--kind", "systemd", "--one-process", "--config", &config]);
    assert_eq!(written, printed, "install writes what print shows");
    // Installing again over it is an update, not a conflict.
    let out = agentchat(
        &[&install[..], &["--config", &config]].concat(),
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    let out = agentchat(
        &["service", "uninstall", "--one-process", "--kind", "systemd"],
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));

    // `uninstall --all` takes it too.
    let out = agentchat(
        &[&install[..], &["--config", &config]].concat(),
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = agentchat(
        &[
            "service",
            "uninstall",
            "--all",
            "--kind",
            "systemd",
            "--config",
            &config,
        ],
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
}

#[test]
fn one_process_needs_all_to_install() {
    let dir = tempfile::tempdir().unwrap();
    let out = agentchat(
        &["service", "install", "--one-process", "--kind", "systemd"],
        Some(dir.path()),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--all"), "{}", text(&out.stderr));
    assert!(names(dir.path()).is_empty());
}

#[test]
fn one_process_and_per_profile_units_refuse_each_other_and_say_how_to_switch() {
    let (_c, config) = three_profiles();
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        agentchat(
            &[
                &["service"][..],
                args,
                &["--kind", "systemd", "--config", &config],
            ]
            .concat(),
            Some(dir.path()),
        )
    };
    assert!(run(&["install", "--profile", "two"]).status.success());
    let before = names(dir.path());

    // A unit per profile is there: the one-process install is refused and writes nothing.
    let out = run(&["install", "--all", "--one-process"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for said in [
        "agentchat-listen@two.service",
        "nothing was written",
        "exit 75",
        "`agentchat service uninstall --all`, then `agentchat service install --all --one-process`",
    ] {
        assert!(stderr.contains(said), "lacks {said:?}: {stderr}");
    }
    assert_eq!(names(dir.path()), before);

    // Switched as it says.
    assert!(run(&["uninstall", "--all"]).status.success());
    assert!(run(&["install", "--all", "--one-process"]).status.success());
    let before = names(dir.path());
    assert_eq!(before, ["agentchat-host.service"]);

    // And the other way round: a profile's own unit, or all of them, refused.
    for args in [
        &["install", "--profile", "three"][..],
        &["install", "--all"][..],
    ] {
        let out = run(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        for said in [
            "agentchat-host.service",
            "nothing was written",
            "`agentchat service uninstall --all`, then `agentchat service install --all`",
        ] {
            assert!(stderr.contains(said), "{args:?} lacks {said:?}: {stderr}");
        }
        assert_eq!(names(dir.path()), before, "{args:?}");
    }
}

#[test]
fn a_profile_that_would_not_start_is_a_warning_and_the_host_is_installed_for_the_others() {
    let (c, config) = three_profiles();
    std::fs::remove_file(c.path().join("k2")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = agentchat(
        &[
            "service",
            "install",
            "--all",
            "--one-process",
            "--kind",
            "systemd",
            "--config",
            &config,
        ],
        Some(dir.path()),
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: profile `two` will not start") && stderr.contains("k2"),
        "{stderr}"
    );
    assert!(!stderr.contains("profile `three`"), "{stderr}");
    assert_eq!(names(dir.path()), ["agentchat-host.service"]);

    // No profile that would start: refused, nothing written.
    let (_d, bad) = config_in("api_key_file = \"k\"\n[listen]\nqiet_window = \"3s\"\n");
    let empty = tempfile::tempdir().unwrap();
    let out = agentchat(
        &[
            "service",
            "install",
            "--all",
            "--one-process",
            "--config",
            bad.to_str().unwrap(),
        ],
        Some(empty.path()),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no profile of the config would start")
            && stderr.contains("listen.qiet_window"),
        "{stderr}"
    );
    assert!(names(empty.path()).is_empty());

    // No profile at all for `listen --all`: refused, saying what makes one.
    let (_d, none) = config_in("[listen]\nruntime = \"script\"\n");
    let out = agentchat(
        &[
            "service",
            "install",
            "--all",
            "--one-process",
            "--config",
            none.to_str().unwrap(),
        ],
        Some(empty.path()),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("names no profile") && stderr.contains("[profiles.<name>]"),
        "{stderr}"
    );
    assert!(names(empty.path()).is_empty());
}

#[test]
fn status_of_a_profile_without_its_own_unit_shows_the_one_process_unit() {
    let (_c, config) = three_profiles();
    let dir = tempfile::tempdir().unwrap();
    let status = |args: &[&str]| {
        agentchat(
            &[&["service", "status", "--kind", "systemd"][..], args].concat(),
            Some(dir.path()),
        )
    };
    assert_eq!(status(&["--one-process"]).status.code(), Some(4));
    assert_eq!(status(&["--profile", "two"]).status.code(), Some(4));
    let out = agentchat(
        &[
            "service",
            "install",
            "--all",
            "--one-process",
            "--kind",
            "systemd",
            "--config",
            &config,
        ],
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    for args in [&["--one-process"][..], &["--profile", "two"][..]] {
        let out = status(args);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stdout}");
        assert!(
            stdout.contains("agentchat-host.service (written)"),
            "{args:?}: {stdout}"
        );
    }
    assert!(text(&status(&["--profile", "two"]).stdout).contains("the one-process unit runs"));
}

#[test]
fn a_one_process_install_the_manager_refuses_is_undone_and_nothing_is_left() {
    let home = tempfile::tempdir().unwrap();
    let calls = refusing_systemctl(home.path());
    let path = format!("{}:/usr/bin:/bin", home.path().join("bin").display());
    let (_c, config) = three_profiles();
    let units = home.path().join(".config/systemd/user");
    let out = without_user_manager(
        home.path(),
        &[
            "install",
            "--all",
            "--one-process",
            "--kind",
            "systemd",
            "--config",
            &config,
        ],
        Some(&path),
        &[],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("Access denied") && stderr.contains("removed"),
        "{stderr}"
    );
    assert!(names(&units).is_empty(), "{:?}", names(&units));
    let calls = std::fs::read_to_string(calls).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    // The manager answered, was asked for running per-profile units, then refused the enable.
    assert_eq!(calls[0], "--user show-environment", "{calls:?}");
    assert!(calls[1].starts_with("--user list-units"), "{calls:?}");
    assert_eq!(
        calls[2..],
        [
            "--user daemon-reload",
            "--user enable --now agentchat-host.service",
            "--user daemon-reload"
        ],
        "{calls:?}"
    );
}

/// `agentchat doctor ARGS` with `AGENTCHAT_SERVICE_DIR` = `dir`; its `service` and `exec_start`
/// lines.
fn doctor_service_lines(dir: &Path, args: &[&str]) -> Vec<String> {
    let out = agentchat(&[&["doctor"][..], args].concat(), Some(dir));
    text(&out.stdout)
        .lines()
        .filter(|l| {
            l.contains(" service:") || l.contains(" exec_start:") || l.contains(" template:")
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn doctor_checks_the_one_process_unit_for_a_profile_it_runs_and_warns_when_both_are_written() {
    let (c, _) = three_profiles();
    // A server that answers nothing on loopback: doctor's network checks fail fast, the service
    // checks are what this test reads.
    let config = c.path().join("config.toml");
    let body = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("api_base = \"http://127.0.0.1:9\"\n{body}"),
    )
    .unwrap();
    let config = config.display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = agentchat(
        &[
            "service",
            "install",
            "--all",
            "--one-process",
            "--config",
            &config,
        ],
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    let lines = doctor_service_lines(dir.path(), &["--profile", "two", "--config", &config]);
    let service = lines.iter().find(|l| l.contains(" service:")).unwrap();
    assert!(
        service.starts_with("PASS service: written and current")
            && service.contains("agentchat-host.service"),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("PASS exec_start:")),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.contains(" template:")), "{lines:?}");

    // A profile added to the config: the unit's sizing is stale, and doctor names the command.
    std::fs::write(
        c.path().join("config.toml"),
        format!(
            "{}\n[profiles.four.listen]\nkill_grace = \"5m\"\n",
            std::fs::read_to_string(c.path().join("config.toml")).unwrap()
        ),
    )
    .unwrap();
    let lines = doctor_service_lines(dir.path(), &["--config", &config]);
    let service = lines.iter().find(|l| l.contains(" service:")).unwrap();
    assert!(
        service.starts_with("WARN service:")
            && service.contains("TimeoutStopSec=")
            && service.contains("agentchat service install --all --one-process --config"),
        "{lines:?}"
    );

    // Both kinds written by hand: doctor says it is two listeners for one agent.
    let drop_in = dir.path().join("agentchat-listen@two.service.d");
    std::fs::create_dir_all(&drop_in).unwrap();
    std::fs::write(drop_in.join("install.conf"), "# by hand\n").unwrap();
    let lines = doctor_service_lines(dir.path(), &["--profile", "two", "--config", &config]);
    let service = lines.iter().find(|l| l.contains(" service:")).unwrap();
    assert!(
        service.starts_with("WARN service: both") && service.contains("exits 75"),
        "{lines:?}"
    );
}

/// After profiles are added, a reload's refresh (`install --all --one-process --refresh`, the
/// unit's first ExecReload) and installing again (what `agentchat setup` does for a new profile)
/// both rewrite the numbers that follow the profiles: the stop timeout for a longer
/// `kill_grace`, the open-files limit beyond about 450 profiles; the file still passes
/// `systemd-analyze verify`.
#[test]
fn installing_the_one_process_unit_again_keeps_its_stop_timeout_and_open_files_limit_current() {
    let (c, config) = three_profiles();
    let dir = tempfile::tempdir().unwrap();
    let install = [
        "service",
        "install",
        "--all",
        "--one-process",
        "--kind",
        "systemd",
        "--config",
        &config,
    ];
    let out = agentchat(&install, Some(dir.path()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let unit_file = dir.path().join("agentchat-host.service");
    let first = std::fs::read_to_string(&unit_file).unwrap();
    assert_eq!(unit_number(&first, "TimeoutStopSec"), 120, "{first}");
    assert_eq!(unit_number(&first, "LimitNOFILE"), 8192, "{first}");

    let mut more = std::fs::read_to_string(&config).unwrap();
    for i in 0..600 {
        more.push_str(&format!("\n[profiles.p{i}]\napi_key_file = \"k1\"\n"));
    }
    more.push_str("[profiles.p7.listen]\nkill_grace = \"5m\"\n");
    std::fs::write(&config, more).unwrap();
    // What a reload runs first (ExecReload): the numbers brought up to the profiles, in place.
    let refresh = [&install[..], &["--refresh"]].concat();
    let out = agentchat(&refresh, Some(dir.path()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("for 603 profiles"),
        "{}",
        text(&out.stdout)
    );
    let refreshed = std::fs::read_to_string(&unit_file).unwrap();
    let printed = print_unit(&["--kind", "systemd", "--one-process", "--config", &config]);
    assert_eq!(refreshed, printed, "a refresh writes what install would");
    let out = agentchat(&refresh, Some(dir.path()));
    assert!(
        text(&out.stdout).contains("is current"),
        "{}",
        text(&out.stdout)
    );
    // Installing again writes the same.
    let out = agentchat(&install, Some(dir.path()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("one process for 603 profiles"),
        "{}",
        text(&out.stdout)
    );
    let second = std::fs::read_to_string(&unit_file).unwrap();
    assert_eq!(second, refreshed);
    assert_eq!(
        unit_number(&second, "TimeoutStopSec"),
        5 * 60 + 30,
        "{second}"
    );
    assert_eq!(
        unit_number(&second, "LimitNOFILE"),
        agentchat::service::limit_nofile(603),
        "{second}"
    );
    assert!(unit_number(&second, "LimitNOFILE") > 8192);
    assert!(second.contains("# 603 profiles now"), "{second}");
    let diagnostics = verify_one(&c.path().join("verify"), "agentchat-host.service", &second);
    assert!(diagnostics.is_empty(), "{diagnostics}");
}

//! The service units, checked by the real tools: `systemd-analyze verify` for the systemd user
//! unit and Python's `plistlib` for the launchd plist; install/uninstall in a scratch dir
//! (`AGENTCHAT_SERVICE_DIR`) so the machine's services are never touched.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_agentchat");

fn agentchat(args: &[&str], service_dir: Option<&Path>) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    match service_dir {
        Some(dir) => cmd.env("AGENTCHAT_SERVICE_DIR", dir),
        None => cmd.env_remove("AGENTCHAT_SERVICE_DIR"),
    };
    cmd.output().expect("run agentchat")
}

fn print_unit(args: &[&str]) -> String {
    let mut full = vec!["service", "print"];
    full.extend_from_slice(args);
    let out = agentchat(&full, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `systemd-analyze verify` on `text` saved as `name`; returns its diagnostics (empty = clean).
fn systemd_verify(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("systemd-analyze is needed for this test (Debian package systemd)");
    let mut diagnostics = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        diagnostics.push_str(&format!("exit status {}", out.status));
    }
    diagnostics
}

#[test]
fn systemd_unit_passes_systemd_analyze_verify_for_default_and_named_profiles() {
    let dir = tempfile::tempdir().unwrap();
    for (profile, name) in [
        ("default", "agentchat-listen.service"),
        ("work", "agentchat-listen-work.service"),
    ] {
        let unit = print_unit(&["--kind", "systemd", "--profile", profile]);
        let diagnostics = systemd_verify(dir.path(), name, &unit);
        assert!(diagnostics.is_empty(), "{name}: {diagnostics}\n{unit}");
        for needed in [
            "Type=notify",
            "WatchdogSec=",
            "Restart=on-failure",
            "KillMode=mixed",
            "ExecReload=/bin/kill -HUP $MAINPID",
            "Environment=\"PATH=",
        ] {
            assert!(unit.contains(needed), "{name} lacks {needed}");
        }
    }
}

#[test]
fn systemd_verify_catches_a_broken_unit_so_the_check_above_means_something() {
    let dir = tempfile::tempdir().unwrap();
    let unit = print_unit(&["--kind", "systemd"]).replace("Type=notify", "Type=notifyy");
    let diagnostics = systemd_verify(dir.path(), "agentchat-listen.service", &unit);
    assert!(diagnostics.contains("notifyy"), "{diagnostics}");
}

#[test]
fn systemd_stop_timeout_outlasts_the_run_grace() {
    let unit = print_unit(&["--kind", "systemd"]);
    let secs: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .expect("TimeoutStopSec")
        .parse()
        .unwrap();
    assert!(
        secs > 10,
        "TimeoutStopSec={secs} must exceed the 10 s run grace"
    );
}

#[test]
fn launchd_plist_parses_with_a_real_plist_parser_and_carries_the_listen_command() {
    let dir = tempfile::tempdir().unwrap();
    let plist = print_unit(&[
        "--kind",
        "launchd",
        "--profile",
        "work",
        "--config",
        "/etc/a&b.toml",
    ]);
    let path = dir.path().join("agent.plist");
    std::fs::write(&path, &plist).unwrap();
    let script =
        "import json,plistlib,sys; print(json.dumps(plistlib.load(open(sys.argv[1],'rb'))))";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "plistlib refused it: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(parsed["Label"], "me.agentchat.listen.work");
    let args: Vec<&str> = parsed["ProgramArguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        &args[1..],
        ["listen", "--profile", "work", "--config", "/etc/a&b.toml"]
    );
    assert!(Path::new(args[0]).is_absolute());
    assert!(
        parsed["EnvironmentVariables"]["PATH"]
            .as_str()
            .unwrap()
            .contains("/usr/bin")
    );
    assert_eq!(parsed["KeepAlive"]["SuccessfulExit"], false);
    assert!(parsed["ExitTimeOut"].as_u64().unwrap() > 10);
}

#[test]
fn install_and_uninstall_in_a_scratch_dir_write_and_remove_the_unit_without_a_manager() {
    let dir = tempfile::tempdir().unwrap();
    let out = agentchat(
        &["service", "install", "--kind", "systemd", "--profile", "ci"],
        Some(dir.path()),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unit = dir.path().join("agentchat-listen-ci.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    assert!(text.contains("\"listen\" \"--profile\" \"ci\""), "{text}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("not calling the service manager"));

    let out = agentchat(
        &[
            "service",
            "uninstall",
            "--kind",
            "systemd",
            "--profile",
            "ci",
        ],
        Some(dir.path()),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!unit.exists());
}

#[test]
fn a_profile_name_that_cannot_name_a_unit_is_refused_with_a_clear_error() {
    let out = agentchat(&["service", "print", "--profile", "a b"], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("profile name"), "{err}");
}

//! The service units, checked by the real tools: `systemd-analyze verify` for the systemd user
//! unit and Python's `plistlib` for the launchd plist; install/uninstall in a scratch dir
//! (`AGENTCHAT_SERVICE_DIR`) so the machine's services are never touched.

use crate::common::config_in;
use std::path::Path;
use std::process::Command;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_agentchat");

/// A config dir no test writes to, so the machine's own `~/.config/agentchat/config.toml` never
/// changes what these tests see.
const NO_CONFIG_HOME: &str = "/nonexistent/agentchat-service-tests";

pub(crate) fn agentchat(args: &[&str], service_dir: Option<&Path>) -> std::process::Output {
    agentchat_env(args, service_dir, &[])
}

/// Runs the real binary with `env` added to a clean config environment.
pub(crate) fn agentchat_env(
    args: &[&str],
    service_dir: Option<&Path>,
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("XDG_CONFIG_HOME", NO_CONFIG_HOME)
        .env_remove("AGENTCHAT_CONFIG")
        .env_remove("AGENTCHAT_PROFILE");
    match service_dir {
        Some(dir) => cmd.env("AGENTCHAT_SERVICE_DIR", dir),
        None => cmd.env_remove("AGENTCHAT_SERVICE_DIR"),
    };
    cmd.envs(env.iter().copied());
    cmd.output().expect("run agentchat")
}

pub(crate) fn print_unit(args: &[&str]) -> String {
    print_unit_env(args, &[])
}

/// `agentchat service print ARGS` with `env`; the unit's text (the command must succeed).
pub(crate) fn print_unit_env(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut full = vec!["service", "print"];
    full.extend_from_slice(args);
    let out = agentchat_env(&full, None, env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The number after the last `key=` in a systemd unit (a drop-in's setting comes after the
/// template's and wins).
pub(crate) fn unit_number(unit: &str, key: &str) -> u64 {
    unit.lines()
        .rev()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in\n{unit}"))
        .parse()
        .unwrap()
}

/// Parses a launchd plist with Python's `plistlib` (a real parser) into JSON.
pub(crate) fn parse_plist(dir: &Path, plist: &str) -> serde_json::Value {
    let path = dir.join("agent.plist");
    std::fs::write(&path, plist).unwrap();
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
    // plutil's own lint where it exists (macOS); this project's machines have none.
    if let Ok(lint) = Command::new("plutil").arg("-lint").arg(&path).output() {
        assert!(
            lint.status.success(),
            "plutil -lint refused it: {}",
            String::from_utf8_lossy(&lint.stdout)
        );
    }
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `systemd-analyze verify` on the instance `name` of the files `service print` shows in
/// `text` (each after a `# --- <path> ---` line: the template and the profile's drop-in), saved
/// in `dir`, the only unit dir (`SYSTEMD_UNIT_PATH`); returns its diagnostics (empty = clean).
fn systemd_verify(dir: &Path, name: &str, text: &str) -> String {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut files = text.split("# --- ").skip(1);
    let mut written = 0;
    for file in files.by_ref() {
        let (path, body) = file.split_once(" ---\n").unwrap();
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, body).unwrap();
        written += 1;
    }
    assert_eq!(written, 2, "the template and a drop-in:\n{text}");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no", name])
        .current_dir(dir)
        .env("SYSTEMD_UNIT_PATH", format!("{}:", dir.display()))
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
        ("default", "agentchat-listen@default.service"),
        ("work", "agentchat-listen@work.service"),
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
    let diagnostics = systemd_verify(dir.path(), "agentchat-listen@default.service", &unit);
    assert!(diagnostics.contains("notifyy"), "{diagnostics}");
}

#[test]
fn systemd_stop_timeout_outlasts_the_default_run_grace_without_a_config() {
    let unit = print_unit(&["--kind", "systemd"]);
    // The default grace is 10 s; 30 s more leaves room for the socket close and status write.
    assert_eq!(unit_number(&unit, "TimeoutStopSec"), 40, "{unit}");
}

#[test]
fn stop_timeouts_follow_the_profiles_kill_grace_from_its_config() {
    let (dir, config) = config_in(
        "[listen]\nkill_grace = \"45s\"\n\n[profiles.slow.listen]\nkill_grace = \"1m 30s\"\n",
    );
    let config = config.to_str().unwrap();
    let unit = print_unit(&["--kind", "systemd", "--config", config]);
    assert_eq!(unit_number(&unit, "TimeoutStopSec"), 75, "{unit}");
    let unit = print_unit(&["--kind", "systemd", "--config", config, "--profile", "slow"]);
    assert_eq!(unit_number(&unit, "TimeoutStopSec"), 120, "{unit}");
    let plist = print_unit(&["--kind", "launchd", "--config", config]);
    assert_eq!(parse_plist(dir.path(), &plist)["ExitTimeOut"], 75);
}

#[test]
fn a_config_that_does_not_load_leaves_the_default_run_grace_in_the_unit() {
    let (_dir, config) = config_in("[listen]\nkill_grace = \"45s\"\nkil_grace = \"1s\"\n");
    let unit = print_unit(&["--kind", "systemd", "--config", config.to_str().unwrap()]);
    assert_eq!(unit_number(&unit, "TimeoutStopSec"), 40, "{unit}");
}

#[test]
fn the_installing_shells_agentchat_config_is_passed_on_to_the_unit() {
    let (_dir, config) = config_in("[listen]\nkill_grace = \"20s\"\n");
    let unit = print_unit_env(
        &["--kind", "systemd"],
        &[("AGENTCHAT_CONFIG", config.to_str().unwrap())],
    );
    let expected = format!("\"listen\" \"--config\" \"{}\"", config.display());
    assert!(unit.contains(&expected), "{unit}");
    assert_eq!(unit_number(&unit, "TimeoutStopSec"), 50, "{unit}");
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
    let parsed = parse_plist(dir.path(), &plist);
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
    // A profile other than `default` needs its table: install checks the config the unit uses.
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[profiles.ci]\n").unwrap();
    let config = config.to_str().unwrap();
    let out = agentchat(
        &[
            "service",
            "install",
            "--kind",
            "systemd",
            "--profile",
            "ci",
            "--config",
            config,
        ],
        Some(dir.path()),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unit = dir
        .path()
        .join("agentchat-listen@ci.service.d/install.conf");
    let template = dir.path().join("agentchat-listen@.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    assert!(template.is_file());
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
    // The last profile's uninstall takes the template and the drop-in dir with it.
    assert!(!unit.exists());
    assert!(!unit.parent().unwrap().exists());
    assert!(!template.exists());
}

#[test]
fn a_profile_name_that_cannot_name_a_unit_is_refused_with_a_clear_error() {
    let out = agentchat(&["service", "print", "--profile", "a b"], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("profile name"), "{err}");
    let out = agentchat(&["service", "print", "--profile", ".hidden"], None);
    assert!(
        !out.status.success(),
        "a profile config refuses was accepted"
    );
}

#[test]
fn the_profile_comes_from_agentchat_profile_like_every_other_command_and_the_flag_wins() {
    let unit = print_unit_env(&["--kind", "systemd"], &[("AGENTCHAT_PROFILE", "work")]);
    assert!(unit.contains("\"listen\" \"--profile\" \"work\""), "{unit}");
    assert!(
        unit.contains("# --- agentchat-listen@work.service.d/install.conf ---"),
        "{unit}"
    );
    let unit = print_unit_env(
        &["--kind", "systemd", "--profile", " home "],
        &[("AGENTCHAT_PROFILE", "work")],
    );
    assert!(unit.contains("\"listen\" \"--profile\" \"home\""), "{unit}");
    // Empty or blank is unset, as config reads it.
    for blank in ["", "  "] {
        let unit = print_unit_env(&["--kind", "systemd"], &[("AGENTCHAT_PROFILE", blank)]);
        assert!(
            unit.contains("# --- agentchat-listen@default.service.d/install.conf ---"),
            "{unit}"
        );
    }
}

#[test]
fn a_profile_name_with_a_dot_that_config_accepts_can_be_installed() {
    let dir = tempfile::tempdir().unwrap();
    let unit = print_unit(&["--kind", "systemd", "--profile", "team.alpha"]);
    let diagnostics = systemd_verify(dir.path(), "agentchat-listen@team.alpha.service", &unit);
    assert!(diagnostics.is_empty(), "{diagnostics}\n{unit}");
    assert!(unit.contains("\"--profile\" \"team.alpha\""), "{unit}");
    let plist = print_unit(&["--kind", "launchd", "--profile", "team.alpha"]);
    assert_eq!(
        parse_plist(dir.path(), &plist)["Label"],
        "me.agentchat.listen.team.alpha"
    );
}

#[test]
fn the_systemd_unit_does_not_restart_on_a_config_error_or_a_listener_already_running() {
    let unit = print_unit(&["--kind", "systemd"]);
    let prevented: Vec<i32> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("RestartPreventExitStatus="))
        .flat_map(|codes| codes.split_whitespace().map(|c| c.parse::<i32>().unwrap()))
        .collect();
    for code in [
        agentchat::listen::EXIT_CONFIG,
        agentchat::listen::EXIT_ALREADY_RUNNING,
    ] {
        assert!(prevented.contains(&code), "{code} restarts:\n{unit}");
    }
    // The exit codes systemd treats as failures are exactly the ones it must not loop on.
    assert!(unit.lines().any(|l| l == "Restart=on-failure"), "{unit}");
    let dir = tempfile::tempdir().unwrap();
    let diagnostics = systemd_verify(dir.path(), "agentchat-listen@default.service", &unit);
    assert!(diagnostics.is_empty(), "{diagnostics}\n{unit}");
}

/// `agentchat service ARGS` as on a machine with no reachable systemd user manager, whatever
/// this machine has: HOME and the config dir in `home`, `XDG_RUNTIME_DIR` an empty directory and
/// no session bus address, so the real `systemctl --user` finds no manager to talk to. Never
/// `AGENTCHAT_SERVICE_DIR`: this is the real install path. `path` replaces PATH when given.
pub(crate) fn without_user_manager(
    home: &Path,
    args: &[&str],
    path: Option<&str>,
    env: &[(&str, &str)],
) -> std::process::Output {
    let runtime_dir = home.join("run");
    std::fs::create_dir_all(&runtime_dir).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("service")
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_RUNTIME_DIR", &runtime_dir)
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env_remove("AGENTCHAT_SERVICE_DIR")
        .env_remove("AGENTCHAT_CONFIG")
        .env_remove("AGENTCHAT_PROFILE");
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run agentchat")
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn install_without_a_user_manager_writes_nothing_and_says_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    let units = home.path().join(".config/systemd/user");
    let out = without_user_manager(home.path(), &["install", "--kind", "systemd"], None, &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("no systemd user manager answers")
            && stderr.contains("nothing was written"),
        "{stderr}"
    );
    assert!(stderr.contains("agentchat listen"), "{stderr}");
    if Path::new("/run/systemd/system").is_dir() {
        assert!(stderr.contains("loginctl enable-linger"), "{stderr}");
    } else {
        assert!(stderr.contains("does not run systemd"), "{stderr}");
    }
    assert!(!stdout.contains("wrote"), "{stdout}");
    assert!(
        !units
            .join("agentchat-listen@default.service.d/install.conf")
            .exists()
    );
    assert!(!units.join("agentchat-listen@.service").exists());

    // An earlier unit (written by hand, or by an install that could not start it) stays as it was.
    std::fs::create_dir_all(units.join("agentchat-listen@default.service.d")).unwrap();
    std::fs::write(
        units.join("agentchat-listen@default.service.d/install.conf"),
        "# earlier\n",
    )
    .unwrap();
    let out = without_user_manager(home.path(), &["install", "--kind", "systemd"], None, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(units.join("agentchat-listen@default.service.d/install.conf"))
            .unwrap(),
        "# earlier\n"
    );

    // `service status` says the unit is only written, and that no manager runs it.
    let out = without_user_manager(home.path(), &["status", "--kind", "systemd"], None, &[]);
    let stdout = text(&out.stdout);
    // systemctl's codes: 3 "not running" (nothing runs it), 4 once no unit is written.
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        stdout.contains("agentchat-listen@default.service.d/install.conf (written)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("manager: no service manager answers"),
        "{stdout}"
    );
    assert!(stdout.contains("agentchat listen"), "{stdout}");
    assert!(!stdout.contains("running: yes"), "{stdout}");
}

/// A stand-in `systemctl` that answers like a running user manager, except that `enable` fails;
/// every call is appended to `calls`.
pub(crate) fn refusing_systemctl(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let calls = dir.join("calls");
    let script = format!(
        "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$2\" in\n  enable) echo 'Failed to enable unit: \
         Access denied' >&2; exit 1 ;;\n  *) exit 0 ;;\nesac\n",
        calls.display()
    );
    let path = bin.join("systemctl");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    calls
}

#[test]
fn an_install_the_manager_refuses_leaves_the_unit_as_it_was_before() {
    let home = tempfile::tempdir().unwrap();
    let calls = refusing_systemctl(home.path());
    let path = format!("{}:/usr/bin:/bin", home.path().join("bin").display());
    let unit = home
        .path()
        .join(".config/systemd/user/agentchat-listen@default.service.d/install.conf");
    let template = home
        .path()
        .join(".config/systemd/user/agentchat-listen@.service");

    // No unit before: none after.
    let out = without_user_manager(
        home.path(),
        &["install", "--kind", "systemd"],
        Some(&path),
        &[],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("Access denied") && stderr.contains("removed"),
        "{stderr}"
    );
    assert!(!unit.exists(), "the refused unit was left behind");
    assert!(!template.exists(), "the refused template was left behind");

    // A unit before: the same bytes after.
    std::fs::create_dir_all(unit.parent().unwrap()).unwrap();
    std::fs::write(&unit, "# the earlier unit\n").unwrap();
    let out = without_user_manager(
        home.path(),
        &["install", "--kind", "systemd"],
        Some(&path),
        &[],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("put the previous"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&unit).unwrap(),
        "# the earlier unit\n"
    );

    // The manager was checked first (and whether the one-process unit runs), and reloaded again
    // after the undo.
    let calls = std::fs::read_to_string(calls).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(
        calls[..5],
        [
            "--user show-environment",
            "--user is-active agentchat-host.service",
            "--user daemon-reload",
            "--user enable --now agentchat-listen@default.service",
            "--user daemon-reload"
        ],
        "{calls:?}"
    );
}

#[test]
fn install_refuses_a_config_file_that_is_missing_or_does_not_load_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let out = agentchat(
        &["service", "install", "--config", missing.to_str().unwrap()],
        Some(dir.path()),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("does not exist") && stderr.contains("nope.toml"),
        "{stderr}"
    );

    let (_c, bad) = config_in("[listen]\nqiet_window = \"3s\"\n");
    let out = agentchat(
        &["service", "install", "--config", bad.to_str().unwrap()],
        Some(dir.path()),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("unknown config key `listen.qiet_window`"),
        "{stderr}"
    );

    // The same through the installing shell's AGENTCHAT_CONFIG.
    let out = agentchat_env(
        &["service", "install"],
        Some(dir.path()),
        &[("AGENTCHAT_CONFIG", missing.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(1));
    let written: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(written.is_empty(), "{written:?}");

    // A config that loads installs; the key sits in a key file, so there is no warning.
    let (cdir, good) = config_in("api_key_file = \"key\"\n[listen]\nruntime = \"script\"\n");
    let key = cdir.path().join("key");
    std::fs::write(&key, "ac_live_test").unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let out = agentchat(
        &["service", "install", "--config", good.to_str().unwrap()],
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn install_warns_when_the_service_would_have_no_key_from_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let out = agentchat_env(
        &["service", "install"],
        Some(dir.path()),
        &[("AGENTCHAT_API_KEY", "ac_live_only_in_this_shell")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no API key") && stderr.contains("api_key_file"),
        "{stderr}"
    );
    assert!(!stderr.contains("ac_live_only_in_this_shell"), "{stderr}");
}

#[test]
fn the_unit_carries_the_xdg_dirs_and_a_path_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("XDG_CONFIG_HOME", "/home/u/cfg"),
        ("XDG_STATE_HOME", "/home/u/state"),
        (
            "PATH",
            "/home/u/bin:/usr/bin:/bin:/usr/bin::/home/u/bin:/opt/a$b",
        ),
    ];
    let unit = print_unit_env(&["--kind", "systemd"], &env);
    let environment: Vec<&str> = unit
        .lines()
        .filter(|l| l.starts_with("Environment="))
        .collect();
    assert_eq!(
        environment,
        [
            "Environment=\"PATH=/home/u/bin:/usr/bin:/bin:/opt/a$b\"",
            "Environment=\"XDG_CONFIG_HOME=/home/u/cfg\"",
            "Environment=\"XDG_STATE_HOME=/home/u/state\"",
        ],
        "{unit}"
    );
    let diagnostics = systemd_verify(dir.path(), "agentchat-listen@default.service", &unit);
    assert!(diagnostics.is_empty(), "{diagnostics}\n{unit}");

    let plist = print_unit_env(&["--kind", "launchd"], &env);
    let parsed = parse_plist(dir.path(), &plist);
    assert_eq!(
        parsed["EnvironmentVariables"]["XDG_STATE_HOME"],
        "/home/u/state"
    );
    assert_eq!(
        parsed["EnvironmentVariables"]["PATH"],
        "/home/u/bin:/usr/bin:/bin:/opt/a$b"
    );

    // A relative XDG dir is ignored by the spec and by config, so the unit leaves it out.
    let unit = print_unit_env(&["--kind", "systemd"], &[("XDG_STATE_HOME", "state")]);
    assert!(!unit.contains("XDG_STATE_HOME"), "{unit}");
}

/// A stand-in `systemctl` for a running user manager whose unit is enabled but not active
/// (`is-enabled` prints `enabled`, `is-active` prints `failed` and exits 3, as systemctl does).
fn enabled_but_failed_systemctl(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = "#!/bin/sh\ncase \"$2\" in\n  is-enabled) echo enabled ;;\n  is-active) echo \
                  failed; exit 3 ;;\n  status) echo 'Active: failed (Result: exit-code)'; exit 3 \
                  ;;\nesac\nexit 0\n";
    let path = bin.join("systemctl");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn service_status_tells_written_enabled_and_running_apart() {
    let home = tempfile::tempdir().unwrap();
    enabled_but_failed_systemctl(home.path());
    let path = format!("{}:/usr/bin:/bin", home.path().join("bin").display());
    let units = home.path().join(".config/systemd/user");
    std::fs::create_dir_all(&units).unwrap();
    std::fs::create_dir_all(units.join("agentchat-listen@default.service.d")).unwrap();
    std::fs::write(
        units.join("agentchat-listen@default.service.d/install.conf"),
        "# written\n",
    )
    .unwrap();
    let out = without_user_manager(
        home.path(),
        &["status", "--kind", "systemd"],
        Some(&path),
        &[],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        stdout.contains("agentchat-listen@default.service.d/install.conf (written)"),
        "{stdout}"
    );
    assert!(stdout.contains("enabled: yes (enabled)"), "{stdout}");
    assert!(stdout.contains("running: no (failed)"), "{stdout}");
    assert!(stdout.contains("Active: failed"), "{stdout}");
}

#[test]
fn service_status_of_a_profile_with_no_unit_exits_4_like_systemctl() {
    let home = tempfile::tempdir().unwrap();
    let out = without_user_manager(home.path(), &["status", "--kind", "systemd"], None, &[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("(not written)"));
}

#[cfg(target_os = "linux")]
#[test]
fn install_with_launchd_on_linux_writes_nothing_and_creates_no_launch_agents_dir() {
    let home = tempfile::tempdir().unwrap();
    let (_d, config) = config_in("[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n");
    let config = config.display().to_string();
    for args in [
        &["install", "--kind", "launchd", "--config", &config][..],
        &["uninstall", "--kind", "launchd"][..],
    ] {
        let out = without_user_manager(home.path(), args, None, &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("nothing was written"), "{stderr}");
        assert!(
            !home.path().join("Library").exists(),
            "{args:?} left ~/Library behind"
        );
    }
}

#[test]
fn install_replaces_an_earlier_per_profile_unit_and_uninstall_all_removes_every_profiles_files() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, config) = config_in("[profiles.two]\n[profiles.three]\n");
    let config = config.to_str().unwrap();
    std::fs::write(dir.path().join("agentchat-listen-two.service"), "# old\n").unwrap();
    let out = agentchat(
        &[
            "service", "install", "--all", "--kind", "systemd", "--config", config,
        ],
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!dir.path().join("agentchat-listen-two.service").exists());
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "agentchat-listen@.service",
            "agentchat-listen@default.service.d",
            "agentchat-listen@three.service.d",
            "agentchat-listen@two.service.d"
        ]
    );
    // The template is written as shipped, the same for every profile.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("agentchat-listen@.service")).unwrap(),
        include_str!("../../systemd/agentchat-listen@.service")
    );
    // One profile leaves: the template stays for the others.
    let out = agentchat(
        &[
            "service",
            "uninstall",
            "--kind",
            "systemd",
            "--profile",
            "two",
        ],
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dir.path().join("agentchat-listen@.service").exists());
    let out = agentchat(
        &[
            "service",
            "uninstall",
            "--all",
            "--kind",
            "systemd",
            "--config",
            config,
        ],
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

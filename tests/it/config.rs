//! Layered config: precedence, profiles, key sources, and errors that name their key.

use agentchat::config::{
    ConfigArgs, ConfigError, ConfigFile, IntegrationSwitch, KeyFile, KeySource, LogFormat, McpMode,
    RuntimeKind, Settings, integration_switch, resolve,
};
use secrecy::ExposeSecret;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    let mut m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    m.entry("HOME".into()).or_insert_with(|| "/home/u".into());
    m
}

fn file(text: &str) -> Option<(&'static Path, &str)> {
    Some((Path::new("/etc/agentchat/config.toml"), text))
}

fn err_of(args: &ConfigArgs, e: &HashMap<String, String>, text: &str) -> ConfigError {
    match resolve(args, e, file(text)) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e,
    }
}

/// What `listen` loads: the one read of the file under `env`, the key file read.
fn load_with_env(
    args: &ConfigArgs,
    env: &HashMap<String, String>,
) -> Result<Settings, ConfigError> {
    ConfigFile::read_with_env(args, env.clone())?.settings(None, KeyFile::Read)
}

#[test]
fn defaults_apply_when_nothing_is_set() {
    let s = resolve(&ConfigArgs::default(), &env(&[]), None).unwrap();
    assert_eq!(s.profile, "default");
    assert_eq!(s.api_base, "https://api.agentchat.me");
    assert_eq!(s.key_source, KeySource::Missing);
    assert!(s.api_key.is_none());
    assert_eq!(s.log_level, "info");
    assert_eq!(s.log_format, LogFormat::Text);
    assert_eq!(
        s.state_dir,
        PathBuf::from("/home/u/.local/state/agentchat/default")
    );
    let l = &s.listen;
    assert_eq!(l.runtime, RuntimeKind::ClaudeCode);
    assert!(l.command.is_empty());
    assert_eq!(l.workdir, None);
    assert_eq!(l.run_timeout, Duration::from_secs(900));
    assert_eq!(l.kill_grace, Duration::from_secs(10));
    assert_eq!(l.quiet_window, Duration::from_secs(3));
    assert_eq!(l.max_delay, Duration::from_secs(15));
    assert_eq!(l.idle_timeout, Duration::from_secs(100));
    assert!(l.script_gets_key);
    assert!(l.identity_block);
    assert_eq!(l.run_logs_keep, 50);
    assert_eq!(l.run_log_max_bytes, 2 * 1024 * 1024);
    assert_eq!(l.claude.mcp, McpMode::Listener);
    assert!(l.claude.binary.is_none() && l.codex.binary.is_none());
}

#[test]
fn file_values_are_read_with_humantime_durations() {
    let text = r#"
log_level = "DEBUG"
log_format = "json"
[listen]
runtime = "script"
command = ["my-agent", "--fast"]
workdir = "agent-home"
run_timeout = "1h 30m"
kill_grace = "500ms"
quiet_window = "0s"
max_delay = "2m"
idle_timeout = "2m"
script_gets_key = false
identity_block = false
run_logs_keep = 7
[listen.claude]
binary = "bin/claude"
extra_args = ["--model", "x"]
mcp = "user"
mcp_url = "http://127.0.0.1:9/mcp/"
[listen.codex]
binary = "codex-nightly"
extra_args = ["-c", "a=b"]
"#;
    let s = resolve(&ConfigArgs::default(), &env(&[]), file(text)).unwrap();
    assert_eq!(s.log_level, "debug");
    assert_eq!(s.log_format, LogFormat::Json);
    let l = &s.listen;
    assert_eq!(l.runtime, RuntimeKind::Script);
    assert_eq!(l.command, vec!["my-agent", "--fast"]);
    // Relative paths are relative to the config file's folder.
    assert_eq!(l.workdir, Some(PathBuf::from("/etc/agentchat/agent-home")));
    assert_eq!(l.run_timeout, Duration::from_secs(5400));
    assert_eq!(l.kill_grace, Duration::from_millis(500));
    assert_eq!(l.quiet_window, Duration::ZERO);
    assert_eq!(l.max_delay, Duration::from_secs(120));
    assert_eq!(l.idle_timeout, Duration::from_secs(120));
    assert!(!l.script_gets_key);
    assert!(!l.identity_block);
    assert_eq!(l.run_logs_keep, 7);
    assert_eq!(
        l.claude.binary,
        Some(PathBuf::from("/etc/agentchat/bin/claude"))
    );
    assert_eq!(l.claude.extra_args, vec!["--model", "x"]);
    assert_eq!(l.claude.mcp, McpMode::User);
    assert_eq!(l.claude.mcp_url.as_deref(), Some("http://127.0.0.1:9/mcp"));
    // A bare binary name stays bare, to be looked up on PATH.
    assert_eq!(l.codex.binary, Some(PathBuf::from("codex-nightly")));
    assert_eq!(l.codex.extra_args, vec!["-c", "a=b"]);
}

#[test]
fn environment_beats_file_and_flags_beat_environment() {
    let text = "api_base = \"https://file.example\"\nlog_level = \"warn\"\n[listen]\nruntime = \"codex\"\n";
    let none = ConfigArgs::default();
    let s = resolve(&none, &env(&[]), file(text)).unwrap();
    assert_eq!(s.api_base, "https://file.example");
    assert_eq!(s.listen.runtime, RuntimeKind::Codex);
    assert_eq!(s.log_level, "warn");

    let e = env(&[
        ("AGENTCHAT_API_BASE", "https://env.example/"),
        ("AGENTCHAT_RUNTIME", "script"),
        ("AGENTCHAT_LOG", "trace"),
        ("AGENTCHAT_LOG_FORMAT", "json"),
        ("AGENTCHAT_STATE_DIR", "/var/env-state"),
    ]);
    let s = resolve(&none, &e, file(text)).unwrap();
    assert_eq!(s.api_base, "https://env.example");
    assert_eq!(s.listen.runtime, RuntimeKind::Script);
    assert_eq!(s.log_level, "trace");
    assert_eq!(s.log_format, LogFormat::Json);
    assert_eq!(s.state_dir, PathBuf::from("/var/env-state"));

    let flags = ConfigArgs {
        api_base: Some("http://127.0.0.1:8080".into()),
        runtime: Some(RuntimeKind::ClaudeCode),
        state_dir: Some("/tmp/flag-state".into()),
        ..ConfigArgs::default()
    };
    let s = resolve(&flags, &e, file(text)).unwrap();
    assert_eq!(s.api_base, "http://127.0.0.1:8080");
    assert_eq!(s.listen.runtime, RuntimeKind::ClaudeCode);
    assert_eq!(s.state_dir, PathBuf::from("/tmp/flag-state"));
}

#[test]
fn unknown_keys_are_named_with_their_table_path() {
    let none = ConfigArgs::default();
    let e = env(&[]);
    for (text, key) in [
        ("api_bsae = \"x\"", "api_bsae"),
        ("[listen]\nqiet_window = \"3s\"", "listen.qiet_window"),
        ("[listen.claude]\nmcp_uri = \"x\"", "listen.claude.mcp_uri"),
        ("[listen.codex]\nmcp = \"user\"", "listen.codex.mcp"),
        (
            "[profiles.work.listen]\nrun_timout = \"1m\"",
            "profiles.work.listen.run_timout",
        ),
        (
            "[profiles.work.profiles.x]\nlog_level = \"info\"",
            "profiles.work.profiles",
        ),
        ("[surprise]\na = 1", "surprise"),
    ] {
        match err_of(&none, &e, text) {
            ConfigError::UnknownKey(k) => assert_eq!(k, key, "for {text:?}"),
            other => panic!("{text:?}: expected UnknownKey({key}), got {other}"),
        }
        assert!(
            err_of(&none, &e, text).to_string().contains(key),
            "the message names {key}"
        );
    }
}

#[test]
fn bad_values_name_the_key_and_the_problem() {
    let none = ConfigArgs::default();
    let e = env(&[]);
    for (text, key, problem) in [
        (
            "[listen]\nquiet_window = \"3 parsecs\"",
            "listen.quiet_window",
            "not a duration",
        ),
        (
            "[listen]\nrun_timeout = 900",
            "listen.run_timeout",
            "duration string",
        ),
        (
            "[listen]\nrun_timeout = \"0s\"",
            "listen.run_timeout",
            "longer than zero",
        ),
        (
            "[listen]\nruntime = \"gpt\"",
            "listen.runtime",
            "claude-code, codex or script",
        ),
        (
            "[listen]\ncommand = \"run.sh\"",
            "listen.command",
            "array of strings",
        ),
        ("[listen]\ncommand = [\"a\", 3]", "listen.command", "item 1"),
        (
            "[listen]\nscript_gets_key = \"yes\"",
            "listen.script_gets_key",
            "true or false",
        ),
        (
            "[listen]\nrun_logs_keep = 0",
            "listen.run_logs_keep",
            "at least 1",
        ),
        (
            "[listen]\nrun_log_max_bytes = 1000",
            "listen.run_log_max_bytes",
            "between 65536 and 67108864",
        ),
        (
            "[listen]\nrun_log_max_bytes = 1000000000",
            "listen.run_log_max_bytes",
            "between 65536 and 67108864",
        ),
        (
            "[listen.claude]\nmcp = \"mine\"",
            "listen.claude.mcp",
            "listener",
        ),
        ("api_base = \"ftp://x\"", "api_base", "https://"),
        ("api_base = \"not a url\"", "api_base", "not a URL"),
        ("log_level = \"loud\"", "log_level", "error, warn"),
        ("log_format = \"xml\"", "log_format", "text or json"),
        ("listen = 3", "listen", "table"),
        (
            "[profiles.work.listen]\nmax_delay = \"soon\"",
            "profiles.work.listen.max_delay",
            "duration",
        ),
        (
            "[profiles.\"../up\"]\nlog_level = \"info\"",
            "profiles.../up",
            "profile name",
        ),
    ] {
        match err_of(&none, &e, text) {
            ConfigError::BadValue { key: k, problem: p } => {
                assert_eq!(k, key, "for {text:?}");
                assert!(
                    p.contains(problem),
                    "{text:?}: problem {p:?} lacks {problem:?}"
                );
            }
            other => panic!("{text:?}: expected BadValue({key}), got {other}"),
        }
    }
    // Environment and flag values are named by their variable or flag.
    let bad_env = env(&[("AGENTCHAT_RUNTIME", "vim")]);
    match resolve(&none, &bad_env, None) {
        Err(ConfigError::BadValue { key, .. }) => assert_eq!(key, "AGENTCHAT_RUNTIME"),
        other => panic!("expected BadValue, got {:?}", other.map(|_| ())),
    }
    let bad_flag = ConfigArgs {
        api_base: Some("localhost".into()),
        ..ConfigArgs::default()
    };
    match resolve(&bad_flag, &e, None) {
        Err(ConfigError::BadValue { key, .. }) => assert_eq!(key, "--api-base"),
        other => panic!("expected BadValue, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn each_duration_key_refuses_values_outside_its_bounds_naming_the_bound() {
    let none = ConfigArgs::default();
    let e = env(&[]);
    for (key, value, bound) in [
        ("run_timeout", "999999y", "at most 1day"),
        ("run_timeout", "500ms", "at least 1s"),
        ("kill_grace", "3years", "at most 5m"),
        ("quiet_window", "2m", "at most 1m"),
        ("max_delay", "1h", "at most 10m"),
        ("max_delay", "200ms", "at least 1s"),
        ("idle_timeout", "1ms", "at least 1m 30s"),
        ("idle_timeout", "89s", "at least 1m 30s"),
        ("idle_timeout", "1h", "at most 10m"),
    ] {
        let text = format!("[profiles.work.listen]\n{key} = \"{value}\"\n");
        let work = ConfigArgs {
            profile: Some("work".into()),
            ..ConfigArgs::default()
        };
        match resolve(&work, &e, file(&text)) {
            Err(ConfigError::BadValue { key: k, problem }) => {
                assert_eq!(k, format!("profiles.work.listen.{key}"), "{text}");
                assert!(problem.contains(bound), "{text}: {problem}");
            }
            other => panic!("{text}: expected BadValue, got {:?}", other.map(|_| ())),
        }
    }
    // Each bound itself is allowed; the heartbeat rule is the contract's 2 x 45 s.
    let edges = "[listen]\nrun_timeout = \"1s\"\nkill_grace = \"5m\"\nquiet_window = \"1m\"\nmax_delay = \"10m\"\nidle_timeout = \"90s\"\n";
    let s = resolve(&none, &e, file(edges)).unwrap();
    assert_eq!(s.listen.idle_timeout, Duration::from_secs(90));
    assert_eq!(s.listen.kill_grace, Duration::from_secs(300));
    let s = resolve(
        &none,
        &e,
        file("[listen]\nrun_timeout = \"24h\"\nkill_grace = \"0s\"\nquiet_window = \"0s\"\nidle_timeout = \"10m\"\n"),
    )
    .unwrap();
    assert_eq!(s.listen.run_timeout, Duration::from_secs(86_400));
    match resolve(&none, &e, file("[listen]\nrun_logs_keep = 1000000\n")) {
        Err(ConfigError::BadValue { key, problem }) => {
            assert_eq!(key, "listen.run_logs_keep");
            assert!(problem.contains("at most 10000"), "{problem}");
        }
        other => panic!("expected BadValue, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn the_idle_timeout_minimum_follows_a_test_servers_scaled_heartbeat() {
    // A local test server whose timers run 100 times faster heartbeats every 0.45 s.
    let text = "api_base = \"http://127.0.0.1:8080\"\n[listen]\nidle_timeout = \"2s\"\n";
    let scaled = env(&[("AGENTCHAT_TEST_TIME_SCALE", "100")]);
    let s = resolve(&ConfigArgs::default(), &scaled, file(text)).unwrap();
    assert_eq!(s.listen.idle_timeout, Duration::from_secs(2));
    match resolve(&ConfigArgs::default(), &env(&[]), file(text)) {
        Err(ConfigError::BadValue { key, problem }) => {
            assert_eq!(key, "listen.idle_timeout");
            assert!(problem.contains("45 s"), "the reason is given: {problem}");
        }
        other => panic!("expected BadValue, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn messages_suggest_the_fix_for_a_bare_host_and_a_malformed_duration() {
    let none = ConfigArgs::default();
    let e = env(&[]);
    match err_of(&none, &e, "api_base = \"api.agentchat.me\"") {
        ConfigError::BadValue { key, problem } => {
            assert_eq!(key, "api_base");
            assert!(problem.contains("`https://api.agentchat.me`"), "{problem}");
            assert!(!problem.contains("relative URL"), "{problem}");
        }
        other => panic!("expected BadValue, got {other}"),
    }
    let flag = ConfigArgs {
        api_base: Some("localhost:8080".into()),
        ..ConfigArgs::default()
    };
    match resolve(&flag, &e, None) {
        Err(ConfigError::BadValue { key, problem }) => {
            assert_eq!(key, "--api-base");
            assert!(problem.contains("`https://localhost:8080`"), "{problem}");
        }
        other => panic!("expected BadValue, got {:?}", other.map(|_| ())),
    }
    for (value, says) in [
        ("-5s", "cannot be negative"),
        ("5 parsecs", "`parsecs` is not a unit"),
        ("soon", "write a number and a unit"),
        ("", "empty"),
    ] {
        match err_of(&none, &e, &format!("[listen]\nmax_delay = \"{value}\"")) {
            ConfigError::BadValue { key, problem } => {
                assert_eq!(key, "listen.max_delay");
                assert!(problem.contains(says), "{value:?}: {problem}");
                assert!(
                    problem.contains("\"15m\""),
                    "what a duration looks like: {problem}"
                );
                assert!(!problem.contains("expected number"), "{problem}");
            }
            other => panic!("expected BadValue, got {other}"),
        }
    }
}

#[test]
fn a_missing_key_file_is_named_as_the_key_file_and_the_os_error_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, "api_key_file = \"nope.key\"\n").unwrap();
    let args = ConfigArgs {
        config: Some(cfg.clone()),
        state_dir: Some(dir.path().join("state")),
        ..ConfigArgs::default()
    };
    let err = load_with_env(&args, &env(&[])).unwrap_err();
    assert!(matches!(err, ConfigError::KeyFile { .. }), "{err:?}");
    let chain = format!("{:#}", anyhow::Error::from(err));
    assert!(chain.contains("api_key_file"), "{chain}");
    assert!(chain.contains("nope.key"), "{chain}");
    assert!(!chain.contains("config file"), "{chain}");
    assert_eq!(chain.matches("os error 2").count(), 1, "{chain}");

    // The config file itself: named as such, its OS error once.
    let missing = ConfigArgs {
        config: Some(dir.path().join("absent.toml")),
        ..args
    };
    let chain = format!(
        "{:#}",
        anyhow::Error::from(load_with_env(&missing, &env(&[])).unwrap_err())
    );
    assert!(chain.contains("config file"), "{chain}");
    assert_eq!(chain.matches("os error 2").count(), 1, "{chain}");

    // A directory named as the key file is said to be one.
    std::fs::create_dir(dir.path().join("keys")).unwrap();
    std::fs::write(&cfg, "api_key_file = \"keys\"\n").unwrap();
    let args = ConfigArgs {
        config: Some(cfg.clone()),
        state_dir: Some(dir.path().join("state")),
        ..ConfigArgs::default()
    };
    let err = load_with_env(&args, &env(&[])).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("(`api_key_file`) is a directory; name the file that holds the key"),
        "{err}"
    );
}

#[test]
fn invalid_toml_reports_line_without_quoting_the_file() {
    let text = "log_level = \"info\"\napi_key = \"ac_secret_value_123\n";
    match err_of(&ConfigArgs::default(), &env(&[]), text) {
        ConfigError::Toml { path, message } => {
            assert_eq!(path, PathBuf::from("/etc/agentchat/config.toml"));
            assert!(message.contains("line 2"), "{message}");
            assert!(!message.contains("ac_secret_value_123"), "{message}");
        }
        other => panic!("expected Toml, got {other}"),
    }
}

#[test]
fn profile_table_overrides_the_top_level_and_gets_its_own_state_dir() {
    let text = r#"
api_base = "https://top.example"
[listen]
runtime = "codex"
quiet_window = "4s"
[profiles.work]
api_base = "https://work.example"
[profiles.work.listen]
quiet_window = "9s"
[profiles.other.listen]
runtime = "script"
"#;
    let work = ConfigArgs {
        profile: Some("work".into()),
        ..ConfigArgs::default()
    };
    let s = resolve(&work, &env(&[]), file(text)).unwrap();
    assert_eq!(s.profile, "work");
    assert_eq!(s.api_base, "https://work.example");
    assert_eq!(s.listen.quiet_window, Duration::from_secs(9));
    // Not overridden: inherited from the top level.
    assert_eq!(s.listen.runtime, RuntimeKind::Codex);
    assert_eq!(
        s.state_dir,
        PathBuf::from("/home/u/.local/state/agentchat/work")
    );

    // The default profile is the top level alone.
    let s = resolve(&ConfigArgs::default(), &env(&[]), file(text)).unwrap();
    assert_eq!(s.api_base, "https://top.example");
    assert_eq!(s.listen.quiet_window, Duration::from_secs(4));

    // AGENTCHAT_PROFILE picks a profile; --profile beats it.
    let e = env(&[("AGENTCHAT_PROFILE", "other"), ("XDG_STATE_HOME", "/xdg")]);
    let s = resolve(&ConfigArgs::default(), &e, file(text)).unwrap();
    assert_eq!(s.profile, "other");
    assert_eq!(s.listen.runtime, RuntimeKind::Script);
    assert_eq!(s.state_dir, PathBuf::from("/xdg/agentchat/other"));
    let s = resolve(&work, &e, file(text)).unwrap();
    assert_eq!(s.profile, "work");

    // A profile name that is not a plain directory name is refused.
    let evil = ConfigArgs {
        profile: Some("../etc".into()),
        ..ConfigArgs::default()
    };
    match resolve(&evil, &env(&[]), None) {
        Err(ConfigError::BadValue { key, .. }) => assert_eq!(key, "--profile"),
        other => panic!("expected BadValue, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_profile_without_its_table_is_an_error_naming_the_profiles_that_exist() {
    let text =
        "[profiles.work]\nlog_level = \"warn\"\n[profiles.home.listen]\nruntime = \"codex\"\n";
    let typo = ConfigArgs {
        profile: Some("wrok".into()),
        ..ConfigArgs::default()
    };
    match resolve(&typo, &env(&[]), file(text)) {
        Err(e @ ConfigError::UnknownProfile { .. }) => {
            let msg = e.to_string();
            for part in ["`wrok`", "[profiles.wrok]", "`default`", "`home`", "`work`"] {
                assert!(msg.contains(part), "{part} in {msg}");
            }
            assert!(msg.contains("/etc/agentchat/config.toml"), "{msg}");
        }
        other => panic!("expected UnknownProfile, got {:?}", other.map(|_| ())),
    }
    // AGENTCHAT_PROFILE is held to the same rule; so is a profile with no config file at all.
    let e = env(&[("AGENTCHAT_PROFILE", "solo")]);
    assert!(matches!(
        resolve(&ConfigArgs::default(), &e, file(text)),
        Err(ConfigError::UnknownProfile { .. })
    ));
    match resolve(&ConfigArgs::default(), &e, None) {
        Err(e @ ConfigError::UnknownProfile { .. }) => {
            assert!(e.to_string().contains("no config file"), "{e}")
        }
        other => panic!("expected UnknownProfile, got {:?}", other.map(|_| ())),
    }
    // Only `default` needs no table, with or without a file.
    let default = ConfigArgs {
        profile: Some("default".into()),
        ..ConfigArgs::default()
    };
    assert!(resolve(&default, &env(&[]), file(text)).is_ok());
    assert!(resolve(&default, &env(&[]), None).is_ok());
}

#[test]
fn no_home_and_no_override_is_a_clear_error() {
    let e: HashMap<String, String> = HashMap::new();
    match resolve(&ConfigArgs::default(), &e, None) {
        Err(ConfigError::BadValue { key, problem }) => {
            assert_eq!(key, "state_dir");
            assert!(problem.contains("AGENTCHAT_STATE_DIR"));
        }
        other => panic!("expected BadValue, got {:?}", other.map(|_| ())),
    }
    let e = HashMap::from([("AGENTCHAT_STATE_DIR".to_string(), "/s".to_string())]);
    assert_eq!(
        resolve(&ConfigArgs::default(), &e, None).unwrap().state_dir,
        PathBuf::from("/s")
    );
}

#[test]
fn key_comes_from_env_then_key_file_then_config() {
    let none = ConfigArgs::default();
    let text = "api_key_file = \"keys/k\"\napi_key = \"ac_from_config\"";
    let s = resolve(
        &none,
        &env(&[("AGENTCHAT_API_KEY", " ac_from_env\n")]),
        file(text),
    )
    .unwrap();
    assert_eq!(s.key_source, KeySource::Env);
    assert_eq!(s.api_key.unwrap().expose_secret(), "ac_from_env");

    // resolve is pure: the key file is named (relative to the config file), not read.
    let s = resolve(&none, &env(&[]), file(text)).unwrap();
    assert_eq!(
        s.key_source,
        KeySource::File(PathBuf::from("/etc/agentchat/keys/k"))
    );
    assert!(s.api_key.is_none());

    let s = resolve(&none, &env(&[]), file("api_key = \"ac_from_config\"")).unwrap();
    assert_eq!(s.key_source, KeySource::Config);
    assert_eq!(s.api_key.unwrap().expose_secret(), "ac_from_config");

    // An empty AGENTCHAT_API_KEY counts as unset.
    let s = resolve(&none, &env(&[("AGENTCHAT_API_KEY", "")]), None).unwrap();
    assert_eq!(s.key_source, KeySource::Missing);
}

#[test]
fn debug_of_settings_never_shows_the_key() {
    let s = resolve(
        &ConfigArgs::default(),
        &env(&[("AGENTCHAT_API_KEY", "ac_topsecret_4242")]),
        None,
    )
    .unwrap();
    let dbg = format!("{s:?} {s:#?}");
    assert!(!dbg.contains("ac_topsecret_4242"), "{dbg}");
    assert!(dbg.contains("Env"), "the source is still shown: {dbg}");
}

#[cfg(unix)]
#[test]
fn load_reads_a_private_key_file_and_refuses_a_readable_one() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, "ac_file_key_77\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, "api_key_file = \"key\"\n").unwrap();
    let args = ConfigArgs {
        config: Some(cfg.clone()),
        state_dir: Some(dir.path().join("state")),
        ..ConfigArgs::default()
    };
    let s = load_with_env(&args, &env(&[])).unwrap();
    assert_eq!(s.key_source, KeySource::File(key.clone()));
    assert_eq!(s.api_key.unwrap().expose_secret(), "ac_file_key_77");
    assert_eq!(s.config_path, Some(cfg.clone()));

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = load_with_env(&args, &env(&[])).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("api_key_file") && msg.contains("chmod 600"),
        "{msg}"
    );
    assert!(!msg.contains("ac_file_key_77"), "{msg}");

    // The environment still wins without touching the unsafe file.
    let s = load_with_env(&args, &env(&[("AGENTCHAT_API_KEY", "ac_env")])).unwrap();
    assert_eq!(s.key_source, KeySource::Env);
}

#[test]
fn load_requires_a_named_config_file_to_exist() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let e = env(&[("AGENTCHAT_CONFIG", missing.to_str().unwrap())]);
    match load_with_env(&ConfigArgs::default(), &e) {
        Err(ConfigError::Read { path, .. }) => assert_eq!(path, missing),
        other => panic!("expected Read, got {:?}", other.map(|_| ())),
    }
    // AGENTCHAT_CONFIG names the file when there is no flag.
    let present = dir.path().join("c.toml");
    std::fs::write(&present, "[listen]\nruntime = \"script\"\n").unwrap();
    let e = env(&[
        ("AGENTCHAT_CONFIG", present.to_str().unwrap()),
        ("AGENTCHAT_STATE_DIR", dir.path().to_str().unwrap()),
    ]);
    let s = load_with_env(&ConfigArgs::default(), &e).unwrap();
    assert_eq!(s.listen.runtime, RuntimeKind::Script);
}

#[test]
fn shipped_example_config_parses_for_every_profile() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/agentchat.example.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let s = resolve(&ConfigArgs::default(), &env(&[]), Some((&path, &text))).unwrap();
    assert_eq!(s.listen.runtime, RuntimeKind::ClaudeCode);
    assert_eq!(s.listen.run_timeout, Duration::from_secs(900));
    // Every duration it sets is the default the code uses.
    let l = &s.listen;
    for rule in agentchat::config::value::DURATION_RULES {
        let shown = match rule.key {
            "run_timeout" => l.run_timeout,
            "kill_grace" => l.kill_grace,
            "quiet_window" => l.quiet_window,
            "max_delay" => l.max_delay,
            "idle_timeout" => l.idle_timeout,
            other => panic!("a duration key the example does not show: {other}"),
        };
        assert_eq!(shown, rule.default, "{}", rule.key);
        assert!(text.contains(&format!("{} = \"", rule.key)), "{}", rule.key);
    }
    let work = ConfigArgs {
        profile: Some("work".into()),
        ..ConfigArgs::default()
    };
    let s = resolve(&work, &env(&[]), Some((&path, &text))).unwrap();
    assert_eq!(s.listen.runtime, RuntimeKind::Script);
    assert_eq!(s.listen.quiet_window, Duration::from_secs(5));
    assert_eq!(
        s.key_source,
        KeySource::File(PathBuf::from("/home/u/.config/agentchat/work.key"))
    );
    // Every `[listen.policy]` key has a commented sample beside what it does (the top level sets
    // none: the bounded defaults of issue 38), and the profile's own example parses.
    let top = resolve(&ConfigArgs::default(), &env(&[]), Some((&path, &text))).unwrap();
    assert_eq!(
        top.listen.policy,
        agentchat::core::policy::PolicyLayer::default().resolve()
    );
    let policy = text
        .split("\n[listen.policy]\n")
        .nth(1)
        .expect("a [listen.policy] table")
        .split("\n[")
        .next()
        .unwrap();
    for key in [
        "quiet_hours",
        "timezone",
        "max_runs_per_hour",
        "max_runs_per_day",
        "max_cost_per_day_usd",
        "max_tokens_per_day",
        "max_cost_per_run_usd",
        "first_contact",
        "groups",
        "allow",
        "deny",
        "loop_guard",
    ] {
        assert!(
            policy.contains(&format!("\n# {key} = ")),
            "{key} has no commented sample in [listen.policy]"
        );
    }
    assert_eq!(s.listen.policy.max_runs_per_hour, Some(12));
    assert_eq!(
        s.listen.policy.first_contact,
        agentchat::core::policy::FirstContact::Wait
    );
}

#[test]
fn integration_switch_honours_off_and_the_deprecated_doorbell_until_its_date() {
    assert_eq!(
        integration_switch(&env(&[]), "2026-11-30"),
        IntegrationSwitch::On
    );
    assert_eq!(
        integration_switch(&env(&[("AGENTCHAT_INTEGRATION", "off")]), "2026-11-30"),
        IntegrationSwitch::Off
    );
    assert_eq!(
        integration_switch(&env(&[("AGENTCHAT_INTEGRATION", "on")]), "2026-11-30"),
        IntegrationSwitch::On
    );
    let door = env(&[("AGENTCHAT_DOORBELL", "OFF")]);
    match integration_switch(&door, "2027-01-31") {
        IntegrationSwitch::OffDeprecated(w) => assert!(w.contains("AGENTCHAT_INTEGRATION=off")),
        other => panic!("{other:?}"),
    }
    match integration_switch(&door, "2027-02-01") {
        IntegrationSwitch::IgnoredDeprecated(w) => assert!(w.contains("ignored")),
        other => panic!("{other:?}"),
    }
    // The new switch wins over the old one on any day.
    let both = env(&[
        ("AGENTCHAT_DOORBELL", "off"),
        ("AGENTCHAT_INTEGRATION", "off"),
    ]);
    assert_eq!(
        integration_switch(&both, "2028-01-01"),
        IntegrationSwitch::Off
    );
}

#[test]
fn command_program_path_is_made_absolute_but_a_bare_name_stays_bare() {
    let s = resolve(
        &ConfigArgs::default(),
        &env(&[]),
        file("[listen]\ncommand = [\"bin/agent.sh\", \"bin/arg\"]"),
    )
    .unwrap();
    assert_eq!(
        s.listen.command,
        vec!["/etc/agentchat/bin/agent.sh", "bin/arg"]
    );
    let s = resolve(
        &ConfigArgs::default(),
        &env(&[]),
        file("[listen]\ncommand = [\"~/agent\"]"),
    )
    .unwrap();
    assert_eq!(s.listen.command, vec!["/home/u/agent"]);
}

#[test]
fn advice_flags_a_key_in_the_file_an_empty_script_and_odd_windows_without_the_key() {
    use agentchat::config::advice;
    let s = resolve(
        &ConfigArgs::default(),
        &env(&[]),
        file(
            "api_key = \"ac_in_file_123\"\n[listen]\nruntime = \"script\"\nquiet_window = \"20s\"\nmax_delay = \"5s\"\n",
        ),
    )
    .unwrap();
    let lines = advice(&s);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].contains("api_key_file"));
    assert!(lines[1].contains("`command`"));
    assert!(lines[2].contains("listen.max_delay"));
    assert!(lines.iter().all(|l| !l.contains("ac_in_file_123")));

    let ok = resolve(
        &ConfigArgs::default(),
        &env(&[("AGENTCHAT_API_KEY", "ac_env")]),
        None,
    )
    .unwrap();
    assert!(advice(&ok).is_empty(), "{:?}", advice(&ok));
    let missing = resolve(&ConfigArgs::default(), &env(&[]), None).unwrap();
    assert!(advice(&missing)[0].contains("no API key"));
    assert!(advice(&missing)[0].contains("`agentchat setup`"));
}

#[test]
fn runtime_log_format_and_mcp_mode_follow_one_rule_from_every_source() {
    // Any case, surrounding spaces ignored, from the file and the environment alike.
    let text = "log_format = \" JSON \"\n[listen]\nruntime = \"Script\"\n[listen.claude]\nmcp = \"USER\"\n";
    let s = resolve(&ConfigArgs::default(), &env(&[]), file(text)).unwrap();
    assert_eq!(s.log_format, LogFormat::Json);
    assert_eq!(s.listen.runtime, RuntimeKind::Script);
    assert_eq!(s.listen.claude.mcp, McpMode::User);
    let e = env(&[
        ("AGENTCHAT_RUNTIME", "Codex"),
        ("AGENTCHAT_LOG_FORMAT", "Text"),
    ]);
    let s = resolve(&ConfigArgs::default(), &e, file(text)).unwrap();
    assert_eq!(s.listen.runtime, RuntimeKind::Codex);
    assert_eq!(s.log_format, LogFormat::Text);
    // The names every message lists come from the same table.
    match resolve(
        &ConfigArgs::default(),
        &env(&[("AGENTCHAT_LOG_FORMAT", "xml")]),
        None,
    ) {
        Err(ConfigError::BadValue { key, problem }) => {
            assert_eq!(key, "AGENTCHAT_LOG_FORMAT");
            assert!(problem.contains("text or json"), "{problem}");
        }
        other => panic!("expected BadValue, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn agentchat_log_and_log_level_take_a_level_or_a_tracing_filter() {
    let none = ConfigArgs::default();
    let s = resolve(&none, &env(&[("AGENTCHAT_LOG", "agentchat=debug")]), None).unwrap();
    assert_eq!(s.log_level, "agentchat=debug");
    let s = resolve(
        &none,
        &env(&[]),
        file("log_level = \"agentchat=DEBUG, warn\""),
    )
    .unwrap();
    assert_eq!(
        s.log_level, "agentchat=debug,warn",
        "levels come back lower case"
    );
    // The environment still wins over the file, filter or not.
    let s = resolve(
        &none,
        &env(&[("AGENTCHAT_LOG", "warn")]),
        file("log_level = \"agentchat=trace\""),
    )
    .unwrap();
    assert_eq!(s.log_level, "warn");
    // A word that is not a level is a typo, not a target shown at every level.
    for bad in ["loud", "agentchat=loud", "=debug", "info,"] {
        match resolve(&none, &env(&[("AGENTCHAT_LOG", bad)]), None) {
            Err(ConfigError::BadValue { key, problem }) => {
                assert_eq!(key, "AGENTCHAT_LOG", "{bad}");
                assert!(problem.contains("agentchat=debug"), "{bad}: {problem}");
            }
            other => panic!("{bad}: expected BadValue, got {:?}", other.map(|_| ())),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The binary: what a user sees from each command
// ---------------------------------------------------------------------------------------------

const BIN: &str = env!("CARGO_BIN_EXE_agentchat");

/// The binary with none of the outer environment's AGENTCHAT_* variables, a private HOME (so no
/// user config is read) and a state dir in `dir`.
fn agentchat(dir: &Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd =
        tokio::process::Command::from(crate::common::isolated_command(BIN, &["NOTIFY_SOCKET"]));
    cmd.args(args);
    cmd.env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("AGENTCHAT_STATE_DIR", dir.join("state"))
        .env("AGENTCHAT_SERVICE_DIR", dir.join("units"))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    cmd
}

struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn run(mut cmd: tokio::process::Command) -> Output {
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the command ends within a minute")
        .unwrap();
    Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The local server in this test's runtime, with one agent, `bob`.
struct LocalServer {
    api_base: String,
    key: String,
    _handle: agentchat::sim::SimHandle,
}

async fn local_server() -> LocalServer {
    agentchat::sys::tls::install_crypto_provider();
    let handle = agentchat::sim::start(agentchat::sim::SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        time_scale: 1.0,
        seed_demo: false,
    })
    .await
    .expect("sim starts");
    let bob: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/_sim/agents", handle.api_base))
        .json(&serde_json::json!({ "handle": "bob" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    LocalServer {
        api_base: handle.api_base.clone(),
        key: bob["api_key"].as_str().unwrap().to_string(),
        _handle: handle,
    }
}

/// `listen --once` for bob on the local server, with the script runtime and a config in `dir`.
fn listen_once(dir: &Path, server: &LocalServer) -> tokio::process::Command {
    let config = dir.join("config.toml");
    if !config.exists() {
        std::fs::write(
            &config,
            "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n",
        )
        .unwrap();
    }
    let mut cmd = agentchat(
        dir,
        &["listen", "--once", "--config", config.to_str().unwrap()],
    );
    cmd.env("AGENTCHAT_API_BASE", &server.api_base)
        .env("AGENTCHAT_API_KEY", &server.key);
    cmd
}

#[test]
fn listen_help_lists_the_runtimes_and_log_formats() {
    let out = std::process::Command::new(BIN)
        .args(["listen", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("possible values: claude-code, codex, script"),
        "{help}"
    );
    assert!(help.contains("possible values: text, json"), "{help}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flag_listen_cannot_use_exits_78_naming_the_flag_and_the_choices() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value, choices) in [
        ("--runtime", "gpt", "claude-code"),
        ("--log-format", "xml", "json"),
    ] {
        let out = run(agentchat(dir.path(), &["listen", flag, value])).await;
        assert_eq!(out.code, Some(78), "{flag} {value}: {}", out.stderr);
        assert!(
            out.stderr.contains(flag) && out.stderr.contains(value) && out.stderr.contains(choices),
            "{}",
            out.stderr
        );
    }
    // Other commands keep clap's usage code.
    let out = run(agentchat(dir.path(), &["status", "--runtime", "gpt"])).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentchat_log_with_a_target_filter_works_for_listen_status_and_doctor() {
    let server = local_server().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = listen_once(dir.path(), &server);
    cmd.env("AGENTCHAT_LOG", "agentchat=debug");
    let out = run(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("DEBUG"),
        "debug lines shown: {}",
        out.stderr
    );
    for command in ["status", "doctor"] {
        let mut cmd = agentchat(dir.path(), &[command]);
        cmd.env("AGENTCHAT_LOG", "agentchat=debug")
            .env("AGENTCHAT_API_BASE", &server.api_base);
        let out = run(cmd).await;
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(!all.contains("AGENTCHAT_LOG"), "{command}: {all}");
    }
}

/// Bytes that are not UTF-8, as an environment value.
fn not_utf8() -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    std::ffi::OsString::from_vec(b"a\xffb".to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_command_panics_on_an_environment_variable_that_is_not_utf8() {
    let server = local_server().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut commands: Vec<(String, tokio::process::Command)> = vec![
        ("listen --once".into(), listen_once(d, &server)),
        ("status".into(), agentchat(d, &["status"])),
        // `--all` reads the config's profiles and the state base itself (and refuses a state
        // dir named for one profile).
        ("status --all".into(), {
            let mut cmd = agentchat(d, &["status", "--all"]);
            cmd.env_remove("AGENTCHAT_STATE_DIR");
            cmd
        }),
        ("doctor".into(), agentchat(d, &["doctor"])),
        (
            "service print".into(),
            agentchat(d, &["service", "print", "--kind", "systemd"]),
        ),
        (
            "service status".into(),
            agentchat(d, &["service", "status"]),
        ),
        (
            "service install --all".into(),
            agentchat(d, &["service", "install", "--all", "--kind", "systemd"]),
        ),
        (
            "completions bash".into(),
            agentchat(d, &["completions", "bash"]),
        ),
        ("man".into(), agentchat(d, &["man"])),
    ];
    for help in [
        &["--version"][..],
        &["listen", "--help"],
        &["sim", "--help"],
        &["demo", "--help"],
        &["service", "--help"],
    ] {
        commands.push((help.join(" "), agentchat(d, help)));
    }
    for (name, mut cmd) in commands {
        // An unrelated variable, and HOME itself (the config names everything it needs here).
        cmd.env("FOO", not_utf8()).env("HOME", not_utf8());
        let out = run(cmd).await;
        assert_ne!(out.code, Some(101), "{name} panicked: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{name}: {}", out.stderr);
        let must_succeed = ["listen --once", "--version", "completions bash", "man"];
        if must_succeed.contains(&name.as_str()) || name.ends_with("--help") {
            assert_eq!(out.code, Some(0), "{name}: {}", out.stderr);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_our_variables_that_is_not_utf8_is_a_config_error_naming_it() {
    let server = local_server().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = listen_once(dir.path(), &server);
    cmd.env("AGENTCHAT_RUNTIME", not_utf8());
    let out = run(cmd).await;
    assert_eq!(out.code, Some(78), "{}", out.stderr);
    assert!(
        out.stderr.contains("AGENTCHAT_RUNTIME") && out.stderr.contains("UTF-8"),
        "{}",
        out.stderr
    );
    let mut cmd = agentchat(dir.path(), &["doctor"]);
    cmd.env("AGENTCHAT_PROFILE", not_utf8());
    let out = run(cmd).await;
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("FAIL config") && l.contains("AGENTCHAT_PROFILE")),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_profile_makes_listen_exit_78_and_doctor_fail() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[profiles.work]\nlog_level = \"warn\"\n").unwrap();
    let c = config.to_str().unwrap();
    let mut cmd = agentchat(dir.path(), &["listen", "--config", c, "--profile", "wrok"]);
    cmd.env("AGENTCHAT_API_KEY", "ac_not_used_0000")
        .env("AGENTCHAT_API_BASE", "http://127.0.0.1:9");
    let out = run(cmd).await;
    assert_eq!(out.code, Some(78), "{}", out.stderr);
    assert!(
        out.stderr.contains("`wrok`") && out.stderr.contains("`work`"),
        "{}",
        out.stderr
    );
    assert!(
        !dir.path().join("state/listen.lock").exists(),
        "nothing started"
    );

    let out = run(agentchat(
        dir.path(),
        &["doctor", "--config", c, "--profile", "wrok"],
    ))
    .await;
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("FAIL config") && l.contains("`work`")),
        "{}",
        out.stdout
    );
}

#[test]
fn the_test_time_scale_is_honoured_only_against_a_loopback_api_base() {
    use agentchat::config::{TestTimeScale, advice};
    // Plain http beyond loopback needs the opt-in (item: cleartext key), given here.
    let scaled = env(&[
        ("AGENTCHAT_TEST_TIME_SCALE", "20"),
        ("AGENTCHAT_ALLOW_CLEARTEXT", "1"),
    ]);
    let with_base = |base: &str| {
        let args = ConfigArgs {
            api_base: Some(base.into()),
            ..ConfigArgs::default()
        };
        resolve(&args, &scaled, None).unwrap()
    };
    for base in [
        "http://127.0.0.1:8080",
        "http://127.9.9.9",
        "http://localhost:1",
        "http://[::1]:80",
    ] {
        let s = with_base(base);
        assert_eq!(s.time_scale, TestTimeScale::On(20.0), "{base}");
        assert_eq!(s.time_scale.factor(), 20.0);
        assert!(s.time_scale.notice().unwrap().contains("in effect"));
        assert!(
            advice(&s).iter().all(|a| !a.contains("TIME_SCALE")),
            "{base}"
        );
    }
    for base in [
        "https://api.agentchat.me",
        "http://10.0.0.1:8080",
        "http://0.0.0.0:9",
        "http://127.0.0.1.example.com",
    ] {
        let s = with_base(base);
        assert_eq!(s.time_scale, TestTimeScale::Ignored(20.0), "{base}");
        assert_eq!(
            s.time_scale.factor(),
            1.0,
            "{base}: contract timers unchanged"
        );
        assert!(s.time_scale.notice().is_none());
        assert!(
            advice(&s)
                .iter()
                .any(|a| a.contains("ignored") && a.contains(base)),
            "{base}: {:?}",
            advice(&s)
        );
    }
    // Unset or 1: nothing to say. A value that is not a scale is refused by name.
    assert_eq!(
        with_base("https://api.agentchat.me").listen.idle_timeout,
        Duration::from_secs(100)
    );
    let one = env(&[("AGENTCHAT_TEST_TIME_SCALE", "1")]);
    assert_eq!(
        resolve(&ConfigArgs::default(), &one, None)
            .unwrap()
            .time_scale,
        TestTimeScale::Off
    );
    for bad in ["-3", "0", "nan", "fast"] {
        let e = env(&[("AGENTCHAT_TEST_TIME_SCALE", bad)]);
        match resolve(&ConfigArgs::default(), &e, None) {
            Err(ConfigError::BadValue { key, .. }) => assert_eq!(key, "AGENTCHAT_TEST_TIME_SCALE"),
            other => panic!("{bad}: expected BadValue, got {:?}", other.map(|_| ())),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_with_a_non_loopback_api_base_ignores_the_test_time_scale() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    // Two heartbeats of a server running 100 times faster: allowed only where the scale is.
    std::fs::write(
        &config,
        "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\nidle_timeout = \"2s\"\n",
    )
    .unwrap();
    let listen = |base: &str| {
        let mut cmd = agentchat(
            dir.path(),
            &["listen", "--once", "--config", config.to_str().unwrap()],
        );
        cmd.env("AGENTCHAT_API_BASE", base)
            .env("AGENTCHAT_API_KEY", "ac_not_used_0000")
            .env("AGENTCHAT_ALLOW_CLEARTEXT", "1")
            .env("AGENTCHAT_TEST_TIME_SCALE", "100");
        cmd
    };
    // 0.0.0.0 is not a loopback address; port 9 refuses at once.
    let out = run(listen("http://0.0.0.0:9")).await;
    assert_eq!(out.code, Some(78), "{}", out.stderr);
    assert!(
        out.stderr.contains("listen.idle_timeout") && out.stderr.contains("at least 1m 30s"),
        "the contract's floor holds: {}",
        out.stderr
    );

    // Without the short timeout the listener starts, says the scale is ignored, and tries the
    // real timers' server.
    std::fs::write(
        &config,
        "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n",
    )
    .unwrap();
    let out = run(listen("http://0.0.0.0:9")).await;
    assert!(
        out.stderr
            .contains("AGENTCHAT_TEST_TIME_SCALE=100 is ignored"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("in effect"), "{}", out.stderr);

    // On loopback (the demo's and the tests' server) it is in effect, and said once.
    let server = local_server().await;
    let mut cmd = listen_once(dir.path(), &server);
    cmd.env("AGENTCHAT_TEST_TIME_SCALE", "100");
    let out = run(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("is in effect").count(),
        1,
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_names_a_missing_key_file_once_without_calling_it_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "api_key_file = \"missing.key\"\n").unwrap();
    let mut cmd = agentchat(
        dir.path(),
        &["listen", "--config", config.to_str().unwrap()],
    );
    cmd.env("AGENTCHAT_API_BASE", "http://127.0.0.1:9");
    let out = run(cmd).await;
    assert_eq!(out.code, Some(78), "{}", out.stderr);
    assert!(out.stderr.contains("`api_key_file`"), "{}", out.stderr);
    assert!(!out.stderr.contains("config file"), "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("os error 2").count(),
        1,
        "{}",
        out.stderr
    );
}

#[test]
fn a_cleartext_api_base_beyond_loopback_is_a_config_error_unless_allowed() {
    let e = env(&[]);
    let with = |base: &str, e: &HashMap<String, String>| {
        let args = ConfigArgs {
            api_base: Some(base.into()),
            ..ConfigArgs::default()
        };
        resolve(&args, e, None)
    };
    for base in [
        "http://api.agentchat.me",
        "http://10.0.0.1:8080",
        "http://0.0.0.0:9",
        "http://127.0.0.1.example.com",
    ] {
        match with(base, &e) {
            Err(ConfigError::BadValue { key, problem }) => {
                assert_eq!(key, "api_base", "{base}");
                assert!(
                    problem.contains("https://")
                        && problem.contains("clear text")
                        && problem.contains("allow_cleartext = true"),
                    "{base}: {problem}"
                );
            }
            other => panic!("{base}: expected BadValue, got {:?}", other.map(|_| ())),
        }
    }
    // Loopback and https are fine, without a word of advice.
    for base in [
        "http://127.0.0.1:8080",
        "http://127.9.9.9",
        "http://localhost:1",
        "http://[::1]:80",
        "https://api.agentchat.me",
        "https://10.0.0.1",
    ] {
        let s = with(base, &e).unwrap_or_else(|err| panic!("{base}: {err}"));
        assert!(
            agentchat::config::advice(&s)
                .iter()
                .all(|a| !a.contains("clear text")),
            "{base}"
        );
    }
    // The opt-in, from the file (top level or a profile) or the environment, says so at start.
    let text = "api_base = \"http://api.agentchat.me\"\nallow_cleartext = true\n";
    let s = resolve(&ConfigArgs::default(), &e, file(text)).unwrap();
    assert!(s.allow_cleartext);
    assert!(
        agentchat::config::advice(&s)
            .iter()
            .any(|a| a.contains("clear text") && a.contains("http://api.agentchat.me")),
        "{:?}",
        agentchat::config::advice(&s)
    );
    let allowed = env(&[("AGENTCHAT_ALLOW_CLEARTEXT", "1")]);
    assert!(with("http://api.agentchat.me", &allowed).is_ok());
    let off = env(&[("AGENTCHAT_ALLOW_CLEARTEXT", "0")]);
    assert!(with("http://api.agentchat.me", &off).is_err());
    let bad = env(&[("AGENTCHAT_ALLOW_CLEARTEXT", "maybe")]);
    match with("https://api.agentchat.me", &bad) {
        Err(ConfigError::BadValue { key, .. }) => assert_eq!(key, "AGENTCHAT_ALLOW_CLEARTEXT"),
        other => panic!("expected BadValue, got {:?}", other.map(|_| ())),
    }
    // The MCP URLs carry the key too.
    let text = "[listen.claude]\nmcp_url = \"http://mcp.example/mcp\"\n";
    match err_of(&ConfigArgs::default(), &e, text) {
        ConfigError::BadValue { key, problem } => {
            assert_eq!(key, "listen.claude.mcp_url");
            assert!(problem.contains("https://"), "{problem}");
        }
        other => panic!("expected BadValue, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_and_doctor_exit_78_on_a_cleartext_api_base_naming_api_base_and_https() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "api_base = \"http://api.agentchat.me\"\n[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n",
    )
    .unwrap();
    let mut cmd = agentchat(
        dir.path(),
        &["listen", "--config", config.to_str().unwrap()],
    );
    cmd.env("AGENTCHAT_API_KEY", "ac_cleartext_secret_0000");
    let out = run(cmd).await;
    assert_eq!(out.code, Some(78), "{}", out.stderr);
    assert!(
        out.stderr.contains("`api_base`") && out.stderr.contains("https://"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("ac_cleartext_secret"),
        "{}",
        out.stderr
    );
}

#[test]
fn an_api_base_ending_in_v1_is_normalised_and_said_once() {
    let e = env(&[]);
    for (written, used) in [
        ("https://api.agentchat.me/v1", "https://api.agentchat.me"),
        ("https://api.agentchat.me/v1/", "https://api.agentchat.me"),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"),
        ("https://host/prefix/v1", "https://host/prefix"),
    ] {
        let args = ConfigArgs {
            api_base: Some(written.into()),
            ..ConfigArgs::default()
        };
        let s = resolve(&args, &e, None).unwrap();
        assert_eq!(s.api_base, used, "{written}");
        let advice = agentchat::config::advice(&s);
        assert_eq!(
            advice.iter().filter(|a| a.contains("/v1")).count(),
            1,
            "{written}: {advice:?}"
        );
    }
    for kept in ["https://host/v10", "https://v1", "https://host/v1x"] {
        let args = ConfigArgs {
            api_base: Some(kept.into()),
            ..ConfigArgs::default()
        };
        let s = resolve(&args, &e, None).unwrap();
        assert_eq!(s.api_base, kept);
        assert!(s.api_base_written.is_none());
    }
}

/// Caps the command's address space (1 GiB), so a read that would fill memory fails there instead
/// of taking the machine's memory with it (today's main filled gigabytes from `/dev/zero`).
fn with_memory_cap(cmd: &mut tokio::process::Command) {
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

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_or_key_file_that_is_a_fifo_or_a_device_is_refused_at_once_saying_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.fifo");
    mkfifo(&fifo);
    let zero = dir.path().join("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for (config, what) in [
        (&fifo, "is a FIFO, not a regular file"),
        (&zero, "is a character device, not a regular file"),
    ] {
        for sub in ["listen", "doctor"] {
            let mut cmd = agentchat(dir.path(), &[sub, "--config", config.to_str().unwrap()]);
            cmd.env("AGENTCHAT_API_KEY", "ac_not_used_0000")
                .env("AGENTCHAT_API_BASE", "http://127.0.0.1:9");
            with_memory_cap(&mut cmd);
            let out = run(cmd).await;
            let all = format!("{}{}", out.stdout, out.stderr);
            assert!(
                all.contains(config.to_str().unwrap()) && all.contains(what),
                "{sub} --config {}: {all}",
                config.display()
            );
            let expected = if sub == "listen" { 78 } else { 1 };
            assert_eq!(out.code, Some(expected), "{sub}: {all}");
        }
    }
    // The key file: a FIFO, /dev/zero, and a file over the cap.
    let big = dir.path().join("big.key");
    std::fs::write(&big, vec![b'a'; 64 * 1024]).unwrap();
    std::fs::set_permissions(&big, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let key_fifo = dir.path().join("key.fifo");
    mkfifo(&key_fifo);
    for (key, what) in [
        (key_fifo.as_path(), "is a FIFO, not a regular file"),
        (
            Path::new("/dev/zero"),
            "is a character device, not a regular file",
        ),
        (big.as_path(), "is 64 KiB, over the 16 KiB cap"),
    ] {
        let config = dir.path().join("keyed.toml");
        std::fs::write(
            &config,
            format!(
                "api_key_file = \"{}\"\n[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n",
                key.display()
            ),
        )
        .unwrap();
        let mut cmd = agentchat(
            dir.path(),
            &["listen", "--config", config.to_str().unwrap()],
        );
        cmd.env("AGENTCHAT_API_BASE", "http://127.0.0.1:9");
        with_memory_cap(&mut cmd);
        let out = run(cmd).await;
        assert_eq!(out.code, Some(78), "{}", out.stderr);
        assert!(
            out.stderr.contains("`api_key_file`") && out.stderr.contains(what),
            "{}: {}",
            key.display(),
            out.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_all_and_the_profile_completion_refuse_a_fifo_or_a_device_config_at_once() {
    // They read the config through the one capped reader (config::ConfigFile) as listen does: a
    // plain read would wait forever on a FIFO and fill memory from /dev/zero.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.fifo");
    mkfifo(&fifo);
    let zero = dir.path().join("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for (config, what) in [
        (&fifo, "is a FIFO, not a regular file"),
        (&zero, "is a character device, not a regular file"),
    ] {
        for sub in [&["status", "--all"][..], &["complete-profiles"][..]] {
            let mut argv = sub.to_vec();
            argv.extend(["--config", config.to_str().unwrap()]);
            let mut cmd = agentchat(dir.path(), &argv);
            cmd.env_remove("AGENTCHAT_STATE_DIR");
            with_memory_cap(&mut cmd);
            let out = run(cmd).await;
            assert!(
                out.stderr.contains("cannot read the config file")
                    && out.stderr.contains(config.to_str().unwrap())
                    && out.stderr.contains(what),
                "{argv:?}: {}",
                out.stderr
            );
            assert_eq!(out.code, Some(1), "{argv:?}: {}", out.stderr);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_onto_a_config_symlinked_to_dev_zero_keeps_the_old_one_and_sigterm_still_stops() {
    use crate::listen_support::{Listener, Opts, Setup, Sim, listener_command};
    let sim = Sim::start(1.0).await;
    let bob = sim.agent("bob").await;
    let opts = Opts::default();
    let setup = Setup::new(&opts);
    let mut cmd = listener_command(&sim, &bob, &setup, &opts);
    use std::os::unix::process::CommandExt;
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
    let mut l = Listener::spawn(cmd, &setup, "");
    assert!(
        crate::common::eventually(20.0, || setup.status()["socket"] == "connected").await,
        "{}",
        l.log()
    );
    let kept = setup.config.with_extension("kept");
    std::fs::rename(&setup.config, &kept).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &setup.config).unwrap();
    l.signal(libc::SIGHUP);
    assert!(
        crate::common::eventually(10.0, || l.count("reload_failed") >= 1).await,
        "{}",
        l.log()
    );
    let failed = &l.events("reload_failed")[0];
    assert!(
        failed
            .to_string()
            .contains("is a character device, not a regular file"),
        "{failed}"
    );
    // The old config still serves, and a SIGTERM ends the listener at once.
    assert_eq!(setup.status()["socket"], "connected");
    l.signal(libc::SIGTERM);
    assert_eq!(l.wait_exit(10.0), Some(0), "{}", l.log());
}

#[test]
fn every_relative_path_is_made_absolute_against_the_working_directory() {
    use agentchat::config::absolute_paths;
    let args = ConfigArgs {
        state_dir: Some("state".into()),
        ..ConfigArgs::default()
    };
    let text = "api_key_file = \"keys/agent.key\"\n[listen]\nworkdir = \"work\"\n\
                command = [\"bin/run.sh\", \"arg/x\"]\n[listen.claude]\nbinary = \"tools/claude\"\n\
                [listen.codex]\nbinary = \"codex\"\n";
    // A config file named relative to the working directory: its folder is "".
    let mut s = resolve(&args, &env(&[]), Some((Path::new("config.toml"), text))).unwrap();
    assert_eq!(
        s.state_dir,
        PathBuf::from("state"),
        "resolve itself is pure"
    );
    absolute_paths(&mut s, Path::new("/srv/agent"));
    assert_eq!(s.state_dir, PathBuf::from("/srv/agent/state"));
    assert_eq!(s.config_path, Some(PathBuf::from("/srv/agent/config.toml")));
    assert_eq!(
        s.key_source,
        KeySource::File(PathBuf::from("/srv/agent/keys/agent.key"))
    );
    assert_eq!(s.listen.workdir, Some(PathBuf::from("/srv/agent/work")));
    assert_eq!(
        s.listen.command,
        vec!["/srv/agent/bin/run.sh".to_string(), "arg/x".to_string()]
    );
    assert_eq!(
        s.listen.claude.binary,
        Some(PathBuf::from("/srv/agent/tools/claude"))
    );
    assert_eq!(
        s.listen.codex.binary,
        Some(PathBuf::from("codex")),
        "a bare name stays bare, for PATH"
    );
    // Absolute paths stay as they are.
    let before = s.clone();
    absolute_paths(&mut s, Path::new("/elsewhere"));
    assert_eq!(s.state_dir, before.state_dir);
    assert_eq!(s.listen.command, before.listen.command);
}

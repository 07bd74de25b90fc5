//! `agentchat doctor`: the real binary against the in-process local server (`agentchat::sim`) over
//! loopback, with the pinned real `claude` and `codex` CLIs for the runtime checks. Every test
//! isolates HOME, the service dir and the state dir in a temp dir, and checks that the API key
//! never appears in what doctor prints.

use crate::common::sigterm_and_wait;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
    /// The line of check `name`, e.g. `PASS server: …`.
    fn line(&self, name: &str) -> String {
        self.stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no `{name}` line in:\n{}", self.all()))
            .to_string()
    }
    /// Check `name`'s line starts with `start` (level, name, verdict) and mentions `needle`.
    fn assert_line(&self, name: &str, start: &str, needle: &str) {
        let line = self.line(name);
        assert!(line.starts_with(start) && line.contains(needle), "{line}");
    }
    fn assert_no_secret(&self, key: &str) {
        assert!(
            !self.stdout.contains(key) && !self.stderr.contains(key),
            "the key appeared in doctor's output:\n{}",
            self.all()
        );
        // Not even a prefix of it.
        let prefix = &key[..key.len().min(12)];
        assert!(!self.all().contains(prefix), "a prefix of the key appeared");
    }
}

/// A scratch home: config file, state dir, service dir, HOME.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new(config: &str) -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        Scratch { dir }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn config(&self) -> PathBuf {
        self.path().join("config.toml")
    }
    fn state(&self) -> PathBuf {
        self.path().join("state")
    }
    fn service_dir(&self) -> PathBuf {
        self.path().join("services")
    }

    /// The real binary with an isolated environment: no inherited AGENTCHAT_* settings, HOME
    /// and the service dir inside the scratch dir.
    fn command(&self, sub: &str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::from(crate::common::isolated_command(
            env!("CARGO_BIN_EXE_agentchat"),
            &["XDG_*"],
        ));
        cmd.arg(sub);
        cmd.env("HOME", self.path())
            .env("AGENTCHAT_SERVICE_DIR", self.service_dir())
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("CODEX_API_KEY")
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove("CODEX_HOME")
            .kill_on_drop(true);
        cmd
    }

    async fn doctor(&self, api_base: &str, key: Option<&str>, extra: &[&str]) -> Out {
        self.doctor_with(api_base, key, extra, |_| {}).await
    }

    async fn doctor_with(
        &self,
        api_base: &str,
        key: Option<&str>,
        extra: &[&str],
        tweak: impl FnOnce(&mut tokio::process::Command),
    ) -> Out {
        let mut cmd = self.command("doctor");
        cmd.arg("--config")
            .arg(self.config())
            .arg("--state-dir")
            .arg(self.state())
            .arg("--api-base")
            .arg(api_base)
            .args(extra);
        if let Some(k) = key {
            cmd.env("AGENTCHAT_API_KEY", k);
        }
        tweak(&mut cmd);
        let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .expect("doctor did not finish within 60 s")
            .unwrap();
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// A fresh local server and its first seeded agent's handle and key.
async fn seeded_sim() -> (agentchat::sim::SimHandle, String, String) {
    let sim = sim().await;
    let (handle, key) = sim.seeded[0].clone();
    (sim, handle, key)
}

async fn sim() -> agentchat::sim::SimHandle {
    agentchat::sys::tls::install_crypto_provider();
    agentchat::sim::start(agentchat::sim::SimConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        time_scale: 1.0,
        seed_demo: true,
    })
    .await
    .unwrap()
}

const SCRIPT_CONFIG: &str = "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n";

/// The pinned CLI: `$env`, else `.tools/npm/node_modules/.bin/<name>` (installed by
/// `scripts/test`). Missing both fails the test: it never skips silently.
fn pinned_cli(env: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".tools/npm/node_modules/.bin")
        .join(name);
    assert!(
        p.exists(),
        "neither {env} nor {} exists: run scripts/test, which installs the pinned CLIs",
        p.display()
    );
    p
}

fn looks_like_a_version(s: &str) -> bool {
    s.split(|c: char| !c.is_ascii_digit() && c != '.')
        .any(|w| w.split('.').filter(|p| !p.is_empty()).count() >= 3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_key_and_a_working_script_pass_every_check_and_exit_0() {
    let (sim, handle, key) = seeded_sim().await;
    let s = Scratch::new(SCRIPT_CONFIG);
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(!out.stdout.contains("FAIL"), "{}", out.stdout);
    assert!(
        out.line("config")
            .starts_with("PASS config: profile `default`, read "),
        "{}",
        out.stdout
    );
    assert_eq!(out.line("integration"), "PASS integration: on");
    assert_eq!(
        out.line("key"),
        "PASS key: from the environment (AGENTCHAT_API_KEY)"
    );
    let server = out.line("server");
    assert!(server.starts_with("PASS server: "), "{server}");
    assert!(server.contains(&handle), "the handle is reported: {server}");
    let texts = out.line("texts");
    assert!(
        texts.starts_with("PASS texts: runtime=generic")
            && texts.contains("wake_instruction and invite_prompt present"),
        "{texts}"
    );
    assert!(out.line("state_dir").starts_with("PASS state_dir: "));
    assert!(out.line("lock").starts_with("PASS lock: "));
    assert!(out.line("status").starts_with("PASS status: "));
    assert_eq!(out.line("runtime"), "PASS runtime: script: /bin/true");
    assert!(
        out.line("service")
            .starts_with("PASS service: not installed"),
        "{}",
        out.stdout
    );
    out.assert_no_secret(&key);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_fails_the_server_check_and_never_shows_the_key() {
    let (sim, handle, key) = seeded_sim().await;
    let bare = handle.trim_start_matches('@');
    let resp = reqwest::Client::new()
        .post(format!("{}/_sim/agents/{bare}/refuse-key", sim.api_base))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());

    let s = Scratch::new(SCRIPT_CONFIG);
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(out.code, 1, "{}", out.all());
    let server = out.line("server");
    assert!(
        server.starts_with("FAIL server: the server refused the key"),
        "{server}"
    );
    out.assert_no_secret(&key);

    let json = s.doctor(&sim.api_base, Some(&key), &["--json"]).await;
    assert_eq!(json.code, 1);
    json.assert_no_secret(&key);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_as_unreachable_in_one_line() {
    let base = crate::common::closed_port_base();
    let s = Scratch::new(SCRIPT_CONFIG);
    let key = "ac_unreachable_test_key_0123456789";
    let out = s.doctor(&base, Some(key), &[]).await;
    assert_eq!(out.code, 1, "{}", out.all());
    assert_eq!(
        out.line("server"),
        format!("FAIL server: {base} is unreachable: connection refused")
    );
    out.assert_no_secret(key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_server_at_api_base_fails_as_not_an_agentchat_server() {
    let web = crate::common::NotAgentChat::start();
    let s = Scratch::new(SCRIPT_CONFIG);
    let key = "ac_not_agentchat_test_key_0123456789";
    let out = s.doctor(&web.api_base, Some(key), &["--json"]).await;
    assert_eq!(out.code, 1, "{}", out.all());
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let server = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "server")
        .unwrap();
    assert_eq!(server["level"], "FAIL");
    assert_eq!(
        server["detail"],
        format!(
            "api_base {} answered 404 text/html: not an AgentChat server; check api_base (the \
             AgentChat API, e.g. https://api.agentchat.me)",
            web.api_base
        )
    );
    assert_eq!(server["facts"]["verdict"], "not_agentchat");
    assert_eq!(server["facts"]["http_status"], 404);
    assert_eq!(server["facts"]["content_type"], "text/html");
    assert_eq!(web.hits("/v1/agents/me"), 1);
    out.assert_no_secret(key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_config_key_fails_naming_the_key() {
    let s = Scratch::new(
        "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\nqiet_window = \"3s\"\n",
    );
    let key = "ac_config_test_key_0123456789abcd";
    let out = s.doctor("http://127.0.0.1:9", Some(key), &[]).await;
    assert_eq!(out.code, 1, "{}", out.all());
    assert_eq!(
        out.line("config"),
        "FAIL config: unknown config key `listen.qiet_window`; did you mean `listen.quiet_window`?"
    );
    out.assert_no_secret(key);

    let json = s.doctor("http://127.0.0.1:9", Some(key), &["--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["checks"][0]["name"], "config");
    assert_eq!(v["checks"][0]["level"], "FAIL");
    assert_eq!(v["checks"][0]["facts"]["key"], "listen.qiet_window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integration_off_is_a_warning_that_listen_will_exit() {
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(SCRIPT_CONFIG);
    let out = s
        .doctor_with(&sim.api_base, Some(&key), &[], |c| {
            c.env("AGENTCHAT_INTEGRATION", "off");
        })
        .await;
    assert_eq!(out.code, 0, "a warning is not a failure: {}", out.all());
    out.assert_line(
        "integration",
        "WARN integration: AGENTCHAT_INTEGRATION=off",
        "exit",
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_runtime_binary_fails_naming_the_config_key_to_set() {
    let (sim, _, key) = seeded_sim().await;

    // Claude Code with a configured binary that does not exist.
    let s = Scratch::new(
        "[listen]\nruntime = \"claude-code\"\n[listen.claude]\nbinary = \"/nonexistent/bin/claude\"\n",
    );
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(out.code, 1, "{}", out.all());
    out.assert_line(
        "runtime",
        "FAIL runtime: claude-code:",
        "listen.claude.binary",
    );

    // Codex with nothing on PATH.
    let s = Scratch::new("[listen]\nruntime = \"codex\"\n");
    let empty = s.path().join("empty-bin");
    std::fs::create_dir(&empty).unwrap();
    let out = s
        .doctor_with(&sim.api_base, Some(&key), &[], |c| {
            c.env("PATH", &empty);
        })
        .await;
    assert_eq!(out.code, 1, "{}", out.all());
    out.assert_line("runtime", "FAIL runtime: codex:", "listen.codex.binary");

    // A script whose program is not on PATH names `command` under [listen].
    let s = Scratch::new("[listen]\nruntime = \"script\"\ncommand = [\"no-such-agent-program\"]\n");
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(out.code, 1, "{}", out.all());
    out.assert_line("runtime", "FAIL runtime:", "`command` under [listen]");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_claude_reports_its_version_and_not_logged_in() {
    let claude = pinned_cli("AGENTCHAT_TEST_CLAUDE", "claude");
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(&format!(
        "[listen]\nruntime = \"claude-code\"\n[listen.claude]\nbinary = \"{}\"\n",
        claude.display()
    ));
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(out.code, 1, "not logged in is a failure: {}", out.all());
    let runtime = out.line("runtime");
    assert!(
        runtime.starts_with(&format!("PASS runtime: claude-code: {}", claude.display())),
        "{runtime}"
    );
    assert!(looks_like_a_version(&runtime), "{runtime}");
    let login = out.line("login");
    assert!(
        login.starts_with("FAIL login: claude-code: not logged in"),
        "{login}"
    );
    // The CLI's JSON is not printed raw.
    assert!(!out.stdout.contains("loggedIn"), "{}", out.stdout);
    out.assert_no_secret(&key);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_codex_reports_its_version_and_not_logged_in() {
    let codex = pinned_cli("AGENTCHAT_TEST_CODEX", "codex");
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(&format!(
        "[listen]\nruntime = \"codex\"\n[listen.codex]\nbinary = \"{}\"\n",
        codex.display()
    ));
    let codex_home = s.path().join("codex-home");
    std::fs::create_dir(&codex_home).unwrap();
    let out = s
        .doctor_with(&sim.api_base, Some(&key), &[], |c| {
            c.env("CODEX_HOME", &codex_home);
        })
        .await;
    assert_eq!(out.code, 1, "not logged in is a failure: {}", out.all());
    let runtime = out.line("runtime");
    assert!(
        runtime.starts_with(&format!("PASS runtime: codex: {}", codex.display())),
        "{runtime}"
    );
    assert!(looks_like_a_version(&runtime), "{runtime}");
    let login = out.line("login");
    assert!(
        login.starts_with("FAIL login: codex: not logged in"),
        "{login}"
    );
    out.assert_no_secret(&key);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_is_one_document_with_the_same_verdicts() {
    let (sim, handle, key) = seeded_sim().await;
    let s = Scratch::new(SCRIPT_CONFIG);
    let text = s.doctor(&sim.api_base, Some(&key), &[]).await;
    let out = s.doctor(&sim.api_base, Some(&key), &["--json"]).await;
    assert_eq!(out.code, 0, "{}", out.all());
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["profile"], "default");
    let checks = v["checks"].as_array().unwrap();
    let from_json: Vec<String> = checks
        .iter()
        .map(|c| {
            format!(
                "{} {}: {}",
                c["level"].as_str().unwrap(),
                c["name"].as_str().unwrap(),
                c["detail"].as_str().unwrap()
            )
        })
        .collect();
    let from_text: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(from_json, from_text, "the same facts in both forms");
    let server = checks.iter().find(|c| c["name"] == "server").unwrap();
    assert_eq!(server["facts"]["handle"], handle.as_str());
    out.assert_no_secret(&key);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_listener_is_reported_with_its_pid_from_the_lock() {
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(SCRIPT_CONFIG);
    let mut listener = s
        .command("listen")
        .arg("--config")
        .arg(s.config())
        .arg("--state-dir")
        .arg(s.state())
        .arg("--api-base")
        .arg(&sim.api_base)
        .env("AGENTCHAT_API_KEY", &key)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = listener.id().unwrap();

    // Wait until the listener says it is connected.
    let status_file = s.state().join("status.json");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let connected = std::fs::read(&status_file)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| v["state"] == "connected");
        if connected {
            break;
        }
        assert!(Instant::now() < deadline, "the listener never connected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(
        out.line("lock"),
        format!("PASS lock: held by a running listener, pid {pid}")
    );
    let status = out.line("status");
    assert!(
        status.starts_with("PASS status: state connected since ")
            && status.contains(&format!("listener pid {pid} running")),
        "{status}"
    );
    let json = s.doctor(&sim.api_base, Some(&key), &["--json"]).await;
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let lock = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "lock")
        .unwrap()
        .clone();
    assert_eq!(lock["facts"]["pid"], pid);
    assert_eq!(lock["facts"]["held"], true);
    out.assert_no_secret(&key);

    let exit = sigterm_and_wait(&mut listener, 20).await;
    assert!(exit.success(), "{exit}");

    // Stopped: the lock is free again, and doctor never kept the listener from starting.
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(
        out.line("lock"),
        "PASS lock: free: no listener is running for this profile"
    );
    assert!(out.line("status").contains("not running"), "{}", out.stdout);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installed_unit_is_current_until_it_is_edited() {
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(SCRIPT_CONFIG);
    let install = s
        .command("service")
        .arg("install")
        .arg("--config")
        .arg(s.config())
        .output()
        .await
        .unwrap();
    assert!(
        install.status.success(),
        "{}",
        String::from_utf8_lossy(&install.stderr)
    );

    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    let line = out.line("service");
    assert!(
        line.starts_with("PASS service: written and current"),
        "{line}"
    );
    if cfg!(target_os = "linux") {
        out.assert_line("template", "PASS template:", "is current");
        out.assert_line("exec_start", "PASS exec_start:", "ExecStart runs /");
    }

    let unit = s.service_dir().join(if cfg!(target_os = "macos") {
        "me.agentchat.listen.plist"
    } else {
        "agentchat-listen@default.service.d/install.conf"
    });
    let text = std::fs::read_to_string(&unit).unwrap();
    let edited = if cfg!(target_os = "macos") {
        text.replace("<integer>10</integer>", "<integer>11</integer>")
    } else {
        text.replace("TimeoutStopSec=", "TimeoutStopSec=1")
    };
    assert_ne!(edited, text);
    std::fs::write(&unit, edited).unwrap();
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(out.code, 0, "a stale unit is a warning: {}", out.all());
    let line = out.line("service");
    assert!(
        line.starts_with("WARN service: written at")
            && line.contains("reinstall")
            && line.contains("agentchat service install"),
        "{line}"
    );

    // The binary the unit names is gone (an upgrade moved it): doctor says so.
    if cfg!(target_os = "linux") {
        let text = std::fs::read_to_string(&unit).unwrap();
        let moved = text.replace("ExecStart=\"/", "ExecStart=\"/nonexistent/moved/");
        assert_ne!(moved, text);
        std::fs::write(&unit, moved).unwrap();
        let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
        out.assert_line("exec_start", "WARN exec_start:", "no longer exists");
        std::fs::remove_file(s.service_dir().join("agentchat-listen@.service")).unwrap();
        let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
        out.assert_line("template", "WARN template:", "is missing");
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_file_others_can_read_fails_and_a_private_one_passes() {
    use std::os::unix::fs::PermissionsExt;
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(
        "api_key_file = \"key.txt\"\n[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n",
    );
    let key_file = s.path().join("key.txt");
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();

    let out = s.doctor(&sim.api_base, None, &[]).await;
    assert_eq!(out.code, 1, "{}", out.all());
    out.assert_line("key", "FAIL key:", "chmod 600");
    out.assert_no_secret(&key);

    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = s.doctor(&sim.api_base, None, &[]).await;
    assert_eq!(out.code, 0, "{}", out.all());
    out.assert_line("key", "PASS key: from the key file", "key.txt");
    assert!(out.line("server").starts_with("PASS server:"));
    out.assert_no_secret(&key);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_dir_others_can_enter_is_a_warning() {
    use std::os::unix::fs::PermissionsExt;
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(SCRIPT_CONFIG);
    std::fs::create_dir(s.state()).unwrap();
    std::fs::set_permissions(s.state(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(out.code, 0, "{}", out.all());
    let line = out.line("state_dir");
    assert!(
        line.starts_with("WARN state_dir:") && line.contains("0755") && line.contains("chmod 700"),
        "{line}"
    );
    std::fs::set_permissions(s.state(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert!(
        out.line("state_dir").starts_with("PASS state_dir:"),
        "{}",
        out.stdout
    );
    // Doctor leaves nothing behind in the state dir.
    let left: Vec<_> = std::fs::read_dir(s.state()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_file_whose_pid_lives_on_without_the_lock_is_not_a_running_listener() {
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(SCRIPT_CONFIG);
    std::fs::create_dir(s.state()).unwrap();
    std::fs::set_permissions(
        s.state(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    // A listener died; its pid now belongs to another live process (this test), and the lock
    // file it left is not held by anyone.
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let doc = serde_json::json!({
        "state": "connected", "since": now, "updated_at": now,
        "pid": std::process::id(), "profile": "default"
    });
    std::fs::write(s.state().join("status.json"), doc.to_string()).unwrap();
    std::fs::write(
        s.state().join("listen.lock"),
        format!("{}\n", std::process::id()),
    )
    .unwrap();

    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(
        out.line("lock"),
        "PASS lock: free: no listener is running for this profile"
    );
    out.assert_line(
        "status",
        "PASS status: state connected since",
        "not running",
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_but_valid_settings_are_warnings_that_do_not_fail() {
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(
        "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\nquiet_window = \"5s\"\nmax_delay = \"1s\"\n",
    );
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(out.code, 0, "{}", out.all());
    out.assert_line("advice", "WARN advice:", "listen.max_delay");
    sim.shutdown().await;
}

/// Issue 28: nothing listening is not green. With no listener for the profile doctor WARNs and
/// names what to run (exit 0); under `--strict` it is a FAIL (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_listener_running_warns_and_fails_under_strict() {
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(SCRIPT_CONFIG);
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(out.code, 0, "{}", out.all());
    out.assert_line(
        "listening",
        "WARN listening: no listener runs",
        "agentchat service install",
    );
    assert!(out.line("listening").contains("agentchat setup"));
    let strict = s.doctor(&sim.api_base, Some(&key), &["--strict"]).await;
    assert_eq!(strict.code, 1, "{}", strict.all());
    strict.assert_line("listening", "FAIL listening:", "agentchat listen");
    strict.assert_no_secret(&key);
    sim.shutdown().await;
}

/// `reach` (docs/runtimes.md, "What a woken run can touch"): PASS for the default, WARN naming the
/// files a profile's `listen.tools` opens and the variables its `env_pass` passes, FAIL for a tool
/// that reaches past the workdir; the script runtime is the user's own program (WARN).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reach_passes_by_default_and_warns_for_a_profile_whose_runs_can_touch_files() {
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(
        "[listen]\nruntime = \"claude-code\"\nworkdir = \"/tmp\"\n\n\
         [profiles.repo.listen]\ntools = [\"Read\", \"Edit\"]\nenv_pass = [\"GITHUB_TOKEN\"]\n\n\
         [profiles.wide.listen]\ntools = [\"Bash\"]\n\n\
         [profiles.mine.listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n",
    );
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    out.assert_line("reach", "PASS reach:", "AgentChat tools only");
    let out = s
        .doctor(&sim.api_base, Some(&key), &["--profile", "repo"])
        .await;
    out.assert_line("reach", "WARN reach:", "read files in /tmp (Read, Edit)");
    out.assert_line("reach", "WARN reach:", "write files in /tmp");
    out.assert_line("reach", "WARN reach:", "GITHUB_TOKEN");
    let out = s
        .doctor(&sim.api_base, Some(&key), &["--profile", "wide"])
        .await;
    out.assert_line("reach", "FAIL reach:", "`Bash`");
    let out = s
        .doctor(&sim.api_base, Some(&key), &["--profile", "mine"])
        .await;
    out.assert_line("reach", "WARN reach:", "your own program");
    out.assert_no_secret(&key);
    sim.shutdown().await;
}

/// Issues 24 and 33: `extra_args` off the CLI's allowlist make every run `runtime_unusable`
/// naming the argument; doctor says the same, as a FAIL on its `reach` line, before a listener
/// ever starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn widening_extra_args_fail_reach_naming_the_key() {
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(
        "[listen]\nruntime = \"claude-code\"\n\
         [listen.claude]\nextra_args = [\"--allowedTools\", \"Bash\"]\n\n\
         [profiles.cx.listen]\nruntime = \"codex\"\n\
         [profiles.cx.listen.codex]\nextra_args = [\"--sandbox\", \"danger-full-access\"]\n\n\
         [profiles.narrow.listen]\nruntime = \"codex\"\n\
         [profiles.narrow.listen.codex]\nextra_args = [\"-c\", \"model=\\\"o3\\\"\"]\n",
    );
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(out.code, 1, "{}", out.all());
    out.assert_line(
        "reach",
        "FAIL reach:",
        "`--allowedTools` is not one of them",
    );
    let out = s
        .doctor(&sim.api_base, Some(&key), &["--profile", "cx"])
        .await;
    assert_eq!(out.code, 1, "{}", out.all());
    out.assert_line("reach", "FAIL reach:", "`--sandbox` is not one of them");
    // An argument that widens nothing passes.
    let out = s
        .doctor(&sim.api_base, Some(&key), &["--profile", "narrow"])
        .await;
    out.assert_line("reach", "PASS reach:", "AgentChat tools only");
    out.assert_no_secret(&key);
    sim.shutdown().await;
}

/// Issue 26: doctor shows the profile's `[listen.policy]` in one PASS line (never a FAIL: the rules
/// are the user's choice), a profile's table over the top level's key by key, and says when they
/// are the defaults (issue 38); a cap the runtime cannot hold is a WARN of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_is_one_pass_line_per_profile_naming_its_rules_or_its_defaults() {
    let (sim, _, key) = seeded_sim().await;
    let s = Scratch::new(
        "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n\n\
         [profiles.paid.listen.policy]\nquiet_hours = [\"22:00-07:00\"]\nmax_runs_per_hour = 12\n\
         max_cost_per_day_usd = 5.0\nfirst_contact = \"wait\"\ndeny = [\"@noisy\"]\n\
         loop_guard = { runs = 6, within = \"30m\" }\n",
    );
    let out = s.doctor(&sim.api_base, Some(&key), &[]).await;
    assert_eq!(out.code, 0, "{}", out.all());
    assert_eq!(
        out.line("policy"),
        "PASS policy: at most 60 runs an hour; 500 a day; loop guard 30 runs in 1h (the \
         defaults; `0` lifts a cap)"
    );
    let paid = s
        .doctor(&sim.api_base, Some(&key), &["--profile", "paid"])
        .await;
    assert_eq!(paid.code, 0, "{}", paid.all());
    assert_eq!(
        paid.line("policy"),
        "PASS policy: quiet 22:00-07:00; at most 12 runs an hour; 500 a day; $5.00 a day; \
         first contact waits; deny @noisy; loop guard 6 runs in 30m"
    );
    // A script reports no cost unless it prints its own line: the day's dollars may never hold.
    assert_eq!(
        paid.stdout.matches(" policy: ").count(),
        2,
        "{}",
        paid.all()
    );
    assert!(
        paid.stdout
            .contains("WARN policy: `max_cost_per_day_usd` and `max_tokens_per_day` count"),
        "{}",
        paid.all()
    );
    paid.assert_no_secret(&key);
    sim.shutdown().await;
}

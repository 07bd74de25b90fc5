//! Four proofs of the runtimes, end to end through the real `agentchat listen` binary with
//! `runtime = "claude-code"` and `runtime = "codex"`, the pinned real CLIs, the in-process sim
//! (REST, socket and MCP tools on loopback) and the scripted model server as the only stand-in
//! (for the model provider, which cannot run here). HOME and CODEX_HOME are temp dirs the test owns.
//!
//! 1. a peer's message wakes the listener, the CLI answers through the sim's MCP tools, the sim
//!    shows the answer, the `reply` verdict after it, and the card gone;
//! 2. a model endpoint answering 401 gives a failed run and `runtime_unusable`, reported once;
//! 3. a model that never answers is stopped at the run's time limit, and no process of the
//!    CLI's tree is left;
//! 4. while the run is alive, no process's `/proc/<pid>/cmdline` holds the key.

use crate::common::{eventually_async, is_gone, stop_child};
use crate::model_server::cli::{base_env, claude_bin, codex_bin, write_codex_home};
use crate::model_server::sim::{Sim, assert_answered};
use crate::model_server::{Mode, ModelServer};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agentchat");

/// The run time limit of the hung-model proofs: short, yet long enough for a CLI on a loaded
/// 2-core CI machine to reach the model before it fires.
const HUNG_RUN_LIMIT: &str = "20s";

/// Variables a parent Claude Code or Codex session sets, given to every listener here; no run
/// may see them.
const NESTED_ENV: &[(&str, &str)] = &[
    ("CLAUDECODE", "1"),
    ("CLAUDE_CODE_ENTRYPOINT", "cli"),
    ("CODEX_SANDBOX", "seatbelt"),
];

/// The peer's message in proof 1 (must never reach the listener's own log).
const PEER_TEXT: &str = "Is the release branch cut yet? (peer text 7f3a)";

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Rt {
    Claude,
    Codex,
}

impl Rt {
    fn name(self) -> &'static str {
        match self {
            Rt::Claude => "claude-code",
            Rt::Codex => "codex",
        }
    }
    pub(crate) fn bin(self) -> PathBuf {
        match self {
            Rt::Claude => claude_bin(),
            Rt::Codex => codex_bin(),
        }
    }
}

/// The real listener as a child, with its files in a temp dir; dropping it stops it (SIGTERM,
/// then SIGKILL) so a failing test leaves nothing running.
pub(crate) struct Listener {
    child: Option<Child>,
    pub(crate) dir: tempfile::TempDir,
}

impl Listener {
    fn start(rt: Rt, sim: &Sim, model: &ModelServer, run_timeout: &str) -> Listener {
        Listener::start_with_binary(rt, sim, model, run_timeout, &rt.bin())
    }

    /// `start` with `listen.<cli>.binary` set to `bin`. The listener's own timers run 50 times
    /// slower (`AGENTCHAT_TEST_TIME_SCALE`): its re-check of an unusable runtime (5 s at contract
    /// speed) stays out of these tests, so only what a test does ends `runtime_unusable`.
    fn start_with_binary(
        rt: Rt,
        sim: &Sim,
        model: &ModelServer,
        run_timeout: &str,
        bin: &Path,
    ) -> Listener {
        Listener::start_scaled(rt, sim, model, run_timeout, bin, 0.02)
    }

    /// `start_with_binary` with the listener's timers divided by `scale`.
    fn start_scaled(
        rt: Rt,
        sim: &Sim,
        model: &ModelServer,
        run_timeout: &str,
        bin: &Path,
        scale: f64,
    ) -> Listener {
        Listener::start_configured(rt, sim, model, run_timeout, bin, scale, ["", ""])
    }

    /// `start_scaled` with TOML lines added to the config's `[listen]` and `[listen.claude]`
    /// tables.
    pub(crate) fn start_configured(
        rt: Rt,
        sim: &Sim,
        model: &ModelServer,
        run_timeout: &str,
        bin: &Path,
        scale: f64,
        [listen, claude]: [&str; 2],
    ) -> Listener {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let work = dir.path().join("work");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        write_codex_home(&home, &model.base_url());
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "log_level = \"debug\"\n\n[listen]\nruntime = \"{rt}\"\nworkdir = \"{work}\"\n\
                 quiet_window = \"200ms\"\nmax_delay = \"1s\"\nrun_timeout = \"{run_timeout}\"\n\
                 kill_grace = \"2s\"\n{listen}\n\n[listen.claude]\nbinary = \"{bin}\"\n{claude}\n\n\
                 [listen.codex]\nbinary = \"{bin}\"\n",
                rt = rt.name(),
                work = work.display(),
                bin = bin.display(),
            ),
        )
        .unwrap();
        let stderr = std::fs::File::create(dir.path().join("listener.stderr")).unwrap();
        let stdout = std::fs::File::create(dir.path().join("listener.stdout")).unwrap();
        let child = Command::new(BIN)
            .args(["listen", "--log-format", "json"])
            .env_clear()
            .envs(base_env(&home, &model.base_url()))
            .env("AGENTCHAT_CONFIG", &config)
            .env("AGENTCHAT_API_KEY", &sim.me.1)
            .env("AGENTCHAT_API_BASE", sim.api_base())
            .env("AGENTCHAT_STATE_DIR", dir.path().join("state"))
            .env("AGENTCHAT_TEST_TIME_SCALE", scale.to_string())
            // As if started from inside a Claude Code or Codex session: the runs must not inherit these.
            .envs(NESTED_ENV.iter().map(|(k, v)| (k, v)))
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap();
        Listener {
            child: Some(child),
            dir,
        }
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub(crate) fn status(&self) -> Value {
        std::fs::read_to_string(self.dir.path().join("state/status.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("listener.stderr")).unwrap_or_default()
    }

    /// The JSON log lines whose `event` is `event`.
    pub(crate) fn events(&self, event: &str) -> Vec<Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| {
                v.get("event").and_then(|e| e.as_str()) == Some(event)
                    || v.pointer("/fields/event").and_then(|e| e.as_str()) == Some(event)
            })
            .collect()
    }

    /// Everything a failing assertion should show: status and the log's tail.
    pub(crate) fn explain(&self) -> String {
        let log = self.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        format!(
            "status: {:#}\nlistener log (newest first):\n{}",
            self.status(),
            tail.join("\n")
        )
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, Duration::from_secs(15));
        }
    }
}

/// A live (not zombie) process: its pid, cmdline (NULs as spaces) and cwd.
struct Proc {
    pid: i32,
    cmdline: String,
    cwd: Option<PathBuf>,
}

fn live_processes() -> Vec<Proc> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if is_gone(pid) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
        out.push(Proc { pid, cmdline, cwd });
    }
    out
}

/// The names of a process's environment variables (empty if it is gone).
fn env_names(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter_map(|kv| kv.split(|b| *b == b'=').next())
        .filter(|k| !k.is_empty())
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect()
}

/// The run's environment as `docs/runtimes.md` describes it, read from the live processes: the
/// nested-session variables stripped, `CLAUDE_CONFIG_DIR` not invented, the run's context
/// present, and `AGENTCHAT_API_KEY` only where Codex needs it (Claude gets the key through the
/// MCP config file only).
fn assert_run_environment(rt: Rt, run: &[Proc]) {
    let envs: Vec<(i32, Vec<String>)> = run.iter().map(|p| (p.pid, env_names(p.pid))).collect();
    for (pid, names) in &envs {
        for (nested, _) in NESTED_ENV {
            assert!(!names.iter().any(|n| n == nested), "pid {pid} has {nested}");
        }
        assert!(
            !names.iter().any(|n| n == "CLAUDE_CONFIG_DIR"),
            "pid {pid} has CLAUDE_CONFIG_DIR, which the user never set"
        );
        if rt == Rt::Claude {
            assert!(
                !names.iter().any(|n| n == "AGENTCHAT_API_KEY"),
                "pid {pid} (claude) has AGENTCHAT_API_KEY"
            );
        }
    }
    let any_has = |var: &str| envs.iter().any(|(_, n)| n.iter().any(|x| x == var));
    assert!(
        any_has("AGENTCHAT_RUN_KIND"),
        "no run process has the run's context"
    );
    if rt == Rt::Codex {
        assert!(
            any_has("AGENTCHAT_API_KEY"),
            "codex has no AGENTCHAT_API_KEY for the MCP token"
        );
    }
}

/// Processes of this test's run: started in (or naming) its temp dir, other than the listener.
fn run_processes(dir: &Path, listener: i32) -> Vec<Proc> {
    let d = dir.display().to_string();
    live_processes()
        .into_iter()
        .filter(|p| p.pid != listener)
        .filter(|p| p.cmdline.contains(&d) || p.cwd.as_ref().is_some_and(|c| c.starts_with(dir)))
        .collect()
}

/// Proof 1: a peer's message is answered by the real CLI through the listener.
async fn peer_message_is_answered_through_the_listener(rt: Rt) {
    let sim = Sim::start().await;
    let model = ModelServer::start(Mode::Normal).await;
    let listener = Listener::start(rt, &sim, &model, "120s");
    let sent = sim.peer_sends(PEER_TEXT).await;
    let conv = sent["conversation_id"].as_str().unwrap().to_string();

    let done = eventually_async(150, || async {
        listener.status()["last_cycle"]["outcome"] == "completed"
    })
    .await;
    assert!(done, "no completed run\n{}", listener.explain());
    assert_eq!(listener.status()["runtime"], rt.name());
    let steps = model.journal().steps;
    assert!(
        steps.iter().any(|s| s == "call agentchat_decide"),
        "the CLI never reached agentchat_decide: {steps:?}"
    );
    assert_answered(&sim.my_state().await, &conv);

    // The key is only in the MCP config file (Claude) and never in a log, the status file or
    // the run log; the peer's text never reaches the listener's own log.
    let key = &sim.me.1;
    let run_log = listener.status()["last_cycle"]["run_log"]
        .as_str()
        .map(PathBuf::from)
        .expect("the status names the run log");
    assert!(run_log.exists(), "{}", run_log.display());
    for entry in walk(&listener.dir.path().join("state")) {
        if entry.file_name().is_some_and(|n| n == "claude-mcp.json") {
            continue;
        }
        let bytes = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(key.as_str()),
            "the key is in {}",
            entry.display()
        );
    }
    let log = listener.log();
    assert!(
        !log.contains(key.as_str()),
        "the key is in the listener's log"
    );
    assert!(
        !log.contains(PEER_TEXT),
        "message text is in the listener's log"
    );
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Proof 2: a refused model key makes the profile `runtime_unusable`, logged once, and a later
/// wake starts no run.
async fn refused_model_key_makes_the_runtime_unusable_once(rt: Rt) {
    let sim = Sim::start().await;
    let model = ModelServer::start(Mode::Unauthorized).await;
    let listener = Listener::start(rt, &sim, &model, "120s");
    sim.peer_sends("First message.").await;

    let unusable = eventually_async(150, || async {
        listener.status()["state"] == "runtime_unusable"
    })
    .await;
    assert!(unusable, "never runtime_unusable\n{}", listener.explain());
    let status = listener.status();
    assert_eq!(status["last_cycle"]["outcome"], "unusable", "{status:#}");
    assert_eq!(status["last_cycle"]["run_started"], true, "{status:#}");
    assert_eq!(
        listener.events("runtime_unusable").len(),
        1,
        "{}",
        listener.explain()
    );
    let model_calls = model.journal().steps.len();
    assert!(model_calls >= 1, "the CLI never reached the model");
    let runs = status["counters"]["runs"].as_u64().unwrap();
    let cycles = status["counters"]["cycles"].as_u64().unwrap();

    // A second wake: a cycle runs, but no run starts and nothing new is logged as unusable.
    sim.peer_sends("Second message.").await;
    let next_cycle = eventually_async(60, || async {
        let s = listener.status();
        s["counters"]["cycles"].as_u64().unwrap_or(0) > cycles
            && s["last_cycle"]["ended_at"].is_string()
    })
    .await;
    assert!(next_cycle, "no second cycle\n{}", listener.explain());
    let status = listener.status();
    assert_eq!(
        status["counters"]["runs"].as_u64().unwrap(),
        runs,
        "{status:#}"
    );
    assert_eq!(status["state"], "runtime_unusable", "{status:#}");
    assert_eq!(
        listener.events("runtime_unusable").len(),
        1,
        "{}",
        listener.explain()
    );
    assert_eq!(
        model.journal().steps.len(),
        model_calls,
        "the model was called again"
    );
}

/// A wrapper that runs the pinned CLI, at a path the test can replace like an update would.
fn write_wrapper(path: &Path, real: &Path, version: &str) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension("new");
    std::fs::write(
        &tmp,
        format!("#!/bin/sh\n# {version}\nexec '{}' \"$@\"\n", real.display()),
    )
    .unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Unusable until fixed (`docs/runtimes.md`): until SIGHUP or a changed binary. The runtime becomes unusable
/// (the CLI refuses the login, or is not installed yet); then the CLI's binary is replaced or
/// installed (as an update or a first install does) and the next wake starts a run again.
async fn unusable_runtime_is_tried_again_once_its_binary_changes(installed_at_first: bool) {
    let sim = Sim::start().await;
    let model = ModelServer::start(Mode::Unauthorized).await;
    let bin_dir = tempfile::tempdir().unwrap();
    let wrapper = bin_dir.path().join("claude");
    if installed_at_first {
        write_wrapper(&wrapper, &claude_bin(), "v1");
    }
    // The wrapper runs the real CLI from where the kernel's line would not look for it (the
    // wrapper's own folder is its install): the profile names it, as docs/runtimes.md's upgrade
    // notes say.
    let real = std::fs::canonicalize(claude_bin()).unwrap();
    let package = real.parent().and_then(|b| b.parent()).unwrap();
    let listen = format!("sandbox_read = [\"{}\"]", package.display());
    let listener = Listener::start_configured(
        Rt::Claude,
        &sim,
        &model,
        "120s",
        &wrapper,
        0.02,
        [&listen, ""],
    );
    sim.peer_sends("First message.").await;
    let unusable = eventually_async(150, || async {
        listener.status()["state"] == "runtime_unusable"
    })
    .await;
    assert!(unusable, "never runtime_unusable\n{}", listener.explain());
    let runs = listener.status()["counters"]["runs"].as_u64().unwrap();
    assert_eq!(
        runs,
        u64::from(installed_at_first),
        "{}",
        listener.explain()
    );

    write_wrapper(&wrapper, &claude_bin(), "v2");
    sim.peer_sends("Second message.").await;
    // The status is written after the cycle's log lines, so once it shows the run, the log has it.
    let ran_again = eventually_async(150, || async {
        let s = listener.status();
        s["counters"]["runs"].as_u64() == Some(runs + 1) && s["last_cycle"]["ended_at"].is_string()
    })
    .await;
    assert!(
        ran_again,
        "no run after the binary changed\n{}",
        listener.explain()
    );
    let status = listener.status();
    assert_eq!(
        listener.events("runtime_unusable").len(),
        2,
        "{}",
        listener.explain()
    );
    assert_eq!(status["state"], "runtime_unusable", "{status:#}");
    assert_eq!(
        listener.events("runtime_binary_changed").len(),
        1,
        "{}",
        listener.explain()
    );
}

/// Issue 17, item 3: one Claude result with `api_error_status: 401` (the model key refused for a
/// moment) makes the profile `runtime_unusable`; nobody acts. The listener checks the runtime
/// again on its backoff as `doctor` does (`claude auth status`, which the key in the
/// environment passes), ends the state by itself and runs the card that waited, which is
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_refused_once_recovers_by_the_recheck_and_answers_without_sighup() {
    let sim = Sim::start().await;
    let model = ModelServer::start(Mode::UnauthorizedOnce).await;
    // Scaled twice: the first look comes 2.5 s after the runtime became unusable.
    let listener = Listener::start_scaled(Rt::Claude, &sim, &model, "120s", &Rt::Claude.bin(), 2.0);
    let sent = sim.peer_sends(PEER_TEXT).await;
    let conv = sent["conversation_id"].as_str().unwrap().to_string();
    let unusable = eventually_async(150, || async {
        !listener.events("runtime_unusable").is_empty()
    })
    .await;
    assert!(unusable, "never runtime_unusable\n{}", listener.explain());
    let done = eventually_async(150, || async {
        listener.status()["last_cycle"]["outcome"] == "completed"
    })
    .await;
    assert!(
        done,
        "no completed run after the re-check\n{}",
        listener.explain()
    );
    let recovered = listener.events("runtime_recovered");
    assert_eq!(recovered.len(), 1, "{}", listener.explain());
    assert_eq!(recovered[0]["via"], "recheck", "{}", listener.explain());
    let reasons = &listener.status()["last_cycle"]["reasons"];
    assert!(
        reasons.as_array().unwrap().contains(&"recovered".into()),
        "{reasons}"
    );
    assert_answered(&sim.my_state().await, &conv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_unusable_runtime_is_tried_again_once_its_binary_changes() {
    unusable_runtime_is_tried_again_once_its_binary_changes(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_not_found_is_tried_again_once_it_is_installed() {
    unusable_runtime_is_tried_again_once_its_binary_changes(false).await;
}

/// Proofs 3 and 4: a model that never answers; while the run waits on it, no process's
/// cmdline holds the key; the time limit ends the run and leaves no process of its tree.
async fn hung_model_is_stopped_at_the_time_limit_without_leftovers_or_key_in_argv(rt: Rt) {
    let sim = Sim::start().await;
    let model = ModelServer::start(Mode::Hang).await;
    let listener = Listener::start(rt, &sim, &model, HUNG_RUN_LIMIT);
    let key = sim.me.1.clone();
    sim.peer_sends("Are you there?").await;

    let waiting = eventually_async(60, || async {
        model.journal().steps.iter().any(|s| s == "hang")
    })
    .await;
    assert!(
        waiting,
        "the CLI never called the model\n{}",
        listener.explain()
    );

    // Proof 4, while the run is alive.
    let alive = run_processes(listener.dir.path(), listener.pid());
    assert!(
        !alive.is_empty(),
        "no process of the run found while it waits on the model\n{}",
        listener.explain()
    );
    assert_run_environment(rt, &alive);
    let mut scanned = 0;
    for p in live_processes() {
        scanned += 1;
        assert!(
            !p.cmdline.contains(&key),
            "the key is on the command line of pid {}",
            p.pid
        );
    }
    assert!(scanned > alive.len());

    // Proof 3: the time limit ends it.
    let failed = eventually_async(60, || async {
        listener.status()["last_cycle"]["outcome"] == "failed"
    })
    .await;
    assert!(failed, "the run was not ended\n{}", listener.explain());
    let failure = listener.status()["last_cycle"]["failure"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(failure.contains("time limit"), "{failure}");
    let left: Vec<String> = run_processes(listener.dir.path(), listener.pid())
        .iter()
        .map(|p| format!("{} {}", p.pid, p.cmdline))
        .collect();
    assert!(
        left.is_empty(),
        "processes left after the time limit: {left:#?}"
    );
    let alive_pids: Vec<i32> = alive.iter().map(|p| p.pid).collect();
    let still: Vec<i32> = live_processes()
        .iter()
        .map(|p| p.pid)
        .filter(|pid| alive_pids.contains(pid))
        .collect();
    assert!(still.is_empty(), "run processes still alive: {still:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_answers_a_peer_through_the_listener() {
    peer_message_is_answered_through_the_listener(Rt::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_answers_a_peer_through_the_listener() {
    peer_message_is_answered_through_the_listener(Rt::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_refused_model_key_is_runtime_unusable_reported_once() {
    refused_model_key_makes_the_runtime_unusable_once(Rt::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_refused_model_key_is_runtime_unusable_reported_once() {
    refused_model_key_makes_the_runtime_unusable_once(Rt::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_hung_model_hits_the_time_limit_no_leftovers_no_key_in_argv() {
    hung_model_is_stopped_at_the_time_limit_without_leftovers_or_key_in_argv(Rt::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_hung_model_hits_the_time_limit_no_leftovers_no_key_in_argv() {
    hung_model_is_stopped_at_the_time_limit_without_leftovers_or_key_in_argv(Rt::Codex).await;
}

//! Shared pieces of the listener's integration tests: the sim in-process on real loopback, its
//! control API, a recording `sh` script as the run, and the real `agentchat listen` binary as a
//! child process with a Drop guard that never leaves a process behind.

pub mod fake;

pub use crate::common::{eventually, eventually_async, is_gone};

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_agentchat");

/// The sim, started in this test's runtime.
pub struct Sim {
    pub api_base: String,
    pub http: reqwest::Client,
    /// `None` for a sim in another process (`Sim::external`).
    _handle: Option<agentchat::sim::SimHandle>,
}

pub struct Agent {
    /// Bare handle.
    pub handle: String,
    pub key: String,
}

impl Sim {
    pub async fn start(time_scale: f64) -> Sim {
        agentchat::sys::tls::install_crypto_provider();
        let handle = agentchat::sim::start(agentchat::sim::SimConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            time_scale,
            seed_demo: false,
        })
        .await
        .expect("sim starts");
        Sim {
            api_base: handle.api_base.clone(),
            http: reqwest::Client::new(),
            _handle: Some(handle),
        }
    }

    /// The control API of a sim running elsewhere (an `agentchat sim` child process).
    pub fn external(api_base: &str) -> Sim {
        // reqwest's client needs the process's rustls provider; a test that runs alone has no
        // other step that installs it.
        agentchat::sys::tls::install_crypto_provider();
        Sim {
            api_base: api_base.to_string(),
            http: reqwest::Client::new(),
            _handle: None,
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        let req = self.http.post(self.url(path)).json(&body);
        json_answer(req, &format!("POST {path}"), true).await
    }

    pub async fn get(&self, path: &str) -> Value {
        json_answer(self.http.get(self.url(path)), &format!("GET {path}"), false).await
    }

    pub async fn get_as(&self, key: &str, path: &str) -> Value {
        let req = self.http.get(self.url(path)).bearer_auth(key);
        json_answer(req, &format!("GET {path}"), false).await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.api_base, path)
    }

    pub async fn agent(&self, handle: &str) -> Agent {
        let v = self.post("/_sim/agents", json!({ "handle": handle })).await;
        Agent {
            handle: v["handle"]
                .as_str()
                .unwrap()
                .trim_start_matches('@')
                .to_string(),
            key: v["api_key"].as_str().unwrap().to_string(),
        }
    }

    /// Sends a message from `from` to `to` through the real route.
    pub async fn send(&self, from: &Agent, to: &Agent, text: &str) -> Value {
        let req = self
            .http
            .post(self.url("/v1/messages"))
            .bearer_auth(&from.key)
            .json(&json!({
                "to": to.handle,
                "client_msg_id": format!("t-{}", fastrand::u64(..)),
                "content": { "text": text },
            }));
        json_answer(req, "send", false).await
    }

    /// Creates a group owned by `owner` that invites `invitee`; returns the answer.
    pub async fn invite(&self, owner: &Agent, invitee: &Agent, name: &str) -> Value {
        self.post(
            "/_sim/groups",
            json!({ "owner": owner.handle, "name": name, "invite": [invitee.handle] }),
        )
        .await
    }

    /// What the sim holds for the agent (`/_sim/agents/{h}/state`).
    pub async fn state(&self, a: &Agent) -> Value {
        self.get(&format!("/_sim/agents/{}/state", a.handle)).await
    }

    /// The tray as the agent itself reads it.
    pub async fn tray(&self, a: &Agent) -> Value {
        self.get_as(&a.key, "/v1/inbox?invites=1&limit=50").await
    }

    pub async fn connects(&self, a: &Agent) -> Vec<Value> {
        let v = self
            .get(&format!("/_sim/agents/{}/connects", a.handle))
            .await;
        as_list(&v, "connects")
    }

    pub async fn acks(&self, a: &Agent) -> Vec<Value> {
        let v = self.get(&format!("/_sim/agents/{}/acks", a.handle)).await;
        as_list(&v, "acks")
    }

    pub async fn close_sockets(&self, a: &Agent, code: u16, reason: &str) {
        self.post(
            &format!("/_sim/agents/{}/sockets/close", a.handle),
            json!({ "code": code, "reason": reason }),
        )
        .await;
    }

    pub async fn silence(&self, a: &Agent) {
        self.post(
            &format!("/_sim/agents/{}/sockets/silence", a.handle),
            json!({}),
        )
        .await;
    }

    pub async fn wake(&self, a: &Agent, reason: &str) {
        self.post(
            &format!("/_sim/agents/{}/wake", a.handle),
            json!({ "reason": reason }),
        )
        .await;
    }

    pub async fn refuse_key(&self, a: &Agent) {
        self.post(&format!("/_sim/agents/{}/refuse-key", a.handle), json!({}))
            .await;
    }

    pub async fn texts(&self, runtime: &str, key: &str) -> Value {
        self.get_as(key, &format!("/v1/texts?runtime={runtime}"))
            .await
    }

    pub async fn replace_texts(&self, runtime: &str, texts: Value) {
        self.post(&format!("/_sim/texts/{runtime}"), texts).await;
    }
}

/// Sends `req` and asserts a 2xx; the answer as JSON (`lenient`: an answer that is not JSON is
/// `Null` rather than a failure).
async fn json_answer(req: reqwest::RequestBuilder, what: &str, lenient: bool) -> Value {
    let r = req.send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert!(status.is_success(), "{what} -> {status}: {text}");
    match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(_) if lenient => Value::Null,
        Err(e) => panic!("{what}: not JSON ({e}): {text}"),
    }
}

/// A list either bare or under `key`.
pub fn as_list(v: &Value, key: &str) -> Vec<Value> {
    v.as_array()
        .or_else(|| v.get(key).and_then(|x| x.as_array()))
        .cloned()
        .unwrap_or_default()
}

/// A loopback port free right now.
/// Where the listener serves its metrics (`http://ip:port`), from its `metrics_serving` line:
/// the tests give it port 0 and read the port the kernel chose, so no port is picked before the
/// listener binds it (another process could take it meanwhile).
pub async fn metrics_base(l: &Listener) -> String {
    assert!(
        eventually(10.0, || l.count("metrics_serving") >= 1).await,
        "no metrics_serving line:\n{}",
        l.log()
    );
    let serving = l.events("metrics_serving");
    let addr = serving[0]["addr"]
        .as_str()
        .expect("metrics_serving has its addr");
    format!("http://{addr}")
}

/// Accepted socket connects in a connect log.
pub fn accepted(connects: &[Value]) -> usize {
    connects.iter().filter(|c| is_accepted(c)).count()
}

pub fn is_accepted(c: &Value) -> bool {
    c.get("outcome")
        .and_then(|o| o.as_str())
        .map(|o| o == "accepted")
        .or_else(|| c.get("accepted").and_then(|a| a.as_bool()))
        .unwrap_or(false)
}

/// A connect entry's time in unix ms.
pub fn connect_ms(c: &Value) -> u64 {
    for k in ["at_ms", "ms", "time_ms", "t_ms"] {
        if let Some(v) = c.get(k).and_then(|x| x.as_u64()) {
            return v;
        }
    }
    let at = c["at"].as_str().expect("connect entry has a time");
    let t = humantime::parse_rfc3339_weak(at).expect("rfc3339");
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The recording run: a `sh` script that counts its runs and keeps each run's stdin, env and
/// argv; `sleep` and `exit` files in its dir make a run slow or fail; `grandchild` makes it start
/// a background `sleep` whose pid it records; `trap` makes the run (and its children, which
/// inherit the ignored signal) ignore SIGTERM.
pub struct Recorder {
    pub dir: PathBuf,
    pub script: PathBuf,
}

impl Recorder {
    pub fn new(root: &Path) -> Recorder {
        let dir = root.join("rec");
        std::fs::create_dir_all(&dir).unwrap();
        let script = root.join("run.sh");
        let body = format!(
            r#"#!/bin/sh
d='{d}'
if [ -f "$d/trap" ]; then trap '' TERM; fi
n=$(( $(cat "$d/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$d/count.tmp" && mv "$d/count.tmp" "$d/count"
echo "$$" > "$d/pid.$n"
cat > "$d/stdin.$n"
env > "$d/env.$n"
echo "$0 $*" > "$d/argv.$n"
echo "run $n started"
if [ -f "$d/grandchild" ]; then
  sleep 300 &
  echo "$!" > "$d/grandchild.$n"
fi
if [ -f "$d/sleep" ]; then
  sleep "$(cat "$d/sleep")"
fi
echo "$n" > "$d/done.$n"
if [ -f "$d/exit" ]; then exit "$(cat "$d/exit")"; fi
exit 0
"#,
            d = dir.display()
        );
        std::fs::write(&script, body).unwrap();
        Recorder { dir, script }
    }

    pub fn count(&self) -> usize {
        std::fs::read_to_string(self.dir.join("count"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn done(&self, n: usize) -> bool {
        self.dir.join(format!("done.{n}")).exists()
    }

    pub fn file(&self, name: &str, n: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.{n}"))).unwrap_or_default()
    }

    /// The AGENTCHAT_* variables run `n` saw.
    pub fn env(&self, n: usize) -> std::collections::BTreeMap<String, String> {
        self.file("env", n)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub fn set(&self, name: &str, value: &str) {
        std::fs::write(self.dir.join(name), value).unwrap();
    }
}

impl Drop for Recorder {
    /// Kills any background `sleep` a run left, so a failed test leaves nothing running.
    fn drop(&mut self) {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let pid = std::fs::read_to_string(e.path())
                    .ok()
                    .and_then(|s| s.trim().parse::<i32>().ok());
                if (name.starts_with("grandchild.") || name.starts_with("pid."))
                    && let Some(pid) = pid
                    && !is_gone(pid)
                {
                    crate::common::signal(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// Listener settings a test can change; written as the config file.
#[derive(Clone)]
pub struct Opts {
    pub quiet: &'static str,
    pub max_delay: &'static str,
    pub run_timeout: &'static str,
    pub kill_grace: &'static str,
    pub idle_timeout: &'static str,
    pub time_scale: f64,
    pub extra_env: Vec<(String, String)>,
    /// Top-level config lines (before `[listen]`).
    pub top_toml: String,
    /// Appended to the config file (after the `[listen]` keys).
    pub extra_toml: String,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            quiet: "300ms",
            max_delay: "2s",
            run_timeout: "60s",
            kill_grace: "2s",
            idle_timeout: "100s",
            time_scale: 1.0,
            extra_env: vec![],
            extra_toml: String::new(),
            top_toml: String::new(),
        }
    }
}

/// One test's files: the config, the state dir, the recorder, the listener's stderr.
pub struct Setup {
    pub tmp: tempfile::TempDir,
    pub rec: Recorder,
    pub config: PathBuf,
    pub state_dir: PathBuf,
}

impl Setup {
    pub fn new(opts: &Opts) -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let rec = Recorder::new(tmp.path());
        let config = tmp.path().join("config.toml");
        let toml = format!(
            r#"log_level = "debug"
{top}
[listen]
runtime = "script"
command = ["/bin/sh", "{script}"]
sandbox_write = ["{rec}"]
quiet_window = "{q}"
max_delay = "{m}"
run_timeout = "{rt}"
kill_grace = "{kg}"
idle_timeout = "{it}"
"#,
            top = opts.top_toml,
            script = rec.script.display(),
            // The recorder's folder, outside the workdir: the kernel's line lets the script
            // write there and nowhere else (runtime::sandbox).
            rec = rec.dir.display(),
            q = opts.quiet,
            m = opts.max_delay,
            rt = opts.run_timeout,
            kg = opts.kill_grace,
            it = opts.idle_timeout,
        );
        std::fs::write(&config, toml + &opts.extra_toml).unwrap();
        let state_dir = tmp.path().join("state");
        Setup {
            tmp,
            rec,
            config,
            state_dir,
        }
    }

    pub fn status(&self) -> Value {
        std::fs::read_to_string(self.state_dir.join("status.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null)
    }
}

/// The real binary as a child. Dropping it sends SIGTERM, waits, then SIGKILLs.
pub struct Listener {
    pub child: Option<Child>,
    pub stderr_path: PathBuf,
}

pub fn listener_command(sim: &Sim, agent: &Agent, setup: &Setup, opts: &Opts) -> Command {
    listener_command_for(&sim.api_base, &agent.key, setup, opts)
}

pub fn listener_command_for(api_base: &str, key: &str, setup: &Setup, opts: &Opts) -> Command {
    let mut cmd = listener_command_bare(api_base, key, setup, opts);
    cmd.arg("--log-format").arg("json");
    cmd
}

/// `agentchat listen` with the test's environment but no `--log-format` (so the default or a
/// test's own choice applies).
pub fn listener_command_bare(api_base: &str, key: &str, setup: &Setup, opts: &Opts) -> Command {
    let mut cmd = crate::common::isolated_command(BIN, &["NOTIFY_SOCKET"]);
    cmd.arg("listen");
    cmd.env("AGENTCHAT_CONFIG", &setup.config)
        .env("AGENTCHAT_API_KEY", key)
        .env("AGENTCHAT_API_BASE", api_base)
        .env("AGENTCHAT_STATE_DIR", &setup.state_dir)
        .env("AGENTCHAT_TEST_TIME_SCALE", opts.time_scale.to_string())
        .env("AGENTCHAT_LOG", "debug");
    for (k, v) in &opts.extra_env {
        cmd.env(k, v);
    }
    cmd
}

impl Listener {
    pub fn start(sim: &Sim, agent: &Agent, setup: &Setup, opts: &Opts) -> Listener {
        Self::spawn(listener_command(sim, agent, setup, opts), setup, "")
    }

    pub fn spawn(mut cmd: Command, setup: &Setup, suffix: &str) -> Listener {
        let stderr_path = setup.tmp.path().join(format!("listener{suffix}.stderr"));
        let stdout_path = setup.tmp.path().join(format!("listener{suffix}.stdout"));
        cmd.stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout_path).unwrap())
            .stderr(std::fs::File::create(&stderr_path).unwrap());
        let child = cmd.spawn().expect("listener starts");
        Listener {
            child: Some(child),
            stderr_path,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The JSON log lines whose `event` is `event`.
    pub fn events(&self, event: &str) -> Vec<Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v.get("event").and_then(|e| e.as_str()) == Some(event))
            .collect()
    }

    pub fn count(&self, event: &str) -> usize {
        self.events(event).len()
    }

    /// The waits the listener chose, in order: `retry_in_ms` of its `event` lines (`backoff`,
    /// `key_refused`, `connect_budget`), the decision rather than a wall-clock gap.
    pub fn waits_chosen(&self, event: &str) -> Vec<u64> {
        self.events(event)
            .iter()
            .filter_map(|e| e["retry_in_ms"].as_u64())
            .collect()
    }

    pub fn signal(&self, sig: i32) {
        crate::common::signal(self.pid(), sig);
    }

    /// Waits for the exit, up to `secs`; the exit code, or None on timeout.
    pub fn wait_exit(&mut self, secs: f64) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Some(st.code().unwrap_or(-1));
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && let Ok(None) = child.try_wait()
        {
            crate::common::stop_child(&mut child, Duration::from_secs(10));
        }
    }
}

/// Lines of `file` that hold `needle`.
pub fn grep(haystack: &str, needle: &str) -> Vec<String> {
    haystack
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// Waits until the listener has ended its first cycle (the connect wake), so a test's own wakes
/// start from a quiet listener.
pub async fn connect_cycle_ended(l: &Listener) {
    assert!(
        eventually(15.0, || l.count("cycle_end") >= 1).await,
        "the connect cycle never ended:\n{}",
        l.log()
    );
}

/// The usual scene: the sim, `alice` who writes, and `bob` whose listener `l` runs with the files
/// of `setup`, past its connect cycle.
pub struct Scene {
    pub sim: Sim,
    pub alice: Agent,
    pub bob: Agent,
    pub setup: Setup,
    pub l: Listener,
}

/// [`Scene`] with `bob`'s listener started with `opts`.
pub async fn bob_listening(opts: &Opts) -> Scene {
    bob_listening_with(opts, &[]).await
}

/// `bob_listening` with the recorder's switch files (`sleep`, `exit`, ...) set before the start.
pub async fn bob_listening_with(opts: &Opts, rec: &[(&str, &str)]) -> Scene {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let setup = Setup::new(opts);
    for (name, value) in rec {
        setup.rec.set(name, value);
    }
    let l = Listener::start(&sim, &bob, &setup, opts);
    connect_cycle_ended(&l).await;
    Scene {
        sim,
        alice,
        bob,
        setup,
        l,
    }
}

/// `agentchat sim` as a child process: it can be killed with SIGKILL and started again on the same
/// port, as a server restart looks to a listener; killed when dropped.
pub struct SimProcess {
    child: Child,
    pub api_base: String,
}

impl SimProcess {
    /// The test build's sim on `listen`.
    pub fn start(listen: &str) -> SimProcess {
        SimProcess::spawn(BIN, &["--listen", listen])
    }

    /// `binary sim ARGS`, once it printed its api_base.
    pub fn spawn(binary: &str, args: &[&str]) -> SimProcess {
        use std::io::BufRead;
        let mut child = Command::new(binary)
            .arg("sim")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("agentchat sim starts");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the sim prints its api_base");
        let v: Value = serde_json::from_str(&line).expect("one JSON line");
        SimProcess {
            child,
            api_base: v["api_base"].as_str().expect("api_base").to_string(),
        }
    }

    /// SIGKILL: no close frame, no goodbye.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

//! `agentchat listen --all`: every profile of the config in one process, each its own listener.
//! The real binary against the sim on loopback, each profile with its own recording script, key
//! file and state dir (under the test's own `XDG_STATE_HOME`); waits poll the JSON log, the
//! recorders, the status files or the sim.

use crate::listen_support::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One profile of a host: its agent and its recorder.
pub(crate) struct Profile {
    pub(crate) name: String,
    pub(crate) agent: Agent,
    pub(crate) rec: Recorder,
}

/// A host's files: the config, the key files, the state home, the recorders.
pub(crate) struct HostSetup {
    pub(crate) tmp: tempfile::TempDir,
    pub(crate) config: PathBuf,
    pub(crate) profiles: Vec<Profile>,
}

impl HostSetup {
    /// Profiles `names`, each with a new agent of the sim (`key` overrides one's key file).
    pub(crate) async fn new(sim: &Sim, names: &[&str]) -> HostSetup {
        let tmp = tempfile::tempdir().unwrap();
        let mut profiles = Vec::new();
        for name in names {
            let agent = sim.agent(&format!("{name}-agent")).await;
            let dir = tmp.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            profiles.push(Profile {
                name: name.to_string(),
                agent,
                rec: Recorder::new(&dir),
            });
        }
        let config = tmp.path().join("config.toml");
        let setup = HostSetup {
            tmp,
            config,
            profiles,
        };
        for p in &setup.profiles {
            setup.write_key(&p.name, &p.agent.key);
        }
        setup.write_config(names, "");
        setup
    }

    fn write_key(&self, name: &str, key: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.key_path(name);
        std::fs::write(&path, key).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    fn key_path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(format!("{name}.key"))
    }

    /// The config naming `names` (each of this setup's profiles), with `extra` appended.
    pub(crate) fn write_config(&self, names: &[&str], extra: &str) {
        let mut toml = String::from(
            "log_level = \"debug\"\n[listen]\nruntime = \"script\"\nquiet_window = \"300ms\"\n\
             max_delay = \"2s\"\nkill_grace = \"2s\"\nidle_timeout = \"100s\"\n",
        );
        for name in names {
            let p = self.profile(name);
            toml.push_str(&format!(
                "\n[profiles.{name}]\napi_key_file = \"{key}\"\n[profiles.{name}.listen]\n\
                 command = [\"/bin/sh\", \"{script}\"]\nsandbox_write = [\"{rec}\"]\n",
                key = self.key_path(name).display(),
                script = p.rec.script.display(),
                rec = p.rec.dir.display(),
            ));
        }
        toml.push_str(extra);
        std::fs::write(&self.config, toml).unwrap();
    }

    pub(crate) fn profile(&self, name: &str) -> &Profile {
        self.profiles.iter().find(|p| p.name == name).unwrap()
    }

    /// The pid the profile's first run wrote (empty until the run has started).
    fn run_pid_text(&self, name: &str) -> String {
        self.profile(name).rec.file("pid", 1).trim().to_string()
    }

    fn run_pid(&self, name: &str) -> i32 {
        self.run_pid_text(name).parse().unwrap()
    }

    /// Waits until each of `names` has a run going (its pid file written).
    async fn runs_started(&self, names: &[&str], l: &Listener) {
        for name in names {
            assert!(
                eventually(20.0, || !self.run_pid_text(name).is_empty()).await,
                "{name}'s run never started:\n{}",
                l.log()
            );
        }
    }

    pub(crate) fn state_home(&self) -> PathBuf {
        self.tmp.path().join("xdg")
    }

    pub(crate) fn state_dir(&self, name: &str) -> PathBuf {
        self.state_home().join("agentchat").join(name)
    }

    pub(crate) fn status(&self, name: &str) -> Value {
        std::fs::read_to_string(self.state_dir(name).join("status.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null)
    }

    /// `agentchat listen --all` for this setup, its environment its own.
    pub(crate) fn command(&self, sim: &Sim) -> Command {
        let mut cmd = isolated(self.tmp.path());
        cmd.args(["listen", "--all", "--log-format", "json"]);
        cmd.env("AGENTCHAT_CONFIG", &self.config)
            .env("AGENTCHAT_API_BASE", &sim.api_base)
            .env("XDG_STATE_HOME", self.state_home())
            .env("AGENTCHAT_LOG", "debug");
        cmd
    }

    fn start(&self, sim: &Sim) -> Listener {
        self.spawn(self.command(sim))
    }

    pub(crate) fn spawn(&self, mut cmd: Command) -> Listener {
        let stderr_path = self.tmp.path().join("host.stderr");
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap());
        Listener {
            child: Some(cmd.spawn().expect("the host starts")),
            stderr_path,
        }
    }
}

/// The binary with no AGENTCHAT_* or NOTIFY_SOCKET of the test's own environment, and `home`.
fn isolated(home: &Path) -> Command {
    let mut cmd = crate::common::isolated_command(BIN, &["NOTIFY_SOCKET"]);
    cmd.env("HOME", home);
    cmd
}

/// The JSON lines of `l` whose `event` is `event` and whose `profile` is `profile`.
pub(crate) fn events_of(l: &Listener, event: &str, profile: &str) -> Vec<Value> {
    l.events(event)
        .into_iter()
        .filter(|v| v["profile"] == profile)
        .collect()
}

/// Waits until each of `names` has ended its connect cycle.
pub(crate) async fn each_connect_cycle_ended(l: &Listener, names: &[&str]) {
    for name in names {
        assert!(
            eventually(20.0, || !events_of(l, "cycle_end", name).is_empty()).await,
            "{name}'s connect cycle never ended:\n{}",
            l.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_profiles_in_one_process_each_run_their_own_card_with_their_own_status() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["a", "b", "c"];
    let setup = HostSetup::new(&sim, &names).await;
    let l = setup.start(&sim);
    each_connect_cycle_ended(&l, &names).await;
    for name in names {
        let p = setup.profile(name);
        sim.send(&alice, &p.agent, &format!("hello {name}")).await;
    }
    for name in names {
        let p = setup.profile(name);
        assert!(
            eventually(20.0, || p.rec.done(1)).await,
            "{name} never ran:\n{}",
            l.log()
        );
        // Its own run: with its own agent's key, and no other profile's.
        let env = p.rec.env(1);
        assert_eq!(
            env.get("AGENTCHAT_API_KEY"),
            Some(&p.agent.key),
            "{name}'s run has another key"
        );
        assert_eq!(p.rec.count(), 1, "{name} ran once");
        // Its own status file, in its own state dir, showing its own agent.
        assert!(
            eventually(10.0, || {
                let s = setup.status(name);
                s["profile"] == name
                    && s["state"] == "connected"
                    && s["last_cycle"]["outcome"] == "completed"
            })
            .await,
            "{name}: {}",
            setup.status(name)
        );
        let s = setup.status(name);
        assert_eq!(s["handle"], format!("@{}", p.agent.handle), "{s}");
        assert_eq!(s["pid"], l.pid(), "{s}");
    }
    // One process: every profile's start is in this one log.
    assert_eq!(l.count("listener_start"), 3, "{}", l.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_log_line_of_a_profile_names_it() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["x", "y"];
    let setup = HostSetup::new(&sim, &names).await;
    let l = setup.start(&sim);
    each_connect_cycle_ended(&l, &names).await;
    sim.send(&alice, &setup.profile("x").agent, "hi").await;
    assert!(eventually(20.0, || setup.profile("x").rec.done(1)).await);
    assert!(eventually(10.0, || !events_of(&l, "run_end", "x").is_empty()).await);
    let log = l.log();
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // The socket's, the cycle's and the run's lines all say which profile they are of.
    for event in [
        "listener_start",
        "socket_connected",
        "cycle_end",
        "run_end",
        "frames",
    ] {
        let of_event: Vec<&Value> = lines.iter().filter(|v| v["event"] == event).collect();
        assert!(!of_event.is_empty(), "no {event} line:\n{log}");
        for v in of_event {
            assert!(
                v["profile"] == "x" || v["profile"] == "y",
                "{event} line without its profile: {v}"
            );
        }
    }
    // Every line inside a profile names it: the only lines without one are the process's own.
    for v in &lines {
        if v.get("profile").is_none() {
            let ev = v["event"].as_str().unwrap_or("");
            assert!(
                [
                    "host_start",
                    "default_profile_skipped",
                    "open_files_limit",
                    "reload",
                    "reloaded"
                ]
                .contains(&ev),
                "a line without its profile: {v}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_key_in_one_profile_leaves_the_others_running_and_says_so_in_its_status() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let setup = HostSetup::new(&sim, &["good", "bad"]).await;
    setup.write_key("bad", "ac_not_a_key_the_server_knows");
    let l = setup.start(&sim);
    each_connect_cycle_ended(&l, &["good"]).await;
    assert!(
        eventually(20.0, || setup.status("bad")["state"] == "key_refused").await,
        "{}\n{}",
        setup.status("bad"),
        l.log()
    );
    sim.send(&alice, &setup.profile("good").agent, "still here?")
        .await;
    assert!(
        eventually(20.0, || setup.profile("good").rec.done(1)).await,
        "{}",
        l.log()
    );
    assert_eq!(setup.status("good")["state"], "connected");
    assert!(
        eventually(20.0, || !events_of(&l, "key_refused", "bad").is_empty()).await,
        "no key_refused event for the bad profile:\n{}",
        l.log()
    );
    assert!(!l.log().contains("ac_not_a_key_the_server_knows"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_error_in_one_profiles_table_is_reported_for_it_and_the_others_run() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let setup = HostSetup::new(&sim, &["ok"]).await;
    // A bad value in one profile's table, and another profile whose key file is missing.
    setup.write_config(
        &["ok"],
        "\n[profiles.broken.listen]\nquiet_window = \"soon\"\n\
         \n[profiles.keyless]\napi_key_file = \"/nonexistent/keyless.key\"\n",
    );
    let mut l = setup.start(&sim);
    each_connect_cycle_ended(&l, &["ok"]).await;
    let errors = l.events("profile_config_error");
    let broken = errors.iter().find(|v| v["profile"] == "broken");
    let keyless = errors.iter().find(|v| v["profile"] == "keyless");
    assert!(
        broken.is_some_and(|v| v["error"]
            .as_str()
            .unwrap()
            .contains("profiles.broken.listen.quiet_window")),
        "{}",
        l.log()
    );
    assert!(
        keyless.is_some_and(|v| v["error"].as_str().unwrap().contains("keyless.key")),
        "{}",
        l.log()
    );
    sim.send(&alice, &setup.profile("ok").agent, "hi").await;
    assert!(
        eventually(20.0, || setup.profile("ok").rec.done(1)).await,
        "{}",
        l.log()
    );
    assert_eq!(l.wait_exit(0.2), None, "the host keeps running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_starts_an_added_profile_stops_a_removed_one_and_reloads_a_changed_one() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let setup = HostSetup::new(&sim, &["keep", "change", "drop", "add"]).await;
    setup.write_config(&["keep", "change", "drop"], "");
    let l = setup.start(&sim);
    each_connect_cycle_ended(&l, &["keep", "change", "drop"]).await;
    let keep_connects = sim.connects(&setup.profile("keep").agent).await.len();
    // `change` gets another quiet window, `drop` leaves, `add` comes.
    setup.write_config(&["keep", "change", "add"], "");
    let text = std::fs::read_to_string(&setup.config).unwrap().replace(
        "[profiles.change.listen]\n",
        "[profiles.change.listen]\nquiet_window = \"350ms\"\n",
    );
    std::fs::write(&setup.config, text).unwrap();
    l.signal(libc::SIGHUP);
    each_connect_cycle_ended(&l, &["add"]).await;
    assert!(
        eventually(15.0, || setup.status("drop")["state"] == "stopped").await,
        "{}\n{}",
        setup.status("drop"),
        l.log()
    );
    assert!(
        eventually(10.0, || !events_of(&l, "coalescer_windows", "change")
            .is_empty())
        .await,
        "{}",
        l.log()
    );
    // `keep` was left alone: no reload line, the same socket.
    assert!(events_of(&l, "reload", "keep").is_empty(), "{}", l.log());
    assert_eq!(
        sim.connects(&setup.profile("keep").agent).await.len(),
        keep_connects
    );
    // The added one serves its agent.
    sim.send(&alice, &setup.profile("add").agent, "welcome")
        .await;
    assert!(
        eventually(20.0, || setup.profile("add").rec.done(1)).await,
        "{}",
        l.log()
    );
    assert_eq!(setup.status("keep")["state"], "connected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_every_profile_and_each_run_gets_its_grace() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["p", "q"];
    let setup = HostSetup::new(&sim, &names).await;
    let mut l = setup.start(&sim);
    each_connect_cycle_ended(&l, &names).await;
    // Each run sleeps and ignores nothing: SIGTERM ends it within its grace.
    for name in names {
        setup.profile(name).rec.set("sleep", "30");
        sim.send(&alice, &setup.profile(name).agent, "take your time")
            .await;
    }
    setup.runs_started(&names, &l).await;
    let run_pids: Vec<i32> = names.iter().map(|n| setup.run_pid(n)).collect();
    l.signal(libc::SIGTERM);
    assert_eq!(l.wait_exit(20.0), Some(0), "{}", l.log());
    for name in names {
        assert_eq!(setup.status(name)["state"], "stopped", "{name}");
        assert_eq!(events_of(&l, "stop_waiting", name).len(), 1, "{}", l.log());
    }
    for pid in run_pids {
        assert!(is_gone(pid), "run {pid} left behind");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_kills_every_profiles_run_now() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["s", "t"];
    let setup = HostSetup::new(&sim, &names).await;
    setup.write_config(&names, "");
    let text = std::fs::read_to_string(&setup.config)
        .unwrap()
        .replace("kill_grace = \"2s\"", "kill_grace = \"60s\"");
    std::fs::write(&setup.config, text).unwrap();
    let mut l = setup.start(&sim);
    each_connect_cycle_ended(&l, &names).await;
    for name in names {
        setup.profile(name).rec.set("trap", "");
        setup.profile(name).rec.set("sleep", "120");
        sim.send(&alice, &setup.profile(name).agent, "ignore TERM")
            .await;
    }
    setup.runs_started(&names, &l).await;
    l.signal(libc::SIGTERM);
    assert!(
        eventually(10.0, || l.count("stop_waiting") == 2).await,
        "{}",
        l.log()
    );
    let started = std::time::Instant::now();
    l.signal(libc::SIGTERM);
    assert_eq!(l.wait_exit(15.0), Some(0), "{}", l.log());
    assert!(started.elapsed().as_secs() < 15);
    for name in names {
        let pid = setup.run_pid(name);
        assert!(is_gone(pid), "{name}'s run left behind");
        assert_eq!(events_of(&l, "stop_forced", name).len(), 1, "{}", l.log());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sd_notify_ready_comes_once_for_the_process() {
    let sim = Sim::start(1.0).await;
    let names = ["n1", "n2", "n3"];
    let setup = HostSetup::new(&sim, &names).await;
    let socket_path = setup.tmp.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(std::time::Duration::from_millis(200)))
        .unwrap();
    let mut cmd = setup.command(&sim);
    cmd.env("NOTIFY_SOCKET", &socket_path);
    let mut l = setup.spawn(cmd);
    each_connect_cycle_ended(&l, &names).await;
    l.signal(libc::SIGTERM);
    assert_eq!(l.wait_exit(20.0), Some(0), "{}", l.log());
    let mut said = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        said.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    let ready = said.iter().filter(|m| m.contains("READY=1")).count();
    let stopping = said.iter().filter(|m| m.contains("STOPPING=1")).count();
    assert_eq!(ready, 1, "{said:?}");
    assert_eq!(stopping, 1, "{said:?}");
    // No profile's own STATUS= line: three profiles have no one state.
    assert!(!said.iter().any(|m| m.contains("STATUS=")), "{said:?}");
    let r = said.iter().position(|m| m.contains("READY=1")).unwrap();
    let s = said.iter().position(|m| m.contains("STOPPING=1")).unwrap();
    assert!(r < s, "{said:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_all_reads_every_profile_of_a_host() {
    let sim = Sim::start(1.0).await;
    let names = ["r1", "r2"];
    let setup = HostSetup::new(&sim, &names).await;
    let l = setup.start(&sim);
    each_connect_cycle_ended(&l, &names).await;
    for name in names {
        assert!(eventually(10.0, || setup.status(name)["state"] == "connected").await);
    }
    let mut cmd = isolated(setup.tmp.path());
    cmd.args(["status", "--all", "--json", "--config"])
        .arg(&setup.config);
    cmd.env("XDG_STATE_HOME", setup.state_home())
        .env("AGENTCHAT_SERVICE_DIR", setup.tmp.path().join("units"));
    let out = cmd.output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    for name in names {
        let row = doc["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["profile"] == name)
            .unwrap_or_else(|| panic!("no row for {name}: {doc}"));
        assert_eq!(row["running"], true, "{row}");
        assert_eq!(row["state"], "connected", "{row}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_refuses_a_key_from_the_environment_with_78() {
    let sim = Sim::start(1.0).await;
    let setup = HostSetup::new(&sim, &["e"]).await;
    let mut cmd = setup.command(&sim);
    cmd.env("AGENTCHAT_API_KEY", "ac_from_env");
    let mut l = setup.spawn(cmd);
    assert_eq!(l.wait_exit(15.0), Some(78), "{}", l.log());
    assert!(l.log().contains("unset AGENTCHAT_API_KEY"), "{}", l.log());
    assert!(!l.log().contains("ac_from_env"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_metrics_endpoint_serves_every_profile_and_readyz_names_the_one_that_cannot_start() {
    let sim = Sim::start(1.0).await;
    let setup = HostSetup::new(&sim, &["m1", "m2"]).await;
    setup.write_config(
        &["m1", "m2"],
        "\n[profiles.broken.listen]\nmax_delay = \"never\"\n",
    );
    let mut cmd = setup.command(&sim);
    cmd.args(["--metrics-addr", "127.0.0.1:0"]);
    let l = setup.spawn(cmd);
    each_connect_cycle_ended(&l, &["m1", "m2"]).await;
    let base = metrics_base(&l).await;
    assert_eq!(l.count("metrics_serving"), 1, "one endpoint: {}", l.log());
    let http = reqwest::Client::new();
    let page = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in ["m1", "m2"] {
        assert!(
            page.contains(&format!("profile=\"{name}\"")),
            "{name} not on the page:\n{page}"
        );
    }
    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    let text = ready.text().await.unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("broken:") && l.contains("max_delay")),
        "{text}"
    );
    // Fixed and reloaded: the broken profile starts, and every profile is ready.
    setup.write_config(&["m1", "m2"], "");
    l.signal(libc::SIGHUP);
    assert!(
        eventually_async(20.0, || {
            let http = http.clone();
            let url = format!("{base}/readyz");
            async move {
                http.get(url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().as_u16() == 200)
            }
        })
        .await,
        "{}",
        l.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_whose_lock_another_process_holds_is_said_and_taken_over_once_it_stops() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let setup = HostSetup::new(&sim, &["held", "free"]).await;
    // A listener of its own for `held` first, on the same state dir.
    let mut cmd = isolated(setup.tmp.path());
    cmd.args(["listen", "--profile", "held", "--log-format", "json"]);
    cmd.env("AGENTCHAT_CONFIG", &setup.config)
        .env("AGENTCHAT_API_BASE", &sim.api_base)
        .env("XDG_STATE_HOME", setup.state_home());
    let stderr_path = setup.tmp.path().join("single.stderr");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    let single = Listener {
        child: Some(cmd.spawn().unwrap()),
        stderr_path,
    };
    assert!(
        eventually(20.0, || setup.status("held")["state"] == "connected").await,
        "{}",
        single.log()
    );
    let mut l = setup.start(&sim);
    each_connect_cycle_ended(&l, &["free"]).await;
    assert!(
        eventually(10.0, || !events_of(&l, "already_running", "held")
            .is_empty())
        .await,
        "{}",
        l.log()
    );
    assert!(!events_of(&l, "profile_not_running", "held").is_empty());
    // Tried again on a backoff, the other process named as the holder.
    let scheduled = events_of(&l, "profile_retry_scheduled", "held");
    assert!(
        scheduled
            .first()
            .is_some_and(|e| e["holder"] == single.pid()),
        "{}",
        l.log()
    );
    // The other listener's status is left alone, and the host serves the other profile.
    assert_eq!(setup.status("held")["pid"], single.pid());
    sim.send(&alice, &setup.profile("free").agent, "hi").await;
    assert!(eventually(20.0, || setup.profile("free").rec.done(1)).await);
    assert_eq!(l.wait_exit(0.2), None, "the host keeps running");
    // Once the other listener is gone, a try on the backoff (5 s, then 10 s) takes the profile
    // over: nobody has to send SIGHUP.
    let mut single = single;
    single.signal(libc::SIGTERM);
    assert_eq!(single.wait_exit(20.0), Some(0));
    assert!(
        eventually(30.0, || setup.status("held")["pid"] == l.pid()
            && setup.status("held")["state"] == "connected")
        .await,
        "{}\n{}",
        setup.status("held"),
        l.log()
    );
    sim.send(&alice, &setup.profile("held").agent, "back").await;
    assert!(
        eventually(20.0, || setup.profile("held").rec.done(1)).await,
        "{}",
        l.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_profiles_for_one_agent_leave_one_running_and_the_process_up() {
    let sim = Sim::start(1.0).await;
    let setup = HostSetup::new(&sim, &["twin1", "twin2"]).await;
    let key = setup.profile("twin1").agent.key.clone();
    setup.write_key("twin2", &key);
    let mut l = setup.start(&sim);
    assert!(
        eventually(20.0, || l.count("profile_ended") == 1).await,
        "{}",
        l.log()
    );
    let ended = &l.events("profile_ended")[0];
    let (ended_name, other) = if ended["profile"] == "twin1" {
        ("twin1", "twin2")
    } else {
        ("twin2", "twin1")
    };
    assert!(
        eventually(10.0, || setup.status(other)["state"] == "connected").await,
        "{}",
        l.log()
    );
    assert_eq!(setup.status(ended_name)["state"], "stopped");
    assert_eq!(l.wait_exit(0.2), None, "the host keeps running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_is_pinged_while_every_idle_profile_turns() {
    let sim = Sim::start(1.0).await;
    let names = ["w1", "w2", "w3"];
    let setup = HostSetup::new(&sim, &names).await;
    let socket_path = setup.tmp.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(std::time::Duration::from_millis(100)))
        .unwrap();
    // A 400 ms watchdog: a tick every 200 ms, far inside the server's 45 s heartbeat, so only
    // the probes keep idle loops turning from one tick to the next.
    let mut cmd = setup.command(&sim);
    cmd.env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "400000");
    let mut l = setup.spawn(cmd);
    each_connect_cycle_ended(&l, &names).await;
    let mut said = Vec::new();
    let mut buf = [0u8; 4096];
    let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while std::time::Instant::now() < until {
        if let Ok(n) = socket.recv(&mut buf) {
            said.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    let pings = said.iter().filter(|m| m.contains("WATCHDOG=1")).count();
    assert!(pings >= 8, "{pings} pings in 3 s: {said:?}\n{}", l.log());
    assert_eq!(l.count("watchdog_withheld"), 0, "{}", l.log());
    l.signal(libc::SIGTERM);
    assert_eq!(l.wait_exit(20.0), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_profile_takes_its_new_key_file_without_a_sighup() {
    let sim = Sim::start(1.0).await;
    let setup = HostSetup::new(&sim, &["rotated", "steady"]).await;
    setup.write_key("rotated", "ac_the_old_key_nobody_knows");
    let l = setup.start(&sim);
    assert!(
        eventually(20.0, || setup.status("rotated")["state"] == "key_refused").await,
        "{}",
        l.log()
    );
    let key = setup.profile("rotated").agent.key.clone();
    setup.write_key("rotated", &key);
    assert!(
        eventually(20.0, || setup.status("rotated")["state"] == "connected").await,
        "{}\n{}",
        setup.status("rotated"),
        l.log()
    );
    assert_eq!(
        events_of(&l, "key_changed", "rotated").len(),
        1,
        "{}",
        l.log()
    );
    assert!(events_of(&l, "reload", "rotated").is_empty());
    assert_eq!(setup.status("steady")["state"], "connected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_named_again_while_its_old_listener_stops_starts_once_that_one_ended() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["back", "other"];
    let setup = HostSetup::new(&sim, &names).await;
    let l = setup.start(&sim);
    each_connect_cycle_ended(&l, &names).await;
    // A run that ignores SIGTERM holds the old listener in its stop for its grace (2 s).
    let rec = &setup.profile("back").rec;
    rec.set("trap", "");
    rec.set("sleep", "30");
    sim.send(&alice, &setup.profile("back").agent, "busy").await;
    assert!(eventually(20.0, || !rec.file("pid", 1).trim().is_empty()).await);
    setup.write_config(&["other"], "");
    l.signal(libc::SIGHUP);
    assert!(
        eventually(10.0, || !events_of(&l, "stop_waiting", "back").is_empty()).await,
        "{}",
        l.log()
    );
    setup.write_config(&names, "");
    l.signal(libc::SIGHUP);
    assert!(
        eventually(20.0, || events_of(&l, "listener_start", "back").len() == 2).await,
        "{}",
        l.log()
    );
    assert!(
        eventually(20.0, || setup.status("back")["state"] == "connected").await,
        "{}",
        l.log()
    );
    assert!(
        events_of(&l, "already_running", "back").is_empty(),
        "{}",
        l.log()
    );
    let pid: i32 = rec.file("pid", 1).trim().parse().unwrap();
    assert!(is_gone(pid), "the old run was left behind");
}

/// Issue 29, item 5: a run that exits 0 during a removed profile's grace finished its turn: it
/// is recorded completed (not failed with `end=cancelled`) and raises no `runs_failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_exits_0_in_a_removed_profiles_grace_is_completed_not_failed() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let setup = HostSetup::new(&sim, &["keep", "drop"]).await;
    let long_grace = |names: &[&str]| {
        setup.write_config(names, "");
        let text = std::fs::read_to_string(&setup.config)
            .unwrap()
            .replace("kill_grace = \"2s\"", "kill_grace = \"20s\"");
        std::fs::write(&setup.config, text).unwrap();
    };
    long_grace(&["keep", "drop"]);
    let l = setup.start(&sim);
    each_connect_cycle_ended(&l, &["keep", "drop"]).await;
    // The run ignores SIGTERM and finishes its turn (3 s) well within the grace, exiting 0.
    let drop = setup.profile("drop");
    drop.rec.set("trap", "");
    drop.rec.set("sleep", "3");
    sim.send(&alice, &drop.agent, "finish what you started")
        .await;
    setup.runs_started(&["drop"], &l).await;
    long_grace(&["keep"]);
    l.signal(libc::SIGHUP);
    assert!(
        eventually(20.0, || setup.status("drop")["state"] == "stopped").await,
        "{}\n{}",
        setup.status("drop"),
        l.log()
    );
    assert!(drop.rec.done(1), "the run finished its turn");
    let status = setup.status("drop");
    assert_eq!(status["last_cycle"]["outcome"], "completed", "{status}");
    assert_eq!(status["counters"]["runs_failed"], 0, "{status}");
    let ends = events_of(&l, "run_end", "drop");
    assert_eq!(ends.len(), 1, "{}", l.log());
    assert_eq!(
        (ends[0]["outcome"].as_str(), ends[0]["exit_code"].as_i64()),
        (Some("completed"), Some(0)),
        "{}",
        l.log()
    );
}

/// The config of `setup` naming `names`, with `lines` added to the top level's `[listen]`.
fn with_top_listen(setup: &HostSetup, names: &[&str], lines: &str) {
    setup.write_config(names, "");
    let text = std::fs::read_to_string(&setup.config).unwrap().replacen(
        "[listen]\n",
        &format!("[listen]\n{lines}"),
        1,
    );
    std::fs::write(&setup.config, text).unwrap();
}

/// `(event, profile)` of every `run_start` and `run_end` line, in log order.
fn run_edges(l: &Listener) -> Vec<(String, String)> {
    l.log()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|v| v["event"] == "run_start" || v["event"] == "run_end")
        .map(|v| {
            (
                v["event"].as_str().unwrap().to_string(),
                v["profile"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_beyond_max_concurrent_runs_wait_their_turn_in_order_and_say_so() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["q1", "q2", "q3"];
    let setup = HostSetup::new(&sim, &names).await;
    with_top_listen(&setup, &names, "max_concurrent_runs = 1\n");
    for name in names {
        setup.profile(name).rec.set("sleep", "2");
    }
    let mut cmd = setup.command(&sim);
    cmd.args(["--metrics-addr", "127.0.0.1:0"]);
    let l = setup.spawn(cmd);
    each_connect_cycle_ended(&l, &names).await;
    let base = metrics_base(&l).await;
    for name in names {
        sim.send(&alice, &setup.profile(name).agent, "all at once")
            .await;
    }
    // One runs; the others wait, and their status says so.
    let queued = || names.iter().find(|n| setup.status(n)["state"] == "queued");
    assert!(
        eventually(20.0, || queued().is_some()).await,
        "nobody queued:\n{}",
        l.log()
    );
    let waiting = queued().unwrap();
    let s = setup.status(waiting);
    assert!(
        s["detail"]
            .as_str()
            .is_some_and(|d| d.contains("waiting for a run slot") && d.contains("of 1 runs")),
        "{s}"
    );
    let http = reqwest::Client::new();
    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200, "waiting its turn is ready");
    let page = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.lines().any(|l| l == "agentchat_runs_running 1"),
        "{page}"
    );
    for name in names {
        assert!(
            eventually(30.0, || setup.profile(name).rec.done(1)).await,
            "{name} never ran:\n{}",
            l.log()
        );
    }
    // Never two runs at once.
    let edges = run_edges(&l);
    let mut going = 0;
    for (event, profile) in &edges {
        going += if event == "run_start" { 1 } else { -1 };
        assert!(going <= 1, "{profile}: two runs at once: {edges:?}");
    }
    // The two that waited started in the order they queued.
    let queued_order: Vec<String> = l
        .events("run_queued")
        .iter()
        .map(|v| v["profile"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(queued_order.len(), 2, "{}", l.log());
    let started: Vec<&String> = edges
        .iter()
        .filter(|(e, p)| e == "run_start" && queued_order.contains(p))
        .map(|(_, p)| p)
        .collect();
    assert_eq!(
        started,
        queued_order.iter().collect::<Vec<_>>(),
        "{}",
        l.log()
    );
    assert_eq!(l.count("run_dequeued"), 2, "{}", l.log());
    for name in names {
        assert_eq!(setup.profile(name).rec.count(), 1, "{name} ran once");
    }
    assert!(
        eventually_async(10.0, || {
            let http = http.clone();
            let url = format!("{base}/metrics");
            async move {
                let page = http.get(url).send().await.unwrap().text().await.unwrap();
                [
                    "agentchat_runs_running 0",
                    "agentchat_runs_queued 0",
                    "agentchat_run_queue_wait_seconds_count 3",
                ]
                .iter()
                .all(|want| page.lines().any(|l| l == *want))
            }
        })
        .await,
        "{}",
        l.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_renamed_during_its_run_serves_its_agent_once_the_old_name_lets_go() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let setup = HostSetup::new(&sim, &["alpha", "alpha2", "other"]).await;
    let agent = &setup.profile("alpha").agent;
    setup.write_key("alpha2", &agent.key);
    setup.write_config(&["alpha", "other"], "");
    let l = setup.start(&sim);
    each_connect_cycle_ended(&l, &["alpha", "other"]).await;
    // A run that ignores SIGTERM keeps alpha (and its agent's lock) for its grace (2 s).
    let rec = &setup.profile("alpha").rec;
    rec.set("trap", "");
    rec.set("sleep", "30");
    sim.send(&alice, agent, "busy").await;
    assert!(eventually(20.0, || !rec.file("pid", 1).trim().is_empty()).await);
    setup.write_config(&["alpha2", "other"], "");
    l.signal(libc::SIGHUP);
    // alpha2 finds the agent alpha still holds, then takes it once alpha has let go.
    assert!(
        eventually(20.0, || setup.status("alpha2")["state"] == "connected"
            && setup.status("alpha2")["handle"] == format!("@{}", agent.handle))
        .await,
        "{}\n{}",
        setup.status("alpha2"),
        l.log()
    );
    sim.send(&alice, agent, "still there?").await;
    assert!(
        eventually(20.0, || setup.profile("alpha2").rec.done(1)).await,
        "nobody serves the renamed profile's agent:\n{}",
        l.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_profiles_whose_key_files_are_swapped_both_serve_after_sighup() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["left", "right"];
    let setup = HostSetup::new(&sim, &names).await;
    let l = setup.start(&sim);
    each_connect_cycle_ended(&l, &names).await;
    let (left, right) = (&setup.profile("left").agent, &setup.profile("right").agent);
    setup.write_key("left", &right.key);
    setup.write_key("right", &left.key);
    l.signal(libc::SIGHUP);
    for (name, agent) in [("left", right), ("right", left)] {
        assert!(
            eventually(30.0, || setup.status(name)["state"] == "connected"
                && setup.status(name)["handle"] == format!("@{}", agent.handle))
            .await,
            "{name}: {}\n{}",
            setup.status(name),
            l.log()
        );
    }
    sim.send(&alice, left, "to left's agent").await;
    sim.send(&alice, right, "to right's agent").await;
    for name in names {
        assert!(
            eventually(20.0, || setup.profile(name).rec.done(1)).await,
            "{name} serves nobody:\n{}",
            l.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_looks_again_at_once_at_an_unchanged_profile_whose_runtime_could_not_run() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["fixed", "fine"];
    let setup = HostSetup::new(&sim, &names).await;
    // `fixed` runs a program that is not there yet.
    let program = setup.tmp.path().join("later.sh");
    setup.write_config(&names, "");
    let script = setup.profile("fixed").rec.script.clone();
    let text = std::fs::read_to_string(&setup.config).unwrap().replace(
        &format!("command = [\"/bin/sh\", \"{}\"]", script.display()),
        &format!("command = [\"{}\"]", program.display()),
    );
    std::fs::write(&setup.config, text).unwrap();
    let l = setup.start(&sim);
    assert!(
        eventually(20.0, || setup.status("fixed")["state"]
            == "runtime_unusable")
        .await,
        "{}\n{}",
        setup.status("fixed"),
        l.log()
    );
    // The first look on the backoff (5 s) has passed: the next is 10 s later.
    assert!(
        eventually(20.0, || !events_of(&l, "runtime_check", "fixed").is_empty()).await,
        "{}",
        l.log()
    );
    {
        // The recorder itself arrives there: the program `command` names is all of the run's
        // own that the kernel's line lets it read (the recorder's folder aside).
        use std::os::unix::fs::PermissionsExt;
        std::fs::copy(&script, &program).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let asked = std::time::Instant::now();
    l.signal(libc::SIGHUP);
    assert!(
        eventually(4.0, || setup.status("fixed")["state"] == "connected").await,
        "SIGHUP did not look again: {}\n{}",
        setup.status("fixed"),
        l.log()
    );
    assert!(asked.elapsed() < std::time::Duration::from_secs(5));
    sim.send(&alice, &setup.profile("fixed").agent, "now?")
        .await;
    assert!(
        eventually(20.0, || setup.profile("fixed").rec.done(1)).await,
        "{}",
        l.log()
    );
    // The unchanged healthy profile kept its socket: no reload line.
    assert!(events_of(&l, "reload", "fine").is_empty(), "{}", l.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_host_whose_profiles_all_run_already_exits_75() {
    let sim = Sim::start(1.0).await;
    let names = ["d1", "d2"];
    let setup = HostSetup::new(&sim, &names).await;
    let mut first = setup.start(&sim);
    each_connect_cycle_ended(&first, &names).await;
    let stderr_path = setup.tmp.path().join("second.stderr");
    let mut cmd = setup.command(&sim);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    let mut second = Listener {
        child: Some(cmd.spawn().unwrap()),
        stderr_path,
    };
    assert_eq!(second.wait_exit(20.0), Some(75), "{}", second.log());
    assert_eq!(first.wait_exit(0.2), None, "the first keeps running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_run_starts_while_memory_is_short_and_a_stop_takes_the_waiting_one_out() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["mem"];
    let setup = HostSetup::new(&sim, &names).await;
    // More than any machine here has: the run waits for memory that never comes.
    with_top_listen(&setup, &names, "min_available_memory = \"1024TiB\"\n");
    let mut l = setup.start(&sim);
    each_connect_cycle_ended(&l, &names).await;
    sim.send(&alice, &setup.profile("mem").agent, "hello").await;
    assert!(
        eventually(20.0, || setup.status("mem")["state"] == "queued").await,
        "{}\n{}",
        setup.status("mem"),
        l.log()
    );
    assert!(
        eventually(5.0, || l.count("run_queue_memory_wait") == 1).await,
        "{}",
        l.log()
    );
    let wait = &l.events("run_queue_memory_wait")[0];
    assert!(
        wait["available_bytes"].as_u64().is_some_and(|b| b > 0),
        "{wait}"
    );
    assert_eq!(setup.profile("mem").rec.count(), 0, "no run started");
    l.signal(libc::SIGTERM);
    assert_eq!(l.wait_exit(20.0), Some(0), "{}", l.log());
    let s = setup.status("mem");
    assert_eq!(s["state"], "stopped", "{s}");
    // No run started, so none failed: the cycle ends `no_run` (`stopped`).
    assert_no_run_stopped(&s);
    assert_eq!(setup.profile("mem").rec.count(), 0);
}

/// A cycle that ended while its run waited for a slot: `no_run` (`stopped`), no run counted.
fn assert_no_run_stopped(s: &Value) {
    assert_eq!(
        (
            s["last_cycle"]["outcome"].as_str(),
            s["last_cycle"]["no_run_reason"].as_str(),
            s["last_cycle"]["run_started"].as_bool(),
        ),
        (Some("no_run"), Some("stopped"), Some(false)),
        "{s}"
    );
    assert_eq!(s["last_cycle"]["failure"], Value::Null, "{s}");
    assert_eq!(s["counters"]["runs_failed"], 0, "{s}");
    assert_eq!(s["counters"]["runs"], 0, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_removed_while_its_run_waits_for_a_slot_ends_with_no_run_not_a_failed_one() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["gone", "kept"];
    let setup = HostSetup::new(&sim, &names).await;
    // More than any machine here has: the run waits for memory that never comes.
    let memory = "min_available_memory = \"1024TiB\"\n";
    with_top_listen(&setup, &names, memory);
    let l = setup.start(&sim);
    each_connect_cycle_ended(&l, &names).await;
    sim.send(&alice, &setup.profile("gone").agent, "hello")
        .await;
    assert!(
        eventually(20.0, || setup.status("gone")["state"] == "queued").await,
        "{}\n{}",
        setup.status("gone"),
        l.log()
    );
    with_top_listen(&setup, &["kept"], memory);
    l.signal(libc::SIGHUP);
    assert!(
        eventually(20.0, || setup.status("gone")["state"] == "stopped").await,
        "{}\n{}",
        setup.status("gone"),
        l.log()
    );
    assert_no_run_stopped(&setup.status("gone"));
    assert_eq!(setup.profile("gone").rec.count(), 0, "no run started");
    let ends = events_of(&l, "cycle_end", "gone");
    assert_eq!(
        ends.last().and_then(|e| e["no_run_reason"].as_str()),
        Some("stopped"),
        "{}",
        l.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighup_after_a_top_level_edit_reads_the_config_once_for_every_profile() {
    let sim = Sim::start(1.0).await;
    let names = ["r1", "r2", "r3"];
    let setup = HostSetup::new(&sim, &names).await;
    let l = setup.start(&sim);
    each_connect_cycle_ended(&l, &names).await;
    // A top-level edit: every profile's settings change.
    with_top_listen(&setup, &names, "run_timeout = \"5m\"\n");
    l.signal(libc::SIGHUP);
    assert!(
        eventually(20.0, || names
            .iter()
            .all(|n| !events_of(&l, "reload", n).is_empty()))
        .await,
        "{}",
        l.log()
    );
    let host = l
        .events("reloaded")
        .into_iter()
        .find(|v| v["changed"] == 3)
        .unwrap_or_else(|| panic!("no reload changed all three:\n{}", l.log()));
    let reads = host["config_reads"].as_u64().unwrap();
    for name in names {
        let reload = &events_of(&l, "reload", name)[0];
        assert_eq!(reload["settings"], "handed", "{reload}");
        // No profile read the file again after the host's one read.
        assert_eq!(reload["config_reads"].as_u64(), Some(reads), "{}", l.log());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_answered_elsewhere_while_its_run_waited_long_for_a_slot_starts_no_run() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["first", "late"];
    let setup = HostSetup::new(&sim, &names).await;
    with_top_listen(&setup, &names, "max_concurrent_runs = 1\n");
    setup.profile("first").rec.set("sleep", "4");
    let mut cmd = setup.command(&sim);
    // The 30 s after which a waited-for run's tray is read again, divided by 30: 1 s.
    cmd.env("AGENTCHAT_TEST_TIME_SCALE", "30");
    let l = setup.spawn(cmd);
    each_connect_cycle_ended(&l, &names).await;
    sim.send(&alice, &setup.profile("first").agent, "take the slot")
        .await;
    setup.runs_started(&["first"], &l).await;
    let late = &setup.profile("late").agent;
    sim.send(&alice, late, "answered elsewhere").await;
    assert!(
        eventually(20.0, || setup.status("late")["state"] == "queued").await,
        "{}\n{}",
        setup.status("late"),
        l.log()
    );
    // The agent answers the card another way (here: it reads it) while its run waits.
    let tray = sim.tray(late).await;
    let conv = tray["conversations"][0]["conversation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{tray}"))
        .to_string();
    let read = reqwest::Client::new()
        .post(format!("{}/v1/conversations/{conv}/read", sim.api_base))
        .bearer_auth(&late.key)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert!(read.status().is_success(), "{}", read.status());
    // Its connect cycle, then the one that waited.
    assert!(
        eventually(30.0, || events_of(&l, "cycle_end", "late").len() >= 2).await,
        "{}",
        l.log()
    );
    let end = events_of(&l, "cycle_end", "late")[1].clone();
    assert_eq!(
        (end["run_started"].as_bool(), end["no_run_reason"].as_str()),
        (Some(false), Some("nothing_waiting")),
        "{}",
        l.log()
    );
    assert_eq!(events_of(&l, "tray_reread", "late").len(), 1, "{}", l.log());
    assert_eq!(setup.profile("late").rec.count(), 0, "no run started");
    assert!(setup.profile("first").rec.done(1));
}

/// Issue 29 item 4's second case: during a SIGHUP storm a connected profile's `status.json`
/// stayed "connecting" for seconds, because a cycle held every status write until it ended. Here
/// the profile's cycle waits out a `429 Retry-After` of 240 s while each SIGHUP moves it to the
/// other spelling of the server's loopback address (a reconnect each time): the state written
/// follows the socket, and ends `connected` with every connect counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_sighup_storm_the_status_state_follows_the_socket() {
    use crate::listen_support::fake::{self, Fake};
    let sim = Sim::start(1.0).await;
    let fake = Fake::start("bob", fake::tray("@bob", 1)).await;
    {
        let mut s = fake.shared.lock().unwrap();
        s.inbox_429 = 1;
        s.retry_after_s = 240;
    }
    let setup = HostSetup::new(&sim, &["storm"]).await;
    let port = fake.api_base.rsplit(':').next().unwrap().to_string();
    let base_config = std::fs::read_to_string(&setup.config).unwrap();
    let point_at = |host: &str| {
        std::fs::write(
            &setup.config,
            format!("api_base = \"http://{host}:{port}\"\n{base_config}"),
        )
        .unwrap();
    };
    point_at("127.0.0.1");
    let mut cmd = setup.command(&sim);
    cmd.env_remove("AGENTCHAT_API_BASE");
    let l = setup.spawn(cmd);
    assert!(
        eventually(15.0, || !events_of(&l, "tray_retry", "storm").is_empty()).await,
        "{}",
        l.log()
    );
    for n in 0..6 {
        point_at(if n % 2 == 0 { "localhost" } else { "127.0.0.1" });
        let before = fake.connects();
        l.signal(libc::SIGHUP);
        assert!(
            eventually(10.0, || fake.connects() > before).await,
            "SIGHUP {n} made no reconnect:\n{}",
            l.log()
        );
    }
    let connects = fake.connects() as u64;
    assert!(
        eventually(5.0, || {
            let s = setup.status("storm");
            s["state"] == "connected" && s["counters"]["connects"] == connects
        })
        .await,
        "{connects} connects; the status: {}\n{}",
        setup.status("storm"),
        l.log()
    );
    // The cycle still waits: the state was written while it did.
    assert!(
        events_of(&l, "cycle_end", "storm").is_empty(),
        "{}",
        l.log()
    );
}

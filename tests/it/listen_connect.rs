//! How `agentchat listen` reaches the server and comes back (issue 17): a refused key retried
//! from seconds, the connect budget's exact wait, one listener per agent per machine, a key
//! that cannot be a key, `Retry-After` on the REST calls, a clock that jumped, and a proxy. The
//! real binary against the sim (or the scripted server) on loopback, as in `listen.rs`.

use crate::listen_support::*;
use serde_json::json;
use std::time::{Duration, SystemTime};

async fn state_becomes(setup: &Setup, l: &Listener, state: &str, secs: f64) {
    assert!(
        eventually(secs, || setup.status()["state"] == state).await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
}

/// `next_retry_at` in the status file, as seconds from now.
fn next_retry_in_s(setup: &Setup) -> Option<f64> {
    let at = setup.status()["next_retry_at"].as_str()?.to_string();
    let at = humantime::parse_rfc3339(&at).ok()?;
    Some(match at.duration_since(SystemTime::now()) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    })
}

async fn accept_key(sim: &Sim, a: &Agent) {
    sim.post(
        &format!("/_sim/agents/{}/refuse-key", a.handle),
        json!({"refuse": false}),
    )
    .await;
}

// ------------------------------------------------------------------ item 4: a refused-key blip

/// The key refused for 2 s, then accepted: the listener is back by itself within seconds (no
/// SIGHUP), `next_retry_at` was seconds ahead, not 10 minutes, and a message sent meanwhile runs.
/// At contract speed (no test time scale).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_refused_for_two_seconds_is_retried_within_seconds_and_the_message_sent_meanwhile_runs()
 {
    let Scene {
        sim,
        alice,
        bob,
        setup,
        l,
    } = bob_listening(&Opts::default()).await;
    sim.refuse_key(&bob).await;
    sim.close_sockets(&bob, 1008, "Invalid token").await;
    state_becomes(&setup, &l, "key_refused", 10.0).await;
    let ahead = next_retry_in_s(&setup).expect("next_retry_at while key_refused");
    assert!(
        ahead < 10.0,
        "the first retry is seconds ahead, not {ahead} s"
    );
    sim.send(&alice, &bob, "sent while the key was refused")
        .await;
    // The blip: the server refuses the key for two seconds (the stimulus, not a wait for it).
    tokio::time::sleep(Duration::from_secs(2)).await;
    accept_key(&sim, &bob).await;
    assert!(
        eventually(30.0, || setup.rec.done(1)).await,
        "the message waited for the key retry:\n{}\n{}",
        setup.status(),
        l.log()
    );
    state_becomes(&setup, &l, "connected", 10.0).await;
    assert_eq!(l.count("reload"), 0, "no SIGHUP was needed");
    assert_eq!(l.count("key_retry"), 0, "no reload retried the key");
}

// ------------------------------------------- item 13: a key file with a character no key has

/// A key file holding `\x01` inside the key: `listen` and `listen --once` exit 78 (a config
/// error, not "unreachable" retried for ever) and `doctor` fails the key, each saying the file
/// holds characters a key cannot have, never the key. A key in `AGENTCHAT_API_KEY` the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_a_control_character_is_a_key_error_in_listen_once_and_doctor_never_unreachable()
{
    use std::os::unix::fs::PermissionsExt;
    let sim = Sim::start(1.0).await;
    let bob = sim.agent("bob").await;
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("key");
    let (head, tail) = bob.key.split_at(bob.key.len() / 2);
    let bad_key = format!("{head}\x01{tail}");
    std::fs::write(&key_file, format!("{bad_key}\n")).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let opts = Opts {
        top_toml: format!("api_key_file = {:?}", key_file.display().to_string()),
        ..Opts::default()
    };
    let setup = Setup::new(&opts);
    let says = "characters an API key cannot have";
    let no_key = |out: &str| {
        assert!(
            !out.contains(head) && !out.contains(tail) && !out.contains(&bob.key),
            "the key appeared:\n{out}"
        );
    };

    for once in [false, true] {
        let mut cmd = listener_command(&sim, &bob, &setup, &opts);
        cmd.env_remove("AGENTCHAT_API_KEY");
        if once {
            cmd.arg("--once");
        }
        let mut l = Listener::spawn(cmd, &setup, if once { "-once" } else { "" });
        assert_eq!(l.wait_exit(20.0), Some(78), "once={once}:\n{}", l.log());
        let log = l.log();
        assert!(log.contains(says) && log.contains("api_key_file"), "{log}");
        assert!(!log.contains("unreachable"), "{log}");
        no_key(&log);
    }
    // The same key in AGENTCHAT_API_KEY names the variable.
    let mut cmd = listener_command(&sim, &bob, &setup, &opts);
    cmd.env("AGENTCHAT_API_KEY", &bad_key);
    let mut l = Listener::spawn(cmd, &setup, "-env");
    assert_eq!(l.wait_exit(20.0), Some(78), "{}", l.log());
    assert!(
        l.log().contains(says) && l.log().contains("AGENTCHAT_API_KEY"),
        "{}",
        l.log()
    );
    no_key(&l.log());

    // doctor: the key check fails with the same words, and doctor fails.
    let out = std::process::Command::new(BIN)
        .arg("doctor")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", setup.tmp.path())
        .env("AGENTCHAT_SERVICE_DIR", setup.tmp.path().join("services"))
        .env("AGENTCHAT_CONFIG", &setup.config)
        .env("AGENTCHAT_STATE_DIR", &setup.state_dir)
        .env("AGENTCHAT_API_BASE", &sim.api_base)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0), "{text}");
    let key_line = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("key:"))
        .unwrap_or_else(|| panic!("no key line:\n{text}"));
    assert!(
        key_line.starts_with("FAIL") && key_line.contains(says),
        "{text}"
    );
    no_key(&text);
}

// -------------------------------------------- item 16: Retry-After on GET /v1/agents/me

/// A tiny HTTP server: `GET /v1/agents/me` answers the scripted `429`s first (each with its
/// `Retry-After` value), then `200 {"handle":"bob"}`; anything else (the socket upgrade) a `503`.
/// Records when each `/v1/agents/me` came.
struct MeServer {
    api_base: String,
    me_at: std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl MeServer {
    async fn start(retry_afters: Vec<String>) -> MeServer {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api_base = format!("http://{}", listener.local_addr().unwrap());
        let me_at = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let script = std::sync::Arc::new(std::sync::Mutex::new(
            retry_afters
                .into_iter()
                .collect::<std::collections::VecDeque<_>>(),
        ));
        let (at, sc) = (me_at.clone(), script.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (at, sc) = (at.clone(), sc.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16_384 {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let line = String::from_utf8_lossy(&head)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_string();
                    let (status, extra, body) = if line.starts_with("GET /v1/agents/me ") {
                        at.lock().unwrap().push(std::time::Instant::now());
                        match sc.lock().unwrap().pop_front() {
                            Some(ra) => (
                                "429 Too Many Requests",
                                format!("retry-after: {ra}\r\n"),
                                r#"{"code":"RATE_LIMITED","message":"slow down"}"#.to_string(),
                            ),
                            None => ("200 OK", String::new(), r#"{"handle":"bob"}"#.to_string()),
                        }
                    } else {
                        (
                            "503 Service Unavailable",
                            String::new(),
                            r#"{"code":"UNAVAILABLE","message":"down"}"#.to_string(),
                        )
                    };
                    let resp = format!(
                        "HTTP/1.1 {status}\r\n{extra}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(resp.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        MeServer {
            api_base,
            me_at,
            task,
        }
    }

    fn me_times(&self) -> Vec<std::time::Instant> {
        self.me_at.lock().unwrap().clone()
    }
}

impl Drop for MeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `GET /v1/agents/me` answered `429` with `Retry-After: 3`, then with an HTTP-date 7-8 s after
/// the start: the listener asks again no sooner than each says (before, the first was ignored
/// for the 1 s ordinary backoff, and a date was read as 5 s), then goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_agents_me_waits_its_retry_after_in_seconds_and_as_an_http_date() {
    let start = std::time::Instant::now();
    // An HTTP date names a whole second: at least 7 s from now.
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(8));
    let server = MeServer::start(vec!["3".into(), date]).await;
    let opts = Opts::default();
    let setup = Setup::new(&opts);
    let l = Listener::spawn(
        listener_command_for(&server.api_base, "ac_test_key", &setup, &opts),
        &setup,
        "",
    );
    assert!(
        eventually(30.0, || server.me_times().len() >= 3).await,
        "{}",
        l.log()
    );
    let t = server.me_times();
    let first_wait = t[1] - t[0];
    assert!(
        first_wait >= Duration::from_secs(3),
        "Retry-After: 3 waited {first_wait:?}"
    );
    let third = t[2] - start;
    assert!(
        third >= Duration::from_secs(7),
        "Retry-After as an HTTP date 7-8 s ahead: asked again {third:?} after the start"
    );
    assert!(l.log().contains("answered HTTP 429"), "{}", l.log());
}

// ------------------------------------------------ item 18: a wall clock that jumped (a sleep)

/// libfaketime's preload library (Debian's `libfaketime`, which `scripts/test` installs when
/// missing and root), if there is one.
fn libfaketime() -> Option<std::path::PathBuf> {
    let lib = std::fs::read_dir("/usr/lib")
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.is_file());
    if lib.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "libfaketime is missing under CI: scripts/test installs it (apt-get install libfaketime)"
        );
        eprintln!(
            "SKIPPED: libfaketime is not installed (Debian: apt-get install libfaketime); \
             the clock-jump test needs it to move the listener's wall clock alone"
        );
    }
    lib
}

/// A laptop that slept: the listener's wall clock jumps 10 minutes ahead while its monotonic
/// clock (what the idle watchdog's timer runs on) does not. The real binary runs under
/// libfaketime (`DONT_FAKE_MONOTONIC=1`: only `CLOCK_REALTIME` moves, by an offset read from a
/// file the test rewrites). A healthy socket answers the probe and stays; a dead one (the sim
/// silenced: it reads nothing, so not even a pong goes back) is dropped and reconnected within
/// seconds, not after the rest of the 100 s idle timeout.
///
/// What is not real: the machine does not sleep (no suspend here); the jump is libfaketime's
/// offset on the wall clock, which is what a wake from suspend looks like to the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_jump_beyond_the_monotonic_clock_probes_the_socket_at_once() {
    let Some(lib) = libfaketime() else { return };
    let sim = Sim::start(1.0).await;
    let _alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let opts = Opts::default();
    let setup = Setup::new(&opts);
    let offset = setup.tmp.path().join("faketime");
    std::fs::write(&offset, "+0\n").unwrap();
    let mut cmd = listener_command(&sim, &bob, &setup, &opts);
    cmd.env("LD_PRELOAD", &lib)
        .env("FAKETIME_TIMESTAMP_FILE", &offset)
        .env("FAKETIME_NO_CACHE", "1")
        .env("DONT_FAKE_MONOTONIC", "1");
    let l = Listener::spawn(cmd, &setup, "");
    connect_cycle_ended(&l).await;
    state_becomes(&setup, &l, "connected", 10.0).await;

    // Healthy: the jump is seen within the 10 s look, the ping answered, the socket kept.
    std::fs::write(&offset, "+300\n").unwrap();
    assert!(
        eventually(25.0, || l.count("clock_jump") == 1).await,
        "{}",
        l.log()
    );
    let jump = &l.events("clock_jump")[0];
    assert!(jump["unseen_ms"].as_u64().unwrap() >= 290_000, "{jump}");
    assert!(
        !eventually(12.0, || l.count("watchdog_drop") > 0).await,
        "a socket that answered the probe was dropped:\n{}",
        l.log()
    );
    assert_eq!(accepted(&sim.connects(&bob).await), 1);

    // Dead: the sim answers nothing; the jump drops and reconnects it within the probe time.
    sim.silence(&bob).await;
    std::fs::write(&offset, "+900\n").unwrap();
    assert!(
        eventually(30.0, || l.count("watchdog_drop") == 1).await,
        "the dead socket waited for the idle timeout:\n{}",
        l.log()
    );
    assert_eq!(l.count("clock_jump"), 2, "{}", l.log());
    let drop_line = &l.events("watchdog_drop")[0];
    assert!(drop_line.get("probe_ms").is_some(), "{drop_line}");
    assert!(
        eventually_async(15.0, || async { accepted(&sim.connects(&bob).await) == 2 }).await,
        "{}",
        l.log()
    );
}

// ------------------------------------------- item 8: one agent, one listener per machine

/// The same agent's key with another state dir (another profile): the second listener learns
/// the handle, finds the agent's machine-wide lock held and exits 75, naming the state dir of
/// the one that runs; it never runs for a message. Once the first stops, the agent is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_listener_for_the_same_agent_exits_75_naming_the_state_dir_of_the_one_that_runs() {
    let Scene {
        sim,
        alice,
        bob,
        setup,
        l,
    } = bob_listening(&Opts::default()).await;
    let opts = Opts::default();
    let other = Setup::new(&opts);
    let mut second = Listener::start(&sim, &bob, &other, &opts);
    assert_eq!(second.wait_exit(20.0), Some(75), "{}", second.log());
    let said = second.events("already_running");
    assert_eq!(said.len(), 1, "{}", second.log());
    let first_dir = setup.state_dir.display().to_string();
    assert_eq!(said[0]["state_dir"], first_dir.as_str(), "{}", said[0]);
    assert!(
        said[0]["fields"]["message"]
            .as_str()
            .or(said[0]["message"].as_str())
            .unwrap_or_default()
            .contains(&first_dir),
        "{}",
        said[0]
    );
    // `--once` for the same agent from another state dir: 75 too, and no run.
    let mut cmd = listener_command(&sim, &bob, &other, &opts);
    cmd.arg("--once");
    let mut once = Listener::spawn(cmd, &other, "-once");
    assert_eq!(once.wait_exit(20.0), Some(75), "{}", once.log());
    assert_eq!(once.count("already_running"), 1, "{}", once.log());
    // One message, one run: the first listener's.
    sim.send(&alice, &bob, "one run please").await;
    assert!(eventually(15.0, || setup.rec.done(1)).await, "{}", l.log());
    assert_eq!(other.rec.count(), 0, "the second listener ran");
    // Another agent on the same machine is not held back.
    let carol = sim.agent("carol").await;
    let third_setup = Setup::new(&opts);
    let third = Listener::start(&sim, &carol, &third_setup, &opts);
    connect_cycle_ended(&third).await;
    // The first stops: the agent is free for the next.
    drop(l);
    let again = Listener::start(&sim, &bob, &other, &opts);
    connect_cycle_ended(&again).await;
    assert_eq!(again.count("already_running"), 0, "{}", again.log());
}

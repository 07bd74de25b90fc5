//! Connect pacing under the per-IP connect budget (contract 3.4: 300 socket connects a minute per
//! client IP, refused ones included): the pure policy (`core::pacing`) on random timelines, the
//! sim's per-IP budget, and the listener's dial going through the pacer.

use agentchat::core::pacing::{Admit, IP_BUDGET_PER_MINUTE, Pacing, PacingPolicy, WINDOW_MS};
use proptest::prelude::*;

/// The most admitted times in any closed window `[t, t + window]`.
fn peak_in_window(times: &[u64], window: u64) -> u64 {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let mut peak = 0;
    let mut lo = 0;
    for hi in 0..sorted.len() {
        while sorted[hi] - sorted[lo] > window {
            lo += 1;
        }
        peak = peak.max((hi - lo + 1) as u64);
    }
    peak
}

/// A policy the properties explore: small bursts and intervals, so windows fill quickly.
fn policy() -> impl Strategy<Value = PacingPolicy> {
    (1u64..30, 1u64..400, 0u64..400).prop_map(|(burst, interval_ms, jitter)| PacingPolicy {
        burst,
        interval_ms,
        jitter_ms: jitter % interval_ms,
    })
}

/// Gaps between attempts (often none: a storm), each with its jitter draw and how late its
/// waits are woken (a busy process).
fn asks() -> impl Strategy<Value = Vec<(u64, f64, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => Just(0u64), 1 => 0u64..2_000, 1 => 0u64..120_000],
            0.0f64..1.0,
            prop_oneof![3 => Just(0u64), 1 => 0u64..5_000],
        ),
        1..600,
    )
}

/// Serves the attempts as `listen::pacer` does: one at a time in the order asked, each asking
/// again after the wait it was told (woken `late` ms late). The times they went.
fn serve(pc: &mut Pacing, gaps: &[(u64, f64, u64)], scale: f64) -> Vec<u64> {
    let mut ask = 0u64;
    let mut free = 0u64;
    let mut went = Vec::new();
    for &(gap, jitter, late) in gaps {
        ask += (gap as f64 / scale) as u64;
        let mut now = ask.max(free);
        while let Admit::Wait(ms) = pc.admit(now, jitter) {
            now += ms + late;
        }
        went.push(now);
        free = now;
    }
    went
}

proptest! {
    #[test]
    fn pacing_never_admits_more_than_its_bound_in_any_window_even_woken_late(
        p in policy(),
        gaps in asks(),
        window in prop_oneof![Just(WINDOW_MS), 1u64..10_000],
    ) {
        let mut pc = Pacing::new(p);
        let went = serve(&mut pc, &gaps, 1.0);
        let peak = peak_in_window(&went, window);
        prop_assert!(
            peak <= p.max_in_window(window),
            "{peak} in a window of {window} ms, bound {}", p.max_in_window(window)
        );
    }

    #[test]
    fn the_default_pacing_stays_under_the_ip_budget_at_any_time_scale(
        gaps in asks(),
        scale in prop_oneof![Just(1.0f64), Just(20.0), 0.5f64..100.0],
    ) {
        let p = PacingPolicy::default().scaled(scale);
        let window = (WINDOW_MS as f64 / scale) as u64;
        let mut pc = Pacing::new(p);
        let went = serve(&mut pc, &gaps, scale);
        let peak = peak_in_window(&went, window);
        prop_assert!(peak < IP_BUDGET_PER_MINUTE, "{peak} in one budget window");
        prop_assert!(peak <= p.max_in_window(window));
    }

    #[test]
    fn an_attempt_goes_at_once_exactly_when_a_token_is_free_and_never_waits_past_it_plus_jitter(
        p in policy(),
        gaps in asks(),
    ) {
        let mut pc = Pacing::new(p);
        let mut now = 0u64;
        for (gap, jitter, _) in gaps {
            now += gap;
            let free = pc.would_go(now);
            match pc.admit(now, jitter) {
                Admit::Go => prop_assert!(free),
                Admit::Wait(ms) => {
                    prop_assert!(!free);
                    prop_assert!(ms >= 1);
                    // Asked again at the end of the wait minus the jitter: the token is free.
                    let back = now + ms;
                    prop_assert!(pc.would_go(back));
                    prop_assert!(ms <= p.interval_ms * p.burst.max(1) + p.jitter_ms);
                    now = back;
                    prop_assert_eq!(pc.admit(now, jitter), Admit::Go);
                }
            }
        }
    }
}

#[test]
fn a_storm_of_a_thousand_takes_the_paced_time_and_no_more_than_one_jitter_besides() {
    let p = PacingPolicy::default();
    let mut pc = Pacing::new(p);
    let gaps: Vec<(u64, f64, u64)> = (0..1_000).map(|i| (0, (i % 7) as f64 / 7.0, 0)).collect();
    let last = *serve(&mut pc, &gaps, 1.0).last().unwrap();
    assert!(last >= p.time_for(1_000), "{last}");
    assert!(last <= p.time_for(1_000) + p.jitter_ms, "{last}");
}

// ------------------------------------------------------------------ the sim's per-IP budget

/// Contract 3.4: "Per client IP: 300 socket connects a minute, checked first", refused attempts
/// included. 300 attempts with a key nobody has (each refused `1008` by the key, admitted by the
/// IP budget), then the 301st within the minute is closed `1013 rate_limited; retry_after=<s>`,
/// while an attempt from another loopback address is counted apart; `GET /_sim/refusals` counts
/// every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sims_per_ip_budget_refuses_the_301st_attempt_in_a_minute_with_1013_and_counts_each_ip_apart()
 {
    let s = crate::sim_support::sim(1.0).await;
    let nobody = "ac_live_nobodyhasthiskey0000000000";
    for i in 0..300 {
        let mut ws = s.connect(nobody, None).await;
        let (code, reason) = ws.closed(10_000).await;
        assert_eq!(
            (code, reason.as_str()),
            (1008, "Invalid token"),
            "attempt {i}"
        );
    }
    let mut ws = s.connect(nobody, None).await;
    let (code, reason) = ws.closed(10_000).await;
    assert_eq!(code, 1013, "{reason}");
    assert!(reason.starts_with("rate_limited; retry_after="), "{reason}");

    // From 127.0.0.2: another client IP, its own budget.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let addr: std::net::SocketAddr = s.base.trim_start_matches("http://").parse().unwrap();
    let stream = sock.connect(addr).await.unwrap();
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = s.ws_url().into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {nobody}").parse().unwrap());
    let (ws, _) =
        tokio_tungstenite::client_async(req, tokio_tungstenite::MaybeTlsStream::Plain(stream))
            .await
            .unwrap();
    let mut other = crate::sim_support::Ws { ws };
    assert_eq!(other.closed(10_000).await.0, 1008, "not the budget");

    let (st, r) = s.get(None, "/_sim/refusals").await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["close_codes"]["1013"], 1, "{r}");
    assert_eq!(r["close_codes"]["1008"], 301, "{r}");
    let ip = |a: &str| {
        r["ips"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["ip"] == a)
            .cloned()
            .unwrap_or_else(|| panic!("no {a} in {r}"))
    };
    let one = ip("127.0.0.1");
    assert_eq!(one["attempts"], 301, "{r}");
    assert_eq!(one["refused"], 1, "{r}");
    assert_eq!(one["peak_per_minute"], 301, "{r}");
    assert_eq!(one["limit_per_minute"], 300, "{r}");
    let two = ip("127.0.0.2");
    assert_eq!(
        (two["attempts"].clone(), two["refused"].clone()),
        (1.into(), 0.into())
    );
}

// ------------------------------------------------------- the listener's dial through the pacer

use crate::listen_support::{self as ls, Listener, Opts, Setup, eventually, eventually_async};
use serde_json::{Value, json};

/// Open sockets per agent, from `GET /_sim/agents`.
async fn open_sockets(sim: &ls::Sim) -> std::collections::BTreeMap<String, u64> {
    let v = sim.get("/_sim/agents").await;
    ls::as_list(&v, "agents")
        .iter()
        .map(|a| {
            (
                a["handle"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches('@')
                    .to_string(),
                a["sockets"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Waits until every one of `handles` holds exactly one socket on the server.
async fn all_connected(sim: &ls::Sim, handles: &[String], secs: f64) -> bool {
    eventually_async(secs, || async {
        let open = open_sockets(sim).await;
        handles.iter().all(|h| open.get(h) == Some(&1))
    })
    .await
}

/// Waits until each of `handles` has had `n` accepted connects.
async fn accepted_each(sim: &ls::Sim, handles: &[String], n: usize, secs: f64) -> bool {
    eventually_async(secs, || async {
        for h in handles {
            let v = sim.get(&format!("/_sim/agents/{h}/connects")).await;
            if ls::accepted(&ls::as_list(&v, "connects")) < n {
                return false;
            }
        }
        true
    })
    .await
}

fn refusals_1013(r: &Value) -> u64 {
    r["close_codes"]["1013"].as_u64().unwrap_or(0)
}

/// `POST /_sim/restart` closes every socket of every agent, as a restarting server does (first
/// `1012 Service Restart`, then TCP dropped with no close frame while upgrades are refused with
/// 503 for a moment), and three listeners come back by themselves each time, through the pacer
/// (one `connect_paced` line per attempt), with no `1013`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sim_restart_closes_every_socket_and_the_listeners_come_back_through_the_pacer_with_no_1013()
 {
    let sim = ls::Sim::start(20.0).await;
    let opts = Opts {
        time_scale: 20.0,
        ..Opts::default()
    };
    let mut agents = Vec::new();
    let mut runs = Vec::new();
    for h in ["pace-a", "pace-b", "pace-c"] {
        let a = sim.agent(h).await;
        let setup = Setup::new(&opts);
        let l = Listener::start(&sim, &a, &setup, &opts);
        agents.push(a.handle.clone());
        runs.push((setup, l));
    }
    assert!(
        all_connected(&sim, &agents, 30.0).await,
        "{:?}",
        open_sockets(&sim).await
    );

    let r = sim.post("/_sim/restart", json!({})).await;
    assert_eq!(r["closed"], 3, "{r}");
    assert!(
        accepted_each(&sim, &agents, 2, 30.0).await,
        "back after the 1012"
    );
    assert!(
        all_connected(&sim, &agents, 30.0).await,
        "{:?}",
        open_sockets(&sim).await
    );

    let r = sim
        .post("/_sim/restart", json!({"drop": true, "refuse_ms": 300}))
        .await;
    assert_eq!(r["closed"], 3, "{r}");
    assert_eq!(r["restarts"], 2, "{r}");
    assert!(
        accepted_each(&sim, &agents, 3, 30.0).await,
        "back after the drop"
    );
    assert!(
        all_connected(&sim, &agents, 30.0).await,
        "{:?}",
        open_sockets(&sim).await
    );

    let refusals = sim.get("/_sim/refusals").await;
    assert_eq!(refusals_1013(&refusals), 0, "{refusals}");
    for (a, (_, l)) in agents.iter().zip(&runs) {
        let connects = sim.get(&format!("/_sim/agents/{a}/connects")).await;
        let attempts = ls::as_list(&connects, "connects").len();
        assert!(attempts >= 3, "@{a}: {attempts} attempts");
        assert!(
            eventually(10.0, || l.count("connect_paced") >= attempts).await,
            "@{a}: every socket attempt ({attempts}) passed the pacer, {} did\n{}",
            l.count("connect_paced"),
            l.log()
        );
    }
}

/// The timestamp of a JSON log line, in Unix ms.
fn line_ms(v: &Value) -> u64 {
    let t = humantime::parse_rfc3339(v["timestamp"].as_str().unwrap()).unwrap();
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// The pacer comes on top of each profile's own wait, never instead of it: after a `1013` the
/// listener waits the server's `retry_after` in full (contract 3.4, never scaled) and only then
/// passes the pacer; after a refused key (retried through REST until it is accepted) too, and
/// every socket attempt the server saw passed the pacer once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1013s_retry_after_is_waited_in_full_before_the_pacer_and_every_socket_attempt_passes_it()
{
    let sim = ls::Sim::start(20.0).await;
    let opts = Opts {
        time_scale: 20.0,
        ..Opts::default()
    };
    let bob = sim.agent("bob").await;
    let setup = Setup::new(&opts);
    let l = Listener::start(&sim, &bob, &setup, &opts);
    let me = vec![bob.handle.clone()];
    assert!(all_connected(&sim, &me, 30.0).await, "{}", l.log());
    assert_eq!(
        l.count("connect_paced"),
        1,
        "the first attempt passed the pacer"
    );

    sim.close_sockets(&bob, 1013, "rate_limited; retry_after=1")
        .await;
    assert!(
        eventually(20.0, || l.count("connect_paced") >= 2).await,
        "{}",
        l.log()
    );
    assert!(all_connected(&sim, &me, 30.0).await, "{}", l.log());
    let budget = l.events("connect_budget");
    assert_eq!(budget.len(), 1, "{}", l.log());
    let paced = l.events("connect_paced");
    let after = line_ms(&paced[1]) - line_ms(&budget[0]);
    assert!(
        after >= 1_000,
        "the retry passed the pacer {after} ms after the 1013, before its retry_after=1"
    );

    sim.refuse_key(&bob).await;
    assert!(
        eventually(30.0, || l.count("key_refused") >= 3).await,
        "{}",
        l.log()
    );
    sim.post(
        &format!("/_sim/agents/{}/refuse-key", bob.handle),
        json!({"refuse": false}),
    )
    .await;
    assert!(accepted_each(&sim, &me, 3, 60.0).await, "{}", l.log());
    assert!(all_connected(&sim, &me, 60.0).await, "{}", l.log());
    // Every socket attempt the server saw (accepted or refused) passed the pacer first: a
    // refused key is retried through `GET /v1/agents/me` (REST, no socket attempt) until it is
    // accepted, and then its dial is paced like any other.
    let attempts = ls::as_list(
        &sim.get(&format!("/_sim/agents/{}/connects", bob.handle))
            .await,
        "connects",
    )
    .len();
    assert!(
        eventually(10.0, || l.count("connect_paced") == attempts).await,
        "{attempts} socket attempts, {} through the pacer\n{}",
        l.count("connect_paced"),
        l.log()
    );
    let refusals = sim.get("/_sim/refusals").await;
    assert_eq!(
        refusals_1013(&refusals),
        0,
        "the close above was the test's, not the budget's: {refusals}"
    );
}

// ------------------------------------------------- the goal: 1,000 profiles in one process

/// How many profiles the host test runs (`PACING_PROFILES` overrides, for a quicker look by hand).
fn host_profiles() -> usize {
    std::env::var("PACING_PROFILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

/// The time scale of the host test: the pacer's minute is 60 s / 20 = 3 s of real time.
const HOST_SCALE: f64 = 20.0;

/// The binary the host test runs, the host and the sim alike: the release build when
/// scripts/test built it (`AGENTCHAT_TEST_RELEASE_BIN`), a thousand profiles at the speed users
/// run them; else the test build's.
fn host_binary() -> String {
    std::env::var("AGENTCHAT_TEST_RELEASE_BIN").unwrap_or_else(|_| ls::BIN.to_string())
}

/// The sim's count for 127.0.0.1: (attempts, refused by the per-IP budget, peak in a minute).
fn loopback_counts(r: &Value) -> (u64, u64, u64) {
    let ip = r["ips"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["ip"] == "127.0.0.1")
        .cloned()
        .unwrap_or(Value::Null);
    let n = |k: &str| ip[k].as_u64().unwrap_or(0);
    (n("attempts"), n("refused"), n("peak_per_minute"))
}

/// The goal of connect pacing (issue 20) in a real process: `listen --all` with 1,000 profiles
/// (each its own agent, key file and state dir, a thousand sockets in one process) starts, then
/// the sim restarts (`1012` to every socket), and every profile is connected again. What the
/// storm may cost the budget (no `1013`, the busiest minute under the pacer's bound, everyone
/// back within the pacer's time) is held on the virtual clock, where no busy machine can move
/// it: `scripts/simulate --storm 1000` (`agentchat::simulate::storm`), run by scripts/test.
/// Here the sim's counts and the times are printed, never asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_profiles_in_one_process_start_and_come_back_after_a_sim_restart() {
    use std::os::unix::fs::PermissionsExt;
    // 1,000 server sockets in the sim, besides the host's own 1,000 (which raises its own).
    let _ = agentchat::sys::fs::raise_open_files_limit();
    let n = host_profiles();
    let binary = host_binary();
    let scale = HOST_SCALE.to_string();
    let sim_process = ls::SimProcess::spawn(
        &binary,
        &["--listen", "127.0.0.1:0", "--time-scale", &scale],
    );
    let sim = ls::Sim::external(&sim_process.api_base);
    let tmp = tempfile::tempdir().unwrap();
    let mut toml = String::from(
        "log_level = \"info\"\n[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n\
         idle_timeout = \"100s\"\n",
    );
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let a = sim.agent(&format!("pace{i:04}")).await;
        let key = tmp.path().join(format!("p{i:04}.key"));
        std::fs::write(&key, &a.key).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        toml.push_str(&format!(
            "[profiles.p{i:04}]\napi_key_file = \"{}\"\n",
            key.display()
        ));
        handles.push(a.handle);
    }
    let config = tmp.path().join("config.toml");
    std::fs::write(&config, toml).unwrap();

    let mut cmd = crate::common::isolated_command(&binary, &["NOTIFY_SOCKET"]);
    cmd.args(["listen", "--all", "--log-format", "json"]);
    cmd.env("HOME", tmp.path())
        .env("XDG_STATE_HOME", tmp.path().join("xdg"))
        .env("AGENTCHAT_CONFIG", &config)
        .env("AGENTCHAT_API_BASE", &sim.api_base)
        .env("AGENTCHAT_TEST_TIME_SCALE", HOST_SCALE.to_string());
    let stderr_path = tmp.path().join("host.stderr");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    let spawned_ms = ls::now_ms();
    let host = Listener {
        child: Some(cmd.spawn().expect("the host starts")),
        stderr_path,
    };
    let tail = |l: &Listener| {
        let log = l.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };

    assert!(
        all_connected(&sim, &handles, 600.0).await,
        "not all {n} connected at start:\n{}",
        tail(&host)
    );
    let at_start = sim.get("/_sim/refusals").await;
    let (attempts_start, refused_start, peak_start) = loopback_counts(&at_start);

    let restart_ms = ls::now_ms();
    let r = sim.post("/_sim/restart", json!({})).await;
    assert_eq!(r["closed"].as_u64(), Some(n as u64), "{r}");
    // A restart drops the server's record of every socket at once: one open socket for each
    // agent again is each profile reconnected.
    assert!(
        all_connected(&sim, &handles, 600.0).await,
        "not all {n} reconnected after the restart:\n{}",
        tail(&host)
    );
    let after = sim.get("/_sim/refusals").await;
    let (attempts, refused, peak) = loopback_counts(&after);
    assert!(
        attempts_start >= n as u64 && attempts >= 2 * n as u64,
        "{after}"
    );

    // The times, from the server's own log of accepted connects: the last first connect, and
    // the last connect after the restart.
    let (mut last_start, mut last_restart) = (0u64, 0u64);
    for h in &handles {
        let v = sim.get(&format!("/_sim/agents/{h}/connects")).await;
        for c in ls::as_list(&v, "connects")
            .iter()
            .filter(|c| ls::is_accepted(c))
        {
            let at = ls::connect_ms(c);
            if at < restart_ms {
                last_start = last_start.max(at);
            } else {
                last_restart = last_restart.max(at);
            }
        }
    }
    let start_s = last_start.saturating_sub(spawned_ms) as f64 / 1000.0;
    let restart_s = last_restart.saturating_sub(restart_ms) as f64 / 1000.0;
    let policy = PacingPolicy::default().scaled(HOST_SCALE);
    let paced_s = policy.time_for(n as u64) as f64 / 1000.0;
    eprintln!(
        "pacing: {n} profiles ({binary}), time scale {HOST_SCALE}: start-up to all connected \
         {start_s:.1} s ({:.0} s at contract speed), restart to all reconnected {restart_s:.1} s \
         ({:.0} s); the pacer's own time {paced_s:.1} s ({:.0} s); socket attempts \
         {attempts_start} at start, {} after the restart; 1013s {}, refused {}; attempts in the \
         busiest budget minute {peak_start} at start, {peak} overall (the pacer's bound {} a \
         minute, budget 300)",
        start_s * HOST_SCALE,
        restart_s * HOST_SCALE,
        paced_s * HOST_SCALE,
        attempts - attempts_start,
        refusals_1013(&after),
        refused_start + refused,
        PacingPolicy::default().max_in_window(WINDOW_MS),
    );
    // Why any profile took more than one attempt a phase: the listener's own words.
    let mut why = std::collections::BTreeMap::<String, usize>::new();
    for e in host.events("backoff") {
        let d = e["detail"]
            .as_str()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect::<String>();
        *why.entry(d).or_default() += 1;
    }
    eprintln!("pacing: reconnects by reason: {why:?}");
    drop(host);
}

// ------------------------------------------------------------------ the conformance fixture

/// `conformance/connect-pacing.cases.json`: the default policy, its bound at contract speed and
/// under test time scales, and served sequences of attempts with the time each went.
#[test]
fn connect_pacing_cases_give_the_bound_and_the_times_each_attempt_went() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("conformance/connect-pacing.cases.json");
    let doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let p = PacingPolicy::default();
    assert_eq!(doc["policy"]["burst"], p.burst);
    assert_eq!(doc["policy"]["interval_ms"], p.interval_ms);
    assert_eq!(doc["policy"]["jitter_ms"], p.jitter_ms);
    let budget = doc["budget_per_minute"].as_u64().unwrap();
    assert_eq!(budget, IP_BUDGET_PER_MINUTE);
    let mut failures = Vec::new();
    for b in doc["bounds"].as_array().unwrap() {
        assert!(!b["description"].as_str().unwrap().is_empty());
        let s = p.scaled(b["scale"].as_f64().unwrap());
        let window = b["window_ms"].as_u64().unwrap();
        let got = (s.interval_ms, s.jitter_ms, s.max_in_window(window));
        let want = (
            b["interval_ms"].as_u64().unwrap(),
            b["jitter_ms"].as_u64().unwrap(),
            b["max_in_window"].as_u64().unwrap(),
        );
        if got != want || got.2 >= budget {
            failures.push(format!(
                "bound at scale {}: {got:?}, want {want:?}",
                b["scale"]
            ));
        }
    }
    for c in doc["cases"].as_array().unwrap() {
        let what = c["description"].as_str().unwrap();
        assert!(!what.is_empty());
        let mut gaps = Vec::new();
        let mut last_at = 0;
        for a in c["asks"].as_array().unwrap() {
            let at = a["at_ms"].as_u64().unwrap();
            for i in 0..a["count"].as_u64().unwrap() {
                // `serve` takes gaps between asks.
                let gap = if i == 0 { at - last_at } else { 0 };
                gaps.push((gap, a["jitter"].as_f64().unwrap(), 0));
            }
            last_at = at;
        }
        let went = serve(&mut Pacing::new(p), &gaps, 1.0);
        let want: Vec<u64> = c["went_ms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        if went != want {
            failures.push(format!("{what}: went {went:?}, want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

//! What the listener does with the wire's refusals (issue 29 items 3, 11, 15): a socket the
//! server closes right after the upgrade, a `4426 upgrade required`, a `429` on the upgrade, a
//! sleep during a backoff wait. The real binary against the sim, or the scripted server
//! (`listen_support::fake`) where the sim cannot play the part.

use crate::listen_support::fake::{self, Fake};
use crate::listen_support::*;
use std::time::SystemTime;

const FAKE_KEY: &str = "ac_fake_key";

fn fake_listener(fake: &Fake, opts: &Opts) -> (Setup, Listener) {
    let setup = Setup::new(opts);
    let l = Listener::spawn(
        listener_command_for(&fake.api_base, FAKE_KEY, &setup, opts),
        &setup,
        "",
    );
    (setup, l)
}

/// Gaps between consecutive times, in ms.
fn gaps(at: &[u64]) -> Vec<u64> {
    at.windows(2).map(|p| p[1] - p[0]).collect()
}

/// Issue 29 item 3: a server that accepts the upgrade and closes at once, `1008 Invalid token`
/// while REST still accepts the key (`/v1/agents/me` answers), or `1011`. Before, the accepted
/// `GET /v1/agents/me` reset the refused-key retry: 14 connects in 20 s, 40 a minute against a
/// per-agent budget of 20. Now nothing resets until a socket proves itself, so the delays grow.
/// The waits are read as the listener chose them (`retry_in_ms` of its `key_refused` or
/// `backoff` lines), and the wall clock is only held to "never sooner": the per-agent budget
/// itself is the simulator's `connect_budget`, on its virtual clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_closed_right_after_the_upgrade_is_retried_ever_more_slowly_for_1008_and_1011() {
    for (code, reason, event) in [
        (1008, "Invalid token", "key_refused"),
        (1011, "internal error", "backoff"),
    ] {
        let fake = Fake::start("bob", fake::tray("@bob", 0)).await;
        fake.shared.lock().unwrap().refuse_sockets = Some((code, reason.to_string()));
        let opts = Opts {
            time_scale: 10.0,
            ..Opts::default()
        };
        let (_setup, l) = fake_listener(&fake, &opts);
        let refused = || fake.shared.lock().unwrap().refused_at.clone();
        assert!(
            eventually(30.0, || refused().len() >= 6).await,
            "{code}: {} attempts:\n{}",
            refused().len(),
            l.log()
        );
        let at = refused();
        let delays = l.waits_chosen(event);
        eprintln!(
            "{code}: waits chosen {delays:?} ms, gaps {:?} ms",
            gaps(&at)
        );
        assert!(delays.len() >= 5, "{code}: {delays:?}\n{}", l.log());
        assert!(
            delays[4] > 3 * delays[0],
            "{code}: the delays do not grow: {delays:?}"
        );
        for (i, gap) in gaps(&at).iter().enumerate().take(5) {
            assert!(
                gap + 2 >= delays[i],
                "{code}: attempt {} came {gap} ms after a wait of {} ms was chosen",
                i + 1,
                delays[i]
            );
        }
        if code == 1008 {
            // REST answered all along: the key's own `GET /v1/agents/me` is asked each time.
            let me = fake
                .shared
                .lock()
                .unwrap()
                .paths
                .iter()
                .filter(|p| p.starts_with("/v1/agents/me"))
                .count();
            assert!(me >= at.len(), "{me} {}", l.log());
            // One ERROR for the run of refusals, INFO after it.
            let levels: Vec<String> = l
                .events("key_refused")
                .iter()
                .map(|e| e["level"].as_str().unwrap_or("").to_string())
                .collect();
            assert_eq!(
                levels.iter().filter(|l| *l == "ERROR").count(),
                1,
                "{levels:?}"
            );
        }
    }
}

/// Issue 29 item 15: a `429` on the socket upgrade (something in front of the server) was the
/// ordinary backoff, its `Retry-After` ignored: at a time scale of 1000, attempts milliseconds
/// apart. Now each waits at least the `Retry-After` (the server's, never scaled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_the_socket_upgrade_waits_its_retry_after() {
    let fake = Fake::start("bob", fake::tray("@bob", 0)).await;
    fake.shared.lock().unwrap().upgrade_429 = Some("2".into());
    let opts = Opts {
        time_scale: 1000.0,
        ..Opts::default()
    };
    let (setup, l) = fake_listener(&fake, &opts);
    let refused = || fake.shared.lock().unwrap().refused_at.clone();
    assert!(
        eventually(15.0, || refused().len() >= 3).await,
        "{:?}\n{}",
        refused(),
        l.log()
    );
    for gap in gaps(&refused()) {
        assert!(
            gap >= 2_000,
            "Retry-After: 2 waited {gap} ms: {:?}",
            refused()
        );
    }
    assert!(l.log().contains("retry after 2 s"), "{}", l.log());
    assert_eq!(setup.status()["socket"], "backoff");
}

/// Issue 29 item 11: a `4426 upgrade required` close (contract 7: retrying will not succeed) was
/// retried on the ordinary backoff with `status --json` saying `usable: true, problem: null`.
/// Now it is a state of its own: one ERROR, `upgrade_required` in the status file and
/// `/readyz`, `usable: false` with the problem named, and a re-check 15-30 min later (here at a
/// time scale of 100: 9-18 s), after which a server that lets the socket in again has it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4426_close_is_a_stopped_state_with_its_own_status_rechecked_slowly() {
    let sim = Sim::start(1.0).await;
    let bob = sim.agent("bob").await;
    let opts = Opts {
        time_scale: 100.0,
        extra_toml: "metrics_addr = \"127.0.0.1:0\"\n".into(),
        ..Opts::default()
    };
    let setup = Setup::new(&opts);
    let l = Listener::start(&sim, &bob, &setup, &opts);
    assert!(
        eventually(15.0, || setup.status()["state"] == "connected").await,
        "{}",
        l.log()
    );
    let base = metrics_base(&l).await;
    sim.close_sockets(&bob, 4426, "upgrade required").await;
    assert!(
        eventually(10.0, || setup.status()["state"] == "upgrade_required").await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    let said = l.events("upgrade_required");
    assert_eq!(said.len(), 1, "{}", l.log());
    assert_eq!(said[0]["level"], "ERROR", "{}", said[0]);
    let retry_in = said[0]["retry_in_ms"].as_u64().unwrap();
    assert!((9_000..=18_000).contains(&retry_in), "{retry_in}");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentchat"))
        .args(["status", "--json"])
        .env("AGENTCHAT_CONFIG", &setup.config)
        .env("AGENTCHAT_STATE_DIR", &setup.state_dir)
        .env_remove("AGENTCHAT_API_KEY")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["usable"], false, "{v}");
    let problem = v["problem"].as_str().unwrap_or("");
    assert!(
        problem.contains("4426") && problem.contains("update agentchat"),
        "{v}"
    );
    let ready = reqwest::get(format!("{base}/readyz")).await.unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    assert!(ready.text().await.unwrap().contains("4426"));

    // No attempt before the re-check (at contract speed, 15 min).
    let accepted_now = accepted(&sim.connects(&bob).await);
    assert!(
        !eventually_async(5.0, || async {
            sim.connects(&bob).await.len() > accepted_now
        })
        .await,
        "a retry before the slow re-check:\n{}",
        l.log()
    );
    // The re-check finds the socket let in again.
    assert!(
        eventually(20.0, || setup.status()["state"] == "connected").await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    assert_eq!(accepted(&sim.connects(&bob).await), 2);
}

/// libfaketime's preload library, if installed (`listen_connect` has the same look-up).
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
        eprintln!("SKIPPED: libfaketime is not installed (Debian: apt-get install libfaketime)");
    }
    lib
}

/// Issue 29 item 15: a sleep (suspend) during a backoff wait was not noticed: the wait runs on
/// the monotonic clock, which stands still while the machine sleeps, so the whole delay was
/// still waited after the wake. Now the clocks are looked at during the wait as during an idle
/// socket, and time asleep counts as waited. Here the connect budget asked for 600 s (never
/// scaled); the listener's wall clock then jumps 900 s ahead (libfaketime, the monotonic clock
/// untouched): the next attempt comes within the 10 s look, not 600 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_during_a_backoff_wait_counts_as_waited() {
    let Some(lib) = libfaketime() else { return };
    let fake = Fake::start("bob", fake::tray("@bob", 0)).await;
    fake.shared.lock().unwrap().refuse_sockets =
        Some((1013, "rate_limited; retry_after=600".into()));
    let opts = Opts::default();
    let setup = Setup::new(&opts);
    let offset = setup.tmp.path().join("faketime");
    std::fs::write(&offset, "+0\n").unwrap();
    let mut cmd = listener_command_for(&fake.api_base, FAKE_KEY, &setup, &opts);
    cmd.env("LD_PRELOAD", &lib)
        .env("FAKETIME_TIMESTAMP_FILE", &offset)
        .env("FAKETIME_NO_CACHE", "1")
        .env("DONT_FAKE_MONOTONIC", "1");
    let l = Listener::spawn(cmd, &setup, "");
    assert!(
        eventually(15.0, || l.count("connect_budget") == 1).await,
        "{}",
        l.log()
    );
    let refused = || fake.shared.lock().unwrap().refused_at.len();
    assert_eq!(refused(), 1);
    let slept_at = SystemTime::now();
    std::fs::write(&offset, "+900\n").unwrap();
    assert!(
        eventually(25.0, || refused() >= 2).await,
        "the wait outlived the sleep:\n{}",
        l.log()
    );
    assert!(slept_at.elapsed().unwrap().as_secs() < 25);
    let jump = &l.events("clock_jump")[0];
    assert!(jump["unseen_ms"].as_u64().unwrap() >= 890_000, "{jump}");
    assert_eq!(jump["retry_in_ms"], 0, "{jump}");
}

/// The sim and `bob`'s listener (metrics on port 0), past its connect cycle.
async fn bob_with_metrics() -> (Sim, Agent, Agent, Setup, Listener, String) {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let opts = Opts {
        extra_toml: "metrics_addr = \"127.0.0.1:0\"\n".into(),
        ..Opts::default()
    };
    let setup = Setup::new(&opts);
    let l = Listener::start(&sim, &bob, &setup, &opts);
    assert!(
        eventually(15.0, || l.count("cycle_end") >= 1).await,
        "{}",
        l.log()
    );
    let base = metrics_base(&l).await;
    (sim, alice, bob, setup, l, base)
}

async fn readyz(base: &str) -> (u16, String) {
    let r = reqwest::get(format!("{base}/readyz")).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Issue 29 items 12 and 14: `GET /v1/inbox` switched off in the sim (`410 REMOVED`). Before,
/// each cycle logged "the tray could not be read; no run (the server re-wakes)" and the
/// profile stayed ready. Now the log says REMOVED, the route and the replacement the server
/// named, the profile is `upgrade_required` and not ready, until a tray is read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_tray_route_is_said_as_removed_with_its_replacement_and_the_profile_is_not_ready()
{
    let (sim, alice, bob, setup, l, base) = bob_with_metrics().await;
    sim.post(
        "/_sim/old-paths",
        serde_json::json!({"path": "/v1/inbox", "state": "removed", "replacement": "GET /v2/tray"}),
    )
    .await;
    sim.send(&alice, &bob, "after the switch-off").await;
    assert!(
        eventually(15.0, || l.count("route_removed") == 1).await,
        "{}",
        l.log()
    );
    let said = &l.events("route_removed")[0];
    assert_eq!(said["level"], "ERROR");
    let error = said["error"].as_str().unwrap();
    assert!(
        error.contains("GET /v1/inbox")
            && error.contains("REMOVED")
            && error.contains("GET /v2/tray"),
        "{said}"
    );
    assert_eq!(l.count("tray_unreadable"), 0, "{}", l.log());
    assert!(
        eventually(5.0, || setup.status()["state"] == "upgrade_required").await,
        "{}",
        setup.status()
    );
    assert!(
        setup.status()["detail"]
            .as_str()
            .unwrap()
            .contains("GET /v2/tray")
    );
    let (code, line) = readyz(&base).await;
    assert_eq!(code, 503, "{line}");
    assert_eq!(setup.rec.count(), 0);

    // Back on: the next wake reads the tray, runs, and the profile is ready again.
    sim.post(
        "/_sim/old-paths",
        serde_json::json!({"path": "/v1/inbox", "state": "on"}),
    )
    .await;
    sim.wake(&bob, "reminder").await;
    assert!(eventually(15.0, || setup.rec.done(1)).await, "{}", l.log());
    assert!(
        eventually(5.0, || setup.status()["state"] == "connected").await,
        "{}",
        setup.status()
    );
    assert_eq!(readyz(&base).await.0, 200);
}

/// Issue 29: a `REMOVED` tray route has a slow re-check of its own (the `4426` state's, 15-30
/// min, here divided by the test time scale): once the route is back on, the listener leaves
/// `upgrade_required` and runs the card that waited, with no wake from the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_tray_route_is_read_again_by_itself_and_the_waiting_card_runs_when_it_is_back() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let opts = Opts {
        time_scale: 1000.0,
        ..Opts::default()
    };
    let setup = Setup::new(&opts);
    let l = Listener::start(&sim, &bob, &setup, &opts);
    assert!(
        eventually(15.0, || l.count("cycle_end") >= 1).await,
        "{}",
        l.log()
    );
    sim.post(
        "/_sim/old-paths",
        serde_json::json!({"path": "/v1/inbox", "state": "removed", "replacement": "GET /v2/tray"}),
    )
    .await;
    sim.send(&alice, &bob, "after the switch-off").await;
    assert!(
        eventually(15.0, || setup.status()["state"] == "upgrade_required").await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    // Still removed: the re-check reads the tray again, and stays not ready.
    assert!(
        eventually(15.0, || l.count("route_removed") >= 2).await,
        "{}",
        l.log()
    );
    assert_eq!(setup.rec.count(), 0);
    sim.post(
        "/_sim/old-paths",
        serde_json::json!({"path": "/v1/inbox", "state": "on"}),
    )
    .await;
    assert!(eventually(15.0, || setup.rec.done(1)).await, "{}", l.log());
    let ran = l.events("cycle_start").into_iter().rev().find(|e| {
        e["reasons"]
            .as_str()
            .is_some_and(|r| r.contains("recovered"))
    });
    assert!(ran.is_some(), "{}", l.log());
    assert!(
        eventually(5.0, || setup.status()["state"] == "connected").await,
        "{}",
        setup.status()
    );
}

/// Issue 29 item 12: `GET /v1/agents/me` answering `410 REMOVED` read as "not an AgentChat
/// server; check api_base". Now it is the same stopped state as a `4426`, naming the
/// replacement, re-checked slowly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_agents_me_is_upgrade_required_not_a_wrong_api_base() {
    let sim = Sim::start(1.0).await;
    let bob = sim.agent("bob").await;
    sim.post(
        "/_sim/old-paths",
        serde_json::json!({"path": "/v1/agents/me", "state": "removed", "replacement": "GET /v2/me"}),
    )
    .await;
    let opts = Opts::default();
    let setup = Setup::new(&opts);
    let l = Listener::start(&sim, &bob, &setup, &opts);
    assert!(
        eventually(15.0, || setup.status()["state"] == "upgrade_required").await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    let said = &l.events("upgrade_required")[0];
    assert_eq!(said["level"], "ERROR");
    assert!(
        said["detail"].as_str().unwrap().contains("GET /v2/me"),
        "{said}"
    );
    assert!(said["retry_in_ms"].as_u64().unwrap() >= 900_000, "{said}");
    assert_eq!(l.count("api_base_not_agentchat"), 0, "{}", l.log());
    assert!(!l.log().contains("check api_base"), "{}", l.log());
}

/// Issue 29 items 12 and 14: a route the server marks deprecated (contract 7's headers) is said
/// once, at WARN, with its `Sunset`, however many answers carry the headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprecation_headers_are_said_once_per_route_with_the_sunset() {
    let (sim, alice, bob, setup, l, _base) = bob_with_metrics().await;
    sim.post(
        "/_sim/old-paths",
        serde_json::json!({"path": "/v1/inbox", "state": "deprecated"}),
    )
    .await;
    for n in 1..=2 {
        sim.send(&alice, &bob, &format!("message {n}")).await;
        assert!(eventually(15.0, || setup.rec.done(n)).await, "{}", l.log());
    }
    // Both cycles read the tray: two answers with the headers.
    assert!(l.count("tray_read") >= 3, "{}", l.log());
    let said = l.events("route_deprecated");
    assert_eq!(said.len(), 1, "{}", l.log());
    assert_eq!(said[0]["level"], "WARN");
    assert_eq!(said[0]["route"], "GET /v1/inbox");
    assert_eq!(
        said[0]["api_base"], sim.api_base,
        "the server that said it is named"
    );
    assert_eq!(said[0]["sunset"], "Sat, 06 Feb 2027 00:00:00 GMT");
    assert_eq!(said[0]["deprecation"], "@1794096000");
}

/// Issue 29 item 14: a full-paused agent (the sim's `paused_by_owner: full`) gets no push and
/// an empty tray: a message meanwhile starts no run. Unpaused, the next wake runs for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_paused_agent_starts_no_run_until_the_pause_ends() {
    let (sim, alice, bob, setup, l, _base) = bob_with_metrics().await;
    sim.post(
        &format!("/_sim/agents/{}/pause", bob.handle),
        serde_json::json!({"paused_by_owner": "full"}),
    )
    .await;
    sim.send(&alice, &bob, "while paused").await;
    sim.wake(&bob, "reminder").await;
    assert!(
        eventually(10.0, || l.count("cycle_end") >= 2).await,
        "{}",
        l.log()
    );
    let last = l.events("cycle_end").pop().unwrap();
    assert_eq!(last["no_run_reason"], "nothing_waiting", "{last}");
    assert_eq!(setup.rec.count(), 0);
    sim.post(
        &format!("/_sim/agents/{}/pause", bob.handle),
        serde_json::json!({"paused_by_owner": "none"}),
    )
    .await;
    sim.wake(&bob, "reminder").await;
    assert!(eventually(15.0, || setup.rec.done(1)).await, "{}", l.log());
}

/// Issue 29 item 13: a `429` whose `Retry-After` outlasts a cycle's three tray reads ended the
/// cycle, and the next wake read the tray again at once. Now the profile holds a not-before
/// time: a wake meanwhile waits, and a cycle of its own (`recovered`) reads the tray at its end,
/// so the card runs without a new message. The scripted server answers three reads `429` with
/// `Retry-After: 3`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_that_outlasts_a_cycles_retries_holds_the_next_read_until_its_end_then_reads_by_itself()
 {
    let fake = Fake::start("bob", fake::tray("@bob", 1)).await;
    {
        let mut s = fake.shared.lock().unwrap();
        s.inbox_429 = 3;
        s.retry_after_s = 3;
    }
    let opts = Opts::default();
    let (setup, l) = fake_listener(&fake, &opts);
    let reads = || fake.shared.lock().unwrap().inbox_times.clone();
    assert!(
        eventually(20.0, || l.count("tray_not_before") == 1).await,
        "{:?}\n{}",
        reads(),
        l.log()
    );
    let third = *reads().last().unwrap();
    assert_eq!(reads().len(), 3);
    // A wake meanwhile does not read the tray before the server's time.
    fake.wake("reminder");
    assert!(eventually(20.0, || setup.rec.done(1)).await, "{}", l.log());
    let fourth = reads()[3];
    assert!(
        fourth >= third + 3_000,
        "read again {} ms after the 429 of Retry-After: 3",
        fourth - third
    );
    let reasons: Vec<String> = l
        .events("cycle_start")
        .iter()
        .map(|e| e["reasons"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(reasons.last().unwrap().contains("recovered"), "{reasons:?}");
}

/// Issue 29 item 13: the same, with no wake at all in between: the card still runs, by the
/// listener's own cycle at the end of the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_long_429_the_tray_is_read_again_at_its_end_without_a_new_wake() {
    let fake = Fake::start("bob", fake::tray("@bob", 1)).await;
    {
        let mut s = fake.shared.lock().unwrap();
        s.inbox_429 = 3;
        s.retry_after_s = 2;
    }
    let (setup, l) = fake_listener(&fake, &Opts::default());
    assert!(eventually(25.0, || setup.rec.done(1)).await, "{}", l.log());
    assert_eq!(l.count("tray_not_before"), 1, "{}", l.log());
}

/// Issue 29 item 13: a tray whose `version` is not 1 is read as v1 (contract rule 2: v1 changes
/// only additively) and said once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tray_of_an_unknown_version_is_read_as_v1_and_said_once() {
    let mut tray = fake::tray("@bob", 1);
    tray["version"] = serde_json::json!(2);
    let fake = Fake::start("bob", tray).await;
    let (setup, l) = fake_listener(&fake, &Opts::default());
    assert!(eventually(15.0, || setup.rec.done(1)).await, "{}", l.log());
    fake.wake("reminder");
    assert!(eventually(15.0, || setup.rec.done(2)).await, "{}", l.log());
    let said = l.events("tray_version_unknown");
    assert_eq!(said.len(), 1, "{}", l.log());
    assert_eq!(said[0]["version"], 2);
    assert_eq!(said[0]["level"], "WARN");
}

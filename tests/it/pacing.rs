//! Connect pacing under the per-IP connect budget (contract 3.4: 300 socket connects a minute per
//! client IP, refused ones included): the pure policy (`core::pacing`) on random timelines, the
//! sim's per-IP budget, and the listener's dial going through the pacer.

use agentchat::core::pacing::{IP_BUDGET_PER_MINUTE, Pacing, PacingPolicy, WINDOW_MS};
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

/// Gaps between attempts (often none: a storm), each with its jitter draw.
fn asks() -> impl Strategy<Value = Vec<(u64, f64)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => Just(0u64), 1 => 0u64..2_000, 1 => 0u64..120_000],
            0.0f64..1.0,
        ),
        1..600,
    )
}

proptest! {
    #[test]
    fn pacing_never_admits_more_than_its_bound_in_any_window(
        p in policy(),
        gaps in asks(),
        window in prop_oneof![Just(WINDOW_MS), 1u64..10_000],
    ) {
        let mut pc = Pacing::new(p);
        let mut now = 0u64;
        let mut admitted = Vec::new();
        let mut last = 0;
        for (gap, jitter) in gaps {
            now += gap;
            let at = pc.admit(now, jitter);
            prop_assert!(at >= now, "never before it was asked for");
            prop_assert!(at >= last, "FIFO: {at} before {last}");
            last = at;
            admitted.push(at);
        }
        let peak = peak_in_window(&admitted, window);
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
        let mut now = 0u64;
        let mut admitted = Vec::new();
        for (gap, jitter) in gaps {
            now += (gap as f64 / scale) as u64;
            admitted.push(pc.admit(now, jitter));
        }
        let peak = peak_in_window(&admitted, window);
        prop_assert!(peak < IP_BUDGET_PER_MINUTE, "{peak} in one budget window");
        prop_assert!(peak <= p.max_in_window(window));
    }

    #[test]
    fn an_attempt_that_finds_a_token_and_no_queue_goes_at_once(
        p in policy(),
        gaps in asks(),
    ) {
        let mut pc = Pacing::new(p);
        let mut now = 0u64;
        for (gap, jitter) in gaps {
            now += gap;
            let free = pc.would_go_at(now);
            let at = pc.admit(now, jitter);
            prop_assert_eq!(free, at == now);
        }
    }
}

#[test]
fn a_storm_of_a_thousand_takes_the_paced_time_and_no_more_than_its_jitter_adds() {
    let p = PacingPolicy::default();
    let mut pc = Pacing::new(p);
    let last = (0..1_000)
        .map(|i| pc.admit(0, (i % 7) as f64 / 7.0))
        .max()
        .unwrap();
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
/// passes the pacer; a refused key's retries each pass it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1013s_retry_after_is_waited_in_full_before_the_pacer_and_a_refused_keys_retries_pass_it()
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
    let refused = l.count("key_refused");
    assert!(
        l.count("connect_paced") > refused,
        "each of the {refused} refused attempts was followed by one through the pacer: {}",
        l.count("connect_paced")
    );
    sim.post(
        &format!("/_sim/agents/{}/refuse-key", bob.handle),
        json!({"refuse": false}),
    )
    .await;
    assert!(all_connected(&sim, &me, 60.0).await, "{}", l.log());
    let refusals = sim.get("/_sim/refusals").await;
    assert_eq!(
        refusals_1013(&refusals),
        0,
        "the close above was the test's, not the budget's: {refusals}"
    );
}

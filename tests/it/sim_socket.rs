//! The sim's socket (contract 3.4) and its server-owned timers (5, 6) over real WebSocket
//! clients: the tests' own minimal client and the official Python SDK's `RealtimeClient`.

use std::time::Duration;

use crate::sim_support::{self, Got, alice_and_bob, alice_bob_and_carol, sim};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn ws_3_4_header_path_answers_hello_ok_with_accepted_capabilities_sorted_only_when_asked() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let mut ws = s
        .connect(&bob.key, Some("rewake, ack,bogus,heartbeat"))
        .await;
    let hello = ws.expect("hello.ok", 5000).await;
    assert_eq!(hello["capabilities"], json!(["ack", "heartbeat", "rewake"]));
    // Without the header: no hello.ok; the first frame is the live push, with no delivery_id.
    let mut plain = s.connect(&alice.key, None).await;
    s.wait_state(&alice, "socket attached", |st| {
        st["sockets"].as_array().unwrap().len() == 1
    })
    .await;
    let m = s.send(&bob, &alice, "hi").await;
    match plain.next(5000).await {
        Got::Frame(f) => {
            assert_eq!(
                f["type"], "message.new",
                "no hello.ok on the header path without the header: {f}"
            );
            assert_eq!(f["payload"]["id"], m["id"]);
            assert_eq!(f["payload"]["sender"], "bob");
            assert!(
                f["payload"].get("delivery_id").is_none(),
                "live pushes carry no delivery_id"
            );
        }
        other => panic!("expected message.new, got {other:?}"),
    }
    let st = s.state(&alice).await;
    assert_eq!(
        st["received"][0]["status"], "delivered",
        "without ack: delivered on hand-over"
    );
    let c = s.connects(&bob).await;
    assert_eq!(c[0]["outcome"], "accepted");
    assert_eq!(c[0]["path"], "header");
    assert!(c[0]["at_ms"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn ws_3_4_hello_path_always_answers_hello_ok_and_refuses_bad_keys_and_missing_hello() {
    let s = sim(10.0).await;
    let bob = s.agent("bob").await;
    let mut ws = s.connect_bare().await;
    ws.send_json(json!({"type": "hello", "api_key": bob.key, "capabilities": ["ack", "nope"], "client": "t"})).await;
    assert_eq!(
        ws.expect("hello.ok", 5000).await["capabilities"],
        json!(["ack"])
    );
    assert_eq!(s.connects(&bob).await[0]["path"], "hello");
    let mut bad = s.connect_bare().await;
    bad.send_json(json!({"type": "hello", "api_key": "ac_live_wrong"}))
        .await;
    assert_eq!(bad.closed(5000).await, (1008, "Invalid token".to_string()));
    let mut junk = s.connect_bare().await;
    junk.send_json(json!({"type": "ack", "message_id": "x"}))
        .await;
    assert_eq!(
        junk.closed(5000).await,
        (1008, "HELLO frame required first".to_string())
    );
    // No frame: closed after 5 s of server clock (0.5 s at time scale 10).
    let mut silent = s.connect_bare().await;
    assert_eq!(
        silent.closed(5000).await,
        (1008, "HELLO frame required".to_string())
    );
}

#[tokio::test]
async fn ws_3_4_with_ack_a_message_stays_undelivered_and_is_pushed_again_with_delivery_id_until_acked()
 {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let mut ws = s.ear(&bob, "ack").await;
    let m = s.send(&alice, &bob, "hold me").await;
    let f = ws.expect("message.new", 5000).await;
    assert_eq!(f["payload"]["id"], m["id"]);
    assert_eq!(
        s.state(&bob).await["received"][0]["status"],
        "stored",
        "not acked: still stored"
    );
    drop(ws);
    s.wait_state(&bob, "socket gone", |st| {
        st["sockets"].as_array().unwrap().is_empty()
    })
    .await;
    let mut ws = s.connect_ok(&bob.key, Some("ack")).await;
    let again = ws.expect("message.new", 5000).await;
    assert_eq!(again["payload"]["id"], m["id"]);
    let did = again["payload"]["delivery_id"].as_str().unwrap();
    assert!(did.starts_with("del_") && did.len() == 36, "{did}");
    ws.ack(m["id"].as_str().unwrap()).await;
    let st = s
        .wait_state(&bob, "the ack", |st| {
            st["received"][0]["status"] == "delivered"
        })
        .await;
    assert!(st["received"][0]["delivered_at"].is_string());
    let acks = s.acks(&bob).await;
    assert_eq!(acks[0]["message_id"], m["id"]);
    assert!(acks[0]["at_ms"].as_u64().unwrap() > 0);
    drop(ws);
    s.wait_state(&bob, "socket gone", |st| {
        st["sockets"].as_array().unwrap().is_empty()
    })
    .await;
    let mut ws = s.connect_ok(&bob.key, Some("ack")).await;
    assert!(
        ws.collect(300)
            .await
            .iter()
            .all(|f| f["type"] != "message.new"),
        "acked: not pushed again"
    );
}

#[tokio::test]
async fn ws_3_4_connect_budget_closes_1013_with_retry_after_after_accepting_the_upgrade_and_logs_it()
 {
    let s = sim(1.0).await;
    let bob = s.agent("bob").await;
    s.connect_budget(&bob, 2).await;
    for _ in 0..2 {
        let _ws = s.connect_ok(&bob.key, Some("ack")).await;
    }
    let mut ws = s.connect(&bob.key, Some("ack")).await;
    let (code, reason) = ws.closed(5000).await;
    assert!((1..=60).contains(&retry_after(code, &reason)), "{reason}");
    let log = s.connects(&bob).await;
    assert_eq!(log.len(), 3);
    assert_eq!(log[2]["outcome"], "refused");
    assert_eq!(log[2]["reason"], reason.as_str());
    assert!(log[2]["at_ms"].as_u64() >= log[1]["at_ms"].as_u64());
}

/// The `retry_after` seconds of a connect-budget close, or a panic naming what came instead.
fn retry_after(code: u16, reason: &str) -> u64 {
    assert_eq!(code, 1013, "{reason}");
    reason
        .strip_prefix("rate_limited; retry_after=")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a connect-budget reason: {reason}"))
}

#[tokio::test]
async fn ws_3_4_hello_path_connect_budget_is_checked_after_auth_and_counts_refused_attempts() {
    let s = sim(1.0).await;
    let bob = s.agent("bob").await;
    s.connect_budget(&bob, 2).await;
    let mut first = s.hello(&bob.key, &["ack"]).await;
    first.expect("hello.ok", 5000).await;
    // An unknown key is refused as a key and names no agent: bob's budget is untouched.
    let mut stranger = s.hello("ac_live_wrong", &[]).await;
    assert_eq!(
        stranger.closed(5000).await,
        (1008, "Invalid token".to_string())
    );
    let mut second = s.hello(&bob.key, &["ack"]).await;
    second.expect("hello.ok", 5000).await;
    for _ in 0..2 {
        let mut over = s.hello(&bob.key, &["ack"]).await;
        let (code, reason) = over.closed(5000).await;
        assert!((1..=60).contains(&retry_after(code, &reason)), "{reason}");
    }
    let log = s.connects(&bob).await;
    let outcomes: Vec<(&str, &str)> = log
        .iter()
        .map(|c| (c["path"].as_str().unwrap(), c["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("hello", "accepted"),
            ("hello", "accepted"),
            ("hello", "refused"),
            ("hello", "refused")
        ],
        "refused attempts are logged (and counted in the minute)"
    );
}

#[tokio::test]
async fn ws_3_4_refused_and_rotated_keys_close_1008_invalid_token() {
    let s = sim(1.0).await;
    let bob = s.agent("bob").await;
    let mut ws = s.connect_ok(&bob.key, Some("ack")).await;
    let (st, _) = s
        .post(
            None,
            &format!("/_sim/agents/{}/refuse-key", bob.handle),
            json!({}),
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(ws.closed(5000).await, (1008, "Invalid token".to_string()));
    let mut again = s.connect(&bob.key, Some("ack")).await;
    assert_eq!(
        again.closed(5000).await,
        (1008, "Invalid token".to_string())
    );
    assert_eq!(s.get(Some(&bob.key), "/v1/agents/me").await.0, 401);
    let log = s.connects(&bob).await;
    assert_eq!(
        (log[1]["outcome"].as_str(), log[1]["reason"].as_str()),
        (Some("refused"), Some("Invalid token"))
    );
    s.post(
        None,
        &format!("/_sim/agents/{}/refuse-key", bob.handle),
        json!({"refuse": false}),
    )
    .await;
    assert_eq!(s.get(Some(&bob.key), "/v1/agents/me").await.0, 200);
    let (_, r) = s
        .post(
            None,
            &format!("/_sim/agents/{}/rotate-key", bob.handle),
            json!({}),
        )
        .await;
    let new_key = r["api_key"].as_str().unwrap();
    assert_ne!(new_key, bob.key);
    let mut old = s.connect(&bob.key, Some("ack")).await;
    assert_eq!(old.closed(5000).await.0, 1008);
    let _new = s.connect_ok(new_key, Some("ack")).await;
}

#[tokio::test]
async fn control_sockets_close_sends_the_chosen_code_and_reason() {
    let s = sim(1.0).await;
    let bob = s.agent("bob").await;
    let mut a = s.connect(&bob.key, Some("ack")).await;
    let mut b = s.connect(&bob.key, None).await;
    a.expect("hello.ok", 5000).await;
    s.wait_sockets(&bob, 2).await;
    let (_, v) = s
        .post(
            None,
            &format!("/_sim/agents/{}/sockets/close", bob.handle),
            json!({"code": 1013, "reason": "rate_limited; retry_after=7"}),
        )
        .await;
    assert_eq!(v["closed"], 2);
    for ws in [&mut a, &mut b] {
        assert_eq!(
            ws.closed(5000).await,
            (1013, "rate_limited; retry_after=7".to_string())
        );
    }
}

#[tokio::test]
async fn control_silence_keeps_tcp_open_but_sends_nothing_not_even_pongs() {
    let (s, alice, bob) = alice_and_bob(100.0).await;
    let mut ws = s.connect_ok(&bob.key, Some("ack,heartbeat")).await;
    ws.expect("heartbeat", 5000).await;
    let (_, v) = s
        .post(
            None,
            &format!("/_sim/agents/{}/sockets/silence", bob.handle),
            json!({}),
        )
        .await;
    assert_eq!(v["silenced"], 1);
    s.wait_state(&bob, "silenced", |st| st["sockets"][0]["silenced"] == true)
        .await;
    s.send(&alice, &bob, "into the void").await;
    ws.ws
        .send(Message::Ping(b"are you there".to_vec().into()))
        .await
        .unwrap();
    // 1.5 s real = 150 s of server clock: three heartbeat periods, and no traffic at all.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    loop {
        match tokio::time::timeout_at(deadline, ws.ws.next()).await {
            Err(_) => break,
            Ok(Some(Ok(Message::Text(t)))) => {
                let f: Value = serde_json::from_str(t.as_str()).unwrap();
                // Frames queued before the silence took effect may still arrive.
                assert_ne!(
                    f["type"], "message.new",
                    "a silenced socket pushes nothing: {f}"
                );
            }
            Ok(Some(Ok(Message::Pong(_)))) => panic!("a silenced socket answers no ping"),
            Ok(Some(Ok(Message::Ping(_)))) => panic!("a silenced socket sends no ping"),
            Ok(other) => panic!("silenced socket ended: {other:?}"),
        }
    }
    assert_eq!(s.state(&bob).await["received"][0]["status"], "stored");
}

/// The agent's send log (`GET /_sim/agents/{h}/sends`): every `message.new` written to a socket.
async fn sends(s: &sim_support::Sim, a: &sim_support::Agent) -> Vec<Value> {
    let (st, v) = s
        .get(None, &format!("/_sim/agents/{}/sends", a.handle))
        .await;
    assert_eq!(st, 200, "{v}");
    v["sends"].as_array().unwrap().clone()
}

async fn hold(s: &sim_support::Sim, a: &sim_support::Agent, on: bool) {
    let (st, v) = s
        .post(
            None,
            &format!("/_sim/agents/{}/sockets/hold", a.handle),
            json!({"hold": on}),
        )
        .await;
    assert_eq!((st, &v["held"]), (200, &json!(on)), "{v}");
}

#[tokio::test]
async fn control_hold_queues_frames_in_order_and_release_sends_them_back_to_back_with_send_and_ack_times()
 {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let mut ws = s.ear(&bob, "ack").await;
    hold(&s, &bob, true).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(s.send(&alice, &bob, &format!("held {i}")).await["id"].clone());
    }
    match ws.next(300).await {
        Got::Timeout => {}
        other => panic!("a held socket writes nothing from its queue: {other:?}"),
    }
    assert!(sends(&s, &bob).await.is_empty(), "nothing sent while held");
    hold(&s, &bob, false).await;
    for id in &ids {
        let f = ws.expect("message.new", 5000).await;
        assert_eq!(&f["payload"]["id"], id, "released in the order queued");
        ws.ack(id.as_str().unwrap()).await;
    }
    // The agents list counts sends and acks, so a caller can poll it cheaply.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, v) = s.get(None, "/_sim/agents").await;
        let me = v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["handle"] == bob.handle)
            .unwrap()
            .clone();
        if me["acks"] == 3 {
            assert_eq!(me["sends"], 3, "{me}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "acks: {me}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = sends(&s, &bob).await;
    let sent_ids: Vec<&Value> = sent.iter().map(|x| &x["message_id"]).collect();
    assert_eq!(sent_ids, ids.iter().collect::<Vec<_>>());
    let mono = |v: &Value| v["mono_us"].as_u64().unwrap();
    assert!(mono(&sent[0]) > 0 && sent.windows(2).all(|w| mono(&w[0]) <= mono(&w[1])));
    let acks = s.acks(&bob).await;
    for (send, ack) in sent.iter().zip(&acks) {
        assert_eq!(send["message_id"], ack["message_id"]);
        assert!(mono(ack) >= mono(send), "acked after sent: {send} {ack}");
    }
    assert!(mono(&s.connects(&bob).await[0]) <= mono(&sent[0]));
}

#[tokio::test]
async fn control_hold_also_holds_a_socket_that_connects_later_and_logs_its_backlog_when_sent() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    hold(&s, &bob, true).await;
    let m = s.send(&alice, &bob, "waiting").await;
    let mut ws = s.ear(&bob, "ack").await;
    match ws.next(300).await {
        Got::Timeout => {}
        other => panic!("the backlog waits for the release: {other:?}"),
    }
    hold(&s, &bob, false).await;
    let f = ws.expect("message.new", 5000).await;
    assert_eq!(f["payload"]["id"], m["id"]);
    assert!(
        f["payload"]["delivery_id"].is_string(),
        "the reconnect drain"
    );
    let sent = sends(&s, &bob).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["message_id"], m["id"]);
}

#[tokio::test]
async fn ws_3_4_heartbeat_frames_and_pings_come_every_45_s_and_heartbeats_only_with_the_capability()
{
    let s = sim(100.0).await; // 45 s -> 450 ms
    let bob = s.agent("bob").await;
    let mut with = s.connect(&bob.key, Some("ack,heartbeat")).await;
    let mut without = s.connect(&bob.key, Some("ack")).await;
    with.expect("hello.ok", 5000).await;
    without.expect("hello.ok", 5000).await;
    let hb = with.expect("heartbeat", 5000).await;
    assert!(hb["payload"]["at"].is_string());
    let mut pings = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    while let Ok(Some(Ok(m))) = tokio::time::timeout_at(deadline, without.ws.next()).await {
        match m {
            Message::Ping(_) => pings += 1,
            Message::Text(t) => panic!("no heartbeat without the capability: {t}"),
            _ => {}
        }
    }
    assert!(pings >= 2, "protocol pings keep coming: {pings}");
}

#[tokio::test]
async fn ws_3_3_a_new_invite_is_pushed_and_group_notices_are_not_except_the_deletion() {
    let (s, _alice, bob) = alice_and_bob(1.0).await;
    let mut ws = s.ear(&bob, "ack").await;
    let g = s
        .make_group(json!({"owner": "alice", "name": "crew", "invite": ["bob"]}))
        .await;
    let f = ws.expect("group.invite.received", 5000).await;
    assert_eq!(f["payload"]["id"], g["invites"][0]["invite_id"]);
    assert_eq!(f["payload"]["inviter_handle"], "alice");
    assert_eq!(f["payload"]["group_name"], "crew");
    let inv = g["invites"][0]["invite_id"].as_str().unwrap();
    s.post(
        Some(&bob.key),
        &format!("/v1/groups/invites/{inv}/accept"),
        json!({}),
    )
    .await;
    let gid = g["group_id"].as_str().unwrap();
    s.post(
        None,
        &format!("/_sim/groups/{gid}/notice"),
        json!({"event": "name_changed", "by": "alice"}),
    )
    .await;
    assert!(
        ws.collect(300).await.is_empty(),
        "a notice is not pushed live"
    );
    s.post(
        None,
        &format!("/_sim/groups/{gid}/delete"),
        json!({"by": "alice"}),
    )
    .await;
    let m = ws.expect("message.new", 5000).await;
    assert_eq!(m["payload"]["type"], "system");
    assert_eq!(m["payload"]["content"]["data"]["event"], "group_deleted");
    let d = ws.expect("group.deleted", 5000).await;
    assert_eq!(d["payload"]["group_id"], gid);
    assert_eq!(d["payload"]["deleted_by_handle"], "alice");
    let card = s.tray(&bob).await["conversations"][0].clone();
    assert_eq!(card["group"]["deleted"]["by"], "@alice");
    // The earlier notice arrives on reconnect (it was never pushed live).
    drop(ws);
    s.wait_state(&bob, "socket gone", |st| {
        st["sockets"].as_array().unwrap().is_empty()
    })
    .await;
    let mut ws = s.connect_ok(&bob.key, Some("ack")).await;
    let f = ws.expect("message.new", 5000).await;
    assert_eq!(f["payload"]["content"]["data"]["event"], "name_changed");
    assert!(f["payload"]["delivery_id"].is_string());
}

#[tokio::test]
async fn control_wake_pushes_a_reminder_to_every_socket_and_unanswered_only_to_rewake() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let (mut re, mut old) = s.rewake_and_plain(&bob).await;
    let m = s.send(&alice, &bob, "x").await;
    re.expect("message.new", 5000).await;
    old.expect("message.new", 5000).await;
    let v = s.control_wake(&bob, json!({"reason": "reminder"})).await;
    assert_eq!(v["sockets"], 2);
    for ws in [&mut re, &mut old] {
        let w = ws.expect("wake", 5000).await;
        assert_eq!(w["payload"]["reason"], "reminder");
        assert_eq!(w["payload"]["conversation_id"], m["conversation_id"]);
        assert_eq!(w["payload"]["anchor_message_id"], m["id"]);
    }
    let v = s
        .control_wake(&bob, json!({"reason": "unanswered", "step": 2}))
        .await;
    assert_eq!(v["sockets"], 1);
    let w = re.expect("wake", 5000).await;
    assert_eq!(
        w["payload"]["conversation_ids"],
        json!([m["conversation_id"]])
    );
    assert_eq!(w["payload"]["step"], 2);
    assert!(old.collect(300).await.is_empty());
}

#[tokio::test]
async fn ladder_5_rewakes_at_1_5_30_180_minutes_only_on_rewake_sockets_then_stops() {
    let (s, alice, bob) = alice_and_bob(2000.0).await; // 1 min = 30 ms, 5 min = 150 ms, 180 min = 5.4 s
    let (mut re, mut old) = s.rewake_and_plain(&bob).await;
    let m = s.send(&alice, &bob, "answer me").await;
    // Read the old socket at the same time (an unread socket stops answering pings).
    let old_frames = tokio::spawn(async move { old.collect(7000).await });
    let mut steps = Vec::new();
    for _ in 0..4 {
        let w = re.expect("wake", 10_000).await;
        assert_eq!(w["payload"]["reason"], "unanswered");
        assert_eq!(
            w["payload"]["conversation_ids"],
            json!([m["conversation_id"]])
        );
        steps.push(w["payload"]["step"].as_u64().unwrap());
    }
    assert_eq!(steps, [1, 2, 3, 4]);
    let st = s.state(&bob).await;
    let fired = st["ladder"]["fired"].as_array().unwrap();
    let gap = |a: usize, b: usize| {
        fired[b]["at_ms"].as_u64().unwrap() - fired[a]["at_ms"].as_u64().unwrap()
    };
    assert!(
        gap(2, 3) > gap(1, 2) && gap(1, 2) > gap(0, 1),
        "rungs spread out: {fired:?}"
    );
    assert!(
        re.collect(800).await.iter().all(|f| f["type"] != "wake"),
        "nothing after rung 4"
    );
    let old_frames = old_frames.await.unwrap();
    assert!(
        old_frames.iter().any(|f| f["type"] == "message.new"),
        "the old socket was live: {old_frames:?}"
    );
    assert!(
        old_frames.iter().all(|f| f["type"] != "wake"),
        "no unanswered wake without rewake"
    );
}

#[tokio::test]
async fn control_ladder_off_sends_no_unanswered_wake_and_on_again_resumes_it() {
    let (s, alice, bob) = alice_and_bob(2000.0).await; // 1 min = 30 ms
    let path = format!("/_sim/agents/{}/ladder", bob.handle);
    let (st, v) = s.post(None, &path, json!({"enabled": false})).await;
    assert_eq!((st, &v["ladder"]), (200, &json!(false)), "{v}");
    let (mut re, _old) = s.rewake_and_plain(&bob).await;
    s.send(&alice, &bob, "answer me").await;
    // 600 ms is 20 server minutes: rungs 1 and 2 would have fired.
    let frames = re.collect(600).await;
    assert!(
        frames.iter().all(|f| f["type"] != "wake"),
        "no rung with the ladder off: {frames:?}"
    );
    assert!(s.wakes(&bob).await.is_empty());
    s.post(None, &path, json!({"enabled": true})).await;
    let w = re.expect("wake", 10_000).await;
    assert_eq!(w["payload"]["reason"], "unanswered");
}

#[tokio::test]
async fn ladder_5_restarts_on_a_newer_message_and_never_runs_for_muted_or_answered_items() {
    let (s, alice, bob) = alice_and_bob(600.0).await; // rung 1 = 100 ms, 2 = 500 ms, 3 = 3 s
    let mut re = s.ear(&bob, "ack,rewake").await;
    let m = s.send(&alice, &bob, "one").await;
    let conv = m["conversation_id"].as_str().unwrap();
    assert_eq!(re.expect("wake", 5000).await["payload"]["step"], 1);
    assert_eq!(re.expect("wake", 5000).await["payload"]["step"], 2);
    s.send(&alice, &bob, "two").await;
    assert_eq!(
        re.expect("wake", 5000).await["payload"]["step"],
        1,
        "a newer message restarts at rung 1"
    );
    // Answered: the ladder stops.
    s.decide(
        &bob,
        conv,
        json!({"decision": "dismiss", "category": "other"}),
    )
    .await;
    assert!(re.collect(1000).await.iter().all(|f| f["type"] != "wake"));
    // Muted: a new message arms nothing.
    s.post(
        Some(&bob.key),
        "/v1/mutes",
        json!({"target_kind": "conversation", "target_id": conv}),
    )
    .await;
    s.send(&alice, &bob, "three").await;
    assert!(
        re.collect(1000).await.iter().all(|f| f["type"] != "wake"),
        "never for muted items"
    );
}

/// The next `wake` with reason `reminder`, skipping everything else.
async fn reminder(ws: &mut sim_support::Ws) -> Value {
    loop {
        let w = ws.expect("wake", 10_000).await;
        if w["payload"]["reason"] == "reminder" {
            return w;
        }
    }
}

#[tokio::test]
async fn defer_6_reminds_after_15_min_then_24_h_then_stops_and_a_reminder_starts_no_ladder() {
    let (s, alice, bob) = alice_and_bob(20_000.0).await; // 15 min = 45 ms, 24 h = 4.3 s, rung 4 (180 min) = 0.54 s
    let mut ws = s.ear(&bob, "ack,rewake").await;
    let m = s.send(&alice, &bob, "later").await;
    let conv = m["conversation_id"].as_str().unwrap();
    // Let the message's own ladder run out first (at this scale rungs may coincide; a missed
    // rung is sent once as the latest due, never as a burst).
    let mut last = 0;
    while last < 4 {
        let w = ws.expect("wake", 5000).await;
        assert_eq!(w["payload"]["reason"], "unanswered");
        let step = w["payload"]["step"].as_u64().unwrap();
        assert!(step > last, "rungs only move forward: {step} after {last}");
        last = step;
    }
    let defer =
        json!({"decision": "defer", "category": "goal_followup", "through_message_id": m["id"]});
    assert_eq!(s.decide(&bob, conv, defer.clone()).await.0, 201);
    let w = reminder(&mut ws).await;
    assert_eq!(w["payload"]["step"], 1);
    assert_eq!(w["payload"]["anchor_message_id"], m["id"]);
    assert_eq!(w["payload"]["conversation_id"], conv);
    let card = s.tray(&bob).await["conversations"][0].clone();
    assert_eq!(
        card["reminder"]["step"], 1,
        "the card is back with its reminder"
    );
    assert!(
        ws.collect(600).await.iter().all(|f| f["type"] != "wake"),
        "a reminder wakes once and starts no ladder"
    );
    assert_eq!(s.decide(&bob, conv, defer.clone()).await.0, 201);
    assert_eq!(s.tray(&bob).await["deferred"], 1);
    assert_eq!(reminder(&mut ws).await["payload"]["step"], 2);
    assert_eq!(s.decide(&bob, conv, defer.clone()).await.0, 201);
    let st = s.state(&bob).await;
    assert!(
        st["defers"][0]["due_in_ms"].is_null(),
        "the third defer stops the reminders"
    );
    assert_eq!(st["tray"]["deferred"], 1);
    // A newer message restarts it: the card is back, the next defer is +15 min again.
    s.send(&alice, &bob, "new").await;
    let t = s.tray(&bob).await;
    assert_eq!(t["deferred"], 0);
    let m2 = t["conversations"][0]["preview"]["message_id"].clone();
    s.decide(
        &bob,
        conv,
        json!({"decision": "defer", "category": "other", "through_message_id": m2}),
    )
    .await;
    assert_eq!(reminder(&mut ws).await["payload"]["step"], 1);
}

#[tokio::test]
async fn defer_6_a_reminder_on_a_muted_conversation_wakes_nothing_and_the_card_comes_back_muted() {
    let (s, alice, bob) = alice_and_bob(20_000.0).await;
    let mut ws = s.connect_ok(&bob.key, Some("ack")).await;
    let m = s.send(&alice, &bob, "later").await;
    let conv = m["conversation_id"].as_str().unwrap();
    s.post(
        Some(&bob.key),
        "/v1/mutes",
        json!({"target_kind": "conversation", "target_id": conv}),
    )
    .await;
    s.decide(
        &bob,
        conv,
        json!({"decision": "defer", "category": "other"}),
    )
    .await;
    let st = s
        .wait_state(&bob, "the reminder to come due", |st| {
            !st["tray"]["conversations"].as_array().unwrap().is_empty()
        })
        .await;
    assert_eq!(st["tray"]["conversations"][0]["muted"], true);
    assert!(ws.collect(300).await.iter().all(|f| f["type"] != "wake"));
}

/// The official Python SDK (`agentchatme` 1.1.1, `RealtimeClient`), a client nobody on this team
/// wrote, connects over the HELLO path, receives a `message.new` and acks it.
#[tokio::test]
async fn python_sdk_realtime_client_receives_a_message_and_acks_it() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let script = r#"
import asyncio, json, os, sys
from agentchatme import RealtimeClient

async def main():
    got = asyncio.Event()
    seen = []
    rt = RealtimeClient(api_key=os.environ["KEY"], base_url=os.environ["WS_BASE"], reconnect=False)
    def on_msg(frame):
        seen.append(frame["payload"]["id"])
        got.set()
    rt.on("message.new", on_msg)
    await rt.connect()
    print("CONNECTED", flush=True)
    await asyncio.wait_for(got.wait(), 20)
    await asyncio.sleep(0.5)  # let the ack frame leave before closing
    await rt.disconnect()
    print(json.dumps({"received": seen}), flush=True)

asyncio.run(main())
"#;
    let Some(child) = s.python_child(script, &[("KEY", &bob.key)]) else {
        return;
    };
    let st = s
        .wait_state(&bob, "the SDK's socket", |st| {
            st["sockets"].as_array().unwrap().len() == 1
        })
        .await;
    assert_eq!(st["sockets"][0]["path"], "hello");
    assert_eq!(st["sockets"][0]["capabilities"], json!(["ack"]));
    // Give the SDK its hello.ok before the push (it drops frames that come before it).
    let m = s.send(&alice, &bob, "hello from the sim").await;
    let last = crate::sim_support::py_result(child).await;
    assert_eq!(last["received"][0], m["id"]);
    let acks = s.acks(&bob).await;
    assert!(
        acks.iter().any(|a| a["message_id"] == m["id"]),
        "the SDK acked it: {acks:?}"
    );
    assert_eq!(s.state(&bob).await["received"][0]["status"], "delivered");
}

#[tokio::test]
async fn ladder_5_a_rung_with_no_rewake_socket_is_not_lost_the_latest_due_is_sent_once_on_connect()
{
    let (s, alice, bob) = alice_and_bob(600.0).await; // rung 1 = 100 ms, rung 2 = 500 ms, rung 3 = 3 s
    let m = s.send(&alice, &bob, "anyone?").await;
    // Server time passing is the behaviour under test: let rungs 1 and 2 come due with no socket.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        s.state(&bob).await["ladder"]["fired"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let mut ws = s.connect_ok(&bob.key, Some("ack,rewake")).await;
    let w = ws.expect("wake", 5000).await;
    assert_eq!(
        w["payload"]["step"], 2,
        "the latest rung due, not a burst of 1 and 2"
    );
    assert_eq!(
        w["payload"]["conversation_ids"],
        json!([m["conversation_id"]])
    );
    let next = ws.expect("wake", 10_000).await;
    assert_eq!(next["payload"]["step"], 3);
}

#[tokio::test]
async fn ladder_5_a_card_with_only_notices_unread_keeps_no_ladder_going() {
    // Contract 5: system notices never start a ladder on their own; once the message that armed
    // it is answered, a group card holding only a notice must not keep the rungs firing.
    let (s, alice, bob) = alice_and_bob(30.0).await; // rung 1 = 2 s
    let mut re = s.connect_ok(&bob.key, Some("ack,rewake")).await;
    let gid = s.group_with(&alice, "crew", &[&bob]).await;
    s.notice(&gid, "name_changed", &alice).await;
    let m = s.send(&alice, &bob, "one").await;
    let conv = m["conversation_id"].as_str().unwrap();
    let (st, _) = s
        .decide(
            &bob,
            conv,
            json!({"decision": "dismiss", "category": "other"}),
        )
        .await;
    assert_eq!(st, 201);
    let tray = s.tray(&bob).await;
    assert_eq!(tray["conversations"].as_array().unwrap().len(), 1);
    assert!(tray["conversations"][0]["preview"].is_null(), "{tray}");
    let st = s
        .wait_state(&bob, "the ladder to disarm", |st| {
            st["ladder"]["armed"] == false
        })
        .await;
    assert_eq!(
        st["ladder"]["fired"],
        json!([]),
        "no rung fired for a notice"
    );
    // Past rung 1's time (2 s), still reading the socket (answering its pings): no wake.
    assert!(re.collect(2500).await.iter().all(|f| f["type"] != "wake"));
}

#[tokio::test]
async fn defer_6_a_notice_neither_brings_a_deferred_card_back_nor_wakes_when_the_reminder_is_due() {
    // Contract 3.2/6: a system notice is not a message newer than the anchor, and a reminder that
    // comes due with only notices unread fires quietly.
    let (s, alice, bob) = alice_and_bob(200.0).await; // 15 min = 4.5 s: room for the steps before it comes due
    let gid = s.group_with(&alice, "crew", &[&bob]).await;
    let m = s.send_conv(&alice, &gid, "later").await;
    let defer = json!({"decision": "defer", "category": "other", "through_message_id": m["id"]});
    assert_eq!(s.decide(&bob, &gid, defer).await.0, 201);
    s.notice(&gid, "name_changed", &alice).await;
    let t = s.tray(&bob).await;
    assert_eq!(t["deferred"], 1, "{t}");
    assert_eq!(
        t["conversations"],
        json!([]),
        "a notice does not bring it back"
    );
    // Read the message (and that notice); a later notice is then all that is unread there.
    let (st, _) = s
        .post(
            Some(&bob.key),
            &format!("/v1/conversations/{gid}/read"),
            json!({"through_message_id": m["id"]}),
        )
        .await;
    assert_eq!(st, 200);
    s.notice(&gid, "description_changed", &alice).await;
    let st = s
        .wait_state(&bob, "the reminder to come due", |st| {
            st["defers"][0]["reminder"]["step"] == 1
        })
        .await;
    let card = &st["tray"]["conversations"][0];
    assert!(card["preview"].is_null(), "{card}");
    assert_eq!(
        card["reminder"]["step"], 1,
        "the card is back with its reminder"
    );
    // The wake log records every reminder the server sends, socket or not.
    assert_eq!(s.wakes(&bob).await, Vec::<Value>::new(), "it fired quietly");
}

#[tokio::test]
async fn invite_3_3_an_invite_from_a_muted_agent_is_listed_but_never_wakes() {
    // alice (muted by bob) and carol own the groups; the control API names them by handle.
    let (s, _alice, bob, _carol) = alice_bob_and_carol(1.0).await;
    let (st, _) = s
        .post(
            Some(&bob.key),
            "/v1/mutes",
            json!({"target_kind": "agent", "target_handle": "alice"}),
        )
        .await;
    assert_eq!(st, 201);
    let mut ws = s.ear(&bob, "ack,rewake").await;
    let muted = s
        .make_group(json!({"owner": "alice", "name": "muted-crew", "invite": ["bob"]}))
        .await;
    let open = s
        .make_group(json!({"owner": "carol", "name": "open-crew", "invite": ["bob"]}))
        .await;
    // Frames arrive in order: the first invite frame must be carol's, alice's never came.
    let f = ws.expect("group.invite.received", 5000).await;
    assert_eq!(f["payload"]["id"], open["invites"][0]["invite_id"], "{f}");
    let listed: Vec<Value> = s.tray(&bob).await["invites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["invite_id"].clone())
        .collect();
    assert!(
        listed.contains(&muted["invites"][0]["invite_id"]),
        "still listed"
    );
}

#[tokio::test]
async fn ladder_5_rungs_count_from_the_newest_item_still_unanswered() {
    // Contract 5: rung k comes k minutes after "the newest message or invite on the unanswered
    // items". When the newest one is answered, the ladder runs on from the older one still open.
    let (s, alice, bob, carol) = alice_bob_and_carol(300.0).await; // 1 min = 0.2 s, 5 min = 1 s, 30 min = 6 s
    s.send(&alice, &bob, "older, left open").await;
    // Let server time pass (no socket of bob's can take a rung yet): the open message is then
    // between 5 and 30 server minutes old.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let b = s.send(&carol, &bob, "newer, answered").await;
    let conv_b = b["conversation_id"].as_str().unwrap();
    let (st, _) = s
        .decide(
            &bob,
            conv_b,
            json!({"decision": "dismiss", "category": "other"}),
        )
        .await;
    assert_eq!(st, 201);
    let mut re = s.connect_ok(&bob.key, Some("ack,rewake")).await;
    let w = re.expect("wake", 5000).await;
    assert_eq!(w["payload"]["reason"], "unanswered");
    assert_eq!(
        w["payload"]["step"], 2,
        "rung 2 is the latest due, counted from the open message: {w}"
    );
}

#[tokio::test]
async fn ws_3_4_a_refused_key_counts_against_the_budget_on_the_header_path_only() {
    // Contract 3.4: on the Bearer path the budget is checked before the key is looked up (every
    // attempt counts); on the HELLO path right after authentication (a refused key never gets
    // that far).
    let (s, alice, bob) = alice_and_bob(1.0).await;
    for a in [&alice, &bob] {
        s.connect_budget(a, 1).await;
        let (st, _) = s
            .post(
                None,
                &format!("/_sim/agents/{}/refuse-key", a.handle),
                json!({}),
            )
            .await;
        assert_eq!(st, 200);
    }
    let mut header = s.connect(&alice.key, Some("ack")).await;
    assert_eq!(
        header.closed(5000).await,
        (1008, "Invalid token".to_string())
    );
    let mut hello = s.hello(&bob.key, &["ack"]).await;
    assert_eq!(
        hello.closed(5000).await,
        (1008, "Invalid token".to_string())
    );
    for a in [&alice, &bob] {
        let (st, _) = s
            .post(
                None,
                &format!("/_sim/agents/{}/refuse-key", a.handle),
                json!({"refuse": false}),
            )
            .await;
        assert_eq!(st, 200);
    }
    let mut header = s.connect(&alice.key, Some("ack")).await;
    let (code, reason) = header.closed(5000).await;
    assert!(
        retry_after(code, &reason) >= 1,
        "the header path counted the refused attempt"
    );
    let mut hello = s.hello(&bob.key, &["ack"]).await;
    hello.expect("hello.ok", 5000).await;
}

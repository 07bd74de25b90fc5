//! Contract section 8, "Against a server": the six checks, run against the sim with a minimal
//! client of the tests' own (a tungstenite socket and plain HTTP calls), over real loopback.

use std::time::{Duration, Instant};

use crate::sim_support::{Ws, alice_and_bob, cards, sim};
use serde_json::{Value, json};

#[tokio::test]
async fn check_1_a_message_wakes_the_agent_the_card_is_on_the_tray_and_reading_marks_nothing_read()
{
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let mut ws = s.ear(&bob, "ack,heartbeat,rewake").await;
    let m = s.send(&alice, &bob, "are you there?").await;
    let f = ws.expect("message.new", 5000).await;
    ws.ack(f["payload"]["id"].as_str().unwrap()).await;
    let tray = s.tray(&bob).await;
    let c = cards(&tray);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["preview"]["message_id"], m["id"]);
    let st = s
        .wait_state(&bob, "the ack", |st| {
            st["received"][0]["status"] == "delivered"
        })
        .await;
    assert!(
        st["received"][0]["read_at"].is_null(),
        "reading the tray marked nothing read"
    );
    assert_eq!(cards(&s.tray(&bob).await).len(), 1);
}

#[tokio::test]
async fn check_2_dismiss_and_defer_are_recorded_with_the_anchor_and_a_deferred_card_comes_back() {
    let s = sim(20_000.0).await; // the 15 min reminder comes after 45 ms
    let (alice, carol, bob) = (
        s.agent("alice").await,
        s.agent("carol").await,
        s.agent("bob").await,
    );
    let mut ws = s.ear(&bob, "ack").await;
    s.send(&alice, &bob, "thanks, all done").await;
    s.send(&carol, &bob, "can we talk next week?").await;
    let tray = s.tray(&bob).await;
    for card in cards(&tray) {
        let anchor = card["preview"]["message_id"].clone();
        let conv = card["conversation_id"].as_str().unwrap();
        let decision = if card["counterparty"]["handle"] == "@alice" {
            "dismiss"
        } else {
            "defer"
        };
        let (st, v) = s
            .decide(
                &bob,
                conv,
                json!({"decision": decision, "category": "other", "through_message_id": anchor}),
            )
            .await;
        assert_eq!(st, 201);
        assert_eq!(v["decision"]["through_message_id"], anchor);
    }
    let verdicts = s.state(&bob).await["verdicts"].as_array().unwrap().clone();
    assert_eq!(verdicts.len(), 2);
    // The dismissed card is gone for good; the deferred one comes back with its reminder.
    let w = loop {
        let w = ws.expect("wake", 5000).await;
        if w["payload"]["reason"] == "reminder" {
            break w;
        }
    };
    let tray = s.tray(&bob).await;
    let c = cards(&tray);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["counterparty"]["handle"], "@carol");
    assert_eq!(c[0]["conversation_id"], w["payload"]["conversation_id"]);
    assert_eq!(c[0]["reminder"]["step"], 1);
}

#[tokio::test]
async fn check_3_a_reply_is_recorded_only_after_its_send_through_the_newest_message_read() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    s.send(&alice, &bob, "question one?").await;
    let newest = s.send(&alice, &bob, "and two?").await;
    let card = cards(&s.tray(&bob).await)[0].clone();
    let conv = card["conversation_id"].as_str().unwrap().to_string();
    let (_, msgs) = s
        .get(
            Some(&bob.key),
            &format!("/v1/conversations/{conv}/messages"),
        )
        .await;
    let read_newest = msgs.as_array().unwrap().last().unwrap()["id"].clone();
    assert_eq!(read_newest, newest["id"]);
    let reply = s.send_conv(&bob, &conv, "answers: yes and yes").await;
    assert_eq!(
        cards(&s.tray(&bob).await).len(),
        1,
        "a send marks nothing read"
    );
    let (st, v) = s
        .decide(&bob, &conv, json!({"decision": "reply", "category": "open_request", "through_message_id": read_newest}))
        .await;
    assert_eq!(st, 201);
    let state = s.state(&bob).await;
    let sent_at =
        humantime::parse_rfc3339(state["sent"][0]["created_at"].as_str().unwrap()).unwrap();
    let verdict_at = humantime::parse_rfc3339(v["decision"]["at"].as_str().unwrap()).unwrap();
    assert_eq!(state["sent"][0]["id"], reply["id"]);
    assert!(
        sent_at <= verdict_at,
        "the reply verdict comes after the send"
    );
    assert_eq!(state["verdicts"][0]["through_message_id"], newest["id"]);
    assert!(cards(&s.tray(&bob).await).is_empty());
}

#[tokio::test]
async fn check_4_an_unanswered_card_is_rewoken_at_about_one_minute_on_a_rewake_socket() {
    let (s, alice, bob) = alice_and_bob(60.0).await; // 1 min of server clock = 1 s
    let mut ws = s.ear(&bob, "ack,heartbeat,rewake").await;
    let m = s.send(&alice, &bob, "ping").await;
    let t0 = Instant::now();
    let f = ws.expect("message.new", 5000).await;
    ws.ack(f["payload"]["id"].as_str().unwrap()).await;
    let w = ws.expect("wake", 10_000).await;
    let after = t0.elapsed();
    assert_eq!(w["payload"]["reason"], "unanswered");
    assert_eq!(w["payload"]["step"], 1);
    assert_eq!(
        w["payload"]["conversation_ids"],
        json!([m["conversation_id"]])
    );
    assert!(
        after >= Duration::from_millis(900),
        "not before about one minute of server clock: {after:?}"
    );
    // The program reads the tray again on it: the card is still there, unanswered.
    let c = cards(&s.tray(&bob).await);
    assert_eq!(c[0]["conversation_id"], m["conversation_id"]);
    assert!(c[0]["your_last_decision"].is_null());
}

#[tokio::test]
async fn check_5_an_invite_shows_and_wakes_dismiss_takes_it_off_and_stops_wakes_accept_and_decline_still_work()
 {
    let (s, _alice, bob) = alice_and_bob(2000.0).await;
    let mut ws = s.ear(&bob, "ack,heartbeat,rewake").await;
    let g1 = s
        .make_group(json!({"owner": "alice", "name": "one", "invite": ["bob"]}))
        .await;
    let g2 = s
        .make_group(json!({"owner": "alice", "name": "two", "invite": ["bob"]}))
        .await;
    let (i1, i2) = (
        g1["invites"][0]["invite_id"].clone(),
        g2["invites"][0]["invite_id"].clone(),
    );
    assert_eq!(
        ws.expect("group.invite.received", 5000).await["payload"]["id"],
        i1
    );
    assert_eq!(
        ws.expect("group.invite.received", 5000).await["payload"]["id"],
        i2
    );
    let tray = s.tray(&bob).await;
    assert_eq!(tray["invites"].as_array().unwrap().len(), 2);
    let w = ws.expect("wake", 5000).await;
    assert_eq!(w["payload"]["reason"], "unanswered");
    assert_eq!(
        w["payload"]["conversation_ids"],
        json!([]),
        "only invites wait"
    );
    for id in [&i1, &i2] {
        let (st, _) = s
            .post(
                Some(&bob.key),
                &format!("/v1/groups/invites/{}/dismiss", id.as_str().unwrap()),
                json!({}),
            )
            .await;
        assert_eq!(st, 200);
    }
    assert!(s.tray(&bob).await["invites"].as_array().unwrap().is_empty());
    // Wakes the server sent before the dismissals landed may still be in flight; count the
    // server's own wake log from here on.
    let wakes = |v: &Value| v["wakes"].as_array().unwrap().len();
    let before = wakes(
        &s.get(None, &format!("/_sim/agents/{}/wakes", bob.handle))
            .await
            .1,
    );
    let frames = ws.collect(1500).await;
    let after = wakes(
        &s.get(None, &format!("/_sim/agents/{}/wakes", bob.handle))
            .await
            .1,
    );
    assert_eq!(before, after, "dismissed invites wake nothing: {frames:?}");
    let (st, g) = s
        .post(
            Some(&bob.key),
            &format!("/v1/groups/invites/{}/accept", i1.as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!((st, g["name"].as_str()), (200, Some("one")));
    let (st, _) = s
        .delete(
            Some(&bob.key),
            &format!("/v1/groups/invites/{}", i2.as_str().unwrap()),
        )
        .await;
    assert_eq!(st, 200);
}

#[tokio::test]
async fn check_6_a_socket_without_the_new_capabilities_sees_no_heartbeat_and_no_unanswered_wake() {
    let (s, alice, bob) = alice_and_bob(2000.0).await; // 45 s heartbeat = 22 ms (pings floored at 50 ms), rungs 1-3 within 1 s
    let legacy = s.connect(&bob.key, None).await;
    let mut ack_only = s.connect(&bob.key, Some("ack")).await;
    let mut modern = s.connect(&bob.key, Some("ack,heartbeat,rewake")).await;
    ack_only.expect("hello.ok", 5000).await;
    modern.expect("hello.ok", 5000).await;
    s.wait_state(&bob, "three sockets", |st| {
        st["sockets"].as_array().unwrap().len() == 3
    })
    .await;
    s.send(&alice, &bob, "hello").await;
    let spawn = |mut ws: Ws| tokio::spawn(async move { ws.collect(1500).await });
    let (a, b, c) = (spawn(legacy), spawn(ack_only), spawn(modern));
    let (legacy_f, ack_f, modern_f) = (a.await.unwrap(), b.await.unwrap(), c.await.unwrap());
    let types = |fs: &Vec<Value>| {
        fs.iter()
            .map(|f| f["type"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    for (name, fs) in [("no capabilities", &legacy_f), ("ack only", &ack_f)] {
        assert!(
            fs.iter().any(|f| f["type"] == "message.new"),
            "{name}: the message came: {:?}",
            types(fs)
        );
        assert!(
            fs.iter().all(|f| f["type"] != "heartbeat"),
            "{name}: no heartbeat: {:?}",
            types(fs)
        );
        assert!(
            fs.iter().all(|f| f["type"] != "wake"),
            "{name}: no unanswered wake: {:?}",
            types(fs)
        );
    }
    assert!(
        modern_f.iter().any(|f| f["type"] == "heartbeat"),
        "the same server does send heartbeats"
    );
    assert!(
        modern_f
            .iter()
            .any(|f| f["type"] == "wake" && f["payload"]["reason"] == "unanswered")
    );
}

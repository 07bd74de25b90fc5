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

/// Sign-up and key recovery (`POST /v1/register`, `/v1/register/verify`, `/v1/agents/recover`,
/// `/v1/agents/recover/verify`) driven by the official Python SDK (`agentchatme` 1.1.1:
/// `register`, `verify`, `recover`, `recover_verify`), a client nobody on this team wrote, so the
/// sim's shapes and errors are checked against what the SDK sends and reads. The codes come from
/// `GET /_sim/outbox`.
#[tokio::test]
async fn python_sdk_signs_up_and_recovers_a_key_against_the_sim_with_its_errors() {
    let s = sim(1.0).await;
    let script = r#"
import json, os, urllib.request
from agentchatme import AgentChatClient as C
from agentchatme import errors as E
base = os.environ["BASE"]
out = {}
def last_code(to, purpose):
    box = json.load(urllib.request.urlopen(base + "/_sim/outbox"))
    return [m for m in box if m["to"] == to and m["purpose"] == purpose][-1]["code"]
def err(f):
    try:
        f()
    except E.AgentChatError as e:
        return {"cls": type(e).__name__, "code": e.code, "status": e.status,
                "limit": getattr(e, "limit", None), "handles": getattr(e, "handles", None),
                "retry_after_ms": getattr(e, "retry_after_ms", None), "details": dict(e.details or {})}
    return None
p = C.register(email="a@example.com", handle="newbie", base_url=base)
out["register"] = sorted(p)
out["wrong_code"] = err(lambda: C.verify(p["pending_id"], "000000" if last_code("a@example.com", "register") != "000000" else "111111", base_url=base))
agent, key, client = C.verify(p["pending_id"], last_code("a@example.com", "register"), base_url=base)
out["agent_handle"] = agent["handle"]
out["me"] = client.get_me()["handle"] if hasattr(client, "get_me") else None
out["reused"] = err(lambda: C.verify(p["pending_id"], last_code("a@example.com", "register"), base_url=base))
out["taken"] = err(lambda: C.register(email="b@example.com", handle="newbie", base_url=base))
out["bad_handle"] = err(lambda: C.register(email="b@example.com", handle="-no", base_url=base))
r = C.recover("a@example.com", handle="newbie", base_url=base)
out["recover"] = sorted(r)
h, key2, _ = C.recover_verify(r["pending_id"], last_code("a@example.com", "recover"), base_url=base)
out["recovered"] = [h, key2 != key]
masked = C.recover("nobody@example.com", handle="ghost", base_url=base)
out["masked"] = sorted(masked)
for h2 in ["second", "third"]:
    p2 = C.register(email="a@example.com", handle=h2, base_url=base)
    C.verify(p2["pending_id"], last_code("a@example.com", "register"), base_url=base)
out["limit"] = err(lambda: C.register(email="a@example.com", handle="fourth", base_url=base))
r2 = C.recover("a@example.com", base_url=base)
out["handle_required"] = err(lambda: C.recover_verify(r2["pending_id"], last_code("a@example.com", "recover"), base_url=base))
out["rate"] = err(lambda: C.recover("a@example.com", handle="newbie", base_url=base))
out["keys"] = [key, key2]
print(json.dumps(out))
"#;
    let Some(v) = s.python(script, &[]).await else {
        return;
    };
    assert_eq!(v["register"], json!(["message", "pending_id"]));
    assert_eq!(v["wrong_code"]["code"], "INVALID_CODE");
    assert_eq!(v["wrong_code"]["status"], 400);
    assert_eq!(v["wrong_code"]["details"]["attempts_left"], 4);
    assert_eq!(v["agent_handle"], "newbie");
    assert_eq!(v["reused"]["code"], "CODE_EXPIRED", "a code works once");
    assert_eq!(v["taken"]["code"], "HANDLE_TAKEN");
    assert_eq!(v["taken"]["status"], 409);
    assert_eq!(v["bad_handle"]["code"], "INVALID_HANDLE");
    assert_eq!(v["recover"], json!(["message", "pending_id"]));
    assert_eq!(v["recovered"], json!(["newbie", true]));
    assert_eq!(
        v["masked"],
        json!(["message", "pending_id"]),
        "no enumeration"
    );
    assert_eq!(v["limit"]["cls"], "EmailLimitReachedError");
    assert_eq!(v["limit"]["limit"], 3);
    assert_eq!(v["handle_required"]["cls"], "HandleRequiredError");
    assert_eq!(
        v["handle_required"]["handles"],
        json!(["newbie", "second", "third"])
    );
    assert_eq!(v["rate"]["cls"], "RateLimitedError");
    assert!(v["rate"]["retry_after_ms"].as_u64().unwrap() > 0);
    // The first key was retired by the recovery; the second one works.
    let (old, new) = (
        v["keys"][0].as_str().unwrap(),
        v["keys"][1].as_str().unwrap(),
    );
    assert_eq!(s.get(Some(old), "/v1/agents/me").await.0, 401);
    let (st, me) = s.get(Some(new), "/v1/agents/me").await;
    assert_eq!((st, me["handle"].as_str()), (200, Some("newbie")));
    // The masked recovery emailed nothing.
    let (_, outbox) = s.get(None, "/_sim/outbox").await;
    let outbox = outbox.as_array().unwrap();
    assert!(outbox.iter().all(|m| m["to"] != "nobody@example.com"));
    assert!(
        outbox
            .iter()
            .all(|m| m["code"].as_str().unwrap().len() == 6)
    );
}

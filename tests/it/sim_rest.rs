//! The sim's REST hands over real HTTP: the tray (contract 3.1), verdicts (3.2), invites (3.3),
//! texts (3.6), messages, errors, and the hosted MCP tools.

use std::time::{Duration, Instant};

use crate::common;
use crate::sim_support::{self, alice_and_bob, alice_bob_and_carol, sim};
use reqwest::Method;
use serde_json::{Value, json};

const CARD_FIELDS: [&str; 20] = [
    "conversation_id",
    "type",
    "counterparty",
    "relationship",
    "you_owe_reply",
    "mentioned_you",
    "unread",
    "oldest_unread_at",
    "newest_unread_at",
    "last_sender",
    "last_message_id",
    "last_message_at",
    "your_last_message_at",
    "pace",
    "preview",
    "your_last_decision",
    "muted",
    "reminder",
    "conversation_id",
    "type",
];

#[tokio::test]
async fn tray_3_1_lists_every_card_field_newest_first_and_reading_marks_nothing() {
    let (s, alice, bob, carol) = alice_bob_and_carol(1.0).await;
    let m1 = s.send(&alice, &bob, "hello @bob, a question?").await;
    let m2 = s.send(&carol, &bob, "second").await;
    let t = s.tray(&bob).await;
    assert_eq!(t["version"], 1);
    assert_eq!(t["you"], "@bob");
    assert_eq!(t["categories"].as_array().unwrap().len(), 9);
    assert!(
        t["question"]
            .as_str()
            .unwrap()
            .contains("reply, dismiss, or defer")
    );
    let cards = t["conversations"].as_array().unwrap();
    assert_eq!(cards.len(), 2);
    assert_eq!(cards[0]["preview"]["message_id"], m2["id"], "newest first");
    for f in CARD_FIELDS {
        assert!(cards[1].get(f).is_some(), "card lacks {f}: {}", cards[1]);
    }
    let c = &cards[1];
    assert_eq!(c["type"], "direct");
    assert_eq!(c["counterparty"]["handle"], "@alice");
    assert_eq!(c["relationship"], "first_contact");
    assert_eq!(c["you_owe_reply"], true);
    assert_eq!(c["mentioned_you"], true);
    assert_eq!(c["unread"], 1);
    assert_eq!(c["last_sender"], "@alice");
    assert_eq!(c["last_message_id"], m1["id"]);
    assert_eq!(c["preview"]["text"], "hello @bob, a question?");
    assert_eq!(c["pace"]["last_60s"], 1);
    assert_eq!(c["muted"], false);
    assert!(c["your_last_decision"].is_null() && c["reminder"].is_null());
    assert_eq!(t["deferred"], 0);
    assert_eq!(t["truncated"], false);
    assert!(t["waited_ms"].is_null());
    // Reading marked nothing: read it again and ask the server.
    assert_eq!(s.cards(&bob).await.len(), 2);
    let st = s.state(&bob).await;
    for m in st["received"].as_array().unwrap() {
        assert_eq!(m["status"], "stored", "{m}");
    }
}

#[tokio::test]
async fn tray_3_1_limit_defaults_caps_and_truncates() {
    let s = sim(1.0).await;
    let bob = s.agent("bob").await;
    for i in 0..3 {
        let a = s.agent(&format!("peer{i}")).await;
        s.send(&a, &bob, "hi").await;
    }
    let (_, t) = s.get(Some(&bob.key), "/v1/inbox?limit=2").await;
    assert_eq!(t["conversations"].as_array().unwrap().len(), 2);
    assert_eq!(t["truncated"], true);
    let (_, t) = s.get(Some(&bob.key), "/v1/inbox?limit=500").await;
    assert_eq!(t["conversations"].as_array().unwrap().len(), 3);
    assert_eq!(t["truncated"], false);
    let (st, e) = s.get(Some(&bob.key), "/v1/inbox?limit=0").await;
    assert_eq!((st, e["code"].as_str()), (400, Some("VALIDATION_ERROR")));
    let (st, _) = s.get(Some(&bob.key), "/v1/inbox?wait_ms=50001").await;
    assert_eq!(st, 400);
}

#[tokio::test]
async fn tray_3_1_muted_cards_stay_on_the_tray_flagged() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let m = s.send(&alice, &bob, "hi").await;
    let conv = m["conversation_id"].as_str().unwrap();
    let (st, _) = s
        .post(
            Some(&bob.key),
            "/v1/mutes",
            json!({"target_kind": "conversation", "target_id": conv}),
        )
        .await;
    assert_eq!(st, 201);
    assert_eq!(s.tray(&bob).await["conversations"][0]["muted"], true);
    let (st, _) = s
        .delete(Some(&bob.key), &format!("/v1/mutes/conversation/{conv}"))
        .await;
    assert_eq!(st, 200);
    assert_eq!(s.tray(&bob).await["conversations"][0]["muted"], false);
    s.post(
        Some(&bob.key),
        "/v1/mutes",
        json!({"target_kind": "agent", "target_handle": "@alice"}),
    )
    .await;
    assert_eq!(
        s.tray(&bob).await["conversations"][0]["muted"],
        true,
        "muting the preview's sender mutes the card"
    );
}

#[tokio::test]
async fn verdict_3_2_dismiss_reads_through_the_anchor_and_newer_messages_stay_unread() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let m1 = s.send(&alice, &bob, "one").await;
    let conv = m1["conversation_id"].as_str().unwrap().to_string();
    let m2 = s.send(&alice, &bob, "two").await;
    let (st, v) = s
        .decide(
            &bob,
            &conv,
            json!({"decision": "dismiss", "category": "closing", "through_message_id": m1["id"]}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["decision"]["decision"], "dismiss");
    assert_eq!(v["decision"]["through_message_id"], m1["id"]);
    let t = s.tray(&bob).await;
    let card = &t["conversations"][0];
    assert_eq!(card["unread"], 1);
    assert_eq!(card["preview"]["message_id"], m2["id"]);
    assert_eq!(card["your_last_decision"]["decision"], "dismiss");
    let (st, _) = s
        .decide(&bob, &conv, json!({"decision": "reply", "category": "open_request", "through_message_id": m2["id"]}))
        .await;
    assert_eq!(st, 201);
    assert!(s.cards(&bob).await.is_empty());
    let state = s.state(&bob).await;
    assert!(
        state["received"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["status"] == "read")
    );
    assert_eq!(state["verdicts"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn verdict_3_2_a_foreign_anchor_is_404_message_not_found_and_records_nothing_even_for_defer()
{
    let (s, alice, bob, carol) = alice_bob_and_carol(1.0).await;
    let m1 = s.send(&alice, &bob, "one").await;
    let other = s.send(&carol, &bob, "elsewhere").await;
    let conv = m1["conversation_id"].as_str().unwrap();
    for decision in ["reply", "dismiss", "defer"] {
        let (st, e) = s
            .decide(&bob, conv, json!({"decision": decision, "category": "other", "through_message_id": other["id"]}))
            .await;
        assert_eq!(st, 404);
        assert_eq!(e["code"], "MESSAGE_NOT_FOUND");
        assert_eq!(
            e["message"],
            "through_message_id is not a message of this conversation"
        );
    }
    let (st, e) = s
        .read(&bob, conv, json!({"through_message_id": "msg_nope"}))
        .await;
    assert_eq!((st, e["code"].as_str()), (404, Some("MESSAGE_NOT_FOUND")));
    let state = s.state(&bob).await;
    assert!(state["verdicts"].as_array().unwrap().is_empty());
    assert_eq!(state["tray"]["conversations"].as_array().unwrap().len(), 2);
    let (st, e) = s.decide(&bob, conv, json!({"decision": "maybe"})).await;
    assert_eq!((st, e["code"].as_str()), (400, Some("VALIDATION_ERROR")));
}

#[tokio::test]
async fn tray_3_1_notices_are_never_the_preview_and_a_verdict_reads_the_notices_after_its_anchor() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let g = s
        .make_group(json!({"owner": "alice", "name": "crew", "members": ["bob"]}))
        .await;
    let gid = g["group_id"].as_str().unwrap().to_string();
    let m = s.send_conv(&alice, &gid, "plan?").await;
    let (st, n) = s
        .post(
            None,
            &format!("/_sim/groups/{gid}/notice"),
            json!({"event": "name_changed", "by": "alice"}),
        )
        .await;
    assert_eq!(st, 201);
    let card = s.tray(&bob).await["conversations"][0].clone();
    assert_eq!(card["type"], "group");
    assert_eq!(card["group"]["name"], "crew");
    assert_eq!(card["unread"], 2);
    assert_eq!(card["preview"]["message_id"], m["id"]);
    assert_eq!(
        card["last_message_id"], n["message_id"],
        "a notice can be last_message_id"
    );
    let (st, _) = s
        .decide(
            &bob,
            &gid,
            json!({"decision": "dismiss", "category": "other", "through_message_id": m["id"]}),
        )
        .await;
    assert_eq!(st, 201);
    assert!(
        s.cards(&bob).await.is_empty(),
        "notice after the anchor read too"
    );
    // A notices-only card: preview null, nothing owed.
    s.post(
        None,
        &format!("/_sim/groups/{gid}/notice"),
        json!({"event": "member_left", "by": "alice"}),
    )
    .await;
    let card = s.tray(&bob).await["conversations"][0].clone();
    assert!(card["preview"].is_null());
    assert_eq!(card["you_owe_reply"], false);
    assert_eq!(card["unread"], 1);
}

#[tokio::test]
async fn verdict_3_2_defer_hides_the_card_counted_in_deferred_until_a_newer_message() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let m = s.send(&alice, &bob, "later?").await;
    let conv = m["conversation_id"].as_str().unwrap();
    let (st, _) = s.decide(&bob, conv, json!({"decision": "defer", "category": "goal_followup", "through_message_id": m["id"]})).await;
    assert_eq!(st, 201);
    let t = s.tray(&bob).await;
    assert!(t["conversations"].as_array().unwrap().is_empty());
    assert_eq!(t["deferred"], 1);
    assert_eq!(
        s.state(&bob).await["received"][0]["status"],
        "stored",
        "defer reads nothing"
    );
    s.send(&alice, &bob, "actually now").await;
    let t = s.tray(&bob).await;
    assert_eq!(t["conversations"].as_array().unwrap().len(), 1);
    assert_eq!(t["deferred"], 0);
}

#[tokio::test]
async fn read_3_2_marks_read_without_a_verdict_and_messages_route_marks_delivered() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let m = s.send(&alice, &bob, "x").await;
    let conv = m["conversation_id"].as_str().unwrap();
    let (st, msgs) = s
        .get(
            Some(&bob.key),
            &format!("/v1/conversations/{conv}/messages"),
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(msgs[0]["content"]["text"], "x");
    assert_eq!(s.state(&bob).await["received"][0]["status"], "delivered");
    assert_eq!(s.cards(&bob).await.len(), 1, "delivered is not read");
    let (st, _) = s
        .read(&bob, conv, json!({"through_message_id": m["id"]}))
        .await;
    assert_eq!(st, 200);
    assert!(s.cards(&bob).await.is_empty());
    assert!(
        s.state(&bob).await["verdicts"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn read_3_2_a_through_message_id_that_is_not_a_string_is_400_and_reads_nothing() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let m = s.send(&alice, &bob, "x").await;
    let conv = m["conversation_id"].as_str().unwrap();
    let (st, e) = s.read(&bob, conv, json!({"through_message_id": 7})).await;
    assert_eq!(st, 400, "{e}");
    assert_eq!(e["code"], "VALIDATION_ERROR");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("through_message_id")
    );
    assert_eq!(
        s.cards(&bob).await.len(),
        1,
        "bad input loses nothing: the message stays unread"
    );
}

#[tokio::test]
async fn messages_accept_handles_with_or_without_at_dedupe_client_msg_id_and_refuse_self() {
    let s = sim(1.0).await;
    let (alice, _bob) = (s.agent("alice").await, s.agent("bob").await);
    let body = json!({"to": "bob", "client_msg_id": "same-1", "content": {"text": "a"}});
    let (st1, m1) = s.post(Some(&alice.key), "/v1/messages", body.clone()).await;
    let (st2, m2) = s.post(Some(&alice.key), "/v1/messages", body).await;
    assert_eq!((st1, st2), (201, 200));
    assert_eq!(m1["id"], m2["id"]);
    assert_eq!(
        m1["sender"], "alice",
        "frames and envelopes carry bare handles"
    );
    let (st, m3) = s
        .post(
            Some(&alice.key),
            "/v1/messages",
            json!({"to": "@BOB", "content": {"text": "b"}}),
        )
        .await;
    assert_eq!(st, 201);
    assert_eq!(m3["conversation_id"], m1["conversation_id"]);
    let (st, e) = s
        .post(
            Some(&alice.key),
            "/v1/messages",
            json!({"to": "@alice", "content": {"text": "me"}}),
        )
        .await;
    assert_eq!((st, e["code"].as_str()), (400, Some("VALIDATION_ERROR")));
    let (st, e) = s
        .post(
            Some(&alice.key),
            "/v1/messages",
            json!({"to": "nobody", "content": {"text": "?"}}),
        )
        .await;
    assert_eq!((st, e["code"].as_str()), (404, Some("AGENT_NOT_FOUND")));
    assert_eq!(s.state(&alice).await["sent"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn errors_have_one_shape_auth_unknown_routes_and_malformed_json() {
    let s = sim(1.0).await;
    let alice = s.agent("alice").await;
    let (st, e) = s.get(None, "/v1/agents/me").await;
    assert_eq!((st, e["code"].as_str()), (401, Some("UNAUTHORIZED")));
    let (st, e) = s.get(Some("ac_live_wrong"), "/v1/inbox").await;
    assert_eq!(st, 401);
    assert!(
        !e["message"].as_str().unwrap().contains("ac_live_wrong"),
        "the key never appears in errors"
    );
    let (st, e) = s.get(Some(&alice.key), "/v1/nothing/here").await;
    assert_eq!((st, e["code"].as_str()), (404, Some("NOT_FOUND")));
    let resp = s
        .raw(Method::POST, &alice.key, "/v1/messages")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["code"], "VALIDATION_ERROR");
    assert!(
        e["message"].as_str().unwrap().contains("Invalid JSON"),
        "{e}"
    );
    let (st, me) = s.get(Some(&alice.key), "/v1/agents/me").await;
    assert_eq!((st, me["handle"].as_str()), (200, Some("alice")));
}

#[tokio::test]
async fn control_an_agent_can_be_made_again_with_the_key_it_had_on_an_earlier_sim_run() {
    // What a restarted sim needs so a listener that kept running finds its agent again.
    let s = sim(1.0).await;
    let key = "ac_live_restoredkey0123456789abcdef";
    let (st, v) = s
        .post(
            None,
            "/_sim/agents",
            json!({"handle": "bob", "api_key": key}),
        )
        .await;
    assert_eq!((st, v["api_key"].as_str()), (201, Some(key)), "{v}");
    let (st, me) = s.get(Some(key), "/v1/agents/me").await;
    assert_eq!((st, me["handle"].as_str()), (200, Some("bob")));
    let (st, v) = s
        .post(
            None,
            "/_sim/agents",
            json!({"handle": "carol", "api_key": key}),
        )
        .await;
    assert_eq!((st, v["code"].as_str()), (409, Some("KEY_TAKEN")), "{v}");
    let (st, v) = s
        .post(
            None,
            "/_sim/agents",
            json!({"handle": "dave", "api_key": "sk-not-ours"}),
        )
        .await;
    assert_eq!(
        (st, v["code"].as_str()),
        (400, Some("VALIDATION_ERROR")),
        "{v}"
    );
    let (_, agents) = s.get(None, "/_sim/agents").await;
    assert_eq!(
        agents["agents"].as_array().map(Vec::len),
        Some(1),
        "a refused key makes no agent: {agents}"
    );
}

#[tokio::test]
async fn invites_3_3_list_dismiss_idempotently_then_accept_and_decline_answer_404_once_answered() {
    let (s, _alice, bob, carol) = alice_bob_and_carol(1.0).await;
    let g = s
        .make_group(json!({"owner": "alice", "name": "launch-crew", "invite": ["bob", "carol"]}))
        .await;
    let bob_inv = g["invites"][0]["invite_id"].as_str().unwrap().to_string();
    let carol_inv = g["invites"][1]["invite_id"].as_str().unwrap().to_string();
    let (_, list) = s.get(Some(&bob.key), "/v1/groups/invites").await;
    assert_eq!(list[0]["id"], bob_inv.as_str());
    assert_eq!(list[0]["inviter_handle"], "alice");
    let t = s.tray(&bob).await;
    assert_eq!(t["invites"][0]["invite_id"], bob_inv.as_str());
    assert_eq!(t["invites"][0]["group"]["name"], "launch-crew");
    assert_eq!(t["invites"][0]["invited_by"], "@alice");
    assert_eq!(t["invites_truncated"], false);
    // Not yours.
    let (st, e) = s.answer_invite(&bob, &carol_inv, "dismiss").await;
    assert_eq!((st, e["code"].as_str()), (404, Some("INVITE_NOT_FOUND")));
    for _ in 0..2 {
        let (st, v) = s.answer_invite(&bob, &bob_inv, "dismiss").await;
        assert_eq!((st, v.clone()), (200, json!({"dismissed": true})));
    }
    assert!(
        s.tray(&bob).await["invites"].as_array().unwrap().is_empty(),
        "dismissed leaves the tray"
    );
    // Accept still works, with Idempotency-Key replayed.
    let accept = |key: &str| {
        s.raw(
            Method::POST,
            &bob.key,
            &format!("/v1/groups/invites/{bob_inv}/accept"),
        )
        .header("Idempotency-Key", key)
        .send()
    };
    let r1 = accept("accept-key-1").await.unwrap();
    assert_eq!(r1.status().as_u16(), 200);
    let r2 = accept("accept-key-1").await.unwrap();
    assert_eq!(r2.status().as_u16(), 200);
    assert_eq!(r2.headers().get("idempotent-replay").unwrap(), "true");
    let detail: Value = r2.json().await.unwrap();
    assert_eq!(detail["member_count"], 2);
    let (st, e) = s.answer_invite(&bob, &bob_inv, "accept").await;
    assert_eq!((st, e["code"].as_str()), (404, Some("INVITE_NOT_FOUND")));
    let (st, _) = s.decline_invite(&carol, &carol_inv).await;
    assert_eq!(st, 200);
    let (st, _) = s.decline_invite(&carol, &carol_inv).await;
    assert_eq!(st, 404);
    let st = s.state(&carol).await;
    assert_eq!(st["invites"][0]["state"], "declined");
}

#[tokio::test]
async fn tray_3_1_wait_ms_holds_until_a_message_lands_and_answers_at_once_when_a_card_shows() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let held = s.held_inbox(&bob, "wait_ms=20000");
    s.wait_state(&bob, "the read to be parked", |st| st["held_requests"] == 1)
        .await;
    s.send(&alice, &bob, "wake up").await;
    let (_, v, took) = held.await.unwrap();
    assert_eq!(v["conversations"].as_array().unwrap().len(), 1);
    assert!(
        took < Duration::from_secs(10),
        "answered when the message landed"
    );
    assert!(v["waited_ms"].as_u64().unwrap() > 0);
    // A card is showing: answered at once, waited_ms 0.
    let (_, v) = s.get(Some(&bob.key), "/v1/inbox?wait_ms=20000").await;
    assert_eq!(v["waited_ms"], 0);
}

#[tokio::test]
async fn tray_3_1_an_invite_ends_a_hold_only_with_invites_1() {
    let (s, _alice, bob) = alice_and_bob(1.0).await;
    let held = s.held_inbox(&bob, "wait_ms=20000&invites=1");
    s.wait_state(&bob, "the read to be parked", |st| st["held_requests"] == 1)
        .await;
    s.post(
        None,
        "/_sim/groups",
        json!({"owner": "alice", "name": "g1", "invite": ["bob"]}),
    )
    .await;
    let (_, v, _) = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v["invites"].as_array().unwrap().len(), 1);
    // Without invites=1 an invite-only tray holds to the end of wait_ms.
    let t0 = Instant::now();
    let (_, v) = s.get(Some(&bob.key), "/v1/inbox?wait_ms=400").await;
    assert!(t0.elapsed() >= Duration::from_millis(400));
    assert_eq!(
        v["invites"].as_array().unwrap().len(),
        1,
        "invites listed anyway (additive)"
    );
    assert!(v["waited_ms"].as_u64().unwrap() >= 400);
    // With invites=1 the same tray answers at once.
    let (_, v) = s
        .get(Some(&bob.key), "/v1/inbox?wait_ms=20000&invites=1")
        .await;
    assert_eq!(v["waited_ms"], 0);
}

#[tokio::test]
async fn poll_budget_3_1_empty_reads_get_50_then_429_with_retry_after() {
    let s = sim(1.0).await;
    let bob = s.agent("bob").await;
    for i in 0..50 {
        let (st, _) = s.get(Some(&bob.key), "/v1/inbox").await;
        assert_eq!(st, 200, "read {i}");
    }
    let resp = s
        .raw(Method::GET, &bob.key, "/v1/inbox")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    let ra: u64 = retry_after(&resp).parse().unwrap();
    assert!((1..=30).contains(&ra), "Retry-After {ra}");
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["code"], "RATE_LIMITED");
}

#[tokio::test]
async fn poll_budget_3_1_empty_reads_within_60_s_of_a_send_spend_no_progress_budget() {
    let (s, alice, bob) = alice_and_bob(1.0).await; // the 60 s progress window cannot lapse during the test
    s.send(&bob, &alice, "progress").await;
    for i in 0..60 {
        let (st, t) = s.get(Some(&bob.key), "/v1/inbox").await;
        assert_eq!(st, 200, "read {i}: {t}");
        assert!(t["conversations"].as_array().unwrap().is_empty());
    }
}

#[tokio::test]
async fn poll_budget_3_1_a_tray_that_shows_cards_hits_the_120_read_ceiling_not_the_no_progress_budget()
 {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    s.send(&alice, &bob, "never answered").await;
    let mut ok = 0;
    let mut refused = None;
    for _ in 0..130 {
        let resp = s
            .raw(Method::GET, &bob.key, "/v1/inbox")
            .send()
            .await
            .unwrap();
        if resp.status().as_u16() == 429 {
            refused = Some(retry_after(&resp));
            break;
        }
        ok += 1;
    }
    assert!(
        ok >= 120,
        "at least the burst of 120 went through, got {ok}"
    );
    assert!(refused.is_some(), "the ceiling refuses past its burst");
}

#[tokio::test]
async fn control_budget_polls_per_second_refills_the_read_ceiling_faster() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    s.send(&alice, &bob, "never answered").await;
    let path = format!("/_sim/agents/{}/budget", bob.handle);
    let (st, v) = s.post(None, &path, json!({"polls_per_second": 0})).await;
    assert_eq!(st, 400, "{v}");
    let (st, v) = s
        .post(None, &path, json!({"polls_per_second": 100000}))
        .await;
    assert_eq!((st, &v["polls_per_second"]), (200, &json!(100000.0)), "{v}");
    for i in 0..130 {
        let (st, t) = s.get(Some(&bob.key), "/v1/inbox").await;
        assert_eq!(
            st, 200,
            "read {i} past the burst of 120 refilled at once: {t}"
        );
    }
}

#[tokio::test]
async fn texts_3_6_spell_tool_names_per_runtime_carry_a_manual_and_can_be_replaced() {
    let s = sim(1.0).await;
    let (st, g) = s.get(None, "/v1/texts?runtime=generic").await;
    assert_eq!(st, 200);
    assert_eq!(g["version"], "1");
    assert_eq!(g["manual"]["url"], "https://agentchat.me/skill.md");
    for f in [
        "wake_instruction",
        "invite_prompt",
        "identity_line",
        "identity_line_template",
        "gate_call_preamble",
        "gate_call_answer_format",
        "reply_turn_template",
    ] {
        assert!(g[f].is_string(), "generic lacks {f}");
    }
    assert!(!g["wake_instruction"].as_str().unwrap().contains("mcp__"));
    for rt in ["claude-code", "codex"] {
        let (_, t) = s.get(None, &format!("/v1/texts?runtime={rt}")).await;
        assert!(
            t["wake_instruction"]
                .as_str()
                .unwrap()
                .contains("mcp__agentchat__agentchat_inbox"),
            "{rt}"
        );
        assert!(
            t["identity_line_template"]
                .as_str()
                .unwrap()
                .contains("<handle>")
        );
        assert!(
            t["reply_turn_template"]
                .as_str()
                .unwrap()
                .contains("<conversation_id>")
        );
    }
    let mut lacking = g.clone();
    lacking
        .as_object_mut()
        .unwrap()
        .remove("reply_turn_template");
    let (st, _) = s.post(None, "/_sim/texts/codex", lacking).await;
    assert_eq!(st, 200);
    let (_, t) = s.get(None, "/v1/texts?runtime=codex").await;
    assert!(t.get("reply_turn_template").is_none());
    let (st, _) = s.get(None, "/v1/texts?runtime=nope").await;
    assert_eq!(st, 400);
}

/// The `Retry-After` header of a refused request.
fn retry_after(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

async fn rpc(s: &sim_support::Sim, key: Option<&str>, body: Value) -> (u16, Option<Value>) {
    let mut rb = s
        .http
        .post(format!("{}/mcp", s.base))
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    let resp = rb.send().await.unwrap();
    let st = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        st,
        if text.is_empty() {
            None
        } else {
            Some(serde_json::from_str(&text).unwrap())
        },
    )
}

fn tool_json(res: &Value) -> Value {
    serde_json::from_str(res["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn mcp_speaks_streamable_http_json_rpc_with_bearer_auth_and_the_contracts_tools() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let (st, _) = rpc(&s, None, init.clone()).await;
    assert_eq!(st, 401);
    let (st, v) = rpc(&s, Some(&bob.key), init).await;
    assert_eq!(st, 200);
    let v = v.unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25");
    assert!(v["result"]["capabilities"]["tools"].is_object());
    let (st, body) = rpc(
        &s,
        Some(&bob.key),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!((st, body), (202, None));
    let resp = s.raw(Method::GET, &bob.key, "/mcp").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    let (_, v) = rpc(
        &s,
        Some(&bob.key),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    let tools = v.unwrap()["result"]["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, sim_support::MCP_TOOLS);
    assert!(tools.iter().all(|t| t["inputSchema"]["type"] == "object"));

    let m = s.send(&alice, &bob, "over mcp?").await;
    let call = |id: u64, name: &str, args: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args, "_meta": {"progressToken": id}}});
    let tool = |id: u64, name: &str, args: Value| rpc(&s, Some(&bob.key), call(id, name, args));
    let (_, v) = tool(3, "agentchat_inbox", json!({})).await;
    let v = v.unwrap();
    assert_eq!(v["result"]["isError"], false);
    let tray = tool_json(&v);
    assert_eq!(tray["conversations"][0]["preview"]["message_id"], m["id"]);
    let conv = m["conversation_id"].as_str().unwrap();
    let (_, v) = tool(
        4,
        "agentchat_get_conversation",
        json!({"conversation_id": conv}),
    )
    .await;
    assert_eq!(
        tool_json(&v.unwrap())["messages"][0]["content"]["text"],
        "over mcp?"
    );
    let (_, v) = tool(
        5,
        "agentchat_send_message",
        json!({"to": "@alice", "text": "yes"}),
    )
    .await;
    assert_eq!(tool_json(&v.unwrap())["sender"], "bob");
    let (_, v) = tool(6, "agentchat_decide",
        json!({"conversation_id": conv, "decision": "reply", "category": "open_request", "through_message_id": "msg_foreign"})).await;
    let v = v.unwrap();
    assert_eq!(v["result"]["isError"], true);
    assert_eq!(tool_json(&v)["code"], "MESSAGE_NOT_FOUND");
    let (_, v) = tool(7, "agentchat_decide",
        json!({"conversation_id": conv, "decision": "reply", "category": "open_request", "through_message_id": m["id"]})).await;
    assert_eq!(v.unwrap()["result"]["isError"], false);
    assert!(s.cards(&bob).await.is_empty());
    let g = s
        .make_group(json!({"owner": "alice", "name": "g", "invite": ["bob"]}))
        .await;
    let inv = g["invites"][0]["invite_id"].as_str().unwrap();
    let (_, v) = tool(
        8,
        "agentchat_respond_to_invite",
        json!({"invite_id": inv, "response": "dismiss"}),
    )
    .await;
    assert_eq!(tool_json(&v.unwrap()), json!({"dismissed": true}));
    let (_, v) = rpc(
        &s,
        Some(&bob.key),
        json!({"jsonrpc": "2.0", "id": 9, "method": "bogus/method"}),
    )
    .await;
    assert_eq!(v.unwrap()["error"]["code"], -32601);
}

/// Kills the child on drop, so a failed assertion leaves no `agentchat sim` behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn cli_sim_prints_one_json_line_with_seeded_keys_and_never_logs_keys() {
    use std::io::{BufRead, BufReader, Read};
    let mut guard = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_agentchat"))
            .args([
                "sim",
                "--seed-demo",
                "--listen",
                "127.0.0.1:0",
                "--time-scale",
                "10",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let child = &mut guard.0;
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    let base = v["api_base"].as_str().unwrap().to_string();
    assert!(base.starts_with("http://127.0.0.1:"));
    let agents = v["agents"].as_array().unwrap();
    assert_eq!(agents[0]["handle"], "@alice");
    assert_eq!(agents[1]["handle"], "@bob");
    let key = agents[0]["api_key"].as_str().unwrap().to_string();
    // Use the key once so a request is logged, then stop the server by its pid.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        agentchat::sys::tls::install_crypto_provider();
        let r = reqwest::Client::new()
            .get(format!("{base}/v1/agents/me"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    });
    common::sigterm(child.id() as i32);
    let status = child.wait().unwrap();
    assert!(status.success(), "SIGTERM stops it cleanly: {status:?}");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("GET /v1/agents/me -> 200"),
        "requests are logged on stderr: {err}"
    );
    assert!(!err.contains(&key), "keys never reach the log");
}

#[tokio::test]
async fn deprecation_7_no_reply_still_works_as_dismiss_with_the_three_headers() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let m = s.send(&alice, &bob, "bye").await;
    let conv = m["conversation_id"].as_str().unwrap();
    let resp = s
        .raw(
            Method::POST,
            &bob.key,
            &format!("/v1/conversations/{conv}/decisions"),
        )
        .json(
            &json!({"decision": "no_reply", "category": "closing", "through_message_id": m["id"]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    assert!(
        resp.headers()
            .get("deprecation")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with('@')
    );
    assert_eq!(
        resp.headers().get("sunset").unwrap(),
        "Sat, 06 Feb 2027 00:00:00 GMT"
    );
    assert!(
        resp.headers()
            .get("link")
            .unwrap()
            .to_str()
            .unwrap()
            .contains("rel=\"deprecation\"")
    );
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["decision"]["decision"], "dismiss");
    assert!(s.cards(&bob).await.is_empty());
}

#[tokio::test]
async fn sync_lists_undelivered_rows_with_delivery_ids_and_the_cursor_ack_delivers_them() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let m1 = s.send(&alice, &bob, "one").await;
    let m2 = s.send(&alice, &bob, "two").await;
    let (st, rows) = s.get(Some(&bob.key), "/v1/messages/sync").await;
    assert_eq!(st, 200);
    let rows = rows.as_array().unwrap().clone();
    assert_eq!(
        rows.iter().map(|r| r["id"].clone()).collect::<Vec<_>>(),
        [m1["id"].clone(), m2["id"].clone()]
    );
    let cursor = rows[0]["delivery_id"].as_str().unwrap();
    let (_, after) = s
        .get(Some(&bob.key), &format!("/v1/messages/sync?after={cursor}"))
        .await;
    assert_eq!(after[0]["id"], m2["id"]);
    let (_, v) = s
        .post(
            Some(&bob.key),
            "/v1/messages/sync/ack",
            json!({"last_delivery_id": cursor}),
        )
        .await;
    assert_eq!(v["acked"], 1);
    let (_, v) = s
        .post(
            Some(&bob.key),
            "/v1/messages/sync/ack",
            json!({"last_delivery_id": cursor}),
        )
        .await;
    assert_eq!(v["acked"], 0, "idempotent");
    let (st, _) = s
        .post(Some(&bob.key), "/v1/messages/sync/ack", json!({}))
        .await;
    assert_eq!(st, 400);
    let (_, rows) = s.get(Some(&bob.key), "/v1/messages/sync").await;
    assert_eq!(rows.as_array().unwrap().len(), 1);
}

/// One `tools/call` over `/mcp`: the tool's JSON-RPC result (content and `isError`).
async fn call_tool(s: &sim_support::Sim, key: &str, name: &str, args: Value) -> Value {
    let (st, v) = rpc(
        s,
        Some(key),
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": name, "arguments": args}}),
    )
    .await;
    assert_eq!(st, 200);
    v.unwrap()["result"].clone()
}

#[tokio::test]
async fn mcp_tools_refuse_arguments_their_input_schema_refuses_and_record_nothing() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let m = s.send(&alice, &bob, "x").await;
    let conv = m["conversation_id"].as_str().unwrap();
    let refused = [
        ("agentchat_inbox", json!({"limit": 0}), "limit"),
        ("agentchat_inbox", json!({"wait_ms": "soon"}), "wait_ms"),
        ("agentchat_inbox", json!({"wait_ms": 50_001}), "wait_ms"),
        (
            "agentchat_decide",
            json!({"conversation_id": conv, "decision": "maybe", "category": "other"}),
            "decision",
        ),
        (
            "agentchat_decide",
            json!({"conversation_id": conv, "decision": "dismiss", "category": "other", "through_message_id": 3}),
            "through_message_id",
        ),
        (
            "agentchat_decide",
            json!({"conversation_id": conv, "decision": "dismiss"}),
            "category",
        ),
        ("agentchat_send_message", json!({"to": "alice"}), "text"),
        (
            "agentchat_respond_to_invite",
            json!({"invite_id": "gri_x", "response": "maybe"}),
            "response",
        ),
    ];
    for (tool, args, names) in refused {
        let r = call_tool(&s, &bob.key, tool, args.clone()).await;
        assert_eq!(r["isError"], true, "{tool} {args}: {r}");
        let e = tool_json(&json!({"result": r}));
        assert_eq!(e["code"], "VALIDATION_ERROR", "{tool} {args}");
        assert!(
            e["message"].as_str().unwrap().contains(names),
            "{tool} {args}: the error names {names}: {e}"
        );
    }
    let st = s.state(&bob).await;
    assert_eq!(st["verdicts"], json!([]), "a refused call records nothing");
    assert_eq!(s.cards(&bob).await.len(), 1);
    // The same tools answer valid arguments.
    let r = call_tool(
        &s,
        &bob.key,
        "agentchat_inbox",
        json!({"limit": 1, "wait_ms": 0}),
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
}

#[tokio::test]
async fn invites_3_1_the_tray_lists_the_20_newest_invites_and_flags_the_rest_truncated() {
    let (s, _alice, bob) = alice_and_bob(1.0).await;
    let mut ids = Vec::new();
    for i in 0..21 {
        let g = s
            .make_group(json!({"owner": "alice", "name": format!("crew-{i}"), "invite": ["bob"]}))
            .await;
        ids.push(g["invites"][0]["invite_id"].clone());
    }
    let t = s.tray(&bob).await;
    let listed: Vec<Value> = t["invites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["invite_id"].clone())
        .collect();
    ids.reverse();
    assert_eq!(listed, ids[..20].to_vec(), "the 20 newest, newest first");
    assert_eq!(t["invites_truncated"], true);
}

#[tokio::test]
async fn invites_3_3_dismiss_honours_idempotency_key_even_after_the_invite_is_answered() {
    let (s, _alice, bob) = alice_and_bob(1.0).await;
    let g = s
        .make_group(json!({"owner": "alice", "name": "crew", "invite": ["bob"]}))
        .await;
    let inv = g["invites"][0]["invite_id"].as_str().unwrap().to_string();
    let dismiss = |key: Option<&'static str>| {
        let mut rb = s.raw(
            Method::POST,
            &bob.key,
            &format!("/v1/groups/invites/{inv}/dismiss"),
        );
        if let Some(k) = key {
            rb = rb.header("Idempotency-Key", k);
        }
        rb.send()
    };
    let r = dismiss(Some("dismiss-key-1")).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (st, _) = s.decline_invite(&bob, &inv).await;
    assert_eq!(st, 200, "declined after the dismiss");
    let r = dismiss(Some("dismiss-key-1")).await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "the same key replays the answer");
    assert_eq!(r.headers().get("idempotent-replay").unwrap(), "true");
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"dismissed": true}));
    let r = dismiss(None).await.unwrap();
    assert_eq!(
        r.status().as_u16(),
        404,
        "without the key: no longer pending"
    );
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["code"], "INVITE_NOT_FOUND");
}

#[tokio::test]
async fn poll_budget_3_1_a_held_read_counts_once_however_often_it_is_woken() {
    let (s, _alice, bob) = alice_and_bob(1.0).await; // refill is one per 30 s: nothing refills during the test
    for i in 0..48 {
        let (st, _) = s.get(Some(&bob.key), "/v1/inbox").await;
        assert_eq!(st, 200, "read {i}");
    }
    // Two no-progress tokens left. A held read (no invites=1) is woken by three invites, none
    // of which ends it, and answers empty at its deadline.
    let held = s.held_inbox(&bob, "wait_ms=1500");
    s.wait_state(&bob, "the read to be parked", |st| st["held_requests"] == 1)
        .await;
    for i in 0..3 {
        s.make_group(json!({"owner": "alice", "name": format!("g{i}"), "invite": ["bob"]}))
            .await;
    }
    let (st, v, _) = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(st, 200);
    assert_eq!(v["conversations"], json!([]));
    assert_eq!(
        v["invites"].as_array().unwrap().len(),
        3,
        "listed, held to the end"
    );
    // It spent one token, not one per wake: one more read is let in, the next is refused.
    let (st, _) = s.get(Some(&bob.key), "/v1/inbox").await;
    assert_eq!(st, 200, "the held read counted once");
    let (st, e) = s.get(Some(&bob.key), "/v1/inbox").await;
    assert_eq!((st, e["code"].as_str()), (429, Some("RATE_LIMITED")));
}

//! Issue 37 items 9 to 12 against the sim, with the official Python SDK (`agentchatme` 1.1.1) as
//! the client where it has the call (its own HTTP transport, `client._http`, for routes it
//! predates): contract 7's deprecated values and `/v1/reply/*` switched off, mute durations that
//! end, a full pause that strands nothing, `send` pause and suspension, and the frames the real
//! server sends (`presence.update`, `typing.*`, `rate_limit.warning`, any frame pushed).

use crate::sim_support::{alice_and_bob, alice_bob_and_carol};
use reqwest::Method;
use serde_json::{Value, json};

const HOUR: u64 = 3_600_000;

/// The three headers of contract 7 on a reply, as `(deprecation, sunset, link)`.
fn deprecation(r: &reqwest::Response) -> Option<(String, String, String)> {
    let h = |n: &str| r.headers().get(n).map(|v| v.to_str().unwrap().to_string());
    Some((h("deprecation")?, h("sunset")?, h("link")?))
}

#[tokio::test]
async fn mute_durations_are_honoured_and_each_mute_ends_when_its_time_is_up() {
    let (s, alice, bob, carol) = alice_bob_and_carol(1.0).await;
    let m = s.send(&alice, &bob, "hello").await;
    let conv = m["conversation_id"].as_str().unwrap().to_string();
    s.send(&carol, &bob, "hi").await;
    let dave = s.agent("dave").await;
    s.send(&dave, &bob, "hey").await;
    let script = r#"
bob = client(os.environ["BOB"])
conv = os.environ["CONV"]
out = {}
bob._post("/v1/mutes", {"target_kind": "conversation", "target_id": conv, "duration": "8h"})
until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 86400 + 60))
bob.mute_agent("carol", muted_until=until)
bob._post("/v1/mutes", {"target_kind": "agent", "target_handle": "@dave", "duration": "3d"})
out["listed"] = sorted(m["target_id"] for m in bob.list_mutes()["mutes"])
out["bad"] = err(lambda: bob._post("/v1/mutes", {"target_kind": "agent", "target_handle": "dave", "duration": "2h"}))
def flags():
    return {c["counterparty"]["handle"]: c["muted"] for c in bob._get("/v1/inbox")["conversations"]}
out["start"] = flags()
control("POST", "/_sim/clock", {"advance_ms": 8 * 3600 * 1000})
out["after_8h"] = flags()
out["conv_status"] = bob.get_conversation_mute_status(conv)
control("POST", "/_sim/clock", {"advance_ms": 17 * 3600 * 1000})
out["after_25h"] = flags()
out["carol_status"] = bob.get_agent_mute_status("carol")
bob._post("/v1/mutes", {"target_kind": "agent", "target_handle": "carol", "duration": "forever"})
bob._post("/v1/mutes", {"target_kind": "agent", "target_handle": "dave", "duration": "off"})
control("POST", "/_sim/clock", {"advance_ms": 30 * 24 * 3600 * 1000})
out["after_a_month"] = flags()
out["forever"] = bob.get_agent_mute_status("carol")
print(json.dumps(out))
"#;
    let Some(v) = s
        .python(script, &[("BOB", &bob.key), ("CONV", &conv)])
        .await
    else {
        return;
    };
    assert_eq!(v["listed"], json!(["carol", conv, "dave"]), "{v}");
    assert_eq!(
        (v["bad"]["status"].as_u64(), v["bad"]["code"].as_str()),
        (Some(400), Some("VALIDATION_ERROR"))
    );
    let all = json!({"@alice": true, "@carol": true, "@dave": true});
    assert_eq!(v["start"], all);
    assert_eq!(
        v["after_8h"],
        json!({"@alice": false, "@carol": true, "@dave": true}),
        "8h ended"
    );
    assert!(v["conv_status"].is_null(), "an ended mute is not found");
    assert_eq!(
        v["after_25h"],
        json!({"@alice": false, "@carol": false, "@dave": true}),
        "1d ended, 3d not"
    );
    assert!(v["carol_status"].is_null());
    assert_eq!(
        v["after_a_month"],
        json!({"@alice": false, "@carol": true, "@dave": false}),
        "forever stays, off ended"
    );
    assert!(v["forever"]["muted_until"].is_null(), "{v}");
    // An ended mute wakes again: a new message arms the re-wake ladder.
    let st = s.state(&bob).await;
    assert_eq!(st["muted"]["agents"], json!(["@carol"]));
    s.send(&alice, &bob, "again").await;
    assert_eq!(s.state(&bob).await["ladder"]["armed"], true);
}

#[tokio::test]
async fn a_muted_senders_message_arms_nothing_until_the_mute_ends() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let (st, _) = s
        .post(
            Some(&bob.key),
            "/v1/mutes",
            json!({"target_kind": "agent", "target_handle": "alice", "duration": "1d"}),
        )
        .await;
    assert_eq!(st, 201);
    s.send(&alice, &bob, "muted").await;
    assert_eq!(s.state(&bob).await["ladder"]["armed"], false);
    s.advance(24 * HOUR).await;
    s.send(&alice, &bob, "not muted any more").await;
    assert_eq!(s.state(&bob).await["ladder"]["armed"], true);
}

#[tokio::test]
async fn deprecated_values_carry_the_headers_on_every_answer_and_answer_400_removed_once_off() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let m = s.send(&alice, &bob, "one").await;
    let conv = m["conversation_id"].as_str().unwrap().to_string();
    let path = format!("/v1/conversations/{conv}/decisions");
    let post = |body: Value| s.raw(Method::POST, &bob.key, &path).json(&body).send();
    // Before the switch-off: the old value works and says so, and so does an error answer.
    let r = post(
        json!({"decision": "no_reply", "category": "other", "through_message_id": "msg_nope"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let (dep, sunset, link) =
        deprecation(&r).expect("an error answer that used no_reply carries the headers");
    assert_eq!(dep, "@1793577600", "deprecated since 2026-11-02");
    assert_eq!(sunset, "Sat, 06 Feb 2027 00:00:00 GMT");
    assert!(link.contains("rel=\"deprecation\""));
    let r = post(json!({"decision": "defer", "defer_seconds": 60}))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(
        deprecation(&r).unwrap().0,
        "@1793750400",
        "deprecated since 2026-11-04"
    );
    let r = post(json!({"decision": "defer"})).await.unwrap();
    assert!(deprecation(&r).is_none(), "a current body carries none");
    // Switched off with the contract's ids, as the SDK sees it.
    for id in ["decision_no_reply", "defer_seconds"] {
        let (st, v) = s
            .post(
                None,
                "/_sim/old-paths",
                json!({"id": id, "state": "removed"}),
            )
            .await;
        assert_eq!(st, 200, "{v}");
    }
    let script = r#"
bob = client(os.environ["BOB"])
p = "/v1/conversations/" + os.environ["CONV"] + "/decisions"
print(json.dumps({
  "no_reply": err(lambda: bob._post(p, {"decision": "no_reply", "category": "other"})),
  "defer_seconds": err(lambda: bob._post(p, {"decision": "defer", "defer_seconds": 60})),
  "dismiss": bob._post(p, {"decision": "dismiss", "category": "other"})["decision"]["decision"],
}))
"#;
    let Some(v) = s
        .python(script, &[("BOB", &bob.key), ("CONV", &conv)])
        .await
    else {
        return;
    };
    for (key, replacement) in [
        ("no_reply", "dismiss"),
        (
            "defer_seconds",
            "defer alone; the server owns the reminder ladder (+15 min, +24 h, stop)",
        ),
    ] {
        let e = &v[key];
        assert_eq!(
            (e["status"].as_u64(), e["code"].as_str()),
            (Some(400), Some("REMOVED")),
            "{v}"
        );
        assert_eq!(e["details"]["replacement"], replacement);
        assert_eq!(
            e["details"]["docs"],
            "https://agentchat.me/contract/v1/#deprecations"
        );
        assert!(e["details"]["removed_on"].is_string());
    }
    assert_eq!(v["dismiss"], "dismiss", "the replacement works");
    assert_eq!(
        s.state(&bob).await["verdicts"].as_array().unwrap().len(),
        3,
        "a refusal records nothing"
    );
    let r = post(json!({"decision": "no_reply"})).await.unwrap();
    assert!(
        deprecation(&r).is_none(),
        "once off, no headers: the refusal says it"
    );
}

#[tokio::test]
async fn reply_coordination_is_served_deprecated_and_answers_410_removed_once_off() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let m1 = s.send(&alice, &bob, "one").await;
    let m2 = s.send(&alice, &bob, "two").await;
    let script = r#"
bob = client(os.environ["BOB"])
ids = json.loads(os.environ["IDS"])
out = {}
r = bob._http.request("POST", "/v1/reply/claim", body={"message_id": ids[0], "holder": "daemon:1"})
out["claim"] = r.data
out["deprecation"] = r.headers.get("deprecation")
out["other_holder"] = bob._post("/v1/reply/claim", {"message_id": ids[0], "holder": "session:2"})
out["batch"] = bob._post("/v1/reply/claim-batch", {"message_ids": ids, "holder": "session:2"})
out["lease"] = bob._put("/v1/reply/active", {"session_id": "s1", "ttl_seconds": 600})
out["deferred"] = bob._post("/v1/reply/claim-batch", {"message_ids": ids[1:], "holder": "daemon:1", "defer_if_active": True})
out["unlease"] = bob._del("/v1/reply/active")
out["unknown"] = err(lambda: bob._post("/v1/reply/claim", {"message_id": "msg_nope", "holder": "daemon:1"}))
control("POST", "/_sim/old-paths", {"id": "reply_coord", "state": "removed"})
out["off"] = err(lambda: bob._post("/v1/reply/claim", {"message_id": ids[1], "holder": "daemon:1"}))
print(json.dumps(out))
"#;
    let ids = json!([m1["id"], m2["id"]]).to_string();
    let Some(v) = s.python(script, &[("BOB", &bob.key), ("IDS", &ids)]).await else {
        return;
    };
    assert_eq!(
        v["claim"],
        json!({"claimed": true, "deferred": false}),
        "{v}"
    );
    assert_eq!(v["deprecation"], "@1794096000", "deprecated since day R");
    assert_eq!(v["other_holder"]["claimed"], false);
    assert_eq!(
        v["batch"],
        json!({"claimed_count": 0, "deferred": false}),
        "the prefix stops at a held claim"
    );
    assert_eq!(v["lease"]["active"], true);
    assert_eq!(v["deferred"], json!({"claimed_count": 0, "deferred": true}));
    assert_eq!(v["unlease"], json!({"active": false}));
    assert_eq!(v["unknown"]["code"], "MESSAGE_NOT_FOUND");
    assert_eq!(
        (v["off"]["status"].as_u64(), v["off"]["code"].as_str()),
        (Some(410), Some("REMOVED"))
    );
    assert_eq!(v["off"]["details"]["old_path"], "reply_coord");
    assert!(
        v["off"]["details"]["replacement"]
            .as_str()
            .unwrap()
            .contains("GET /v1/inbox")
    );
    // An error answer on the deprecated path carries the headers too (before the switch-off).
    s.post(
        None,
        "/_sim/old-paths",
        json!({"id": "reply_coord", "state": "on"}),
    )
    .await;
    let r = s
        .raw(Method::POST, &bob.key, "/v1/reply/claim")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(deprecation(&r).is_some());
}

#[tokio::test]
async fn an_error_answer_on_a_deprecated_rest_path_carries_the_deprecation_headers() {
    let (s, _alice, bob) = alice_and_bob(1.0).await;
    s.post(
        None,
        "/_sim/old-paths",
        json!({"path": "/v1/inbox", "state": "deprecated"}),
    )
    .await;
    let r = s
        .raw(Method::GET, &bob.key, "/v1/inbox?limit=0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(deprecation(&r).unwrap().0, "@1794096000");
}

#[tokio::test]
async fn the_control_api_takes_every_id_of_contract_7_and_refuses_others_naming_them() {
    let (s, _alice, _bob) = alice_and_bob(1.0).await;
    for id in [
        "reply_coord",
        "socket_without_ack",
        "defer_seconds",
        "decision_no_reply",
        "tool_agentchat_list_inbox",
        "tool_agentchat_accept_group_invite",
        "tool_agentchat_reject_group_invite",
        "chatfather_dm",
    ] {
        for key in ["id", "path"] {
            let (st, v) = s
                .post(
                    None,
                    "/_sim/old-paths",
                    json!({key: id, "state": "removed"}),
                )
                .await;
            assert_eq!((st, &v["path"]), (200, &json!(id)), "{v}");
        }
    }
    let (st, v) = s
        .post(
            None,
            "/_sim/old-paths",
            json!({"id": "no_such_id", "state": "removed"}),
        )
        .await;
    assert_eq!(st, 400);
    assert!(
        v["message"].as_str().unwrap().contains("decision_no_reply"),
        "{v}"
    );
}

/// A Python `RealtimeClient` (the official SDK's socket client, HELLO path, `ack`) for `KEY`
/// that records every frame of the types in `TYPES` (a JSON list) until it has seen `UNTIL` (a
/// JSON list of types, each once), then prints `{"frames": [...]}`. It also sends `SEND` (a JSON
/// list of frames) once connected.
const PY_EAR: &str = r#"
import asyncio
from agentchatme import RealtimeClient
async def main():
    types, until, send = json.loads(os.environ["TYPES"]), set(json.loads(os.environ["UNTIL"])), json.loads(os.environ.get("SEND", "[]"))
    frames, done = [], asyncio.Event()
    rt = RealtimeClient(api_key=os.environ["KEY"], base_url=os.environ["WS_BASE"], reconnect=False)
    def record(frame):
        frames.append(frame)
        until.discard(frame["type"])
        if not until:
            done.set()
    for t in types:
        rt.on(t, record)
    await rt.connect()
    for _ in range(500):  # connect() returns before hello.ok; send() needs it
        if rt.is_connected:
            break
        await asyncio.sleep(0.02)
    for f in send:
        await rt.send(f)
    await asyncio.wait_for(done.wait(), 30)
    await asyncio.sleep(0.3)  # let the acks leave
    await rt.disconnect()
    print(json.dumps({"frames": frames}))
asyncio.run(main())
"#;

#[tokio::test]
async fn a_message_during_a_full_pause_is_pushed_and_rewoken_after_unpause_and_its_rung_is_not_lost()
 {
    let (s, alice, bob, carol) = alice_bob_and_carol(1.0).await;
    let path = format!("/_sim/agents/{}/pause", bob.handle);
    let pause = |how: &'static str| s.post(None, &path, json!({"paused_by_owner": how}));
    assert_eq!(pause("full").await.0, 200);
    let mut ws = s.ear(&bob, "ack,rewake").await;
    let Some(py) = s.python_child(
        PY_EAR,
        &[
            ("KEY", &bob.key),
            ("TYPES", r#"["message.new", "group.invite.received"]"#),
            ("UNTIL", r#"["message.new", "group.invite.received"]"#),
        ],
    ) else {
        return;
    };
    s.wait_sockets(&bob, 2).await;
    let m = s.send(&alice, &bob, "while you were paused").await;
    let g = s
        .make_group(json!({"owner": carol.handle, "name": "crew", "invite": [bob.handle]}))
        .await;
    // Two minutes of server time: rung 1 falls due and cannot reach a paused agent.
    s.advance(2 * 60_000).await;
    assert!(
        ws.collect(300).await.is_empty(),
        "nothing reaches a paused agent"
    );
    assert!(s.wakes(&bob).await.is_empty());
    assert_eq!(pause("none").await.0, 200);
    let v = crate::sim_support::py_result(py).await;
    let got: Vec<&Value> = v["frames"].as_array().unwrap().iter().collect();
    assert_eq!(
        got[0]["payload"]["id"], m["id"],
        "the SDK got the message: {v}"
    );
    assert!(
        got[0]["payload"]["delivery_id"].is_string(),
        "pushed as a reconnect drain"
    );
    assert_eq!(got[1]["payload"]["group_id"], g["group_id"]);
    let f = ws.expect("message.new", 5000).await;
    assert_eq!(f["payload"]["id"], m["id"]);
    let w = ws.expect("wake", 5000).await;
    assert_eq!(
        (&w["payload"]["reason"], &w["payload"]["step"]),
        (&json!("unanswered"), &json!(1)),
        "the latest rung due, once: {w}"
    );
    assert_eq!(
        w["payload"]["conversation_ids"],
        json!([m["conversation_id"]])
    );
    // The ladder goes on from there.
    s.advance(3 * 60_000).await;
    let w = ws.expect("wake", 5000).await;
    assert_eq!(w["payload"]["step"], 2);
}

#[tokio::test]
async fn a_send_paused_agent_is_refused_403_agent_paused_by_owner_and_still_receives() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    s.post(
        None,
        &format!("/_sim/agents/{}/pause", bob.handle),
        json!({"paused_by_owner": "send"}),
    )
    .await;
    let m = s.send(&alice, &bob, "you can still read this").await;
    let script = r#"
bob = client(os.environ["BOB"])
print(json.dumps({
  "send": err(lambda: bob.send_message(to="alice", content={"text": "no"})),
  "me": bob.get_me()["paused_by_owner"],
  "tray": [c["preview"]["text"] for c in bob._get("/v1/inbox")["conversations"]],
}))
"#;
    let Some(v) = s.python(script, &[("BOB", &bob.key)]).await else {
        return;
    };
    assert_eq!(
        (v["send"]["status"].as_u64(), v["send"]["code"].as_str()),
        (Some(403), Some("AGENT_PAUSED_BY_OWNER")),
        "{v}"
    );
    assert_eq!(v["me"], "send");
    assert_eq!(v["tray"], json!([m["content"]["text"]]));
    assert!(s.state(&bob).await["sent"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn a_suspended_agent_is_refused_403_suspended_its_sockets_close_1008_and_nothing_wakes_it() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let mut ws = s.ear(&bob, "ack,rewake").await;
    let path = format!("/_sim/agents/{}/suspend", bob.handle);
    let suspend = |on: bool| s.post(None, &path, json!({"suspended": on}));
    assert_eq!(suspend(true).await.0, 200);
    assert_eq!(
        ws.closed(5000).await,
        (1008, "Account suspended".to_string())
    );
    let mut again = s.connect(&bob.key, Some("ack")).await;
    assert_eq!(
        again.closed(5000).await,
        (1008, "Account suspended".to_string())
    );
    let m = s.send(&alice, &bob, "while suspended").await;
    s.advance(10 * 60_000).await;
    let script = r#"
bob = client(os.environ["BOB"])
print(json.dumps({
  "me": bob.get_me()["status"],
  "inbox": err(lambda: bob._get("/v1/inbox")),
  "send": err(lambda: bob.send_message(to="alice", content={"text": "no"})),
}))
"#;
    let Some(v) = s.python(script, &[("BOB", &bob.key)]).await else {
        return;
    };
    assert_eq!(v["me"], "suspended", "it can still see itself: {v}");
    for k in ["inbox", "send"] {
        assert_eq!(
            (v[k]["status"].as_u64(), v[k]["code"].as_str()),
            (Some(403), Some("SUSPENDED")),
            "{v}"
        );
    }
    assert!(
        s.state(&bob).await["ladder"]["fired"]
            .as_array()
            .unwrap()
            .is_empty(),
        "no rung while suspended"
    );
    assert_eq!(suspend(false).await.0, 200);
    let mut ws = s.ear(&bob, "ack,rewake").await;
    assert_eq!(
        ws.expect("message.new", 5000).await["payload"]["id"],
        m["id"]
    );
    let w = ws.expect("wake", 5000).await;
    assert_eq!(
        w["payload"]["step"], 2,
        "the latest rung due once reinstated: {w}"
    );
}

#[tokio::test]
async fn presence_update_goes_to_the_agents_contacts_when_it_comes_online_and_goes_offline() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    s.send(&alice, &bob, "we are contacts now").await;
    let Some(py) = s.python_child(
        PY_EAR,
        &[
            ("KEY", &alice.key),
            ("TYPES", r#"["presence.update"]"#),
            ("UNTIL", r#"["presence.update"]"#),
        ],
    ) else {
        return;
    };
    s.wait_sockets(&alice, 1).await;
    let mut ws = s.ear(&bob, "ack").await;
    let v = crate::sim_support::py_result(py).await;
    assert_eq!(
        v["frames"][0]["payload"],
        json!({"handle": "bob", "status": "online", "custom_message": null}),
        "{v}"
    );
    // And offline, when its last socket goes (seen on a socket of the tests' own).
    let mut alice_ws = s.ear(&alice, "ack").await;
    drop(ws.ws.close(None).await);
    let f = alice_ws.expect("presence.update", 5000).await;
    assert_eq!(f["payload"]["status"], "offline");
    // A stranger sees neither.
    let carol = s.agent("carol").await;
    let mut carol_ws = s.ear(&carol, "ack").await;
    let _bob_again = s.ear(&bob, "ack").await;
    assert!(
        carol_ws
            .collect(300)
            .await
            .iter()
            .all(|f| f["type"] != "presence.update")
    );
}

#[tokio::test]
async fn typing_frames_from_the_sdk_are_relayed_to_the_other_member_naming_the_typist() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let m = s.send(&alice, &bob, "hi").await;
    let conv = m["conversation_id"].as_str().unwrap();
    let mut alice_ws = s.ear(&alice, "ack").await;
    let send = json!([
        {"type": "typing.start", "payload": {"conversation_id": "conv_not_yours"}},
        {"type": "typing.start", "payload": {"conversation_id": conv}},
        {"type": "typing.stop", "payload": {"conversation_id": conv}},
    ])
    .to_string();
    let Some(py) = s.python_child(
        PY_EAR,
        &[
            ("KEY", &bob.key),
            ("TYPES", r#"["message.new"]"#),
            ("UNTIL", r#"["message.new"]"#),
            ("SEND", &send),
        ],
    ) else {
        return;
    };
    let start = alice_ws.expect("typing.start", 10_000).await;
    assert_eq!(
        start["payload"],
        json!({"conversation_id": conv, "handle": "bob"})
    );
    let stop = alice_ws.expect("typing.stop", 5000).await;
    assert_eq!(stop["payload"]["handle"], "bob");
    // The SDK reads on: a message ends its script.
    s.send(&alice, &bob, "done typing?").await;
    crate::sim_support::py_result(py).await;
}

#[tokio::test]
async fn rate_limit_warning_comes_once_before_the_no_progress_budget_refuses_with_429() {
    let (s, _alice, bob) = alice_and_bob(1.0).await;
    let mut ws = s.ear(&bob, "ack").await;
    let mut statuses = Vec::new();
    for _ in 0..52 {
        statuses.push(s.get(Some(&bob.key), "/v1/inbox").await.0);
    }
    assert_eq!(
        statuses.iter().filter(|&&st| st == 429).count(),
        2,
        "{statuses:?}"
    );
    let frames = ws.collect(500).await;
    let warnings: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "rate_limit.warning")
        .collect();
    assert_eq!(warnings.len(), 1, "once per descent: {frames:?}");
    assert_eq!(
        warnings[0]["payload"],
        json!({"budget": "no_progress", "remaining": 5, "limit": 50})
    );
}

#[tokio::test]
async fn a_frame_pushed_by_the_control_api_reaches_the_sdk_which_ignores_an_unknown_type_and_reads_on()
 {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let Some(py) = s.python_child(
        PY_EAR,
        &[
            ("KEY", &bob.key),
            ("TYPES", r#"["no.such.frame", "message.new"]"#),
            ("UNTIL", r#"["no.such.frame", "message.new"]"#),
        ],
    ) else {
        return;
    };
    s.wait_sockets(&bob, 1).await;
    let path = format!("/_sim/agents/{}/frame", bob.handle);
    let frame = |body: Value| s.post(None, &path, body);
    let (st, v) = frame(json!({"text": "this is not JSON"})).await;
    assert_eq!((st, &v["sockets"]), (200, &json!(1)), "{v}");
    frame(json!({"frame": {"type": "no.such.frame", "payload": {"x": 1}}})).await;
    frame(json!({"frame": {"type": "wake", "payload": {"reason": "moonrise"}}})).await;
    let (st, _) = frame(json!({"frame": {}, "text": "both"})).await;
    assert_eq!(st, 400);
    let m = s.send(&alice, &bob, "still here?").await;
    let v = crate::sim_support::py_result(py).await;
    let types: Vec<&str> = v["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["no.such.frame", "message.new"], "{v}");
    assert_eq!(v["frames"][1]["payload"]["id"], m["id"]);
    assert!(
        s.acks(&bob)
            .await
            .iter()
            .any(|a| a["message_id"] == m["id"]),
        "the SDK read on and acked"
    );
}

//! What the sim plays for issue 29 item 14, over real HTTP and sockets: an old path deprecated
//! (contract 7's three headers) and switched off (`410 REMOVED` naming the replacement), a
//! socket without `ack` closed `4426` once `socket_without_ack` is off, a full-paused agent
//! (no push, an empty tray at once, `[]` from sync), and `GET /v1/messages/sync?wait_ms` held.

use std::time::{Duration, Instant};

use crate::sim_support::{Got, alice_and_bob};
use serde_json::json;

#[tokio::test]
async fn an_old_path_carries_the_deprecation_headers_then_answers_410_removed_naming_the_replacement()
 {
    let (s, _alice, bob) = alice_and_bob(1.0).await;
    let (st, _) = s
        .post(
            None,
            "/_sim/old-paths",
            json!({"path": "/v1/inbox", "state": "deprecated"}),
        )
        .await;
    assert_eq!(st, 200);
    let r = s
        .raw(reqwest::Method::GET, &bob.key, "/v1/inbox")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let h = r.headers();
    assert_eq!(h["deprecation"], "@1794096000");
    assert_eq!(h["sunset"], "Sat, 06 Feb 2027 00:00:00 GMT");
    assert!(h["link"].to_str().unwrap().contains("rel=\"deprecation\""));
    // Another route carries none.
    let r = s
        .raw(reqwest::Method::GET, &bob.key, "/v1/agents/me")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("deprecation").is_none());

    s.post(
        None,
        "/_sim/old-paths",
        json!({"path": "/v1/inbox", "state": "removed", "replacement": "GET /v2/tray"}),
    )
    .await;
    let (st, v) = s.get(Some(&bob.key), "/v1/inbox").await;
    assert_eq!(st, 410, "{v}");
    assert_eq!(v["code"], "REMOVED");
    assert_eq!(v["details"]["old_path"], "/v1/inbox");
    assert_eq!(v["details"]["replacement"], "GET /v2/tray");
    assert!(v["details"]["removed_on"].is_string() && v["details"]["docs"].is_string());
    // A wrong key is still 401 first: the switch-off is per agent's route.
    let (st, _) = s.get(Some("ac_wrong"), "/v1/inbox").await;
    assert_eq!(st, 401);
    s.post(
        None,
        "/_sim/old-paths",
        json!({"path": "/v1/inbox", "state": "on"}),
    )
    .await;
    assert_eq!(s.get(Some(&bob.key), "/v1/inbox").await.0, 200);
}

#[tokio::test]
async fn once_socket_without_ack_is_off_a_socket_without_ack_is_closed_4426_and_one_with_it_is_not()
{
    let (s, _alice, bob) = alice_and_bob(1.0).await;
    // Before the switch-off an ack-less socket still works.
    let mut old = s.connect_ok(&bob.key, Some("heartbeat")).await;
    drop(old.ws.close(None).await);
    s.post(
        None,
        "/_sim/old-paths",
        json!({"path": "socket_without_ack", "state": "removed"}),
    )
    .await;
    for caps in [None, Some("heartbeat,rewake")] {
        let mut ws = s.connect(&bob.key, caps).await;
        match ws.next(5_000).await {
            Got::Closed(code, reason) => {
                assert_eq!(
                    (code, reason.as_str()),
                    (4426, "upgrade required"),
                    "{caps:?}"
                )
            }
            other => panic!("{caps:?}: {other:?}"),
        }
    }
    // The HELLO path too.
    let mut ws = s.hello(&bob.key, &[]).await;
    assert!(matches!(ws.next(5_000).await, Got::Closed(4426, _)));
    let refused: Vec<_> = s
        .connects(&bob)
        .await
        .into_iter()
        .filter(|c| c["outcome"] == "refused")
        .collect();
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert_eq!(refused[0]["reason"], "upgrade required");
    // With `ack` the socket is let in.
    s.connect_ok(&bob.key, Some("ack")).await;
}

#[tokio::test]
async fn a_full_paused_agent_gets_no_push_an_empty_tray_at_once_and_nothing_from_sync() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let mut ws = s.connect_ok(&bob.key, Some("ack")).await;
    let (st, v) = s
        .post(
            None,
            &format!("/_sim/agents/{}/pause", bob.handle),
            json!({"paused_by_owner": "full"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        s.get(Some(&bob.key), "/v1/agents/me").await.1["paused_by_owner"],
        "full"
    );
    s.send(&alice, &bob, "while paused").await;
    s.make_group(json!({"owner": alice.handle, "name": "crew", "invite": [bob.handle]}))
        .await;
    assert!(
        matches!(ws.next(1_000).await, Got::Timeout),
        "a full-paused agent got a push"
    );
    let t0 = Instant::now();
    let (st, tray) = s.get(Some(&bob.key), "/v1/inbox?wait_ms=5000").await;
    assert_eq!(st, 200);
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "held: {:?}",
        t0.elapsed()
    );
    assert_eq!(tray["conversations"], json!([]));
    let (_, rows) = s
        .get(Some(&bob.key), "/v1/messages/sync?wait_ms=5000")
        .await;
    assert_eq!(rows, json!([]));
    assert!(t0.elapsed() < Duration::from_secs(4));
    // Unpaused, the message is there.
    s.post(
        None,
        &format!("/_sim/agents/{}/pause", bob.handle),
        json!({"paused_by_owner": "none"}),
    )
    .await;
    assert_eq!(s.cards(&bob).await.len(), 1);
    let (_, rows) = s.get(Some(&bob.key), "/v1/messages/sync").await;
    assert_eq!(rows.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_held_sync_is_answered_when_a_message_lands_and_not_by_an_invite() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let key = bob.key.clone();
    let req = s.raw(
        reqwest::Method::GET,
        &key,
        "/v1/messages/sync?wait_ms=20000",
    );
    let held = tokio::spawn(async move {
        let t0 = Instant::now();
        let r = req.send().await.unwrap();
        (r.json::<serde_json::Value>().await.unwrap(), t0.elapsed())
    });
    s.wait_state(&bob, "a held read", |st| st["held_requests"] == 1)
        .await;
    // An invite never ends a held sync (3.1).
    s.make_group(json!({"owner": alice.handle, "name": "crew", "invite": [bob.handle]}))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!held.is_finished(), "an invite ended the held sync");
    s.send(&alice, &bob, "wake the sync").await;
    let (rows, took) = held.await.unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // Nothing to show: held the whole wait, then `[]`.
    let t0 = Instant::now();
    let (_, rows) = s
        .get(Some(&bob.key), "/v1/messages/sync?after=x&wait_ms=1500")
        .await;
    assert!(
        t0.elapsed() >= Duration::from_millis(1_400),
        "{:?}",
        t0.elapsed()
    );
    let _ = rows;
    let (st, _) = s
        .get(Some(&bob.key), "/v1/messages/sync?wait_ms=50001")
        .await;
    assert_eq!(st, 400);
}

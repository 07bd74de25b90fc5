//! The sim's wake webhook (contract 3.5, and the webhook rungs of 5; issue 37 item 8) against a
//! receiver the test starts in Python: every request it gets is checked with the official SDK's
//! own verifier (`agentchatme` 1.1.1, `verify_webhook`: `X-AgentChat-Signature`, `t=…,v1=…`) and
//! with the dialect's own credential (Standard Webhooks' `webhook-signature`, a Bearer token, a
//! body HMAC), and recorded. Subscriptions are made with the SDK's HTTP transport. Timing is
//! driven by stepping the sim's clock (`POST /_sim/clock`), so a 24 h rule takes no 24 h; the
//! receiver's records are awaited, and "nothing sent" is read from the sim's own delivery view,
//! which each step updates before it answers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::sim_support::{Agent, Sim, alice_and_bob, alice_bob_and_carol};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const MIN: u64 = 60_000;
const HOUR: u64 = 60 * MIN;
const DIALECTS: [&str; 6] = [
    "agentchat",
    "standard-webhooks",
    "claude-code",
    "openclaw",
    "hermes",
    "poke",
];

/// The receiver: answers every POST with the status last set through `POST /_status`
/// (200 at first), and prints one JSON line per wake: what the SDK's verifier said, whether the
/// dialect's own credential held, the headers and the body.
const PY_RECEIVER: &str = r#"
import base64, hashlib, hmac, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from agentchatme._webhook_verify import VerifyWebhookOptions, WebhookVerificationError, verify_webhook
SECRET = os.environ["SECRET"]
state = {"status": 200}
lock = threading.Lock()
def dialect_ok(path, h, raw):
    d = path.strip("/").split("/")[-1]
    if d == "standard-webhooks":
        key = base64.b64decode(SECRET[len("whsec_"):])
        signed = h["webhook-id"].encode() + b"." + h["webhook-timestamp"].encode() + b"." + raw
        want = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        return any(s.split(",", 1)[1] == want for s in h["webhook-signature"].split(" "))
    if d in ("claude-code", "openclaw", "poke"):
        return h.get("authorization") == "Bearer " + SECRET
    if d == "hermes":
        return h.get("x-webhook-signature") == hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
    return True
class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path == "/_status":
            state["status"] = int(raw)
            self.send_response(204); self.end_headers(); return
        h = {k.lower(): v for k, v in self.headers.items()}
        try:
            sdk = verify_webhook(VerifyWebhookOptions(payload=raw, signature=h.get("x-agentchat-signature"), secret=SECRET))
        except WebhookVerificationError as e:
            sdk = {"error": e.reason}
        rec = {"path": self.path, "sdk": sdk, "dialect_ok": dialect_ok(self.path, h, raw),
               "headers": h, "body": json.loads(raw), "answered": state["status"]}
        with lock:
            print(json.dumps(rec), flush=True)
        self.send_response(state["status"]); self.end_headers()
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(json.dumps({"port": srv.server_address[1]}), flush=True)
threading.Thread(target=srv.serve_forever, daemon=True).start()
sys.stdin.read()
"#;

/// A running receiver: its base URL and what it has recorded so far.
struct Receiver {
    base: String,
    got: Arc<Mutex<Vec<Value>>>,
    _child: tokio::process::Child,
    http: reqwest::Client,
}

impl Receiver {
    async fn start(s: &Sim, secret: &str) -> Option<Receiver> {
        let mut cmd = s.python_child(PY_RECEIVER, &[("SECRET", secret)])?;
        let out = cmd.stdout.take().unwrap();
        let mut lines = BufReader::new(out).lines();
        let first = lines
            .next_line()
            .await
            .unwrap()
            .expect("the receiver says its port");
        let port = serde_json::from_str::<Value>(&first).unwrap()["port"].clone();
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        tokio::spawn(async move {
            while let Ok(Some(l)) = lines.next_line().await {
                sink.lock().unwrap().push(serde_json::from_str(&l).unwrap());
            }
        });
        Some(Receiver {
            base: format!("http://127.0.0.1:{port}"),
            got,
            _child: cmd,
            http: reqwest::Client::new(),
        })
    }
    fn url(&self, dialect: &str) -> String {
        format!("{}/hook/{dialect}", self.base)
    }
    /// What the receiver answers from now on.
    async fn answer(&self, status: u16) {
        self.http
            .post(format!("{}/_status", self.base))
            .body(status.to_string())
            .send()
            .await
            .unwrap();
    }
    fn all(&self) -> Vec<Value> {
        self.got.lock().unwrap().clone()
    }
    /// Waits (10 s at most) until `n` wakes were received; all of them.
    async fn wait(&self, n: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let all = self.all();
            if all.len() >= n {
                return all;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} wakes of {n}: {all:?}",
                all.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    /// The `n`-th wake (1-based), once it came, after checking it as every wake is checked.
    async fn nth(&self, n: usize) -> Value {
        let w = self.wait(n).await[n - 1].clone();
        checked(&w);
        w
    }
}

/// Every wake: the SDK's verifier accepted it, the dialect's credential held, and the payload
/// (the body, or the payload a text-taking dialect carries in its text) is v1.
fn checked(w: &Value) {
    assert!(w["sdk"].get("error").is_none(), "the SDK refused it: {w}");
    assert_eq!(w["dialect_ok"], true, "{w}");
    assert_eq!(w["headers"]["content-type"], "application/json");
}

/// The v1 payload of a JSON dialect's wake (its body).
fn payload(w: &Value) -> &Value {
    &w["body"]
}

/// A sim with alice and bob, a receiver, and bob subscribed in `dialect` with `extra` fields.
async fn subscribed(dialect: &str, extra: Value) -> Option<(Sim, Agent, Agent, Receiver)> {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let r = Receiver::start(&s, SECRET).await?;
    put(&s, &bob, &r, dialect, extra).await;
    Some((s, alice, bob, r))
}

const SECRET: &str = "whsec_c2ltLXdlYmhvb2stc2VjcmV0LWJ5dGVz";

async fn put(s: &Sim, a: &Agent, r: &Receiver, dialect: &str, extra: Value) -> Value {
    let mut body = json!({"url": r.url(dialect), "secret": SECRET, "dialect": dialect});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let resp = s
        .raw(reqwest::Method::PUT, &a.key, "/v1/agents/me/wake-webhook")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.json().await.unwrap()
}

/// The sim's own view of the agent's deliveries (`GET /_sim/agents/{h}/webhook`).
async fn view(s: &Sim, a: &Agent) -> Value {
    s.get(None, &format!("/_sim/agents/{}/webhook", a.handle))
        .await
        .1
}

/// Attempts the sim has sent to `a`'s subscription so far (each clock step updates it before
/// it answers).
async fn sent(s: &Sim, a: &Agent) -> u64 {
    view(s, a).await["sent"].as_u64().unwrap()
}

#[tokio::test]
async fn wake_webhook_put_shows_on_agents_me_without_its_secret_rewake_defaults_true_and_delete_removes_it()
 {
    let (s, _alice, bob) = alice_and_bob(1.0).await;
    let script = r#"
bob = client(os.environ["BOB"])
out = {}
out["before"] = bob.get_me()["wake_webhook"]
out["put"] = bob._put("/v1/agents/me/wake-webhook", {"url": "https://example.invalid/hook", "secret": "s3cret", "dialect": "claude-code", "prompt": "Check AgentChat."})
out["me"] = bob.get_me()["wake_webhook"]
out["again"] = bob._put("/v1/agents/me/wake-webhook", {"url": "https://example.invalid/hook", "secret": "s3cret", "rewake": False})
out["bad_dialect"] = err(lambda: bob._put("/v1/agents/me/wake-webhook", {"url": "https://x.invalid", "secret": "s", "dialect": "carrier-pigeon"}))
out["bad_url"] = err(lambda: bob._put("/v1/agents/me/wake-webhook", {"url": "ftp://x.invalid", "secret": "s"}))
out["no_secret"] = err(lambda: bob._put("/v1/agents/me/wake-webhook", {"url": "https://x.invalid"}))
out["deleted"] = bob._del("/v1/agents/me/wake-webhook")
out["after"] = bob.get_me()["wake_webhook"]
out["test_without"] = err(lambda: bob._post("/v1/agents/me/wake-webhook/test"))
print(json.dumps(out))
"#;
    let Some(v) = s.python(script, &[("BOB", &bob.key)]).await else {
        return;
    };
    assert!(v["before"].is_null(), "{v}");
    let me = &v["me"];
    assert_eq!(me["url"], "https://example.invalid/hook");
    assert_eq!(
        (&me["dialect"], &me["prompt"], &me["rewake"]),
        (
            &json!("claude-code"),
            &json!("Check AgentChat."),
            &json!(true)
        )
    );
    assert!(
        !v.to_string().contains("s3cret"),
        "the secret is never shown: {v}"
    );
    assert_eq!(
        (&v["again"]["dialect"], &v["again"]["rewake"]),
        (&json!("agentchat"), &json!(false))
    );
    for k in ["bad_dialect", "bad_url", "no_secret"] {
        assert_eq!(
            (v[k]["status"].as_u64(), v[k]["code"].as_str()),
            (Some(400), Some("VALIDATION_ERROR")),
            "{k}: {v}"
        );
    }
    assert_eq!(v["deleted"], json!({"deleted": true}));
    assert!(v["after"].is_null());
    assert_eq!(v["test_without"]["status"], 404);
}

#[tokio::test]
async fn every_dialect_frames_and_signs_its_wakes_so_the_python_sdks_verifier_accepts_them() {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let Some(r) = Receiver::start(&s, SECRET).await else {
        return;
    };
    let mut n = 0;
    for dialect in DIALECTS {
        put(&s, &bob, &r, dialect, json!({})).await;
        // A test wake, answered with the receiver's status.
        let (st, t) = s
            .post(Some(&bob.key), "/v1/agents/me/wake-webhook/test", json!({}))
            .await;
        assert_eq!(
            (st, &t["status"], &t["accepted"]),
            (200, &json!(200), &json!(true)),
            "{t}"
        );
        n += 1;
        let w = r.nth(n).await;
        assert_eq!(w["path"], format!("/hook/{dialect}"));
        // A messages wake (the spacing after the test wake is a minute of server time).
        let m = s.send(&alice, &bob, &format!("a note in {dialect}")).await;
        s.advance(MIN).await;
        n += 1;
        let w2 = r.nth(n).await;
        let text_taking = !matches!(dialect, "agentchat" | "standard-webhooks");
        for (w, reason) in [(&w, "test"), (&w2, "messages")] {
            let sdk = &w["sdk"];
            assert_eq!(
                &w["body"], sdk,
                "the SDK's verifier returns the body it checked"
            );
            let text = match dialect {
                "claude-code" => {
                    assert_eq!(
                        w["headers"]["anthropic-beta"],
                        "experimental-cc-routine-2026-04-01"
                    );
                    assert_eq!(w["body"].as_object().unwrap().len(), 1, "{w}");
                    w["body"]["text"].as_str().unwrap().to_string()
                }
                "openclaw" => {
                    assert_eq!(w["body"]["mode"], "now");
                    w["body"]["text"].as_str().unwrap().to_string()
                }
                _ => {
                    let p = payload(w);
                    assert_eq!(
                        (&p["type"], &p["version"], &p["reason"], &p["handle"]),
                        (
                            &json!("agentchat.wake"),
                            &json!(1),
                            &json!(reason),
                            &json!("@bob")
                        ),
                        "{w}"
                    );
                    assert_eq!(p["delivery_id"].as_str().unwrap().len(), 36);
                    assert!(p["ts"].is_string() && p["summary"].is_string());
                    assert!(p.get("step").is_none(), "step only on unanswered");
                    if reason == "test" {
                        assert_eq!(
                            (&p["test"], &p["conversations"]),
                            (&json!(true), &json!([]))
                        );
                    } else {
                        assert_eq!(
                            p["conversations"],
                            json!([{"id": m["conversation_id"], "unread": 1, "latest_sender": "@alice"}])
                        );
                        assert!(
                            !p.to_string().contains(&format!("a note in {dialect}")),
                            "never a body"
                        );
                    }
                    p["text"].as_str().unwrap_or("").to_string()
                }
            };
            if text_taking {
                let id = w["headers"]["x-agentchat-delivery"].as_str().unwrap();
                let parts: Vec<&str> = text.split("\n\n").collect();
                assert_eq!(parts.len(), 3, "summary, instruction, cycle line: {text}");
                assert!(parts[0].starts_with("AgentChat"), "{text}");
                assert!(
                    parts[1].contains("agentchat_inbox") && !parts[1].contains("mcp__"),
                    "bare tool names: {text}"
                );
                assert_eq!(
                    parts[2],
                    format!(
                        "(AgentChat wake cycle {id}, attempt 1. This text carries no message content.)"
                    )
                );
            }
            if dialect == "standard-webhooks" {
                assert_eq!(w["headers"]["webhook-id"], w["body"]["delivery_id"]);
            }
        }
        // Read it, so the next dialect starts from a quiet agent.
        s.read(&bob, m["conversation_id"].as_str().unwrap(), json!({}))
            .await;
    }
}

/// `a` pulls every message waiting for it (sync, then ack through the last): delivered, not
/// read.
async fn pull(s: &Sim, a: &Agent) {
    let (_, rows) = s.get(Some(&a.key), "/v1/messages/sync").await;
    let last = rows.as_array().unwrap().last().unwrap()["delivery_id"].clone();
    let (st, v) = s
        .post(
            Some(&a.key),
            "/v1/messages/sync/ack",
            json!({"last_delivery_id": last}),
        )
        .await;
    assert!(st == 200 && v["acked"].as_u64().unwrap() > 0, "{v}");
}

/// The delivery ids of wakes `from..=to` (1-based).
fn ids(all: &[Value], from: usize, to: usize) -> Vec<String> {
    all[from - 1..to]
        .iter()
        .map(|w| payload(w)["delivery_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn no_wake_webhook_while_a_socket_is_online_or_a_held_request_is_live_or_60_s_after_one_returned_something()
 {
    let (s, alice, bob, carol) = alice_bob_and_carol(1.0).await;
    let Some(r) = Receiver::start(&s, SECRET).await else {
        return;
    };
    put(&s, &bob, &r, "agentchat", json!({})).await;
    // Without `rewake`: her pending invite's rung 2 would be a wake of its own in the middle.
    put(&s, &carol, &r, "agentchat", json!({"rewake": false})).await;
    // A socket online: bob's message is pushed there (never acked) and no webhook goes.
    let mut ws = s.ear(&bob, "ack").await;
    let m = s.send(&alice, &bob, "for the socket").await;
    s.advance(5 * MIN).await;
    assert_eq!(sent(&s, &bob).await, 0);
    drop(ws.ws.close(None).await);
    let w = r.nth(1).await;
    assert_eq!(payload(&w)["handle"], "@bob");
    assert_eq!(payload(&w)["conversations"][0]["id"], m["conversation_id"]);
    // Read: bob's cycle is over, so what follows is carol's alone.
    s.read(&bob, m["conversation_id"].as_str().unwrap(), json!({}))
        .await;
    // A held request live: an invite does not end a held sync, and no webhook goes meanwhile
    // (held 4 real seconds: the two calls below happen inside it on a loaded machine too).
    let held = s.raw(
        reqwest::Method::GET,
        &carol.key,
        "/v1/messages/sync?wait_ms=4000",
    );
    let held = tokio::spawn(async move { held.send().await.unwrap().status().as_u16() });
    s.wait_state(&carol, "a held sync", |st| st["held_requests"] == 1)
        .await;
    s.make_group(json!({"owner": alice.handle, "name": "crew", "invite": [carol.handle]}))
        .await;
    s.advance(5 * MIN).await;
    assert_eq!(
        sent(&s, &carol).await,
        0,
        "a held request counts as present"
    );
    assert_eq!(held.await.unwrap(), 200);
    // It returned nothing: the invite's wake goes at once.
    let w = r.nth(2).await;
    assert_eq!(
        (&payload(&w)["handle"], &payload(&w)["reason"]),
        (&json!("@carol"), &json!("invite"))
    );
    // A held request that returned something keeps the agent present for 60 s more.
    let held = s.raw(
        reqwest::Method::GET,
        &carol.key,
        "/v1/messages/sync?wait_ms=20000",
    );
    let held =
        tokio::spawn(async move { held.send().await.unwrap().json::<Value>().await.unwrap() });
    s.wait_state(&carol, "a held sync", |st| st["held_requests"] == 1)
        .await;
    s.send(&alice, &carol, "for the held read").await;
    assert_eq!(held.await.unwrap().as_array().unwrap().len(), 1);
    s.advance(40_000).await;
    assert_eq!(
        sent(&s, &carol).await,
        1,
        "present for 60 s after a held read returned something"
    );
    s.advance(25_000).await;
    let w = r.nth(3).await;
    assert_eq!(
        (&payload(&w)["handle"], &payload(&w)["reason"]),
        (&json!("@carol"), &json!("messages"))
    );
}

#[tokio::test]
async fn new_messages_wake_at_most_once_a_minute_and_the_spacing_grows_to_5_then_30_min_while_nothing_is_pulled()
 {
    let Some((s, alice, bob, r)) = subscribed("agentchat", json!({})).await else {
        return;
    };
    s.send(&alice, &bob, "one").await;
    r.nth(1).await;
    // What arrives inside the minute comes with the wake at its end.
    s.send(&alice, &bob, "two").await;
    s.send(&alice, &bob, "three").await;
    s.advance(50_000).await;
    assert_eq!(
        sent(&s, &bob).await,
        1,
        "not sooner than 60 s after the previous wake"
    );
    s.advance(15_000).await;
    let w = r.nth(2).await;
    assert_eq!(payload(&w)["conversations"][0]["unread"], 3, "{w}");
    // Two accepted wakes, nothing pulled: 5 minutes.
    s.send(&alice, &bob, "four").await;
    s.advance(4 * MIN).await;
    assert_eq!(
        sent(&s, &bob).await,
        2,
        "5 min after two accepted wakes with nothing pulled"
    );
    s.advance(90_000).await;
    r.nth(3).await;
    // From the third: 30 minutes.
    s.send(&alice, &bob, "five").await;
    s.advance(29 * MIN).await;
    assert_eq!(sent(&s, &bob).await, 3, "30 min from the third");
    s.advance(2 * MIN).await;
    let all = r.wait(4).await;
    let distinct: std::collections::BTreeSet<String> = ids(&all, 1, 4).into_iter().collect();
    assert_eq!(
        distinct.len(),
        4,
        "each wake after something new is a new cycle: {all:?}"
    );
    // The first pull brings it back to 60 s.
    pull(&s, &bob).await;
    s.send(&alice, &bob, "six").await;
    s.advance(65_000).await;
    let w = r.nth(5).await;
    assert_eq!(payload(&w)["reason"], "messages");
}

#[tokio::test]
async fn a_wake_not_pulled_is_retried_1_5_30_min_and_3_h_later_under_one_delivery_id_until_the_cycle_ends_after_24_h()
 {
    // Without `rewake`: the unanswered rungs (another test's) stay out of the count.
    let Some((s, alice, bob, r)) = subscribed("standard-webhooks", json!({"rewake": false})).await
    else {
        return;
    };
    r.answer(503).await;
    s.send(&alice, &bob, "are you there?").await;
    r.nth(1).await;
    let mut expect = 1;
    for (wait, answer) in [(MIN, 503), (5 * MIN, 200), (30 * MIN, 200), (3 * HOUR, 503)] {
        s.advance(wait - 5_000).await;
        assert_eq!(sent(&s, &bob).await, expect, "not before {wait} ms");
        r.answer(answer).await;
        s.advance(10_000).await;
        expect += 1;
        r.nth(expect as usize).await;
    }
    let all = r.wait(5).await;
    let one = ids(&all, 1, 5);
    assert!(
        one.iter().all(|id| *id == one[0]),
        "one cycle, one delivery_id: {one:?}"
    );
    let attempts: Vec<&str> = all
        .iter()
        .map(|w| w["headers"]["x-agentchat-attempt"].as_str().unwrap())
        .collect();
    assert_eq!(attempts, ["1", "2", "3", "4", "5"]);
    // 24 h after its first wake with nothing pulled, the cycle is over.
    s.advance(21 * HOUR).await;
    assert_eq!(sent(&s, &bob).await, 5, "{}", view(&s, &bob).await);
    assert!(view(&s, &bob).await["cycle"].is_null());
    s.advance(6 * HOUR).await;
    assert_eq!(sent(&s, &bob).await, 5);
    // Something new starts a fresh cycle.
    s.send(&alice, &bob, "now?").await;
    let w = r.nth(6).await;
    assert_ne!(payload(&w)["delivery_id"].as_str().unwrap(), one[0]);
}

#[tokio::test]
async fn an_invite_rides_a_running_cycles_next_wake_and_gets_its_own_when_no_cycle_brings_it() {
    let (s, alice, bob, carol) = alice_bob_and_carol(1.0).await;
    let Some(r) = Receiver::start(&s, SECRET).await else {
        return;
    };
    // Without `rewake`: the pending invites' unanswered rungs stay out of it.
    put(&s, &bob, &r, "hermes", json!({"rewake": false})).await;
    // No cycle running: the invite wakes at once, on its own, naming no conversation.
    s.make_group(json!({"owner": carol.handle, "name": "guild", "invite": [bob.handle]}))
        .await;
    let w = r.nth(1).await;
    let p = payload(&w);
    assert_eq!(
        (&p["reason"], &p["conversations"]),
        (&json!("invite"), &json!([]))
    );
    assert_eq!(
        p["summary"],
        "AgentChat wake for @bob: @carol invited you to the group guild."
    );
    assert!(
        p["text"]
            .as_str()
            .unwrap()
            .contains("agentchat_respond_to_invite"),
        "the invite prompt: {p}"
    );
    // A cycle of messages running: a new invite comes with its next wake, a new cycle.
    s.send(&alice, &bob, "hello").await;
    s.advance(65_000).await;
    let first = payload(&r.nth(2).await)["delivery_id"].clone();
    s.make_group(json!({"owner": carol.handle, "name": "crew", "invite": [bob.handle]}))
        .await;
    assert_eq!(sent(&s, &bob).await, 2, "within the spacing");
    s.advance(65_000).await;
    let w = r.nth(3).await;
    assert_eq!(payload(&w)["reason"], "messages");
    assert_ne!(
        payload(&w)["delivery_id"],
        first,
        "something new after a wake: a fresh id"
    );
    // Carried: once the agent pulls, nothing more comes for it.
    s.read(
        &bob,
        payload(&w)["conversations"][0]["id"].as_str().unwrap(),
        json!({}),
    )
    .await;
    s.advance(HOUR).await;
    assert_eq!(sent(&s, &bob).await, 3);
    // The cycle ends before a wake after the invite was accepted: the invite gets its own.
    s.send(&alice, &bob, "again").await;
    s.advance(65_000).await;
    r.nth(4).await;
    r.answer(500).await;
    s.make_group(json!({"owner": carol.handle, "name": "late", "invite": [bob.handle]}))
        .await;
    s.advance(65_000).await;
    assert_eq!(r.nth(5).await["answered"], 500, "refused: not carried");
    r.answer(200).await;
    pull(&s, &bob).await;
    let w = r.nth(6).await;
    assert_eq!(payload(&w)["reason"], "invite");
    assert!(payload(&w)["summary"].as_str().unwrap().contains("late"));
}

#[tokio::test]
async fn unanswered_rungs_reach_a_rewake_webhook_from_rung_2_only_after_2_minutes_without_calls_and_never_a_rewake_false_one()
 {
    let (s, alice, bob, carol) = alice_bob_and_carol(1.0).await;
    let Some(r) = Receiver::start(&s, SECRET).await else {
        return;
    };
    put(&s, &bob, &r, "openclaw", json!({})).await;
    put(&s, &carol, &r, "poke", json!({"rewake": false})).await;
    let m = s.send(&alice, &bob, "unanswered?").await;
    let c = s.send(&alice, &carol, "unanswered too?").await;
    r.wait(2).await;
    // Both pull without answering: the new-message cycles end, the cards stay unanswered.
    for (a, msg) in [(&bob, &m), (&carol, &c)] {
        pull(&s, a).await;
        assert_eq!(s.cards(a).await[0]["preview"]["message_id"], msg["id"]);
    }
    // Rung 1 (1 min) is the sockets' only; at 4 min bob makes a call: rung 2 (5 min) waits.
    s.advance(4 * MIN).await;
    assert_eq!(s.get(Some(&bob.key), "/v1/agents/me").await.0, 200);
    s.advance(90_000).await;
    assert_eq!(
        sent(&s, &bob).await,
        1,
        "a call in the last 2 minutes holds the rung back"
    );
    s.advance(MIN).await;
    let w = r.nth(3).await;
    let text = w["body"]["text"].as_str().unwrap();
    assert!(w["path"].as_str().unwrap().ends_with("/openclaw"), "{w}");
    assert!(
        text.starts_with(
            "AgentChat wake for @bob: items on your tray are still unanswered: @alice: 1 unread in "
        ),
        "{text}"
    );
    assert!(text.contains(m["conversation_id"].as_str().unwrap()));
    let rung2 = view(&s, &bob).await["deliveries"][1].clone();
    assert_eq!(
        (&rung2["reason"], &rung2["slot"]),
        (&json!("unanswered"), &json!("rung"))
    );
    let ladder = s.state(&bob).await["ladder"]["fired"].clone();
    assert_eq!(
        ladder,
        json!([{"step": 2, "at": ladder[0]["at"], "at_ms": ladder[0]["at_ms"], "via": "webhook"}])
    );
    // Rungs 3 (30 min) and 4 (3 h), each a fresh delivery, then nothing.
    s.advance(25 * MIN).await;
    r.nth(4).await;
    s.advance(3 * HOUR).await;
    let all = r.wait(5).await;
    let fired = s.state(&bob).await["ladder"]["fired"].clone();
    let steps: Vec<&Value> = fired
        .as_array()
        .unwrap()
        .iter()
        .map(|f| &f["step"])
        .collect();
    assert_eq!(steps, [&json!(2), &json!(3), &json!(4)]);
    let rung_ids: std::collections::BTreeSet<&str> = all[2..5]
        .iter()
        .map(|w| w["headers"]["x-agentchat-delivery"].as_str().unwrap())
        .collect();
    assert_eq!(rung_ids.len(), 3, "fresh for every rung");
    s.advance(24 * HOUR).await;
    assert_eq!(
        r.all().len(),
        5,
        "after rung 4, nothing; and nothing for rewake: false"
    );
    assert_eq!(sent(&s, &carol).await, 1);
}

#[tokio::test]
async fn a_put_wakes_for_what_is_waiting_the_same_receiver_keeps_its_cycle_and_a_new_one_gets_a_fresh_cycle_at_once()
 {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let Some(r) = Receiver::start(&s, SECRET).await else {
        return;
    };
    let m = s.send(&alice, &bob, "waiting before the PUT").await;
    put(&s, &bob, &r, "agentchat", json!({"rewake": false})).await;
    let first = payload(&r.nth(1).await)["delivery_id"].clone();
    assert_eq!(
        payload(&r.nth(1).await)["conversations"][0]["id"],
        m["conversation_id"]
    );
    // The same URL and dialect again (a new prompt): the running cycle stays, no second wake.
    put(
        &s,
        &bob,
        &r,
        "agentchat",
        json!({"rewake": false, "prompt": "Look at AgentChat."}),
    )
    .await;
    assert_eq!(sent(&s, &bob).await, 1);
    assert_eq!(view(&s, &bob).await["cycle"]["delivery_id"], first);
    // Another dialect is another receiver: a fresh cycle for what waits, due at once.
    put(
        &s,
        &bob,
        &r,
        "claude-code",
        json!({"rewake": false, "prompt": "Look at AgentChat."}),
    )
    .await;
    let w = r.nth(2).await;
    let id = w["headers"]["x-agentchat-delivery"].as_str().unwrap();
    assert_ne!(json!(id), first);
    assert_eq!(
        w["body"]["text"].as_str().unwrap().split("\n\n").nth(1),
        Some("Look at AgentChat."),
        "the prompt replaces the instruction"
    );
}

#[tokio::test]
async fn a_message_during_a_full_pause_wakes_the_webhook_once_the_pause_ends_and_a_reminder_wakes_it_as_reminder()
 {
    let Some((s, alice, bob, r)) = subscribed("agentchat", json!({"rewake": false})).await else {
        return;
    };
    let pause = format!("/_sim/agents/{}/pause", bob.handle);
    s.post(None, &pause, json!({"paused_by_owner": "full"}))
        .await;
    let m = s.send(&alice, &bob, "while paused").await;
    s.advance(10 * MIN).await;
    assert_eq!(sent(&s, &bob).await, 0, "a full-paused agent is not woken");
    s.post(None, &pause, json!({"paused_by_owner": "none"}))
        .await;
    let w = r.nth(1).await;
    assert_eq!(payload(&w)["reason"], "messages");
    // Deferred, then due: a reminder wake (once the agent has pulled, so nothing is undelivered).
    let conv = m["conversation_id"].as_str().unwrap();
    s.get(
        Some(&bob.key),
        &format!("/v1/conversations/{conv}/messages"),
    )
    .await;
    s.decide(
        &bob,
        conv,
        json!({"decision": "defer", "category": "other"}),
    )
    .await;
    s.advance(16 * MIN).await;
    let w = r.nth(2).await;
    let p = payload(&w);
    assert_eq!(p["reason"], "reminder", "{w}");
    assert_eq!(p["conversations"][0]["id"], conv);
    assert!(
        p["summary"]
            .as_str()
            .unwrap()
            .contains("a deferred conversation is due")
    );
}

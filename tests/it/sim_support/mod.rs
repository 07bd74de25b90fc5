//! Helpers for the sim's tests: an in-process sim, a plain HTTP client, and a minimal socket
//! client of the tests' own (tokio-tungstenite), all over real loopback sockets.

use std::time::Duration;

use agentchat::sim::{SimConfig, SimHandle, start};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

pub struct Sim {
    /// Keeps the sim serving for as long as this value lives.
    _handle: SimHandle,
    pub base: String,
    pub http: reqwest::Client,
}

pub async fn sim(time_scale: f64) -> Sim {
    agentchat::sys::tls::install_crypto_provider();
    let handle = start(SimConfig {
        time_scale,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let base = handle.api_base.clone();
    Sim {
        _handle: handle,
        base,
        http: reqwest::Client::new(),
    }
}

/// The usual scene: a sim at `time_scale` with `alice`, who writes, and `bob`, who reads.
pub async fn alice_and_bob(time_scale: f64) -> (Sim, Agent, Agent) {
    let s = sim(time_scale).await;
    let (alice, bob) = (s.agent("alice").await, s.agent("bob").await);
    (s, alice, bob)
}

/// `alice_and_bob` with `carol`, a second writer.
pub async fn alice_bob_and_carol(time_scale: f64) -> (Sim, Agent, Agent, Agent) {
    let (s, alice, bob) = alice_and_bob(time_scale).await;
    let carol = s.agent("carol").await;
    (s, alice, bob, carol)
}

/// The cards (`conversations`) of a tray body.
pub fn cards(tray: &Value) -> Vec<Value> {
    tray["conversations"].as_array().unwrap().clone()
}

pub struct Agent {
    pub handle: String,
    pub key: String,
}

impl Sim {
    pub async fn agent(&self, h: &str) -> Agent {
        let (s, v) = self.post(None, "/_sim/agents", json!({"handle": h})).await;
        assert_eq!(s, 201, "{v}");
        Agent {
            handle: v["handle"].as_str().unwrap().to_string(),
            key: v["api_key"].as_str().unwrap().to_string(),
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        key: Option<&str>,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut rb = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = key {
            rb = rb.bearer_auth(k);
        }
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let v = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap()
        };
        (status, v)
    }
    pub async fn get(&self, key: Option<&str>, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, key, path, None).await
    }
    pub async fn post(&self, key: Option<&str>, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, key, path, Some(body))
            .await
    }
    pub async fn delete(&self, key: Option<&str>, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::DELETE, key, path, None).await
    }

    /// A bare request as `key` for tests that need the headers or a body the helpers above do
    /// not send (raw bytes, `Idempotency-Key`, `Retry-After`).
    pub fn raw(&self, method: reqwest::Method, key: &str, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(key)
    }

    /// A tray read (`GET /v1/inbox?{query}`) started in its own task, for reads that are held
    /// (`wait_ms`): its status, body and how long it took.
    pub fn held_inbox(
        &self,
        a: &Agent,
        query: &str,
    ) -> tokio::task::JoinHandle<(u16, Value, Duration)> {
        let request = self.raw(reqwest::Method::GET, &a.key, &format!("/v1/inbox?{query}"));
        tokio::spawn(async move {
            let t0 = std::time::Instant::now();
            let r = request.send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap(), t0.elapsed())
        })
    }

    /// Marks `conv` read for `a` (`POST /v1/conversations/{conv}/read`).
    pub async fn read(&self, a: &Agent, conv: &str, body: Value) -> (u16, Value) {
        self.post(
            Some(&a.key),
            &format!("/v1/conversations/{conv}/read"),
            body,
        )
        .await
    }

    /// Answers invite `inv` for `a`: `action` is `dismiss` or `accept`.
    pub async fn answer_invite(&self, a: &Agent, inv: &str, action: &str) -> (u16, Value) {
        self.post(
            Some(&a.key),
            &format!("/v1/groups/invites/{inv}/{action}"),
            json!({}),
        )
        .await
    }

    /// Declines invite `inv` for `a` (`DELETE /v1/groups/invites/{inv}`).
    pub async fn decline_invite(&self, a: &Agent, inv: &str) -> (u16, Value) {
        self.delete(Some(&a.key), &format!("/v1/groups/invites/{inv}"))
            .await
    }

    /// Sends `text` from `from` to `to` through the real route; returns the message.
    pub async fn send(&self, from: &Agent, to: &Agent, text: &str) -> Value {
        let (s, v) = self
            .post(
                Some(&from.key),
                "/v1/messages",
                json!({"to": to.handle, "content": {"text": text}}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        v
    }
    pub async fn send_conv(&self, from: &Agent, conv: &str, text: &str) -> Value {
        let (s, v) = self
            .post(
                Some(&from.key),
                "/v1/messages",
                json!({"conversation_id": conv, "content": {"text": text}}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        v
    }
    pub async fn tray(&self, a: &Agent) -> Value {
        let (s, v) = self.get(Some(&a.key), "/v1/inbox?invites=1").await;
        assert_eq!(s, 200, "{v}");
        v
    }
    pub async fn decide(&self, a: &Agent, conv: &str, body: Value) -> (u16, Value) {
        self.post(
            Some(&a.key),
            &format!("/v1/conversations/{conv}/decisions"),
            body,
        )
        .await
    }
    pub async fn state(&self, a: &Agent) -> Value {
        let (s, v) = self
            .get(None, &format!("/_sim/agents/{}/state", a.handle))
            .await;
        assert_eq!(s, 200, "{v}");
        v
    }
    pub async fn connects(&self, a: &Agent) -> Vec<Value> {
        let (_, v) = self
            .get(None, &format!("/_sim/agents/{}/connects", a.handle))
            .await;
        v["connects"].as_array().unwrap().clone()
    }
    pub async fn acks(&self, a: &Agent) -> Vec<Value> {
        let (_, v) = self
            .get(None, &format!("/_sim/agents/{}/acks", a.handle))
            .await;
        v["acks"].as_array().unwrap().clone()
    }
    /// Connects on the header path with `caps`, then waits for `hello.ok` and until the server
    /// holds the socket (so a push that follows reaches it).
    pub async fn ear(&self, a: &Agent, caps: &str) -> Ws {
        let mut ws = self.connect(&a.key, Some(caps)).await;
        ws.expect("hello.ok", 5000).await;
        self.wait_state(a, "the socket", |st| {
            !st["sockets"].as_array().unwrap().is_empty()
        })
        .await;
        ws
    }
    /// The cards of the agent's tray (`GET /v1/inbox`).
    pub async fn cards(&self, a: &Agent) -> Vec<Value> {
        cards(&self.tray(a).await)
    }
    /// `POST /_sim/groups` with `body` (`owner`, `name`, `invite` and/or `members`); the answer.
    pub async fn make_group(&self, body: Value) -> Value {
        let (st, g) = self.post(None, "/_sim/groups", body).await;
        assert_eq!(st, 201, "{g}");
        g
    }
    /// A group `name` owned by `owner` whose `members` were invited and accepted; its id.
    pub async fn group_with(&self, owner: &Agent, name: &str, members: &[&Agent]) -> String {
        let handles: Vec<&str> = members.iter().map(|m| m.handle.as_str()).collect();
        let g = self
            .make_group(json!({"owner": owner.handle, "name": name, "invite": handles}))
            .await;
        for (m, inv) in members.iter().zip(g["invites"].as_array().unwrap()) {
            let id = inv["invite_id"].as_str().unwrap();
            let (st, v) = self
                .post(
                    Some(&m.key),
                    &format!("/v1/groups/invites/{id}/accept"),
                    json!({}),
                )
                .await;
            assert_eq!(st, 200, "{v}");
        }
        g["group_id"].as_str().unwrap().to_string()
    }
    /// A system notice (`event`, by `by`) into group `gid` through the control API.
    pub async fn notice(&self, gid: &str, event: &str, by: &Agent) {
        let (st, v) = self
            .post(
                None,
                &format!("/_sim/groups/{gid}/notice"),
                json!({"event": event, "by": by.handle}),
            )
            .await;
        assert!((200..300).contains(&st), "{v}");
    }
    /// The agent's wake log (every wake the server pushed, with how many sockets got it).
    pub async fn wakes(&self, a: &Agent) -> Vec<Value> {
        let (st, v) = self
            .get(None, &format!("/_sim/agents/{}/wakes", a.handle))
            .await;
        assert_eq!(st, 200, "{v}");
        v["wakes"].as_array().unwrap().clone()
    }
    /// Polls the agent's state until `pred` holds (deadline 10 s).
    pub async fn wait_state(&self, a: &Agent, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let st = self.state(a).await;
            if pred(&st) {
                return st;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {st}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    pub fn ws_url(&self) -> String {
        format!("{}/v1/ws", self.base.replacen("http", "ws", 1))
    }
}

pub struct Ws {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

/// A frame, or how the socket ended.
#[derive(Debug)]
pub enum Got {
    Frame(Value),
    Closed(u16, String),
    Timeout,
}

impl Sim {
    /// Header path: Bearer key, capabilities header when `caps` is `Some`.
    pub async fn connect(&self, key: &str, caps: Option<&str>) -> Ws {
        let mut req = self.ws_url().into_client_request().unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
        if let Some(c) = caps {
            req.headers_mut()
                .insert("x-agentchat-capabilities", c.parse().unwrap());
        }
        let (ws, _) = connect_async(req).await.unwrap();
        Ws { ws }
    }
    /// `connect`, then the server's `hello.ok` (within 5 s): a socket ready for frames.
    pub async fn connect_ok(&self, key: &str, caps: Option<&str>) -> Ws {
        let mut ws = self.connect(key, caps).await;
        ws.expect("hello.ok", 5000).await;
        ws
    }
    /// Two ready sockets for `a`, one with `rewake` and one without, both open on the server.
    pub async fn rewake_and_plain(&self, a: &Agent) -> (Ws, Ws) {
        let re = self.connect_ok(&a.key, Some("ack,rewake")).await;
        let old = self.connect_ok(&a.key, Some("ack")).await;
        self.wait_sockets(a, 2).await;
        (re, old)
    }
    /// Polls the agent's state until the server holds `n` open sockets for it.
    pub async fn wait_sockets(&self, a: &Agent, n: usize) -> Value {
        self.wait_state(a, &format!("{n} sockets"), |st| {
            st["sockets"].as_array().unwrap().len() == n
        })
        .await
    }
    /// Wakes the agent through the control API; the answer (`sockets` reached).
    pub async fn control_wake(&self, a: &Agent, body: Value) -> Value {
        self.post(None, &format!("/_sim/agents/{}/wake", a.handle), body)
            .await
            .1
    }
    /// HELLO path: no auth on the upgrade.
    pub async fn connect_bare(&self) -> Ws {
        let (ws, _) = connect_async(self.ws_url()).await.unwrap();
        Ws { ws }
    }
    /// HELLO path with a hello frame carrying `key` and `caps`.
    pub async fn hello(&self, key: &str, caps: &[&str]) -> Ws {
        let mut ws = self.connect_bare().await;
        ws.send_json(
            json!({"type": "hello", "api_key": key, "capabilities": caps, "client": "sim-test"}),
        )
        .await;
        ws
    }
    /// Sets the agent's per-minute connect budget through the control API.
    pub async fn connect_budget(&self, a: &Agent, per_minute: u32) {
        let (st, v) = self
            .post(
                None,
                &format!("/_sim/agents/{}/budget", a.handle),
                json!({"connects_per_minute": per_minute}),
            )
            .await;
        assert_eq!(st, 200, "{v}");
    }
}

impl Ws {
    pub async fn send_json(&mut self, v: Value) {
        self.ws.send(Message::text(v.to_string())).await.unwrap();
    }
    pub async fn ack(&mut self, id: &str) {
        self.send_json(json!({"type": "ack", "message_id": id}))
            .await;
    }
    /// The next text frame within `ms`, skipping protocol pings and pongs.
    pub async fn next(&mut self, ms: u64) -> Got {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
        loop {
            match tokio::time::timeout_at(deadline, self.ws.next()).await {
                Err(_) => return Got::Timeout,
                Ok(None) | Ok(Some(Err(_))) => return Got::Closed(1006, String::new()),
                Ok(Some(Ok(Message::Text(t)))) => {
                    return Got::Frame(serde_json::from_str(t.as_str()).unwrap());
                }
                Ok(Some(Ok(Message::Close(f)))) => {
                    return match f {
                        Some(f) => Got::Closed(u16::from(f.code), f.reason.to_string()),
                        None => Got::Closed(1005, String::new()),
                    };
                }
                Ok(Some(Ok(_))) => continue,
            }
        }
    }
    /// Reads until a frame of type `ty` (others are skipped), or panics after `ms`.
    pub async fn expect(&mut self, ty: &str, ms: u64) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
        loop {
            let left = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .as_millis() as u64;
            match self.next(left.max(1)).await {
                Got::Frame(f) if f["type"] == ty => return f,
                Got::Frame(_) => continue,
                other => panic!("expected a {ty} frame, got {other:?}"),
            }
        }
    }
    /// Every frame that arrives within `ms` (the socket staying open).
    pub async fn collect(&mut self, ms: u64) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
        let mut out = Vec::new();
        loop {
            let left = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .as_millis() as u64;
            if left == 0 {
                return out;
            }
            match self.next(left).await {
                Got::Frame(f) => out.push(f),
                Got::Timeout => return out,
                Got::Closed(c, r) => panic!("socket closed {c} {r} while collecting {out:?}"),
            }
        }
    }
    /// Waits for the close (panics on a frame-less timeout of `ms`), skipping frames.
    pub async fn closed(&mut self, ms: u64) -> (u16, String) {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
        loop {
            let left = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .as_millis() as u64;
            match self.next(left.max(1)).await {
                Got::Closed(c, r) => return (c, r),
                Got::Frame(_) => continue,
                Got::Timeout => panic!("socket did not close within {ms} ms"),
            }
        }
    }
}

/// The hosted tools the sim serves (`tools/list`), in its order.
pub const MCP_TOOLS: [&str; 13] = [
    "agentchat_inbox",
    "agentchat_wait",
    "agentchat_get_conversation",
    "agentchat_send_message",
    "agentchat_decide",
    "agentchat_mark_read",
    "agentchat_mute",
    "agentchat_list_conversations",
    "agentchat_respond_to_invite",
    "agentchat_get_my_status",
    "agentchat_list_inbox",
    "agentchat_accept_group_invite",
    "agentchat_reject_group_invite",
];

/// What every Python script of `Sim::python` starts with: the official SDK's client
/// (`client(key)`), the control API (`control(method, path, body)`), an SDK error as a dict
/// (`err(f)`: `None` when `f` raises nothing), and `BASE`.
const PY_PRELUDE: &str = r#"
import json, os, sys, time, urllib.request
from agentchatme import AgentChatClient
from agentchatme import errors as E
BASE = os.environ["BASE"]
def control(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, method=method, data=data)
    with urllib.request.urlopen(req) as r:
        return json.load(r)
def client(key):
    return AgentChatClient(api_key=key, base_url=BASE)
def err(f):
    try:
        f()
    except E.AgentChatError as e:
        return {"cls": type(e).__name__, "code": e.code, "status": e.status, "details": dict(e.details or {})}
    return None
"#;

impl Sim {
    /// Runs `script` after `PY_PRELUDE` with the interpreter that has the official Python SDK
    /// (`agentchatme`, `common::test_python`), `BASE` the sim's URL and `env` set; the last line
    /// it prints, as JSON. `None` (the test skips) where no such interpreter exists outside CI.
    pub async fn python(&self, script: &str, env: &[(&str, &str)]) -> Option<Value> {
        Some(py_result(self.python_child(script, env)?).await)
    }

    /// `python`, started and left running (stdout piped) while the test drives the sim; its
    /// result with `py_result`.
    pub fn python_child(
        &self,
        script: &str,
        env: &[(&str, &str)],
    ) -> Option<tokio::process::Child> {
        let python = crate::common::test_python()?;
        let mut cmd = tokio::process::Command::new(python);
        cmd.args(["-c", &format!("{PY_PRELUDE}\n{script}")])
            .env("BASE", &self.base)
            .env("WS_BASE", self.base.replacen("http", "ws", 1))
            // Held open: a script that serves until the test ends reads it to its end.
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Some(cmd.spawn().unwrap())
    }
}

/// The last line a `Sim::python_child` printed, as JSON, once it exits 0 (within 90 s).
pub async fn py_result(child: tokio::process::Child) -> Value {
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("the Python script finishes within 90 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

impl Sim {
    /// Steps the sim's server clock `ms` forward (`POST /_sim/clock`).
    pub async fn advance(&self, ms: u64) {
        let (st, v) = self
            .post(None, "/_sim/clock", json!({"advance_ms": ms}))
            .await;
        assert_eq!(st, 200, "{v}");
    }
}

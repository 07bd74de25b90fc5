//! `GET /v1/ws` (contract 3.4): both auth paths, capability negotiation, the connect budget
//! (`1013 rate_limited; retry_after=<s>` after accepting the upgrade), `1008 Invalid token`,
//! `4426 upgrade required` for a socket without `ack` once that is switched off (contract 7),
//! ack-held delivery, protocol pings with a pong deadline, `heartbeat` frames, silence.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

use super::clock::{SEC, now_iso};
use super::error::Rejection;
use super::http::Sim;
use super::model::{Out, SocketEntry};
use super::store::Store;

pub const KNOWN_CAPS: [&str; 3] = ["ack", "heartbeat", "rewake"];
pub const HEARTBEAT_MS: u64 = 45 * SEC;
pub const PONG_DEADLINE_MS: u64 = 30 * SEC;
pub const HELLO_TIMEOUT_MS: u64 = 5 * SEC;

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// A refused upgrade answers in the sim's one error shape, like every other route.
fn plain(status: u16, text: &str) -> Response<Full<Bytes>> {
    super::http::into_response(Rejection::new(status, "VALIDATION_ERROR", text).into())
}

/// Answers the upgrade (101) and runs the socket on its own task; the connect budget is the
/// peer's IP's (contract 3.4). While a restart refuses upgrades, 503 (`restart`).
pub fn upgrade(sim: Sim, mut req: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
    if sim.lock().refuse_upgrade_while_restarting() {
        return super::http::into_response(
            Rejection::new(503, "SERVICE_UNAVAILABLE", "the server is restarting").into(),
        );
    }
    let ip = peer.ip();
    let h = req.headers();
    let is_ws = h
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = h.get("sec-websocket-key").map(|v| v.as_bytes().to_vec()) else {
        return plain(400, "a WebSocket upgrade (Sec-WebSocket-Key) is required");
    };
    if !is_ws {
        return plain(426, "Upgrade: websocket is required");
    }
    let bearer = h
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string());
    let caps_header = h
        .get("x-agentchat-capabilities")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .map(|s| s.trim().to_string())
                .collect::<Vec<_>>()
        });
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(up) = on_upgrade.await {
            let ws = WebSocketStream::from_raw_socket(TokioIo::new(up), Role::Server, None).await;
            run(sim, ws, ip, bearer, caps_header).await;
        }
    });
    Response::builder()
        .status(101)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", derive_accept_key(&key))
        .body(Full::new(Bytes::new()))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

async fn close(ws: &mut Ws, code: u16, reason: &str) {
    let frame = CloseFrame {
        code: code.into(),
        reason: reason.into(),
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(Some(frame))).await;
}

fn accepted_caps(asked: &[String]) -> Vec<String> {
    let set: BTreeSet<String> = asked
        .iter()
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| KNOWN_CAPS.contains(&c.as_str()))
        .collect();
    set.into_iter().collect()
}

enum Auth {
    Ok {
        handle: String,
        caps: Vec<String>,
        hello_ok: bool,
        path: &'static str,
    },
    Refused,
}

/// Checks the budget and the key; closes the socket when refused.
async fn admit(
    sim: &Sim,
    ws: &mut Ws,
    ip: IpAddr,
    key: &str,
    path: &'static str,
    caps: &[String],
) -> Option<String> {
    let refusal = match admission(&mut sim.lock(), ip, key, path, caps) {
        Ok(handle) => return Some(handle),
        Err(r) => r,
    };
    tracing::info!("sim: socket refused: {} {}", refusal.code, refusal.reason);
    close(ws, refusal.code, &refusal.reason).await;
    None
}

/// An upgrade the server accepted and closes at once: the close code and its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    pub reason: String,
}

/// Whether a socket opening from `ip` with `key` may stay (contract 3.4, 7): the budgets (per IP
/// first, then per agent), the key, and `4426` for a socket without `ack` once that is switched
/// off. The attempt is counted and logged either way; the agent on success. The simulator
/// (`crate::simulate`) opens its sockets through this too.
pub fn admission(
    s: &mut Store,
    ip: IpAddr,
    key: &str,
    path: &'static str,
    caps: &[String],
) -> Result<String, Refusal> {
    let now = s.now_v();
    let clock = s.clock.clone();
    let refusal = if let Err(wait) = s.ip_budgets.attempt(ip, now) {
        (
            None,
            1013,
            format!("rate_limited; retry_after={}", clock.real_secs_ceil(wait)),
        )
    } else {
        match s.key_owner(key) {
            None => (None, 1008, "Invalid token".to_string()),
            // HELLO path: the budget is checked right after authentication, so a refused
            // key never reaches it. Bearer path: checked before the key is looked up, so
            // every attempt counts (3.4).
            Some((h, false)) if path == "hello" => (Some(h), 1008, "Invalid token".to_string()),
            Some((h, good)) => {
                let budget = s.agents.get_mut(&h).map(|a| a.connect_budget.attempt(now));
                match budget {
                    Some(Err(wait)) => (
                        Some(h),
                        1013,
                        format!("rate_limited; retry_after={}", clock.real_secs_ceil(wait)),
                    ),
                    _ if !good => (Some(h), 1008, "Invalid token".to_string()),
                    _ if s.agents.get(&h).is_some_and(|a| a.suspended) => {
                        (Some(h), 1008, "Account suspended".to_string())
                    }
                    // Contract 7: once `socket_without_ack` is off, a socket that did not
                    // negotiate `ack` is closed `4426` (`old_paths`).
                    _ if !caps.iter().any(|c| c == "ack")
                        && s.old_paths.socket_without_ack_off() =>
                    {
                        (Some(h), 4426, "upgrade required".to_string())
                    }
                    _ => {
                        s.log_connect(&h, path, "accepted", None, caps);
                        return Ok(h);
                    }
                }
            }
        }
    };
    let (h, code, reason) = refusal;
    s.count_refused(code);
    if let Some(h) = h {
        s.log_connect(&h, path, "refused", Some(&reason), caps);
    }
    Err(Refusal { code, reason })
}

async fn authenticate(
    sim: &Sim,
    ws: &mut Ws,
    ip: IpAddr,
    bearer: Option<String>,
    caps_header: Option<Vec<String>>,
) -> Auth {
    if let Some(v) = bearer {
        let key = match v.split_once(' ') {
            Some((scheme, k)) if scheme.eq_ignore_ascii_case("bearer") => k.trim().to_string(),
            _ => String::new(),
        };
        let caps = accepted_caps(caps_header.as_deref().unwrap_or(&[]));
        return match admit(sim, ws, ip, &key, "header", &caps).await {
            Some(handle) => Auth::Ok {
                handle,
                caps,
                hello_ok: caps_header.is_some(),
                path: "header",
            },
            None => Auth::Refused,
        };
    }
    // HELLO path: a hello frame within 5 s (server clock).
    // Floor of 500 ms so a real client (the Python SDK) can say hello at any time scale.
    let wait = sim
        .clock
        .real(HELLO_TIMEOUT_MS)
        .max(Duration::from_millis(500));
    let first = tokio::time::timeout(wait, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => return Some(t.to_string()),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                _ => return None,
            }
        }
    })
    .await;
    let text = match first {
        Err(_) => {
            close(ws, 1008, "HELLO frame required").await;
            return Auth::Refused;
        }
        Ok(None) => return Auth::Refused,
        Ok(Some(t)) => t,
    };
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let key = match (
        v.get("type").and_then(Value::as_str),
        v.get("api_key").and_then(Value::as_str),
    ) {
        (Some("hello"), Some(k)) => k.to_string(),
        _ => {
            close(ws, 1008, "HELLO frame required first").await;
            return Auth::Refused;
        }
    };
    let asked: Vec<String> = v
        .get("capabilities")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let caps = accepted_caps(&asked);
    match admit(sim, ws, ip, &key, "hello", &caps).await {
        Some(handle) => Auth::Ok {
            handle,
            caps,
            hello_ok: true,
            path: "hello",
        },
        None => Auth::Refused,
    }
}

async fn run(
    sim: Sim,
    mut ws: Ws,
    ip: IpAddr,
    bearer: Option<String>,
    caps_header: Option<Vec<String>>,
) {
    let (handle, caps, hello_ok, path) =
        match authenticate(&sim, &mut ws, ip, bearer, caps_header).await {
            Auth::Ok {
                handle,
                caps,
                hello_ok,
                path,
            } => (handle, caps, hello_ok, path),
            Auth::Refused => return,
        };
    if hello_ok {
        let frame = json!({"type": "hello.ok", "capabilities": caps}).to_string();
        if ws.send(Message::text(frame)).await.is_err() {
            return;
        }
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (id, mut hold) = {
        let mut s = sim.lock();
        let id = s.next_socket_id();
        let entry = SocketEntry {
            id,
            caps: caps.iter().cloned().collect(),
            tx,
            silenced: false,
            path,
            connected_at: now_iso(),
        };
        s.attach_socket(&handle, entry);
        let hold = s.agents.get(&handle).map(|a| a.hold.subscribe());
        (id, hold)
    };
    tracing::info!("sim: socket {id} accepted for @{handle} ({path}, capabilities {caps:?})");
    let ack = caps.iter().any(|c| c == "ack");
    let heartbeat = caps.iter().any(|c| c == "heartbeat");
    // Floor of 50 ms so a very high time scale cannot flood the socket with pings.
    let mut ping =
        tokio::time::interval(sim.clock.real(HEARTBEAT_MS).max(Duration::from_millis(50)));
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    let pong_deadline = sim.clock.real(PONG_DEADLINE_MS).max(Duration::from_secs(2));
    let mut awaiting_pong: Option<tokio::time::Instant> = None;
    let mut shutdown = sim.shutdown.clone();
    let mut silenced = false;
    loop {
        if silenced {
            // Send nothing, read nothing (so not even an automatic pong goes out).
            tokio::select! {
                out = rx.recv() => match out {
                    Some(Out::Close(code, reason)) => { close(&mut ws, code, &reason).await; break; }
                    Some(Out::Drop) | None => break,
                    Some(_) => continue,
                },
                _ = shutdown.changed() => break,
            }
        }
        tokio::select! {
            msg = ws.next() => match msg {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                    if ack
                        && v.get("type").and_then(Value::as_str) == Some("ack")
                        && let Some(mid) = v.get("message_id").and_then(Value::as_str)
                    {
                        sim.lock().record_ack(&handle, mid);
                    } else {
                        sim.lock().relay_typing(&handle, &v);
                    }
                }
                Some(Ok(Message::Pong(_))) => awaiting_pong = None,
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
            // While the agent is held, the queue is not read: frames wait in order.
            out = rx.recv(), if !hold.as_ref().is_some_and(|h| *h.borrow()) => match out {
                Some(Out::Frame(f)) => {
                    if ws.send(Message::text(f)).await.is_err() { break; }
                }
                Some(Out::Message { id, frame }) => {
                    if ws.send(Message::text(frame)).await.is_err() { break; }
                    sim.lock().record_send(&handle, &id);
                }
                Some(Out::Close(code, reason)) => { close(&mut ws, code, &reason).await; break; }
                Some(Out::Silence) => silenced = true,
                Some(Out::Drop) | None => break,
            },
            _ = ping.tick() => {
                if let Some(since) = awaiting_pong
                    && since.elapsed() > pong_deadline
                {
                    close(&mut ws, 1001, "Heartbeat timeout").await;
                    break;
                }
                if ws.send(Message::Ping(Bytes::new())).await.is_err() { break; }
                awaiting_pong.get_or_insert_with(tokio::time::Instant::now);
                if heartbeat {
                    let f = json!({"type": "heartbeat", "payload": {"at": now_iso()}}).to_string();
                    if ws.send(Message::text(f)).await.is_err() { break; }
                }
            },
            r = crate::sys::wait::some(hold.as_mut().map(|h| h.changed())) => {
                // The agent (and its hold switch) is gone only when the sim is.
                if r.is_err() { break; }
            }
            _ = shutdown.changed() => { close(&mut ws, 1001, "Server shutting down").await; break; }
        }
    }
    sim.lock().detach_socket(&handle, id);
    tracing::info!("sim: socket {id} of @{handle} ended");
}

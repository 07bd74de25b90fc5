//! The socket task (design 2): connects with the Bearer key and `ack,heartbeat,rewake`, drives
//! `core::engine` with every frame, hands wakes to the main loop and acks once the main loop has
//! registered them, drops a silent socket, and reconnects after the delay `core::reconnect` names.
//! It runs apart from cycles, so a long run never delays frames, acks or heartbeats. It never
//! ends because of the network; only shutdown ends it.

use crate::client::{Api, ApiError, CLIENT_NAME, CLIENT_VERSION};
use crate::core::engine::{Engine, WakeCause};
use crate::core::reconnect::{self, Backoff, CloseKind};
use futures_util::{SinkExt, StreamExt};
use secrecy::{ExposeSecret, SecretString};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::{
    self, Message, client::IntoClientRequest, protocol::CloseFrame,
    protocol::frame::coding::CloseCode,
};

/// Frames larger than this are skipped unread (design 2).
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const DEDUPE_CAPACITY: usize = 4096;

/// What the socket task needs; replaced on reload.
#[derive(Clone)]
pub struct SocketParams {
    pub api_base: String,
    pub key: SecretString,
    /// The listener's one REST client for this configuration (`GET /v1/agents/me`).
    pub api: Api,
    pub idle_timeout: Duration,
    pub key_refused_retry: Duration,
    /// The listener's metrics (a no-op registry for `--once`).
    pub metrics: std::sync::Arc<super::metrics::Metrics>,
}

impl SocketParams {
    fn same_endpoint(&self, other: &SocketParams) -> bool {
        self.api_base == other.api_base && self.key.expose_secret() == other.key.expose_secret()
    }
}

/// The socket's state, for the status file.
pub use crate::core::status::SocketState;

/// What the socket tells the main loop.
#[derive(Debug)]
pub enum SocketEvent {
    /// The handle from `GET /v1/agents/me` (bare).
    Handle(String),
    State {
        state: SocketState,
        next_retry_at: Option<SystemTime>,
        detail: Option<String>,
    },
    Connected,
    /// Any inbound frame (proof of life).
    Frame,
    Skipped,
    /// A wake; the main loop answers on `registered` once the coalescer has it, and only then
    /// is the message acked.
    Wake {
        cause: WakeCause,
        registered: oneshot::Sender<()>,
    },
    Acked,
}

/// The ws(s) URL for an API base: `http` -> `ws`, `https` -> `wss`, plus `/v1/ws`.
pub fn ws_url(api_base: &str) -> String {
    let base = api_base.trim_end_matches('/');
    let rest = if let Some(r) = base.strip_prefix("https://") {
        format!("wss://{r}")
    } else if let Some(r) = base.strip_prefix("http://") {
        format!("ws://{r}")
    } else {
        base.to_string()
    };
    format!("{rest}/v1/ws")
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How one connection ended.
enum Ended {
    Shutdown,
    Reconfigured,
    Closed(CloseKind, String),
}

/// Runs until `shutdown` turns true.
pub async fn run(
    mut params_rx: watch::Receiver<SocketParams>,
    events: mpsc::Sender<SocketEvent>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut engine = Engine::new("", DEDUPE_CAPACITY);
    let mut backoff = Backoff::default();
    let mut handle_known_for: Option<SocketParams> = None;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let params = params_rx.borrow_and_update().clone();
        send_state(&events, SocketState::Connecting, None, None).await;

        // Who am I: before the first connect and after every key or base change.
        let kind: CloseKind;
        let mut detail: String;
        let known = handle_known_for
            .as_ref()
            .is_some_and(|p| p.same_endpoint(&params));
        let me_result = if known {
            Ok(())
        } else {
            let Some(r) = or_shutdown(params.api.me(), &mut shutdown).await else {
                return;
            };
            match r {
                Ok(h) => {
                    engine.set_own_handle(&h);
                    let _ = events.send(SocketEvent::Handle(h)).await;
                    handle_known_for = Some(params.clone());
                    Ok(())
                }
                Err(e) => Err(e),
            }
        };
        match me_result {
            Err(ApiError::Refused(status)) => {
                kind = CloseKind::KeyRefused;
                detail = format!("GET /v1/agents/me answered HTTP {status}");
            }
            Err(e) => {
                kind = CloseKind::Ordinary;
                detail = format!("GET /v1/agents/me failed: {e}");
            }
            Ok(()) => {
                let started = Instant::now();
                let Some(connected) = or_shutdown(connect(&params), &mut shutdown).await else {
                    return;
                };
                match connected {
                    Ok(ws) => {
                        tracing::info!(event = %"socket_connected", url = %ws_url(&params.api_base), "socket connected");
                        params.metrics.connect_accepted();
                        let _ = events.send(SocketEvent::Connected).await;
                        send_state(&events, SocketState::Connected, None, None).await;
                        match read_loop(
                            ws,
                            &mut engine,
                            &params,
                            &mut params_rx,
                            &events,
                            &mut shutdown,
                        )
                        .await
                        {
                            Ended::Shutdown => return,
                            // A new key or API base: connect again now, no backoff.
                            Ended::Reconfigured => continue,
                            Ended::Closed(k, d) => {
                                kind = k;
                                detail = d;
                            }
                        }
                        backoff.connection_lasted(started.elapsed());
                    }
                    Err((k, d)) => {
                        kind = k;
                        detail = d;
                    }
                }
            }
        }

        if kind == CloseKind::KeyRefused {
            // The handle is asked for again with the next key.
            handle_known_for = None;
        }
        params.metrics.socket_down(&kind);
        let delay = reconnect::delay_after(
            &kind,
            &mut backoff,
            params.key_refused_retry,
            fastrand::f64(),
        );
        let next = SystemTime::now() + delay;
        let state = match &kind {
            CloseKind::KeyRefused => {
                tracing::error!(
                    event = %"key_refused",
                    retry_in_ms = delay.as_millis() as u64,
                    detail = %detail,
                    "the server refused the API key; check AGENTCHAT_API_KEY or api_key_file, then send SIGHUP (systemctl --user reload) to retry at once"
                );
                SocketState::KeyRefused
            }
            CloseKind::Budget { retry_after_s } => {
                tracing::warn!(
                    event = %"connect_budget",
                    retry_after_s = *retry_after_s,
                    retry_in_ms = delay.as_millis() as u64,
                    "connect budget exhausted; waiting as the server asked"
                );
                SocketState::Backoff
            }
            CloseKind::UpgradeRequired => {
                tracing::error!(
                    event = %"upgrade_required",
                    retry_in_ms = delay.as_millis() as u64,
                    "the server requires a newer client (close 4426); update agentchat"
                );
                SocketState::Backoff
            }
            CloseKind::Ordinary => {
                tracing::info!(event = %"backoff", retry_in_ms = delay.as_millis() as u64, detail = %detail, "socket down; reconnecting after a delay");
                SocketState::Backoff
            }
        };
        if detail.is_empty() {
            detail = state.as_str().to_string();
        }
        send_state(&events, state, Some(next), Some(detail)).await;

        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                r = shutdown.changed() => {
                    if r.is_err() || *shutdown.borrow() { return; }
                }
                r = params_rx.changed() => {
                    if r.is_err() { return; }
                    // A reload retries at once only a refused key; the server's budget delay
                    // and the ordinary backoff are never undercut.
                    if kind == CloseKind::KeyRefused {
                        tracing::info!(event = %"key_retry", "configuration reloaded; retrying the key now");
                        break;
                    }
                }
            }
        }
    }
}

async fn send_state(
    events: &mpsc::Sender<SocketEvent>,
    state: SocketState,
    next_retry_at: Option<SystemTime>,
    detail: Option<String>,
) {
    let _ = events
        .send(SocketEvent::State {
            state,
            next_retry_at,
            detail,
        })
        .await;
}

async fn connect(params: &SocketParams) -> Result<Ws, (CloseKind, String)> {
    let url = ws_url(&params.api_base);
    tracing::debug!(event = %"socket_connecting", url = %url, "connecting");
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| (CloseKind::Ordinary, format!("bad socket URL: {e}")))?;
    let h = req.headers_mut();
    let bearer = format!("Bearer {}", params.key.expose_secret());
    let Ok(auth) = tungstenite::http::HeaderValue::from_str(&bearer) else {
        return Err((
            CloseKind::KeyRefused,
            "the API key has characters a header cannot carry".into(),
        ));
    };
    h.insert(tungstenite::http::header::AUTHORIZATION, auth);
    h.insert(
        "x-agentchat-capabilities",
        tungstenite::http::HeaderValue::from_static("ack,heartbeat,rewake"),
    );
    h.insert(
        "X-AgentChat-Client",
        tungstenite::http::HeaderValue::from_static(CLIENT_NAME),
    );
    h.insert(
        "X-AgentChat-Client-Version",
        tungstenite::http::HeaderValue::from_static(CLIENT_VERSION),
    );
    let connector = crate::sys::tls::client_config().map(|tls| {
        let mut ws_tls = (*tls).clone();
        ws_tls.alpn_protocols.clear();
        tokio_tungstenite::Connector::Rustls(std::sync::Arc::new(ws_tls))
    });
    let fut = tokio_tungstenite::connect_async_tls_with_config(req, None, true, connector);
    match tokio::time::timeout(CONNECT_TIMEOUT, fut).await {
        Err(_) => Err((CloseKind::Ordinary, "connect timed out".into())),
        Ok(Ok((ws, _resp))) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(resp))) => {
            let status = resp.status().as_u16();
            let kind = reconnect::classify_upgrade_status(status);
            let detail = if kind == CloseKind::KeyRefused {
                format!("the upgrade was refused with HTTP {status}")
            } else {
                format!("the upgrade was answered HTTP {status}")
            };
            Err((kind, detail))
        }
        Ok(Err(e)) => Err((CloseKind::Ordinary, format!("connect failed: {e}"))),
    }
}

/// Reads frames until the socket ends, the watchdog fires, or shutdown.
async fn read_loop(
    mut ws: Ws,
    engine: &mut Engine,
    params: &SocketParams,
    params_rx: &mut watch::Receiver<SocketParams>,
    events: &mpsc::Sender<SocketEvent>,
    shutdown: &mut watch::Receiver<bool>,
) -> Ended {
    // Each (re)connect is one wake (contract 4 step 1).
    if !register_wake(events, WakeCause::Connected, shutdown).await {
        close_normal(&mut ws).await;
        return Ended::Shutdown;
    }
    loop {
        let next = tokio::select! {
            r = shutdown.changed() => {
                if r.is_err() || *shutdown.borrow() {
                    close_normal(&mut ws).await;
                    return Ended::Shutdown;
                }
                continue;
            }
            r = params_rx.changed() => {
                if r.is_err() {
                    close_normal(&mut ws).await;
                    return Ended::Shutdown;
                }
                let changed = !params_rx.borrow_and_update().same_endpoint(params);
                if changed {
                    tracing::info!(event = %"reconnect", "the API base or key changed; reconnecting");
                    close_normal(&mut ws).await;
                    return Ended::Reconfigured;
                }
                continue;
            }
            n = tokio::time::timeout(params.idle_timeout, ws.next()) => n,
        };
        let msg = match next {
            Err(_) => {
                tracing::warn!(
                    event = %"watchdog_drop",
                    idle_ms = params.idle_timeout.as_millis() as u64,
                    "no inbound traffic within the idle timeout; dropping the socket"
                );
                return Ended::Closed(CloseKind::Ordinary, "idle watchdog".into());
            }
            Ok(None) => {
                tracing::info!(
                    event = %"socket_closed",
                    code = 1006u16,
                    "socket ended without a close frame"
                );
                return Ended::Closed(CloseKind::Ordinary, "socket ended".into());
            }
            Ok(Some(Err(e))) => {
                tracing::info!(event = %"socket_closed", error = %e, "socket error");
                return Ended::Closed(CloseKind::Ordinary, format!("socket error: {e}"));
            }
            Ok(Some(Ok(m))) => m,
        };
        let _ = events.send(SocketEvent::Frame).await;
        params.metrics.frame(&msg);
        let text = match msg {
            Message::Text(t) => t,
            Message::Close(frame) => {
                let (code, reason) = frame
                    .map(|f| (u16::from(f.code), f.reason.to_string()))
                    .unwrap_or((1005, String::new()));
                let kind = reconnect::classify_close(code, &reason);
                tracing::info!(event = %"socket_closed", code, reason = %truncate(&reason, 120), kind = ?kind, "server closed the socket");
                return Ended::Closed(kind, format!("closed {code} {}", truncate(&reason, 120)));
            }
            Message::Ping(_) | Message::Pong(_) => continue,
            Message::Binary(b) => {
                tracing::warn!(
                    event = %"frame_skipped",
                    bytes = b.len(),
                    why = "binary",
                    "binary frame skipped"
                );
                let _ = events.send(SocketEvent::Skipped).await;
                continue;
            }
            Message::Frame(_) => continue,
        };
        if text.len() > MAX_FRAME_BYTES {
            tracing::warn!(
                event = %"frame_skipped",
                bytes = text.len(),
                why = "oversized",
                "frame over 1 MiB skipped"
            );
            let _ = events.send(SocketEvent::Skipped).await;
            continue;
        }
        if tracing::enabled!(tracing::Level::DEBUG) {
            log_frame(text.as_str());
        }
        let action = engine.on_text(text.as_str());
        if let Some(err) = &action.malformed {
            tracing::warn!(event = %"frame_skipped", bytes = text.len(), why = %err, "malformed frame skipped");
            let _ = events.send(SocketEvent::Skipped).await;
        }
        if let Some(caps) = &action.hello {
            match caps {
                Some(c) => {
                    tracing::info!(event = %"hello", capabilities = %c.join(","), "server accepted capabilities")
                }
                None => {
                    tracing::info!(
                        event = %"hello",
                        capabilities = "",
                        "pre-v1 server: no capabilities listed"
                    )
                }
            }
        }
        if let Some(cause) = action.wake.clone() {
            tracing::info!(event = %"wake", reason = %cause.label(), message_id = action.ack.as_deref().unwrap_or(""), "wake");
            if !register_wake(events, cause, shutdown).await {
                close_normal(&mut ws).await;
                return Ended::Shutdown;
            }
        }
        if let Some(id) = action.ack {
            let frame = crate::core::frames::ack_frame(&id);
            if let Err(e) = ws.send(Message::Text(frame.into())).await {
                tracing::info!(event = %"socket_closed", error = %e, "ack could not be sent");
                return Ended::Closed(CloseKind::Ordinary, format!("send failed: {e}"));
            }
            tracing::debug!(event = %"ack", message_id = %id, "acked");
            let _ = events.send(SocketEvent::Acked).await;
        }
    }
}

/// `--once`: connects, handles the frames that arrive within `settle` (acking pushed messages:
/// the cycle that follows reads the same tray), then closes with 1000. Returns the handle.
pub async fn connect_once(params: &SocketParams, settle: Duration) -> Result<String, String> {
    let handle = params.api.me().await.map_err(|e| match e {
        ApiError::Refused(s) => format!("the server refused the API key (HTTP {s})"),
        other => format!("GET /v1/agents/me failed: {other}"),
    })?;
    let mut engine = Engine::new(&handle, DEDUPE_CAPACITY);
    let mut ws = connect(params).await.map_err(|(kind, d)| match kind {
        CloseKind::KeyRefused => format!("the server refused the API key: {d}"),
        _ => d,
    })?;
    tracing::info!(event = %"socket_connected", url = %ws_url(&params.api_base), "socket connected");
    let deadline = tokio::time::Instant::now() + settle;
    loop {
        let msg = match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => break,
            Ok(None) => return Err("the socket closed right after connecting".into()),
            Ok(Some(Err(e))) => return Err(format!("socket error: {e}")),
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) if t.len() <= MAX_FRAME_BYTES => {
                let action = engine.on_text(t.as_str());
                if let Some(id) = action.ack {
                    let _ = ws
                        .send(Message::Text(crate::core::frames::ack_frame(&id).into()))
                        .await;
                }
            }
            Message::Close(frame) => {
                let (code, reason) = frame
                    .map(|f| (u16::from(f.code), f.reason.to_string()))
                    .unwrap_or((1005, String::new()));
                return Err(match reconnect::classify_close(code, &reason) {
                    CloseKind::KeyRefused => {
                        format!("the server refused the API key (close {code})")
                    }
                    CloseKind::Budget { retry_after_s } => {
                        format!("connect budget exhausted; retry after {retry_after_s} s")
                    }
                    _ => format!(
                        "the server closed the socket ({code} {})",
                        truncate(&reason, 120)
                    ),
                });
            }
            _ => {}
        }
    }
    close_normal(&mut ws).await;
    Ok(handle)
}

/// Debug: the frame's type and ids, never its content.
fn log_frame(text: &str) {
    use crate::core::frames::ServerFrame;
    match ServerFrame::parse(text) {
        Ok(ServerFrame::MessageNew(m)) => {
            tracing::debug!(event = %"frame", frame_type = "message.new", message_id = %m.id, conversation_id = m.conversation_id.as_deref().unwrap_or(""), sender = m.sender.as_deref().unwrap_or(""), kind = m.kind.as_deref().unwrap_or(""), "frame")
        }
        Ok(ServerFrame::Wake { reason, step }) => {
            tracing::debug!(event = %"frame", frame_type = "wake", reason = %reason, step = step.unwrap_or(0), "frame")
        }
        Ok(ServerFrame::GroupInviteReceived { invite_id }) => {
            tracing::debug!(event = %"frame", frame_type = "group.invite.received", invite_id = invite_id.as_deref().unwrap_or(""), "frame")
        }
        Ok(ServerFrame::HelloOk { .. }) => {
            tracing::debug!(event = %"frame", frame_type = "hello.ok", "frame")
        }
        Ok(ServerFrame::GroupDeleted) => {
            tracing::debug!(event = %"frame", frame_type = "group.deleted", "frame")
        }
        Ok(ServerFrame::Heartbeat) => {
            tracing::debug!(event = %"frame", frame_type = "heartbeat", "frame")
        }
        Ok(ServerFrame::Other { kind }) => {
            tracing::debug!(event = %"frame", frame_type = %truncate(&kind, 64), "frame")
        }
        Err(_) => {}
    }
}

/// Runs `fut` unless shutdown comes first (`None`): a hanging server never delays a stop.
async fn or_shutdown<T>(
    fut: impl std::future::Future<Output = T>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<T> {
    tokio::select! {
        v = fut => Some(v),
        _ = shutdown.wait_for(|s| *s) => None,
    }
}

/// Hands a wake to the main loop and waits until it is registered. False on shutdown.
async fn register_wake(
    events: &mpsc::Sender<SocketEvent>,
    cause: WakeCause,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let (tx, rx) = oneshot::channel();
    if events
        .send(SocketEvent::Wake {
            cause,
            registered: tx,
        })
        .await
        .is_err()
    {
        return false;
    }
    tokio::select! {
        r = rx => r.is_ok(),
        _ = shutdown.wait_for(|s| *s) => false,
    }
}

async fn close_normal(ws: &mut Ws) {
    let frame = CloseFrame {
        code: CloseCode::Normal,
        reason: "listener stopping".into(),
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(Some(frame))).await;
    // Drain until the server's close answer so the close handshake completes.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ws_url_follows_the_api_base_scheme() {
        assert_eq!(
            ws_url("https://api.agentchat.me"),
            "wss://api.agentchat.me/v1/ws"
        );
        assert_eq!(ws_url("http://127.0.0.1:9/"), "ws://127.0.0.1:9/v1/ws");
        assert_eq!(ws_url("http://h/prefix"), "ws://h/prefix/v1/ws");
    }
}

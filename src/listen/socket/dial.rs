//! Dialling the socket: the upgrade request, its answers, and `--once`'s single connection.

use super::proxy;
use super::{DialParams, READ_BUFFER_BYTES, Ws, close_normal};
use crate::client::{ApiError, CLIENT_NAME, CLIENT_VERSION};
use crate::core::engine::{DEFAULT_DEDUPE_CAPACITY, Engine};
use crate::core::frames::MAX_FRAME_BYTES;
use crate::core::listener::socket::truncate;
use crate::core::listener::{DialError, NotReached, ws_url};
use crate::core::reconnect::{self, CloseKind};
use crate::listen::driver::convert::{misconfigured_line, unreachable_line};
use crate::log_events;
use futures_util::{SinkExt, StreamExt};
use secrecy::ExposeSecret;
use std::time::Duration;
use tokio_tungstenite::tungstenite::{
    self, Message, client::IntoClientRequest, protocol::WebSocketConfig,
};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn connect(params: &DialParams) -> Result<Ws, DialError> {
    let url = ws_url(&params.api_base);
    tracing::debug!(event = %log_events::SOCKET_CONNECTING, url = %url, "connecting");
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| DialError::Closed(CloseKind::Ordinary, format!("bad socket URL: {e}")))?;
    let h = req.headers_mut();
    let bearer = format!("Bearer {}", params.key.expose_secret());
    let Ok(auth) = tungstenite::http::HeaderValue::from_str(&bearer) else {
        return Err(DialError::Closed(
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
    let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER_BYTES);
    let proxy = proxy::for_socket(&url);
    let fut = async {
        let Some(p) = &proxy else {
            let direct = tokio_tungstenite::connect_async_tls_with_config(
                req,
                Some(config),
                true,
                connector,
            );
            return Ok(direct.await);
        };
        // Through the proxy REST takes (`proxy`): a `CONNECT` tunnel, then the same upgrade
        // (and TLS for wss://) over it.
        let host = req.uri().host().unwrap_or_default().to_string();
        let port = req
            .uri()
            .port_u16()
            .unwrap_or(if url.starts_with("wss://") { 443 } else { 80 });
        tracing::debug!(event = %log_events::SOCKET_PROXY, proxy = %proxy::shown(p), "tunnelling the socket through the proxy");
        let stream =
            proxy::tunnel(p, host.trim_start_matches('[').trim_end_matches(']'), port).await?;
        Ok(
            tokio_tungstenite::client_async_tls_with_config(req, stream, Some(config), connector)
                .await,
        )
    };
    let answer = match tokio::time::timeout(CONNECT_TIMEOUT, fut).await {
        Err(elapsed) => Err(elapsed),
        Ok(Err::<_, proxy::TunnelError>(tunnel)) => {
            return Err(DialError::NotReached(NotReached::Unreachable(
                unreachable_line(&params.api_base, &tunnel.to_string()),
            )));
        }
        Ok(Ok(answer)) => Ok(answer),
    };
    match answer {
        Err(_) => Err(DialError::NotReached(NotReached::Unreachable(
            unreachable_line(
                &params.api_base,
                &format!(
                    "the socket upgrade got no answer within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ),
            ),
        ))),
        Ok(Ok((ws, _resp))) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(resp))) => Err(upgrade_answered(&params.api_base, &resp)),
        Ok(Err(e)) => Err(connect_failed(&params.api_base, e)),
    }
}

/// An HTTP answer instead of the upgrade: a refused key (401, 403), the ordinary backoff (429,
/// 408; a 429's `Retry-After` waited, never less: issue 29 item 15), an outage (5xx), else a
/// wrong `api_base` (a 404 page, say): `/v1/ws` always exists.
fn upgrade_answered(
    api_base: &str,
    resp: &tungstenite::http::Response<Option<Vec<u8>>>,
) -> DialError {
    let status = resp.status().as_u16();
    match reconnect::classify_upgrade_status(status) {
        CloseKind::KeyRefused => DialError::Closed(
            CloseKind::KeyRefused,
            format!("the upgrade was refused with HTTP {status}"),
        ),
        _ if status == 429 => {
            let wait = resp
                .headers()
                .get(tungstenite::http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(crate::client::parse_retry_after_header);
            let detail = format!("the upgrade was answered HTTP {status}");
            match wait {
                Some(wait) => DialError::Throttled(
                    wait,
                    format!(
                        "{detail}; retry after {} s",
                        wait.as_secs_f64().ceil() as u64
                    ),
                ),
                None => DialError::Closed(CloseKind::Ordinary, detail),
            }
        }
        _ if status >= 500 => DialError::NotReached(NotReached::Unreachable(format!(
            "{api_base} answered the socket upgrade with HTTP {status}"
        ))),
        kind if status == 408 || status == 429 || !(400..500).contains(&status) => {
            DialError::Closed(kind, format!("the upgrade was answered HTTP {status}"))
        }
        _ => {
            let content_type = crate::client::content_type(resp.headers());
            let body = resp.body().as_deref().unwrap_or_default();
            let what = match crate::client::judge_answer(status, content_type, body) {
                Err(ApiError::Status { status, code }) => {
                    format!("answered HTTP {status} {code} to GET /v1/ws")
                }
                Err(e) => e.to_string(),
                Ok(()) => format!("answered HTTP {status} to GET /v1/ws"),
            };
            DialError::NotReached(NotReached::Misconfigured(misconfigured_line(
                api_base, &what,
            )))
        }
    }
}

/// A connect that got no HTTP answer: nothing answered (an outage), or something else failed.
fn connect_failed(api_base: &str, e: tungstenite::Error) -> DialError {
    let unreachable = |what: String| {
        DialError::NotReached(NotReached::Unreachable(unreachable_line(api_base, &what)))
    };
    match e {
        tungstenite::Error::Io(io) => match crate::client::io_problem(io.kind()) {
            Some(what) => unreachable(what.to_string()),
            None => unreachable(io.to_string()),
        },
        tungstenite::Error::Tls(t) => unreachable(format!("the TLS handshake failed: {t}")),
        e => DialError::Closed(CloseKind::Ordinary, format!("connect failed: {e}")),
    }
}

/// `--once`: connects, handles the frames that arrive within `settle` (acking pushed messages:
/// the cycle that follows reads the same tray), then closes with 1000. Returns the handle.
pub async fn connect_once(
    params: &DialParams,
    api: &crate::client::Api,
    settle: Duration,
) -> Result<String, String> {
    let handle = api.me().await.map_err(|e| match e {
        ApiError::Refused(s) => format!("the server refused the API key (HTTP {s})"),
        other => crate::listen::driver::convert::not_reached(&params.api_base, &other)
            .detail()
            .to_string(),
    })?;
    let mut engine = Engine::new(&handle, DEFAULT_DEDUPE_CAPACITY);
    let mut ws = connect(params).await.map_err(|ended| match ended {
        DialError::Closed(CloseKind::KeyRefused, d) => {
            format!("the server refused the API key: {d}")
        }
        DialError::Closed(_, d) | DialError::Throttled(_, d) => d,
        DialError::NotReached(n) => n.detail().to_string(),
    })?;
    tracing::info!(event = %log_events::SOCKET_CONNECTED, url = %ws_url(&params.api_base), "socket connected");
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

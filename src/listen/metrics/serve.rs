//! The loopback HTTP endpoint: `/metrics`, `/healthz`, `/readyz`.
//!
//! Any local user can connect to it, so it holds little for anyone (docs/decisions.md,
//! "Bounded answers and connections"): at most `MAX_CONNECTIONS` at once (one more is closed at
//! once, unread), the request's head within `HEADER_READ_TIMEOUT` and at most
//! `MAX_BUF_BYTES`, one request per connection, and every connection closed
//! `CONNECTION_LIFETIME` after it was accepted whatever it is doing (a client that never reads
//! its answer included). Half-sent requests can then never eat the listener's descriptors.

use super::{Metrics, Registry, Verdict};
use crate::log_events;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Whether `addr` may be served without `metrics_public = true`.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Connections served at once; one more is closed at once, without reading it. A scraper and a
/// few probes need a handful.
pub const MAX_CONNECTIONS: usize = 32;
/// How long a connection may take to send its request's head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long any connection lives (one request each: no keep-alive, so none idles).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);
/// hyper's read buffer per connection (its minimum is 8 KiB): a request head is a few hundred
/// bytes.
const MAX_BUF_BYTES: usize = 16 * 1024;
/// The pause after a failed `accept` (descriptors exhausted, say), so the loop never spins.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(200);

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the endpoint for every profile of `registry` on `addr` until `shutdown` turns true. A
/// bind that fails (the port is taken) is logged and tried again every 10 s: the listener itself
/// keeps working either way.
pub async fn serve(
    registry: Arc<Registry>,
    addr: SocketAddr,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut logged = false;
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) => {
                if !logged {
                    tracing::error!(event = %log_events::METRICS_BIND_FAILED, addr = %addr, error = %e, "cannot serve metrics on this address; trying again every 10 s");
                    logged = true;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
        }
    };
    serve_listener(registry, listener, shutdown).await
}

/// Serves the endpoint on a bound socket until `shutdown` turns true.
pub async fn serve_listener(
    registry: Arc<Registry>,
    listener: tokio::net::TcpListener,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    if let Ok(local) = listener.local_addr() {
        tracing::info!(event = %log_events::METRICS_SERVING, addr = %local, "serving /metrics, /healthz and /readyz");
    }
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut refused_said = false;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!(event = %log_events::METRICS_ACCEPT_FAILED, error = %e, "accept failed; pausing");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if !std::mem::replace(&mut refused_said, true) {
                tracing::warn!(event = %log_events::METRICS_CONNECTIONS_FULL, max = MAX_CONNECTIONS, "metrics endpoint: too many connections at once; closing the extra ones unread (said once)");
            }
            drop(stream);
            continue;
        };
        let m = registry.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let m = m.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&m, &req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .keep_alive(false)
                .max_buf_size(MAX_BUF_BYTES)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
            drop(slot);
        });
    }
}

type Body = http_body_util::Full<hyper::body::Bytes>;

fn answer<B>(m: &Registry, req: &hyper::Request<B>) -> hyper::Response<Body> {
    let reply = |code: u16, ctype: &str, body: String| {
        hyper::Response::builder()
            .status(code)
            .header("content-type", ctype)
            .header("cache-control", "no-store")
            .body(Body::from(body))
            .unwrap_or_default()
    };
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return reply(405, "text/plain", "only GET\n".into());
    }
    match req.uri().path() {
        "/metrics" => reply(200, TEXT_FORMAT, m.render()),
        "/healthz" => probe(reply, req, m.health(), false),
        "/readyz" => probe(reply, req, m.readiness(), true),
        _ => reply(
            404,
            "text/plain",
            "not found: GET /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

/// A probe's answer: JSON with `?format=json` or `Accept: application/json`, else the text
/// (`all`: a line for every profile, not only the failing ones).
fn probe<B>(
    reply: impl Fn(u16, &str, String) -> hyper::Response<Body>,
    req: &hyper::Request<B>,
    v: Verdict,
    all: bool,
) -> hyper::Response<Body> {
    if wants_json(req) {
        reply(v.code, "application/json", v.json())
    } else {
        reply(v.code, "text/plain", v.text(all))
    }
}

fn wants_json<B>(req: &hyper::Request<B>) -> bool {
    let query = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "format=json"));
    let accept = req
        .headers()
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json"));
    query || accept
}

/// Starts [`serve`] as a task when there is an address (`listen.metrics_addr`), for a registry of
/// this one profile: the single listener's endpoint. The address is read once at start: a reload
/// (SIGHUP) does not move the endpoint.
pub fn spawn_server(
    metrics: &Arc<Metrics>,
    addr: Option<SocketAddr>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    if let Some(addr) = addr {
        tokio::spawn(serve(Registry::of_one(metrics.clone()), addr, shutdown));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Over real HTTP: a wedged loop answers 503 with its reason on one line.
    #[tokio::test]
    async fn the_endpoint_answers_each_path_over_http() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let m = Metrics::new("default");
        m.observe_state("connected", "connected");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(serve_listener(
            Registry::of_one(m.clone()),
            listener,
            stop_rx,
        ));
        let get = |path: &'static str| async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            c.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).await.unwrap();
            out
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
        let page = get("/metrics").await;
        assert!(
            page.contains("content-type: text/plain; version=0.0.4"),
            "{page}"
        );
        assert!(page.contains("# TYPE agentchat_wakes_total counter"));
        assert!(get("/nope").await.starts_with("HTTP/1.1 404"));
        m.inner.lock().unwrap().last_turn = Some(Instant::now() - Duration::from_secs(150));
        let wedged = get("/healthz").await;
        assert!(wedged.starts_with("HTTP/1.1 503"), "{wedged}");
        assert!(
            wedged
                .trim_end()
                .ends_with("wedged: the main loop last turned 150 s ago (bound 120 s)"),
            "{wedged}"
        );
    }
}

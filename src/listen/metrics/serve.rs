//! The loopback HTTP endpoint: `/metrics`, `/healthz`, `/readyz`, and the page (`listen::page`:
//! `/`, `/api/...`), which `agentchat dashboard` serves alone ([`Site`]).
//!
//! Any local user can connect to it, so it holds little for anyone (docs/decisions.md,
//! "Bounded answers and connections"): at most `MAX_CONNECTIONS` at once (one more is closed at
//! once, unread), the request's head within `HEADER_READ_TIMEOUT` and at most
//! `MAX_BUF_BYTES`, one request per connection, and every connection closed
//! `CONNECTION_LIFETIME` after it was accepted whatever it is doing (a client that never reads
//! its answer included). Half-sent requests can then never eat the listener's descriptors.

use super::{Metrics, Registry, Verdict};
use crate::listen::page::{self, Page, PageProfile};
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
                    biased;
                    _ = shutdown.wait_for(|s| *s) => return,
                    _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                }
            }
        }
    };
    serve_listener(registry, listener, shutdown).await
}

/// What an endpoint serves: a listener's metrics, probes and the page of its profiles, or
/// `agentchat dashboard`'s page of the config's profiles.
pub enum Site {
    Listener(Arc<Registry>),
    Dashboard {
        page: Arc<Page>,
        profiles: Vec<PageProfile>,
    },
}

impl Site {
    fn page(&self) -> &Arc<Page> {
        match self {
            Site::Listener(r) => &r.page,
            Site::Dashboard { page, .. } => page,
        }
    }

    fn profiles(&self) -> Vec<PageProfile> {
        match self {
            Site::Listener(r) => r.page_profiles(),
            Site::Dashboard { profiles, .. } => profiles.clone(),
        }
    }
}

/// Serves the endpoint on a bound socket until `shutdown` turns true.
pub async fn serve_listener(
    registry: Arc<Registry>,
    listener: tokio::net::TcpListener,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    if let Ok(local) = listener.local_addr() {
        tracing::info!(event = %log_events::METRICS_SERVING, addr = %local, "serving /metrics, /healthz, /readyz and the page at /");
    }
    serve_site(Arc::new(Site::Listener(registry)), listener, shutdown).await
}

/// Serves `site` on a bound socket until `shutdown` turns true. Bound to loopback, the page
/// answers only requests that name a loopback host (`Host:`), so a web page elsewhere cannot
/// read it through a name that resolves to 127.0.0.1 (DNS rebinding).
pub async fn serve_site(
    site: Arc<Site>,
    listener: tokio::net::TcpListener,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let loopback = listener.local_addr().is_ok_and(|a| is_loopback(&a));
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut refused_said = false;
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => return,
            r = listener.accept() => r,
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
        let site = site.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let site = site.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(site, loopback, &req).await) }
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

async fn answer<B>(
    site: Arc<Site>,
    loopback: bool,
    req: &hyper::Request<B>,
) -> hyper::Response<Body> {
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
    let path = req.uri().path();
    if page::serves(path) {
        return page_answer(site, loopback, req).await;
    }
    let Site::Listener(m) = site.as_ref() else {
        return reply(404, "text/plain", "not found: GET / (the page)\n".into());
    };
    match path {
        "/metrics" => reply(200, TEXT_FORMAT, m.render()),
        "/healthz" => probe(reply, req, m.health(), false),
        "/readyz" => probe(reply, req, m.readiness(), true),
        _ => reply(
            404,
            "text/plain",
            "not found: GET /metrics, /healthz, /readyz or / (the page)\n".into(),
        ),
    }
}

/// The page's answer, read on tokio's blocking pool (it reads files); a Host that is not
/// loopback's is refused while the endpoint is bound to loopback.
async fn page_answer<B>(
    site: Arc<Site>,
    loopback: bool,
    req: &hyper::Request<B>,
) -> hyper::Response<Body> {
    let host = req
        .headers()
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if loopback && !loopback_host(host) {
        return hyper::Response::builder()
            .status(421)
            .header("content-type", "text/plain")
            .body(Body::from(
                "the page answers only on a loopback name (127.0.0.1, localhost, [::1])\n",
            ))
            .unwrap_or_default();
    }
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    tokio::spawn(site.page().clone().forget_when_idle());
    let answered = tokio::task::spawn_blocking(move || {
        let profiles = site.profiles();
        site.page().answer(&path, &query, &profiles)
    })
    .await;
    let a = answered.unwrap_or_else(|_| page::Answer {
        code: 500,
        content_type: "text/plain",
        body: "the page could not be read\n".into(),
    });
    let mut b = hyper::Response::builder()
        .status(a.code)
        .header("content-type", a.content_type)
        .header("cache-control", "no-store");
    for (k, v) in page::SECURITY_HEADERS {
        b = b.header(k, v);
    }
    b.body(Body::from(a.body)).unwrap_or_default()
}

/// Whether a `Host` header names this machine's loopback: `127.x.y.z`, `localhost`, `[::1]`,
/// with or without a port.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
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

    #[test]
    fn only_a_loopback_name_is_a_loopback_host() {
        for ok in [
            "127.0.0.1:8077",
            "localhost",
            "LOCALHOST:1",
            "[::1]:9",
            "127.1.2.3",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for no in [
            "attacker.example",
            "10.0.0.1:80",
            "",
            "localhost.example:1",
            "[::2]",
        ] {
            assert!(!loopback_host(no), "{no}");
        }
    }

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

//! HTTP plumbing: the accept loop, one hyper connection per client (with upgrades for `/v1/ws`),
//! request parsing, and routing by (method, path segments) to the route modules.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::clock::SimClock;
use super::error::{Rejection, SimResult};
use super::store::Store;
use super::{api, control, mcp, ws};

/// Everything the tasks share. The store lock is never held across an await.
pub struct Shared {
    pub store: Mutex<Store>,
    pub clock: SimClock,
    pub shutdown: watch::Receiver<bool>,
    /// The HTTP client wake webhooks go out through (`webhook::client`).
    pub hooks: reqwest::Client,
}

pub type Sim = Arc<Shared>;

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic while holding the lock would poison it; the store is still the best we have.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A parsed request: what the routes need, body already read.
pub struct Req {
    pub method: String,
    pub segs: Vec<String>,
    pub query: BTreeMap<String, String>,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Req {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    /// The Bearer key, if any.
    pub fn bearer(&self) -> Option<&str> {
        let v = self.header("authorization")?.trim();
        let (scheme, key) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then_some(key.trim())
    }
    /// The body as JSON; an empty body is `{}`. Malformed JSON is a 400 naming the problem.
    pub fn json(&self) -> SimResult<Value> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Object(Default::default()));
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| Rejection::validation(format!("Invalid JSON body: {e}")))
    }
    pub fn json_object(&self) -> SimResult<Value> {
        let v = self.json()?;
        if v.is_object() {
            Ok(v)
        } else {
            Err(Rejection::validation("the JSON body must be an object"))
        }
    }
    pub fn query_u64(&self, name: &str) -> SimResult<Option<u64>> {
        match self.query.get(name) {
            None => Ok(None),
            Some(v) if v.is_empty() => Ok(None),
            Some(v) => v.parse::<u64>().map(Some).map_err(|_| {
                Rejection::validation(format!("{name} must be a non-negative integer"))
            }),
        }
    }
}

/// What a route answers.
pub struct Reply {
    pub status: u16,
    pub body: Option<Value>,
    pub headers: Vec<(&'static str, String)>,
}

impl Reply {
    pub fn json(status: u16, body: Value) -> Reply {
        Reply {
            status,
            body: Some(body),
            headers: Vec::new(),
        }
    }
    pub fn ok(body: Value) -> Reply {
        Reply::json(200, body)
    }
    pub fn empty(status: u16) -> Reply {
        Reply {
            status,
            body: None,
            headers: Vec::new(),
        }
    }
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }
}

impl From<Rejection> for Reply {
    fn from(e: Rejection) -> Reply {
        let mut r = Reply::json(e.status, e.body());
        if let Some(s) = e.retry_after {
            r.headers.push(("retry-after", s.to_string()));
        }
        r
    }
}

pub(super) fn into_response(r: Reply) -> Response<Full<Bytes>> {
    let body = match &r.body {
        Some(v) => Bytes::from(v.to_string()),
        None => Bytes::new(),
    };
    let mut b = Response::builder()
        .status(r.status)
        .header("x-request-id", super::clock::new_id("req"));
    if r.body.is_some() {
        b = b.header("content-type", "application/json");
    }
    for (k, v) in &r.headers {
        b = b.header(*k, v.as_str());
    }
    b.body(Full::new(body))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (
                (b[i + 1] as char).to_digit(16),
                (b[i + 2] as char).to_digit(16),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: Option<&str>) -> BTreeMap<String, String> {
    q.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (pct_decode(k), pct_decode(v)),
            None => (pct_decode(p), String::new()),
        })
        .collect()
}

/// Serves until shutdown.
pub async fn serve(sim: Sim, listener: TcpListener) {
    let mut shutdown = sim.shutdown.clone();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("sim: accept failed: {e}");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let sim = sim.clone();
        tokio::spawn(async move {
            let mut shutdown = sim.shutdown.clone();
            let svc_sim = sim.clone();
            let svc = hyper::service::service_fn(move |req| {
                let sim = svc_sim.clone();
                async move { Ok::<_, Infallible>(handle(sim, req, peer).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades();
            tokio::select! {
                _ = conn => {}
                _ = shutdown.changed() => {}
            }
        });
    }
}

async fn handle(sim: Sim, req: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    if path == "/v1/ws" && method == "GET" {
        let resp = ws::upgrade(sim, req, peer);
        tracing::info!("sim: GET /v1/ws -> {}", resp.status().as_u16());
        return resp;
    }
    let query = parse_query(req.uri().query());
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, 1 << 20).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            let r = Reply::from(Rejection::new(
                413,
                "PAYLOAD_TOO_LARGE",
                "the request body is over 1 MiB or broken",
            ));
            return into_response(r);
        }
    };
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(pct_decode)
        .collect();
    let r = Req {
        method: method.clone(),
        segs,
        query,
        headers: parts.headers,
        body,
    };
    let reply = route(&sim, &r).await;
    tracing::info!("sim: {method} {path} -> {}", reply.status);
    into_response(reply)
}

pub(crate) async fn route(sim: &Sim, r: &Req) -> Reply {
    let first = r.segs.first().map(String::as_str);
    match first {
        Some("v1") => api::route(sim, r).await.unwrap_or_else(Reply::from),
        Some("_sim") => control::route(sim, r).await.unwrap_or_else(Reply::from),
        Some("mcp") if r.segs.len() == 1 => mcp::route(sim, r).await,
        _ => not_found(r),
    }
}

pub fn not_found(r: &Req) -> Reply {
    Reply::from(Rejection::not_found(
        "NOT_FOUND",
        format!("no route {} /{}", r.method, r.segs.join("/")),
    ))
}

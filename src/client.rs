//! The few REST calls the listener makes itself (`docs/operating.md`): who am I, the tray, the texts, and an
//! invite dismiss. Thin I/O: every rule about what to do with the answers lives in `core`.
//! Errors never carry the key or a response body (a body could quote message text).

mod answer;
mod deprecation;
mod network;

pub use answer::{
    DISMISS, ERROR_BODY_CAP, INBOX, ME, Route, TEXTS, content_type, judge_answer, media_type,
};
pub use network::{io_problem, network_problem};

use crate::core::texts::Texts;
use crate::core::tray::Tray;
use secrecy::{ExposeSecret, SecretString};
use std::time::Duration;

/// The client name the server buckets us under (an existing value of its low-cardinality taxonomy).
pub const CLIENT_NAME: &str = "coding_agents";
pub const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// One REST timeout for every call: the tray is read without `wait_ms`, so answers are quick.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle keep-alive connections the one client keeps per server. A listener makes one REST call
/// at a time (the socket's `me`, a cycle's tray read), so a few keep that path warm; a host of
/// many profiles that all woke at once keeps no more than these once the burst is over (each
/// idle connection holds its buffers: about 28 KiB apiece, measured with
/// `benches/profile_memory.rs`).
const POOL_IDLE_PER_HOST: usize = 4;

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ApiError {
    /// 401 or 403: the key was refused (or the account is suspended).
    #[error("the server refused the API key (HTTP {0})")]
    Refused(u16),
    /// 407, or a 401/403 that is not AgentChat's (not JSON: tinyproxy answers a wrong proxy
    /// password with `401` and an HTML page): something between here and the server refused
    /// the request, not the server the key (issue 29 item 15).
    #[error("{}", proxy_refusal(*status, content_type.as_deref()))]
    ProxyRefused {
        status: u16,
        content_type: Option<String>,
    },
    /// `REMOVED` (contract 7): the server switched this route off for good; retrying will not
    /// succeed. Names the route and the replacement the server named (`details.replacement`).
    #[error(
        "{route} answered HTTP {status} REMOVED: the server switched this route off{} (contract 7) and names as its replacement: {replacement}; update agentchat",
        removed_on.as_deref().map(|d| format!(" on {d}")).unwrap_or_default()
    )]
    Removed {
        route: &'static str,
        status: u16,
        replacement: String,
        removed_on: Option<String>,
    },
    /// 429 with the wait the server asked for.
    #[error("rate limited; retry after {0:?}")]
    RateLimited(Duration),
    /// Any other non-2xx answer in AgentChat's error shape (`{"code": …, "message": …}`,
    /// contract 7), or a 5xx or 408 in any shape (a proxy in front of the server answers those
    /// for it); `code` is the body's `code` when it had one.
    #[error("HTTP {status} {code}")]
    Status { status: u16, code: String },
    /// An answer that is not AgentChat's: a 2xx that is not JSON, or an error status whose body is
    /// not AgentChat's error shape (an HTML 404 page). The API base points at another server, or
    /// at the wrong path of one: configuration, which a retry does not fix.
    #[error("answered {status} {}: not an AgentChat server", content_type.as_deref().unwrap_or("without a content type"))]
    NotAgentChat {
        status: u16,
        /// The media type without its parameters (`text/html`), when the answer named one.
        content_type: Option<String>,
    },
    /// No answer at all: the connection was refused, the host name does not resolve, the
    /// connect or TLS handshake failed, or the answer did not come in time. One readable line.
    #[error("unreachable: {0}")]
    Network(String),
    /// A 2xx answer we could not parse.
    #[error("unexpected answer: {0}")]
    Body(String),
    /// A 2xx answer larger than its route's cap (`client::Route`): no AgentChat answer is that
    /// large, so the body was dropped unread past the cap. Names the route, the status and how
    /// much was read, never the body.
    #[error(
        "answered {route} with HTTP {status} and a body over its {} cap (dropped after {} read): not an AgentChat answer",
        crate::sys::fs::show_size(*cap),
        crate::sys::fs::show_size(*read)
    )]
    TooLarge {
        route: &'static str,
        status: u16,
        /// Bytes read when it was dropped (0: its `Content-Length` was over the cap).
        read: u64,
        cap: u64,
    },
    /// An id that no URL path can carry (empty, `.` or `..`); no request was made.
    #[error("the id {0:?} cannot be put into a URL path")]
    BadId(String),
    /// The HTTP client could not be built (its TLS set-up failed); no request was made.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// `ApiError::ProxyRefused`'s line: what answered and what to check, never the proxy URL (it
/// may hold a password).
fn proxy_refusal(status: u16, content_type: Option<&str>) -> String {
    if status == 407 {
        return "a proxy refused its credentials (HTTP 407): check the user and password in the \
                proxy URL (HTTPS_PROXY, HTTP_PROXY)"
            .to_string();
    }
    format!(
        "HTTP {status} with a {} page, not AgentChat's JSON refusal: something in between (a \
         proxy asking for its password?) refused the request; check the user and password in \
         the proxy URL (HTTPS_PROXY, HTTP_PROXY), or api_base",
        content_type.unwrap_or("non-JSON")
    )
}

/// The error `code` of a `404` that means the invite is no longer pending (contract 3.3).
pub const INVITE_NOT_FOUND: &str = "INVITE_NOT_FOUND";

/// How an invite dismiss ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dismissal {
    /// `200 {"dismissed": true}` (also for an invite already dismissed: the route is idempotent).
    Dismissed,
    /// `404 INVITE_NOT_FOUND`: accepted, declined or cancelled elsewhere; nothing left to dismiss.
    NotPending,
}

impl ApiError {
    /// Worth another try inside the same cycle (network trouble, 5xx, 429).
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Network(_) | ApiError::RateLimited(_) => true,
            ApiError::Status { status, .. } => *status >= 500 || *status == 408,
            _ => false,
        }
    }

    /// An answer no retry changes because the API base is wrong (docs/operating.md, "When
    /// something is wrong"): something that is not AgentChat answered, or AgentChat answered a
    /// route that always exists (`GET /v1/agents/me`) with a client error other than a refused
    /// key or a rate limit (a path after the host, say), or a 2xx we cannot read.
    pub fn is_misconfiguration(&self) -> bool {
        match self {
            ApiError::NotAgentChat { .. } | ApiError::Body(_) | ApiError::TooLarge { .. } => true,
            ApiError::Status { status, .. } => (400..500).contains(status) && *status != 408,
            _ => false,
        }
    }
}

/// One profile's view of the server: its API base and key, and a handle on the process's one
/// HTTP client ([`shared_http`]). Cloning it, or making one per profile, costs a few strings.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    key: SecretString,
}

/// The process's one HTTP client, built at the first call and shared by every [`Api`] after it
/// (every profile of a host, every key and base a reload brings): one connection pool, one TLS
/// set-up, one proxy reading of the environment (`HTTPS_PROXY`, `NO_PROXY`, …, read when it is
/// built, as each per-profile client read them before). It carries no key: each request sets its
/// own `Authorization`. A build that fails is not kept, so the next call tries again. A pooled
/// connection belongs to the tokio runtime it was opened on; the program runs one runtime for
/// its whole life (src/main.rs), so every profile's requests share the pool.
pub fn shared_http() -> Result<reqwest::Client, ApiError> {
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    if let Some(http) = HTTP.get() {
        return Ok(http.clone());
    }
    let built = crate::sys::tls::http_client_builder()
        .pool_max_idle_per_host(POOL_IDLE_PER_HOST)
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(format!("agentchat-listener-rs/{CLIENT_VERSION}"))
        .build()
        .map_err(|e| ApiError::Client(e.to_string()))?;
    Ok(HTTP.get_or_init(|| built).clone())
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Api {
    /// An `Api` for `base` with `key`, on the process's one client ([`shared_http`]).
    pub fn new(base: &str, key: SecretString) -> Result<Api, ApiError> {
        crate::sys::tls::require_roots_for(base).map_err(|e| ApiError::Client(e.to_string()))?;
        Ok(Api {
            http: shared_http()?,
            base: base.trim_end_matches('/').to_string(),
            key,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    async fn get(&self, path: &str, route: Route) -> Result<Vec<u8>, ApiError> {
        let req = self.http.get(format!("{}{}", self.base, path));
        self.send(req, route).await
    }

    async fn send(&self, req: reqwest::RequestBuilder, route: Route) -> Result<Vec<u8>, ApiError> {
        let resp = req
            .bearer_auth(self.key.expose_secret())
            .header("X-AgentChat-Client", CLIENT_NAME)
            .header("X-AgentChat-Client-Version", CLIENT_VERSION)
            .send()
            .await
            .map_err(|e| ApiError::Network(network_problem(&e)))?;
        let status = resp.status().as_u16();
        let content_type = content_type(resp.headers());
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok());
        judge_status(status, content_type.as_deref(), retry_after)?;
        deprecation::note_headers(&self.base, route, resp.headers());
        let body = answer::read_body(resp, route, status).await?;
        judge_body(route, status, content_type, &body)?;
        Ok(body)
    }

    /// `GET /v1/agents/me`: this agent's handle, bare as the server sends it there.
    pub async fn me(&self) -> Result<String, ApiError> {
        let body = self.get("/v1/agents/me", ME).await?;
        me_handle(&body)
    }

    /// `GET /v1/inbox?invites=1&limit=50`: the tray, invites included (contract 3.1).
    pub async fn inbox(&self) -> Result<Tray, ApiError> {
        let body = self.get(INBOX_PATH, INBOX).await?;
        tray_of(&body)
    }

    /// `GET /v1/texts?runtime=`: the parsed texts and the exact bytes (for the cache).
    pub async fn texts(&self, runtime: &str) -> Result<(Texts, Vec<u8>), ApiError> {
        let body = self.texts_bytes(runtime).await?;
        let texts = Texts::parse(&body).map_err(|e| ApiError::Body(format!("texts: {e}")))?;
        Ok((texts, body))
    }

    /// `GET /v1/texts?runtime=`'s exact bytes, judged as an answer but not parsed: the listener
    /// parses them once per process (`listen::texts::intern`).
    pub async fn texts_bytes(&self, runtime: &str) -> Result<Vec<u8>, ApiError> {
        self.get(&format!("/v1/texts?runtime={runtime}"), TEXTS)
            .await
    }

    /// `POST /v1/groups/invites/{id}/dismiss`. Only `404 INVITE_NOT_FOUND` means the invite is no
    /// longer pending (contract 3.3); any other 404 (a route the server does not have, as behind
    /// a wrong `api_base` prefix) is an error like any other status.
    pub async fn dismiss_invite(&self, invite_id: &str) -> Result<Dismissal, ApiError> {
        let id = path_segment(invite_id).ok_or_else(|| ApiError::BadId(invite_id.to_owned()))?;
        let url = format!("{}/v1/groups/invites/{id}/dismiss", self.base);
        let req = self
            .http
            .post(url)
            .header("Idempotency-Key", idempotency_key(invite_id))
            .json(&serde_json::json!({}));
        dismissal(self.send(req, DISMISS).await.map(drop))
    }
}

/// The tray's path and query: invites included, the most cards a tray shows (contract 3.1).
pub const INBOX_PATH: &str = "/v1/inbox?invites=1&limit=50";

/// What an answer's status and headers say before its body is read: a proxy that refused, the
/// key refused, or a wait the server asked for (`429` and its `Retry-After`, 5 s without one).
/// The simulator (`crate::simulate`) judges its server's answers with this and [`judge_body`].
pub fn judge_status(
    status: u16,
    content_type: Option<&str>,
    retry_after: Option<&str>,
) -> Result<(), ApiError> {
    let not_json = content_type.is_some_and(|t| !answer::is_json_media_type(t));
    if status == 407 || ((status == 401 || status == 403) && not_json) {
        return Err(ApiError::ProxyRefused {
            status,
            content_type: content_type.map(str::to_string),
        });
    }
    if status == 401 || status == 403 {
        return Err(ApiError::Refused(status));
    }
    if status == 429 {
        let wait = retry_after
            .and_then(parse_retry_after_header)
            .unwrap_or(Duration::from_secs(5));
        return Err(ApiError::RateLimited(wait));
    }
    Ok(())
}

/// What a read body says for `route`: contract 7's `REMOVED`, AgentChat's error or something
/// else's answer, or `Ok`.
pub fn judge_body(
    route: Route,
    status: u16,
    content_type: Option<String>,
    body: &[u8],
) -> Result<(), ApiError> {
    if matches!(status, 400 | 410)
        && let Some(removed) = deprecation::removed(route, status, body)
    {
        return Err(removed);
    }
    judge_answer(status, content_type, body)
}

/// The handle `GET /v1/agents/me` answered, bare.
pub fn me_handle(body: &[u8]) -> Result<String, ApiError> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| ApiError::Body(format!("agents/me: {e}")))?;
    v.get("handle")
        .and_then(|h| h.as_str())
        .map(|h| h.trim_start_matches('@').to_string())
        .filter(|h| !h.is_empty())
        .ok_or_else(|| ApiError::Body("agents/me has no handle".into()))
}

/// The tray `GET /v1/inbox` answered.
pub fn tray_of(body: &[u8]) -> Result<Tray, ApiError> {
    Tray::parse(body).map_err(|e| ApiError::Body(format!("tray: {e}")))
}

/// A dismissal's answer: only `404 INVITE_NOT_FOUND` means the invite is no longer pending
/// (contract 3.3).
pub fn dismissal(answer: Result<(), ApiError>) -> Result<Dismissal, ApiError> {
    match answer {
        Ok(()) => Ok(Dismissal::Dismissed),
        Err(ApiError::Status { status: 404, code }) if code == INVITE_NOT_FOUND => {
            Ok(Dismissal::NotPending)
        }
        Err(e) => Err(e),
    }
}

/// `id` as one URL path segment: every byte but the unreserved `A-Z a-z 0-9 - . _ ~` (RFC 3986
/// 2.3) is percent-encoded, so an id from the server can neither reach another path (`/`) nor
/// start a query or fragment (`?`, `#`). `None` for an id no segment can carry: empty, `.` or
/// `..` (URL parsers resolve those, encoded or not, as dot segments).
pub fn path_segment(id: &str) -> Option<String> {
    if matches!(id, "" | "." | "..") {
        return None;
    }
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Some(out)
}

/// `Retry-After` as delta-seconds or an HTTP-date, from now, at most an hour
/// (`core::reconnect::retry_after_header`).
pub fn parse_retry_after_header(v: &str) -> Option<Duration> {
    let now = crate::sys::time::unix_ms(std::time::SystemTime::now());
    crate::core::reconnect::retry_after_header(v, now)
}

/// 8-128 chars of `[A-Za-z0-9_-]`, stable per invite so a retried dismiss is one dismiss.
fn idempotency_key(invite_id: &str) -> String {
    let clean: String = invite_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(100)
        .collect();
    format!("listener-dismiss-{clean}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_integer_seconds_and_refuses_garbage() {
        assert_eq!(
            parse_retry_after_header(" 7 "),
            Some(Duration::from_secs(7))
        );
        assert_eq!(parse_retry_after_header("soon"), None);
    }

    #[test]
    fn idempotency_key_is_stable_and_in_the_allowed_alphabet() {
        let k = idempotency_key("gri_ab/c");
        assert_eq!(k, idempotency_key("gri_ab/c"));
        assert!(k.len() >= 8 && k.len() <= 128);
        assert!(
            k.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }

    #[test]
    fn path_segment_encodes_all_but_unreserved_and_refuses_dot_segments() {
        assert_eq!(
            path_segment("gri_2KdP8wXyT5mQr0Zs").as_deref(),
            Some("gri_2KdP8wXyT5mQr0Zs")
        );
        assert_eq!(
            path_segment("a/b?c#d e%f").as_deref(),
            Some("a%2Fb%3Fc%23d%20e%25f")
        );
        assert_eq!(path_segment("é").as_deref(), Some("%C3%A9"));
        assert_eq!(path_segment("..x~-_").as_deref(), Some("..x~-_"));
        for bad in ["", ".", ".."] {
            assert_eq!(path_segment(bad), None, "{bad:?}");
        }
        // Whatever the id, the URL keeps it in its one segment.
        for id in ["a/../../x", "%2e%2e", "x?y=1", "../inbox"] {
            let seg = path_segment(id).unwrap();
            let url =
                reqwest::Url::parse(&format!("http://h/v1/groups/invites/{seg}/dismiss")).unwrap();
            let segs: Vec<&str> = url.path_segments().unwrap().collect();
            assert_eq!(segs.len(), 5, "{id:?} -> {url}");
            assert_eq!(segs[3], seg, "{id:?} -> {url}");
            assert_eq!(url.query(), None, "{id:?} -> {url}");
        }
    }

    #[test]
    fn transient_errors_are_network_5xx_and_429_only() {
        assert!(ApiError::Network("x".into()).is_transient());
        assert!(ApiError::RateLimited(Duration::from_secs(1)).is_transient());
        assert!(
            ApiError::Status {
                status: 503,
                code: String::new()
            }
            .is_transient()
        );
        assert!(
            !ApiError::Status {
                status: 400,
                code: String::new()
            }
            .is_transient()
        );
        assert!(!ApiError::Refused(401).is_transient());
    }

    /// A loopback server that answers every request with `head` and then `body_len` bytes of `x`.
    async fn answering(head: &'static str, body_len: usize) -> Api {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        crate::sys::tls::install_crypto_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = c.read(&mut buf).await;
                    let _ = c.write_all(head.as_bytes()).await;
                    let _ = c.write_all(&vec![b'x'; body_len]).await;
                });
            }
        });
        Api::new(
            &format!("http://127.0.0.1:{port}"),
            SecretString::from("ac_secret".to_string()),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_body_over_its_routes_cap_is_refused_by_its_length_and_an_error_page_is_judged_by_its_start()
     {
        // A 2xx that declares more than the route allows: refused before a byte is read.
        let api = answering(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 70000\r\n\r\n",
            70_000,
        )
        .await;
        let e = api.me().await.unwrap_err();
        assert_eq!(
            e,
            ApiError::TooLarge {
                route: "GET /v1/agents/me",
                status: 200,
                read: 0,
                cap: 64 * 1024
            }
        );
        assert!(e.is_misconfiguration() && !e.is_transient());
        assert_eq!(
            e.to_string(),
            "answered GET /v1/agents/me with HTTP 200 and a body over its 64 KiB cap (dropped after 0 B read): not an AgentChat answer"
        );
        // A proxy's 502 page far over the error cap: still a 502, worth another try.
        let api = answering(
            "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\nconnection: close\r\n\r\n",
            300_000,
        )
        .await;
        assert_eq!(
            api.me().await.unwrap_err(),
            ApiError::Status {
                status: 502,
                code: String::new()
            }
        );
    }

    /// Two profiles' `Api`s (two keys) share the process's one client: the second request reuses
    /// the first's kept-alive connection, and each request carries its own key.
    #[tokio::test]
    async fn apis_of_two_profiles_share_one_client_and_pool_and_each_sends_its_own_key() {
        use std::sync::{Arc, Mutex};
        crate::sys::tls::install_crypto_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(Mutex::new(0usize));
        let keys = Arc::new(Mutex::new(Vec::<String>::new()));
        let (a, k) = (accepted.clone(), keys.clone());
        tokio::spawn(async move {
            while let Ok((c, _)) = listener.accept().await {
                *a.lock().unwrap() += 1;
                let k = k.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: hyper::Request<_>| {
                        let auth = req
                            .headers()
                            .get("authorization")
                            .map(|v| v.to_str().unwrap().to_string())
                            .unwrap_or_default();
                        k.lock().unwrap().push(auth);
                        async {
                            hyper::Response::builder()
                                .header("content-type", "application/json")
                                .body(http_body_util::Full::new(hyper::body::Bytes::from(
                                    r#"{"handle":"@bob"}"#,
                                )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(c), svc)
                        .await;
                });
            }
        });
        let base = format!("http://127.0.0.1:{port}");
        let one = Api::new(&base, SecretString::from("ac_one".to_string())).unwrap();
        let two = Api::new(&base, SecretString::from("ac_two".to_string())).unwrap();
        assert_eq!(one.me().await.unwrap(), "bob");
        assert_eq!(two.me().await.unwrap(), "bob");
        assert_eq!(one.me().await.unwrap(), "bob");
        assert_eq!(*accepted.lock().unwrap(), 1, "one connection for both");
        assert_eq!(
            *keys.lock().unwrap(),
            ["Bearer ac_one", "Bearer ac_two", "Bearer ac_one"]
        );
        assert!(!format!("{two:?}").contains("ac_two"));
    }

    /// Issue 29 item 15: a wrong proxy password read as "the server refused the API key".
    /// tinyproxy answers it `401` with an HTML page; a proxy per RFC 9110 answers `407`.
    /// AgentChat's own refusal is JSON (`{"code":"UNAUTHORIZED"}`) and stays a refused key.
    #[tokio::test]
    async fn a_proxys_401_page_or_407_is_no_refused_key_and_agentchats_json_401_is() {
        let tinyproxy = answering(
            "HTTP/1.0 401 Unauthorized\r\nContent-Type: text/html\r\nWWW-Authenticate: Basic realm=\"Tinyproxy\"\r\nConnection: close\r\n\r\n",
            200,
        )
        .await;
        let proxy_407 = answering(
            "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"p\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            0,
        )
        .await;
        for (api, status) in [(tinyproxy, 401), (proxy_407, 407)] {
            let e = api.me().await.unwrap_err();
            assert!(
                matches!(e, ApiError::ProxyRefused { status: s, .. } if s == status),
                "{e:?}"
            );
            let line = e.to_string();
            assert!(
                !line.contains("refused the API key") && line.contains("proxy URL"),
                "{line}"
            );
            assert!(!e.is_transient() && !e.is_misconfiguration());
        }
        let body = r#"{"code":"UNAUTHORIZED","message":"Invalid API key"}"#;
        let head: &'static str = Box::leak(
            format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_boxed_str(),
        );
        assert_eq!(
            answering(head, 0).await.me().await.unwrap_err(),
            ApiError::Refused(401)
        );
    }

    #[tokio::test]
    async fn a_closed_port_is_connection_refused_said_once() {
        crate::sys::tls::install_crypto_provider();
        // A port held bound but never listening: a connect is refused for as long as the test
        // runs, and no other process can take the port meanwhile (a listener dropped at once could
        // still be held open by a process another test forks in that moment).
        let held = tokio::net::TcpSocket::new_v4().unwrap();
        held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = held.local_addr().unwrap().port();
        let api = Api::new(
            &format!("http://127.0.0.1:{port}"),
            SecretString::from("ac_secret".to_string()),
        )
        .unwrap();
        let e = api.me().await.unwrap_err();
        assert_eq!(e, ApiError::Network("connection refused".into()));
        assert_eq!(e.to_string(), "unreachable: connection refused");
    }
}

//! The few REST calls the listener makes itself (design 4): who am I, the tray, the texts, and an
//! invite dismiss. Thin I/O: every rule about what to do with the answers lives in `core`.
//! Errors never carry the key or a response body (a body could quote message text).

use crate::core::texts::Texts;
use crate::core::tray::Tray;
use secrecy::{ExposeSecret, SecretString};
use std::time::Duration;

/// The client name the server buckets us under (an existing value of its low-cardinality taxonomy).
pub const CLIENT_NAME: &str = "coding_agents";
pub const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// One REST timeout for every call: the tray is read without `wait_ms`, so answers are quick.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ApiError {
    /// 401 or 403: the key was refused (or the account is suspended).
    #[error("the server refused the API key (HTTP {0})")]
    Refused(u16),
    /// 429 with the wait the server asked for.
    #[error("rate limited; retry after {0:?}")]
    RateLimited(Duration),
    /// Any other non-2xx answer; `code` is the error body's `code` when it had one.
    #[error("HTTP {status} {code}")]
    Status { status: u16, code: String },
    #[error("network error: {0}")]
    Network(String),
    /// A 2xx answer we could not parse.
    #[error("unexpected answer: {0}")]
    Body(String),
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
}

#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    key: SecretString,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Api {
    pub fn new(base: &str, key: SecretString) -> Result<Api, ApiError> {
        let http = crate::sys::tls::http_client_builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(format!("agentchat-listener-rs/{CLIENT_VERSION}"))
            .build()
            .map_err(|e| ApiError::Network(format!("cannot build the HTTP client: {e}")))?;
        Ok(Api {
            http,
            base: base.trim_end_matches('/').to_string(),
            key,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    async fn get(&self, path: &str) -> Result<Vec<u8>, ApiError> {
        let req = self.http.get(format!("{}{}", self.base, path));
        self.send(req).await
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Vec<u8>, ApiError> {
        let resp = req
            .bearer_auth(self.key.expose_secret())
            .header("X-AgentChat-Client", CLIENT_NAME)
            .header("X-AgentChat-Client-Version", CLIENT_VERSION)
            .send()
            .await
            .map_err(|e| ApiError::Network(redact_reqwest(&e)))?;
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| ApiError::Network(redact_reqwest(&e)))?;
            return Ok(bytes.to_vec());
        }
        if status == 401 || status == 403 {
            return Err(ApiError::Refused(status));
        }
        if status == 429 {
            let wait = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after_header)
                .unwrap_or(Duration::from_secs(5));
            return Err(ApiError::RateLimited(wait));
        }
        let code = resp
            .bytes()
            .await
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_string))
            .unwrap_or_default();
        Err(ApiError::Status { status, code })
    }

    /// `GET /v1/agents/me`: this agent's handle, bare as the server sends it there.
    pub async fn me(&self) -> Result<String, ApiError> {
        let body = self.get("/v1/agents/me").await?;
        let v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| ApiError::Body(format!("agents/me: {e}")))?;
        v.get("handle")
            .and_then(|h| h.as_str())
            .map(|h| h.trim_start_matches('@').to_string())
            .filter(|h| !h.is_empty())
            .ok_or_else(|| ApiError::Body("agents/me has no handle".into()))
    }

    /// `GET /v1/inbox?invites=1&limit=50`: the tray, invites included (design 4 step 1).
    pub async fn inbox(&self) -> Result<Tray, ApiError> {
        let body = self.get("/v1/inbox?invites=1&limit=50").await?;
        Tray::parse(&body).map_err(|e| ApiError::Body(format!("tray: {e}")))
    }

    /// `GET /v1/texts?runtime=`: the parsed texts and the exact bytes (for the cache).
    pub async fn texts(&self, runtime: &str) -> Result<(Texts, Vec<u8>), ApiError> {
        let body = self.get(&format!("/v1/texts?runtime={runtime}")).await?;
        let texts = Texts::parse(&body).map_err(|e| ApiError::Body(format!("texts: {e}")))?;
        Ok((texts, body))
    }

    /// `POST /v1/groups/invites/{id}/dismiss`. `404 INVITE_NOT_FOUND` means it is no longer
    /// pending (answered elsewhere): nothing left to do, so it counts as done.
    pub async fn dismiss_invite(&self, invite_id: &str) -> Result<(), ApiError> {
        let url = format!("{}/v1/groups/invites/{}/dismiss", self.base, invite_id);
        let req = self
            .http
            .post(url)
            .header("Idempotency-Key", idempotency_key(invite_id))
            .json(&serde_json::json!({}));
        match self.send(req).await {
            Ok(_) => Ok(()),
            Err(ApiError::Status { status: 404, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// `Retry-After` as integer seconds (the form the server sends).
pub fn parse_retry_after_header(v: &str) -> Option<Duration> {
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
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

/// reqwest errors name the URL (no key in it) and the cause; keep just that.
fn redact_reqwest(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
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
}

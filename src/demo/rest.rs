//! A tiny REST client for the demo and its agent: JSON in, JSON out, the key only in the
//! `Authorization` header. Errors name the route and status, never the key or a body's text.

use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use std::time::Duration;

/// The cause is part of the message and not a `source`, so a chain printed with `{:#}` says it
/// once (as `config::ConfigError` does).
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    #[error("{method} {path}: {error}")]
    Network {
        method: &'static str,
        path: String,
        /// One line, each cause once (`client::network_problem`).
        error: String,
    },
    #[error("{method} {path}: HTTP {status} {code}")]
    Status {
        method: &'static str,
        path: String,
        status: u16,
        code: String,
    },
}

impl RestError {
    pub fn status(&self) -> Option<u16> {
        match self {
            RestError::Status { status, .. } => Some(*status),
            RestError::Network { .. } => None,
        }
    }
}

#[derive(Clone)]
pub struct Rest {
    http: reqwest::Client,
    base: String,
    key: Option<SecretString>,
}

impl std::fmt::Debug for Rest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rest")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Rest {
    /// `key` None: no `Authorization` header (the sim's control API).
    pub fn new(base: &str, key: Option<SecretString>) -> anyhow::Result<Rest> {
        let http = crate::sys::tls::http_client_builder()
            .timeout(Duration::from_secs(10))
            .user_agent(concat!("agentchat-demo/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Rest {
            http,
            base: base.trim_end_matches('/').to_string(),
            key,
        })
    }

    pub async fn get(&self, path: &str) -> Result<Value, RestError> {
        self.call("GET", path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, RestError> {
        self.call("POST", path, Some(body)).await
    }

    async fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, RestError> {
        let url = format!("{}{}", self.base, path);
        let mut req = match method {
            "GET" => self.http.get(&url),
            _ => self.http.post(&url),
        };
        if let Some(k) = &self.key {
            req = req.bearer_auth(k.expose_secret());
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let net = |e: reqwest::Error| RestError::Network {
            method,
            path: path.to_string(),
            error: crate::client::network_problem(&e),
        };
        let resp = req.send().await.map_err(net)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(net)?;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !status.is_success() {
            let code = value
                .get("code")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            return Err(RestError::Status {
                method,
                path: path.to_string(),
                status: status.as_u16(),
                code,
            });
        }
        Ok(value)
    }
}

/// A list that may come bare (`[...]`) or wrapped (`{"messages": [...]}` and the like).
pub fn list_of<'a>(v: &'a Value, key: &str) -> Vec<&'a Value> {
    match v {
        Value::Array(a) => a.iter().collect(),
        Value::Object(o) => o
            .get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

pub fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str()
}

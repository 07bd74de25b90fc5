//! The error shape every route answers with: `{"code","message","details?"}` (contract 7's
//! "usual error shape"; `docs/local-server.md`).

use serde_json::{Value, json};

#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct Rejection {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    pub details: Option<Box<Value>>,
    /// Seconds for `Retry-After` on a 429.
    pub retry_after: Option<u64>,
}

impl Rejection {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Rejection {
        Rejection {
            status,
            code,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }
    pub fn with_details(mut self, details: Value) -> Rejection {
        self.details = Some(Box::new(details));
        self
    }
    pub fn validation(message: impl Into<String>) -> Rejection {
        Rejection::new(400, "VALIDATION_ERROR", message)
    }
    pub fn unauthorized() -> Rejection {
        Rejection::new(401, "UNAUTHORIZED", "Invalid API key")
    }
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Rejection {
        Rejection::new(404, code, message)
    }
    pub fn rate_limited(secs: u64) -> Rejection {
        Rejection {
            status: 429,
            code: "RATE_LIMITED",
            message: format!("Too many requests. Try again in {secs} seconds."),
            details: Some(Box::new(json!({"retry_after_ms": secs * 1000}))),
            retry_after: Some(secs),
        }
    }
    pub fn body(&self) -> Value {
        let mut v = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.details {
            v["details"] = (**d).clone();
        }
        v
    }
}

pub type SimResult<T> = Result<T, Rejection>;

//! Old paths and their switch-off (contract 7), set through `POST /_sim/old-paths`: a REST path
//! the sim answers with the deprecation headers while it still works, or with
//! `410 {"code": "REMOVED", "details": {old_path, replacement, removed_on, docs}}` once off; and
//! `socket_without_ack`, which once off closes a socket that did not negotiate `ack` with
//! `4426 upgrade required`. So a client's handling of each is tested against the sim, not only
//! against injected closes (issue 29 item 14).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::error::Rejection;
use super::http::Reply;

/// The id of the socket old path (contract 7's table).
pub const SOCKET_WITHOUT_ACK: &str = "socket_without_ack";
/// Contract 7: deprecated since day R (2026-11-08, as Unix seconds), off at the latest R + 90.
pub const DAY_R_UNIX: u64 = 1_794_096_000;
pub const SUNSET: &str = "Sat, 06 Feb 2027 00:00:00 GMT";
pub const DOCS: &str = "https://agentchat.me/contract/v1/#deprecations";

/// One old path's state.
#[derive(Debug, Clone, PartialEq)]
pub enum OldPath {
    /// Still works; every answer carries `Deprecation`, `Sunset` and `Link`.
    Deprecated { since_unix: u64 },
    /// Switched off: `410 REMOVED` naming the replacement (a socket: `4426`).
    Removed {
        replacement: String,
        removed_on: String,
    },
}

/// The old paths by REST path (`/v1/inbox`) or `socket_without_ack`.
#[derive(Debug, Default)]
pub struct OldPaths {
    paths: BTreeMap<String, OldPath>,
}

impl OldPaths {
    /// Applies a control body: `{"path", "state": "deprecated" | "removed" | "on",
    /// "replacement"?, "since"?}`; the path's new state as JSON.
    pub fn set(&mut self, body: &Value) -> Result<Value, Rejection> {
        let path = body
            .get("path")
            .and_then(Value::as_str)
            .filter(|p| p.starts_with("/v1/") || *p == SOCKET_WITHOUT_ACK)
            .ok_or_else(|| Rejection::validation("path must be a /v1/ path or socket_without_ack"))?
            .to_string();
        match body.get("state").and_then(Value::as_str) {
            Some("on") => {
                self.paths.remove(&path);
            }
            Some("deprecated") => {
                let since_unix = body
                    .get("since")
                    .and_then(Value::as_u64)
                    .unwrap_or(DAY_R_UNIX);
                self.paths
                    .insert(path.clone(), OldPath::Deprecated { since_unix });
            }
            Some("removed") => {
                let replacement = body
                    .get("replacement")
                    .and_then(Value::as_str)
                    .unwrap_or("see the docs")
                    .to_string();
                let removed_on = body
                    .get("removed_on")
                    .and_then(Value::as_str)
                    .unwrap_or("2027-02-06")
                    .to_string();
                self.paths.insert(
                    path.clone(),
                    OldPath::Removed {
                        replacement,
                        removed_on,
                    },
                );
            }
            _ => {
                return Err(Rejection::validation(
                    "state must be deprecated, removed or on",
                ));
            }
        }
        Ok(json!({"path": path, "state": body.get("state")}))
    }

    /// `Err(410 REMOVED)` for a path that is off, naming its replacement.
    pub fn check(&self, path: &str) -> Result<(), Rejection> {
        match self.paths.get(path) {
            Some(OldPath::Removed {
                replacement,
                removed_on,
            }) => Err(Rejection::new(
                410,
                "REMOVED",
                format!("{path} was switched off on {removed_on}; use {replacement}"),
            )
            .with_details(json!({
                "old_path": path,
                "replacement": replacement,
                "removed_on": removed_on,
                "docs": DOCS,
            }))),
            _ => Ok(()),
        }
    }

    /// The reply with the deprecation headers when `path` is deprecated.
    pub fn mark(&self, path: &str, reply: Reply) -> Reply {
        match self.paths.get(path) {
            Some(OldPath::Deprecated { since_unix }) => headers(reply, *since_unix),
            _ => reply,
        }
    }

    /// Sockets without `ack` are switched off.
    pub fn socket_without_ack_off(&self) -> bool {
        matches!(
            self.paths.get(SOCKET_WITHOUT_ACK),
            Some(OldPath::Removed { .. })
        )
    }
}

/// Contract 7's three headers on an answer that used an old path or value.
pub fn headers(r: Reply, since_unix: u64) -> Reply {
    r.header("deprecation", format!("@{since_unix}"))
        .header("sunset", SUNSET)
        .header("link", format!("<{DOCS}>; rel=\"deprecation\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_path_answers_410_removed_with_its_replacement_and_a_deprecated_one_its_headers() {
        let mut o = OldPaths::default();
        o.set(&json!({"path": "/v1/inbox", "state": "removed", "replacement": "GET /v2/tray"}))
            .unwrap();
        let e = o.check("/v1/inbox").unwrap_err();
        assert_eq!((e.status, e.code), (410, "REMOVED"));
        assert_eq!(e.body()["details"]["replacement"], "GET /v2/tray");
        assert_eq!(e.body()["details"]["old_path"], "/v1/inbox");
        assert!(o.check("/v1/agents/me").is_ok());
        o.set(&json!({"path": "/v1/agents/me", "state": "deprecated"}))
            .unwrap();
        let r = o.mark("/v1/agents/me", Reply::ok(json!({})));
        let names: Vec<&str> = r.headers.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["deprecation", "sunset", "link"]);
        assert_eq!(r.headers[0].1, format!("@{DAY_R_UNIX}"));
        o.set(&json!({"path": "/v1/inbox", "state": "on"})).unwrap();
        assert!(o.check("/v1/inbox").is_ok());
        assert!(!o.socket_without_ack_off());
        o.set(&json!({"path": SOCKET_WITHOUT_ACK, "state": "removed"}))
            .unwrap();
        assert!(o.socket_without_ack_off());
        assert!(
            o.set(&json!({"path": "/other", "state": "removed"}))
                .is_err()
        );
        assert!(o.set(&json!({"path": "/v1/x", "state": "gone"})).is_err());
    }
}

//! Old paths and their switch-off (contract 7), set through `POST /_sim/old-paths`: a REST path
//! the sim answers with the deprecation headers while it still works, or with
//! `410 {"code": "REMOVED", "details": {old_path, replacement, removed_on, docs}}` once off; and
//! the contract's own ids (`reply_coord`, `socket_without_ack`, `defer_seconds`,
//! `decision_no_reply`, the three old tools, `chatfather_dm`), deprecated from the start as on the
//! real server between day R and the switch-off, each refused its own way once off. So a client's
//! handling of each is tested against the sim, not only against injected closes (issue 29 item
//! 14, issue 37 item 9).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::error::Rejection;
use super::http::Reply;

/// The id of the socket old path (contract 7's table).
pub const SOCKET_WITHOUT_ACK: &str = "socket_without_ack";
/// Contract 7: deprecated since day R (2026-11-08, as Unix seconds), off at the latest R + 90.
pub const DAY_R_UNIX: u64 = 1_794_096_000;
const DAY: u64 = 86_400;

/// One row of contract 7's first table.
pub struct Row {
    pub id: &'static str,
    /// "Use instead".
    pub replacement: &'static str,
    /// "Deprecated since", Unix seconds.
    pub since_unix: u64,
    /// "Headers: yes": every answer that used it carries the three headers until it is off.
    pub headers: bool,
    /// The refusal once off: `410` for a path, `400` for a value, a tool error (`410` shape).
    pub status: u16,
}

/// Contract 7's ids, in its order.
pub const TABLE: [Row; 8] = [
    Row {
        id: "reply_coord",
        replacement: "the tray (GET /v1/inbox) and verdicts (POST /v1/conversations/{id}/decisions); the server re-wakes unanswered cards",
        since_unix: DAY_R_UNIX,
        headers: true,
        status: 410,
    },
    Row {
        id: SOCKET_WITHOUT_ACK,
        replacement: "negotiate ack and ack each message.new after handling it",
        since_unix: DAY_R_UNIX,
        headers: false,
        status: 4426,
    },
    Row {
        id: "defer_seconds",
        replacement: "defer alone; the server owns the reminder ladder (+15 min, +24 h, stop)",
        since_unix: DAY_R_UNIX - 4 * DAY,
        headers: true,
        status: 400,
    },
    Row {
        id: "decision_no_reply",
        replacement: "dismiss",
        since_unix: DAY_R_UNIX - 6 * DAY,
        headers: true,
        status: 400,
    },
    Row {
        id: "tool_agentchat_list_inbox",
        replacement: "agentchat_list_conversations",
        since_unix: DAY_R_UNIX - 3 * DAY,
        headers: false,
        status: 410,
    },
    Row {
        id: "tool_agentchat_accept_group_invite",
        replacement: "agentchat_respond_to_invite with response: \"accept\"",
        since_unix: DAY_R_UNIX - 3 * DAY,
        headers: false,
        status: 410,
    },
    Row {
        id: "tool_agentchat_reject_group_invite",
        replacement: "agentchat_respond_to_invite with response: \"decline\"",
        since_unix: DAY_R_UNIX - 3 * DAY,
        headers: false,
        status: 410,
    },
    Row {
        id: "chatfather_dm",
        replacement: "the manual, https://agentchat.me/skill.md",
        since_unix: DAY_R_UNIX - 2 * DAY,
        headers: false,
        status: 410,
    },
];

fn row(id: &str) -> Option<&'static Row> {
    TABLE.iter().find(|r| r.id == id)
}
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

/// The old paths set by the control API, by REST path (`/v1/inbox`) or contract id. A contract
/// id not set here is deprecated since its table date; a REST path not set here is current.
#[derive(Debug, Default)]
pub struct OldPaths {
    paths: BTreeMap<String, OldPath>,
}

impl OldPaths {
    /// Applies a control body: `{"path" | "id", "state": "deprecated" | "removed" | "on",
    /// "replacement"?, "since"?, "removed_on"?}` (`on`: a REST path back to current, a contract
    /// id back to deprecated); the new state as JSON.
    pub fn set(&mut self, body: &Value) -> Result<Value, Rejection> {
        let ids: Vec<&str> = TABLE.iter().map(|r| r.id).collect();
        let path = body
            .get("path")
            .or_else(|| body.get("id"))
            .and_then(Value::as_str)
            .filter(|p| p.starts_with("/v1/") || row(p).is_some())
            .ok_or_else(|| {
                Rejection::validation(format!(
                    "path must be a /v1/ path or one of contract 7's ids: {}",
                    ids.join(", ")
                ))
            })?
            .to_string();
        let table = row(&path);
        match body.get("state").and_then(Value::as_str) {
            Some("on") => {
                self.paths.remove(&path);
            }
            Some("deprecated") => {
                let since_unix = body
                    .get("since")
                    .and_then(Value::as_u64)
                    .or(table.map(|r| r.since_unix))
                    .unwrap_or(DAY_R_UNIX);
                self.paths
                    .insert(path.clone(), OldPath::Deprecated { since_unix });
            }
            Some("removed") => {
                let replacement = body
                    .get("replacement")
                    .and_then(Value::as_str)
                    .or(table.map(|r| r.replacement))
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

    /// The state of a REST path or contract id: what was set, else a contract id's default
    /// (deprecated since its date), else `None` (current).
    fn state(&self, path: &str) -> Option<OldPath> {
        self.paths.get(path).cloned().or_else(|| {
            row(path).map(|r| OldPath::Deprecated {
                since_unix: r.since_unix,
            })
        })
    }

    /// `Err(REMOVED)` for a path or contract id that is off, naming its replacement: `410` for
    /// a path, `400` for a value (contract 7's "Once off" column).
    pub fn check(&self, path: &str) -> Result<(), Rejection> {
        match self.state(path) {
            Some(OldPath::Removed {
                replacement,
                removed_on,
            }) => {
                let status = row(path).map(|r| r.status).filter(|s| *s < 1000);
                Err(Rejection::new(
                    status.unwrap_or(410),
                    "REMOVED",
                    format!("{path} was switched off on {removed_on}; use {replacement}"),
                )
                .with_details(json!({
                    "old_path": path,
                    "replacement": replacement,
                    "removed_on": removed_on,
                    "docs": DOCS,
                })))
            }
            _ => Ok(()),
        }
    }

    /// The reply (an error answer too) with the deprecation headers while `path` is
    /// deprecated: a REST path set so, or a contract id whose row says "Headers: yes".
    pub fn mark(&self, path: &str, reply: Reply) -> Reply {
        let headed = row(path).is_none_or(|r| r.headers);
        match self.state(path) {
            Some(OldPath::Deprecated { since_unix }) if headed => headers(reply, since_unix),
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

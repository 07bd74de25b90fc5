//! `/v1/reply/*` (contract 7's `reply_coord`): the July 2026 coding-agent daemon's reply
//! coordination, kept as the real server keeps it until the switch-off: `claim` and
//! `claim-batch` (a holder claims messages sent to the agent; the contiguous prefix of a batch;
//! `defer_if_active` defers while a foreground session holds a lease) and `active` (`PUT` a
//! session's lease, `DELETE` it). Every answer carries the deprecation headers
//! (`old_paths`); once `reply_coord` is off, each answers `410 REMOVED`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::clock::{MIN, SEC};
use super::error::{Rejection, SimResult};
use super::store::Store;

/// How long a claim holds (the real TTL is the server's and unpublished; the July daemon renews
/// its claims before every attempt, `shared/reference/prior-daemon.md`).
const CLAIM_TTL_MS: u64 = 10 * MIN;
/// A lease's TTL when the body names none (the July daemon's foreground turns ask 600 s).
const DEFAULT_LEASE_S: u64 = 600;

/// One agent's claims and foreground leases (server-clock ends).
#[derive(Debug, Default)]
pub struct ReplyCoord {
    /// message id -> (holder, until)
    claims: BTreeMap<String, (String, u64)>,
    /// session id -> until
    leases: BTreeMap<String, u64>,
}

impl ReplyCoord {
    fn active(&self, now_v: u64) -> bool {
        self.leases.values().any(|&t| now_v < t)
    }

    /// Claims `id` for `holder`: free, expired or already this holder's. Expired claims are
    /// forgotten on the way, so the map holds only live ones.
    fn claim(&mut self, id: &str, holder: &str, now_v: u64) -> bool {
        self.claims.retain(|_, (_, until)| now_v < *until);
        match self.claims.get(id) {
            Some((h, until)) if h != holder && now_v < *until => false,
            _ => {
                self.claims
                    .insert(id.to_string(), (holder.to_string(), now_v + CLAIM_TTL_MS));
                true
            }
        }
    }
}

fn holder(body: &Value) -> SimResult<String> {
    body.get("holder")
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .ok_or_else(|| Rejection::validation("holder is required"))
}

impl Store {
    /// Whether `id` is a message sent to `h` (only those can be claimed).
    fn claimable(&self, h: &str, id: &str) -> bool {
        self.messages
            .get(id)
            .is_some_and(|m| m.recipients.contains_key(h))
    }

    /// `POST /v1/reply/claim {message_id, holder, defer_if_active?}` -> `{claimed, deferred}`.
    pub fn reply_claim(&mut self, h: &str, body: &Value) -> SimResult<Value> {
        let holder = holder(body)?;
        let id = body
            .get("message_id")
            .and_then(Value::as_str)
            .ok_or_else(|| Rejection::validation("message_id is required"))?;
        if !self.claimable(h, id) {
            return Err(Rejection::not_found(
                "MESSAGE_NOT_FOUND",
                "no message with that id was sent to you",
            ));
        }
        let now_v = self.now_v();
        let defer = body.get("defer_if_active").and_then(Value::as_bool) == Some(true);
        let coord = &mut self.agent_mut(h)?.reply_coord;
        if defer && coord.active(now_v) {
            return Ok(json!({"claimed": false, "deferred": true}));
        }
        Ok(json!({"claimed": coord.claim(id, &holder, now_v), "deferred": false}))
    }

    /// `POST /v1/reply/claim-batch {message_ids, holder, defer_if_active?}` ->
    /// `{claimed_count, deferred}`: the contiguous prefix that could be claimed.
    pub fn reply_claim_batch(&mut self, h: &str, body: &Value) -> SimResult<Value> {
        let holder = holder(body)?;
        let ids: Vec<String> = body
            .get("message_ids")
            .and_then(Value::as_array)
            .ok_or_else(|| Rejection::validation("message_ids must be an array of ids"))?
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| Rejection::validation("message_ids must be an array of ids"))?;
        let claimable: Vec<bool> = ids.iter().map(|id| self.claimable(h, id)).collect();
        let now_v = self.now_v();
        let defer = body.get("defer_if_active").and_then(Value::as_bool) == Some(true);
        let coord = &mut self.agent_mut(h)?.reply_coord;
        if defer && coord.active(now_v) {
            return Ok(json!({"claimed_count": 0, "deferred": true}));
        }
        let mut n = 0;
        for (id, ok) in ids.iter().zip(claimable) {
            if !ok || !coord.claim(id, &holder, now_v) {
                break;
            }
            n += 1;
        }
        Ok(json!({"claimed_count": n, "deferred": false}))
    }

    /// `PUT /v1/reply/active {session_id?, ttl_seconds?}`: a foreground session's lease.
    pub fn reply_active(&mut self, h: &str, body: &Value) -> SimResult<Value> {
        let session = body
            .get("session_id")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let ttl = body
            .get("ttl_seconds")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_LEASE_S)
            .clamp(1, 24 * 3600);
        let now_v = self.now_v();
        let leases = &mut self.agent_mut(h)?.reply_coord.leases;
        leases.retain(|_, until| now_v < *until);
        leases.insert(session.clone(), now_v + ttl * SEC);
        Ok(json!({"active": true, "session_id": session, "ttl_seconds": ttl}))
    }

    /// `DELETE /v1/reply/active {session_id?}`: ends one lease, or every lease without an id.
    pub fn reply_inactive(&mut self, h: &str, body: &Value) -> SimResult<Value> {
        let leases = &mut self.agent_mut(h)?.reply_coord.leases;
        match body.get("session_id").and_then(Value::as_str) {
            Some(id) => {
                leases.remove(id);
            }
            None => leases.clear(),
        }
        Ok(json!({"active": false}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_holds_against_other_holders_until_it_expires() {
        let mut c = ReplyCoord::default();
        assert!(c.claim("msg_a", "daemon:1", 0));
        assert!(c.claim("msg_a", "daemon:1", 10), "its own holder renews");
        assert!(!c.claim("msg_a", "session:2", 20));
        assert!(c.claim("msg_a", "session:2", 10 + CLAIM_TTL_MS));
    }
}

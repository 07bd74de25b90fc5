//! Reading and verdicts (contract 3.2): read through an anchor plus the notices right after it,
//! the defer ladder's bookkeeping (+15 min, +24 h, stop), `404 MESSAGE_NOT_FOUND` for a foreign
//! anchor with nothing recorded, and `/read` without a verdict.

use serde_json::{Value, json};

use super::clock::{MIN, now_iso};
use super::error::{Rejection, SimResult};
use super::model::{Decision, Defer};
use super::store::{CATEGORIES, Store};

impl Store {
    /// The seq of `anchor` in `conv`, or 404 MESSAGE_NOT_FOUND (3.2).
    fn anchor_seq(&self, conv: &str, anchor: &str) -> SimResult<u64> {
        match self.messages.get(anchor) {
            Some(m) if m.conversation_id == conv => Ok(m.seq),
            _ => Err(Rejection::not_found(
                "MESSAGE_NOT_FOUND",
                "through_message_id is not a message of this conversation",
            )),
        }
    }

    /// The body's `through_message_id` as `(seq, id)`: absent or null is `None`; anything but a
    /// string is 400 (never "read through now"); a foreign id is 404 MESSAGE_NOT_FOUND.
    fn body_anchor(&self, conv: &str, body: &Value) -> SimResult<Option<(u64, String)>> {
        match body.get("through_message_id") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some((self.anchor_seq(conv, s)?, s.clone()))),
            Some(_) => Err(Rejection::validation("through_message_id must be a string")),
        }
    }

    /// Reads through `seq`, plus the notices right after it up to the next message from someone
    /// else. Returns how many became read; senders get `message.read`.
    fn read_through(&mut self, h: &str, conv: &str, through: u64) -> usize {
        let ids = self
            .convs
            .get(conv)
            .map(|c| c.messages.clone())
            .unwrap_or_default();
        let mut to_read = Vec::new();
        let mut after = false;
        for id in ids {
            let Some(m) = self.messages.get(&id) else {
                continue;
            };
            if m.seq <= through {
                to_read.push(id);
                continue;
            }
            if !after {
                after = true;
            }
            if m.sender == h {
                continue;
            }
            if m.is_notice() {
                to_read.push(id);
            } else {
                break;
            }
        }
        let now = now_iso();
        let mut n = 0;
        for id in to_read {
            let Some(m) = self.messages.get_mut(&id) else {
                continue;
            };
            let Some(d) = m.recipients.get_mut(h) else {
                continue;
            };
            if d.status == "read" {
                continue;
            }
            d.status = "read";
            d.read_at = Some(now.clone());
            if d.delivered_at.is_none() {
                d.delivered_at = Some(now.clone());
            }
            n += 1;
            let sender = m.sender.clone();
            if !m.is_notice() {
                let frame = json!({"type": "message.read", "payload": {"message_id": id, "read_by": h, "read_at": now}});
                self.push(&sender, &frame.to_string(), |_| true);
            }
            self.pulled(h);
        }
        n
    }

    fn newest_seq(&self, conv: &str) -> Option<(u64, String)> {
        let c = self.convs.get(conv)?;
        let id = c.messages.last()?;
        self.messages.get(id).map(|m| (m.seq, m.id.clone()))
    }

    /// True when a non-notice message from someone other than `h` is newer than `seq`.
    pub fn newer_from_others(&self, h: &str, conv: &str, seq: u64) -> bool {
        self.convs.get(conv).is_some_and(|c| {
            c.messages
                .iter()
                .filter_map(|id| self.messages.get(id))
                .any(|m| m.seq > seq && m.sender != h && !m.is_notice())
        })
    }

    /// `POST /v1/conversations/{id}/decisions` (3.2).
    pub fn decide(&mut self, h: &str, conv: &str, body: &Value) -> SimResult<Value> {
        self.conv_for(h, conv)?;
        let decision = match body.get("decision").and_then(Value::as_str) {
            Some("reply") => "reply",
            Some("dismiss") | Some("no_reply") => "dismiss",
            Some("defer") => "defer",
            Some(other) => {
                return Err(Rejection::validation(format!(
                    "decision {other:?} is not reply, dismiss or defer"
                )));
            }
            None => {
                return Err(Rejection::validation(
                    "decision is required: reply, dismiss or defer",
                ));
            }
        };
        let category = match body.get("category") {
            None | Some(Value::Null) => "other".to_string(),
            Some(Value::String(c)) if CATEGORIES.contains(&c.as_str()) => c.clone(),
            Some(c) => {
                return Err(Rejection::validation(format!(
                    "category {c} is not one of {}",
                    CATEGORIES.join(", ")
                )));
            }
        };
        let anchor = self.body_anchor(conv, body)?;
        let at_ = now_iso();
        let now_v = self.now_v();
        let mut changed = false;
        let mut read = 0;
        let through_id;
        if decision == "defer" {
            let (seq, id) = match anchor {
                Some(a) => a,
                None => self
                    .newest_seq(conv)
                    .ok_or_else(|| Rejection::validation("the conversation has no messages"))?,
            };
            through_id = id.clone();
            let prior = self
                .agents
                .get(h)
                .and_then(|a| a.views.get(conv))
                .and_then(|v| v.defer.clone());
            let count = match prior {
                Some(d) if !self.newer_from_others(h, conv, d.anchor_seq) => {
                    d.count.saturating_add(1)
                }
                _ => 1,
            };
            let due_v = match count {
                1 => Some(now_v + 15 * MIN),
                2 => Some(now_v + 24 * 60 * MIN),
                _ => None,
            };
            let a = self.agent_mut(h)?;
            let v = a.views.entry(conv.to_string()).or_default();
            v.defer = Some(Defer {
                count,
                anchor_id: id,
                anchor_seq: seq,
                due_v,
            });
            v.reminder = None;
            changed = true;
        } else {
            let (seq, id) = match anchor {
                Some(a) => a,
                None => self.newest_seq(conv).unwrap_or((0, String::new())),
            };
            through_id = id;
            read = self.read_through(h, conv, seq);
            let a = self.agent_mut(h)?;
            let v = a.views.entry(conv.to_string()).or_default();
            if v.defer.take().is_some() || v.reminder.take().is_some() {
                changed = true;
            }
            changed |= read > 0;
        }
        let a = self.agent_mut(h)?;
        let v = a.views.entry(conv.to_string()).or_default();
        v.last_decision = Some(Decision {
            decision: decision.to_string(),
            category: category.clone(),
            at: at_.clone(),
        });
        let record = json!({
            "conversation_id": conv, "decision": decision, "category": category,
            "through_message_id": if through_id.is_empty() { Value::Null } else { json!(through_id) },
            "at": at_,
        });
        let mut logged = record.clone();
        logged["read"] = json!(read);
        a.verdicts.push(logged);
        if changed {
            self.progress(h);
        }
        Ok(json!({"decision": record}))
    }

    /// `POST /v1/conversations/{id}/read`: reads by the verdict rules, records no verdict.
    pub fn mark_read(&mut self, h: &str, conv: &str, body: &Value) -> SimResult<Value> {
        self.conv_for(h, conv)?;
        let seq = match self.body_anchor(conv, body)? {
            Some((seq, _)) => seq,
            None => self.newest_seq(conv).map(|x| x.0).unwrap_or(0),
        };
        let n = self.read_through(h, conv, seq);
        if n > 0 {
            self.progress(h);
        }
        Ok(json!({"conversation_id": conv, "read": n}))
    }
}

//! The messages' side of the store: envelopes, storing and fanning out a message, sends,
//! conversations, the stored rows of the sync path and the wake log.

use serde_json::{Value, json};

use super::super::clock::{new_delivery_id, new_id, unix_ms};
use super::super::error::{Rejection, SimResult};
use super::super::model::*;
use super::{Store, bare};
use crate::sys::time::rfc3339;

impl Store {
    pub fn envelope(&self, id: &str, viewer: &str, with_delivery: bool) -> Value {
        let Some(m) = self.messages.get(id) else {
            return Value::Null;
        };
        let conv = self.convs.get(&m.conversation_id);
        let (ctype, gname, count) = match conv.map(|c| &c.kind) {
            Some(ConvKind::Group) => {
                let g = self.groups.get(&m.conversation_id);
                (
                    "group",
                    g.map(|g| json!(g.name)),
                    g.map(|g| json!(g.members.len())),
                )
            }
            _ => ("direct", None, None),
        };
        let display = self.agents.get(&m.sender).map(|a| a.display_name.clone());
        // The sender sees the (first) recipient's state of its own message.
        let d = m
            .recipients
            .get(viewer)
            .or_else(|| m.recipients.values().next());
        let mut v = json!({
            "id": m.id, "conversation_id": m.conversation_id, "sender": m.sender,
            "client_msg_id": m.client_msg_id, "seq": m.seq, "type": m.kind,
            "content": m.content, "metadata": m.metadata,
            "context": {
                "sender": {"handle": m.sender, "display_name": display,
                           "kind": if m.is_notice() { "system" } else { "agent" }},
                "conversation": {"type": ctype, "group_name": gname, "member_count": count},
                "mentions": m.mentions,
            },
            "status": d.map(|d| d.status).unwrap_or("delivered"),
            "created_at": m.created_at,
            "delivered_at": d.and_then(|d| d.delivered_at.clone()),
            "read_at": d.and_then(|d| d.read_at.clone()),
        });
        if with_delivery {
            v["delivery_id"] = json!(d.map(|d| d.delivery_id.clone()));
        }
        v
    }

    pub(super) fn envelope_frame(&self, id: &str, viewer: &str, with_delivery: bool) -> String {
        json!({"type": "message.new", "payload": self.envelope(id, viewer, with_delivery)})
            .to_string()
    }

    /// Stores a message and fans it out. Notices of a group are pushed live only for `group_deleted`.
    pub(in crate::sim) fn store_message(&mut self, new: NewMessage<'_>) -> String {
        let NewMessage {
            conv_id,
            sender,
            kind,
            content,
            metadata,
            client_msg_id,
            recipients,
        } = new;
        let id = new_id("msg");
        let seq = self
            .convs
            .get(conv_id)
            .map(|c| c.messages.len() as u64 + 1)
            .unwrap_or(1);
        let text = content
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mentions: Vec<String> = recipients
            .iter()
            .filter(|r| mentions_handle(&text, r))
            .cloned()
            .collect();
        let ord = self.ord();
        let now = super::super::clock::wall_now();
        let msg = Message {
            id: id.clone(),
            conversation_id: conv_id.to_string(),
            sender: sender.to_string(),
            client_msg_id,
            seq,
            kind: kind.to_string(),
            content,
            metadata,
            mentions,
            created_at: rfc3339(now),
            created_unix_ms: crate::sys::time::unix_ms(now),
            created_v: self.now_v(),
            ord,
            recipients: recipients
                .iter()
                .map(|r| {
                    (
                        r.clone(),
                        Delivery {
                            delivery_id: new_delivery_id(),
                            status: "stored",
                            delivered_at: None,
                            read_at: None,
                        },
                    )
                })
                .collect(),
        };
        let notice = msg.is_notice();
        let event = msg
            .content
            .pointer("/data/event")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        self.messages.insert(id.clone(), msg);
        if let Some(c) = self.convs.get_mut(conv_id) {
            c.messages.push(id.clone());
        }
        let now_v = self.now_v();
        for r in &recipients {
            if !notice || event == "group_deleted" {
                let frame = self.envelope_frame(&id, r, false);
                let mut handed_no_ack = false;
                // A full-paused agent gets no live push (contract 3.1).
                if let Some(a) = self.agents.get(r).filter(|a| !a.asleep()) {
                    for s in a.sockets.iter().filter(|s| !s.silenced) {
                        let out = Out::Message {
                            id: id.clone(),
                            frame: frame.clone(),
                        };
                        if s.tx.send(out).is_ok() && !s.has("ack") {
                            handed_no_ack = true;
                        }
                    }
                }
                if handed_no_ack {
                    self.mark_delivered(&id, r);
                }
            }
            if notice {
                continue;
            }
            self.land(r, Landing::Message);
            // A newer message voids a defer line in that conversation (3.2) and arms the ladder (5).
            let muted = self.muted(r, conv_id, sender);
            if let Some(a) = self.agents.get_mut(r) {
                if let Some(v) = a.views.get_mut(conv_id) {
                    v.defer = None;
                    v.reminder = None;
                }
                if !muted {
                    a.ladder = Ladder {
                        base_v: Some(now_v),
                        sent: 0,
                        fired: std::mem::take(&mut a.ladder.fired),
                    };
                }
            }
            if !muted {
                self.hook_note(r, super::super::webhook::Note::Message);
            }
        }
        id
    }

    /// `POST /v1/messages` in the SDKs' shape. Checks run in the hosted API's order: content,
    /// `client_msg_id` (a repeat answers 200 with the first send), type, then the route.
    pub fn send_message(&mut self, sender: &str, body: &Value) -> SimResult<(u16, Value)> {
        self.refuse_paused_send(sender)?;
        let content = message_content(body)?;
        let client_msg_id = client_msg_id(body)?;
        if let Some(m) = self
            .messages
            .values()
            .find(|m| m.sender == sender && m.client_msg_id == client_msg_id)
        {
            return Ok((200, self.envelope(&m.id.clone(), sender, false)));
        }
        let kind = body.get("type").and_then(Value::as_str).unwrap_or("text");
        if kind == "system" {
            return Err(Rejection::validation(
                "type system is reserved for the platform",
            ));
        }
        let metadata = body
            .get("metadata")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        let (conv_id, recipients) = match (body.get("to"), body.get("conversation_id")) {
            (Some(Value::String(to)), None) => self.route_to(sender, to)?,
            (None, Some(Value::String(cid))) => self.route_into(sender, cid)?,
            (Some(_), Some(_)) => {
                return Err(Rejection::validation(
                    "pass either to or conversation_id, not both",
                ));
            }
            _ => {
                return Err(Rejection::validation(
                    "to (a handle) or conversation_id is required",
                ));
            }
        };
        let id = self.store_message(NewMessage {
            conv_id: &conv_id,
            sender,
            kind,
            content,
            metadata,
            client_msg_id,
            recipients,
        });
        self.progress(sender);
        Ok((201, self.envelope(&id, sender, false)))
    }

    /// A send `to` a handle: the direct conversation (made on first contact) and its recipient.
    fn route_to(&mut self, sender: &str, to: &str) -> SimResult<(String, Vec<String>)> {
        let to = bare(to);
        if to == sender {
            return Err(Rejection::validation(
                "You cannot send a message to yourself",
            ));
        }
        if !self.agents.contains_key(&to) {
            return Err(Rejection::not_found(
                "AGENT_NOT_FOUND",
                format!("no agent @{to}"),
            ));
        }
        Ok((self.direct_conv(sender, &to), vec![to]))
    }

    /// A send into conversation `cid`: the other party of a direct one, or the group's other
    /// members (a deleted group answers 410).
    fn route_into(&self, sender: &str, cid: &str) -> SimResult<(String, Vec<String>)> {
        let c = self.conv_for(sender, cid)?;
        match &c.kind {
            ConvKind::Direct(pair) => {
                let other = pair
                    .iter()
                    .find(|h| *h != sender)
                    .cloned()
                    .unwrap_or_default();
                Ok((c.id.clone(), vec![other]))
            }
            ConvKind::Group => {
                let g = self.groups.get(cid).ok_or_else(|| {
                    Rejection::not_found("CONVERSATION_NOT_FOUND", "no such conversation")
                })?;
                if let Some((at_, by)) = &g.deleted {
                    return Err(Rejection::new(410, "GROUP_DELETED", "this group was deleted").with_details(
                        json!({"group_id": g.id, "deleted_by_handle": by, "deleted_at": at_}),
                    ));
                }
                Ok((
                    c.id.clone(),
                    g.members.keys().filter(|h| *h != sender).cloned().collect(),
                ))
            }
        }
    }

    fn direct_conv(&mut self, a: &str, b: &str) -> String {
        if let Some(c) = self.convs.values().find(|c| match &c.kind {
            ConvKind::Direct(p) => (p[0] == a && p[1] == b) || (p[0] == b && p[1] == a),
            ConvKind::Group => false,
        }) {
            return c.id.clone();
        }
        let id = new_id("conv");
        self.convs.insert(
            id.clone(),
            Conversation {
                id: id.clone(),
                kind: ConvKind::Direct([a.to_string(), b.to_string()]),
                messages: Vec::new(),
            },
        );
        id
    }

    /// A conversation `h` takes part in (a group it is or was a member of), else 404.
    pub fn conv_for(&self, h: &str, id: &str) -> SimResult<&Conversation> {
        let nf = || {
            Rejection::not_found(
                "CONVERSATION_NOT_FOUND",
                format!("no conversation {id} for @{h}"),
            )
        };
        let c = self.convs.get(id).ok_or_else(nf)?;
        let ok = match &c.kind {
            ConvKind::Direct(p) => p.iter().any(|x| x == h),
            ConvKind::Group => {
                self.groups
                    .get(id)
                    .is_some_and(|g| g.members.contains_key(h))
                    || c.messages.iter().any(|m| {
                        self.messages
                            .get(m)
                            .is_some_and(|m| m.recipients.contains_key(h))
                    })
            }
        };
        if ok { Ok(c) } else { Err(nf()) }
    }

    /// `GET /v1/conversations/{id}/messages`: oldest first, marks the returned messages delivered.
    pub fn conversation_messages(
        &mut self,
        h: &str,
        id: &str,
        limit: usize,
        after_seq: Option<u64>,
        before_seq: Option<u64>,
    ) -> SimResult<Value> {
        if after_seq.is_some() && before_seq.is_some() {
            return Err(Rejection::validation(
                "pass after_seq or before_seq, not both",
            ));
        }
        let ids: Vec<String> = self.conv_for(h, id)?.messages.clone();
        let mut picked: Vec<String> = ids
            .into_iter()
            .filter(|m| {
                let seq = self.messages.get(m).map(|m| m.seq).unwrap_or(0);
                after_seq.is_none_or(|a| seq > a) && before_seq.is_none_or(|b| seq < b)
            })
            .collect();
        if after_seq.is_some() {
            picked.truncate(limit);
        } else if picked.len() > limit {
            picked.drain(..picked.len() - limit);
        }
        for m in &picked {
            self.mark_delivered(m, h);
        }
        Ok(Value::Array(
            picked.iter().map(|m| self.envelope(m, h, false)).collect(),
        ))
    }

    fn delivery_ord(&self, h: &str, delivery_id: &str) -> Option<u64> {
        self.messages
            .values()
            .find(|m| {
                m.recipients
                    .get(h)
                    .is_some_and(|d| d.delivery_id == delivery_id)
            })
            .map(|m| m.ord)
    }

    /// Undelivered rows for `GET /v1/messages/sync`, oldest first; an unknown cursor gives none.
    pub fn stored_rows(&self, h: &str, after: Option<&str>, limit: usize) -> Vec<Value> {
        let floor = match after {
            Some(c) => match self.delivery_ord(h, c) {
                Some(o) => o,
                None => return Vec::new(),
            },
            None => 0,
        };
        let mut ids: Vec<(u64, String)> = self
            .messages
            .values()
            .filter(|m| m.ord > floor && m.recipients.get(h).is_some_and(|d| d.status == "stored"))
            .map(|m| (m.ord, m.id.clone()))
            .collect();
        ids.sort();
        ids.into_iter()
            .take(limit)
            .map(|(_, id)| self.envelope(&id, h, true))
            .collect()
    }

    /// `POST /v1/messages/sync/ack`: every stored delivery at or before the cursor is delivered.
    pub fn ack_through(&mut self, h: &str, cursor: &str) -> usize {
        let Some(top) = self.delivery_ord(h, cursor) else {
            return 0;
        };
        let ids: Vec<String> = self
            .messages
            .values()
            .filter(|m| m.ord <= top && m.recipients.get(h).is_some_and(|d| d.status == "stored"))
            .map(|m| m.id.clone())
            .collect();
        for id in &ids {
            self.mark_delivered(id, h);
        }
        ids.len()
    }

    /// Records `push` of a wake in the agent's wake log (for tests) and lands it.
    pub fn log_wake(&mut self, h: &str, payload: &Value, sockets: usize) {
        if let Some(a) = self.agents.get_mut(h) {
            a.wakes
                .push(json!({"payload": payload, "sockets": sockets, "at_ms": unix_ms()}));
        }
        self.land(h, Landing::Wake);
    }
}

/// A message about to be stored.
pub(in crate::sim) struct NewMessage<'a> {
    pub conv_id: &'a str,
    pub sender: &'a str,
    pub kind: &'a str,
    pub content: Value,
    pub metadata: Value,
    pub client_msg_id: String,
    pub recipients: Vec<String>,
}

/// A send's `content`: an object, or the SDKs' bare `text`; it needs a non-empty text or data.
fn message_content(body: &Value) -> SimResult<Value> {
    let content = match body.get("content") {
        Some(c) if c.is_object() => c.clone(),
        Some(_) => {
            return Err(Rejection::validation(
                "content must be an object like {\"text\":\"…\"}",
            ));
        }
        None => match body.get("text").and_then(Value::as_str) {
            Some(t) => json!({"text": t}),
            None => return Err(Rejection::validation("content is required")),
        },
    };
    if content
        .get("text")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
        && content.get("data").is_none()
    {
        return Err(Rejection::validation(
            "content.text must be a non-empty string",
        ));
    }
    Ok(content)
}

/// A send's `client_msg_id`, made up when absent.
fn client_msg_id(body: &Value) -> SimResult<String> {
    match body.get("client_msg_id") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        None | Some(Value::Null) => Ok(new_id("cmid")),
        _ => Err(Rejection::validation(
            "client_msg_id must be a non-empty string",
        )),
    }
}

/// True when `text` mentions `@handle` as a whole word.
pub(super) fn mentions_handle(text: &str, handle: &str) -> bool {
    let needle = format!("@{handle}");
    let lower = text.to_ascii_lowercase();
    lower.match_indices(&needle).any(|(i, _)| {
        let end = i + needle.len();
        lower[end..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
    })
}

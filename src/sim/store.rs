//! The whole server state and the operations the REST routes, the MCP tools and the control API
//! share, so every door answers alike. Callers hold the one lock; nothing here awaits. Pushes to
//! sockets are non-blocking channel sends.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::budget::IpBudget;
use super::clock::{SimClock, mono_us, new_delivery_id, new_id, new_key, now_iso, unix_ms};
use super::error::{Rejection, SimResult};
use super::model::*;
use crate::sys::time::rfc3339;

pub const CATEGORIES: [&str; 9] = [
    "open_request",
    "new_info",
    "goal_followup",
    "closing",
    "acknowledgement",
    "not_addressed",
    "no_action_needed",
    "spam",
    "other",
];

/// How long after a send, verdict or invite answer a read still counts as progress (3.1).
pub const PROGRESS_WINDOW_MS: u64 = 60_000;

pub struct Store {
    pub clock: SimClock,
    pub agents: BTreeMap<String, Agent>,
    pub messages: BTreeMap<String, Message>,
    pub convs: BTreeMap<String, Conversation>,
    pub groups: BTreeMap<String, Group>,
    pub invites: BTreeMap<String, Invite>,
    pub texts: BTreeMap<String, Value>,
    pub ip_budget: IpBudget,
    retired_keys: BTreeMap<String, String>,
    next_ord: u64,
    next_socket: u64,
}

/// Bare lowercase handle from `@Alice` / `alice`: the listener's own rule, so the sim and the
/// listener can never disagree on which handles are the same agent.
pub fn bare(handle: &str) -> String {
    crate::core::handle::normalize(handle)
}

pub fn at(handle: &str) -> String {
    format!("@{handle}")
}

/// Handles match `^[a-z][a-z0-9]*(-[a-z0-9]+)*$`, 3-30 characters.
pub fn valid_handle(h: &str) -> bool {
    let b = h.as_bytes();
    if !(3..=30).contains(&b.len()) || !b[0].is_ascii_lowercase() || b[b.len() - 1] == b'-' {
        return false;
    }
    let mut prev_dash = false;
    for &c in b {
        let ok = c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-';
        if !ok || (c == b'-' && prev_dash) {
            return false;
        }
        prev_dash = c == b'-';
    }
    true
}

impl Store {
    pub fn new(clock: SimClock) -> Store {
        Store {
            clock,
            agents: BTreeMap::new(),
            messages: BTreeMap::new(),
            convs: BTreeMap::new(),
            groups: BTreeMap::new(),
            invites: BTreeMap::new(),
            texts: BTreeMap::new(),
            ip_budget: IpBudget::default(),
            retired_keys: BTreeMap::new(),
            next_ord: 0,
            next_socket: 0,
        }
    }

    pub(super) fn ord(&mut self) -> u64 {
        self.next_ord += 1;
        self.next_ord
    }

    pub fn next_socket_id(&mut self) -> u64 {
        self.next_socket += 1;
        self.next_socket
    }

    pub fn now_v(&self) -> u64 {
        self.clock.now_v()
    }

    // ---- agents and keys ----

    pub fn create_agent(
        &mut self,
        handle: &str,
        display_name: Option<&str>,
    ) -> SimResult<(String, String)> {
        let h = bare(handle);
        if !valid_handle(&h) {
            return Err(Rejection::new(
                400,
                "INVALID_HANDLE",
                "handle must be 3-30 characters: lowercase letters, digits and single dashes, starting with a letter",
            ));
        }
        if self.agents.contains_key(&h) {
            return Err(Rejection::new(
                409,
                "HANDLE_TAKEN",
                format!("@{h} is taken"),
            ));
        }
        let key = new_key();
        let (landing, _) = broadcast::channel(64);
        let mut name = h.clone();
        if let Some(first) = name.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        self.agents.insert(
            h.clone(),
            Agent {
                handle: h.clone(),
                display_name: display_name.map(str::to_string).unwrap_or(name),
                key: key.clone(),
                key_refused: false,
                created_at: now_iso(),
                muted_convs: BTreeSet::new(),
                muted_agents: BTreeSet::new(),
                views: BTreeMap::new(),
                connects: Vec::new(),
                acks: Vec::new(),
                sends: Vec::new(),
                wakes: Vec::new(),
                hold: tokio::sync::watch::Sender::new(false),
                ladder_off: false,
                connect_budget: Default::default(),
                sockets: Vec::new(),
                ladder: Ladder::default(),
                polls: Default::default(),
                last_progress_v: None,
                verdicts: Vec::new(),
                idem: Default::default(),
                landing,
                held: 0,
            },
        );
        Ok((h, key))
    }

    /// The agent a key names, valid or not (a rotated or refused key still names its agent, so
    /// its connect attempts are logged and budgeted there). `bool` is whether the key is good.
    pub fn key_owner(&self, key: &str) -> Option<(String, bool)> {
        if let Some(a) = self.agents.values().find(|a| a.key == key) {
            return Some((a.handle.clone(), !a.key_refused));
        }
        self.retired_keys.get(key).map(|h| (h.clone(), false))
    }

    /// The agent a REST key authenticates, or 401.
    pub fn auth(&self, key: Option<&str>) -> SimResult<String> {
        match key.and_then(|k| self.key_owner(k)) {
            Some((h, true)) => Ok(h),
            _ => Err(Rejection::unauthorized()),
        }
    }

    pub fn agent(&self, h: &str) -> SimResult<&Agent> {
        self.agents.get(&bare(h)).ok_or_else(|| {
            Rejection::not_found("AGENT_NOT_FOUND", format!("no agent @{}", bare(h)))
        })
    }

    pub fn agent_mut(&mut self, h: &str) -> SimResult<&mut Agent> {
        self.agents.get_mut(&bare(h)).ok_or_else(|| {
            Rejection::not_found("AGENT_NOT_FOUND", format!("no agent @{}", bare(h)))
        })
    }

    pub fn rotate_key(&mut self, h: &str) -> SimResult<String> {
        let a = self.agent_mut(h)?;
        let old = std::mem::replace(&mut a.key, new_key());
        a.key_refused = false;
        let (handle, key) = (a.handle.clone(), a.key.clone());
        self.retired_keys.insert(old, handle.clone());
        self.close_sockets(&handle, 1008, "API key rotated");
        Ok(key)
    }

    /// `create_agent` with the key the agent had on an earlier run of the sim, so a listener that
    /// kept running across a sim restart finds its agent again. The key must look like one the
    /// sim hands out (`ac_live_` and 16-64 letters or digits) and be no other agent's.
    pub fn create_agent_with_key(
        &mut self,
        handle: &str,
        display_name: Option<&str>,
        key: &str,
    ) -> SimResult<String> {
        let well_formed = key.strip_prefix("ac_live_").is_some_and(|rest| {
            (16..=64).contains(&rest.len()) && rest.bytes().all(|b| b.is_ascii_alphanumeric())
        });
        if !well_formed {
            return Err(Rejection::validation(
                "api_key must be `ac_live_` and 16-64 letters or digits",
            ));
        }
        if self.key_owner(key).is_some() {
            return Err(Rejection::new(
                409,
                "KEY_TAKEN",
                "another agent has this api_key",
            ));
        }
        let (h, _) = self.create_agent(handle, display_name)?;
        self.agent_mut(&h)?.key = key.to_string();
        Ok(h)
    }

    pub fn set_key_refused(&mut self, h: &str, refused: bool) -> SimResult<()> {
        let a = self.agent_mut(h)?;
        a.key_refused = refused;
        let handle = a.handle.clone();
        if refused {
            self.close_sockets(&handle, 1008, "Invalid token");
        }
        Ok(())
    }

    pub fn me(&self, h: &str) -> SimResult<Value> {
        let a = self.agent(h)?;
        Ok(json!({
            "handle": a.handle, "display_name": a.display_name, "description": null, "avatar_url": null,
            "status": "active", "paused_by_owner": "none", "is_system": false,
            "settings": {"inbox_mode": "open", "group_invite_policy": "open"},
            "email_masked": format!("{}***@example.invalid", &a.handle[..1]),
            "wake_webhook": null, "created_at": a.created_at,
        }))
    }

    pub fn progress(&mut self, h: &str) {
        let now = self.now_v();
        if let Some(a) = self.agents.get_mut(h) {
            a.last_progress_v = Some(now);
        }
    }

    pub fn progress_recently(&self, h: &str) -> bool {
        let now = self.now_v();
        self.agents
            .get(h)
            .and_then(|a| a.last_progress_v)
            .is_some_and(|t| now.saturating_sub(t) < PROGRESS_WINDOW_MS)
    }

    // ---- sockets ----

    /// Sends to every live, unsilenced socket of `h` that passes `want`.
    pub fn push(&self, h: &str, frame: &str, want: impl Fn(&SocketEntry) -> bool) -> usize {
        let Some(a) = self.agents.get(h) else {
            return 0;
        };
        let mut n = 0;
        for s in a.sockets.iter().filter(|s| !s.silenced && want(s)) {
            if s.tx.send(Out::Frame(frame.to_string())).is_ok() {
                n += 1;
            }
        }
        n
    }

    pub fn land(&self, h: &str, what: Landing) {
        if let Some(a) = self.agents.get(h) {
            let _ = a.landing.send(what);
        }
    }

    pub fn close_sockets(&mut self, h: &str, code: u16, reason: &str) -> usize {
        let Some(a) = self.agents.get_mut(h) else {
            return 0;
        };
        let n = a.sockets.len();
        for s in a.sockets.drain(..) {
            let _ = s.tx.send(Out::Close(code, reason.to_string()));
        }
        n
    }

    pub fn silence_sockets(&mut self, h: &str) -> usize {
        let Some(a) = self.agents.get_mut(h) else {
            return 0;
        };
        let mut n = 0;
        for s in a.sockets.iter_mut().filter(|s| !s.silenced) {
            s.silenced = true;
            let _ = s.tx.send(Out::Silence);
            n += 1;
        }
        n
    }

    pub fn log_connect(
        &mut self,
        h: &str,
        path: &str,
        outcome: &str,
        reason: Option<&str>,
        caps: &[String],
    ) {
        if let Some(a) = self.agents.get_mut(h) {
            a.connects.push(json!({
                "at": now_iso(), "at_ms": unix_ms(), "mono_us": mono_us(), "path": path, "outcome": outcome,
                "reason": reason, "capabilities": caps,
            }));
        }
    }

    /// Registers an accepted socket and queues its backlog: every `stored` delivery, with
    /// `delivery_id` (the reconnect drain: unacked messages are pushed again, contract 3.4).
    pub fn attach_socket(&mut self, h: &str, entry: SocketEntry) {
        let ack = entry.has("ack");
        let tx = entry.tx.clone();
        let mut backlog: Vec<(u64, String)> = self
            .messages
            .values()
            .filter(|m| m.recipients.get(h).is_some_and(|d| d.status == "stored"))
            .map(|m| (m.ord, m.id.clone()))
            .collect();
        backlog.sort();
        for (_, id) in backlog {
            let frame = self.envelope_frame(&id, h, true);
            let out = Out::Message {
                id: id.clone(),
                frame,
            };
            if tx.send(out).is_ok() && !ack {
                self.mark_delivered(&id, h);
            }
        }
        if let Some(a) = self.agents.get_mut(h) {
            a.sockets.push(entry);
        }
    }

    pub fn detach_socket(&mut self, h: &str, id: u64) {
        if let Some(a) = self.agents.get_mut(h) {
            a.sockets.retain(|s| s.id != id);
        }
    }

    pub fn record_ack(&mut self, h: &str, message_id: &str) {
        let known = self
            .messages
            .get(message_id)
            .is_some_and(|m| m.recipients.contains_key(h));
        if known {
            self.mark_delivered(message_id, h);
        }
        if let Some(a) = self.agents.get_mut(h) {
            a.acks.push(json!({"message_id": message_id, "at": now_iso(), "at_ms": unix_ms(), "mono_us": mono_us(), "known": known}));
        }
    }

    /// Logs a `message.new` just written to one of `h`'s sockets.
    pub fn record_send(&mut self, h: &str, message_id: &str) {
        if let Some(a) = self.agents.get_mut(h) {
            a.sends
                .push(json!({"message_id": message_id, "at_ms": unix_ms(), "mono_us": mono_us()}));
        }
    }

    /// Holds (or releases) everything queued for `h`'s sockets, the ones open now and later.
    pub fn hold_sockets(&self, h: &str, hold: bool) -> SimResult<()> {
        self.agent(h)?.hold.send_replace(hold);
        Ok(())
    }

    pub(super) fn mark_delivered(&mut self, id: &str, h: &str) {
        if let Some(d) = self
            .messages
            .get_mut(id)
            .and_then(|m| m.recipients.get_mut(h))
            && d.status == "stored"
        {
            d.status = "delivered";
            d.delivered_at = Some(now_iso());
        }
    }

    // ---- messages ----

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

    fn envelope_frame(&self, id: &str, viewer: &str, with_delivery: bool) -> String {
        json!({"type": "message.new", "payload": self.envelope(id, viewer, with_delivery)})
            .to_string()
    }

    /// Stores a message and fans it out. Notices of a group are pushed live only for `group_deleted`.
    pub(super) fn store_message(&mut self, new: NewMessage<'_>) -> String {
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
        let now = std::time::SystemTime::now();
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
                if let Some(a) = self.agents.get(r) {
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
            let muted = self.agents.get(r).is_some_and(|a| {
                a.muted_convs.contains(conv_id) || a.muted_agents.contains(sender)
            });
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
        }
        id
    }

    /// `POST /v1/messages` in the SDKs' shape. Checks run in the hosted API's order: content,
    /// `client_msg_id` (a repeat answers 200 with the first send), type, then the route.
    pub fn send_message(&mut self, sender: &str, body: &Value) -> SimResult<(u16, Value)> {
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

    // ---- mutes ----

    pub fn mute(&mut self, h: &str, body: &Value, on: bool) -> SimResult<Value> {
        let kind = body
            .get("target_kind")
            .and_then(Value::as_str)
            .unwrap_or("");
        match kind {
            "agent" => {
                let t = body
                    .get("target_handle")
                    .or_else(|| body.get("target_id"))
                    .and_then(Value::as_str)
                    .map(bare)
                    .ok_or_else(|| Rejection::validation("target_handle is required"))?;
                self.agent(&t)?;
                set_member(&mut self.agent_mut(h)?.muted_agents, &t, on);
                Ok(json!({"target_kind": "agent", "target_handle": t, "muted": on}))
            }
            "conversation" => {
                let t = body
                    .get("target_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| Rejection::validation("target_id is required"))?
                    .to_string();
                self.conv_for(h, &t)?;
                set_member(&mut self.agent_mut(h)?.muted_convs, &t, on);
                Ok(json!({"target_kind": "conversation", "target_id": t, "muted": on}))
            }
            _ => Err(Rejection::validation(
                "target_kind must be agent or conversation",
            )),
        }
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
pub(super) struct NewMessage<'a> {
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

/// Puts `item` in `set` when `on`, else takes it out (a mute or an unmute).
fn set_member(set: &mut BTreeSet<String>, item: &str, on: bool) {
    if on {
        set.insert(item.to_string());
    } else {
        set.remove(item);
    }
}

/// True when `text` mentions `@handle` as a whole word.
fn mentions_handle(text: &str, handle: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_rule_matches_the_server_pattern() {
        assert!(valid_handle("alice"));
        assert!(valid_handle("example-relay"));
        assert!(!valid_handle("al"));
        assert!(!valid_handle("Alice"));
        assert!(!valid_handle("a--b"));
        assert!(!valid_handle("abc-"));
        assert!(!valid_handle("1abc"));
    }

    use super::super::clock::SimClock;

    /// Two agents on a fresh state at real time (the 60 s progress window cannot lapse mid-test).
    fn pair() -> Store {
        let mut s = Store::new(SimClock::new(1.0));
        s.create_agent("alice", None).unwrap();
        s.create_agent("bob", None).unwrap();
        s
    }

    /// Forgets `h`'s last progress, as if the 60 s window had passed.
    fn forget_progress(s: &mut Store, h: &str) {
        s.agents.get_mut(h).unwrap().last_progress_v = None;
    }

    #[test]
    fn progress_3_1_a_send_counts_but_a_resend_of_the_same_client_msg_id_does_not() {
        let mut s = pair();
        let body = json!({"to": "bob", "client_msg_id": "c1", "content": {"text": "x"}});
        let (st, first) = s.send_message("alice", &body).unwrap();
        assert_eq!(st, 201);
        assert!(s.progress_recently("alice"));
        forget_progress(&mut s, "alice");
        let (st, again) = s.send_message("alice", &body).unwrap();
        assert_eq!(
            (st, &again["id"]),
            (200, &first["id"]),
            "answered with the original"
        );
        assert!(!s.progress_recently("alice"), "a resend changed nothing");
    }

    #[test]
    fn progress_3_1_a_verdict_counts_only_when_it_read_something_or_moved_a_reminder() {
        let mut s = pair();
        let (_, m) = s
            .send_message("alice", &json!({"to": "bob", "content": {"text": "x"}}))
            .unwrap();
        let conv = m["conversation_id"].as_str().unwrap().to_string();
        let dismiss = json!({"decision": "dismiss", "category": "other"});
        s.decide("bob", &conv, &dismiss).unwrap();
        assert!(s.progress_recently("bob"), "the dismiss read the message");
        forget_progress(&mut s, "bob");
        s.decide("bob", &conv, &dismiss).unwrap();
        assert!(
            !s.progress_recently("bob"),
            "a dismiss of a read conversation"
        );
        s.decide(
            "bob",
            &conv,
            &json!({"decision": "defer", "category": "other"}),
        )
        .unwrap();
        assert!(s.progress_recently("bob"), "a defer moves a reminder");
        forget_progress(&mut s, "bob");
        s.mark_read("bob", &conv, &json!({})).unwrap();
        assert!(!s.progress_recently("bob"), "/read that read nothing");
    }

    #[test]
    fn progress_3_1_dismissing_an_invite_twice_counts_once() {
        let mut s = pair();
        let gid = s.create_group("alice", "crew", &[]).unwrap();
        let inv = s.invite(&gid, "alice", "bob").unwrap();
        assert_eq!(
            s.dismiss_invite("bob", &inv).unwrap(),
            json!({"dismissed": true})
        );
        assert!(s.progress_recently("bob"));
        forget_progress(&mut s, "bob");
        assert_eq!(
            s.dismiss_invite("bob", &inv).unwrap(),
            json!({"dismissed": true})
        );
        assert!(
            !s.progress_recently("bob"),
            "already dismissed: nothing changed"
        );
        s.decline_invite("bob", &inv).unwrap();
        assert!(
            s.progress_recently("bob"),
            "declining still works and counts"
        );
    }

    #[test]
    fn mentions_need_a_word_boundary() {
        assert!(mentions_handle("hi @bob, ok?", "bob"));
        assert!(!mentions_handle("hi @bobby", "bob"));
        assert!(mentions_handle("@BOB", "bob"));
    }
}

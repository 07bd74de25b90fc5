//! The whole server state and the operations the REST routes, the MCP tools and the control API
//! share, so every door answers alike. Callers hold the one lock; nothing here awaits. Pushes to
//! sockets are non-blocking channel sends. `sockets` and `messages` hold those two sides' operations.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::budget::IpBudgets;
use super::clock::{SimClock, new_key, now_iso};
use super::error::{Rejection, SimResult};
use super::model::*;

mod messages;
mod sockets;

pub(super) use messages::NewMessage;

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
    /// The per-IP connect budgets, keyed by the peer's IP (contract 3.4).
    pub ip_budgets: IpBudgets,
    /// Refused upgrades and restarts, for `GET /_sim/refusals` (`restart`).
    pub refusals: super::restart::Refusals,
    /// Old paths deprecated or switched off (`POST /_sim/old-paths`, contract 7).
    pub old_paths: super::old_paths::OldPaths,
    /// Sign-up and recovery by emailed code (`signup`).
    pub signup: super::signup::Signup,
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
            ip_budgets: IpBudgets::default(),
            refusals: Default::default(),
            old_paths: Default::default(),
            signup: Default::default(),
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
                paused: "none",
                suspended: false,
                missed_invites: Vec::new(),
                created_at: now_iso(),
                mutes: Default::default(),
                reply_coord: Default::default(),
                hook: Default::default(),
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
            "status": if a.suspended { "suspended" } else { "active" }, "paused_by_owner": a.paused, "is_system": false,
            "settings": {"inbox_mode": "open", "group_invite_policy": "open"},
            "email_masked": format!("{}***@example.invalid", &a.handle[..1]),
            "wake_webhook": self.webhook_state(h)?, "created_at": a.created_at,
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
}

#[cfg(test)]
mod tests {
    use super::messages::mentions_handle;
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

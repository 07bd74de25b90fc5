//! The socket frames the real server sends beyond messages and wakes (contract 3.4's list):
//! `presence.update` when an agent's first socket opens or its last one closes, `typing.start`
//! and `typing.stop` relayed from a member's socket to the conversation's others, and
//! `rate_limit.warning` when a poll budget runs low; plus any frame a test pushes
//! (`POST /_sim/agents/{h}/frame`), so "ignore unknown frame types" can be tested.

use serde_json::{Value, json};

use super::budget::LowBudget;
use super::model::ConvKind;
use super::store::Store;

impl Store {
    /// The agents who see `h`'s presence: those it shares a direct conversation with.
    fn contacts(&self, h: &str) -> Vec<String> {
        self.convs
            .values()
            .filter_map(|c| match &c.kind {
                ConvKind::Direct(pair) if pair.iter().any(|x| x == h) => {
                    pair.iter().find(|x| *x != h).cloned()
                }
                _ => None,
            })
            .collect()
    }

    /// `presence.update` to `h`'s contacts (`{handle, status, custom_message}`, the handle bare).
    pub fn presence_changed(&self, h: &str, online: bool) {
        let status = if online { "online" } else { "offline" };
        let frame = json!({"type": "presence.update",
                           "payload": {"handle": h, "status": status, "custom_message": null}})
        .to_string();
        for c in self.contacts(h) {
            self.push(&c, &frame, |_| true);
        }
    }

    /// Relays a client's `typing.start` / `typing.stop` (`{"conversation_id"}`) to the other
    /// members' sockets, naming the typist; anything else, or a conversation `h` is not in, is
    /// ignored as the real server ignores frames it does not take.
    pub fn relay_typing(&self, h: &str, frame: &Value) {
        let kind = frame.get("type").and_then(Value::as_str);
        let Some(kind @ ("typing.start" | "typing.stop")) = kind else {
            return;
        };
        let Some(conv) = frame
            .pointer("/payload/conversation_id")
            .and_then(Value::as_str)
        else {
            return;
        };
        let Ok(c) = self.conv_for(h, conv) else {
            return;
        };
        let others: Vec<String> = match &c.kind {
            ConvKind::Direct(pair) => pair.iter().filter(|x| *x != h).cloned().collect(),
            ConvKind::Group => self
                .groups
                .get(conv)
                .map(|g| g.members.keys().filter(|x| *x != h).cloned().collect())
                .unwrap_or_default(),
        };
        let out =
            json!({"type": kind, "payload": {"conversation_id": conv, "handle": h}}).to_string();
        for o in others {
            self.push(&o, &out, |_| true);
        }
    }

    /// `rate_limit.warning` to `h`'s sockets: a poll budget is down to its last reads.
    pub fn rate_limit_warning(&self, h: &str, low: LowBudget) {
        let frame = json!({"type": "rate_limit.warning", "payload": {
            "budget": low.budget, "remaining": low.remaining, "limit": low.limit,
        }})
        .to_string();
        self.push(h, &frame, |_| true);
    }
}

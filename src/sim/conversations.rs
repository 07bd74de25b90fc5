//! `GET /v1/conversations` and the hosted `agentchat_list_conversations`: every conversation the
//! agent is in, newest first, with what it needs to pick one (type, the peer or the group, the
//! newest message's time, unread count, muted). Metadata only, never a body.

use serde_json::{Value, json};

use super::model::ConvKind;
use super::store::{Store, at};

impl Store {
    /// `h`'s conversations that hold a message, newest first, at most `limit`.
    pub fn list_conversations(&self, h: &str, limit: usize) -> Value {
        let now_v = self.now_v();
        let mut rows: Vec<(u64, Value)> = self
            .convs
            .values()
            .filter(|c| self.conv_for(h, &c.id).is_ok())
            .filter_map(|c| {
                let last = c.messages.last().and_then(|m| self.messages.get(m))?;
                let unread = c
                    .messages
                    .iter()
                    .filter_map(|m| self.messages.get(m))
                    .filter(|m| m.recipients.get(h).is_some_and(|d| d.status != "read"))
                    .count();
                let mut row = json!({
                    "conversation_id": c.id,
                    "last_message_at": last.created_at,
                    "unread": unread,
                    "muted": self.agents.get(h).is_some_and(|a| a.mutes.conversation(&c.id, now_v)),
                });
                match &c.kind {
                    ConvKind::Direct(pair) => {
                        let other = pair.iter().find(|x| *x != h).cloned().unwrap_or_default();
                        row["type"] = json!("direct");
                        row["counterparty"] = json!({
                            "handle": at(&other),
                            "display_name": self.agents.get(&other).map(|a| a.display_name.clone()),
                        });
                    }
                    ConvKind::Group => {
                        let g = self.groups.get(&c.id);
                        row["type"] = json!("group");
                        row["group"] = json!({
                            "name": g.map(|g| g.name.clone()),
                            "member_count": g.map(|g| g.members.len()),
                            "deleted": g.is_some_and(|g| g.deleted.is_some()),
                        });
                    }
                }
                Some((last.ord, row))
            })
            .collect();
        rows.sort_by_key(|(ord, _)| std::cmp::Reverse(*ord));
        Value::Array(rows.into_iter().take(limit).map(|(_, r)| r).collect())
    }
}

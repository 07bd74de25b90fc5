//! What the socket heard of the messages not yet read (issue 38 items 3 and 5): per conversation,
//! each `message.new`'s id, sender, whether it mentioned this agent (the envelope's
//! `context.mentions`, which the platform writes) and when it was sent; never a body. A tray
//! names only a card's newest sender (`preview.sender`, `last_sender`), and nothing of a card
//! past its cut: with this the policy judges every sender it can see, a group's earlier ones and
//! a card the tray did not show.
//!
//! A message is forgotten once a tray shows it read: older than its card's `oldest_unread_at`,
//! beyond its `unread` count, or its conversation missing from a tray that is not cut short.
//! Bounded: [`MAX_CONVERSATIONS`] conversations of at most [`MAX_PER_CONVERSATION`] messages,
//! the conversation heard from longest ago forgotten first.

use crate::tray::Tray;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};

pub const MAX_CONVERSATIONS: usize = 256;
pub const MAX_PER_CONVERSATION: usize = 32;

/// One `message.new` as the policy keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeardMessage {
    pub id: String,
    pub conversation: String,
    /// Normalised (`core::handle`).
    pub sender: String,
    /// Whether `context.mentions` named this agent; `None`: the envelope had no mentions.
    pub mentions_me: Option<bool>,
    /// `created_at` (Unix ms), when the envelope had one.
    pub at_ms: Option<i64>,
    /// `context.conversation.type` is `group` (`None`: not said).
    pub group: Option<bool>,
}

/// One conversation's unread messages as heard.
#[derive(Debug, Clone, Default)]
pub struct Unread {
    /// Oldest first.
    pub messages: VecDeque<HeardMessage>,
    /// What the last tray (or the mute memory, before any tray showed it) said of its mute.
    pub muted: Option<bool>,
    /// A run started for it while its card was past the cut: what was heard had its chance; a
    /// new message makes it wake again.
    pub spent: bool,
}

impl Unread {
    pub fn group(&self) -> Option<bool> {
        self.messages.iter().rev().find_map(|m| m.group)
    }

    pub fn newest(&self) -> Option<&HeardMessage> {
        self.messages.back()
    }
}

#[derive(Debug, Clone, Default)]
pub struct Heard {
    convs: BTreeMap<String, Unread>,
    /// Conversations by the last message heard, oldest first, for the bound.
    order: VecDeque<String>,
}

impl Heard {
    /// A message heard; `muted` is what earlier trays said of its conversation.
    pub fn hear(&mut self, m: HeardMessage, muted: Option<bool>) {
        let conv = m.conversation.clone();
        if let Some(i) = self.order.iter().position(|c| *c == conv) {
            self.order.remove(i);
        }
        self.order.push_back(conv.clone());
        let entry = self.convs.entry(conv).or_default();
        if entry.muted.is_none() {
            entry.muted = muted;
        }
        entry.spent = false;
        if !entry.messages.iter().any(|h| h.id == m.id) {
            entry.messages.push_back(m);
        }
        while entry.messages.len() > MAX_PER_CONVERSATION {
            entry.messages.pop_front();
        }
        while self.order.len() > MAX_CONVERSATIONS {
            if let Some(old) = self.order.pop_front() {
                self.convs.remove(&old);
            }
        }
    }

    /// Takes in what `tray` shows read.
    pub fn see(&mut self, tray: &Tray) {
        let complete = !tray.is_truncated();
        let shown: BTreeMap<&str, &crate::tray::Card> = tray
            .conversations
            .iter()
            .map(|c| (c.conversation_id.as_str(), c))
            .collect();
        self.convs.retain(|conv, unread| {
            let Some(card) = shown.get(conv.as_str()) else {
                return !complete;
            };
            unread.muted = Some(card.is_muted());
            let oldest = card
                .extra
                .get("oldest_unread_at")
                .and_then(Value::as_str)
                .and_then(unix_ms);
            if let Some(oldest) = oldest {
                unread
                    .messages
                    .retain(|m| m.at_ms.is_none_or(|t| t >= oldest));
            }
            let count = card.extra.get("unread").and_then(Value::as_u64);
            if let Some(n) = count.and_then(|n| usize::try_from(n).ok()) {
                while unread.messages.len() > n {
                    unread.messages.pop_front();
                }
            }
            !unread.messages.is_empty()
        });
        self.order.retain(|c| self.convs.contains_key(c));
    }

    pub fn get(&self, conversation: &str) -> Option<&Unread> {
        self.convs.get(conversation)
    }

    /// The conversations heard from that `tray` does not show (past its cut), not muted and not
    /// spent, newest heard first.
    pub fn past_cut<'a>(&'a self, tray: &'a Tray) -> impl Iterator<Item = (&'a str, &'a Unread)> {
        self.order
            .iter()
            .rev()
            .filter(move |c| {
                tray.is_truncated() && !tray.conversations.iter().any(|k| k.conversation_id == **c)
            })
            .filter_map(|c| self.convs.get(c).map(|u| (c.as_str(), u)))
            .filter(|(_, u)| u.muted != Some(true) && !u.spent && !u.messages.is_empty())
    }

    /// A run started for these conversations past the cut: what was heard of them had its run.
    pub fn spend(&mut self, conversations: &[String]) {
        for c in conversations {
            if let Some(u) = self.convs.get_mut(c) {
                u.spent = true;
            }
        }
    }
}

/// An RFC 3339 time as Unix ms.
pub fn unix_ms(text: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(text).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(id: &str, conv: &str, sender: &str, at: i64) -> HeardMessage {
        HeardMessage {
            id: id.into(),
            conversation: conv.into(),
            sender: sender.into(),
            mentions_me: Some(false),
            at_ms: Some(at),
            group: Some(true),
        }
    }

    fn tray(cards: serde_json::Value, truncated: bool) -> Tray {
        Tray::parse(
            json!({"conversations": cards, "truncated": truncated})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn what_a_tray_shows_read_is_forgotten_and_a_cut_tray_keeps_what_it_does_not_show() {
        let mut h = Heard::default();
        h.hear(msg("m1", "g", "a", 1_000), None);
        h.hear(msg("m2", "g", "b", 2_000), None);
        h.hear(msg("m3", "g", "c", 3_000), None);
        h.hear(msg("x1", "other", "d", 3_000), Some(false));
        // m1 was read: the card's oldest unread is m2's time, two unread.
        let t = tray(
            json!([{"conversation_id": "g", "unread": 2,
                    "oldest_unread_at": "1970-01-01T00:00:02Z"}]),
            true,
        );
        h.see(&t);
        let ids: Vec<&str> = h
            .get("g")
            .unwrap()
            .messages
            .iter()
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(ids, ["m2", "m3"]);
        // `other` is past the cut: kept, and named as such until a run is spent on it.
        let past: Vec<&str> = h.past_cut(&t).map(|(c, _)| c).collect();
        assert_eq!(past, ["other"]);
        h.spend(&["other".into()]);
        assert_eq!(h.past_cut(&t).count(), 0);
        h.hear(msg("x2", "other", "d", 4_000), None);
        assert_eq!(h.past_cut(&t).count(), 1, "a new message wakes again");
        // A complete tray without them: read.
        h.see(&tray(json!([]), false));
        assert!(h.get("g").is_none() && h.get("other").is_none());
    }

    #[test]
    fn the_memory_is_bounded() {
        let mut h = Heard::default();
        for i in 0..(MAX_CONVERSATIONS + 5) {
            for j in 0..(MAX_PER_CONVERSATION + 5) {
                h.hear(msg(&format!("m{i}-{j}"), &format!("c{i}"), "a", 0), None);
            }
        }
        assert_eq!(h.convs.len(), MAX_CONVERSATIONS);
        assert!(h.get("c0").is_none(), "the oldest went first");
        assert!(
            h.convs
                .values()
                .all(|u| u.messages.len() == MAX_PER_CONVERSATION)
        );
    }
}

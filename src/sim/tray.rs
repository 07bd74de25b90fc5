//! The tray v1 (`GET /v1/inbox`, contract 3.1) built from the state, and the set of unanswered
//! items the re-wake ladder names (contract 5). Pure reads of the state.

use serde_json::{Value, json};

use super::model::{Agent, ConvKind, Conversation, Message};
use super::store::{CATEGORIES, Store, at};

pub const QUESTION: &str = "For each conversation on this tray decide ONE thing: reply, dismiss, or defer. Reply only when an open question, request or new information needs your answer; dismiss when the exchange is finished or nothing needs you; defer when it needs you but not now. Give each conversation one category.";

/// One card with what the tray and the ladder need to know about it.
pub struct Card {
    pub conversation_id: String,
    pub newest_ord: u64,
    /// Server-clock time of the preview (the newest unread message that is not a notice).
    pub preview_v: Option<u64>,
    pub muted: bool,
    pub json: Value,
}

pub struct Tray {
    pub cards: Vec<Card>,
    pub deferred: usize,
    /// Pending, undismissed invite ids, newest first.
    pub invites: Vec<String>,
}

fn preview_text(m: &Message) -> String {
    m.text().chars().take(240).collect()
}

/// Every visible card (newest first), the hidden-deferred count, and the pending invites.
pub fn build(s: &Store, h: &str) -> Tray {
    // A full-paused agent's tray is empty (contract 3.1).
    let Some(agent) = s.agents.get(h).filter(|a| a.paused != "full") else {
        return Tray {
            cards: Vec::new(),
            deferred: 0,
            invites: Vec::new(),
        };
    };
    let now_ms = super::clock::unix_ms();
    let mut cards = Vec::new();
    let mut deferred = 0;
    for c in s.convs.values() {
        match slot(s, agent, h, c, now_ms) {
            Slot::Empty => {}
            Slot::Deferred => deferred += 1,
            Slot::Card(card) => cards.push(card),
        }
    }
    cards.sort_by_key(|c| std::cmp::Reverse(c.newest_ord));
    Tray {
        cards,
        deferred,
        invites: pending_invites(s, h),
    }
}

/// What one conversation puts on `h`'s tray.
enum Slot {
    /// Nothing unread.
    Empty,
    /// Deferred and hidden: only counted.
    Deferred,
    Card(Card),
}

fn slot(s: &Store, agent: &Agent, h: &str, c: &Conversation, now_ms: u64) -> Slot {
    // A direct conversation between two others holds nothing for `h`: skip it before looking up
    // its messages (a long one would cost every tray read).
    if let ConvKind::Direct(pair) = &c.kind
        && !pair.iter().any(|x| x == h)
    {
        return Slot::Empty;
    }
    let msgs: Vec<&Message> = c
        .messages
        .iter()
        .filter_map(|id| s.messages.get(id))
        .collect();
    let unread: Vec<&Message> = msgs
        .iter()
        .copied()
        .filter(|m| m.recipients.get(h).is_some_and(|d| d.status != "read"))
        .collect();
    let Some(last_unread) = unread.last().copied() else {
        return Slot::Empty;
    };
    let view = agent.views.get(&c.id);
    if let Some(d) = view.and_then(|v| v.defer.as_ref())
        && (d.due_v.is_some() || d.count >= 3)
        && !s.newer_from_others(h, &c.id, d.anchor_seq)
    {
        return Slot::Deferred;
    }
    let preview = unread.iter().rev().find(|m| !m.is_notice()).copied();
    let own_last = msgs.iter().rev().find(|m| m.sender == h).copied();
    let you_owe_reply = preview.is_some_and(|p| own_last.is_none_or(|o| p.seq > o.seq));
    let mentioned_you = unread
        .iter()
        .any(|m| !m.is_notice() && m.mentions.iter().any(|x| x == h));
    let muted_by = preview
        .map(|p| p.sender.as_str())
        .unwrap_or(last_unread.sender.as_str());
    let now_v = s.now_v();
    let muted = agent.mutes.conversation(&c.id, now_v) || agent.mutes.agent(muted_by, now_v);
    let newest = msgs.last().copied().unwrap_or(last_unread);
    let pace = |win: u64| {
        msgs.iter()
            .filter(|m| now_ms.saturating_sub(m.created_unix_ms) < win)
            .count()
    };
    let mut card = json!({ "conversation_id": c.id });
    match &c.kind {
        ConvKind::Direct(pair) => direct_fields(&mut card, s, h, pair, &msgs),
        ConvKind::Group => group_fields(&mut card, s, &c.id),
    }
    card["you_owe_reply"] = json!(you_owe_reply);
    card["mentioned_you"] = json!(mentioned_you);
    card["unread"] = json!(unread.len());
    card["oldest_unread_at"] = json!(unread[0].created_at);
    card["newest_unread_at"] = json!(last_unread.created_at);
    card["last_sender"] = json!(at(&last_unread.sender));
    card["last_message_id"] = json!(last_unread.id);
    card["last_message_at"] = json!(newest.created_at);
    card["your_last_message_at"] = json!(own_last.map(|m| m.created_at.clone()));
    card["pace"] = json!({"last_60s": pace(60_000), "last_10m": pace(600_000)});
    card["preview"] = match preview {
        Some(p) => {
            json!({"message_id": p.id, "sender": at(&p.sender), "text": preview_text(p), "at": p.created_at})
        }
        None => Value::Null,
    };
    card["your_last_decision"] = match view.and_then(|v| v.last_decision.as_ref()) {
        Some(d) => json!({"decision": d.decision, "category": d.category, "at": d.at}),
        None => Value::Null,
    };
    card["muted"] = json!(muted);
    card["reminder"] = match view.and_then(|v| v.reminder.as_ref()) {
        Some((step, fired)) => json!({"step": step, "fired_at": fired}),
        None => Value::Null,
    };
    Slot::Card(Card {
        conversation_id: c.id.clone(),
        newest_ord: last_unread.ord,
        preview_v: preview.map(|p| p.created_v),
        muted,
        json: card,
    })
}

/// A direct card's `type`, `counterparty` and `relationship` (who wrote first, who read).
fn direct_fields(card: &mut Value, s: &Store, h: &str, pair: &[String], msgs: &[&Message]) {
    let other = pair.iter().find(|x| *x != h).cloned().unwrap_or_default();
    let i_wrote = msgs.iter().any(|m| m.sender == h);
    let first_is_mine = msgs.first().is_some_and(|m| m.sender == h);
    let their_read = msgs
        .iter()
        .any(|m| m.sender == other && m.recipients.get(h).is_some_and(|d| d.status == "read"));
    let relationship = if !i_wrote {
        "first_contact"
    } else if first_is_mine && !their_read {
        "your_outreach"
    } else {
        "established"
    };
    card["type"] = json!("direct");
    card["counterparty"] = json!({
        "handle": at(&other),
        "display_name": s.agents.get(&other).map(|a| a.display_name.clone()),
    });
    card["relationship"] = json!(relationship);
}

/// A group card's `type`, `group` and `relationship`.
fn group_fields(card: &mut Value, s: &Store, conv_id: &str) {
    let g = s.groups.get(conv_id);
    card["type"] = json!("group");
    card["group"] = json!({
        "name": g.map(|g| g.name.clone()),
        "member_count": g.map(|g| g.members.len()),
        "deleted": g.and_then(|g| g.deleted.as_ref()).map(|(t, by)| json!({"at": t, "by": at(by)})),
    });
    card["relationship"] = json!("group");
}

/// `h`'s pending, undismissed invite ids, newest first.
fn pending_invites(s: &Store, h: &str) -> Vec<String> {
    let mut invites: Vec<&super::model::Invite> = s
        .invites
        .values()
        .filter(|i| i.invitee == h && i.state == "pending" && !i.dismissed)
        .collect();
    invites.sort_by_key(|i| std::cmp::Reverse(i.ord));
    invites.iter().map(|i| i.id.clone()).collect()
}

impl Tray {
    /// The v1 body for `limit` cards.
    pub fn body(&self, s: &Store, h: &str, limit: usize, waited_ms: Option<u64>) -> Value {
        let invites: Vec<Value> = self
            .invites
            .iter()
            .take(20)
            .filter_map(|id| s.invites.get(id))
            .map(|i| {
                let g = s.groups.get(&i.group_id);
                json!({
                    "invite_id": i.id,
                    "group": {"id": i.group_id, "name": g.map(|g| g.name.clone()), "member_count": g.map(|g| g.members.len())},
                    "invited_by": at(&i.inviter),
                    "at": i.created_at,
                })
            })
            .collect();
        json!({
            "version": 1,
            "you": at(h),
            "question": QUESTION,
            "categories": CATEGORIES,
            "conversations": self.cards.iter().take(limit).map(|c| c.json.clone()).collect::<Vec<_>>(),
            "deferred": self.deferred,
            "truncated": self.cards.len() > limit,
            "invites": invites,
            "invites_truncated": self.invites.len() > 20,
            "waited_ms": waited_ms,
        })
    }

    /// Whether a read of this tray shows something (answers a hold at once; spends no
    /// no-progress budget).
    pub fn shows_something(&self, limit: usize, invites_flag: bool) -> bool {
        !self.cards.is_empty()
            || self.cards.len() > limit
            || (invites_flag && !self.invites.is_empty())
    }

    /// Conversation ids of unanswered cards (not muted), newest first, at most 50, and whether
    /// any unanswered invite (from an inviter, into a group, not muted) waits. A card whose only
    /// unread messages are notices (`preview: null`) is not unanswered: notices never keep a
    /// ladder going on their own (contract 5).
    pub fn unanswered(&self, s: &Store, h: &str) -> (Vec<String>, bool) {
        let ids: Vec<String> = self
            .unanswered_cards()
            .take(50)
            .map(|c| c.conversation_id.clone())
            .collect();
        (ids, self.unanswered_invites(s, h).next().is_some())
    }

    fn unanswered_cards(&self) -> impl Iterator<Item = &Card> {
        self.cards
            .iter()
            .filter(|c| !c.muted && c.preview_v.is_some())
    }

    fn unanswered_invites<'a>(
        &'a self,
        s: &'a Store,
        h: &str,
    ) -> impl Iterator<Item = &'a super::model::Invite> {
        self.invites
            .iter()
            .filter_map(|id| s.invites.get(id))
            .filter(move |i| !s.muted(h, &i.group_id, &i.inviter))
    }

    /// Server-clock time of the newest message or invite among the unanswered items: the
    /// re-wake ladder's rungs count from it (contract 5). `None` when nothing is unanswered.
    pub fn newest_unanswered_v(&self, s: &Store, h: &str) -> Option<u64> {
        let cards = self.unanswered_cards().filter_map(|c| c.preview_v);
        let invites = self.unanswered_invites(s, h).map(|i| i.created_v);
        cards.chain(invites).max()
    }
}

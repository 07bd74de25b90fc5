//! The rules applied: what the policy says of each card and invite of a tray, and [`gate`], its
//! answer for the whole tray. Who may wake a run is judged per unread message the policy can see
//! (issue 38 item 3): a card's own `preview.sender`, and every sender the socket heard in its
//! conversation since it was last read (`policy::heard`); a card past the tray's cut by what the
//! socket heard of it (item 5); an invite by its inviter, `first_contact` included (item 4).

use super::heard::{Heard, Unread};
use super::{
    FirstContact, Gate, Groups, Hold, HoldReason, LoopGuard, Offsets, Policy, Verdict, clock,
};
use crate::tray::{Card, Invite, Tray};
use serde_json::Value;

use super::ledger::{Ledger, MAX_CONVERSATIONS_PER_RUN};

fn text(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.trim().is_empty())
}

/// A handle field: a string, or an object with `handle`.
pub(super) fn handle_of(v: Option<&Value>) -> Option<&str> {
    text(v).or_else(|| text(v.and_then(|v| v.get("handle"))))
}

/// Who a card is from, as the card alone tells: a direct card's counterparty; a group card's
/// newest unread message's sender (`preview.sender`); either falls back to `last_sender`.
pub fn card_sender(card: &Card) -> Option<&str> {
    let field = |k: &str| card.extra.get(k);
    let preview = handle_of(field("preview").and_then(|p| p.get("sender")));
    let direct = if is_group(card) {
        None
    } else {
        handle_of(field("counterparty"))
    };
    direct
        .or(preview)
        .or_else(|| handle_of(field("last_sender")))
}

fn is_group(card: &Card) -> bool {
    let field = |k: &str| card.extra.get(k).and_then(Value::as_str);
    field("type") == Some("group") || field("relationship") == Some("group")
}

/// The conversations of a tray the ledger remembers for the loop guard: cards that could wake a
/// run (not muted, not notices only) whose `pace` shows the conversation moving (`last_10m`
/// above 0, or no pace to tell). A card left sitting unanswered is not a loop.
pub fn loop_conversations(tray: &Tray) -> Vec<String> {
    tray.conversations
        .iter()
        .filter(|c| !c.is_muted() && !c.is_notices_only())
        .filter(|c| {
            c.extra
                .get("pace")
                .and_then(|p| p.get("last_10m"))
                .and_then(Value::as_f64)
                .is_none_or(|n| n > 0.0)
        })
        .map(|c| c.conversation_id.clone())
        .take(MAX_CONVERSATIONS_PER_RUN)
        .collect()
}

/// One unread message as the sender rules see it.
struct Said<'a> {
    sender: Option<&'a str>,
    /// Whether it mentioned this agent (`None`: nothing told which message did).
    mentions_me: Option<bool>,
}

/// Where a message was said: what its card (or, past the cut, the socket) tells of it.
struct Place {
    group: bool,
    /// The card says the conversation is a first contact; `None`: no card to say (past the
    /// cut), when only `allow` and the contacts can tell a stranger.
    first_contact: Option<bool>,
    /// The card's `mentioned_you`, for a message nothing else attributes a mention to.
    mentioned: bool,
}

fn not_allowed(key: &'static str) -> Verdict {
    Verdict::Held {
        reason: HoldReason::NotAllowed,
        key,
        until: None,
    }
}

impl Policy {
    /// Whether `allow`, `deny`, `first_contact` or `groups` can keep a card from waking.
    pub(super) fn filters_senders(&self) -> bool {
        self.allow.is_some()
            || !self.deny.is_empty()
            || self.first_contact == FirstContact::Wait
            || self.groups == Groups::Mentions
    }

    fn allows(&self, who: Option<&str>) -> bool {
        self.allow
            .as_ref()
            .is_some_and(|a| who.is_some_and(|w| a.iter().any(|p| p.matches(w))))
    }

    /// `deny`, then `allow`: the key that keeps `who` from waking a run.
    fn sender_rule(&self, who: Option<&str>) -> Option<&'static str> {
        if who.is_some_and(|w| self.deny.iter().any(|p| p.matches(w))) {
            return Some("deny");
        }
        (self.allow.is_some() && !self.allows(who)).then_some("allow")
    }

    /// Whether `who` is a stranger `first_contact = "wait"` holds: `first_contact` says the
    /// card's relationship (`None`: no card told, a stranger unless a tray showed a contact).
    /// A handle `allow` lists is known to the user: never a stranger (issue 38 item 8).
    fn waits_as_stranger(
        &self,
        who: Option<&str>,
        first_contact: Option<bool>,
        ledger: &Ledger,
    ) -> bool {
        if self.first_contact != FirstContact::Wait || self.allows(who) {
            return false;
        }
        match first_contact {
            Some(is) => is,
            None => !who.is_some_and(|w| ledger.contacts().knows(w)),
        }
    }

    /// One message: `Ok` when it may wake a run, else the key that keeps it from doing so.
    fn said(&self, m: &Said, at: &Place, ledger: &Ledger) -> Result<(), &'static str> {
        if let Some(key) = self.sender_rule(m.sender) {
            return Err(key);
        }
        if !at.group && self.waits_as_stranger(m.sender, at.first_contact, ledger) {
            return Err("first_contact");
        }
        let mentioned = m.mentions_me.unwrap_or(at.mentioned);
        if at.group && self.groups == Groups::Mentions && !mentioned {
            return Err("groups");
        }
        Ok(())
    }

    /// Of a conversation's messages, newest first: `Ok` when one may wake a run, else the
    /// newest one's key.
    fn any_said(&self, said: &[Said], at: &Place, ledger: &Ledger) -> Result<(), &'static str> {
        let mut first = None;
        for m in said {
            match self.said(m, at, ledger) {
                Ok(()) => return Ok(()),
                Err(key) => {
                    first.get_or_insert(key);
                }
            }
        }
        Err(first.unwrap_or("allow"))
    }

    /// One card, from its metadata, what the socket heard of its conversation, and the ledger.
    pub fn card(&self, card: &Card, ledger: &Ledger, heard: &Heard) -> Verdict {
        if card.is_muted() || card.is_notices_only() {
            return Verdict::Never;
        }
        let field = |k: &str| card.extra.get(k);
        let group = is_group(card);
        let heard = heard.get(&card.conversation_id);
        let known_mention =
            heard.is_some_and(|u| u.messages.iter().any(|m| m.mentions_me.is_some()));
        let place = Place {
            group,
            first_contact: Some(
                field("relationship").and_then(Value::as_str) == Some("first_contact"),
            ),
            // A mention the socket attributed to its message is that message's: the card's flag
            // says nothing more of the others.
            mentioned: !known_mention && field("mentioned_you") == Some(&Value::Bool(true)),
        };
        let mut said: Vec<Said> = Vec::new();
        let preview_id = text(field("preview").and_then(|p| p.get("message_id")));
        let preview_heard =
            heard.is_some_and(|u| u.messages.iter().any(|m| Some(m.id.as_str()) == preview_id));
        if !preview_heard {
            said.push(Said {
                sender: card_sender(card),
                mentions_me: None,
            });
        }
        if let Some(u) = heard {
            said.extend(u.messages.iter().rev().map(|m| Said {
                sender: Some(m.sender.as_str()),
                mentions_me: m.mentions_me,
            }));
        }
        if let Err(key) = self.any_said(&said, &place, ledger) {
            return not_allowed(key);
        }
        self.guarded(&card.conversation_id, &card.fingerprint().1, ledger)
    }

    /// The loop guard's word on a conversation whose newest message is `newest`.
    fn guarded(&self, conversation: &str, newest: &str, ledger: &Ledger) -> Verdict {
        self.loop_guard
            .and_then(|g: LoopGuard| ledger.loops().verdict(conversation, newest, g))
            .unwrap_or(Verdict::Wakes)
    }

    /// A conversation past the tray's cut, by what the socket heard of it.
    fn unseen(&self, conversation: &str, u: &Unread, ledger: &Ledger) -> Verdict {
        let place = Place {
            group: u.group().unwrap_or(false),
            first_contact: None,
            mentioned: false,
        };
        let said: Vec<Said> = u
            .messages
            .iter()
            .rev()
            .map(|m| Said {
                sender: Some(m.sender.as_str()),
                mentions_me: m.mentions_me,
            })
            .collect();
        if let Err(key) = self.any_said(&said, &place, ledger) {
            return not_allowed(key);
        }
        let newest = u.newest().map_or("", |m| m.id.as_str());
        self.guarded(conversation, newest, ledger)
    }

    /// One invite, by who sent it: `allow` and `deny`, and `first_contact` (an inviter the trays
    /// never showed as a contact is a stranger).
    pub fn invite(&self, invite: &Invite, ledger: &Ledger) -> Verdict {
        let who = handle_of(invite.extra.get("invited_by"));
        if let Some(key) = self.sender_rule(who) {
            return not_allowed(key);
        }
        if self.waits_as_stranger(who, None, ledger) {
            return not_allowed("first_contact");
        }
        Verdict::Wakes
    }

    /// The invites on `tray` these rules let wake a run: the only ones the invite rule may count
    /// after it (a held invite is left as the run found it, docs/operating.md).
    pub fn allowed_invites(&self, tray: &Tray, ledger: &Ledger) -> Vec<String> {
        tray.invites
            .iter()
            .flatten()
            .filter(|i| matches!(self.invite(i, ledger), Verdict::Wakes))
            .map(|i| i.invite_id.clone())
            .collect()
    }

    /// The first time rule that holds a run starting at `at_ms`, with the instant it ends.
    fn time_hold(
        &self,
        ledger: &Ledger,
        at_ms: i64,
        offsets: &dyn Offsets,
    ) -> Option<(HoldReason, &'static str, Option<i64>)> {
        let minute = |m: u32| u16::try_from(m).unwrap_or(0);
        let quiet = |m: u32| self.quiet_hours.iter().any(|r| r.contains(minute(m)));
        if quiet(clock::local_minute_of_day(offsets, at_ms)) {
            let until = clock::first_outside(offsets, at_ms, quiet);
            return Some((HoldReason::QuietHours, "quiet_hours", until));
        }
        let hour = ledger.hour(at_ms, offsets);
        if self
            .max_runs_per_hour
            .is_some_and(|cap| hour.runs >= u64::from(cap))
        {
            let until = clock::next_hour(offsets, at_ms);
            return Some((HoldReason::RunsPerHour, "max_runs_per_hour", Some(until)));
        }
        let day = ledger.day(at_ms, offsets);
        let tomorrow = || Some(clock::next_day(offsets, at_ms));
        if self
            .max_runs_per_day
            .is_some_and(|cap| day.runs >= u64::from(cap))
        {
            return Some((HoldReason::RunsPerDay, "max_runs_per_day", tomorrow()));
        }
        if self
            .max_cost_per_day_usd
            .is_some_and(|cap| day.cost_usd >= cap)
        {
            return Some((HoldReason::CostPerDay, "max_cost_per_day_usd", tomorrow()));
        }
        if self.max_tokens_per_day.is_some_and(|cap| day.tokens >= cap) {
            return Some((HoldReason::CostPerDay, "max_tokens_per_day", tomorrow()));
        }
        None
    }

    /// Whether a run may start at `now_ms` by the time rules alone (quiet hours and caps): `None`,
    /// or the first rule holding and the instant at which none does, the ledger as it is.
    pub fn may_start(
        &self,
        ledger: &Ledger,
        now_ms: i64,
        offsets: &dyn Offsets,
    ) -> Option<(HoldReason, &'static str, Option<i64>)> {
        let (reason, key, mut until) = self.time_hold(ledger, now_ms, offsets)?;
        // Quiet hours may end inside a cap's window and a day's cap at midnight inside quiet
        // hours: step to each end until no rule holds. Each step moves forward; a few suffice.
        for _ in 0..16 {
            let Some(t) = until else { break };
            match self.time_hold(ledger, t, offsets) {
                None => break,
                Some((_, _, next)) => until = next.filter(|n| *n > t),
            }
        }
        Some((reason, key, until))
    }
}

/// What the policy learns from a tray before it judges it, into the ledger: the contacts it
/// shows, and the loop guard's marks (`policy::loops`). True when the ledger changed.
pub fn observe(policy: &Policy, tray: &Tray, ledger: &mut Ledger, now_ms: i64) -> bool {
    let met = ledger.contacts_mut().see(tray);
    let within = policy.loop_guard.map_or(0, |g| g.within_ms);
    let counts: Vec<(String, usize)> = tray
        .conversations
        .iter()
        .map(|c| {
            let n = ledger
                .saw_since_release(&c.conversation_id, now_ms, within)
                .len();
            (c.conversation_id.clone(), n)
        })
        .collect();
    let count = |c: &str| counts.iter().find(|(k, _)| k == c).map_or(0, |(_, n)| *n);
    let marked = ledger
        .loops_mut()
        .step(tray, policy.loop_guard, &count, now_ms);
    met || marked
}

/// The policy's answer for `tray` at `now_ms` (after `core::decision` chose a run and
/// [`observe`] took the tray in).
///
/// Cards and invites that wake make a run, unless a time rule holds it. With no card or invite
/// that wakes, a tray cut short (`truncated`) runs for what lies past the cut when no rule could
/// keep a card from waking (`allow`, `deny`, `first_contact`, `groups`), or when the socket
/// heard a message there that the rules let wake one; otherwise the run is held by the cards'
/// own rule (`loop_guard` before `not_allowed`: it has an end).
pub fn gate(
    policy: &Policy,
    tray: &Tray,
    ledger: &Ledger,
    heard: &Heard,
    now_ms: i64,
    offsets: &dyn Offsets,
) -> Gate {
    let mut cards = Vec::new();
    let mut held: Vec<(String, HoldReason, &'static str, Option<i64>)> = Vec::new();
    for card in &tray.conversations {
        match policy.card(card, ledger, heard) {
            Verdict::Wakes => cards.push(card.conversation_id.clone()),
            Verdict::Never => {}
            Verdict::Held { reason, key, until } => {
                held.push((card.conversation_id.clone(), reason, key, until));
            }
        }
    }
    let mut unseen = Vec::new();
    let mut unseen_held = Vec::new();
    for (conv, u) in heard.past_cut(tray) {
        match policy.unseen(conv, u, ledger) {
            Verdict::Wakes => unseen.push(conv.to_string()),
            Verdict::Never => {}
            Verdict::Held { reason, key, until } => {
                unseen_held.push(conv.to_string());
                held.push((conv.to_string(), reason, key, until));
            }
        }
    }
    let mut invites = Vec::new();
    let mut held_invites = Vec::new();
    for invite in tray.invites.iter().flatten() {
        match policy.invite(invite, ledger) {
            Verdict::Wakes => invites.push(invite.invite_id.clone()),
            Verdict::Held { key, .. } => held_invites.push((invite.invite_id.clone(), key)),
            Verdict::Never => {}
        }
    }
    let beyond_cut = cards.is_empty()
        && invites.is_empty()
        && tray.is_truncated()
        && (!policy.filters_senders() || !unseen.is_empty());
    if beyond_cut {
        cards.append(&mut unseen);
    }
    if !cards.is_empty() || !invites.is_empty() || beyond_cut {
        return match policy.may_start(ledger, now_ms, offsets) {
            None => Gate::Run {
                cards,
                invites,
                beyond_cut,
            },
            Some((reason, key, until)) => Gate::Held(Hold {
                reason,
                key,
                until,
                cards,
                invites,
                unseen: Vec::new(),
                truncated: tray.is_truncated(),
            }),
        };
    }
    if held.is_empty() && held_invites.is_empty() {
        return Gate::Nothing;
    }
    let guarded = held.iter().filter(|h| h.1 == HoldReason::LoopGuard);
    let (reason, key, until) = match guarded.clone().next() {
        None => {
            let key = held
                .first()
                .map(|h| h.2)
                .or_else(|| held_invites.first().map(|h| h.1))
                .unwrap_or("allow");
            (HoldReason::NotAllowed, key, None)
        }
        // The first guarded card to free frees at `t`; a time rule may hold the run past it.
        Some(_) => match guarded.filter_map(|h| h.3).min() {
            Some(t) => match policy.may_start(ledger, t, offsets) {
                Some((_, _, later)) => (HoldReason::LoopGuard, "loop_guard", later),
                None => (HoldReason::LoopGuard, "loop_guard", Some(t)),
            },
            None => (HoldReason::LoopGuard, "loop_guard", None),
        },
    };
    Gate::Held(Hold {
        reason,
        key,
        until,
        cards: held
            .into_iter()
            .map(|h| h.0)
            .filter(|c| !unseen_held.contains(c))
            .collect(),
        invites: held_invites.into_iter().map(|h| h.0).collect(),
        unseen: unseen_held,
        truncated: tray.is_truncated(),
    })
}

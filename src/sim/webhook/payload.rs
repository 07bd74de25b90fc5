//! The wake webhook payload v1 (contract 3.5): what each reason names, its `summary` line, and
//! the text a text-taking dialect carries (summary, a blank line, the subscription's prompt or
//! the served instruction, a blank line, the cycle line). Never a message body.

use serde_json::{Value, json};

use super::super::clock::now_iso;
use super::super::store::{Store, at};
use super::super::texts;
use super::super::tray;

/// What the unanswered re-wake tells the model (3.5: items on the tray are still waiting,
/// nothing new needs to have arrived).
const UNANSWERED: &str = "Items on your AgentChat tray are still waiting for an answer; nothing new needs to have arrived. Read your tray with agentchat_inbox and answer every conversation and invite on it.";

/// The payload's fields that vary by wake.
pub struct Wake<'a> {
    pub reason: &'a str,
    pub step: Option<u8>,
    pub conversations: Vec<Value>,
    pub summary: String,
    pub delivery_id: &'a str,
}

/// The v1 payload for `h` (bare).
pub fn payload(h: &str, w: &Wake<'_>) -> Value {
    let mut p = json!({
        "type": "agentchat.wake",
        "version": 1,
        "reason": w.reason,
        "handle": at(h),
        "conversations": w.conversations,
        "summary": w.summary,
        "delivery_id": w.delivery_id,
        "ts": now_iso(),
    });
    if let Some(step) = w.step {
        p["step"] = json!(step);
    }
    if w.reason == "test" {
        p["test"] = json!(true);
    }
    p
}

/// `@s: 2 unread in conv_…; @t: 1 unread in grp_…`
fn list(convs: &[Value]) -> String {
    convs
        .iter()
        .map(|c| {
            format!(
                "{}: {} unread in {}",
                c["latest_sender"].as_str().unwrap_or("someone"),
                c["unread"],
                c["id"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The `summary` line (informative; its wording follows `wake-webhook-payload.v1.json`'s
/// examples as `shared/reference/wire-facts.md` gives them).
pub fn summary(h: &str, reason: &str, convs: &[Value], invite: Option<(String, String)>) -> String {
    let me = at(h);
    match reason {
        "test" => format!("AgentChat test wake for {me}."),
        "invite" => match invite {
            Some((by, group)) => {
                format!("AgentChat wake for {me}: {by} invited you to the group {group}.")
            }
            None => format!("AgentChat wake for {me}: a group invite is waiting."),
        },
        "reminder" => format!(
            "AgentChat wake for {me}: a deferred conversation is due: {}.",
            list(convs)
        ),
        "unanswered" if convs.is_empty() => {
            format!("AgentChat wake for {me}: invites on your tray are still unanswered.")
        }
        "unanswered" => format!(
            "AgentChat wake for {me}: items on your tray are still unanswered: {}.",
            list(convs)
        ),
        _ => format!("AgentChat wake for {me}: {}.", list(convs)),
    }
}

/// The text of a text-taking dialect for attempt `attempt`.
pub fn text(s: &Store, payload: &Value, prompt: Option<&str>, attempt: u32) -> String {
    let served = s
        .texts
        .get("generic")
        .cloned()
        .unwrap_or_else(|| texts::default_texts("generic"));
    let field = |k: &str| served[k].as_str().unwrap_or("").to_string();
    let instruction = match (prompt, payload["reason"].as_str()) {
        (Some(p), _) => p.to_string(),
        (None, Some("invite")) => field("invite_prompt"),
        (None, Some("unanswered")) => UNANSWERED.to_string(),
        (None, _) => field("wake_instruction"),
    };
    format!(
        "{}\n\n{instruction}\n\n(AgentChat wake cycle {}, attempt {attempt}. This text carries no message content.)",
        payload["summary"].as_str().unwrap_or(""),
        payload["delivery_id"].as_str().unwrap_or("")
    )
}

impl Store {
    /// The tray's cards, unmuted, that `pick` keeps, as the payload names them: `{id, unread,
    /// latest_sender}`, newest first, at most 50.
    pub(super) fn named(&self, h: &str, pick: impl Fn(&tray::Card) -> bool) -> Vec<Value> {
        tray::build(self, h)
            .cards
            .iter()
            .filter(|c| !c.muted && pick(c))
            .take(50)
            .map(|c| {
                let sender = c.json["preview"]["sender"].clone();
                json!({
                    "id": c.conversation_id,
                    "unread": c.json["unread"],
                    "latest_sender": if sender.is_null() { c.json["last_sender"].clone() } else { sender },
                })
            })
            .collect()
    }

    /// Whether `conv` holds a message for `h` not yet delivered that is not a notice (what a
    /// `messages` wake is for, 3.5 and 4).
    pub(super) fn undelivered_in(&self, h: &str, conv: &str) -> bool {
        self.convs.get(conv).is_some_and(|c| {
            c.messages
                .iter()
                .filter_map(|m| self.messages.get(m))
                .any(|m| {
                    !m.is_notice() && m.recipients.get(h).is_some_and(|d| d.status == "stored")
                })
        })
    }

    /// `(inviter with @, group name)` of a pending invite of `h`, for an invite wake's summary.
    pub(super) fn invite_words(&self, h: &str, id: &str) -> Option<(String, String)> {
        let i = self
            .invites
            .get(id)
            .filter(|i| i.invitee == h && i.state == "pending" && !i.dismissed)?;
        let name = self
            .groups
            .get(&i.group_id)
            .map(|g| g.name.clone())
            .unwrap_or_default();
        Some((at(&i.inviter), name))
    }
}

//! The wake webhook (contract 3.5, and the webhook rungs of 5): the subscription
//! (`PUT`/`DELETE /v1/agents/me/wake-webhook`, `POST …/test`, `wake_webhook` on
//! `GET /v1/agents/me`), what wakes it and what holds it back (presence: a live socket, a held
//! request and the 60 s after one that returned something; the 2-minute activity rule for
//! rungs; a full pause or suspension), and each wake's payload, framing and signature. `cycle`
//! has the timing, `payload` the words, `sign` the dialects, `deliver` the POST. Every time is
//! the sim's server clock.

mod cycle;
mod deliver;
mod due;
mod payload;
pub mod sign;

use serde_json::{Value, json};

use super::error::{Rejection, SimResult};
use super::model::Agent;
use super::store::Store;
use cycle::{ACTIVITY_MS, Cycle, HELD_PRESENCE_MS, Kind};
pub use deliver::{client, deliver, test};

/// Deliveries kept per agent for `GET /_sim/agents/{h}/webhook`.
const LOG_CAP: usize = 10_000;

/// A wake webhook subscription (the secret is never shown).
#[derive(Debug, Clone)]
pub struct Subscription {
    pub url: String,
    secret: String,
    pub dialect: &'static str,
    pub prompt: Option<String>,
    pub rewake: bool,
    pub created_at: String,
}

/// One agent's wake webhook: the subscription, the running deliveries and what times them.
#[derive(Debug, Default)]
pub struct Hook {
    sub: Option<Subscription>,
    /// The new-message wake cycle, or an invite's own wake.
    cycle: Option<Cycle>,
    /// An unanswered rung's delivery.
    rung: Option<Cycle>,
    /// The previous wake to the subscription (an attempt or a test wake): the spacing's start.
    last_wake_v: Option<u64>,
    /// Accepted wakes since the agent last pulled or read (the spacing's growth).
    unpulled_accepted: u32,
    /// A held request that returned something keeps the agent present until then.
    held_until_v: Option<u64>,
    /// The agent's latest authenticated call (the rungs' 2-minute activity rule).
    last_call_v: Option<u64>,
    /// Attempts sent so far, test wakes included.
    sent: u64,
    log: Vec<Value>,
}

/// Which of an agent's deliveries an attempt belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Cycle,
    Rung,
    Test,
}

/// One POST to make.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub handle: String,
    pub url: String,
    pub slot: Slot,
    pub delivery_id: String,
    pub attempt: u32,
    pub reason: String,
    pub framed: sign::Framed,
}

/// Something new that may wake the agent.
pub enum Note {
    Message,
    Reminder(String),
    Invite(String),
}

/// Any socket online, a held request live, or one that returned something in the last 60 s:
/// the agent is present and no wake webhook goes (3.5).
fn present(a: &Agent, now_v: u64) -> bool {
    !a.sockets.is_empty() || a.held > 0 || a.hook.held_until_v.is_some_and(|t| now_v < t)
}

/// `present`, or any authenticated call in the last 2 minutes: a rung waits (5).
fn busy(a: &Agent, now_v: u64) -> bool {
    present(a, now_v) || a.hook.last_call_v.is_some_and(|t| now_v < t + ACTIVITY_MS)
}

fn text_field(body: &Value, name: &str, max: usize) -> SimResult<Option<String>> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= max => Ok(Some(s.clone())),
        Some(_) => Err(Rejection::validation(format!(
            "{name} must be a non-empty string of at most {max} bytes"
        ))),
    }
}

impl Store {
    /// `PUT /v1/agents/me/wake-webhook {url, secret, dialect?, prompt?, rewake?}`.
    pub fn put_webhook(&mut self, h: &str, body: &Value) -> SimResult<Value> {
        let url = text_field(body, "url", 2048)?
            .filter(|u| {
                let rest = u
                    .strip_prefix("https://")
                    .or_else(|| u.strip_prefix("http://"));
                rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
            })
            .ok_or_else(|| Rejection::validation("url must be an http(s) URL"))?;
        let secret = text_field(body, "secret", 512)?
            .ok_or_else(|| Rejection::validation("secret is required"))?;
        let dialect =
            match body.get("dialect") {
                None | Some(Value::Null) => "agentchat",
                Some(Value::String(d)) => sign::DIALECTS
                    .iter()
                    .copied()
                    .find(|x| x == d)
                    .ok_or_else(|| {
                        Rejection::validation(format!(
                            "dialect must be one of {}",
                            sign::DIALECTS.join(", ")
                        ))
                    })?,
                Some(_) => return Err(Rejection::validation("dialect must be a string")),
            };
        let prompt = text_field(body, "prompt", 4000)?;
        // A PUT that omits `rewake` sets it to true (3.5).
        let rewake = match body.get("rewake") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(Rejection::validation("rewake must be a boolean")),
        };
        let now_v = self.now_v();
        let waiting = self.waiting_reminders(h);
        let undelivered = !self
            .named(h, |c| self.undelivered_in(h, &c.conversation_id))
            .is_empty();
        let hook = &mut self.agent_mut(h)?.hook;
        let same = hook
            .sub
            .as_ref()
            .is_some_and(|s| s.url == url && s.dialect == dialect);
        let created_at = match &hook.sub {
            Some(s) if same => s.created_at.clone(),
            _ => super::clock::now_iso(),
        };
        hook.sub = Some(Subscription {
            url,
            secret,
            dialect,
            prompt,
            rewake,
            created_at,
        });
        // The same receiver keeps its running cycle, `delivery_id` and all; a new one gets a
        // fresh cycle for what is waiting, due at once (3.5).
        if !same {
            hook.cycle = None;
            hook.rung = None;
            hook.last_wake_v = None;
            hook.unpulled_accepted = 0;
            if undelivered || !waiting.is_empty() {
                let mut c = Cycle::new(Kind::Messages, now_v);
                c.reminders = waiting;
                hook.cycle = Some(c);
            }
        }
        self.webhook_state(h)
    }

    /// `DELETE /v1/agents/me/wake-webhook`: `{"deleted": bool}`.
    pub fn delete_webhook(&mut self, h: &str) -> SimResult<Value> {
        let hook = &mut self.agent_mut(h)?.hook;
        let deleted = hook.sub.take().is_some();
        hook.cycle = None;
        hook.rung = None;
        Ok(json!({"deleted": deleted}))
    }

    /// `wake_webhook` on `GET /v1/agents/me`: the subscription's state, never its secret.
    pub fn webhook_state(&self, h: &str) -> SimResult<Value> {
        Ok(match &self.agent(h)?.hook.sub {
            Some(s) => json!({"url": s.url, "dialect": s.dialect, "prompt": s.prompt,
                              "rewake": s.rewake, "created_at": s.created_at}),
            None => Value::Null,
        })
    }

    /// `GET /_sim/agents/{h}/webhook`: the subscription, the running deliveries and every
    /// attempt so far with the receiver's answer.
    pub fn webhook_view(&self, h: &str) -> SimResult<Value> {
        let hook = &self.agent(h)?.hook;
        let view = |c: &Option<Cycle>| {
            c.as_ref().map(|c| {
                json!({"delivery_id": c.delivery_id, "kind": format!("{:?}", c.kind),
                       "attempts": c.attempts, "in_flight": c.in_flight,
                       "invite": c.invite.as_ref().map(|(id, _)| id)})
            })
        };
        Ok(json!({
            "subscription": self.webhook_state(h)?,
            "cycle": view(&hook.cycle),
            "rung": view(&hook.rung),
            "unpulled_accepted": hook.unpulled_accepted,
            "sent": hook.sent,
            "deliveries": hook.log,
        }))
    }

    /// Conversations whose defer reminder came due and that still wait, unmuted.
    fn waiting_reminders(&self, h: &str) -> Vec<String> {
        self.named(h, |c| !c.json["reminder"].is_null())
            .iter()
            .filter_map(|c| c["id"].as_str().map(str::to_string))
            .collect()
    }

    /// Something new for `h` (not muted, not a notice): arms the wake cycle (3.5).
    pub fn hook_note(&mut self, h: &str, note: Note) {
        let now_v = self.now_v();
        let Some(hook) = self
            .agents
            .get_mut(h)
            .map(|a| &mut a.hook)
            .filter(|k| k.sub.is_some())
        else {
            return;
        };
        let current = hook.cycle.take();
        hook.cycle = Some(match note {
            Note::Message => cycle::on_new(current, now_v),
            Note::Reminder(conv) => {
                let mut c = cycle::on_new(current, now_v);
                if !c.reminders.contains(&conv) {
                    c.reminders.push(conv);
                }
                c
            }
            Note::Invite(id) => cycle::on_invite(current, &id, now_v),
        });
    }

    /// One of `h`'s messages became delivered or read: the agent came. The spacing is back to
    /// 60 s and a cycle that already woke it is over (3.5).
    pub fn pulled(&mut self, h: &str) {
        let Some(hook) = self.agents.get_mut(h).map(|a| &mut a.hook) else {
            return;
        };
        hook.unpulled_accepted = 0;
        if hook
            .cycle
            .as_ref()
            .is_some_and(|c| c.kind == Kind::Messages && c.attempts > 0)
        {
            self.end_cycle(h);
        }
    }

    /// An authenticated call by `h` (the rungs' activity rule).
    pub fn called(&mut self, h: &str) {
        let now_v = self.now_v();
        if let Some(a) = self.agents.get_mut(h) {
            a.hook.last_call_v = Some(now_v);
        }
    }

    /// A held request of `h` returned something: present for 60 s more (3.5).
    pub fn held_answered(&mut self, h: &str) {
        let until = self.now_v() + HELD_PRESENCE_MS;
        if let Some(a) = self.agents.get_mut(h) {
            a.hook.held_until_v = Some(until);
        }
    }

    /// Ends the running cycle; an invite it carried but never brought gets its own wake (3.5).
    fn end_cycle(&mut self, h: &str) {
        let now_v = self.now_v();
        let Some(hook) = self.agents.get_mut(h).map(|a| &mut a.hook) else {
            return;
        };
        let carried = hook.cycle.take().and_then(|c| c.invite);
        if let Some((id, _)) = carried {
            let pending = self
                .invites
                .get(&id)
                .is_some_and(|i| i.state == "pending" && !i.dismissed);
            if pending && let Some(a) = self.agents.get_mut(h) {
                a.hook.cycle = Some(Cycle::new(Kind::Invite(id), now_v));
            }
        }
    }

    /// A rung of the unanswered ladder with no `rewake` socket: handed to a `rewake` webhook
    /// (rungs 2 to 4) unless the agent is busy or a new-message cycle is armed (5). `true` when
    /// the rung is spent.
    pub fn rung_by_webhook(&mut self, h: &str, step: u8) -> bool {
        let now_v = self.now_v();
        let Some(a) = self.agents.get_mut(h) else {
            return false;
        };
        let rewake = a.hook.sub.as_ref().is_some_and(|s| s.rewake);
        if !rewake || step < 2 || busy(a, now_v) || a.hook.cycle.is_some() {
            return false;
        }
        a.hook.rung = Some(Cycle::new(Kind::Rung(step), now_v));
        true
    }
}

//! Which wake webhook attempts go now (the ticker asks every 20 ms): a cycle's or a rung's next
//! attempt once it is due, the agent absent and awake, the spacing kept; and what each one says.
//! Also the receiver's answer, once `deliver` has it.

use serde_json::{Value, json};

use super::super::clock::{now_iso, unix_ms};
use super::super::store::Store;
use super::cycle::{self, Cycle, Kind};
use super::payload::{self, Wake};
use super::{Attempt, LOG_CAP, Slot, busy, present, sign};

impl Store {
    /// Every attempt due now, marked in flight.
    pub fn webhook_due(&mut self) -> Vec<Attempt> {
        let now_v = self.now_v();
        let handles: Vec<String> = self
            .agents
            .values()
            .filter(|a| a.hook.sub.is_some() && !a.asleep())
            .map(|a| a.handle.clone())
            .collect();
        let mut out = Vec::new();
        for h in handles {
            let expired = self
                .agents
                .get(&h)
                .and_then(|a| a.hook.cycle.as_ref())
                .is_some_and(|c| !c.in_flight && c.expired(now_v));
            if expired {
                self.end_cycle(&h);
            }
            out.extend(self.cycle_attempt(&h, now_v));
            out.extend(self.rung_attempt(&h, now_v));
        }
        out
    }

    /// The cycle's next attempt, when due: spacing for new messages, absence for every kind.
    fn cycle_attempt(&mut self, h: &str, now_v: u64) -> Option<Attempt> {
        let a = self.agents.get(h)?;
        let c = a.hook.cycle.as_ref()?;
        if c.in_flight || c.next_v > now_v || present(a, now_v) {
            return None;
        }
        if c.kind == Kind::Messages
            && a.hook
                .last_wake_v
                .is_some_and(|t| now_v < t + cycle::spacing(a.hook.unpulled_accepted))
        {
            return None;
        }
        let (reason, conversations, invite) = match self.cycle_words(h, c) {
            Some(w) => w,
            None => {
                // Nothing left to wake for (pulled before the first attempt, or the invite
                // answered): the cycle ends quietly.
                self.end_cycle(h);
                return None;
            }
        };
        self.attempt(h, Slot::Cycle, reason, None, conversations, invite, now_v)
    }

    /// `(reason, conversations, invite words)` a cycle's attempt says, or `None` when nothing
    /// it was for still waits.
    #[allow(clippy::type_complexity)]
    fn cycle_words(
        &self,
        h: &str,
        c: &Cycle,
    ) -> Option<(&'static str, Vec<Value>, Option<(String, String)>)> {
        if let Kind::Invite(id) = &c.kind {
            return Some(("invite", Vec::new(), Some(self.invite_words(h, id)?)));
        }
        let undelivered = |id: &str| self.undelivered_in(h, id);
        let reminded = |id: &str| c.reminders.iter().any(|r| r == id);
        let messages = self.named(h, |card| undelivered(&card.conversation_id));
        if !messages.is_empty() {
            let named = self.named(h, |card| {
                undelivered(&card.conversation_id) || reminded(&card.conversation_id)
            });
            return Some(("messages", named, None));
        }
        let reminders = self.named(h, |card| reminded(&card.conversation_id));
        if !reminders.is_empty() {
            return Some(("reminder", reminders, None));
        }
        let (id, _) = c.invite.as_ref()?;
        Some(("invite", Vec::new(), Some(self.invite_words(h, id)?)))
    }

    /// The rung's next attempt: due, the agent not busy (5), naming what is still unanswered.
    fn rung_attempt(&mut self, h: &str, now_v: u64) -> Option<Attempt> {
        let a = self.agents.get(h)?;
        let c = a.hook.rung.as_ref()?;
        let Kind::Rung(step) = c.kind else {
            return None;
        };
        if c.in_flight || c.next_v > now_v || busy(a, now_v) {
            return None;
        }
        let conversations = self.named(h, |card| card.preview_v.is_some());
        let t = super::super::tray::build(self, h);
        if conversations.is_empty() && !t.unanswered(self, h).1 {
            if let Some(a) = self.agents.get_mut(h) {
                a.hook.rung = None;
            }
            return None;
        }
        self.attempt(
            h,
            Slot::Rung,
            "unanswered",
            Some(step),
            conversations,
            None,
            now_v,
        )
    }

    /// Builds, frames and records one attempt of the slot's delivery.
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &mut self,
        h: &str,
        slot: Slot,
        reason: &'static str,
        step: Option<u8>,
        conversations: Vec<Value>,
        invite: Option<(String, String)>,
        now_v: u64,
    ) -> Option<Attempt> {
        let a = self.agents.get(h)?;
        let sub = a.hook.sub.clone()?;
        let (delivery_id, attempt) = match slot {
            Slot::Cycle => a.hook.cycle.as_ref(),
            Slot::Rung => a.hook.rung.as_ref(),
            Slot::Test => None,
        }
        .map(|c| (c.delivery_id.clone(), c.attempts + 1))
        .unwrap_or_else(|| (cycle::new_uuid(), 1));
        let summary = payload::summary(h, reason, &conversations, invite);
        let p = payload::payload(
            h,
            &Wake {
                reason,
                step,
                conversations,
                summary,
                delivery_id: &delivery_id,
            },
        );
        let text = payload::text(self, &p, sub.prompt.as_deref(), attempt);
        let framed = sign::frame(
            sub.dialect,
            &p,
            &text,
            &sub.secret,
            unix_ms() / 1000,
            attempt,
        );
        let hook = &mut self.agents.get_mut(h)?.hook;
        match slot {
            Slot::Cycle => hook.cycle.as_mut().map(|c| c.sent(now_v)),
            Slot::Rung => hook.rung.as_mut().map(|c| c.sent(now_v)),
            Slot::Test => None,
        };
        hook.last_wake_v = Some(now_v);
        hook.sent += 1;
        Some(Attempt {
            handle: h.to_string(),
            url: sub.url,
            slot,
            delivery_id,
            attempt,
            reason: reason.to_string(),
            framed,
        })
    }

    /// A test wake now (`POST /v1/agents/me/wake-webhook/test`): presence and spacing aside.
    pub fn test_attempt(&mut self, h: &str) -> Option<Attempt> {
        let now_v = self.now_v();
        self.attempt(h, Slot::Test, "test", None, Vec::new(), None, now_v)
    }

    /// The receiver's answer to `a`: a 2xx status is accepted; anything else (another status,
    /// no answer) is retried on the cycle's times (3.5).
    pub fn webhook_settle(&mut self, a: &Attempt, status: Option<u16>, error: Option<String>) {
        let Some(hook) = self.agents.get_mut(&a.handle).map(|x| &mut x.hook) else {
            return;
        };
        let accepted = status.is_some_and(|s| (200..300).contains(&s));
        if hook.log.len() < LOG_CAP {
            hook.log.push(json!({
                "delivery_id": a.delivery_id, "reason": a.reason, "attempt": a.attempt,
                "slot": format!("{:?}", a.slot).to_lowercase(), "status": status, "error": error,
                "accepted": accepted, "at": now_iso(), "at_ms": unix_ms(),
            }));
        }
        // The spacing grows with accepted wakes for messages and reminders that nothing was
        // pulled after (3.5); an invite has nothing to pull.
        if accepted && matches!(a.reason.as_str(), "messages" | "reminder") {
            hook.unpulled_accepted += 1;
        }
        let slot = match a.slot {
            Slot::Cycle => &mut hook.cycle,
            Slot::Rung => &mut hook.rung,
            Slot::Test => return,
        };
        if let Some(c) = slot.as_mut().filter(|c| c.delivery_id == a.delivery_id)
            && c.settled(accepted)
        {
            *slot = None;
        }
    }
}

//! What an agent's owner and the platform can do to it: pause it (`paused_by_owner`: `send`
//! refuses its sends, `full` also holds every push and wake, contract 3.1 and 3.5) and suspend it
//! (403 `SUSPENDED` on every route but `GET /v1/agents/me`, sockets closed `1008 Account
//! suspended`, never woken). Neither loses anything: what arrived meanwhile is pushed, woken and
//! re-woken once the agent is back (contract 5: a rung that could not reach the agent is not
//! lost).

use serde_json::json;

use super::error::{Rejection, SimResult};
use super::model::{Agent, Ladder, Landing};
use super::store::Store;
use super::tray;

impl Agent {
    /// Not to be pushed to or woken: full-paused or suspended (contract 3.5).
    pub fn asleep(&self) -> bool {
        self.paused == "full" || self.suspended
    }
}

impl Store {
    /// `POST /_sim/agents/{h}/pause`: `none`, `send` or `full`. Leaving `full` delivers what
    /// waited.
    pub fn set_paused(&mut self, h: &str, paused: &'static str) -> SimResult<()> {
        let a = self.agent_mut(h)?;
        let was = a.asleep();
        a.paused = paused;
        if was && !a.asleep() {
            self.resume(h);
        }
        Ok(())
    }

    /// `POST /_sim/agents/{h}/suspend`: suspends (closing its sockets) or reinstates the agent.
    pub fn set_suspended(&mut self, h: &str, suspended: bool) -> SimResult<()> {
        let a = self.agent_mut(h)?;
        let was = a.asleep();
        a.suspended = suspended;
        let handle = a.handle.clone();
        if suspended {
            self.close_sockets(&handle, 1008, "Account suspended");
        } else if was && !self.agent(&handle)?.asleep() {
            self.resume(&handle);
        }
        Ok(())
    }

    /// `403 SUSPENDED` for a suspended agent's calls.
    pub fn refuse_suspended(&self, h: &str) -> SimResult<()> {
        if self.agent(h)?.suspended {
            return Err(Rejection::new(403, "SUSPENDED", "this agent is suspended"));
        }
        Ok(())
    }

    /// `403 AGENT_PAUSED_BY_OWNER` for a send while the owner paused sending (`send` or `full`).
    pub fn refuse_paused_send(&self, h: &str) -> SimResult<()> {
        if self.agent(h)?.paused != "none" {
            return Err(Rejection::new(
                403,
                "AGENT_PAUSED_BY_OWNER",
                "your owner paused sending for this agent",
            ));
        }
        Ok(())
    }

    /// The agent is awake again: its live sockets get the backlog (with `delivery_id`, as on a
    /// reconnect) and the invites that came meanwhile, a held read ends, and the re-wake ladder
    /// counts from the newest unanswered item, its latest rung due sent once by the next tick.
    /// A wake webhook's cycle was only held (`webhook`), so it goes out by itself.
    fn resume(&mut self, h: &str) {
        let txs: Vec<_> = self
            .agents
            .get(h)
            .map(|a| {
                a.sockets
                    .iter()
                    .filter(|s| !s.silenced)
                    .map(|s| (s.tx.clone(), s.has("ack")))
                    .collect()
            })
            .unwrap_or_default();
        for (tx, ack) in &txs {
            self.push_backlog(h, tx, *ack);
        }
        let missed = self
            .agents
            .get_mut(h)
            .map(|a| std::mem::take(&mut a.missed_invites))
            .unwrap_or_default();
        for id in missed {
            let waiting = self
                .invites
                .get(&id)
                .is_some_and(|i| i.state == "pending" && !i.dismissed);
            if waiting {
                let frame = json!({"type": "group.invite.received",
                                   "payload": self.invite_list_item(&id)})
                .to_string();
                self.push(h, &frame, |_| true);
            }
        }
        self.land(h, Landing::Message);
        let t = tray::build(self, h);
        let base = t.newest_unanswered_v(self, h);
        if let Some(a) = self.agents.get_mut(h)
            && a.ladder.base_v != base
        {
            a.ladder = Ladder {
                base_v: base,
                sent: 0,
                fired: std::mem::take(&mut a.ladder.fired),
            };
        }
    }
}

//! The sockets' side of the store: pushes, closes, silence, holds, the connect log, and the
//! backlog an accepted socket is sent (contract 3.4).

use serde_json::json;

use super::super::clock::{mono_us, now_iso, unix_ms};
use super::super::error::SimResult;
use super::super::model::*;
use super::Store;

impl Store {
    /// Sends to every live, unsilenced socket of `h` that passes `want`.
    pub fn push(&self, h: &str, frame: &str, want: impl Fn(&SocketEntry) -> bool) -> usize {
        let Some(a) = self.agents.get(h) else {
            return 0;
        };
        let mut n = 0;
        for s in a.sockets.iter().filter(|s| !s.silenced && want(s)) {
            if s.tx.send(Out::Frame(frame.to_string())).is_ok() {
                n += 1;
            }
        }
        n
    }

    pub fn land(&self, h: &str, what: Landing) {
        if let Some(a) = self.agents.get(h) {
            let _ = a.landing.send(what);
        }
    }

    pub fn close_sockets(&mut self, h: &str, code: u16, reason: &str) -> usize {
        let Some(a) = self.agents.get_mut(h) else {
            return 0;
        };
        let n = a.sockets.len();
        for s in a.sockets.drain(..) {
            let _ = s.tx.send(Out::Close(code, reason.to_string()));
        }
        if n > 0 {
            self.presence_changed(h, false);
        }
        n
    }

    pub fn silence_sockets(&mut self, h: &str) -> usize {
        let Some(a) = self.agents.get_mut(h) else {
            return 0;
        };
        let mut n = 0;
        for s in a.sockets.iter_mut().filter(|s| !s.silenced) {
            s.silenced = true;
            let _ = s.tx.send(Out::Silence);
            n += 1;
        }
        n
    }

    pub fn log_connect(
        &mut self,
        h: &str,
        path: &str,
        outcome: &str,
        reason: Option<&str>,
        caps: &[String],
    ) {
        if let Some(a) = self.agents.get_mut(h) {
            a.connects.push(json!({
                "at": now_iso(), "at_ms": unix_ms(), "mono_us": mono_us(), "path": path, "outcome": outcome,
                "reason": reason, "capabilities": caps,
            }));
        }
    }

    /// Registers an accepted socket and queues its backlog: every `stored` delivery, with
    /// `delivery_id` (the reconnect drain: unacked messages are pushed again, contract 3.4).
    pub fn attach_socket(&mut self, h: &str, entry: SocketEntry) {
        // A full-paused agent gets no push, the backlog's neither (contract 3.1): `owner`
        // pushes it when the pause ends.
        if self.agents.get(h).is_some_and(|a| !a.asleep()) {
            self.push_backlog(h, &entry.tx, entry.has("ack"));
        }
        let first = self.agents.get_mut(h).is_some_and(|a| {
            a.sockets.push(entry);
            a.sockets.len() == 1
        });
        if first {
            self.presence_changed(h, true);
        }
    }

    /// Queues every `stored` delivery of `h`, oldest first, as `message.new` with `delivery_id`
    /// on one socket; a socket without `ack` has them delivered once handed over.
    pub(in crate::sim) fn push_backlog(
        &mut self,
        h: &str,
        tx: &tokio::sync::mpsc::UnboundedSender<Out>,
        ack: bool,
    ) {
        let mut backlog: Vec<(u64, String)> = self
            .messages
            .values()
            .filter(|m| m.recipients.get(h).is_some_and(|d| d.status == "stored"))
            .map(|m| (m.ord, m.id.clone()))
            .collect();
        backlog.sort();
        for (_, id) in backlog {
            let frame = self.envelope_frame(&id, h, true);
            let out = Out::Message {
                id: id.clone(),
                frame,
            };
            if tx.send(out).is_ok() && !ack {
                self.mark_delivered(&id, h);
            }
        }
    }

    pub fn detach_socket(&mut self, h: &str, id: u64) {
        let last = self.agents.get_mut(h).is_some_and(|a| {
            let before = a.sockets.len();
            a.sockets.retain(|s| s.id != id);
            before > 0 && a.sockets.is_empty()
        });
        if last {
            self.presence_changed(h, false);
        }
    }

    pub fn record_ack(&mut self, h: &str, message_id: &str) {
        let known = self
            .messages
            .get(message_id)
            .is_some_and(|m| m.recipients.contains_key(h));
        if known {
            self.mark_delivered(message_id, h);
        }
        if let Some(a) = self.agents.get_mut(h) {
            a.acks.push(json!({"message_id": message_id, "at": now_iso(), "at_ms": unix_ms(), "mono_us": mono_us(), "known": known}));
        }
    }

    /// Logs a `message.new` just written to one of `h`'s sockets.
    pub fn record_send(&mut self, h: &str, message_id: &str) {
        if let Some(a) = self.agents.get_mut(h) {
            a.sends
                .push(json!({"message_id": message_id, "at_ms": unix_ms(), "mono_us": mono_us()}));
        }
    }

    /// Holds (or releases) everything queued for `h`'s sockets, the ones open now and later.
    pub fn hold_sockets(&self, h: &str, hold: bool) -> SimResult<()> {
        self.agent(h)?.hold.send_replace(hold);
        Ok(())
    }

    pub(in crate::sim) fn mark_delivered(&mut self, id: &str, h: &str) {
        if let Some(d) = self
            .messages
            .get_mut(id)
            .and_then(|m| m.recipients.get_mut(h))
            && d.status == "stored"
        {
            d.status = "delivered";
            d.delivered_at = Some(now_iso());
            self.pulled(h);
        }
    }
}

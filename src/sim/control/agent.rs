//! The control API's per-agent routes (`/_sim/agents/{h}/…`): sockets, logs, the server's view
//! of the agent, budgets, the ladder, keys, pauses, pushed wakes and frames.

use serde_json::{Value, json};

use super::super::error::{Rejection, SimResult};
use super::super::http::{Reply, Req, Sim, not_found};
use super::super::mutes::Target;
use super::super::store::{Store, at};
use super::super::tray;

pub(super) fn route(sim: &Sim, r: &Req, method: &str, h: &str, rest: &[&str]) -> SimResult<Reply> {
    let mut s = sim.lock();
    s.agent(h)?;
    match (method, rest) {
        ("POST", ["sockets", "close"]) => {
            let b = r.json_object()?;
            let code = b.get("code").and_then(Value::as_u64).unwrap_or(1000);
            if !(1000..=4999).contains(&code) {
                return Err(Rejection::validation(
                    "code must be a WebSocket close code (1000-4999)",
                ));
            }
            let reason = b
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if reason.len() > 123 {
                return Err(Rejection::validation("reason must be at most 123 bytes"));
            }
            let n = s.close_sockets(h, code as u16, &reason);
            Ok(Reply::ok(json!({"closed": n})))
        }
        ("POST", ["pause"]) => {
            let b = r.json_object()?;
            let paused = match b.get("paused_by_owner").and_then(Value::as_str) {
                Some("none") => "none",
                Some("send") => "send",
                Some("full") => "full",
                _ => {
                    return Err(Rejection::validation(
                        "paused_by_owner must be none, send or full",
                    ));
                }
            };
            s.set_paused(h, paused)?;
            Ok(Reply::ok(json!({"paused_by_owner": paused})))
        }
        ("POST", ["suspend"]) => {
            let b = r.json_object()?;
            let on = b.get("suspended").and_then(Value::as_bool).unwrap_or(true);
            s.set_suspended(h, on)?;
            Ok(Reply::ok(json!({"handle": at(h), "suspended": on})))
        }
        ("POST", ["frame"]) => {
            let b = r.json_object()?;
            let text = match (b.get("frame"), b.get("text")) {
                (Some(f), None) => f.to_string(),
                (None, Some(Value::String(t))) => t.clone(),
                _ => {
                    return Err(Rejection::validation(
                        "give frame (any JSON) or text (a raw string), one of them",
                    ));
                }
            };
            let cap = b.get("capability").and_then(Value::as_str);
            let n = s.push(h, &text, |x| cap.is_none_or(|c| x.has(c)));
            Ok(Reply::ok(json!({"sockets": n})))
        }
        ("POST", ["sockets", "silence"]) => {
            Ok(Reply::ok(json!({"silenced": s.silence_sockets(h)})))
        }
        ("POST", ["sockets", "hold"]) => {
            let b = r.json_object()?;
            let hold = b.get("hold").and_then(Value::as_bool).unwrap_or(true);
            s.hold_sockets(h, hold)?;
            Ok(Reply::ok(json!({"handle": at(h), "held": hold})))
        }
        ("GET", ["sends"]) => Ok(Reply::ok(
            json!({"handle": at(h), "sends": s.agent(h)?.sends}),
        )),
        ("GET", ["connects"]) => Ok(Reply::ok(
            json!({"handle": at(h), "connects": s.agent(h)?.connects}),
        )),
        ("GET", ["acks"]) => Ok(Reply::ok(
            json!({"handle": at(h), "acks": s.agent(h)?.acks}),
        )),
        ("GET", ["webhook"]) => Ok(Reply::ok(s.webhook_view(h)?)),
        ("GET", ["wakes"]) => Ok(Reply::ok(
            json!({"handle": at(h), "wakes": s.agent(h)?.wakes}),
        )),
        ("GET", ["state"]) => Ok(Reply::ok(agent_state(&s, h))),
        ("POST", ["budget"]) => {
            let b = r.json_object()?;
            let a = s.agent_mut(h)?;
            if let Some(n) = b.get("connects_per_minute").and_then(Value::as_u64) {
                a.connect_budget.per_minute = n.min(u32::MAX as u64) as u32;
            }
            if let Some(n) = b.get("connects_per_hour").and_then(Value::as_u64) {
                a.connect_budget.per_hour = n.min(u32::MAX as u64) as u32;
            }
            // The read ceiling's refill (contract 3.1: one a second after a burst of 120), for a
            // benchmark that reads the tray on hundreds of wakes in a row.
            if let Some(n) = b.get("polls_per_second").and_then(Value::as_f64) {
                if !(n.is_finite() && n > 0.0) {
                    return Err(Rejection::validation("polls_per_second must be above 0"));
                }
                a.polls.ceiling.refill_ms = super::super::clock::SEC as f64 / n;
            }
            let (m, hr) = (a.connect_budget.per_minute, a.connect_budget.per_hour);
            let polls = super::super::clock::SEC as f64 / a.polls.ceiling.refill_ms;
            Ok(Reply::ok(
                json!({"connects_per_minute": m, "connects_per_hour": hr, "polls_per_second": polls}),
            ))
        }
        ("POST", ["ladder"]) => {
            let b = r.json_object()?;
            let on = b.get("enabled").and_then(Value::as_bool).unwrap_or(true);
            s.agent_mut(h)?.ladder_off = !on;
            Ok(Reply::ok(json!({"handle": at(h), "ladder": on})))
        }
        ("POST", ["refuse-key"]) => {
            let b = r.json_object()?;
            let refuse = b.get("refuse").and_then(Value::as_bool).unwrap_or(true);
            s.set_key_refused(h, refuse)?;
            Ok(Reply::ok(json!({"handle": at(h), "key_refused": refuse})))
        }
        ("POST", ["rotate-key"]) => {
            let key = s.rotate_key(h)?;
            Ok(Reply::ok(json!({"handle": at(h), "api_key": key})))
        }
        ("POST", ["wake"]) => {
            let b = r.json_object()?;
            let reason = b
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("reminder")
                .to_string();
            let step = b.get("step").and_then(Value::as_u64).unwrap_or(1);
            let now = super::super::clock::now_iso();
            let t = tray::build(&s, h);
            let mut payload = match reason.as_str() {
                "unanswered" => {
                    let (ids, _) = t.unanswered(&s, h);
                    json!({"reason": "unanswered", "conversation_ids": ids, "step": step, "at": now})
                }
                "reminder" => {
                    let card = b
                        .get("conversation_id")
                        .and_then(Value::as_str)
                        .and_then(|c| t.cards.iter().find(|x| x.conversation_id == c))
                        .or(t.cards.first());
                    let conv = b
                        .get("conversation_id")
                        .cloned()
                        .or_else(|| card.map(|c| json!(c.conversation_id)))
                        .unwrap_or(Value::Null);
                    let anchor = card
                        .map(|c| c.json["preview"]["message_id"].clone())
                        .filter(|v| !v.is_null())
                        .or_else(|| card.map(|c| c.json["last_message_id"].clone()))
                        .unwrap_or(Value::Null);
                    json!({"reason": "reminder", "conversation_id": conv, "anchor_message_id": anchor, "step": step, "at": now})
                }
                other => json!({"reason": other, "at": now}),
            };
            if let Some(extra) = b.get("payload").and_then(Value::as_object) {
                for (k, v) in extra {
                    payload[k] = v.clone();
                }
            }
            let frame = json!({"type": "wake", "payload": payload}).to_string();
            let unanswered = reason == "unanswered";
            let n = s.push(h, &frame, |x| !unanswered || x.has("rewake"));
            s.log_wake(h, &payload, n);
            Ok(Reply::ok(json!({"sockets": n, "payload": payload})))
        }
        _ => Ok(not_found(r)),
    }
}

/// The server's view of one agent, for tests: tray, invites with state, verdicts, sends,
/// per-message delivery state, sockets, ladders.
pub fn agent_state(s: &Store, h: &str) -> Value {
    let Some(a) = s.agents.get(h) else {
        return Value::Null;
    };
    let t = tray::build(s, h);
    let tray_body = t.body(s, h, 50, None);
    let (unanswered, invite_waiting) = t.unanswered(s, h);
    let mut msgs: Vec<&super::super::model::Message> = s.messages.values().collect();
    msgs.sort_by_key(|m| m.ord);
    let sent: Vec<Value> = msgs
        .iter()
        .filter(|m| m.sender == h && !m.is_notice())
        .map(|m| {
            json!({"id": m.id, "conversation_id": m.conversation_id, "seq": m.seq, "client_msg_id": m.client_msg_id,
                   "text": m.text(), "created_at": m.created_at,
                   "to": m.recipients.keys().map(|r| at(r)).collect::<Vec<_>>()})
        })
        .collect();
    let received: Vec<Value> = msgs
        .iter()
        .filter_map(|m| m.recipients.get(h).map(|d| (m, d)))
        .map(|(m, d)| {
            json!({"id": m.id, "conversation_id": m.conversation_id, "sender": at(&m.sender), "type": m.kind,
                   "seq": m.seq, "status": d.status, "delivery_id": d.delivery_id,
                   "delivered_at": d.delivered_at, "read_at": d.read_at, "created_at": m.created_at})
        })
        .collect();
    let invites: Vec<Value> = s
        .invites
        .values()
        .filter(|i| i.invitee == h)
        .map(|i| {
            json!({"invite_id": i.id, "group_id": i.group_id, "inviter": at(&i.inviter), "state": i.state,
                   "dismissed": i.dismissed, "created_at": i.created_at})
        })
        .collect();
    let now = s.now_v();
    let defers: Vec<Value> = a
        .views
        .iter()
        .filter_map(|(c, v)| v.defer.as_ref().map(|d| (c, d, v)))
        .map(|(c, d, v)| {
            json!({"conversation_id": c, "count": d.count, "anchor_message_id": d.anchor_id,
                   "due_in_ms": d.due_v.map(|t| s.clock.real(t.saturating_sub(now)).as_millis() as u64),
                   "reminder": v.reminder.as_ref().map(|(st, f)| json!({"step": st, "fired_at": f}))})
        })
        .collect();
    let sockets: Vec<Value> = a
        .sockets
        .iter()
        .map(|x| json!({"id": x.id, "capabilities": x.caps, "silenced": x.silenced, "path": x.path, "connected_at": x.connected_at}))
        .collect();
    json!({
        "handle": at(h),
        "tray": tray_body,
        "unanswered": {"conversation_ids": unanswered, "invites": invite_waiting},
        "invites": invites,
        "verdicts": a.verdicts,
        "sent": sent,
        "received": received,
        "defers": defers,
        "ladder": {"armed": a.ladder.base_v.is_some(), "rungs_sent": a.ladder.sent, "fired": a.ladder.fired},
        "sockets": sockets,
        "muted": {"conversations": a.mutes.targets(Target::Conversation, now),
                  "agents": a.mutes.targets(Target::Agent, now).iter().map(|x| at(x)).collect::<Vec<_>>()},
        "key_refused": a.key_refused,
        "held_requests": a.held,
    })
}

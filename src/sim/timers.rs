//! Server-owned timers on the scaled clock: defer reminders (contract 6) and the unanswered
//! re-wake ladder (contract 5). One tick looks at every agent; the sim's ticker task calls it.

use serde_json::json;

use super::clock::{MIN, now_iso};
use super::model::RUNGS_MIN;
use super::store::Store;
use super::tray;

/// Runs every timer that is due at the current server-clock time.
pub fn tick(s: &mut Store) {
    fire_reminders(s, None);
    run_ladders(s, None);
}

/// Runs the timers of agent `h` that are due now: the simulator (`crate::simulate`) looks only
/// at the agents whose timers it knows are due.
pub fn tick_agent(s: &mut Store, h: &str) {
    fire_reminders(s, Some(h));
    run_ladders(s, Some(h));
}

fn fire_reminders(s: &mut Store, only: Option<&str>) {
    let now = s.now_v();
    let mut due = Vec::new();
    // An agent asleep keeps its reminders due: they fire once it wakes (`owner`).
    for (h, a) in s
        .agents
        .iter()
        .filter(|(h, a)| only.is_none_or(|o| o == *h) && !a.asleep())
    {
        for (conv, v) in &a.views {
            if let Some(d) = &v.defer
                && d.due_v.is_some_and(|t| t <= now)
            {
                due.push((
                    h.clone(),
                    conv.clone(),
                    d.count.min(2),
                    d.anchor_id.clone(),
                    d.anchor_seq,
                ));
            }
        }
    }
    for (h, conv, step, anchor, anchor_seq) in due {
        let fired_at = now_iso();
        let voided = s.newer_from_others(&h, &conv, anchor_seq);
        if let Some(v) = s.agents.get_mut(&h).and_then(|a| a.views.get_mut(&conv)) {
            if voided {
                v.defer = None;
                continue;
            }
            if let Some(d) = v.defer.as_mut() {
                d.due_v = None;
            }
            v.reminder = Some((step, fired_at.clone()));
        }
        // Muted, or only notices unread: the card comes back, nothing wakes.
        let t = tray::build(s, &h);
        let card = t.cards.iter().find(|c| c.conversation_id == conv);
        let wakes = card.is_some_and(|c| !c.muted && !c.json["preview"].is_null());
        if !wakes {
            continue;
        }
        let payload = json!({"reason": "reminder", "conversation_id": conv, "anchor_message_id": anchor,
                             "step": step, "at": fired_at});
        let frame = json!({"type": "wake", "payload": payload}).to_string();
        let n = s.push(&h, &frame, |_| true);
        s.log_wake(&h, &payload, n);
        s.hook_note(&h, super::webhook::Note::Reminder(conv));
    }
}

fn run_ladders(s: &mut Store, only: Option<&str>) {
    let now = s.now_v();
    let handles: Vec<String> = match only {
        Some(h) => vec![h.to_string()],
        None => s.agents.keys().cloned().collect(),
    };
    for h in handles {
        let Some(a) = s.agents.get(&h) else { continue };
        let sent = a.ladder.sent as usize;
        // Asleep: the ladder waits, armed, and sends the latest rung due once it wakes (5).
        if a.ladder_off || a.asleep() || a.ladder.base_v.is_none() || sent >= RUNGS_MIN.len() {
            continue; // armed only by a new message or invite; after rung 4, nothing more
        }
        // Rungs count from the newest item still unanswered (an answered newer one no longer
        // times them); with nothing unanswered the ladder stops.
        let t = tray::build(s, &h);
        let Some(base) = t.newest_unanswered_v(s, &h) else {
            if let Some(a) = s.agents.get_mut(&h) {
                a.ladder.base_v = None;
            }
            continue;
        };
        if let Some(a) = s.agents.get_mut(&h) {
            a.ladder.base_v = Some(base);
        }
        // The latest rung due and not yet sent: a missed rung is sent once, never a burst.
        let Some(rung) = (sent..RUNGS_MIN.len())
            .rev()
            .find(|&k| base + RUNGS_MIN[k] * MIN <= now)
        else {
            continue;
        };
        let (ids, _) = t.unanswered(s, &h);
        let has_rewake = s
            .agents
            .get(&h)
            .is_some_and(|a| a.sockets.iter().any(|x| x.has("rewake")));
        let step = rung + 1;
        if !has_rewake {
            // Else a `rewake` webhook takes rungs 2 to 4 (`webhook`); else the rung is not
            // lost: the next look sends the latest rung due.
            if s.rung_by_webhook(&h, step as u8)
                && let Some(a) = s.agents.get_mut(&h)
            {
                a.ladder.sent = step as u8;
                a.ladder.fired.push(json!({"step": step, "at": now_iso(),
                                           "at_ms": super::clock::unix_ms(), "via": "webhook"}));
            }
            continue;
        }
        let payload =
            json!({"reason": "unanswered", "conversation_ids": ids, "step": step, "at": now_iso()});
        let frame = json!({"type": "wake", "payload": payload}).to_string();
        let n = s.push(&h, &frame, |x| x.has("rewake"));
        if let Some(a) = s.agents.get_mut(&h) {
            a.ladder.sent = step as u8;
            a.ladder
                .fired
                .push(json!({"step": step, "at": now_iso(), "at_ms": super::clock::unix_ms()}));
        }
        s.log_wake(&h, &payload, n);
    }
}

//! The cycle's one question to the policy, once `core::decision` chose a run: may it start, and
//! with which prompt, or what holds it. [`gate`] judges the cards; this adds what the
//! cycle needs around it (docs/decisions.md, "Run policy").

use super::{Gate, Heard, Hold, Ledger, Offsets, Policy, gate};
use crate::status::RunKind;
use crate::tray::Tray;

/// `Ok((kind, cards))`: the run starts with that prompt, for those cards (past the tray's cut
/// too); `Err(hold)`: no run, and why.
///
/// `decided` is `core::decision`'s choice. When only invites may wake the run (every card is
/// held by a sender rule) the run gets the invite prompt, as a tray of invites alone would: the
/// held cards did not wake it. When the policy sees nothing it could hold (a run `decision` chose
/// for malformed cards, say), the time rules still apply: quiet hours mean no run at all.
pub fn admit(
    policy: &Policy,
    tray: &Tray,
    ledger: &Ledger,
    heard: &Heard,
    now_ms: i64,
    offsets: &dyn Offsets,
    decided: RunKind,
) -> Result<(RunKind, Vec<String>), Hold> {
    match gate(policy, tray, ledger, heard, now_ms, offsets) {
        Gate::Held(hold) => Err(hold),
        Gate::Run {
            cards,
            invites,
            beyond_cut,
        } => {
            let invites_only = cards.is_empty()
                && !beyond_cut
                && !invites.is_empty()
                && tray.skipped_cards.is_empty();
            let kind = if invites_only {
                RunKind::Invite
            } else {
                decided
            };
            Ok((kind, cards))
        }
        Gate::Nothing => match policy.may_start(ledger, now_ms, offsets) {
            Some((reason, key, until)) => Err(Hold::by_time(reason, key, until)),
            None => Ok((decided, Vec::new())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::{FixedOffset, HoldReason};
    use super::*;
    use serde_json::json;

    fn policy(text: &str) -> Policy {
        Policy::from_toml(toml::from_str(text).unwrap(), "listen.policy").unwrap()
    }

    fn tray(v: serde_json::Value) -> Tray {
        Tray::parse(v.to_string().as_bytes()).unwrap()
    }

    fn card(id: &str, from: &str) -> serde_json::Value {
        json!({"conversation_id": id, "type": "direct", "relationship": "established",
               "counterparty": {"handle": from}, "preview": {"sender": from},
               "pace": {"last_60s": 1, "last_10m": 3}})
    }

    #[test]
    fn a_run_only_invites_may_wake_gets_the_invite_prompt() {
        let p = policy(r#"allow = ["@friend"]"#);
        let t = tray(json!({"conversations": [card("c1", "@stranger")],
            "invites": [{"invite_id": "i1", "invited_by": "@friend"}]}));
        let z = FixedOffset(0);
        let h = Heard::default();
        let kind = admit(&p, &t, &Ledger::new(), &h, 0, &z, RunKind::Wake);
        assert_eq!(kind, Ok((RunKind::Invite, vec![])));
        let t = tray(json!({"conversations": [card("c1", "@friend")], "invites": []}));
        assert_eq!(
            admit(&p, &t, &Ledger::new(), &h, 0, &z, RunKind::Wake),
            Ok((RunKind::Wake, vec!["c1".to_string()]))
        );
    }

    #[test]
    fn quiet_hours_hold_a_run_the_policy_sees_no_card_for() {
        // Noon UTC inside 11:00-13:00; a cut tray whose shown cards are muted: no card to judge.
        let p = policy(r#"quiet_hours = ["11:00-13:00"]"#);
        let t = tray(json!({"conversations": [], "truncated": true, "invites": []}));
        let noon = 12 * 3_600_000;
        let h = Heard::default();
        let held = admit(
            &p,
            &t,
            &Ledger::new(),
            &h,
            noon,
            &FixedOffset(0),
            RunKind::Wake,
        );
        let hold = held.unwrap_err();
        assert_eq!(hold.reason, HoldReason::QuietHours);
        assert_eq!(hold.until, Some(13 * 3_600_000));
        let free = admit(
            &policy(""),
            &t,
            &Ledger::new(),
            &h,
            noon,
            &FixedOffset(0),
            RunKind::Wake,
        );
        assert_eq!(free, Ok((RunKind::Wake, vec![])));
    }
}

//! What a cycle does with the tray it read (contract 3.1 and 4): run with `wake_instruction`, run with
//! `invite_prompt`, or no run.

use super::texts::Texts;
use super::tray::Tray;

pub use super::status::{NoRunReason, RunKind};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CycleDecision {
    Run(RunKind),
    /// `NothingWaiting`, `OnlyMuted`, or `HandleMismatch` (the tray's `you` names it).
    NoRun(NoRunReason),
}

/// Decides from the tray alone. `own_handle` in any spelling.
///
/// A tray whose `you` names another agent runs nothing (a missing `you`, the pre-v1 shape, is not
/// a mismatch). A card that is not muted and not notices only, or `truncated` (cards wait beyond
/// the limit), runs with `wake_instruction`; otherwise listed invites run with `invite_prompt`;
/// muted cards alone run nothing (mute means "don't wake me"), and an empty tray or one whose
/// other cards hold only system notices is `nothing_waiting`: notices "are never what the gate
/// judges" and "never wake the agent by itself" (contract 3.1, 4; `Card::is_notices_only`).
///
/// A malformed card (skipped by `Tray::parse`) counts like `truncated`: a card waits that the
/// listener cannot read, so it cannot know the card is muted, and an unread message is not left
/// without a run for that (the server's re-wake ladder bounds the runs). A malformed invite counts
/// like `invites_truncated`: it starts no run by itself, because the invite rule can never count
/// or dismiss an invite it cannot name.
pub fn decide(tray: &Tray, own_handle: &str) -> CycleDecision {
    if let Some(you) = &tray.you
        && !super::handle::same(you, own_handle)
    {
        return CycleDecision::NoRun(NoRunReason::HandleMismatch);
    }
    if tray.is_truncated()
        || !tray.skipped_cards.is_empty()
        || tray
            .conversations
            .iter()
            .any(|c| !c.is_muted() && !c.is_notices_only())
    {
        return CycleDecision::Run(RunKind::Wake);
    }
    if tray.invites.as_ref().is_some_and(|i| !i.is_empty()) {
        return CycleDecision::Run(RunKind::Invite);
    }
    if tray.conversations.iter().any(|c| c.is_muted()) {
        return CycleDecision::NoRun(NoRunReason::OnlyMuted);
    }
    CycleDecision::NoRun(NoRunReason::NothingWaiting)
}

/// How many cycles in a row [`follow_up`] may start for a tray cut short (`truncated`): 50 runs
/// of up to 50 cards each (the tray's `limit` maximum, contract 3.1), 2,500 cards, before the
/// listener leaves the rest to the server's re-wakes (contract 5).
pub const MAX_FOLLOW_UPS: u32 = 50;

/// Whether a cycle whose run ended should start the next one at once, without a wake. Cards
/// wait beyond what the run could see, and no server wake may come for them (the re-wake ladder
/// ends after four rungs, contract 5): the tray read after the run is `truncated`, or the one
/// before it was and the after-read shows a card that wakes and that the before-read did not
/// (it came from beyond the cut). And the run made progress ([`tray_changed`]), and fewer than
/// [`MAX_FOLLOW_UPS`] follow-ups came before this one in a row (`streak`). A run that changes
/// nothing never starts another, so no loop of runs that change nothing; a run that keeps
/// changing something is bounded by the streak.
pub fn follow_up(before: &Tray, after: &Tray, streak: u32) -> bool {
    let seen: std::collections::BTreeSet<&str> = before
        .conversations
        .iter()
        .map(|c| c.conversation_id.as_str())
        .collect();
    let surfaced = after.conversations.iter().any(|c| {
        !c.is_muted() && !c.is_notices_only() && !seen.contains(c.conversation_id.as_str())
    });
    let more = after.is_truncated() || (before.is_truncated() && surfaced);
    more && tray_changed(before, after) && streak < MAX_FOLLOW_UPS
}

/// The tray changed between two reads: another set of cards, or a card whose newest unread
/// message or unread count moved (`Card::fingerprint`). Invites are not compared: the invite
/// rule has its own memory.
pub fn tray_changed(before: &Tray, after: &Tray) -> bool {
    let set = |t: &Tray| {
        t.conversations
            .iter()
            .map(|c| c.fingerprint())
            .collect::<std::collections::BTreeSet<_>>()
    };
    set(before) != set(after)
}

/// The served prompt for a run kind; `None` when the texts lack it (then: no run).
pub fn prompt_for(kind: RunKind, texts: &Texts) -> Option<&str> {
    match kind {
        RunKind::Wake => texts.wake_instruction.as_deref(),
        RunKind::Invite => texts.invite_prompt.as_deref(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tray(json: serde_json::Value) -> Tray {
        Tray::parse(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn decisions() {
        let me = "example-relay";
        let card = |muted: bool| serde_json::json!({"conversation_id": "c", "muted": muted});
        assert_eq!(
            decide(
                &tray(serde_json::json!({"you": "@other", "conversations": [card(false)]})),
                me
            ),
            CycleDecision::NoRun(NoRunReason::HandleMismatch)
        );
        assert_eq!(
            decide(
                &tray(
                    serde_json::json!({"you": "@Example-Relay", "conversations": [card(true), card(false)]})
                ),
                me
            ),
            CycleDecision::Run(RunKind::Wake)
        );
        assert_eq!(
            decide(
                &tray(serde_json::json!({"conversations": [card(true)], "truncated": true})),
                me
            ),
            CycleDecision::Run(RunKind::Wake)
        );
        assert_eq!(
            decide(
                &tray(
                    serde_json::json!({"conversations": [card(true)], "invites": [{"invite_id": "i"}]})
                ),
                me
            ),
            CycleDecision::Run(RunKind::Invite)
        );
        assert_eq!(
            decide(
                &tray(
                    serde_json::json!({"you": "@example-relay", "conversations": [card(true)], "invites": []})
                ),
                me
            ),
            CycleDecision::NoRun(NoRunReason::OnlyMuted)
        );
        assert_eq!(
            decide(&tray(serde_json::json!({"conversations": []})), me),
            CycleDecision::NoRun(NoRunReason::NothingWaiting)
        );
    }

    fn notices(id: &str) -> serde_json::Value {
        serde_json::json!({"conversation_id": id, "muted": false, "preview": null,
            "you_owe_reply": false, "mentioned_you": false, "last_message_id": format!("n-{id}")})
    }

    #[test]
    fn a_card_of_notices_only_waits_for_nothing_and_never_hides_a_message() {
        let me = "example-relay";
        assert_eq!(
            decide(
                &tray(serde_json::json!({"conversations": [notices("a"), notices("b")]})),
                me
            ),
            CycleDecision::NoRun(NoRunReason::NothingWaiting)
        );
        let muted = serde_json::json!({"conversation_id": "m", "muted": true});
        assert_eq!(
            decide(
                &tray(serde_json::json!({"conversations": [notices("a"), muted]})),
                me
            ),
            CycleDecision::NoRun(NoRunReason::OnlyMuted)
        );
        assert_eq!(
            decide(
                &tray(
                    serde_json::json!({"conversations": [notices("a")], "invites": [{"invite_id": "i"}]})
                ),
                me
            ),
            CycleDecision::Run(RunKind::Invite)
        );
        assert_eq!(
            decide(
                &tray(serde_json::json!({"conversations": [notices("a")], "truncated": true})),
                me
            ),
            CycleDecision::Run(RunKind::Wake)
        );
        // Any field that says a message waits, or no field at all, runs.
        for (k, v) in [
            ("preview", serde_json::json!({"message_id": "m1"})),
            ("you_owe_reply", serde_json::json!(true)),
            ("mentioned_you", serde_json::json!(true)),
            ("reminder", serde_json::json!({"step": 1})),
        ] {
            let mut c = notices("a");
            c[k] = v;
            assert_eq!(
                decide(&tray(serde_json::json!({"conversations": [c]})), me),
                CycleDecision::Run(RunKind::Wake),
                "{k}"
            );
        }
        for k in ["preview", "you_owe_reply"] {
            let mut c = notices("a");
            c.as_object_mut().unwrap().remove(k);
            assert_eq!(
                decide(&tray(serde_json::json!({"conversations": [c]})), me),
                CycleDecision::Run(RunKind::Wake),
                "without {k}"
            );
        }
    }

    #[test]
    fn a_truncated_tray_follows_up_only_after_progress_and_at_most_max_follow_ups_in_a_row() {
        let card = |id: &str, last: &str| serde_json::json!({"conversation_id": id, "last_message_id": last, "unread": 1});
        let cut = |cards: Vec<serde_json::Value>, truncated: bool| {
            tray(serde_json::json!({"conversations": cards, "truncated": truncated}))
        };
        let before = cut(vec![card("a", "1"), card("b", "2")], true);
        let answered = cut(vec![card("c", "3"), card("d", "4")], true);
        assert!(!tray_changed(&before, &before.clone()));
        assert!(tray_changed(&before, &answered));
        assert!(tray_changed(
            &before,
            &cut(vec![card("a", "5"), card("b", "2")], true)
        ));
        assert!(follow_up(&before, &answered, 0));
        // A run that changed nothing never starts another: no loop of runs that change nothing.
        assert!(!follow_up(&before, &before.clone(), 0));
        // The last cards from beyond the cut surfaced: one more cycle for them.
        assert!(follow_up(&before, &cut(vec![card("c", "3")], false), 0));
        // Nothing new surfaced and nothing beyond the cut: the server's wakes cover what is left.
        assert!(!follow_up(&before, &cut(vec![card("a", "1")], false), 0));
        assert!(!follow_up(&before, &cut(vec![], false), 0));
        // A tray that was whole before the run is not a backlog.
        let whole = cut(vec![card("a", "1"), card("b", "2")], false);
        assert!(!follow_up(&whole, &cut(vec![card("c", "3")], false), 0));
        // Bounded even while every run changes something.
        assert!(follow_up(&before, &answered, MAX_FOLLOW_UPS - 1));
        assert!(!follow_up(&before, &answered, MAX_FOLLOW_UPS));
        let mut streak = 0;
        while follow_up(&before, &answered, streak) {
            streak += 1;
        }
        assert_eq!(streak, MAX_FOLLOW_UPS);
    }
}

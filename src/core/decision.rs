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
/// a mismatch). A card that is not muted, or `truncated` (cards wait beyond the limit), runs with
/// `wake_instruction`; otherwise listed invites run with `invite_prompt`; muted cards alone, or an
/// empty tray, run nothing (mute means "don't wake me").
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
        || tray.conversations.iter().any(|c| !c.is_muted())
    {
        return CycleDecision::Run(RunKind::Wake);
    }
    if tray.invites.as_ref().is_some_and(|i| !i.is_empty()) {
        return CycleDecision::Run(RunKind::Invite);
    }
    if !tray.conversations.is_empty() {
        return CycleDecision::NoRun(NoRunReason::OnlyMuted);
    }
    CycleDecision::NoRun(NoRunReason::NothingWaiting)
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
}

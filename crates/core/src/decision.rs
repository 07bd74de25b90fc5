//! What a cycle does with the tray it read (contract 3.1 and 4): run with `wake_instruction`, run with
//! `invite_prompt`, or no run.

use super::engine::WakeCause;
use super::texts::Texts;
use super::tray::Tray;
use std::collections::BTreeSet;

pub use super::status::{NoRunReason, RunKind};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CycleDecision {
    Run(RunKind),
    /// `NothingWaiting`, `OnlyMuted`, or `HandleMismatch` (the tray's `you` names it).
    NoRun(NoRunReason),
}

/// The most conversations [`WakeCauses`] names; a wake for one more counts as a wake of unknown
/// cause (the tray decides), so its memory is bounded however many messages come.
pub const MAX_WAKE_CONVERSATIONS: usize = 256;

/// What the wakes a cycle serves were for, as far as the decision needs it (contract 3.1: mute
/// means "don't wake me"): the conversations of the new messages, whether any wake had another
/// cause (a reconnect, an invite, the listener's own), and whether the server re-woke the agent
/// (`unanswered` or `reminder`, which never name a muted conversation, contract 5 and 6).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WakeCauses {
    messages: BTreeSet<String>,
    other: bool,
    rewake: bool,
}

impl WakeCauses {
    /// Causes the listener does not know (`--once`, a test): the tray alone decides.
    pub fn unknown() -> WakeCauses {
        WakeCauses {
            other: true,
            ..WakeCauses::default()
        }
    }

    /// Notes one more wake.
    pub fn add(&mut self, cause: &WakeCause) {
        match cause {
            WakeCause::Message(Some(conversation))
                if self.messages.contains(conversation)
                    || self.messages.len() < MAX_WAKE_CONVERSATIONS =>
            {
                self.messages.insert(conversation.clone());
            }
            WakeCause::Wake(reason) if reason == "unanswered" || reason == "reminder" => {
                self.rewake = true;
                self.other = true;
            }
            _ => self.other = true,
        }
    }

    /// Every wake was a new message in a conversation this tray shows muted, or, for one past
    /// the tray's cut, that `known` (the listener's memory of earlier trays) says is muted:
    /// nothing the agent asked to be woken for came, whatever else waits (its own wakes cover
    /// it).
    fn only_muted_messages(&self, tray: &Tray, known: &dyn Fn(&str) -> Option<bool>) -> bool {
        !self.other
            && !self.messages.is_empty()
            && self.messages.iter().all(|id| {
                match tray.conversations.iter().find(|c| c.conversation_id == *id) {
                    Some(c) => c.is_muted(),
                    None => known(id) == Some(true),
                }
            })
    }
}

/// Decides from the tray alone, as for a wake of unknown cause ([`decide_woken`]).
pub fn decide(tray: &Tray, own_handle: &str) -> CycleDecision {
    decide_woken(tray, own_handle, &WakeCauses::unknown())
}

/// Decides from the tray and what woke the cycle. `own_handle` in any spelling.
///
/// A tray whose `you` names another agent runs nothing (a missing `you`, the pre-v1 shape, is not
/// a mismatch). A wake whose only causes are new messages in conversations the tray shows muted
/// runs nothing (`only_muted`): mute means "don't wake me" (contract 3.1), and what else waits
/// has wakes of its own (the server's re-wakes, contract 5). Otherwise a card that is not muted
/// and not notices only runs with `wake_instruction`; so does `truncated` (cards wait beyond the
/// limit), unless every card shown is muted: then only a server re-wake (`unanswered`,
/// `reminder`), which never names a muted conversation, says an unmuted card waits beyond the
/// cut. Otherwise listed invites run with `invite_prompt` (not one from a muted inviter or into a
/// muted group: [`invite_muted`]); muted cards alone run nothing, and an
/// empty tray or one whose other cards hold only system notices is `nothing_waiting`: notices
/// "are never what the gate judges" and "never wake the agent by itself" (contract 3.1, 4;
/// `Card::is_notices_only`).
///
/// A malformed card (skipped by `Tray::parse`) runs: a card waits that the listener cannot read,
/// so it cannot know the card is muted, and an unread message is not left without a run for that
/// (the server's re-wake ladder bounds the runs). A malformed invite counts like
/// `invites_truncated`: it starts no run by itself, because the invite rule can never count or
/// dismiss an invite it cannot name.
pub fn decide_woken(tray: &Tray, own_handle: &str, causes: &WakeCauses) -> CycleDecision {
    decide_knowing(tray, own_handle, causes, &|_| None)
}

/// [`decide_woken`], with what earlier trays said of the conversations this one does not show
/// (`known`: muted or not, `None` when never seen): a wake for a message in a conversation past
/// the tray's cut that an earlier tray showed muted is a wake for muted mail (issue 37 item 3).
pub fn decide_knowing(
    tray: &Tray,
    own_handle: &str,
    causes: &WakeCauses,
    known: &dyn Fn(&str) -> Option<bool>,
) -> CycleDecision {
    if let Some(you) = &tray.you
        && !super::handle::same(you, own_handle)
    {
        return CycleDecision::NoRun(NoRunReason::HandleMismatch);
    }
    if causes.only_muted_messages(tray, known) {
        return CycleDecision::NoRun(NoRunReason::OnlyMuted);
    }
    let all_shown_muted =
        !tray.conversations.is_empty() && tray.conversations.iter().all(|c| c.is_muted());
    if (tray.is_truncated() && (!all_shown_muted || causes.rewake))
        || !tray.skipped_cards.is_empty()
        || tray
            .conversations
            .iter()
            .any(|c| !c.is_muted() && !c.is_notices_only())
    {
        return CycleDecision::Run(RunKind::Wake);
    }
    if tray
        .invites
        .iter()
        .flatten()
        .any(|i| !invite_muted(tray, i))
    {
        return CycleDecision::Run(RunKind::Invite);
    }
    let muted_invites = tray.invites.as_ref().is_some_and(|i| !i.is_empty());
    if muted_invites || tray.conversations.iter().any(|c| c.is_muted()) {
        return CycleDecision::NoRun(NoRunReason::OnlyMuted);
    }
    CycleDecision::NoRun(NoRunReason::NothingWaiting)
}

/// An invite the tray shows muted, though invites carry no mute flag (contract 3.1): the inviter
/// is the counterparty of a direct card the tray shows muted, or the group is a group card the
/// tray shows muted. Contract 3.3: "an invite from an agent the invitee muted, or into a group it
/// muted, never wakes"; the listener does not let one start a paid run either (docs/decisions.md,
/// "The decision"). An invite whose inviter or group the tray does not show is not muted.
pub fn invite_muted(tray: &Tray, invite: &super::tray::Invite) -> bool {
    fn text(v: Option<&serde_json::Value>) -> Option<&str> {
        v.and_then(serde_json::Value::as_str)
    }
    let inviter = text(invite.extra.get("invited_by"))
        .or_else(|| text(invite.extra.get("invited_by").and_then(|v| v.get("handle"))));
    let group = text(invite.extra.get("group").and_then(|g| g.get("id")));
    tray.conversations.iter().filter(|c| c.is_muted()).any(|c| {
        let peer = text(c.extra.get("counterparty").and_then(|p| p.get("handle")));
        let direct = text(c.extra.get("type")) == Some("direct");
        (direct && inviter.is_some_and(|h| peer.is_some_and(|p| super::handle::same(p, h))))
            || group.is_some_and(|g| c.conversation_id == g)
    })
}

/// How many cycles in a row [`follow_up`] may start for a tray cut short (`truncated`): 50 runs
/// of up to 50 cards each (the tray's `limit` maximum, contract 3.1), 2,500 cards, before the
/// listener leaves the rest to the server's re-wakes (contract 5).
pub const MAX_FOLLOW_UPS: u32 = 50;

/// Whether a cycle whose run ended should start the next one at once, without a wake. Only
/// after a run that `completed`: a failed or cut-short turn records nothing and the server
/// re-wakes (contract 4 and 5: no program keeps a retry ladder of its own). Cards wait beyond what
/// the run could see, and no server wake may come for them (the re-wake ladder ends after four
/// rungs, contract 5): the tray read after the run is `truncated`, or the one before it was and
/// the after-read shows a card that wakes and that the before-read did not (it came from beyond
/// the cut). And the run made progress of its own ([`cards_left`]: cards it saw left the tray),
/// and fewer than [`MAX_FOLLOW_UPS`] follow-ups came before this one in a row (`streak`). System
/// notices and other agents' new messages move the tray without any run's doing, so they never
/// count: a run that took no card off the tray never starts another.
pub fn follow_up(before: &Tray, after: &Tray, streak: u32, completed: bool) -> bool {
    let seen: BTreeSet<&str> = before
        .conversations
        .iter()
        .map(|c| c.conversation_id.as_str())
        .collect();
    let surfaced = after.conversations.iter().any(|c| {
        !c.is_muted() && !c.is_notices_only() && !seen.contains(c.conversation_id.as_str())
    });
    let more = after.is_truncated() || (before.is_truncated() && surfaced);
    completed && more && cards_left(before, after) && streak < MAX_FOLLOW_UPS
}

/// Cards the before-read showed left the tray between two reads (the run's verdicts read or
/// deferred them), beyond what newer arrivals explain: on a tray cut short, a card that came in
/// newer than the before-read's oldest (`newest_unread_at`, RFC 3339 from one server, so the text
/// orders) may have pushed one past the cut, so each such arrival (and each arrival without the
/// field) cancels one card gone. A surfaced card from beyond the cut is older, and cancels none.
pub fn cards_left(before: &Tray, after: &Tray) -> bool {
    let ids = |t: &Tray| -> BTreeSet<String> {
        t.conversations
            .iter()
            .map(|c| c.conversation_id.clone())
            .collect()
    };
    let (was, is) = (ids(before), ids(after));
    let gone = was.difference(&is).count();
    if !after.is_truncated() {
        return gone > 0;
    }
    let newest = |c: &super::tray::Card| match c.extra.get("newest_unread_at") {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    let oldest_before = before.conversations.iter().filter_map(newest).min();
    let pushed_in = after
        .conversations
        .iter()
        .filter(|c| !was.contains(&c.conversation_id))
        .filter(|c| match (newest(c), &oldest_before) {
            (Some(at), Some(oldest)) => at > *oldest,
            _ => true,
        })
        .count();
    gone > pushed_in
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
            CycleDecision::NoRun(NoRunReason::OnlyMuted)
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

    /// Issue 37 item 7: an invite from an agent the tray shows muted (its direct card), or into
    /// a group the tray shows muted, starts no run; another invite beside it still does.
    #[test]
    fn an_invite_from_a_muted_inviter_or_into_a_muted_group_starts_no_run() {
        let me = "bob";
        let dm = |who: &str, muted: bool| {
            serde_json::json!({"conversation_id": format!("conv_{who}"), "type": "direct",
                "counterparty": {"handle": who}, "muted": muted})
        };
        let group = serde_json::json!({"conversation_id": "grp_1", "type": "group", "muted": true});
        let invite = |id: &str, by: &str, grp: &str| serde_json::json!({"invite_id": id, "invited_by": by, "group": {"id": grp}});
        let from_muted = tray(serde_json::json!({
            "conversations": [dm("@mallory", true)],
            "invites": [invite("i1", "@Mallory", "grp_9")]
        }));
        assert_eq!(
            decide(&from_muted, me),
            CycleDecision::NoRun(NoRunReason::OnlyMuted)
        );
        let into_muted = tray(serde_json::json!({
            "conversations": [group.clone()],
            "invites": [invite("i2", "@carol", "grp_1")]
        }));
        assert_eq!(
            decide(&into_muted, me),
            CycleDecision::NoRun(NoRunReason::OnlyMuted)
        );
        let one_not = tray(serde_json::json!({
            "conversations": [dm("@mallory", true), group],
            "invites": [invite("i1", "@mallory", "grp_9"), invite("i3", "@dave", "grp_3")]
        }));
        assert_eq!(decide(&one_not, me), CycleDecision::Run(RunKind::Invite));
        let unmuted_dm = tray(serde_json::json!({
            "conversations": [dm("@erin", false)],
            "invites": [invite("i4", "@erin", "grp_4")]
        }));
        assert_eq!(decide(&unmuted_dm, me), CycleDecision::Run(RunKind::Wake));
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

    /// A card with its newest unread message at minute `at` (a time that orders as text).
    fn at(id: &str, at: u32) -> serde_json::Value {
        serde_json::json!({"conversation_id": id, "last_message_id": format!("m-{id}-{at}"),
            "unread": 1, "newest_unread_at": format!("2026-12-02T03:{at:02}:00.000Z")})
    }

    fn cut(cards: Vec<serde_json::Value>, truncated: bool) -> Tray {
        tray(serde_json::json!({"conversations": cards, "truncated": truncated}))
    }

    #[test]
    fn a_truncated_tray_follows_up_only_after_a_completed_run_took_cards_off_it() {
        let before = cut(vec![at("a", 20), at("b", 10)], true);
        // The run answered both; two older cards surfaced from beyond the cut.
        let answered = cut(vec![at("c", 5), at("d", 4)], true);
        assert!(cards_left(&before, &answered));
        assert!(follow_up(&before, &answered, 0, true));
        // The same trays after a failed or cut-short run: the server re-wakes, no ladder of ours.
        assert!(!follow_up(&before, &answered, 0, false));
        // A run that took nothing off never starts another.
        assert!(!follow_up(&before, &before.clone(), 0, true));
        // A card whose newest message moved is not a card gone (another agent wrote again).
        assert!(!follow_up(
            &before,
            &cut(vec![at("a", 30), at("b", 10)], true),
            0,
            true
        ));
        // The last cards from beyond the cut surfaced: one more cycle for them.
        assert!(follow_up(&before, &cut(vec![at("c", 3)], false), 0, true));
        // Nothing new surfaced and nothing beyond the cut: the server's wakes cover what is left.
        assert!(!follow_up(&before, &cut(vec![at("a", 20)], false), 0, true));
        assert!(!follow_up(&before, &cut(vec![], false), 0, true));
        // A tray that was whole before the run is not a backlog.
        let whole = cut(vec![at("a", 20), at("b", 10)], false);
        assert!(!follow_up(&whole, &cut(vec![at("c", 3)], false), 0, true));
        // Bounded even while every run takes cards off.
        assert!(follow_up(&before, &answered, MAX_FOLLOW_UPS - 1, true));
        assert!(!follow_up(&before, &answered, MAX_FOLLOW_UPS, true));
        let mut streak = 0;
        while follow_up(&before, &answered, streak, true) {
            streak += 1;
        }
        assert_eq!(streak, MAX_FOLLOW_UPS);
    }

    #[test]
    fn cards_pushed_past_the_cut_by_newer_arrivals_are_no_progress() {
        let before = cut(vec![at("a", 20), at("b", 10)], true);
        // A group's notice (or another agent's message) brought a newer card in and pushed `b`
        // past the cut: nothing the run did.
        let pushed = cut(vec![at("g", 30), at("a", 20)], true);
        assert!(!cards_left(&before, &pushed));
        assert!(!follow_up(&before, &pushed, 0, true));
        // One arrival without its time counts as pushing one out too.
        let unknown = cut(
            vec![serde_json::json!({"conversation_id": "g"}), at("a", 20)],
            true,
        );
        assert!(!cards_left(&before, &unknown));
        // The run answered `a` and `b` while `g` came in: one more gone than came, progress.
        let both = cut(vec![at("g", 30), at("c", 5)], true);
        assert!(cards_left(&before, &both));
    }

    fn message(conversation: &str) -> WakeCause {
        WakeCause::Message(Some(conversation.into()))
    }

    #[test]
    fn a_wake_for_muted_mail_only_starts_no_run_even_beside_an_unanswered_card() {
        let me = "example-relay";
        let t = tray(serde_json::json!({"conversations": [
            {"conversation_id": "muted", "muted": true},
            {"conversation_id": "old", "muted": false},
        ]}));
        let mut causes = WakeCauses::default();
        for _ in 0..3 {
            causes.add(&message("muted"));
        }
        assert_eq!(
            decide_woken(&t, me, &causes),
            CycleDecision::NoRun(NoRunReason::OnlyMuted)
        );
        // A message in a conversation that is not muted, a reconnect, the server's re-wake or
        // a message whose conversation is not on the tray: the tray decides.
        for extra in [
            message("old"),
            WakeCause::Connected,
            WakeCause::Wake("unanswered".into()),
            WakeCause::Message(None),
        ] {
            let mut c = causes.clone();
            c.add(&extra);
            assert_eq!(
                decide_woken(&t, me, &c),
                CycleDecision::Run(RunKind::Wake),
                "{extra:?}"
            );
        }
        let mut gone = WakeCauses::default();
        gone.add(&message("read-meanwhile"));
        assert_eq!(
            decide_woken(&t, me, &gone),
            CycleDecision::Run(RunKind::Wake)
        );
        // A mismatch still wins.
        let other = tray(serde_json::json!({"you": "@other", "conversations": [
            {"conversation_id": "muted", "muted": true}]}));
        assert_eq!(
            decide_woken(&other, me, &causes),
            CycleDecision::NoRun(NoRunReason::HandleMismatch)
        );
    }

    #[test]
    fn a_truncated_tray_of_muted_cards_waits_for_nothing_until_the_server_re_wakes() {
        let me = "example-relay";
        let muted = |id: &str| serde_json::json!({"conversation_id": id, "muted": true});
        let t =
            tray(serde_json::json!({"conversations": [muted("a"), muted("b")], "truncated": true}));
        assert_eq!(decide(&t, me), CycleDecision::NoRun(NoRunReason::OnlyMuted));
        // `unanswered` and `reminder` never name a muted conversation: an unmuted card waits
        // beyond the cut.
        for reason in ["unanswered", "reminder"] {
            let mut c = WakeCauses::default();
            c.add(&WakeCause::Wake(reason.into()));
            assert_eq!(
                decide_woken(&t, me, &c),
                CycleDecision::Run(RunKind::Wake),
                "{reason}"
            );
        }
        // A truncated tray showing nothing still runs: it cannot say what waits.
        let empty = tray(serde_json::json!({"conversations": [], "truncated": true}));
        assert_eq!(decide(&empty, me), CycleDecision::Run(RunKind::Wake));
    }

    #[test]
    fn wake_causes_name_a_bounded_number_of_conversations() {
        let mut c = WakeCauses::default();
        for i in 0..MAX_WAKE_CONVERSATIONS {
            c.add(&message(&format!("c{i}")));
        }
        assert!(!c.other);
        c.add(&message("c0"));
        assert!(!c.other, "one already named is no new entry");
        c.add(&message("one-more"));
        assert!(c.other, "past the bound the tray decides");
        assert_eq!(c.messages.len(), MAX_WAKE_CONVERSATIONS);
    }
}

//! Step 6 of a cycle (contract 4, last paragraph): the tray after the run, the backlog's
//! follow-up, and the single-run invite rule with its dismissals.

use super::super::Out;
use super::super::io::{Dismissal, Effect, RunOutcome};
use super::{Ctx, Cycle, Note, Step};
use crate::decision;
use crate::history::After;
use crate::invite_rule::{InviteVerdict, RunObservation};
use crate::log_events;
use crate::time::ms;
use crate::tray::Tray;
use std::time::Duration;

impl Cycle {
    /// Step 6: the single-run invite rule (contract 4, last paragraph). A failed run counts
    /// nothing, but the memory still forgets invites that are gone, so the after-tray is read
    /// either way. A tray cut short before the run is read again too, to tell whether the next
    /// cycle follows at once.
    pub(super) fn after_run(&mut self, ctx: &mut Ctx, _completed: bool, out: &mut Out<Note>) {
        let Some(before) = &self.before else {
            return self.finish(ctx, out);
        };
        if self.counted_invites(before).is_empty() {
            // No invite the run may count waited. Invites the memory still holds that a complete
            // list no longer shows were answered: forget them.
            if before.invites_complete() {
                let gone = ctx.invites.forget_unlisted(&before.invite_ids(), true);
                if !gone.is_empty() {
                    tracing::debug!(event = %log_events::INVITE_FORGOTTEN, count = gone.len(), "invites answered");
                    self.invites_changed = true;
                }
            }
            if !before.is_truncated() {
                // Nothing waited beyond what the run saw either: no second tray read.
                return self.finish(ctx, out);
            }
        }
        self.step = Step::Read {
            after: true,
            attempt: 1,
        };
        out.effect(Effect::ReadTray { cycle: self.seq });
    }

    /// The tray after the run: the follow-up, then the invite rule.
    pub(super) fn after_tray(&mut self, ctx: &mut Ctx, after: Tray, out: &mut Out<Note>) {
        ctx.mutes.see(&after);
        ctx.heard.see(&after);
        let Some(before) = self.before.take() else {
            return self.finish(ctx, out);
        };
        let completed = self.outcome == Some(RunOutcome::Completed);
        self.report.after = Some(changed(&before, &after));
        self.report.follow_up = decision::follow_up(&before, &after, self.follow_ups, completed);
        if self.report.follow_up {
            tracing::info!(event = %log_events::BACKLOG, cycle_id = %self.id, cards = after.conversations.len(), truncated = after.is_truncated(), "more cards wait than the run could see, and the completed run took cards off the tray; the next cycle starts now");
        }
        let before_ids = self.counted_invites(&before);
        if before_ids.is_empty() {
            return self.finish(ctx, out);
        }
        let after_ids = after.invite_ids();
        let obs = RunObservation {
            before: &before_ids,
            after: &after_ids,
            after_complete: after.invites_complete(),
            run_completed: completed,
            run_ended_at_ms: u64::try_from(self.run_ended_wall).unwrap_or(0),
        };
        let pace = ms(ctx.timing.of(Duration::from_millis(
            crate::invite_rule::SINGLE_RUN_PACE_MS,
        )));
        self.pending = ctx.invites.apply_run(&obs, pace).into();
        self.invites_changed = true;
        self.step = Step::Dismissing;
        self.next_verdict(ctx, out);
    }

    /// The invites on the tray before the run that the invite rule may count: the ones the run
    /// policy let wake it (a held invite is left as the run found it).
    pub(super) fn counted_invites(&self, before: &Tray) -> Vec<String> {
        before
            .invite_ids()
            .into_iter()
            .filter(|id| self.allowed_invites.contains(id))
            .collect()
    }

    /// Acts on the verdicts in order; a dismissal waits for its answer.
    pub(super) fn next_verdict(&mut self, ctx: &mut Ctx, out: &mut Out<Note>) {
        while let Some((invite_id, verdict)) = self.pending.front().cloned() {
            match verdict {
                // Forget the invite only once the dismissal is confirmed (crate::invite_rule):
                // a failed call keeps its count, so the next completed run dismisses it again.
                InviteVerdict::Dismiss => {
                    out.effect(Effect::DismissInvite {
                        cycle: self.seq,
                        invite_id,
                    });
                    return;
                }
                InviteVerdict::Counted => {
                    ctx.obs.invite_counted();
                    tracing::info!(event = %log_events::INVITE_COUNTED, cycle_id = %self.id, invite_id = %invite_id, "invite left pending by a run: counted")
                }
                InviteVerdict::SilentPaced => {
                    tracing::info!(event = %log_events::INVITE_SILENT_PACED, cycle_id = %self.id, invite_id = %invite_id, "invite left pending again too soon after the counted run")
                }
                InviteVerdict::Forgotten => {
                    tracing::debug!(event = %log_events::INVITE_FORGOTTEN, cycle_id = %self.id, invite_id = %invite_id, "invite answered")
                }
                InviteVerdict::NotCounted => {
                    tracing::debug!(event = %log_events::INVITE_NOT_COUNTED, cycle_id = %self.id, invite_id = %invite_id, "invite not counted")
                }
            }
            self.pending.pop_front();
        }
        self.finish(ctx, out);
    }

    /// A dismissal answered.
    pub fn on_dismissed(
        &mut self,
        ctx: &mut Ctx,
        invite_id: &str,
        result: Dismissal,
        out: &mut Out<Note>,
    ) {
        if self.step != Step::Dismissing
            || self.pending.front().map(|(id, _)| id.as_str()) != Some(invite_id)
        {
            return;
        }
        self.pending.pop_front();
        let id = &self.id;
        match result {
            Dismissal::Dismissed => {
                ctx.invites.confirm_dismissed(invite_id);
                tracing::info!(event = %log_events::INVITE_DISMISSED, cycle_id = %id, invite_id = %invite_id, "invite left pending by two runs: dismissed");
                self.report.last.invites_dismissed += 1;
            }
            Dismissal::NotPending => {
                ctx.invites.confirm_dismissed(invite_id);
                tracing::info!(event = %log_events::INVITE_NOT_PENDING, cycle_id = %id, invite_id = %invite_id, "invite no longer pending (404 INVITE_NOT_FOUND): nothing to dismiss, forgotten");
            }
            Dismissal::Failed(e) => {
                tracing::warn!(event = %log_events::INVITE_DISMISS_FAILED, cycle_id = %id, invite_id = %invite_id, error = %e, "could not dismiss the invite; it stays on the tray, and the next completed run that leaves it pending dismisses it again");
            }
        }
        self.next_verdict(ctx, out);
    }
}

/// What the tray after a run shows changed: the cards before it (that could wake it) that are
/// gone, and those still there. Invites dismissed are counted as the dismissals answer.
fn changed(before: &Tray, after: &Tray) -> After {
    let waiting = |c: &&crate::tray::Card| !c.is_muted() && !c.is_notices_only();
    let mut a = After::default();
    for card in before.conversations.iter().filter(waiting) {
        if after
            .conversations
            .iter()
            .any(|c| c.conversation_id == card.conversation_id)
        {
            a.waiting += 1;
        } else {
            a.answered += 1;
        }
    }
    a
}

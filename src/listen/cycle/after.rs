//! Step 6 of a cycle (contract 4, last paragraph): the tray after the run, the single-run invite
//! rule and the backlog follow-up.

use super::tray::{log_tray, read_tray};
use super::{CycleInput, CycleReport};
use crate::client::Dismissal;
use crate::core::decision;
use crate::core::invite_rule::{InviteVerdict, RunObservation};
use crate::core::tray::Tray;
use crate::listen::state_dir::StateDir;
use crate::log_events;
use crate::sys::time;
use std::time::SystemTime;

/// Step 6: the single-run invite rule (contract 4, last paragraph). A failed run counts nothing, but the memory
/// still forgets invites that are gone, so the after-tray is read either way. A tray cut short
/// before the run is read again too, to tell whether the next cycle follows at once.
pub(super) async fn apply_invite_rule_after_run(
    input: &CycleInput,
    report: &mut CycleReport,
    before: &Tray,
    completed: bool,
    run_ended_at: SystemTime,
) {
    let before_ids = before.invite_ids();
    if before_ids.is_empty() {
        // No invite waited, so none can be counted. Invites the memory still holds are gone
        // from a complete list, so they were answered: forget them.
        if before.invites_complete() {
            forget_answered(&input.state, &before_ids);
        }
        if !before.is_truncated() {
            // Nothing waited beyond what the run saw either: no second tray read.
            return;
        }
    }
    let after = match read_tray(input, input.shutdown.clone()).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(event = %log_events::TRAY_UNREADABLE, cycle_id = %input.id, error = %e, "the tray after the run could not be read; the invite rule counts nothing this time");
            return;
        }
    };
    log_tray(&input.id, "after", &after);
    report.follow_up = decision::follow_up(before, &after, input.follow_ups, completed);
    if report.follow_up {
        tracing::info!(event = %log_events::BACKLOG, cycle_id = %input.id, cards = after.conversations.len(), truncated = after.is_truncated(), "more cards wait than the run could see, and the completed run took cards off the tray; the next cycle starts now");
    }
    if !before_ids.is_empty() {
        apply_invite_rule(input, report, before, &after, completed, run_ended_at).await;
    }
}

async fn apply_invite_rule(
    input: &CycleInput,
    report: &mut CycleReport,
    before: &Tray,
    after: &Tray,
    completed: bool,
    run_ended_at: SystemTime,
) {
    let id = &input.id;
    let mut memory = match input.state.load_invites() {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(event = %log_events::INVITE_MEMORY_DAMAGED, error = %e, "the invite memory could not be read; starting it afresh");
            Default::default()
        }
    };
    let before_ids = before.invite_ids();
    let after_ids = after.invite_ids();
    let obs = RunObservation {
        before: &before_ids,
        after: &after_ids,
        after_complete: after.invites_complete(),
        run_completed: completed,
        run_ended_at_ms: time::unix_ms(run_ended_at),
    };
    let verdicts = memory.apply_run(&obs, input.invite_pace_ms);
    for (invite_id, verdict) in verdicts {
        match verdict {
            // Forget the invite only once the dismissal is confirmed (core::invite_rule): a failed
            // call keeps its count, so the next completed run dismisses it again.
            InviteVerdict::Dismiss => match input.api.dismiss_invite(&invite_id).await {
                Ok(Dismissal::Dismissed) => {
                    memory.confirm_dismissed(&invite_id);
                    tracing::info!(event = %log_events::INVITE_DISMISSED, cycle_id = %id, invite_id = %invite_id, "invite left pending by two runs: dismissed");
                    report.last.invites_dismissed += 1;
                }
                Ok(Dismissal::NotPending) => {
                    memory.confirm_dismissed(&invite_id);
                    tracing::info!(event = %log_events::INVITE_NOT_PENDING, cycle_id = %id, invite_id = %invite_id, "invite no longer pending (404 INVITE_NOT_FOUND): nothing to dismiss, forgotten");
                }
                Err(e) => {
                    tracing::warn!(event = %log_events::INVITE_DISMISS_FAILED, cycle_id = %id, invite_id = %invite_id, error = %e, "could not dismiss the invite; it stays on the tray, and the next completed run that leaves it pending dismisses it again");
                }
            },
            InviteVerdict::Counted => {
                input.metrics.invite_counted();
                tracing::info!(event = %log_events::INVITE_COUNTED, cycle_id = %id, invite_id = %invite_id, "invite left pending by a run: counted")
            }
            InviteVerdict::SilentPaced => {
                tracing::info!(event = %log_events::INVITE_SILENT_PACED, cycle_id = %id, invite_id = %invite_id, "invite left pending again too soon after the counted run")
            }
            InviteVerdict::Forgotten => {
                tracing::debug!(event = %log_events::INVITE_FORGOTTEN, cycle_id = %id, invite_id = %invite_id, "invite answered")
            }
            InviteVerdict::NotCounted => {
                tracing::debug!(event = %log_events::INVITE_NOT_COUNTED, cycle_id = %id, invite_id = %invite_id, "invite not counted")
            }
        }
    }
    input.state.save_invites(&memory);
}

/// Forgets the remembered invites a complete tray list no longer shows: they were answered
/// (contract 4, last paragraph; `InviteMemory::forget_unlisted`).
fn forget_answered(state: &StateDir, listed: &[String]) {
    let Ok(mut memory) = state.load_invites() else {
        return;
    };
    let gone = memory.forget_unlisted(listed, true);
    if gone.is_empty() {
        return;
    }
    tracing::debug!(event = %log_events::INVITE_FORGOTTEN, count = gone.len(), "invites answered");
    state.save_invites(&memory);
}

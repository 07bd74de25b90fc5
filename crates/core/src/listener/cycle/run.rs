//! Step 5 of a cycle: a slot of the process (`listen --all`), the run, its end.

use super::super::Out;
use super::super::io::{Effect, RunEnd, RunOrder, RunOutcome, Slot};
use super::{Ctx, Cycle, Note, STALE_DECISION, Step};
use crate::log_events;
use crate::shown::Waiting;
use crate::status::RunKind;
use crate::time::ms;

impl Cycle {
    /// The host answered the slot request.
    pub fn on_slot(&mut self, ctx: &mut Ctx, slot: Slot, out: &mut Out<Note>) {
        let Step::Slot { asked_at } = self.step else {
            if let Slot::Granted { .. } = slot {
                // A slot for a cycle that gave up meanwhile goes back at once.
                out.effect(Effect::ReleaseSlot);
            }
            return;
        };
        match slot {
            Slot::OverBudget { reason, key, until } => {
                // The host's budget is a hold like the profile's own caps: it ends at midnight.
                let hold = crate::policy::Hold {
                    cards: self.report.cards.clone(),
                    ..crate::policy::Hold::by_time(reason, key, Some(until))
                };
                tracing::debug!(event = %log_events::POLICY_HELD, cycle_id = %self.id, reason = reason.as_str(), key, "the host's daily budget holds this run");
                self.report.policy = super::Seen::Held(hold);
                self.end_no_run(crate::status::NoRunReason::Held, out);
            }
            Slot::Queued {
                place,
                running,
                max,
            } => {
                tracing::info!(
                    event = %log_events::RUN_QUEUED,
                    cycle_id = %self.id,
                    place,
                    running,
                    max_concurrent_runs = max,
                    "every run slot is taken (or memory is short): this run waits its turn"
                );
                self.queued = true;
                self.report.queued = Some((place, 0));
                out.note(Note::Queued(Waiting {
                    place,
                    running,
                    max,
                }))
            }
            Slot::Granted { waited_ms } => {
                self.slot_held = true;
                if std::mem::take(&mut self.queued) {
                    if let Some(q) = self.report.queued.as_mut() {
                        q.1 = waited_ms;
                    }
                    tracing::info!(
                        event = %log_events::RUN_DEQUEUED,
                        cycle_id = %self.id,
                        waited_ms,
                        "this run's turn came"
                    );
                }
                out.note(Note::LeftQueue);
                let waited = waited_ms.max(ctx.now.mono_ms.saturating_sub(asked_at));
                if !self.rereading && waited > ms(ctx.timing.of(STALE_DECISION)) {
                    // The tray that decided this run is that old: the card may be answered
                    // elsewhere, an invite declined. Decide again on the tray as it is now (the
                    // slot is kept meanwhile).
                    tracing::info!(event = %log_events::TRAY_REREAD, cycle_id = %self.id, waited_ms = waited, "this run waited long for its slot: reading the tray again before it starts");
                    self.rereading = true;
                    self.step = Step::Read {
                        after: false,
                        attempt: 1,
                    };
                    out.effect(Effect::ReadTray { cycle: self.seq });
                } else {
                    self.start_run(ctx, out);
                }
            }
        }
    }

    /// Step 5: the run.
    pub(super) fn start_run(&mut self, ctx: &mut Ctx, out: &mut Out<Note>) {
        let (Some(kind), Some(prompt)) = (self.kind, self.prompt.clone()) else {
            return;
        };
        self.report.last.run_started = true;
        self.report.last.run_kind = Some(kind);
        self.step = Step::Running;
        out.effect(Effect::StartRun(Box::new(RunOrder {
            cycle: self.seq,
            cycle_id: self.id.clone(),
            kind,
            prompt,
            reasons: self.reasons.clone(),
            handle: ctx.handle.to_string(),
            texts: ctx.texts.map(|t| t.texts.clone()),
        })));
    }

    /// The run's process started.
    pub fn on_run_started(&mut self, log: String, out: &mut Out<Note>) {
        if self.step != Step::Running {
            return;
        }
        self.report.last.run_log = Some(log.clone());
        out.note(Note::RunStarting {
            kind: self.report.last.run_kind.unwrap_or(RunKind::Wake),
            log,
            conversations: self.report.conversations.clone(),
            cards: self.report.cards.clone(),
        });
    }

    /// The run ended: step 6 unless the listener stops.
    pub fn on_run_ended(
        &mut self,
        ctx: &mut Ctx,
        end: RunEnd,
        stopping: bool,
        out: &mut Out<Note>,
    ) {
        if self.step != Step::Running {
            return;
        }
        self.release_slot(out);
        if !end.started {
            // It could not be prepared or spawned: no run is counted.
            self.report.last.run_started = false;
            self.report.last.run_kind = None;
        } else {
            self.report.run_report = Some(end.report);
        }
        self.run_ended_wall = ctx.now.wall_ms;
        self.report.run_exit = Some((end.exit, end.duration_ms));
        let completed = end.outcome == RunOutcome::Completed;
        self.outcome = Some(end.outcome);
        if stopping || !end.started {
            return self.finish(ctx, out);
        }
        self.after_run(ctx, completed, out);
    }
}

//! Cycles as the listener runs them: one at a time, started when the coalescer says one is due,
//! each step's input routed to it, and its end taken in (the status, the counters, the ways out
//! of the states in which no run can start).

use super::cycle::{self, Ctx, Cycle, Note};
use super::record;
use super::{Effect, Listener, Out};
use crate::engine::WakeCause;
use crate::log_events;
use crate::status::{ListenerWake, NoRunReason};
use crate::time::Now;

impl Listener {
    /// Starts the owed cycle when it is due now and none runs. An unusable runtime's binary is
    /// looked at first: a changed one is this cycle's way out.
    pub(super) fn start_due_cycle(&mut self, now: Now) {
        if self.cycle_running()
            || self.waits.tray_not_before.at().is_some()
            || self.life.stopping.is_some()
            || !self.wakes.try_start(now.mono_ms)
        {
            return;
        }
        self.cycles.next_seq += 1;
        if self.rt.health.is_usable() {
            self.begin_cycle(now, None);
        } else {
            self.cycles.stamping = Some(self.cycles.next_seq);
            self.out.effects.push_back(Effect::StatRuntimeBinary {
                cycle: self.cycles.next_seq,
            });
        }
    }

    /// The runtime binary's stamp, for a cycle due while the runtime is unusable: a binary
    /// installed, updated or replaced since gets a new chance.
    pub(super) fn on_runtime_binary(&mut self, now: Now, seq: u64, stamp: Option<u64>) {
        if self.cycles.stamping != Some(seq) {
            return;
        }
        self.cycles.stamping = None;
        let also = if self.rt.health.binary_changed(stamp.as_ref()) {
            tracing::info!(event = %log_events::RUNTIME_BINARY_CHANGED, runtime = self.cfg.runtime.as_str(), "the runtime's binary changed; trying it again");
            self.leave_unusable("binary_changed", false, now);
            // This cycle is the way out: its reasons (and the metrics) say so, and it owes no
            // cycle of its own.
            let cause = WakeCause::Listener(ListenerWake::Recovered);
            self.obs.wake(&cause, 1);
            Some(cause)
        } else {
            None
        };
        self.begin_cycle(now, also);
    }

    /// The cycle starts. The status shows it once its run is spawned (or it ended): nothing is
    /// written on a wake's way to its run.
    fn begin_cycle(&mut self, now: Now, also: Option<WakeCause>) {
        let served = self.wakes.serve(also.as_ref());
        self.shown.counters.cycles += 1;
        self.obs.cycle_started();
        let mut out = self.out.out();
        let c = Cycle::start(
            self.cycles.next_seq,
            served.reasons,
            served.causes,
            served.follow_ups,
            !self.rt.health.is_usable(),
            now,
            &mut out,
        );
        self.shown.last_cycle = Some(c.report.last.clone());
        self.status.changed();
        self.status.hold(now);
        self.cycles.cycle = Some(c);
        let notes = out.notes;
        self.cycle_notes(now, notes);
        self.take_done_cycle(now);
    }

    /// Runs `f` on the cycle `seq` (an answer for another is dropped), then takes in what it
    /// said and its end.
    pub(super) fn with_cycle(
        &mut self,
        now: Now,
        seq: u64,
        f: impl FnOnce(&mut Cycle, &mut Ctx, &mut Out<Note>),
    ) {
        let Some(c) = self.cycles.cycle.as_mut().filter(|c| c.seq == seq) else {
            return;
        };
        let texts = self.texts.current(self.cfg.runtime.texts_runtime());
        let handle = self.shown.handle.clone().unwrap_or_default();
        let mut ctx = Ctx {
            now,
            handle: &handle,
            texts,
            policy: &mut self.policy,
            invites: &mut self.kept.invites,
            timing: self.timing,
            obs: self.obs.as_ref(),
            unknown_version_said: &mut self.shown.unknown_version_said,
            next_req: &mut self.cycles.next_req,
            removed_known: self.shown.flags.removed.is_some(),
            mutes: &mut self.kept.mutes,
            heard: &mut self.kept.heard,
        };
        let mut out = self.out.out();
        f(c, &mut ctx, &mut out);
        let notes = out.notes;
        self.save_policy_memory();
        self.cycle_notes(now, notes);
        self.take_done_cycle(now);
    }

    fn cycle_notes(&mut self, now: Now, notes: Vec<Note>) {
        for n in notes {
            match n {
                // The run's process started: now the status may be written, and the run counts.
                Note::RunStarting {
                    kind,
                    log,
                    conversations,
                    cards,
                } => {
                    self.status.release();
                    self.kept.heard.spend(&cards);
                    self.policy.run_started(&conversations, now.wall_ms);
                    if let Some(c) = self.cycles.cycle.as_mut() {
                        c.report.run_started_ms = Some(now.wall_ms);
                        let line = record::run(&self.cfg.profile, &c.report, false);
                        self.out.effects.push_back(Effect::Record(Box::new(line)));
                    }
                    if let Some(c) = self.shown.last_cycle.as_mut() {
                        c.run_started = true;
                        c.run_kind = Some(kind);
                        c.run_log = Some(log);
                    }
                    self.status.changed();
                }
                // The cycle waits out a `429 Retry-After` before it reads the tray again: the
                // status is written meanwhile and says so (a wait of minutes is no stuck loop).
                Note::Wait { until_wall } => {
                    self.status.release();
                    self.shown.flags.cycle_wait = Some(until_wall);
                    self.status.changed();
                }
                Note::Queued(q) => {
                    self.shown.flags.queued = Some(q);
                    self.status.release();
                    self.status.changed();
                }
                Note::LeftQueue => {
                    if self.shown.flags.queued.take().is_some() {
                        self.status.changed();
                    }
                }
            }
        }
    }

    /// A cycle that is done is taken in, and the next due one may start.
    pub(super) fn take_done_cycle(&mut self, now: Now) {
        if !self.cycles.cycle.as_ref().is_some_and(Cycle::is_done) {
            return;
        }
        let Some(mut c) = self.cycles.cycle.take() else {
            return;
        };
        c.close(now);
        self.status.release();
        self.shown.flags.cycle_wait = None;
        if self.shown.flags.queued.take().is_some() {
            self.status.changed();
        }
        let windows = self.wakes.end(now.mono_ms);
        self.windows_in_effect(windows);
        self.on_cycle_end(now, c.report);
    }

    pub(super) fn on_cycle_end(&mut self, now: Now, mut report: cycle::Report) {
        self.shown.flags.cycle_wait = None;
        self.obs.cycle_ended(&report.last, report.key_refused);
        if report.last.run_started && report.unusable.is_some() {
            // Refused by its runtime before a model was asked: no cap counts it (issue 34 item 12).
            self.policy.run_refused();
        } else if report.last.run_started {
            let budgeted = self.cfg.runtime == crate::runtime_kind::RuntimeKind::ClaudeCode;
            let spent = report
                .run_report
                .as_ref()
                .map(|r| self.policy.spent(r, budgeted))
                .unwrap_or_default();
            self.policy
                .run_ended(&report.conversations, spent, now.wall_ms);
            report.spent = Some(spent);
            if let Some(r) = &report.run_report {
                self.obs.run_reported(self.cfg.runtime.as_str(), r);
            }
        }
        let profile = &self.cfg.profile;
        let line = match report.run_exit {
            Some(_) => Some(record::run(profile, &report, true)),
            None => record::queued(profile, &report),
        };
        let held_before = self.policy.current_hold();
        self.policy.seen(&report.policy, now.mono_ms, now.wall_ms);
        let holds = self.holds.cycle(
            profile,
            &report,
            held_before,
            self.policy.current_hold(),
            now.wall_ms,
        );
        for line in line.into_iter().chain(holds) {
            self.out.effects.push_back(Effect::Record(Box::new(line)));
        }
        self.save_policy_memory();
        if report.last.run_started {
            self.shown.counters.runs += 1;
        }
        if report.last.run_failed() {
            self.shown.counters.runs_failed += 1;
        }
        self.shown.counters.invites_dismissed += report.last.invites_dismissed;
        if self.wakes.followed_up(report.follow_up) {
            self.own_wake(ListenerWake::Backlog, now);
        }
        if report.last.run_started && report.unusable.is_none() {
            self.rt.health.start_over();
        }
        if let Some(why) = report.unusable.clone() {
            if self.rt.health.is_usable() {
                tracing::error!(event = %log_events::RUNTIME_UNUSABLE, cycle_id = %report.last.id, runtime = self.cfg.runtime.as_str(), why = %why, "the runtime cannot be used; no runs until it is fixed: the listener checks it again on a backoff (seconds growing to 10 minutes) and at once on reload (SIGHUP)");
            }
            // A run the listener's own wake alone started (`recovered`, `backlog`, `hold_ended`)
            // and its runtime refused is the trial: no look of the listener's own follows it,
            // whose pass would start a second run with no new cause (contract 4; the
            // simulator's `no_private_retry_ladder`, seed 544). The next server wake, a reload
            // or a new binary tries again.
            if report.last.run_started && own_wakes_only(&report.last.reasons) {
                self.rt.health.as_trial();
            }
            self.mark_unusable(why, now);
        }
        if report.last.no_run_reason == Some(NoRunReason::NoTexts) {
            self.texts.owe(now.mono_ms, self.timing.scale);
        }
        if let Some(you) = report.handle_mismatch {
            if self.shown.flags.mismatch.as_deref() != Some(you.as_str()) {
                tracing::error!(
                    event = %log_events::HANDLE_MISMATCH,
                    you = %crate::handle::shown(&you),
                    handle = self.shown.handle.as_deref().map(crate::handle::shown),
                    "the tray belongs to another agent than this key's; no runs until it matches"
                );
            }
            self.shown.flags.mismatch = Some(you);
        } else if report.handle_ok && self.shown.flags.mismatch.take().is_some() {
            tracing::info!(event = %log_events::HANDLE_MISMATCH_CLEARED, "the tray is this key's agent's again");
        }
        if let Some(wait) = report.not_before {
            tracing::info!(
                event = %log_events::TRAY_NOT_BEFORE,
                wait_ms = crate::time::ms(wait),
                "the server asked for {} s before the next tray read (429 Retry-After); wakes wait until then, and a cycle reads the tray then by itself",
                wait.as_secs_f64().ceil() as u64
            );
            self.waits.tray_not_before.schedule_after(now.mono_ms, wait);
            self.waits.not_before_wall =
                Some(now.wall_ms.saturating_add(crate::time::ms(wait) as i64));
        }
        if let Some(removed) = report.removed {
            self.shown.flags.removed = Some(removed);
            // Retrying soon will not succeed, but nothing may come from the server to read it
            // again: the tray is read again on the slow re-check of the `4426` state (15-30 min).
            let wait =
                crate::reconnect::upgrade_recheck_delay(self.out.rng.f64(), self.timing.scale);
            self.waits.removed_recheck.schedule_after(now.mono_ms, wait);
        } else if report.handle_ok {
            self.shown.flags.removed = None;
            self.waits.removed_recheck.reset();
        }
        if report.key_refused {
            self.shown.view.detail =
                Some("the server refused the key when reading the tray (HTTP 401/403)".into());
        }
        if let Some(loaded) = report.loaded_texts {
            self.take_texts(Ok(loaded), now);
        } else if let Some(missing) = report.texts_missing {
            self.take_texts(Err(missing), now);
        }
        self.shown.last_cycle = Some(report.last);
        self.status.changed();
    }

    /// Says windows a reload left waiting that are in effect now.
    pub(super) fn windows_in_effect(&self, windows: Option<crate::wakes::Windows>) {
        if let Some(w) = windows {
            tracing::info!(
                event = %log_events::COALESCER_WINDOWS,
                quiet_window_ms = w.quiet_ms,
                max_delay_ms = w.max_delay_ms,
                "new quiet_window and max_delay in effect"
            );
        }
    }
}

/// Whether a cycle's reasons are only the listener's own wakes (no server wake, message,
/// invite or connect).
fn own_wakes_only(reasons: &[String]) -> bool {
    !reasons.is_empty()
        && reasons
            .iter()
            .all(|r| matches!(r.as_str(), "recovered" | "backlog" | "hold_ended"))
}

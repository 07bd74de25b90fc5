//! What the main loop hears from its tasks: socket events, a cycle's start, its run's start and
//! its end.

use super::*;
use crate::log_events;

impl Daemon {
    /// The cycle's task ended: the coalescer hears it, and its report goes into the status.
    pub(super) fn on_cycle_task_end(&mut self, r: Result<CycleReport, tokio::task::JoinError>) {
        self.status_file.release();
        self.flags.cycle_wait = None;
        let now = self.now_ms();
        let windows = self.wakes.end(now);
        self.windows_in_effect(windows);
        match r {
            Ok(report) => self.on_cycle_end(report),
            Err(e) => {
                tracing::error!(event = %log_events::CYCLE_CRASHED, error = %e, "the cycle task ended abnormally")
            }
        }
    }

    pub(super) fn on_socket_event(&mut self, ev: SocketEvent) {
        let now = SystemTime::now();
        match ev {
            SocketEvent::Handle(h) => {
                let state_dir = self.settings.state_dir.clone();
                if !self
                    .agent
                    .on_handle(&self.settings.api_base, &h, &state_dir)
                {
                    return;
                }
                tracing::info!(event = %log_events::HANDLE, handle = %crate::core::handle::shown(&h), "this key's agent");
                self.handle = Some(h);
                self.status_changed();
            }
            SocketEvent::State {
                state,
                next_retry_at,
                detail,
            } => {
                self.socket.state = state;
                self.socket.next_retry_at = next_retry_at;
                self.socket.detail = detail;
                self.status_changed();
            }
            SocketEvent::Connected => {
                self.counters.connects += 1;
                self.socket.last_connected = Some(now);
            }
            SocketEvent::Burst {
                frames,
                skipped,
                acked,
            } => {
                self.counters.frames += frames;
                self.counters.frames_skipped += skipped;
                self.counters.acks += acked;
                self.metrics.burst(skipped, acked);
                self.socket.last_frame = Some(now);
            }
            SocketEvent::Wake {
                cause,
                frames,
                registered,
            } => {
                self.record(&cause, frames);
                let _ = registered.send(());
            }
        }
    }

    /// Starts a cycle as its own task. The status shows it once its run is spawned (or it ended):
    /// nothing is written to disk on a wake's way to its run.
    pub(super) fn start_cycle(
        &mut self,
        shutdown: watch::Receiver<bool>,
        run_starting: oneshot::Sender<RunStarting>,
        waits: mpsc::Sender<cycle::CycleWait>,
    ) -> JoinHandle<CycleReport> {
        // A changed runtime binary makes this cycle the way out: its reasons (and the metrics)
        // say so, and it owes no cycle of its own.
        let also = self
            .retry_a_changed_runtime_binary()
            .then_some(WakeCause::Listener(ListenerWake::Recovered));
        if let Some(cause) = &also {
            self.metrics.wake(cause, 1);
        }
        let served = self.wakes.serve(also.as_ref());
        let reasons = served.reasons;
        let id = cycle::new_cycle_id();
        self.counters.cycles += 1;
        self.metrics.cycle_started();
        let input = CycleInput {
            id: id.clone(),
            settings: self.settings.clone(),
            api: self.api.clone(),
            key: self.key.clone(),
            state: self.state.clone(),
            handle: self.handle.clone().unwrap_or_default(),
            texts: self.current_texts().map(|l| l.texts.clone()),
            reasons: reasons.clone(),
            causes: served.causes,
            runtime_unusable: !self.runtime.is_usable(),
            invite_pace_ms: self.scale().invite_pace_ms(),
            follow_ups: served.follow_ups,
            shutdown,
            run_starting: Some(run_starting),
            waits: Some(waits),
            metrics: self.metrics.clone(),
            admission: self.ticket(),
            policy: Some(self.run_policy.for_cycle()),
        };
        self.last_cycle = Some(LastCycle::started(
            id,
            time::rfc3339(SystemTime::now()),
            reasons,
        ));
        self.status_changed();
        self.status_file.hold();
        tokio::spawn(tracing::Instrument::in_current_span(cycle::run(input)))
    }

    /// The cycle handed its run to the supervisor. On the listener's single-threaded runtime this
    /// is heard once the cycle's task yields, which is after the spawn: now the status may be
    /// written.
    pub(super) fn on_run_starting(&mut self, run: RunStarting) {
        self.status_file.release();
        self.run_policy.run_started(&run.conversations);
        if let Some(c) = self.last_cycle.as_mut() {
            c.run_started = true;
            c.run_kind = Some(run.kind);
            c.run_log = Some(run.log);
        }
        self.status_changed();
    }

    /// The running cycle waits out the server's `429 Retry-After` before it reads the tray again:
    /// the status is written meanwhile and says so (a wait of minutes is no stuck loop).
    pub(super) fn on_cycle_wait(&mut self, wait: cycle::CycleWait) {
        self.status_file.release();
        self.flags.cycle_wait = Some(wait.until);
        self.status_changed();
    }

    pub(super) fn on_cycle_end(&mut self, report: CycleReport) {
        self.flags.cycle_wait = None;
        self.metrics.cycle_ended(&report.last, report.key_refused);
        self.run_policy.cycle_ended(&report);
        if report.last.run_started {
            self.counters.runs += 1;
        }
        if report.last.run_failed() {
            self.counters.runs_failed += 1;
        }
        self.counters.invites_dismissed += report.last.invites_dismissed;
        self.after_cycle(&report);
        if let Some(why) = report.unusable.clone() {
            self.mark_unusable(why);
        }
        if report.last.no_run_reason == Some(crate::core::status::NoRunReason::NoTexts) {
            let (now, factor) = (self.now_ms(), self.scale().factor());
            self.texts.owe(now, factor);
        }
        if let Some(you) = report.handle_mismatch {
            if self.flags.mismatch.as_deref() != Some(you.as_str()) {
                tracing::error!(
                    event = %log_events::HANDLE_MISMATCH,
                    you = %crate::core::handle::shown(&you),
                    handle = self.handle.as_deref().map(crate::core::handle::shown),
                    "the tray belongs to another agent than this key's; no runs until it matches"
                );
            }
            self.flags.mismatch = Some(you);
        } else if report.handle_ok && self.flags.mismatch.take().is_some() {
            tracing::info!(event = %log_events::HANDLE_MISMATCH_CLEARED, "the tray is this key's agent's again");
        }
        if let Some(wait) = report.not_before {
            tracing::info!(
                event = %log_events::TRAY_NOT_BEFORE,
                wait_ms = wait.as_millis() as u64,
                "the server asked for {} s before the next tray read (429 Retry-After); wakes wait until then, and a cycle reads the tray then by itself",
                wait.as_secs_f64().ceil() as u64
            );
            let now = self.now_ms();
            self.tray_not_before.schedule_after(now, wait);
        }
        if let Some(removed) = report.removed {
            self.flags.removed = Some(removed);
            self.schedule_removed_recheck();
        } else if report.handle_ok {
            self.flags.removed = None;
            self.removed_recheck.reset();
        }
        if report.key_refused {
            self.socket.detail =
                Some("the server refused the key when reading the tray (HTTP 401/403)".into());
        }
        if let Some(loaded) = report.loaded_texts {
            self.take_texts(Ok(loaded));
        } else if let Some(missing) = report.texts_missing {
            self.take_texts(Err(missing));
        }
        self.last_cycle = Some(report.last);
        self.status_changed();
    }
}

//! What the main loop hears from its tasks: socket events, a cycle's start, its run's start and
//! its end.

use super::*;
use crate::log_events;

/// How `status.detail` begins while a cycle waits out the server's `429` (`on_cycle_wait`).
const CYCLE_WAIT_DETAIL: &str =
    "the server asked to wait (429 Retry-After): the cycle reads the tray again at";

/// The cycle's 429 wait within a `status.detail`, if it says one.
fn cycle_wait_part(detail: &str) -> Option<String> {
    let at = detail.find(CYCLE_WAIT_DETAIL)?;
    detail.get(at..).map(str::to_string)
}

/// A `status.detail` without the cycle's 429 wait: what the socket said beside it, if anything.
fn without_cycle_wait(detail: &str) -> Option<String> {
    let at = detail.find(CYCLE_WAIT_DETAIL)?;
    let rest = detail.get(..at)?.trim_end_matches("; ");
    (!rest.is_empty()).then(|| rest.to_string())
}

impl Daemon {
    /// The cycle's task ended: the coalescer hears it, and its report goes into the status.
    pub(super) fn on_cycle_task_end(&mut self, r: Result<CycleReport, tokio::task::JoinError>) {
        self.status_hold.release();
        let now = self.now_ms();
        self.coalescer.end(now);
        self.apply_pending_windows();
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
                self.handle = Some(h.clone());
                self.status.handle = Some(crate::core::handle::shown(&h));
                self.status_changed();
            }
            SocketEvent::State {
                state,
                next_retry_at,
                detail,
            } => {
                self.socket_state = state;
                self.status.next_retry_at = next_retry_at.map(time::rfc3339);
                if self.flags.unusable.is_none() && self.flags.mismatch.is_none() {
                    // A cycle's 429 wait outlives a socket state change: the detail says both.
                    let wait = self.status.detail.as_deref().and_then(cycle_wait_part);
                    self.status.detail = match (detail, wait) {
                        (Some(d), Some(w)) => Some(format!("{d}; {w}")),
                        (d, w) => d.or(w),
                    };
                }
                self.status_changed();
            }
            SocketEvent::Connected => {
                self.status.counters.connects += 1;
                self.status.last_connected_at = Some(time::rfc3339(now));
            }
            SocketEvent::Burst {
                frames,
                skipped,
                acked,
            } => {
                self.status.counters.frames += frames;
                self.status.counters.frames_skipped += skipped;
                self.status.counters.acks += acked;
                self.metrics.burst(skipped, acked);
                self.last_frame = Some(now);
            }
            SocketEvent::Wake {
                cause,
                frames,
                registered,
            } => {
                self.metrics.wake(&cause, frames);
                let label = cause.label();
                let t = self.now_ms();
                self.coalescer.wake(t);
                self.pending_reasons.insert(label);
                self.wake_causes.add(&cause);
                let _ = registered.send(());
                self.status.counters.wakes += frames;
                self.status.last_wake = Some(LastWake {
                    at: time::rfc3339(now),
                    reasons: self.pending_reasons.iter().cloned().collect(),
                });
                self.status_changed();
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
        if self.retry_a_changed_runtime_binary() {
            // This cycle is the way out: its reasons (and the metrics) say so.
            let cause = crate::core::engine::WakeCause::Listener(
                crate::core::status::ListenerWake::Recovered,
            );
            self.metrics.wake(&cause, 1);
            self.pending_reasons.insert(cause.label());
            self.wake_causes.add(&cause);
        }
        let reasons: Vec<String> = std::mem::take(&mut self.pending_reasons)
            .into_iter()
            .collect();
        let id = cycle::new_cycle_id();
        self.status.counters.cycles += 1;
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
            causes: std::mem::take(&mut self.wake_causes),
            runtime_unusable: self.flags.unusable.is_some(),
            invite_pace_ms: self.scale().invite_pace_ms(),
            follow_ups: self.follow_ups,
            shutdown,
            run_starting: Some(run_starting),
            waits: Some(waits),
            metrics: self.metrics.clone(),
            admission: self.ticket(),
        };
        self.status.last_cycle = Some(LastCycle::started(
            id,
            time::rfc3339(SystemTime::now()),
            reasons,
        ));
        self.status_changed();
        self.status_hold.hold();
        tokio::spawn(tracing::Instrument::in_current_span(cycle::run(input)))
    }

    /// The cycle handed its run to the supervisor. On the listener's single-threaded runtime this
    /// is heard once the cycle's task yields, which is after the spawn: now the status may be
    /// written.
    pub(super) fn on_run_starting(&mut self, run: RunStarting) {
        self.status_hold.release();
        if let Some(c) = self.status.last_cycle.as_mut() {
            c.run_started = true;
            c.run_kind = Some(run.kind);
            c.run_log = Some(run.log);
        }
        self.status_changed();
    }

    /// The running cycle waits out the server's `429 Retry-After` before it reads the tray again:
    /// the status is written meanwhile and says so (a wait of minutes is no stuck loop).
    pub(super) fn on_cycle_wait(&mut self, wait: cycle::CycleWait) {
        self.status_hold.release();
        self.status.detail = Some(format!("{CYCLE_WAIT_DETAIL} {}", time::rfc3339(wait.until)));
        self.status_changed();
    }

    pub(super) fn on_cycle_end(&mut self, report: CycleReport) {
        if let Some(d) = self.status.detail.as_deref()
            && cycle_wait_part(d).is_some()
        {
            self.status.detail = without_cycle_wait(d);
        }
        self.metrics.cycle_ended(&report.last, report.key_refused);
        if report.last.run_started {
            self.status.counters.runs += 1;
        }
        if report.last.run_failed() {
            self.status.counters.runs_failed += 1;
        }
        self.status.counters.invites_dismissed += report.last.invites_dismissed;
        self.after_cycle(&report);
        if let Some(why) = report.unusable.clone() {
            self.mark_unusable(why);
        }
        if report.last.no_run_reason == Some(crate::core::status::NoRunReason::NoTexts) {
            self.texts_owed();
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
            self.status.detail = Some(format!(
                "the tray is {you}'s, not @{}'s",
                self.handle.as_deref().unwrap_or("?")
            ));
            self.flags.mismatch = Some(you);
        } else if report.handle_ok && self.flags.mismatch.take().is_some() {
            tracing::info!(event = %log_events::HANDLE_MISMATCH_CLEARED, "the tray is this key's agent's again");
            self.status.detail = None;
        }
        if let Some(wait) = report.not_before {
            tracing::info!(
                event = %log_events::TRAY_NOT_BEFORE,
                wait_ms = wait.as_millis() as u64,
                "the server asked for {} s before the next tray read (429 Retry-After); wakes wait until then, and a cycle reads the tray then by itself",
                wait.as_secs_f64().ceil() as u64
            );
            self.tray_not_before.schedule_after(wait);
        }
        if let Some(removed) = report.removed {
            self.status.detail = Some(removed.clone());
            self.flags.removed = Some(removed);
            self.schedule_removed_recheck();
        } else if report.handle_ok {
            self.flags.removed = None;
            self.removed_recheck.reset();
        }
        if report.key_refused {
            self.status.detail =
                Some("the server refused the key when reading the tray (HTTP 401/403)".into());
        }
        if let Some(loaded) = report.loaded_texts {
            self.take_texts(Ok(loaded));
        } else if let Some(missing) = report.texts_missing {
            self.take_texts(Err(missing));
        }
        self.status.last_cycle = Some(report.last);
        self.status_changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_wait_kept_beside_the_socket_detail_is_taken_out_alone() {
        let wait = format!("{CYCLE_WAIT_DETAIL} 2026-12-02T04:00:00Z");
        assert_eq!(cycle_wait_part(&wait).as_deref(), Some(wait.as_str()));
        let both = format!("reconnecting; {wait}");
        assert_eq!(cycle_wait_part(&both).as_deref(), Some(wait.as_str()));
        assert_eq!(without_cycle_wait(&both).as_deref(), Some("reconnecting"));
        assert_eq!(without_cycle_wait(&wait), None);
        assert_eq!(cycle_wait_part("reconnecting"), None);
    }
}

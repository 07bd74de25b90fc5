//! The ways out of the states in which no run can start, and the wakes the listener gives
//! itself (`core::status::ListenerWake`). Every wake the server sent while no run could start was
//! spent (the re-wake ladder has four rungs, contract 5), so leaving such a state reads the tray
//! at once (`recovered`); so does a tray left cut short by a run that made progress (`backlog`).
//! An unusable runtime is checked again on a backoff (`core::recheck`), and so are missing
//! texts, so neither waits for a person; a tray route the server switched off (`REMOVED`) is
//! read again on the slow re-check of the `4426` state.

use super::*;
use crate::core::engine::WakeCause;
use crate::core::status::ListenerWake;
use crate::log_events;
use crate::runtime::check::NotUsable;

/// When the next look at a stuck state is due, and how many looks came before it.
#[derive(Debug, Default)]
pub(super) struct Recheck {
    pub(super) attempt: u32,
    pub(super) at: Option<tokio::time::Instant>,
}

impl Recheck {
    /// Sets the next look, unless one is set: `core::recheck::delay(attempt)`, scaled.
    pub(super) fn schedule(&mut self, scale: config::TestTimeScale) {
        self.schedule_after(scale.apply(crate::core::recheck::delay(self.attempt)));
    }

    /// Sets the next look `wait` from now, unless one is set.
    pub(super) fn schedule_after(&mut self, wait: Duration) {
        if self.at.is_none() {
            self.at = Some(tokio::time::Instant::now() + wait);
            self.attempt = self.attempt.saturating_add(1);
        }
    }

    /// The state ended: no look is due, and the next episode starts from the first delay.
    pub(super) fn reset(&mut self) {
        *self = Recheck::default();
    }
}

impl Daemon {
    /// A wake of the listener's own: the coalescer, the pending reasons, the status and the
    /// metrics hear it as they hear a socket's wake.
    pub(super) fn own_wake(&mut self, why: ListenerWake) {
        let cause = WakeCause::Listener(why);
        self.metrics.wake(&cause, 1);
        let t = self.now_ms();
        self.coalescer.wake(t);
        self.pending_reasons.insert(cause.label());
        self.wake_causes.add(&cause);
        self.status.counters.wakes += 1;
        self.status.last_wake = Some(LastWake {
            at: time::rfc3339(SystemTime::now()),
            reasons: self.pending_reasons.iter().cloned().collect(),
        });
        self.status_changed();
    }

    /// The runtime cannot work: no run until it is fixed, and a look again on the backoff.
    pub(super) fn mark_unusable(&mut self, why: String) {
        self.flags.unusable_binary = crate::runtime::binary_stamp(&self.settings);
        self.status.detail = Some(format!("runtime unusable: {why}"));
        self.flags.unusable = Some(why);
        self.runtime_recheck.schedule(self.scale());
        self.status_changed();
    }

    /// The runtime is usable again (`via`: `reload`, `recheck`, `binary_changed`): said once, and
    /// unless a cycle starts now anyway (`wake`), the tray is read at once.
    pub(super) fn leave_unusable(&mut self, via: &'static str, wake: bool) {
        let Some(why) = self.flags.unusable.take() else {
            return;
        };
        self.runtime_recheck.at = None;
        if self
            .status
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("runtime unusable"))
        {
            self.status.detail = None;
        }
        tracing::info!(event = %log_events::RUNTIME_RECOVERED, via, runtime = self.settings.listen.runtime.as_str(), was = %why, "the runtime may work again; reading the tray now");
        if wake {
            self.own_wake(ListenerWake::Recovered);
        }
        self.status_changed();
    }

    /// Checks the runtime as `doctor` does (`runtime::check`), off the main loop: at start, and
    /// while it is unusable when its look is due.
    pub(super) fn spawn_runtime_check(&mut self) -> JoinHandle<Result<String, NotUsable>> {
        // A check that started while the runtime was usable (the one at start) is only said,
        // even if a run made the runtime unusable meanwhile: its pass predates that refusal.
        self.runtime_check_recovers = self.flags.unusable.is_some();
        let settings = self.settings.clone();
        let workdir = self.state.workdir(settings.listen.workdir.as_deref());
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            crate::runtime::check::usable(&settings, &workdir).await
        }))
    }

    /// At start: a runtime whose program is missing is unusable from the first moment (as
    /// `doctor` says), not from the first message. Only the program's presence is checked here,
    /// which starts no process: the login check (`claude auth status` is a Node process of about
    /// 290 MB for 2 s) would cost every listener's start that, many at once on a machine that
    /// boots twenty; it runs only while the runtime is unusable, and `doctor` runs it.
    pub(super) fn check_runtime_at_start(&mut self) {
        let workdir = self.state.workdir(self.settings.listen.workdir.as_deref());
        if let Err(e) = crate::runtime::check::presence(&self.settings, &workdir) {
            tracing::error!(event = %log_events::RUNTIME_UNUSABLE, at = "start", runtime = self.settings.listen.runtime.as_str(), why = %e.why(), "the runtime cannot be used; no runs until it is fixed: the listener checks it again on a backoff (seconds growing to 10 minutes) and at once on reload (SIGHUP)");
            self.mark_unusable(e.why().to_string());
        }
    }

    /// A runtime check ended: while the runtime is still unusable, a pass ends that and a failure
    /// waits for the next look. A check that started while the runtime was usable, or whose
    /// state ended meanwhile (a reload), changes nothing.
    pub(super) fn on_runtime_check(
        &mut self,
        r: Result<Result<String, NotUsable>, tokio::task::JoinError>,
    ) {
        let r = r.unwrap_or_else(|e| Err(NotUsable::Missing(format!("the check crashed: {e}"))));
        let runtime = self.settings.listen.runtime.as_str();
        let recovers = std::mem::take(&mut self.runtime_check_recovers);
        match r {
            Ok(ok) if recovers && self.flags.unusable.is_some() => {
                tracing::debug!(event = %log_events::RUNTIME_CHECK, runtime, ok = %ok, "the runtime check passed");
                self.leave_unusable("recheck", true);
            }
            Err(e) if self.flags.unusable.is_some() => {
                tracing::debug!(event = %log_events::RUNTIME_CHECK, runtime, why = %e.why(), "the runtime is still unusable");
                self.runtime_recheck.schedule(self.scale());
            }
            _ => {}
        }
    }

    /// A cycle found no texts for a card that waited: a wake was spent, so texts that come back
    /// read the tray at once; until then they are fetched again on the backoff.
    pub(super) fn texts_owed(&mut self) {
        self.texts_owed = true;
        self.texts_recheck.schedule(self.scale());
    }

    /// Texts for the configured runtime came: the backoff ends, and a spent wake is made good.
    pub(super) fn texts_back(&mut self) {
        self.texts_recheck.reset();
        if std::mem::take(&mut self.texts_owed) {
            tracing::info!(event = %log_events::TEXTS_RECOVERED, runtime = self.texts_runtime(), "texts are back; reading the tray now");
            self.own_wake(ListenerWake::Recovered);
        }
    }

    /// The tray's route answered `REMOVED` (contract 7): retrying soon will not succeed, but
    /// nothing may come from the server to read it again (a profile without wakes), so the tray
    /// is read again on the slow re-check of the `4426` state (15-30 min, scaled), until a read
    /// works.
    pub(super) fn schedule_removed_recheck(&mut self) {
        let wait =
            crate::core::reconnect::upgrade_recheck_delay(fastrand::f64(), self.scale().factor());
        self.removed_recheck.schedule_after(wait);
    }

    /// The re-check of a `REMOVED` tray route is due: a cycle of the listener's own reads it.
    pub(super) fn removed_recheck_due(&mut self) {
        self.removed_recheck.at = None;
        if self.flags.removed.is_some() {
            self.own_wake(ListenerWake::Recovered);
        }
    }

    /// What a cycle's end says for the follow-up of a tray cut short (`core::decision::follow_up`)
    /// and the runtime's backoff: a run that was not refused by its runtime starts the next
    /// episode of looks from the first delay.
    pub(super) fn after_cycle(&mut self, report: &cycle::CycleReport) {
        if report.follow_up {
            self.follow_ups = self.follow_ups.saturating_add(1);
            self.own_wake(ListenerWake::Backlog);
        } else {
            self.follow_ups = 0;
        }
        if report.last.run_started && report.unusable.is_none() {
            self.runtime_recheck.reset();
        }
    }
}

impl Daemon {
    /// SIGHUP found this profile's settings unchanged (`HostCommand::Recheck`): a runtime that cannot
    /// work is checked now, missing texts are fetched now, a refused key's file is read now. A
    /// profile that can run does nothing.
    pub(super) fn recheck_now(&mut self, params_tx: &watch::Sender<SocketParams>) {
        let now = tokio::time::Instant::now();
        if self.flags.unusable.is_some() {
            tracing::info!(event = %log_events::RECHECK, what = "runtime", "SIGHUP: checking the runtime again now");
            self.runtime_recheck.at = Some(now);
        }
        if self.current_texts().is_none() {
            tracing::info!(event = %log_events::RECHECK, what = "texts", "SIGHUP: fetching the texts again now");
            self.texts_recheck.at = Some(now);
        }
        self.check_key_file(params_tx);
    }
}

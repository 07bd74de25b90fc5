//! The ways out of the states in which no run can start that are not the runtime's (`runtime`)
//! or the texts' (`texts_in_use`), and the wakes they give the listener. Every wake the server
//! sent while no run could start was spent (the re-wake ladder has four rungs, contract 5), so
//! leaving such a state reads the tray at once (`recovered`); so does a tray left cut short by a
//! run that made progress (`backlog`). A tray route the server switched off (`REMOVED`) is read
//! again on the slow re-check of the `4426` state.

use super::*;
use crate::log_events;

impl Daemon {
    /// The tray's route answered `REMOVED` (contract 7): retrying soon will not succeed, but
    /// nothing may come from the server to read it again (a profile without wakes), so the tray
    /// is read again on the slow re-check of the `4426` state (15-30 min, scaled), until a read
    /// works.
    pub(super) fn schedule_removed_recheck(&mut self) {
        let wait =
            crate::core::reconnect::upgrade_recheck_delay(fastrand::f64(), self.scale().factor());
        let now = self.now_ms();
        self.removed_recheck.schedule_after(now, wait);
    }

    /// The re-check of a `REMOVED` tray route is due: a cycle of the listener's own reads it.
    pub(super) fn removed_recheck_due(&mut self) {
        self.removed_recheck.clear();
        if self.flags.removed.is_some() {
            self.own_wake(ListenerWake::Recovered);
        }
    }

    /// What a cycle's end says for the follow-up of a tray cut short (`core::decision::follow_up`)
    /// and the runtime's backoff: a run that was not refused by its runtime starts the next
    /// stretch of looks from the first delay.
    pub(super) fn after_cycle(&mut self, report: &cycle::CycleReport) {
        if self.wakes.followed_up(report.follow_up) {
            self.own_wake(ListenerWake::Backlog);
        }
        if report.last.run_started && report.unusable.is_none() {
            self.runtime.start_over();
        }
    }

    /// SIGHUP found this profile's settings unchanged (`HostCommand::Recheck`): a runtime that cannot
    /// work is checked now, missing texts are fetched now, a refused key's file is read now. A
    /// profile that can run does nothing.
    pub(super) fn recheck_now(&mut self, params_tx: &watch::Sender<SocketParams>) {
        let now = self.now_ms();
        if self.runtime.recheck_now(now) {
            tracing::info!(event = %log_events::RECHECK, what = "runtime", "SIGHUP: checking the runtime again now");
        }
        if self.current_texts().is_none() {
            tracing::info!(event = %log_events::RECHECK, what = "texts", "SIGHUP: fetching the texts again now");
            self.texts.recheck_now(now);
        }
        self.check_key_file(params_tx);
    }
}

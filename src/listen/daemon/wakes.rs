//! Every wake, the server's and the listener's own (`core::status::ListenerWake`), is recorded in
//! one place: the metrics, the wakes owed a cycle (`core::wakes`) and the status hear it.

use super::*;
use crate::core::wakes::Windows;
use crate::log_events;

impl Daemon {
    /// `frames` wakes of one cause: counted in the metrics, owed a cycle, shown.
    pub(super) fn record(&mut self, cause: &WakeCause, frames: u64) {
        self.metrics.wake(cause, frames);
        let now = self.now_ms();
        self.wakes
            .record(cause, frames, now, time::unix_ms(SystemTime::now()));
        self.status_changed();
    }

    /// A wake the listener gives itself (`core::status::ListenerWake`): one of [`Daemon::record`].
    pub(super) fn own_wake(&mut self, why: ListenerWake) {
        self.record(&WakeCause::Listener(why), 1);
    }

    /// A reload's `quiet_window`/`max_delay`: in effect once no cycle runs and no wake waits, so a
    /// wake already counted keeps the timing it was counted with.
    pub(super) fn set_windows(&mut self, windows: Windows) {
        let applied = self.wakes.set_windows(windows);
        self.windows_in_effect(applied);
    }

    /// Says windows a reload left waiting that are in effect now.
    pub(super) fn windows_in_effect(&self, windows: Option<Windows>) {
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

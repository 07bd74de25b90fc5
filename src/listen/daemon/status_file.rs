//! `status.json`: what it shows, when it is written, and touching it while nothing changes.

use super::*;
use crate::log_events;

/// The longest a cycle on its way to its run holds the status back: the step from wake to spawn
/// takes milliseconds; a cycle still short of its run after this (a slow tray read, a `429`
/// waited out) lets the status be written and touched again, so it never looks stuck.
const HOLD_MAX: Duration = Duration::from_secs(1);

/// Whether status writes wait for a cycle's run to be spawned, and until when at most.
#[derive(Debug, Default)]
pub(super) struct StatusHold {
    until: Option<tokio::time::Instant>,
}

impl StatusHold {
    /// A cycle starts: hold writes for [`HOLD_MAX`] at most.
    pub(super) fn hold(&mut self) {
        self.until = Some(tokio::time::Instant::now() + HOLD_MAX);
    }

    /// The run is spawned, the cycle ended or waits: write again.
    pub(super) fn release(&mut self) {
        self.until = None;
    }

    pub(super) fn holds(&self) -> bool {
        self.until
            .is_some_and(|until| tokio::time::Instant::now() < until)
    }

    /// When the hold ends by itself (the main loop then writes what waited).
    pub(super) fn deadline(&self) -> Option<tokio::time::Instant> {
        self.until
    }
}

impl Daemon {
    pub(super) fn shown(&self) -> ListenerState {
        shown_state(&self.flags, self.socket_state)
    }

    /// Something shown in `status.json` changed; the main loop writes it at its next turn.
    pub(super) fn status_changed(&mut self) {
        self.status_dirty = true;
    }

    /// Writes the status if it changed, unless a cycle is on its way to its run.
    pub(super) fn flush_status(&mut self) {
        if self.status_dirty && !self.status_hold.holds() {
            self.write_status();
        }
    }

    /// The main loop turned: `/healthz` hears it, and `status.json` is touched when it was last
    /// written or touched `TOUCH_EVERY` ago (never while a cycle is on its way to its run). A
    /// file that cannot be touched is written instead.
    pub(super) fn turned(&mut self) {
        self.metrics.turned();
        let touch_every = self.scale().apply(TOUCH_EVERY).max(TOUCH_EVERY_MIN);
        if self.status_hold.holds() || self.status_proof.elapsed() < touch_every {
            return;
        }
        let touched = self
            .status_file
            .as_ref()
            .is_some_and(|f| f.set_modified(SystemTime::now()).is_ok());
        if touched {
            self.status_proof = Instant::now();
        } else {
            self.write_status();
        }
    }

    pub(super) fn write_status(&mut self) {
        self.status_dirty = false;
        let now = SystemTime::now();
        let shown = self.shown();
        // `status.state` is the state last shown: a change restarts `since` and is announced.
        if shown != self.status.state {
            self.status.state = shown;
            self.status.since = time::rfc3339(now);
            // While the socket comes and goes, `backoff` says why at INFO, and `stopping`/`stopped`
            // have their own lines: these states are debug, so a retry is one line, not three.
            if matches!(
                shown,
                ListenerState::Connecting
                    | ListenerState::Backoff
                    | ListenerState::Stopping
                    | ListenerState::Stopped
            ) {
                tracing::debug!(event = %log_events::STATE, state = shown.as_str(), "now {}", shown.as_str());
            } else {
                tracing::info!(event = %log_events::STATE, state = shown.as_str(), "now {}", shown.as_str());
            }
            if self.notify_status {
                let line = format!("STATUS={}", shown.as_str());
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Custom(&line)]);
            }
        }
        self.status.socket = Some(self.socket_state);
        self.status.last_frame_at = self.last_frame.map(time::rfc3339);
        self.status.updated_at = time::rfc3339(now);
        self.metrics.observe_status(&self.status);
        self.status_proof = Instant::now();
        match self.state.write_status(&self.status) {
            Ok(file) => {
                self.status_file = Some(file);
                self.status_retry.reset();
                if self.status_write_failing {
                    self.status_write_failing = false;
                    tracing::info!(event = %log_events::STATUS_WRITE_RECOVERED, "status.json is written again");
                }
            }
            Err(e) => {
                self.status_file = None;
                // What the file should say is not lost: it is written again soon, whether or not
                // anything else changes (1 s doubling to `TOUCH_EVERY`), so it catches up once
                // space or write access is back.
                let wait = Duration::from_secs(1)
                    .saturating_mul(1u32 << self.status_retry.attempt.min(5))
                    .min(TOUCH_EVERY);
                self.status_retry
                    .schedule_after(self.scale().apply(wait).max(TOUCH_EVERY_MIN));
                if !self.status_write_failing {
                    self.status_write_failing = true;
                    tracing::warn!(event = %log_events::STATUS_WRITE_FAILED, error = %e, "could not write status.json; the listener keeps working and logs this once until a write succeeds");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cycle stuck short of its run (a `429` waited out, a slow tray) holds the status back for
    /// a second at most, so the file is written and touched again and never looks stuck.
    #[tokio::test(start_paused = true)]
    async fn the_status_hold_ends_by_itself_after_a_second_or_when_released() {
        let mut hold = StatusHold::default();
        assert!(!hold.holds());
        assert_eq!(hold.deadline(), None, "no hold, no wake of the main loop");
        hold.hold();
        assert!(hold.holds());
        let deadline = hold.deadline().unwrap();
        assert_eq!(deadline - tokio::time::Instant::now(), HOLD_MAX);
        tokio::time::advance(HOLD_MAX).await;
        assert!(!hold.holds(), "a hold outlives no cycle's wait");
        hold.hold();
        hold.release();
        assert!(!hold.holds());
    }
}

//! `status.json`: when it is written, and touching it while nothing changes. What it shows is
//! `render`'s.

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

/// `status.json` as a file: whether what it shows changed since the last write, the hold while a
/// cycle is on its way to its run, the file kept open for touching, the retry of a failed write,
/// and the state last shown with its `since`. What it shows is `Daemon::render`'s.
pub(super) struct StatusFile {
    /// The status changed since it was last written; the main loop writes it once per turn.
    dirty: bool,
    /// The last write failed (full disk, unwritable dir): logged once per episode.
    failing: bool,
    /// The file as last written, open for touching; `None` when the last write failed.
    file: Option<std::fs::File>,
    /// When it was last written or touched.
    proof: Instant,
    hold: StatusHold,
    /// The next write of a status whose last write failed, on the daemon's clock.
    retry: Recheck,
    /// The state last shown, and since when.
    shown: (ListenerState, SystemTime),
    /// Tell systemd the state (`STATUS=`): the process's one profile only.
    notify: bool,
}

impl StatusFile {
    pub(super) fn new(notify: bool, now: SystemTime) -> StatusFile {
        StatusFile {
            dirty: false,
            failing: false,
            file: None,
            proof: Instant::now(),
            hold: StatusHold::default(),
            retry: Recheck::default(),
            shown: (ListenerState::Starting, now),
            notify,
        }
    }

    /// Something shown changed; the main loop writes it at its next turn.
    pub(super) fn changed(&mut self) {
        self.dirty = true;
    }

    /// A change waits, and no cycle on its way to its run holds it back.
    pub(super) fn due(&self) -> bool {
        self.dirty && !self.hold.holds()
    }

    /// A cycle starts: nothing is written to disk on a wake's way to its run.
    pub(super) fn hold(&mut self) {
        self.hold.hold();
    }

    /// The run is spawned, the cycle ended or waits: write again.
    pub(super) fn release(&mut self) {
        self.hold.release();
    }

    pub(super) fn hold_deadline(&self) -> Option<tokio::time::Instant> {
        self.hold.deadline()
    }

    /// When a failed write is tried again.
    pub(super) fn retry_at(&self) -> Option<u64> {
        self.retry.at()
    }

    /// The retry is due: true when it may write now.
    pub(super) fn retry_due(&mut self) -> bool {
        self.retry.clear();
        !self.hold.holds()
    }

    /// Touches the file when it was last written or touched `every` ago (never while a cycle
    /// is on its way to its run). False: it could not be touched, and is to be written instead.
    pub(super) fn touch(&mut self, every: Duration) -> bool {
        if self.hold.holds() || self.proof.elapsed() < every {
            return true;
        }
        let touched = self
            .file
            .as_ref()
            .is_some_and(|f| f.set_modified(SystemTime::now()).is_ok());
        if touched {
            self.proof = Instant::now();
        }
        touched
    }

    /// The state to show now: a change restarts `since`, and is announced (the log, systemd).
    pub(super) fn show(&mut self, state: ListenerState, now: SystemTime) {
        if state == self.shown.0 {
            return;
        }
        self.shown = (state, now);
        // While the socket comes and goes, `backoff` says why at INFO, and `stopping`/`stopped`
        // have their own lines: these states are debug, so a retry is one line, not three.
        if matches!(
            state,
            ListenerState::Connecting
                | ListenerState::Backoff
                | ListenerState::Stopping
                | ListenerState::Stopped
        ) {
            tracing::debug!(event = %log_events::STATE, state = state.as_str(), "now {}", state.as_str());
        } else {
            tracing::info!(event = %log_events::STATE, state = state.as_str(), "now {}", state.as_str());
        }
        if self.notify {
            let line = format!("STATUS={}", state.as_str());
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Custom(&line)]);
        }
    }

    /// The state last shown, and since when.
    pub(super) fn shown(&self) -> (ListenerState, SystemTime) {
        self.shown
    }

    /// Writes `status` (`now`: the daemon's clock, `scale`: its test time scale). A failure is
    /// logged once per episode and the write tried again soon, whether or not anything else
    /// changes (1 s doubling to `TOUCH_EVERY`), so the file catches up once space or write
    /// access is back.
    pub(super) fn write(
        &mut self,
        dir: &StateDir,
        status: &Status,
        now: u64,
        scale: config::TestTimeScale,
    ) {
        self.dirty = false;
        self.proof = Instant::now();
        match dir.write_status(status) {
            Ok(file) => {
                self.file = Some(file);
                self.retry.reset();
                if std::mem::take(&mut self.failing) {
                    tracing::info!(event = %log_events::STATUS_WRITE_RECOVERED, "status.json is written again");
                }
            }
            Err(e) => {
                self.file = None;
                let wait = Duration::from_secs(1)
                    .saturating_mul(1u32 << self.retry.attempt().min(5))
                    .min(TOUCH_EVERY);
                self.retry
                    .schedule_after(now, scale.apply(wait).max(TOUCH_EVERY_MIN));
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(event = %log_events::STATUS_WRITE_FAILED, error = %e, "could not write status.json; the listener keeps working and logs this once until a write succeeds");
                }
            }
        }
    }
}

impl Daemon {
    /// Something shown in `status.json` changed; the main loop writes it at its next turn.
    pub(super) fn status_changed(&mut self) {
        self.status_file.changed();
    }

    /// Writes the status if it changed, unless a cycle is on its way to its run.
    pub(super) fn flush_status(&mut self) {
        if self.status_file.due() {
            self.write_status();
        }
    }

    /// The main loop turned: `/healthz` hears it, and `status.json` is touched when it was last
    /// written or touched `TOUCH_EVERY` ago. A file that cannot be touched is written instead.
    pub(super) fn turned(&mut self) {
        self.metrics.turned();
        let touch_every = self.scale().apply(TOUCH_EVERY).max(TOUCH_EVERY_MIN);
        if !self.status_file.touch(touch_every) {
            self.write_status();
        }
    }

    /// Renders the status from its owners and writes it.
    pub(super) fn write_status(&mut self) {
        let now = SystemTime::now();
        self.status_file.show(self.sources().state(), now);
        let status = self.render(now);
        self.metrics.observe_status(&status);
        let now_ms = self.now_ms();
        self.status_file
            .write(&self.state, &status, now_ms, self.scale());
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

    /// A write that fails is tried again on its own, 1 s doubling, and logged once; a write that
    /// works ends the episode and keeps the file open for touching.
    #[test]
    fn a_failed_write_is_retried_on_a_doubling_wait_until_one_works() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::at(&dir.path().join("not-yet"));
        let scale = config::TestTimeScale::Off;
        let mut f = StatusFile::new(false, SystemTime::now());
        f.changed();
        assert!(f.due());
        f.write(&state, &Status::default(), 0, scale);
        assert!(
            !f.due(),
            "written or not, the change is not written again at every turn"
        );
        assert_eq!(f.retry_at(), Some(1_000));
        assert!(f.retry_due());
        assert_eq!(f.retry_at(), None);
        f.write(&state, &Status::default(), 1_000, scale);
        assert_eq!(
            f.retry_at(),
            Some(3_000),
            "the second retry waits twice as long"
        );
        assert!(!f.touch(Duration::ZERO), "no file to touch: write instead");
        std::fs::create_dir(dir.path().join("not-yet")).unwrap();
        f.write(&state, &Status::default(), 3_000, scale);
        assert_eq!(f.retry_at(), None, "written: no retry");
        assert!(f.touch(Duration::ZERO), "the file written is touched");
        f.hold();
        f.changed();
        assert!(
            !f.due(),
            "a cycle on its way to its run holds the write back"
        );
        f.release();
        assert!(f.due());
    }
}

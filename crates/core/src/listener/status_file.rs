//! `status.json`: when it is written and touched, and the document, built in one place at write
//! time from the owners' state (the one state and the one detail by `crate::shown`'s precedence,
//! times formatted only here).

use super::{Effect, Listener, Timing};
use crate::log_events;
use crate::recheck::Recheck;
use crate::shown::Sources;
use crate::status::{Counters, LastWake, ListenerState, Status, Usage};
use crate::time::{Now, ms, rfc3339_ms};
use std::time::Duration;

/// The longest a cycle on its way to its run holds the status back: the step from wake to spawn
/// takes milliseconds; a cycle still short of its run after this (a slow tray read, a `429`
/// waited out) lets the status be written and touched again, so it never looks stuck.
const HOLD_MAX: Duration = Duration::from_secs(1);
/// However far a test scales time, a failed write is not tried again more often.
const RETRY_MIN: Duration = Duration::from_millis(250);

/// `status.json` as a file: whether what it shows changed since the last write, the hold while a
/// cycle is on its way to its run, the retry of a failed write, and the state last shown with
/// its `since`.
#[derive(Debug)]
pub(super) struct StatusFile {
    /// The status changed since it was last written.
    dirty: bool,
    /// The last write failed (full disk, unwritable dir): logged once per episode.
    failing: bool,
    /// When it was last written or touched (monotonic ms).
    proof: u64,
    /// Writes wait until then, at most (a cycle on its way to its run).
    hold_until: Option<u64>,
    /// The next write of a status whose last write failed.
    retry: Recheck,
    /// The state last shown, and since when (wall ms).
    shown: (ListenerState, i64),
    /// Tell systemd the state (`STATUS=`): the process's one profile only.
    notify: bool,
}

impl StatusFile {
    pub(super) fn new(notify: bool, now: Now) -> StatusFile {
        StatusFile {
            dirty: false,
            failing: false,
            proof: now.mono_ms,
            hold_until: None,
            retry: Recheck::default(),
            shown: (ListenerState::Starting, now.wall_ms),
            notify,
        }
    }

    /// Something shown changed; it is written at the end of the step.
    pub(super) fn changed(&mut self) {
        self.dirty = true;
    }

    fn holds(&self, now: Now) -> bool {
        self.hold_until.is_some_and(|t| now.mono_ms < t)
    }

    /// A change waits, and no cycle on its way to its run holds it back.
    pub(super) fn due(&self, now: Now) -> bool {
        self.dirty && !self.holds(now)
    }

    /// A cycle starts: nothing is written on a wake's way to its run, for [`HOLD_MAX`] at most.
    pub(super) fn hold(&mut self, now: Now) {
        self.hold_until = Some(now.after(HOLD_MAX));
    }

    /// The run is spawned, the cycle ended or waits: write again.
    pub(super) fn release(&mut self) {
        self.hold_until = None;
    }

    /// The hold's end came by itself.
    pub(super) fn hold_over(&mut self, now: Now) {
        if self.hold_until.is_some_and(|t| t <= now.mono_ms) {
            self.hold_until = None;
        }
    }

    /// The next time the file needs the listener: the hold's end, a failed write's retry.
    pub(super) fn deadline(&self) -> Option<u64> {
        [self.hold_until, self.retry.at()]
            .into_iter()
            .flatten()
            .min()
    }

    /// A failed write's retry is due: true when it may write now.
    pub(super) fn retry_due(&mut self, now: Now) -> bool {
        if self.retry.at().is_some_and(|t| t <= now.mono_ms) {
            self.retry.clear();
            return !self.holds(now);
        }
        false
    }

    /// The file is to be touched: last written or touched `every` ago, and no cycle holds it.
    pub(super) fn touch_due(&mut self, now: Now, every: Duration) -> bool {
        if self.holds(now) || self.failing || now.mono_ms.saturating_sub(self.proof) < ms(every) {
            return false;
        }
        self.proof = now.mono_ms;
        true
    }

    /// The state to show now: a change restarts `since` and is announced (the log, systemd).
    fn show(&mut self, state: ListenerState, now: Now) -> Option<Effect> {
        if state == self.shown.0 {
            return None;
        }
        self.shown = (state, now.wall_ms);
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
        self.notify.then_some(Effect::Notify(state))
    }

    /// A write was asked for.
    fn writing(&mut self, now: Now) {
        self.dirty = false;
        self.proof = now.mono_ms;
    }

    /// A write's answer. A failure is logged once per episode and the write tried again soon,
    /// whether or not anything else changes (1 s doubling to `TOUCH_EVERY`), so the file catches
    /// up once space or write access is back.
    pub(super) fn written(&mut self, result: Result<(), String>, now: Now, timing: Timing) {
        match result {
            Ok(()) => {
                self.retry.reset();
                if std::mem::take(&mut self.failing) {
                    tracing::info!(event = %log_events::STATUS_WRITE_RECOVERED, "status.json is written again");
                }
            }
            Err(e) => {
                let wait = Duration::from_secs(1)
                    .saturating_mul(1u32 << self.retry.attempt().min(5))
                    .min(super::TOUCH_EVERY);
                self.retry
                    .schedule_after(now.mono_ms, timing.at_least(wait, RETRY_MIN));
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(event = %log_events::STATUS_WRITE_FAILED, error = %e, "could not write status.json; the listener keeps working and logs this once until a write succeeds");
                }
            }
        }
    }
}

impl Listener {
    /// Every source of the shown state and detail, as they stand.
    fn sources(&self) -> Sources<'_> {
        Sources {
            phase: self.shown.flags.phase,
            socket: Some(self.shown.view.state),
            socket_detail: self.shown.view.detail.as_deref(),
            cycle_wait_until: None,
            unusable: self.rt.health.why(),
            mismatch: self
                .shown
                .flags
                .mismatch
                .as_deref()
                .map(|you| (you, self.shown.handle.as_deref())),
            removed: self.shown.flags.removed.as_deref(),
            waiting: self.shown.flags.queued,
        }
    }

    /// Renders the status from its owners and asks for it to be written.
    pub(super) fn write_status(&mut self, now: Now) {
        let state = self.sources().state();
        if let Some(e) = self.status.show(state, now) {
            self.out.effects.push_back(e);
        }
        let status = self.render(now);
        self.obs.observe_status(&status);
        self.status.writing(now);
        self.out
            .effects
            .push_back(Effect::WriteStatus(Box::new(status)));
    }

    /// The status document as of `now`.
    pub(super) fn render(&self, now: Now) -> Status {
        let (state, since) = self.status.shown;
        // A cycle's `429` wait, or the not-before time a long one left (no cycle runs then).
        let cycle_wait = self
            .shown
            .flags
            .cycle_wait
            .or(self.waits.not_before_wall)
            .map(rfc3339_ms);
        let sources = Sources {
            cycle_wait_until: cycle_wait.as_deref(),
            ..self.sources()
        };
        let c = &self.cfg;
        let mut status = Status {
            state,
            since: rfc3339_ms(since),
            socket: Some(self.shown.view.state),
            pid: c.pid,
            profile: c.profile.clone(),
            handle: self.shown.handle.as_deref().map(crate::handle::shown),
            api_base: c.api_base.clone(),
            runtime: c.runtime.as_str().to_string(),
            key_source: c.key_source.clone(),
            updated_at: rfc3339_ms(now.wall_ms),
            started_at: rfc3339_ms(self.life.started_wall),
            last_frame_at: self.shown.view.last_frame.map(rfc3339_ms),
            last_connected_at: self.shown.view.last_connected.map(rfc3339_ms),
            last_wake: self.wakes.last().map(|w| LastWake {
                at: rfc3339_ms(i64::try_from(w.at_ms).unwrap_or(i64::MAX)),
                reasons: w.reasons.clone(),
            }),
            last_cycle: self.shown.last_cycle.clone(),
            next_retry_at: self
                .shown
                .view
                .next_retry_at
                .or(self.waits.not_before_wall)
                .map(rfc3339_ms),
            detail: sources.detail(),
            texts: self.texts.status(),
            counters: Counters {
                wakes: self.wakes.count(),
                ..self.shown.counters.clone()
            },
            held: None,
            usage: Usage::default(),
            capabilities_refused: self.shown.capabilities_refused.clone(),
            file_modified: None,
        };
        self.policy.show(&mut status, now.wall_ms);
        status
    }
}

//! The wakes a listener owes a cycle (contract 4 step 1): the coalescer's timing, the reasons and
//! causes the next cycle is told (`AGENTCHAT_WAKE_REASONS`, `decision::WakeCauses`), a reloaded
//! `quiet_window`/`max_delay` waiting for an idle moment, the follow-ups of a tray cut short, and
//! the last wake as `status.json` shows it. One [`Wakes::record`] for every wake, the server's and
//! the listener's own. Pure: `now` is the caller's monotonic milliseconds, `wall_ms` the wall
//! clock's Unix milliseconds for the status.

use super::coalescer::Coalescer;
use super::decision::WakeCauses;
use super::engine::WakeCause;
use std::collections::BTreeSet;

/// The coalescer's windows in milliseconds (`listen.quiet_window`, `listen.max_delay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    pub quiet_ms: u64,
    pub max_delay_ms: u64,
}

/// The last wake: when (Unix ms) and the reasons waiting for a cycle then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastWake {
    pub at_ms: u64,
    pub reasons: Vec<String>,
}

/// What a starting cycle is told about the wakes it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// Each cause's label once, sorted.
    pub reasons: Vec<String>,
    pub causes: WakeCauses,
    /// Cycles in a row before this one that followed up a tray cut short.
    pub follow_ups: u32,
}

#[derive(Debug, Clone)]
pub struct Wakes {
    coalescer: Coalescer,
    /// The windows last set: in effect, or waiting in `pending`.
    windows: Windows,
    /// Windows from a reload, applied once no cycle runs and no wake waits, so a wake already
    /// counted keeps the timing it was counted with.
    pending: Option<Windows>,
    reasons: BTreeSet<String>,
    causes: WakeCauses,
    follow_ups: u32,
    count: u64,
    last: Option<LastWake>,
}

impl Wakes {
    pub fn new(windows: Windows) -> Wakes {
        Wakes {
            coalescer: Coalescer::new(windows.quiet_ms, windows.max_delay_ms),
            windows,
            pending: None,
            reasons: BTreeSet::new(),
            causes: WakeCauses::default(),
            follow_ups: 0,
            count: 0,
            last: None,
        }
    }

    /// `frames` wakes of one cause (the socket's burst, or 1 for the listener's own) at `now`:
    /// the coalescer owes a cycle, the next cycle is told why, and the status shows it.
    pub fn record(&mut self, cause: &WakeCause, frames: u64, now: u64, wall_ms: u64) {
        self.coalescer.wake(now);
        self.reasons.insert(cause.label());
        self.causes.add(cause);
        self.count = self.count.saturating_add(frames);
        self.last = Some(LastWake {
            at_ms: wall_ms,
            reasons: self.reasons.iter().cloned().collect(),
        });
    }

    /// When the owed cycle is due, if one is owed and none runs.
    pub fn due(&self) -> Option<u64> {
        self.coalescer.due()
    }

    /// Starts the owed cycle if it is due at `now`; then [`Wakes::serve`] says what it serves.
    pub fn try_start(&mut self, now: u64) -> bool {
        self.coalescer.try_start(now)
    }

    /// What the cycle just started serves; `also`: a cause of the listener's that this cycle
    /// serves without owing another (a changed runtime binary it tries). The reasons start over.
    pub fn serve(&mut self, also: Option<&WakeCause>) -> Served {
        if let Some(cause) = also {
            self.reasons.insert(cause.label());
            self.causes.add(cause);
        }
        Served {
            reasons: std::mem::take(&mut self.reasons).into_iter().collect(),
            causes: std::mem::take(&mut self.causes),
            follow_ups: self.follow_ups,
        }
    }

    /// The running cycle ended at `now`. Returns windows a reload left waiting that are now in
    /// effect.
    pub fn end(&mut self, now: u64) -> Option<Windows> {
        self.coalescer.end(now);
        self.apply_pending()
    }

    /// The cycle's end said whether the tray was cut short after a run that made progress
    /// (`decision::follow_up`): true when a `backlog` wake of the listener's is owed now (the
    /// caller records it); false resets the count.
    pub fn followed_up(&mut self, follow_up: bool) -> bool {
        if follow_up {
            self.follow_ups = self.follow_ups.saturating_add(1);
        } else {
            self.follow_ups = 0;
        }
        follow_up
    }

    /// A reload's windows: in effect now when idle (returned), else once idle.
    pub fn set_windows(&mut self, windows: Windows) -> Option<Windows> {
        if windows != self.windows {
            self.windows = windows;
            self.pending = Some(windows);
        }
        self.apply_pending()
    }

    fn apply_pending(&mut self) -> Option<Windows> {
        if self.coalescer.is_running() || self.coalescer.is_owed() {
            return None;
        }
        let w = self.pending.take()?;
        self.coalescer = Coalescer::new(w.quiet_ms, w.max_delay_ms);
        Some(w)
    }

    /// Every wake recorded, frames counted one each (`counters.wakes`).
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn last(&self) -> Option<&LastWake> {
        self.last.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::ListenerWake;

    const W: Windows = Windows {
        quiet_ms: 3_000,
        max_delay_ms: 15_000,
    };

    fn message(c: &str) -> WakeCause {
        WakeCause::Message(Some(c.into()))
    }

    #[test]
    fn a_recorded_wake_owes_a_cycle_and_shows_its_reasons() {
        let mut w = Wakes::new(W);
        assert_eq!((w.due(), w.last(), w.count()), (None, None, 0));
        w.record(&message("c1"), 3, 1_000, 77);
        w.record(&WakeCause::Invite, 1, 1_500, 78);
        assert_eq!(w.due(), Some(4_500));
        assert_eq!(w.count(), 4, "frames count one each");
        assert_eq!(
            w.last(),
            Some(&LastWake {
                at_ms: 78,
                reasons: vec!["invite".into(), "message".into()]
            })
        );
        assert!(!w.try_start(4_499));
        assert!(w.try_start(4_500));
        let served = w.serve(None);
        assert_eq!(served.reasons, ["invite", "message"]);
        let mut causes = WakeCauses::default();
        causes.add(&message("c1"));
        causes.add(&WakeCause::Invite);
        assert_eq!(served.causes, causes);
        assert_eq!(w.serve(None).reasons, Vec::<String>::new(), "served once");
        assert!(
            w.last().is_some(),
            "the last wake stays shown after its cycle"
        );
    }

    #[test]
    fn a_cause_joined_to_a_starting_cycle_owes_no_other() {
        let mut w = Wakes::new(W);
        w.record(&message("c1"), 1, 0, 0);
        assert!(w.try_start(3_000));
        let recovered = WakeCause::Listener(ListenerWake::Recovered);
        let served = w.serve(Some(&recovered));
        assert_eq!(served.reasons, ["message", "recovered"]);
        assert_eq!(w.end(4_000), None);
        assert_eq!(w.due(), None, "no cycle owed for the joined cause");
        assert_eq!(w.count(), 1, "a joined cause is no wake of its own");
    }

    #[test]
    fn follow_ups_count_in_a_row_and_reach_the_next_cycle() {
        let mut w = Wakes::new(W);
        assert!(w.followed_up(true));
        assert!(w.followed_up(true));
        w.record(&WakeCause::Listener(ListenerWake::Backlog), 1, 0, 0);
        assert!(w.try_start(3_000));
        assert_eq!(w.serve(None).follow_ups, 2);
        assert!(!w.followed_up(false));
        assert_eq!(
            w.serve(None).follow_ups,
            0,
            "a cycle without one starts the count over"
        );
    }

    #[test]
    fn reloaded_windows_wait_for_an_idle_coalescer() {
        let mut w = Wakes::new(W);
        assert_eq!(w.set_windows(W), None, "the same windows change nothing");
        let fast = Windows {
            quiet_ms: 100,
            max_delay_ms: 1_000,
        };
        assert_eq!(w.set_windows(fast), Some(fast), "idle: in effect at once");
        w.record(&message("c1"), 1, 0, 0);
        assert_eq!(w.due(), Some(100));
        assert_eq!(w.set_windows(W), None, "a wake waits: it keeps its timing");
        assert_eq!(w.due(), Some(100));
        assert!(w.try_start(100));
        w.record(&message("c1"), 1, 200, 0);
        assert_eq!(w.end(300), None, "a wake during the cycle is still owed");
        assert!(w.try_start(300));
        w.serve(None);
        assert_eq!(w.end(400), Some(W), "idle at last: the reload's windows");
        w.record(&message("c1"), 1, 1_000, 0);
        assert_eq!(w.due(), Some(4_000));
    }
}

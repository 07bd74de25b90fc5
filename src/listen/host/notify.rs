//! What the process tells systemd (sd_notify(3)): READY once every profile has started (not
//! connected: a server that is down must not hold the unit in `activating`), STOPPING once,
//! and the watchdog. (No RELOADING: the unit is `Type=notify`, and a reload hands each profile its
//! new settings without a pause.)
//!
//! **The watchdog** (`WatchdogSec=` in the unit) must notice a wedged profile, not only a wedged
//! process: one profile's main loop stuck in an await that never ends leaves the runtime turning
//! (the other profiles, the timers), so a ping from a timer alone would prove nothing about it.
//! So the process pings only while *every* started profile's loop turns: each loop counts its
//! turns (`daemon::Link::turns`); at every tick (half the watchdog interval) the process pings
//! when each count moved since the last tick, then sends each profile a `HostCommand::Probe`, which
//! turns a healthy loop at once, so an idle loop (no heartbeat within the tick) still moves its
//! count before the next tick. A loop that does not turn misses the next tick and every later
//! one: systemd sees no ping for the whole interval and restarts the unit. A loop blocked
//! outright blocks the process's one thread, and with it every ping. Profiles still starting or
//! stopping are not counted (systemd's watchdog runs once READY is sent; STOPPING ends it).

use std::time::Duration;
use tokio::time::Interval;

/// The process's line to systemd: a no-op without `NOTIFY_SOCKET`.
pub(super) struct Notify {
    on: bool,
}

impl Notify {
    pub(super) fn from_env() -> Notify {
        Notify {
            on: std::env::var_os("NOTIFY_SOCKET").is_some(),
        }
    }

    fn send(&self, state: &[sd_notify::NotifyState]) {
        if self.on {
            let _ = sd_notify::notify(state);
        }
    }

    pub(super) fn ready(&self) {
        self.send(&[sd_notify::NotifyState::Ready]);
    }

    pub(super) fn stopping(&self) {
        self.send(&[sd_notify::NotifyState::Stopping]);
    }

    pub(super) fn watchdog(&self) {
        self.send(&[sd_notify::NotifyState::Watchdog]);
    }

    /// systemd's watchdog interval when it is on for this process.
    pub(super) fn watchdog_interval(&self) -> Option<Duration> {
        if self.on {
            sd_notify::watchdog_enabled()
        } else {
            None
        }
    }
}

/// The watchdog's tick: half its interval, at least 100 ms.
pub(super) struct Watchdog {
    pub(super) tick: Interval,
}

impl Watchdog {
    pub(super) fn new(interval: Duration) -> Watchdog {
        let mut tick = tokio::time::interval((interval / 2).max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Watchdog { tick }
    }
}

/// Pure: whether every profile's loop turned since the last tick: `(turns now, turns then)`
/// per started profile, `None` then for one not seen at the last tick (it just started).
pub(super) fn all_turned(counts: impl IntoIterator<Item = (u64, Option<u64>)>) -> bool {
    counts
        .into_iter()
        .all(|(now, then)| then.is_none_or(|then| now != then))
}

/// The next tick; never without a watchdog.
pub(super) async fn due(w: &mut Option<Watchdog>) {
    crate::sys::wait::some(w.as_mut().map(|w| w.tick.tick())).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_is_pinged_only_when_every_profile_turned_since_the_last_tick() {
        assert!(all_turned([]));
        assert!(all_turned([(5, Some(4)), (1, None)]));
        assert!(!all_turned([(5, Some(4)), (7, Some(7))]));
    }
}

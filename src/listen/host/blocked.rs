//! Profiles of `listen --all` that found their agent (or state dir) served by another listener
//! (issue 27): never "served by nobody" while the config names the agent. One held by another
//! profile of this process starts again as soon as an agent lock of the process is let go
//! (`agent_lock::released`: a renamed profile, swapped key files), and at once when a lock was
//! let go between its start and its refusal (the release came before the refusal was heard);
//! one held by another process is tried again on `core::recheck`'s backoff (5 s doubling to
//! 10 min). Two profiles of one agent (the same key twice) leave the second waiting for a
//! release, without a timer. When nothing runs and every profile is another process's,
//! the process exits 75, as a single `listen` does.

use super::*;
use crate::log_events;
use tokio::time::Instant;

/// A profile waiting for its lock.
#[derive(Debug)]
pub(super) struct Blocked {
    /// A profile of this process holds it.
    own: bool,
    /// Tries so far (the backoff's step).
    attempt: u32,
    /// When it is tried again on a timer; `None` while a try is under way, or while it waits
    /// for a release of this process.
    at: Option<Instant>,
}

impl Blocked {
    /// A try is under way: not due again until it is refused again.
    pub(super) fn at_none(&mut self) {
        self.at = None;
    }
}

impl Host {
    /// `name` stopped, or could not start, because the listener `holder` (a pid) serves its agent
    /// or holds its state dir; `releases_seen`: the process's lock releases when it started.
    pub(super) fn block(&mut self, name: &str, holder: Option<u32>, releases_seen: u64) {
        let own = holder == Some(std::process::id());
        let attempt = self
            .blocked
            .get(name)
            .map_or(0, |b| b.attempt.saturating_add(1));
        let now = Instant::now();
        let at = if !own {
            Some(now + self.scale.apply(crate::core::recheck::delay(attempt)))
        } else if *crate::listen::agent_lock::released().borrow() != releases_seen {
            // A lock was let go since it started: perhaps the one it found held.
            Some(now)
        } else {
            // The next release of this process tries it.
            None
        };
        let in_ms = at.map(|at| {
            u64::try_from(at.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX)
        });
        tracing::info!(
            event = %log_events::PROFILE_RETRY_SCHEDULED,
            profile = %name,
            holder,
            in_ms,
            "this profile starts again once its agent's listener lets go{}",
            if own { " (a profile of this process)" } else { "; tried again on a backoff" }
        );
        self.blocked
            .insert(name.to_string(), Blocked { own, attempt, at });
    }

    /// When the next try is due.
    pub(super) fn next_retry(&self) -> Option<Instant> {
        self.blocked.values().filter_map(|b| b.at).min()
    }

    /// Starts again each blocked profile whose time came, and, when an agent lock of this process
    /// was let go (`released`), each one a profile of this process held. Its settings are read
    /// again (the config may have changed since).
    pub(super) fn retry_blocked(&mut self, released: bool) {
        let now = Instant::now();
        let due: Vec<String> = self
            .blocked
            .iter()
            .filter(|(n, b)| {
                b.at.is_some_and(|at| at <= now)
                    || (released && b.own && !self.profiles.contains_key(n.as_str()))
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            if let Some(b) = self.blocked.get_mut(&name) {
                b.at = None;
            }
            if self.profiles.contains_key(&name) {
                continue;
            }
            match self.scope.source(&name).load() {
                Ok(s) => {
                    tracing::info!(event = %log_events::PROFILE_RETRY, profile = %name, "trying this profile again: its agent's lock may be free");
                    drop(self.start(name, s));
                }
                Err(e) => {
                    self.blocked.remove(&name);
                    self.config_error(&name, &e);
                }
            }
        }
    }

    /// Nothing runs, nothing is on its way, and every profile is served by another process: this
    /// process has nothing to do (a second `listen --all` on the same config).
    pub(super) fn all_served_elsewhere(&self) -> bool {
        self.profiles.is_empty()
            && self.leaving.is_empty()
            && self.returning.is_empty()
            && self.failed_other.is_empty()
            && !self.blocked.is_empty()
            && self.blocked.values().all(|b| !b.own)
    }
}

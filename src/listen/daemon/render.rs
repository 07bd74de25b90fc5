//! The status document, built in one place at write time from the owners' state: the one state
//! and the one detail by `core::shown`'s precedence, times formatted only here.

use super::*;
use crate::core::shown::{Sources, Waiting};
use crate::core::status::{Held, LastWake, Usage};

/// What owners outside the daemon's own state show in `status.json`: the run policy's hold and
/// spending (issue 26), empty until an owner provides them.
#[derive(Debug, Default)]
pub(super) struct Provided {
    pub(super) held: Option<Held>,
    pub(super) usage: Usage,
}

impl Daemon {
    /// Every source of the shown state and detail, as they stand.
    pub(super) fn sources(&self) -> Sources<'_> {
        Sources {
            phase: self.flags.phase,
            socket: Some(self.socket.state),
            socket_detail: self.socket.detail.as_deref(),
            cycle_wait_until: None,
            unusable: self.runtime.why(),
            mismatch: self
                .flags
                .mismatch
                .as_deref()
                .map(|you| (you, self.handle.as_deref())),
            removed: self.flags.removed.as_deref(),
            waiting: self.flags.queued.as_ref().map(|q| Waiting {
                place: q.place,
                running: q.running,
                max: q.max,
            }),
        }
    }

    /// The parts of the status other owners provide.
    pub(super) fn provided(&self) -> Provided {
        Provided::default()
    }

    /// The status document as of `now`.
    pub(super) fn render(&self, now: SystemTime) -> Status {
        let (state, since) = self.status_file.shown();
        let cycle_wait = self.flags.cycle_wait.map(time::rfc3339);
        let sources = Sources {
            cycle_wait_until: cycle_wait.as_deref(),
            ..self.sources()
        };
        let Provided { held, usage } = self.provided();
        let s = &self.settings;
        Status {
            state,
            since: time::rfc3339(since),
            socket: Some(self.socket.state),
            pid: std::process::id(),
            profile: s.profile.clone(),
            handle: self.handle.as_deref().map(crate::core::handle::shown),
            api_base: s.api_base.clone(),
            runtime: s.listen.runtime.as_str().to_string(),
            key_source: key_source_label(&s.key_source),
            updated_at: time::rfc3339(now),
            started_at: time::rfc3339(self.started_at),
            last_frame_at: self.socket.last_frame.map(time::rfc3339),
            last_connected_at: self.socket.last_connected.map(time::rfc3339),
            last_wake: self.wakes.last().map(|w| LastWake {
                at: time::rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(w.at_ms)),
                reasons: w.reasons.clone(),
            }),
            last_cycle: self.last_cycle.clone(),
            next_retry_at: self.socket.next_retry_at.map(time::rfc3339),
            detail: sources.detail(),
            texts: self.texts.status(),
            counters: Counters {
                wakes: self.wakes.count(),
                ..self.counters.clone()
            },
            held,
            usage,
            file_modified: None,
        }
    }
}

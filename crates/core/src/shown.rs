//! What `status.json` says the listener is doing: the one `state` and the one `detail`, each
//! from every source at once with its precedence written out here, rather than by whichever
//! source wrote last.

use super::status::{ListenerState, SocketState};

/// Where the listener is in its life, shown over everything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    #[default]
    Starting,
    Running,
    /// SIGTERM or SIGINT came (or the profile left the config).
    Stopping,
    /// The stop is done: the last status written says so.
    Stopped,
}

/// A run waiting for a slot of the process (`listen --all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    /// Its place when it joined the queue (1 is next).
    pub place: usize,
    /// Runs going then, and the slots there are.
    pub running: usize,
    pub max: usize,
}

/// Every source of the state and the detail.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sources<'a> {
    pub phase: Phase,
    /// The socket's state; `None` reads as `connecting`.
    pub socket: Option<SocketState>,
    /// What the socket last said of its state (or the tray's refused key, said in its place).
    pub socket_detail: Option<&'a str>,
    /// The running cycle waits out the server's `429 Retry-After` until then (RFC 3339).
    pub cycle_wait_until: Option<&'a str>,
    /// Why the runtime cannot run.
    pub unusable: Option<&'a str>,
    /// The tray belongs to this agent (`you`), not to this key's handle.
    pub mismatch: Option<(&'a str, Option<&'a str>)>,
    /// The tray's route answered `REMOVED` (contract 7): the server's words.
    pub removed: Option<&'a str>,
    pub waiting: Option<Waiting>,
}

impl Sources<'_> {
    /// stopped > stopping > starting > key_refused > runtime_unusable > handle_mismatch >
    /// upgrade_required > queued (only while connected) > the socket's. A refused key comes
    /// first: nothing else can work without it.
    pub fn state(&self) -> ListenerState {
        let socket = self.socket.unwrap_or(SocketState::Connecting);
        match self.phase {
            Phase::Stopped => return ListenerState::Stopped,
            Phase::Stopping => return ListenerState::Stopping,
            Phase::Starting => return ListenerState::Starting,
            Phase::Running => {}
        }
        if socket == SocketState::KeyRefused {
            ListenerState::KeyRefused
        } else if self.unusable.is_some() {
            ListenerState::RuntimeUnusable
        } else if self.mismatch.is_some() {
            ListenerState::HandleMismatch
        } else if self.removed.is_some() {
            ListenerState::UpgradeRequired
        } else if self.waiting.is_some() && socket == SocketState::Connected {
            ListenerState::Queued
        } else {
            socket.into()
        }
    }

    /// runtime unusable > handle mismatch > the tray route removed > waiting for a run slot >
    /// the socket's words, with a cycle's `429` wait beside them (it outlives a reconnect).
    pub fn detail(&self) -> Option<String> {
        if let Some(why) = self.unusable {
            return Some(format!("runtime unusable: {why}"));
        }
        if let Some((you, handle)) = self.mismatch {
            return Some(format!(
                "the tray is {you}'s, not @{}'s",
                handle.unwrap_or("?")
            ));
        }
        if let Some(removed) = self.removed {
            return Some(removed.to_string());
        }
        if let Some(q) = self.waiting {
            return Some(format!(
                "waiting for a run slot: place {} in the queue when it joined, {} of {} runs going",
                q.place, q.running, q.max
            ));
        }
        let wait = self.cycle_wait_until.map(|until| {
            format!(
                "the server asked to wait (429 Retry-After): the cycle reads the tray again at {until}"
            )
        });
        match (self.socket_detail, wait) {
            (Some(d), Some(w)) => Some(format!("{d}; {w}")),
            (d, w) => d.map(str::to_string).or(w),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> Sources<'static> {
        Sources {
            phase: Phase::Running,
            ..Sources::default()
        }
    }

    #[test]
    fn the_state_puts_the_phase_then_the_key_then_the_profile_over_the_socket() {
        let mut s = running();
        s.socket = Some(SocketState::Backoff);
        assert_eq!(s.state(), ListenerState::Backoff);
        s.waiting = Some(Waiting {
            place: 1,
            running: 2,
            max: 2,
        });
        assert_eq!(
            s.state(),
            ListenerState::Backoff,
            "down, the socket says more"
        );
        s.socket = Some(SocketState::Connected);
        assert_eq!(s.state(), ListenerState::Queued);
        s.removed = Some("gone");
        assert_eq!(s.state(), ListenerState::UpgradeRequired);
        s.mismatch = Some(("@x", Some("bob")));
        assert_eq!(s.state(), ListenerState::HandleMismatch);
        s.unusable = Some("no claude");
        assert_eq!(s.state(), ListenerState::RuntimeUnusable);
        s.socket = Some(SocketState::KeyRefused);
        assert_eq!(s.state(), ListenerState::KeyRefused);
        s.phase = Phase::Starting;
        assert_eq!(s.state(), ListenerState::Starting);
        s.phase = Phase::Stopping;
        assert_eq!(s.state(), ListenerState::Stopping);
        s.phase = Phase::Stopped;
        assert_eq!(s.state(), ListenerState::Stopped);
        assert_eq!(Sources::default().state(), ListenerState::Starting);
    }

    #[test]
    fn the_detail_says_the_most_pressing_source_alone() {
        let mut s = running();
        assert_eq!(s.detail(), None);
        s.socket_detail = Some("reconnecting");
        assert_eq!(s.detail().as_deref(), Some("reconnecting"));
        s.waiting = Some(Waiting {
            place: 2,
            running: 1,
            max: 1,
        });
        assert_eq!(
            s.detail().as_deref(),
            Some("waiting for a run slot: place 2 in the queue when it joined, 1 of 1 runs going")
        );
        s.removed = Some("GET /v2/tray was removed");
        assert_eq!(s.detail().as_deref(), Some("GET /v2/tray was removed"));
        s.mismatch = Some(("@x", None));
        assert_eq!(s.detail().as_deref(), Some("the tray is @x's, not @?'s"));
        s.mismatch = Some(("@x", Some("bob")));
        assert_eq!(s.detail().as_deref(), Some("the tray is @x's, not @bob's"));
        s.unusable = Some("no claude");
        assert_eq!(s.detail().as_deref(), Some("runtime unusable: no claude"));
    }

    #[test]
    fn a_cycle_wait_is_said_beside_the_socket_and_alone() {
        let mut s = running();
        s.cycle_wait_until = Some("2026-12-02T04:00:00Z");
        let wait = "the server asked to wait (429 Retry-After): the cycle reads the tray again at 2026-12-02T04:00:00Z";
        assert_eq!(s.detail().as_deref(), Some(wait));
        s.socket_detail = Some("reconnecting");
        assert_eq!(s.detail(), Some(format!("reconnecting; {wait}")));
        s.unusable = Some("no claude");
        assert_eq!(s.detail().as_deref(), Some("runtime unusable: no claude"));
    }
}

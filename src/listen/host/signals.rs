//! The signals the process answers: SIGTERM and SIGINT stop every profile (a second one stops
//! them now), SIGHUP reloads. Installed once for the process; the profiles' listeners own none
//! (`daemon::HostCommand`).

use tokio::signal::unix::{Signal, SignalKind, signal};

pub(super) struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

/// What a signal asks of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Asked {
    Stop(&'static str),
    Reload,
}

impl Signals {
    pub(super) fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal.
    pub(super) async fn next(&mut self) -> Asked {
        // A stop that comes with a reload wins over it.
        tokio::select! {
            biased;
            _ = self.term.recv() => Asked::Stop("SIGTERM"),
            _ = self.int.recv() => Asked::Stop("SIGINT"),
            _ = self.hup.recv() => Asked::Reload,
        }
    }

    /// The next SIGTERM or SIGINT (while stopping); which of the two.
    pub(super) async fn stop(&mut self) -> &'static str {
        tokio::select! {
            biased;
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

//! Whether the listener that wrote a `status.json` is alive, judged from the file, its pid and
//! the time: what `status`, `doctor`, `setup` and the page (`listen::page`) say of it.

use crate::core::status::{ListenerState, Status, quiet_allowance};
use std::time::SystemTime;

/// Whether the listener that wrote a status is alive, from facts gathered by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Its pid is alive and the status is fresh.
    Running,
    /// Its pid is alive but its main loop has not turned for longer than
    /// `core::status::quiet_allowance` allows.
    Stale,
    /// Its pid is alive and it is stopping (a run may still have its grace).
    Stopping,
    /// Its pid is gone, or it said it stopped.
    NotRunning,
}

/// Pure: judges liveness from the status, whether its pid is alive, and the time now.
pub fn assess(status: &Status, pid_alive: bool, now: SystemTime) -> Liveness {
    match status.state {
        _ if !pid_alive => return Liveness::NotRunning,
        ListenerState::Stopped => return Liveness::NotRunning,
        ListenerState::Stopping => return Liveness::Stopping,
        _ => {}
    }
    let Some(turned) = last_turn(status) else {
        return Liveness::Stale;
    };
    let next_retry = status.next_retry_at.as_deref().and_then(parse_time);
    if now.duration_since(turned).unwrap_or_default() <= quiet_allowance(turned, next_retry) {
        Liveness::Running
    } else {
        Liveness::Stale
    }
}

/// When the listener last showed that its main loop turns: the later of its last write
/// (`updated_at`) and its last touch of the file (`file_modified`).
pub fn last_turn(status: &Status) -> Option<SystemTime> {
    parse_time(&status.updated_at).max(status.file_modified)
}

pub fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s).ok()
}

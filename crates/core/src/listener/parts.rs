//! The listener's parts that are plain state: what it asks of the world, its start and stop, what
//! its status shows beyond the parts' own, the runtime's health, what earlier cycles taught it,
//! its own waits and the cycle under way.

use super::{Effect, ListenerEnd, Out, cycle, mutes};
use crate::invite_rule::InviteMemory;
use crate::recheck::Recheck;
use crate::rng::Rng;
use crate::runtime_health::RuntimeHealth;
use crate::shown::{Phase, Waiting};
use crate::status::{Counters, LastCycle, SocketState};
use std::collections::VecDeque;

/// What the socket last said, kept as it came: formatted into the status only when it is
/// written.
#[derive(Debug)]
pub(super) struct SocketView {
    pub(super) state: SocketState,
    /// Its words on its state; a tray read whose key was refused says so in their place until
    /// the socket says its next state.
    pub(super) detail: Option<String>,
    pub(super) next_retry_at: Option<i64>,
    pub(super) last_connected: Option<i64>,
    pub(super) last_frame: Option<i64>,
}

/// What the listener itself stands in, shown on top of the socket's state (`crate::shown`).
#[derive(Debug, Default)]
pub(super) struct Flags {
    pub(super) phase: Phase,
    /// The tray belongs to this agent, not to this key's handle: no runs until it matches.
    pub(super) mismatch: Option<String>,
    /// The tray's route answered `REMOVED` (contract 7): `upgrade_required` until a tray is read.
    pub(super) removed: Option<String>,
    /// The cycle's run waits for a slot of the process.
    pub(super) queued: Option<Waiting>,
    /// The running cycle waits out the server's `429 Retry-After` until then (wall ms).
    pub(super) cycle_wait: Option<i64>,
}

/// How a stop goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Stopping {
    /// When the run's grace and the slack are over (monotonic ms).
    pub(super) deadline: u64,
}

/// The effects asked for, in order, and the seeded source of every draw.
#[derive(Debug)]
pub(super) struct Outbox {
    pub(super) effects: VecDeque<Effect>,
    pub(super) rng: Rng,
    /// The seed `rng` started from: logged, so a run can be replayed.
    pub(super) seed: u64,
}

impl Outbox {
    /// A part's way to ask for effects and draw.
    pub(super) fn out<N>(&mut self) -> Out<'_, N> {
        Out::new(&mut self.effects, &mut self.rng)
    }
}

/// The listener's start and stop.
#[derive(Debug)]
pub(super) struct Life {
    pub(super) started_wall: i64,
    /// Waiting for the first texts and the runtime's presence before the socket starts.
    pub(super) starting: u8,
    pub(super) stopping: Option<Stopping>,
    /// The socket was asked to stop, or its connection dropped by a second signal.
    pub(super) socket_stopping: bool,
    pub(super) socket_dropped: bool,
    /// How the listener ends when it does.
    pub(super) end: ListenerEnd,
    pub(super) ended: bool,
}

/// What the status shows that no part owns.
#[derive(Debug)]
pub(super) struct Shown {
    pub(super) flags: Flags,
    pub(super) view: SocketView,
    /// The bare handle of this key's agent, and one whose agent lock is being taken.
    pub(super) handle: Option<String>,
    pub(super) pending_handle: Option<String>,
    pub(super) counters: Counters,
    pub(super) last_cycle: Option<LastCycle>,
    /// What the server's `hello.ok` did not accept of what was asked.
    pub(super) capabilities_refused: Vec<String>,
    /// Whether a tray said a version this listener does not know yet.
    pub(super) unknown_version_said: bool,
}

/// The runtime's health, a check under way, and the binary's stamp as last seen.
#[derive(Debug)]
pub(super) struct Runtime {
    pub(super) health: RuntimeHealth<u64>,
    pub(super) checking: bool,
    pub(super) stamp: Option<u64>,
}

/// What earlier cycles taught the listener.
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) invites: InviteMemory,
    pub(super) mutes: mutes::Mutes,
    /// What the socket heard of unread messages, for the run policy.
    pub(super) heard: crate::policy::Heard,
}

/// The listener's own waits.
#[derive(Debug)]
pub(super) struct Waits {
    /// No tray read before this: a `429`'s `Retry-After` outlasted a cycle's retries; and its end
    /// on the wall clock, which the status shows.
    pub(super) tray_not_before: Recheck,
    pub(super) not_before_wall: Option<i64>,
    /// The next tray read while its route answers `REMOVED`.
    pub(super) removed_recheck: Recheck,
    /// While the key is refused, the next read of it.
    pub(super) key_check_at: Option<u64>,
    /// The day's texts refresh.
    pub(super) texts_refresh_at: u64,
}

/// The cycle under way (one at a time, ever), and the tags of requests.
#[derive(Debug, Default)]
pub(super) struct Cycles {
    pub(super) cycle: Option<cycle::Cycle>,
    /// A cycle is due and waits for the runtime binary's stamp (an unusable runtime).
    pub(super) stamping: Option<u64>,
    pub(super) next_seq: u64,
    pub(super) next_req: u64,
    /// The texts refresh in flight.
    pub(super) texts_req: Option<u64>,
}

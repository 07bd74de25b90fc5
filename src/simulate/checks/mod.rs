//! The invariants, checked as the world goes: each effect the machine asks for and each input it
//! is handed are held against what the world did and knows, and after every step the state it
//! shows. Each has a name ([`INVARIANTS`]); the first broken one ends the simulation. The world's
//! truth is its own (what it delivered, what the server did, which conversations the user
//! muted); what the machine says of itself (its observer's wakes and cycles, its status) is a
//! claim checked against that truth.
//!
//! Parts: `socket` (acks, the connect budgets, `retry_after`), `cycles` (runs and their causes,
//! one run at a time, the recoveries, holds, mutes, the invite rule, the tray's waits and
//! budget), `status` (`status.json`), `liveness` (every message reaches a run).

mod caps;
mod cycles;
mod liveness;
mod socket;
mod status;

pub use cycles::{HOLD_END_UNREADABLE, MUTED_PAST_CUT, RUN_REFUSED};
pub use liveness::liveness;

use super::Violation;
use super::scenario::Scenario;
use super::world::{Heard, World};
use crate::core::frames::ServerFrame;
use crate::core::listener::{Effect, Input};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Every invariant by name, with what it says.
pub const INVARIANTS: [(&str, &str); 22] = [
    (
        "message_runs",
        "every message for the agent leads to a run whose tray shows its card, unless it is muted or the policy holds its sender (checked after the settle)",
    ),
    (
        "run_has_cause",
        "every reason a run is started with is backed by what the world did: a message, wake or invite frame, a (re)connect, or an own wake that is itself backed",
    ),
    (
        "own_wakes_backed",
        "a `recovered` wake follows a way out the world gave (a check that passed, texts back, a reload, a binary looked at, a wait or re-check over); `backlog` follows a completed run on a tray cut short; `hold_ended` follows a judged hold whose end came or a reload",
    ),
    (
        "hold_end_once",
        "a hold's end wakes one cycle: `hold_ended` comes again only after a new hold was judged or a reload",
    ),
    (
        "no_private_retry_ladder",
        "two runs with only `recovered` as their reason, both refused by the runtime, with no server wake, connect or reload between them (contract 4: no program keeps a retry ladder of its own)",
    ),
    (
        "muted_wakes_run_nothing",
        "no run starts for a cycle whose only causes are messages in conversations (or from agents) the user muted",
    ),
    (
        "one_run_per_profile",
        "a profile never has two runs at once",
    ),
    (
        "max_concurrent_runs",
        "the process never has more runs than listen.max_concurrent_runs",
    ),
    (
        "wake_never_acked",
        "an ack names only a message.new of the burst it answers: never a wake",
    ),
    (
        "message_acked",
        "every message.new of a burst the listener read (not one on a connection it is closing) is acked",
    ),
    (
        "connect_budget",
        "socket attempts stay within contract 3.4's budgets: 20 a minute and 200 allowed an hour per agent, 300 a minute per IP",
    ),
    (
        "retry_after_honoured",
        "after a 1013 with retry_after=S no attempt comes before S, and (with no sleep or clock step between) the next comes by S plus 10 % and a second",
    ),
    (
        "no_read_in_429_wait",
        "no tray read before a 429's Retry-After is over",
    ),
    (
        "poll_budget",
        "the server's own poll budget (contract 3.1) never refuses the listener's tray read",
    ),
    (
        "invite_rule",
        "an invite is dismissed only after two completed runs left it pending, the second ending at least 60 s after the first",
    ),
    (
        "status_stuck_has_detail",
        "status.json in a stuck state (key_refused, runtime_unusable, handle_mismatch, upgrade_required) says why, and backoff says when it retries",
    ),
    (
        "status_says_state",
        "status.json says connected only while the listener's socket is up, and says so within a few seconds of it coming up",
    ),
    (
        "status_hold_current",
        "status.json never shows a hold whose end passed more than a minute ago",
    ),
    (
        "status_shows_wait",
        "while the listener waits out a tray's 429 Retry-After beyond a cycle, status.json says so",
    ),
    (
        "deadlines_advance",
        "the machine's next deadline moves on: no step asked for at one instant a thousand times",
    ),
    (
        "runs_within_caps",
        "no run starts past the hour's or the day's cap on runs (60 and 500 unless the policy says otherwise)",
    ),
    (
        "stops_cleanly",
        "every listener ends within its kill grace and the stop's slack after SIGTERM",
    ),
];

/// A tray as the server served it to one cycle of a profile's: what the run started from it sees.
#[derive(Debug, Clone)]
pub struct ServedTray {
    /// True ms it was built.
    pub t: u64,
    pub cards: Vec<CardSeen>,
    pub invites: Vec<String>,
    pub truncated: bool,
}

#[derive(Debug, Clone)]
pub struct CardSeen {
    pub conv: String,
    /// The verdict anchor: `preview.message_id`, else `last_message_id`.
    pub anchor: Option<String>,
    /// The peer of a direct card, or the preview's sender on a group card.
    pub peer: Option<usize>,
    /// The group's index (`Server::groups`) of a group card.
    pub group: Option<usize>,
}

/// What the user muted, as the world did it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Muted {
    Conversation(String),
    Agent(String),
}

/// What the checks keep across steps.
pub struct Checks {
    violation: Option<Violation>,
    per: Vec<cycles::Per>,
    caps: Vec<caps::Per>,
    sockets: Vec<socket::Per>,
    statuses: Vec<status::Per>,
    pub obligations: liveness::Obligations,
    ip_attempts: VecDeque<u64>,
    /// The most socket attempts from the one IP in any minute (`Report::ip_peak`).
    pub ip_peak: usize,
    /// Each dial the server's budgets let through: when (true ms), and whose.
    pub accepted_dials: Vec<(u64, usize)>,
    slots: Option<usize>,
    /// Times a wall clock step or a suspend happened (true ms).
    clock_moves: Vec<u64>,
    /// Times the wall clock was stepped forward (true ms): the listener takes such a step for a
    /// sleep it did not see (`core::reconnect::ClockWatch`), and counts it as waited.
    forward_steps: Vec<u64>,
    pub mutes: BTreeSet<(usize, Muted)>,
    skip: BTreeMap<String, u64>,
    /// Situations the run reached (`Report::reached`).
    pub reached: BTreeSet<&'static str>,
}

impl Checks {
    pub fn new(plan: &Scenario, skip: &[String]) -> Checks {
        let n = plan.profiles.len();
        Checks {
            violation: None,
            per: (0..n).map(|_| cycles::Per::default()).collect(),
            caps: (0..n).map(|_| caps::Per::default()).collect(),
            sockets: (0..n).map(|_| socket::Per::default()).collect(),
            statuses: (0..n).map(|_| status::Per::default()).collect(),
            obligations: liveness::Obligations::default(),
            ip_attempts: VecDeque::new(),
            ip_peak: 0,
            accepted_dials: Vec::new(),
            slots: plan.slots,
            clock_moves: Vec::new(),
            forward_steps: Vec::new(),
            mutes: BTreeSet::new(),
            skip: skip.iter().map(|s| (s.clone(), 0)).collect(),
            reached: BTreeSet::new(),
        }
    }

    pub fn fail(&mut self, v: Violation) {
        if let Some(n) = self.skip.get_mut(v.invariant) {
            *n += 1;
            return;
        }
        if self.violation.is_none() {
            self.violation = Some(v);
        }
    }

    pub fn skipped(&self) -> Vec<(String, u64)> {
        self.skip
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| (k.clone(), *n))
            .collect()
    }

    pub fn failed(&self) -> bool {
        self.violation.is_some()
    }

    pub fn violation(&self) -> Option<&Violation> {
        self.violation.as_ref()
    }

    /// The wall clock was stepped, or the machine went to sleep or woke, at `t`.
    pub fn clock_moved(&mut self, t: u64) {
        self.clock_moves.push(t);
    }

    /// The wall clock was stepped forward at `t`.
    pub fn stepped_forward(&mut self, t: u64) {
        self.forward_steps.push(t);
    }

    /// The wall clock was stepped back: a hold judged before it is judged again (its end was
    /// reckoned on a clock that was ahead), which may end it: one `hold_ended` per profile.
    pub fn stepped_back(&mut self) {
        for p in &mut self.per {
            cycles::clock_back(p);
        }
    }

    fn stepped_forward_since(&self, t: u64) -> bool {
        self.forward_steps.last().is_some_and(|&m| m >= t)
    }

    /// When the wall clock was last stepped or the machine last woke (true ms; 0: never).
    pub fn last_clock_move(&self) -> u64 {
        self.clock_moves.last().copied().unwrap_or(0)
    }

    fn clock_moved_since(&self, t: u64) -> bool {
        self.clock_moves.last().is_some_and(|&m| m >= t)
    }

    /// The tray the run of `cycle` starts from: the last one served to that cycle.
    pub fn start_tray(&self, pid: usize, cycle: u64) -> Option<ServedTray> {
        self.per
            .get(pid)
            .and_then(|p| p.served.get(&cycle).cloned())
    }

    /// Whether the user muted this conversation, or its sender, for profile `pid`.
    pub fn is_muted(&self, pid: usize, conv: &str, sender: &str) -> bool {
        self.mutes
            .contains(&(pid, Muted::Conversation(conv.to_string())))
            || self
                .mutes
                .contains(&(pid, Muted::Agent(sender.to_string())))
    }
}

/// An input is about to be handed to profile `pid`'s listener (a burst's text frames parsed).
pub fn before_input(w: &mut World, pid: usize, input: &Input, parsed: &[Option<ServerFrame>]) {
    match input {
        Input::Burst { conn, frames, lost } => {
            let (came_up, closing) = socket::burst(w, pid, *conn, frames, parsed, lost.is_some());
            cycles::burst(w, pid, parsed, came_up, closing);
        }
        Input::ConnLost { conn, .. } | Input::Closed { conn } => socket::conn_over(w, pid, *conn),
        Input::Dialed {
            conn,
            result: Err(_),
        } => socket::conn_over(w, pid, *conn),
        Input::Tray { result: Err(e), .. } => cycles::tray_error(w, pid, e),
        Input::Reload { .. } => {
            cycles::reload(w, pid);
            caps::reload(w, pid);
        }
        Input::RuntimeChecked { result: Ok(_), .. }
        | Input::RuntimeBinary { .. }
        | Input::KeyChanged => cycles::recovery_token(w, pid),
        Input::RunEnded { cycle, end } => {
            // Refused by its runtime, or never spawned: no cap counts it.
            if !end.started || matches!(end.outcome, crate::core::listener::RunOutcome::Unusable(_))
            {
                caps::run_not_counted(w, pid, *cycle);
            }
            cycles::run_ended(w, pid, *cycle, end);
        }
        _ => {}
    }
}

/// What a listener told its observer.
pub fn heard(w: &mut World, pid: usize, h: Heard) {
    if matches!(h, Heard::CycleStarted) {
        caps::cycle_started(w, pid);
    }
    cycles::heard(w, pid, h);
}

/// An effect is about to be performed.
pub fn effect(w: &mut World, pid: usize, e: &Effect) {
    match e {
        Effect::SendAcks { conn, ids } => socket::acks(w, pid, *conn, ids),
        Effect::Dial { .. } | Effect::FetchMe { .. } => socket::attempt(w, pid),
        Effect::CloseSocket { conn } | Effect::DropSocket { conn } => {
            socket::closing(w, pid, *conn)
        }
        Effect::ReadTray { .. } => cycles::read_tray(w, pid),
        Effect::StartRun(order) => {
            cycles::start_run(w, pid, order);
            caps::run_started(w, pid, order.cycle);
            liveness::run_started(w, pid, order.cycle);
        }
        Effect::DismissInvite { invite_id, .. } => cycles::dismiss(w, pid, invite_id),
        Effect::WriteStatus(s) => status::written(w, pid, s),
        _ => {}
    }
}

/// A tray read was answered by the server (or a fault in front of it): refused by the server's
/// own poll budget, or the tray.
pub use cycles::tray_served;

/// Texts were answered: texts back are a way out.
pub fn texts_answered(w: &mut World, pid: usize, ok: bool) {
    if ok {
        cycles::recovery_token(w, pid);
    }
}

/// A socket attempt reached the server.
pub fn dial_at_server(w: &mut World, pid: usize, allowed: bool) {
    socket::dial_at_server(w, pid, allowed);
}

/// A run was killed with its group (no end comes).
pub fn run_killed(w: &mut World, pid: usize) {
    if let Some(p) = w.checks.per.get_mut(pid) {
        p.run_live = false;
    }
}

/// After every step: what the state shows.
pub fn after_step(w: &mut World) {
    status::after_step(w);
}

/// The muted state of conversations: the world's record changed.
pub fn muted(w: &mut World, pid: usize, what: Muted, on: bool) {
    if on {
        liveness::muted(w, pid, &what);
        w.checks.mutes.insert((pid, what));
    } else {
        w.checks.mutes.remove(&(pid, what));
    }
}

/// A message for profile `pid`'s agent was stored by the server.
pub fn message_for(w: &mut World, pid: usize, id: &str, conv: &str, sender: &str, group: bool) {
    liveness::message(w, pid, id, conv, sender, group);
}

pub(super) fn within(ts: &mut VecDeque<u64>, now: u64, span: u64) -> usize {
    while ts.front().is_some_and(|&t| t + span <= now) {
        ts.pop_front();
    }
    ts.len()
}

pub(super) type Served = BTreeMap<u64, ServedTray>;

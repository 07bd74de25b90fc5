//! The socket's state machine (contract 3.4; docs/operating.md): who am I (`GET /v1/agents/me`),
//! the pacer, the upgrade, every frame through `crate::engine`, acks after the wakes they asked
//! for are registered, the idle watchdog, the clock-jump probe, and the delay `crate::reconnect`
//! names after every end. It never gives up: only a stop ends it. It tells the listener what
//! happened as [`Note`]s and asks for I/O as effects.

mod down;
mod frames;

use super::config::Timing;
use super::frames_log::{SummaryLog, Tally};
use super::io::{DialError, Effect, Lost, MeError, NotReached};
use super::reach::Reach;
use super::{Observer, Out};
use crate::engine::{Engine, WakeCause};
use crate::log_events;
use crate::reconnect::{self, Backoff, ClockWatch, CloseKind, SocketRecord};
use crate::status::SocketState;
use crate::time::{Now, ms};
use std::time::Duration;

/// How often, at most, a quiet socket compares the wall clock with the monotonic one
/// (`ClockWatch`): a sleep is seen within this much after the wake.
pub const CLOCK_LOOK_EVERY: Duration = Duration::from_secs(10);
/// How long a probed socket has to answer (a pong, or any frame) after a clock jump.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Message ids remembered to ack a re-pushed message without a second wake: the SDKs' 2048.
const DEDUPE_CAPACITY: usize = crate::engine::DEFAULT_DEDUPE_CAPACITY;

/// What the socket tells the listener.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// The handle from `GET /v1/agents/me` (bare).
    Handle(String),
    State {
        state: SocketState,
        next_retry_at: Option<i64>,
        detail: Option<String>,
    },
    /// The socket is really up (its first frame that is not a close came).
    Connected,
    /// A burst was handled: its frames, how many were skipped unread, how many acks went out.
    Burst {
        frames: u64,
        skipped: u64,
        acked: u64,
    },
    /// A wake asked for by `frames` frames of one burst (registered before their acks go).
    Wake { cause: WakeCause, frames: u64 },
    /// `hello.ok` came: the capabilities asked for that the server did not accept.
    Refused { capabilities: Vec<String> },
    /// New messages as the run policy keeps them (`crate::policy::Heard`), before their wake.
    Heard(Vec<crate::policy::HeardMessage>),
}

/// The capabilities every connection asks for (contract 3.4).
pub const CAPABILITIES: [&str; 3] = ["ack", "heartbeat", "rewake"];

/// How one attempt or connection ended.
#[derive(Debug, Clone, PartialEq)]
enum End {
    Closed(CloseKind, String),
    /// An HTTP `429`: the ordinary backoff, and never less than its `Retry-After`.
    Throttled(Duration, String),
    NotReached(NotReached),
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Not started yet.
    Idle,
    /// Waiting before the next attempt; a reload cuts the wait short after a refused key, a
    /// `4426` or a wrong `api_base` (`cut`).
    Waiting {
        until: u64,
        cut: Option<Cut>,
        look_at: u64,
    },
    Me {
        req: u64,
    },
    Pacing,
    Dialing {
        conn: u64,
    },
    Open(Open),
    /// A close the machine asked for; then a new attempt, or the stop.
    Closing {
        conn: u64,
        then_stop: bool,
    },
    Stopped,
}

/// Why a reload cuts a wait short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    UpgradeRequired,
    KeyRefused,
    Misconfigured,
}

#[derive(Debug, Clone, PartialEq)]
struct Open {
    conn: u64,
    /// The endpoint the connection was made for.
    endpoint: u64,
    /// Its first frame that is not a close came.
    up: bool,
    idle_deadline: u64,
    probing: bool,
    look_at: u64,
    /// A burst waits for its acks to be sent: what it came to, and the ids.
    acking: Option<(Tally, Vec<String>)>,
}

/// The socket's lasting state.
#[derive(Debug)]
pub struct Socket {
    engine: Engine,
    backoff: Backoff,
    reach: Reach,
    clocks: ClockWatch,
    summary: SummaryLog,
    phase: Phase,
    /// Bumped by every change of the API base or key.
    endpoint: u64,
    /// The endpoint the current attempt is for.
    attempt_endpoint: u64,
    /// The endpoint the engine's own handle was learnt for.
    handle_known_for: Option<u64>,
    /// The wait a `429` asked for, for the next delay.
    server_wait: Option<Duration>,
    record: SocketRecord,
    up_since: Option<u64>,
    next_id: u64,
}

/// What the socket needs of the listener's settings at each step.
pub struct Params<'a> {
    pub api_base: &'a str,
    pub idle_timeout: Duration,
    pub timing: Timing,
    pub obs: &'a dyn Observer,
}

impl Socket {
    pub fn new(now: Now) -> Socket {
        Socket {
            engine: Engine::new("", DEDUPE_CAPACITY),
            backoff: Backoff::default(),
            reach: Reach::default(),
            clocks: ClockWatch::new(now.wall_u64(), now.mono_ms),
            summary: SummaryLog::default(),
            phase: Phase::Idle,
            endpoint: 0,
            attempt_endpoint: 0,
            handle_known_for: None,
            server_wait: None,
            record: SocketRecord::default(),
            up_since: None,
            next_id: 0,
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The connection open now, if any.
    pub fn conn(&self) -> Option<u64> {
        match &self.phase {
            Phase::Open(o) => Some(o.conn),
            Phase::Closing { conn, .. } | Phase::Dialing { conn } => Some(*conn),
            _ => None,
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// Starts the first attempt.
    pub fn start(&mut self, now: Now, p: &Params, out: &mut Out<Note>) {
        if self.phase == Phase::Idle {
            self.attempt(now, p, out);
        }
    }

    /// The next time the socket must be looked at.
    pub fn deadline(&self) -> Option<u64> {
        let summary = self.summary.due();
        let own = match &self.phase {
            Phase::Waiting { until, look_at, .. } => Some((*until).min(*look_at)),
            Phase::Open(o) if o.acking.is_none() => Some(if o.probing {
                o.idle_deadline
            } else {
                o.idle_deadline.min(o.look_at)
            }),
            _ => None,
        };
        [summary, own].into_iter().flatten().min()
    }

    /// Time passed: the wait before an attempt, the watchdog, the clock look, the frames' log.
    pub fn on_time(&mut self, now: Now, p: &Params, out: &mut Out<Note>) {
        if self.summary.due().is_some_and(|d| d <= now.mono_ms) {
            self.summary.on_due(now.mono_ms);
        }
        match self.phase.clone() {
            Phase::Waiting {
                until,
                cut,
                look_at,
            } => {
                if until <= now.mono_ms {
                    self.attempt(now, p, out);
                } else if look_at <= now.mono_ms {
                    let mut until = until;
                    if let Some(unseen) = self.look_at_clocks(now) {
                        let left = reconnect::left_after_sleep(
                            Duration::from_millis(until.saturating_sub(now.mono_ms)),
                            unseen,
                        );
                        tracing::info!(
                            event = %log_events::CLOCK_JUMP,
                            unseen_ms = ms(unseen),
                            retry_in_ms = ms(left),
                            "the wall clock moved {} s more than the monotonic clock (the machine slept?); that time counts as waited",
                            unseen.as_secs()
                        );
                        until = now.after(left);
                    }
                    self.phase = Phase::Waiting {
                        until,
                        cut,
                        look_at: now.after(CLOCK_LOOK_EVERY),
                    };
                    if until <= now.mono_ms {
                        self.attempt(now, p, out);
                    }
                }
            }
            Phase::Open(mut o) if o.acking.is_none() => {
                if o.idle_deadline <= now.mono_ms {
                    let detail = if o.probing {
                        tracing::warn!(
                            event = %log_events::WATCHDOG_DROP,
                            probe_ms = ms(PROBE_TIMEOUT),
                            "no answer to the probe after a clock jump; dropping the socket"
                        );
                        "no answer to the probe after a clock jump"
                    } else {
                        tracing::warn!(
                            event = %log_events::WATCHDOG_DROP,
                            idle_ms = ms(p.idle_timeout),
                            "no inbound traffic within the idle timeout; dropping the socket"
                        );
                        "idle watchdog"
                    };
                    out.effect(Effect::DropSocket { conn: o.conn });
                    self.connection_ended(
                        now,
                        End::Closed(CloseKind::Ordinary, detail.into()),
                        p,
                        out,
                    );
                } else if !o.probing && o.look_at <= now.mono_ms {
                    o.look_at = now.after(CLOCK_LOOK_EVERY);
                    if let Some(unseen) = self.look_at_clocks(now) {
                        tracing::info!(
                            event = %log_events::CLOCK_JUMP,
                            unseen_ms = ms(unseen),
                            probe_ms = ms(PROBE_TIMEOUT),
                            "the wall clock moved {} s more than the monotonic clock (the machine slept?); probing the socket",
                            unseen.as_secs()
                        );
                        out.effect(Effect::Probe { conn: o.conn });
                        o.probing = true;
                        o.idle_deadline = o.idle_deadline.min(now.after(PROBE_TIMEOUT));
                    }
                    self.phase = Phase::Open(o);
                }
            }
            _ => {}
        }
    }

    /// Looks at both clocks: the time no timer saw when the machine slept since the last look.
    fn look_at_clocks(&mut self, now: Now) -> Option<Duration> {
        self.clocks.look(now.wall_u64(), now.mono_ms)
    }

    /// One attempt: who am I (unless known for this endpoint), then the pacer, then the dial.
    fn attempt(&mut self, now: Now, p: &Params, out: &mut Out<Note>) {
        self.look_at_clocks(now);
        self.reach.attempt(p.api_base);
        self.attempt_endpoint = self.endpoint;
        out.note(Note::State {
            state: SocketState::Connecting,
            next_retry_at: None,
            detail: None,
        });
        if self.handle_known_for == Some(self.endpoint) {
            self.phase = Phase::Pacing;
            out.effect(Effect::AskPacer);
        } else {
            let req = self.id();
            self.phase = Phase::Me { req };
            out.effect(Effect::FetchMe { req });
        }
    }

    /// `GET /v1/agents/me` answered.
    pub fn on_me(
        &mut self,
        now: Now,
        req: u64,
        result: Result<String, MeError>,
        p: &Params,
        out: &mut Out<Note>,
    ) {
        if self.phase != (Phase::Me { req }) {
            return;
        }
        match result {
            Ok(handle) => {
                self.reach.reached();
                // REST accepting the key resets no delay: a socket that refuses it keeps its
                // growing retry until a socket proves itself (issue 29 item 3).
                self.engine.set_own_handle(&handle);
                out.note(Note::Handle(handle));
                self.handle_known_for = Some(self.attempt_endpoint);
                self.phase = Phase::Pacing;
                out.effect(Effect::AskPacer);
            }
            Err(e) => {
                let end = match e {
                    MeError::Refused(status) => End::Closed(
                        CloseKind::KeyRefused,
                        format!("GET /v1/agents/me answered HTTP {status}"),
                    ),
                    MeError::RateLimited(wait) => End::Throttled(
                        wait,
                        format!(
                            "GET /v1/agents/me answered HTTP 429; retry after {} s",
                            wait.as_secs_f64().ceil() as u64
                        ),
                    ),
                    // Contract 7: switched off for good; the same stopped state as a `4426`.
                    MeError::Removed(why) => End::Closed(CloseKind::UpgradeRequired, why),
                    MeError::NotReached(n) => End::NotReached(n),
                };
                self.ended(now, end, p, out);
            }
        }
    }

    /// The pacer let the attempt go.
    pub fn on_paced(&mut self, out: &mut Out<Note>) {
        if self.phase == Phase::Pacing {
            let conn = self.id();
            self.phase = Phase::Dialing { conn };
            out.effect(Effect::Dial { conn });
        }
    }

    pub fn on_dialed(
        &mut self,
        now: Now,
        conn: u64,
        result: Result<(), DialError>,
        p: &Params,
        out: &mut Out<Note>,
    ) {
        if self.phase != (Phase::Dialing { conn }) {
            return;
        }
        match result {
            Ok(()) => {
                tracing::debug!(event = %log_events::SOCKET_UPGRADED, "upgrade accepted; waiting for the first frame");
                self.record = SocketRecord::default();
                self.up_since = None;
                self.summary = SummaryLog::default();
                self.phase = Phase::Open(Open {
                    conn,
                    endpoint: self.attempt_endpoint,
                    up: false,
                    idle_deadline: now.after(p.idle_timeout),
                    probing: false,
                    look_at: now.after(CLOCK_LOOK_EVERY),
                    acking: None,
                });
                if self.attempt_endpoint != self.endpoint {
                    self.reconfigure(out);
                }
            }
            Err(DialError::Closed(kind, detail)) => {
                self.ended(now, End::Closed(kind, detail), p, out)
            }
            Err(DialError::Throttled(wait, detail)) => {
                self.ended(now, End::Throttled(wait, detail), p, out)
            }
            Err(DialError::NotReached(n)) => self.ended(now, End::NotReached(n), p, out),
        }
    }

    /// The reader lost the connection between bursts.
    pub fn on_lost(&mut self, now: Now, conn: u64, lost: Lost, p: &Params, out: &mut Out<Note>) {
        match &self.phase {
            Phase::Open(o) if o.conn == conn => {
                let end = frames::lost_end(lost);
                self.connection_ended(now, end, p, out);
            }
            // A close the machine asked for ended in a loss: the close is done.
            Phase::Closing { conn: c, .. } if *c == conn => self.on_closed(now, conn, p, out),
            _ => {}
        }
    }

    /// A close the machine asked for is done.
    pub fn on_closed(&mut self, now: Now, conn: u64, p: &Params, out: &mut Out<Note>) {
        let Phase::Closing { conn: c, then_stop } = self.phase.clone() else {
            return;
        };
        if c != conn {
            return;
        }
        self.end_record(now, p);
        if then_stop {
            self.phase = Phase::Stopped;
        } else {
            // A new key or API base: connect again now, no backoff.
            self.reach.reached();
            self.attempt(now, p, out);
        }
    }

    /// How long the connection was up, for the backoff: only a socket that proved itself resets
    /// the delays (issue 29 item 3).
    fn end_record(&mut self, now: Now, p: &Params) {
        self.record.up_for =
            Duration::from_millis(self.up_since.map_or(0, |t| now.mono_ms.saturating_sub(t)));
        self.backoff.socket_ended(&self.record, p.timing.scale);
        self.summary.flush();
    }

    fn connection_ended(&mut self, now: Now, end: End, p: &Params, out: &mut Out<Note>) {
        self.end_record(now, p);
        self.ended(now, end, p, out);
    }

    /// SIGHUP (or a new key file): a changed endpoint reconnects now; a wait after a refused key,
    /// a `4426` or a wrong `api_base` is cut short. The server's budget delay and the ordinary
    /// backoff are never undercut.
    pub fn on_params(&mut self, now: Now, endpoint_changed: bool, p: &Params, out: &mut Out<Note>) {
        if endpoint_changed {
            self.endpoint += 1;
        }
        match self.phase.clone() {
            Phase::Open(o) if o.endpoint != self.endpoint => self.reconfigure(out),
            Phase::Waiting { cut: Some(cut), .. } => {
                match cut {
                    Cut::UpgradeRequired => {
                        tracing::info!(event = %log_events::RECONNECT, "configuration reloaded; checking the socket again now")
                    }
                    Cut::KeyRefused => {
                        tracing::info!(event = %log_events::KEY_RETRY, "configuration reloaded; retrying the key now")
                    }
                    Cut::Misconfigured => {
                        tracing::info!(event = %log_events::RECONNECT, "configuration reloaded; trying api_base again now")
                    }
                }
                self.attempt(now, p, out);
            }
            _ => {}
        }
    }

    /// The API base or key changed under an open socket: close it with 1000 and connect again.
    fn reconfigure(&mut self, out: &mut Out<Note>) {
        let Phase::Open(o) = &self.phase else {
            return;
        };
        tracing::info!(event = %log_events::RECONNECT, "the API base or key changed; reconnecting");
        let conn = o.conn;
        out.effect(Effect::CloseSocket { conn });
        self.phase = Phase::Closing {
            conn,
            then_stop: false,
        };
    }

    /// The listener stops: an open socket closes with 1000; anything in flight is given up.
    pub fn stop(&mut self, now: Now, p: &Params, out: &mut Out<Note>) {
        match self.phase.clone() {
            Phase::Open(o) => {
                self.summary.flush();
                out.effect(Effect::CloseSocket { conn: o.conn });
                self.phase = Phase::Closing {
                    conn: o.conn,
                    then_stop: true,
                };
            }
            Phase::Closing { conn, .. } => {
                self.phase = Phase::Closing {
                    conn,
                    then_stop: true,
                }
            }
            Phase::Dialing { conn } => {
                out.effect(Effect::DropSocket { conn });
                self.phase = Phase::Stopped;
            }
            _ => {
                self.end_record(now, p);
                self.phase = Phase::Stopped;
            }
        }
    }
}

/// At most `max` characters of `s`.
pub fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => s.get(..i).unwrap_or(s),
        None => s,
    }
}

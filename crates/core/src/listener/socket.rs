//! The socket's state machine (contract 3.4; docs/operating.md): who am I (`GET /v1/agents/me`),
//! the pacer, the upgrade, every frame through `crate::engine`, acks after the wakes they asked
//! for are registered, the idle watchdog, the clock-jump probe, and the delay `crate::reconnect`
//! names after every end. It never gives up: only a stop ends it. It tells the listener what
//! happened as [`Note`]s and asks for I/O as effects.

use super::config::Timing;
use super::frames_log::{SummaryLog, Tally};
use super::io::{DialError, Effect, InFrame, Lost, MeError, NotReached};
use super::reach::{MISCONFIGURED_RETRY, Reach, Say, UNREACHABLE_WARN_AFTER};
use super::{Observer, Out};
use crate::engine::{Engine, WakeCause};
use crate::log_events;
use crate::reconnect::{self, Backoff, ClockWatch, CloseKind, SocketRecord};
use crate::status::SocketState;
use crate::time::{Now, human_secs, ms};
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

    /// A burst of frames: each through the engine, the wakes registered, then the acks asked
    /// for (an ack never goes before its wake is registered).
    pub fn on_burst(
        &mut self,
        now: Now,
        conn: u64,
        frames: Vec<InFrame>,
        lost: Option<Lost>,
        p: &Params,
        out: &mut Out<Note>,
    ) {
        let Phase::Open(mut o) = self.phase.clone() else {
            // A closing connection's last frames: the reader is answered, nothing is acked (the
            // server pushes them again to the next socket; the dedupe memory keeps them quiet).
            if self.conn() == Some(conn) && lost.is_none() {
                out.effect(Effect::SendAcks { conn, ids: vec![] });
            }
            return;
        };
        if o.conn != conn {
            return;
        }
        let mut burst = Burst::default();
        for frame in frames {
            self.take(now, &mut burst, frame, &mut o.up, p);
        }
        if burst.came_up {
            tracing::info!(event = %log_events::SOCKET_CONNECTED, url = %super::ws_url(p.api_base), "socket connected");
            p.obs.connect_accepted();
            out.note(Note::Connected);
            out.note(Note::State {
                state: SocketState::Connected,
                next_retry_at: None,
                detail: None,
            });
        }
        if let Some(capabilities) = burst.refused.take() {
            out.note(Note::Refused { capabilities });
        }
        for (cause, n) in &burst.wakes {
            burst.tally.wake(&cause.label(), *n);
            out.note(Note::Wake {
                cause: cause.clone(),
                frames: *n,
            });
        }
        let end = burst.end.take().or_else(|| lost.map(lost_end));
        match end {
            None => {
                out.effect(Effect::SendAcks {
                    conn,
                    ids: burst.acks.clone(),
                });
                o.acking = Some((burst.tally, burst.acks));
                self.phase = Phase::Open(o);
            }
            Some(end) => {
                // After the server's close or a socket error, acks can no longer be sent: the
                // server pushes the unacked messages again on the next connect, and the dedupe
                // memory keeps them from waking twice.
                self.burst_done(now, burst.tally, p, out);
                self.phase = Phase::Open(o);
                self.connection_ended(now, end, p, out);
            }
        }
    }

    /// The burst's acks were written and flushed (or not).
    pub fn on_acks_sent(
        &mut self,
        now: Now,
        conn: u64,
        result: Result<usize, String>,
        p: &Params,
        out: &mut Out<Note>,
    ) {
        let Phase::Open(mut o) = self.phase.clone() else {
            return;
        };
        if o.conn != conn {
            return;
        }
        let Some((mut tally, ids)) = o.acking.take() else {
            return;
        };
        o.idle_deadline = now.after(p.idle_timeout);
        o.probing = false;
        self.phase = Phase::Open(o);
        match result {
            Ok(n) => {
                tally.acked = n as u64;
                if tracing::enabled!(tracing::Level::DEBUG) {
                    for id in ids.iter().take(n) {
                        tracing::debug!(event = %log_events::ACK, message_id = %id, "acked");
                    }
                }
                self.burst_done(now, tally, p, out);
            }
            Err(e) => {
                tracing::info!(event = %log_events::SOCKET_CLOSED, error = %e, "acks could not be sent");
                self.burst_done(now, tally, p, out);
                self.connection_ended(
                    now,
                    End::Closed(CloseKind::Ordinary, format!("send failed: {e}")),
                    p,
                    out,
                );
            }
        }
    }

    fn burst_done(&mut self, now: Now, tally: Tally, p: &Params, out: &mut Out<Note>) {
        p.obs.burst(tally.skipped, tally.acked);
        out.note(Note::Burst {
            frames: tally.frames,
            skipped: tally.skipped,
            acked: tally.acked,
        });
        self.summary.record(tally, now.mono_ms);
    }

    /// The reader lost the connection between bursts.
    pub fn on_lost(&mut self, now: Now, conn: u64, lost: Lost, p: &Params, out: &mut Out<Note>) {
        match &self.phase {
            Phase::Open(o) if o.conn == conn => {
                let end = lost_end(lost);
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

    /// Adds one inbound message to the burst: counted, its wake and ack noted, a close noted as
    /// the burst's end.
    fn take(&mut self, now: Now, burst: &mut Burst, frame: InFrame, up: &mut bool, p: &Params) {
        burst.tally.frames += 1;
        p.obs.frame(frame_kind(&frame));
        let is_close = matches!(frame, InFrame::Close(_));
        if !*up && !is_close {
            // The socket is really up: the server sent `hello.ok` or any other frame that is not
            // a close. A server over its connect budget, or refusing the key or the client,
            // accepts the upgrade and closes at once (contract 3.4, 7): that was no connect.
            *up = true;
            burst.came_up = true;
            self.record.came_up = true;
            self.up_since = Some(now.mono_ms);
            // Each (re)connect is one wake (contract 4 step 1).
            burst.wake(WakeCause::Connected);
        } else if *up && !is_close {
            // A frame after the first: the socket proved itself (`SocketRecord`).
            self.record.frames_after_first += 1;
        }
        match frame {
            InFrame::Text(text) => self.take_text(burst, &text),
            InFrame::Close(frame) => burst.end = Some(closed_by_server(frame)),
            InFrame::Control => {}
            InFrame::Binary(len) => burst.skip(len, "binary"),
        }
    }

    /// One text frame: what the engine asks for it. Per-frame lines are debug; the burst's
    /// summary says the rest.
    fn take_text(&mut self, burst: &mut Burst, text: &str) {
        if text.len() > crate::frames::MAX_FRAME_BYTES {
            burst.skip(text.len(), "oversized");
            return;
        }
        if tracing::enabled!(tracing::Level::DEBUG) {
            log_frame(text);
        }
        let action = self.engine.on_text(text);
        if let Some(err) = &action.malformed {
            burst.skip(text.len(), &err.to_string());
        }
        if let Some(t) = action.frame_type {
            burst.tally.types.count(t);
        }
        if let Some(caps) = &action.hello {
            log_hello(caps.as_deref());
            let refused: Vec<String> = CAPABILITIES
                .iter()
                .filter(|c| !caps.iter().flatten().any(|a| a == *c))
                .map(|c| c.to_string())
                .collect();
            burst.refused = Some(refused);
        }
        if let Some(cause) = action.wake {
            tracing::debug!(event = %log_events::WAKE, reason = %cause.label(), message_id = action.ack.as_deref(), "wake");
            burst.wake(cause);
        }
        if let Some(id) = action.ack {
            burst.acks.push(id);
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

    /// An attempt or connection ended: the delay its end calls for, said once, then the wait.
    fn ended(&mut self, now: Now, end: End, p: &Params, out: &mut Out<Note>) {
        let (kind, detail, not_reached) = match end {
            End::Closed(kind, detail) => {
                self.reach.reached();
                (kind, detail, None)
            }
            // The server answered: it is there, and asked for a wait of its own.
            End::Throttled(wait, detail) => {
                self.reach.reached();
                self.server_wait = Some(wait);
                (CloseKind::Ordinary, detail, None)
            }
            End::NotReached(n) => (CloseKind::Ordinary, n.detail().to_string(), Some(n)),
        };
        p.obs.socket_down(&kind);
        let misconfigured = matches!(not_reached, Some(NotReached::Misconfigured(_)));
        let delay = if misconfigured {
            p.timing.of(MISCONFIGURED_RETRY)
        } else {
            if kind == CloseKind::KeyRefused {
                // The handle is asked for again with the next key.
                self.handle_known_for = None;
            }
            reconnect::delay_after(
                &kind,
                &mut self.backoff,
                p.timing.of(reconnect::KEY_REFUSED_RETRY),
                out.rng.f64(),
                p.timing.scale,
            )
        };
        // A `429` asked for a wait of its own: never less.
        let delay = delay.max(self.server_wait.take().unwrap_or_default());
        let said = not_reached
            .as_ref()
            .is_some_and(|n| self.say_not_reached(n, now, p, delay));
        let state = self.report_down(&kind, &detail, delay, said);
        let detail = if detail.is_empty() {
            state.as_str().to_string()
        } else {
            detail
        };
        out.note(Note::State {
            state,
            next_retry_at: Some(now.wall_ms.saturating_add(ms(delay) as i64)),
            detail: Some(detail),
        });
        let cut = match kind {
            _ if misconfigured => Some(Cut::Misconfigured),
            CloseKind::UpgradeRequired => Some(Cut::UpgradeRequired),
            CloseKind::KeyRefused => Some(Cut::KeyRefused),
            _ => None,
        };
        self.phase = Phase::Waiting {
            until: now.after(delay),
            cut,
            look_at: now.after(CLOCK_LOOK_EVERY),
        };
    }

    /// A wrong `api_base` is said once at ERROR, an outage once at WARN when it has lasted
    /// `UNREACHABLE_WARN_AFTER`; every other attempt is the ordinary INFO line. True when it
    /// logged.
    fn say_not_reached(&mut self, n: &NotReached, now: Now, p: &Params, delay: Duration) -> bool {
        let retry_in_ms = ms(delay);
        match self
            .reach
            .failed(n, now.mono_ms, p.timing.of(UNREACHABLE_WARN_AFTER))
        {
            Say::Misconfigured => tracing::error!(
                event = %log_events::API_BASE_NOT_AGENTCHAT,
                api_base = %p.api_base,
                retry_in_ms,
                "{}; retrying every {} s (at once on SIGHUP)",
                n.detail(),
                delay.as_secs().max(1)
            ),
            Say::LongUnreachable { for_s } => tracing::warn!(
                event = %log_events::SERVER_UNREACHABLE,
                api_base = %p.api_base,
                for_s,
                retry_in_ms,
                "no AgentChat server for {} now: {}; still retrying (check the network, or api_base)",
                human_secs(for_s),
                n.detail()
            ),
            Say::Again => return false,
        }
        true
    }

    /// Says why the socket is down and when it is tried again (none for the ordinary backoff
    /// when `said` already); the state to show.
    fn report_down(
        &self,
        kind: &CloseKind,
        detail: &str,
        delay: Duration,
        said: bool,
    ) -> SocketState {
        let retry_in_ms = ms(delay);
        match kind {
            // ERROR at the first refusal of a run; the retries after it say it again at INFO.
            CloseKind::KeyRefused if self.backoff.key_attempt() <= 1 => {
                tracing::error!(
                    event = %log_events::KEY_REFUSED,
                    retry_in_ms,
                    detail = %detail,
                    "the server refused the API key; check AGENTCHAT_API_KEY or api_key_file, then send SIGHUP (systemctl --user reload) to retry at once"
                );
                SocketState::KeyRefused
            }
            CloseKind::KeyRefused => {
                tracing::info!(
                    event = %log_events::KEY_REFUSED,
                    retry_in_ms,
                    detail = %detail,
                    "the server still refuses the API key; retrying later"
                );
                SocketState::KeyRefused
            }
            CloseKind::Budget { retry_after_s } => {
                tracing::warn!(
                    event = %log_events::CONNECT_BUDGET,
                    retry_after_s = *retry_after_s,
                    retry_in_ms,
                    "connect budget exhausted; waiting as the server asked"
                );
                SocketState::Backoff
            }
            // Contract 7: retrying the same way will not succeed. A stopped state, re-checked
            // every 15-30 min (`reconnect::UPGRADE_RECHECK`), at once on reload.
            CloseKind::UpgradeRequired => {
                tracing::error!(
                    event = %log_events::UPGRADE_REQUIRED,
                    retry_in_ms,
                    detail = %detail,
                    "the server requires a newer agentchat ({}): no wake arrives until agentchat is updated; checking again in {} min",
                    detail,
                    delay.as_secs().div_ceil(60)
                );
                SocketState::UpgradeRequired
            }
            CloseKind::Ordinary => {
                if !said {
                    tracing::info!(event = %log_events::BACKOFF, retry_in_ms, detail = %detail, "socket down; reconnecting after a delay");
                }
                SocketState::Backoff
            }
        }
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

/// One read burst: what its messages asked for, and how the connection ended if it did.
#[derive(Default)]
struct Burst {
    tally: Tally,
    came_up: bool,
    /// Distinct wake causes in first-seen order, each with how many frames asked for it.
    wakes: Vec<(WakeCause, u64)>,
    acks: Vec<String>,
    end: Option<End>,
    /// What `hello.ok` did not accept, when it came in this burst.
    refused: Option<Vec<String>>,
}

impl Burst {
    fn wake(&mut self, cause: WakeCause) {
        match self.wakes.iter_mut().find(|(c, _)| *c == cause) {
            Some((_, n)) => *n += 1,
            None => self.wakes.push((cause, 1)),
        }
    }

    /// A frame skipped unread: the burst's first says why at warn, the rest only at debug.
    fn skip(&mut self, bytes: usize, why: &str) {
        if self.tally.skipped == 0 {
            tracing::warn!(event = %log_events::FRAME_SKIPPED, bytes, why = %why, "frame skipped");
        } else {
            tracing::debug!(event = %log_events::FRAME_SKIPPED, bytes, why = %why, "frame skipped");
        }
        self.tally.skipped += 1;
    }
}

fn lost_end(lost: Lost) -> End {
    match lost {
        Lost::Ended => {
            tracing::info!(
                event = %log_events::SOCKET_CLOSED,
                code = 1006u16,
                "socket ended without a close frame"
            );
            End::Closed(CloseKind::Ordinary, "socket ended".into())
        }
        Lost::Error(e) => {
            tracing::info!(event = %log_events::SOCKET_CLOSED, error = %e, "socket error");
            End::Closed(CloseKind::Ordinary, format!("socket error: {e}"))
        }
    }
}

/// The server's close frame (none: 1005), logged and classified (contract 3.4).
fn closed_by_server(frame: Option<(u16, String)>) -> End {
    let (code, reason) = frame.unwrap_or((1005, String::new()));
    let kind = reconnect::classify_close(code, &reason);
    let reason = truncate(&reason, 120);
    tracing::info!(event = %log_events::SOCKET_CLOSED, code, reason = %reason, kind = kind.as_str(), "server closed the socket");
    End::Closed(kind, format!("closed {code} {reason}"))
}

/// The frame's kind for the metrics.
fn frame_kind(frame: &InFrame) -> &'static str {
    match frame {
        InFrame::Text(t) if t.len() > crate::frames::MAX_FRAME_BYTES => "oversized",
        InFrame::Text(t) => crate::frames::type_label(t),
        InFrame::Binary(_) => "binary",
        InFrame::Close(_) => "close",
        InFrame::Control => "other",
    }
}

/// The capabilities `hello.ok` listed (`None`: a pre-v1 server listed none).
fn log_hello(caps: Option<&[String]>) {
    match caps {
        Some(c) => {
            tracing::info!(event = %log_events::HELLO, capabilities = %c.join(","), "server accepted capabilities")
        }
        None => {
            tracing::info!(event = %log_events::HELLO, "pre-v1 server: no capabilities listed")
        }
    }
}

/// Debug: the frame's type and ids, never its content.
fn log_frame(text: &str) {
    use crate::frames::ServerFrame;
    match ServerFrame::parse(text) {
        Ok(ServerFrame::MessageNew(m)) => {
            tracing::debug!(event = %log_events::FRAME, frame_type = "message.new", message_id = %m.id, conversation_id = m.conversation_id.as_deref(), sender = m.sender.as_deref(), kind = m.kind.as_deref(), "frame")
        }
        Ok(ServerFrame::Wake { reason, step }) => {
            tracing::debug!(event = %log_events::FRAME, frame_type = "wake", reason = %reason, step, "frame")
        }
        Ok(ServerFrame::GroupInviteReceived { invite_id }) => {
            tracing::debug!(event = %log_events::FRAME, frame_type = "group.invite.received", invite_id = invite_id.as_deref(), "frame")
        }
        Ok(ServerFrame::HelloOk { .. }) => {
            tracing::debug!(event = %log_events::FRAME, frame_type = "hello.ok", "frame")
        }
        Ok(ServerFrame::GroupDeleted) => {
            tracing::debug!(event = %log_events::FRAME, frame_type = "group.deleted", "frame")
        }
        Ok(ServerFrame::Heartbeat) => {
            tracing::debug!(event = %log_events::FRAME, frame_type = "heartbeat", "frame")
        }
        Ok(ServerFrame::Other { kind }) => {
            tracing::debug!(event = %log_events::FRAME, frame_type = %truncate(&kind, 64), "frame")
        }
        Err(_) => {}
    }
}

/// At most `max` characters of `s`.
pub fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => s.get(..i).unwrap_or(s),
        None => s,
    }
}

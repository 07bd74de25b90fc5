//! The socket task (contract 3.4; docs/operating.md): connects with the Bearer key and `ack,heartbeat,rewake`, drives
//! `core::engine` with every frame, hands wakes to the main loop and acks once the main loop has
//! registered them, drops a silent socket, and reconnects after the delay `core::reconnect` names.
//! It runs apart from cycles, so a long run never delays frames, acks or heartbeats. It never
//! ends because of the network; only shutdown ends it.

use super::reach::{NotReached, Reach, Say};
use crate::client::{Api, ApiError, CLIENT_NAME, CLIENT_VERSION};
use crate::core::engine::{Engine, WakeCause};
use crate::core::frames::FrameType;
use crate::core::reconnect::{self, Backoff, CloseKind};
use futures_util::{SinkExt, StreamExt};
use secrecy::{ExposeSecret, SecretString};
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::{
    self, Message, client::IntoClientRequest, protocol::CloseFrame, protocol::WebSocketConfig,
    protocol::frame::coding::CloseCode,
};

/// Frames larger than this are skipped unread (docs/operating.md, "What happens, in order").
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Message ids remembered to ack a re-pushed message without a second wake: the SDKs' 2048. The
/// server re-pushes only what is unacked, and a burst is acked within 256 frames.
const DEDUPE_CAPACITY: usize = crate::core::engine::DEFAULT_DEDUPE_CAPACITY;
/// Bytes read from the socket at a time. Frames are wakes and message envelopes, a few hundred
/// bytes to a few KiB; tungstenite's default (128 KiB, allocated and zeroed per connection) is
/// sized for bulk transfer. A larger frame still arrives whole: the buffer grows for it.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// What the socket task needs; replaced on reload.
#[derive(Clone)]
pub struct SocketParams {
    pub api_base: String,
    pub key: SecretString,
    /// The listener's one REST client for this configuration (`GET /v1/agents/me`).
    pub api: Api,
    pub idle_timeout: Duration,
    pub key_refused_retry: Duration,
    /// The test time scale in effect (1 unless `api_base` is a loopback address,
    /// `config::TestTimeScale`): divides the ordinary backoff, never the server's `retry_after`
    /// (`core::reconnect::delay_after`).
    pub backoff_scale: f64,
    /// How long nothing may answer before the log says so at WARN (`reach`).
    pub unreachable_warn_after: Duration,
    /// The wait between attempts while `api_base` answers as something other than AgentChat.
    pub misconfigured_retry: Duration,
    /// The listener's metrics (a no-op registry for `--once`).
    pub metrics: std::sync::Arc<super::metrics::Metrics>,
}

impl SocketParams {
    fn same_endpoint(&self, other: &SocketParams) -> bool {
        self.api_base == other.api_base && self.key.expose_secret() == other.key.expose_secret()
    }
}

/// The socket's state, for the status file.
pub use crate::core::status::SocketState;

/// What the socket tells the main loop.
#[derive(Debug)]
pub enum SocketEvent {
    /// The handle from `GET /v1/agents/me` (bare).
    Handle(String),
    State {
        state: SocketState,
        next_retry_at: Option<SystemTime>,
        detail: Option<String>,
    },
    /// The socket is really up (its first frame that is not a close came): counted as a connect.
    /// An upgrade the server closes at once is no connect.
    Connected,
    /// A read burst was handled: its inbound frames (proof of life), how many of them were
    /// skipped unread, and how many acks were written and flushed.
    Burst {
        frames: u64,
        skipped: u64,
        acked: u64,
    },
    /// A wake asked for by `frames` frames of one burst; the main loop answers on `registered`
    /// once the coalescer has it, and only then are the burst's messages acked.
    Wake {
        cause: WakeCause,
        frames: u64,
        registered: oneshot::Sender<()>,
    },
}

/// The ws(s) URL for an API base: `http` -> `ws`, `https` -> `wss`, plus `/v1/ws`.
pub fn ws_url(api_base: &str) -> String {
    let base = api_base.trim_end_matches('/');
    let rest = if let Some(r) = base.strip_prefix("https://") {
        format!("wss://{r}")
    } else if let Some(r) = base.strip_prefix("http://") {
        format!("ws://{r}")
    } else {
        base.to_string()
    };
    format!("{rest}/v1/ws")
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How one connection ended.
enum Ended {
    Shutdown,
    Reconfigured,
    Closed(CloseKind, String),
    /// No AgentChat server was reached: a wrong `api_base`, or nothing answered.
    NotReached(NotReached),
}

/// Runs until `shutdown` turns true.
pub async fn run(
    params_rx: watch::Receiver<SocketParams>,
    events: mpsc::Sender<SocketEvent>,
    shutdown: watch::Receiver<bool>,
) {
    let metrics = params_rx.borrow().metrics.clone();
    Task {
        metrics,
        params_rx,
        events,
        shutdown,
        engine: Engine::new("", DEDUPE_CAPACITY),
        backoff: Backoff::default(),
        handle_known_for: None,
        reach: Reach::default(),
    }
    .run()
    .await
}

/// The socket task's lasting state: what it is told, whom it tells, and what it remembers from one
/// connection to the next.
struct Task {
    params_rx: watch::Receiver<SocketParams>,
    events: mpsc::Sender<SocketEvent>,
    shutdown: watch::Receiver<bool>,
    engine: Engine,
    backoff: Backoff,
    /// The endpoint (API base and key) the engine's own handle was learnt for.
    handle_known_for: Option<SocketParams>,
    /// What the log said about a wrong `api_base` or an outage.
    reach: Reach,
    /// The listener's metrics (the same registry whatever a reload changes).
    metrics: std::sync::Arc<super::metrics::Metrics>,
}

impl Task {
    /// Connects, reads until the connection ends, waits the delay its end calls for, and again.
    async fn run(mut self) {
        loop {
            if *self.shutdown.borrow() {
                return;
            }
            let params = self.params_rx.borrow_and_update().clone();
            self.reach.attempt(&params.api_base);
            send_state(&self.events, SocketState::Connecting, None, None).await;
            let (kind, detail, not_reached) = match self.one_connection(&params).await {
                Ended::Shutdown => return,
                // A new key or API base: connect again now, no backoff.
                Ended::Reconfigured => {
                    self.reach.reached();
                    continue;
                }
                Ended::Closed(kind, detail) => {
                    self.reach.reached();
                    (kind, detail, None)
                }
                Ended::NotReached(n) => (CloseKind::Ordinary, n.detail().to_string(), Some(n)),
            };
            self.metrics.socket_down(&kind);
            let misconfigured = matches!(not_reached, Some(NotReached::Misconfigured(_)));
            let delay = if misconfigured {
                params.misconfigured_retry
            } else {
                self.delay_after(&kind, &params)
            };
            let said = not_reached
                .as_ref()
                .is_some_and(|n| self.say_not_reached(n, &params, delay));
            self.report_down(&kind, detail, delay, said).await;
            if !self.wait_before_retry(delay, &kind, misconfigured).await {
                return;
            }
        }
    }

    /// Learns the handle if needed, connects, and reads until the connection ends.
    async fn one_connection(&mut self, params: &SocketParams) -> Ended {
        if let Err(ended) = self.learn_handle(params).await {
            return ended;
        }
        let started = Instant::now();
        let Some(connected) = or_shutdown(connect(params), &mut self.shutdown).await else {
            return Ended::Shutdown;
        };
        let ws = match connected {
            Ok(ws) => ws,
            Err(ended) => return ended,
        };
        tracing::debug!(event = %"socket_upgraded", "upgrade accepted; waiting for the first frame");
        let ended = self.read_loop(ws, params).await;
        if matches!(ended, Ended::Closed(..)) {
            self.backoff.connection_lasted(started.elapsed());
        }
        ended
    }

    /// Who am I: asked before the first connect and after every key or base change.
    async fn learn_handle(&mut self, params: &SocketParams) -> Result<(), Ended> {
        let known = self
            .handle_known_for
            .as_ref()
            .is_some_and(|p| p.same_endpoint(params));
        if known {
            return Ok(());
        }
        let Some(answer) = or_shutdown(params.api.me(), &mut self.shutdown).await else {
            return Err(Ended::Shutdown);
        };
        let handle = answer.map_err(|e| me_failed(&params.api_base, e))?;
        self.reach.reached();
        self.engine.set_own_handle(&handle);
        let _ = self.events.send(SocketEvent::Handle(handle)).await;
        self.handle_known_for = Some(params.clone());
        Ok(())
    }

    /// The delay before the next attempt (contract 3.4); a refused key is asked for again.
    fn delay_after(&mut self, kind: &CloseKind, params: &SocketParams) -> Duration {
        if *kind == CloseKind::KeyRefused {
            // The handle is asked for again with the next key.
            self.handle_known_for = None;
        }
        reconnect::delay_after(
            kind,
            &mut self.backoff,
            params.key_refused_retry,
            fastrand::f64(),
            params.backoff_scale,
        )
    }

    /// A wrong `api_base` is said once at ERROR, an outage once at WARN when it has lasted
    /// `unreachable_warn_after`; every other attempt is the ordinary INFO line of `report_down`
    /// (`reach`, docs/operating.md "When something is wrong"). True when it logged.
    fn say_not_reached(&mut self, n: &NotReached, params: &SocketParams, delay: Duration) -> bool {
        let retry_in_ms = delay.as_millis() as u64;
        match self
            .reach
            .failed(n, Instant::now(), params.unreachable_warn_after)
        {
            Say::Misconfigured => tracing::error!(
                event = %"api_base_not_agentchat",
                api_base = %params.api_base,
                retry_in_ms,
                "{}; retrying every {} s (at once on SIGHUP)",
                n.detail(),
                delay.as_secs().max(1)
            ),
            Say::LongUnreachable { for_s } => tracing::warn!(
                event = %"server_unreachable",
                api_base = %params.api_base,
                for_s,
                retry_in_ms,
                "no AgentChat server for {} now: {}; still retrying (check the network, or api_base)",
                crate::sys::time::human_secs(for_s),
                n.detail()
            ),
            Say::Again => return false,
        }
        true
    }

    /// Says why the socket is down and when it is tried again: one log line (none for the
    /// ordinary backoff when `said` already) and the state.
    async fn report_down(&self, kind: &CloseKind, mut detail: String, delay: Duration, said: bool) {
        let retry_in_ms = delay.as_millis() as u64;
        let state = match kind {
            CloseKind::KeyRefused => {
                tracing::error!(
                    event = %"key_refused",
                    retry_in_ms,
                    detail = %detail,
                    "the server refused the API key; check AGENTCHAT_API_KEY or api_key_file, then send SIGHUP (systemctl --user reload) to retry at once"
                );
                SocketState::KeyRefused
            }
            CloseKind::Budget { retry_after_s } => {
                tracing::warn!(
                    event = %"connect_budget",
                    retry_after_s = *retry_after_s,
                    retry_in_ms,
                    "connect budget exhausted; waiting as the server asked"
                );
                SocketState::Backoff
            }
            CloseKind::UpgradeRequired => {
                tracing::error!(
                    event = %"upgrade_required",
                    retry_in_ms,
                    "the server requires a newer client (close 4426); update agentchat"
                );
                SocketState::Backoff
            }
            CloseKind::Ordinary => {
                if !said {
                    tracing::info!(event = %"backoff", retry_in_ms, detail = %detail, "socket down; reconnecting after a delay");
                }
                SocketState::Backoff
            }
        };
        if detail.is_empty() {
            detail = state.as_str().to_string();
        }
        let next = SystemTime::now() + delay;
        send_state(&self.events, state, Some(next), Some(detail)).await;
    }

    /// Sleeps `delay`; false on shutdown. A reload cuts short only the wait after a refused key
    /// or a wrong `api_base`: the server's budget delay and the ordinary backoff are never
    /// undercut.
    async fn wait_before_retry(
        &mut self,
        delay: Duration,
        kind: &CloseKind,
        misconfigured: bool,
    ) -> bool {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return true,
                r = self.shutdown.changed() => {
                    if r.is_err() || *self.shutdown.borrow() { return false; }
                }
                r = self.params_rx.changed() => {
                    if r.is_err() { return false; }
                    if *kind == CloseKind::KeyRefused {
                        tracing::info!(event = %"key_retry", "configuration reloaded; retrying the key now");
                        return true;
                    }
                    if misconfigured {
                        tracing::info!(event = %"reconnect", "configuration reloaded; trying api_base again now");
                        return true;
                    }
                }
            }
        }
    }

    /// Reads frames until the socket ends, the watchdog fires, or shutdown: one burst at a time.
    async fn read_loop(&mut self, mut ws: Ws, params: &SocketParams) -> Ended {
        let mut up = false;
        let mut summary = SummaryLog::default();
        let ended = loop {
            let first = match self.next_inbound(&mut ws, params, &mut summary).await {
                Ok(msg) => msg,
                Err(ended) => break ended,
            };
            let burst = self.read_burst(&mut ws, first, &mut up).await;
            let (tally, ended) = self.settle(&mut ws, burst, params).await;
            summary.record(tally);
            if let Some(ended) = ended {
                break ended;
            }
        };
        summary.flush();
        ended
    }

    /// The next message from the server, or how the connection ended: shutdown or a new endpoint
    /// (the socket closed with 1000), the idle watchdog, a socket error or end.
    /// Logs the summary of the bursts since the last one when its time comes.
    async fn next_inbound(
        &mut self,
        ws: &mut Ws,
        params: &SocketParams,
        summary: &mut SummaryLog,
    ) -> Result<Message, Ended> {
        let idle_deadline = tokio::time::Instant::now() + params.idle_timeout;
        let next = loop {
            let summary_due = summary.due();
            tokio::select! {
                _ = sleep_until_some(summary_due) => summary.on_due(),
                r = self.shutdown.changed() => {
                    if r.is_err() || *self.shutdown.borrow() {
                        close_normal(ws).await;
                        return Err(Ended::Shutdown);
                    }
                }
                r = self.params_rx.changed() => {
                    if r.is_err() {
                        close_normal(ws).await;
                        return Err(Ended::Shutdown);
                    }
                    if !self.params_rx.borrow_and_update().same_endpoint(params) {
                        tracing::info!(event = %"reconnect", "the API base or key changed; reconnecting");
                        close_normal(ws).await;
                        return Err(Ended::Reconfigured);
                    }
                }
                n = tokio::time::timeout_at(idle_deadline, ws.next()) => break n,
            }
        };
        match next {
            Err(_) => {
                tracing::warn!(
                    event = %"watchdog_drop",
                    idle_ms = params.idle_timeout.as_millis() as u64,
                    "no inbound traffic within the idle timeout; dropping the socket"
                );
                Err(Ended::Closed(CloseKind::Ordinary, "idle watchdog".into()))
            }
            Ok(None) => Err(socket_ended()),
            Ok(Some(Err(e))) => Err(socket_error(e)),
            Ok(Some(Ok(m))) => Ok(m),
        }
    }

    /// Takes `first` and every message already there behind it (at most `MAX_BURST_FRAMES`),
    /// without waiting: a burst. `up` turns true with the first frame that is not a close.
    async fn read_burst(&mut self, ws: &mut Ws, first: Message, up: &mut bool) -> Burst {
        let mut burst = Burst::default();
        self.take(&mut burst, first, up);
        while burst.end.is_none() && burst.tally.frames < MAX_BURST_FRAMES {
            match ready_next(ws).await {
                None => break,
                Some(Some(Ok(msg))) => self.take(&mut burst, msg, up),
                Some(Some(Err(e))) => burst.end = Some(socket_error(e)),
                Some(None) => burst.end = Some(socket_ended()),
            }
        }
        burst
    }

    /// Adds one inbound message to the burst: counted, its wake and ack noted, a close noted as
    /// the burst's end.
    fn take(&mut self, burst: &mut Burst, msg: Message, up: &mut bool) {
        burst.tally.frames += 1;
        self.metrics.frame(&msg);
        if !*up && !matches!(msg, Message::Close(_)) {
            // The socket is really up: the server sent `hello.ok` or any other frame that is not a
            // close. A server over its connect budget, or refusing the key or the client, accepts
            // the upgrade and closes at once (contract 3.4, 7): that was no connect.
            *up = true;
            burst.came_up = true;
            // Each (re)connect is one wake (contract 4 step 1).
            burst.wake(WakeCause::Connected);
        }
        match msg {
            Message::Text(text) => self.take_text(burst, text.as_str()),
            Message::Close(frame) => burst.end = Some(closed_by_server(frame)),
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            Message::Binary(b) => burst.skip(b.len(), "binary"),
        }
    }

    /// One text frame: what the engine asks for it. Per-frame lines are debug; the burst's
    /// summary says the rest.
    fn take_text(&mut self, burst: &mut Burst, text: &str) {
        if text.len() > MAX_FRAME_BYTES {
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
        }
        if let Some(cause) = action.wake {
            tracing::debug!(event = %"wake", reason = %cause.label(), message_id = action.ack.as_deref(), "wake");
            burst.wake(cause);
        }
        if let Some(id) = action.ack {
            burst.acks.push(id);
        }
    }

    /// Acts on a burst: announces the connect if it came up, registers its wakes with the main
    /// loop, then writes its acks and flushes once (an ack never goes before its wake is
    /// registered, and never waits for a frame that is not there yet). `Some` when the connection
    /// ended.
    async fn settle(
        &mut self,
        ws: &mut Ws,
        mut burst: Burst,
        params: &SocketParams,
    ) -> (Tally, Option<Ended>) {
        if burst.came_up {
            tracing::info!(event = %"socket_connected", url = %ws_url(&params.api_base), "socket connected");
            self.metrics.connect_accepted();
            let _ = self.events.send(SocketEvent::Connected).await;
            send_state(&self.events, SocketState::Connected, None, None).await;
        }
        for (cause, frames) in &burst.wakes {
            burst.tally.wake(&cause.label(), *frames);
            if !self.register_wake(cause.clone(), *frames).await {
                close_normal(ws).await;
                return (burst.tally, Some(Ended::Shutdown));
            }
        }
        // After the server's close or a socket error, acks can no longer be sent: the server
        // pushes the unacked messages again on the next connect, and the dedupe memory keeps them
        // from waking twice.
        let sent = match burst.end {
            Some(_) => Ok(0),
            None => send_acks(ws, &burst.acks).await,
        };
        burst.tally.acked = *sent.as_ref().unwrap_or(&0) as u64;
        let t = &burst.tally;
        let counts = SocketEvent::Burst {
            frames: t.frames,
            skipped: t.skipped,
            acked: t.acked,
        };
        let _ = self.events.send(counts).await;
        let ended = match (burst.end, sent) {
            (Some(ended), _) => Some(ended),
            (None, Err(e)) => {
                tracing::info!(event = %"socket_closed", error = %e, "acks could not be sent");
                Some(Ended::Closed(
                    CloseKind::Ordinary,
                    format!("send failed: {e}"),
                ))
            }
            (None, Ok(_)) => None,
        };
        (burst.tally, ended)
    }

    /// Hands a wake (asked for by `frames` frames) to the main loop and waits until it is
    /// registered. False on shutdown.
    async fn register_wake(&mut self, cause: WakeCause, frames: u64) -> bool {
        let (tx, rx) = oneshot::channel();
        let wake = SocketEvent::Wake {
            cause,
            frames,
            registered: tx,
        };
        if self.events.send(wake).await.is_err() {
            return false;
        }
        tokio::select! {
            r = rx => r.is_ok(),
            _ = self.shutdown.wait_for(|s| *s) => false,
        }
    }
}

/// The most frames read before their wakes are registered and their acks sent: a server that
/// never pauses still gets its acks every this many frames.
const MAX_BURST_FRAMES: u64 = 256;

/// One read burst: the messages that were already there back to back, what they asked for, and
/// how the connection ended if it did.
#[derive(Default)]
struct Burst {
    tally: Tally,
    /// The socket came up in this burst (its first frame that is not a close).
    came_up: bool,
    /// Distinct wake causes in first-seen order, each with how many frames asked for it.
    wakes: Vec<(WakeCause, u64)>,
    acks: Vec<String>,
    end: Option<Ended>,
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
            tracing::warn!(event = %"frame_skipped", bytes, why = %why, "frame skipped");
        } else {
            tracing::debug!(event = %"frame_skipped", bytes, why = %why, "frame skipped");
        }
        self.tally.skipped += 1;
    }
}

/// What some frames came to: counted by type, skipped, acked, and the wakes they asked for.
#[derive(Default)]
struct Tally {
    /// Every inbound message, control frames included.
    frames: u64,
    types: TypeCounts,
    skipped: u64,
    acked: u64,
    /// Wake labels in first-seen order, each with how many frames asked for it.
    wakes: Vec<(String, u64)>,
}

impl Tally {
    fn wake(&mut self, label: &str, n: u64) {
        match self.wakes.iter_mut().find(|(l, _)| l == label) {
            Some((_, m)) => *m += n,
            None => self.wakes.push((label.to_string(), n)),
        }
    }

    fn add(&mut self, other: Tally) {
        self.frames += other.frames;
        self.types.add(&other.types);
        self.skipped += other.skipped;
        self.acked += other.acked;
        for (label, n) in other.wakes {
            self.wake(&label, n);
        }
    }

    /// One line: counts by frame type, acks and wakes. At info when something woke, was acked or
    /// skipped; heartbeats and pings alone are debug.
    fn log(&self) {
        let wakes = self
            .wakes
            .iter()
            .map(|(label, n)| format!("{label}:{n}"))
            .collect::<Vec<_>>()
            .join(",");
        let t = &self.types;
        macro_rules! summary {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    event = %"frames",
                    frames = self.frames,
                    message_new = t.message_new,
                    wake = t.wake,
                    invite = t.invite,
                    hello = t.hello,
                    heartbeat = t.heartbeat,
                    other = t.other,
                    skipped = self.skipped,
                    acked = self.acked,
                    wakes = %wakes,
                    "frames handled"
                )
            };
        }
        if self.wakes.is_empty() && self.acked == 0 && self.skipped == 0 {
            summary!(tracing::Level::DEBUG);
        } else {
            summary!(tracing::Level::INFO);
        }
    }
}

/// How often, at most, a summary line is written while frames keep coming. Short enough that
/// separate events (a message, then an invite a moment later) keep lines of their own, written as
/// they happen; long enough that a flood writes ten lines a second, not one per frame.
const SUMMARY_EVERY: Duration = Duration::from_millis(100);

/// The frames' log: a burst after a quiet `SUMMARY_EVERY` gets its line at once; the bursts that
/// follow within that time are added up and get one line when it ends. A timer runs only while
/// bursts wait to be summed up: a lone burst (a heartbeat) leaves none behind.
#[derive(Default)]
struct SummaryLog {
    pending: Tally,
    /// Until when a new burst is added up instead of logged at once: `SUMMARY_EVERY` after the
    /// last line.
    until: Option<tokio::time::Instant>,
}

impl SummaryLog {
    fn record(&mut self, burst: Tally) {
        let now = tokio::time::Instant::now();
        self.pending.add(burst);
        match self.until {
            Some(until) if now < until => {}
            // The time is up (its timer has not fired yet, or nothing was pending): this burst
            // and whatever waits get their line now.
            _ => {
                self.flush();
                self.until = Some(now + SUMMARY_EVERY);
            }
        }
    }

    /// When the bursts added up so far are logged; `None` when there are none.
    fn due(&self) -> Option<tokio::time::Instant> {
        self.until.filter(|_| self.pending.frames > 0)
    }

    /// The time is over: log what it added up.
    fn on_due(&mut self) {
        self.flush();
        self.until = Some(tokio::time::Instant::now() + SUMMARY_EVERY);
    }

    /// Logs what is pending now (the time is over, or the connection ended).
    fn flush(&mut self) {
        if self.pending.frames > 0 {
            std::mem::take(&mut self.pending).log();
        }
    }
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Text frames of a burst by type.
#[derive(Default)]
struct TypeCounts {
    message_new: u64,
    wake: u64,
    invite: u64,
    hello: u64,
    heartbeat: u64,
    /// `group.deleted`, `message.read`, `presence.update`, `typing.*`, ... and unknown types.
    other: u64,
}

impl TypeCounts {
    fn add(&mut self, o: &TypeCounts) {
        self.message_new += o.message_new;
        self.wake += o.wake;
        self.invite += o.invite;
        self.hello += o.hello;
        self.heartbeat += o.heartbeat;
        self.other += o.other;
    }

    fn count(&mut self, t: FrameType) {
        let n = match t {
            FrameType::MessageNew => &mut self.message_new,
            FrameType::Wake => &mut self.wake,
            FrameType::GroupInviteReceived => &mut self.invite,
            FrameType::HelloOk => &mut self.hello,
            FrameType::Heartbeat => &mut self.heartbeat,
            FrameType::GroupDeleted | FrameType::Other => &mut self.other,
        };
        *n += 1;
    }
}

/// The next message if it is already there (`Some`), else `None` at once. Polled with this
/// task's own waker, so a `None` leaves the socket ready for the next `next()`.
async fn ready_next(ws: &mut Ws) -> Option<Option<Result<Message, tungstenite::Error>>> {
    std::future::poll_fn(|cx| match ws.poll_next_unpin(cx) {
        Poll::Ready(next) => Poll::Ready(Some(next)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// Writes every ack and flushes once; how many were sent.
async fn send_acks(ws: &mut Ws, ids: &[String]) -> Result<usize, tungstenite::Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    for id in ids {
        let frame = crate::core::frames::ack_frame(id);
        ws.feed(Message::Text(frame.into())).await?;
    }
    ws.flush().await?;
    if tracing::enabled!(tracing::Level::DEBUG) {
        for id in ids {
            tracing::debug!(event = %"ack", message_id = %id, "acked");
        }
    }
    Ok(ids.len())
}

fn socket_ended() -> Ended {
    tracing::info!(
        event = %"socket_closed",
        code = 1006u16,
        "socket ended without a close frame"
    );
    Ended::Closed(CloseKind::Ordinary, "socket ended".into())
}

fn socket_error(e: tungstenite::Error) -> Ended {
    tracing::info!(event = %"socket_closed", error = %e, "socket error");
    Ended::Closed(CloseKind::Ordinary, format!("socket error: {e}"))
}

/// `GET /v1/agents/me` failed: a refused key, a wrong `api_base`, or an outage.
fn me_failed(api_base: &str, e: ApiError) -> Ended {
    match e {
        ApiError::Refused(status) => Ended::Closed(
            CloseKind::KeyRefused,
            format!("GET /v1/agents/me answered HTTP {status}"),
        ),
        e => Ended::NotReached(NotReached::from_api(api_base, &e)),
    }
}

/// The server's close frame (none: 1005), logged and classified (contract 3.4).
fn closed_by_server(frame: Option<CloseFrame>) -> Ended {
    let (code, reason) = frame
        .map(|f| (u16::from(f.code), f.reason.to_string()))
        .unwrap_or((1005, String::new()));
    let kind = reconnect::classify_close(code, &reason);
    tracing::info!(event = %"socket_closed", code, reason = %truncate(&reason, 120), kind = kind.as_str(), "server closed the socket");
    Ended::Closed(kind, format!("closed {code} {}", truncate(&reason, 120)))
}

/// The capabilities `hello.ok` listed (`None`: a pre-v1 server listed none).
fn log_hello(caps: Option<&[String]>) {
    match caps {
        Some(c) => {
            tracing::info!(event = %"hello", capabilities = %c.join(","), "server accepted capabilities")
        }
        None => {
            tracing::info!(event = %"hello", "pre-v1 server: no capabilities listed")
        }
    }
}

async fn send_state(
    events: &mpsc::Sender<SocketEvent>,
    state: SocketState,
    next_retry_at: Option<SystemTime>,
    detail: Option<String>,
) {
    let _ = events
        .send(SocketEvent::State {
            state,
            next_retry_at,
            detail,
        })
        .await;
}

async fn connect(params: &SocketParams) -> Result<Ws, Ended> {
    let url = ws_url(&params.api_base);
    tracing::debug!(event = %"socket_connecting", url = %url, "connecting");
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| Ended::Closed(CloseKind::Ordinary, format!("bad socket URL: {e}")))?;
    let h = req.headers_mut();
    let bearer = format!("Bearer {}", params.key.expose_secret());
    let Ok(auth) = tungstenite::http::HeaderValue::from_str(&bearer) else {
        return Err(Ended::Closed(
            CloseKind::KeyRefused,
            "the API key has characters a header cannot carry".into(),
        ));
    };
    h.insert(tungstenite::http::header::AUTHORIZATION, auth);
    h.insert(
        "x-agentchat-capabilities",
        tungstenite::http::HeaderValue::from_static("ack,heartbeat,rewake"),
    );
    h.insert(
        "X-AgentChat-Client",
        tungstenite::http::HeaderValue::from_static(CLIENT_NAME),
    );
    h.insert(
        "X-AgentChat-Client-Version",
        tungstenite::http::HeaderValue::from_static(CLIENT_VERSION),
    );
    let connector = crate::sys::tls::client_config().map(|tls| {
        let mut ws_tls = (*tls).clone();
        ws_tls.alpn_protocols.clear();
        tokio_tungstenite::Connector::Rustls(std::sync::Arc::new(ws_tls))
    });
    let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER_BYTES);
    let fut = tokio_tungstenite::connect_async_tls_with_config(req, Some(config), true, connector);
    match tokio::time::timeout(CONNECT_TIMEOUT, fut).await {
        Err(_) => Err(Ended::NotReached(NotReached::Unreachable(
            super::reach::unreachable_line(
                &params.api_base,
                &format!(
                    "the socket upgrade got no answer within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ),
            ),
        ))),
        Ok(Ok((ws, _resp))) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(resp))) => Err(upgrade_answered(&params.api_base, &resp)),
        Ok(Err(e)) => Err(connect_failed(&params.api_base, e)),
    }
}

/// An HTTP answer instead of the upgrade: a refused key (401, 403), the ordinary backoff (429,
/// 408), an outage (5xx), else a wrong `api_base` (a 404 page, say): `/v1/ws` always exists.
fn upgrade_answered(api_base: &str, resp: &tungstenite::http::Response<Option<Vec<u8>>>) -> Ended {
    let status = resp.status().as_u16();
    match reconnect::classify_upgrade_status(status) {
        CloseKind::KeyRefused => Ended::Closed(
            CloseKind::KeyRefused,
            format!("the upgrade was refused with HTTP {status}"),
        ),
        _ if status >= 500 => Ended::NotReached(NotReached::Unreachable(format!(
            "{api_base} answered the socket upgrade with HTTP {status}"
        ))),
        kind if status == 408 || status == 429 || !(400..500).contains(&status) => {
            Ended::Closed(kind, format!("the upgrade was answered HTTP {status}"))
        }
        _ => {
            let content_type = crate::client::content_type(resp.headers());
            let body = resp.body().as_deref().unwrap_or_default();
            let what = match crate::client::judge_answer(status, content_type, body) {
                Err(ApiError::Status { status, code }) => {
                    format!("answered HTTP {status} {code} to GET /v1/ws")
                }
                Err(e) => e.to_string(),
                Ok(()) => format!("answered HTTP {status} to GET /v1/ws"),
            };
            Ended::NotReached(NotReached::Misconfigured(super::reach::misconfigured_line(
                api_base, &what,
            )))
        }
    }
}

/// A connect that got no HTTP answer: nothing answered (an outage), or something else failed.
fn connect_failed(api_base: &str, e: tungstenite::Error) -> Ended {
    let unreachable = |what: String| {
        Ended::NotReached(NotReached::Unreachable(super::reach::unreachable_line(
            api_base, &what,
        )))
    };
    match e {
        tungstenite::Error::Io(io) => match crate::client::io_problem(io.kind()) {
            Some(what) => unreachable(what.to_string()),
            None => unreachable(io.to_string()),
        },
        tungstenite::Error::Tls(t) => unreachable(format!("the TLS handshake failed: {t}")),
        e => Ended::Closed(CloseKind::Ordinary, format!("connect failed: {e}")),
    }
}

/// `--once`: connects, handles the frames that arrive within `settle` (acking pushed messages:
/// the cycle that follows reads the same tray), then closes with 1000. Returns the handle.
pub async fn connect_once(params: &SocketParams, settle: Duration) -> Result<String, String> {
    let handle = params.api.me().await.map_err(|e| match e {
        ApiError::Refused(s) => format!("the server refused the API key (HTTP {s})"),
        other => NotReached::from_api(&params.api_base, &other)
            .detail()
            .to_string(),
    })?;
    let mut engine = Engine::new(&handle, DEDUPE_CAPACITY);
    let mut ws = connect(params).await.map_err(|ended| match ended {
        Ended::Closed(CloseKind::KeyRefused, d) => format!("the server refused the API key: {d}"),
        Ended::Closed(_, d) => d,
        Ended::NotReached(n) => n.detail().to_string(),
        Ended::Shutdown | Ended::Reconfigured => "stopped".to_string(),
    })?;
    tracing::info!(event = %"socket_connected", url = %ws_url(&params.api_base), "socket connected");
    let deadline = tokio::time::Instant::now() + settle;
    loop {
        let msg = match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => break,
            Ok(None) => return Err("the socket closed right after connecting".into()),
            Ok(Some(Err(e))) => return Err(format!("socket error: {e}")),
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) if t.len() <= MAX_FRAME_BYTES => {
                let action = engine.on_text(t.as_str());
                if let Some(id) = action.ack {
                    let _ = ws
                        .send(Message::Text(crate::core::frames::ack_frame(&id).into()))
                        .await;
                }
            }
            Message::Close(frame) => {
                let (code, reason) = frame
                    .map(|f| (u16::from(f.code), f.reason.to_string()))
                    .unwrap_or((1005, String::new()));
                return Err(match reconnect::classify_close(code, &reason) {
                    CloseKind::KeyRefused => {
                        format!("the server refused the API key (close {code})")
                    }
                    CloseKind::Budget { retry_after_s } => {
                        format!("connect budget exhausted; retry after {retry_after_s} s")
                    }
                    _ => format!(
                        "the server closed the socket ({code} {})",
                        truncate(&reason, 120)
                    ),
                });
            }
            _ => {}
        }
    }
    close_normal(&mut ws).await;
    Ok(handle)
}

/// Debug: the frame's type and ids, never its content.
fn log_frame(text: &str) {
    use crate::core::frames::ServerFrame;
    match ServerFrame::parse(text) {
        Ok(ServerFrame::MessageNew(m)) => {
            tracing::debug!(event = %"frame", frame_type = "message.new", message_id = %m.id, conversation_id = m.conversation_id.as_deref(), sender = m.sender.as_deref(), kind = m.kind.as_deref(), "frame")
        }
        Ok(ServerFrame::Wake { reason, step }) => {
            tracing::debug!(event = %"frame", frame_type = "wake", reason = %reason, step, "frame")
        }
        Ok(ServerFrame::GroupInviteReceived { invite_id }) => {
            tracing::debug!(event = %"frame", frame_type = "group.invite.received", invite_id = invite_id.as_deref(), "frame")
        }
        Ok(ServerFrame::HelloOk { .. }) => {
            tracing::debug!(event = %"frame", frame_type = "hello.ok", "frame")
        }
        Ok(ServerFrame::GroupDeleted) => {
            tracing::debug!(event = %"frame", frame_type = "group.deleted", "frame")
        }
        Ok(ServerFrame::Heartbeat) => {
            tracing::debug!(event = %"frame", frame_type = "heartbeat", "frame")
        }
        Ok(ServerFrame::Other { kind }) => {
            tracing::debug!(event = %"frame", frame_type = %truncate(&kind, 64), "frame")
        }
        Err(_) => {}
    }
}

/// Runs `fut` unless shutdown comes first (`None`): a hanging server never delays a stop.
async fn or_shutdown<T>(
    fut: impl std::future::Future<Output = T>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<T> {
    tokio::select! {
        v = fut => Some(v),
        _ = shutdown.wait_for(|s| *s) => None,
    }
}

async fn close_normal(ws: &mut Ws) {
    let frame = CloseFrame {
        code: CloseCode::Normal,
        reason: "listener stopping".into(),
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(Some(frame))).await;
    // Drain until the server's close answer so the close handshake completes.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(n: u64) -> Tally {
        Tally {
            frames: n,
            ..Tally::default()
        }
    }

    /// A lone burst is logged at once and arms no timer; bursts within `SUMMARY_EVERY` wait for
    /// one line, which the timer writes, or the first burst after the time is up if that comes
    /// first: nothing pending is ever left behind a later line.
    #[tokio::test(start_paused = true)]
    async fn the_summary_log_sums_bursts_up_and_times_only_what_waits() {
        let mut log = SummaryLog::default();
        log.record(frames(1));
        assert_eq!((log.pending.frames, log.due()), (0, None), "a lone burst");
        log.record(frames(2));
        log.record(frames(3));
        assert_eq!(log.pending.frames, 5);
        let due = log.due().expect("a timer while bursts wait");
        tokio::time::advance(SUMMARY_EVERY).await;
        assert!(tokio::time::Instant::now() >= due);
        // The timer has not fired yet: the next burst takes what waits with it.
        log.record(frames(4));
        assert_eq!((log.pending.frames, log.due()), (0, None));
        log.record(frames(5));
        tokio::time::advance(SUMMARY_EVERY).await;
        log.on_due();
        assert_eq!((log.pending.frames, log.due()), (0, None));
    }

    #[test]
    fn ws_url_follows_the_api_base_scheme() {
        assert_eq!(
            ws_url("https://api.agentchat.me"),
            "wss://api.agentchat.me/v1/ws"
        );
        assert_eq!(ws_url("http://127.0.0.1:9/"), "ws://127.0.0.1:9/v1/ws");
        assert_eq!(ws_url("http://h/prefix"), "ws://h/prefix/v1/ws");
    }
}

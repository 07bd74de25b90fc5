//! The socket task (contract 3.4; docs/operating.md): connects with the Bearer key and `ack,heartbeat,rewake`, drives
//! `core::engine` with every frame, hands wakes to the main loop and acks once the main loop has
//! registered them, drops a silent socket, and reconnects after the delay `core::reconnect` names.
//! It runs apart from cycles, so a long run never delays frames, acks or heartbeats. It never
//! ends because of the network; only shutdown ends it.

mod dial;
mod proxy;
mod read;
mod summary;

use crate::log_events;
use dial::connect;
pub use dial::connect_once;

use super::reach::{NotReached, Reach, Say};
use crate::client::{Api, ApiError};
use crate::core::engine::{Engine, WakeCause};
use crate::core::reconnect::{self, Backoff, CloseKind};
use secrecy::{ExposeSecret, SecretString};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};

pub use read::MAX_FRAME_BYTES;
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
    pub scale: crate::config::TestTimeScale,
    /// How long nothing may answer before the log says so at WARN (`reach`).
    pub unreachable_warn_after: Duration,
    /// The wait between attempts while `api_base` answers as something other than AgentChat.
    pub misconfigured_retry: Duration,
    /// The listener's metrics (a no-op registry for `--once`).
    pub metrics: std::sync::Arc<super::metrics::Metrics>,
    /// The process's connect pacer (`listen::pacer`): every attempt passes it first, so all the
    /// profiles of one process stay under the per-IP connect budget (contract 3.4).
    pub pacer: super::pacer::Pacer,
}

impl SocketParams {
    /// The socket's parameters for `settings` and its key and client: the one place the test
    /// time scale (`settings.time_scale`) divides the socket's own timers.
    pub fn new(
        settings: &crate::config::Settings,
        key: SecretString,
        api: Api,
        metrics: std::sync::Arc<super::metrics::Metrics>,
        pacer: super::pacer::Pacer,
    ) -> SocketParams {
        let scale = settings.time_scale;
        SocketParams {
            api_base: settings.api_base.clone(),
            key,
            api,
            idle_timeout: settings.listen.idle_timeout,
            key_refused_retry: scale.apply(reconnect::KEY_REFUSED_RETRY),
            scale,
            unreachable_warn_after: scale.apply(super::reach::UNREACHABLE_WARN_AFTER),
            misconfigured_retry: scale.apply(super::reach::MISCONFIGURED_RETRY),
            metrics,
            pacer,
        }
    }

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
enum ConnectionEnd {
    Shutdown,
    Reconfigured,
    Closed(CloseKind, String),
    /// An HTTP `429` (on `GET /v1/agents/me` or the upgrade): the ordinary backoff, and never
    /// less than its `Retry-After` (at most an hour).
    Throttled(Duration, String),
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
        server_wait: None,
        clocks: reconnect::ClockWatch::new(wall_ms(), 0),
        origin: Instant::now(),
        record: reconnect::SocketRecord::default(),
        up_since: None,
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
    /// The wait a `429` on `GET /v1/agents/me` asked for (`Retry-After`), for the next delay.
    server_wait: Option<Duration>,
    /// The wall and monotonic clocks at the last look, to tell a sleep (`read`).
    clocks: reconnect::ClockWatch,
    /// The monotonic clock's zero for `clocks`.
    origin: Instant,
    /// What the current connection showed so far (`read`), for `Backoff::socket_ended`.
    record: reconnect::SocketRecord,
    /// When the current connection came up (its first frame that is not a close).
    up_since: Option<Instant>,
}

impl Task {
    /// Looks at both clocks: the time no timer saw when the machine slept since the last look.
    fn look_at_clocks(&mut self) -> Option<Duration> {
        let mono_ms = self.origin.elapsed().as_millis().min(u128::from(u64::MAX)) as u64;
        self.clocks.look(wall_ms(), mono_ms)
    }

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
                ConnectionEnd::Shutdown => return,
                // A new key or API base: connect again now, no backoff.
                ConnectionEnd::Reconfigured => {
                    self.reach.reached();
                    continue;
                }
                ConnectionEnd::Closed(kind, detail) => {
                    self.reach.reached();
                    (kind, detail, None)
                }
                // The server answered: it is there, and asked for a wait of its own.
                ConnectionEnd::Throttled(wait, detail) => {
                    self.reach.reached();
                    self.server_wait = Some(wait);
                    (CloseKind::Ordinary, detail, None)
                }
                ConnectionEnd::NotReached(n) => {
                    (CloseKind::Ordinary, n.detail().to_string(), Some(n))
                }
            };
            self.metrics.socket_down(&kind);
            let misconfigured = matches!(not_reached, Some(NotReached::Misconfigured(_)));
            let delay = if misconfigured {
                params.misconfigured_retry
            } else {
                self.delay_after(&kind, &params)
            };
            // A `429` asked for a wait of its own (`Retry-After`, at most an hour): never less.
            let delay = delay.max(self.server_wait.take().unwrap_or_default());
            let said = not_reached
                .as_ref()
                .is_some_and(|n| self.say_not_reached(n, &params, delay));
            self.report_down(&kind, detail, delay, said).await;
            if !self.wait_before_retry(delay, &kind, misconfigured).await {
                return;
            }
        }
    }

    /// Learns the handle if needed, passes the pacer, connects, and reads until the connection
    /// ends. Every socket attempt passes the pacer right before it dials (so nothing between the
    /// two bunches attempts), after the delay its last end called for (the ordinary backoff, a
    /// refused key's retry, a `1013`'s `retry_after`), never instead of it.
    async fn one_connection(&mut self, params: &SocketParams) -> ConnectionEnd {
        if let Err(ended) = self.learn_handle(params).await {
            return ended;
        }
        if or_shutdown(params.pacer.admit(), &mut self.shutdown)
            .await
            .is_none()
        {
            return ConnectionEnd::Shutdown;
        }
        let Some(connected) = or_shutdown(Box::pin(connect(params)), &mut self.shutdown).await
        else {
            return ConnectionEnd::Shutdown;
        };
        let ws = match connected {
            Ok(ws) => ws,
            Err(ended) => return ended,
        };
        tracing::debug!(event = %log_events::SOCKET_UPGRADED, "upgrade accepted; waiting for the first frame");
        self.record = reconnect::SocketRecord::default();
        self.up_since = None;
        let ended = self.read_loop(ws, params).await;
        self.record.up_for = self.up_since.map(|t| t.elapsed()).unwrap_or_default();
        // Only a socket that proved itself resets the delays (issue 29 item 3).
        self.backoff
            .socket_ended(&self.record, params.scale.factor());
        ended
    }

    /// Who am I: asked before the first connect and after every key or base change.
    async fn learn_handle(&mut self, params: &SocketParams) -> Result<(), ConnectionEnd> {
        let known = self
            .handle_known_for
            .as_ref()
            .is_some_and(|p| p.same_endpoint(params));
        if known {
            return Ok(());
        }
        let Some(answer) = or_shutdown(params.api.me(), &mut self.shutdown).await else {
            return Err(ConnectionEnd::Shutdown);
        };
        let handle = answer.map_err(|e| me_failed(&params.api_base, e))?;
        self.reach.reached();
        // REST accepting the key resets no delay: a socket that refuses it (`1008` right after
        // the upgrade) keeps its growing retry until a socket proves itself (issue 29 item 3).
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
            params.scale.factor(),
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
                event = %log_events::API_BASE_NOT_AGENTCHAT,
                api_base = %params.api_base,
                retry_in_ms,
                "{}; retrying every {} s (at once on SIGHUP)",
                n.detail(),
                delay.as_secs().max(1)
            ),
            Say::LongUnreachable { for_s } => tracing::warn!(
                event = %log_events::SERVER_UNREACHABLE,
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
            // ERROR at the first refusal of a run; the retries after it (seconds growing to
            // 10 min, `core::reconnect::Backoff::next_key_delay`) say it again at INFO.
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
            // every 15-30 min (`core::reconnect::UPGRADE_RECHECK`), at once on reload.
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
        };
        if detail.is_empty() {
            detail = state.as_str().to_string();
        }
        let next = SystemTime::now() + delay;
        send_state(&self.events, state, Some(next), Some(detail)).await;
    }

    /// Sleeps `delay`; false on shutdown. A reload cuts short only the wait after a refused key,
    /// a `4426` or a wrong `api_base`: the server's budget delay and the ordinary backoff are
    /// never undercut. The clocks are looked at as during an idle socket (`read`): time the
    /// machine slept counts as waited (`core::reconnect::left_after_sleep`), so a sleep during
    /// the wait brings the attempt right after the wake, not a whole delay later.
    async fn wait_before_retry(
        &mut self,
        delay: Duration,
        kind: &CloseKind,
        misconfigured: bool,
    ) -> bool {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        self.look_at_clocks();
        loop {
            let look_at = tokio::time::Instant::now() + read::CLOCK_LOOK_EVERY;
            tokio::select! {
                _ = &mut sleep => return true,
                _ = tokio::time::sleep_until(look_at) => {
                    if let Some(unseen) = self.look_at_clocks() {
                        let now = tokio::time::Instant::now();
                        let left = reconnect::left_after_sleep(sleep.deadline().saturating_duration_since(now), unseen);
                        tracing::info!(
                            event = %log_events::CLOCK_JUMP,
                            unseen_ms = unseen.as_millis() as u64,
                            retry_in_ms = left.as_millis() as u64,
                            "the wall clock moved {} s more than the monotonic clock (the machine slept?); that time counts as waited",
                            unseen.as_secs()
                        );
                        sleep.as_mut().reset(now + left);
                    }
                }
                r = self.shutdown.changed() => {
                    if r.is_err() || *self.shutdown.borrow() { return false; }
                }
                r = self.params_rx.changed() => {
                    if r.is_err() { return false; }
                    if *kind == CloseKind::UpgradeRequired {
                        tracing::info!(event = %log_events::RECONNECT, "configuration reloaded; checking the socket again now");
                        return true;
                    }
                    if *kind == CloseKind::KeyRefused {
                        tracing::info!(event = %log_events::KEY_RETRY, "configuration reloaded; retrying the key now");
                        return true;
                    }
                    if misconfigured {
                        tracing::info!(event = %log_events::RECONNECT, "configuration reloaded; trying api_base again now");
                        return true;
                    }
                }
            }
        }
    }
}

/// `GET /v1/agents/me` failed: a refused key, a wrong `api_base`, or an outage.
fn me_failed(api_base: &str, e: ApiError) -> ConnectionEnd {
    match e {
        ApiError::Refused(status) => ConnectionEnd::Closed(
            CloseKind::KeyRefused,
            format!("GET /v1/agents/me answered HTTP {status}"),
        ),
        // The server answered: it is there, and asked for a wait (`Task::server_wait`).
        ApiError::RateLimited(wait) => ConnectionEnd::Throttled(
            wait,
            format!(
                "GET /v1/agents/me answered HTTP 429; retry after {} s",
                wait.as_secs_f64().ceil() as u64
            ),
        ),
        // Contract 7: switched off for good; the same stopped state as a `4426`.
        e @ ApiError::Removed { .. } => {
            ConnectionEnd::Closed(CloseKind::UpgradeRequired, e.to_string())
        }
        e => ConnectionEnd::NotReached(NotReached::from_api(api_base, &e)),
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

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The wall clock in Unix milliseconds (`ClockWatch`).
fn wall_ms() -> u64 {
    crate::sys::time::unix_ms(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

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

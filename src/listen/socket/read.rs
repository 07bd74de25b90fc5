//! Reading one connection: frames in bursts, their wakes registered with the main loop, then
//! their acks (contract 3.4, 4 step 1).

use super::summary::{SummaryLog, Tally};
use super::{
    ConnectionEnd, SocketEvent, SocketParams, SocketState, Task, Ws, send_state, truncate, ws_url,
};
use crate::core::engine::WakeCause;
use crate::core::reconnect::{self, CloseKind};
use crate::log_events;
use futures_util::{SinkExt, StreamExt};
use std::task::Poll;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::{
    self, Message, protocol::CloseFrame, protocol::frame::coding::CloseCode,
};

pub use crate::core::frames::MAX_FRAME_BYTES;
/// How often, at most, a quiet socket compares the wall clock with the monotonic one
/// (`core::reconnect::ClockWatch`): a sleep is seen within this much after the wake.
pub(super) const CLOCK_LOOK_EVERY: Duration = Duration::from_secs(10);
/// How long a probed socket has to answer (a pong, or any frame) after a clock jump.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

impl Task {
    /// Reads frames until the socket ends, the watchdog fires, or shutdown: one burst at a time.
    pub(super) async fn read_loop(&mut self, mut ws: Ws, params: &SocketParams) -> ConnectionEnd {
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
    ) -> Result<Message, ConnectionEnd> {
        let mut idle_deadline = tokio::time::Instant::now() + params.idle_timeout;
        let mut probing = false;
        let next = loop {
            let summary_due = summary.due();
            let look_at = tokio::time::Instant::now() + CLOCK_LOOK_EVERY;
            tokio::select! {
                _ = crate::sys::wait::until(summary_due) => summary.on_due(),
                // The watchdog's timer runs on the monotonic clock, which stands still while the
                // machine sleeps: a wall clock that ran further means a socket to probe now.
                _ = tokio::time::sleep_until(look_at), if !probing => {
                    if let Some(unseen) = self.look_at_clocks() {
                        tracing::info!(
                            event = %log_events::CLOCK_JUMP,
                            unseen_ms = unseen.as_millis() as u64,
                            probe_ms = PROBE_TIMEOUT.as_millis() as u64,
                            "the wall clock moved {} s more than the monotonic clock (the machine slept?); probing the socket",
                            unseen.as_secs()
                        );
                        if let Err(e) = ws.send(Message::Ping(Vec::new().into())).await {
                            return Err(socket_error(e));
                        }
                        probing = true;
                        idle_deadline = idle_deadline.min(tokio::time::Instant::now() + PROBE_TIMEOUT);
                    }
                }
                r = self.shutdown.changed() => {
                    if r.is_err() || *self.shutdown.borrow() {
                        close_normal(ws).await;
                        return Err(ConnectionEnd::Shutdown);
                    }
                }
                r = self.params_rx.changed() => {
                    if r.is_err() {
                        close_normal(ws).await;
                        return Err(ConnectionEnd::Shutdown);
                    }
                    if !self.params_rx.borrow_and_update().same_endpoint(params) {
                        tracing::info!(event = %log_events::RECONNECT, "the API base or key changed; reconnecting");
                        close_normal(ws).await;
                        return Err(ConnectionEnd::Reconfigured);
                    }
                }
                n = tokio::time::timeout_at(idle_deadline, ws.next()) => break n,
            }
        };
        match next {
            Err(_) if probing => {
                tracing::warn!(
                    event = %log_events::WATCHDOG_DROP,
                    probe_ms = PROBE_TIMEOUT.as_millis() as u64,
                    "no answer to the probe after a clock jump; dropping the socket"
                );
                Err(ConnectionEnd::Closed(
                    CloseKind::Ordinary,
                    "no answer to the probe after a clock jump".into(),
                ))
            }
            Err(_) => {
                tracing::warn!(
                    event = %log_events::WATCHDOG_DROP,
                    idle_ms = params.idle_timeout.as_millis() as u64,
                    "no inbound traffic within the idle timeout; dropping the socket"
                );
                Err(ConnectionEnd::Closed(
                    CloseKind::Ordinary,
                    "idle watchdog".into(),
                ))
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
            self.record.came_up = true;
            self.up_since = Some(std::time::Instant::now());
            // Each (re)connect is one wake (contract 4 step 1).
            burst.wake(WakeCause::Connected);
        } else if *up && !matches!(msg, Message::Close(_)) {
            // A frame after the first: the socket proved itself (`core::reconnect::SocketRecord`).
            self.record.frames_after_first += 1;
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
            tracing::debug!(event = %log_events::WAKE, reason = %cause.label(), message_id = action.ack.as_deref(), "wake");
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
    ) -> (Tally, Option<ConnectionEnd>) {
        if burst.came_up {
            tracing::info!(event = %log_events::SOCKET_CONNECTED, url = %ws_url(&params.api_base), "socket connected");
            self.metrics.connect_accepted();
            let _ = self.events.send(SocketEvent::Connected).await;
            send_state(&self.events, SocketState::Connected, None, None).await;
        }
        for (cause, frames) in &burst.wakes {
            burst.tally.wake(&cause.label(), *frames);
            if !self.register_wake(cause.clone(), *frames).await {
                close_normal(ws).await;
                return (burst.tally, Some(ConnectionEnd::Shutdown));
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
                tracing::info!(event = %log_events::SOCKET_CLOSED, error = %e, "acks could not be sent");
                Some(ConnectionEnd::Closed(
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
    end: Option<ConnectionEnd>,
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
            tracing::debug!(event = %log_events::ACK, message_id = %id, "acked");
        }
    }
    Ok(ids.len())
}

fn socket_ended() -> ConnectionEnd {
    tracing::info!(
        event = %log_events::SOCKET_CLOSED,
        code = 1006u16,
        "socket ended without a close frame"
    );
    ConnectionEnd::Closed(CloseKind::Ordinary, "socket ended".into())
}

fn socket_error(e: tungstenite::Error) -> ConnectionEnd {
    tracing::info!(event = %log_events::SOCKET_CLOSED, error = %e, "socket error");
    ConnectionEnd::Closed(CloseKind::Ordinary, format!("socket error: {e}"))
}

/// The server's close frame (none: 1005), logged and classified (contract 3.4).
fn closed_by_server(frame: Option<CloseFrame>) -> ConnectionEnd {
    let (code, reason) = frame
        .map(|f| (u16::from(f.code), f.reason.to_string()))
        .unwrap_or((1005, String::new()));
    let kind = reconnect::classify_close(code, &reason);
    tracing::info!(event = %log_events::SOCKET_CLOSED, code, reason = %truncate(&reason, 120), kind = kind.as_str(), "server closed the socket");
    ConnectionEnd::Closed(kind, format!("closed {code} {}", truncate(&reason, 120)))
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
    use crate::core::frames::ServerFrame;
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

pub(super) async fn close_normal(ws: &mut Ws) {
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

#[cfg(test)]
mod size_probe {
    use super::super::*;

    /// The socket task's future is allocated once per profile for the profile's whole life, at
    /// the size of its largest state: the dial (the upgrade, TLS, a proxy tunnel) is boxed while
    /// it runs, so an idle connected profile does not hold its 11 KB. Prints the sizes
    /// (`--nocapture`).
    #[tokio::test]
    async fn the_socket_tasks_lasting_future_is_smaller_than_one_dial() {
        crate::sys::tls::install_crypto_provider();
        let api = Api::new("http://127.0.0.1:1", SecretString::from("k".to_string())).unwrap();
        let params = SocketParams {
            api_base: "http://127.0.0.1:1".into(),
            key: SecretString::from("k".to_string()),
            api,
            idle_timeout: Duration::from_secs(1),
            key_refused_retry: Duration::from_secs(1),
            scale: crate::config::TestTimeScale::Off,
            unreachable_warn_after: Duration::from_secs(1),
            misconfigured_retry: Duration::from_secs(1),
            metrics: crate::listen::metrics::Metrics::off(),
            pacer: crate::listen::pacer::Pacer::shared(1.0),
        };
        let (_ptx, prx) = watch::channel(params.clone());
        let (_stx, srx) = watch::channel(false);
        let (etx, _erx) = mpsc::channel(4);
        let task = std::mem::size_of_val(&run(prx, etx, srx));
        let dial = std::mem::size_of_val(&dial::connect(&params));
        eprintln!("socket task future: {task} B; one dial: {dial} B");
        assert!(
            task < dial,
            "the dial is inline in the task: {task} >= {dial}"
        );
    }
}

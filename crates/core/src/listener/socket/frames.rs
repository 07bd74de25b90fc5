//! A connection's frames: each burst through `crate::engine`, its wakes registered before its
//! acks go, what the server's close says, and the lines the frames get.

use super::super::Out;
use super::super::frames_log::Tally;
use super::super::io::{Effect, InFrame, Lost};
use super::{CAPABILITIES, End, Note, Params, Phase, Socket, truncate};
use crate::engine::WakeCause;
use crate::log_events;
use crate::reconnect::{self, CloseKind};
use crate::status::SocketState;
use crate::time::Now;

impl Socket {
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
            tracing::info!(event = %log_events::SOCKET_CONNECTED, url = %super::super::ws_url(p.api_base), "socket connected");
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
        if !burst.heard.is_empty() {
            out.note(Note::Heard(std::mem::take(&mut burst.heard)));
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
        if let Some(h) = action.heard {
            burst.heard.push(h);
        }
        if let Some(cause) = action.wake {
            tracing::debug!(event = %log_events::WAKE, reason = %cause.label(), message_id = action.ack.as_deref(), "wake");
            burst.wake(cause);
        }
        if let Some(id) = action.ack {
            burst.acks.push(id);
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
    /// Its new messages as the run policy keeps them.
    heard: Vec<crate::policy::HeardMessage>,
}

impl Burst {
    pub(super) fn wake(&mut self, cause: WakeCause) {
        match self.wakes.iter_mut().find(|(c, _)| *c == cause) {
            Some((_, n)) => *n += 1,
            None => self.wakes.push((cause, 1)),
        }
    }

    /// A frame skipped unread: the burst's first says why at warn, the rest only at debug.
    pub(super) fn skip(&mut self, bytes: usize, why: &str) {
        if self.tally.skipped == 0 {
            tracing::warn!(event = %log_events::FRAME_SKIPPED, bytes, why = %why, "frame skipped");
        } else {
            tracing::debug!(event = %log_events::FRAME_SKIPPED, bytes, why = %why, "frame skipped");
        }
        self.tally.skipped += 1;
    }
}

pub(super) fn lost_end(lost: Lost) -> End {
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

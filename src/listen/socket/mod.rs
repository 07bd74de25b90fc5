//! The socket's I/O (contract 3.4): the dial (`dial`, through a proxy when one is set: `proxy`)
//! and one connection's reader, which hands each burst of frames to the listener's machine
//! (`core::listener::socket`) and writes the acks it answers with, only then reading on. Every
//! decision (when to connect, what a frame asks for, the watchdog, the delays) is the machine's;
//! this task only moves bytes.

mod dial;
mod proxy;

pub use dial::{connect, connect_once};

use crate::core::listener::{InFrame, Input, Lost};
use crate::listen::driver::Io;
use futures_util::{SinkExt, StreamExt};
use secrecy::SecretString;
use std::task::Poll;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{
    self, Message, protocol::CloseFrame, protocol::frame::coding::CloseCode,
};

/// Bytes read from the socket at a time. Frames are wakes and message envelopes, a few hundred
/// bytes to a few KiB; tungstenite's default (128 KiB, allocated and zeroed per connection) is
/// sized for bulk transfer. A larger frame still arrives whole: the buffer grows for it.
const READ_BUFFER_BYTES: usize = 8 * 1024;
/// The most frames read before their wakes are registered and their acks sent: a server that
/// never pauses still gets its acks every this many frames.
const MAX_BURST_FRAMES: usize = 256;

/// Where to dial, with which key.
#[derive(Clone)]
pub struct DialParams {
    pub api_base: String,
    pub key: SecretString,
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// What the driver tells a connection.
#[derive(Debug)]
pub enum ConnCmd {
    /// The burst's acks (possibly none): write them, flush, and read on.
    Acks(Vec<String>),
    /// A ping (after a clock jump).
    Probe,
    /// Close with 1000 and drain the server's answer.
    Close,
    /// End now, without a close.
    Drop,
}

/// One connection from dial to end: `conn` is the machine's id for it.
pub async fn run(
    params: DialParams,
    conn: u64,
    io: Io,
    mut cmds: mpsc::UnboundedReceiver<ConnCmd>,
) {
    let dialed = tokio::select! {
        // A dial that is done is reported; the machine drops an answer it no longer wants.
        biased;
        r = Box::pin(connect(&params)) => r,
        _ = cmds.recv() => return,
    };
    let mut ws = match dialed {
        Ok(ws) => ws,
        Err(e) => {
            io.send(Input::Dialed {
                conn,
                result: Err(e),
            });
            return;
        }
    };
    io.send(Input::Dialed {
        conn,
        result: Ok(()),
    });
    loop {
        let first = tokio::select! {
            // The machine's acks and closes go out before more frames are read.
            biased;
            cmd = cmds.recv() => {
                if !command(&mut ws, cmd, conn, &io).await {
                    return;
                }
                continue;
            }
            msg = ws.next() => msg,
        };
        let first = match first {
            None => {
                io.send(Input::ConnLost {
                    conn,
                    lost: Lost::Ended,
                });
                return;
            }
            Some(Err(e)) => {
                io.send(Input::ConnLost {
                    conn,
                    lost: Lost::Error(e.to_string()),
                });
                return;
            }
            Some(Ok(m)) => m,
        };
        let (frames, lost) = read_burst(&mut ws, first).await;
        let ended = lost.is_some() || matches!(frames.last(), Some(InFrame::Close(_)));
        io.send(Input::Burst { conn, frames, lost });
        if ended {
            return;
        }
        // The acks of this burst come once the machine registered its wakes.
        loop {
            match cmds.recv().await {
                Some(ConnCmd::Acks(ids)) => {
                    let sent = send_acks(&mut ws, &ids).await;
                    let failed = sent.is_err();
                    io.send(Input::AcksSent {
                        conn,
                        result: sent.map_err(|e| e.to_string()),
                    });
                    if failed {
                        return;
                    }
                    break;
                }
                cmd => {
                    if !command(&mut ws, cmd, conn, &io).await {
                        return;
                    }
                }
            }
        }
    }
}

/// A command between bursts; false when the connection ends.
async fn command(ws: &mut Ws, cmd: Option<ConnCmd>, conn: u64, io: &Io) -> bool {
    match cmd {
        Some(ConnCmd::Probe) => {
            if let Err(e) = ws.send(Message::Ping(Vec::new().into())).await {
                io.send(Input::ConnLost {
                    conn,
                    lost: Lost::Error(e.to_string()),
                });
                return false;
            }
            true
        }
        Some(ConnCmd::Acks(_)) => true,
        Some(ConnCmd::Close) | None => {
            close_normal(ws).await;
            io.send(Input::Closed { conn });
            false
        }
        Some(ConnCmd::Drop) => false,
    }
}

/// `first` and every message already there behind it (at most `MAX_BURST_FRAMES`), without
/// waiting: a burst, and how the connection was lost under it if it was.
async fn read_burst(ws: &mut Ws, first: Message) -> (Vec<InFrame>, Option<Lost>) {
    let mut frames = vec![in_frame(first)];
    let mut lost = None;
    while frames.len() < MAX_BURST_FRAMES && !matches!(frames.last(), Some(InFrame::Close(_))) {
        match ready_next(ws).await {
            None => break,
            Some(Some(Ok(msg))) => frames.push(in_frame(msg)),
            Some(Some(Err(e))) => {
                lost = Some(Lost::Error(e.to_string()));
                break;
            }
            Some(None) => {
                lost = Some(Lost::Ended);
                break;
            }
        }
    }
    (frames, lost)
}

fn in_frame(msg: Message) -> InFrame {
    match msg {
        Message::Text(t) => InFrame::Text(t.to_string()),
        Message::Binary(b) => InFrame::Binary(b.len()),
        Message::Close(frame) => {
            InFrame::Close(frame.map(|f| (u16::from(f.code), f.reason.to_string())))
        }
        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => InFrame::Control,
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
    Ok(ids.len())
}

/// Closes with 1000 and drains until the server's close answer, a few seconds at most.
pub(crate) async fn close_normal(ws: &mut Ws) {
    let frame = CloseFrame {
        code: CloseCode::Normal,
        reason: "listener stopping".into(),
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(Some(frame))).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}

//! A deliberately small scripted server, for what the sim (a faithful server) will never do:
//! push a `message.new` from the agent itself, push malformed or oversized frames, serve a tray
//! whose `you` is another agent, serve malformed tray entries, and fail single routes (`429`,
//! `500` on the tray, `503` on texts, chosen answers to invite dismiss calls). Real loopback sockets, real WebSocket handshake;
//! REST answers are fixed JSON. Everything else is tested against the sim.

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Message;

#[derive(Default)]
pub struct Shared {
    pub me: String,
    pub tray: Value,
    pub acks: Vec<String>,
    pub connects: usize,
    pub received: Vec<String>,
    /// The next this-many tray reads answer `429` with `Retry-After: retry_after_s`.
    pub inbox_429: usize,
    pub retry_after_s: u64,
    /// `/v1/texts` answers `503` (the texts cannot be had).
    pub texts_down: bool,
    /// Close codes the client sent.
    pub client_closes: Vec<u16>,
    /// When each tray read arrived (unix ms).
    pub inbox_times: Vec<u64>,
    /// Every REST request's path and query, in order.
    pub paths: Vec<String>,
    /// Every tray read answers `500` (the tray cannot be read).
    pub inbox_down: bool,
    /// Answers for the next invite dismiss calls, in order: an HTTP status and the error body's
    /// `code` (empty: no body). Once empty, a dismiss answers `200 {"dismissed": true}`.
    pub dismiss_answers: std::collections::VecDeque<(u16, &'static str)>,
    /// Every socket upgrade is accepted and closed at once with this code and reason (a server
    /// over the connect budget), and when each was (unix ms).
    pub refuse_sockets: Option<(u16, String)>,
    pub refused_at: Vec<u64>,
    /// Every socket upgrade is answered `429` with this `Retry-After` instead (something in
    /// front of the server), each noted in `refused_at`.
    pub upgrade_429: Option<String>,
    /// REST paths (prefixes) answered `200` with a chunked JSON body that never ends (a hostile
    /// or broken server), and how many body bytes the fake managed to send on them.
    pub endless: Vec<&'static str>,
    pub endless_sent: u64,
}

pub struct Fake {
    pub api_base: String,
    pub shared: Arc<Mutex<Shared>>,
    frames: broadcast::Sender<Message>,
    task: tokio::task::JoinHandle<()>,
}

pub const WAKE_TEXT: &str = "FAKE wake instruction";
pub const INVITE_TEXT: &str = "FAKE invite prompt";

impl Fake {
    /// `me`: the bare handle `/v1/agents/me` answers; `tray`: what `/v1/inbox` answers.
    pub async fn start(me: &str, tray: Value) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Mutex::new(Shared {
            me: me.to_string(),
            tray,
            ..Default::default()
        }));
        let (frames, _) = broadcast::channel(64);
        let s2 = shared.clone();
        let f2 = frames.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let s = s2.clone();
                let f = f2.subscribe();
                tokio::spawn(serve(stream, s, f));
            }
        });
        Fake {
            api_base: format!("http://{addr}"),
            shared,
            frames,
            task,
        }
    }

    /// Pushes a frame to every open socket.
    pub fn push(&self, m: Message) {
        let _ = self.frames.send(m);
    }

    pub fn push_text(&self, t: &str) {
        self.push(Message::Text(t.to_string().into()));
    }

    /// Pushes a `wake` frame with `reason`.
    pub fn wake(&self, reason: &str) {
        self.push_text(&json!({"type": "wake", "payload": {"reason": reason}}).to_string());
    }

    pub fn acks(&self) -> Vec<String> {
        self.shared.lock().unwrap().acks.clone()
    }

    pub fn connects(&self) -> usize {
        self.shared.lock().unwrap().connects
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn message_new(id: &str, sender: &str, kind: &str) -> String {
    json!({"type": "message.new", "payload": {
        "id": id, "conversation_id": "conv_fake", "sender": sender, "type": kind,
        "content": {"text": "body"}, "seq": 1, "created_at": "2026-11-30T00:00:00.000Z"
    }})
    .to_string()
}

async fn serve(
    stream: TcpStream,
    shared: Arc<Mutex<Shared>>,
    frames: broadcast::Receiver<Message>,
) {
    let mut head = [0u8; 4096];
    let n = stream.peek(&mut head).await.unwrap_or(0);
    let text = String::from_utf8_lossy(&head[..n]).to_ascii_lowercase();
    let upgrade_429 = shared.lock().unwrap().upgrade_429.clone();
    if let (true, Some(retry_after)) = (text.contains("upgrade: websocket"), upgrade_429) {
        let mut stream = stream;
        shared.lock().unwrap().refused_at.push(super::now_ms());
        let resp = format!(
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: {retry_after}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        let _ = stream.write_all(resp.as_bytes()).await;
        let _ = stream.shutdown().await;
    } else if text.contains("upgrade: websocket") {
        serve_ws(stream, shared, frames).await;
    } else {
        serve_rest(stream, shared).await;
    }
}

async fn serve_ws(
    stream: TcpStream,
    shared: Arc<Mutex<Shared>>,
    mut frames: broadcast::Receiver<Message>,
) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let refusal = {
        let mut s = shared.lock().unwrap();
        let refusal = s.refuse_sockets.clone();
        match refusal {
            Some(_) => s.refused_at.push(super::now_ms()),
            None => s.connects += 1,
        }
        refusal
    };
    if let Some((code, reason)) = refusal {
        use tokio_tungstenite::tungstenite::protocol::CloseFrame;
        let frame = CloseFrame {
            code: code.into(),
            reason: reason.into(),
        };
        let _ = ws.close(Some(frame)).await;
        return;
    }
    let hello = json!({"type": "hello.ok", "capabilities": ["ack", "heartbeat", "rewake"]});
    let _ = ws.send(Message::Text(hello.to_string().into())).await;
    loop {
        tokio::select! {
            f = frames.recv() => match f {
                Ok(m) => { if ws.send(m).await.is_err() { return; } }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return,
            },
            m = ws.next() => match m {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                    let mut s = shared.lock().unwrap();
                    s.received.push(t.to_string());
                    if v["type"] == "ack" {
                        s.acks.push(v["message_id"].as_str().unwrap_or("").to_string());
                    }
                }
                Some(Ok(Message::Close(f))) => {
                    let code = f.map(|f| u16::from(f.code)).unwrap_or(1005);
                    shared.lock().unwrap().client_closes.push(code);
                    let _ = ws.close(None).await;
                    return;
                }
                Some(Ok(_)) => {}
                _ => return,
            },
        }
    }
}

async fn serve_rest(mut stream: TcpStream, shared: Arc<Mutex<Shared>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // Requests here carry no body the fake needs; read the head only.
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let limited = {
        let mut s = shared.lock().unwrap();
        s.paths.push(path.clone());
        if path.starts_with("/v1/inbox") {
            s.inbox_times.push(super::now_ms());
            if s.inbox_429 > 0 {
                s.inbox_429 -= 1;
                Some(s.retry_after_s)
            } else {
                None
            }
        } else {
            None
        }
    };
    let endless = {
        let s = shared.lock().unwrap();
        s.endless.iter().any(|p| path.starts_with(p))
    };
    if endless {
        serve_endless(stream, shared).await;
        return;
    }
    let down = {
        let s = shared.lock().unwrap();
        (path.starts_with("/v1/texts") && s.texts_down)
            || (path.starts_with("/v1/inbox") && s.inbox_down)
    };
    if down {
        let body = r#"{"code":"INTERNAL_ERROR","message":"down"}"#;
        let resp = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(resp.as_bytes()).await;
        let _ = stream.shutdown().await;
        return;
    }
    let dismiss_answer = if path.starts_with("/v1/groups/invites/") && path.ends_with("/dismiss") {
        shared.lock().unwrap().dismiss_answers.pop_front()
    } else {
        None
    };
    if let Some((status, code)) = dismiss_answer {
        let body = if code.is_empty() {
            String::new()
        } else {
            json!({"code": code, "message": "scripted"}).to_string()
        };
        let resp = format!(
            "HTTP/1.1 {status} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(resp.as_bytes()).await;
        let _ = stream.shutdown().await;
        return;
    }
    if let Some(secs) = limited {
        let body = r#"{"code":"RATE_LIMITED","message":"slow down"}"#;
        let resp = format!(
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: {secs}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(resp.as_bytes()).await;
        let _ = stream.shutdown().await;
        return;
    }
    let body = {
        let s = shared.lock().unwrap();
        if path.starts_with("/v1/agents/me") {
            json!({"handle": s.me})
        } else if path.starts_with("/v1/inbox") {
            s.tray.clone()
        } else if path.starts_with("/v1/groups/invites/") {
            json!({"dismissed": true})
        } else if path.starts_with("/v1/texts") {
            json!({"version": "1", "wake_instruction": WAKE_TEXT, "invite_prompt": INVITE_TEXT})
        } else {
            json!({"ok": true})
        }
    }
    .to_string();
    let resp = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
        body.len(),
        body
    );
    let _ = stream.write_all(resp.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// `200` with a chunked body that starts like JSON and never ends, until the client hangs up.
async fn serve_endless(mut stream: TcpStream, shared: Arc<Mutex<Shared>>) {
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    if stream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let first = b"{\"handle\":\"";
    let filler = vec![b'a'; 64 * 1024];
    let mut chunk: &[u8] = first;
    loop {
        let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
        if stream.write_all(&framed).await.is_err() {
            return;
        }
        shared.lock().unwrap().endless_sent += chunk.len() as u64;
        chunk = &filler;
    }
}

/// A v1 tray for `you` with no card and one pending invite `invite_id` (complete list).
pub fn invite_tray(you: &str, invite_id: &str) -> Value {
    let mut t = tray(you, 0);
    t["invites"] = json!([{"invite_id": invite_id, "group": {"id": "grp_fake", "name": "crew"}}]);
    t
}

/// A v1 tray for `you` with `cards` unmuted cards.
pub fn tray(you: &str, cards: usize) -> Value {
    let convs: Vec<Value> = (0..cards)
        .map(|i| json!({"conversation_id": format!("conv_{i}"), "muted": false, "unread": 1}))
        .collect();
    json!({"version": 1, "you": you, "conversations": convs, "truncated": false,
           "invites": [], "invites_truncated": false, "waited_ms": null})
}

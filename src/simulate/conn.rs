//! A socket as the transport sees it: the upgrade reaching the server (its budgets and key,
//! `crate::sim::ws::admission`), the store's entry with an in-memory channel as its sender, the
//! server's heartbeat, and the frames on their way to the listener, each after the connection's
//! latency and in order. Like the real reader (`listen::socket`), a connection hands the
//! listener every frame that has come as one burst and reads on only once its acks are asked
//! for; acks reach the server after the latency, unless the socket is gone by then.

use super::world::{Ev, World};
use crate::core::listener::{DialError, InFrame, Input, Lost, NotReached};
use crate::sim::model::{Out, SocketEntry};
use crate::sim::ws::HEARTBEAT_MS;
use serde_json::json;
use std::collections::VecDeque;
use tokio::sync::mpsc;

/// The most frames one burst carries (`listen::socket`'s `MAX_BURST_FRAMES`).
const MAX_BURST: usize = 256;

#[derive(Debug)]
enum Item {
    Frame(InFrame),
    Lost,
}

/// One connection of a profile's, by the machine's id.
#[derive(Debug)]
pub struct Conn {
    /// The store's socket id while the server holds the socket.
    pub server_id: Option<u64>,
    rx: Option<mpsc::UnboundedReceiver<Out>>,
    /// `Dialed` was handed over: frames may follow.
    pub dialed: bool,
    inflight: VecDeque<(u64, Item)>,
    /// A burst was handed over and its acks are not sent yet.
    pub acking: bool,
    /// The machine slept under it: the server lost it, nothing comes any more.
    pub zombie: bool,
    /// Over on the listener's side.
    pub ended: bool,
    silenced: bool,
    latency: u64,
    last_arrive: u64,
    due_at: Option<u64>,
}

impl Conn {
    pub fn new(latency: u64) -> Conn {
        Conn {
            server_id: None,
            rx: None,
            dialed: false,
            inflight: VecDeque::new(),
            acking: false,
            zombie: false,
            ended: false,
            silenced: false,
            latency,
            last_arrive: 0,
            due_at: None,
        }
    }

    fn push(&mut self, t: u64, item: Item) {
        let at = (t + self.latency).max(self.last_arrive + 1);
        self.last_arrive = at;
        self.inflight.push_back((at, item));
    }

    pub fn latency(&self) -> u64 {
        self.latency
    }

    /// Alive on both sides.
    pub fn open(&self) -> bool {
        !self.ended && !self.zombie && self.server_id.is_some()
    }
}

/// The upgrade reached the server: refused (accepted and closed at once, contract 3.4), or a
/// socket of the agent's.
pub fn dial_reaches_server(w: &mut World, pid: usize, conn: u64) {
    let t = w.t;
    let Some(p) = w.profiles.get(pid) else {
        return;
    };
    if p.ended || p.conns.get(&conn).is_none_or(|c| c.ended) {
        return;
    }
    let key = p.key.clone();
    let latency = p.conns.get(&conn).map_or(10, Conn::latency);
    if w.server.faults.unreachable_until > t || w.server.faults.outage_until > t {
        let why = if w.server.faults.unreachable_until > t {
            "https://sim.agentchat.invalid is unreachable: connection refused".to_string()
        } else {
            "https://sim.agentchat.invalid answered the socket upgrade with HTTP 503".to_string()
        };
        if let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn)) {
            c.ended = true;
        }
        w.after(
            latency,
            Ev::Deliver(
                pid,
                Input::Dialed {
                    conn,
                    result: Err(DialError::NotReached(NotReached::Unreachable(why))),
                },
            ),
        );
        return;
    }
    let caps: Vec<String> = ["ack", "heartbeat", "rewake"].map(String::from).to_vec();
    let admitted = {
        let mut s = w.server.lock();
        crate::sim::ws::admission(&mut s, super::server::SIM_IP, &key, "header", &caps)
    };
    super::checks::dial_at_server(w, pid, admitted.is_ok());
    let upgrade = w
        .server
        .faults
        .upgrade_until
        .get(&pid)
        .is_some_and(|&u| u > t);
    let refusal = match admitted {
        Err(r) => Some((r.code, r.reason)),
        Ok(_) if upgrade => Some((4426, "upgrade required".to_string())),
        Ok(h) => {
            let (tx, rx) = mpsc::unbounded_channel();
            let id = {
                let mut s = w.server.lock();
                let id = s.next_socket_id();
                let entry = SocketEntry {
                    id,
                    caps: caps.iter().cloned().collect(),
                    tx,
                    silenced: false,
                    path: "header",
                    connected_at: crate::sim::clock::now_iso(),
                };
                // `hello.ok` goes before the backlog the attach queues (`sim::ws`).
                if let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn)) {
                    let hello = json!({"type": "hello.ok", "capabilities": caps}).to_string();
                    c.push(t + latency, Item::Frame(InFrame::Text(hello)));
                }
                s.attach_socket(&h, entry);
                id
            };
            if let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn)) {
                c.server_id = Some(id);
                c.rx = Some(rx);
            }
            w.server.timers_dirty = true;
            w.after(HEARTBEAT_MS, Ev::Heartbeat(pid, conn));
            None
        }
    };
    if let Some((code, reason)) = refusal
        && let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn))
    {
        c.push(
            t + latency,
            Item::Frame(InFrame::Close(Some((code, reason)))),
        );
    }
    w.after(
        latency,
        Ev::Deliver(
            pid,
            Input::Dialed {
                conn,
                result: Ok(()),
            },
        ),
    );
}

/// The server's heartbeat on a socket it still holds (contract 3.4: every 45 s).
pub fn heartbeat(w: &mut World, pid: usize, conn: u64) {
    let t = w.t;
    let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn)) else {
        return;
    };
    if !c.open() || c.silenced {
        return;
    }
    let f =
        json!({"type": "heartbeat", "payload": {"at": crate::sim::clock::now_iso()}}).to_string();
    c.push(t, Item::Frame(InFrame::Text(f)));
    w.after(HEARTBEAT_MS, Ev::Heartbeat(pid, conn));
}

/// Acks reached the server: recorded on the socket that is still there.
pub fn acks_reach_server(w: &mut World, pid: usize, conn: u64, ids: &[String]) {
    let Some(p) = w.profiles.get(pid) else {
        return;
    };
    if !p.conns.get(&conn).is_some_and(Conn::open) {
        return;
    }
    let h = p.handle.clone();
    let mut s = w.server.lock();
    for id in ids {
        s.record_ack(&h, id);
    }
}

/// The listener asked for a burst's acks: the reader writes them and reads on.
pub fn acks_sent(w: &mut World, pid: usize, conn: u64, ids: Vec<String>) {
    let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn)) else {
        return;
    };
    let open = c.open();
    let latency = c.latency;
    let n = ids.len();
    if open && !ids.is_empty() {
        w.after(latency, Ev::Acks(pid, conn, ids));
    }
    w.after(
        1,
        Ev::Deliver(
            pid,
            Input::AcksSent {
                conn,
                result: Ok(n),
            },
        ),
    );
}

/// The server lets a socket go (the listener closed or dropped it, or it is lost).
pub fn detach(w: &mut World, pid: usize, conn: u64) {
    let Some(p) = w.profiles.get_mut(pid) else {
        return;
    };
    let h = p.handle.clone();
    let Some(c) = p.conns.get_mut(&conn) else {
        return;
    };
    if let Some(id) = c.server_id.take() {
        w.server.lock().detach_socket(&h, id);
    }
    c.rx = None;
}

/// The machine sleeps: the server loses every socket (its pings go unanswered); the listener
/// hears nothing of it until it looks.
pub fn machine_sleeps(w: &mut World) {
    for pid in 0..w.profiles.len() {
        let conns: Vec<u64> = w
            .profiles
            .get(pid)
            .map(|p| p.conns.keys().copied().collect())
            .unwrap_or_default();
        for conn in conns {
            detach(w, pid, conn);
            if let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn)) {
                c.zombie = true;
                c.inflight.clear();
            }
        }
    }
}

/// The server's pushes taken into their connections' flights, and every connection that can
/// hands the listener what has come. True when something was handed over.
pub fn pump_all(w: &mut World) -> bool {
    let mut handed = false;
    for pid in 0..w.profiles.len() {
        let mut next = match w.profiles.get(pid) {
            Some(p) if !p.ended => p.conns.keys().next().copied(),
            _ => continue,
        };
        while let Some(conn) = next {
            take_pushes(w, pid, conn);
            if let Some(input) = burst(w, pid, conn) {
                w.deliver(pid, input);
                handed = true;
            }
            next = w
                .profiles
                .get(pid)
                .and_then(|p| p.conns.range(conn + 1..).next().map(|(k, _)| *k));
        }
        // Connections the listener is done with are forgotten once the server let them go.
        if let Some(p) = w.profiles.get_mut(pid)
            && p.conns.values().any(|c| c.ended && c.server_id.is_none())
        {
            p.conns.retain(|_, c| !(c.ended && c.server_id.is_none()));
        }
    }
    handed
}

fn take_pushes(w: &mut World, pid: usize, conn: u64) {
    let t = w.t;
    let mut detached = false;
    if let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn)) {
        let mut outs = Vec::new();
        if let Some(rx) = c.rx.as_mut() {
            while let Ok(out) = rx.try_recv() {
                outs.push(out);
            }
        }
        for out in outs {
            if c.silenced || c.zombie {
                continue;
            }
            match out {
                Out::Frame(f) | Out::Message { frame: f, .. } => {
                    c.push(t, Item::Frame(InFrame::Text(f)))
                }
                Out::Close(code, reason) => {
                    // The store let the socket go as it closed it.
                    c.server_id = None;
                    c.rx = None;
                    c.push(t, Item::Frame(InFrame::Close(Some((code, reason)))));
                    break;
                }
                Out::Silence => c.silenced = true,
                Out::Drop => {
                    c.push(t, Item::Lost);
                    detached = true;
                    break;
                }
            }
        }
    }
    if detached {
        detach(w, pid, conn);
    }
}

/// The burst a connection hands over now, if it can.
fn burst(w: &mut World, pid: usize, conn: u64) -> Option<Input> {
    let t = w.t;
    let c = w
        .profiles
        .get_mut(pid)
        .and_then(|p| p.conns.get_mut(&conn))?;
    if !c.dialed || c.acking || c.zombie || c.ended || c.inflight.is_empty() {
        return None;
    }
    let mut frames = Vec::new();
    let mut lost = None;
    while frames.len() < MAX_BURST {
        match c.inflight.front() {
            Some((at, _)) if *at <= t => {}
            _ => break,
        }
        let Some((_, item)) = c.inflight.pop_front() else {
            break;
        };
        match item {
            Item::Lost => {
                lost = Some(Lost::Ended);
                break;
            }
            Item::Frame(f) => {
                let close = matches!(f, InFrame::Close(_));
                frames.push(f);
                if close {
                    break;
                }
            }
        }
    }
    if let Some(&(at, _)) = c.inflight.front()
        && c.due_at.is_none_or(|d| d <= t || d > at)
    {
        c.due_at = Some(at);
        w.at(at, Ev::ConnDue);
    }
    let c = w
        .profiles
        .get_mut(pid)
        .and_then(|p| p.conns.get_mut(&conn))?;
    if frames.is_empty() {
        return lost.map(|lost| {
            c.ended = true;
            Input::ConnLost { conn, lost }
        });
    }
    let ends = lost.is_some() || matches!(frames.last(), Some(InFrame::Close(_)));
    if ends {
        c.ended = true;
    } else {
        c.acking = true;
    }
    Some(Input::Burst { conn, frames, lost })
}

/// What the transport learns as an input is handed over: the dial's answer lets frames follow,
/// a burst's acks sent let the reader read on.
pub fn on_deliver(w: &mut World, pid: usize, input: &Input) {
    let (conn, dialed) = match input {
        Input::Dialed { conn, result } => (*conn, Some(result.is_ok())),
        Input::AcksSent { conn, .. } => (*conn, None),
        _ => return,
    };
    let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn)) else {
        return;
    };
    match dialed {
        Some(true) => c.dialed = true,
        Some(false) => c.ended = true,
        None => c.acking = false,
    }
}

/// The server's pong to a probe, in order with the socket's other frames.
pub fn pong(w: &mut World, pid: usize, conn: u64) {
    let t = w.t;
    if let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn)) {
        let back = t + c.latency;
        c.push(back, Item::Frame(InFrame::Control));
    }
}

//! Each effect the machine asks for, performed as `listen::driver::effects` performs it for real:
//! a REST request or a dial goes to the server and its answer comes back after the latency, a
//! file write answers at once (a full disk fails it), a run goes to the simulated runtime. The
//! checks see each effect first. Also the trace's one line for each input and effect.

use super::conn::Conn;
use super::server::Rest;
use super::world::{Ev, World};
use crate::core::frames::ServerFrame;
use crate::core::listener::{Effect, InFrame, Input};

pub fn perform(w: &mut World, pid: usize, effect: Effect) {
    super::checks::effect(w, pid, &effect);
    let line = effect_line(&effect);
    let name = w
        .profiles
        .get(pid)
        .map(|p| p.name.clone())
        .unwrap_or_default();
    w.note(format_args!("{name} -> {line}"));
    let t = w.t;
    if matches!(
        effect,
        Effect::Dial { .. }
            | Effect::SendAcks { .. }
            | Effect::Probe { .. }
            | Effect::CloseSocket { .. }
            | Effect::DropSocket { .. }
    ) {
        w.pump = true;
    }
    match effect {
        Effect::FetchMe { req } => {
            let up = w.server.latency(t, pid, false, &mut w.rng);
            w.after(up, Ev::Rest(pid, Rest::Me { req }));
        }
        Effect::Dial { conn } => {
            let latency = 2 + w.rng.below(40);
            if let Some(p) = w.profiles.get_mut(pid) {
                p.conns.insert(conn, Conn::new(latency));
            }
            w.after(latency, Ev::Dial(pid, conn));
        }
        Effect::SendAcks { conn, ids } => super::conn::acks_sent(w, pid, conn, ids),
        Effect::Probe { conn } => {
            // A pong (any frame) comes back from a socket the server still holds.
            let open = w
                .profiles
                .get(pid)
                .and_then(|p| p.conns.get(&conn))
                .is_some_and(Conn::open);
            if open {
                super::conn::pong(w, pid, conn);
            }
        }
        Effect::CloseSocket { conn } => {
            let zombie = w
                .profiles
                .get(pid)
                .and_then(|p| p.conns.get(&conn))
                .map(|c| (c.zombie, c.latency()));
            super::conn::detach(w, pid, conn);
            if let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn)) {
                c.ended = true;
            }
            // A dead socket's close is not answered: the reader gives up after its few seconds.
            let wait = match zombie {
                Some((true, _)) => 4_000,
                Some((false, l)) => 2 * l,
                None => 0,
            };
            w.after(wait, Ev::Deliver(pid, Input::Closed { conn }));
        }
        Effect::DropSocket { conn } => {
            super::conn::detach(w, pid, conn);
            if let Some(c) = w.profiles.get_mut(pid).and_then(|p| p.conns.get_mut(&conn)) {
                c.ended = true;
            }
        }
        Effect::TakeAgentLock { .. } => w.local.push_back((
            pid,
            Input::AgentLock {
                taken: true,
                holder: None,
            },
        )),
        Effect::ReadKey => {
            if let Some(p) = w.profiles.get_mut(pid)
                && p.key_file != p.key
            {
                p.key = p.key_file.clone();
                w.local.push_back((pid, Input::KeyChanged));
            }
        }
        Effect::ReadTray { cycle } => {
            let up = w.server.latency(t, pid, true, &mut w.rng);
            w.after(up, Ev::Rest(pid, Rest::Tray { cycle }));
        }
        Effect::FetchTexts { req, use_cache, .. } => {
            let up = w.server.latency(t, pid, false, &mut w.rng);
            w.after(up, Ev::Rest(pid, Rest::Texts { req, use_cache }));
        }
        Effect::CheckRuntime { presence_only } => super::runs::check(w, pid, presence_only),
        Effect::StatRuntimeBinary { cycle } => {
            let stamp = w.profiles.get(pid).map(|p| p.runtime.stamp);
            w.local
                .push_back((pid, Input::RuntimeBinary { cycle, stamp }));
        }
        Effect::StartRun(order) => super::runs::start(w, pid, *order),
        Effect::CancelRun { cycle, now } => {
            if let Some(p) = w.profiles.get_mut(pid) {
                p.cancelled.insert(cycle);
            }
            super::runs::cancel(w, pid, cycle, now);
        }
        Effect::DismissInvite { cycle, invite_id } => {
            let up = w.server.latency(t, pid, false, &mut w.rng);
            w.after(up, Ev::Rest(pid, Rest::Dismiss { cycle, invite_id }));
        }
        // The state dir's files are effects the world only records (docs/decisions.md, "The
        // simulator": a listener restarted is left out).
        Effect::SaveInvites(_)
        | Effect::SavePolicyMemory(_)
        | Effect::Record(_)
        | Effect::Notify(_) => {}
        Effect::WriteStatus(status) => {
            let full = w.profiles.get(pid).is_some_and(|p| p.disk_full_until > t);
            let result = if full {
                Err("No space left on device (os error 28)".to_string())
            } else {
                Ok(())
            };
            if let Some(p) = w.profiles.get_mut(pid) {
                p.status_ok = result.is_ok();
                if result.is_ok() {
                    p.status = Some((t, status));
                }
            }
            w.local.push_back((pid, Input::StatusWritten { result }));
        }
        Effect::TouchStatus => {
            if w.profiles.get(pid).is_some_and(|p| !p.status_ok) {
                w.local.push_back((pid, Input::StatusTouched { ok: false }));
            }
        }
        Effect::Ready => {
            if let Some(p) = w.profiles.get_mut(pid) {
                p.ready = true;
            }
        }
        Effect::Ended(_) => {
            let id = w.profiles.get(pid).map(|p| p.id);
            if let Some(p) = w.profiles.get_mut(pid) {
                p.ended = true;
            }
            if let Some(id) = id {
                w.host.remove(id);
                w.host_deadline = None;
            }
        }
        // The host answers these itself; none reach a driver.
        Effect::AskPacer | Effect::AskSlot { .. } | Effect::ReleaseSlot => {}
    }
}

/// Whether an input still reaches the listener (a killed run's end does not: its supervisor was
/// dropped), and what the transport and the runtime learn as it does.
pub fn admit(w: &mut World, pid: usize, input: &Input) -> bool {
    if let Input::RunEnded { cycle, .. } = input {
        let live = w
            .profiles
            .get(pid)
            .and_then(|p| p.run.as_ref())
            .is_some_and(|r| r.cycle == *cycle);
        if !live {
            return false;
        }
        super::runs::ended(w, pid, *cycle);
    }
    super::conn::on_deliver(w, pid, input);
    true
}

/// An input as one short line: kinds, counts and ids, never a body (a burst's text frames as
/// parsed).
pub fn input_line(input: &Input, parsed: &[Option<ServerFrame>]) -> String {
    match input {
        Input::Burst { conn, frames, lost } => {
            let kinds: Vec<String> = frames
                .iter()
                .zip(parsed)
                .map(|(f, p)| frame_word(f, p.as_ref()))
                .collect();
            format!(
                "burst c{conn} [{}]{}",
                kinds.join(" "),
                if lost.is_some() { " lost" } else { "" }
            )
        }
        Input::Tray { cycle, result } => match result {
            Ok(t) => {
                let cards: Vec<String> = t
                    .conversations
                    .iter()
                    .take(4)
                    .map(|c| {
                        format!(
                            "{}{}",
                            c.conversation_id,
                            if c.is_muted() { " muted" } else { "" }
                        )
                    })
                    .collect();
                format!(
                    "tray #{cycle}: {} cards{}, {} invites [{}{}]",
                    t.conversations.len(),
                    if t.is_truncated() { " truncated" } else { "" },
                    t.invite_ids().len(),
                    cards.join(", "),
                    if t.conversations.len() > 4 {
                        ", ..."
                    } else {
                        ""
                    }
                )
            }
            Err(e) => format!("tray #{cycle}: {:?} {}", e.kind, e.detail),
        },
        Input::Texts { req, result } => format!(
            "texts r{req}: {}",
            if result.is_ok() { "ok" } else { "missing" }
        ),
        Input::RunEnded { cycle, end } => format!(
            "run #{cycle} ended: {:?} (started {})",
            end.outcome, end.started
        ),
        Input::Reload {
            config,
            endpoint_changed,
        } => format!(
            "reload ({}{})",
            if config.is_ok() {
                "new settings"
            } else {
                "kept"
            },
            if *endpoint_changed {
                ", new endpoint"
            } else {
                ""
            }
        ),
        Input::StatusWritten { result } => format!(
            "status written: {}",
            if result.is_ok() { "ok" } else { "failed" }
        ),
        other => {
            let s = format!("{other:?}");
            s.chars().take(120).collect()
        }
    }
}

fn frame_word(f: &InFrame, parsed: Option<&ServerFrame>) -> String {
    match (f, parsed) {
        (InFrame::Text(_), Some(ServerFrame::MessageNew(m))) => format!(
            "msg({} {})",
            m.conversation_id.as_deref().unwrap_or("?"),
            m.sender.as_deref().unwrap_or("?")
        ),
        (InFrame::Text(_), Some(ServerFrame::Wake { reason, .. })) => format!("wake({reason})"),
        (InFrame::Text(_), Some(ServerFrame::HelloOk { .. })) => "hello.ok".into(),
        (InFrame::Text(_), Some(ServerFrame::Heartbeat)) => "heartbeat".into(),
        (InFrame::Text(_), Some(ServerFrame::GroupInviteReceived { .. })) => {
            "group.invite.received".into()
        }
        (InFrame::Text(_), Some(ServerFrame::GroupDeleted)) => "group.deleted".into(),
        (InFrame::Text(_), Some(ServerFrame::Other { kind })) => kind.clone(),
        (InFrame::Text(_), None) => "malformed".into(),
        (InFrame::Close(c), _) => format!("close({c:?})"),
        (InFrame::Control, _) => "pong".into(),
        (InFrame::Binary(n), _) => format!("binary({n})"),
    }
}

/// An effect as one short line.
pub fn effect_line(e: &Effect) -> String {
    match e {
        Effect::StartRun(o) => format!(
            "start run #{} {:?} reasons {}",
            o.cycle,
            o.kind,
            o.reasons.join(",")
        ),
        Effect::WriteStatus(s) => format!(
            "write status: {} socket {:?}{}{}",
            s.state.as_str(),
            s.socket,
            s.held
                .as_ref()
                .map(|h| format!(" held {} until {:?}", h.reason, h.until))
                .unwrap_or_default(),
            s.detail
                .as_ref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        ),
        Effect::SaveInvites(_) => "save invites".into(),
        Effect::SavePolicyMemory(_) => "save policy memory".into(),
        Effect::Record(r) => format!("record {:?} {} {:?}", r.kind, r.id, r.outcome),
        other => {
            let s = format!("{other:?}");
            s.chars().take(120).collect()
        }
    }
}

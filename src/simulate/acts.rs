//! What the world does to the listeners: peers write (direct, in groups, many at once), invite,
//! and the user mutes, reloads, rotates a key; the server drops and closes sockets, refuses the
//! key, requires an upgrade, goes down, throttles or switches off the tray, serves no texts or
//! unusable ones; the machine sleeps, its clock is stepped, its disk fills; the runtime refuses
//! runs (`draw` says when). The settle heals everything.

use super::checks::Muted;
use super::scenario::Act;
use super::world::{Ev, Phase, World, listener_config};
use crate::core::listener::Input;
use serde_json::{Value, json};

/// A fault window's end.
#[derive(Debug, Clone)]
pub enum Heal {
    /// The server accepts the agent's key again.
    KeyAccepted(usize),
    /// The user wrote the rotated key into the key file.
    KeyWritten(usize, String),
    /// The server serves its own texts again.
    Texts,
}

/// The texts the profiles' runtimes read (`RuntimeKind::texts_runtime`).
const TEXTS_RUNTIMES: [&str; 3] = ["generic", "claude-code", "codex"];

/// The conversation (or the agent) a mute of `peer` by profile `who` is on, if it exists.
pub fn mute_target(w: &World, who: usize, peer: usize, agent_wide: bool) -> Option<Muted> {
    if agent_wide {
        return Some(Muted::Agent(format!("peer{peer}")));
    }
    w.dm_convs
        .get(&(who, peer))
        .map(|c| Muted::Conversation(c.clone()))
}

fn peer_send(w: &mut World, peer: usize, body: &Value) -> Option<(String, String)> {
    let key = w.server.peer_key(peer)?;
    let a = w
        .server
        .call(Some(&key), "POST", "/v1/messages", Some(body));
    let v = a.value();
    let id = v.get("id")?.as_str()?.to_string();
    let conv = v.get("conversation_id")?.as_str()?.to_string();
    Some((id, conv))
}

fn handle(w: &World, pid: usize) -> String {
    w.profiles
        .get(pid)
        .map(|p| p.handle.clone())
        .unwrap_or_default()
}

/// A call the user makes as the agent (with the key the server holds now).
fn agent_call(w: &mut World, who: usize, method: &str, path: &str, body: Option<&Value>) -> u16 {
    let key = w
        .profiles
        .get(who)
        .map(|p| p.server_key.clone())
        .unwrap_or_default();
    w.server.call(Some(&key), method, path, body).status
}

fn control(w: &mut World, path: &str, body: &Value) -> Value {
    w.server.call(None, "POST", path, Some(body)).value()
}

/// One act.
pub fn act(w: &mut World, act: Act) {
    let t = w.t;
    w.note(format_args!("world: {act:?}"));
    match act {
        Act::Dm { peer, to } => {
            let body = json!({"to": format!("@{}", handle(w, to)), "content": {"text": "hello"},
                              "client_msg_id": format!("dm-{:x}", w.rng.u64())});
            if let Some((id, conv)) = peer_send(w, peer, &body) {
                w.dm_convs.insert((to, peer), conv.clone());
                super::checks::message_for(w, to, &id, &conv, &format!("peer{peer}"), false);
            }
        }
        Act::GroupMessage { peer, group } => {
            let Some(gid) = w.server.groups.get(group).cloned() else {
                return;
            };
            let body = json!({"conversation_id": gid, "content": {"text": "news for the crew"},
                              "client_msg_id": format!("gm-{:x}", w.rng.u64())});
            if let Some((id, conv)) = peer_send(w, peer, &body) {
                let agents = w
                    .plan
                    .groups
                    .get(group)
                    .map(|g| g.1.clone())
                    .unwrap_or_default();
                for to in agents {
                    super::checks::message_for(w, to, &id, &conv, &format!("peer{peer}"), true);
                }
            }
        }
        Act::Invite { peer, to } => {
            let name = format!("club{:x}", w.rng.below(1 << 20));
            control(
                w,
                "/_sim/groups",
                &json!({"owner": format!("@peer{peer}"), "name": name, "members": [],
                        "invite": [format!("@{}", handle(w, to))]}),
            );
        }
        Act::Flood { to, peers } => {
            // Every peer the user did not mute as a whole writes, one every 20 ms.
            let writers: Vec<usize> = (0..peers)
                .filter(|p| {
                    !w.checks
                        .mutes
                        .contains(&(to, Muted::Agent(format!("peer{p}"))))
                })
                .collect();
            for (i, peer) in writers.into_iter().enumerate() {
                w.after(20 * i as u64, Ev::Act(Act::Dm { peer, to }));
            }
        }
        Act::Mute {
            who,
            peer,
            agent_wide,
            on,
        } => {
            let Some(what) = mute_target(w, who, peer, agent_wide) else {
                return;
            };
            let (body, path) = match &what {
                Muted::Agent(a) => (
                    json!({"target_kind": "agent", "target_handle": format!("@{a}"), "duration": "forever"}),
                    format!("/v1/mutes/agent/{a}"),
                ),
                Muted::Conversation(c) => (
                    json!({"target_kind": "conversation", "target_id": c, "duration": "forever"}),
                    format!("/v1/mutes/conversation/{c}"),
                ),
            };
            let status = if on {
                agent_call(w, who, "POST", "/v1/mutes", Some(&body))
            } else {
                agent_call(w, who, "DELETE", &path, None)
            };
            if (200..300).contains(&status) {
                super::checks::muted(w, who, what, on);
            }
        }
        Act::Drop { who } => drop_sockets(w, who),
        Act::Restart => {
            control(w, "/_sim/restart", &json!({}));
        }
        Act::Close { who, code, reason } => {
            let h = handle(w, who);
            control(
                w,
                &format!("/_sim/agents/{h}/sockets/close"),
                &json!({"code": code, "reason": reason}),
            );
        }
        Act::RefuseKey { who, for_ms } => {
            let h = handle(w, who);
            control(
                w,
                &format!("/_sim/agents/{h}/refuse-key"),
                &json!({"refuse": true}),
            );
            w.after(for_ms, Ev::Heal(Heal::KeyAccepted(who)));
        }
        Act::RotateKey {
            who,
            written_after_ms,
        } => {
            let h = handle(w, who);
            let v = control(w, &format!("/_sim/agents/{h}/rotate-key"), &json!({}));
            if let Some(k) = v.get("api_key").and_then(Value::as_str) {
                if let Some(p) = w.profiles.get_mut(who) {
                    p.server_key = k.to_string();
                }
                w.after(
                    written_after_ms,
                    Ev::Heal(Heal::KeyWritten(who, k.to_string())),
                );
            }
        }
        Act::Upgrade { who, for_ms } => {
            w.server.faults.upgrade_until.insert(who, t + for_ms);
            let h = handle(w, who);
            control(
                w,
                &format!("/_sim/agents/{h}/sockets/close"),
                &json!({"code": 4426, "reason": "upgrade required"}),
            );
        }
        Act::Outage { for_ms } => {
            w.server.faults.outage_until = w.server.faults.outage_until.max(t + for_ms)
        }
        Act::Unreachable { for_ms } => {
            w.server.faults.unreachable_until = w.server.faults.unreachable_until.max(t + for_ms);
            for pid in 0..w.profiles.len() {
                drop_sockets(w, pid);
            }
        }
        Act::Throttle { who, for_ms } => {
            w.server.faults.throttled_until.insert(who, t + for_ms);
        }
        Act::Removed { who, for_ms } => {
            w.server.faults.removed_until.insert(who, t + for_ms);
        }
        Act::SlowTray { who, for_ms } => {
            w.server.faults.slow_until.insert(who, t + for_ms);
        }
        Act::TextsDown { for_ms } => w.server.faults.texts_down_until = t + for_ms,
        Act::TextsUnusable { for_ms } => {
            let key = w.server.peer_key(0).unwrap_or_default();
            for runtime in TEXTS_RUNTIMES {
                let v = w.server.call(
                    Some(&key),
                    "GET",
                    &format!("/v1/texts?runtime={runtime}"),
                    None,
                );
                let mut texts = v.value();
                if let Some(o) = texts.as_object_mut() {
                    o.remove("wake_instruction");
                    o.remove("invite_prompt");
                }
                control(w, &format!("/_sim/texts/{runtime}"), &texts);
            }
            w.after(for_ms, Ev::Heal(Heal::Texts));
        }
        Act::DiskFull { who, for_ms } => {
            if let Some(p) = w.profiles.get_mut(who) {
                p.disk_full_until = t + for_ms;
            }
        }
        Act::Suspend { for_ms } => w.suspend(for_ms),
        Act::WallStep { by_ms } => {
            w.machine.wall_offset += by_ms;
            w.checks.clock_moved(t);
            if by_ms > 0 {
                w.checks.stepped_forward(t);
            } else {
                w.checks.stepped_back();
            }
        }
        Act::Reload { who } => reload(w, who),
        Act::Refuses {
            who,
            for_ms,
            login_ok,
        } => {
            if let Some(p) = w.profiles.get_mut(who) {
                p.runtime.refuses_until = t + for_ms;
                p.runtime.login_ok = login_ok;
            }
        }
    }
}

/// The server drops every socket of profile `who`'s agent without a close.
fn drop_sockets(w: &mut World, who: usize) {
    let h = handle(w, who);
    let mut s = w.server.lock();
    if let Some(a) = s.agents.get_mut(&h) {
        for x in a.sockets.drain(..) {
            let _ = x.tx.send(crate::sim::model::Out::Drop);
        }
    }
}

/// SIGHUP with changed settings: the windows, the runtime, or the policy on and off.
fn reload(w: &mut World, who: usize) {
    let Some(p) = w.profiles.get(who) else {
        return;
    };
    let mut plan = p.plan.clone();
    let original = w
        .plan
        .profiles
        .get(who)
        .map(|o| o.policy.clone())
        .unwrap_or_default();
    match w.rng.below(3) {
        0 => {
            plan.quiet_window_ms = w.rng.below(6) * 1000;
            plan.max_delay_ms = 5_000 + w.rng.below(25) * 1000;
        }
        1 => {
            let runtimes = [
                crate::core::runtime_kind::RuntimeKind::ClaudeCode,
                crate::core::runtime_kind::RuntimeKind::Codex,
                crate::core::runtime_kind::RuntimeKind::Script,
            ];
            let i = usize::try_from(w.rng.below(3)).unwrap_or(0);
            plan.runtime = runtimes.get(i).copied().unwrap_or(plan.runtime);
        }
        _ => {
            plan.policy = if plan.policy.is_empty() {
                original
            } else {
                String::new()
            };
        }
    }
    let now = w.now();
    let single = w.profiles.len() == 1;
    let cfg = listener_config(&plan, w.plan.zone, single, now.wall_ms);
    let Some(p) = w.profiles.get_mut(who) else {
        return;
    };
    let endpoint_changed = p.key_file != p.key;
    p.key = p.key_file.clone();
    p.plan = plan;
    p.cfg = cfg.clone();
    w.local.push_back((
        who,
        Input::Reload {
            config: Ok(Box::new(cfg)),
            endpoint_changed,
        },
    ));
}

pub fn heal(w: &mut World, h: Heal) {
    w.note(format_args!("world: heal {h:?}"));
    match h {
        Heal::KeyAccepted(who) => {
            let h = handle(w, who);
            control(
                w,
                &format!("/_sim/agents/{h}/refuse-key"),
                &json!({"refuse": false}),
            );
        }
        Heal::KeyWritten(who, _rotated) => {
            // The user copies the key the server holds now: of two rotations close together,
            // the later one's key, whichever write comes last.
            if let Some(p) = w.profiles.get_mut(who) {
                p.key_file = p.server_key.clone();
            }
        }
        Heal::Texts => {
            for runtime in TEXTS_RUNTIMES {
                w.server
                    .call(None, "DELETE", &format!("/_sim/texts/{runtime}"), None);
            }
        }
    }
}

/// The chaos ends: every fault heals, the runtimes work, the disks have room, traffic stops,
/// and every socket drops once (each reconnect wakes its listener).
pub fn settle(w: &mut World) {
    w.phase = Phase::Settle;
    w.note(format_args!("world: settle"));
    w.server.faults = Default::default();
    heal(w, Heal::Texts);
    for pid in 0..w.profiles.len() {
        heal(w, Heal::KeyAccepted(pid));
        if let Some(p) = w.profiles.get_mut(pid) {
            p.runtime.refuses_until = 0;
            p.disk_full_until = 0;
        }
        drop_sockets(w, pid);
    }
}

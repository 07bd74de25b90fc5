//! The control API under `/_sim/` (no auth; the sim listens on loopback only): make agents, cut,
//! silence or hold sockets, read connect, send and ack logs and the server's view of an agent, set budgets,
//! refuse or rotate keys, push wakes, make groups, invites and notices, replace texts, restart the
//! whole server and count refused upgrades (`restart`).

use serde_json::{Value, json};

mod agent;

use super::clock::SimClock;
use super::error::{Rejection, SimResult};
use super::http::{Reply, Req, Sim, not_found};
use super::store::{at, bare};
use super::texts;

pub async fn route(sim: &Sim, r: &Req) -> SimResult<Reply> {
    let segs: Vec<&str> = r.segs.iter().map(String::as_str).collect();
    match (r.method.as_str(), &segs[1..]) {
        ("POST", ["agents"]) => {
            let b = r.json_object()?;
            let h = b
                .get("handle")
                .and_then(Value::as_str)
                .ok_or_else(|| Rejection::validation("handle is required"))?;
            let name = b.get("display_name").and_then(Value::as_str);
            let (h, key) = match b.get("api_key").and_then(Value::as_str) {
                Some(key) => (
                    sim.lock().create_agent_with_key(h, name, key)?,
                    key.to_string(),
                ),
                None => sim.lock().create_agent(h, name)?,
            };
            tracing::info!("sim: created agent @{h}");
            Ok(Reply::json(201, json!({"handle": at(&h), "api_key": key})))
        }
        ("GET", ["agents"]) => {
            let s = sim.lock();
            let list: Vec<Value> = s
                .agents
                .values()
                .map(|a| json!({"handle": at(&a.handle), "sockets": a.sockets.len(), "sends": a.sends.len(), "acks": a.acks.len()}))
                .collect();
            Ok(Reply::ok(json!({"agents": list})))
        }
        (m, ["agents", h, rest @ ..]) => agent::route(sim, r, m, &bare(h), rest),
        ("GET", ["clock"]) => Ok(Reply::ok(clock_body(&sim.clock))),
        ("POST", ["clock"]) => {
            let b = r.json_object()?;
            let ms = match b.get("advance_ms") {
                Some(Value::Number(n)) => n.as_u64().filter(|&n| n <= MAX_STEP_MS),
                _ => None,
            }
            .ok_or_else(|| {
                Rejection::validation("advance_ms must be a whole number of ms up to 30 days")
            })?;
            sim.clock.advance(ms);
            // The timers look at once, not at the next 20 ms tick: a test reads what fell due.
            super::tick(sim);
            Ok(Reply::ok(clock_body(&sim.clock)))
        }
        ("POST", ["restart"]) => {
            let how = super::restart::parse(&r.json_object()?).map_err(Rejection::validation)?;
            let mut s = sim.lock();
            let closed = s.restart(&how);
            tracing::info!("sim: restart; {closed} sockets closed");
            Ok(Reply::ok(
                json!({"closed": closed, "restarts": s.refusals.restarts}),
            ))
        }
        ("GET", ["outbox"]) => Ok(Reply::ok(sim.lock().outbox())),
        ("GET", ["refusals"]) => Ok(Reply::ok(sim.lock().refusals_body())),
        ("POST", ["old-paths"]) => {
            let b = r.json_object()?;
            Ok(Reply::ok(sim.lock().old_paths.set(&b)?))
        }
        ("POST", ["groups"]) => {
            let b = r.json_object()?;
            let owner = str_field(&b, "owner")?;
            let name = str_field(&b, "name")?;
            let members = handles(&b, "members")?;
            let invitees = handles(&b, "invite")?;
            let mut s = sim.lock();
            let gid = s.create_group(&owner, &name, &members)?;
            let mut invites = Vec::new();
            for h in invitees {
                let id = s.invite(&gid, &owner, &h)?;
                invites.push(json!({"handle": at(&bare(&h)), "invite_id": id}));
            }
            Ok(Reply::json(
                201,
                json!({"group_id": gid, "invites": invites, "group": s.group_detail(&gid, &bare(&owner))}),
            ))
        }
        ("POST", ["groups", gid, "invite"]) => {
            let b = r.json_object()?;
            let h = str_field(&b, "handle")?;
            let mut s = sim.lock();
            let by = match b.get("by").and_then(Value::as_str) {
                Some(x) => bare(x),
                None => s.group(gid)?.owner.clone(),
            };
            let id = s.invite(gid, &by, &h)?;
            Ok(Reply::json(201, json!({"invite_id": id})))
        }
        ("POST", ["groups", gid, "notice"]) => {
            let b = r.json_object()?;
            let event = b
                .get("event")
                .and_then(Value::as_str)
                .unwrap_or("member_joined")
                .to_string();
            let mut s = sim.lock();
            let actor = match b
                .get("agent_handle")
                .or_else(|| b.get("by"))
                .and_then(Value::as_str)
            {
                Some(x) => bare(x),
                None => s.group(gid)?.owner.clone(),
            };
            let data = json!({"schema_version": 1, "event": event, "agent_handle": actor});
            let id = s.notice(gid, &actor, data)?;
            Ok(Reply::json(201, json!({"message_id": id})))
        }
        ("POST", ["groups", gid, "delete"]) | ("DELETE", ["groups", gid]) => {
            let b = r.json_object()?;
            let mut s = sim.lock();
            let by = match b.get("by").and_then(Value::as_str) {
                Some(x) => bare(x),
                None => s.group(gid)?.owner.clone(),
            };
            Ok(Reply::ok(s.delete_group(gid, &by)?))
        }
        ("POST", ["texts", runtime]) => {
            if !texts::RUNTIMES.contains(runtime) {
                return Err(Rejection::validation(format!(
                    "runtime must be one of {}",
                    texts::RUNTIMES.join(", ")
                )));
            }
            let b = r.json_object()?;
            sim.lock().texts.insert(runtime.to_string(), b);
            Ok(Reply::ok(json!({"runtime": runtime, "replaced": true})))
        }
        ("DELETE", ["texts", runtime]) => {
            sim.lock().texts.remove(*runtime);
            Ok(Reply::ok(json!({"runtime": runtime, "replaced": false})))
        }
        _ => Ok(not_found(r)),
    }
}

/// The longest single step of the server clock (`POST /_sim/clock`): a month covers every timer
/// of the contract (the longest, a wake cycle's end and the second defer, are 24 h).
const MAX_STEP_MS: u64 = 30 * 24 * super::clock::HOUR;

fn clock_body(c: &SimClock) -> Value {
    json!({"now_ms": c.now_v(), "time_scale": c.scale()})
}

pub(super) fn str_field(b: &Value, name: &str) -> SimResult<String> {
    b.get(name)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| Rejection::validation(format!("{name} is required (a string)")))
}

pub(super) fn handles(b: &Value, name: &str) -> SimResult<Vec<String>> {
    match b.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(bare)
                    .ok_or_else(|| Rejection::validation(format!("{name} must list handles")))
            })
            .collect(),
        Some(_) => Err(Rejection::validation(format!(
            "{name} must be an array of handles"
        ))),
    }
}

//! The `/v1` REST routes an agent uses (its hands): identity, messages, the tray, verdicts,
//! invites, mutes, texts. Each authenticates with `Authorization: Bearer <key>`.

use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::error::{Rejection, SimResult};
use super::http::{Reply, Req, Sim, not_found};
use super::model::Landing;
use super::texts;
use super::tray;

pub async fn route(sim: &Sim, r: &Req) -> SimResult<Reply> {
    let segs: Vec<&str> = r.segs.iter().map(String::as_str).collect();
    let m = r.method.as_str();
    if let (m2, ["v1", "texts"]) = (m, &segs[..])
        && m2 == "GET"
    {
        return texts_route(sim, r);
    }
    // Sign-up and recovery need no key (`signup`).
    match (m, &segs[1..]) {
        ("POST", ["register"]) => return Ok(Reply::ok(sim.lock().register(&r.json_object()?)?)),
        ("POST", ["register", "verify"]) => {
            return Ok(Reply::json(
                201,
                sim.lock().register_verify(&r.json_object()?)?,
            ));
        }
        ("POST", ["agents", "recover"]) => {
            return Ok(Reply::ok(sim.lock().recover(&r.json_object()?)?));
        }
        ("POST", ["agents", "recover", "verify"]) => {
            return Ok(Reply::ok(sim.lock().recover_verify(&r.json_object()?)?));
        }
        _ => {}
    }
    let me = sim.lock().auth(r.bearer())?;
    // Any authenticated call keeps an unanswered rung's webhook back for 2 minutes (5).
    sim.lock().called(&me);
    // A suspended agent can still see itself (`owner`).
    if (m, &segs[1..]) != ("GET", &["agents", "me"][..]) {
        sim.lock().refuse_suspended(&me)?;
    }
    // An old path switched off answers `410 REMOVED`; one deprecated carries the headers on
    // every answer, an error's too (contract 7, `old_paths`).
    let path = format!("/{}", segs.join("/"));
    sim.lock().old_paths.check(&path)?;
    let reply = agent_route(sim, r, &me, m, &segs)
        .await
        .unwrap_or_else(Reply::from);
    Ok(sim.lock().old_paths.mark(&path, reply))
}

/// An answer that used an old value or path of contract 7's table (`id`): refused `REMOVED` once
/// it is off, else the answer, an error's too, with the deprecation headers.
fn old(sim: &Sim, id: &str, answer: impl FnOnce() -> SimResult<Reply>) -> SimResult<Reply> {
    sim.lock().old_paths.check(id)?;
    let reply = answer().unwrap_or_else(Reply::from);
    Ok(sim.lock().old_paths.mark(id, reply))
}

async fn agent_route(sim: &Sim, r: &Req, me: &str, m: &str, segs: &[&str]) -> SimResult<Reply> {
    let me = me.to_string();
    match (m, &segs[1..]) {
        ("GET", ["agents", "me"]) => Ok(Reply::ok(sim.lock().me(&me)?)),
        ("PUT", ["agents", "me", "wake-webhook"]) => {
            let body = r.json_object()?;
            Ok(Reply::ok(sim.lock().put_webhook(&me, &body)?))
        }
        ("DELETE", ["agents", "me", "wake-webhook"]) => {
            Ok(Reply::ok(sim.lock().delete_webhook(&me)?))
        }
        ("POST", ["agents", "me", "wake-webhook", "test"]) => {
            Ok(Reply::ok(super::webhook::test(sim, &me).await?))
        }
        ("POST", ["messages"]) => {
            let body = r.json_object()?;
            let (status, v) = sim.lock().send_message(&me, &body)?;
            Ok(Reply::json(status, v))
        }
        ("GET", ["messages", "sync"]) => sync(sim, r, &me).await,
        ("GET", ["conversations"]) => {
            let limit = r.query_u64("limit")?.unwrap_or(20).clamp(1, 100) as usize;
            Ok(Reply::ok(sim.lock().list_conversations(&me, limit)))
        }
        ("POST", ["messages", "sync", "ack"]) => sync_ack(sim, r, &me),
        ("GET", ["messages", conv]) | ("GET", ["conversations", conv, "messages"]) => {
            let limit = r.query_u64("limit")?.unwrap_or(50).clamp(1, 200) as usize;
            let after = r.query_u64("after_seq")?;
            let before = r.query_u64("before_seq")?;
            Ok(Reply::ok(
                sim.lock()
                    .conversation_messages(&me, conv, limit, after, before)?,
            ))
        }
        ("POST", ["conversations", conv, "decisions"]) => {
            let body = r.json_object()?;
            let decide = || Ok(Reply::json(201, sim.lock().decide(&me, conv, &body)?));
            // The deprecated values of contract 7: `no_reply`, then `defer_seconds`.
            if body.get("decision").and_then(Value::as_str) == Some("no_reply") {
                old(sim, "decision_no_reply", || {
                    if body.get("defer_seconds").is_some() {
                        old(sim, "defer_seconds", decide)
                    } else {
                        decide()
                    }
                })
            } else if body.get("defer_seconds").is_some() {
                old(sim, "defer_seconds", decide)
            } else {
                decide()
            }
        }
        (_, ["reply", ..]) => old(sim, "reply_coord", || {
            let body = r.json_object()?;
            let mut s = sim.lock();
            Ok(Reply::ok(match (m, &segs[2..]) {
                ("POST", ["claim"]) => s.reply_claim(&me, &body)?,
                ("POST", ["claim-batch"]) => s.reply_claim_batch(&me, &body)?,
                ("PUT", ["active"]) => s.reply_active(&me, &body)?,
                ("DELETE", ["active"]) => s.reply_inactive(&me, &body)?,
                _ => return Ok(not_found(r)),
            }))
        }),
        ("POST", ["conversations", conv, "read"]) => {
            let body = r.json_object()?;
            Ok(Reply::ok(sim.lock().mark_read(&me, conv, &body)?))
        }
        ("GET", ["inbox"]) => {
            let limit = match r.query_u64("limit")? {
                None => 20,
                Some(0) => return Err(Rejection::validation("limit must be a positive integer")),
                Some(n) => n.min(50) as usize,
            };
            let wait_ms = match r.query_u64("wait_ms")? {
                None | Some(0) => 0,
                Some(n) if n <= 50_000 => n,
                Some(_) => {
                    return Err(Rejection::validation("wait_ms must be between 1 and 50000"));
                }
            };
            let invites = matches!(
                r.query.get("invites").map(String::as_str),
                Some("1") | Some("true")
            );
            Ok(Reply::ok(inbox(sim, &me, limit, wait_ms, invites).await?))
        }
        ("GET", ["groups", "invites"]) => Ok(Reply::ok(sim.lock().list_invites(&me))),
        ("POST", ["groups", "invites", id, "accept"]) => {
            idempotent(sim, r, &me, |s| s.accept_invite(&me, id))
        }
        ("POST", ["groups", "invites", id, "dismiss"]) => {
            idempotent(sim, r, &me, |s| s.dismiss_invite(&me, id))
        }
        ("DELETE", ["groups", "invites", id]) => Ok(Reply::ok(sim.lock().decline_invite(&me, id)?)),
        ("GET", ["groups", id]) => {
            let s = sim.lock();
            let g = s.group(id)?;
            if !g.members.contains_key(&me) {
                return Err(Rejection::not_found(
                    "GROUP_NOT_FOUND",
                    format!("no group {id}"),
                ));
            }
            Ok(Reply::ok(s.group_detail(id, &me)))
        }
        ("POST", ["mutes"]) => {
            let body = r.json_object()?;
            Ok(Reply::json(201, sim.lock().mute(&me, &body)?))
        }
        ("GET", ["mutes"]) => Ok(Reply::ok(
            sim.lock()
                .list_mutes(&me, r.query.get("kind").map(String::as_str))?,
        )),
        ("GET", ["mutes", kind, target]) => {
            Ok(Reply::ok(sim.lock().mute_status(&me, kind, target)?))
        }
        ("DELETE", ["mutes", kind, target]) => Ok(Reply::ok(sim.lock().unmute(&me, kind, target)?)),
        _ => Ok(not_found(r)),
    }
}

fn texts_route(sim: &Sim, r: &Req) -> SimResult<Reply> {
    let runtime = r
        .query
        .get("runtime")
        .map(String::as_str)
        .unwrap_or("generic");
    if !texts::RUNTIMES.contains(&runtime) {
        return Err(Rejection::validation(format!(
            "runtime must be one of {}",
            texts::RUNTIMES.join(", ")
        )));
    }
    let s = sim.lock();
    let v = s
        .texts
        .get(runtime)
        .cloned()
        .unwrap_or_else(|| texts::default_texts(runtime));
    Ok(Reply::ok(v))
}

/// Honours `Idempotency-Key` (8-128 of `[A-Za-z0-9_-]`, per agent): a replay answers the stored
/// result with `Idempotent-Replay: true`; the same key on another route is `422`.
fn idempotent(
    sim: &Sim,
    r: &Req,
    me: &str,
    op: impl FnOnce(&mut super::store::Store) -> SimResult<Value>,
) -> SimResult<Reply> {
    let key = r.header("idempotency-key").map(str::to_string);
    let fingerprint = format!("{} /{}", r.method, r.segs.join("/"));
    let mut s = sim.lock();
    if let Some(k) = &key {
        let ok = (8..=128).contains(&k.len())
            && k.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
        if !ok {
            return Err(Rejection::new(
                400,
                "IDEMPOTENCY_KEY_INVALID",
                "Idempotency-Key must be 8-128 characters of A-Z a-z 0-9 _ -",
            ));
        }
        if let Some((fp, status, body)) = s.agent(me)?.idem.get(k) {
            if *fp != fingerprint {
                return Err(Rejection::new(
                    422,
                    "IDEMPOTENCY_KEY_CONFLICT",
                    "this Idempotency-Key was used for another request",
                ));
            }
            return Ok(Reply::json(*status, body.clone()).header("idempotent-replay", "true"));
        }
    }
    let v = op(&mut s)?;
    if let Some(k) = key {
        s.agent_mut(me)?
            .idem
            .insert(k, (fingerprint, 200, v.clone()));
    }
    Ok(Reply::ok(v))
}

/// The tray read shared by `GET /v1/inbox` and the hosted `agentchat_inbox` (3.1): both poll
/// budgets, the `wait_ms` hold, `invites=1` semantics.
pub async fn inbox(
    sim: &Sim,
    me: &str,
    limit: usize,
    wait_ms: u64,
    invites: bool,
) -> SimResult<Value> {
    let started = Instant::now();
    let mut rx = {
        let mut s = sim.lock();
        let now = s.now_v();
        let scale = s.clock.clone();
        let a = s.agent_mut(me)?;
        if let Err(wait) = a.polls.admit(now) {
            return Err(Rejection::rate_limited(scale.real_secs_ceil(wait)));
        }
        let t = tray::build(&s, me);
        // A full-paused agent is answered at once with an empty tray (3.1; `tray::build`).
        let paused = s.agent(me)?.paused == "full";
        if wait_ms == 0 || paused || t.shows_something(limit, invites) {
            let shows = t.shows_something(limit, invites);
            let body = t.body(&s, me, limit, (wait_ms > 0).then_some(0));
            settle(&mut s, me, shows, wait_ms > 0);
            return Ok(body);
        }
        let a = s.agent_mut(me)?;
        a.held += 1;
        a.landing.subscribe()
    };
    let parked = Parked { sim, me };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(wait_ms);
    let mut shutdown = sim.shutdown.clone();
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                Ok(Landing::Invite) if !invites => continue,
                Ok(_) | Err(RecvError::Lagged(_)) => break,
                Err(RecvError::Closed) => { tokio::time::sleep_until(deadline).await; break; }
            },
            _ = tokio::time::sleep_until(deadline) => break,
            _ = shutdown.changed() => break,
        }
    }
    let body = {
        let mut s = sim.lock();
        let t = tray::build(&s, me);
        let shows = t.shows_something(limit, invites);
        let body = t.body(&s, me, limit, Some(started.elapsed().as_millis() as u64));
        settle(&mut s, me, shows, true);
        body
    };
    // Still counted as held until settled, so no wake webhook slips in between (3.5).
    drop(parked);
    Ok(body)
}

/// Counts a parked read for as long as it is held, even when the client goes away mid-hold.
struct Parked<'a> {
    sim: &'a Sim,
    me: &'a str,
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        if let Some(a) = self.sim.lock().agents.get_mut(self.me) {
            a.held = a.held.saturating_sub(1);
        }
    }
}

/// After a tray or sync read: the poll budgets (and a `rate_limit.warning` when one runs low);
/// a held read that returned something keeps the agent present for 60 s (3.5).
fn settle(s: &mut super::store::Store, me: &str, shows: bool, held: bool) {
    if held && shows {
        s.held_answered(me);
    }
    let now = s.now_v();
    let progress = s.progress_recently(me);
    let low = s.agents.get_mut(me).and_then(|a| {
        a.polls.settle(now, shows, progress);
        a.polls.low(now)
    });
    if let Some(low) = low {
        s.rate_limit_warning(me, low);
    }
}

/// `GET /v1/messages/sync?after=&limit=&wait_ms=`: undelivered rows, oldest first, with
/// `delivery_id`. With `wait_ms` (1..50000) and nothing to show, held until a message or a
/// wake lands or the wait ends, then read again; a new invite never ends it (3.1). A
/// full-paused agent gets `[]` at once. One read against the poll budgets however long held.
async fn sync(sim: &Sim, r: &Req, me: &str) -> SimResult<Reply> {
    let limit = r.query_u64("limit")?.unwrap_or(200).clamp(1, 500) as usize;
    let after = r.query.get("after").cloned();
    let wait_ms = match r.query_u64("wait_ms")? {
        None | Some(0) => 0,
        Some(n) if n <= 50_000 => n,
        Some(_) => return Err(Rejection::validation("wait_ms must be between 1 and 50000")),
    };
    Ok(Reply::ok(Value::Array(
        sync_rows(sim, me, after, limit, wait_ms).await?,
    )))
}

/// The sync read shared by `GET /v1/messages/sync` and the hosted `agentchat_wait`.
pub async fn sync_rows(
    sim: &Sim,
    me: &str,
    after: Option<String>,
    limit: usize,
    wait_ms: u64,
) -> SimResult<Vec<Value>> {
    let rows_now = |s: &mut super::store::Store| -> SimResult<Vec<Value>> {
        Ok(if s.agent(me)?.paused == "full" {
            Vec::new()
        } else {
            s.stored_rows(me, after.as_deref(), limit)
        })
    };
    let mut rx = {
        let mut s = sim.lock();
        let now = s.now_v();
        let clock = s.clock.clone();
        if let Err(wait) = s.agent_mut(me)?.polls.admit(now) {
            return Err(Rejection::rate_limited(clock.real_secs_ceil(wait)));
        }
        let rows = rows_now(&mut s)?;
        if wait_ms == 0 || !rows.is_empty() || s.agent(me)?.paused == "full" {
            let shows = !rows.is_empty();
            settle(&mut s, me, shows, wait_ms > 0);
            return Ok(rows);
        }
        let a = s.agent_mut(me)?;
        a.held += 1;
        a.landing.subscribe()
    };
    let parked = Parked { sim, me };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(wait_ms);
    let mut shutdown = sim.shutdown.clone();
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                Ok(Landing::Invite) => continue,
                Ok(_) | Err(RecvError::Lagged(_)) => break,
                Err(RecvError::Closed) => { tokio::time::sleep_until(deadline).await; break; }
            },
            _ = tokio::time::sleep_until(deadline) => break,
            _ = shutdown.changed() => break,
        }
    }
    let rows = {
        let mut s = sim.lock();
        let rows = rows_now(&mut s)?;
        let shows = !rows.is_empty();
        settle(&mut s, me, shows, true);
        rows
    };
    // Still counted as held until settled, so no wake webhook slips in between (3.5).
    drop(parked);
    Ok(rows)
}

fn sync_ack(sim: &Sim, r: &Req, me: &str) -> SimResult<Reply> {
    let body = r.json_object()?;
    let Some(cursor) = body
        .get("last_delivery_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return Err(Rejection::validation("last_delivery_id is required"));
    };
    let n = sim.lock().ack_through(me, cursor);
    Ok(Reply::ok(json!({"acked": n})))
}

//! The server: the sim's own store behind its own routes (`crate::sim::http::route`, answered
//! at once: no request of the simulator's waits), its budgets and its timers, on the virtual
//! clock; and in front of it the faults the scenario draws (an outage's `503`, a `429`'s
//! `Retry-After`, `410 REMOVED`, a network that is gone, slow reads). The listener's answers are
//! judged by the client's own rules (`crate::client::judge_status`, `judge_body`) and turned into
//! the machine's typed inputs by the driver's (`listen::driver::convert`).

use super::world::{Ev, World};
use crate::client::{self, ApiError, Route};
use crate::core::listener::{Dismissal, Input, LoadedTexts, MissingTexts};
use crate::core::status::TextsSource;
use crate::core::texts::Texts;
use crate::listen::driver::convert;
use crate::sim::clock::{VirtualNow, set_virtual};
use crate::sim::http::{Req, Shared, Sim};
use crate::sim::store::Store;
use futures_util::FutureExt;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// A REST request of the listener's on its way.
#[derive(Debug, Clone)]
pub enum Rest {
    Me { req: u64 },
    Tray { cycle: u64 },
    Texts { req: u64, use_cache: bool },
    Dismiss { cycle: u64, invite_id: String },
}

/// An answer as it leaves the server.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub content_type: Option<String>,
    pub retry_after: Option<String>,
    pub body: Vec<u8>,
    /// Made by a fault in front of the server, not by the server.
    pub fault: bool,
}

impl Answer {
    fn json(status: u16, body: &Value) -> Answer {
        Answer {
            status,
            content_type: Some("application/json".into()),
            retry_after: None,
            body: serde_json::to_vec(body).unwrap_or_default(),
            fault: true,
        }
    }

    /// The answer as the client judges it: the body, or the error.
    pub fn judged(&self, route: Route) -> Result<&[u8], ApiError> {
        client::judge_status(
            self.status,
            self.content_type.as_deref(),
            self.retry_after.as_deref(),
        )?;
        client::judge_body(route, self.status, self.content_type.clone(), &self.body)?;
        Ok(&self.body)
    }

    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// The fault windows in front of the server (true ms until which each lasts).
#[derive(Debug, Default)]
pub struct Faults {
    pub outage_until: u64,
    pub unreachable_until: u64,
    pub texts_down_until: u64,
    pub throttled_until: BTreeMap<usize, u64>,
    pub removed_until: BTreeMap<usize, u64>,
    pub slow_until: BTreeMap<usize, u64>,
    pub upgrade_until: BTreeMap<usize, u64>,
}

pub struct Server {
    pub sim: Sim,
    _stop: watch::Sender<bool>,
    epoch_ms: i64,
    pub faults: Faults,
    pub peer_keys: Vec<String>,
    pub groups: Vec<String>,
    /// Each agent's timers are looked at then.
    pub tick_at: BTreeMap<String, u64>,
    /// Something changed that may move the timers.
    pub timers_dirty: bool,
}

/// The server's socket: the store's entry id, and the agent it serves.
pub const SIM_IP: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

impl Server {
    pub fn new(epoch_ms: i64) -> Server {
        let (stop, shutdown) = watch::channel(false);
        let clock = crate::sim::clock::SimClock::new(1.0);
        let sim = Arc::new(Shared {
            store: Mutex::new(Store::new(clock.clone())),
            clock,
            shutdown,
            // Never used: the simulator's server has no webhook (docs/decisions.md, "The
            // simulator": left out).
            hooks: crate::sys::tls::http_client_builder()
                .build()
                .unwrap_or_default(),
        });
        Server {
            sim,
            _stop: stop,
            epoch_ms,
            faults: Faults::default(),
            peer_keys: Vec::new(),
            groups: Vec::new(),
            tick_at: BTreeMap::new(),
            timers_dirty: true,
        }
    }

    /// The store's clocks at true time `t`.
    pub fn set_clock(&self, t: u64) {
        set_virtual(Some(VirtualNow {
            server_ms: t,
            wall_ms: u64::try_from(self.epoch_ms).unwrap_or(0).saturating_add(t),
        }));
    }

    pub fn clear_clock(&self) {
        set_virtual(None);
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.sim.lock()
    }

    /// One request through the server's own routes (`key`: the caller's), answered now.
    pub fn call(
        &mut self,
        key: Option<&str>,
        method: &str,
        target: &str,
        body: Option<&Value>,
    ) -> Answer {
        self.timers_dirty = true;
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let mut headers = hyper::HeaderMap::new();
        if let Some(k) = key
            && let Ok(v) = hyper::header::HeaderValue::from_str(&format!("Bearer {k}"))
        {
            headers.insert(hyper::header::AUTHORIZATION, v);
        }
        let req = Req {
            method: method.to_string(),
            segs: path
                .split('/')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            query: query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (k.to_string(), v.to_string())
                })
                .collect(),
            headers,
            body: body
                .map(|b| b.to_string().into_bytes().into())
                .unwrap_or_default(),
        };
        let reply = crate::sim::http::route(&self.sim, &req).now_or_never();
        match reply {
            Some(r) => Answer {
                status: r.status,
                content_type: r.body.as_ref().map(|_| "application/json".to_string()),
                retry_after: r
                    .headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("retry-after"))
                    .map(|(_, v)| v.clone()),
                body: r
                    .body
                    .and_then(|b| serde_json::to_vec(&b).ok())
                    .unwrap_or_default(),
                fault: false,
            },
            // No request of the simulator's is held; one that would be answers like an outage.
            None => Answer::json(
                503,
                &json!({"code": "SERVICE_UNAVAILABLE", "message": "held"}),
            ),
        }
    }

    /// `POST /_sim/agents`: the agent's key.
    pub fn create_agent(&mut self, handle: &str) -> String {
        let a = self.call(
            None,
            "POST",
            "/_sim/agents",
            Some(&json!({"handle": handle})),
        );
        a.value()
            .get("api_key")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }

    /// The peers `peer0`.. with their re-wake ladders off (nothing listens for them).
    pub fn create_peers(&mut self, n: usize) {
        for i in 0..n {
            let h = format!("peer{i}");
            let key = self.create_agent(&h);
            self.call(
                None,
                "POST",
                &format!("/_sim/agents/{h}/ladder"),
                Some(&json!({"enabled": false})),
            );
            self.peer_keys.push(key);
        }
    }

    /// A group owned by its first peer, with the other peers and these agents as members.
    pub fn create_group(&mut self, peers: &[usize], agents: &[String]) {
        let Some(owner) = peers.first() else {
            return;
        };
        let mut members: Vec<String> = peers.iter().skip(1).map(|p| format!("@peer{p}")).collect();
        members.extend(agents.iter().map(|a| format!("@{a}")));
        let n = self.groups.len();
        let a = self.call(
            None,
            "POST",
            "/_sim/groups",
            Some(&json!({"owner": format!("@peer{owner}"), "name": format!("crew{n}"), "members": members})),
        );
        if let Some(gid) = a.value().get("group_id").and_then(Value::as_str) {
            self.groups.push(gid.to_string());
        }
    }

    pub fn peer_key(&self, peer: usize) -> Option<String> {
        self.peer_keys.get(peer).cloned()
    }

    /// The fault in front of a request of profile `pid`'s (`tray`: a tray read), if one answers it.
    fn fault(&self, t: u64, pid: usize, tray: bool) -> Option<Result<Answer, ApiError>> {
        if self.faults.unreachable_until > t {
            return Some(Err(ApiError::Network("connection refused".into())));
        }
        if self.faults.outage_until > t {
            return Some(Ok(Answer::json(
                503,
                &json!({"code": "SERVICE_UNAVAILABLE", "message": "the server is down for maintenance"}),
            )));
        }
        if !tray {
            return None;
        }
        if let Some(&until) = self.faults.removed_until.get(&pid)
            && until > t
        {
            return Some(Ok(Answer::json(
                410,
                &json!({"code": "REMOVED", "message": "GET /v1/inbox was switched off",
                        "details": {"old_path": "/v1/inbox", "replacement": "GET /v2/tray", "removed_on": "2027-02-06"}}),
            )));
        }
        if let Some(&until) = self.faults.throttled_until.get(&pid)
            && until > t
        {
            let mut a = Answer::json(
                429,
                &json!({"code": "RATE_LIMITED", "message": "slow down"}),
            );
            a.retry_after = Some(until.saturating_sub(t).div_ceil(1000).max(1).to_string());
            return Some(Ok(a));
        }
        None
    }

    /// How long an answer to profile `pid` takes each way (ms): a tray read is slow in a slow
    /// window.
    pub fn latency(&self, t: u64, pid: usize, tray: bool, rng: &mut crate::core::rng::Rng) -> u64 {
        let slow = tray && self.faults.slow_until.get(&pid).is_some_and(|&u| u > t);
        if slow {
            1_000 + rng.below(12_000)
        } else {
            2 + rng.below(40)
        }
    }
}

/// A REST request of the listener's reached the server: its answer goes back.
pub fn rest(w: &mut World, pid: usize, r: Rest) {
    let Some(p) = w.profiles.get(pid) else {
        return;
    };
    if p.ended {
        return;
    }
    let key = p.key.clone();
    let t = w.t;
    let (input, tray) = match r {
        Rest::Me { req } => {
            let result = match w.server.fault(t, pid, false) {
                Some(Err(e)) => Err(e),
                Some(Ok(a)) => a.judged(client::ME).and_then(client::me_handle),
                None => {
                    let a = w.server.call(Some(&key), "GET", "/v1/agents/me", None);
                    a.judged(client::ME).and_then(client::me_handle)
                }
            };
            let api_base = p.cfg.api_base.clone();
            let result = result.map_err(|e| convert::me_error(&api_base, e));
            (Input::Me { req, result }, false)
        }
        Rest::Tray { cycle } => {
            if p.cancelled.contains(&cycle) {
                return;
            }
            let answer = match w.server.fault(t, pid, true) {
                Some(a) => a,
                None => Ok(w.server.call(Some(&key), "GET", client::INBOX_PATH, None)),
            };
            let budget_refused = matches!(&answer, Ok(a) if a.status == 429 && !a.fault);
            let parsed = answer.and_then(|a| a.judged(client::INBOX).and_then(client::tray_of));
            super::checks::tray_served(w, pid, cycle, budget_refused, parsed.as_ref().ok());
            let result = parsed.map_err(convert::tray_error);
            (Input::Tray { cycle, result }, true)
        }
        Rest::Texts { req, use_cache } => {
            let runtime = p.cfg.runtime.texts_runtime();
            let down = w.server.faults.texts_down_until > t;
            let fetched: Result<Texts, String> = match w.server.fault(t, pid, false) {
                Some(Err(e)) => Err(e.to_string()),
                _ if down => Err("GET /v1/texts answered HTTP 503".into()),
                Some(Ok(a)) => Err(format!("GET /v1/texts answered HTTP {}", a.status)),
                None => {
                    let a = w.server.call(
                        Some(&key),
                        "GET",
                        &format!("/v1/texts?runtime={runtime}"),
                        None,
                    );
                    a.judged(client::TEXTS)
                        .map_err(|e| e.to_string())
                        .and_then(|b| Texts::parse(b).map_err(|e| e.to_string()))
                        // Texts without a prompt are refused like missing ones and the last
                        // good copy stays in use, as `listen::texts::load` does.
                        .and_then(|t| match t.unusable() {
                            Some(why) => Err(format!("the served texts are refused: {why}")),
                            None => Ok(t),
                        })
                }
            };
            let wall = w.now().wall_ms;
            let cached = w.profiles.get(pid).and_then(|p| p.texts_cached.clone());
            let result = match fetched {
                Ok(texts) => {
                    let texts = Arc::new(texts);
                    if let Some(p) = w.profiles.get_mut(pid) {
                        p.texts_cached = Some(texts.clone());
                    }
                    Ok(LoadedTexts {
                        texts,
                        runtime,
                        source: TextsSource::Server,
                        at_ms: wall,
                    })
                }
                Err(_) if use_cache && cached.is_some() => match cached {
                    Some(texts) => Ok(LoadedTexts {
                        texts,
                        runtime,
                        source: TextsSource::Cache,
                        at_ms: wall,
                    }),
                    None => Err(MissingTexts {
                        runtime,
                        fetch: String::new(),
                        cache: None,
                    }),
                },
                Err(fetch) => Err(MissingTexts {
                    runtime,
                    fetch,
                    cache: use_cache.then(|| "no copy in the state dir".to_string()),
                }),
            };
            super::checks::texts_answered(w, pid, result.is_ok());
            (Input::Texts { req, result }, false)
        }
        Rest::Dismiss { cycle, invite_id } => {
            if p.cancelled.contains(&cycle) {
                return;
            }
            let answer = match w.server.fault(t, pid, false) {
                Some(a) => a,
                None => Ok(w.server.call(
                    Some(&key),
                    "POST",
                    &format!("/v1/groups/invites/{invite_id}/dismiss"),
                    Some(&json!({})),
                )),
            };
            let result =
                match client::dismissal(answer.and_then(|a| a.judged(client::DISMISS).map(drop))) {
                    Ok(client::Dismissal::Dismissed) => Dismissal::Dismissed,
                    Ok(client::Dismissal::NotPending) => Dismissal::NotPending,
                    Err(e) => Dismissal::Failed(e.to_string()),
                };
            (
                Input::Dismissed {
                    cycle,
                    invite_id,
                    result,
                },
                false,
            )
        }
    };
    let down = w.server.latency(t, pid, tray, &mut w.rng);
    w.after(down, Ev::Deliver(pid, input));
}

/// The server's timers of agent `h`: its re-wake ladder and defer reminders.
pub fn timers(w: &mut World, h: &str) {
    if w.server.tick_at.get(h).is_some_and(|&at| at <= w.t) {
        w.server.tick_at.remove(h);
    }
    crate::sim::timers::tick_agent(&mut w.server.lock(), h);
    w.server.timers_dirty = true;
}

/// When each profile's agent's timers are next due (a rung whose agent has no socket to take it
/// waits for one: the attach sets this again), at most one look a second.
pub fn schedule_timers(w: &mut World) {
    if !w.server.timers_dirty {
        return;
    }
    w.server.timers_dirty = false;
    let now = w.t;
    let handles: Vec<String> = w.profiles.iter().map(|p| p.handle.clone()).collect();
    let dues: Vec<(String, u64)> = {
        let s = w.server.lock();
        handles
            .into_iter()
            .filter_map(|h| {
                let a = s.agents.get(&h)?;
                let rewake = a.sockets.iter().any(|x| x.has("rewake"));
                let mut next: Option<u64> = None;
                if !a.ladder_off
                    && let Some(base) = a.ladder.base_v
                    && let Some(m) = crate::sim::model::RUNGS_MIN.get(usize::from(a.ladder.sent))
                {
                    let due = base + m * crate::sim::clock::MIN;
                    if due > now || rewake {
                        next = Some(due);
                    }
                }
                for v in a.views.values() {
                    if let Some(due) = v.defer.as_ref().and_then(|d| d.due_v) {
                        next = Some(next.map_or(due, |n| n.min(due)));
                    }
                }
                next.map(|n| (h, n.max(now + 1_000)))
            })
            .collect()
    };
    for (h, next) in dues {
        if w.server.tick_at.get(&h).is_none_or(|&at| next < at) {
            w.server.tick_at.insert(h.clone(), next);
            w.at(next, Ev::ServerTick(h));
        }
    }
}

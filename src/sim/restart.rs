//! A whole-server restart and the count of refused upgrades, for the control API
//! (`POST /_sim/restart`, `GET /_sim/refusals`; docs/local-server.md). A restart closes every
//! socket the way a restarting server does: a `1012 Service Restart` close frame (or whatever
//! code the caller names), or the TCP connection dropped with no close frame at all (`1006` to
//! the client); optionally, new upgrades are refused with HTTP 503 for a while, as a server that
//! is not back yet. Both are the ordinary reconnect backoff to a listener (contract 8: "the
//! ordinary backoff on any other close"). Agents, keys, messages and budgets stay, as in a
//! real server's database.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::model::Out;
use super::store::Store;

/// What was refused, and how often the server restarted.
#[derive(Debug, Clone, Default)]
pub struct Refusals {
    /// Refused upgrades by close code (`1013` the connect budget, `1008` a refused key).
    pub by_close_code: BTreeMap<u16, u64>,
    /// Upgrades answered with an HTTP status instead (`503` while restarting).
    pub by_http_status: BTreeMap<u16, u64>,
    pub restarts: u64,
    /// Upgrades are answered 503 until then.
    refuse_until: Option<Instant>,
}

/// How a restart closes the sockets.
#[derive(Debug, Clone)]
pub struct Restart {
    /// `None`: drop the TCP connections with no close frame.
    pub close: Option<(u16, String)>,
    /// Refuse upgrades with 503 for this long (real time) after the restart.
    pub refuse_for: Duration,
}

impl Store {
    /// Restarts the server: every socket of every agent closed as `how` says. Returns how many.
    pub fn restart(&mut self, how: &Restart) -> usize {
        self.refusals.restarts += 1;
        self.refusals.refuse_until =
            (!how.refuse_for.is_zero()).then(|| Instant::now() + how.refuse_for);
        let mut n = 0;
        for a in self.agents.values_mut() {
            for s in a.sockets.drain(..) {
                let out = match &how.close {
                    Some((code, reason)) => Out::Close(*code, reason.clone()),
                    None => Out::Drop,
                };
                n += usize::from(s.tx.send(out).is_ok());
            }
        }
        n
    }

    /// Whether upgrades are refused now (the restart's `refuse_ms`); counts the refusal.
    pub fn refuse_upgrade_while_restarting(&mut self) -> bool {
        let refusing = self
            .refusals
            .refuse_until
            .is_some_and(|t| Instant::now() < t);
        if refusing {
            *self.refusals.by_http_status.entry(503).or_default() += 1;
        }
        refusing
    }

    /// Counts an upgrade refused with a close code.
    pub fn count_refused(&mut self, code: u16) {
        *self.refusals.by_close_code.entry(code).or_default() += 1;
    }

    /// `GET /_sim/refusals`: counts by close code and HTTP status, restarts, and per client IP
    /// every attempt, the refused ones and the most any one minute of the budget held.
    pub fn refusals_body(&self) -> Value {
        let codes = |m: &BTreeMap<u16, u64>| -> Value {
            m.iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        let ips: Vec<Value> = self
            .ip_budgets
            .counts()
            .map(|(ip, c)| {
                json!({"ip": ip.to_string(), "attempts": c.attempts, "refused": c.refused,
                       "peak_per_minute": c.peak_per_minute,
                       "limit_per_minute": super::budget::IP_CONNECTS_PER_MINUTE})
            })
            .collect();
        json!({
            "close_codes": codes(&self.refusals.by_close_code),
            "http_statuses": codes(&self.refusals.by_http_status),
            "restarts": self.refusals.restarts,
            "ips": ips,
        })
    }
}

/// The body of `POST /_sim/restart`: `{"code": 1012, "reason": "Service Restart"}` (the
/// defaults), `{"drop": true}` for no close frame, and `refuse_ms` (real milliseconds, at most
/// 10 minutes) to answer upgrades 503 meanwhile.
pub fn parse(b: &Value) -> Result<Restart, String> {
    let refuse_ms = b.get("refuse_ms").and_then(Value::as_u64).unwrap_or(0);
    if refuse_ms > 600_000 {
        return Err("refuse_ms must be at most 600000 (10 minutes)".into());
    }
    let drop = b.get("drop").and_then(Value::as_bool).unwrap_or(false);
    let code = b.get("code").and_then(Value::as_u64).unwrap_or(1012);
    if !(1000..=4999).contains(&code) {
        return Err("code must be a WebSocket close code (1000-4999)".into());
    }
    let reason = b
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("Service Restart")
        .to_string();
    if reason.len() > 123 {
        return Err("reason must be at most 123 bytes".into());
    }
    Ok(Restart {
        close: (!drop).then_some((code as u16, reason)),
        refuse_for: Duration::from_millis(refuse_ms),
    })
}

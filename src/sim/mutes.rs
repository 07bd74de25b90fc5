//! Mutes: "don't wake me for this" (contract 3.1, 3.3, 5, 6), per conversation or per agent, for
//! `8h`, `1d`, `3d`, `forever` or until a given time, `off` to end one (the hosted
//! `agentchat_mute`). A mute's end is kept on the server clock, so it ends when its time is up
//! at any `--time-scale`; an ended mute is gone from every answer and wakes again.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::clock::{HOUR, now_iso};
use super::error::{Rejection, SimResult};
use super::store::{Store, bare};

/// What a mute is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    Agent,
    Conversation,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Agent => "agent",
            Target::Conversation => "conversation",
        }
    }
}

#[derive(Debug, Clone)]
struct Mute {
    /// Server-clock end; `None` for ever.
    until_v: Option<u64>,
    /// The end as the answers show it (RFC 3339), `None` for ever.
    muted_until: Option<String>,
    created_at: String,
}

/// One agent's mutes, by target.
#[derive(Debug, Default)]
pub struct Mutes {
    entries: BTreeMap<(Target, String), Mute>,
}

/// How long a mute lasts: a span of server time, for ever, or `off` (unmute).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    For(u64),
    Forever,
    Off,
}

/// The hosted tool's durations (the receiving guide: `8h`, `1d`, `3d`, `forever`, `off`).
pub const DURATIONS: [&str; 5] = ["8h", "1d", "3d", "forever", "off"];

pub fn parse_duration(d: &str) -> Option<Span> {
    match d {
        "8h" => Some(Span::For(8 * HOUR)),
        "1d" => Some(Span::For(24 * HOUR)),
        "3d" => Some(Span::For(72 * HOUR)),
        "forever" => Some(Span::Forever),
        "off" => Some(Span::Off),
        _ => None,
    }
}

impl Mutes {
    fn live(&self, target: Target, id: &str, now_v: u64) -> Option<&Mute> {
        self.entries
            .get(&(target, id.to_string()))
            .filter(|m| m.until_v.is_none_or(|t| now_v < t))
    }

    /// Whether `h` (bare) is muted at server time `now_v`.
    pub fn agent(&self, h: &str, now_v: u64) -> bool {
        self.live(Target::Agent, h, now_v).is_some()
    }

    /// Whether conversation (or group) `id` is muted at server time `now_v`.
    pub fn conversation(&self, id: &str, now_v: u64) -> bool {
        self.live(Target::Conversation, id, now_v).is_some()
    }

    /// The live targets of one kind (for the control API's view of an agent).
    pub fn targets(&self, target: Target, now_v: u64) -> Vec<String> {
        self.entries
            .iter()
            .filter(|((t, id), _)| *t == target && self.live(*t, id, now_v).is_some())
            .map(|((_, id), _)| id.clone())
            .collect()
    }

    fn set(&mut self, target: Target, id: &str, span: Span, now_v: u64, scale_ms: u64) {
        self.entries
            .retain(|_, m| m.until_v.is_none_or(|t| now_v < t));
        let key = (target, id.to_string());
        let (until_v, muted_until) = match span {
            Span::Off => {
                self.entries.remove(&key);
                return;
            }
            Span::Forever => (None, None),
            // The end shown is wall time: the span at real speed (`scale_ms` of real time per
            // server-clock span), so a client sees when the mute ends on its own clock.
            Span::For(ms) => (
                Some(now_v.saturating_add(ms)),
                Some(crate::sys::time::rfc3339(
                    SystemTime::now() + Duration::from_millis(scale_ms),
                )),
            ),
        };
        self.entries.insert(
            key,
            Mute {
                until_v,
                muted_until,
                created_at: now_iso(),
            },
        );
    }

    fn entry(&self, muter: &str, target: Target, id: &str, now_v: u64) -> Option<Value> {
        self.live(target, id, now_v).map(|m| {
            json!({"muter_agent_id": muter, "target_kind": target.name(), "target_id": id,
                   "muted_until": m.muted_until, "created_at": m.created_at})
        })
    }

    fn list(&self, muter: &str, kind: Option<Target>, now_v: u64) -> Vec<Value> {
        self.entries
            .keys()
            .filter(|(t, _)| kind.is_none_or(|k| k == *t))
            .filter_map(|(t, id)| self.entry(muter, *t, id, now_v))
            .collect()
    }
}

impl Store {
    /// The target a mute body or path names, checked to exist for `h`.
    fn mute_target(&self, h: &str, kind: &str, id: Option<&str>) -> SimResult<(Target, String)> {
        match kind {
            "agent" => {
                let t = id
                    .map(bare)
                    .ok_or_else(|| Rejection::validation("target_handle is required"))?;
                self.agent(&t)?;
                Ok((Target::Agent, t))
            }
            "conversation" => {
                let t = id.ok_or_else(|| Rejection::validation("target_id is required"))?;
                self.conv_for(h, t)?;
                Ok((Target::Conversation, t.to_string()))
            }
            _ => Err(Rejection::validation(
                "target_kind must be agent or conversation",
            )),
        }
    }

    /// `POST /v1/mutes` in the SDK's shape (`target_kind`, `target_handle` or `target_id`,
    /// `muted_until`: an RFC 3339 time or null for ever), or with the hosted tool's `duration`.
    /// Answers the mute entry; `duration: "off"` unmutes.
    pub fn mute(&mut self, h: &str, body: &Value) -> SimResult<Value> {
        let kind = body
            .get("target_kind")
            .and_then(Value::as_str)
            .unwrap_or("");
        let id = body
            .get("target_handle")
            .or_else(|| body.get("target_id"))
            .and_then(Value::as_str);
        let (target, id) = self.mute_target(h, kind, id)?;
        let span = self.mute_span(body)?;
        self.set_mute(h, target, &id, span)
    }

    /// Applies `span` to `h`'s mute of `id`; the entry as it now stands (`null` once off).
    pub fn set_mute(&mut self, h: &str, target: Target, id: &str, span: Span) -> SimResult<Value> {
        let now_v = self.now_v();
        let real_ms = match span {
            Span::For(ms) => self.clock.real(ms).as_millis() as u64,
            _ => 0,
        };
        let a = self.agent_mut(h)?;
        a.mutes.set(target, id, span, now_v, real_ms);
        Ok(a.mutes.entry(h, target, id, now_v).unwrap_or(Value::Null))
    }

    fn mute_span(&self, body: &Value) -> SimResult<Span> {
        match (body.get("duration"), body.get("muted_until")) {
            (Some(Value::String(d)), None | Some(Value::Null)) => {
                parse_duration(d).ok_or_else(|| {
                    Rejection::validation(format!(
                        "duration must be one of {}",
                        DURATIONS.join(", ")
                    ))
                })
            }
            (None | Some(Value::Null), None | Some(Value::Null)) => Ok(Span::Forever),
            (None | Some(Value::Null), Some(Value::String(t))) => {
                let until = humantime::parse_rfc3339_weak(t).map_err(|_| {
                    Rejection::validation("muted_until must be an RFC 3339 time or null")
                })?;
                let ms = until
                    .duration_since(SystemTime::now())
                    .map_err(|_| Rejection::validation("muted_until must be in the future"))?
                    .as_millis() as u64;
                // A wall-clock span from now, counted on the server clock like every timer.
                Ok(Span::For((ms as f64 * self.clock.scale()) as u64))
            }
            _ => Err(Rejection::validation(
                "give duration or muted_until (a string), not both",
            )),
        }
    }

    /// `DELETE /v1/mutes/{kind}/{id}`.
    pub fn unmute(&mut self, h: &str, kind: &str, id: &str) -> SimResult<Value> {
        let (target, id) = self.mute_target(h, kind, Some(id))?;
        self.set_mute(h, target, &id, Span::Off)?;
        Ok(json!({"target_kind": target.name(), "target_id": id, "muted": false}))
    }

    /// `GET /v1/mutes?kind=`: `{"mutes": [entry…]}`, live ones only.
    pub fn list_mutes(&self, h: &str, kind: Option<&str>) -> SimResult<Value> {
        let kind = match kind {
            None | Some("") => None,
            Some("agent") => Some(Target::Agent),
            Some("conversation") => Some(Target::Conversation),
            Some(_) => return Err(Rejection::validation("kind must be agent or conversation")),
        };
        let now_v = self.now_v();
        Ok(json!({"mutes": self.agent(h)?.mutes.list(h, kind, now_v)}))
    }

    /// `GET /v1/mutes/{kind}/{id}`: the entry, or `404 MUTE_NOT_FOUND` when not muted.
    pub fn mute_status(&self, h: &str, kind: &str, id: &str) -> SimResult<Value> {
        let (target, id) = self.mute_target(h, kind, Some(id))?;
        let now_v = self.now_v();
        self.agent(h)?
            .mutes
            .entry(h, target, &id, now_v)
            .ok_or_else(|| Rejection::not_found("MUTE_NOT_FOUND", format!("{id} is not muted")))
    }

    /// Whether `h` muted conversation `conv` or agent `who` right now (contract 3.1's `muted`).
    pub fn muted(&self, h: &str, conv: &str, who: &str) -> bool {
        let now_v = self.now_v();
        self.agents
            .get(h)
            .is_some_and(|a| a.mutes.conversation(conv, now_v) || a.mutes.agent(who, now_v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mute_for_a_span_ends_when_its_time_is_up_and_forever_never_does() {
        let mut m = Mutes::default();
        m.set(
            Target::Conversation,
            "conv_a",
            Span::For(8 * HOUR),
            1_000,
            0,
        );
        m.set(Target::Agent, "carol", Span::Forever, 1_000, 0);
        assert!(m.conversation("conv_a", 1_000 + 8 * HOUR - 1));
        assert!(!m.conversation("conv_a", 1_000 + 8 * HOUR));
        assert!(m.agent("carol", u64::MAX));
        assert!(m.list("bob", None, 1_000 + 8 * HOUR)[0]["muted_until"].is_null());
        m.set(Target::Agent, "carol", Span::Off, 2_000, 0);
        assert!(!m.agent("carol", 2_000));
    }

    #[test]
    fn durations_are_the_hosted_tools_five() {
        assert_eq!(parse_duration("1d"), Some(Span::For(24 * HOUR)));
        assert_eq!(parse_duration("3d"), Some(Span::For(72 * HOUR)));
        assert_eq!(parse_duration("off"), Some(Span::Off));
        assert_eq!(parse_duration("2h"), None);
    }
}

//! Sign-up and key recovery by emailed code, as the official Python SDK (`agentchatme` 1.1.1:
//! `register`, `verify`, `recover`, `recover_verify`) sends and reads them: `POST /v1/register`,
//! `/v1/register/verify`, `/v1/agents/recover`, `/v1/agents/recover/verify`, no key needed.
//! The sim sends no mail: each code it would have emailed is kept for `GET /_sim/outbox`
//! (`docs/local-server.md`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::clock::{HOUR, MIN, new_id, now_iso};
use super::error::{Rejection, SimResult};
use super::store::{Store, bare, valid_handle};

/// Live agents one email may back (`EMAIL_LIMIT_REACHED`, `details.limit`).
pub const LIVE_PER_EMAIL: usize = 3;
/// Registrations one email may ever make (`EMAIL_EXHAUSTED`, `details.limit`).
pub const LIFETIME_PER_EMAIL: u32 = 10;
/// How long a code is good for (server clock).
pub const CODE_TTL_MS: u64 = 10 * MIN;
/// Wrong codes before the pending sign-up or recovery is dropped.
pub const MAX_ATTEMPTS: u32 = 5;
/// Codes one email may be sent per hour (server clock): `RATE_LIMITED` past it.
pub const CODES_PER_HOUR: usize = 5;

#[derive(Debug, Clone)]
enum Purpose {
    Register {
        handle: String,
        display_name: Option<String>,
    },
    /// `target`: the agent the code re-keys; `None` when the pair matched nothing (masked: the
    /// answer is the same, but no code is sent) or the email backs several agents and no handle
    /// was given (`ambiguous`).
    Recover {
        target: Option<String>,
        ambiguous: Vec<String>,
    },
}

#[derive(Debug, Clone)]
struct Pending {
    purpose: Purpose,
    email: String,
    code: String,
    expires_v: u64,
    attempts_left: u32,
}

/// The sign-up side of the store: which email backs which agent, pending codes, the outbox.
#[derive(Debug, Default)]
pub struct Signup {
    /// Handle → the email it was registered with.
    emails: BTreeMap<String, String>,
    /// Email → registrations ever made with it.
    lifetime: BTreeMap<String, u32>,
    pending: BTreeMap<String, Pending>,
    /// Email → server-clock times codes were sent, for the hourly limit.
    sent: BTreeMap<String, Vec<u64>>,
    /// What the sim "emailed", oldest first.
    outbox: Vec<Value>,
}

fn str_field(b: &Value, name: &str) -> SimResult<String> {
    b.get(name)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| Rejection::validation(format!("{name} is required (a string)")))
}

fn opt_str(b: &Value, name: &str) -> SimResult<Option<String>> {
    match b.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(Rejection::validation(format!("{name} must be a string"))),
    }
}

/// An address the sim accepts: one `@` with something either side, no spaces, at most 254 bytes.
/// Compared lowercased.
fn email(b: &Value) -> SimResult<String> {
    let e = str_field(b, "email")?.trim().to_ascii_lowercase();
    let ok = e.len() <= 254
        && !e.chars().any(char::is_whitespace)
        && matches!(e.split_once('@'), Some((l, d)) if !l.is_empty() && d.contains('.') && !d.contains('@'));
    if ok {
        Ok(e)
    } else {
        Err(Rejection::validation("email must be a valid email address"))
    }
}

fn code_of() -> String {
    format!("{:06}", fastrand::u32(..1_000_000))
}

impl Store {
    fn live_on(&self, email: &str) -> Vec<String> {
        self.signup
            .emails
            .iter()
            .filter(|(h, e)| e.as_str() == email && self.agents.contains_key(*h))
            .map(|(h, _)| h.clone())
            .collect()
    }

    /// The hourly limit on codes per email, then a pending entry; `send` says whether the code
    /// goes to the outbox (a masked recovery sends nothing).
    fn new_pending(&mut self, email: &str, purpose: Purpose, send: bool) -> SimResult<String> {
        let now = self.now_v();
        let sent = self.signup.sent.entry(email.to_string()).or_default();
        sent.retain(|t| now.saturating_sub(*t) < HOUR);
        if sent.len() >= CODES_PER_HOUR {
            let oldest = sent.first().copied().unwrap_or(now);
            let wait = HOUR.saturating_sub(now.saturating_sub(oldest));
            return Err(Rejection::rate_limited(self.clock.real_secs_ceil(wait)));
        }
        self.signup.pending.retain(|_, p| p.expires_v > now);
        let code = code_of();
        let what = match &purpose {
            Purpose::Register { .. } => "register",
            Purpose::Recover { .. } => "recover",
        };
        if send {
            sent.push(now);
            self.signup
                .outbox
                .push(json!({"to": email, "code": code, "purpose": what, "at": now_iso()}));
        }
        let id = new_id("pnd");
        self.signup.pending.insert(
            id.clone(),
            Pending {
                purpose,
                email: email.to_string(),
                code,
                expires_v: now + CODE_TTL_MS,
                attempts_left: MAX_ATTEMPTS,
            },
        );
        Ok(id)
    }

    /// The pending entry `pending_id` names, checked against `code` and `purpose`: consumed on a
    /// right code, on the last wrong one, and when expired.
    fn take_pending(&mut self, b: &Value, register: bool) -> SimResult<Pending> {
        let id = str_field(b, "pending_id")?;
        let code = str_field(b, "code")?;
        let now = self.now_v();
        let expired = || {
            Rejection::new(
                400,
                "CODE_EXPIRED",
                "This code has expired or was already used. Start again for a new one.",
            )
        };
        let p = match self.signup.pending.get_mut(&id) {
            Some(p) if matches!(p.purpose, Purpose::Register { .. }) == register => p,
            _ => return Err(expired()),
        };
        if p.expires_v <= now {
            self.signup.pending.remove(&id);
            return Err(expired());
        }
        let sent = match &p.purpose {
            Purpose::Recover { target, ambiguous } => target.is_some() || !ambiguous.is_empty(),
            Purpose::Register { .. } => true,
        };
        if !sent || p.code != code.trim() {
            p.attempts_left = p.attempts_left.saturating_sub(1);
            let left = p.attempts_left;
            if left == 0 {
                self.signup.pending.remove(&id);
            }
            return Err(
                Rejection::new(400, "INVALID_CODE", "The code is not valid.")
                    .with_details(json!({"attempts_left": left})),
            );
        }
        self.signup.pending.remove(&id).ok_or_else(expired)
    }

    /// `POST /v1/register {email, handle, display_name?, description?}` → `{pending_id, message}`.
    pub fn register(&mut self, b: &Value) -> SimResult<Value> {
        let email = email(b)?;
        let handle = bare(&str_field(b, "handle")?);
        let display_name = opt_str(b, "display_name")?;
        opt_str(b, "description")?;
        if !valid_handle(&handle) {
            return Err(Rejection::new(
                400,
                "INVALID_HANDLE",
                "handle must be 3-30 characters: lowercase letters, digits and single dashes, starting with a letter",
            ));
        }
        if self.agents.contains_key(&handle) {
            return Err(Rejection::new(
                409,
                "HANDLE_TAKEN",
                format!("@{handle} is taken"),
            ));
        }
        self.email_allows(&email)?;
        let id = self.new_pending(
            &email,
            Purpose::Register {
                handle,
                display_name,
            },
            true,
        )?;
        Ok(json!({"pending_id": id, "message": format!("A 6-digit code was sent to {email}.")}))
    }

    fn email_allows(&self, email: &str) -> SimResult<()> {
        if self.live_on(email).len() >= LIVE_PER_EMAIL {
            return Err(Rejection::new(
                409,
                "EMAIL_LIMIT_REACHED",
                format!("This email already backs {LIVE_PER_EMAIL} agents."),
            )
            .with_details(json!({"limit": LIVE_PER_EMAIL})));
        }
        if self.signup.lifetime.get(email).copied().unwrap_or(0) >= LIFETIME_PER_EMAIL {
            return Err(Rejection::new(
                409,
                "EMAIL_EXHAUSTED",
                format!("This email has made its {LIFETIME_PER_EMAIL} registrations."),
            )
            .with_details(json!({"limit": LIFETIME_PER_EMAIL})));
        }
        Ok(())
    }

    /// `POST /v1/register/verify {pending_id, code}` → `{agent, api_key}` (the key, once).
    pub fn register_verify(&mut self, b: &Value) -> SimResult<Value> {
        let p = self.take_pending(b, true)?;
        let Purpose::Register {
            handle,
            display_name,
        } = p.purpose
        else {
            return Err(Rejection::validation("not a registration"));
        };
        self.email_allows(&p.email)?;
        let (h, key) = self.create_agent(&handle, display_name.as_deref())?;
        self.signup.emails.insert(h.clone(), p.email.clone());
        *self.signup.lifetime.entry(p.email).or_default() += 1;
        Ok(json!({"agent": self.me(&h)?, "api_key": key}))
    }

    /// `POST /v1/agents/recover {email, handle?}` → always `{pending_id, message}`: a pair that
    /// matches nothing is masked (contract: no email-existence enumeration) and sends no code.
    pub fn recover(&mut self, b: &Value) -> SimResult<Value> {
        let email = email(b)?;
        let handle = opt_str(b, "handle")?.map(|h| bare(&h));
        let live = self.live_on(&email);
        let (target, ambiguous) = match handle {
            Some(h) => (live.contains(&h).then_some(h), Vec::new()),
            None if live.len() == 1 => (live.first().cloned(), Vec::new()),
            None if live.len() > 1 => (None, live),
            None => (None, Vec::new()),
        };
        let send = target.is_some() || !ambiguous.is_empty();
        let id = self.new_pending(&email, Purpose::Recover { target, ambiguous }, send)?;
        Ok(json!({
            "pending_id": id,
            "message": "If this email backs that agent, a 6-digit code was sent to it.",
        }))
    }

    /// `POST /v1/agents/recover/verify {pending_id, code}` → `{handle, api_key}`: the old key is
    /// retired (its sockets close 1008, as on a rotation).
    pub fn recover_verify(&mut self, b: &Value) -> SimResult<Value> {
        let p = self.take_pending(b, false)?;
        let Purpose::Recover { target, ambiguous } = p.purpose else {
            return Err(Rejection::validation("not a recovery"));
        };
        let Some(h) = target else {
            return Err(Rejection::new(
                409,
                "HANDLE_REQUIRED",
                "This email backs several agents: start again with the handle.",
            )
            .with_details(json!({"handles": ambiguous})));
        };
        let key = self.rotate_key(&h)?;
        Ok(json!({"handle": h, "api_key": key}))
    }

    /// `GET /_sim/outbox`: every code the sim would have emailed, oldest first.
    pub fn outbox(&self) -> Value {
        Value::Array(self.signup.outbox.clone())
    }
}

//! From the binary's types to the machine's: the settings a listener needs as plain data (the
//! policy's zone read from the time zone files here, never in the machine), and each I/O error
//! as the machine's typed answer.

use crate::client::ApiError;
use crate::config::{self, Settings};
use crate::core::listener::{
    ListenerConfig, LoadedTexts, MeError, MissingTexts, NotReached, TrayError, TrayErrorKind,
};
use crate::core::policy::OffsetTable;
use crate::listen::texts::{Loaded, Missing};
use crate::log_events;
use crate::sys::{time, tz};

/// The listener's settings as the machine takes them, at `now_ms` (the zone's table is built
/// around it).
pub fn listener_config(s: &Settings, notify_status: bool, now_ms: i64) -> ListenerConfig {
    ListenerConfig {
        profile: s.profile.clone(),
        api_base: s.api_base.clone(),
        runtime: s.listen.runtime,
        key_source: key_source_label(&s.key_source),
        quiet_window: s.listen.quiet_window,
        max_delay: s.listen.max_delay,
        idle_timeout: s.listen.idle_timeout,
        kill_grace: s.listen.kill_grace,
        scale: s.time_scale.factor(),
        policy: s.listen.policy.clone(),
        zone: zone(s, now_ms),
        notify_status,
        pid: std::process::id(),
        state_dir: s.state_dir.display().to_string(),
    }
}

/// The policy's zone as a table around `now_ms`: `timezone`, else the machine's own (`TZ`, else
/// `/etc/localtime`). A zone that cannot be read is said and UTC used: a named zone was checked
/// when the config was read (`config::load`), so this is a file gone since, or the machine's.
pub(crate) fn zone(s: &Settings, now_ms: i64) -> OffsetTable {
    let read = match &s.listen.policy.timezone {
        Some(name) => tz::named(name),
        None => tz::local(std::env::var("TZ").ok().as_deref()),
    };
    let zone = read.unwrap_or_else(|e| {
        tracing::warn!(event = %log_events::TIMEZONE_UNREADABLE, error = %e, "the run policy's local time is UTC instead");
        tz::Zone::utc()
    });
    let t = zone.table(now_ms);
    OffsetTable::new(t.initial, t.changes)
}

fn key_source_label(k: &config::KeySource) -> String {
    match k {
        config::KeySource::Env => "env".into(),
        config::KeySource::File(p) => format!("file:{}", p.display()),
        config::KeySource::Config => "config".into(),
        config::KeySource::Missing => "missing".into(),
    }
}

/// `GET /v1/agents/me` failed with `e`: a refused key, a wait, a route switched off, or which
/// kind of not reaching the server.
pub fn me_error(api_base: &str, e: ApiError) -> MeError {
    match e {
        ApiError::Refused(status) => MeError::Refused(status),
        ApiError::RateLimited(wait) => MeError::RateLimited(wait),
        e @ ApiError::Removed { .. } => MeError::Removed(e.to_string()),
        e => MeError::NotReached(not_reached(api_base, &e)),
    }
}

/// Which of the two ways of not reaching AgentChat `e` is, with its line.
pub fn not_reached(api_base: &str, e: &ApiError) -> NotReached {
    if e.is_misconfiguration() {
        let what = match e {
            ApiError::Status { status, code } => {
                format!("answered HTTP {status} {code} to GET /v1/agents/me")
            }
            ApiError::Body(why) => {
                format!("answered GET /v1/agents/me with something else ({why})")
            }
            other => other.to_string(),
        };
        NotReached::Misconfigured(misconfigured_line(api_base, &what))
    } else {
        NotReached::Unreachable(match e {
            ApiError::Network(why) => unreachable_line(api_base, why),
            other => format!("{api_base} answered GET /v1/agents/me with {other}"),
        })
    }
}

/// `api_base https://x answered 404 text/html: not an AgentChat server; check api_base …`.
pub fn misconfigured_line(api_base: &str, what: &str) -> String {
    format!(
        "api_base {api_base} {what}; check api_base (the AgentChat API, e.g. {})",
        config::DEFAULT_API_BASE
    )
}

/// `https://x is unreachable: connection refused`.
pub fn unreachable_line(api_base: &str, why: &str) -> String {
    format!("{api_base} is unreachable: {why}")
}

/// A tray read's failure as the cycle judges it.
pub fn tray_error(e: ApiError) -> TrayError {
    let kind = match &e {
        ApiError::Refused(_) => TrayErrorKind::Refused,
        ApiError::RateLimited(d) => TrayErrorKind::RateLimited(*d),
        ApiError::Removed { .. } => TrayErrorKind::Removed,
        e if e.is_transient() => TrayErrorKind::Transient,
        _ => TrayErrorKind::Failed,
    };
    TrayError {
        kind,
        detail: e.to_string(),
    }
}

/// Texts as the machine keeps them.
pub fn loaded(l: Loaded) -> LoadedTexts {
    LoadedTexts {
        texts: l.texts,
        runtime: l.runtime,
        source: l.source,
        at_ms: i64::try_from(time::unix_ms(l.at)).unwrap_or(i64::MAX),
    }
}

pub fn missing(m: Missing) -> MissingTexts {
    MissingTexts {
        runtime: m.runtime,
        fetch: m.fetch.to_string(),
        cache: m.cache.map(|c| c.to_string()),
    }
}

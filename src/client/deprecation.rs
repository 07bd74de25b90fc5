//! Contract 7's deprecation, as the client meets it: the `Deprecation` and `Sunset` headers on
//! an answer (said once per route, so a user hears of a switch-off before it happens) and the
//! `REMOVED` refusal once a route is off (issue 29 item 12).

use super::{ApiError, Route};
use crate::log_events;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// The servers and routes whose deprecation the log already told, for the process's life: a
/// log line, not a profile's state. Keyed by the server too, so under `listen --all` one
/// profile's server deprecating a route never silences another server's word on it.
static TOLD: Mutex<BTreeSet<(String, &'static str)>> = Mutex::new(BTreeSet::new());

/// Whether `route` on `base` is told for the first time (and remembers that it now is).
fn first_telling(base: &str, route: &'static str) -> bool {
    TOLD.lock()
        .map(|mut told| told.insert((base.to_string(), route)))
        .unwrap_or(false)
}

/// Logs `route_deprecated` the first time `route`'s answer from `base` carries `Deprecation`
/// (with its `Sunset` when sent). Header values are the server's: only printable ASCII, at most
/// 80 characters, reach the log.
pub fn note_headers(base: &str, route: Route, headers: &reqwest::header::HeaderMap) {
    let Some(deprecation) = header(headers, "deprecation") else {
        return;
    };
    if !first_telling(base, route.label) {
        return;
    }
    let sunset = header(headers, "sunset").unwrap_or_else(|| "not given".into());
    tracing::warn!(
        event = %log_events::ROUTE_DEPRECATED,
        route = %route.label,
        api_base = %base,
        deprecation = %deprecation,
        sunset = %sunset,
        "the server marks {} deprecated (contract 7): it will be switched off, at the latest at {}; update agentchat before then",
        route.label,
        sunset
    );
}

fn header(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    let v = headers.get(name)?.to_str().ok()?;
    Some(shown(v))
}

/// A server's text as a log may show it: printable ASCII, at most 80 characters.
fn shown(v: &str) -> String {
    v.chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(80)
        .collect()
}

/// `REMOVED` in an error body (contract 7: `{"code": "REMOVED", "details": {old_path,
/// replacement, removed_on, docs}}`, on a `410` or a `400`): the route is off for good.
pub fn removed(route: Route, status: u16, body: &[u8]) -> Option<ApiError> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    if v.get("code").and_then(|c| c.as_str()) != Some("REMOVED") {
        return None;
    }
    let detail = |k: &str| {
        v.get("details")
            .and_then(|d| d.get(k))
            .and_then(|x| x.as_str())
            .map(shown)
    };
    Some(ApiError::Removed {
        route: route.label,
        status,
        replacement: detail("replacement").unwrap_or_else(|| "not named".into()),
        removed_on: detail("removed_on"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deprecation_is_told_once_per_server_and_route_so_one_server_never_silences_another() {
        let (a, b) = ("http://a.test:1", "http://b.test:1");
        assert!(first_telling(a, "GET /v1/inbox"));
        assert!(!first_telling(a, "GET /v1/inbox"), "told once");
        assert!(
            first_telling(b, "GET /v1/inbox"),
            "another server's word is told too"
        );
        assert!(first_telling(a, "GET /v1/texts"), "and another route's");
    }

    #[test]
    fn removed_names_the_route_and_the_replacement_and_nothing_else_is_removed() {
        let body = br#"{"code":"REMOVED","message":"off","details":{"old_path":"/v1/inbox","replacement":"GET /v2/tray\u0007","removed_on":"2027-02-06","docs":"d"}}"#;
        let e = removed(super::super::INBOX, 410, body).unwrap();
        assert_eq!(
            e,
            ApiError::Removed {
                route: "GET /v1/inbox",
                status: 410,
                replacement: "GET /v2/tray".into(),
                removed_on: Some("2027-02-06".into()),
            }
        );
        let line = e.to_string();
        assert!(
            line.contains("GET /v1/inbox") && line.contains("GET /v2/tray"),
            "{line}"
        );
        assert!(!e.is_transient() && !e.is_misconfiguration());
        assert!(removed(super::super::INBOX, 410, br#"{"code":"GROUP_DELETED"}"#).is_none());
        assert!(removed(super::super::INBOX, 410, b"<html>").is_none());
    }
}

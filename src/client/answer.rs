//! Judging an answer: AgentChat's or not (contract 7's error shape), its media type, and
//! reading its body under the route's cap.

use super::ApiError;
use crate::sys::fs::show_size;

/// One REST route as errors name it, and the most its 2xx body may hold. The caps follow the
/// contract's shapes with room to spare: the tray is at most 50 cards (previews <= 240 chars)
/// and 20 invites (contract 3.1), about 35 KB for 50 full cards (benches/core.rs), so 1 MiB; the
/// texts are a few KB of prompts (conformance/texts.sample.json is 3 KB), so 1 MiB too; `me` and a
/// dismiss answer are one small object, so 64 KiB (docs/decisions.md, "Bounded answers and
/// connections").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// `GET /v1/agents/me`: the method and path, never a query or an id.
    pub label: &'static str,
    pub cap: u64,
}

pub const ME: Route = Route {
    label: "GET /v1/agents/me",
    cap: 64 * 1024,
};
pub const INBOX: Route = Route {
    label: "GET /v1/inbox",
    cap: 1024 * 1024,
};
pub const TEXTS: Route = Route {
    label: "GET /v1/texts",
    cap: 1024 * 1024,
};
pub const DISMISS: Route = Route {
    label: "POST /v1/groups/invites/{id}/dismiss",
    cap: 64 * 1024,
};
/// The most of an error answer's body read (AgentChat's is `{"code", "message"}`, contract 7); a
/// longer one (a proxy's page) is judged by what was read.
pub const ERROR_BODY_CAP: u64 = 64 * 1024;

/// The body of `resp` (status `status`) for `route`, read chunk by chunk under the request's
/// time limit (`REQUEST_TIMEOUT` covers the body too). A 2xx body over the route's cap is
/// `TooLarge`, refused by its `Content-Length` before anything is read when it declares one; an
/// error body is read up to `ERROR_BODY_CAP` and judged by that. A body that breaks off says
/// which route answered, its status and how much came.
pub async fn read_body(
    mut resp: reqwest::Response,
    route: Route,
    status: u16,
) -> Result<Vec<u8>, ApiError> {
    let success = (200..300).contains(&status);
    let cap = if success { route.cap } else { ERROR_BODY_CAP };
    let too_large = |read: u64| ApiError::TooLarge {
        route: route.label,
        status,
        read,
        cap,
    };
    if success && resp.content_length().is_some_and(|n| n > cap) {
        return Err(too_large(0));
    }
    let mut body: Vec<u8> = Vec::new();
    loop {
        let chunk = resp.chunk().await.map_err(|e| {
            ApiError::Network(format!(
                "{} ({} answered HTTP {status}, then its body broke off after {})",
                super::network_problem(&e),
                route.label,
                show_size(body.len() as u64)
            ))
        })?;
        let Some(chunk) = chunk else { break };
        let room = usize::try_from(cap)
            .unwrap_or(usize::MAX)
            .saturating_sub(body.len());
        if chunk.len() > room {
            if success {
                return Err(too_large((body.len() + chunk.len()) as u64));
            }
            body.extend_from_slice(chunk.get(..room).unwrap_or_default());
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `Ok` for an AgentChat answer with a 2xx status; otherwise the error it is. AgentChat answers
/// in JSON, errors in its error shape `{"code": …}` (contract 7); anything else answered by the
/// API base is `NotAgentChat`, except a 5xx or 408, which a proxy in front of a real server gives
/// during an outage. 401, 403 and 429 are judged before (they need no body).
pub fn judge_answer(
    status: u16,
    content_type: Option<String>,
    body: &[u8],
) -> Result<(), ApiError> {
    let json_type = content_type.as_deref().is_none_or(is_json_media_type);
    if (200..300).contains(&status) {
        let looks_json = matches!(
            body.iter().find(|b| !b.is_ascii_whitespace()),
            Some(b'{' | b'[')
        );
        return if json_type && looks_json {
            Ok(())
        } else {
            Err(ApiError::NotAgentChat {
                status,
                content_type,
            })
        };
    }
    let code = json_type
        .then(|| serde_json::from_slice::<serde_json::Value>(body).ok())
        .flatten()
        .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_string));
    match code {
        Some(code) => Err(ApiError::Status { status, code }),
        None if status >= 500 || status == 408 => Err(ApiError::Status {
            status,
            code: String::new(),
        }),
        None => Err(ApiError::NotAgentChat {
            status,
            content_type,
        }),
    }
}

/// The media type an answer names in its `Content-Type`, when it names one (`media_type`). The
/// socket's upgrade answer has the same headers type (one `http` crate).
pub fn content_type(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(media_type)
}

/// `text/html` of `text/html; charset=utf-8`, lower case.
pub fn media_type(header: &str) -> String {
    header
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// `application/json` or any `+json` type (`application/problem+json`).
pub(super) fn is_json_media_type(t: &str) -> bool {
    t == "application/json" || t.ends_with("+json")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_answer_that_is_not_agentchats_is_told_from_an_agentchat_error() {
        let html = Some("text/html".to_string());
        let json = Some("application/json".to_string());
        // An HTML 404 page, a JSON body without `code`, a 2xx web page: not AgentChat.
        for (status, ct, body) in [
            (404, html.clone(), &b"<html>Not Found</html>"[..]),
            (404, json.clone(), &b"{\"error\":\"nope\"}"[..]),
            (404, None, &b"Not Found"[..]),
            (200, html.clone(), &b"<!doctype html>"[..]),
            (200, None, &b"hello"[..]),
            (200, Some("text/plain".into()), &b"{}"[..]),
            (400, html.clone(), &b"<html>Bad Request</html>"[..]),
        ] {
            assert_eq!(
                judge_answer(status, ct.clone(), body),
                Err(ApiError::NotAgentChat {
                    status,
                    content_type: ct
                }),
                "{status} {body:?}"
            );
        }
        // AgentChat's error shape, and a proxy's 5xx page during an outage.
        assert_eq!(
            judge_answer(
                404,
                json.clone(),
                br#"{"code":"NOT_FOUND","message":"no route"}"#
            ),
            Err(ApiError::Status {
                status: 404,
                code: "NOT_FOUND".into()
            })
        );
        assert_eq!(
            judge_answer(502, html.clone(), b"<html>Bad Gateway</html>"),
            Err(ApiError::Status {
                status: 502,
                code: String::new()
            })
        );
        assert_eq!(
            judge_answer(200, json.clone(), b" {\"handle\":\"bob\"}"),
            Ok(())
        );
        assert_eq!(
            judge_answer(200, Some("application/problem+json".into()), b"[]"),
            Ok(())
        );
        assert_eq!(judge_answer(200, None, b"{}"), Ok(()));
    }

    #[test]
    fn what_answered_is_one_readable_line() {
        let e = ApiError::NotAgentChat {
            status: 404,
            content_type: Some(media_type("text/html; charset=utf-8")),
        };
        assert_eq!(
            e.to_string(),
            "answered 404 text/html: not an AgentChat server"
        );
        let e = ApiError::NotAgentChat {
            status: 200,
            content_type: None,
        };
        assert_eq!(
            e.to_string(),
            "answered 200 without a content type: not an AgentChat server"
        );
        assert!(e.is_misconfiguration() && !e.is_transient());
        let not_found = ApiError::Status {
            status: 404,
            code: "NOT_FOUND".into(),
        };
        assert!(not_found.is_misconfiguration());
        for outage in [
            ApiError::Network("connection refused".into()),
            ApiError::Status {
                status: 503,
                code: String::new(),
            },
            ApiError::RateLimited(Duration::from_secs(1)),
            ApiError::Refused(401),
        ] {
            assert!(!outage.is_misconfiguration(), "{outage}");
        }
    }
}

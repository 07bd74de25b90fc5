//! Judging an answer: AgentChat's or not (contract 7's error shape), its media type, and
//! reading its body under the route's cap.

use super::ApiError;

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
fn is_json_media_type(t: &str) -> bool {
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

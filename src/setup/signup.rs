//! Getting a key without one: sign-up (`POST /v1/register`, then `/v1/register/verify`) and
//! recovery of a lost key (`POST /v1/agents/recover`, then `/v1/agents/recover/verify`, which
//! rotates it), each by a 6-digit code the server emails. Bodies, answers and error codes as the
//! official Python SDK (`agentchatme` 1.1.1) sends and reads them. The key comes back once; the
//! caller stores it at once and never shows it.

use secrecy::SecretString;
use serde_json::{Value, json};
use std::time::Duration;

/// Most bytes of an answer read from these four routes.
const MAX_BODY: usize = 64 * 1024;
/// How long one request may take, answer included.
const TIME_LIMIT: Duration = Duration::from_secs(40);
/// Most characters of the server's own message shown to the user.
const MAX_MESSAGE: usize = 300;

/// Sign up a new agent, or recover the key of one the email backs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Register,
    Recover,
}

impl Flow {
    fn start_path(self) -> &'static str {
        match self {
            Flow::Register => "/v1/register",
            Flow::Recover => "/v1/agents/recover",
        }
    }
    fn verify_path(self) -> &'static str {
        match self {
            Flow::Register => "/v1/register/verify",
            Flow::Recover => "/v1/agents/recover/verify",
        }
    }
}

/// Why a step failed, in words for the user; `retry_code` when asking for the code again can help.
#[derive(Debug, thiserror::Error)]
#[error("{text}")]
pub struct SignupError {
    pub text: String,
    /// The code was wrong and the server allows another try.
    pub retry_code: bool,
    /// The handle cannot be had (taken or malformed): another one may work.
    pub retry_handle: bool,
    /// The email was refused (malformed, or it backs as many agents as it may): another may work.
    pub retry_email: bool,
    /// The code can no longer be used (expired, used, no tries left): only a new code helps.
    pub new_code: bool,
}

impl SignupError {
    fn plain(text: String) -> SignupError {
        SignupError {
            text,
            retry_code: false,
            retry_handle: false,
            retry_email: false,
            new_code: false,
        }
    }
}

/// The user's words for a refusal, from the error code the SDK branches on.
fn explain(status: u16, body: &Value, email: &str, handle: &str) -> SignupError {
    let code = body.get("code").and_then(Value::as_str).unwrap_or("");
    let message = body
        .get("message")
        .and_then(Value::as_str)
        .map(|m| crate::sys::text::ellipsize(m.trim().to_string(), MAX_MESSAGE))
        .filter(|m| !m.is_empty());
    let said = message.clone().unwrap_or_else(|| format!("HTTP {status}"));
    let details = body.get("details");
    let num = |k: &str| details.and_then(|d| d.get(k)).and_then(Value::as_u64);
    let mut e = SignupError::plain(match code {
        "HANDLE_TAKEN" => format!("@{handle} is taken: choose another handle"),
        "INVALID_HANDLE" => format!("`{handle}` cannot be a handle: {said}"),
        "EMAIL_LIMIT_REACHED" | "EMAIL_TAKEN" => format!(
            "{email} already backs as many agents as it may{}: delete one, or use another \
             email (a +alias counts as another)",
            num("limit").map(|n| format!(" ({n})")).unwrap_or_default()
        ),
        "EMAIL_EXHAUSTED" => format!(
            "{email} has used all its registrations{}: use another email",
            num("limit").map(|n| format!(" ({n})")).unwrap_or_default()
        ),
        "INVALID_CODE" => match num("attempts_left") {
            Some(0) => "that code is not right, and no tries are left for it".to_string(),
            Some(n) => format!("that code is not right ({n} tries left)"),
            None => "that code is not right".to_string(),
        },
        "CODE_EXPIRED" => {
            "the code expired (a code is good for 10 minutes) or was used already".into()
        }
        "HANDLE_REQUIRED" => {
            let hs: Vec<&str> = details
                .and_then(|d| d.get("handles"))
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            format!(
                "{email} backs several agents ({}): run again with --handle HANDLE",
                hs.join(", ")
            )
        }
        "RATE_LIMITED" => format!(
            "too many codes were asked for{}: {said}",
            if email.is_empty() {
                String::new()
            } else {
                format!(" {email}")
            }
        ),
        "VALIDATION_ERROR" => format!("the server refused it: {said}"),
        _ => match (code, message) {
            ("", None) => format!("the server answered HTTP {status}"),
            ("", Some(m)) => format!("the server answered HTTP {status}: {m}"),
            (c, None) => format!("the server answered HTTP {status} {c}"),
            (c, Some(m)) => format!("the server answered HTTP {status} {c}: {m}"),
        },
    });
    e.retry_code = code == "INVALID_CODE" && num("attempts_left") != Some(0);
    e.retry_handle = matches!(code, "HANDLE_TAKEN" | "INVALID_HANDLE");
    e.retry_email = matches!(
        code,
        "EMAIL_LIMIT_REACHED" | "EMAIL_TAKEN" | "EMAIL_EXHAUSTED"
    ) || code == "VALIDATION_ERROR" && said.to_ascii_lowercase().contains("email");
    e.new_code =
        code == "CODE_EXPIRED" || code == "INVALID_CODE" && num("attempts_left") == Some(0);
    e
}

/// One POST of `body` to `base``path`, the answer's JSON on a 2xx.
async fn post(base: &str, path: &str, body: &Value) -> Result<(u16, Value), SignupError> {
    let url = format!("{}{path}", base.trim_end_matches('/'));
    crate::sys::tls::require_roots_for(base).map_err(|e| SignupError::plain(e.to_string()))?;
    let http = crate::client::shared_http().map_err(|e| SignupError::plain(e.to_string()))?;
    let call = async {
        let mut resp = http
            .post(&url)
            .header("X-AgentChat-Client", crate::client::CLIENT_NAME)
            .header("X-AgentChat-Client-Version", crate::client::CLIENT_VERSION)
            .json(body)
            .send()
            .await
            .map_err(|e| crate::client::network_problem(&e))?;
        let status = resp.status().as_u16();
        let mut bytes = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| crate::client::network_problem(&e))?
        {
            if bytes.len() + chunk.len() > MAX_BODY {
                return Err(format!("its answer is over {MAX_BODY} bytes"));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((status, bytes))
    };
    let (status, bytes) = tokio::time::timeout(TIME_LIMIT, call)
        .await
        .map_err(|_| {
            SignupError::plain(format!(
                "{base} did not answer POST {path} within {} s",
                TIME_LIMIT.as_secs()
            ))
        })?
        .map_err(|e| {
            SignupError::plain(format!(
                "POST {path} at {base}: {e}{}",
                super::server::hint(base, &e)
            ))
        })?;
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok((status, v))
}

/// Step one: the server emails a code to `email`. Returns the `pending_id`.
pub async fn start(
    base: &str,
    flow: Flow,
    email: &str,
    handle: &str,
) -> Result<String, SignupError> {
    // As the SDK: `register` sends every field (unset ones as null); `recover` leaves a missing
    // handle out, since the server's schema makes it optional, not nullable.
    let body = match flow {
        Flow::Register => {
            json!({"email": email, "handle": handle, "display_name": null, "description": null})
        }
        Flow::Recover if handle.is_empty() => json!({"email": email}),
        Flow::Recover => json!({"email": email, "handle": handle}),
    };
    let (status, v) = post(base, flow.start_path(), &body).await?;
    if !(200..300).contains(&status) {
        return Err(explain(status, &v, email, handle));
    }
    v.get("pending_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| {
            SignupError::plain(format!(
                "the answer to POST {} has no pending_id",
                flow.start_path()
            ))
        })
}

/// Step two: the code. Returns the handle and the key (shown once by the server, never here).
pub async fn finish(
    base: &str,
    flow: Flow,
    pending_id: &str,
    code: &str,
    email: &str,
    handle: &str,
) -> Result<(String, SecretString), SignupError> {
    let body = json!({"pending_id": pending_id, "code": code.trim()});
    let (status, v) = post(base, flow.verify_path(), &body).await?;
    if !(200..300).contains(&status) {
        return Err(explain(status, &v, email, handle));
    }
    let key = v
        .get("api_key")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty());
    let got = match flow {
        Flow::Register => v.get("agent").and_then(|a| a.get("handle")),
        Flow::Recover => v.get("handle"),
    }
    .and_then(Value::as_str)
    .map(|h| h.trim_start_matches('@').to_string());
    match (key, got) {
        (Some(k), h) => Ok((
            h.unwrap_or_else(|| handle.to_string()),
            SecretString::from(k.to_string()),
        )),
        (None, _) => Err(SignupError::plain(format!(
            "the answer to POST {} has no api_key",
            flow.verify_path()
        ))),
    }
}

/// A 6-digit code as the user types it (spaces and dashes dropped), or `None`.
pub fn code_of(input: &str) -> Option<String> {
    let c: String = input
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .collect();
    (c.len() == 6 && c.bytes().all(|b| b.is_ascii_digit())).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_is_six_digits_however_it_is_spaced() {
        assert_eq!(code_of(" 123 456\n").as_deref(), Some("123456"));
        assert_eq!(code_of("123-456").as_deref(), Some("123456"));
        assert_eq!(code_of("12345"), None);
        assert_eq!(code_of("12345a"), None);
    }

    #[test]
    fn each_refusal_says_what_to_do_and_which_may_be_retried() {
        let e = explain(
            409,
            &json!({"code": "HANDLE_TAKEN", "message": "x"}),
            "a@b.c",
            "alice",
        );
        assert!(e.text.contains("@alice is taken") && e.retry_handle && !e.retry_code);
        let e = explain(
            400,
            &json!({"code": "INVALID_CODE", "message": "x", "details": {"attempts_left": 2}}),
            "a@b.c",
            "alice",
        );
        assert!(e.text.contains("2 tries left") && e.retry_code);
        let e = explain(
            400,
            &json!({"code": "INVALID_CODE", "details": {"attempts_left": 0}}),
            "a@b.c",
            "alice",
        );
        assert!(!e.retry_code && e.new_code && e.text.contains("no tries are left"));
        let e = explain(
            400,
            &json!({"code": "VALIDATION_ERROR", "message": "email must be a valid email address"}),
            "x",
            "alice",
        );
        assert!(e.retry_email && !e.retry_handle, "{}", e.text);
        let e = explain(400, &json!({"code": "CODE_EXPIRED"}), "a@b.c", "alice");
        assert!(
            e.new_code && !e.retry_code && e.text.contains("expired"),
            "{}",
            e.text
        );
        let e = explain(
            409,
            &json!({"code": "EMAIL_LIMIT_REACHED", "details": {"limit": 3}}),
            "a@b.c",
            "alice",
        );
        assert!(e.text.contains("(3)") && e.text.contains("another email"));
        let e = explain(
            409,
            &json!({"code": "HANDLE_REQUIRED", "details": {"handles": ["x1", "x2"]}}),
            "a@b.c",
            "",
        );
        assert!(e.text.contains("x1, x2") && e.text.contains("--handle"));
        let e = explain(502, &Value::Null, "a@b.c", "alice");
        assert!(e.text.ends_with("HTTP 502"), "{}", e.text);
    }
}

//! Telling a wrong `api_base` from an outage, for the socket task's log (docs/operating.md, "When
//! something is wrong"). Something that answers but is not AgentChat (an HTML 404 page, a web
//! site) is configuration: one ERROR naming `api_base` and what answered, then slow retries
//! without repeating it. Nothing answering (connection refused, a name that does not resolve, a
//! timeout, a proxy's 5xx) is an outage: INFO on each attempt, and one WARN once it has lasted
//! `UNREACHABLE_WARN_AFTER`. Neither ever ends the process: the user may fix the server.

use crate::client::ApiError;
use std::time::{Duration, Instant};

/// How long the server may stay unreachable before the log says so at WARN (once per outage).
/// Scaled by an honoured `AGENTCHAT_TEST_TIME_SCALE` (`config::TestTimeScale`).
pub const UNREACHABLE_WARN_AFTER: Duration = Duration::from_secs(300);
/// The wait between attempts while `api_base` answers as something other than AgentChat (the
/// ordinary backoff's cap, from the first attempt on); a reload (SIGHUP) retries at once.
/// Scaled like `UNREACHABLE_WARN_AFTER`.
pub const MISCONFIGURED_RETRY: Duration = crate::core::reconnect::BACKOFF_CAP;

/// Why the socket task reached no AgentChat server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReached {
    /// `api_base` answers, but not as AgentChat: the line says what answered.
    Misconfigured(String),
    /// Nothing (or only a 5xx) answered: the line says what happened.
    Unreachable(String),
}

impl NotReached {
    /// `GET /v1/agents/me` failed with `e` (not a refused key): which of the two it is.
    pub fn from_api(api_base: &str, e: &ApiError) -> NotReached {
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

    /// The line for status.json's `detail` and the log.
    pub fn detail(&self) -> &str {
        match self {
            NotReached::Misconfigured(d) | NotReached::Unreachable(d) => d,
        }
    }
}

/// `api_base https://x answered 404 text/html: not an AgentChat server; check api_base …`, from
/// what answered (`answered …`).
pub fn misconfigured_line(api_base: &str, what: &str) -> String {
    format!(
        "api_base {api_base} {what}; check api_base (the AgentChat API, e.g. {})",
        crate::config::DEFAULT_API_BASE
    )
}

/// `https://x is unreachable: connection refused`.
pub fn unreachable_line(api_base: &str, why: &str) -> String {
    format!("{api_base} is unreachable: {why}")
}

/// What to log for one failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Say {
    /// The first attempt that met a wrong `api_base`.
    Misconfigured,
    /// The attempt that made the outage `UNREACHABLE_WARN_AFTER` long.
    LongUnreachable { for_s: u64 },
    /// Any other attempt: the ordinary INFO line.
    Again,
}

/// The episodes of trouble so far: whether the wrong `api_base` was said, since when nothing
/// answers and whether that was said. Times are passed in, so the rules are tested without a
/// clock.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    /// The `api_base` the episodes are about.
    api_base: String,
    misconfigured_said: bool,
    unreachable_since: Option<Instant>,
    unreachable_said: bool,
}

impl Reach {
    /// An AgentChat server answered (the handle, an upgrade, a close), or the configuration
    /// changed (what was said was about the old one): both episodes end.
    pub fn reached(&mut self) {
        let api_base = std::mem::take(&mut self.api_base);
        *self = Reach {
            api_base,
            ..Reach::default()
        };
    }

    /// The next attempt goes to `api_base`: a new one (a reload that changed it) starts afresh,
    /// so a second wrong `api_base` is said too.
    pub fn attempt(&mut self, api_base: &str) {
        if self.api_base != api_base {
            self.reached();
            self.api_base = api_base.to_string();
        }
    }

    /// One failed attempt at `now`; an outage is said at WARN once it lasted `warn_after`.
    pub fn failed(&mut self, why: &NotReached, now: Instant, warn_after: Duration) -> Say {
        match why {
            NotReached::Misconfigured(_) => {
                // Something answered: whatever outage there was has ended.
                self.unreachable_since = None;
                self.unreachable_said = false;
                if std::mem::replace(&mut self.misconfigured_said, true) {
                    Say::Again
                } else {
                    Say::Misconfigured
                }
            }
            NotReached::Unreachable(_) => {
                let since = *self.unreachable_since.get_or_insert(now);
                let lasted = now.saturating_duration_since(since);
                if !self.unreachable_said && lasted >= warn_after {
                    self.unreachable_said = true;
                    Say::LongUnreachable {
                        for_s: lasted.as_secs(),
                    }
                } else {
                    Say::Again
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> NotReached {
        NotReached::from_api("http://h", &ApiError::Network("connection refused".into()))
    }

    fn html_404() -> NotReached {
        NotReached::from_api(
            "http://h",
            &ApiError::NotAgentChat {
                status: 404,
                content_type: Some("text/html".into()),
            },
        )
    }

    #[test]
    fn a_wrong_api_base_is_said_once_until_a_server_answers() {
        let mut r = Reach::default();
        let t = Instant::now();
        let w = Duration::from_secs(300);
        assert_eq!(r.failed(&html_404(), t, w), Say::Misconfigured);
        for i in 1..10 {
            let at = t + Duration::from_secs(i * 60);
            assert_eq!(r.failed(&html_404(), at, w), Say::Again);
        }
        // An outage between two wrong answers does not make the second one new.
        assert_eq!(r.failed(&refused(), t, w), Say::Again);
        assert_eq!(r.failed(&html_404(), t, w), Say::Again);
        r.reached();
        assert_eq!(r.failed(&html_404(), t, w), Say::Misconfigured);
        // The same api_base again says nothing new; another one is said.
        r.attempt("http://h");
        assert_eq!(r.failed(&html_404(), t, w), Say::Misconfigured);
        r.attempt("http://h");
        assert_eq!(r.failed(&html_404(), t, w), Say::Again);
        r.attempt("http://other");
        assert_eq!(r.failed(&html_404(), t, w), Say::Misconfigured);
    }

    #[test]
    fn an_outage_is_info_then_one_warn_after_the_threshold() {
        let mut r = Reach::default();
        let t = Instant::now();
        let w = Duration::from_secs(300);
        let at = |s| t + Duration::from_secs(s);
        assert_eq!(r.failed(&refused(), t, w), Say::Again);
        assert_eq!(r.failed(&refused(), at(299), w), Say::Again);
        assert_eq!(
            r.failed(&refused(), at(301), w),
            Say::LongUnreachable { for_s: 301 }
        );
        assert_eq!(r.failed(&refused(), at(900), w), Say::Again);
        // An answer ends the outage; the next one counts from its own start.
        r.reached();
        assert_eq!(r.failed(&refused(), at(1000), w), Say::Again);
        assert_eq!(
            r.failed(&refused(), at(1300), w),
            Say::LongUnreachable { for_s: 300 }
        );
        // A wrong answer in between also ends it.
        r.reached();
        assert_eq!(r.failed(&refused(), at(2000), w), Say::Again);
        assert_eq!(r.failed(&html_404(), at(2200), w), Say::Misconfigured);
        assert_eq!(r.failed(&refused(), at(2400), w), Say::Again);
        assert_eq!(r.failed(&refused(), at(2600), w), Say::Again);
    }

    #[test]
    fn the_lines_name_api_base_and_what_answered() {
        assert_eq!(
            html_404().detail(),
            "api_base http://h answered 404 text/html: not an AgentChat server; check api_base \
             (the AgentChat API, e.g. https://api.agentchat.me)"
        );
        assert_eq!(
            refused().detail(),
            "http://h is unreachable: connection refused"
        );
        let prefix = NotReached::from_api(
            "http://h/api",
            &ApiError::Status {
                status: 404,
                code: "NOT_FOUND".into(),
            },
        );
        assert!(
            matches!(&prefix, NotReached::Misconfigured(d) if d.starts_with("api_base http://h/api answered HTTP 404 NOT_FOUND")),
            "{prefix:?}"
        );
        let outage = NotReached::from_api(
            "http://h",
            &ApiError::Status {
                status: 502,
                code: String::new(),
            },
        );
        assert!(matches!(outage, NotReached::Unreachable(_)), "{outage:?}");
    }
}

//! Telling a wrong `api_base` from an outage, for the socket's log (docs/operating.md, "When
//! something is wrong"). Something that answers but is not AgentChat (an HTML 404 page, a web
//! site) is configuration: one ERROR naming `api_base` and what answered, then slow retries
//! without repeating it. Nothing answering (connection refused, a name that does not resolve, a
//! timeout, a proxy's 5xx) is an outage: INFO on each attempt, and one WARN once it has lasted
//! [`UNREACHABLE_WARN_AFTER`]. Neither ever ends the process: the user may fix the server.

use super::io::NotReached;
use std::time::Duration;

/// How long the server may stay unreachable before the log says so at WARN (once per outage).
pub const UNREACHABLE_WARN_AFTER: Duration = Duration::from_secs(300);
/// The wait between attempts while `api_base` answers as something other than AgentChat (the
/// ordinary backoff's cap, from the first attempt on); a reload (SIGHUP) retries at once.
pub const MISCONFIGURED_RETRY: Duration = crate::reconnect::BACKOFF_CAP;

/// What to log for one failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Say {
    /// The first attempt that met a wrong `api_base`.
    Misconfigured,
    /// The attempt that made the outage [`UNREACHABLE_WARN_AFTER`] long.
    LongUnreachable { for_s: u64 },
    /// Any other attempt: the ordinary INFO line.
    Again,
}

/// The episodes of trouble so far: whether the wrong `api_base` was said, since when nothing
/// answers (monotonic ms) and whether that was said.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    /// The `api_base` the episodes are about.
    api_base: String,
    misconfigured_said: bool,
    unreachable_since: Option<u64>,
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
    pub fn failed(&mut self, why: &NotReached, now: u64, warn_after: Duration) -> Say {
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
                let lasted = Duration::from_millis(now.saturating_sub(since));
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
        NotReached::Unreachable("http://h is unreachable: connection refused".into())
    }

    fn html_404() -> NotReached {
        NotReached::Misconfigured("api_base http://h answered 404 text/html".into())
    }

    const S: u64 = 1000;

    #[test]
    fn a_wrong_api_base_is_said_once_until_a_server_answers() {
        let mut r = Reach::default();
        let w = Duration::from_secs(300);
        assert_eq!(r.failed(&html_404(), 0, w), Say::Misconfigured);
        for i in 1..10 {
            assert_eq!(r.failed(&html_404(), i * 60 * S, w), Say::Again);
        }
        // An outage between two wrong answers does not make the second one new.
        assert_eq!(r.failed(&refused(), 0, w), Say::Again);
        assert_eq!(r.failed(&html_404(), 0, w), Say::Again);
        r.reached();
        assert_eq!(r.failed(&html_404(), 0, w), Say::Misconfigured);
        // The same api_base again says nothing new; another one is said.
        r.attempt("http://h");
        assert_eq!(r.failed(&html_404(), 0, w), Say::Misconfigured);
        r.attempt("http://h");
        assert_eq!(r.failed(&html_404(), 0, w), Say::Again);
        r.attempt("http://other");
        assert_eq!(r.failed(&html_404(), 0, w), Say::Misconfigured);
    }

    #[test]
    fn an_outage_is_info_then_one_warn_after_the_threshold() {
        let mut r = Reach::default();
        let w = Duration::from_secs(300);
        assert_eq!(r.failed(&refused(), 0, w), Say::Again);
        assert_eq!(r.failed(&refused(), 299 * S, w), Say::Again);
        assert_eq!(
            r.failed(&refused(), 301 * S, w),
            Say::LongUnreachable { for_s: 301 }
        );
        assert_eq!(r.failed(&refused(), 900 * S, w), Say::Again);
        // An answer ends the outage; the next one counts from its own start.
        r.reached();
        assert_eq!(r.failed(&refused(), 1000 * S, w), Say::Again);
        assert_eq!(
            r.failed(&refused(), 1300 * S, w),
            Say::LongUnreachable { for_s: 300 }
        );
        // A wrong answer in between also ends it.
        r.reached();
        assert_eq!(r.failed(&refused(), 2000 * S, w), Say::Again);
        assert_eq!(r.failed(&html_404(), 2200 * S, w), Say::Misconfigured);
        assert_eq!(r.failed(&refused(), 2400 * S, w), Say::Again);
        assert_eq!(r.failed(&refused(), 2600 * S, w), Say::Again);
    }
}

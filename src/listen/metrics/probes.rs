//! The probes' answers for one profile: `/healthz` (the main loop turns) and `/readyz` (a wake
//! can become a run). `Registry` puts the profiles' answers together for the process.

use super::Metrics;
use crate::core::status::{STALE_AFTER, quiet_allowance};
use std::time::SystemTime;

/// An answer of the endpoint: status code and a one-line body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub code: u16,
    pub line: String,
}

impl Metrics {
    // ---- the endpoint's answers ----

    /// `/healthz`: 200 while the main loop turns as often as `core::status::quiet_allowance`
    /// (the rule `agentchat status` applies to the status file) asks.
    pub fn health(&self) -> Probe {
        let i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let age = i.last_turn.map(|t| t.elapsed());
        let bound = age
            .and_then(|a| SystemTime::now().checked_sub(a))
            .map_or(STALE_AFTER, |turned| quiet_allowance(turned, i.next_retry));
        match (i.state.as_str(), age) {
            ("stopping" | "stopped", _) => Probe {
                code: 503,
                line: format!("the listener is {}", i.state),
            },
            (_, Some(a)) if a > bound => Probe {
                code: 503,
                line: format!(
                    "wedged: the main loop last turned {} s ago (bound {} s)",
                    a.as_secs(),
                    bound.as_secs()
                ),
            },
            (_, None) => Probe {
                code: 503,
                line: "the main loop has not turned yet".into(),
            },
            (state, Some(_)) => Probe {
                code: 200,
                line: format!("ok: the main loop turns ({state})"),
            },
        }
    }

    /// The listener is stopping or stopped: a host leaves such a profile (one being removed)
    /// out of the process's verdicts while others run.
    pub(super) fn stopping(&self) -> bool {
        let i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        matches!(i.state.as_str(), "stopping" | "stopped")
    }

    /// `/readyz`: 200 only while the socket is up and the key accepted.
    pub fn readiness(&self) -> Probe {
        let i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        readiness(&i.state, &i.socket, i.no_texts)
    }
}

/// Ready means a wake can become a run: the socket is up and nothing stops a run from starting
/// (`runtime_unusable`, `handle_mismatch`, no texts).
pub(super) fn readiness(state: &str, socket: &str, no_texts: bool) -> Probe {
    match (state, socket) {
        ("stopping" | "stopped", _) => Probe {
            code: 503,
            line: format!("not ready: the listener is {state}"),
        },
        ("upgrade_required", _) => Probe {
            code: 503,
            line: "not ready: the server requires a newer agentchat (close 4426 or REMOVED)".into(),
        },
        ("runtime_unusable" | "handle_mismatch", _) => Probe {
            code: 503,
            line: format!("not ready: no run can start ({state})"),
        },
        (_, "connected") if no_texts => Probe {
            code: 503,
            line: "not ready: no run can start (no texts for the runtime)".into(),
        },
        (_, "connected") => Probe {
            code: 200,
            line: "ready: the socket is up and the key accepted".into(),
        },
        (_, "key_refused") => Probe {
            code: 503,
            line: "not ready: the server refused the API key".into(),
        },
        (_, "") => Probe {
            code: 503,
            line: "not ready: starting".into(),
        },
        (_, other) => Probe {
            code: 503,
            line: format!("not ready: the socket is {other}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn sample<'a>(page: &'a str, series: &str) -> Option<&'a str> {
        page.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    #[test]
    fn health_is_ok_while_the_loop_turns_and_names_the_wedge_or_the_stop() {
        let m = Metrics::new("default");
        assert_eq!(m.health().code, 503, "before the first turn");
        m.observe_state("connected", "connected");
        assert_eq!(m.health().code, 200);
        m.inner.lock().unwrap().last_turn = Some(Instant::now() - Duration::from_secs(121));
        let p = m.health();
        assert_eq!(p.code, 503);
        assert!(
            p.line
                .starts_with("wedged: the main loop last turned 121 s ago (bound 120 s)"),
            "{}",
            p.line
        );
        // Waiting out a reconnect delay: quiet until past the retry is no wedge.
        m.inner.lock().unwrap().next_retry = Some(SystemTime::now() + Duration::from_secs(600));
        assert_eq!(m.health().code, 200);
        m.turned();
        m.inner.lock().unwrap().next_retry = None;
        assert_eq!(m.health().code, 200);
        m.observe_state("stopping", "connected");
        assert_eq!(
            m.health(),
            Probe {
                code: 503,
                line: "the listener is stopping".into()
            }
        );
    }

    #[test]
    fn ready_only_with_the_socket_up() {
        let m = Metrics::new("default");
        assert_eq!(m.readiness().code, 503);
        for (state, socket, code) in [
            ("connected", "connected", 200),
            // Waiting for a run slot of the process: connected, and its run will start.
            ("queued", "connected", 200),
            ("runtime_unusable", "connected", 503),
            ("handle_mismatch", "connected", 503),
            ("key_refused", "key_refused", 503),
            ("backoff", "backoff", 503),
            ("connecting", "connecting", 503),
            ("stopping", "connected", 503),
        ] {
            m.observe_state(state, socket);
            assert_eq!(m.readiness().code, code, "{state}/{socket}");
            let ready = if code == 200 { "1" } else { "0" };
            assert_eq!(
                sample(&m.render(), r#"agentchat_ready{profile="default"}"#),
                Some(ready)
            );
        }
        assert_eq!(m.readiness().line, "not ready: the listener is stopping");
    }
}

//! Close classification and the reconnect delay (contract 3.4, design 2,
//! `connect-budget.cases.json`). Randomness is injected as a number in [0, 1).

use std::time::Duration;

/// What a close (or failed connect) means for the next attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum CloseKind {
    /// `1013` with `retry_after=<s>`: the connect budget. Seconds as sent (unclamped).
    Budget { retry_after_s: u64 },
    /// `1008`, or HTTP 401/403 on the upgrade.
    KeyRefused,
    /// `4426`: the server requires a newer client.
    UpgradeRequired,
    /// Anything else, including `1013` without the hint and network errors.
    Ordinary,
}

/// Classifies a close frame's code and reason.
pub fn classify_close(code: u16, reason: &str) -> CloseKind {
    let _ = (code, reason);
    todo!("core: classify_close")
}

/// `retry_after=<s>` in a close reason, tolerant of spaces; `None` for garbage.
pub fn parse_retry_after(reason: &str) -> Option<u64> {
    let _ = reason;
    todo!("core: parse_retry_after")
}

/// The budget delay: clamp(s, 1 s, 1 h) plus 0-10 % above it, never less.
pub fn budget_delay(retry_after_s: u64, rand01: f64) -> Duration {
    let _ = (retry_after_s, rand01);
    todo!("core: budget_delay")
}

/// Ordinary backoff: 1 s doubling to 60 s with jitter, reset only after a connection stayed up 30 s.
#[derive(Debug, Clone, Default)]
pub struct Backoff {
    attempt: u32,
}

impl Backoff {
    /// The delay before the next attempt after a failure or close.
    pub fn next_delay(&mut self, rand01: f64) -> Duration {
        let _ = (rand01, self.attempt);
        todo!("core: backoff")
    }
    /// A connection ended after staying up `up_for`; resets when that was at least 30 s.
    pub fn connection_lasted(&mut self, up_for: Duration) {
        let _ = up_for;
        todo!("core: backoff")
    }
}

/// The delay before reconnecting after `kind`, given the ordinary backoff state.
/// `KeyRefused` waits `key_refused_retry` (10 min by default).
pub fn delay_after(
    kind: &CloseKind,
    backoff: &mut Backoff,
    key_refused_retry: Duration,
    rand01: f64,
) -> Duration {
    let _ = (kind, backoff, key_refused_retry, rand01);
    todo!("core: delay_after")
}

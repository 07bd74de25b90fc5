//! `status.json`'s invariants, on every document the listener writes (a full disk fails the
//! write; the document is still what it meant to say) and after every step: a stuck state says
//! why, backoff says when, connected means a socket the listener knows is up (and is said soon
//! after one comes up), a hold shown has not long ended (the listener looks at a hold's end at
//! least once a minute of its monotonic clock: after a suspend or a clock step, a minute more),
//! and a tray's long `429` wait is said.

use crate::core::status::{ListenerState, Status};
use crate::simulate::world::{Phase, World};

#[derive(Debug, Default)]
pub struct Per {
    /// The last state written, and when (true ms).
    last: Option<(u64, ListenerState)>,
}

fn parse_ms(s: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339(s).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}

pub fn written(w: &mut World, pid: usize, s: &Status) {
    let t = w.t;
    let wall = w.now().wall_ms;
    let until = s
        .held
        .as_ref()
        .map(|h| h.until.as_deref().and_then(parse_ms));
    let wait = w.checks.per.get(pid).and_then(|p| p.tray_wait);
    if let Some(p) = w.checks.per.get_mut(pid) {
        p.hold = until;
    }
    if let Some(h) = s.held.as_ref().filter(|h| h.reason == "loop_guard") {
        super::liveness::loop_held(w, pid, &h.cards);
    }
    let up = w
        .checks
        .sockets
        .get(pid)
        .is_some_and(|p| p.up_since.is_some());
    if let Some(p) = w.checks.statuses.get_mut(pid) {
        p.last = Some((t, s.state));
    }
    let detail = s.detail.as_deref().unwrap_or_default();
    let stuck = matches!(
        s.state,
        ListenerState::KeyRefused
            | ListenerState::RuntimeUnusable
            | ListenerState::HandleMismatch
            | ListenerState::UpgradeRequired
    );
    if stuck && detail.trim().is_empty() {
        let what = format!("status.json says {} with no detail", s.state.as_str());
        w.violated("status_stuck_has_detail", Some(pid), what);
    } else if s.state == ListenerState::Backoff && s.next_retry_at.is_none() {
        w.violated(
            "status_stuck_has_detail",
            Some(pid),
            "status.json says backoff with no next_retry_at".into(),
        );
    } else if s.state == ListenerState::Connected && !up {
        w.violated(
            "status_says_state",
            Some(pid),
            "status.json says connected while no socket is up".into(),
        );
    } else if let Some(Some(u)) = until
        && u + 61_000 < wall
        && t.saturating_sub(w.checks.last_clock_move()) > 61_000
    {
        let what = format!(
            "status.json shows a hold that ended at {} ({} s ago)",
            crate::core::time::rfc3339_ms(u),
            (wall - u) / 1000
        );
        w.violated("status_hold_current", Some(pid), what);
    } else if let Some((until, true)) = wait
        && until > t + 1_000
        && matches!(
            s.state,
            ListenerState::Connected | ListenerState::Backoff | ListenerState::Connecting
        )
        && !(detail.contains("429") || detail.contains("Retry-After"))
    {
        let what = format!(
            "status.json says {} ({}) while no tray read may come for {} s more (429 Retry-After)",
            s.state.as_str(),
            if detail.is_empty() {
                "no detail"
            } else {
                detail
            },
            (until - t) / 1000
        );
        w.violated("status_shows_wait", Some(pid), what);
    }
}

/// After a step: a socket up for a few seconds is shown.
pub fn after_step(w: &mut World) {
    if w.phase == Phase::Stopping {
        return;
    }
    let t = w.t;
    for pid in 0..w.checks.statuses.len() {
        let Some(u) = w.checks.sockets.get(pid).and_then(|p| p.up_since) else {
            continue;
        };
        let stale = w
            .checks
            .statuses
            .get(pid)
            .and_then(|p| p.last)
            .is_some_and(|(tw, st)| {
                tw < u && matches!(st, ListenerState::Backoff | ListenerState::Connecting)
            });
        if stale && t >= u + 3_000 {
            let detail = format!(
                "status.json still says backoff or connecting {} ms after the socket came up",
                t - u
            );
            w.violated("status_says_state", Some(pid), detail);
            return;
        }
    }
}

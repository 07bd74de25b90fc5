//! The socket's invariants: acks (a wake never, every message.new of a burst the listener read),
//! the connect budgets of contract 3.4 counted at the server, and a `1013`'s `retry_after`
//! waited, never less, and not much more.

use super::within;
use crate::core::frames::ServerFrame;
use crate::core::listener::InFrame;
use crate::simulate::world::World;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const MINUTE: u64 = 60_000;
const HOUR: u64 = 3_600_000;

#[derive(Debug, Default)]
pub struct Per {
    /// Each read burst's message ids, waiting for its acks.
    expected: BTreeMap<u64, Vec<String>>,
    /// Connections the listener asked to close or dropped.
    closing: BTreeSet<u64>,
    /// Connections whose first frame the listener was handed, and not their end.
    up: BTreeSet<u64>,
    /// Since when the listener has known a socket to be up.
    pub up_since: Option<u64>,
    attempts: VecDeque<u64>,
    allowed: VecDeque<u64>,
    /// A `1013` with `retry_after`: when it was handed over, and the wait (ms).
    budget_wait: Option<(u64, u64)>,
}

/// A burst handed over on `conn`: its acks expected, the socket's coming up, a budget's close.
/// Whether it is the connection's first frame (a connect), and whether the listener is closing
/// the connection (then it reads nothing of it).
pub fn burst(
    w: &mut World,
    pid: usize,
    conn: u64,
    frames: &[InFrame],
    parsed: &[Option<ServerFrame>],
    lost: bool,
) -> (bool, bool) {
    let t = w.t;
    let Some(p) = w.checks.sockets.get_mut(pid) else {
        return (false, false);
    };
    let closing = p.closing.contains(&conn);
    let ends = lost || frames.iter().any(|f| matches!(f, InFrame::Close(_)));
    let came_up =
        !closing && !p.up.contains(&conn) && frames.iter().any(|f| !matches!(f, InFrame::Close(_)));
    if came_up {
        p.up.insert(conn);
        p.up_since.get_or_insert(t);
    }
    if !closing && !ends {
        let ids: Vec<String> = parsed
            .iter()
            .filter_map(|f| match f {
                Some(ServerFrame::MessageNew(m)) => Some(m.id.clone()),
                _ => None,
            })
            .collect();
        p.expected.insert(conn, ids);
    }
    for f in frames {
        if let InFrame::Close(Some((1013, reason))) = f
            && let Some(s) = crate::core::reconnect::parse_retry_after(reason)
        {
            p.budget_wait = Some((t, s.saturating_mul(1000)));
        }
    }
    if ends {
        conn_over(w, pid, conn);
    }
    (came_up, closing)
}

/// The listener knows `conn` is over.
pub fn conn_over(w: &mut World, pid: usize, conn: u64) {
    if let Some(p) = w.checks.sockets.get_mut(pid) {
        p.up.remove(&conn);
        p.expected.remove(&conn);
        if p.up.is_empty() {
            p.up_since = None;
        }
    }
}

/// The listener closes or drops `conn`.
pub fn closing(w: &mut World, pid: usize, conn: u64) {
    if let Some(p) = w.checks.sockets.get_mut(pid) {
        p.closing.insert(conn);
    }
    conn_over(w, pid, conn);
}

/// The acks the listener asked for on `conn`.
pub fn acks(w: &mut World, pid: usize, conn: u64, ids: &[String]) {
    let Some(p) = w.checks.sockets.get_mut(pid) else {
        return;
    };
    let expected = p.expected.remove(&conn).unwrap_or_default();
    if let Some(bad) = ids.iter().find(|id| !expected.contains(id)) {
        let detail = format!(
            "acked {bad} on connection {conn}, which is no message.new of the burst it answers"
        );
        w.violated("wake_never_acked", Some(pid), detail);
        return;
    }
    if let Some(missed) = expected.iter().find(|id| !ids.contains(id)) {
        let detail = format!("message {missed} of the burst on connection {conn} was not acked");
        w.violated("message_acked", Some(pid), detail);
    }
}

/// The listener starts an attempt (who am I, or the dial): never inside a budget's wait, and
/// not long after it.
pub fn attempt(w: &mut World, pid: usize) {
    let t = w.t;
    let Some((at, wait)) = w
        .checks
        .sockets
        .get_mut(pid)
        .and_then(|p| p.budget_wait.take())
    else {
        return;
    };
    // A forward step of the wall clock is taken for a sleep, whose time counts as waited
    // (`core::reconnect::left_after_sleep`): the machine cannot tell the two apart.
    if t < at + wait && !w.checks.stepped_forward_since(at) {
        let detail = format!(
            "an attempt {} ms after a 1013 asked for retry_after={} s",
            t - at,
            wait / 1000
        );
        w.violated("retry_after_honoured", Some(pid), detail);
        return;
    }
    let late = at + wait + wait / 10 + 1_000;
    if t > late
        && !w.checks.clock_moved_since(at)
        && w.phase == crate::simulate::world::Phase::Chaos
    {
        let detail = format!(
            "the next attempt came {} ms after a 1013 asked for retry_after={} s (at most 10 % more)",
            t - at,
            wait / 1000
        );
        w.violated("retry_after_honoured", Some(pid), detail);
    }
}

/// An attempt reached the server: within the agent's and the IP's budgets.
pub fn dial_at_server(w: &mut World, pid: usize, allowed: bool) {
    let t = w.t;
    let ip = {
        w.checks.ip_attempts.push_back(t);
        within(&mut w.checks.ip_attempts, t, MINUTE)
    };
    w.checks.ip_peak = w.checks.ip_peak.max(ip);
    if allowed {
        w.checks.accepted_dials.push((t, pid));
    }
    let Some(p) = w.checks.sockets.get_mut(pid) else {
        return;
    };
    p.attempts.push_back(t);
    let minute = within(&mut p.attempts, t, MINUTE);
    if allowed {
        p.allowed.push_back(t);
    }
    let hour = within(&mut p.allowed, t, HOUR);
    if minute > 20 {
        w.violated(
            "connect_budget",
            Some(pid),
            format!("{minute} socket attempts in one minute (20 allowed)"),
        );
    } else if hour > 200 {
        w.violated(
            "connect_budget",
            Some(pid),
            format!("{hour} connects in one hour (200 allowed)"),
        );
    } else if ip > 300 {
        w.violated(
            "connect_budget",
            None,
            format!("{ip} socket attempts from one IP in one minute (300 allowed)"),
        );
    }
}

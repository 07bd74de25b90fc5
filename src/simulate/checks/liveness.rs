//! Liveness: every message for a profile's agent is seen by a run (its card on the tray the run
//! was started from, built after the message came), unless the user muted its conversation or
//! sender, the user's policy holds its sender for good (`allow`, `deny`, `groups`), or the loop
//! guard held its conversation (a loop's messages wait for a newer one or for the user: issue
//! 38 item 2; which conversations is the status's word, shown to the user). Checked
//! once the settle is over: with every fault healed and every socket dropped once (a connect
//! wakes each listener), every hold ended and every slow re-check done, nothing may be left.

use super::Muted;
use crate::core::policy::{Heard, HoldReason, Ledger, Verdict};
use crate::simulate::world::World;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug)]
struct Obligation {
    conv: String,
    sender: String,
    /// True ms the message was stored.
    t: u64,
}

/// The messages no run has seen yet, per profile and message id.
#[derive(Debug, Default)]
pub struct Obligations {
    open: BTreeMap<(usize, String), Obligation>,
    /// The conversations a profile's status showed held by the loop guard.
    loops: BTreeSet<(usize, String)>,
}

/// A status showed these conversations held by the loop guard.
pub fn loop_held(w: &mut World, pid: usize, cards: &[String]) {
    for c in cards {
        w.checks.obligations.loops.insert((pid, c.clone()));
    }
}

/// A message for profile `pid`'s agent was stored.
pub fn message(w: &mut World, pid: usize, id: &str, conv: &str, sender: &str, _group: bool) {
    if w.checks.is_muted(pid, conv, sender) {
        return;
    }
    let t = w.t;
    w.checks.obligations.open.insert(
        (pid, id.to_string()),
        Obligation {
            conv: conv.to_string(),
            sender: sender.to_string(),
            t,
        },
    );
}

/// The user muted a conversation or an agent: its messages owe no run.
pub fn muted(w: &mut World, pid: usize, what: &Muted) {
    w.checks.obligations.open.retain(|(p, _), o| {
        *p != pid
            || match what {
                Muted::Conversation(c) => o.conv != *c,
                Muted::Agent(a) => o.sender != *a,
            }
    });
}

/// A run starts from the tray served to its cycle: every message its cards cover is seen.
pub fn run_started(w: &mut World, pid: usize, cycle: u64) {
    let Some(tray) = w
        .checks
        .per
        .get(pid)
        .and_then(|p| p.served.get(&cycle))
        .cloned()
    else {
        return;
    };
    w.checks.obligations.open.retain(|(p, _), o| {
        *p != pid || o.t > tray.t || !tray.cards.iter().any(|c| c.conv == o.conv)
    });
}

/// After the settle: nothing left, but what the policy holds for good.
pub fn liveness(w: &mut World) {
    if w.checks.obligations.open.is_empty() {
        return;
    }
    let pids: Vec<usize> = w.checks.obligations.open.keys().map(|(p, _)| *p).collect();
    let mut held_convs: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for pid in pids {
        if held_convs.contains_key(&pid) {
            continue;
        }
        let Some(p) = w.profiles.get(pid) else {
            continue;
        };
        let key = p.key.clone();
        let policy = p.cfg.policy.clone();
        let a = w
            .server
            .call(Some(&key), "GET", crate::client::INBOX_PATH, None);
        let tray = crate::core::tray::Tray::parse(&a.body).ok();
        let held: Vec<String> = tray
            .map(|t| {
                t.conversations
                    .iter()
                    .filter(|c| {
                        matches!(
                            policy.card(c, &Ledger::new(), &Heard::default()),
                            Verdict::Held {
                                reason: HoldReason::NotAllowed,
                                ..
                            }
                        )
                    })
                    .map(|c| c.conversation_id.clone())
                    .collect()
            })
            .unwrap_or_default();
        held_convs.insert(pid, held);
    }
    let left: Vec<(usize, String, u64, String)> = w
        .checks
        .obligations
        .open
        .iter()
        .filter(|((pid, _), o)| !held_convs.get(pid).is_some_and(|h| h.contains(&o.conv)))
        .filter(|((pid, _), o)| !w.checks.obligations.loops.contains(&(*pid, o.conv.clone())))
        .map(|((pid, id), o)| (*pid, id.clone(), o.t, o.conv.clone()))
        .collect();
    if let Some((pid, id, t, conv)) = left.first().cloned() {
        let detail = format!(
            "{} message(s) never reached a run; the first, {id} in {conv}, came at {:.3} s",
            left.iter().filter(|l| l.0 == pid).count(),
            t as f64 / 1000.0
        );
        w.violated("message_runs", Some(pid), detail);
    }
}

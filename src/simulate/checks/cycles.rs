//! The cycles' invariants. The world counts the causes it gave each profile (tokens: message,
//! wake and invite frames, connects, reloads, and the ways out of a stuck state); the machine's
//! own wakes are claims that must be backed by one; a cycle's start takes every cause waiting;
//! a run's reasons must be backed by its cycle's causes. Also one run at a time, the slots, the
//! recoveries' single run, a hold's single end, mute, the invite rule, the tray's `429` waits and
//! the server's poll budget.

use super::{CardSeen, Served, ServedTray};
use crate::core::engine::WakeCause;
use crate::core::frames::ServerFrame;
use crate::core::listener::{RunEnd, RunOrder, RunOutcome, TrayError, TrayErrorKind};
use crate::core::status::{ListenerWake, NoRunReason, Outcome};
use crate::core::tray::Tray;
use crate::simulate::world::{Heard, World};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The engine's dedupe memory (`core::engine::DEFAULT_DEDUPE_CAPACITY`), mirrored.
const DEDUPE: usize = crate::core::engine::DEFAULT_DEDUPE_CAPACITY;
/// A tray `429` whose wait a cycle does not wait out (`core::listener::cycle`'s `MAX_RETRY_AFTER`).
const CYCLE_WAIT_MAX_MS: u64 = 300_000;

/// Situations a run reached (`Report::reached`): a run refused by its runtime, a hold's end whose
/// cycle could not read the tray, a cycle woken only by muted mail that read a tray cut short.
pub const RUN_REFUSED: &str = "run_refused";
pub const HOLD_END_UNREADABLE: &str = "hold_end_unreadable";
pub const MUTED_PAST_CUT: &str = "muted_past_cut";

/// The causes the world gave, waiting for a cycle (or taken by one).
#[derive(Debug, Default, Clone)]
struct Tokens {
    messages: u32,
    /// Of `messages`, those in a conversation (or from an agent) the user muted.
    muted: u32,
    /// Their conversations.
    muted_convs: BTreeSet<String>,
    invites: u32,
    wakes: BTreeSet<String>,
    connects: u32,
    own: BTreeSet<&'static str>,
}

impl Tokens {
    fn only_muted(&self) -> bool {
        self.messages > 0
            && self.muted == self.messages
            && self.invites == 0
            && self.wakes.is_empty()
            && self.connects == 0
            && self.own.is_empty()
    }

    fn backs(&self, reason: &str) -> bool {
        match reason {
            "message" => self.messages > 0,
            "invite" => self.invites > 0,
            "connect" => self.connects > 0,
            "recovered" | "hold_ended" | "backlog" => self.own.contains(reason),
            other => self.wakes.contains(other),
        }
    }
}

/// The last run of a profile's, as the private-ladder rule needs it.
#[derive(Debug, Clone, Copy)]
struct LastRun {
    only_recovered: bool,
    refused: bool,
}

#[derive(Debug, Default)]
pub struct Per {
    pub served: Served,
    pending: Tokens,
    cycle: Tokens,
    cycle_truncated: bool,
    pub run_live: bool,
    run: Option<(u64, Vec<String>)>,
    /// The run of this cycle ended (completed?) at this listener wall time: its after-tray counts
    /// for the invite rule.
    run_end: Option<(u64, bool, i64)>,
    last_run: Option<LastRun>,
    external_since_run: bool,
    recovery_tokens: u32,
    backlog_tokens: u32,
    /// A hold was judged, with its end (listener wall ms) once the status said it.
    pub hold: Option<Option<i64>>,
    hold_claims: u32,
    reloaded: bool,
    /// Per invite: the listener-wall ends of completed runs that left it pending.
    left_pending: BTreeMap<String, Vec<i64>>,
    /// No tray read before then (true ms), and whether that wait outlasts a cycle.
    pub tray_wait: Option<(u64, bool)>,
    /// The last tray read failed.
    tray_failed: bool,
    seen: BTreeSet<String>,
    seen_order: VecDeque<String>,
    /// Each conversation a tray served to this profile showed, muted or not as the last one
    /// said: what the listener can know of a mute (a `message.new` does not say it).
    shown_muted: BTreeMap<String, bool>,
    /// The wall clock was stepped back while a hold was judged: the hold is judged again
    /// (issue 38 item 8), which may end it once.
    clock_back: bool,
}

/// The wall clock was stepped back (`Checks::stepped_back`).
pub fn clock_back(p: &mut Per) {
    if p.hold.is_some() {
        p.clock_back = true;
    }
}

fn per(w: &mut World, pid: usize) -> Option<&mut Per> {
    w.checks.per.get_mut(pid)
}

/// A burst's frames as causes (those the engine wakes for).
pub fn burst(
    w: &mut World,
    pid: usize,
    parsed: &[Option<ServerFrame>],
    came_up: bool,
    closing: bool,
) {
    if closing {
        return;
    }
    let own = w
        .profiles
        .get(pid)
        .map(|p| p.handle.clone())
        .unwrap_or_default();
    let muted: Vec<bool> = parsed
        .iter()
        .map(|f| match f {
            Some(ServerFrame::MessageNew(m)) => w.checks.is_muted(
                pid,
                m.conversation_id.as_deref().unwrap_or_default(),
                m.sender.as_deref().unwrap_or_default(),
            ),
            _ => false,
        })
        .collect();
    let Some(p) = per(w, pid) else {
        return;
    };
    if came_up {
        p.pending.connects += 1;
        p.external_since_run = true;
    }
    for (frame, muted) in parsed.iter().zip(muted) {
        match frame {
            Some(ServerFrame::MessageNew(m)) => {
                if !p.seen.insert(m.id.clone()) {
                    continue;
                }
                p.seen_order.push_back(m.id.clone());
                if p.seen_order.len() > DEDUPE
                    && let Some(old) = p.seen_order.pop_front()
                {
                    p.seen.remove(&old);
                }
                if m.sender.as_deref() == Some(own.as_str()) || m.kind.as_deref() == Some("system")
                {
                    continue;
                }
                p.pending.messages += 1;
                p.pending.muted += u32::from(muted);
                if muted && let Some(conv) = &m.conversation_id {
                    p.pending.muted_convs.insert(conv.clone());
                }
                p.external_since_run = true;
            }
            Some(ServerFrame::Wake { reason, .. }) => {
                p.pending.wakes.insert(reason.clone());
                p.external_since_run = true;
            }
            Some(ServerFrame::GroupInviteReceived { .. }) => {
                p.pending.invites += 1;
                p.external_since_run = true;
            }
            _ => {}
        }
    }
}

/// A way out of a stuck state the world gave (a check passed, a binary looked at, texts back,
/// a key read): one `recovered` wake may follow.
pub fn recovery_token(w: &mut World, pid: usize) {
    if let Some(p) = per(w, pid) {
        p.recovery_tokens = (p.recovery_tokens + 1).min(4);
    }
}

/// SIGHUP: a person acted; everything may be looked at again.
pub fn reload(w: &mut World, pid: usize) {
    if let Some(p) = per(w, pid) {
        p.external_since_run = true;
        p.recovery_tokens = (p.recovery_tokens + 1).min(4);
        p.reloaded = true;
        p.hold_claims = 0;
    }
}

/// What the machine told its observer.
pub fn heard(w: &mut World, pid: usize, h: Heard) {
    let wall = w.now().wall_ms;
    match h {
        Heard::Wake(WakeCause::Listener(why)) => own_wake(w, pid, why, wall),
        Heard::Wake(_) => {}
        Heard::CycleStarted => {
            if let Some(p) = per(w, pid) {
                p.cycle = std::mem::take(&mut p.pending);
                p.cycle_truncated = false;
                p.reloaded = false;
            }
        }
        Heard::CycleEnded(last) => {
            let hold_end_unread = last.no_run_reason == Some(NoRunReason::TrayUnreadable)
                && per(w, pid).is_some_and(|p| p.cycle.own.contains("hold_ended"));
            if hold_end_unread {
                w.checks.reached.insert(HOLD_END_UNREADABLE);
            }
            let Some(p) = per(w, pid) else {
                return;
            };
            if last.run_started && last.outcome == Some(Outcome::Completed) && p.cycle_truncated {
                p.backlog_tokens += 1;
            }
            match last.no_run_reason {
                Some(NoRunReason::Held) => {
                    p.hold = Some(None);
                    p.hold_claims = 0;
                }
                Some(NoRunReason::NothingWaiting | NoRunReason::OnlyMuted) => p.hold = None,
                None if last.run_started => p.hold = None,
                _ => {}
            }
        }
    }
}

fn own_wake(w: &mut World, pid: usize, why: ListenerWake, wall: i64) {
    let Some(p) = per(w, pid) else {
        return;
    };
    let label = why.as_str();
    p.pending.own.insert(label);
    let (backed, detail) = match why {
        ListenerWake::Recovered => {
            let ok = p.recovery_tokens > 0;
            p.recovery_tokens = p.recovery_tokens.saturating_sub(1);
            (ok, "a `recovered` wake with no way out given: no check passed, no binary looked at, no texts back, no reload, no wait over".to_string())
        }
        ListenerWake::Backlog => {
            let ok = p.backlog_tokens > 0;
            p.backlog_tokens = p.backlog_tokens.saturating_sub(1);
            (
                ok,
                "a `backlog` wake without a completed run on a tray cut short".to_string(),
            )
        }
        ListenerWake::HoldEnded => {
            let ended = match p.hold {
                Some(Some(until)) => until <= wall + 1_000,
                Some(None) => true,
                None => false,
            };
            p.hold_claims += 1;
            let clock_back = std::mem::take(&mut p.clock_back);
            if p.hold_claims > 1 && !p.reloaded && !clock_back {
                let context = if p.run_live {
                    "a run started since is still going"
                } else if p.tray_failed {
                    "the last tray read failed"
                } else {
                    "no cycle judged the tray since"
                };
                let detail = format!(
                    "`hold_ended` again ({} times) with no new hold judged since the last ({context}); the hold's end: {}",
                    p.hold_claims,
                    p.hold
                        .flatten()
                        .map(crate::core::time::rfc3339_ms)
                        .unwrap_or_default()
                );
                w.violated("hold_end_once", Some(pid), detail);
                return;
            }
            (
                ended || p.reloaded || clock_back,
                "a `hold_ended` wake with no hold judged whose end came, no reload and no clock set back".to_string(),
            )
        }
    };
    if !backed {
        w.violated("own_wakes_backed", Some(pid), detail);
    }
}

/// A tray read went out.
pub fn read_tray(w: &mut World, pid: usize) {
    let t = w.t;
    if let Some((until, _)) = per(w, pid).and_then(|p| p.tray_wait)
        && t < until
    {
        let detail = format!(
            "a tray read {} ms before the 429's Retry-After was over",
            until - t
        );
        w.violated("no_read_in_429_wait", Some(pid), detail);
    }
}

/// A tray read failed as the listener is told.
pub fn tray_error(w: &mut World, pid: usize, e: &TrayError) {
    let t = w.t;
    let Some(p) = per(w, pid) else {
        return;
    };
    p.tray_failed = true;
    match e.kind {
        TrayErrorKind::RateLimited(d) => {
            let ms = crate::core::time::ms(d);
            p.tray_wait = Some((t + ms, ms > CYCLE_WAIT_MAX_MS));
            if ms > CYCLE_WAIT_MAX_MS {
                // Its end is a way out (`recovered`).
                p.recovery_tokens = (p.recovery_tokens + 1).min(4);
            }
        }
        TrayErrorKind::Removed => p.recovery_tokens = (p.recovery_tokens + 1).min(4),
        _ => {}
    }
}

/// A tray the server built for a cycle (the one a run starts from, or the one after it).
pub fn tray_served(
    w: &mut World,
    pid: usize,
    cycle: u64,
    budget_refused: bool,
    tray: Option<&Tray>,
) {
    let t = w.t;
    if budget_refused {
        w.violated(
            "poll_budget",
            Some(pid),
            "the server's poll budget refused a tray read".into(),
        );
        return;
    }
    let Some(tray) = tray else {
        return;
    };
    let shown: Vec<(String, bool)> = tray
        .conversations
        .iter()
        .map(|c| (c.conversation_id.clone(), c.is_muted()))
        .collect();
    let tray = served(w, tray, t);
    let muted_cut = tray.truncated
        && per(w, pid).is_some_and(|p| {
            p.cycle.only_muted()
                && !p.run_live
                && p.cycle.muted_convs.iter().all(|c| {
                    p.shown_muted.get(c) == Some(&true) && !shown.iter().any(|(s, _)| s == c)
                })
        });
    if muted_cut {
        w.checks.reached.insert(MUTED_PAST_CUT);
    }
    let Some(p) = per(w, pid) else {
        return;
    };
    p.tray_failed = false;
    p.cycle_truncated |= tray.truncated;
    p.shown_muted.extend(shown);
    if let Some((c, completed, end_wall)) = p.run_end
        && c == cycle
    {
        // The tray after the run: the invites the run left pending.
        p.run_end = None;
        if completed {
            let before = p
                .run
                .as_ref()
                .filter(|(rc, _)| *rc == cycle)
                .map(|(_, i)| i.clone());
            for inv in before.unwrap_or_default() {
                if tray.invites.contains(&inv) {
                    p.left_pending.entry(inv).or_default().push(end_wall);
                }
            }
        }
    }
    p.served.retain(|c, _| c + 8 > cycle);
    p.served.insert(cycle, tray);
}

fn served(w: &World, tray: &Tray, t: u64) -> ServedTray {
    let peer = |h: Option<&str>| -> Option<usize> {
        h?.trim_start_matches('@')
            .strip_prefix("peer")?
            .parse()
            .ok()
    };
    let text = |c: &crate::core::tray::Card, path: &str| -> Option<String> {
        let mut parts = path.split('/');
        let first = parts.next()?;
        let mut v = c.extra.get(first)?;
        for p in parts {
            v = v.get(p)?;
        }
        v.as_str().map(str::to_string)
    };
    let cards = tray
        .conversations
        .iter()
        .map(|c| {
            let group = w.server.groups.iter().position(|g| *g == c.conversation_id);
            let who = if group.is_some() {
                text(c, "preview/sender")
            } else {
                text(c, "counterparty/handle")
            };
            CardSeen {
                conv: c.conversation_id.clone(),
                anchor: text(c, "preview/message_id").or_else(|| text(c, "last_message_id")),
                peer: peer(who.as_deref()),
                group,
            }
        })
        .collect();
    ServedTray {
        t,
        cards,
        invites: tray.invite_ids(),
        truncated: tray.is_truncated(),
    }
}

/// A run starts: one at a time, within the slots, for causes the world gave, never only for
/// muted mail, and never a second refused recovery in a row.
pub fn start_run(w: &mut World, pid: usize, order: &RunOrder) {
    let live = w.checks.per.iter().filter(|p| p.run_live).count();
    let slots = w.checks.slots;
    let Some(p) = per(w, pid) else {
        return;
    };
    let mut broken: Option<(&'static str, String)> = None;
    if p.run_live {
        broken = Some((
            "one_run_per_profile",
            format!("run #{} started while another runs", order.cycle),
        ));
    } else if let Some(max) = slots
        && live + 1 > max
    {
        broken = Some((
            "max_concurrent_runs",
            format!("{} runs at once, {max} allowed", live + 1),
        ));
    } else if let Some(r) = order.reasons.iter().find(|r| !p.cycle.backs(r)) {
        broken = Some((
            "run_has_cause",
            format!(
                "run #{} started for `{r}` ({}) with no such cause given",
                order.cycle,
                order.reasons.join(",")
            ),
        ));
    } else if p.cycle.only_muted()
        && p.cycle
            .muted_convs
            .iter()
            .all(|c| p.shown_muted.get(c) == Some(&true))
    {
        // Muted as far as the listener can know: a tray showed each conversation muted (this
        // one or an earlier one). One never shown, past the cut, cannot be told from an unmuted
        // one (a `message.new` does not say it), and a run for it is what an unmuted one needs.
        broken = Some((
            "muted_wakes_run_nothing",
            format!(
                "run #{} started for a cycle woken only by {} message(s) in muted conversations",
                order.cycle, p.cycle.messages
            ),
        ));
    } else {
        let only_recovered =
            !order.reasons.is_empty() && order.reasons.iter().all(|r| r == "recovered");
        if only_recovered
            && let Some(last) = p.last_run
            && last.only_recovered
            && last.refused
            && !p.external_since_run
        {
            broken = Some((
                "no_private_retry_ladder",
                format!(
                    "run #{} started for `recovered` after the last `recovered` run was refused by the runtime, with no server wake, connect or reload between",
                    order.cycle
                ),
            ));
        }
    }
    let invites = p
        .served
        .get(&order.cycle)
        .map(|s| s.invites.clone())
        .unwrap_or_default();
    p.run_live = true;
    p.run = Some((order.cycle, invites));
    p.run_end = None;
    p.external_since_run = false;
    p.last_run = Some(LastRun {
        only_recovered: !order.reasons.is_empty() && order.reasons.iter().all(|r| r == "recovered"),
        refused: false,
    });
    if let Some((name, detail)) = broken {
        w.violated(name, Some(pid), detail);
    }
}

/// A run's end was handed over.
pub fn run_ended(w: &mut World, pid: usize, cycle: u64, end: &RunEnd) {
    let wall = w.now().wall_ms;
    let Some(p) = per(w, pid) else {
        return;
    };
    if p.run.as_ref().is_none_or(|(c, _)| *c != cycle) {
        return;
    }
    p.run_live = false;
    let refused = matches!(end.outcome, RunOutcome::Unusable(_));
    if let Some(last) = p.last_run.as_mut() {
        last.refused = refused;
    }
    let completed = end.started && end.outcome == RunOutcome::Completed;
    p.run_end = Some((cycle, completed, wall));
    if refused {
        w.checks.reached.insert(RUN_REFUSED);
    }
}

/// The invite rule: two completed runs left it pending, a minute apart.
pub fn dismiss(w: &mut World, pid: usize, invite: &str) {
    let Some(p) = per(w, pid) else {
        return;
    };
    let ends = p.left_pending.get(invite).cloned().unwrap_or_default();
    let spread = match (ends.iter().min(), ends.iter().max()) {
        (Some(a), Some(b)) => b - a,
        _ => 0,
    };
    if ends.len() < 2 || spread < 60_000 {
        let detail = format!(
            "invite {invite} dismissed after {} completed run(s) left it pending, {} ms apart",
            ends.len(),
            spread
        );
        w.violated("invite_rule", Some(pid), detail);
    }
}

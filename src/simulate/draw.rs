//! The drawn acts: each kind comes at its scenario's rate while the chaos lasts (the next drawn
//! when one comes), and outages are placed now and then across the end of quiet hours (a hold
//! that ends while the tray cannot be read).

use super::acts::{act, mute_target};
use super::checks::Muted;
use super::scenario::{Act, HOUR, MIN};
use super::world::{Drawn, Ev, Phase, World};
use crate::core::policy::{HoldReason, Ledger};

const KINDS: [Drawn; 22] = [
    Drawn::Group,
    Drawn::Invite,
    Drawn::Mute,
    Drawn::Drop,
    Drawn::Close,
    Drawn::RefuseKey,
    Drawn::RotateKey,
    Drawn::Upgrade,
    Drawn::Outage,
    Drawn::Unreachable,
    Drawn::Throttle,
    Drawn::Removed,
    Drawn::SlowTray,
    Drawn::TextsDown,
    Drawn::TextsUnusable,
    Drawn::DiskFull,
    Drawn::Suspend,
    Drawn::WallStep,
    Drawn::Reload,
    Drawn::Refuses,
    Drawn::Flood,
    Drawn::MutedFlood,
];

/// How often a drawn kind comes, an hour.
fn rate(w: &World, d: Drawn) -> f64 {
    let r = &w.plan.rates;
    let n = w.plan.profiles.len() as f64;
    match d {
        Drawn::Dm(pid) => w.plan.profiles.get(pid).map_or(0.0, |p| p.dm_per_hour),
        Drawn::Group if w.plan.groups.is_empty() => 0.0,
        Drawn::Group => r.group_message,
        Drawn::Invite => r.invite * n,
        Drawn::Mute => r.mute * n,
        Drawn::Drop => r.drop * n,
        Drawn::Close => r.close * n,
        Drawn::RefuseKey => r.refuse_key * n,
        Drawn::RotateKey => r.rotate_key * n,
        Drawn::Upgrade => r.upgrade * n,
        Drawn::Outage => r.outage,
        Drawn::Unreachable => r.unreachable,
        Drawn::Throttle => r.throttle * n,
        Drawn::Removed => r.removed * n,
        Drawn::SlowTray => r.slow_tray * n,
        Drawn::TextsDown => r.texts_down,
        Drawn::TextsUnusable => r.texts_unusable,
        Drawn::DiskFull => r.disk_full * n,
        Drawn::Suspend => r.suspend,
        Drawn::WallStep => r.wall_step,
        Drawn::Reload => r.reload * n,
        Drawn::Refuses => r.refuses * n,
        Drawn::Flood => r.flood,
        Drawn::MutedFlood if w.plan.peers < 56 => 0.0,
        Drawn::MutedFlood => r.flood * 0.5,
    }
}

/// The next of a kind: a gap drawn evenly up to twice the mean (no transcendental function, so a
/// seed draws the same on every machine).
fn next(w: &mut World, d: Drawn) {
    let per_hour = rate(w, d);
    if per_hour <= 0.0 {
        return;
    }
    let gap = (w.rng.f64() * 2.0 / per_hour * HOUR as f64) as u64;
    w.after(gap.max(1), Ev::Draw(d));
}

/// The drawn kinds' first comings, and the outages placed at the end of quiet hours.
pub fn schedule_start(w: &mut World) {
    for pid in 0..w.plan.profiles.len() {
        next(w, Drawn::Dm(pid));
    }
    for d in KINDS {
        next(w, d);
    }
    outages_at_quiet_ends(w);
}

/// An outage now and then across the moment quiet hours end (a hold ends while the tray cannot
/// be read).
fn outages_at_quiet_ends(w: &mut World) {
    if w.plan.rates.outage <= 0.0 {
        return;
    }
    for pid in 0..w.profiles.len() {
        let Some(p) = w.profiles.get(pid) else {
            continue;
        };
        let policy = p.cfg.policy.clone();
        let zone = p.cfg.zone.clone();
        if policy.quiet_hours.is_empty() {
            continue;
        }
        let mut ends = Vec::new();
        let mut t = 0;
        while t < w.plan.chaos_ms {
            let wall = w.plan.epoch_ms + i64::try_from(t).unwrap_or(0);
            if let Some((HoldReason::QuietHours, _, Some(until))) =
                policy.may_start(&Ledger::new(), wall, &zone)
            {
                let end = u64::try_from(until - w.plan.epoch_ms).unwrap_or(0);
                if !ends.contains(&end) {
                    ends.push(end);
                }
            }
            t += 15 * MIN;
        }
        for end in ends {
            if end < w.plan.chaos_ms && w.rng.chance(0.3) {
                let before = MIN + w.rng.below(3 * MIN);
                let for_ms = 5 * MIN + w.rng.below(25 * MIN);
                w.at(end.saturating_sub(before), Ev::Act(Act::Outage { for_ms }));
            }
        }
    }
}

fn range(w: &mut World, lo: u64, hi: u64) -> u64 {
    lo + w.rng.below(hi.saturating_sub(lo) + 1)
}

fn any_profile(w: &mut World) -> usize {
    usize::try_from(w.rng.below(w.plan.profiles.len() as u64)).unwrap_or(0)
}

fn any_peer(w: &mut World) -> usize {
    usize::try_from(w.rng.below(w.plan.peers.max(1) as u64)).unwrap_or(0)
}

/// A drawn kind came: one act of it, and the next drawn.
pub fn draw(w: &mut World, d: Drawn) {
    if w.phase != Phase::Chaos {
        return;
    }
    let who = any_profile(w);
    let act = match d {
        Drawn::Dm(to) => Some(Act::Dm {
            peer: any_peer(w),
            to,
        }),
        Drawn::Group => {
            let g = usize::try_from(w.rng.below(w.plan.groups.len() as u64)).unwrap_or(0);
            let peers = w
                .plan
                .groups
                .get(g)
                .map(|g| g.0.clone())
                .unwrap_or_default();
            let i = usize::try_from(w.rng.below(peers.len() as u64)).unwrap_or(0);
            peers
                .get(i)
                .map(|&peer| Act::GroupMessage { peer, group: g })
        }
        Drawn::Invite => Some(Act::Invite {
            peer: any_peer(w),
            to: who,
        }),
        Drawn::Mute => {
            let peer = any_peer(w);
            let agent_wide = w.rng.chance(0.3);
            let what = mute_target(w, who, peer, agent_wide);
            what.map(|m| Act::Mute {
                who,
                peer,
                agent_wide,
                on: !w.checks.mutes.contains(&(who, m)),
            })
        }
        Drawn::Drop => Some(Act::Drop { who }),
        Drawn::Close => {
            let (code, reason) = match w.rng.below(5) {
                0 | 1 => {
                    let s = if w.rng.chance(0.8) {
                        range(w, 1, 120)
                    } else {
                        range(w, 600, 3600)
                    };
                    (1013, format!("rate_limited; retry_after={s}"))
                }
                2 => (1013, "overload".to_string()),
                3 => (1011, "internal error".to_string()),
                _ => (1001, "going away".to_string()),
            };
            Some(Act::Close { who, code, reason })
        }
        Drawn::RefuseKey => Some(Act::RefuseKey {
            who,
            for_ms: range(w, MIN, 30 * MIN),
        }),
        Drawn::RotateKey => Some(Act::RotateKey {
            who,
            written_after_ms: range(w, 0, 10 * MIN),
        }),
        Drawn::Upgrade => Some(Act::Upgrade {
            who,
            for_ms: range(w, 5 * MIN, 60 * MIN),
        }),
        Drawn::Outage => Some(Act::Outage {
            for_ms: range(w, MIN, 40 * MIN),
        }),
        Drawn::Unreachable => Some(Act::Unreachable {
            for_ms: range(w, MIN, 20 * MIN),
        }),
        Drawn::Throttle => Some(Act::Throttle {
            who,
            for_ms: range(w, 10_000, 60 * MIN),
        }),
        Drawn::Removed => Some(Act::Removed {
            who,
            for_ms: range(w, 5 * MIN, 90 * MIN),
        }),
        Drawn::SlowTray => Some(Act::SlowTray {
            who,
            for_ms: range(w, 5 * MIN, 60 * MIN),
        }),
        Drawn::TextsDown => Some(Act::TextsDown {
            for_ms: range(w, 5 * MIN, 60 * MIN),
        }),
        Drawn::TextsUnusable => Some(Act::TextsUnusable {
            for_ms: range(w, 5 * MIN, 60 * MIN),
        }),
        Drawn::DiskFull => Some(Act::DiskFull {
            who,
            for_ms: range(w, MIN, 60 * MIN),
        }),
        Drawn::Suspend => Some(Act::Suspend {
            for_ms: range(w, MIN, 120 * MIN),
        }),
        Drawn::WallStep => {
            let by = i64::try_from(range(w, 6_000, 15 * MIN)).unwrap_or(6_000);
            Some(Act::WallStep {
                by_ms: if w.rng.chance(0.5) { by } else { -by },
            })
        }
        Drawn::Reload => Some(Act::Reload { who }),
        Drawn::Refuses => {
            let for_ms = range(w, 5 * MIN, 90 * MIN);
            Some(Act::Refuses {
                who,
                for_ms,
                login_ok: w.rng.chance(0.5),
            })
        }
        Drawn::Flood => {
            let peers = w.plan.peers.min(range(w, 20, 70) as usize);
            Some(Act::Flood { to: who, peers })
        }
        Drawn::MutedFlood => {
            muted_flood(w, who);
            None
        }
    };
    if let Some(act) = act {
        self::act(w, act);
    }
    next(w, d);
}

/// A peer the user muted writes, and while the cycle it wakes reads a slow tray, every other
/// peer writes too: the muted card falls past the tray's cut.
fn muted_flood(w: &mut World, who: usize) {
    let peer = any_peer(w);
    let wide = Act::Mute {
        who,
        peer,
        agent_wide: true,
        on: true,
    };
    if !w
        .checks
        .mutes
        .contains(&(who, Muted::Agent(format!("peer{peer}"))))
    {
        act(w, wide);
    }
    let quiet = w.profiles.get(who).map_or(0, |p| p.plan.quiet_window_ms);
    act(
        w,
        Act::SlowTray {
            who,
            for_ms: 2 * MIN,
        },
    );
    w.after(1_000, Ev::Act(Act::Dm { peer, to: who }));
    let peers = w.plan.peers;
    w.after(1_000 + quiet + 300, Ev::Act(Act::Flood { to: who, peers }));
}

//! The runtime as the world plays it: a run starts (its process is up after a moment), reads the
//! tray it was started from and answers its cards through the server's own verdict routes
//! (reply, dismiss, defer, or leaves one), answers or leaves its invites, and ends: completed,
//! failed, silent (exit 0 and no verdict), hung until its time limit, or refused by its runtime
//! (`Unusable`) while the runtime's login check may still pass. A stop's SIGTERM ends it within
//! the grace; a kill ends it without a word, as a dropped supervisor does.

use super::checks::ServedTray;
use super::scenario::Act;
use super::world::{Ev, World};
use crate::core::listener::{Input, ProcessExit, RunEnd, RunOrder, RunOutcome};
use crate::core::run_report::RunReport;
use serde_json::json;

#[derive(Debug, Clone)]
pub enum Step {
    Spawned,
    Act,
    End(RunOutcome),
}

/// A run of a profile's that has not ended.
#[derive(Debug, Clone)]
pub struct LiveRun {
    pub cycle: u64,
    pub started_t: u64,
    pub tray: Option<ServedTray>,
    /// Its end is on its way.
    pub ending: bool,
}

/// `doctor`'s check of the runtime: the program is there at once; the login check takes a
/// moment and passes unless the runtime is broken (a runtime that refuses runs may still pass
/// it).
pub fn check(w: &mut World, pid: usize, presence_only: bool) {
    let Some(p) = w.profiles.get(pid) else {
        return;
    };
    let stamp = Some(p.runtime.stamp);
    if presence_only {
        w.local.push_back((
            pid,
            Input::RuntimeChecked {
                result: Ok("/usr/local/bin/agent".into()),
                binary: stamp,
            },
        ));
        return;
    }
    let broken = p.runtime.refuses_until > w.t && !p.runtime.login_ok;
    let result = if broken {
        Err("not logged in (run `claude /login`)".to_string())
    } else {
        Ok("logged in".to_string())
    };
    let wait = 800 + w.rng.below(1500);
    w.after(
        wait,
        Ev::Deliver(
            pid,
            Input::RuntimeChecked {
                result,
                binary: stamp,
            },
        ),
    );
}

pub fn start(w: &mut World, pid: usize, order: RunOrder) {
    let t = w.t;
    let tray = w.checks.start_tray(pid, order.cycle);
    let Some(p) = w.profiles.get_mut(pid) else {
        return;
    };
    p.run = Some(LiveRun {
        cycle: order.cycle,
        started_t: t,
        tray,
        ending: false,
    });
    let cycle = order.cycle;
    let disk_full = p.disk_full_until > t;
    let refused = p.runtime.refuses_until > t;
    let timeout = p.plan.run_timeout_ms;
    if disk_full {
        end_in(
            w,
            pid,
            cycle,
            5,
            false,
            RunOutcome::Failed("workdir: No space left on device (os error 28)".into()),
        );
        return;
    }
    let spawn = 20 + w.rng.below(200);
    w.after(spawn, Ev::Run(pid, cycle, Step::Spawned));
    if refused {
        let why = RunOutcome::Unusable("Invalid API key · Please run /login".into());
        let d = 1_000 + w.rng.below(2_000);
        w.after(d, Ev::Run(pid, cycle, Step::End(why)));
        return;
    }
    let u = w.rng.f64();
    let (fails, hangs, silent) = (w.plan.run_fails, w.plan.run_hangs, w.plan.run_silent);
    let d = 3_000 + w.rng.below(180_000);
    if u < hangs {
        w.after(
            timeout,
            Ev::Run(
                pid,
                cycle,
                Step::End(RunOutcome::Failed("timed out".into())),
            ),
        );
    } else if u < hangs + fails {
        if w.rng.chance(0.5) {
            w.after(d, Ev::Run(pid, cycle, Step::Act));
        }
        w.after(
            d + 500,
            Ev::Run(
                pid,
                cycle,
                Step::End(RunOutcome::Failed("exit status 1".into())),
            ),
        );
    } else if u < hangs + fails + silent {
        w.after(d, Ev::Run(pid, cycle, Step::End(RunOutcome::Completed)));
    } else {
        w.after(d, Ev::Run(pid, cycle, Step::Act));
        w.after(
            d + 500,
            Ev::Run(pid, cycle, Step::End(RunOutcome::Completed)),
        );
    }
}

fn end_in(w: &mut World, pid: usize, cycle: u64, ms: u64, started: bool, outcome: RunOutcome) {
    let binary = match outcome {
        RunOutcome::Unusable(_) => w.profiles.get(pid).map(|p| p.runtime.stamp),
        _ => None,
    };
    let duration_ms = w
        .profiles
        .get(pid)
        .and_then(|p| p.run.as_ref())
        .map_or(0, |r| w.t.saturating_sub(r.started_t));
    let cost = started.then(|| 0.01 * (1 + w.rng.below(20)) as f64);
    // How the process ended, as the driver's supervisor says it.
    let exit = match &outcome {
        _ if !started => ProcessExit::default(),
        RunOutcome::Completed => ProcessExit {
            code: Some(0),
            ..ProcessExit::default()
        },
        RunOutcome::Failed(why) if why == "timed out" => ProcessExit {
            signal: Some(libc::SIGKILL),
            timed_out: true,
            ..ProcessExit::default()
        },
        RunOutcome::Failed(why) if why.contains("SIGTERM") => ProcessExit {
            signal: Some(libc::SIGTERM),
            ..ProcessExit::default()
        },
        _ => ProcessExit {
            code: Some(1),
            ..ProcessExit::default()
        },
    };
    if let Some(r) = w.profiles.get_mut(pid).and_then(|p| p.run.as_mut()) {
        r.ending = true;
    }
    w.after(
        ms,
        Ev::Deliver(
            pid,
            Input::RunEnded {
                cycle,
                end: RunEnd {
                    started,
                    outcome,
                    report: RunReport {
                        cost_usd: cost,
                        usage: None,
                        partial: false,
                    },
                    duration_ms,
                    exit,
                    binary,
                },
            },
        ),
    );
}

/// Whether profile `pid`'s run is the one of `cycle` (an answer for another is dropped).
fn live(w: &World, pid: usize, cycle: u64) -> bool {
    w.profiles
        .get(pid)
        .and_then(|p| p.run.as_ref())
        .is_some_and(|r| r.cycle == cycle)
}

pub fn step(w: &mut World, pid: usize, cycle: u64, step: Step) {
    if !live(w, pid, cycle) {
        return;
    }
    match step {
        Step::Spawned => w.local.push_back((
            pid,
            Input::RunStarted {
                cycle,
                log: format!("/sim/runs/{cycle}.log"),
            },
        )),
        Step::Act => act(w, pid),
        Step::End(outcome) => {
            if w.profiles
                .get(pid)
                .and_then(|p| p.run.as_ref())
                .is_some_and(|r| r.ending)
            {
                return;
            }
            end_in(w, pid, cycle, 0, true, outcome);
        }
    }
}

/// The run answers the cards and invites of the tray it was started from.
fn act(w: &mut World, pid: usize) {
    let Some(p) = w.profiles.get(pid) else {
        return;
    };
    let Some(tray) = p.run.as_ref().and_then(|r| r.tray.clone()) else {
        return;
    };
    let key = p.key.clone();
    let mut answered_peers = Vec::new();
    for card in &tray.cards {
        let u = w.rng.f64();
        let anchor = card.anchor.clone();
        let decide = |decision: &str, category: &str| json!({"decision": decision, "category": category, "through_message_id": anchor});
        let path = format!("/v1/conversations/{}/decisions", card.conv);
        if u < 0.45 {
            let n = w.rng.u64();
            let body = json!({"conversation_id": card.conv, "content": {"text": "thanks, noted"}, "client_msg_id": format!("run-{n:x}")});
            w.server
                .call(Some(&key), "POST", "/v1/messages", Some(&body));
            w.server.call(
                Some(&key),
                "POST",
                &path,
                Some(&decide("reply", "open_request")),
            );
            answered_peers.push(card.clone());
        } else if u < 0.75 {
            w.server.call(
                Some(&key),
                "POST",
                &path,
                Some(&decide("dismiss", "no_action_needed")),
            );
        } else if u < 0.85 {
            w.server.call(
                Some(&key),
                "POST",
                &path,
                Some(&decide("defer", "goal_followup")),
            );
        }
    }
    for invite in &tray.invites {
        let u = w.rng.f64();
        if u < 0.25 {
            w.server.call(
                Some(&key),
                "POST",
                &format!("/v1/groups/invites/{invite}/accept"),
                Some(&json!({})),
            );
        } else if u < 0.4 {
            w.server.call(
                Some(&key),
                "DELETE",
                &format!("/v1/groups/invites/{invite}"),
                None,
            );
        }
    }
    // The peers answered may write again (a conversation goes on), while the chaos lasts.
    if w.phase == super::world::Phase::Chaos {
        for card in answered_peers {
            if !w.rng.chance(w.plan.peer_answers) {
                continue;
            }
            let later = 60_000 + w.rng.below(30 * 60_000);
            let act = match (card.peer, card.group) {
                (_, Some(group)) => card.peer.map(|peer| Act::GroupMessage { peer, group }),
                (Some(peer), None) => Some(Act::Dm { peer, to: pid }),
                _ => None,
            };
            if let Some(act) = act {
                w.after(later, Ev::Act(act));
            }
        }
    }
}

/// The listener gives the run up: SIGTERM (it ends within its grace), or its group killed (no
/// word comes back).
pub fn cancel(w: &mut World, pid: usize, cycle: u64, now: bool) {
    if !live(w, pid, cycle) {
        return;
    }
    if now {
        if let Some(p) = w.profiles.get_mut(pid) {
            p.run = None;
        }
        super::checks::run_killed(w, pid);
        return;
    }
    let grace = w
        .profiles
        .get(pid)
        .map_or(0, |p| p.plan.kill_grace_s * 1000);
    let after = (200 + w.rng.below(2_000)).min(grace);
    end_in(
        w,
        pid,
        cycle,
        after,
        true,
        RunOutcome::Failed("terminated by SIGTERM".into()),
    );
}

/// The run's end was handed over: no run goes any more.
pub fn ended(w: &mut World, pid: usize, cycle: u64) {
    if let Some(p) = w.profiles.get_mut(pid)
        && p.run.as_ref().is_some_and(|r| r.cycle == cycle)
    {
        p.run = None;
    }
}

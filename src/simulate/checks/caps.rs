//! Spend bounded: no run starts past the hour's or the day's cap on runs (`max_runs_per_hour`,
//! `max_runs_per_day`, bounded by default since issue 38: 60 and 500), counted as the policy's
//! ledger counts them: by the local hour and day of the policy's zone, each run at the listener's
//! wall clock when it started (a run stamped later than now counts now), a run its runtime refused
//! or that never spawned not at all. The world keeps its own count of the runs it saw start; a reload since the cycle
//! began (a cap changed between the judgement and the start) and a wall clock stepped within the
//! hour excuse a run, because the machine judged by another rule or another clock.

use crate::core::policy::{local_day, local_hour};
use crate::simulate::world::World;
use std::collections::BTreeMap;

const HOUR_MS: u64 = 3_600_000;

/// One profile's runs, by cycle: the listener's wall clock at each start.
#[derive(Debug, Default)]
pub struct Per {
    runs: BTreeMap<u64, i64>,
    /// A reload came since the last cycle began.
    reloaded: bool,
}

/// A cycle began.
pub fn cycle_started(w: &mut World, pid: usize) {
    if let Some(p) = w.checks.caps.get_mut(pid) {
        p.reloaded = false;
    }
}

/// A reload came.
pub fn reload(w: &mut World, pid: usize) {
    if let Some(p) = w.checks.caps.get_mut(pid) {
        p.reloaded = true;
    }
}

/// A run starts: the runs before it in its local hour and day are under the caps.
pub fn run_started(w: &mut World, pid: usize, cycle: u64) {
    let wall = w.now().wall_ms;
    let moved = w.checks.last_clock_move();
    let excused_clock = moved > 0 && w.t.saturating_sub(moved) < 25 * HOUR_MS;
    let Some(profile) = w.profiles.get(pid) else {
        return;
    };
    let zone = &profile.cfg.zone;
    let policy = &profile.cfg.policy;
    let (hour, day) = (local_hour(zone, wall), local_day(zone, wall));
    let Some(p) = w.checks.caps.get(pid) else {
        return;
    };
    let before =
        |same: &dyn Fn(i64) -> bool| p.runs.values().filter(|&&at| same(at.min(wall))).count();
    let in_hour = before(&|at| local_hour(zone, at) == hour);
    let in_day = before(&|at| local_day(zone, at) == day);
    let broken = match (policy.max_runs_per_hour, policy.max_runs_per_day) {
        (Some(cap), _) if in_hour >= cap as usize => Some(format!(
            "run #{cycle} started with {in_hour} runs in its hour, the cap {cap}"
        )),
        (_, Some(cap)) if in_day >= cap as usize => Some(format!(
            "run #{cycle} started with {in_day} runs in its day, the cap {cap}"
        )),
        _ => None,
    };
    let excused = p.reloaded || excused_clock;
    if let Some(p) = w.checks.caps.get_mut(pid) {
        p.runs.insert(cycle, wall);
        // The caps look back a day at most.
        p.runs.retain(|_, at| *at > wall - 48 * HOUR_MS as i64);
    }
    if let Some(detail) = broken.filter(|_| !excused) {
        w.violated("runs_within_caps", Some(pid), detail);
    }
}

/// A run its runtime refused (issue 34 item 12), or one that could not be spawned, counts toward
/// no cap.
pub fn run_not_counted(w: &mut World, pid: usize, cycle: u64) {
    if let Some(p) = w.checks.caps.get_mut(pid) {
        p.runs.remove(&cycle);
    }
}

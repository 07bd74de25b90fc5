//! The single-run invite rule (contract 4 last paragraph, design 6, `turn-outcome.cases.json`
//! `single_run_invite_cases`): an invite two completed runs left pending, the second ending at least
//! `pace_ms` after the first counted one, is dismissed. The memory is serialisable so a restart keeps it.
//! Times are wall-clock unix milliseconds, because the memory outlives the process.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SINGLE_RUN_PACE_MS: u64 = 60_000;

/// Per invite: when the counted run ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InviteMemory {
    pub counted: BTreeMap<String, u64>,
}

/// What the rule says about one invite after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InviteVerdict {
    /// First completed run that left it pending: remembered.
    Counted,
    /// Second completed run, at least the pace later: dismiss it on the server and forget it.
    Dismiss,
    /// Second completed run too soon after the counted one: counts nothing.
    SilentPaced,
    /// Gone from a complete list: answered, forgotten.
    Forgotten,
    /// Not seen by this run (arrived during it, the run failed, or the list was truncated): nothing.
    NotCounted,
}

/// What the listener saw around one run.
#[derive(Debug, Clone)]
pub struct RunObservation<'a> {
    /// Invite ids on the tray before the run.
    pub before: &'a [String],
    /// Invite ids on the tray after the run.
    pub after: &'a [String],
    /// The after-list is complete (`invites` present and `invites_truncated` false).
    pub after_complete: bool,
    pub run_completed: bool,
    pub run_ended_at_ms: u64,
}

impl InviteMemory {
    /// Applies one run; returns a verdict per invite id involved.
    pub fn apply_run(&mut self, obs: &RunObservation<'_>, pace_ms: u64) -> Vec<(String, InviteVerdict)> {
        let _ = (obs, pace_ms);
        todo!("core: invite rule")
    }
}

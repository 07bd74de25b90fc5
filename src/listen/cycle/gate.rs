//! The run policy's step of a cycle (issue 26): after `core::decision` chose a run, the policy
//! (`core::policy::admit`) lets it start or holds it. A held cycle ends `no_run reason=held`
//! before anything is recorded on the server: no run, no verdict, no read mark, and the invite
//! rule does not count a held invite (it runs after a run only). The daemon owns the policy, the
//! ledger and the hold (`listen::daemon::run_policy`); the cycle gets a snapshot of them.

use super::{CycleEnd, CycleInput, CycleReport};
use crate::core::policy::{self, Hold, Ledger, OffsetTable, Policy};
use crate::core::status::{NoRunReason, RunKind};
use crate::core::tray::Tray;
use crate::log_events;
use std::sync::Arc;

/// What a cycle needs of the run policy: the rules, the runs so far, the zone's offsets and the
/// policy's clock.
#[derive(Debug, Clone)]
pub struct PolicyGate {
    pub policy: Policy,
    /// Shared with the daemon, which copies it only when it records a run meanwhile.
    pub ledger: Arc<Ledger>,
    pub offsets: Arc<OffsetTable>,
    /// The policy's clock minus the wall clock, in ms: 0 but under a test clock
    /// (`AGENTCHAT_TEST_CLOCK`, `listen::daemon::run_policy`).
    pub clock_offset_ms: i64,
}

impl PolicyGate {
    /// Now on the policy's clock (Unix ms).
    pub fn now_ms(&self) -> i64 {
        now_ms(self.clock_offset_ms)
    }
}

/// The wall clock plus `offset_ms`, in Unix ms.
pub fn now_ms(offset_ms: i64) -> i64 {
    let wall =
        i64::try_from(crate::sys::time::unix_ms(std::time::SystemTime::now())).unwrap_or(i64::MAX);
    wall.saturating_add(offset_ms)
}

/// What the policy said of the cycle's tray, for the daemon's hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum PolicySeen {
    /// The cycle ended before the tray was judged (unreadable, no runtime, ...): the hold, if
    /// any, stands.
    #[default]
    Unjudged,
    /// Nothing is held: a run started, or nothing waited.
    Clear,
    /// The run is held.
    Held(Hold),
}

/// The step: `Ok(kind)` when the run may start (with the prompt it gets), else the cycle's end.
/// The conversations the ledger remembers for the loop guard go into the report either way.
pub(super) fn judge(
    input: &CycleInput,
    report: &mut CycleReport,
    before: &Tray,
    kind: RunKind,
) -> Result<RunKind, CycleEnd> {
    report.conversations = policy::loop_conversations(before);
    let Some(gate) = input.policy.as_ref() else {
        return Ok(kind);
    };
    let now = gate.now_ms();
    match policy::admit(
        &gate.policy,
        before,
        &gate.ledger,
        now,
        gate.offsets.as_ref(),
        kind,
    ) {
        Ok(kind) => {
            report.policy = PolicySeen::Clear;
            Ok(kind)
        }
        Err(hold) => {
            tracing::debug!(event = %log_events::POLICY_HELD, cycle_id = %input.id, reason = hold.reason.as_str(), key = hold.key, cards = hold.cards.len(), invites = hold.invites.len(), "the run policy holds this run");
            report.policy = PolicySeen::Held(hold);
            Err(CycleEnd::NoRun(NoRunReason::Held))
        }
    }
}

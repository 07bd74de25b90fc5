//! One cycle (contract 4): read the tray, check `you`, decide run / no run and which served text,
//! start the run, read the tray again and apply the single-run invite rule. The decisions are
//! `core::decision` and `core::invite_rule`; this module only does the I/O around them. `steps`
//! names each step in order and ends with a `CycleEnd`, the one value the status is written from.

mod after;
pub mod gate;
mod run;
mod tray;
pub mod workdir;

use super::state_dir::StateDir;
use super::texts;
use crate::client::Api;
use crate::config::Settings;
use crate::core::decision::{self, CycleDecision};
use crate::core::status::{LastCycle, NoRunReason, Outcome, RunKind};
use crate::core::texts::Texts;
use crate::core::tray::Tray;
use crate::log_events;
use crate::runtime::RunOutcome;
use crate::sys::time;
use after::apply_invite_rule_after_run;
use run::{prepare_run, start_run};
use secrecy::SecretString;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};
use tray::read_tray_before;

/// Everything one cycle needs, owned so the cycle runs as its own task.
pub struct CycleInput {
    pub id: String,
    pub settings: Settings,
    pub api: Api,
    pub key: SecretString,
    pub state: StateDir,
    /// Bare handle.
    pub handle: String,
    /// The texts loaded for the configured runtime (never another runtime's).
    pub texts: Option<std::sync::Arc<Texts>>,
    pub reasons: Vec<String>,
    /// What the wakes were for (`core::decision::decide_woken`).
    pub causes: decision::WakeCauses,
    /// Set when the runtime reported it cannot work: no run until reload.
    pub runtime_unusable: bool,
    pub invite_pace_ms: u64,
    /// Cycles in a row that followed up a tray cut short (`core::decision::follow_up`).
    pub follow_ups: u32,
    pub shutdown: watch::Receiver<bool>,
    /// The listener's metrics (a no-op registry for `--once`).
    pub metrics: std::sync::Arc<super::metrics::Metrics>,
    /// Told when the run is handed to the supervisor (the daemon shows it in the status then).
    pub run_starting: Option<oneshot::Sender<RunStarting>>,
    /// Told when the cycle waits out a `429 Retry-After` (the daemon's status shows the wait).
    pub waits: Option<mpsc::Sender<CycleWait>>,
    /// The way to a run slot of the process (`listen --all`); `None`: no wait.
    pub admission: Option<super::admission::Ticket>,
    /// The run policy (issue 26; `gate`); `None`: every run the decision chose starts.
    pub policy: Option<gate::PolicyGate>,
}

/// The cycle waits before its next tray read, for the server's `429 Retry-After`, until `until`.
#[derive(Debug, Clone, Copy)]
pub struct CycleWait {
    pub until: SystemTime,
}

/// What a cycle says as it hands its run to the supervisor.
#[derive(Debug, Clone)]
pub struct RunStarting {
    pub kind: RunKind,
    /// The run's log file.
    pub log: String,
    /// The conversations its tray showed moving, for the run policy's ledger (`gate`).
    pub conversations: Vec<String>,
}

/// What the cycle did, for the status file and the main loop.
#[derive(Debug, Default)]
pub struct CycleReport {
    pub last: LastCycle,
    /// The runtime said it cannot work (not logged in, ...): the reason.
    pub unusable: Option<String>,
    /// The tray's `you` named someone else.
    pub handle_mismatch: Option<String>,
    /// The tray was read and `you` matched (clears an earlier mismatch).
    pub handle_ok: bool,
    /// Texts loaded during the cycle because none were loaded before.
    pub loaded_texts: Option<texts::Loaded>,
    /// Why the cycle found no texts for its runtime (`NoTexts`).
    pub texts_missing: Option<texts::Missing>,
    /// The tray could not be read because the key was refused.
    pub key_refused: bool,
    /// The tray's route answered `REMOVED` (contract 7): what it said, for the status.
    pub removed: Option<String>,
    /// The tray read ended on a `429` whose `Retry-After` the cycle's retries did not wait out:
    /// no tray read before it (the main loop's not-before time).
    pub not_before: Option<Duration>,
    /// The tray after the run was cut short and the run made progress: the next cycle starts at
    /// once (`core::decision::follow_up`).
    pub follow_up: bool,
    /// The run's own report of its cost and tokens (`core::run_report`): `Some` once a run was
    /// started, empty where its runtime reported nothing (the script runtime, a run cut short).
    pub run_report: Option<crate::core::run_report::RunReport>,
    /// What the run policy said of the tray (`gate`).
    pub policy: gate::PolicySeen,
    /// The conversations the tray before the run showed moving (`core::policy::loop_conversations`).
    pub conversations: Vec<String>,
}

pub fn new_cycle_id() -> String {
    format!(
        "c{:x}-{:04x}",
        time::unix_ms(SystemTime::now()),
        fastrand::u16(..)
    )
}

/// How a cycle ended: the one value its steps produce, written into `LastCycle` by `run`.
#[derive(Debug, Clone, PartialEq)]
pub enum CycleEnd {
    /// No run was started.
    NoRun(NoRunReason),
    /// A run was due; how it went. `Failed` and `Unusable` also stand for a run that could not be
    /// started (`LastCycle::run_started` says whether it was).
    Run(RunOutcome),
}

impl CycleEnd {
    /// Writes the outcome, the no-run reason and the failure into the cycle's status.
    fn record(&self, last: &mut LastCycle) {
        let (outcome, no_run_reason, failure) = match self {
            CycleEnd::NoRun(why) => (Outcome::NoRun, Some(*why), None),
            CycleEnd::Run(RunOutcome::Completed) => (Outcome::Completed, None, None),
            CycleEnd::Run(RunOutcome::Failed(why)) => (Outcome::Failed, None, Some(why.clone())),
            CycleEnd::Run(RunOutcome::Unusable(why)) => {
                (Outcome::Unusable, None, Some(why.clone()))
            }
        };
        last.outcome = Some(outcome);
        last.no_run_reason = no_run_reason;
        last.failure = failure;
    }
}

/// Runs one cycle to its end.
pub async fn run(mut input: CycleInput) -> CycleReport {
    let mut report = CycleReport {
        last: LastCycle::started(
            input.id.clone(),
            time::rfc3339(SystemTime::now()),
            input.reasons.clone(),
        ),
        ..Default::default()
    };
    tracing::info!(event = %log_events::CYCLE_START, cycle_id = %input.id, reasons = %input.reasons.join(","), "cycle started");
    let end = match steps(&mut input, &mut report).await {
        Ok(end) | Err(end) => end,
    };
    if let CycleEnd::NoRun(why) = end {
        tracing::info!(event = %log_events::NO_RUN, cycle_id = %input.id, reason = why.as_str(), "no run this cycle");
    }
    if let CycleEnd::Run(RunOutcome::Unusable(why)) = &end {
        report.unusable = Some(why.clone());
    }
    end.record(&mut report.last);
    report.last.ended_at = Some(time::rfc3339(SystemTime::now()));
    tracing::info!(
        event = %log_events::CYCLE_END,
        cycle_id = %input.id,
        run_started = report.last.run_started,
        outcome = report.last.outcome.map(Outcome::as_str),
        no_run_reason = report.last.no_run_reason.map(NoRunReason::as_str),
        "cycle ended"
    );
    report
}

/// The cycle's steps in order (contract 4). Each `Err` ends the cycle early with how it ended.
async fn steps(input: &mut CycleInput, report: &mut CycleReport) -> Result<CycleEnd, CycleEnd> {
    if input.runtime_unusable {
        return Err(CycleEnd::NoRun(NoRunReason::RuntimeUnusable));
    }
    let before = read_tray_before(input, report).await?;
    let kind = decide_run(input, report, &before)?;
    let kind = gate::judge(input, report, &before, kind)?;
    let prompt = prompt_for_run(input, report, kind).await?;
    let spec = prepare_run(input, kind, &prompt)?;
    // `listen --all`: the run waits for one of the process's slots (`listen::admission`).
    let Some((slot, waited)) =
        super::admission::slot_for(input.admission.take(), &input.id, &input.shutdown).await
    else {
        return Err(CycleEnd::NoRun(NoRunReason::Stopped));
    };
    let stale = input
        .settings
        .time_scale
        .apply(super::admission::STALE_DECISION);
    let (before, kind, spec) = if waited > stale {
        // The tray that decided this run is that old: the card may be answered elsewhere, an
        // invite declined. Decide again on the tray as it is now (the slot is kept meanwhile).
        tracing::info!(event = %log_events::TRAY_REREAD, cycle_id = %input.id, waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX), "this run waited long for its slot: reading the tray again before it starts");
        let before = read_tray_before(input, report).await?;
        let kind = decide_run(input, report, &before)?;
        let kind = gate::judge(input, report, &before, kind)?;
        let prompt = prompt_for_run(input, report, kind).await?;
        let spec = prepare_run(input, kind, &prompt)?;
        (before, kind, spec)
    } else {
        (before, kind, spec)
    };
    let (outcome, run_ended_at) = start_run(input, report, kind, &spec).await;
    drop(slot);
    if !*input.shutdown.borrow() {
        let completed = outcome == RunOutcome::Completed;
        apply_invite_rule_after_run(input, report, &before, completed, run_ended_at).await;
    }
    Ok(CycleEnd::Run(outcome))
}

/// Steps 2 and 3: `you` must be this agent, and something must wait; which prompt it needs.
fn decide_run(
    input: &CycleInput,
    report: &mut CycleReport,
    before: &Tray,
) -> Result<RunKind, CycleEnd> {
    match decision::decide_woken(before, &input.handle, &input.causes) {
        CycleDecision::NoRun(NoRunReason::HandleMismatch) => {
            let you = before.you.clone().unwrap_or_default();
            // The main loop logs the error once per mismatch episode, not once per cycle.
            tracing::debug!(event = %log_events::TRAY_YOU_MISMATCH, cycle_id = %input.id, you = %crate::core::handle::shown(&you), handle = %crate::core::handle::shown(&input.handle), "the tray belongs to another agent than this key's");
            report.handle_mismatch = Some(you);
            Err(CycleEnd::NoRun(NoRunReason::HandleMismatch))
        }
        CycleDecision::NoRun(why) => {
            report.handle_ok = true;
            report.policy = gate::PolicySeen::Clear;
            Err(CycleEnd::NoRun(why))
        }
        CycleDecision::Run(kind) => {
            report.handle_ok = true;
            Ok(kind)
        }
    }
}

/// Step 4: the served prompt for this run. Without texts loaded, one more fetch now.
async fn prompt_for_run(
    input: &mut CycleInput,
    report: &mut CycleReport,
    kind: RunKind,
) -> Result<String, CycleEnd> {
    if input.texts.is_none() {
        // None loaded for this runtime: one more try now, the server's, else the cached copy.
        let runtime = input.settings.listen.runtime.texts_runtime();
        match texts::load_quietly(&input.api, &input.state, runtime).await {
            Ok(loaded) => {
                input.texts = Some(loaded.texts.clone());
                report.loaded_texts = Some(loaded);
            }
            Err(missing) => {
                tracing::debug!(event = %log_events::TEXTS_FETCH_FAILED, runtime, error = %missing.fetch, "texts still unavailable");
                report.texts_missing = Some(missing);
            }
        }
    }
    let Some(texts) = input.texts.as_ref() else {
        // The main loop says this once per episode (the start already said it when it began).
        tracing::debug!(event = %log_events::NO_TEXTS, cycle_id = %input.id, "no texts loaded");
        return Err(CycleEnd::NoRun(NoRunReason::NoTexts));
    };
    match decision::prompt_for(kind, texts) {
        Some(prompt) => Ok(prompt.to_string()),
        None => {
            tracing::error!(event = %log_events::TEXTS_MISSING, cycle_id = %input.id, field = if kind == RunKind::Wake { "wake_instruction" } else { "invite_prompt" }, "the served texts lack the prompt for this run; no run");
            Err(CycleEnd::NoRun(NoRunReason::NoPrompt))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_end_writes_outcome_reason_and_failure_and_clears_what_does_not_apply() {
        let mut last = LastCycle {
            failure: Some("stale".into()),
            no_run_reason: Some(NoRunReason::OnlyMuted),
            ..Default::default()
        };
        CycleEnd::Run(RunOutcome::Completed).record(&mut last);
        assert_eq!(
            (last.outcome, last.no_run_reason, last.failure.as_deref()),
            (Some(Outcome::Completed), None, None)
        );
        CycleEnd::NoRun(NoRunReason::NoTexts).record(&mut last);
        assert_eq!(
            (last.outcome, last.no_run_reason, last.failure.as_deref()),
            (Some(Outcome::NoRun), Some(NoRunReason::NoTexts), None)
        );
        CycleEnd::Run(RunOutcome::Failed("exited with 2".into())).record(&mut last);
        assert_eq!(
            (last.outcome, last.no_run_reason, last.failure.as_deref()),
            (Some(Outcome::Failed), None, Some("exited with 2"))
        );
        CycleEnd::Run(RunOutcome::Unusable("not logged in".into())).record(&mut last);
        assert_eq!(
            (last.outcome, last.failure.as_deref()),
            (Some(Outcome::Unusable), Some("not logged in"))
        );
    }
}

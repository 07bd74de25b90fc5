//! One cycle (contract 4): read the tray, check `you`, decide run / no run and which served text,
//! start the run, read the tray again and apply the single-run invite rule. The decisions are
//! `core::decision` and `core::invite_rule`; this module only does the I/O around them. `steps`
//! names each step in order and ends with a `CycleEnd`, the one value the status is written from.

use super::state_dir::StateDir;
use super::texts;
use crate::client::{Api, ApiError, Dismissal};
use crate::config::Settings;
use crate::core::decision::{self, CycleDecision};
use crate::core::invite_rule::{InviteVerdict, RunObservation};
use crate::core::status::{LastCycle, NoRunReason, Outcome, RunKind};
use crate::core::texts::Texts;
use crate::core::tray::Tray;
use crate::runtime::supervisor::{self, RunLimits};
use crate::runtime::{self, RunContext, RunOutcome, RunSpec};
use crate::sys::time;
use secrecy::SecretString;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};

pub mod workdir;

/// Tray reads tried inside one cycle before it ends without a run.
const TRAY_ATTEMPTS: u32 = 3;
/// The longest `Retry-After` waited inside a cycle; a longer one ends the cycle (the server
/// re-wakes).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// Most run-log bytes read back for judging.
const MAX_LOG_READ: u64 = 16 * 1024 * 1024;

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
    tracing::info!(event = %"cycle_start", cycle_id = %input.id, reasons = %input.reasons.join(","), "cycle started");
    let end = match steps(&mut input, &mut report).await {
        Ok(end) | Err(end) => end,
    };
    if let CycleEnd::NoRun(why) = end {
        tracing::info!(event = %"no_run", cycle_id = %input.id, reason = why.as_str(), "no run this cycle");
    }
    if let CycleEnd::Run(RunOutcome::Unusable(why)) = &end {
        report.unusable = Some(why.clone());
    }
    end.record(&mut report.last);
    report.last.ended_at = Some(time::rfc3339(SystemTime::now()));
    tracing::info!(
        event = %"cycle_end",
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
    let prompt = prompt_for_run(input, report, kind).await?;
    let spec = prepare_run(input, kind, &prompt)?;
    let (outcome, run_ended_at) = start_run(input, report, kind, &spec).await;
    if !*input.shutdown.borrow() {
        let completed = outcome == RunOutcome::Completed;
        apply_invite_rule_after_run(input, report, &before, completed, run_ended_at).await;
    }
    Ok(CycleEnd::Run(outcome))
}

/// Step 1: the tray, retried a few times; unreadable ends the cycle without a run (the server
/// re-wakes).
async fn read_tray_before(input: &CycleInput, report: &mut CycleReport) -> Result<Tray, CycleEnd> {
    match read_tray(input, input.shutdown.clone()).await {
        Ok(tray) => {
            log_tray(&input.id, "before", &tray);
            Ok(tray)
        }
        Err(e) => {
            report.key_refused = matches!(e, ApiError::Refused(_));
            if let ApiError::RateLimited(wait) = e {
                report.not_before = Some(wait);
            }
            if let ApiError::Removed { .. } = e {
                // Contract 7: retrying will not succeed; the profile is not ready until a tray
                // is read again (issue 29 item 12).
                tracing::error!(event = %"route_removed", cycle_id = %input.id, error = %e, "the tray could not be read: the server switched its route off; no run until agentchat is updated");
                report.removed = Some(e.to_string());
            } else {
                tracing::warn!(event = %"tray_unreadable", cycle_id = %input.id, error = %e, "the tray could not be read; no run (the server re-wakes)");
            }
            Err(CycleEnd::NoRun(NoRunReason::TrayUnreadable))
        }
    }
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
            tracing::debug!(event = %"tray_you_mismatch", cycle_id = %input.id, you = %crate::core::handle::shown(&you), handle = %crate::core::handle::shown(&input.handle), "the tray belongs to another agent than this key's");
            report.handle_mismatch = Some(you);
            Err(CycleEnd::NoRun(NoRunReason::HandleMismatch))
        }
        CycleDecision::NoRun(why) => {
            report.handle_ok = true;
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
                tracing::debug!(event = %"texts_fetch_failed", runtime, error = %missing.fetch, "texts still unavailable");
                report.texts_missing = Some(missing);
            }
        }
    }
    let Some(texts) = input.texts.as_ref() else {
        // The main loop says this once per episode (the start already said it when it began).
        tracing::debug!(event = %"no_texts", cycle_id = %input.id, "no texts loaded");
        return Err(CycleEnd::NoRun(NoRunReason::NoTexts));
    };
    match decision::prompt_for(kind, texts) {
        Some(prompt) => Ok(prompt.to_string()),
        None => {
            tracing::error!(event = %"texts_missing", cycle_id = %input.id, field = if kind == RunKind::Wake { "wake_instruction" } else { "invite_prompt" }, "the served texts lack the prompt for this run; no run");
            Err(CycleEnd::NoRun(NoRunReason::NoPrompt))
        }
    }
}

/// The start of step 5: the working directory, the identity block in it, and the runtime's spec.
/// A runtime that cannot work is `Unusable`; anything else that stops the run is `Failed`.
fn prepare_run(input: &CycleInput, kind: RunKind, prompt: &str) -> Result<RunSpec, CycleEnd> {
    let id = &input.id;
    let workdir = match workdir::prepare(
        &input.settings,
        &input.state,
        input.texts.as_deref(),
        &input.handle,
        id,
    ) {
        Ok(w) => w,
        Err((workdir, e)) => {
            tracing::error!(event = %"run_failed", cycle_id = %id, error = %e, workdir = %workdir.display(), "cannot create the run's working directory");
            return Err(CycleEnd::Run(RunOutcome::Failed(format!("workdir: {e}"))));
        }
    };
    let handle_at = format!("@{}", crate::core::handle::normalize(&input.handle));
    let ctx = RunContext {
        settings: &input.settings,
        kind,
        prompt,
        handle: &handle_at,
        cycle_id: id,
        wake_reasons: &input.reasons,
        api_key: &input.key,
        state_dir: &input.state.root,
        workdir: &workdir,
    };
    runtime::prepare(&ctx).map_err(|e| match e {
        runtime::RuntimeError::Unusable(why) => {
            log_unusable(input, &why);
            CycleEnd::Run(RunOutcome::Unusable(why))
        }
        e => {
            tracing::error!(event = %"run_failed", cycle_id = %id, error = %e, "could not prepare the run");
            CycleEnd::Run(RunOutcome::Failed(e.to_string()))
        }
    })
}

/// Step 5: starts the run, waits for it, and judges it. The outcome and when the run ended.
async fn start_run(
    input: &mut CycleInput,
    report: &mut CycleReport,
    kind: RunKind,
    spec: &RunSpec,
) -> (RunOutcome, SystemTime) {
    let id = &input.id;
    let log_path = input.state.runs_dir().join(supervisor::log_file_name(id));
    let limits = RunLimits {
        timeout: input.settings.listen.run_timeout,
        grace: input.settings.listen.kill_grace,
        log_max: input.settings.listen.run_log_max_bytes,
    };
    report.last.run_started = true;
    report.last.run_kind = Some(kind);
    report.last.run_log = Some(log_path.display().to_string());
    // Said once the process is started: a log line (a file under launchd) and the status write the
    // daemon does on `run_starting` can each wait on a disk, and the run should not.
    let run_starting = input.run_starting.take();
    let runtime = input.settings.listen.runtime.as_str();
    let metrics = &input.metrics;
    let on_start = || {
        tracing::info!(event = %"run_start", cycle_id = %id, run_kind = kind.as_str(), runtime, log = %log_path.display(), "run started");
        metrics.run_started();
        if let Some(tx) = run_starting {
            let _ = tx.send(RunStarting {
                kind,
                log: log_path.display().to_string(),
            });
        }
    };
    let run_report =
        supervisor::run(spec, limits, &log_path, input.shutdown.clone(), on_start).await;
    let run_ended_at = SystemTime::now();
    let output = read_log(&log_path);
    let outcome = runtime::judge(input.settings.listen.runtime, &run_report.end, &output);
    // A program that cannot start for a lasting reason is an unusable runtime, not a failed run.
    let workdir = input
        .state
        .workdir(input.settings.listen.workdir.as_deref());
    let outcome = match runtime::check::unstartable(&input.settings, &workdir, &run_report.end) {
        Some(why) => RunOutcome::Unusable(why),
        None => outcome,
    };
    if let Err(e) =
        supervisor::prune_logs(&input.state.runs_dir(), input.settings.listen.run_logs_keep)
    {
        tracing::warn!(event = %"run_logs_prune_failed", error = %e, "could not prune old run logs");
    }
    let duration_ms = run_report.duration.as_millis() as u64;
    match &outcome {
        RunOutcome::Completed => {
            let end = &run_report.end;
            tracing::info!(event = %"run_end", cycle_id = %id, outcome = Outcome::Completed.as_str(), end = end.word(), exit_code = end.exit_code(), signal = end.signal(), duration_ms, "run completed");
        }
        RunOutcome::Failed(why) => {
            let end = &run_report.end;
            tracing::warn!(event = %"run_end", cycle_id = %id, outcome = Outcome::Failed.as_str(), end = end.word(), exit_code = end.exit_code(), signal = end.signal(), why = %why, duration_ms, "run failed");
        }
        RunOutcome::Unusable(why) => log_unusable(input, why),
    }
    input.metrics.run_ended(
        input.settings.listen.runtime.as_str(),
        &outcome,
        run_report.duration,
    );
    (outcome, run_ended_at)
}

fn log_unusable(input: &CycleInput, why: &str) {
    tracing::error!(event = %"runtime_unusable", cycle_id = %input.id, runtime = input.settings.listen.runtime.as_str(), why = %why, "the runtime cannot be used; no runs until it is fixed: the listener checks it again on a backoff (seconds growing to 10 minutes) and at once on reload (SIGHUP)");
}

/// Step 6: the single-run invite rule (contract 4, last paragraph). A failed run counts nothing, but the memory
/// still forgets invites that are gone, so the after-tray is read either way. A tray cut short
/// before the run is read again too, to tell whether the next cycle follows at once.
async fn apply_invite_rule_after_run(
    input: &CycleInput,
    report: &mut CycleReport,
    before: &Tray,
    completed: bool,
    run_ended_at: SystemTime,
) {
    let before_ids = before.invite_ids();
    if before_ids.is_empty() {
        // No invite waited, so none can be counted. Invites the memory still holds are gone
        // from a complete list, so they were answered: forget them.
        if before.invites_complete() {
            forget_answered(&input.state, &before_ids);
        }
        if !before.is_truncated() {
            // Nothing waited beyond what the run saw either: no second tray read.
            return;
        }
    }
    let after = match read_tray(input, input.shutdown.clone()).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(event = %"tray_unreadable", cycle_id = %input.id, error = %e, "the tray after the run could not be read; the invite rule counts nothing this time");
            return;
        }
    };
    log_tray(&input.id, "after", &after);
    report.follow_up = decision::follow_up(before, &after, input.follow_ups, completed);
    if report.follow_up {
        tracing::info!(event = %"backlog", cycle_id = %input.id, cards = after.conversations.len(), truncated = after.is_truncated(), "more cards wait than the run could see, and the completed run took cards off the tray; the next cycle starts now");
    }
    if !before_ids.is_empty() {
        apply_invite_rule(input, report, before, &after, completed, run_ended_at).await;
    }
}

async fn apply_invite_rule(
    input: &CycleInput,
    report: &mut CycleReport,
    before: &Tray,
    after: &Tray,
    completed: bool,
    run_ended_at: SystemTime,
) {
    let id = &input.id;
    let mut memory = match input.state.load_invites() {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(event = %"invite_memory_damaged", error = %e, "the invite memory could not be read; starting it afresh");
            Default::default()
        }
    };
    let before_ids = before.invite_ids();
    let after_ids = after.invite_ids();
    let obs = RunObservation {
        before: &before_ids,
        after: &after_ids,
        after_complete: after.invites_complete(),
        run_completed: completed,
        run_ended_at_ms: time::unix_ms(run_ended_at),
    };
    let verdicts = memory.apply_run(&obs, input.invite_pace_ms);
    for (invite_id, verdict) in verdicts {
        match verdict {
            // Forget the invite only once the dismissal is confirmed (core::invite_rule): a failed
            // call keeps its count, so the next completed run dismisses it again.
            InviteVerdict::Dismiss => match input.api.dismiss_invite(&invite_id).await {
                Ok(Dismissal::Dismissed) => {
                    memory.confirm_dismissed(&invite_id);
                    tracing::info!(event = %"invite_dismissed", cycle_id = %id, invite_id = %invite_id, "invite left pending by two runs: dismissed");
                    report.last.invites_dismissed += 1;
                }
                Ok(Dismissal::NotPending) => {
                    memory.confirm_dismissed(&invite_id);
                    tracing::info!(event = %"invite_not_pending", cycle_id = %id, invite_id = %invite_id, "invite no longer pending (404 INVITE_NOT_FOUND): nothing to dismiss, forgotten");
                }
                Err(e) => {
                    tracing::warn!(event = %"invite_dismiss_failed", cycle_id = %id, invite_id = %invite_id, error = %e, "could not dismiss the invite; it stays on the tray, and the next completed run that leaves it pending dismisses it again");
                }
            },
            InviteVerdict::Counted => {
                input.metrics.invite_counted();
                tracing::info!(event = %"invite_counted", cycle_id = %id, invite_id = %invite_id, "invite left pending by a run: counted")
            }
            InviteVerdict::SilentPaced => {
                tracing::info!(event = %"invite_silent_paced", cycle_id = %id, invite_id = %invite_id, "invite left pending again too soon after the counted run")
            }
            InviteVerdict::Forgotten => {
                tracing::debug!(event = %"invite_forgotten", cycle_id = %id, invite_id = %invite_id, "invite answered")
            }
            InviteVerdict::NotCounted => {
                tracing::debug!(event = %"invite_not_counted", cycle_id = %id, invite_id = %invite_id, "invite not counted")
            }
        }
    }
    input.state.save_invites(&memory);
}

/// Forgets the remembered invites a complete tray list no longer shows: they were answered
/// (contract 4, last paragraph; `InviteMemory::forget_unlisted`).
fn forget_answered(state: &StateDir, listed: &[String]) {
    let Ok(mut memory) = state.load_invites() else {
        return;
    };
    let gone = memory.forget_unlisted(listed, true);
    if gone.is_empty() {
        return;
    }
    tracing::debug!(event = %"invite_forgotten", count = gone.len(), "invites answered");
    state.save_invites(&memory);
}

/// Reads the tray, retrying transient failures and honouring `429 Retry-After` (the daemon hears
/// of that wait: `CycleWait`). A stop during a wait between tries gives up at once (the last
/// error), so a long `Retry-After` never delays a SIGTERM.
async fn read_tray(
    input: &CycleInput,
    mut shutdown: watch::Receiver<bool>,
) -> Result<Tray, ApiError> {
    let (api, cycle_id) = (&input.api, input.id.as_str());
    let mut attempt = 0;
    loop {
        attempt += 1;
        match api.inbox().await {
            Ok(t) => return Ok(t),
            Err(e) if e.is_transient() && attempt < TRAY_ATTEMPTS => {
                let wait = match &e {
                    ApiError::RateLimited(d) => {
                        if *d > MAX_RETRY_AFTER {
                            return Err(e);
                        }
                        *d
                    }
                    _ => Duration::from_millis(500 * (1 << attempt)),
                };
                tracing::info!(event = %"tray_retry", cycle_id = %cycle_id, error = %e, wait_ms = wait.as_millis() as u64, "tray read failed; retrying");
                if matches!(e, ApiError::RateLimited(_))
                    && let Some(waits) = &input.waits
                {
                    let _ = waits.try_send(CycleWait {
                        until: SystemTime::now() + wait,
                    });
                }
                tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.wait_for(|s| *s) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether this process already said that a tray had a version it does not know.
static UNKNOWN_VERSION_SAID: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

fn log_tray(cycle_id: &str, when: &str, tray: &Tray) {
    if let Some(v) = tray.unknown_version()
        && !UNKNOWN_VERSION_SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(event = %"tray_version_unknown", cycle_id = %cycle_id, version = v, known = crate::core::tray::KNOWN_VERSION, "the tray says version {v}; this agentchat knows version 1 and reads the fields it knows (contract 3.1); update agentchat");
    }
    tracing::info!(
        event = %"tray_read",
        cycle_id = %cycle_id,
        when = when,
        cards = tray.conversations.len(),
        muted = tray.conversations.iter().filter(|c| c.is_muted()).count(),
        truncated = tray.is_truncated(),
        invites = tray.invite_ids().len(),
        "tray read"
    );
    // Malformed entries `Tray::parse` skipped: one warning each, by index and field, never text.
    for (list, skipped) in [
        ("conversations", &tray.skipped_cards),
        ("invites", &tray.skipped_invites),
    ] {
        for s in skipped {
            tracing::warn!(event = %"tray_entry_skipped", cycle_id = %cycle_id, when = when, list = list, index = s.index, reason = %s.reason, "a malformed tray entry was skipped; the rest of the tray is used");
        }
    }
}

fn read_log(path: &std::path::Path) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(MAX_LOG_READ).read_to_end(&mut out);
    }
    out
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

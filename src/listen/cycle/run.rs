//! Step 5 of a cycle (contract 4): the run's working directory and identity block, the runtime's
//! spec, the supervised run and its judgement.

use super::{CycleEnd, CycleInput, CycleReport, RunStarting};
use crate::core::status::{Outcome, RunKind};
use crate::log_events;
use crate::runtime::supervisor::{self, RunLimits};
use crate::runtime::{self, RunContext, RunOutcome, RunSpec};
use std::time::SystemTime;

/// Most run-log bytes read back for judging.
const MAX_LOG_READ: u64 = 16 * 1024 * 1024;

/// The start of step 5: the working directory, the identity block in it, and the runtime's spec.
/// A runtime that cannot work is `Unusable`; anything else that stops the run is `Failed`.
pub(super) fn prepare_run(
    input: &CycleInput,
    kind: RunKind,
    prompt: &str,
) -> Result<RunSpec, CycleEnd> {
    let id = &input.id;
    let workdir = match super::workdir::prepare(
        &input.settings,
        &input.state,
        input.texts.as_deref(),
        &input.handle,
        id,
    ) {
        Ok(w) => w,
        Err((workdir, e)) => {
            tracing::error!(event = %log_events::RUN_FAILED, cycle_id = %id, error = %e, workdir = %workdir.display(), "cannot create the run's working directory");
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
        identity_template: input
            .texts
            .as_deref()
            .and_then(|t| t.identity_line_template.as_deref()),
    };
    runtime::prepare(&ctx).map_err(|e| match e {
        runtime::RuntimeError::Unusable(why) => {
            log_unusable(input, &why);
            CycleEnd::Run(RunOutcome::Unusable(why))
        }
        e => {
            tracing::error!(event = %log_events::RUN_FAILED, cycle_id = %id, error = %e, "could not prepare the run");
            CycleEnd::Run(RunOutcome::Failed(e.to_string()))
        }
    })
}

/// Step 5: starts the run, waits for it, and judges it. The outcome and when the run ended.
pub(super) async fn start_run(
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
    let conversations = report.conversations.clone();
    let runtime = input.settings.listen.runtime.as_str();
    let metrics = &input.metrics;
    let on_start = || {
        tracing::info!(event = %log_events::RUN_START, cycle_id = %id, run_kind = kind.as_str(), runtime, log = %log_path.display(), "run started");
        metrics.run_started();
        if let Some(tx) = run_starting {
            let _ = tx.send(RunStarting {
                kind,
                log: log_path.display().to_string(),
                conversations,
            });
        }
    };
    let supervised =
        supervisor::run(spec, limits, &log_path, input.shutdown.clone(), on_start).await;
    let reported = supervised.reported;
    report.run_report = Some(reported);
    let run_ended_at = SystemTime::now();
    let output = read_log(&log_path);
    let outcome = runtime::judge(input.settings.listen.runtime, &supervised.end, &output);
    // A program that cannot start for a lasting reason is an unusable runtime, not a failed run.
    let workdir = input
        .state
        .workdir(input.settings.listen.workdir.as_deref());
    let outcome = match runtime::check::unstartable(&input.settings, &workdir, &supervised.end) {
        Some(why) => RunOutcome::Unusable(why),
        None => outcome,
    };
    if let Err(e) =
        supervisor::prune_logs(&input.state.runs_dir(), input.settings.listen.run_logs_keep)
    {
        tracing::warn!(event = %log_events::RUN_LOGS_PRUNE_FAILED, error = %e, "could not prune old run logs");
    }
    let duration_ms = supervised.duration.as_millis() as u64;
    match &outcome {
        RunOutcome::Completed => {
            let end = &supervised.end;
            tracing::info!(event = %log_events::RUN_END, cycle_id = %id, outcome = Outcome::Completed.as_str(), end = end.word(), exit_code = end.exit_code(), signal = end.signal(), duration_ms, cost_usd = reported.cost_usd, tokens = reported.usage.map(|u| u.total()), "run completed");
        }
        RunOutcome::Failed(why) => {
            let end = &supervised.end;
            tracing::warn!(event = %log_events::RUN_END, cycle_id = %id, outcome = Outcome::Failed.as_str(), end = end.word(), exit_code = end.exit_code(), signal = end.signal(), why = %why, duration_ms, cost_usd = reported.cost_usd, tokens = reported.usage.map(|u| u.total()), "run failed");
        }
        RunOutcome::Unusable(why) => log_unusable(input, why),
    }
    input.metrics.run_ended(
        input.settings.listen.runtime.as_str(),
        &outcome,
        supervised.duration,
    );
    input
        .metrics
        .run_reported(input.settings.listen.runtime.as_str(), &reported);
    (outcome, run_ended_at)
}

fn log_unusable(input: &CycleInput, why: &str) {
    tracing::error!(event = %log_events::RUNTIME_UNUSABLE, cycle_id = %input.id, runtime = input.settings.listen.runtime.as_str(), why = %why, "the runtime cannot be used; no runs until it is fixed: the listener checks it again on a backoff (seconds growing to 10 minutes) and at once on reload (SIGHUP)");
}

fn read_log(path: &std::path::Path) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(MAX_LOG_READ).read_to_end(&mut out);
    }
    out
}

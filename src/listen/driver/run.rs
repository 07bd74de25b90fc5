//! A cycle's run, as the driver performs it (contract 4 step 5): the working directory and the
//! identity block in it, the runtime's spec, the supervised process, and its judgement. The
//! machine hears `RunStarted` once the process is up and `RunEnded` with the outcome.

use super::Io;
use crate::config::Settings;
use crate::core::listener::{Input, ProcessExit, RunEnd, RunOrder, RunOutcome};
use crate::core::status::Outcome;
use crate::listen::metrics::Metrics;
use crate::listen::state_dir::StateDir;
use crate::listen::workdir;
use crate::log_events;
use crate::runtime::supervisor::{self, RunLimits};
use crate::runtime::{self, RunContext, RunSpec};
use secrecy::SecretString;
use std::sync::Arc;
use tokio::sync::watch;

/// Most run-log bytes read back for judging.
const MAX_LOG_READ: u64 = 16 * 1024 * 1024;

/// What a run needs that the machine does not hold.
pub struct RunIo {
    pub settings: Settings,
    pub key: SecretString,
    pub state: StateDir,
    pub metrics: Arc<Metrics>,
}

/// Prepares and runs `order`, telling the machine through `io`. `cancel` turning true gives the
/// run SIGTERM and its grace; dropping the task kills its process group.
pub async fn run(order: RunOrder, r: RunIo, cancel: watch::Receiver<bool>, io: Io) {
    let cycle = order.cycle;
    let started = io.clone();
    let end = supervise(order, r, cancel, move |log| {
        started.send(Input::RunStarted { cycle, log });
    })
    .await;
    io.send(Input::RunEnded { cycle, end });
}

/// Prepares and runs `order` to its end; `on_start` hears the run's log once its process is up.
pub async fn supervise(
    order: RunOrder,
    r: RunIo,
    cancel: watch::Receiver<bool>,
    on_started: impl FnOnce(String),
) -> RunEnd {
    let spec = match prepare(&order, &r) {
        Ok(spec) => spec,
        Err(outcome) => {
            let binary = unusable_stamp(&r.settings, &outcome);
            return RunEnd {
                started: false,
                outcome,
                report: Default::default(),
                duration_ms: 0,
                exit: Default::default(),
                binary,
            };
        }
    };
    let id = &order.cycle_id;
    let log_path = r.state.runs_dir().join(supervisor::log_file_name(id));
    let limits = RunLimits {
        timeout: r.settings.listen.run_timeout,
        grace: r.settings.listen.kill_grace,
        log_max: r.settings.listen.run_log_max_bytes,
    };
    let runtime = r.settings.listen.runtime.as_str();
    let kind = order.kind;
    let on_start = || {
        tracing::info!(event = %log_events::RUN_START, cycle_id = %id, run_kind = kind.as_str(), runtime, log = %log_path.display(), "run started");
        r.metrics.run_started();
        on_started(log_path.display().to_string());
    };
    let supervised = supervisor::run(&spec, limits, &log_path, cancel, on_start).await;
    let reported = supervised.reported;
    let output = read_log(&log_path);
    let outcome = runtime::judge(r.settings.listen.runtime, &supervised.end, &output);
    // A program that cannot start for a lasting reason is an unusable runtime, not a failed run.
    let workdir = r.state.workdir(r.settings.listen.workdir.as_deref());
    let outcome = match runtime::check::unstartable(&r.settings, &workdir, &supervised.end) {
        Some(why) => RunOutcome::Unusable(why),
        None => outcome,
    };
    if let Err(e) = supervisor::prune_logs(&r.state.runs_dir(), r.settings.listen.run_logs_keep) {
        tracing::warn!(event = %log_events::RUN_LOGS_PRUNE_FAILED, error = %e, "could not prune old run logs");
    }
    let duration_ms = u64::try_from(supervised.duration.as_millis()).unwrap_or(u64::MAX);
    let end = &supervised.end;
    let tokens = reported.usage.map(|u| u.total());
    match &outcome {
        RunOutcome::Completed => {
            tracing::info!(event = %log_events::RUN_END, cycle_id = %id, outcome = Outcome::Completed.as_str(), end = end.word(), exit_code = end.exit_code(), signal = end.signal(), duration_ms, cost_usd = reported.cost_usd, tokens, "run completed");
        }
        RunOutcome::Failed(why) => {
            tracing::warn!(event = %log_events::RUN_END, cycle_id = %id, outcome = Outcome::Failed.as_str(), end = end.word(), exit_code = end.exit_code(), signal = end.signal(), why = %why, duration_ms, cost_usd = reported.cost_usd, tokens, "run failed");
        }
        // The machine says it, once, when the cycle ends (`core::listener::cycles`).
        RunOutcome::Unusable(_) => {}
    }
    r.metrics.run_ended(runtime, &outcome, supervised.duration);
    let binary = unusable_stamp(&r.settings, &outcome);
    let exit = ProcessExit {
        code: end.exit_code(),
        signal: end.signal(),
        timed_out: matches!(end, crate::sys::process::ProcessEnd::TimedOut),
    };
    RunEnd {
        started: true,
        outcome,
        report: reported,
        duration_ms,
        exit,
        binary,
    }
}

/// The working directory, the identity block in it, and the runtime's spec. A runtime that
/// cannot work is `Unusable`; anything else that stops the run is `Failed`.
fn prepare(order: &RunOrder, r: &RunIo) -> Result<RunSpec, RunOutcome> {
    let id = &order.cycle_id;
    let workdir = match workdir::prepare(
        &r.settings,
        &r.state,
        order.texts.as_deref(),
        &order.handle,
        id,
    ) {
        Ok(w) => w,
        Err((workdir, e)) => {
            tracing::error!(event = %log_events::RUN_FAILED, cycle_id = %id, error = %e, workdir = %workdir.display(), "cannot create the run's working directory");
            return Err(RunOutcome::Failed(format!("workdir: {e}")));
        }
    };
    let handle_at = format!("@{}", crate::core::handle::normalize(&order.handle));
    let ctx = RunContext {
        settings: &r.settings,
        kind: order.kind,
        prompt: &order.prompt,
        handle: &handle_at,
        cycle_id: id,
        wake_reasons: &order.reasons,
        api_key: &r.key,
        state_dir: &r.state.root,
        workdir: &workdir,
        identity_template: order
            .texts
            .as_deref()
            .and_then(|t| t.identity_line_template.as_deref()),
    };
    runtime::prepare(&ctx).map_err(|e| match e {
        runtime::RuntimeError::Unusable(why) => RunOutcome::Unusable(why),
        e => {
            tracing::error!(event = %log_events::RUN_FAILED, cycle_id = %id, error = %e, "could not prepare the run");
            RunOutcome::Failed(e.to_string())
        }
    })
}

/// The runtime binary's stamp when the run found it unusable.
fn unusable_stamp(settings: &Settings, outcome: &RunOutcome) -> Option<u64> {
    matches!(outcome, RunOutcome::Unusable(_))
        .then(|| super::binary_stamp(settings))
        .flatten()
}

fn read_log(path: &std::path::Path) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(MAX_LOG_READ).read_to_end(&mut out);
    }
    out
}

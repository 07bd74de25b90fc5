//! One cycle (design 4): read the tray, check `you`, decide run / no run and which served text,
//! start the run, read the tray again and apply the single-run invite rule. The decisions are
//! `core::decision` and `core::invite_rule`; this module only does the I/O around them.

use super::state_dir::{LastCycle, StateDir};
use crate::client::{Api, ApiError, Dismissal};
use crate::config::Settings;
use crate::core::decision::{self, CycleDecision, NoRun, RunKind};
use crate::core::invite_rule::{InviteVerdict, RunObservation};
use crate::core::texts::Texts;
use crate::core::tray::Tray;
use crate::runtime::supervisor::{self, RunLimits};
use crate::runtime::{self, RunContext, RunOutcome};
use crate::sys::{fs, time};
use secrecy::SecretString;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

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
    pub texts: Option<Texts>,
    pub reasons: Vec<String>,
    /// Set when the runtime reported it cannot work: no run until reload.
    pub runtime_unusable: bool,
    pub invite_pace_ms: u64,
    pub shutdown: watch::Receiver<bool>,
    /// The listener's metrics (a no-op registry for `--once`).
    pub metrics: std::sync::Arc<super::metrics::Metrics>,
}

/// What the cycle did, for the status file and the main loop.
#[derive(Debug, Clone, Default)]
pub struct CycleReport {
    pub last: LastCycle,
    pub run_failed: bool,
    /// The runtime said it cannot work (not logged in, ...): the reason.
    pub unusable: Option<String>,
    /// The tray's `you` named someone else.
    pub handle_mismatch: Option<String>,
    /// The tray was read and `you` matched (clears an earlier mismatch).
    pub handle_ok: bool,
    /// Texts fetched during the cycle because none were loaded.
    pub fetched_texts: Option<Texts>,
    /// The tray could not be read because the key was refused.
    pub key_refused: bool,
}

pub fn new_cycle_id() -> String {
    format!(
        "c{:x}-{:04x}",
        time::unix_ms(SystemTime::now()),
        fastrand::u16(..)
    )
}

/// Runs one cycle to its end.
pub async fn run(mut input: CycleInput) -> CycleReport {
    let mut report = CycleReport {
        last: LastCycle::started(input.id.clone(), input.reasons.clone()),
        ..Default::default()
    };
    tracing::info!(event = %"cycle_start", cycle_id = %input.id, reasons = %input.reasons.join(","), "cycle started");
    body(&mut input, &mut report).await;
    report.last.ended_at = Some(time::rfc3339(SystemTime::now()));
    tracing::info!(
        event = %"cycle_end",
        cycle_id = %input.id,
        run_started = report.last.run_started,
        outcome = report.last.outcome.as_deref().unwrap_or(""),
        no_run_reason = report.last.no_run_reason.as_deref().unwrap_or(""),
        "cycle ended"
    );
    report
}

fn no_run(report: &mut CycleReport, cycle_id: &str, reason: &str) {
    report.last.outcome = Some("no_run".into());
    report.last.no_run_reason = Some(reason.to_string());
    tracing::info!(event = %"no_run", cycle_id = %cycle_id, reason = %reason, "no run this cycle");
}

async fn body(input: &mut CycleInput, report: &mut CycleReport) {
    let id = input.id.clone();
    if input.runtime_unusable {
        no_run(report, &id, "runtime_unusable");
        return;
    }
    let before = match read_tray(&input.api, &id, input.shutdown.clone()).await {
        Ok(t) => t,
        Err(e) => {
            report.key_refused = matches!(e, ApiError::Refused(_));
            tracing::warn!(event = %"tray_unreadable", cycle_id = %id, error = %e, "the tray could not be read; no run (the server re-wakes)");
            no_run(report, &id, "tray_unreadable");
            return;
        }
    };
    log_tray(&id, "before", &before);
    let kind = match decision::decide(&before, &input.handle) {
        CycleDecision::NoRun(NoRun::HandleMismatch { you }) => {
            // The main loop logs the error once per mismatch episode, not once per cycle.
            tracing::debug!(event = %"tray_you_mismatch", cycle_id = %id, you = %you, handle = %input.handle, "the tray belongs to another agent than this key's");
            report.handle_mismatch = Some(you);
            no_run(report, &id, "handle_mismatch");
            return;
        }
        CycleDecision::NoRun(NoRun::NothingWaiting) => {
            report.handle_ok = true;
            no_run(report, &id, "nothing_waiting");
            return;
        }
        CycleDecision::NoRun(NoRun::OnlyMuted) => {
            report.handle_ok = true;
            no_run(report, &id, "only_muted");
            return;
        }
        CycleDecision::Run(kind) => kind,
    };
    report.handle_ok = true;

    if input.texts.is_none() {
        // None loaded at start or from the cache: one more try now.
        match input
            .api
            .texts(input.settings.listen.runtime.texts_runtime())
            .await
        {
            Ok((t, bytes)) => {
                let path = input
                    .state
                    .texts_cache(input.settings.listen.runtime.texts_runtime());
                if let Err(e) = fs::write_atomic(&path, &bytes) {
                    tracing::warn!(event = %"texts_cache_write_failed", error = %e, "could not keep the texts");
                }
                report.fetched_texts = Some(t.clone());
                input.texts = Some(t);
            }
            Err(e) => {
                tracing::debug!(event = %"texts_fetch_failed", error = %e, "texts still unavailable")
            }
        }
    }
    let Some(texts) = input.texts.as_ref() else {
        // The main loop says this once per episode (the start already said it when it began).
        tracing::debug!(event = %"no_texts", cycle_id = %id, "no texts loaded");
        no_run(report, &id, "no_texts");
        return;
    };
    let Some(prompt) = decision::prompt_for(kind, texts).map(str::to_string) else {
        tracing::error!(event = %"texts_missing", cycle_id = %id, field = if kind == RunKind::Wake { "wake_instruction" } else { "invite_prompt" }, "the served texts lack the prompt for this run; no run");
        no_run(report, &id, "no_prompt");
        return;
    };

    let workdir = input
        .settings
        .listen
        .workdir
        .clone()
        .unwrap_or_else(|| input.state.default_workdir());
    if let Err(e) = std::fs::create_dir_all(&workdir) {
        tracing::error!(event = %"run_failed", cycle_id = %id, error = %e, workdir = %workdir.display(), "cannot create the run's working directory");
        report.last.outcome = Some("failed".into());
        report.last.failure = Some(format!("workdir: {e}"));
        report.run_failed = true;
        return;
    }
    let handle_at = format!("@{}", crate::core::handle::normalize(&input.handle));
    if input.settings.listen.identity_block {
        keep_identity_block(&input.settings, texts, &input.handle, &workdir, &id);
    }
    let ctx = RunContext {
        settings: &input.settings,
        kind,
        prompt: &prompt,
        handle: &handle_at,
        cycle_id: &id,
        wake_reasons: &input.reasons,
        api_key: &input.key,
        state_dir: &input.state.root,
        workdir: &workdir,
    };
    let spec = match runtime::prepare(&ctx) {
        Ok(s) => s,
        Err(runtime::RuntimeError::Unusable(why)) => {
            tracing::error!(event = %"runtime_unusable", cycle_id = %id, runtime = input.settings.listen.runtime.as_str(), why = %why, "the runtime cannot be used; no runs until it is fixed and the listener reloaded (SIGHUP)");
            report.unusable = Some(why.clone());
            report.last.outcome = Some("unusable".into());
            report.last.failure = Some(why);
            return;
        }
        Err(e) => {
            tracing::error!(event = %"run_failed", cycle_id = %id, error = %e, "could not prepare the run");
            report.last.outcome = Some("failed".into());
            report.last.failure = Some(e.to_string());
            report.run_failed = true;
            return;
        }
    };

    let log_path = input.state.runs_dir().join(supervisor::log_file_name(&id));
    let limits = RunLimits {
        timeout: input.settings.listen.run_timeout,
        grace: input.settings.listen.kill_grace,
        log_max: input.settings.listen.run_log_max_bytes,
    };
    report.last.run_started = true;
    report.last.run_kind = Some(kind.as_str().into());
    report.last.run_log = Some(log_path.display().to_string());
    tracing::info!(event = %"run_start", cycle_id = %id, run_kind = kind.as_str(), runtime = input.settings.listen.runtime.as_str(), log = %log_path.display(), "run started");
    input.metrics.run_started();
    let run_report = supervisor::run(&spec, limits, &log_path, input.shutdown.clone()).await;
    let run_ended_at = SystemTime::now();
    let output = read_log(&log_path);
    let outcome = runtime::judge(input.settings.listen.runtime, &run_report.end, &output);
    if let Err(e) =
        supervisor::prune_logs(&input.state.runs_dir(), input.settings.listen.run_logs_keep)
    {
        tracing::warn!(event = %"run_logs_prune_failed", error = %e, "could not prune old run logs");
    }
    let completed = match &outcome {
        RunOutcome::Completed => {
            tracing::info!(event = %"run_end", cycle_id = %id, outcome = "completed", end = ?run_report.end, duration_ms = run_report.duration.as_millis() as u64, "run completed");
            report.last.outcome = Some("completed".into());
            true
        }
        RunOutcome::Failed(why) => {
            tracing::warn!(event = %"run_end", cycle_id = %id, outcome = "failed", end = ?run_report.end, why = %why, duration_ms = run_report.duration.as_millis() as u64, "run failed");
            report.last.outcome = Some("failed".into());
            report.last.failure = Some(why.clone());
            report.run_failed = true;
            false
        }
        RunOutcome::Unusable(why) => {
            tracing::error!(event = %"runtime_unusable", cycle_id = %id, runtime = input.settings.listen.runtime.as_str(), why = %why, "the runtime cannot be used; no runs until it is fixed and the listener reloaded (SIGHUP)");
            report.last.outcome = Some("unusable".into());
            report.last.failure = Some(why.clone());
            report.unusable = Some(why.clone());
            report.run_failed = true;
            false
        }
    };

    input.metrics.run_ended(
        input.settings.listen.runtime.as_str(),
        report.last.outcome.as_deref().unwrap_or(""),
        run_report.duration,
    );

    if *input.shutdown.borrow() {
        return;
    }
    // The invite rule (design 6). A failed run counts nothing, but the memory still forgets
    // invites that are gone, so the after-tray is read either way.
    let before_ids = before.invite_ids();
    if before_ids.is_empty() {
        // No invite waited, so none can be counted: no second tray read. Invites the memory
        // still holds are gone from a complete list, so they were answered: forget them.
        if before.invites_complete() {
            forget_answered(&input.state, &before_ids);
        }
        return;
    }
    let after = match read_tray(&input.api, &id, input.shutdown.clone()).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(event = %"tray_unreadable", cycle_id = %id, error = %e, "the tray after the run could not be read; the invite rule counts nothing this time");
            return;
        }
    };
    log_tray(&id, "after", &after);
    apply_invite_rule(input, report, &before, &after, completed, run_ended_at).await;
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

/// Keeps the identity block (which handle this agent is, from the served
/// `identity_line_template`) current in the file the runtime loads every turn inside `workdir`:
/// `CLAUDE.md` for Claude Code, `AGENTS.md` for Codex; nothing for scripts. Every byte outside
/// the marked block stays as it was; a damaged block is left alone with a warning.
fn keep_identity_block(
    settings: &Settings,
    texts: &Texts,
    handle: &str,
    workdir: &std::path::Path,
    cycle_id: &str,
) {
    let Some(file) = settings.listen.runtime.identity_file() else {
        return;
    };
    let Some(template) = texts.identity_line_template.as_deref() else {
        tracing::debug!(event = %"identity_skipped", cycle_id = %cycle_id, "the texts have no identity_line_template");
        return;
    };
    let path = workdir.join(file);
    let current = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            tracing::warn!(event = %"identity_failed", cycle_id = %cycle_id, path = %path.display(), error = %e, "cannot read the file for the identity block");
            return;
        }
    };
    let rendered = crate::core::identity::render(template, &crate::core::handle::normalize(handle));
    match crate::core::identity::upsert(&current, &rendered) {
        Ok(next) if next == current => {}
        Ok(next) => {
            if let Err(e) = fs::write_keeping_mode(&path, next.as_bytes()) {
                tracing::warn!(event = %"identity_failed", cycle_id = %cycle_id, path = %path.display(), error = %e, "cannot write the identity block");
            } else {
                tracing::info!(event = %"identity_updated", cycle_id = %cycle_id, path = %path.display(), "identity block updated");
            }
        }
        Err(e) => {
            tracing::warn!(event = %"identity_failed", cycle_id = %cycle_id, path = %path.display(), error = %e, "identity block left as it is")
        }
    }
}

/// Forgets the remembered invites a complete tray list no longer shows: they were answered
/// (design 6, `InviteMemory::forget_unlisted`).
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

/// Reads the tray, retrying transient failures and honouring `429 Retry-After`. A stop during a
/// wait between tries gives up at once (the last error), so a long `Retry-After` never delays a
/// SIGTERM.
async fn read_tray(
    api: &Api,
    cycle_id: &str,
    mut shutdown: watch::Receiver<bool>,
) -> Result<Tray, ApiError> {
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
                tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.wait_for(|s| *s) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

fn log_tray(cycle_id: &str, when: &str, tray: &Tray) {
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

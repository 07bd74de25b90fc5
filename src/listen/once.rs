//! `agentchat listen --once`, for scripts and cron: connect (which proves the key and acks what the
//! server pushes), run at most one cycle if something waits, exit. Exit 0 when nothing waited or
//! the run completed; an error (exit 1) when it could not connect or the run failed.

use super::cycle::{self, CycleInput};
use super::socket::{self, SocketParams};
use super::start::Prepared;
use crate::client::Api;
use crate::config::Settings;
use crate::core::exit::Exit;
use crate::core::status::{NoRunReason, Outcome};
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// How long `--once` listens after connecting before it reads the tray.
const SETTLE: Duration = Duration::from_millis(500);

/// `prepared`: the profile as `start::prepare` left it, its lock held until this returns.
pub async fn run(settings: Settings, prepared: Prepared) -> anyhow::Result<i32> {
    let Prepared {
        key,
        state,
        lock: _lock,
    } = prepared;
    let scale = settings.time_scale;
    // One REST client for the whole run: who am I, the texts, the tray.
    let api = Api::new(&settings.api_base, key.clone())?;
    let params = SocketParams::new(
        &settings,
        key.clone(),
        api.clone(),
        super::metrics::Metrics::off(),
        super::pacer::Pacer::new(scale.factor()),
    );
    let handle = socket::connect_once(&params, SETTLE).await.map_err(|e| {
        // Said once: the lines about a wrong or unreachable api_base name it already.
        if e.contains(settings.api_base.as_str()) {
            anyhow::anyhow!("could not connect: {e}")
        } else {
            anyhow::anyhow!("could not connect to {}: {e}", settings.api_base)
        }
    })?;
    // One agent, one listener (`agent_lock`): a resident listener or another `--once` for the
    // same agent under another state dir runs already.
    let mut agent = super::agent_lock::AgentSlot::default();
    if !agent.on_handle(&settings.api_base, &handle, &settings.state_dir) {
        return Ok(super::start::exit_code(
            Exit::AlreadyRunning,
            &crate::config::process_env(),
        ));
    }
    let runtime = settings.listen.runtime.texts_runtime();
    let texts = match super::texts::load(&api, &state, runtime, true).await {
        Ok(loaded) => Some(loaded.texts),
        Err(missing) => {
            missing.log();
            None
        }
    };

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    // `[listen.policy]` holds a one-off run as it holds the daemon's, and counts it.
    let mut run_policy = super::daemon::run_policy::RunPolicy::load(&settings, &state);
    let input = CycleInput {
        admission: None,
        id: cycle::new_cycle_id(),
        settings,
        api,
        key,
        state,
        handle,
        texts,
        reasons: vec!["connect".into()],
        causes: crate::core::decision::WakeCauses::unknown(),
        runtime_unusable: false,
        invite_pace_ms: scale.invite_pace_ms(),
        follow_ups: 0,
        shutdown: shutdown_rx,
        metrics: super::metrics::Metrics::off(),
        run_starting: None,
        waits: None,
        policy: Some(run_policy.for_cycle()),
    };
    let mut task = tokio::spawn(cycle::run(input));
    let report = tokio::select! {
        r = &mut task => r,
        _ = sigterm.recv() => { let _ = shutdown_tx.send(true); task.await }
        _ = sigint.recv() => { let _ = shutdown_tx.send(true); task.await }
    }
    .map_err(|e| anyhow::anyhow!("the cycle ended abnormally: {e}"))?;
    run_policy.cycle_ended(&report);

    let last = &report.last;
    match last.outcome {
        Some(Outcome::Completed) => {
            println!("run completed (cycle {})", last.id);
            Ok(0)
        }
        Some(Outcome::NoRun) => {
            let why = last.no_run_reason;
            let why_word = why.map_or("", NoRunReason::as_str);
            match why {
                // Nothing for a run to do: a success for a script or cron job.
                Some(
                    NoRunReason::NothingWaiting
                    | NoRunReason::OnlyMuted
                    | NoRunReason::NoPrompt
                    | NoRunReason::RuntimeUnusable
                    // The user's `[listen.policy]` chose that no run starts now.
                    | NoRunReason::Held,
                )
                | None => {
                    println!("no run: {why_word}");
                    Ok(0)
                }
                // Something waited, or may have, and could not get a run.
                Some(
                    NoRunReason::TrayUnreadable
                    | NoRunReason::HandleMismatch
                    | NoRunReason::NoTexts
                    | NoRunReason::Stopped,
                ) => anyhow::bail!("no run: {why_word} (cycle {})", last.id),
            }
        }
        outcome @ (Some(Outcome::Failed | Outcome::Unusable) | None) => {
            let what = match outcome {
                Some(Outcome::Unusable) => "the runtime cannot be used",
                _ => "the run failed",
            };
            let failure = last.failure.as_deref().unwrap_or("unknown");
            // A cycle that started no run has no log to name.
            match &last.run_log {
                Some(log) => anyhow::bail!("{what}: {failure} (cycle {}, log {log})", last.id),
                None => anyhow::bail!("{what}: {failure} (cycle {})", last.id),
            }
        }
    }
}

//! `agentchat listen --once`, for scripts and cron: connect (which proves the key and acks what the
//! server pushes), run at most one cycle if something waits, exit. Exit 0 when nothing waited or
//! the run completed; an error (exit 1) when it could not connect or the run failed.

use super::cycle::{self, CycleInput};
use super::socket::{self, SocketParams};
use super::state_dir::StateDir;
use crate::client::Api;
use crate::config::Settings;
use secrecy::SecretString;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// How long `--once` listens after connecting before it reads the tray.
const SETTLE: Duration = Duration::from_millis(500);

pub async fn run(
    settings: Settings,
    key: SecretString,
    state: StateDir,
    scale: super::TimeScale,
) -> anyhow::Result<i32> {
    let params = SocketParams {
        api_base: settings.api_base.clone(),
        key: key.clone(),
        idle_timeout: settings.listen.idle_timeout,
        key_refused_retry: crate::core::reconnect::KEY_REFUSED_RETRY,
        metrics: super::metrics::Metrics::off(),
    };
    let handle = socket::connect_once(&params, SETTLE)
        .await
        .map_err(|e| anyhow::anyhow!("could not connect to {}: {e}", settings.api_base))?;
    let api = Api::new(&settings.api_base, key.clone())?;
    let texts = super::load_texts(&api, &state, settings.listen.runtime.texts_runtime(), true)
        .await
        .map(|(t, _)| t);

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let input = CycleInput {
        id: cycle::new_cycle_id(),
        settings,
        api,
        key,
        state,
        handle,
        texts,
        reasons: vec!["connect".into()],
        runtime_unusable: false,
        invite_pace_ms: scale.invite_pace_ms(),
        shutdown: shutdown_rx,
        metrics: super::metrics::Metrics::off(),
    };
    let mut task = tokio::spawn(cycle::run(input));
    let report = tokio::select! {
        r = &mut task => r,
        _ = sigterm.recv() => { let _ = shutdown_tx.send(true); task.await }
        _ = sigint.recv() => { let _ = shutdown_tx.send(true); task.await }
    }
    .map_err(|e| anyhow::anyhow!("the cycle ended abnormally: {e}"))?;

    let last = &report.last;
    match last.outcome.as_deref() {
        Some("completed") => {
            println!("run completed (cycle {})", last.id);
            Ok(0)
        }
        Some("no_run") => {
            let why = last.no_run_reason.as_deref().unwrap_or("");
            if why == "tray_unreadable" || why == "handle_mismatch" || why == "no_texts" {
                anyhow::bail!("no run: {why} (cycle {})", last.id);
            }
            println!("no run: {why}");
            Ok(0)
        }
        _ => anyhow::bail!(
            "the run failed: {} (cycle {}, log {})",
            last.failure.as_deref().unwrap_or("unknown"),
            last.id,
            last.run_log.as_deref().unwrap_or("-")
        ),
    }
}

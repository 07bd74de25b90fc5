//! The cycle's tray reads (contract 3.1, 4): the read before the run with its `429 Retry-After`
//! retries and `REMOVED` handling (contract 7), and the `tray_read` log line.

use super::{CycleEnd, CycleInput, CycleReport, CycleWait};
use crate::client::ApiError;
use crate::core::status::NoRunReason;
use crate::core::tray::Tray;
use crate::log_events;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// Tray reads tried inside one cycle before it ends without a run.
const TRAY_ATTEMPTS: u32 = 3;
/// The longest `Retry-After` waited inside a cycle; a longer one ends the cycle (the server
/// re-wakes).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Step 1: the tray, retried a few times; unreadable ends the cycle without a run (the server
/// re-wakes).
pub(super) async fn read_tray_before(
    input: &CycleInput,
    report: &mut CycleReport,
) -> Result<Tray, CycleEnd> {
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
                tracing::error!(event = %log_events::ROUTE_REMOVED, cycle_id = %input.id, error = %e, "the tray could not be read: the server switched its route off; no run until agentchat is updated");
                report.removed = Some(e.to_string());
            } else {
                tracing::warn!(event = %log_events::TRAY_UNREADABLE, cycle_id = %input.id, error = %e, "the tray could not be read; no run (the server re-wakes)");
            }
            Err(CycleEnd::NoRun(NoRunReason::TrayUnreadable))
        }
    }
}

/// Reads the tray, retrying transient failures and honouring `429 Retry-After` (the daemon hears
/// of that wait: `CycleWait`). A stop during a wait between tries gives up at once (the last
/// error), so a long `Retry-After` never delays a SIGTERM.
pub(super) async fn read_tray(
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
                tracing::info!(event = %log_events::TRAY_RETRY, cycle_id = %cycle_id, error = %e, wait_ms = wait.as_millis() as u64, "tray read failed; retrying");
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

pub(super) fn log_tray(cycle_id: &str, when: &str, tray: &Tray) {
    if let Some(v) = tray.unknown_version()
        && !UNKNOWN_VERSION_SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(event = %log_events::TRAY_VERSION_UNKNOWN, cycle_id = %cycle_id, version = v, known = crate::core::tray::KNOWN_VERSION, "the tray says version {v}; this agentchat knows version 1 and reads the fields it knows (contract 3.1); update agentchat");
    }
    tracing::info!(
        event = %log_events::TRAY_READ,
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
            tracing::warn!(event = %log_events::TRAY_ENTRY_SKIPPED, cycle_id = %cycle_id, when = when, list = list, index = s.index, reason = %s.reason, "a malformed tray entry was skipped; the rest of the tray is used");
        }
    }
}

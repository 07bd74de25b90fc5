//! An attempt or connection ended: the delay its end calls for (`crate::reconnect`), said once,
//! then the wait.

use super::super::Out;
use super::super::io::NotReached;
use super::super::reach::{MISCONFIGURED_RETRY, Say, UNREACHABLE_WARN_AFTER};
use super::{CLOCK_LOOK_EVERY, Cut, End, Note, Params, Phase, Socket};
use crate::log_events;
use crate::reconnect::{self, CloseKind};
use crate::status::SocketState;
use crate::time::{Now, human_secs, ms};
use std::time::Duration;

impl Socket {
    /// An attempt or connection ended: the delay its end calls for, said once, then the wait.
    pub(super) fn ended(&mut self, now: Now, end: End, p: &Params, out: &mut Out<Note>) {
        let (kind, detail, not_reached) = match end {
            End::Closed(kind, detail) => {
                self.reach.reached();
                (kind, detail, None)
            }
            // The server answered: it is there, and asked for a wait of its own.
            End::Throttled(wait, detail) => {
                self.reach.reached();
                self.server_wait = Some(wait);
                (CloseKind::Ordinary, detail, None)
            }
            End::NotReached(n) => (CloseKind::Ordinary, n.detail().to_string(), Some(n)),
        };
        p.obs.socket_down(&kind);
        let misconfigured = matches!(not_reached, Some(NotReached::Misconfigured(_)));
        let delay = if misconfigured {
            p.timing.of(MISCONFIGURED_RETRY)
        } else {
            if kind == CloseKind::KeyRefused {
                // The handle is asked for again with the next key.
                self.handle_known_for = None;
            }
            reconnect::delay_after(
                &kind,
                &mut self.backoff,
                p.timing.of(reconnect::KEY_REFUSED_RETRY),
                out.rng.f64(),
                p.timing.scale,
            )
        };
        // A `429` asked for a wait of its own: never less.
        let delay = delay.max(self.server_wait.take().unwrap_or_default());
        let said = not_reached
            .as_ref()
            .is_some_and(|n| self.say_not_reached(n, now, p, delay));
        let state = self.report_down(&kind, &detail, delay, said);
        let detail = if detail.is_empty() {
            state.as_str().to_string()
        } else {
            detail
        };
        out.note(Note::State {
            state,
            next_retry_at: Some(now.wall_ms.saturating_add(ms(delay) as i64)),
            detail: Some(detail),
        });
        let cut = match kind {
            _ if misconfigured => Some(Cut::Misconfigured),
            CloseKind::UpgradeRequired => Some(Cut::UpgradeRequired),
            CloseKind::KeyRefused => Some(Cut::KeyRefused),
            _ => None,
        };
        self.phase = Phase::Waiting {
            until: now.after(delay),
            cut,
            look_at: now.after(CLOCK_LOOK_EVERY),
        };
    }

    /// A wrong `api_base` is said once at ERROR, an outage once at WARN when it has lasted
    /// `UNREACHABLE_WARN_AFTER`; every other attempt is the ordinary INFO line. True when it
    /// logged.
    pub(super) fn say_not_reached(
        &mut self,
        n: &NotReached,
        now: Now,
        p: &Params,
        delay: Duration,
    ) -> bool {
        let retry_in_ms = ms(delay);
        match self
            .reach
            .failed(n, now.mono_ms, p.timing.of(UNREACHABLE_WARN_AFTER))
        {
            Say::Misconfigured => tracing::error!(
                event = %log_events::API_BASE_NOT_AGENTCHAT,
                api_base = %p.api_base,
                retry_in_ms,
                "{}; retrying every {} s (at once on SIGHUP)",
                n.detail(),
                delay.as_secs().max(1)
            ),
            Say::LongUnreachable { for_s } => tracing::warn!(
                event = %log_events::SERVER_UNREACHABLE,
                api_base = %p.api_base,
                for_s,
                retry_in_ms,
                "no AgentChat server for {} now: {}; still retrying (check the network, or api_base)",
                human_secs(for_s),
                n.detail()
            ),
            Say::Again => return false,
        }
        true
    }

    /// Says why the socket is down and when it is tried again (none for the ordinary backoff
    /// when `said` already); the state to show.
    pub(super) fn report_down(
        &self,
        kind: &CloseKind,
        detail: &str,
        delay: Duration,
        said: bool,
    ) -> SocketState {
        let retry_in_ms = ms(delay);
        match kind {
            // ERROR at the first refusal of a run; the retries after it say it again at INFO.
            CloseKind::KeyRefused if self.backoff.key_attempt() <= 1 => {
                tracing::error!(
                    event = %log_events::KEY_REFUSED,
                    retry_in_ms,
                    detail = %detail,
                    "the server refused the API key; check AGENTCHAT_API_KEY or api_key_file, then send SIGHUP (systemctl --user reload) to retry at once"
                );
                SocketState::KeyRefused
            }
            CloseKind::KeyRefused => {
                tracing::info!(
                    event = %log_events::KEY_REFUSED,
                    retry_in_ms,
                    detail = %detail,
                    "the server still refuses the API key; retrying later"
                );
                SocketState::KeyRefused
            }
            CloseKind::Budget { retry_after_s } => {
                tracing::warn!(
                    event = %log_events::CONNECT_BUDGET,
                    retry_after_s = *retry_after_s,
                    retry_in_ms,
                    "connect budget exhausted; waiting as the server asked"
                );
                SocketState::Backoff
            }
            // Contract 7: retrying the same way will not succeed. A stopped state, re-checked
            // every 15-30 min (`reconnect::UPGRADE_RECHECK`), at once on reload.
            CloseKind::UpgradeRequired => {
                tracing::error!(
                    event = %log_events::UPGRADE_REQUIRED,
                    retry_in_ms,
                    detail = %detail,
                    "the server requires a newer agentchat ({}): no wake arrives until agentchat is updated; checking again in {} min",
                    detail,
                    delay.as_secs().div_ceil(60)
                );
                SocketState::UpgradeRequired
            }
            CloseKind::Ordinary => {
                if !said {
                    tracing::info!(event = %log_events::BACKOFF, retry_in_ms, detail = %detail, "socket down; reconnecting after a delay");
                }
                SocketState::Backoff
            }
        }
    }
}

//! The ways out of the states in which no run can start, as the listener acts on them: the
//! runtime's health (`crate::runtime_health`: the check at start, the checks while it is
//! unusable, the ways back), the texts in use with their recovery (`crate::texts_recovery`), and
//! the key while the server refuses it. Leaving such a state reads the tray at once
//! (`recovered`): every wake the server sent meanwhile was spent.

use super::io::{LoadedTexts, MissingTexts};
use super::{Effect, Listener};
use crate::log_events;
use crate::runtime_health::CheckEnd;
use crate::status::{ListenerWake, TextsStatus};
use crate::texts_recovery::TextsRecovery;
use crate::time::Now;

/// The texts loaded, and their recovery.
#[derive(Debug, Default)]
pub(super) struct TextsInUse {
    loaded: Option<LoadedTexts>,
    recovery: TextsRecovery,
}

impl TextsInUse {
    /// The loaded texts when they are `runtime`'s: another runtime's texts spell the tools
    /// another way and are never used.
    pub(super) fn current(&self, runtime: &str) -> Option<&LoadedTexts> {
        self.loaded.as_ref().filter(|l| l.runtime == runtime)
    }

    pub(super) fn status(&self) -> TextsStatus {
        self.loaded
            .as_ref()
            .map(LoadedTexts::status)
            .unwrap_or_default()
    }

    /// Texts came: `runtime`'s take over; an answer for a runtime switched away from meanwhile
    /// is dropped. With none for the runtime, `texts_missing` is said once per stretch and they
    /// are fetched again on the backoff. True when texts came back after a cycle spent a wake.
    fn take(
        &mut self,
        r: Result<LoadedTexts, MissingTexts>,
        runtime: &str,
        now: u64,
        factor: f64,
    ) -> bool {
        match r {
            Ok(loaded) if loaded.runtime != runtime => {
                tracing::debug!(event = %log_events::TEXTS_DROPPED, runtime = loaded.runtime, "texts for a runtime no longer configured");
                false
            }
            Ok(loaded) => {
                self.loaded = Some(loaded);
                self.recovery.came()
            }
            Err(missing) if missing.runtime != runtime => false,
            Err(missing) => {
                if self.current(runtime).is_none() && self.recovery.missing(now, factor) {
                    let cache = missing.cache.as_deref().unwrap_or("not tried");
                    tracing::error!(
                        event = %log_events::TEXTS_MISSING,
                        runtime = missing.runtime,
                        fetch_error = %missing.fetch,
                        cache = %cache,
                        "no texts for this runtime, neither from the server nor cached; no runs until the server's texts can be read"
                    );
                }
                false
            }
        }
    }

    pub(super) fn owe(&mut self, now: u64, factor: f64) {
        self.recovery.owe(now, factor);
    }

    pub(super) fn recheck_at(&self) -> Option<u64> {
        self.recovery.recheck_at()
    }

    pub(super) fn fetching(&mut self) {
        self.recovery.fetching();
    }

    /// The runtime reads other texts now: none are in use until its own come.
    pub(super) fn runtime_changed(&mut self) {
        self.loaded = None;
        self.recovery.runtime_changed();
    }

    pub(super) fn recheck_now(&mut self, now: u64) {
        self.recovery.recheck_now(now);
    }
}

impl Listener {
    /// The texts refresh (the day's, a reload's, the recovery's), unless one is under way.
    pub(super) fn refresh_texts(&mut self) {
        if self.cycles.texts_req.is_some() {
            return;
        }
        self.cycles.next_req += 1;
        self.cycles.texts_req = Some(self.cycles.next_req);
        let use_cache = self
            .texts
            .current(self.cfg.runtime.texts_runtime())
            .is_none();
        self.out.effects.push_back(Effect::FetchTexts {
            req: self.cycles.next_req,
            use_cache,
            quiet: false,
        });
    }

    /// Texts came: a refresh's, or the cycle's that found none.
    pub(super) fn on_texts_answer(
        &mut self,
        now: Now,
        req: u64,
        result: Result<LoadedTexts, MissingTexts>,
    ) {
        if self.cycles.texts_req == Some(req) {
            self.cycles.texts_req = None;
            self.take_texts(result, now);
            self.status.changed();
            self.started_part(now);
            return;
        }
        if let Some(seq) = self.cycles.cycle.as_ref().map(|c| c.seq) {
            self.with_cycle(now, seq, |c, ctx, out| {
                c.on_texts(ctx, req, result, out);
            });
        }
    }

    /// Texts came from a refresh or a cycle: texts back after a spent wake read the tray now.
    pub(super) fn take_texts(&mut self, r: Result<LoadedTexts, MissingTexts>, now: Now) {
        let runtime = self.cfg.runtime.texts_runtime();
        if self.texts.take(r, runtime, now.mono_ms, self.timing.scale) {
            tracing::info!(event = %log_events::TEXTS_RECOVERED, runtime, "texts are back; reading the tray now");
            self.own_wake(ListenerWake::Recovered, now);
        }
    }

    /// The runtime cannot work: no run until it is fixed, and a look again on the backoff.
    pub(super) fn mark_unusable(&mut self, why: String, now: Now) {
        let binary = self.rt.stamp;
        let why = if self.rt.health.is_trial() {
            format!(
                "{why} (refused again right after its check passed: the next message, a reload \
                 or a new binary tries it again)"
            )
        } else {
            why
        };
        let parked = self
            .rt
            .health
            .mark_unusable(why, binary, now.mono_ms, self.timing.scale);
        if parked {
            // The check passed and the run was refused all the same (a model refusing the key
            // while the CLI says it is logged in): looking again would start paid runs on the
            // listener's own backoff for ever (contract 4: no retry ladder of its own).
            tracing::warn!(
                event = %log_events::RUNTIME_PARKED,
                runtime = self.cfg.runtime.as_str(),
                "the runtime refused the run right after its check passed: no more checks of the listener's own; the next message, a reload (SIGHUP) or a new binary tries it again"
            );
        }
        self.status.changed();
    }

    /// A wake of the server's while the runtime is parked: it gets one more trial, this wake's
    /// cycle.
    pub(super) fn wake_parked_runtime(&mut self, now: Now) {
        if let Some(was) = self.rt.health.server_wake() {
            self.said_recovered("wake", &was, false, now);
        }
    }

    /// The runtime is usable again (`via`: `reload`, `recheck`, `binary_changed`): said once, and
    /// unless a cycle starts now anyway (`wake`), the tray is read at once.
    pub(super) fn leave_unusable(&mut self, via: &'static str, wake: bool, now: Now) {
        if let Some(was) = self.rt.health.leave() {
            self.said_recovered(via, &was, wake, now);
        }
    }

    /// A reload: the runtime gets a new chance at once (`RuntimeHealth::reload`: a parked one's
    /// run is its trial), said once, and the tray is read.
    pub(super) fn reload_runtime(&mut self, now: Now) {
        if let Some(was) = self.rt.health.reload() {
            self.said_recovered("reload", &was, true, now);
        }
    }

    fn said_recovered(&mut self, via: &'static str, was: &str, wake: bool, now: Now) {
        tracing::info!(event = %log_events::RUNTIME_RECOVERED, via, runtime = self.cfg.runtime.as_str(), was = %was, "the runtime may work again; reading the tray now");
        if wake {
            self.own_wake(ListenerWake::Recovered, now);
        }
        self.status.changed();
    }

    /// A check of the runtime ended: at start, only the program's presence (a missing program
    /// is unusable from the first moment, as `doctor` says); while unusable, a pass ends that
    /// and a failure waits for the next look. A check whose stretch ended meanwhile (a reload)
    /// changes nothing.
    pub(super) fn on_runtime_checked(&mut self, now: Now, result: Result<String, String>) {
        let runtime = self.cfg.runtime.as_str();
        if !self.rt.checking {
            // The look at start or reload (the program, and a login no file shows). A run may
            // have found the runtime unusable first (the login check takes seconds): said once.
            if let Err(why) = result {
                if self.rt.health.is_usable() {
                    tracing::error!(event = %log_events::RUNTIME_UNUSABLE, at = "start", runtime, why = %why, "the runtime cannot be used; no runs until it is fixed: the listener checks it again on a backoff (seconds growing to 10 minutes) and at once on reload (SIGHUP)");
                }
                self.mark_unusable(why, now);
            }
            self.started_part(now);
            return;
        }
        self.rt.checking = false;
        let end = self
            .rt
            .health
            .check_ended(result.is_ok(), now.mono_ms, self.timing.scale);
        match (end, result) {
            (CheckEnd::Recovered { was }, Ok(ok)) => {
                tracing::debug!(event = %log_events::RUNTIME_CHECK, runtime, ok = %ok, "the runtime check passed");
                self.said_recovered("recheck", &was, true, now);
            }
            (CheckEnd::StillUnusable, Err(why)) => {
                tracing::debug!(event = %log_events::RUNTIME_CHECK, runtime, why = %why, "the runtime is still unusable");
            }
            _ => {}
        }
    }

    /// SIGHUP found this profile's settings unchanged: a runtime that cannot work is checked
    /// now, missing texts are fetched now, a refused key's file is read now, the loops the guard
    /// holds are let go. A profile that can run does nothing else.
    pub(super) fn recheck_now(&mut self, now: Now) {
        self.release_loops(now);
        if self.rt.health.recheck_now(now.mono_ms) {
            tracing::info!(event = %log_events::RECHECK, what = "runtime", "SIGHUP: checking the runtime again now");
        }
        if self
            .texts
            .current(self.cfg.runtime.texts_runtime())
            .is_none()
        {
            tracing::info!(event = %log_events::RECHECK, what = "texts", "SIGHUP: fetching the texts again now");
            self.texts.recheck_now(now.mono_ms);
        }
        if self.shown.view.state == crate::status::SocketState::KeyRefused {
            self.out.effects.push_back(Effect::ReadKey);
        }
    }

    /// The driver read a new key while the server refuses the old one: retried now.
    pub(super) fn key_changed(&mut self, now: Now) {
        tracing::info!(event = %log_events::KEY_CHANGED, "the API key changed; retrying now");
        self.socket_params_changed(now, true);
    }
}

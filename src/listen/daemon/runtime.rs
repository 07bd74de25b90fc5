//! The runtime's health (`core::runtime_health`) as the listener acts on it: the check at start,
//! the checks while it is unusable, off the main loop, and the ways back (a passed check, a
//! reload, a changed binary). Leaving the state reads the tray at once (`recovered`): every wake
//! the server sent meanwhile was spent.

use super::*;
use crate::core::runtime_health::CheckEnd;
use crate::log_events;
use crate::runtime::check::NotUsable;

impl Daemon {
    /// The runtime cannot work: no run until it is fixed, and a look again on the backoff.
    pub(super) fn mark_unusable(&mut self, why: String) {
        let binary = crate::runtime::binary_stamp(&self.settings);
        let (now, factor) = (self.now_ms(), self.scale().factor());
        self.runtime.mark_unusable(why, binary, now, factor);
        self.status_changed();
    }

    /// The runtime is usable again (`via`: `reload`, `recheck`, `binary_changed`): said once, and
    /// unless a cycle starts now anyway (`wake`), the tray is read at once.
    pub(super) fn leave_unusable(&mut self, via: &'static str, wake: bool) {
        if let Some(was) = self.runtime.leave() {
            self.said_recovered(via, &was, wake);
        }
    }

    fn said_recovered(&mut self, via: &'static str, was: &str, wake: bool) {
        tracing::info!(event = %log_events::RUNTIME_RECOVERED, via, runtime = self.settings.listen.runtime.as_str(), was = %was, "the runtime may work again; reading the tray now");
        if wake {
            self.own_wake(ListenerWake::Recovered);
        }
        self.status_changed();
    }

    /// Checks the runtime as `doctor` does (`runtime::check`), off the main loop, when a look at
    /// the unusable runtime is due (`RuntimeHealth::begin_check` said so).
    pub(super) fn spawn_runtime_check(&mut self) -> JoinHandle<Result<String, NotUsable>> {
        let settings = self.settings.clone();
        let workdir = self.state.workdir(settings.listen.workdir.as_deref());
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            crate::runtime::check::usable(&settings, &workdir).await
        }))
    }

    /// At start: a runtime whose program is missing is unusable from the first moment (as
    /// `doctor` says), not from the first message. Only the program's presence is checked here,
    /// which starts no process: the login check (`claude auth status` is a Node process of about
    /// 290 MB for 2 s) would cost every listener's start that, many at once on a machine that
    /// boots twenty; it runs only while the runtime is unusable, and `doctor` runs it.
    pub(super) fn check_runtime_at_start(&mut self) {
        let workdir = self.state.workdir(self.settings.listen.workdir.as_deref());
        if let Err(e) = crate::runtime::check::presence(&self.settings, &workdir) {
            tracing::error!(event = %log_events::RUNTIME_UNUSABLE, at = "start", runtime = self.settings.listen.runtime.as_str(), why = %e.why(), "the runtime cannot be used; no runs until it is fixed: the listener checks it again on a backoff (seconds growing to 10 minutes) and at once on reload (SIGHUP)");
            self.mark_unusable(e.why().to_string());
        }
    }

    /// A runtime check ended: while the runtime is still unusable, a pass ends that and a failure
    /// waits for the next look. A check whose stretch ended meanwhile (a reload) changes nothing.
    pub(super) fn on_runtime_check(
        &mut self,
        r: Result<Result<String, NotUsable>, tokio::task::JoinError>,
    ) {
        let r = r.unwrap_or_else(|e| Err(NotUsable::Missing(format!("the check crashed: {e}"))));
        let runtime = self.settings.listen.runtime.as_str();
        let (now, factor) = (self.now_ms(), self.scale().factor());
        let end = self.runtime.check_ended(r.is_ok(), now, factor);
        match (end, r) {
            (CheckEnd::Recovered { was }, Ok(ok)) => {
                tracing::debug!(event = %log_events::RUNTIME_CHECK, runtime, ok = %ok, "the runtime check passed");
                self.said_recovered("recheck", &was, true);
            }
            (CheckEnd::StillUnusable, Err(e)) => {
                tracing::debug!(event = %log_events::RUNTIME_CHECK, runtime, why = %e.why(), "the runtime is still unusable");
            }
            _ => {}
        }
    }

    /// An unusable runtime whose binary was installed, updated or replaced since is tried again.
    /// True when it was.
    pub(super) fn retry_a_changed_runtime_binary(&mut self) -> bool {
        let stamp = crate::runtime::binary_stamp(&self.settings);
        if !self.runtime.binary_changed(stamp.as_ref()) {
            return false;
        }
        tracing::info!(event = %log_events::RUNTIME_BINARY_CHANGED, runtime = self.settings.listen.runtime.as_str(), "the runtime's binary changed; trying it again");
        self.leave_unusable("binary_changed", false);
        true
    }
}

//! The settings in use: the time scale, the socket's parameters, the client for the endpoint,
//! SIGHUP's reload, and the key check while the key is refused.

use super::*;
use crate::log_events;

impl Daemon {
    /// The test time scale of the settings in use, decided against their own `api_base`
    /// (`config::TestTimeScale`): a reload onto a server that is not on loopback gets the
    /// contract's timers back at once.
    pub(super) fn scale(&self) -> config::TestTimeScale {
        self.settings.time_scale
    }

    /// The listener's clock in milliseconds since its start, which the pure owners count on.
    pub(super) fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A time of `now_ms`'s clock as an instant to wait for; `None` stays never.
    pub(super) fn instant(&self, ms: Option<u64>) -> Option<tokio::time::Instant> {
        ms.map(|ms| tokio::time::Instant::from_std(self.started) + Duration::from_millis(ms))
    }

    pub(super) fn socket_params(&self) -> SocketParams {
        SocketParams::new(
            &self.settings,
            self.key.clone(),
            self.api.clone(),
            self.metrics.clone(),
            self.pacer.clone(),
        )
    }

    /// A new base or key gets a new client; the same configuration keeps the one it has (and its
    /// connection). `false`: no client could be built for the new one.
    pub(super) fn use_endpoint(&mut self, api_base: &str, key: &SecretString) -> bool {
        if api_base == self.settings.api_base && key.expose_secret() == self.key.expose_secret() {
            return true;
        }
        match Api::new(api_base, key.clone()) {
            Ok(api) => {
                self.api = api;
                self.key = key.clone();
                true
            }
            Err(e) => {
                tracing::error!(event = %log_events::HTTP_CLIENT_FAILED, error = %e, "cannot build the HTTP client");
                false
            }
        }
    }

    /// SIGHUP: config and texts again; a refused key or an unusable runtime gets a new chance.
    pub(super) fn reload(
        &mut self,
        params_tx: &watch::Sender<SocketParams>,
        new: Option<Box<Settings>>,
    ) {
        // `listen --all` hands the settings its one read of the config gave every profile;
        // `config_reads` (the process's reads so far) shows no profile read it again.
        let handed = new.is_some();
        let loaded = new.map_or_else(|| self.source.load(), |s| Ok(*s));
        tracing::info!(
            event = %log_events::RELOAD,
            settings = if handed { "handed" } else { "read" },
            config_reads = crate::config::file_reads(),
            "reloading configuration and texts"
        );
        match loaded {
            Ok(s) => match s.api_key.clone() {
                Some(k) => {
                    if s.state_dir != self.settings.state_dir {
                        tracing::warn!(
                            event = %log_events::RELOAD_PARTIAL,
                            "the state dir cannot change while running; keeping the old one"
                        );
                    }
                    let mut s = s;
                    s.state_dir = self.settings.state_dir.clone();
                    if self.use_endpoint(&s.api_base, &k) {
                        self.take_settings(s);
                    }
                }
                None => {
                    tracing::error!(
                        event = %log_events::RELOAD_FAILED,
                        "the new configuration has no API key; keeping the old one"
                    )
                }
            },
            Err(e) => {
                tracing::error!(event = %log_events::RELOAD_FAILED, error = %e, "the new configuration is invalid; keeping the old one")
            }
        }
        // A person acted: the runtime gets a new chance at once, and its looks start over.
        self.runtime.start_over();
        self.leave_unusable("reload", true);
        let _ = params_tx.send(self.socket_params());
        self.status_changed();
    }

    /// Reloaded settings (with a client for their endpoint already in place) take over.
    pub(super) fn take_settings(&mut self, s: Settings) {
        if s.time_scale != self.settings.time_scale {
            match s.time_scale.notice() {
                Some(line) => tracing::info!(event = %log_events::TEST_TIME_SCALE, "{line}"),
                None => tracing::info!(
                    event = %log_events::TEST_TIME_SCALE,
                    api_base = %s.api_base,
                    "the test time scale is not in effect (any more): every timer runs at contract speed"
                ),
            }
        }
        let (old, new) = (self.texts_runtime(), s.listen.runtime.texts_runtime());
        if old != new {
            // Texts are keyed by runtime: the old runtime's are not this one's. Until its own come
            // (the server's, else its cached copy) nothing runs.
            tracing::info!(event = %log_events::TEXTS_RUNTIME_CHANGED, from = old, to = new, "the runtime reads other texts now; loading them");
            self.texts_runtime_changed();
        }
        self.set_windows(windows(&s));
        let lifted = self.run_policy.reload(&s);
        self.settings = s;
        if lifted {
            // Runs were held and the rules changed: the tray is read now, not at the next message.
            self.own_wake(crate::core::status::ListenerWake::HoldEnded);
        }
    }

    /// While the key is refused, a changed key (file or environment) is tried at once.
    pub(super) fn check_key_file(&mut self, params_tx: &watch::Sender<SocketParams>) {
        if self.socket.state != SocketState::KeyRefused {
            return;
        }
        // One profile of many with a key file reads that file alone: a host whose keys are all
        // refused (a rotation under way) must not parse the whole config for each profile every
        // 2 s. A changed `api_key_file` itself is SIGHUP's.
        let key = match (&self.source, &self.settings.key_source) {
            (config::Source::OfAll { .. }, config::KeySource::File(path)) => {
                config::read_key_file(path).ok()
            }
            _ => self.source.load().ok().and_then(|s| s.api_key),
        };
        if let Some(k) = key
            && k.expose_secret() != self.key.expose_secret()
        {
            tracing::info!(event = %log_events::KEY_CHANGED, "the API key changed; retrying now");
            let base = self.settings.api_base.clone();
            if self.use_endpoint(&base, &k) {
                let _ = params_tx.send(self.socket_params());
            }
        }
    }
}

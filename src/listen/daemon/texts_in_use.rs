//! The texts in use: refreshes, which runtime's texts a cycle gets, and the way out while the
//! configured runtime has none (`core::texts_recovery`): fetched again on a backoff, and a wake
//! a cycle spent without them made good when they come.

use super::*;
use crate::core::status::TextsStatus;
use crate::core::texts_recovery::TextsRecovery;
use crate::log_events;

/// The texts loaded, and their recovery.
#[derive(Default)]
pub(super) struct TextsInUse {
    loaded: Option<Loaded>,
    recovery: TextsRecovery,
}

impl TextsInUse {
    /// The loaded texts when they are `runtime`'s: another runtime's texts spell the tools
    /// another way and are never used.
    pub(super) fn current(&self, runtime: &str) -> Option<&Loaded> {
        self.loaded.as_ref().filter(|l| l.runtime == runtime)
    }

    /// What `status.json` says of them.
    pub(super) fn status(&self) -> TextsStatus {
        self.loaded.as_ref().map(Loaded::status).unwrap_or_default()
    }

    /// Texts came (a refresh, or a cycle that had none): `runtime`'s take over; an answer for a
    /// runtime switched away from meanwhile is dropped. With none for the runtime,
    /// `texts_missing` is said once per stretch without texts and they are fetched again on the
    /// backoff. True when texts came back after a cycle spent a wake without them.
    fn take(&mut self, r: Result<Loaded, Missing>, runtime: &str, now: u64, factor: f64) -> bool {
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
                    missing.log();
                }
                false
            }
        }
    }

    /// A cycle found no texts for a card that waited.
    pub(super) fn owe(&mut self, now: u64, factor: f64) {
        self.recovery.owe(now, factor);
    }

    /// The runtime reads other texts now: none are in use until its own come.
    fn runtime_changed(&mut self) {
        self.loaded = None;
        self.recovery.runtime_changed();
    }

    pub(super) fn recheck_at(&self) -> Option<u64> {
        self.recovery.recheck_at()
    }

    /// The fetch on the backoff is due (the caller fetches).
    pub(super) fn fetching(&mut self) {
        self.recovery.fetching();
    }

    /// SIGHUP: fetch now.
    pub(super) fn recheck_now(&mut self, now: u64) {
        self.recovery.recheck_now(now);
    }
}

impl Daemon {
    /// Fetches the texts; on failure keeps what is loaded or falls back to the cache.
    pub(super) async fn refresh_texts(&mut self) {
        let runtime = self.settings.listen.runtime.texts_runtime();
        let r = texts::load(
            &self.api,
            &self.state,
            runtime,
            self.current_texts().is_none(),
        )
        .await;
        self.on_texts(r);
    }

    /// The timer's and SIGHUP's refresh runs as a task, so a slow server never holds up wakes.
    pub(super) fn spawn_texts_refresh(&self, tx: &mpsc::Sender<Box<Result<Loaded, Missing>>>) {
        let api = self.api.clone();
        let runtime = self.settings.listen.runtime.texts_runtime();
        let state = self.state.clone();
        let use_cache = self.current_texts().is_none();
        let tx = tx.clone();
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let r = texts::load(&api, &state, runtime, use_cache).await;
            let _ = tx.send(Box::new(r)).await;
        }));
    }

    /// The texts runtime the configured runtime reads.
    pub(super) fn texts_runtime(&self) -> &'static str {
        self.settings.listen.runtime.texts_runtime()
    }

    /// The loaded texts when they are the configured runtime's.
    pub(super) fn current_texts(&self) -> Option<&Loaded> {
        self.texts.current(self.texts_runtime())
    }

    /// A texts refresh ended.
    pub(super) fn on_texts(&mut self, r: Result<Loaded, Missing>) {
        self.take_texts(r);
        self.status_changed();
    }

    /// Texts came from a refresh or a cycle: texts back after a spent wake read the tray now.
    pub(super) fn take_texts(&mut self, r: Result<Loaded, Missing>) {
        let (runtime, now, factor) = (self.texts_runtime(), self.now_ms(), self.scale().factor());
        if self.texts.take(r, runtime, now, factor) {
            tracing::info!(event = %log_events::TEXTS_RECOVERED, runtime, "texts are back; reading the tray now");
            self.own_wake(ListenerWake::Recovered);
        }
    }

    /// The runtime switched to one that reads other texts: until its own come (the server's,
    /// else its cached copy) nothing runs.
    pub(super) fn texts_runtime_changed(&mut self) {
        self.texts.runtime_changed();
    }
}

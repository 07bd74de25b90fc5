//! The texts in use: refreshes, and which runtime's texts a cycle gets.

use super::*;
use crate::log_events;

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

    /// The loaded texts when they are the configured runtime's: another runtime's texts spell the
    /// tools another way and are never used.
    pub(super) fn current_texts(&self) -> Option<&Loaded> {
        self.texts
            .as_ref()
            .filter(|l| l.runtime == self.texts_runtime())
    }

    /// A texts refresh ended.
    pub(super) fn on_texts(&mut self, r: Result<Loaded, Missing>) {
        self.take_texts(r);
        self.status_changed();
    }

    /// Texts came (a refresh, or a cycle that had none): the configured runtime's take over; an
    /// answer for a runtime switched away from meanwhile is dropped. With none for the runtime,
    /// `texts_missing` is said once per stretch without texts.
    pub(super) fn take_texts(&mut self, r: Result<Loaded, Missing>) {
        match r {
            Ok(loaded) if loaded.runtime != self.texts_runtime() => {
                tracing::debug!(event = %log_events::TEXTS_DROPPED, runtime = loaded.runtime, "texts for a runtime no longer configured");
            }
            Ok(loaded) => {
                self.texts_missing_logged = false;
                self.status.texts = loaded.status();
                self.texts = Some(loaded);
                self.texts_back();
            }
            Err(missing) if missing.runtime != self.texts_runtime() => {}
            Err(missing) => {
                if self.current_texts().is_none() {
                    if !self.texts_missing_logged {
                        self.texts_missing_logged = true;
                        missing.log();
                    }
                    // None to run with: fetched again on the backoff (`recovery`).
                    self.texts_recheck.schedule(self.scale());
                }
            }
        }
    }
}

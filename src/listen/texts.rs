//! The served texts (contract 3.6): `GET /v1/texts?runtime=` fetched at start, daily and on
//! reload, the exact bytes kept in the state dir as the last good copy (`texts-<runtime>.json`),
//! and that copy read back when the server's cannot be had. Texts are keyed by the texts runtime
//! (`claude-code`, `codex`, `generic`): each spells the tools its own way, so one runtime's texts
//! are never used for another.
//!
//! This is the one loader: the daemon, `--once` and a cycle that has none loaded all come here,
//! and `doctor` names the cache through `StateDir::texts_cache` like this module does.

use super::state_dir::StateDir;
use crate::client::{Api, ApiError};
use crate::core::status::{TextsSource, TextsStatus};
use crate::core::texts::Texts;
use std::path::PathBuf;
use std::time::SystemTime;

/// Texts in use, with what they are for and where they came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub texts: Texts,
    /// The texts runtime they were served for.
    pub runtime: &'static str,
    pub source: TextsSource,
    /// When they were fetched or read from the cache.
    pub at: SystemTime,
}

impl Loaded {
    /// What `status.json` says about them.
    pub fn status(&self) -> TextsStatus {
        TextsStatus {
            source: self.source,
            fetched_at: Some(crate::sys::time::rfc3339(self.at)),
        }
    }
}

/// Why no cached copy could be used. The cause is part of the message and not a `source`, so a
/// chain printed with `{:#}` says it once (as `config::ConfigError` does).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("none cached for runtime {runtime}")]
    Missing { runtime: &'static str },
    #[error("cannot read {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("the cached texts {path} are damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },
}

/// Why no texts could be had for a runtime.
#[derive(Debug)]
pub struct Missing {
    /// The texts runtime they were wanted for.
    pub runtime: &'static str,
    pub fetch: ApiError,
    /// `None` when the cache was not tried.
    pub cache: Option<CacheError>,
}

/// Fetches `runtime`'s texts from the server and keeps their exact bytes as the last good copy
/// (a failed write is logged: the texts are still good to use).
pub async fn fetch(api: &Api, state: &StateDir, runtime: &'static str) -> Result<Loaded, ApiError> {
    let (texts, bytes) = api.texts(runtime).await?;
    if let Err(e) = crate::sys::fs::write_atomic(&state.texts_cache(runtime), &bytes) {
        tracing::warn!(event = %"texts_cache_write_failed", runtime, error = %e, "could not keep the texts");
    }
    Ok(Loaded {
        texts,
        runtime,
        source: TextsSource::Server,
        at: SystemTime::now(),
    })
}

/// The last good copy of `runtime`'s texts.
pub fn cached(state: &StateDir, runtime: &'static str) -> Result<Loaded, CacheError> {
    let path = state.texts_cache(runtime);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CacheError::Missing { runtime });
        }
        Err(error) => return Err(CacheError::Io { path, error }),
    };
    let texts = Texts::parse(&bytes).map_err(|e| CacheError::Damaged {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Ok(Loaded {
        texts,
        runtime,
        source: TextsSource::Cache,
        at: SystemTime::now(),
    })
}

/// The server's texts for `runtime`, else (with `use_cache`) the last good copy. Logged:
/// `texts_fetched`, or `texts_fetch_failed` and then `texts_cached` when the cache served. With no texts at all the caller says so (`log_missing`), once per stretch.
pub async fn load(
    api: &Api,
    state: &StateDir,
    runtime: &'static str,
    use_cache: bool,
) -> Result<Loaded, Missing> {
    let fetch_error = match fetch(api, state, runtime).await {
        Ok(loaded) => {
            tracing::info!(event = %"texts_fetched", runtime, "texts fetched from the server");
            return Ok(loaded);
        }
        Err(e) => e,
    };
    if !use_cache {
        tracing::warn!(event = %"texts_fetch_failed", runtime, error = %fetch_error, "could not fetch the texts");
        return Err(Missing {
            runtime,
            fetch: fetch_error,
            cache: None,
        });
    }
    let r = cached(state, runtime);
    // One line either way: this one when the cache stands in, `Missing::log`'s when it cannot.
    if r.is_ok() {
        tracing::warn!(event = %"texts_cached", runtime, error = %fetch_error, path = %state.texts_cache(runtime).display(), "could not fetch the texts; using the last good copy from the cache");
    }
    r.map_err(|e| Missing {
        runtime,
        fetch: fetch_error,
        cache: Some(e),
    })
}

/// `load` without its log lines, for a cycle that found none loaded: the server's texts, else the
/// last good copy.
pub async fn load_quietly(
    api: &Api,
    state: &StateDir,
    runtime: &'static str,
) -> Result<Loaded, Missing> {
    let fetch_error = match fetch(api, state, runtime).await {
        Ok(loaded) => return Ok(loaded),
        Err(e) => e,
    };
    cached(state, runtime).map_err(|e| Missing {
        runtime,
        fetch: fetch_error,
        cache: Some(e),
    })
}

impl Missing {
    /// The one `texts_missing` line: no texts for this runtime, and why.
    pub fn log(&self) {
        let cache = self
            .cache
            .as_ref()
            .map_or("not tried".to_string(), ToString::to_string);
        tracing::error!(
            event = %"texts_missing",
            runtime = self.runtime,
            fetch_error = %self.fetch,
            cache = %cache,
            "no texts for this runtime, neither from the server nor cached; no runs until the server's texts can be read"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_read_per_runtime_and_a_missing_or_damaged_copy_is_said_apart() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(tmp.path()).unwrap();
        assert!(matches!(
            cached(&state, "codex"),
            Err(CacheError::Missing { runtime: "codex" })
        ));
        std::fs::write(
            state.texts_cache("codex"),
            include_bytes!("../../conformance/texts.sample.json"),
        )
        .unwrap();
        let loaded = cached(&state, "codex").unwrap();
        assert_eq!(
            (loaded.runtime, loaded.source),
            ("codex", TextsSource::Cache)
        );
        assert!(loaded.texts.wake_instruction.is_some());
        assert!(
            matches!(cached(&state, "generic"), Err(CacheError::Missing { .. })),
            "another runtime's copy is not this one's"
        );
        std::fs::write(state.texts_cache("generic"), b"{\"version\": \"999\"}").unwrap();
        assert!(matches!(
            cached(&state, "generic"),
            Err(CacheError::Damaged { .. })
        ));
    }
}

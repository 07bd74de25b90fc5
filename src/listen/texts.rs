//! The served texts (contract 3.6): `GET /v1/texts?runtime=` fetched at start, daily and on
//! reload, the exact bytes kept in the state dir as the last good copy (`texts-<runtime>.json`),
//! and that copy read back when the server's cannot be had. Texts are keyed by the texts runtime
//! (`claude-code`, `codex`, `generic`): each spells the tools its own way, so one runtime's texts
//! are never used for another.
//!
//! This is the one loader: the daemon, `--once` and a cycle that has none loaded all come here,
//! and `doctor` names the cache through `StateDir::texts_cache` like this module does.
//!
//! Texts are held once per process however many profiles use them ([`intern`]): the profiles of
//! a host that one server serves for one runtime are handed the same bytes, and share one parsed
//! copy. Each agent's handle is filled in per run (`core::identity::render`), never here.

use super::state_dir::StateDir;
use crate::client::{Api, ApiError};
use crate::core::status::{TextsSource, TextsStatus};
use crate::core::texts::Texts;
use crate::log_events;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

/// Texts in use, with what they are for and where they came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The process's one copy of these texts ([`intern`]).
    pub texts: Arc<Texts>,
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

/// The parsed texts for `bytes`, shared with every profile that was handed the same bytes: one
/// copy in the process while any profile holds it (the table keeps weak references, and drops
/// the dead ones whenever it gains an entry). Keyed by the bytes' SHA-256, so texts that differ
/// by one byte (another server, runtime or version) are never mixed up.
pub fn intern(bytes: &[u8]) -> Result<Arc<Texts>, crate::core::texts::TextsError> {
    use sha2::Digest as _;
    type Table = Mutex<HashMap<[u8; 32], Weak<Texts>>>;
    static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    let mut key = [0u8; 32];
    for (k, d) in key.iter_mut().zip(sha2::Sha256::digest(bytes)) {
        *k = d;
    }
    let table = TABLE.get_or_init(Table::default);
    if let Some(texts) = lock(table).get(&key).and_then(Weak::upgrade) {
        return Ok(texts);
    }
    let texts = Arc::new(Texts::parse(bytes)?);
    let mut t = lock(table);
    // Another profile may have parsed the same bytes meanwhile: keep the first.
    if let Some(first) = t.get(&key).and_then(Weak::upgrade) {
        return Ok(first);
    }
    t.retain(|_, w| w.strong_count() > 0);
    t.insert(key, Arc::downgrade(&texts));
    Ok(texts)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fetches `runtime`'s texts from the server and keeps their exact bytes as the last good copy
/// (a failed write is logged: the texts are still good to use). Texts a run cannot use
/// (`Texts::unusable`) are refused like an unreadable answer: the last good copy is kept, in use
/// and on disk.
pub async fn fetch(api: &Api, state: &StateDir, runtime: &'static str) -> Result<Loaded, ApiError> {
    let bytes = api.texts_bytes(runtime).await?;
    let texts = intern(&bytes).map_err(|e| ApiError::Body(format!("texts: {e}")))?;
    if let Some(why) = texts.unusable() {
        return Err(ApiError::Body(format!(
            "texts refused: {why}, so no run could start with them"
        )));
    }
    if let Err(e) = crate::sys::fs::write_atomic(&state.texts_cache(runtime), &bytes) {
        tracing::warn!(event = %log_events::TEXTS_CACHE_WRITE_FAILED, runtime, error = %e, "could not keep the texts");
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
    let texts = intern(&bytes).map_err(|e| CacheError::Damaged {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if let Some(why) = texts.unusable() {
        return Err(CacheError::Damaged {
            path,
            reason: why.to_string(),
        });
    }
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
            tracing::info!(event = %log_events::TEXTS_FETCHED, runtime, "texts fetched from the server");
            return Ok(loaded);
        }
        Err(e) => e,
    };
    if !use_cache {
        tracing::warn!(event = %log_events::TEXTS_FETCH_FAILED, runtime, error = %fetch_error, "could not fetch the texts");
        return Err(Missing {
            runtime,
            fetch: fetch_error,
            cache: None,
        });
    }
    let r = cached(state, runtime);
    // One line either way: this one when the cache stands in, `Missing::log`'s when it cannot.
    if r.is_ok() {
        tracing::warn!(event = %log_events::TEXTS_CACHED, runtime, error = %fetch_error, path = %state.texts_cache(runtime).display(), "could not fetch the texts; using the last good copy from the cache");
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
            event = %log_events::TEXTS_MISSING,
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

    /// Two profiles handed the same texts hold one copy; other bytes are another copy; and the
    /// copy lives only while a profile holds it.
    #[test]
    fn profiles_served_the_same_texts_share_one_copy_and_other_texts_stay_apart() {
        // The sample with a field of this test's own (unknown fields are ignored): bytes no other
        // test holds at the same time.
        let mut v: serde_json::Value =
            serde_json::from_slice(include_bytes!("../../conformance/texts.sample.json")).unwrap();
        v["only_in_this_test"] = "share".into();
        let sample = &serde_json::to_vec(&v).unwrap()[..];
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (sa, sb) = (
            StateDir::open(a.path()).unwrap(),
            StateDir::open(b.path()).unwrap(),
        );
        std::fs::write(sa.texts_cache("codex"), sample).unwrap();
        std::fs::write(sb.texts_cache("codex"), sample).unwrap();
        let one = cached(&sa, "codex").unwrap();
        let two = cached(&sb, "codex").unwrap();
        assert!(Arc::ptr_eq(&one.texts, &two.texts));
        assert_eq!(
            *one.texts,
            Texts::parse(sample).unwrap(),
            "what a run is given is unchanged"
        );
        // One byte more (a newline) is other texts: never mixed up with these.
        let mut other = sample.to_vec();
        other.push(b'\n');
        std::fs::write(sb.texts_cache("codex"), &other).unwrap();
        let three = cached(&sb, "codex").unwrap();
        assert!(!Arc::ptr_eq(&one.texts, &three.texts));
        assert_eq!(Arc::strong_count(&one.texts), 2);
        let weak = Arc::downgrade(&one.texts);
        drop((one, two));
        assert!(
            weak.upgrade().is_none(),
            "the table holds no copy of its own"
        );
    }

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

//! The run policy's ledger in the state dir (`ledger.json`): read once before a profile's
//! listener starts, off the driver's loop, and written by a task of its own (issue 38 item 7):
//! serialising and writing thousands of runs never holds up acks and heartbeats, and a write
//! asked for while one is under way is folded into the next (the newest ledger wins).

use crate::core::policy::Ledger;
use crate::listen::state_dir::StateDir;
use crate::log_events;
use crate::sys::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The ledger's file in the state dir.
pub const LEDGER_FILE: &str = "ledger.json";
/// The largest `ledger.json` read.
const MAX_LEDGER_BYTES: u64 = 16 * 1024 * 1024;

/// The ledger the state dir keeps (a corrupt or unreadable file is said once and the ledger
/// starts afresh). Blocking: the file may be large; call it where blocking is fine.
pub(crate) fn load_ledger(state: &StateDir) -> Ledger {
    let path = state.path(LEDGER_FILE);
    match fs::read_regular_capped(&path, MAX_LEDGER_BYTES) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!(event = %log_events::LEDGER_UNREADABLE, path = %path.display(), error = %e, "the run ledger is damaged; starting a new one (today's caps count from now)");
            Ledger::new()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ledger::new(),
        Err(e) => {
            tracing::warn!(event = %log_events::LEDGER_UNREADABLE, path = %path.display(), error = %e, "the run ledger cannot be read; starting a new one (today's caps count from now)");
            Ledger::new()
        }
    }
}

/// [`load_ledger`] on tokio's blocking threads.
pub(crate) async fn load_ledger_off_loop(state: &StateDir) -> Ledger {
    let state = state.clone();
    tokio::task::spawn_blocking(move || load_ledger(&state))
        .await
        .unwrap_or_default()
}

/// Writes `ledger` atomically, without an `fsync` (docs/decisions.md, "Run policy").
pub(crate) fn write_ledger(path: &Path, ledger: &Ledger) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(ledger).map_err(std::io::Error::other)?;
    fs::write_atomic_unsynced(path, &bytes).map(drop)
}

/// A profile's ledger writer: [`LedgerWriter::save`] hands it the newest ledger; dropping it
/// lets the task write what is left and end (the profile's end awaits [`LedgerWriter::finish`]).
pub(crate) struct LedgerWriter {
    tx: watch::Sender<Option<Arc<Ledger>>>,
    task: JoinHandle<()>,
}

impl LedgerWriter {
    pub(crate) fn spawn(state: &StateDir, span: tracing::Span) -> LedgerWriter {
        use tracing::Instrument;
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(write_each(state.path(LEDGER_FILE), rx).instrument(span));
        LedgerWriter { tx, task }
    }

    pub(crate) fn save(&self, ledger: Arc<Ledger>) {
        self.tx.send_replace(Some(ledger));
    }

    /// The task, to await once the writer is dropped: it ends after its last write.
    pub(crate) fn finish(self) -> JoinHandle<()> {
        let LedgerWriter { tx, task } = self;
        drop(tx);
        task
    }
}

/// Writes each ledger it is handed, the newest first if several came meanwhile; a failed write is
/// said once per episode.
async fn write_each(path: PathBuf, mut rx: watch::Receiver<Option<Arc<Ledger>>>) {
    let mut failing = false;
    while rx.changed().await.is_ok() {
        let Some(ledger) = rx.borrow_and_update().clone() else {
            continue;
        };
        let path = path.clone();
        let written = tokio::task::spawn_blocking(move || write_ledger(&path, &ledger))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        failing = super::effects::episode(
            failing,
            written,
            log_events::LEDGER_WRITE_FAILED,
            log_events::LEDGER_WRITE_RECOVERED,
            LEDGER_FILE,
        );
    }
}

//! What the run policy learnt besides runs (`core::policy::Memory`: the loop guard's marks, the
//! contacts, since when runs are held), kept in the state dir as `policy.json`. The runs
//! themselves are in the history (`listen::history`), which the caps are built from. Read once
//! before a profile's listener starts, off the driver's loop, and written by a task of its own
//! (issue 38 item 7): a write asked for while one is under way is folded into the next (the
//! newest wins), and nothing here holds up acks and heartbeats.

use crate::core::policy::{Ledger, Memory};
use crate::listen::state_dir::StateDir;
use crate::log_events;
use crate::sys::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The policy's memory in the state dir.
pub const MEMORY_FILE: &str = "policy.json";
/// The largest `policy.json` read (its parts are bounded far below this).
const MAX_MEMORY_BYTES: u64 = 4 * 1024 * 1024;

/// The memory the state dir keeps (a damaged or unreadable file is said once and the policy
/// starts afresh: only its marks and contacts are lost, never a run).
pub(crate) fn load_memory(state: &StateDir) -> Memory {
    let path = state.path(MEMORY_FILE);
    match fs::read_regular_capped(&path, MAX_MEMORY_BYTES) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!(event = %log_events::POLICY_MEMORY_UNREADABLE, path = %path.display(), error = %e, "what the run policy learnt is damaged; starting afresh (the loop guard's marks and the contacts)");
            Memory::default()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Memory::default(),
        Err(e) => {
            tracing::warn!(event = %log_events::POLICY_MEMORY_UNREADABLE, path = %path.display(), error = %e, "what the run policy learnt cannot be read; starting afresh (the loop guard's marks and the contacts)");
            Memory::default()
        }
    }
}

/// The history (the runs the caps count) and the policy's memory at a listener's start, as one
/// ledger. Blocking: the files may be large; call it where blocking is fine.
pub(crate) fn open(
    state: &StateDir,
    offsets: &dyn crate::core::policy::Offsets,
    now_ms: i64,
) -> (crate::listen::history::Book, Ledger) {
    let (book, mut ledger) = crate::listen::history::Book::open(state, offsets, now_ms);
    ledger.remember(load_memory(state));
    (book, ledger)
}

/// `open` on tokio's blocking threads, for a profile of `settings`.
pub async fn open_off_loop(
    state: &StateDir,
    settings: &crate::config::Settings,
) -> (crate::listen::history::Book, Ledger) {
    let (state, fallback) = (state.clone(), state.clone());
    let settings = settings.clone();
    tokio::task::spawn_blocking(move || {
        // The driver's clock, as the listener that joins will read it.
        let now_ms = super::Clock::new().now().wall_ms;
        let zone = super::convert::zone(&settings, now_ms);
        open(&state, &zone, now_ms)
    })
    .await
    .unwrap_or_else(|_| {
        (
            crate::listen::history::Book::unopened(&fallback),
            Ledger::new(),
        )
    })
}

/// Writes the memory of `ledger` atomically, without an `fsync` (docs/decisions.md, "Run policy").
pub(crate) fn write_memory(path: &Path, ledger: &Ledger) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(&ledger.memory()).map_err(std::io::Error::other)?;
    fs::write_atomic_unsynced(path, &bytes).map(drop)
}

/// A profile's memory writer: [`MemoryWriter::save`] hands it the newest ledger; dropping it
/// lets the task write what is left and end (the profile's end awaits [`MemoryWriter::finish`]).
pub(crate) struct MemoryWriter {
    tx: watch::Sender<Option<Arc<Ledger>>>,
    task: JoinHandle<()>,
}

impl MemoryWriter {
    pub(crate) fn spawn(state: &StateDir, span: tracing::Span) -> MemoryWriter {
        use tracing::Instrument;
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(write_each(state.path(MEMORY_FILE), rx).instrument(span));
        MemoryWriter { tx, task }
    }

    pub(crate) fn save(&self, ledger: Arc<Ledger>) {
        self.tx.send_replace(Some(ledger));
    }

    /// The task, to await once the writer is dropped: it ends after its last write.
    pub(crate) fn finish(self) -> JoinHandle<()> {
        let MemoryWriter { tx, task } = self;
        drop(tx);
        task
    }
}

/// Writes each ledger's memory it is handed, the newest first if several came meanwhile; a
/// failed write is said once per episode.
async fn write_each(path: PathBuf, mut rx: watch::Receiver<Option<Arc<Ledger>>>) {
    let mut failing = false;
    while rx.changed().await.is_ok() {
        let Some(ledger) = rx.borrow_and_update().clone() else {
            continue;
        };
        let path = path.clone();
        let written = tokio::task::spawn_blocking(move || write_memory(&path, &ledger))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        failing = super::effects::episode(
            failing,
            written,
            log_events::POLICY_MEMORY_WRITE_FAILED,
            log_events::POLICY_MEMORY_WRITE_RECOVERED,
            MEMORY_FILE,
        );
    }
}

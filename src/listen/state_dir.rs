//! The profile's state dir: created 0700; the single-instance lock; `status.json`
//! written atomically (tmp + rename, 0600); the last good texts; the invite-rule memory; run logs.
//! Nothing here ever holds the key or message text.

use crate::core::invite_rule::InviteMemory;
use crate::core::status::Status;
use crate::sys::fs::{create_private_dir, write_atomic, write_atomic_unsynced};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub const LOCK_FILE: &str = "listen.lock";
pub const STATUS_FILE: &str = "status.json";
pub const INVITES_FILE: &str = "invites.json";
pub const RUNS_DIR: &str = "runs";

/// The last `invites.json` write failed. Process-wide: one listener per process writes it, from
/// whichever cycle runs, and an episode spans cycles.
static INVITES_WRITE_FAILING: AtomicBool = AtomicBool::new(false);

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot prepare the state dir {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot use the lock file {path}: {source}")]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The state dir of one profile.
#[derive(Debug, Clone)]
pub struct StateDir {
    pub root: PathBuf,
}

/// The lock, held for the life of the process (dropping it releases it).
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

/// The result of trying to take the lock.
#[derive(Debug)]
pub enum LockAttempt {
    Acquired(Lock),
    /// Another listener holds it; its pid as written in the file, when readable.
    Held {
        pid: Option<u32>,
    },
}

/// Why `status.json` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusReadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a status file: {source}")]
    NotAStatusFile {
        path: PathBuf,
        source: serde_json::Error,
    },
}

impl StateDir {
    /// The state dir at `root`, as it is: nothing is created. For readers (`status`, `doctor`).
    pub fn at(root: &Path) -> StateDir {
        StateDir {
            root: root.to_path_buf(),
        }
    }

    /// Creates the dir (and parents) and makes it 0700.
    pub fn open(root: &Path) -> Result<StateDir, StateError> {
        let err = |source| StateError::Dir {
            path: root.to_path_buf(),
            source,
        };
        create_private_dir(root).map_err(err)?;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
        let dir = StateDir {
            root: root.to_path_buf(),
        };
        create_private_dir(&dir.runs_dir()).map_err(err)?;
        Ok(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    pub fn runs_dir(&self) -> PathBuf {
        self.root.join(RUNS_DIR)
    }

    /// The runs' default working directory, owned by the listener.
    pub fn default_workdir(&self) -> PathBuf {
        self.root.join("workdir")
    }

    /// The runs' working directory: `listen.workdir` when configured, else the default one.
    pub fn workdir(&self, configured: Option<&Path>) -> PathBuf {
        configured.map_or_else(|| self.default_workdir(), Path::to_path_buf)
    }

    /// The last good texts for a texts runtime (`claude-code`, `codex`, `generic`).
    pub fn texts_cache(&self, texts_runtime: &str) -> PathBuf {
        self.root.join(format!("texts-{texts_runtime}.json"))
    }

    /// Takes `listen.lock` (`File::try_lock`) and writes our pid into it.
    pub fn lock(&self) -> Result<LockAttempt, StateError> {
        let path = self.path(LOCK_FILE);
        let err = |source| StateError::Lock {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(err)?;
        match file.try_lock() {
            Ok(()) => {
                file.set_len(0).map_err(err)?;
                file.seek(SeekFrom::Start(0)).map_err(err)?;
                writeln!(file, "{}", std::process::id()).map_err(err)?;
                file.flush().map_err(err)?;
                Ok(LockAttempt::Acquired(Lock { _file: file }))
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut s = String::new();
                let _ = file.read_to_string(&mut s);
                Ok(LockAttempt::Held {
                    pid: s.trim().parse().ok(),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => Err(err(e)),
        }
    }

    /// Reads the invite-rule memory; a missing or damaged file is an empty memory (logged by
    /// the caller), never a crash.
    pub fn load_invites(&self) -> Result<InviteMemory, String> {
        match std::fs::read(self.path(INVITES_FILE)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| e.to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(InviteMemory::default()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Writes the invite-rule memory (atomically: a reader sees the old file or the new one).
    /// A failure (full disk, read-only dir) is logged once per episode, and its end once: the
    /// cycle goes on either way, with the memory it has.
    pub fn save_invites(&self, memory: &InviteMemory) {
        let written = serde_json::to_vec_pretty(memory)
            .map_err(std::io::Error::other)
            .and_then(|bytes| write_atomic(&self.path(INVITES_FILE), &bytes));
        let was_failing = INVITES_WRITE_FAILING.swap(written.is_err(), Ordering::Relaxed);
        match written {
            Ok(()) if was_failing => {
                tracing::info!(event = %"invite_memory_write_recovered", "invites.json is written again")
            }
            Ok(()) => {}
            Err(e) if !was_failing => {
                tracing::warn!(event = %"invite_memory_write_failed", error = %e, "could not persist the invite memory; the listener keeps working and logs this once until a write succeeds")
            }
            Err(_) => {}
        }
    }

    /// Reads `status.json` into the typed status, with the file's modification time (when the
    /// listener last touched it, `Status::file_modified`); `Ok(None)` when there is none (no
    /// listener has run with this state dir). Older and newer files read too (see `core::status`).
    pub fn read_status(&self) -> Result<Option<Status>, StatusReadError> {
        let path = self.path(STATUS_FILE);
        let read = File::open(&path).and_then(|mut f| {
            let modified = f.metadata()?.modified().ok();
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes)?;
            Ok((bytes, modified))
        });
        match read {
            Ok((bytes, modified)) => serde_json::from_slice(&bytes)
                .map(|status| {
                    Some(Status {
                        file_modified: modified,
                        ..status
                    })
                })
                .map_err(|source| StatusReadError::NotAStatusFile { path, source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StatusReadError::Io { path, source }),
        }
    }

    /// Replaces `status.json` (without an `fsync`: it is rewritten on every change, and a new
    /// listener writes it again at start). Returns the new file, open, for touching it.
    pub fn write_status(&self, status: &Status) -> std::io::Result<File> {
        let bytes = serde_json::to_vec_pretty(status).map_err(std::io::Error::other)?;
        write_atomic_unsynced(&self.path(STATUS_FILE), &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn state_dir_is_created_0700_and_status_is_written_0600() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("a/b");
        let dir = StateDir::open(&root).unwrap();
        assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o777, 0o700);
        write_atomic(&dir.path(STATUS_FILE), b"{}").unwrap();
        let meta = std::fs::metadata(dir.path(STATUS_FILE)).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(dir.path(STATUS_FILE)).unwrap(), b"{}");
    }

    #[test]
    fn status_reads_back_as_written_and_a_missing_or_damaged_file_is_said_apart() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::at(&tmp.path().join("state"));
        assert!(!dir.root.exists(), "`at` creates nothing");
        assert!(matches!(dir.read_status(), Ok(None)));
        let dir = StateDir::open(&dir.root).unwrap();
        let status = Status {
            pid: 42,
            ..Default::default()
        };
        let file = dir.write_status(&status).unwrap();
        let read = dir.read_status().unwrap().unwrap();
        assert_eq!(
            read,
            Status {
                file_modified: read.file_modified,
                ..status
            }
        );
        // A touch of the file the write handed back is what a reader sees as its last turn.
        let later = read.file_modified.unwrap() + std::time::Duration::from_secs(7);
        file.set_modified(later).unwrap();
        assert_eq!(
            dir.read_status().unwrap().unwrap().file_modified,
            Some(later)
        );
        std::fs::write(dir.path(STATUS_FILE), b"{ half").unwrap();
        let e = dir.read_status().unwrap_err();
        assert!(matches!(e, StatusReadError::NotAStatusFile { .. }));
        assert!(e.to_string().contains("is not a status file"), "{e}");
    }

    #[test]
    fn second_lock_in_the_same_process_reports_the_holder_pid() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path()).unwrap();
        let first = dir.lock().unwrap();
        assert!(matches!(first, LockAttempt::Acquired(_)));
        match dir.lock().unwrap() {
            LockAttempt::Held { pid } => assert_eq!(pid, Some(std::process::id())),
            LockAttempt::Acquired(_) => panic!("second lock must not be granted"),
        }
        drop(first);
        assert!(matches!(dir.lock().unwrap(), LockAttempt::Acquired(_)));
    }

    #[test]
    fn damaged_invite_memory_is_an_error_not_a_panic_and_missing_is_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path()).unwrap();
        assert_eq!(dir.load_invites().unwrap(), InviteMemory::default());
        std::fs::write(dir.path(INVITES_FILE), b"not json").unwrap();
        assert!(dir.load_invites().is_err());
    }
}

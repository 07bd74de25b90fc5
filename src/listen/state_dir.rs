//! The profile's state dir: created 0700; the single-instance lock; `status.json`
//! written atomically (tmp + rename, 0600); the last good texts; the invite-rule memory; run logs.
//! Nothing here ever holds the key or message text.

use crate::core::invite_rule::InviteMemory;
use crate::core::status::Status;
use crate::log_events;
use crate::sys::fs::{create_private_dir, write_atomic, write_atomic_unsynced};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const LOCK_FILE: &str = "listen.lock";
pub const STATUS_FILE: &str = "status.json";
pub const INVITES_FILE: &str = "invites.json";
pub const RUNS_DIR: &str = "runs";

/// The cause is part of the message and not a `source`, so a chain printed with `{:#}` says it
/// once (as `config::ConfigError` does).
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot prepare the state dir {path}: {error}")]
    Dir {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot use the lock file {path}: {error}")]
    Lock {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "the state dir {} exists but is not a directory: move it away, or use another state dir \
         (--state-dir DIR or AGENTCHAT_STATE_DIR)",
        path.display()
    )]
    NotADir { path: PathBuf },
    /// The state dir, or the nearest existing dir it would be created in (`owned`), belongs to
    /// another user: the listener changes nothing there.
    #[error("{}", not_ours(path, owned, *owner, *you))]
    NotOurs {
        path: PathBuf,
        owned: PathBuf,
        owner: u32,
        you: u32,
    },
    /// An existing dir that others can enter and that holds files of its own (a home dir, `/var`):
    /// the listener does not narrow its mode, which would lock others out of what it holds.
    #[error(
        "the state dir {} has mode {mode:04o} and holds other files; the listener keeps its state \
         in a private dir (0700) and changes the mode only of a dir of its own: use a new or \
         empty dir (--state-dir DIR or AGENTCHAT_STATE_DIR), or run `chmod 700 {}` if that is \
         what you want",
        path.display(),
        path.display()
    )]
    NotPrivate { path: PathBuf, mode: u32 },
}

/// What to say when the state dir (or the dir it would be created in) is another user's.
fn not_ours(path: &Path, owned: &Path, owner: u32, you: u32) -> String {
    use crate::sys::process::{user_label, user_name};
    let me = user_name(you).unwrap_or_else(|| you.to_string());
    let (p, o) = (path.display(), owned.display());
    let whose = format!(
        "belongs to {}, and you are {}",
        user_label(owner),
        user_label(you)
    );
    let elsewhere = "or use a state dir of your own (--state-dir DIR or AGENTCHAT_STATE_DIR)";
    if path == owned {
        format!("the state dir {p} {whose}: make it yours (`sudo chown -R {me} {p}`), {elsewhere}")
    } else {
        format!(
            "cannot create the state dir {p}: {o} {whose}: create it for you \
             (`sudo install -d -o {me} -m 700 {p}`), {elsewhere}"
        )
    }
}

/// Files the listener keeps in its state dir: a dir holding one of them (or nothing) is one.
const STATE_NAMES: [&str; 4] = [LOCK_FILE, STATUS_FILE, INVITES_FILE, RUNS_DIR];

/// Whether `dir` is empty or already a state dir.
fn is_state_dir_or_empty(dir: &Path) -> std::io::Result<bool> {
    let mut entries = std::fs::read_dir(dir)?.peekable();
    if entries.peek().is_none() {
        return Ok(true);
    }
    Ok(entries.filter_map(Result::ok).any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        STATE_NAMES.contains(&name.as_ref()) || name.starts_with("texts-")
    }))
}

/// The nearest existing dir at or above `path`, and its owner.
fn nearest_existing(path: &Path) -> Option<(PathBuf, u32)> {
    use std::os::unix::fs::MetadataExt;
    path.ancestors().find_map(|a| {
        std::fs::metadata(a)
            .ok()
            .map(|m| (a.to_path_buf(), m.uid()))
    })
}

/// The state dir of one profile.
#[derive(Debug, Clone)]
pub struct StateDir {
    pub root: PathBuf,
}

/// The lock, held for the life of the process (dropping it releases it).
#[derive(Debug)]
pub struct Lock {
    file: File,
}

impl Drop for Lock {
    /// Unlocks before the close: a `flock` lives on the open file description, which a run
    /// being forked at that moment shares until its exec, so a close alone could leave the
    /// lock held a little longer than the listener.
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// The result of trying to take the lock.
#[derive(Debug)]
pub enum LockAttempt {
    Acquired(Lock),
    /// Another listener holds it; its pid as `sys::flock::holder` tells it, when it can.
    Held {
        pid: Option<u32>,
    },
}

/// Why `status.json` could not be read. The cause is part of the message and not a `source`, so
/// a chain printed with `{:#}` says it once (as `config::ConfigError` does).
#[derive(Debug, thiserror::Error)]
pub enum StatusReadError {
    #[error("cannot read {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path} is not a status file: {error}")]
    NotAStatusFile {
        path: PathBuf,
        error: serde_json::Error,
    },
}

impl StateDir {
    /// The state dir at `root`, as it is: nothing is created. For readers (`status`, `doctor`).
    pub fn at(root: &Path) -> StateDir {
        StateDir {
            root: root.to_path_buf(),
        }
    }

    /// Creates the dir (and parents, 0700) and makes it 0700. A dir of another user is refused
    /// and left as it is, and so is an existing dir that others can enter and that holds other
    /// files; one whose mode is already private is not touched.
    pub fn open(root: &Path) -> Result<StateDir, StateError> {
        use std::os::unix::fs::MetadataExt;
        let err = |error| StateError::Dir {
            path: root.to_path_buf(),
            error,
        };
        let you = crate::sys::process::current_uid();
        if std::fs::metadata(root).is_ok_and(|m| !m.is_dir()) {
            return Err(StateError::NotADir {
                path: root.to_path_buf(),
            });
        }
        if let Err(e) = create_private_dir(root) {
            if e.kind() == std::io::ErrorKind::PermissionDenied
                && let Some((owned, owner)) = nearest_existing(root)
                && owner != you
            {
                return Err(StateError::NotOurs {
                    path: root.to_path_buf(),
                    owned,
                    owner,
                    you,
                });
            }
            return Err(err(e));
        }
        let meta = std::fs::metadata(root).map_err(err)?;
        if meta.uid() != you {
            return Err(StateError::NotOurs {
                path: root.to_path_buf(),
                owned: root.to_path_buf(),
                owner: meta.uid(),
                you,
            });
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            if !is_state_dir_or_empty(root).map_err(err)? {
                return Err(StateError::NotPrivate {
                    path: root.to_path_buf(),
                    mode,
                });
            }
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
        }
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
        let err = |error| StateError::Lock {
            path: path.clone(),
            error,
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
                // The lock is the flock; the pid in the file only tells others who holds it. A
                // full disk that cannot take it costs the pid, not the start.
                let pid = file
                    .set_len(0)
                    .and_then(|()| file.seek(SeekFrom::Start(0)))
                    .and_then(|_| writeln!(file, "{}", std::process::id()))
                    .and_then(|()| file.flush());
                if let Err(e) = pid {
                    tracing::warn!(event = %log_events::LOCK_PID_UNWRITTEN, lock = %path.display(), error = %e, "the lock is held, but its pid could not be written into it");
                }
                Ok(LockAttempt::Acquired(Lock { file }))
            }
            Err(std::fs::TryLockError::WouldBlock) => Ok(LockAttempt::Held {
                pid: match crate::sys::flock::holder(&path) {
                    crate::sys::flock::LockHolder::Held { pid } => pid,
                    // Let go since: the holder is gone, and the next start takes the lock.
                    _ => None,
                },
            }),
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
    /// The caller says a failure once per episode (`listen::driver`): the cycle goes on either
    /// way, with the memory it has.
    pub fn save_invites(&self, memory: &InviteMemory) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(memory).map_err(std::io::Error::other)?;
        write_atomic(&self.path(INVITES_FILE), &bytes)
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
                .map_err(|error| StatusReadError::NotAStatusFile { path, error }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(StatusReadError::Io { path, error }),
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
    fn the_lock_is_released_on_drop_even_while_a_child_shares_its_file() {
        // A run forked while the listener holds the lock shares the lock's open file
        // description until its exec; here a child keeps it for good (as its stdin), so only an
        // explicit unlock can free the lock when the listener lets go.
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path()).unwrap();
        let LockAttempt::Acquired(lock) = dir.lock().unwrap() else {
            panic!("first lock must be granted")
        };
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(lock.file.try_clone().unwrap())
            .spawn()
            .unwrap();
        drop(lock);
        let again = dir.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(matches!(again, LockAttempt::Acquired(_)), "{again:?}");
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

    fn mode_of(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn an_open_state_dir_of_ours_is_narrowed_and_a_private_one_left_as_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::write(open.join(STATUS_FILE), b"{}").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        StateDir::open(&open).unwrap();
        assert_eq!(mode_of(&open), 0o700);
        // Already private (no bits for others): not touched.
        let private = tmp.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o1700)).unwrap();
        StateDir::open(&private).unwrap();
        assert_eq!(mode_of(&private), 0o1700);
    }

    #[test]
    fn an_open_dir_holding_other_files_is_refused_and_left_as_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(home.join("notes.txt"), b"mine").unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = StateDir::open(&home).unwrap_err();
        assert!(
            matches!(e, StateError::NotPrivate { mode: 0o755, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("--state-dir"), "{e}");
        assert_eq!(mode_of(&home), 0o755);
        assert!(!home.join(RUNS_DIR).exists(), "nothing created there");
    }

    #[test]
    fn a_state_dir_of_another_user_is_refused_untouched_naming_owner_and_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let theirs = tmp.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (dir, owner) = if crate::sys::process::current_uid() == 0 {
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            (theirs, 65534)
        } else {
            // Not root: a dir root owns stands for another user's.
            (PathBuf::from("/"), 0)
        };
        let before = mode_of(&dir);
        let e = StateDir::open(&dir).unwrap_err();
        assert!(matches!(e, StateError::NotOurs { .. }), "{e}");
        let said = e.to_string();
        assert!(
            said.starts_with(&format!("the state dir {} belongs to ", dir.display()))
                && said.contains(&format!("uid {owner}"))
                && said.contains("sudo chown -R")
                && said.contains("--state-dir DIR or AGENTCHAT_STATE_DIR"),
            "{said}"
        );
        assert_eq!(mode_of(&dir), before, "its mode is left as it is");
    }

    #[test]
    fn the_dir_to_create_the_state_dir_in_is_named_when_it_is_another_users() {
        let e = StateError::NotOurs {
            path: PathBuf::from("/srv/agentchat/state"),
            owned: PathBuf::from("/srv"),
            owner: 4242,
            you: 4243,
        };
        assert_eq!(
            e.to_string(),
            "cannot create the state dir /srv/agentchat/state: /srv belongs to uid 4242, and you \
             are uid 4243: create it for you (`sudo install -d -o 4243 -m 700 \
             /srv/agentchat/state`), or use a state dir of your own (--state-dir DIR or \
             AGENTCHAT_STATE_DIR)"
        );
    }

    #[test]
    fn a_file_in_the_way_is_named_and_each_os_error_is_said_once() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let e = StateDir::open(&file).unwrap_err();
        assert!(
            e.to_string().contains("exists but is not a directory"),
            "{e}"
        );
        let under = StateDir::open(&file.join("state")).unwrap_err();
        let chain = format!("{:#}", anyhow::Error::from(under));
        assert_eq!(chain.matches("os error 20").count(), 1, "{chain}");
        // A damaged status file: the parser's words once.
        let dir = StateDir::open(&tmp.path().join("s")).unwrap();
        std::fs::write(dir.path(STATUS_FILE), b"{ half").unwrap();
        let chain = format!("{:#}", anyhow::Error::from(dir.read_status().unwrap_err()));
        assert_eq!(chain.matches("line 1").count(), 1, "{chain}");
    }
}

//! Gathering the facts the checks judge: the state dir and the lock on disk, `status.json`, the
//! service unit, and the server's answers (each call under one time limit).

use crate::client::{Api, ApiError};
use crate::core::status::Status;
use crate::listen::state_dir::StateDir;
use std::path::Path;
use std::time::Duration;

/// How long the server checks may take in all (each call).
pub const SERVER_TIMEOUT: Duration = Duration::from_secs(15);

/// The facts `check_texts` needs from one `GET /v1/texts`.
#[derive(Debug, Clone)]
pub struct TextsFacts {
    pub version: String,
    pub has_wake_instruction: bool,
    pub has_invite_prompt: bool,
}

/// What the state dir looks like on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateDirFacts {
    Missing,
    NotADir,
    Present {
        mode: u32,
        /// The dir's owner and the user doctor runs as.
        owner: u32,
        you: u32,
        /// `Err` with the reason when a file could not be created in it.
        writable: Result<(), String>,
    },
    Unreadable(String),
}

/// Who holds `listen.lock`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockFacts {
    /// No lock file: no listener has run with this state dir.
    NoFile,
    /// Held; `pid` is the holder (from the kernel when it can tell, else the file's pid).
    Held {
        pid: Option<u32>,
    },
    Free,
    Unknown(String),
}

pub fn state_dir_facts(path: &Path) -> StateDirFacts {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return StateDirFacts::Missing,
        Err(e) => return StateDirFacts::Unreadable(e.to_string()),
    };
    if !meta.is_dir() {
        return StateDirFacts::NotADir;
    }
    let me = crate::sys::process::current_uid();
    let probe = path.join(format!(".doctor-{}", std::process::id()));
    let writable = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map(|_| {
            let _ = std::fs::remove_file(&probe);
        })
        .map_err(|e| e.to_string());
    StateDirFacts::Present {
        mode: meta.permissions().mode(),
        owner: meta.uid(),
        you: me,
        writable,
    }
}

pub fn lock_facts(path: &Path) -> LockFacts {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return LockFacts::NoFile,
        Err(e) => return LockFacts::Unknown(e.to_string()),
    };
    let file_pid: Option<u32> = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok());
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(meta), Ok(locks)) = (file.metadata(), std::fs::read_to_string("/proc/locks")) {
            let dev = meta.dev();
            // glibc's major()/minor() encoding of st_dev.
            let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
            let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
            let holder = flock_holder(&locks, major, minor, meta.ino()).or_else(|| {
                // On overlayfs (every Docker container) the device stat gives is the upper
                // layer's, not the overlay's that /proc/locks names: a flock on this inode
                // number whose holder has this very file open is ours.
                flock_holders_of_inode(&locks, meta.ino())
                    .find(|pid| has_open(*pid, dev, meta.ino()))
            });
            return match holder {
                Some(pid) => LockFacts::Held { pid: Some(pid) },
                None => LockFacts::Free,
            };
        }
    }
    // Elsewhere: a shared lock attempt, released at once. It fails while a listener holds the
    // exclusive lock.
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            LockFacts::Free
        }
        Err(std::fs::TryLockError::WouldBlock) => LockFacts::Held { pid: file_pid },
        Err(std::fs::TryLockError::Error(e)) => LockFacts::Unknown(e.to_string()),
    }
}

/// Finds the pid holding a `flock` on the file with this device and inode, from the text of
/// Linux's `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`). Waiters (`->`) are
/// skipped. Reading it takes no lock, so a listener starting at the same moment is never turned away.
pub fn flock_holder(proc_locks: &str, major: u64, minor: u64, inode: u64) -> Option<u32> {
    flock_entries(proc_locks)
        .find(|&(_, maj, min, ino)| maj == major && min == minor && ino == inode)
        .map(|(pid, ..)| pid)
}

/// Every held `flock` in `/proc/locks`' text as (pid, major, minor, inode).
fn flock_entries(proc_locks: &str) -> impl Iterator<Item = (u32, u64, u64, u64)> + '_ {
    proc_locks.lines().filter_map(|line| {
        let mut f = line.split_whitespace().skip(1);
        let kind = f.next()?;
        if kind == "->" || kind != "FLOCK" {
            return None;
        }
        let _advisory = f.next()?;
        let _rw = f.next()?;
        let pid: u32 = f.next()?.parse().ok()?;
        let dev = f.next()?;
        let mut parts = dev.split(':');
        let maj = u64::from_str_radix(parts.next()?, 16).ok()?;
        let min = u64::from_str_radix(parts.next()?, 16).ok()?;
        let ino: u64 = parts.next()?.parse().ok()?;
        Some((pid, maj, min, ino))
    })
}

/// The pids holding a `flock` on an inode with this number, on any device (waiters skipped).
pub fn flock_holders_of_inode(proc_locks: &str, inode: u64) -> impl Iterator<Item = u32> + '_ {
    flock_entries(proc_locks).filter_map(move |(pid, _, _, ino)| (ino == inode).then_some(pid))
}

/// Whether process `pid` has a file with this device and inode open (its `/proc/PID/fd` links,
/// followed). At most [`MAX_FDS_LOOKED_AT`] descriptors are looked at.
#[cfg(target_os = "linux")]
fn has_open(pid: u32, dev: u64, inode: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .take(MAX_FDS_LOOKED_AT)
        .filter_map(|fd| std::fs::metadata(fd.path()).ok())
        .any(|m| m.dev() == dev && m.ino() == inode)
}

/// A bound on the descriptors [`has_open`] follows (the listener has a few dozen).
#[cfg(target_os = "linux")]
const MAX_FDS_LOOKED_AT: usize = 4096;

/// The program a unit runs: the first word of its `ExecStart=` (systemd, double-quoted by
/// `service`) or the first `<string>` of `ProgramArguments` (launchd), unquoted.
pub fn unit_program(text: &str) -> Option<String> {
    if let Some(line) = text
        .lines()
        .rev()
        .find(|l| l.starts_with("ExecStart=") && l.len() > "ExecStart=".len())
    {
        let rest = line.strip_prefix("ExecStart=")?;
        let word = match rest.strip_prefix('"') {
            Some(q) => q.split('"').next()?.replace("$$", "$").replace("%%", "%"),
            None => rest.split_whitespace().next()?.to_string(),
        };
        return Some(word);
    }
    let after = text.split("<key>ProgramArguments</key>").nth(1)?;
    let first = after.split("<string>").nth(1)?.split("</string>").next()?;
    Some(
        first
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

/// A server call under the one time limit for doctor's server checks; past it, a network error.
pub async fn with_timeout<T>(
    fut: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    tokio::time::timeout(SERVER_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::Network(format!(
                "no answer within {} s",
                SERVER_TIMEOUT.as_secs()
            )))
        })
}

/// The permission bits (`0o777`) of the file at `path` (symlinks followed), when it can be read.
pub fn file_mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

/// `None` when `path` does not exist; else what `read` made of it, or why it could not be read.
fn read_present<T>(
    path: &Path,
    read: impl FnOnce(&Path) -> std::io::Result<T>,
) -> Option<Result<T, String>> {
    match read(path) {
        Ok(v) => Some(Ok(v)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(Err(e.to_string())),
    }
}

/// `status.json` of the state dir `state_dir`, typed (`StateDir::read_status`, the reader
/// `agentchat status` uses too); `None` when there is none.
pub fn read_status(state_dir: &Path) -> Option<Result<Status, String>> {
    StateDir::at(state_dir)
        .read_status()
        .transpose()
        .map(|read| read.map_err(|e| e.to_string()))
}

/// The text of an installed unit file; `None` when there is none.
pub fn read_if_present(path: &Path) -> Option<Result<String, String>> {
    read_present(path, |p| std::fs::read_to_string(p))
}

/// The facts `check_texts` needs, from `GET /v1/texts` for `runtime`.
pub async fn texts_facts(api: &Api, runtime: &str) -> Result<TextsFacts, String> {
    with_timeout(api.texts(runtime))
        .await
        .map(|(t, _)| TextsFacts {
            version: t.version,
            has_wake_instruction: t.wake_instruction.is_some_and(|s| !s.trim().is_empty()),
            has_invite_prompt: t.invite_prompt.is_some_and(|s| !s.trim().is_empty()),
        })
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listen::state_dir::LOCK_FILE;

    #[test]
    fn proc_locks_gives_the_flock_holder_and_skips_waiters_and_other_files() {
        let text = "\
1: POSIX  ADVISORY  WRITE 111 08:01:42 0 EOF
2: FLOCK  ADVISORY  WRITE 222 08:01:43 0 EOF
2: -> FLOCK  ADVISORY  WRITE 333 08:01:42 0 EOF
3: FLOCK  ADVISORY  WRITE 444 fd:1a:42 0 EOF
";
        assert_eq!(
            flock_holder(text, 8, 1, 42),
            None,
            "POSIX lock and waiter ignored"
        );
        assert_eq!(flock_holder(text, 8, 1, 43), Some(222));
        assert_eq!(
            flock_holder(text, 0xfd, 0x1a, 42),
            Some(444),
            "hex major:minor"
        );
    }

    #[test]
    fn a_units_program_is_read_from_exec_start_or_program_arguments() {
        let unit = "[Service]\nExecStart=\"/opt/a b/agentchat\" \"listen\"\n";
        assert_eq!(unit_program(unit).as_deref(), Some("/opt/a b/agentchat"));
        let plist = "<key>ProgramArguments</key>\n<array>\n<string>/x/a&amp;b</string>";
        assert_eq!(unit_program(plist).as_deref(), Some("/x/a&b"));
        assert_eq!(unit_program("[Service]\n"), None);
    }

    #[test]
    fn the_holders_of_an_inode_are_found_on_any_device_for_overlayfs() {
        // overlayfs: stat gives the upper layer's device (here 00:2f), /proc/locks the overlay's.
        let text = "\
1: FLOCK  ADVISORY  WRITE 555 00:3a:77 0 EOF
2: -> FLOCK  ADVISORY  WRITE 666 00:3a:77 0 EOF
3: FLOCK  ADVISORY  WRITE 777 00:3a:78 0 EOF
";
        assert_eq!(flock_holder(text, 0, 0x2f, 77), None);
        assert_eq!(flock_holders_of_inode(text, 77).collect::<Vec<_>>(), [555]);
    }

    #[test]
    fn a_lock_held_in_this_process_is_reported_with_our_pid() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(LOCK_FILE);
        assert_eq!(lock_facts(&path), LockFacts::NoFile);
        let f = std::fs::File::create(&path).unwrap();
        assert_eq!(lock_facts(&path), LockFacts::Free);
        f.try_lock().unwrap();
        let held = lock_facts(&path);
        if cfg!(target_os = "linux") {
            assert_eq!(
                held,
                LockFacts::Held {
                    pid: Some(std::process::id())
                }
            );
        } else {
            assert!(matches!(held, LockFacts::Held { .. }), "{held:?}");
        }
        // Released with `unlock`, not by dropping `f`: another test thread's fork shares this
        // open file description until its child's exec, and a flock lives on the description,
        // so a close alone can leave it held for a moment. LOCK_UN ends it for every copy.
        f.unlock().unwrap();
        assert_eq!(lock_facts(&path), LockFacts::Free);
    }
}

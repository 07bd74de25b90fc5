//! Who holds a `flock` on a file: the one answer for the listener's own lock
//! (`listen::state_dir`), `doctor`, `setup` and `status --all`. The kernel is asked first
//! (Linux's `/proc/locks`, which takes no lock, so a listener starting at the same moment is
//! never turned away); elsewhere a shared lock is tried and let go at once, and the holder is
//! the pid its lock file says.

use std::io::Read;
use std::path::Path;

/// Who holds the lock on a lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockHolder {
    /// No lock file: no listener has run with it.
    NoFile,
    /// Held; `pid` is the holder (from the kernel when it can tell, else the file's pid).
    Held {
        pid: Option<u32>,
    },
    Free,
    /// The file could not be opened or locked; the reason.
    Unknown(String),
}

/// The most of `/proc/locks` read: a line is about 50 bytes, so tens of thousands of locks.
const PROC_LOCKS_CAP: u64 = 4 << 20;
/// The most of a lock file read for its pid (a pid and a newline).
const PID_CAP: u64 = 64;

/// Who holds the `flock` on the file at `path`, which holds its holder's pid as text.
pub fn holder(path: &Path) -> LockHolder {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return LockHolder::NoFile,
        Err(e) => return LockHolder::Unknown(e.to_string()),
    };
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(meta), Some(locks)) =
            (file.metadata(), read_capped("/proc/locks", PROC_LOCKS_CAP))
        {
            let dev = meta.dev();
            // glibc's major()/minor() encoding of st_dev.
            let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
            let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
            let pid = flock_holder(&locks, major, minor, meta.ino()).or_else(|| {
                // On overlayfs (every Docker container) the device stat gives is the upper
                // layer's, not the overlay's that /proc/locks names: a flock on this inode
                // number whose holder has this very file open is ours.
                flock_holders_of_inode(&locks, meta.ino())
                    .find(|pid| has_open(*pid, dev, meta.ino()))
            });
            return match pid {
                Some(pid) => LockHolder::Held { pid: Some(pid) },
                None => LockHolder::Free,
            };
        }
    }
    // Elsewhere: a shared lock attempt, released at once. It fails while a listener holds the
    // exclusive lock.
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            LockHolder::Free
        }
        Err(std::fs::TryLockError::WouldBlock) => LockHolder::Held {
            pid: read_capped(path, PID_CAP).and_then(|s| s.trim().parse().ok()),
        },
        Err(std::fs::TryLockError::Error(e)) => LockHolder::Unknown(e.to_string()),
    }
}

/// At most `cap` bytes of the file at `path` as text, `None` when it cannot be read.
fn read_capped(path: impl AsRef<Path>, cap: u64) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(cap)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Finds the pid holding a `flock` on the file with this device and inode, from the text of
/// Linux's `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`). Waiters (`->`) are
/// skipped.
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let path = d.path().join("listen.lock");
        assert_eq!(holder(&path), LockHolder::NoFile);
        let f = std::fs::File::create(&path).unwrap();
        assert_eq!(holder(&path), LockHolder::Free);
        f.try_lock().unwrap();
        let held = holder(&path);
        if cfg!(target_os = "linux") {
            assert_eq!(
                held,
                LockHolder::Held {
                    pid: Some(std::process::id())
                }
            );
        } else {
            assert!(matches!(held, LockHolder::Held { .. }), "{held:?}");
        }
        // Released with `unlock`, not by dropping `f`: another test thread's fork shares this
        // open file description until its child's exec, and a flock lives on the description,
        // so a close alone can leave it held for a moment. LOCK_UN ends it for every copy.
        f.unlock().unwrap();
        assert_eq!(holder(&path), LockHolder::Free);
    }
}

//! One listener per agent per machine (issue 17): once the handle is known, a listener holds a
//! lock named for the server and the handle, in one place per user whatever the profile or state
//! dir (`docs/decisions.md`, "One agent, one listener"). A second listener for the same agent
//! finds it held and exits 75 naming the state dir of the one that runs.
//!
//! The lock is a `flock` on `<state home>/agents/agent-<hash>.lock`, like the state dir's own
//! (`state_dir::Lock`), and like it unlocked before it is closed: a run being forked at that
//! moment shares the open file description until its exec. The file says who holds it (pid,
//! state dir, handle); it is removed while still locked when the listener lets go, and a taker
//! checks that the file it locked is still the one at the path, so a removal never lets two in.

use crate::log_events;
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The lock for one agent, held until dropped.
#[derive(Debug)]
pub struct AgentLock {
    file: File,
    path: PathBuf,
    /// The agent it is for: `api_base` and bare handle.
    agent: (String, String),
}

impl Drop for AgentLock {
    /// Removes the file while it is still locked, then unlocks (before the close), and says so to
    /// this process (`released`).
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
        releases().send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Counts the agent locks this process let go of: `listen --all` starts again a profile that
/// found its agent's lock held by another profile of the process once that one lets go
/// (`listen::host`), without waiting for a person.
fn releases() -> &'static tokio::sync::watch::Sender<u64> {
    static RELEASES: std::sync::OnceLock<tokio::sync::watch::Sender<u64>> =
        std::sync::OnceLock::new();
    RELEASES.get_or_init(|| tokio::sync::watch::channel(0).0)
}

/// Hears every agent lock this process lets go of from now on.
pub fn released() -> tokio::sync::watch::Receiver<u64> {
    releases().subscribe()
}

/// What taking the lock came to.
#[derive(Debug)]
pub enum Taken {
    /// This listener holds it now (or held it already).
    Held(AgentLock),
    /// Another listener holds it: what its file says. `kept`: the lock the taker held before
    /// (another agent's), still held: a failed move never lets go of the old agent.
    ByOther {
        pid: Option<u32>,
        state_dir: Option<String>,
        lock: PathBuf,
        kept: Option<AgentLock>,
    },
}

/// Where the agents' locks live: `agents/` in the user's state home (`~/.local/state/agentchat`
/// on Linux, `config::default_state_base`), the same for every profile and state dir of the user.
pub fn locks_dir() -> Option<PathBuf> {
    crate::config::default_state_base(&crate::config::process_env()).map(|b| b.join("agents"))
}

/// The lock file for the agent `handle` of `api_base` in `dir`: a hash, so any handle and URL
/// make a safe file name, and two servers' agents of the same name never meet.
pub fn lock_path(dir: &Path, api_base: &str, handle: &str) -> PathBuf {
    let mut h = Sha256::new();
    h.update(
        api_base
            .trim_end_matches('/')
            .to_ascii_lowercase()
            .as_bytes(),
    );
    h.update(b"\n");
    h.update(crate::core::handle::normalize(handle).as_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    dir.join(format!("agent-{hex}.lock"))
}

/// Takes the lock for (`api_base`, `handle`) in `dir` for the listener of `state_dir`. `held`
/// is the lock this listener holds now, if any: kept when it is for the same agent, released
/// once the new one is taken, and handed back in `Taken::ByOther` when the new one is held.
pub fn take(
    dir: &Path,
    api_base: &str,
    handle: &str,
    state_dir: &Path,
    held: Option<AgentLock>,
) -> std::io::Result<Taken> {
    let agent = (
        api_base.trim_end_matches('/').to_string(),
        crate::core::handle::normalize(handle),
    );
    if let Some(lock) = held {
        if lock.agent == agent {
            return Ok(Taken::Held(lock));
        }
        // Another agent now (a new key): take its lock first, and let the old one go after, only
        // once the new one is ours.
        return match take(dir, api_base, handle, state_dir, None) {
            Ok(Taken::ByOther {
                pid,
                state_dir,
                lock: path,
                ..
            }) => Ok(Taken::ByOther {
                pid,
                state_dir,
                lock: path,
                kept: Some(lock),
            }),
            taken => taken,
        };
    }
    crate::sys::fs::create_private_dir(dir)?;
    let path = lock_path(dir, api_base, handle);
    // A few tries: a holder that lets go between our open and our lock removes the file we
    // opened, and then we try the new one.
    for _ in 0..8 {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)?;
        match file.try_lock() {
            Ok(()) => {
                let same = std::fs::metadata(&path)
                    .ok()
                    .zip(file.metadata().ok())
                    .is_some_and(|(p, f)| p.ino() == f.ino() && p.dev() == f.dev());
                if !same {
                    let _ = file.unlock();
                    continue;
                }
                file.set_len(0)?;
                writeln!(
                    file,
                    "pid={}\nstate_dir={}\nhandle={}",
                    std::process::id(),
                    state_dir.display(),
                    agent.1
                )?;
                file.flush()?;
                return Ok(Taken::Held(AgentLock { file, path, agent }));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.take(4096).read_to_string(&mut text);
                let field = |name: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
                        .map(str::to_string)
                };
                return Ok(Taken::ByOther {
                    pid: field("pid").and_then(|p| p.parse().ok()),
                    state_dir: field("state_dir"),
                    lock: path,
                    kept: None,
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "{} kept changing while it was taken",
        path.display()
    )))
}

/// The listener's side: the lock for the agent it serves now, taken each time the handle is
/// learnt (at the start and after a new key).
#[derive(Debug, Default)]
pub struct AgentSlot {
    lock: Option<AgentLock>,
    /// Another listener on this machine serves the agent: this one must exit.
    taken_by_other: bool,
    /// That listener's pid, as its lock file says.
    holder: Option<u32>,
    /// A lock that could not be taken (an unwritable state home) was said once.
    warned: bool,
}

impl AgentSlot {
    /// The handle is known: takes its lock. False when another listener of this user holds it,
    /// which is logged at ERROR naming that listener's state dir; the caller exits 75. A lock
    /// that cannot be taken at all (no state home, a read-only one) is a warning, once, and no
    /// reason to stop.
    pub fn on_handle(&mut self, api_base: &str, handle: &str, state_dir: &Path) -> bool {
        let Some(dir) = locks_dir() else {
            self.warn_once("no state home to keep it in (HOME is not set)");
            return true;
        };
        match take(&dir, api_base, handle, state_dir, self.lock.take()) {
            Ok(Taken::Held(lock)) => {
                self.lock = Some(lock);
                true
            }
            Ok(Taken::ByOther {
                pid,
                state_dir: theirs,
                lock,
                kept,
            }) => {
                // Held until this listener ends: its old agent is never left unserved meanwhile.
                self.lock = kept;
                self.holder = pid;
                let theirs = theirs.unwrap_or_else(|| "an unknown state dir".into());
                tracing::error!(
                    event = %log_events::ALREADY_RUNNING,
                    handle = %crate::core::handle::shown(handle),
                    pid,
                    state_dir = %theirs,
                    lock = %lock.display(),
                    "another listener on this machine already serves {} (state dir {theirs}); one agent, one listener: exiting",
                    crate::core::handle::shown(handle)
                );
                self.taken_by_other = true;
                false
            }
            Err(e) => {
                self.warn_once(&format!("{}: {e}", dir.display()));
                true
            }
        }
    }

    /// Whether another listener serves this agent (the listener exits 75).
    pub fn taken_by_other(&self) -> bool {
        self.taken_by_other
    }

    /// The pid of the listener that serves this agent, when another does.
    pub fn holder(&self) -> Option<u32> {
        self.holder
    }

    fn warn_once(&mut self, why: &str) {
        if !std::mem::replace(&mut self.warned, true) {
            tracing::warn!(
                event = %log_events::AGENT_LOCK_UNAVAILABLE,
                "cannot take this agent's machine-wide lock ({why}); a second listener for the same agent would not be stopped"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_agent_one_lock_whatever_the_state_dir_and_another_agent_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("agents");
        let base = "http://127.0.0.1:9";
        let Taken::Held(first) = take(&d, base, "@Bob", Path::new("/s1"), None).unwrap() else {
            panic!("the first takes it");
        };
        match take(&d, base, "bob", Path::new("/s2"), None).unwrap() {
            Taken::ByOther { pid, state_dir, .. } => {
                assert_eq!(pid, Some(std::process::id()));
                assert_eq!(state_dir.as_deref(), Some("/s1"));
            }
            Taken::Held(_) => panic!("the same agent twice"),
        }
        // Another server's bob, or another handle, is another agent.
        let other_server = take(&d, "http://127.0.0.1:10", "bob", Path::new("/s3"), None);
        assert!(matches!(other_server.unwrap(), Taken::Held(_)));
        let alice = take(&d, base, "alice", Path::new("/s4"), None).unwrap();
        assert!(matches!(alice, Taken::Held(_)));
        // Kept when held for the same agent; moved to the new agent when the key changed.
        let Taken::Held(first) = take(&d, base, "bob", Path::new("/s1"), Some(first)).unwrap()
        else {
            panic!("kept");
        };
        let Taken::Held(carol) = take(&d, base, "carol", Path::new("/s1"), Some(first)).unwrap()
        else {
            panic!("moved");
        };
        // Bob's is free again (its file removed), carol's held.
        assert!(!lock_path(&d, base, "bob").exists());
        let bob_again = take(&d, base, "bob", Path::new("/s2"), None).unwrap();
        assert!(matches!(bob_again, Taken::Held(_)));
        assert!(matches!(
            take(&d, base, "carol", Path::new("/s5"), None).unwrap(),
            Taken::ByOther { .. }
        ));
        drop(carol);
    }

    #[test]
    fn a_move_to_an_agent_another_listener_serves_keeps_the_old_agents_lock() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("agents");
        let base = "http://127.0.0.1:9";
        let Taken::Held(x) = take(&d, base, "x", Path::new("/a"), None).unwrap() else {
            panic!("x");
        };
        let Taken::Held(_y) = take(&d, base, "y", Path::new("/b"), None).unwrap() else {
            panic!("y");
        };
        // The key files were swapped: /a now holds y's key, which /b serves.
        let Taken::ByOther { kept: Some(x), .. } =
            take(&d, base, "y", Path::new("/a"), Some(x)).unwrap()
        else {
            panic!("y is /b's, and x stays /a's");
        };
        assert!(
            matches!(
                take(&d, base, "x", Path::new("/c"), None).unwrap(),
                Taken::ByOther { .. }
            ),
            "x is still held"
        );
        let released = released();
        drop(x);
        assert!(released.has_changed().unwrap(), "the release is heard");
        assert!(matches!(
            take(&d, base, "x", Path::new("/c"), None).unwrap(),
            Taken::Held(_)
        ));
    }
}

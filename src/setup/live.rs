//! The listener that runs for a profile now, however it was started (the service, a terminal,
//! `listen --all`): the pid holding the profile's state-dir lock (`listen.lock`), else the one
//! holding its agent's lock (`listen::agent_lock`, a listener of another state dir serving the same
//! agent), judged by that state dir's `status.json` (`status::assess`). Setup counts it in its
//! last line, reloads it after a config change (SIGHUP, as `systemctl reload` does), and undo
//! stops it before the key it runs with is gone.

use crate::core::status::Status;
use crate::listen::state_dir::{LOCK_FILE, StateDir};
use crate::status::Liveness;
use crate::sys::flock::{LockHolder, holder};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// How long a reload may take to show in `status.json`.
pub const RELOAD_WAIT: Duration = Duration::from_secs(10);
/// How long a stopping listener may take to let go of its lock (a run gets its `kill_grace`).
pub const STOP_WAIT: Duration = Duration::from_secs(30);
/// The most sibling state dirs looked at to tell a `listen --all` process.
const SIBLINGS_LOOKED_AT: usize = 4096;

/// A listener running for the profile.
pub struct Live {
    pub pid: u32,
    pub state_dir: PathBuf,
    pub status: Option<Status>,
    /// As `agentchat status` judges it; `None` without a `status.json`.
    pub liveness: Option<Liveness>,
    /// The same process runs other profiles too (`listen --all`): stopping it would stop them.
    pub shared: bool,
}

impl Live {
    /// `pid N` and how it runs, for a line: `pid 4242, in a terminal or under your own supervisor`.
    pub fn describe(&self) -> String {
        if self.shared {
            format!("pid {}, with other profiles (`listen --all`)", self.pid)
        } else {
            format!("pid {}", self.pid)
        }
    }

    /// Why it cannot answer now, in `agentchat status`'s words; `None` when it can.
    pub fn problem(&self, profile: &str) -> Option<String> {
        crate::status::problem(
            profile,
            self.status.as_ref(),
            self.liveness,
            SystemTime::now(),
            &format!("`kill {}`, then start it again", self.pid),
        )
    }
}

fn held_by(lock: &Path) -> Option<u32> {
    match holder(lock) {
        LockHolder::Held { pid } => pid,
        _ => None,
    }
}

/// The listener of the profile whose state dir is `state_dir`: the holder of that dir's lock,
/// else the holder of its agent's lock (`agent`: `api_base`, handle) whose `status.json` names
/// `profile` (started with another `--state-dir`).
pub fn for_profile(state_dir: &Path, profile: &str, agent: Option<(&str, &str)>) -> Option<Live> {
    find(state_dir, agent).filter(|l| {
        l.state_dir == state_dir || l.status.as_ref().is_some_and(|s| s.profile == profile)
    })
}

/// A listener that answers for the agent (`api_base`, handle), whichever profile or state dir
/// it runs with: the holder of `state_dir`'s lock, else of the agent's.
pub fn for_agent(state_dir: &Path, agent: (&str, &str)) -> Option<Live> {
    find(state_dir, Some(agent))
}

fn find(state_dir: &Path, agent: Option<(&str, &str)>) -> Option<Live> {
    let (pid, dir) = match held_by(&state_dir.join(LOCK_FILE)) {
        Some(pid) => (pid, state_dir.to_path_buf()),
        None => agent_holder(agent?)?,
    };
    // A status.json another (earlier) listener left says nothing of this one.
    let status = StateDir::at(&dir)
        .read_status()
        .ok()
        .flatten()
        .filter(|s| s.pid == pid);
    let liveness = status.as_ref().map(|s| {
        crate::status::assess(
            s,
            crate::sys::process::pid_alive(u64::from(s.pid)),
            SystemTime::now(),
        )
    });
    Some(Live {
        pid,
        shared: shared(pid, &dir),
        state_dir: dir,
        status,
        liveness,
    })
}

/// The pid and state dir the agent's lock file names, while a listener holds it.
fn agent_holder((api_base, handle): (&str, &str)) -> Option<(u32, PathBuf)> {
    let path = crate::listen::agent_lock::lock_path(
        &crate::listen::agent_lock::locks_dir()?,
        api_base,
        handle,
    );
    let pid = held_by(&path)?;
    let text = crate::sys::fs::read_regular_capped(&path, 4096).ok()?;
    let text = String::from_utf8_lossy(&text);
    let dir = text
        .lines()
        .find_map(|l| l.strip_prefix("state_dir="))
        .map(PathBuf::from)?;
    Some((pid, dir))
}

/// Whether `pid` also holds the lock of another state dir beside `state_dir`.
fn shared(pid: u32, state_dir: &Path) -> bool {
    let Some(entries) = state_dir.parent().and_then(|b| std::fs::read_dir(b).ok()) else {
        return false;
    };
    entries
        .flatten()
        .take(SIBLINGS_LOOKED_AT)
        .map(|e| e.path())
        .filter(|d| d != state_dir)
        .any(|d| held_by(&d.join(LOCK_FILE)) == Some(pid))
}

fn signal(pid: u32, sig: libc::c_int) -> Result<(), String> {
    let Ok(p) = i32::try_from(pid) else {
        return Err(format!("pid {pid} is out of range"));
    };
    // SAFETY: kill(2) with a pid a live lock names and a plain signal number.
    if unsafe { libc::kill(p, sig) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

/// Polls `done` every 50 ms until it holds or `limit` has passed.
async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SIGHUP, then a wait until its `status.json` is written again after the signal and shows
/// `runtime`: the line that says so, or why not and what to do.
pub async fn reload(live: &Live, runtime: &str) -> Result<String, String> {
    let asked = SystemTime::now();
    let how = format!(
        "`kill -HUP {}` (or restart it) makes it read the config again",
        live.pid
    );
    signal(live.pid, libc::SIGHUP)
        .map_err(|e| format!("it could not be told to reload ({e}): {how}"))?;
    let dir = StateDir::at(&live.state_dir);
    let took = wait_for(RELOAD_WAIT, || {
        dir.read_status().ok().flatten().is_some_and(|s| {
            s.runtime == runtime
                // `updated_at` is to the millisecond.
                && humantime::parse_rfc3339_weak(&s.updated_at)
                    .is_ok_and(|t| t + Duration::from_millis(1) >= asked)
        })
    })
    .await;
    if took {
        Ok(format!(
            "listener: {} reloaded its config (SIGHUP): it runs {runtime} now",
            live.describe()
        ))
    } else {
        Err(format!(
            "the listener ({}) did not show the new config within {} s: {how}",
            live.describe(),
            RELOAD_WAIT.as_secs()
        ))
    }
}

/// SIGTERM, then a wait until it lets go of the profile's lock.
pub async fn stop(live: &Live) -> Result<String, String> {
    signal(live.pid, libc::SIGTERM).map_err(|e| {
        format!(
            "the listener ({}) could not be stopped: {e}; stop it yourself (`kill {}`), then \
             undo again",
            live.describe(),
            live.pid
        )
    })?;
    let lock = live.state_dir.join(LOCK_FILE);
    if wait_for(STOP_WAIT, || held_by(&lock) != Some(live.pid)).await {
        Ok(format!(
            "listener: {} stopped (SIGTERM): it ran for this profile outside the service",
            live.describe()
        ))
    } else {
        Err(format!(
            "the listener ({}) still runs {} s after SIGTERM (a run may be finishing); stop it \
             (`kill {}`), then undo again",
            live.describe(),
            STOP_WAIT.as_secs(),
            live.pid
        ))
    }
}

/// A `listen --all` process running the profile beside others, after the config stopped naming
/// it: SIGHUP (it reads the config again and stops the profiles it no longer names), then a wait
/// until it lets go of the profile's lock.
pub async fn leave_host(live: &Live) -> Result<String, String> {
    let lock = live.state_dir.join(LOCK_FILE);
    if held_by(&lock) != Some(live.pid) {
        return Ok(format!(
            "listener: the profile's listener in {} has stopped",
            live.describe()
        ));
    }
    signal(live.pid, libc::SIGHUP).map_err(|e| {
        format!(
            "the listener ({}) could not be told to reload ({e}): `kill -HUP {}` stops this \
             profile in it",
            live.describe(),
            live.pid
        )
    })?;
    if wait_for(STOP_WAIT, || held_by(&lock) != Some(live.pid)).await {
        Ok(format!(
            "listener: {} reloaded (SIGHUP) and stopped this profile; its other profiles run on",
            live.describe()
        ))
    } else {
        Err(format!(
            "the listener ({}) still runs this profile {} s after SIGHUP: `kill -HUP {}` again, \
             or stop that process",
            live.describe(),
            STOP_WAIT.as_secs(),
            live.pid
        ))
    }
}

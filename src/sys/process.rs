//! Processes: how one ended, a child that leads its own process group (spawn, signal, stop with a
//! grace, killed with its holder), whether a pid is alive, and what `/proc` says of a process and
//! a group. The run supervisor, doctor's probes and the demo's listener all start their children
//! through [`GroupChild`].

use std::process::{ExitStatus, Output};
use std::time::Duration;

/// How the process ended, as its supervisor saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum ProcessEnd {
    Exited(i32),
    Signalled(i32),
    TimedOut,
    /// The listener is stopping and ended the run.
    Cancelled,
    SpawnFailed(String),
}

impl ProcessEnd {
    /// How a process that ended by itself ended: its exit code, else the signal that killed it.
    pub fn from_status(status: ExitStatus) -> ProcessEnd {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(c), _) => ProcessEnd::Exited(c),
            (None, Some(s)) => ProcessEnd::Signalled(s),
            (None, None) => ProcessEnd::Exited(-1),
        }
    }

    /// How it ended as one snake_case word, for log fields: `exited`, `signalled`, `timed_out`,
    /// `cancelled`, `spawn_failed`.
    pub fn word(&self) -> &'static str {
        match self {
            ProcessEnd::Exited(_) => "exited",
            ProcessEnd::Signalled(_) => "signalled",
            ProcessEnd::TimedOut => "timed_out",
            ProcessEnd::Cancelled => "cancelled",
            ProcessEnd::SpawnFailed(_) => "spawn_failed",
        }
    }

    /// The exit code, when it exited by itself.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            ProcessEnd::Exited(c) => Some(*c),
            _ => None,
        }
    }

    /// The signal that ended it, when one did.
    pub fn signal(&self) -> Option<i32> {
        match self {
            ProcessEnd::Signalled(s) => Some(*s),
            _ => None,
        }
    }
}

/// For people (the run log's last line): `exited with code 0`, `killed by signal 9`, `timed out`.
impl std::fmt::Display for ProcessEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProcessEnd::Exited(c) => write!(f, "exited with code {c}"),
            ProcessEnd::Signalled(s) => write!(f, "killed by signal {s}"),
            ProcessEnd::TimedOut => f.write_str("timed out"),
            ProcessEnd::Cancelled => f.write_str("stopped (the listener is stopping)"),
            ProcessEnd::SpawnFailed(e) => write!(f, "could not start: {e}"),
        }
    }
}

/// Sends `signal` to every process in group `pgid`. Errors (the group is already gone) are ignored:
/// there is nothing left to stop.
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid <= 1 {
        return; // never signal our own group (0) or every process (-1/1)
    }
    // SAFETY: killpg has no memory-safety preconditions; pgid is a group the caller created.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// SIGKILLs the group `pgid` when dropped.
struct GroupGuard {
    pgid: i32,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        signal_group(self.pgid, libc::SIGKILL);
    }
}

/// Has `cmd`'s child get SIGKILL when this process ends, however it ends (`PR_SET_PDEATHSIG`;
/// Linux only, nothing elsewhere): for a child that changes the user's files on this process's
/// behalf (setup's `mcp add`), which must not run on after a Ctrl-C or `kill -9` of its parent.
/// A parent already gone by the time the child starts makes the spawn fail.
pub fn die_with_parent(cmd: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the closure runs between fork and exec and calls only `prctl` and `getppid`,
        // both async-signal-safe, and allocates nothing.
        let parent = i64::from(std::process::id());
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if i64::from(libc::getppid()) != parent {
                    // ESRCH: the parent ended before the child started.
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// A child started as the leader of its own process group (its pid is the group id). Dropping it
/// SIGKILLs the whole group, so nothing the child started outlives whoever holds it: the future
/// awaiting it was dropped (a task aborted, a time limit passed), or its leader ended and left
/// processes behind. The group id cannot be reused while any member still holds it, so the kill
/// reaches only the child's own leftovers.
pub struct GroupChild {
    /// The leader. Take its pipes from here; wait for it with `wait` on it or the methods below.
    pub child: tokio::process::Child,
    guard: GroupGuard,
}

/// How [`GroupChild::terminate`] ended the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// The leader ended within the grace after SIGTERM.
    WithinGrace,
    /// The grace ran out: the group got SIGKILL.
    Killed,
}

impl GroupChild {
    /// Spawns `cmd` as the leader of a new process group.
    pub fn spawn(cmd: &mut tokio::process::Command) -> std::io::Result<GroupChild> {
        let child = cmd.process_group(0).spawn()?;
        let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        Ok(GroupChild {
            child,
            guard: GroupGuard { pgid },
        })
    }

    /// The leader's pid (also the group id), while it has not been reaped.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends `signal` to the whole group.
    pub fn signal(&self, signal: i32) {
        signal_group(self.guard.pgid, signal);
    }

    /// SIGTERM to the group, up to `grace` for the leader to end, then SIGKILL to the group.
    /// Returns the leader's exit status and whether the SIGKILL was needed.
    pub async fn terminate(
        &mut self,
        grace: Duration,
    ) -> (std::io::Result<ExitStatus>, Termination) {
        self.signal(libc::SIGTERM);
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => (status, Termination::WithinGrace),
            Err(_) => {
                self.signal(libc::SIGKILL);
                (self.child.wait().await, Termination::Killed)
            }
        }
    }

    /// Waits for the leader and collects its output (stdout and stderr must be piped), then kills
    /// whatever it left in its group.
    pub async fn wait_with_output(self) -> std::io::Result<Output> {
        let GroupChild { child, guard } = self;
        let output = child.wait_with_output().await;
        drop(guard);
        output
    }
}

/// The real user id this process runs as.
pub fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The user name of `uid` from the password database, when it has one.
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: an all-zero `passwd` is a valid value (null pointers, zero ids); getpwuid_r only
    // writes into it and into `buf`, whose length it is told.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and `buf.len()` is the buffer's real size.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success `pw_name` points to a NUL-terminated string inside `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// `alice (uid 1000)`, or `uid 1000` for a uid without a name.
pub fn user_label(uid: u32) -> String {
    match user_name(uid) {
        Some(name) => format!("{name} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// Whether a process with this pid exists (a status file's pid may be stale).
pub fn pid_alive(pid: u64) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; no signal is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A process as `/proc/<pid>/stat` shows it (Linux; `None` elsewhere or when it is gone).
#[derive(Debug, Clone, Copy)]
pub struct ProcStat {
    pub zombie: bool,
    pub pgrp: i32,
    /// Clock ticks after boot; 0 when unknown.
    pub start: u64,
}

impl ProcStat {
    /// Whether the start time was read (it tells a process from a later one with the same pid).
    pub fn start_known(&self) -> bool {
        self.start > 0
    }
}

/// Reads `/proc/<pid>/stat`: `None` when the process is gone or there is no `/proc`.
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`: comm may hold anything, so split at the last `)`.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(ProcStat {
        zombie: fields.first()? == &"Z",
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19).and_then(|s| s.parse().ok()).unwrap_or(0),
    })
}

/// This boot's id (Linux), which tells a pid or start time of this boot from an earlier one's.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}

/// Whether any live process (not a zombie: nothing may reap orphans here) is in group `pgid`.
pub fn group_alive(pgid: i32) -> bool {
    match std::fs::read_dir("/proc") {
        Ok(entries) => entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
                .and_then(proc_stat)
                .is_some_and(|p| p.pgrp == pgid && !p.zombie)
        }),
        // No /proc: ask the kernel whether the group has members (zombies count there).
        // SAFETY: killpg with signal 0 only checks for existence; nothing is sent.
        Err(_) => unsafe { libc::killpg(pgid, 0) == 0 },
    }
}

/// Gives the memory the allocator holds free back to the system (glibc's `malloc_trim`): after a
/// burst of allocations across threads (the page's reads on the blocking pool), freed memory
/// otherwise stays in the process's RSS. Elsewhere it does nothing.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn an_end_is_the_exit_code_else_the_killing_signal() {
        assert_eq!(
            ProcessEnd::from_status(ExitStatus::from_raw(3 << 8)),
            ProcessEnd::Exited(3)
        );
        assert_eq!(
            ProcessEnd::from_status(ExitStatus::from_raw(libc::SIGKILL)),
            ProcessEnd::Signalled(libc::SIGKILL)
        );
    }
}

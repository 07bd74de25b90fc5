//! Processes: how one ended, signalling a whole process group, the guard that kills a group with
//! its supervisor, and whether a pid is alive.

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

/// SIGKILLs the group `pgid` when dropped while `armed` (the supervising future was dropped
/// mid-run, the listener's task was aborted), so a run never outlives its supervisor.
pub struct GroupGuard {
    pub pgid: i32,
    pub armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pgid, libc::SIGKILL);
        }
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

//! The record of a run's process group (`run.group` beside its log) and what the next listener
//! does with one a killed listener left behind (`stop_leftover_run`): a new run never overlaps
//! the old one's leftovers (`runtime::supervisor`).

use crate::log_events;
use crate::sys::process::{boot_id, group_alive, pid_alive, proc_stat, signal_group};
use std::path::Path;
use std::time::{Duration, Instant};

/// The file beside a run's log that names its process group while the run lives.
pub const RUN_GROUP_FILE: &str = "run.group";

/// What `run.group` holds: the group, and what tells it from a later group that reuses its id
/// (the leader's start time since boot, and the boot).
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct GroupRecord {
    pub(super) pgid: i32,
    pub(super) leader_start: Option<u64>,
    pub(super) boot_id: Option<String>,
}

/// Written right after the spawn, so without an `fsync`: the record is for a listener killed
/// while its run lives, and the page cache outlives any process; a crash of the machine ends the
/// group too (and the boot id tells its record apart). A synced write here forced a journal
/// commit while the run was starting, and the run's own first writes waited for it.
pub(super) fn record_group(path: &Path, pgid: i32) -> std::io::Result<()> {
    let record = GroupRecord {
        pgid,
        leader_start: proc_stat(pgid).map(|p| p.start),
        boot_id: boot_id(),
    };
    let bytes = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
    crate::sys::fs::write_atomic_unsynced(path, &bytes).map(drop)
}

/// Ends the process group a killed listener's run left behind (its `run.group` in `runs_dir`):
/// SIGTERM, up to `grace` for it to go, then SIGKILL. Only a group that is still the run's is
/// signalled: a record from an earlier boot, or a group id now led by another process, is only
/// removed. Call it holding the state dir's lock, before anything can start a run.
pub async fn stop_leftover_run(runs_dir: &Path, grace: Duration) {
    let path = runs_dir.join(RUN_GROUP_FILE);
    let record: GroupRecord = match std::fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(event = %log_events::LEFTOVER_RUN_UNREADABLE, path = %path.display(), error = %e, "the record of the last run's process group is damaged; removing it");
                let _ = std::fs::remove_file(&path);
                return;
            }
        },
        Err(_) => return,
    };
    if leftover_is_the_runs(&record) {
        tracing::warn!(
            event = %log_events::LEFTOVER_RUN,
            pgid = record.pgid,
            grace_ms = grace.as_millis() as u64,
            "the last listener ended during a run and left its process group; stopping it before anything new runs"
        );
        signal_group(record.pgid, libc::SIGTERM);
        let ended = group_gone_within(record.pgid, grace).await;
        if !ended {
            signal_group(record.pgid, libc::SIGKILL);
            group_gone_within(record.pgid, Duration::from_secs(5)).await;
        }
        tracing::info!(
            event = %log_events::LEFTOVER_RUN_STOPPED,
            pgid = record.pgid,
            killed = !ended,
            "the last run's leftovers are gone"
        );
    }
    let _ = std::fs::remove_file(&path);
}

/// Whether the recorded group is still the run's: same boot, and either its leader is the very
/// process that was recorded, or the leader is gone and members remain (an id stays taken while
/// any member holds it, so those are the run's).
fn leftover_is_the_runs(record: &GroupRecord) -> bool {
    if record.pgid <= 1 {
        return false;
    }
    if let (Some(then), Some(now)) = (&record.boot_id, boot_id())
        && *then != now
    {
        return false;
    }
    match proc_stat(record.pgid) {
        Some(leader) if !leader.zombie => {
            leader.start_known() && Some(leader.start) == record.leader_start
        }
        // A leader alive but not readable (no /proc): it cannot be told from a new process that
        // reuses the id, so it is left alone.
        None if pid_alive(record.pgid as u64) => false,
        _ => group_alive(record.pgid),
    }
}

async fn group_gone_within(pgid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if !group_alive(pgid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

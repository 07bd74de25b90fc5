//! Starts a run in its own process group and supervises it: output to a per-run log file (0600),
//! a time limit (SIGTERM to the group, a grace, SIGKILL to the group), and the same on shutdown.
//! No process of the run's group outlives it.
//!
//! The log file gets a header line (time, program, working directory) and footer lines (how the run
//! ended, which signals the supervisor sent). Never the prompt, the arguments (Codex takes the prompt
//! as its last argument) or the environment (it may hold the key).

use crate::runtime::{ALWAYS_REMOVED, RunSpec};
use crate::sys::fs::open_append_private;
use crate::sys::process::{GroupChild, ProcessEnd, Termination};
use crate::sys::time::rfc3339_seconds;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    pub timeout: Duration,
    pub grace: Duration,
}

#[derive(Debug, Clone)]
pub struct RunReport {
    pub end: ProcessEnd,
    pub pid: Option<u32>,
    pub log_path: PathBuf,
    pub duration: Duration,
}

/// A line of the supervisor's own in the run log. Failing to write it must not fail the run.
fn note(log: &mut File, line: &str) {
    let _ = writeln!(log, "=== {} {line}", rfc3339_seconds(SystemTime::now()));
}

/// The name `run-<UTC time>-<cycle id>.log` the listener gives a run's log, so that names sort by
/// start time. Characters other than letters, digits, `-` and `_` in the cycle id become `_`.
pub fn log_file_name(cycle_id: &str) -> String {
    let stamp: String = rfc3339_seconds(SystemTime::now())
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    let id: String = cycle_id
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("run-{stamp}-{id}.log")
}

/// Runs `spec` to its end. `cancel` turning true ends the run early (SIGTERM, grace, SIGKILL).
/// A `cancel` that is already true starts nothing. Never panics; a process that cannot be started
/// is `SpawnFailed` with the reason.
pub async fn run(
    spec: &RunSpec,
    limits: RunLimits,
    log_path: &Path,
    mut cancel: watch::Receiver<bool>,
) -> RunReport {
    let started = Instant::now();
    let report = |end: ProcessEnd, pid: Option<u32>| RunReport {
        end,
        pid,
        log_path: log_path.to_path_buf(),
        duration: started.elapsed(),
    };
    if *cancel.borrow_and_update() {
        return report(ProcessEnd::Cancelled, None);
    }
    let (mut log, out, err) = match open_run_log(spec, log_path) {
        Ok(opened) => opened,
        Err(msg) => return report(ProcessEnd::SpawnFailed(msg), None),
    };
    let mut group = match spawn(spec, out, err) {
        Ok(group) => group,
        Err(msg) => {
            note(&mut log, &format!("run not started: {msg}"));
            return report(ProcessEnd::SpawnFailed(msg), None);
        }
    };
    let pid = group.id();
    note(
        &mut log,
        &format!("pid {} (its own process group)", pid.unwrap_or(0)),
    );
    let feeder = feed_stdin(&mut group, spec);
    let end = supervise(&mut group, limits, &mut cancel, &mut log).await;
    // The leader is gone; dropping the group kills whatever it left behind.
    drop(group);
    if let Some(f) = feeder {
        f.abort();
    }
    let r = report(end, pid);
    note(
        &mut log,
        &format!(
            "run ended: {:?} after {}",
            r.end,
            humantime::format_duration(Duration::from_millis(r.duration.as_millis() as u64))
        ),
    );
    r
}

/// Opens the run log (0600) with its header line, and two handles on it for the child's stdout
/// and stderr. `Err` is the reason, for `SpawnFailed`.
fn open_run_log(spec: &RunSpec, log_path: &Path) -> Result<(File, Stdio, Stdio), String> {
    let mut log = open_append_private(log_path)
        .map_err(|e| format!("cannot open the run log {}: {e}", log_path.display()))?;
    note(
        &mut log,
        &format!(
            "run started: program {} in {}",
            spec.program.display(),
            spec.cwd.display()
        ),
    );
    match (log.try_clone(), log.try_clone()) {
        (Ok(o), Ok(e)) => Ok((log, Stdio::from(o), Stdio::from(e))),
        _ => Err(format!(
            "cannot attach the run log {} to the process",
            log_path.display()
        )),
    }
}

/// Starts the run in its own process group, output to the log, the environment cleaned.
fn spawn(spec: &RunSpec, out: Stdio, err: Stdio) -> Result<GroupChild, String> {
    let mut cmd = tokio::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .current_dir(&spec.cwd)
        .stdout(out)
        .stderr(err)
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    for name in ALWAYS_REMOVED
        .iter()
        .copied()
        .chain(spec.env_remove.iter().map(String::as_str))
    {
        cmd.env_remove(name);
    }
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
    GroupChild::spawn(&mut cmd).map_err(|e| {
        format!(
            "cannot start {} (in {}): {e}",
            spec.program.display(),
            spec.cwd.display()
        )
    })
}

/// Feeds stdin from its own task: a child that never reads must not block the supervisor, and
/// dropping the pipe afterwards closes the child's stdin.
fn feed_stdin(group: &mut GroupChild, spec: &RunSpec) -> Option<tokio::task::JoinHandle<()>> {
    match (group.child.stdin.take(), spec.stdin.clone()) {
        (Some(mut pipe), Some(data)) => Some(tokio::spawn(async move {
            let _ = pipe.write_all(&data).await;
            let _ = pipe.shutdown().await;
        })),
        _ => None,
    }
}

/// Waits for the run to end by itself, or ends it at the time limit or when `cancel` turns true
/// (SIGTERM to the group, the grace, SIGKILL to the group), noting in the log what it sent.
async fn supervise(
    group: &mut GroupChild,
    limits: RunLimits,
    cancel: &mut watch::Receiver<bool>,
    log: &mut File,
) -> ProcessEnd {
    let cancelled = async {
        // A dropped sender means nobody can cancel any more.
        if cancel.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let (end, why) = tokio::select! {
        status = group.child.wait() => {
            return match status {
                Ok(status) => ProcessEnd::from_status(status),
                Err(e) => ProcessEnd::SpawnFailed(format!("lost track of the run: {e}")),
            };
        }
        _ = tokio::time::sleep(limits.timeout) => (
            ProcessEnd::TimedOut,
            format!("time limit of {} reached", humantime::format_duration(limits.timeout)),
        ),
        _ = cancelled => (ProcessEnd::Cancelled, "the listener is stopping".to_string()),
    };
    note(log, &format!("{why}: SIGTERM sent to the process group"));
    match group.terminate(limits.grace).await.1 {
        Termination::WithinGrace => note(log, "the run ended within the grace"),
        Termination::Killed => note(
            log,
            &format!(
                "grace of {} over: SIGKILL sent to the process group",
                humantime::format_duration(limits.grace)
            ),
        ),
    }
    end
}

/// Keeps the newest `keep` run logs (`run-*.log`) in `dir`, newest by modification time, then by
/// name. Other files are left alone; a missing `dir` is fine.
pub fn prune_logs(dir: &Path, keep: usize) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut logs: Vec<(SystemTime, String, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("run-") && name.ends_with(".log")) {
            continue;
        }
        let meta = entry.metadata()?;
        if !meta.is_file() {
            continue;
        }
        let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        logs.push((mtime, name, entry.path()));
    }
    logs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    for (_, _, path) in logs.into_iter().skip(keep) {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

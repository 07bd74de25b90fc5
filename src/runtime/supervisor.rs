//! Starts a run in its own process group and supervises it: output to a per-run log file (0600),
//! a time limit (SIGTERM to the group, a grace, SIGKILL to the group), and the same on shutdown.
//! No process of the run's group outlives it.
//!
//! The log file gets a header line (time, program, working directory) and footer lines (how the run
//! ended, which signals the supervisor sent). Never the prompt, the arguments (Codex takes the prompt
//! as its last argument) or the environment (it may hold the key).
//!
//! The run's stdout and stderr reach the log through the supervisor, capped at
//! `RunLimits::log_max` bytes: the first half as it comes, then only the newest half, kept in
//! memory and written at the end after a line that says which bytes were left out. A run that
//! writes without end never fills the disk, and the end of its output (where Claude Code and
//! Codex put their result) is still there to judge the run by. The supervisor's own `===` lines
//! are never cut.
//!
//! The run's stdout is also read for its own report of cost and tokens (`core::run_report`:
//! Claude Code's `result` event, Codex's `turn.completed`), whatever the cap keeps of it and
//! however the run ends: a report printed before a kill still counts. Only those events' numbers
//! are kept, and the log's last `===` line says them (`run reported: …`).
//!
//! While a run lives, its process group is recorded in `run.group` beside its log. A listener
//! killed mid-run (SIGKILL, the OOM killer) cannot end the group itself, so the next listener to
//! take the state dir's lock ends it (`stop_leftover_run`) before it starts anything: a new run
//! never overlaps the old one's leftovers.

use super::run_output::{CappedLog, Cut, relay_output};
use crate::core::run_report::{self, Lines};
use crate::log_events;
use crate::runtime::leftover::record_group;
pub use crate::runtime::leftover::{RUN_GROUP_FILE, stop_leftover_run};
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
    /// Most bytes of the run's output kept in its log (see the module doc).
    pub log_max: u64,
}

/// After the run's group is gone, how long its output may still take to reach the log (a process
/// that left the group can hold the pipes open for ever).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct RunReport {
    pub end: ProcessEnd,
    pub pid: Option<u32>,
    pub log_path: PathBuf,
    pub duration: Duration,
    /// What the run reported of its cost and tokens, from its own output events.
    pub reported: run_report::RunReport,
}

/// A run's log, when one could be opened, and whether it was cut.
struct RunLog {
    file: Option<File>,
    cut: Cut,
}

/// A line of the supervisor's own in the run log, when there is one. Failing to write it must not
/// fail the run; it marks the log cut.
fn note(log: &mut RunLog, line: &str) {
    if let Some(f) = &mut log.file
        && let Err(e) = writeln!(f, "=== {} {line}", rfc3339_seconds(SystemTime::now()))
    {
        let _ = log.cut.set(e.to_string());
    }
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
/// `on_start` is called once the process was started (or could not be): the caller's own
/// bookkeeping (its log line, counters, status) waits until then.
///
/// A `cancel` that is already true starts nothing. Never panics; a process that cannot be started
/// is `SpawnFailed` with the reason.
///
/// The run starts before its log file is opened: creating a file can wait on the filesystem's
/// journal (tens of ms on a busy disk), and nothing that can wait comes between a wake and its
/// run (docs/benchmarks.md). The run's pipes hold its first output meanwhile. A log that cannot be
/// opened (a full or read-only state dir) costs the log, not the run.
pub async fn run(
    spec: &RunSpec,
    limits: RunLimits,
    log_path: &Path,
    mut cancel: watch::Receiver<bool>,
    on_start: impl FnOnce(),
) -> RunReport {
    let started = Instant::now();
    let report = |end: ProcessEnd, pid: Option<u32>| RunReport {
        end,
        pid,
        log_path: log_path.to_path_buf(),
        duration: started.elapsed(),
        reported: run_report::RunReport::default(),
    };
    if *cancel.borrow_and_update() {
        return report(ProcessEnd::Cancelled, None);
    }
    let spawned = spawn(spec);
    on_start();
    let (mut log, output_log) = open_run_log(spec, log_path, limits.log_max);
    let mut group = match spawned {
        Ok((group, confined)) => {
            note(&mut log, &confined);
            group
        }
        Err(msg) => {
            note(&mut log, &format!("run not started: {msg}"));
            remove_scratch(spec);
            return report(ProcessEnd::SpawnFailed(msg), None);
        }
    };
    let pid = group.id();
    note(
        &mut log,
        &format!("pid {} (its own process group)", pid.unwrap_or(0)),
    );
    let group_file = log_path.with_file_name(RUN_GROUP_FILE);
    let pgid = pid.and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    if let Err(e) = record_group(&group_file, pgid) {
        note(
            &mut log,
            &format!("cannot record the process group in {RUN_GROUP_FILE}: {e}"),
        );
    }
    // The relay says each new report here, so one read before an abandoned relay still counts.
    let (reported_tx, reported) = watch::channel(run_report::RunReport::default());
    let relay = tokio::spawn(relay_output(
        group.child.stdout.take(),
        group.child.stderr.take(),
        output_log,
        (Lines::new(spec.runtime), reported_tx),
    ));
    let feeder = feed_stdin(&mut group, spec);
    let end = supervise(&mut group, limits, &mut cancel, &mut log).await;
    // The leader is gone; dropping the group SIGKILLs whatever it left in it. The group id cannot
    // be reused while any member still holds it, so this reaches only the run's own leftovers.
    drop(group);
    let _ = std::fs::remove_file(&group_file);
    remove_scratch(spec);
    if let Some(f) = feeder {
        f.abort();
    }
    finish_output(relay, &mut log).await;
    let r = RunReport {
        reported: *reported.borrow(),
        ..report(end, pid)
    };
    note(
        &mut log,
        &format!(
            "run ended: {} after {}",
            r.end,
            humantime::format_duration(Duration::from_millis(r.duration.as_millis() as u64))
        ),
    );
    if let Some(line) = reported_line(&r.reported) {
        note(&mut log, &line);
    }
    if let Some(error) = log.cut.get().cloned() {
        // Said in the log too, when there is room for a line by now.
        note(
            &mut log,
            &format!("this log is cut: a write failed ({error}); output is missing from there on"),
        );
        tracing::warn!(event = %log_events::RUN_LOG_CUT, log = %log_path.display(), error = %error, "the run's log could not be written to its end (a full or read-only disk?): output is missing from the first failed write on, its `run ended` line too when that did not fit; the run was judged from what the log holds");
    }
    r
}

/// Opens the run log (0600) with its header line, and the capped writer the run's output goes
/// through (`CappedLog`, on a second handle). A log that cannot be opened is said once in the
/// listener's log and the run's output is read and dropped: the run goes on.
fn open_run_log(spec: &RunSpec, log_path: &Path, max: u64) -> (RunLog, CappedLog) {
    let file = match open_append_private(log_path) {
        Ok(log) => Some(log),
        Err(e) => {
            tracing::warn!(event = %log_events::RUN_LOG_UNAVAILABLE, log = %log_path.display(), error = %e, "the run's log cannot be opened: the run goes on without it");
            None
        }
    };
    let mut log = RunLog {
        file,
        cut: Cut::default(),
    };
    note(
        &mut log,
        &format!(
            "run started: program {} in {}",
            spec.program.display(),
            spec.cwd.display()
        ),
    );
    let output = log.file.as_ref().and_then(|l| l.try_clone().ok());
    let capped = CappedLog::new(output, max, log.cut.clone());
    (log, capped)
}

fn remove_scratch(spec: &RunSpec) {
    if let Some(dir) = &spec.scratch {
        crate::runtime::sandbox::remove_scratch(dir);
    }
}

/// Starts the run in its own process group, stdout and stderr piped (to the capped log relay),
/// the environment cleaned, inside the kernel's line of its plan (`runtime::landlock`). With the
/// process, the run log's line on how it is confined.
fn spawn(spec: &RunSpec) -> Result<(GroupChild, String), String> {
    let mut cmd = tokio::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .current_dir(&spec.cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    cmd.env_clear();
    cmd.envs(super::inherited(std::env::vars_os(), &spec.env_pass));
    for name in ALWAYS_REMOVED
        .iter()
        .copied()
        .chain(spec.env_remove.iter().map(String::as_str))
    {
        cmd.env_remove(name);
    }
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
    // Built before the fork; the child only enters it. Kept until the spawn has returned.
    let prepared = match &spec.sandbox {
        Some(plan) => crate::runtime::landlock::prepare(plan)?,
        None => None,
    };
    let confined = match (&spec.sandbox, &prepared) {
        (None, _) => "not confined by the kernel (listen.sandbox_script = false)".to_string(),
        (Some(_), None) => format!(
            "not confined by the kernel: {}",
            crate::runtime::landlock::Support::None.describe()
        ),
        (Some(plan), Some(p)) => format!(
            "confined by the kernel ({}): {} paths, TCP ports {:?}",
            p.support.describe(),
            plan.paths.len(),
            plan.ports
        ),
    };
    if let Some(p) = &prepared {
        crate::runtime::landlock::enter_on_exec(&mut cmd, p);
    }
    let group = GroupChild::spawn(&mut cmd).map_err(|e| {
        format!(
            "cannot start {} (in {}): {e}",
            spec.program.display(),
            spec.cwd.display()
        )
    })?;
    drop(prepared);
    Ok((group, confined))
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
    log: &mut RunLog,
) -> ProcessEnd {
    let cancelled = async {
        // A dropped sender means nobody can cancel any more.
        if cancel.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let (end, why) = tokio::select! {
        // An exit that came with the time limit or the stop is an exit, not a kill.
        biased;
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
    let (status, termination) = group.terminate(limits.grace).await;
    match termination {
        // A run the stop interrupted that still exits 0 within its grace finished its turn (a
        // removed profile's, or the listener's stop): completed, not failed. The time limit stays
        // a failure however the run then ends.
        Termination::WithinGrace
            if end == ProcessEnd::Cancelled && status.as_ref().is_ok_and(|s| s.success()) =>
        {
            note(log, "the run ended within the grace, exiting 0");
            return ProcessEnd::Exited(0);
        }
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

/// The run log's summary line of what the run reported (`None`: it reported nothing).
fn reported_line(r: &run_report::RunReport) -> Option<String> {
    let cost = r.cost_usd.map(|c| format!("cost ${c}"));
    let tokens = r.usage.map(|u| {
        format!(
            "tokens {} ({} in, {} of them cached, {} out)",
            u.total(),
            u.input,
            u.cached_input,
            u.output
        )
    });
    let parts: Vec<String> = cost.into_iter().chain(tokens).collect();
    (!parts.is_empty()).then(|| format!("run reported: {}", parts.join(", ")))
}

/// Waits (at most `OUTPUT_DRAIN`) for the relay to reach the end of the run's output, then
/// writes what the cap held back.
async fn finish_output(mut relay: tokio::task::JoinHandle<CappedLog>, log: &mut RunLog) {
    match tokio::time::timeout(OUTPUT_DRAIN, &mut relay).await {
        Ok(Ok(capped)) => capped.finish(),
        Ok(Err(_)) => note(log, "the run's output could not be read to its end"),
        Err(_) => {
            relay.abort();
            note(
                log,
                "the run's output was still open after its process group ended; the rest is not in this log",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::leftover::GroupRecord;

    /// A `sleep` leading its own process group, and the record `run()` would write for it.
    fn sleeper(dir: &Path) -> (std::process::Child, GroupRecord) {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        record_group(&dir.join(RUN_GROUP_FILE), pgid).unwrap();
        let bytes = std::fs::read(dir.join(RUN_GROUP_FILE)).unwrap();
        (child, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn a_leftover_group_is_stopped_only_while_its_recorded_leader_leads_it() {
        let dir = tempfile::tempdir().unwrap();
        // The same group id led by another process (another start time): left alone.
        let (mut other, mut record) = sleeper(dir.path());
        record.leader_start = record.leader_start.map(|t| t + 1);
        std::fs::write(
            dir.path().join(RUN_GROUP_FILE),
            serde_json::to_vec(&record).unwrap(),
        )
        .unwrap();
        stop_leftover_run(dir.path(), Duration::from_secs(1)).await;
        assert!(
            other.try_wait().unwrap().is_none(),
            "another group was signalled"
        );
        assert!(!dir.path().join(RUN_GROUP_FILE).exists());
        let _ = other.kill();
        let _ = other.wait();

        // The recorded leader: stopped, and the record gone.
        let (mut run, _) = sleeper(dir.path());
        stop_leftover_run(dir.path(), Duration::from_secs(5)).await;
        let status = run.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        assert!(!dir.path().join(RUN_GROUP_FILE).exists());
    }

    const RESULT_LINE: &str = r#"{"type":"result","subtype":"success","total_cost_usd":0.25,"usage":{"input_tokens":40,"output_tokens":2}}"#;

    /// A Claude Code run (as far as its report goes) that is `script` in `sh`.
    fn claude_like(script: &str, cwd: &Path) -> RunSpec {
        RunSpec {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: vec![],
            env_remove: vec![],
            env_pass: vec![],
            stdin: None,
            cwd: cwd.to_path_buf(),
            runtime: crate::config::RuntimeKind::ClaudeCode,
            sandbox: None,
            scratch: None,
        }
    }

    async fn run_to_end(spec: &RunSpec, dir: &Path, timeout_ms: u64) -> (RunReport, String) {
        let (_keep, cancel) = watch::channel(false);
        let limits = RunLimits {
            timeout: Duration::from_millis(timeout_ms),
            grace: Duration::from_millis(300),
            log_max: 1 << 20,
        };
        let log = dir.join("run.log");
        let r = run(spec, limits, &log, cancel, || {}).await;
        (r, std::fs::read_to_string(&log).unwrap())
    }

    #[tokio::test]
    async fn a_report_printed_before_the_run_is_killed_still_counts() {
        let dir = tempfile::tempdir().unwrap();
        // Both ignore SIGTERM, so the grace ends in SIGKILL.
        let script = format!("trap '' TERM; printf '%s\\n' '{RESULT_LINE}'; sleep 30");
        let (r, log) = run_to_end(&claude_like(&script, dir.path()), dir.path(), 500).await;
        assert_eq!(r.end, ProcessEnd::TimedOut);
        assert!(log.contains("SIGKILL sent"), "{log}");
        assert_eq!(r.reported.cost_usd, Some(0.25));
        assert_eq!(r.reported.usage.map(|u| u.total()), Some(42));
        let summary = log.lines().last().unwrap();
        assert!(
            summary
                .ends_with("run reported: cost $0.25, tokens 42 (40 in, 0 of them cached, 2 out)"),
            "{log}"
        );
    }

    #[tokio::test]
    async fn a_report_counts_when_the_output_outlives_the_run_and_its_relay_is_abandoned() {
        let dir = tempfile::tempdir().unwrap();
        // The escapee holds the output open past the drain: the relay is aborted.
        let script = format!("printf '%s\\n' '{RESULT_LINE}'; setsid sleep 4 & sleep 0.5; exit 0");
        let (r, log) = run_to_end(&claude_like(&script, dir.path()), dir.path(), 10_000).await;
        assert_eq!(r.end, ProcessEnd::Exited(0));
        assert!(
            log.contains("still open after its process group ended"),
            "{log}"
        );
        assert_eq!(r.reported.cost_usd, Some(0.25));
    }

    #[tokio::test]
    async fn a_run_that_reports_nothing_has_no_summary_line() {
        let dir = tempfile::tempdir().unwrap();
        let (r, log) = run_to_end(&claude_like("echo hello", dir.path()), dir.path(), 10_000).await;
        assert_eq!(r.reported, run_report::RunReport::default());
        assert!(!log.contains("run reported"), "{log}");
    }
}

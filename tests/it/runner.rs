//! The run supervisor against real processes: exit codes, stdin, environment, the time limit with
//! its grace, cancellation, leftover grandchildren, the 0600 log and log pruning.

use crate::common::{eventually, gone_within};
use agentchat::runtime::RunSpec;
use agentchat::runtime::supervisor::{RunLimits, RunReport, prune_logs, run};
use agentchat::sys::process::ProcessEnd;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn sh(script: &str, cwd: &Path) -> RunSpec {
    RunSpec {
        program: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), script.into()],
        env: vec![],
        env_remove: vec![],
        env_pass: vec![],
        stdin: None,
        cwd: cwd.to_path_buf(),
        runtime: agentchat::config::RuntimeKind::Script,
        sandbox: None,
        scratch: None,
    }
}

fn limits(timeout_ms: u64, grace_ms: u64) -> RunLimits {
    RunLimits {
        timeout: Duration::from_millis(timeout_ms),
        grace: Duration::from_millis(grace_ms),
        log_max: 1 << 20,
    }
}

fn never_cancel() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    // Keep the sender alive for the whole test process: a dropped sender must mean "no cancel".
    std::mem::forget(tx);
    rx
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

async fn pid_from(file: &Path) -> i32 {
    assert!(
        eventually(10, || read(file).trim().parse::<i32>().is_ok()).await,
        "the run never wrote {}",
        file.display()
    );
    read(file).trim().parse().unwrap()
}

/// Runs `spec` with limits it never reaches, to its own end.
async fn run_to_end(spec: &RunSpec, log: &Path) -> RunReport {
    run(spec, limits(10_000, 1000), log, never_cancel(), || {}).await
}

/// Runs `spec` to its own end, and says how many times the supervisor reported it started.
async fn run_counting_starts(spec: &RunSpec, log: &Path) -> (RunReport, u32) {
    let started = std::cell::Cell::new(0);
    let r = run(spec, limits(10_000, 1000), log, never_cancel(), || {
        started.set(started.get() + 1)
    })
    .await;
    (r, started.get())
}

/// A time limit long enough that `/bin/sh` has started, forked and installed its traps before it
/// strikes, however loaded the machine (a shorter one can kill the shell before its first line).
const LIMIT_MS: u64 = 3000;

/// A run whose leader starts a long `sleep` in its own group, writes that child's pid to the
/// returned file and waits on it.
fn leader_waiting_on_a_child(dir: &Path) -> (RunSpec, PathBuf) {
    let pidfile = dir.join("child.pid");
    let spec = sh(
        &format!("sleep 300 & echo $! > {}; wait", pidfile.display()),
        dir,
    );
    (spec, pidfile)
}

#[tokio::test]
async fn exit_codes_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-a.log");
    let r = run_to_end(&sh("exit 0", dir.path()), &log).await;
    assert_eq!(r.end, ProcessEnd::Exited(0));
    assert!(r.pid.is_some());
    let r = run_to_end(&sh("exit 7", dir.path()), &log).await;
    assert_eq!(r.end, ProcessEnd::Exited(7));
    let r = run_to_end(&sh("kill -USR1 $$", dir.path()), &log).await;
    assert_eq!(r.end, ProcessEnd::Signalled(libc::SIGUSR1));
}

#[tokio::test]
async fn stdin_is_delivered_then_closed_and_output_goes_to_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-b.log");
    let mut spec = sh("cat; echo; echo stderr-line >&2", dir.path());
    spec.stdin = Some(b"the prompt text\nsecond line".to_vec());
    let r = run_to_end(&spec, &log).await;
    assert_eq!(
        r.end,
        ProcessEnd::Exited(0),
        "cat ended, so stdin was closed"
    );
    let text = read(&log);
    assert!(text.contains("the prompt text\nsecond line"), "{text}");
    assert!(text.contains("stderr-line"), "{text}");

    // Without stdin the child reads /dev/null (EOF at once), not a pipe left open.
    let r = run_to_end(&sh("cat", dir.path()), &log).await;
    assert_eq!(r.end, ProcessEnd::Exited(0));
}

#[tokio::test]
async fn large_stdin_to_a_child_that_never_reads_does_not_block() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-c.log");
    let mut spec = sh("exit 3", dir.path());
    spec.stdin = Some(vec![b'x'; 4 << 20]);
    let r = run(&spec, limits(20_000, 1000), &log, never_cancel(), || {}).await;
    assert_eq!(r.end, ProcessEnd::Exited(3));
}

#[tokio::test]
async fn env_is_set_and_removed_and_systemd_variables_never_pass() {
    // The run inherits this process's environment, which every test of the binary shares: rather
    // than set variables in it (which would reach every other test's children), run this test
    // again in a child of the test binary that has them from the start.
    const NAME: &str = "runner::env_is_set_and_removed_and_systemd_variables_never_pass";
    if std::env::var_os("AGENTCHAT_RUNNER_TEST_DROP").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env("NOTIFY_SOCKET", "/run/notify-test")
            .env("AGENTCHAT_RUNNER_TEST_DROP", "drop-me")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "the child run of {NAME} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-d.log");
    let out = dir.path().join("env.txt");
    let mut spec = sh(
        &format!(
            "echo \"set=$RUNNER_SET notify=${{NOTIFY_SOCKET-unset}} drop=${{AGENTCHAT_RUNNER_TEST_DROP-unset}} path=${{PATH:+yes}}\" > {}",
            out.display()
        ),
        dir.path(),
    );
    spec.env = vec![("RUNNER_SET".into(), "value-1".into())];
    spec.env_remove = vec!["AGENTCHAT_RUNNER_TEST_DROP".into()];
    let r = run_to_end(&spec, &log).await;
    assert_eq!(r.end, ProcessEnd::Exited(0));
    assert_eq!(
        read(&out).trim(),
        "set=value-1 notify=unset drop=unset path=yes"
    );
}

#[tokio::test]
async fn the_run_starts_in_its_cwd_and_in_its_own_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-e.log");
    let out = dir.path().join("pg.txt");
    let spec = sh(
        &format!(
            "echo \"$(pwd) $$ $(ps -o pgid= -p $$)\" > {}",
            out.display()
        ),
        dir.path(),
    );
    let r = run_to_end(&spec, &log).await;
    assert_eq!(r.end, ProcessEnd::Exited(0));
    let text = read(&out);
    let parts: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(parts.len(), 3, "{text}");
    assert_eq!(
        Path::new(parts[0]).canonicalize().unwrap(),
        dir.path().canonicalize().unwrap()
    );
    assert_eq!(
        parts[1], parts[2],
        "pid == pgid: the run leads its own group"
    );
}

#[tokio::test]
async fn timeout_kills_the_leader_and_its_grandchild() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-f.log");
    let (spec, pidfile) = leader_waiting_on_a_child(dir.path());
    let r = run(&spec, limits(LIMIT_MS, 2000), &log, never_cancel(), || {}).await;
    assert_eq!(r.end, ProcessEnd::TimedOut);
    let leader = r.pid.unwrap() as i32;
    let grandchild = pid_from(&pidfile).await;
    assert!(gone_within(5, leader).await, "leader still alive");
    assert!(
        gone_within(5, grandchild).await,
        "grandchild {grandchild} still alive"
    );
    assert!(read(&log).contains("SIGTERM sent to the process group"));
}

#[tokio::test]
async fn a_grandchild_ignoring_sigterm_is_killed_when_the_leader_exits() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-g.log");
    let pidfile = dir.path().join("stubborn.pid");
    // The leader exits at once and normally; its grandchild ignores SIGTERM and would live on.
    let spec = sh(
        &format!(
            "(trap '' TERM; exec sleep 300) & echo $! > {}; exit 0",
            pidfile.display()
        ),
        dir.path(),
    );
    let r = run_to_end(&spec, &log).await;
    assert_eq!(r.end, ProcessEnd::Exited(0));
    let grandchild = pid_from(&pidfile).await;
    assert!(
        gone_within(5, grandchild).await,
        "leftover {grandchild} outlived the run"
    );
}

#[tokio::test]
async fn a_child_that_exits_on_sigterm_within_the_grace_is_timed_out_not_killed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-h.log");
    let spec = sh(
        "trap 'echo got-term; exit 0' TERM; sleep 300 & wait",
        dir.path(),
    );
    let r = run(&spec, limits(LIMIT_MS, 10_000), &log, never_cancel(), || {}).await;
    assert_eq!(r.end, ProcessEnd::TimedOut);
    let text = read(&log);
    assert!(text.contains("got-term"), "the trap ran: {text}");
    assert!(text.contains("ended within the grace"), "{text}");
    assert!(!text.contains("SIGKILL sent"), "{text}");
}

#[tokio::test]
async fn a_child_ignoring_sigterm_gets_sigkill_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-i.log");
    let spec = sh("trap '' TERM; sleep 300", dir.path());
    let r = run(&spec, limits(LIMIT_MS, 300), &log, never_cancel(), || {}).await;
    assert_eq!(r.end, ProcessEnd::TimedOut);
    assert!(gone_within(5, r.pid.unwrap() as i32).await);
    assert!(read(&log).contains("SIGKILL sent to the process group"));
}

#[tokio::test]
async fn cancel_ends_the_run_with_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-j.log");
    let (spec, pidfile) = leader_waiting_on_a_child(dir.path());
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move { run(&spec, limits(60_000, 2000), &log, rx, || {}).await });
    let child = pid_from(&pidfile).await;
    tx.send(true).unwrap();
    let r = task.await.unwrap();
    assert_eq!(r.end, ProcessEnd::Cancelled);
    assert!(gone_within(5, child).await);
    assert!(gone_within(5, r.pid.unwrap() as i32).await);

    // Already cancelled: nothing starts.
    let (_tx, rx) = tokio::sync::watch::channel(true);
    let marker = dir.path().join("started");
    let spec = sh(&format!("touch {}", marker.display()), dir.path());
    let r = run(
        &spec,
        limits(10_000, 1000),
        &dir.path().join("run-k.log"),
        rx,
        || panic!("an already cancelled run is never reported started"),
    )
    .await;
    assert_eq!(r.end, ProcessEnd::Cancelled);
    assert!(r.pid.is_none() && !marker.exists());
}

#[tokio::test]
async fn dropping_the_supervisor_mid_run_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-l.log");
    let (spec, pidfile) = leader_waiting_on_a_child(dir.path());
    let task =
        tokio::spawn(
            async move { run(&spec, limits(60_000, 2000), &log, never_cancel(), || {}).await },
        );
    let child = pid_from(&pidfile).await;
    task.abort();
    let _ = task.await;
    assert!(
        gone_within(5, child).await,
        "the run outlived its supervisor"
    );
}

#[tokio::test]
async fn a_missing_program_or_cwd_is_spawn_failed_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-m.log");
    let mut spec = sh("true", dir.path());
    spec.program = PathBuf::from("/nonexistent/agent-binary");
    let r = run_to_end(&spec, &log).await;
    match &r.end {
        ProcessEnd::SpawnFailed(msg) => assert!(msg.contains("/nonexistent/agent-binary"), "{msg}"),
        other => panic!("expected SpawnFailed, got {other:?}"),
    }
    assert!(r.pid.is_none());
    let mut spec = sh("true", dir.path());
    spec.cwd = dir.path().join("no-such-dir");
    let r = run_to_end(&spec, &log).await;
    assert!(matches!(r.end, ProcessEnd::SpawnFailed(_)), "{:?}", r.end);
}

#[tokio::test]
async fn the_log_is_private_and_holds_no_prompt_or_environment() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("logs/run-n.log");
    let mut spec = sh("true", dir.path());
    spec.stdin = Some(b"PROMPT-MARKER".to_vec());
    spec.env = vec![("AGENTCHAT_API_KEY".into(), "ac_secret_runner_key".into())];
    spec.args.push("ARG-MARKER".into());
    let r = run_to_end(&spec, &log).await;
    assert_eq!(r.end, ProcessEnd::Exited(0));
    assert_eq!(r.log_path, log);
    let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = read(&log);
    assert!(text.starts_with("=== "), "a header line first: {text}");
    assert!(text.contains("run started"), "{text}");
    for secret in ["PROMPT-MARKER", "ac_secret_runner_key", "ARG-MARKER"] {
        assert!(
            !text.contains(secret),
            "{secret} leaked into the log: {text}"
        );
    }
}

#[test]
fn prune_keeps_the_newest_n_run_logs_and_nothing_else_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::time::SystemTime::now() - Duration::from_secs(1000);
    for i in 0..6u64 {
        let p = dir.path().join(format!("run-{i}.log"));
        let f = std::fs::File::create(&p).unwrap();
        f.set_modified(base + Duration::from_secs(i * 10)).unwrap();
    }
    std::fs::write(dir.path().join("status.json"), "{}").unwrap();
    std::fs::write(dir.path().join("run-notes.txt"), "x").unwrap();
    prune_logs(dir.path(), 2).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec!["run-4.log", "run-5.log", "run-notes.txt", "status.json"]
    );
    // Fewer than N: nothing removed; a missing directory is fine.
    prune_logs(dir.path(), 50).unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4);
    prune_logs(&dir.path().join("absent"), 1).unwrap();
}

#[test]
fn log_file_names_sort_by_time_and_keep_only_safe_characters() {
    let name = agentchat::runtime::supervisor::log_file_name("c1/../x y");
    assert!(name.starts_with("run-") && name.ends_with(".log"), "{name}");
    assert!(!name.contains('/') && !name.contains(' '), "{name}");
    assert!(name.ends_with("-c1____x_y.log"), "{name}");
    // The UTC stamp comes first, so names sort by start time.
    let stamp = &name["run-".len()..name.len() - "-c1____x_y.log".len()];
    assert!(stamp.len() == 16 && stamp.ends_with('Z'), "{stamp}");
}

#[tokio::test]
async fn output_past_the_log_cap_keeps_its_head_and_tail_and_never_blocks_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-o.log");
    // 8 MiB of `x` and `y` between a first and a last line, through both stdout and stderr (the
    // last line follows the `y`s on stderr: the two pipes' order against each other is not kept).
    let spec = sh(
        "echo first; head -c 4194304 /dev/zero | tr '\\0' x; head -c 4194304 /dev/zero | tr '\\0' y >&2; echo >&2; echo last >&2",
        dir.path(),
    );
    let mut l = limits(60_000, 1000);
    l.log_max = 256 * 1024;
    let r = run(&spec, l, &log, never_cancel(), || {}).await;
    assert_eq!(r.end, ProcessEnd::Exited(0));
    let text = read(&log);
    assert!(text.len() < 256 * 1024 + 4096, "{} bytes", text.len());
    assert!(text.contains("\nfirst\nxxx"), "the head is kept");
    assert!(
        text.contains("output cut: bytes 131072 to "),
        "where it was cut"
    );
    assert!(text.contains(" of 8388620 left out"), "out of how much");
    assert!(
        text.contains("yyy\nlast\n=== "),
        "the tail is kept, then the footer"
    );
}

#[tokio::test]
async fn a_run_that_closes_its_output_early_still_runs_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-p.log");
    let done = dir.path().join("done");
    let spec = sh(
        &format!(
            "echo before; exec >&- 2>&-; sleep 0.3; echo > {}",
            done.display()
        ),
        dir.path(),
    );
    let r = run_to_end(&spec, &log).await;
    assert_eq!(r.end, ProcessEnd::Exited(0));
    assert!(done.exists(), "the run went on after closing its output");
    assert!(r.duration >= Duration::from_millis(300));
    let text = read(&log);
    assert!(text.contains("before\n"), "{text}");
    assert!(!text.contains("output cut"), "{text}");
}

#[tokio::test]
async fn the_run_is_started_before_its_log_file_is_created() {
    // Creating a file can wait on the filesystem's journal: nothing that can wait comes between a
    // wake and its run, so when the caller hears that the run started, its log does not exist yet.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-order.log");
    let marker = dir.path().join("ran");
    let spec = sh(&format!("echo out; : > '{}'", marker.display()), dir.path());
    let log_at_start = std::cell::Cell::new(None);
    let r = run(&spec, limits(10_000, 1000), &log, never_cancel(), || {
        log_at_start.set(Some(log.exists()))
    })
    .await;
    assert_eq!(
        log_at_start.get(),
        Some(false),
        "on_start ran once, before the log was created"
    );
    assert_eq!(r.end, ProcessEnd::Exited(0));
    assert!(marker.exists());
    let text = read(&log);
    let header = text.find("run started: program /bin/sh").expect(&text);
    let pid = text.find("(its own process group)").expect(&text);
    let output = text.find("\nout\n").expect(&text);
    let end = text.find("run ended: exited with code 0").expect(&text);
    assert!(
        header < pid && pid < output && output < end,
        "in order:\n{text}"
    );
}

#[tokio::test]
async fn a_run_log_that_cannot_be_opened_costs_the_log_not_the_run() {
    let dir = tempfile::tempdir().unwrap();
    // A log path under a file, not a directory: no user (root included) can create it.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let log = blocker.join("run-x.log");
    let marker = dir.path().join("ran");
    // Output on both pipes, more than a pipe holds: the run must not block on unread output.
    let spec = sh(
        &format!(
            "head -c 300000 /dev/zero; head -c 300000 /dev/zero >&2; : > '{}'",
            marker.display()
        ),
        dir.path(),
    );
    let (r, started) = run_counting_starts(&spec, &log).await;
    assert_eq!(started, 1);
    assert_eq!(r.end, ProcessEnd::Exited(0), "the run ran to its end");
    assert!(marker.exists(), "the run did its work");
    assert!(!log.exists());
}

#[tokio::test]
async fn a_program_that_cannot_start_is_spawn_failed_and_still_reported_started_once() {
    // The caller's `run_start` line and counters come with every attempt, as before the run log
    // moved after the spawn: a run that cannot start is then ended as failed.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run-missing.log");
    let mut spec = sh("", dir.path());
    spec.program = dir.path().join("no-such-program");
    let (r, started) = run_counting_starts(&spec, &log).await;
    assert_eq!(started, 1);
    assert!(matches!(r.end, ProcessEnd::SpawnFailed(_)), "{:?}", r.end);
    assert!(read(&log).contains("run not started:"), "{}", read(&log));
}

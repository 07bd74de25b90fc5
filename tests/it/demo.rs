//! `agentchat demo` end to end: the real binary, its in-process local server, the real listener
//! child and the built-in demo agent. Pins the timeline's key lines, the exit code, and that no
//! listener (or its state dir) is left behind on success or failure.

use crate::common::{self, gone_within_blocking};
use std::process::{Command, Output};

fn run_demo(extra_env: &[(&str, &str)]) -> (Output, u32) {
    run_demo_with(&[], extra_env)
}

fn run_demo_with(args: &[&str], extra_env: &[(&str, &str)]) -> (Output, u32) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentchat"));
    cmd.arg("demo")
        .args(args)
        .env_remove("AGENTCHAT_API_KEY")
        .env_remove("AGENTCHAT_CONFIG");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start agentchat demo");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for agentchat demo");
    (out, pid)
}

/// The listener's pid, from the timeline line `agentchat listen spawned for @bob (pid N)`.
fn listener_pid(stdout: &str) -> i32 {
    let line = stdout
        .lines()
        .find(|l| l.contains("agentchat listen spawned"))
        .unwrap_or_else(|| panic!("no spawn line in:\n{stdout}"));
    line.rsplit("(pid ")
        .next()
        .and_then(|s| s.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line}"))
}

fn assert_nothing_left(demo_pid: u32, listener: i32) {
    assert!(
        gone_within_blocking(5.0, listener),
        "listener {listener} is still running"
    );
    let prefix = format!("agentchat-demo-{demo_pid}-");
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "scratch dir left behind: {left:?}");
}

#[test]
fn demo_runs_the_whole_loop_and_exits_zero_leaving_nothing_behind() {
    let (out, demo_pid) = run_demo(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for needle in [
        "alice     sent a message to @bob",
        "listener  wake (message",
        "listener  cycle ",
        "run started for cycle",
        "run       sent answer",
        "run       recorded reply",
        "listener  run completed",
        "@bob's tray is empty: the answer went out",
        "alice     invited @bob",
        "wake (invite)",
        "run       left invite",
        "left pending by a completed run: counted",
        "left pending by two runs: dismissed on the server",
        "@bob's tray is empty: no conversation, no invite",
        "listener  exited 0",
        "demo finished",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    // The order of the story: answer before the invite, counted before dismissed.
    let pos = |s: &str| stdout.find(s).unwrap();
    assert!(pos("recorded reply") < pos("invited @bob"));
    assert!(pos("counted") < pos("dismissed on the server"));
    assert_nothing_left(demo_pid, listener_pid(&stdout));
}

/// Issue 34: the example agent shipped for the script runtime (`examples/agent.py`, Python's
/// standard library only) answers through the REST API in the demo's loop as the built-in agent
/// does: the answer sent, the verdict recorded, the invite left alone, the tray empty.
#[test]
fn the_example_script_agent_answers_through_the_rest_api_in_the_demo() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/agent.py");
    let (out, demo_pid) = run_demo_with(&["--script", example], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo with the example failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for needle in [
        "run       sent answer",
        "run       recorded reply",
        "run       left invite",
        "@bob's tray is empty: no conversation, no invite",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    assert_nothing_left(demo_pid, listener_pid(&stdout));
}

#[test]
fn a_failing_agent_run_fails_the_demo_with_a_reason_and_stops_the_listener() {
    let (out, demo_pid) = run_demo(&[("AGENTCHAT_DEMO_AGENT_FAIL", "1")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("agentchat demo: the demo failed: the demo agent's run failed"),
        "{stderr}"
    );
    assert!(stdout.contains("listener  exited 0"), "{stdout}");
    assert_nothing_left(demo_pid, listener_pid(&stdout));
}

#[test]
fn a_demo_killed_outright_still_stops_its_listener() {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentchat"))
        .arg("demo")
        .env_remove("AGENTCHAT_API_KEY")
        .env_remove("AGENTCHAT_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start agentchat demo");
    let demo_pid = child.id();
    let mut seen = String::new();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let listener = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the demo ended before spawning its listener:\n{seen}"))
            .unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("agentchat listen spawned") {
            break listener_pid(&line);
        }
    };
    // SIGKILL: no Drop, no signal handler runs in the demo.
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = gone_within_blocking(15.0, listener);
    if !gone {
        // Cleaning up the listener this test caused to be left behind.
        common::signal(listener, libc::SIGKILL);
    }
    // The killed demo could not remove its scratch dir; this test does.
    let prefix = format!("agentchat-demo-{demo_pid}-");
    for e in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    assert!(gone, "listener {listener} outlived the killed demo");
}

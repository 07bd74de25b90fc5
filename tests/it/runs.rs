//! Issue 35: `agentchat runs` through the real binary, reading what a real listener wrote against
//! the sim: a completed run, a failing one, a restart, and the hold the restarted listener's caps
//! (built from the same history) put on the next message; `--json`, `--failed`, `show`, the
//! day's footer, `--follow`. No message text anywhere.

use crate::listen_support::*;
use serde_json::Value;
use std::process::Output;

fn opts() -> Opts {
    Opts {
        time_scale: 10.0,
        extra_env: vec![("TZ".to_string(), "UTC0".to_string())],
        extra_toml: "\n[listen.policy]\nmax_runs_per_day = 2\n".into(),
        ..Opts::default()
    }
}

/// `agentchat runs ARGS` for the setup's profile.
fn runs(setup: &Setup, args: &[&str]) -> Output {
    crate::common::isolated_command(BIN, &[])
        .arg("runs")
        .args(args)
        .env("TZ", "UTC0")
        .env("AGENTCHAT_CONFIG", &setup.config)
        .env("AGENTCHAT_STATE_DIR", &setup.state_dir)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json_lines(setup: &Setup, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    stdout(&runs(setup, &all))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The history's run `n` (oldest first) once it ended.
async fn ended_runs(setup: &Setup, n: usize) -> Vec<Value> {
    let done = || {
        json_lines(setup, &["--limit", "0"])
            .into_iter()
            .filter(|r| r["kind"] == "run" && r["outcome"] != "running")
            .count()
            >= n
    };
    assert!(eventually(20.0, done).await, "{:?}", json_lines(setup, &[]));
    json_lines(setup, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_lists_a_completed_run_a_failed_one_and_the_hold_a_restart_counted_them_into() {
    let o = opts();
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let carol = sim.agent("carol").await;
    let dave = sim.agent("dave").await;
    let bob = sim.agent("bob").await;
    let setup = Setup::new(&o);
    assert!(
        stdout(&runs(&setup, &[])).contains("no run or hold yet"),
        "a profile that never ran"
    );
    let mut l = Listener::start(&sim, &bob, &setup, &o);
    connect_cycle_ended(&l).await;
    sim.send(&alice, &bob, "body one is private").await;
    ended_runs(&setup, 1).await;
    setup.rec.set("exit", "3");
    sim.send(&carol, &bob, "body two is private").await;
    let listed = ended_runs(&setup, 2).await;
    l.signal(libc::SIGTERM);
    assert_eq!(l.wait_exit(10.0), Some(0), "{}", l.log());

    // A new listener: its caps are the history's two runs, so the cards still waiting are held.
    let l = Listener::start(&sim, &bob, &setup, &o);
    assert!(
        eventually(20.0, || setup.status()["held"]["reason"] == "runs_per_day").await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    sim.send(&dave, &bob, "body three is private").await;
    assert!(
        eventually_async(10.0, || async { sim.acks(&bob).await.len() >= 3 }).await,
        "{}",
        l.log()
    );

    let all = json_lines(&setup, &[]);
    assert_eq!(all.len(), 3, "{all:#?}");
    let (hold, failed, completed) = (&all[0], &all[1], &all[2]);
    for r in &all {
        for key in [
            "started_at",
            "profile",
            "reason",
            "senders",
            "outcome",
            "duration_ms",
            "cost_usd",
            "tokens",
            "log",
        ] {
            assert!(r.get(key).is_some(), "{key} in {r}");
        }
        assert_eq!(r["profile"], "default");
    }
    assert_eq!(completed["outcome"], "completed");
    assert_eq!(completed["senders"], serde_json::json!(["@alice"]));
    assert_eq!(completed["reason"], "message");
    assert!(completed["duration_ms"].as_u64().is_some(), "{completed}");
    assert_eq!(failed["outcome"], "failed");
    assert_eq!(failed["exit"], 3);
    let senders = failed["senders"].as_array().unwrap();
    assert!(senders.contains(&"@carol".into()), "{failed}");
    assert_eq!(failed["cards"], 2, "alice's card waited still: {failed}");
    assert_eq!(hold["kind"], "hold");
    assert_eq!(hold["hold"]["reason"], "runs_per_day");
    assert_eq!(hold["reason"], "connect");
    assert_eq!(listed.len(), 2, "the listing before the restart");

    let text = stdout(&runs(&setup, &[]));
    for part in [
        "held: runs_per_day",
        "; until ",
        "failed (exit 3)",
        "completed",
        "from @alice",
        "today: 2 runs (1 failed), 1 hold",
    ] {
        assert!(text.contains(part), "{part:?} in\n{text}");
    }
    let failed_only = json_lines(&setup, &["--failed"]);
    assert_eq!(failed_only.len(), 1);
    assert_eq!(failed_only[0]["id"], failed["id"]);
    assert!(json_lines(&setup, &["--since", "2026-01-01"]).len() == 3);
    assert!(json_lines(&setup, &["--since", "2099-01-01", "--failed"]).is_empty());

    let id = failed["id"].as_str().unwrap();
    let shown = stdout(&runs(&setup, &["show", &id[..id.len() - 2]]));
    assert!(shown.contains(&format!("id            {id}")), "{shown}");
    assert!(shown.contains("failed (exit 3)"), "{shown}");
    assert!(shown.contains("run 2 started"), "the log's tail: {shown}");
    let missing = runs(&setup, &["show", "nope"]);
    assert_eq!(missing.status.code(), Some(1));

    let history = std::fs::read_to_string(setup.state_dir.join("history.jsonl")).unwrap();
    for (what, said) in [("history", &history), ("runs", &text)] {
        assert!(!said.contains("private"), "no message body in the {what}");
    }
}

/// `--follow` prints a run once it ends, while the listener runs, without a second invocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_follow_prints_a_run_as_it_ends() {
    let o = Opts {
        time_scale: 10.0,
        ..Opts::default()
    };
    let Scene {
        sim,
        alice,
        bob,
        setup,
        l,
    } = bob_listening(&o).await;
    let out_path = setup.tmp.path().join("follow.out");
    let mut follow = crate::common::isolated_command(BIN, &[])
        .args(["runs", "--follow", "--json"])
        .env("AGENTCHAT_CONFIG", &setup.config)
        .env("AGENTCHAT_STATE_DIR", &setup.state_dir)
        .stdout(std::fs::File::create(&out_path).unwrap())
        .spawn()
        .unwrap();
    sim.send(&alice, &bob, "hello").await;
    let printed = || {
        std::fs::read_to_string(&out_path)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("\"outcome\":\"completed\""))
    };
    let seen = eventually(20.0, printed).await;
    crate::common::signal(follow.id() as i32, libc::SIGINT);
    let status = follow.wait().unwrap();
    assert!(
        seen,
        "{}\n{}",
        std::fs::read_to_string(&out_path).unwrap(),
        l.log()
    );
    assert!(status.success(), "{status:?}");
    let lines = std::fs::read_to_string(&out_path).unwrap();
    assert_eq!(
        lines.lines().filter(|l| l.contains("completed")).count(),
        1,
        "once: {lines}"
    );
}

//! The fault suite: the real `agentchat listen` against the sim while something goes wrong around
//! it (the listener killed mid-run, a socket cut again and again, a run that floods or closes its
//! output, a state dir that fills up or turns read-only). Each test names the behaviour it pins;
//! waits poll an observable condition with a deadline, and every loop is bounded in count and time.

use crate::listen_support::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The usual scene: the sim, `alice` who writes, `bob` whose listener's files are in `setup`.
async fn alice_and_bob(time_scale: f64) -> (Sim, Agent, Agent) {
    let sim = Sim::start(time_scale).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    (sim, alice, bob)
}

/// Replaces the recorder's run with `body`, keeping its bookkeeping: run `$n` writes `start.$n`
/// and `end.$n` (nanoseconds since the epoch, its own start and end records) and `done.$n`.
fn script_run(setup: &Setup, body: &str) {
    let script = format!(
        r#"#!/bin/sh
d='{d}'
n=$(( $(cat "$d/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$d/count.tmp" && mv "$d/count.tmp" "$d/count"
date +%s%N > "$d/start.$n"
{body}
date +%s%N > "$d/end.$n"
echo "$n" > "$d/done.$n"
"#,
        d = setup.rec.dir.display()
    );
    std::fs::write(&setup.rec.script, script).unwrap();
}

/// The message's id from the sim's answer to a send.
fn message_id(sent: &Value) -> String {
    sent["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the send answer has an id: {sent}"))
        .to_string()
}

/// Whether the sim has an ack from `agent` for every id in `ids`.
async fn all_acked(sim: &Sim, agent: &Agent, ids: &[String]) -> bool {
    let acks = sim.acks(agent).await;
    ids.iter()
        .all(|id| acks.iter().any(|a| a["message_id"] == id.as_str()))
}

/// Waits up to `secs` for every message in `ids` to be acked.
async fn acked_within(sim: &Sim, agent: &Agent, ids: &[String], secs: f64, l: &Listener) {
    assert!(
        eventually_async(secs, || all_acked(sim, agent, ids)).await,
        "not every message was acked: {ids:?}\nacks: {:?}\n{}",
        sim.acks(agent).await,
        l.log()
    );
}

/// A field of `/proc/<pid>/status` in KiB.
fn status_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// The listener's resident set may stay under 16 MiB whatever a run writes. A release build
/// keeps about 7.5 MiB of it in file-backed pages (its code and libraries, measured idle);
/// the debug build under test has about 14 MiB of code alone. So the test bounds what the
/// listener itself holds: its peak resident set (`VmHWM`, counted by the kernel over its whole
/// life) less its file-backed pages must stay under 16 MiB less 8 MiB.
const MAX_RSS_KIB: u64 = 16 * 1024;
const RELEASE_FILE_BACKED_KIB: u64 = 8 * 1024;

/// Asserts the bound above on the listener `pid`.
fn assert_listener_memory_bounded(pid: i32) {
    let (peak, file) = (status_kib(pid, "VmHWM"), status_kib(pid, "RssFile"));
    let held = peak.saturating_sub(file);
    assert!(
        held + RELEASE_FILE_BACKED_KIB < MAX_RSS_KIB,
        "the listener held {held} KiB at its peak (peak RSS {peak} KiB, {file} KiB of it \
         file-backed); with a release build's {RELEASE_FILE_BACKED_KIB} KiB of code that is \
         over {MAX_RSS_KIB} KiB"
    );
}

/// The run logs in the state dir, oldest first.
fn run_logs(setup: &Setup) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(setup.state_dir.join("runs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect()
        })
        .unwrap_or_default();
    logs.sort();
    logs
}

// ---------------------------------------------------------------------------------------------
// The listener killed mid-run.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_9_mid_run_the_restart_ends_the_killed_runs_group_before_the_waiting_card_runs_again()
 {
    let opts = Opts::default();
    let (sim, alice, bob) = alice_and_bob(1.0).await;
    let setup = Setup::new(&opts);
    // Run 1 sleeps with a background grandchild in its group; each run first records which of the
    // processes named in `watch` are still alive (not zombies) as it starts.
    setup.rec.set("grandchild", "1");
    setup.rec.set("sleep", "300");
    let script = std::fs::read_to_string(&setup.rec.script).unwrap();
    let (shebang_and_dir, rest) = script.split_at(script.find("\nif [ -f").unwrap() + 1);
    let probe = r#"for p in $(cat "$d/watch" 2>/dev/null); do
  s=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -c1)
  if [ -n "$s" ] && [ "$s" != Z ]; then echo "$p" >> "$d/overlap"; fi
done
"#;
    std::fs::write(&setup.rec.script, format!("{shebang_and_dir}{probe}{rest}")).unwrap();

    let mut first = Listener::start(&sim, &bob, &setup, &opts);
    connect_cycle_ended(&first).await;
    sim.send(&alice, &bob, "are you there?").await;
    assert!(
        eventually(15.0, || !setup.rec.file("grandchild", 1).is_empty()).await,
        "run 1 never started its grandchild:\n{}",
        first.log()
    );
    let pid = |name| setup.rec.file(name, 1).trim().parse::<i32>().unwrap();
    let (run, grandchild) = (pid("pid"), pid("grandchild"));

    first.signal(libc::SIGKILL);
    assert!(first.wait_exit(10.0).is_some(), "the listener died");
    assert!(
        !is_gone(run) && !is_gone(grandchild),
        "a SIGKILLed listener cannot end its run: the group outlives it"
    );

    std::fs::write(setup.rec.dir.join("watch"), format!("{run} {grandchild}")).unwrap();
    std::fs::remove_file(setup.rec.dir.join("sleep")).unwrap();
    let second = Listener::spawn(listener_command(&sim, &bob, &setup, &opts), &setup, "-2");
    assert!(
        eventually(30.0, || setup.rec.done(2)).await,
        "the card that waited got no run after the restart:\n{}",
        second.log()
    );
    let overlap = std::fs::read_to_string(setup.rec.dir.join("overlap")).unwrap_or_default();
    assert!(
        overlap.is_empty(),
        "run 2 started while the killed run's processes {overlap:?} still lived:\n{}",
        second.log()
    );
    assert!(is_gone(run) && is_gone(grandchild));
    assert_eq!(setup.rec.count(), 2, "one run after the restart");
}

// ---------------------------------------------------------------------------------------------
// 500 socket closes across a stream of messages.

/// Parses the listener's JSON log into its events, in the order they were written.
fn log_events(l: &Listener) -> Vec<Value> {
    l.log()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|v| v.get("event").is_some())
        .collect()
}

/// Whether `agent` has a live socket at the sim.
async fn has_socket(sim: &Sim, agent: &Agent) -> bool {
    let v = sim.get("/_sim/agents").await;
    as_list(&v, "agents").iter().any(|a| {
        a["handle"] == format!("@{}", agent.handle) && a["sockets"].as_u64().unwrap_or(0) > 0
    })
}

/// Sets `agent`'s connect budget per (server) minute.
async fn connect_budget(sim: &Sim, agent: &Agent, per_minute: u64) {
    sim.post(
        &format!("/_sim/agents/{}/budget", agent.handle),
        json!({ "connects_per_minute": per_minute, "connects_per_hour": 1_000_000 }),
    )
    .await;
}

/// How many of `agent`'s connect attempts the sim refused.
async fn refused_connects(sim: &Sim, agent: &Agent) -> usize {
    let connects = sim.connects(agent).await;
    connects.len() - accepted(&connects)
}

/// Closes `agent`'s sockets with one of the storm's codes at random; whether one was open. A
/// `1013` here carries no `retry_after`: it is the ordinary backoff (contract 3.4).
async fn close_at_random(sim: &Sim, agent: &Agent) -> bool {
    const CODES: [u16; 5] = [1000, 1001, 1006, 1011, 1013];
    let code = CODES[fastrand::usize(0..CODES.len())];
    let closed = sim
        .post(
            &format!("/_sim/agents/{}/sockets/close", agent.handle),
            json!({ "code": code, "reason": "fault suite" }),
        )
        .await;
    closed["closed"].as_u64().unwrap_or(0) > 0
}

/// The value of the sample `name` whose labels include every pair of `labels` on a metrics page
/// (the format itself is checked in `metrics.rs`); 0 when there is none.
fn sample(page: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    let hits: Vec<u64> = page
        .lines()
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?.strip_prefix('{')?;
            labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
                .then(|| value.parse::<f64>().ok())?
        })
        .map(|v| v as u64)
        .collect();
    assert!(hits.len() <= 1, "{name} {labels:?} matches {hits:?}");
    hits.first().copied().unwrap_or(0)
}

/// A connect-log entry's monotonic time at the sim, in microseconds.
fn mono_us(entry: &Value) -> u64 {
    entry["mono_us"]
        .as_u64()
        .unwrap_or_else(|| panic!("no mono_us in {entry}"))
}

/// When message `id` first appears in one of the sim's logs (`sends`, `acks`): `mono_us`.
fn first_mono_us(entries: &[Value], id: &str, what: &str) -> u64 {
    entries
        .iter()
        .filter(|e| e["message_id"] == id)
        .map(mono_us)
        .min()
        .unwrap_or_else(|| panic!("{id} was never {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_socket_closes_lose_no_ack_leave_no_wake_without_a_later_cycle_never_overlap_runs_and_never_wake_on_a_refused_connect()
 {
    const CLOSES: usize = 500;
    const MESSAGES: usize = 100;
    // Every 100 closes (from the 50th) the budget is cut to one connect a minute for the next
    // attempt: a refused connect (1013 retry_after) at five random moments of the storm.
    const REFUSE_EVERY: usize = 100;
    const REFUSALS: usize = CLOSES / REFUSE_EVERY;
    // Out of the refusals, the connect budget never binds: the sim allows this many connects a
    // minute (at sim time scale 60, a second).
    const OPEN_BUDGET: u64 = 1_000;
    // The listener's ordinary backoff (1 s doubling to 60 s) runs 1000 times faster on loopback;
    // the server's retry_after never does.
    let opts = Opts {
        quiet: "20ms",
        max_delay: "1s",
        time_scale: 1000.0,
        ..Opts::default()
    };
    // At sim time scale 60 a server minute is a real second, so a cut budget refuses with
    // retry_after=1, and 500 connects stay inside the per-IP budget of 300 a (server) minute.
    let (sim, alice, bob) = alice_and_bob(60.0).await;
    connect_budget(&sim, &bob, OPEN_BUDGET).await;
    let setup = Setup::new(&opts);
    // Each run says when it starts and ends in one shared file, appending (so two runs at once
    // could not hide each other), and lasts long enough for an overlap to show.
    script_run(
        &setup,
        r#"echo "start $$ $(date +%s%N)" >> "$d/runs.log"
sleep 0.05
echo "end $$ $(date +%s%N)" >> "$d/runs.log""#,
    );
    let mut cmd = listener_command(&sim, &bob, &setup, &opts);
    cmd.env("AGENTCHAT_METRICS_ADDR", "127.0.0.1:0");
    let l = Listener::spawn(cmd, &setup, "");
    let metrics_base = metrics_base(&l).await;
    connect_cycle_ended(&l).await;
    let storm_started = Instant::now();

    let storm_deadline = storm_started + Duration::from_secs(240);
    let sender = {
        let (sim_base, alice_key, bob_handle) =
            (sim.api_base.clone(), alice.key.clone(), bob.handle.clone());
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut ids = Vec::new();
            for i in 0..MESSAGES {
                tokio::time::sleep(Duration::from_millis(fastrand::u64(0..400))).await;
                let v: Value = http
                    .post(format!("{sim_base}/v1/messages"))
                    .bearer_auth(&alice_key)
                    .json(&json!({
                        "to": bob_handle,
                        "client_msg_id": format!("storm-{i}"),
                        "content": { "text": format!("storm {i}") },
                    }))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                ids.push(message_id(&v));
            }
            ids
        })
    };

    let (mut closes, mut refusals) = (0, 0);
    while closes < CLOSES {
        assert!(
            Instant::now() < storm_deadline,
            "only {closes} closes in 240 s:\n{}",
            l.log()
        );
        // Wait (polling, bounded) for a live socket, then close it at a random moment.
        let up_by = Instant::now() + Duration::from_secs(20);
        while !has_socket(&sim, &bob).await {
            assert!(Instant::now() < up_by, "no socket for 20 s:\n{}", l.log());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..40))).await;
        if closes < REFUSE_EVERY / 2 + refusals * REFUSE_EVERY {
            closes += usize::from(close_at_random(&sim, &bob).await);
            continue;
        }
        // The next attempt meets a budget of one connect a minute, which the last connect (well
        // under a second ago) filled: refused. Should it come a second late and be let in, it
        // is closed again until one is refused. Then the budget opens again; the listener still
        // waits the retry_after it was given.
        let refused_before = refused_connects(&sim, &bob).await;
        connect_budget(&sim, &bob, 1).await;
        closes += usize::from(close_at_random(&sim, &bob).await);
        let refused_by = Instant::now() + Duration::from_secs(20);
        while refused_connects(&sim, &bob).await == refused_before {
            assert!(
                Instant::now() < refused_by,
                "no refused connect in 20 s:\n{}",
                l.log()
            );
            if has_socket(&sim, &bob).await {
                closes += usize::from(close_at_random(&sim, &bob).await);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        connect_budget(&sim, &bob, OPEN_BUDGET).await;
        refusals += 1;
    }
    let storm = storm_started.elapsed();
    let ids = sender.await.unwrap();

    // Every message is acked once it is delivered (the sim keeps it until the ack, and sends it
    // again on every connect): each is acked, after it was sent on a socket, and none is left
    // stored.
    acked_within(&sim, &bob, &ids, 60.0, &l).await;
    let (acks, sends) = (sim.acks(&bob).await, {
        let v = sim.get(&format!("/_sim/agents/{}/sends", bob.handle)).await;
        as_list(&v, "sends")
    });
    for id in &ids {
        let first_send = first_mono_us(&sends, id, "sent on a socket");
        let first_ack = first_mono_us(&acks, id, "acked");
        assert!(first_ack >= first_send, "{id} acked before it was sent");
    }
    assert!(
        acks.iter().all(|a| a["known"] == true),
        "an ack for a message the sim never sent bob: {acks:?}"
    );
    let state = sim.get(&format!("/_sim/agents/{}/state", bob.handle)).await;
    let stored = as_list(&state, "received")
        .iter()
        .filter(|m| m["status"] == "stored")
        .count();
    assert_eq!(stored, 0, "messages still stored: {state}");

    // Every wake (a frame's, or a socket coming up) is followed by a cycle that starts after it:
    // once the last one is, every earlier one is too; the listener is idle again at the end. Seen
    // in the log (the socket task logs a wake before handing it over, the cycle task its start)
    // and in status.json (the main loop's own times of the last wake and the last cycle start).
    let idle_deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = setup.status();
        let (wake_at, start_at) = (
            status["last_wake"]["at"].as_str(),
            status["last_cycle"]["started_at"].as_str(),
        );
        let events = log_events(&l);
        let last = |names: &[&str]| {
            events
                .iter()
                .rposition(|e| names.contains(&e["event"].as_str().unwrap_or("")))
        };
        let last_wake = last(&["wake", "socket_connected"]);
        let last_start = last(&["cycle_start"]);
        let idle = l.count("cycle_start") == l.count("cycle_end");
        if idle && last_start > last_wake && wake_at.is_some() && start_at >= wake_at {
            break;
        }
        assert!(
            Instant::now() < idle_deadline,
            "a wake with no cycle after it (last wake at event {last_wake:?}, last cycle start \
             at {last_start:?}; status: last wake {wake_at:?}, last cycle start {start_at:?}):\n{}",
            l.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Never two runs at once, from the runs' own start and end records: they alternate, each
    // end the same run's as the start before it, in time order; and every run the listener
    // ended wrote both.
    let records = std::fs::read_to_string(setup.rec.dir.join("runs.log")).unwrap();
    let records: Vec<(&str, &str, u128)> = records
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 3, "a run record {line:?}");
            (f[0], f[1], f[2].parse().unwrap())
        })
        .collect();
    assert!(records.len() >= 2, "no run during the storm:\n{}", l.log());
    for (i, pair) in records.windows(2).enumerate() {
        let ((what, pid, at), (next, next_pid, next_at)) = (pair[0], pair[1]);
        let ok = match what {
            "start" => next == "end" && next_pid == pid,
            _ => next == "start",
        };
        assert!(
            ok && next_at >= at && i % 2 == usize::from(what == "end"),
            "two runs at once: record {i} {what} {pid}, then {next} {next_pid}"
        );
    }
    assert_eq!(
        records.len(),
        2 * l.count("run_end"),
        "each run the listener ended recorded its start and end"
    );

    // The budget refusals: exactly the ones the test caused; no attempt came before its
    // retry_after, and none waited much past it (the ordinary part a refusal also waits is
    // scaled; unscaled it would be 30-60 s by now).
    let connects = sim.connects(&bob).await;
    let refused: Vec<usize> = (0..connects.len())
        .filter(|&i| !is_accepted(&connects[i]))
        .collect();
    assert_eq!(refused.len(), REFUSALS, "{connects:?}");
    let mut budget_waits = Duration::ZERO;
    for &i in &refused {
        let reason = connects[i]["reason"].as_str().unwrap_or("");
        let retry_after = agentchat::core::reconnect::parse_retry_after(reason)
            .unwrap_or_else(|| panic!("a refusal without retry_after: {}", connects[i]));
        let next = connects
            .get(i + 1)
            .unwrap_or_else(|| panic!("no attempt after the refusal {}", connects[i]));
        let waited = Duration::from_micros(mono_us(next) - mono_us(&connects[i]));
        let hint = Duration::from_secs(retry_after);
        assert!(
            waited >= hint,
            "an attempt {waited:?} after a refusal with retry_after={retry_after}"
        );
        assert!(
            waited <= hint.mul_f64(1.1) + Duration::from_secs(2),
            "an attempt only {waited:?} after a refusal with retry_after={retry_after}: the \
             ordinary backoff it also waits was not scaled"
        );
        budget_waits += waited;
    }

    // No cycle is caused by a refused connect: a connect wakes (and counts) only once the socket
    // is up. The listener's own counts, from its metrics: its connect wakes are exactly the
    // connects the sim accepted (one each), and the refusals it met are exactly the sim's. Its
    // log and status.json agree.
    let metrics = reqwest::get(format!("{metrics_base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let connect_wakes = sample(&metrics, "agentchat_wakes_total", &[("reason", "connect")]);
    assert_eq!(
        connect_wakes,
        accepted(&connects) as u64,
        "connect wakes vs connects the sim accepted (it refused {})",
        refused.len()
    );
    let budget_refusals = sample(
        &metrics,
        "agentchat_socket_connects_total",
        &[("result", "refused"), ("kind", "connect_budget")],
    );
    assert_eq!(budget_refusals, REFUSALS as u64, "{metrics}");
    let came_up = log_events(&l)
        .iter()
        .filter(|e| e["event"] == "socket_connected")
        .count();
    assert_eq!(
        came_up,
        accepted(&connects),
        "sockets up vs connects accepted"
    );
    assert!(
        eventually(5.0, || setup.status()["counters"]["connects"]
            == accepted(&connects) as u64)
        .await,
        "status counts {} connects, the sim accepted {}",
        setup.status()["counters"]["connects"],
        accepted(&connects),
    );
    eprintln!(
        "storm: {CLOSES} closes in {storm:.1?}, {} connects ({} refused, {budget_waits:.1?} \
         waited on them), {} runs, {} acks",
        connects.len(),
        refused.len(),
        records.len() / 2,
        acks.len()
    );
}

// ---------------------------------------------------------------------------------------------
// A run that floods its output, and one that closes it early.

/// A run script that, in run 1 only, does `first` and then waits (bounded) for the test's
/// `release` file, so the test can check the listener while the run is still alive.
fn held_first_run(setup: &Setup, first: &str) {
    script_run(
        setup,
        &format!(
            r#"if [ "$n" = 1 ]; then
{first}
i=0; while [ ! -f "$d/release" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
fi"#
        ),
    );
}

/// Sends `count` messages from `alice` to `bob`; their ids.
async fn send_some(sim: &Sim, alice: &Agent, bob: &Agent, count: usize, what: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..count {
        ids.push(message_id(
            &sim.send(alice, bob, &format!("{what} {i}")).await,
        ));
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_writing_100_mb_to_stdout_and_stderr_leaves_the_listener_under_16_mib_acking_and_its_log_capped_where_it_says()
 {
    let opts = Opts::default();
    let (sim, alice, bob) = alice_and_bob(1.0).await;
    let setup = Setup::new(&opts);
    held_first_run(
        &setup,
        "echo first-line
head -c 100000000 /dev/zero | tr '\\0' o
head -c 100000000 /dev/zero | tr '\\0' e >&2
echo >&2; echo last-line >&2
: > \"$d/flooded\"",
    );
    let l = Listener::start(&sim, &bob, &setup, &opts);
    connect_cycle_ended(&l).await;
    let mut ids = send_some(&sim, &alice, &bob, 1, "flood").await;
    assert!(
        eventually(15.0, || recorded(&setup, "start.1")).await,
        "run 1 never started:\n{}",
        l.log()
    );
    // While the run writes (and then waits), messages are still acked.
    ids.extend(send_some(&sim, &alice, &bob, 3, "during the flood").await);
    acked_within(&sim, &bob, &ids, 30.0, &l).await;
    assert!(
        eventually(50.0, || recorded(&setup, "flooded")).await,
        "the run never got its 200 MB out:\n{}",
        l.log()
    );
    // The flood is through; the run is still alive, held by the test: messages are still acked.
    ids.extend(send_some(&sim, &alice, &bob, 3, "after the flood").await);
    acked_within(&sim, &bob, &ids, 15.0, &l).await;
    assert!(!setup.rec.done(1), "run 1 is still alive, held by the test");
    std::fs::write(setup.rec.dir.join("release"), "").unwrap();
    assert!(eventually(15.0, || setup.rec.done(1)).await);
    assert!(
        eventually(15.0, || l.count("run_end") >= 1).await,
        "{}",
        l.log()
    );

    let log = run_logs(&setup).remove(0);
    assert_listener_memory_bounded(l.pid());
    let text = std::fs::read(&log).unwrap();
    let cap = 2 * 1024 * 1024;
    assert!(
        text.len() < cap + 4096,
        "the run log holds {} bytes (cap {cap})",
        text.len()
    );
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("first-line\nooo"), "the head is kept");
    let total = 11 + 100_000_000 + 100_000_000 + 1 + 10;
    assert!(
        text.contains(&format!(
            "output cut: bytes 1048576 to {} of {total} left out",
            total - 1024 * 1024
        )),
        "the log says where it was cut:\n{}",
        text.lines()
            .filter(|l| l.starts_with("==="))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // `last-line` follows the `e`s on stderr, so nothing on stdout can come between them.
    assert!(text.contains("eee\nlast-line\n=== "), "the tail is kept");
    assert_eq!(
        l.events("run_end")[0]["outcome"],
        "completed",
        "run 1 is judged as usual"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_closes_stdout_and_stderr_early_is_not_ended_by_it_and_the_listener_keeps_acking()
 {
    let opts = Opts::default();
    let (sim, alice, bob) = alice_and_bob(1.0).await;
    let setup = Setup::new(&opts);
    held_first_run(&setup, "echo before-closing\nexec >&- 2>&-");
    let l = Listener::start(&sim, &bob, &setup, &opts);
    connect_cycle_ended(&l).await;
    let mut ids = send_some(&sim, &alice, &bob, 1, "close early").await;
    assert!(
        eventually(15.0, || recorded(&setup, "start.1")).await,
        "run 1 never started:\n{}",
        l.log()
    );
    ids.extend(send_some(&sim, &alice, &bob, 3, "after the close").await);
    acked_within(&sim, &bob, &ids, 15.0, &l).await;
    assert!(
        never(1.0, || setup.rec.done(1) || l.count("run_end") > 0).await,
        "closing its output did not end the run"
    );
    std::fs::write(setup.rec.dir.join("release"), "").unwrap();
    assert!(
        eventually(15.0, || l.count("run_end") >= 1).await,
        "{}",
        l.log()
    );
    assert_eq!(l.events("run_end")[0]["outcome"], "completed");
    assert!(setup.rec.done(1), "the run went on to its own end");
    let log = std::fs::read_to_string(run_logs(&setup).remove(0)).unwrap();
    assert!(log.contains("before-closing\n"), "{log}");
    assert!(
        log.contains("run ended: exited with code 0 after "),
        "{log}"
    );
    assert_listener_memory_bounded(l.pid());
}

/// Observes for `secs` that `cond` stays false.
async fn never(secs: f64, mut cond: impl FnMut() -> bool) -> bool {
    !eventually(secs, &mut cond).await
}

/// Whether the recorder's dir holds `name`.
fn recorded(setup: &Setup, name: &str) -> bool {
    setup.rec.dir.join(name).exists()
}

// ---------------------------------------------------------------------------------------------
// The state dir's filesystem full, then read-only.

/// A small tmpfs mounted on a dir for one test; unmounted (lazily) on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a `size` tmpfs on `dir` (created); `None` when this machine does not allow it.
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs {
            dir: dir.to_path_buf(),
        })
    }

    /// Makes the dir read-only for every new open: a read-only bind mount on top of it. (The
    /// tmpfs itself cannot be remounted read-only while the listener holds its lock file open
    /// for writing.)
    fn read_only(&self) {
        for args in [&["--bind"][..], &["-o", "remount,bind,ro"][..]] {
            let st = std::process::Command::new("mount")
                .args(args)
                .arg(&self.dir)
                .arg(&self.dir)
                .status()
                .unwrap();
            assert!(st.success(), "mount {args:?}");
        }
    }

    /// Undoes `read_only` (lazily: a run may still have its working dir there).
    fn writable(&self) {
        let st = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(st.success(), "umount the read-only bind");
    }

    /// Fills the filesystem with one file; its path.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.dir.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 * 1024];
        // Bounded: the tmpfs is small, and a write that does not fail in 4096 blocks is a bug here.
        for _ in 0..4096 {
            if f.write_all(&block).and_then(|_| f.sync_all()).is_err() {
                return path;
            }
        }
        panic!("{} never filled up", self.dir.display());
    }
}

impl Drop for Tmpfs {
    /// Unmounts whatever this test mounted on the dir (the tmpfs, and a read-only bind a failed
    /// test left on it), lazily.
    fn drop(&mut self) {
        for _ in 0..2 {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.dir)
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Reads `status.json` and `invites.json` on its own thread every few milliseconds until
/// dropped, and keeps every read that found a file that is not whole JSON.
struct HalfWrittenWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl HalfWrittenWatch {
    fn start(state_dir: &Path) -> HalfWrittenWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let dir = state_dir.to_path_buf();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut bad = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                for name in ["status.json", "invites.json"] {
                    if let Ok(bytes) = std::fs::read(dir.join(name))
                        && serde_json::from_slice::<Value>(&bytes).is_err()
                    {
                        bad.push(format!("{name}: {}", String::from_utf8_lossy(&bytes)));
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            bad
        });
        HalfWrittenWatch {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops reading; the reads that found a half-written file.
    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// No write's temp file is left in `dir`.
fn no_temp_files(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .all(|e| !e.file_name().to_string_lossy().ends_with(".tmp"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_then_read_only_state_dir_keeps_the_listener_acking_says_so_once_per_episode_and_never_half_writes_status_or_invites()
 {
    let opts = Opts::default();
    let (sim, alice, bob) = alice_and_bob(1.0).await;
    let setup = Setup::new(&opts);
    let Some(fs) = Tmpfs::mount(&setup.state_dir, "2m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)");
        return;
    };
    script_run(&setup, "");
    // An invite that stays on the tray: every cycle runs and writes the invite memory.
    sim.invite(&alice, &bob, "the fault group").await;
    let watch = HalfWrittenWatch::start(&setup.state_dir);
    let mut l = Listener::start(&sim, &bob, &setup, &opts);
    connect_cycle_ended(&l).await;
    assert!(
        eventually(10.0, || setup.state_dir.join("invites.json").exists()).await,
        "the invite memory was written once:\n{}",
        l.log()
    );
    let mut ids = Vec::new();

    // One episode per fault: each is said once (however many writes fail in it), and once more
    // when writes work again.
    for (episode, fault) in ["full", "read-only"].into_iter().enumerate() {
        let n = episode + 1;
        let filler = match fault {
            "full" => Some(fs.fill()),
            _ => {
                fs.read_only();
                None
            }
        };
        for i in 0..2 {
            let cycles = l.count("cycle_end");
            ids.extend(send_some(&sim, &alice, &bob, 1, &format!("{fault} {i}")).await);
            acked_within(&sim, &bob, &ids, 15.0, &l).await;
            assert!(
                eventually(15.0, || l.count("cycle_end") > cycles).await,
                "no cycle after a message while the state dir is {fault}:\n{}",
                l.log()
            );
        }
        for event in ["status_write_failed", "invite_memory_write_failed"] {
            assert_eq!(l.count(event), n, "{event} once per episode:\n{}", l.log());
        }
        match filler {
            Some(f) => std::fs::remove_file(f).unwrap(),
            None => fs.writable(),
        }
        let cycles = l.count("cycle_end");
        ids.extend(send_some(&sim, &alice, &bob, 1, &format!("after {fault}")).await);
        acked_within(&sim, &bob, &ids, 15.0, &l).await;
        assert!(eventually(15.0, || l.count("cycle_end") > cycles).await);
        for event in ["status_write_recovered", "invite_memory_write_recovered"] {
            assert!(
                eventually(5.0, || l.count(event) == n).await,
                "{event} once per episode:\n{}",
                l.log()
            );
        }
        assert!(eventually(5.0, || no_temp_files(&setup.state_dir)).await);
    }

    assert!(
        matches!(l.child.as_mut().unwrap().try_wait(), Ok(None)),
        "the listener is still running"
    );
    assert!(
        eventually(5.0, || setup.status()["counters"]["acks"].as_u64()
            >= Some(ids.len() as u64))
        .await,
        "status.json counts every ack again: {}",
        setup.status()
    );
    drop(l);
    let half_written = watch.finish();
    assert!(
        half_written.is_empty(),
        "reads found half-written files: {half_written:?}"
    );
}

/// Issue 17, item 15: a run whose output fills the state dir's disk. Its log is cut where the
/// write failed and lacks its `run ended` line: the listener says so once (`run_log_cut`). The
/// status written at the cycle's end fails too; once space is back it catches up by itself,
/// without waiting for another event or the 30 s touch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_log_cut_by_a_full_disk_is_said_once_and_the_status_catches_up_once_space_is_back() {
    let opts = Opts {
        extra_toml: "run_log_max_bytes = 16777216\n".into(),
        ..Opts::default()
    };
    let (sim, alice, bob) = alice_and_bob(1.0).await;
    let setup = Setup::new(&opts);
    let Some(_fs) = Tmpfs::mount(&setup.state_dir, "2m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)");
        return;
    };
    // 4 MB of output: the log's first half (8 MiB) is written as it comes, so the 2 MiB disk
    // fills during the run.
    script_run(&setup, "head -c 4000000 /dev/zero | tr '\\0' x");
    let l = Listener::start(&sim, &bob, &setup, &opts);
    connect_cycle_ended(&l).await;
    let cycles = l.count("cycle_end");
    send_some(&sim, &alice, &bob, 1, "fill").await;
    assert!(
        eventually(30.0, || l.count("cycle_end") > cycles).await,
        "{}",
        l.log()
    );
    assert_eq!(l.count("run_log_cut"), 1, "said once:\n{}", l.log());
    let cut = &l.events("run_log_cut")[0];
    let log_path = PathBuf::from(cut["log"].as_str().unwrap());
    let log = std::fs::read(&log_path).unwrap();
    assert!(
        log.len() < 4_000_000,
        "the log really was cut: {} bytes",
        log.len()
    );
    assert!(l.count("status_write_failed") >= 1, "{}", l.log());
    let id = l.events("cycle_end").last().unwrap()["cycle_id"]
        .as_str()
        .unwrap()
        .to_string();
    let shows_it_ended =
        |s: &Value| s["last_cycle"]["id"] == id.as_str() && !s["last_cycle"]["ended_at"].is_null();
    // The status does not show the cycle ended: the write at its end did not fit.
    assert!(!shows_it_ended(&setup.status()), "{}", setup.status());
    // Space is back; nothing else happens, and the status catches up well within the 30 s touch.
    std::fs::remove_file(&log_path).unwrap();
    assert!(
        eventually(20.0, || shows_it_ended(&setup.status())).await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    assert_eq!(setup.status()["last_cycle"]["run_started"], true);
    assert_eq!(l.count("status_write_recovered"), 1);
}

/// Issue 19: a state dir that is read-only at start is one the listener cannot use: it exits 78
/// (EX_CONFIG, which the systemd unit does not restart into) with a line naming the lock file,
/// not 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_state_dir_at_start_exits_78_naming_the_lock_file() {
    let opts = Opts::default();
    let (sim, _alice, bob) = alice_and_bob(1.0).await;
    let setup = Setup::new(&opts);
    let Some(fs) = Tmpfs::mount(&setup.state_dir, "1m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)");
        return;
    };
    // A state dir used before: its runs dir is there, so only the lock file cannot be opened.
    std::fs::create_dir(setup.state_dir.join("runs")).unwrap();
    fs.read_only();
    let mut l = Listener::start(&sim, &bob, &setup, &opts);
    assert_eq!(l.wait_exit(15.0), Some(78), "{}", l.log());
    let log = l.log();
    assert!(
        log.contains("listen.lock") && log.contains("Read-only"),
        "{log}"
    );
}

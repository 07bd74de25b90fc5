//! Issue 29: states with no way out that needs no person, and reports that lie about them. The
//! real binary against the sim (or the scripted server for what the sim never does), with the
//! recording `sh` script as the run; waits poll the JSON log, the recorder and the status file.

use crate::listen_support::{self, *};
use serde_json::{Value, json};

const FAKE_KEY: &str = "ac_live_fake_key_for_the_scripted_server";

/// True when `cond` stays false for `secs` (the absence of something, bounded).
async fn never(secs: f64, cond: impl FnMut() -> bool) -> bool {
    !eventually(secs, cond).await
}

fn cycle_reasons(l: &Listener) -> Vec<String> {
    l.events("cycle_start")
        .iter()
        .map(|e| e["reasons"].as_str().unwrap_or("").to_string())
        .collect()
}

/// `/readyz`'s status code and line.
async fn readyz(base: &str) -> (u16, String) {
    let r = reqwest::get(format!("{base}/readyz")).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Item 1: texts without `wake_instruction` are refused like missing texts. With a good copy in
/// use, it stays in use and on disk; with none, the profile is not ready, and once the server
/// serves usable texts again the card spent on `no_texts` runs without a new message or SIGHUP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn texts_without_a_wake_instruction_are_refused_and_the_last_good_copy_kept() {
    let opts = Opts {
        time_scale: 10.0,
        extra_toml: "metrics_addr = \"127.0.0.1:0\"\n".into(),
        ..Opts::default()
    };
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let good = sim.texts("generic", &bob.key).await;
    let mut unusable = good.clone();
    unusable.as_object_mut().unwrap().remove("wake_instruction");
    let setup = Setup::new(&opts);
    let cache = setup.state_dir.join("texts-generic.json");
    {
        let mut l = Listener::start(&sim, &bob, &setup, &opts);
        connect_cycle_ended(&l).await;
        sim.replace_texts("generic", unusable.clone()).await;
        l.signal(libc::SIGHUP);
        assert!(
            eventually(10.0, || l.count("texts_fetch_failed") >= 1).await,
            "{}",
            l.log()
        );
        let kept: Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
        assert_eq!(
            kept["wake_instruction"], good["wake_instruction"],
            "the cache keeps the last good copy"
        );
        sim.send(&alice, &bob, "still there?").await;
        assert!(eventually(15.0, || setup.rec.done(1)).await, "{}", l.log());
        assert_eq!(
            setup.rec.file("stdin", 1),
            good["wake_instruction"].as_str().unwrap()
        );
        l.signal(libc::SIGTERM);
        assert_eq!(l.wait_exit(10.0), Some(0));
    }
    // No good copy anywhere: nothing to run with, and the profile says so.
    std::fs::remove_file(&cache).unwrap();
    let l = Listener::spawn(listener_command(&sim, &bob, &setup, &opts), &setup, "-2");
    connect_cycle_ended(&l).await;
    let cycles = l.count("cycle_end");
    sim.send(&alice, &bob, "and now?").await;
    assert!(
        eventually(10.0, || l.count("cycle_end") > cycles).await,
        "{}",
        l.log()
    );
    assert!(
        eventually(5.0, || setup.status()["last_cycle"]["no_run_reason"]
            == "no_texts")
        .await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    assert_eq!(setup.status()["texts"]["source"], "none");
    assert!(!cache.exists(), "unusable texts are never cached");
    let base = metrics_base(&l).await;
    let (code, why) = readyz(&base).await;
    assert_eq!(code, 503, "{why}");
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("agentchat_ready{profile=\"default\"} 0"),
        "{metrics}"
    );
    // The server is fixed: the re-fetch on the backoff finds it, and the card runs at once.
    sim.replace_texts("generic", good.clone()).await;
    assert!(eventually(15.0, || setup.rec.done(2)).await, "{}", l.log());
    assert_eq!(setup.rec.env(2)["AGENTCHAT_WAKE_REASONS"], "recovered");
    assert_eq!(l.count("reload"), 0, "no SIGHUP involved");
    assert!(eventually_async(5.0, || async { readyz(&base).await.0 == 200 }).await);
}

/// Item 1's rule for the invite prompt (contract 3.6; docs/decisions.md): texts without
/// `invite_prompt` are refused like missing texts. The good copy in use stays in use and on disk,
/// and an invite runs with its `invite_prompt`; with none, an invite waiting is `no_texts` (not
/// `no_prompt`), and once the server serves usable texts the invite runs by itself (`recovered`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn texts_without_an_invite_prompt_are_refused_and_the_last_good_copy_kept() {
    let opts = Opts {
        time_scale: 10.0,
        ..Opts::default()
    };
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let good = sim.texts("generic", &bob.key).await;
    let mut unusable = good.clone();
    unusable.as_object_mut().unwrap().remove("invite_prompt");
    let setup = Setup::new(&opts);
    let cache = setup.state_dir.join("texts-generic.json");
    {
        let mut l = Listener::start(&sim, &bob, &setup, &opts);
        connect_cycle_ended(&l).await;
        sim.replace_texts("generic", unusable.clone()).await;
        l.signal(libc::SIGHUP);
        assert!(
            eventually(10.0, || l.count("texts_fetch_failed") >= 1).await,
            "{}",
            l.log()
        );
        let kept: Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
        assert_eq!(
            kept["invite_prompt"], good["invite_prompt"],
            "the cache keeps the last good copy"
        );
        sim.invite(&alice, &bob, "lab").await;
        assert!(eventually(15.0, || setup.rec.done(1)).await, "{}", l.log());
        assert_eq!(
            setup.rec.file("stdin", 1),
            good["invite_prompt"].as_str().unwrap()
        );
        l.signal(libc::SIGTERM);
        assert_eq!(l.wait_exit(10.0), Some(0));
    }
    // No good copy anywhere: the invite still waiting is no_texts, and the profile says so.
    std::fs::remove_file(&cache).unwrap();
    let l = Listener::spawn(listener_command(&sim, &bob, &setup, &opts), &setup, "-2");
    assert!(
        eventually(15.0, || setup.status()["last_cycle"]["no_run_reason"]
            == "no_texts")
        .await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    assert_eq!(
        l.events("no_run")
            .iter()
            .filter(|e| e["reason"] == "no_prompt")
            .count(),
        0,
        "{}",
        l.log()
    );
    assert!(!cache.exists(), "unusable texts are never cached");
    sim.replace_texts("generic", good.clone()).await;
    assert!(eventually(15.0, || setup.rec.done(2)).await, "{}", l.log());
    assert_eq!(setup.rec.env(2)["AGENTCHAT_WAKE_REASONS"], "recovered");
    assert_eq!(
        setup.rec.file("stdin", 2),
        good["invite_prompt"].as_str().unwrap()
    );
}

/// Item 2: a program that loses its exec bit makes the runtime unusable (re-check, recovery
/// wake), not a failed run per wake; `chmod +x` runs the waiting card without a new message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_loses_its_exec_bit_is_an_unusable_runtime_until_chmod_x_runs_the_card() {
    use std::os::unix::fs::PermissionsExt;
    let opts = Opts {
        time_scale: 10.0,
        ..Opts::default()
    };
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let setup = Setup::new(&opts);
    // The script is the program itself (not `sh script`), so its mode decides.
    let script = setup.rec.script.display().to_string();
    let config = std::fs::read_to_string(&setup.config).unwrap().replace(
        &format!("command = [\"/bin/sh\", \"{script}\"]"),
        &format!("command = [\"{script}\"]"),
    );
    std::fs::write(&setup.config, config).unwrap();
    let mode = |m: u32| {
        std::fs::set_permissions(&setup.rec.script, std::fs::Permissions::from_mode(m)).unwrap()
    };
    mode(0o755);
    let l = Listener::start(&sim, &bob, &setup, &opts);
    connect_cycle_ended(&l).await;
    mode(0o644);
    sim.send(&alice, &bob, "are you there?").await;
    assert!(
        eventually(15.0, || setup.status()["state"] == "runtime_unusable").await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    assert!(
        l.events("runtime_unusable").iter().any(|e| e["why"]
            .as_str()
            .unwrap_or("")
            .contains("not an executable")),
        "{}",
        l.log()
    );
    assert_eq!(setup.rec.count(), 0);
    mode(0o755);
    assert!(eventually(15.0, || setup.rec.done(1)).await, "{}", l.log());
    assert_eq!(setup.rec.env(1)["AGENTCHAT_WAKE_REASONS"], "recovered");
    assert!(
        eventually(5.0, || setup.status()["state"] == "connected").await,
        "{}",
        setup.status()
    );
}

/// Item 4: a cycle waiting out a `429 Retry-After` holds nothing back: the status is written
/// meanwhile, shows the wait and the socket's state, and `agentchat status` says running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_waiting_out_a_429_keeps_the_status_written_and_shows_the_wait() {
    use listen_support::fake::{self, Fake};
    let fake = Fake::start("bob", fake::tray("@bob", 1)).await;
    {
        let mut s = fake.shared.lock().unwrap();
        s.inbox_429 = 1;
        s.retry_after_s = 240;
    }
    let opts = Opts::default();
    let setup = Setup::new(&opts);
    let l = Listener::spawn(
        listener_command_for(&fake.api_base, FAKE_KEY, &setup, &opts),
        &setup,
        "",
    );
    assert!(
        eventually(15.0, || l.count("tray_retry") == 1).await,
        "{}",
        l.log()
    );
    let waiting = |s: &Value| {
        s["state"] == "connected"
            && s["detail"]
                .as_str()
                .is_some_and(|d| d.contains("429") && d.contains("reads the tray again at"))
    };
    assert!(
        eventually(5.0, || waiting(&setup.status())).await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    let out = std::process::Command::new(BIN)
        .args(["status", "--json", "--state-dir"])
        .arg(&setup.state_dir)
        .arg("--config")
        .arg(&setup.config)
        .env_remove("AGENTCHAT_API_KEY")
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{doc}");
    assert_eq!(
        (doc["running"].clone(), doc["stale"].clone()),
        (json!(true), json!(false))
    );
}

/// Item 4: the wait's text outlives a socket state change. While the cycle waits out a
/// `Retry-After` of 240 s the server closes the socket; once it is connected again,
/// `status.detail` still says the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_wait_stays_in_the_status_detail_across_a_reconnect() {
    use listen_support::fake::{self, Fake};
    use tokio_tungstenite::tungstenite::{Message, protocol::CloseFrame};
    let fake = Fake::start("bob", fake::tray("@bob", 1)).await;
    {
        let mut s = fake.shared.lock().unwrap();
        s.inbox_429 = 1;
        s.retry_after_s = 240;
    }
    let opts = Opts::default();
    let setup = Setup::new(&opts);
    let l = Listener::spawn(
        listener_command_for(&fake.api_base, FAKE_KEY, &setup, &opts),
        &setup,
        "",
    );
    let waiting = |s: &Value| {
        s["detail"]
            .as_str()
            .is_some_and(|d| d.contains("429") && d.contains("reads the tray again at"))
    };
    assert!(
        eventually(15.0, || waiting(&setup.status())).await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    fake.push(Message::Close(Some(CloseFrame {
        code: 1011u16.into(),
        reason: "going away".into(),
    })));
    assert!(
        eventually(15.0, || l.count("socket_closed") >= 1
            && l.count("socket_connected") >= 2
            && setup.status()["state"] == "connected")
        .await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    let status = setup.status();
    assert!(
        waiting(&status),
        "the wait was lost:\n{status}\n{}",
        l.log()
    );
}

/// Mutes `target` for `who` through the real route.
async fn mute_agent(sim: &Sim, who: &Agent, target: &Agent) {
    let r = reqwest::Client::new()
        .post(format!("{}/v1/mutes", sim.api_base))
        .bearer_auth(&who.key)
        .json(&json!({"target_kind": "agent", "target_handle": target.handle}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
}

/// Item 9: mute means "don't wake me" (contract 3.1). With one old unanswered card on the tray,
/// three messages from a muted agent start no run; a message from someone not muted does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_in_muted_conversations_start_no_run_beside_an_old_unanswered_card() {
    let opts = Opts::default();
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let carol = sim.agent("carol").await;
    let bob = sim.agent("bob").await;
    let setup = Setup::new(&opts);
    let l = Listener::start(&sim, &bob, &setup, &opts);
    connect_cycle_ended(&l).await;
    // Alice's card stays: the recorder records no verdict.
    sim.send(&alice, &bob, "an old question").await;
    assert!(eventually(15.0, || setup.rec.done(1)).await, "{}", l.log());
    let cycles = l.count("cycle_end");
    mute_agent(&sim, &bob, &carol).await;
    for i in 0..3 {
        sim.send(&carol, &bob, &format!("muted {i}")).await;
        assert!(
            eventually(10.0, || l.count("cycle_end") > cycles + i).await,
            "{}",
            l.log()
        );
    }
    assert!(
        l.events("no_run")
            .iter()
            .any(|e| e["reason"] == "only_muted"),
        "{}",
        l.log()
    );
    assert_eq!(setup.rec.count(), 1, "no run for muted mail:\n{}", l.log());
    // A message that is not muted runs (and sees the whole tray).
    sim.send(&alice, &bob, "and another").await;
    assert!(eventually(15.0, || setup.rec.done(2)).await, "{}", l.log());
}

/// A tray of `cards` unmuted cards, cut short, and one group card whose only unread messages are
/// notices (`notice`: its newest one).
fn backlog_tray(cards: usize, notice: u64) -> Value {
    let mut convs: Vec<Value> = vec![json!({"conversation_id": "grp_notices", "type": "group",
        "muted": false, "preview": null, "you_owe_reply": false, "mentioned_you": false,
        "unread": notice, "last_message_id": format!("notice_{notice}"),
        "newest_unread_at": format!("2026-12-02T04:00:{:02}.000Z", notice % 60)})];
    convs.extend((0..cards).map(|i| {
        json!({"conversation_id": format!("conv_{i}"), "muted": false, "unread": 1,
            "you_owe_reply": true, "preview": {"message_id": format!("m_{i}")},
            "last_message_id": format!("m_{i}"),
            "newest_unread_at": format!("2026-12-01T10:{:02}:00.000Z", i % 60)})
    }));
    json!({"version": 1, "you": "@bob", "conversations": convs, "truncated": true,
        "invites": [], "invites_truncated": false, "waited_ms": null})
}

/// Item 10: the reported case. 51 cards (a tray cut short), the run exiting 1, a group notice a
/// second moving the tray: no follow-up runs (contract 4 and 5: a failed turn records nothing
/// and the server re-wakes; no program keeps a retry ladder of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_on_a_tray_cut_short_starts_no_follow_up_while_notices_move_the_tray() {
    use listen_support::fake::Fake;
    let fake = Fake::start("bob", backlog_tray(49, 0)).await;
    let opts = Opts::default();
    let setup = Setup::new(&opts);
    setup.rec.set("exit", "1");
    // The run lasts over a notice, so the trays before and after it differ.
    setup.rec.set("sleep", "1.5");
    let shared = fake.shared.clone();
    let ticker = tokio::spawn(async move {
        for n in 1..60 {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            shared.lock().unwrap().tray = backlog_tray(49, n);
        }
    });
    let l = Listener::spawn(
        listener_command_for(&fake.api_base, FAKE_KEY, &setup, &opts),
        &setup,
        "",
    );
    assert!(eventually(15.0, || setup.rec.done(1)).await, "{}", l.log());
    assert!(
        eventually(10.0, || l.count("cycle_end") >= 1).await,
        "{}",
        l.log()
    );
    assert!(
        never(6.0, || setup.rec.count() > 1).await,
        "a failed run started follow-ups:\n{}",
        l.log()
    );
    assert_eq!(l.count("backlog"), 0, "{}", l.log());
    assert!(
        !cycle_reasons(&l).iter().any(|r| r.contains("backlog")),
        "{:?}",
        cycle_reasons(&l)
    );
    ticker.abort();
}

/// Item 9, a tray cut short: 52 conversations the agent muted fill more than the tray's 50 cards
/// (`truncated`), with nothing unmuted anywhere. The connect cycle (a wake of another cause) and
/// new messages in those conversations, more than the tray shows, start no run: a tray cut short
/// whose cards are all muted is not something waiting (contract 3.1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tray_cut_short_whose_cards_are_all_muted_starts_no_run() {
    let opts = Opts::default();
    let sim = Sim::start(1.0).await;
    let bob = sim.agent("bob").await;
    let mut senders = Vec::new();
    for i in 0..52 {
        let a = sim.agent(&format!("muted{i}")).await;
        mute_agent(&sim, &bob, &a).await;
        sim.send(&a, &bob, "first").await;
        senders.push(a);
    }
    let tray = sim.tray(&bob).await;
    assert_eq!(tray["truncated"], json!(true), "{tray}");
    let setup = Setup::new(&opts);
    let l = Listener::start(&sim, &bob, &setup, &opts);
    connect_cycle_ended(&l).await;
    assert!(
        l.events("tray_read")
            .iter()
            .any(|e| e["truncated"] == json!(true) && e["muted"] == json!(50)),
        "{}",
        l.log()
    );
    let cycles = l.count("cycle_end");
    // New messages in every muted conversation, the ones beyond the cut included.
    for a in &senders {
        sim.send(a, &bob, "again").await;
    }
    assert!(
        eventually(20.0, || l.count("cycle_end") > cycles).await,
        "{}",
        l.log()
    );
    assert!(
        never(4.0, || setup.rec.count() > 0).await,
        "a tray of muted cards started a run:\n{}",
        l.log()
    );
    let reasons: Vec<Value> = l
        .events("no_run")
        .iter()
        .map(|e| e["reason"].clone())
        .collect();
    assert!(
        !reasons.is_empty() && reasons.iter().all(|r| r == "only_muted"),
        "{reasons:?}\n{}",
        l.log()
    );
}

//! Issue 26: the run policy (`[listen.policy]`) in the real listener against the sim, with the
//! recording `sh` script as the run. Each rule holds a card (status.json's `held` says why and
//! until when, the card stays unread with no verdict on the sim) and the card runs at the hold's
//! end, or at the reload that lifts the rule, without a new message (wake reason `hold_ended`).
//!
//! Quiet hours and the caps' hour and day follow the wall clock, which these tests do not move:
//! what needs it (a hold that ends at 07:00, at the next hour, at midnight) is the machine's own
//! test on its hand-held clock (`core::listener::tests`). `TZ=UTC0` fixes the zone.

use crate::listen_support::*;
use serde_json::{Value, json};

/// A listener whose policy is `policy` (the body of `[listen.policy]`), its metrics on a port of
/// its own.
fn opts(policy: &str, _clock: Option<&str>) -> Opts {
    let extra_env = vec![("TZ".to_string(), "UTC0".to_string())];
    Opts {
        time_scale: 10.0,
        extra_env,
        extra_toml: format!("metrics_addr = \"127.0.0.1:0\"\n\n[listen.policy]\n{policy}\n"),
        ..Opts::default()
    }
}

/// Waits until status.json says runs are held for `reason`; the `held` object.
async fn held(setup: &Setup, l: &Listener, reason: &str) -> Value {
    assert!(
        eventually(20.0, || setup.status()["held"]["reason"] == reason).await,
        "not held for {reason}: {}\n{}",
        setup.status(),
        l.log()
    );
    let status = setup.status();
    assert_eq!(status["last_cycle"]["no_run_reason"], "held", "{status}");
    status["held"].clone()
}

/// The card waits on the sim as it came: unread, no verdict recorded.
async fn untouched(sim: &Sim, agent: &Agent) {
    let tray = sim.tray(agent).await;
    let cards = as_list(&tray, "conversations");
    assert!(
        !cards.is_empty() && cards.iter().all(|c| c["unread"].as_u64() > Some(0)),
        "{tray}"
    );
    let state = sim.state(agent).await;
    assert_eq!(state["verdicts"], json!([]), "{state}");
}

/// The reasons run `n` was woken for.
fn reasons(setup: &Setup, n: usize) -> String {
    setup
        .rec
        .env(n)
        .get("AGENTCHAT_WAKE_REASONS")
        .cloned()
        .unwrap_or_default()
}

async fn metrics(l: &Listener) -> String {
    let base = metrics_base(l).await;
    reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A real listener held by `max_runs_per_hour = 1` says so everywhere a person looks: the
/// status's `held` with the next clock hour as its end, `agentchat status`'s line, `/readyz` still
/// 200 (a hold is no fault) and `agentchat_held` on `/metrics`; the card stays unread and the
/// history in the state dir counts the first run. When the hour rolls over the card runs with
/// `hold_ended`: that needs the clock itself and is the machine's own test
/// (`core::listener::tests`), as quiet hours and the day's caps are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_listener_says_why_and_until_when_in_status_metrics_and_agentchat_status() {
    let o = opts("max_runs_per_hour = 1", None);
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let carol = sim.agent("carol").await;
    let bob = sim.agent("bob").await;
    let setup = Setup::new(&o);
    let l = Listener::start(&sim, &bob, &setup, &o);
    connect_cycle_ended(&l).await;
    sim.send(&alice, &bob, "one").await;
    assert!(eventually(20.0, || setup.rec.done(1)).await, "{}", l.log());
    // The next clock hour (TZ=UTC0) as the wall clock reads it before and after the hold.
    let next_hour = || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs((now / 3600 + 1) * 3600);
        humantime::format_rfc3339_millis(at).to_string()
    };
    let before = next_hour();
    sim.send(&carol, &bob, "two").await;
    let h = held(&setup, &l, "runs_per_hour").await;
    assert_eq!(h["key"], "max_runs_per_hour");
    let until = h["until"].as_str().unwrap_or_default().to_string();
    assert!(until == before || until == next_hour(), "{h}");
    // The recording script answers nothing: both cards wait, held.
    assert_eq!(h["cards"].as_array().map(Vec::len), Some(2), "{h}");
    assert_eq!(setup.status()["usage"]["this_hour"]["runs"], 1);
    untouched(&sim, &bob).await;
    let out = crate::common::isolated_command(BIN, &[])
        .arg("status")
        .env("TZ", "UTC0")
        .env("AGENTCHAT_CONFIG", &setup.config)
        .env("AGENTCHAT_STATE_DIR", &setup.state_dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let hh = &until[11..16];
    assert!(
        said.contains("runs wait: max_runs_per_hour reached, until ") && said.contains(hh),
        "{said}"
    );
    assert!(said.contains("today: 1 run"), "{said}");
    let base = metrics_base(&l).await;
    let ready = reqwest::get(format!("{base}/readyz")).await.unwrap();
    assert_eq!(ready.status().as_u16(), 200, "a hold is no fault");
    let page = metrics(&l).await;
    assert!(
        page.contains("agentchat_held{profile=\"default\",reason=\"runs_per_hour\"} 1"),
        "{page}"
    );
    assert!(
        page.contains("agentchat_held{profile=\"default\",reason=\"quiet_hours\"} 0"),
        "{page}"
    );
    // The history is the ledger's one file: the run, counted, and the hold it started.
    let history = std::fs::read_to_string(setup.state_dir.join("history.jsonl")).unwrap();
    let runs: Vec<Value> = history
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == "run" && r["outcome"] == "completed")
        .collect();
    assert_eq!(runs.len(), 1, "{history}");
    assert!(
        history.contains("\"reason\":\"runs_per_hour\""),
        "{history}"
    );
    assert!(!setup.state_dir.join("ledger.json").exists());
    // A wake during the hold is acked and costs no run; the hold is said once.
    sim.send(&carol, &bob, "hello?").await;
    assert!(
        eventually_async(5.0, || async { sim.acks(&bob).await.len() >= 3 }).await,
        "every message is acked during the hold"
    );
    assert!(
        eventually(10.0, || l.count("cycle_end") >= 4).await,
        "{}",
        l.log()
    );
    assert_eq!(setup.rec.count(), 1);
    assert_eq!(l.count("run_held"), 1, "{}", l.log());
}

/// A sender rule the config holds a card by (`not_allowed`, no `until`): the card waits
/// untouched until a reload that lifts the rule reads the tray at once.
async fn held_until_a_reload_lifts(policy: &str, key: &str, group: bool) {
    let o = opts(policy, None);
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let setup = Setup::new(&o);
    let l = Listener::start(&sim, &bob, &setup, &o);
    connect_cycle_ended(&l).await;
    if group {
        let g = sim
            .post(
                "/_sim/groups",
                json!({"owner": alice.handle, "name": "lab", "members": [bob.handle]}),
            )
            .await;
        let gid = g["group_id"].as_str().unwrap().to_string();
        let req = sim
            .http
            .post(format!("{}/v1/messages", sim.api_base))
            .bearer_auth(&alice.key)
            .json(&json!({"conversation_id": gid, "client_msg_id": "g-1",
                          "content": {"text": "hello everyone"}}));
        assert!(req.send().await.unwrap().status().is_success());
    } else {
        sim.send(&alice, &bob, "hi, we have not met").await;
    }
    let h = held(&setup, &l, "not_allowed").await;
    assert_eq!(h["key"], key, "{h}");
    assert!(h["until"].is_null(), "{h}");
    assert_eq!(l.count("run_held"), 1, "{}", l.log());
    untouched(&sim, &bob).await;
    assert_eq!(setup.rec.count(), 0);
    // The user lifts the rule: SIGHUP reads the tray now, without a new message.
    let config = std::fs::read_to_string(&setup.config).unwrap();
    std::fs::write(&setup.config, config.replace(policy, "")).unwrap();
    l.signal(libc::SIGHUP);
    assert!(eventually(20.0, || setup.rec.done(1)).await, "{}", l.log());
    assert!(
        reasons(&setup, 1).contains("hold_ended"),
        "{}",
        reasons(&setup, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_contact_wait_holds_a_strangers_first_message_until_a_reload_lifts_it() {
    held_until_a_reload_lifts(r#"first_contact = "wait""#, "first_contact", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_mentions_holds_group_chatter_that_does_not_mention_the_agent() {
    held_until_a_reload_lifts(r#"groups = "mentions""#, "groups", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_holds_a_card_from_a_handle_it_does_not_list() {
    held_until_a_reload_lifts(r#"allow = ["@carol"]"#, "allow", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_holds_a_card_from_a_denied_handle() {
    held_until_a_reload_lifts(r#"deny = ["@ali*"]"#, "deny", false).await;
}

/// A hostile sender that keeps replying: after two runs in the window its conversation is held
/// as a loop, while another sender's message still starts one; once the sender has been quiet
/// for the window the loop is over and its last message still starts no run (issue 38 item 2);
/// a reload lets it go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_guard_stops_a_sender_that_keeps_replying_while_others_still_wake_runs() {
    let o = opts(r#"loop_guard = { runs = 2, within = "12s" }"#, None);
    let sim = Sim::start(1.0).await;
    let mallory = sim.agent("mallory").await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let setup = Setup::new(&o);
    let l = Listener::start(&sim, &bob, &setup, &o);
    connect_cycle_ended(&l).await;
    sim.send(&mallory, &bob, "ping 1").await;
    assert!(eventually(20.0, || setup.rec.done(1)).await, "{}", l.log());
    sim.send(&mallory, &bob, "ping 2").await;
    assert!(eventually(20.0, || setup.rec.done(2)).await, "{}", l.log());
    sim.send(&mallory, &bob, "ping 3").await;
    let h = held(&setup, &l, "loop_guard").await;
    assert_eq!(h["key"], "loop_guard");
    assert!(h["until"].is_string(), "{h}");
    assert_eq!(setup.rec.count(), 2);
    // Another conversation still wakes a run.
    sim.send(&alice, &bob, "a real question").await;
    assert!(eventually(20.0, || setup.rec.done(3)).await, "{}", l.log());
    assert!(
        reasons(&setup, 3).contains("message"),
        "{}",
        reasons(&setup, 3)
    );
    // The agent answered Alice (the recording run does not: bob reads her card himself).
    let tray = sim.tray(&bob).await;
    let cards = as_list(&tray, "conversations");
    let theirs = cards
        .iter()
        .find(|c| {
            c["counterparty"]["handle"]
                .as_str()
                .is_some_and(|h| h.contains("alice"))
        })
        .and_then(|c| c["conversation_id"].as_str())
        .expect("alice's card");
    let read = sim
        .http
        .post(format!("{}/v1/conversations/{theirs}/read", sim.api_base))
        .bearer_auth(&bob.key)
        .json(&json!({}));
    assert!(read.send().await.unwrap().status().is_success());
    // Mallory goes on: held again; once quiet for the window the loop is over, and the card
    // still starts no run (its hold has no end any more).
    sim.send(&mallory, &bob, "ping 4").await;
    held(&setup, &l, "loop_guard").await;
    let runs = setup.rec.count();
    assert!(
        eventually(40.0, || setup.status()["held"]["reason"] == "loop_guard"
            && setup.status()["held"]["until"].is_null())
        .await,
        "{}",
        l.log()
    );
    assert_eq!(
        setup.rec.count(),
        runs,
        "the loop's last message started a run"
    );
    // The user lets it go: the card runs at once.
    l.signal(libc::SIGHUP);
    assert!(
        eventually(20.0, || setup.rec.done(runs + 1)).await,
        "{}",
        l.log()
    );
    assert!(
        reasons(&setup, runs + 1).contains("hold_ended"),
        "{}",
        reasons(&setup, runs + 1)
    );
}

/// `timezone` names a zone the system does not have: the listener refuses to start (exit 78,
/// which the unit does not restart into), naming the key; a running listener's reload onto it
/// keeps the settings in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_timezone_is_a_config_error_naming_the_key_at_start_and_on_reload() {
    let o = opts(r#"timezone = "Mars/Olympus_Mons""#, None);
    let sim = Sim::start(1.0).await;
    let bob = sim.agent("bob").await;
    let setup = Setup::new(&o);
    let mut l = Listener::start(&sim, &bob, &setup, &o);
    assert_eq!(l.wait_exit(20.0), Some(78), "{}", l.log());
    assert!(l.log().contains("listen.policy.timezone"), "{}", l.log());
    assert!(!l.log().contains(&bob.key), "the key never reaches the log");
    // Running with a good zone, a reload onto an unknown one keeps the settings in use.
    let config = std::fs::read_to_string(&setup.config).unwrap();
    std::fs::write(&setup.config, config.replace("Mars/Olympus_Mons", "UTC")).unwrap();
    let mut l = Listener::spawn(listener_command(&sim, &bob, &setup, &o), &setup, "-2");
    connect_cycle_ended(&l).await;
    std::fs::write(&setup.config, &config).unwrap();
    l.signal(libc::SIGHUP);
    assert!(
        eventually(10.0, || l.count("reload_failed") == 1).await,
        "{}",
        l.log()
    );
    let failed = &l.events("reload_failed")[0];
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or_default()
            .contains("listen.policy.timezone"),
        "{failed}"
    );
    assert_eq!(l.wait_exit(1.0), None, "still running:\n{}", l.log());
    assert_eq!(setup.status()["state"], "connected");
}

/// `listen --all`: a profile's hold is lifted by the SIGHUP that changes its policy (the host
/// hands it the settings it read once), and its held card runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_all_a_sighup_that_lifts_a_profiles_rule_runs_its_held_card() {
    use std::os::unix::fs::PermissionsExt;
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let o = Opts::default();
    let setup = Setup::new(&o);
    let key = setup.tmp.path().join("p.key");
    std::fs::write(&key, &bob.key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let rule = "[profiles.p.listen.policy]\nallow = [\"@carol\"]\n";
    let config = format!(
        "log_level = \"debug\"\n[listen]\nruntime = \"script\"\nquiet_window = \"300ms\"\n\
         max_delay = \"2s\"\nidle_timeout = \"100s\"\n[profiles.p]\napi_key_file = \"{}\"\n\
         [profiles.p.listen]\ncommand = [\"/bin/sh\", \"{}\"]\nsandbox_write = [\"{}\"]\n",
        key.display(),
        setup.rec.script.display(),
        setup.rec.dir.display()
    );
    std::fs::write(&setup.config, format!("{config}{rule}")).unwrap();
    let xdg = setup.tmp.path().join("xdg");
    let mut cmd = crate::common::isolated_command(BIN, &["NOTIFY_SOCKET"]);
    cmd.args(["listen", "--all", "--log-format", "json"])
        .env("HOME", setup.tmp.path())
        .env("AGENTCHAT_CONFIG", &setup.config)
        .env("AGENTCHAT_API_BASE", &sim.api_base)
        .env("XDG_STATE_HOME", &xdg)
        .env("AGENTCHAT_LOG", "debug");
    let l = Listener::spawn(cmd, &setup, "-all");
    let status = || -> Value {
        std::fs::read_to_string(xdg.join("agentchat/p/status.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null)
    };
    connect_cycle_ended(&l).await;
    sim.send(&alice, &bob, "hello from a stranger").await;
    assert!(
        eventually(20.0, || status()["held"]["key"] == "allow").await,
        "{}\n{}",
        status(),
        l.log()
    );
    untouched(&sim, &bob).await;
    std::fs::write(&setup.config, &config).unwrap();
    l.signal(libc::SIGHUP);
    assert!(eventually(20.0, || setup.rec.done(1)).await, "{}", l.log());
    assert!(
        reasons(&setup, 1).contains("hold_ended"),
        "{}",
        reasons(&setup, 1)
    );
}

/// `listen --once` (a cron job's run) keeps the same ledger as the daemon: the first one runs
/// the card and counts it, the next, over `max_runs_per_day`, is held (exit 0, `no run: held`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_counts_its_run_in_the_ledger_and_the_next_is_held_by_the_days_cap() {
    let o = opts("max_runs_per_day = 1", None);
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let setup = Setup::new(&o);
    sim.send(&alice, &bob, "for cron").await;
    let once = |suffix: &str| {
        let mut cmd = listener_command(&sim, &bob, &setup, &o);
        cmd.arg("--once");
        Listener::spawn(cmd, &setup, suffix)
    };
    let mut first = once("-1");
    assert_eq!(first.wait_exit(20.0), Some(0), "{}", first.log());
    assert_eq!(setup.rec.count(), 1);
    let mut second = once("-2");
    assert_eq!(second.wait_exit(20.0), Some(0), "{}", second.log());
    assert_eq!(setup.rec.count(), 1, "the day's cap holds the second run");
    assert_eq!(second.count("run_held"), 1, "{}", second.log());
    let out = std::fs::read_to_string(setup.tmp.path().join("listener-2.stdout")).unwrap();
    assert!(out.contains("no run: held"), "{out}");
    untouched(&sim, &bob).await;
}

//! The listener machine driven step by step on a hand-held clock, against a small scripted
//! world: a tray the test writes, runs that end when the test says, every other effect answered
//! at once. What these tests pin needs the clock itself (quiet hours, the caps' hour and day,
//! backoffs): the real-binary suite cannot move it without a hook in the product.

mod policy;
mod world;

use super::*;
use crate::policy::Ledger;
use crate::status::{ListenerState, NoRunReason};
use world::World;

const MIN: u64 = 60_000;

/// Quiet hours hold a message that comes at 06:59 until 07:00, when the card runs by itself
/// with the wake reason `hold_ended`; the hold is said in the status with its end, and a wake
/// during it costs no run.
#[test]
fn quiet_hours_hold_a_card_until_they_end_and_then_it_runs_without_a_new_message() {
    let mut w = World::new("2026-12-02T06:59:40Z", r#"quiet_hours = ["22:00-07:00"]"#);
    w.message("conv_a", "@alice");
    w.run_for(2_000);
    let held = w.status().held.expect("held");
    assert_eq!(
        (held.reason.as_str(), held.key.as_str()),
        ("quiet_hours", "quiet_hours")
    );
    assert_eq!(held.until.as_deref(), Some("2026-12-02T07:00:00.000Z"));
    assert_eq!(held.cards, ["conv_a"]);
    assert_eq!(
        w.status().last_cycle.and_then(|c| c.no_run_reason),
        Some(NoRunReason::Held)
    );
    w.message("conv_a", "@alice");
    w.run_for(2_000);
    assert!(w.runs.is_empty(), "no run during quiet hours");
    assert_eq!(w.acked, 2, "both messages are acked during the hold");
    // 07:00: the listener reads the tray by itself.
    w.run_for(20_000);
    assert_eq!(w.runs.len(), 1);
    assert!(
        w.runs[0].reasons.contains(&"hold_ended".to_string()),
        "{:?}",
        w.runs[0]
    );
    assert_eq!(w.status().held, None);
    assert_eq!(w.status().usage.today.runs, 1);
}

/// `max_runs_per_hour = 1`: the second card waits for the next clock hour, then runs.
#[test]
fn max_runs_per_hour_holds_the_next_run_until_the_hour_rolls_over() {
    let mut w = World::new("2026-12-02T10:59:35Z", "max_runs_per_hour = 1");
    w.message("conv_a", "@alice");
    w.run_for(3_000);
    assert_eq!(w.runs.len(), 1);
    w.message("conv_c", "@carol");
    w.run_for(3_000);
    let held = w.status().held.expect("held");
    assert_eq!(held.reason, "runs_per_hour");
    assert_eq!(held.until.as_deref(), Some("2026-12-02T11:00:00.000Z"));
    assert_eq!(w.status().usage.this_hour.runs, 1);
    assert_eq!(w.ledger().runs().len(), 1, "the ledger is saved");
    w.run_for(MIN);
    assert_eq!(w.runs.len(), 2);
    assert!(w.runs[1].reasons.contains(&"hold_ended".to_string()));
}

/// Issue 35: each run is a history line at its start and its end, each hold one at its start
/// (with the held card's sender, from the tray's metadata) and one at its end (the wakes it held
/// counted), and the caps a restart builds from those lines count what the listener counted.
#[test]
fn every_run_and_hold_is_a_history_line_and_a_restart_counts_the_same_runs() {
    use crate::history::{Kind, Outcome, parse};
    let mut w = World::new("2026-12-02T10:59:35Z", "max_runs_per_hour = 1");
    w.message("conv_a", "@alice");
    w.run_for(3_000);
    w.message("conv_c", "@carol");
    w.run_for(2_000);
    w.message("conv_c", "@carol");
    w.run_for(2_000);
    w.run_for(MIN);
    assert_eq!(w.runs.len(), 2);
    let kinds: Vec<(Kind, Outcome, bool)> = w
        .records
        .iter()
        .map(|r| (r.kind, r.outcome, r.ended_at.is_some()))
        .collect();
    assert_eq!(
        kinds,
        [
            (Kind::Run, Outcome::Running, false),
            (Kind::Run, Outcome::Completed, true),
            (Kind::Hold, Outcome::Held, false),
            (Kind::Hold, Outcome::Held, true),
            (Kind::Run, Outcome::Running, false),
            (Kind::Run, Outcome::Completed, true),
        ]
    );
    let first = &w.records[1];
    assert_eq!(first.senders, ["@alice"]);
    assert_eq!((first.cards, first.invites), (1, 0));
    assert_eq!(first.reason, "message");
    assert_eq!(first.log.as_deref(), Some("run.log"));
    assert_eq!(first.duration_ms, Some(500));
    let hold = &w.records[3];
    assert_eq!(hold.senders, ["@carol"]);
    let note = hold.hold.as_ref().expect("a hold's note");
    assert_eq!(
        (note.reason.as_str(), note.key.as_str(), note.wakes),
        ("runs_per_hour", "max_runs_per_hour", 2)
    );
    assert_eq!(note.until.as_deref(), Some("2026-12-02T11:00:00.000Z"));
    assert_eq!(hold.ended_at.as_deref(), Some("2026-12-02T11:00:00.000Z"));
    assert!(w.records[5].reason.contains("hold_ended"));
    let file: Vec<u8> = w
        .records
        .iter()
        .flat_map(|r| format!("{}\n", r.line()).into_bytes())
        .collect();
    assert_eq!(parse(&file).records.len(), 3, "two runs and a hold");
    let rebuilt = w.ledger();
    assert_eq!(rebuilt.runs().len(), 2);
    assert_eq!(
        rebuilt
            .day(w.now.wall_ms, &crate::policy::FixedOffset(0))
            .runs,
        w.status().usage.today.runs
    );
}

/// `max_runs_per_day = 1`: the next run waits for local midnight.
#[test]
fn max_runs_per_day_holds_the_next_run_until_midnight() {
    let mut w = World::new("2026-12-02T23:59:35Z", "max_runs_per_day = 1");
    w.message("conv_a", "@alice");
    w.run_for(3_000);
    w.message("conv_c", "@carol");
    w.run_for(3_000);
    let held = w.status().held.expect("held");
    assert_eq!(
        (held.reason.as_str(), held.until.as_deref()),
        ("runs_per_day", Some("2026-12-03T00:00:00.000Z"))
    );
    w.run_for(MIN);
    assert_eq!(w.runs.len(), 2);
    assert!(w.runs[1].reasons.contains(&"hold_ended".to_string()));
}

/// `max_cost_per_day_usd`: the day's spending as the ledger kept it across a restart holds the
/// card until midnight; the status shows the run it counted.
#[test]
fn max_cost_per_day_holds_runs_once_the_ledger_reaches_it_until_midnight() {
    let start = "2026-12-02T23:59:35Z";
    let mut ledger = Ledger::new();
    let earlier = World::wall(start) - 3_600_000;
    let utc = crate::policy::OffsetTable::new(0, vec![]);
    ledger.started(earlier, vec![], &utc);
    ledger.ended(earlier, Some(1.25), Some(1000));
    let mut w = World::with_ledger(start, "max_cost_per_day_usd = 1.0", ledger);
    w.message("conv_a", "@alice");
    w.run_for(3_000);
    let held = w.status().held.expect("held");
    assert_eq!(
        (held.reason.as_str(), held.until.as_deref()),
        ("cost_per_day", Some("2026-12-03T00:00:00.000Z"))
    );
    let today = w.status().usage.today;
    assert_eq!((today.runs, today.cost_usd), (1, 1.25));
    assert!(w.runs.is_empty());
    w.run_for(MIN);
    assert_eq!(w.runs.len(), 1);
    assert!(w.runs[0].reasons.contains(&"hold_ended".to_string()));
}

/// The same seed and the same world give the same effects, step for step.
#[test]
fn a_seed_replays_the_listener_exactly() {
    let run = || {
        let mut w = World::new("2026-12-02T12:00:00Z", "");
        for i in 0..5 {
            w.message(&format!("conv_{i}"), "@alice");
            w.run_for(1_500);
            w.drop_socket();
            w.run_for(10_000);
        }
        (w.trace.clone(), w.runs.len())
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    assert!(a.1 >= 5, "{}", a.1);
}

/// A wake that came just before a stop owes no cycle once the listener stops: its deadline is
/// not left due, which the driver would step at once again and again while the stop winds down
/// (the simulator's `deadlines_advance`, seed 394).
#[test]
fn a_wake_pending_at_a_stop_leaves_no_deadline_due() {
    let mut w = World::new("2026-12-02T12:00:00Z", "");
    w.message("conv_a", "@alice");
    assert!(w.l.deadlines().iter().any(|(n, _)| *n == "cycle_due"));
    w.input(Input::Stop {
        now: false,
        cause: "test",
    });
    let due: Vec<_> = w.l.deadlines();
    assert!(!due.iter().any(|(n, _)| *n == "cycle_due"), "{due:?}");
}

/// A stop while connected: the socket closes with 1000, the status says `stopped`, the listener
/// ends.
#[test]
fn a_stop_closes_the_socket_and_ends_the_listener() {
    let mut w = World::new("2026-12-02T12:00:00Z", "");
    w.input(Input::Stop {
        now: false,
        cause: "test",
    });
    w.run_for(1_000);
    assert!(w.ended, "{:?}", w.trace.last());
    assert_eq!(w.status().state, ListenerState::Stopped);
}

/// Issue 37 item 4: a `Retry-After` longer than a cycle waits sets a not-before time, and the
/// status shows the wait (its end in `detail` and `next_retry_at`) instead of a plain
/// `connected`; at its end the tray is read by itself.
#[test]
fn a_long_429_on_the_tray_is_shown_in_the_status_until_its_end() {
    let mut w = World::new("2026-12-02T12:00:00Z", "");
    w.tray_errors.push_back(TrayError {
        kind: TrayErrorKind::RateLimited(Duration::from_secs(600)),
        detail: "rate limited; retry after 600s".into(),
    });
    w.message("conv_a", "@alice");
    w.run_for(2_000);
    let s = w.status();
    assert_eq!(s.state, ListenerState::Connected);
    // The message at 12:00:01, the cycle after the quiet window, ten minutes on.
    let end = "2026-12-02T12:10:01";
    assert!(
        s.detail
            .as_deref()
            .is_some_and(|d| d.contains("429") && d.contains(end)),
        "{:?}",
        s.detail
    );
    assert!(
        s.next_retry_at
            .as_deref()
            .is_some_and(|t| t.starts_with(end)),
        "{:?}",
        s.next_retry_at
    );
    assert!(w.runs.is_empty());
    w.run_for(10 * MIN);
    assert_eq!(w.runs.len(), 1, "read again at the wait's end");
    assert!(w.runs[0].reasons.contains(&"recovered".to_string()));
    assert_eq!(w.status().next_retry_at, None);
}

/// A `429` on the tray read after a run holds the next cycle's read as one before the run does
/// (the simulator's `no_read_in_429_wait`, seed 32: the next cycle read at once).
#[test]
fn a_long_429_on_the_tray_after_a_run_holds_the_next_read_until_its_end() {
    let mut w = World::new("2026-12-02T12:00:00Z", "");
    // A pending invite makes the cycle read the tray after its run (the invite rule).
    w.invites.push(("inv_1".into(), "@carol".into()));
    w.message("conv_a", "@alice");
    w.run_for(400);
    assert_eq!(w.runs.len(), 1, "the run is under way: {:#?}", w.trace);
    w.tray_errors.push_back(TrayError {
        kind: TrayErrorKind::RateLimited(Duration::from_secs(600)),
        detail: "rate limited; retry after 600s".into(),
    });
    w.run_for(2_000);
    let reads = w.tray_reads;
    w.message("conv_b", "@dave");
    w.run_for(5 * MIN);
    assert_eq!(w.tray_reads, reads, "no read inside the 429's wait");
    w.run_for(6 * MIN);
    assert!(w.tray_reads > reads, "read again at the wait's end");
}

/// A tray after a run that cannot be read (503s past the cycle's attempts) leaves the next
/// message's cycle to read it as usual.
#[test]
fn an_unreadable_tray_after_a_run_leaves_the_next_message_its_cycle() {
    let mut w = World::new("2026-12-02T12:00:00Z", "");
    w.invites.push(("inv_1".into(), "@carol".into()));
    w.message("conv_a", "@alice");
    w.run_for(400);
    assert_eq!(w.runs.len(), 1);
    for _ in 0..3 {
        w.tray_errors.push_back(TrayError {
            kind: TrayErrorKind::Transient,
            detail: "HTTP 503".into(),
        });
    }
    w.run_for(10_000);
    let reads = w.tray_reads;
    w.message("conv_b", "@dave");
    w.run_for(MIN);
    assert!(
        w.tray_reads > reads,
        "the next message's cycle read the tray"
    );
}

/// Issue 37 item 4: a `Retry-After` is honoured up to the contract's own longest read wait
/// (171 x 30 s: the no-progress budget back from -170, contract 3.1), not cut to an hour.
#[test]
fn a_retry_after_is_honoured_up_to_the_poll_budgets_longest_wait() {
    let two_hours = crate::reconnect::retry_after_header("7200", 0);
    assert_eq!(two_hours, Some(Duration::from_secs(5130)));
    assert_eq!(
        crate::reconnect::retry_after_header("4000", 0),
        Some(Duration::from_secs(4000)),
        "over an hour, under the bound: as asked"
    );
}

/// Issue 37 item 5: a server that does not accept `rewake` (or `heartbeat`) is said in the
/// status, which lists what it refused.
#[test]
fn capabilities_the_server_refuses_are_in_the_status() {
    let w = World::build("2026-12-02T12:00:00Z", "", Ledger::new(), |w| {
        w.capabilities = vec!["ack"];
    });
    assert_eq!(w.status().capabilities_refused, ["heartbeat", "rewake"]);
    let all = World::new("2026-12-02T12:00:00Z", "");
    assert!(all.status().capabilities_refused.is_empty());
}

/// Issue 37 item 6: an invite the run policy holds (its inviter denied) is not counted by the
/// invite rule when runs start for an allowed card beside it: two runs a minute apart leave it
/// pending, where an allowed invite is dismissed.
#[test]
fn a_held_invite_is_not_counted_by_runs_the_policy_let_start_for_other_cards() {
    let mut w = World::build(
        "2026-12-02T12:00:00Z",
        r#"deny = ["@mallory"]"#,
        Ledger::new(),
        |w| {
            w.invites.push(("inv_m".into(), "@mallory".into()));
            w.invites.push(("inv_c".into(), "@carol".into()));
        },
    );
    for i in 0..3 {
        w.message(&format!("conv_{i}"), "@alice");
        w.run_for(2 * MIN);
    }
    assert!(w.runs.len() >= 3, "{:?}", w.runs);
    assert_eq!(
        w.dismissed,
        ["inv_c"],
        "only the allowed invite is dismissed"
    );
}

/// Issue 37 item 7: an invite from an inviter the tray shows muted starts no run on a
/// reconnect, and is never dismissed by paid runs.
#[test]
fn an_invite_from_a_muted_inviter_starts_no_run_on_reconnect() {
    let mut w = World::build("2026-12-02T12:00:00Z", "", Ledger::new(), |w| {
        w.invites.push(("inv_m".into(), "@mallory".into()));
        w.runs_answer = false;
        w.cards.push((
            "conv_mallory".into(),
            serde_json::json!({"conversation_id": "conv_mallory", "type": "direct",
                "counterparty": {"handle": "@mallory"}, "muted": true}),
        ));
    });
    for _ in 0..3 {
        w.drop_socket();
        w.run_for(MIN);
    }
    assert!(w.runs.is_empty(), "{:?}", w.runs);
    assert!(w.dismissed.is_empty());
}

/// Issue 37 item 1 (issue 36's first finding): a run the runtime refuses although its login
/// check passes is tried once more after the check (`recovered`), then no more on the
/// listener's own: only a server wake (or a reload, or a new binary) tries it again. Before, the
/// check's backoff re-ran it for ever with no server wake (runs at 0.4, 1.2, 2.2, 3.8 s ... at
/// scale 20: about 150 paid runs a day).
#[test]
fn a_run_refused_after_its_check_passed_waits_for_a_server_wake_not_a_retry_ladder() {
    let mut w = World::build("2026-12-02T12:00:00Z", "", Ledger::new(), |w| {
        w.run_outcome = RunOutcome::Unusable("the model answered 401".into());
        w.runs_answer = false;
    });
    w.message("conv_a", "@alice");
    w.run_for(2 * MIN);
    // The message's run, refused; the check (5 s later) passes; its one trial, refused.
    assert_eq!(w.runs.len(), 2, "{:?}", w.runs);
    assert!(w.runs[1].reasons.contains(&"recovered".to_string()));
    w.run_for(24 * 60 * MIN);
    assert_eq!(
        w.runs.len(),
        2,
        "no run without a server wake: {:?}",
        w.runs
    );
    let s = w.status();
    assert_eq!(s.state, ListenerState::RuntimeUnusable);
    assert!(
        s.detail
            .as_deref()
            .is_some_and(|d| d.contains("next message")),
        "{:?}",
        s.detail
    );
    // A server wake is one more trial, and one only.
    w.message("conv_b", "@carol");
    w.run_for(60 * MIN);
    assert_eq!(w.runs.len(), 3, "{:?}", w.runs);
    assert!(w.runs[2].reasons.contains(&"message".to_string()));
    // Refused before a model was asked: none counts toward a cap (issue 34 item 12).
    assert!(w.ledger().runs().is_empty(), "{:?}", w.ledger().runs());
}

/// Issue 37 item 2 (issue 36's second finding): a hold that ends while the tray cannot be read
/// reads it as every cycle does (three tries) and then leaves it to the server's re-wakes.
/// Before, a look every minute re-read it for as long as the outage lasted.
#[test]
fn a_hold_that_ends_while_the_tray_is_unreadable_does_not_reread_it_every_minute() {
    let mut w = World::new("2026-12-02T06:59:00Z", r#"quiet_hours = ["22:00-07:00"]"#);
    w.message("conv_a", "@alice");
    w.run_for(10_000);
    assert!(w.status().held.is_some());
    // The server fails every read from 06:59:30 for an hour.
    w.tray_down_until = w.now.mono_ms + 60 * MIN;
    let reads = w.tray_reads;
    w.run_for(60 * MIN);
    assert!(
        w.tray_reads - reads <= 3,
        "{} reads during the outage",
        w.tray_reads - reads
    );
    assert!(w.runs.is_empty());
}

/// Issue 37 item 3 (issue 36's third finding): a `message.new` in a conversation the agent
/// muted, whose card is past the tray's cut, starts no run for the other cards: an earlier tray
/// showed it muted.
#[test]
fn a_message_in_a_muted_conversation_past_the_cut_starts_no_run() {
    let mut w = World::build("2026-12-02T12:00:00Z", "", Ledger::new(), |w| {
        w.runs_answer = false;
        w.limit = 2;
    });
    // An earlier look saw the muted conversation.
    w.message_muted("conv_m", "@mallory", true);
    w.run_for(MIN);
    assert!(w.runs.is_empty(), "{:?}", w.runs);
    // Two unmuted cards the server re-wakes for come after it, unanswered: the muted card is
    // now past the cut.
    w.cards.push((
        "conv_x".into(),
        serde_json::json!({"conversation_id": "conv_x", "muted": false}),
    ));
    w.cards.push((
        "conv_y".into(),
        serde_json::json!({"conversation_id": "conv_y", "muted": false}),
    ));
    // A new message in the muted conversation (its card stays where it was).
    let pos = w.cards.iter().position(|(c, _)| c == "conv_m").unwrap();
    let m = w.cards.remove(pos);
    w.cards.insert(0, m);
    let frame = serde_json::json!({"type": "message.new", "payload": {
        "id": "msg_late", "conversation_id": "conv_m", "sender": "@mallory", "type": "text"}})
    .to_string();
    let conn = w.connection().unwrap();
    w.input(Input::Burst {
        conn,
        frames: vec![InFrame::Text(frame)],
        lost: None,
    });
    w.run_for(MIN);
    assert!(w.runs.is_empty(), "{:?}", w.runs);
    assert_eq!(
        w.status().last_cycle.and_then(|c| c.no_run_reason),
        Some(NoRunReason::OnlyMuted)
    );
}

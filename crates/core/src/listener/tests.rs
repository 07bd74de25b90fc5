//! The listener machine driven step by step on a hand-held clock, against a small scripted
//! world: a tray the test writes, runs that end when the test says, every other effect answered
//! at once. What these tests pin needs the clock itself (quiet hours, the caps' hour and day,
//! backoffs): the real-binary suite cannot move it without a hook in the product.

mod world;

use super::*;
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

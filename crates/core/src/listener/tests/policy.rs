//! Issue 38 on the hand-held clock: what only the clock shows (loops over hours, a clock set
//! back, a cap across a day, a hold across a restart).

use super::world::World;
use super::*;
use crate::runtime_kind::RuntimeKind;

const MIN: u64 = 60_000;
const HOUR: u64 = 60 * MIN;

/// A world where `@mallory` answers each of our runs two seconds after it ends.
fn looping(start: &str, policy: &str) -> World {
    let mut w = World::build(start, policy, Ledger::new(), |w| {
        w.bot = Some(("conv_loop".into(), "@mallory".into(), 2_000));
    });
    w.message("conv_loop", "@mallory");
    w
}

/// Item 1: with no `[listen.policy]` at all, a loop between two agents stops at the default
/// loop guard (30 runs) and stays stopped for hours: it never resumes by itself. On the code
/// before issue 38 it ran for ever (a run every few seconds).
#[test]
fn a_loop_between_two_agents_stops_at_the_default_guard_and_stays_stopped() {
    let mut w = looping("2026-12-02T12:00:00Z", "");
    w.run_for(3 * HOUR);
    assert_eq!(w.runs.len(), 30, "{} runs", w.runs.len());
    let held = w.status().held.expect("held");
    assert_eq!(
        (held.reason.as_str(), held.key.as_str()),
        ("loop_guard", "loop_guard")
    );
    assert_eq!(held.cards, ["conv_loop"]);
    // Quiet for the window: the loop is over, its last message still starts no run.
    assert_eq!(held.until, None);
}

/// Item 2, the issue's own setting (`runs = 6, within = "30m"` on both sides): before issue 38
/// the guard let the loop go on once the oldest counted run left the window (12 runs, held 30
/// min, 12 more, for ever: 288 a day); now 6 runs, and none in the next four hours.
#[test]
fn the_loop_guard_stops_a_loop_instead_of_slowing_it() {
    let mut w = looping(
        "2026-12-02T12:00:00Z",
        r#"loop_guard = { runs = 6, within = "30m" }"#,
    );
    w.run_for(4 * HOUR);
    assert_eq!(w.runs.len(), 6, "{} runs", w.runs.len());
}

/// Item 2: the hold lasts while the other side keeps writing (each message moves its end),
/// and a reload lets it go at once: the tray is read (`hold_ended`) and the card runs.
#[test]
fn a_loop_is_held_while_its_other_side_writes_and_a_reload_lets_it_go() {
    let mut w = looping(
        "2026-12-02T12:00:00Z",
        r#"loop_guard = { runs = 3, within = "10m" }"#,
    );
    w.run_for(MIN);
    assert_eq!(w.runs.len(), 3);
    w.bot = None;
    // Mallory goes on every 5 minutes for half an hour: held all along.
    for _ in 0..6 {
        w.run_for(5 * MIN);
        w.message("conv_loop", "@mallory");
    }
    w.run_for(MIN);
    assert_eq!(w.runs.len(), 3, "held while the other side writes");
    let held = w.status().held.expect("held");
    let until = held.until.expect("ends unless mallory writes again");
    assert!(until.starts_with("2026-12-02T12:41"), "{until}");
    let cfg = w.l.config().clone();
    w.input(Input::Reload {
        config: Ok(Box::new(cfg)),
        endpoint_changed: false,
    });
    w.run_for(MIN);
    assert_eq!(w.runs.len(), 4, "the reload let it go");
    assert!(w.runs[3].reasons.contains(&"hold_ended".to_string()));
    assert!(w.ledger().loops().released_at("conv_loop").is_some());
}

/// Item 6: a Claude Code run that times out before its `result` counts what it streamed and,
/// with a per-run budget, that budget as an estimated cost, so `max_cost_per_day_usd` holds.
/// Before, each such run added $0 and 0 tokens and the cap never held.
#[test]
fn runs_that_end_before_their_report_count_their_budget_and_the_days_cost_cap_holds() {
    let policy = "max_cost_per_day_usd = 1.0\nmax_cost_per_run_usd = 0.4";
    let mut w = World::build_as(
        "2026-12-02T12:00:00Z",
        policy,
        Ledger::new(),
        RuntimeKind::ClaudeCode,
        |w| {
            w.run_outcome = RunOutcome::Failed("the run timed out".into());
            w.run_report = crate::run_report::RunReport {
                cost_usd: None,
                usage: Some(crate::run_report::Usage {
                    input: 900,
                    cached_input: 0,
                    output: 100,
                }),
                partial: true,
            };
        },
    );
    for i in 0..5 {
        w.message(&format!("conv_{i}"), "@alice");
        w.run_for(MIN);
    }
    assert_eq!(w.runs.len(), 3, "held after three runs at $0.40 each");
    let today = w.status().usage.today;
    assert_eq!((today.runs, today.tokens, today.estimated), (3, 3000, 3));
    assert!((today.cost_usd - 1.2).abs() < 1e-9, "{}", today.cost_usd);
    let held = w.status().held.expect("held");
    assert_eq!(held.key, "max_cost_per_day_usd");
    assert!(w.ledger().runs().iter().all(|r| r.estimated));
}

/// Item 8: a wall clock that was a day ahead and is set back: the hold it reckoned (the day's
/// cap until the next midnight of the wrong day) is judged again, and the run stamped on the
/// wrong day counts today. Before, the hold stayed until the wrong day's next midnight.
#[test]
fn a_clock_set_back_judges_its_hold_again_and_counts_runs_stamped_ahead_today() {
    // The clock says 3 December; it is 2 December.
    let mut w = World::new("2026-12-03T10:00:00Z", "max_runs_per_day = 1");
    w.message("conv_a", "@alice");
    w.run_for(MIN);
    w.message("conv_c", "@carol");
    w.run_for(MIN);
    let held = w.status().held.expect("held");
    assert_eq!(held.until.as_deref(), Some("2026-12-04T00:00:00.000Z"));
    w.set_wall_by(-(24 * HOUR as i64));
    w.run_for(2 * MIN);
    assert_eq!(w.runs.len(), 1);
    let held = w
        .status()
        .held
        .expect("still held: today's run counts today");
    assert_eq!(held.until.as_deref(), Some("2026-12-03T00:00:00.000Z"));
    assert_eq!(w.status().usage.today.runs, 1);
}

/// Item 8: a listener started again while runs are held shows the hold since it began, not
/// since its own start (the ledger keeps it).
#[test]
fn a_restart_keeps_since_when_runs_are_held() {
    let quiet = r#"quiet_hours = ["22:00-07:00"]"#;
    let mut w = World::new("2026-12-02T23:00:00Z", quiet);
    w.message("conv_a", "@alice");
    w.run_for(MIN);
    let since = w.status().held.expect("held").since;
    assert!(since.starts_with("2026-12-02T23:00"), "{since}");
    let kept = w.ledger();
    // The card waits on the server; the new listener's connect reads it.
    let again = World::build("2026-12-02T23:30:00Z", quiet, kept, |w| {
        w.message("conv_a", "@alice");
    });
    assert_eq!(again.status().held.expect("held").since, since);
}

/// A reload that changes the rules wakes a cycle for the hold; when that cycle cannot read the
/// tray (a long 429) and the hold's end comes before one can, the end wakes nothing more: one
/// wake per hold's end (the simulator's `hold_end_once`, seed 95). Before, the end woke a second
/// cycle (`hold_ended` twice).
#[test]
fn a_hold_a_reload_woke_for_ends_without_a_second_wake() {
    let quiet = r#"quiet_hours = ["22:00-07:00"]"#;
    let mut w = World::new("2026-12-02T23:00:00Z", quiet);
    w.message("conv_a", "@alice");
    w.run_for(MIN);
    assert!(w.status().held.is_some());
    let mut cfg = w.l.config().clone();
    cfg.policy.max_runs_per_day = Some(400);
    w.tray_errors.push_back(TrayError {
        kind: TrayErrorKind::RateLimited(std::time::Duration::from_secs(9 * 3600)),
        detail: "rate limited; retry after 32400s".into(),
    });
    w.input(Input::Reload {
        config: Ok(Box::new(cfg)),
        endpoint_changed: false,
    });
    // Past 07:00, and past the 429's wait: the card runs once the tray can be read.
    w.run_for(10 * 60 * MIN);
    assert_eq!(w.runs.len(), 1, "{:#?}", w.runs);
    assert!(
        !w.runs[0].reasons.contains(&"hold_ended".to_string()),
        "the hold's end woke a second cycle: {:?}",
        w.runs[0].reasons
    );
    assert!(w.status().held.is_none());
}

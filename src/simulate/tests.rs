//! The simulator replays a seed exactly, and the scenarios built around issue 36's three
//! findings hold every invariant (each fails on the machine that still has its bug, with the
//! invariant named in the message).

use super::*;

fn run(shape: Shape) -> Report {
    run_shape(shape, &Options::default())
}

fn explain(r: &Report) -> String {
    match &r.violation {
        Some(v) => format!("{v}\n{}", r.last_lines.join("\n")),
        None => "no violation".into(),
    }
}

#[test]
fn a_seed_replays_to_the_same_trace_and_another_seed_does_not() {
    let opts = Options::default();
    let (a, b) = (run_seed(7, &opts), run_seed(7, &opts));
    assert_eq!(
        (a.trace.as_str(), a.steps, a.simulated_ms),
        (b.trace.as_str(), b.steps, b.simulated_ms)
    );
    assert!(a.steps > 1_000, "a seed takes many steps: {}", a.steps);
    assert_ne!(run_seed(8, &opts).trace, a.trace);
}

#[test]
fn finding_1_a_run_the_runtime_refuses_is_not_started_again_on_the_listeners_own_backoff() {
    let r = run(Shape::RefusedRuntime);
    assert!(
        r.reached.contains(&RUN_REFUSED),
        "the runtime refused a run"
    );
    assert_eq!(r.violation, None, "{}", explain(&r));
}

#[test]
fn finding_2_a_hold_that_ends_while_the_tray_answers_503_wakes_one_cycle() {
    let r = run(Shape::HoldEndsInOutage);
    assert!(
        r.reached.contains(&HOLD_END_UNREADABLE),
        "the hold's end met the outage"
    );
    assert_eq!(r.violation, None, "{}", explain(&r));
}

#[test]
fn finding_3_a_muted_message_whose_card_is_past_the_cut_starts_no_run() {
    let r = run(Shape::MutedPastCut);
    assert!(
        r.reached.contains(&MUTED_PAST_CUT),
        "the muted card fell past the cut"
    );
    assert_eq!(r.violation, None, "{}", explain(&r));
}

#[test]
fn every_invariant_is_described_in_the_decisions_page() {
    let page = include_str!("../../docs/decisions.md");
    for (name, _) in INVARIANTS {
        assert!(
            page.contains(&format!("`{name}`")),
            "docs/decisions.md does not name `{name}`"
        );
    }
}

/// The connect storm at a size a debug build runs in seconds (`scripts/simulate --storm 1000`
/// runs the thousand): past the pacer's burst, every profile back within its time.
#[test]
fn a_storm_of_sixty_profiles_comes_back_after_a_server_restart_within_the_pacers_bound_and_time() {
    let (r, verdict) = super::storm::run(60);
    assert!(verdict.is_ok(), "{verdict:?}");
    assert!(r.ip_peak > 20, "past the burst: {}", r.ip_peak);
}

//! Connect pacing under the per-IP connect budget (contract 3.4: 300 socket connects a minute per
//! client IP, refused ones included): the pure policy (`core::pacing`) on random timelines, the
//! sim's per-IP budget, and the listener's dial going through the pacer.

use agentchat::core::pacing::{IP_BUDGET_PER_MINUTE, Pacing, PacingPolicy, WINDOW_MS};
use proptest::prelude::*;

/// The most admitted times in any closed window `[t, t + window]`.
fn peak_in_window(times: &[u64], window: u64) -> u64 {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let mut peak = 0;
    let mut lo = 0;
    for hi in 0..sorted.len() {
        while sorted[hi] - sorted[lo] > window {
            lo += 1;
        }
        peak = peak.max((hi - lo + 1) as u64);
    }
    peak
}

/// A policy the properties explore: small bursts and intervals, so windows fill quickly.
fn policy() -> impl Strategy<Value = PacingPolicy> {
    (1u64..30, 1u64..400, 0u64..400).prop_map(|(burst, interval_ms, jitter)| PacingPolicy {
        burst,
        interval_ms,
        jitter_ms: jitter % interval_ms,
    })
}

/// Gaps between attempts (often none: a storm), each with its jitter draw.
fn asks() -> impl Strategy<Value = Vec<(u64, f64)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => Just(0u64), 1 => 0u64..2_000, 1 => 0u64..120_000],
            0.0f64..1.0,
        ),
        1..600,
    )
}

proptest! {
    #[test]
    fn pacing_never_admits_more_than_its_bound_in_any_window(
        p in policy(),
        gaps in asks(),
        window in prop_oneof![Just(WINDOW_MS), 1u64..10_000],
    ) {
        let mut pc = Pacing::new(p);
        let mut now = 0u64;
        let mut admitted = Vec::new();
        let mut last = 0;
        for (gap, jitter) in gaps {
            now += gap;
            let at = pc.admit(now, jitter);
            prop_assert!(at >= now, "never before it was asked for");
            prop_assert!(at >= last, "FIFO: {at} before {last}");
            last = at;
            admitted.push(at);
        }
        let peak = peak_in_window(&admitted, window);
        prop_assert!(
            peak <= p.max_in_window(window),
            "{peak} in a window of {window} ms, bound {}", p.max_in_window(window)
        );
    }

    #[test]
    fn the_default_pacing_stays_under_the_ip_budget_at_any_time_scale(
        gaps in asks(),
        scale in prop_oneof![Just(1.0f64), Just(20.0), 0.5f64..100.0],
    ) {
        let p = PacingPolicy::default().scaled(scale);
        let window = (WINDOW_MS as f64 / scale) as u64;
        let mut pc = Pacing::new(p);
        let mut now = 0u64;
        let mut admitted = Vec::new();
        for (gap, jitter) in gaps {
            now += (gap as f64 / scale) as u64;
            admitted.push(pc.admit(now, jitter));
        }
        let peak = peak_in_window(&admitted, window);
        prop_assert!(peak < IP_BUDGET_PER_MINUTE, "{peak} in one budget window");
        prop_assert!(peak <= p.max_in_window(window));
    }

    #[test]
    fn an_attempt_that_finds_a_token_and_no_queue_goes_at_once(
        p in policy(),
        gaps in asks(),
    ) {
        let mut pc = Pacing::new(p);
        let mut now = 0u64;
        for (gap, jitter) in gaps {
            now += gap;
            let free = pc.would_go_at(now);
            let at = pc.admit(now, jitter);
            prop_assert_eq!(free, at == now);
        }
    }
}

#[test]
fn a_storm_of_a_thousand_takes_the_paced_time_and_no_more_than_its_jitter_adds() {
    let p = PacingPolicy::default();
    let mut pc = Pacing::new(p);
    let last = (0..1_000)
        .map(|i| pc.admit(0, (i % 7) as f64 / 7.0))
        .max()
        .unwrap();
    assert!(last >= p.time_for(1_000), "{last}");
    assert!(last <= p.time_for(1_000) + p.jitter_ms, "{last}");
}

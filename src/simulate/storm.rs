//! The connect storm of a host with many profiles (`scripts/simulate --storm N`, run by
//! `scripts/test` with a thousand): every profile starts at once, then the server restarts and
//! closes every socket, and the settle drops them all once more. Each step is held to every
//! invariant (`connect_budget`: 300 attempts a minute from the one IP, contract 3.4); the verdict
//! adds the pacer's own bound (`core::pacing`) and that every profile is back within the pacer's
//! time for `n` after the restart, on the virtual clock instead of a real-time window.

use super::{Options, Report, Shape, run_shape};
use crate::core::pacing::{PacingPolicy, WINDOW_MS};

/// The pacer's time for `n` attempts at the defaults, ms.
pub fn paced_ms(n: usize) -> u64 {
    PacingPolicy::default().time_for(u64::try_from(n).unwrap_or(u64::MAX))
}

/// The most a profile may take past the pacer's time to come back after the restart: the
/// first reconnect's backoff (`core::reconnect::BACKOFF_BASE`, 1 s, with its jitter), the
/// pacer's own jitter, the dial itself.
pub const LATE_MS: u64 = 5_000;

/// What a storm of `n` showed: the report, and the verdict (a line of figures, or what failed).
pub fn run(n: usize) -> (Report, Result<String, String>) {
    let r = run_shape(Shape::Storm(n), &Options::default());
    let verdict = judge(&r, n);
    (r, verdict)
}

fn judge(r: &Report, n: usize) -> Result<String, String> {
    if let Some(v) = &r.violation {
        return Err(format!("{v}\n{}", r.last_lines.join("\n")));
    }
    let bound = PacingPolicy::default().max_in_window(WINDOW_MS);
    if r.ip_peak > bound {
        return Err(format!(
            "{} attempts in one minute, over the pacer's bound of {bound}",
            r.ip_peak
        ));
    }
    let restart = super::findings::restart_at_ms(n);
    let mut first = vec![false; n];
    let mut back: Vec<Option<u64>> = vec![None; n];
    for &(t, pid) in &r.accepted_dials {
        if t < restart {
            if let Some(f) = first.get_mut(pid) {
                *f = true;
            }
        } else if let Some(b @ None) = back.get_mut(pid) {
            *b = Some(t - restart);
        }
    }
    if let Some(pid) = first.iter().position(|f| !f) {
        return Err(format!("profile {pid} never connected before the restart"));
    }
    let Some(slowest) = back.iter().map(|b| b.unwrap_or(u64::MAX)).max() else {
        return Err("no profile".into());
    };
    if slowest > paced_ms(n) + LATE_MS {
        return Err(format!(
            "the last profile came back {slowest} ms after the restart (the pacer's time {} ms)",
            paced_ms(n)
        ));
    }
    Ok(format!(
        "storm of {n}: busiest minute {} attempts (pacer bound {bound}, budget 300), all back \
         {:.1} s after the restart (the pacer's time {:.1} s), {:.1} simulated hours",
        r.ip_peak,
        slowest as f64 / 1000.0,
        paced_ms(n) as f64 / 1000.0,
        r.simulated_ms as f64 / 3_600_000.0
    ))
}

//! Connect pacing under the per-IP connect budget (contract 3.4: "Per client IP: 300 socket
//! connects a minute", every attempt counted, refused ones included). One process that hosts many
//! agents shares one client IP, so every socket attempt of every profile is admitted by this one
//! policy before it dials. Pure: times are injected milliseconds and jitter an injected number in
//! [0, 1) (`listen::pacer` is the async gate around it).
//!
//! # The policy
//!
//! A token bucket written as a virtual schedule (GCRA): one attempt per `interval_ms`, up to
//! `burst` at once after a quiet spell. An attempt that finds a token goes at once (a single
//! listener's connect is never delayed); one that has to wait is given the next free slot plus a
//! jitter of up to `jitter_ms`, so the paced attempts of a storm do not land on a metronome's
//! beat. Slots are handed out in call order and never go backwards, so waiters are served FIFO.
//!
//! # The bound
//!
//! Let `T = interval_ms`, `tau = (burst - 1) * T`, `J = jitter_ms < T`. Attempt `i` gets the slot
//! `s_i = max(now_i, tat_{i-1} - tau)` and goes at `a_i = max(s_i + j_i, a_{i-1})` with
//! `0 <= j_i < J`; then `tat_i = max(tat_{i-1}, s_i) + T`. Since `tat_i >= tat_{i-1} + T` and
//! `tat_j >= s_j + T`, for `i > j`: `s_i >= tat_{i-1} - tau >= s_j + (i - j) T - tau`. Slots only
//! grow, so `a_j <= s_j + J` (by induction), and `a_i >= s_i`. Hence
//! `a_i - a_j >= (i - j) T - tau - J`. If `n` admitted attempts fall in one closed window of
//! length `W`, the first and last of them by index differ by at least `n - 1`, and by at most
//! `W` in time: `(n - 1) T - tau - J <= W`, so `n <= burst + (W + J) / T`, and with `J < T`
//! and `W` a multiple of `T`: **`n <= burst + W / T`**. For the defaults (`burst` 20, one every
//! 250 ms, jitter under 125 ms) that is **at most 260 attempts in any 60 s window**, 40 below the
//! budget's 300: room for a connect's own latency moving attempts closer together on the way to
//! the server, and for the odd tool on the same host (`max_in_window` computes the bound;
//! `tests/it/pacing.rs` checks it on random timelines).

/// The contract's per-IP budget: 300 socket connects a minute (contract 3.4).
pub const IP_BUDGET_PER_MINUTE: u64 = 300;
/// The budget's window, in milliseconds (contract 3.4: "a minute").
pub const WINDOW_MS: u64 = 60_000;

/// The pacing parameters. `Default` is the project's choice (docs/decisions.md, "Connect
/// pacing"): 240 a minute after a burst of 20, jitter up to half an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacingPolicy {
    /// Attempts that may go at once after a quiet spell (at least 1).
    pub burst: u64,
    /// The steady spacing between attempts, in ms (at least 1).
    pub interval_ms: u64,
    /// The most a waiting attempt is moved later, in ms (below `interval_ms`).
    pub jitter_ms: u64,
}

impl Default for PacingPolicy {
    fn default() -> Self {
        PacingPolicy {
            burst: 20,
            interval_ms: 250,
            jitter_ms: 125,
        }
    }
}

impl PacingPolicy {
    /// The same policy with its minute divided by `scale` (the test time scale, like the sim's
    /// budget windows under `--time-scale`): the interval and jitter shrink, never below 1 ms,
    /// and are rounded up, so the bound over a scaled window (`WINDOW_MS / scale`) still holds.
    /// A scale that is not a finite number above zero is 1.
    pub fn scaled(self, scale: f64) -> PacingPolicy {
        if !(scale.is_finite() && scale > 0.0) || scale == 1.0 {
            return self;
        }
        let div = |ms: u64| -> u64 {
            let v = (ms as f64 / scale).ceil();
            if v.is_finite() && v >= 1.0 {
                v.min(u64::MAX as f64) as u64
            } else {
                1
            }
        };
        let interval_ms = div(self.interval_ms);
        PacingPolicy {
            burst: self.burst,
            interval_ms,
            // Kept below the interval, which the bound needs (`J < T`).
            jitter_ms: div(self.jitter_ms).min(interval_ms.saturating_sub(1)),
        }
    }

    /// The most attempts this policy admits in any closed window of `window_ms`
    /// (`burst + floor((window + jitter) / interval)`, the bound proven in the module's doc).
    pub fn max_in_window(&self, window_ms: u64) -> u64 {
        let t = self.interval_ms.max(1);
        let jitter = self.jitter_ms.min(t.saturating_sub(1));
        self.burst
            .max(1)
            .saturating_add(window_ms.saturating_add(jitter) / t)
    }

    /// The shortest time in which `n` attempts, all asked for at once, are admitted (the last
    /// one's slot): `(n - burst) * interval`, none when `n <= burst`.
    pub fn time_for(&self, n: u64) -> u64 {
        n.saturating_sub(self.burst.max(1))
            .saturating_mul(self.interval_ms.max(1))
    }
}

/// The pacing state: the virtual schedule and the last admitted time.
#[derive(Debug, Clone)]
pub struct Pacing {
    policy: PacingPolicy,
    /// The theoretical arrival time: when the bucket is full again (ms).
    tat: u64,
    /// The latest admitted time, so a later caller never goes before an earlier one (FIFO).
    last: u64,
}

impl Pacing {
    pub fn new(policy: PacingPolicy) -> Pacing {
        Pacing {
            policy: PacingPolicy {
                burst: policy.burst.max(1),
                interval_ms: policy.interval_ms.max(1),
                jitter_ms: policy.jitter_ms.min(policy.interval_ms.saturating_sub(1)),
            },
            tat: 0,
            last: 0,
        }
    }

    pub fn policy(&self) -> PacingPolicy {
        self.policy
    }

    /// Reserves the next attempt asked for at `now_ms`, `jitter` in [0, 1): the time it may
    /// dial, at or after `now_ms`. `now_ms` itself when a token is free and nobody is queued.
    pub fn admit(&mut self, now_ms: u64, jitter: f64) -> u64 {
        let p = self.policy;
        let tau = (p.burst - 1).saturating_mul(p.interval_ms);
        let slot = now_ms.max(self.tat.saturating_sub(tau));
        let at = if slot == now_ms && self.last <= now_ms {
            now_ms
        } else {
            let j = if jitter.is_finite() {
                jitter.clamp(0.0, 1.0)
            } else {
                0.0
            };
            let extra = ((p.jitter_ms as f64) * j) as u64;
            slot.saturating_add(extra.min(p.jitter_ms)).max(self.last)
        };
        self.tat = self.tat.max(slot).saturating_add(p.interval_ms);
        self.last = at;
        at
    }

    /// Whether an attempt asked for at `now_ms` would go at once.
    pub fn would_go_at(&self, now_ms: u64) -> bool {
        let p = self.policy;
        let tau = (p.burst - 1).saturating_mul(p.interval_ms);
        self.tat.saturating_sub(tau) <= now_ms && self.last <= now_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_bound_is_260_a_minute_under_the_budget_of_300() {
        let p = PacingPolicy::default();
        assert_eq!(p.max_in_window(WINDOW_MS), 260);
        assert!(p.max_in_window(WINDOW_MS) < IP_BUDGET_PER_MINUTE);
    }

    #[test]
    fn a_quiet_pacer_admits_at_once_then_a_burst_then_one_per_interval() {
        let mut pc = Pacing::new(PacingPolicy {
            burst: 3,
            interval_ms: 100,
            jitter_ms: 0,
        });
        assert_eq!(pc.admit(1_000, 0.5), 1_000, "the first goes at once");
        assert_eq!(pc.admit(1_000, 0.5), 1_000);
        assert_eq!(pc.admit(1_000, 0.5), 1_000);
        assert_eq!(
            pc.admit(1_000, 0.5),
            1_100,
            "past the burst: one interval on"
        );
        assert_eq!(pc.admit(1_000, 0.5), 1_200);
        // After a quiet spell the burst is back.
        assert!(pc.would_go_at(10_000));
        assert_eq!(pc.admit(10_000, 0.9), 10_000);
    }

    #[test]
    fn waiting_attempts_are_jittered_within_the_jitter_and_stay_in_order() {
        let mut pc = Pacing::new(PacingPolicy {
            burst: 1,
            interval_ms: 100,
            jitter_ms: 50,
        });
        assert_eq!(pc.admit(0, 0.99), 0);
        let a = pc.admit(0, 0.99);
        assert!((100..150).contains(&a), "{a}");
        let b = pc.admit(0, 0.0);
        assert!(b >= a, "FIFO: {b} after {a}");
        assert!((200..250).contains(&b), "{b}");
    }

    #[test]
    fn scaling_divides_the_minute_and_keeps_the_bound() {
        let p = PacingPolicy::default().scaled(20.0);
        assert_eq!(p.interval_ms, 13, "250 / 20 rounded up");
        assert!(p.jitter_ms < p.interval_ms);
        assert!(p.max_in_window(WINDOW_MS / 20) < IP_BUDGET_PER_MINUTE);
        assert_eq!(
            PacingPolicy::default().scaled(f64::NAN),
            PacingPolicy::default()
        );
        assert_eq!(PacingPolicy::default().scaled(1e300).interval_ms, 1);
    }

    #[test]
    fn garbage_jitter_is_no_jitter_and_never_panics() {
        let mut pc = Pacing::new(PacingPolicy::default());
        for j in [f64::NAN, f64::INFINITY, -1.0, 2.0] {
            let _ = pc.admit(0, j);
        }
        let mut z = Pacing::new(PacingPolicy {
            burst: 0,
            interval_ms: 0,
            jitter_ms: 10,
        });
        assert_eq!(z.admit(u64::MAX, 0.5), u64::MAX);
        let _ = z.admit(u64::MAX, 0.5);
    }
}

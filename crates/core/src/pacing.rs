//! Connect pacing under the per-IP connect budget (contract 3.4: "Per client IP: 300 socket
//! connects a minute", every attempt counted, refused ones included). One process that hosts many
//! agents shares one client IP, so every socket attempt of every profile is admitted by this one
//! policy before it dials. Pure: times are injected milliseconds and jitter an injected number in
//! [0, 1) (`listen::pacer` is the async gate around it).
//!
//! # The policy
//!
//! A token bucket written as a virtual schedule (GCRA): one attempt per `interval_ms`, up to
//! `burst` at once after a quiet spell. An attempt is admitted only at the moment it really goes
//! (`admit` with the time now): one that finds a token goes at once (a single listener's connect
//! is never delayed); one that finds none is told how long to wait, the time to the next token
//! plus a jitter of up to `jitter_ms`, so the paced attempts of a storm do not land on a
//! metronome's beat, and asks again then. Because the bucket is checked when an attempt goes,
//! not when it asked, a waiter woken late (a busy process) cannot make attempts bunch beyond the
//! bound; `listen::pacer` serves the waiters one at a time in the order they came (FIFO).
//!
//! # The bound
//!
//! Let `T = interval_ms` and `tau = (burst - 1) * T`. Attempt `i` is admitted at `a_i` only if
//! `a_i >= tat_{i-1} - tau`, and then `tat_i = max(tat_{i-1}, a_i) + T`. So `tat_i >= tat_{i-1} + T`
//! and `tat_j >= a_j + T`, and for `i > j`:
//! `a_i >= tat_{i-1} - tau >= tat_j + (i - 1 - j) T - tau >= a_j + (i - j) T - tau`.
//! If `n` admitted attempts fall in one closed window of length `W`, the first and the last of
//! them by index are at least `n - 1` apart and at most `W` apart in time:
//! `(n - 1) T - tau <= W`, so **`n <= burst + W / T`** (rounded down), whatever the jitter and
//! however late a waiter woke. For the defaults (`burst` 20, one every 250 ms) that is **at most
//! 260 attempts in any 60 s window**, 40 below the budget's 300: room for a connect's own latency
//! moving attempts closer together on the way to the server, and for the odd tool on the same
//! host (`max_in_window` computes the bound; `tests/it/pacing.rs` checks it on random timelines,
//! late wake-ups included). The jitter costs no rate: while attempts wait the bucket is empty and
//! `tat` runs ahead of them, so an attempt that went a little late does not move the next slot.

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
    /// (`burst + floor(window / interval)`, the bound proven in the module's doc).
    pub fn max_in_window(&self, window_ms: u64) -> u64 {
        self.burst
            .max(1)
            .saturating_add(window_ms / self.interval_ms.max(1))
    }

    /// The shortest time in which `n` attempts, all asked for at once, are admitted (the last
    /// one's slot): `(n - burst) * interval`, none when `n <= burst`.
    pub fn time_for(&self, n: u64) -> u64 {
        n.saturating_sub(self.burst.max(1))
            .saturating_mul(self.interval_ms.max(1))
    }
}

/// What `Pacing::admit` says about an attempt now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Go now: a token was taken.
    Go,
    /// No token yet: ask again after this many ms (the next token's time plus the jitter).
    Wait(u64),
}

/// The pacing state: the virtual schedule.
#[derive(Debug, Clone)]
pub struct Pacing {
    policy: PacingPolicy,
    /// The theoretical arrival time: when the bucket is full again (ms).
    tat: u64,
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
        }
    }

    pub fn policy(&self) -> PacingPolicy {
        self.policy
    }

    /// The earliest time a token is free.
    fn next_token_at(&self) -> u64 {
        let p = self.policy;
        self.tat
            .saturating_sub((p.burst - 1).saturating_mul(p.interval_ms))
    }

    /// An attempt that would go at `now_ms` (`jitter` in [0, 1)): `Go` takes a token; `Wait`
    /// takes nothing and says when to ask again.
    pub fn admit(&mut self, now_ms: u64, jitter: f64) -> Admit {
        let p = self.policy;
        let at = self.next_token_at();
        if at <= now_ms {
            self.tat = self.tat.max(now_ms).saturating_add(p.interval_ms);
            return Admit::Go;
        }
        let j = if jitter.is_finite() {
            jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let extra = (((p.jitter_ms as f64) * j) as u64).min(p.jitter_ms);
        Admit::Wait((at - now_ms).saturating_add(extra))
    }

    /// Whether an attempt at `now_ms` would go at once.
    pub fn would_go(&self, now_ms: u64) -> bool {
        self.next_token_at() <= now_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attempts asked for at `asks` (in order), each served after the one before it went, as
    /// `listen::pacer` serves them; every wait is woken `late` ms late. The times they went.
    fn serve(pc: &mut Pacing, asks: &[(u64, f64)], late: u64) -> Vec<u64> {
        let mut went = Vec::new();
        let mut free = 0;
        for &(ask, jitter) in asks {
            let mut now = ask.max(free);
            while let Admit::Wait(ms) = pc.admit(now, jitter) {
                now += ms + late;
            }
            went.push(now);
            free = now;
        }
        went
    }

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
        let went = serve(&mut pc, &[(1_000, 0.5); 5], 0);
        assert_eq!(went, vec![1_000, 1_000, 1_000, 1_100, 1_200]);
        // After a quiet spell the burst is back.
        assert!(pc.would_go(10_000));
        assert_eq!(pc.admit(10_000, 0.9), Admit::Go);
    }

    #[test]
    fn waiting_attempts_are_jittered_within_the_jitter_without_losing_rate() {
        let mut pc = Pacing::new(PacingPolicy {
            burst: 2,
            interval_ms: 100,
            jitter_ms: 50,
        });
        let went = serve(&mut pc, &[(0, 0.99); 12], 0);
        for (i, at) in went.iter().enumerate().skip(2) {
            let slot = (i as u64 - 1) * 100;
            assert!((slot..slot + 50).contains(at), "attempt {i} at {at}");
        }
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
        assert_eq!(z.admit(u64::MAX, 0.5), Admit::Go);
        let _ = z.admit(u64::MAX, 0.5);
    }
}

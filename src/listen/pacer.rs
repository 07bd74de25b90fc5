//! The connect pacer: one gate per process that every profile's socket passes before each
//! attempt (start-up, every reconnect, a refused key's retries, the retry after a `1013`), so a
//! process hosting many agents stays under the per-IP connect budget (contract 3.4: 300 a minute,
//! refused attempts included). The policy and its bound are `core::pacing`.
//!
//! Cheap when idle: no task and no timer of its own; an attempt that finds a token goes at once.
//! Fair and FIFO: the waiters queue on one fair lock (tokio's `Mutex` serves in the order asked);
//! the one at the head sleeps until the next token (plus jitter) and takes it when it really
//! goes, so a waiter woken late cannot bunch attempts past the bound (`core::pacing`). Bounded:
//! each socket task waits for at most one attempt at a time, so the queue is at most one per
//! profile. A waiter that is dropped (shutdown, a reload) leaves the queue and takes nothing.

use crate::core::pacing::{Admit, Pacing, PacingPolicy};
use crate::log_events;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

/// The gate; clones share it.
#[derive(Clone, Debug)]
pub struct Pacer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pacing: tokio::sync::Mutex<Pacing>,
    policy: PacingPolicy,
    origin: Instant,
}

impl Pacer {
    /// A pacer with the default policy, its minute divided by `scale` (the test time scale in
    /// effect, `config::TestTimeScale`: 1 unless honoured against a loopback `api_base`).
    pub fn new(scale: f64) -> Pacer {
        Pacer::with_policy(PacingPolicy::default().scaled(scale))
    }

    pub fn with_policy(policy: PacingPolicy) -> Pacer {
        let pacing = Pacing::new(policy);
        Pacer {
            inner: Arc::new(Inner {
                policy: pacing.policy(),
                pacing: tokio::sync::Mutex::new(pacing),
                origin: Instant::now(),
            }),
        }
    }

    /// The process's one pacer, made on first use with that caller's scale (every profile of a
    /// process runs under the same scale). The process layer may hand its own down instead.
    pub fn shared(scale: f64) -> Pacer {
        static SHARED: OnceLock<Pacer> = OnceLock::new();
        SHARED.get_or_init(|| Pacer::new(scale)).clone()
    }

    pub fn policy(&self) -> PacingPolicy {
        self.inner.policy
    }

    /// Waits for this attempt's turn and token; returns how long it waited. At once when nobody
    /// waits and a token is free.
    pub async fn admit(&self) -> Duration {
        let asked = Instant::now();
        let mut pacing = self.inner.pacing.lock().await;
        loop {
            let now_ms = self.ms_since_origin(Instant::now());
            match pacing.admit(now_ms, fastrand::f64()) {
                Admit::Go => break,
                Admit::Wait(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            }
        }
        drop(pacing);
        let waited = asked.elapsed();
        tracing::debug!(
            event = %log_events::CONNECT_PACED,
            waited_ms = waited.as_millis() as u64,
            "connect attempt admitted by the pacer"
        );
        waited
    }

    fn ms_since_origin(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.inner.origin)
            .as_millis()
            .min(u128::from(u64::MAX)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_quiet_pacer_lets_the_first_attempt_through_at_once() {
        let p = Pacer::new(1.0);
        assert_eq!(p.admit().await, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_past_the_burst_are_spaced_and_served_in_order() {
        let p = Pacer::with_policy(PacingPolicy {
            burst: 2,
            interval_ms: 100,
            jitter_ms: 40,
        });
        let start = tokio::time::Instant::now();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for i in 0..6u32 {
            let p = p.clone();
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                p.admit().await;
                tx.send((i, start.elapsed())).unwrap();
            }));
            // Each asks after the one before, so FIFO has an order to keep.
            tokio::task::yield_now().await;
        }
        drop(tx);
        let mut got = Vec::new();
        while let Some(x) = rx.recv().await {
            got.push(x);
        }
        let order: Vec<u32> = got.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, vec![0, 1, 2, 3, 4, 5], "FIFO");
        for (i, at) in &got {
            let slot = u64::from(i.saturating_sub(1)) * 100;
            let ms = at.as_millis() as u64;
            assert!(
                ms >= slot && ms <= slot + 41,
                "attempt {i} at {ms} ms, slot {slot}"
            );
        }
    }
}

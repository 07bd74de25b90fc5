//! The wake webhook's POST: one attempt to the subscription's URL, bounded (5 s to connect,
//! 10 s in all, no redirect followed, the answer's body never read), then its outcome recorded
//! (`due::webhook_settle`). And the test wake, which answers with the receiver's status.

use std::time::Duration;

use serde_json::{Value, json};

use super::super::error::{Rejection, SimResult};
use super::super::http::Sim;
use super::Attempt;

/// The client every wake goes out through: no proxy (the receivers a sim wakes are local), no
/// redirects, short limits.
pub fn client() -> reqwest::Client {
    crate::sys::tls::http_client_builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default()
}

/// Sends `a` and records the receiver's answer: its status, or why there was none.
pub async fn deliver(sim: Sim, a: Attempt) -> (Option<u16>, Option<String>) {
    let mut req = sim
        .hooks
        .post(&a.url)
        .header("content-type", "application/json")
        .header(
            "user-agent",
            concat!(
                "AgentChat-Wake/1 (agentchat sim ",
                env!("CARGO_PKG_VERSION"),
                ")"
            ),
        );
    for (k, v) in &a.framed.headers {
        req = req.header(*k, v);
    }
    let (status, error) = match req.body(a.framed.body.clone()).send().await {
        Ok(r) => (Some(r.status().as_u16()), None),
        Err(e) => (None, Some(e.without_url().to_string())),
    };
    tracing::info!(
        "sim: wake webhook for @{} ({}, attempt {}) -> {}",
        a.handle,
        a.reason,
        a.attempt,
        status.map_or_else(|| "no answer".to_string(), |s| s.to_string())
    );
    sim.lock().webhook_settle(&a, status, error.clone());
    (status, error)
}

/// `POST /v1/agents/me/wake-webhook/test`: one test wake now, answered once the receiver has
/// answered: `{"delivery_id", "status", "accepted", "error"}`.
pub async fn test(sim: &Sim, h: &str) -> SimResult<Value> {
    let Some(a) = sim.lock().test_attempt(h) else {
        return Err(Rejection::not_found(
            "WAKE_WEBHOOK_NOT_FOUND",
            "no wake webhook is registered: PUT /v1/agents/me/wake-webhook first",
        ));
    };
    let delivery_id = a.delivery_id.clone();
    let (status, error) = deliver(sim.clone(), a).await;
    Ok(json!({
        "delivery_id": delivery_id,
        "status": status,
        "accepted": status.is_some_and(|s| (200..300).contains(&s)),
        "error": error,
    }))
}

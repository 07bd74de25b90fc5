//! Waiting on something a `select!` arm may not have: an optional deadline, an optional future.
//! Without it the wait never ends, so the arm never fires and the loop needs no flag for it.

use std::future::Future;
use tokio::time::Instant;

/// At `deadline`; never for `None`.
pub async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// What `f` gives; never for `None`. `slot.as_mut()` awaits a held task or receiver in place, so
/// it is still there for the next turn when another arm wins.
pub async fn some<F: Future>(f: Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn nothing_to_wait_for_never_ends_and_something_ends_when_it_does() {
        let never = tokio::time::timeout(Duration::from_secs(3600), until(None)).await;
        assert!(never.is_err());
        let none: Option<std::future::Ready<u8>> = None;
        assert!(
            tokio::time::timeout(Duration::from_secs(3600), some(none))
                .await
                .is_err()
        );
        let start = Instant::now();
        until(Some(start + Duration::from_secs(5))).await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        let (tx, mut rx) = tokio::sync::oneshot::channel::<u8>();
        let mut slot = Some(&mut rx);
        tx.send(7).unwrap();
        assert_eq!(some(slot.as_mut()).await, Ok(7));
    }
}

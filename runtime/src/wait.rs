//! Waiting for a condition, the one way the lab polls: a look every `every` until it says done, fails, or
//! `deadline` passes (the faults' proofs, the local runtime's steps, the Kubernetes runtime's training wait).
//! What the last look saw goes into the caller's timeout error, so a wait that ran out says why.

use std::future::Future;
use std::time::{Duration, Instant};

/// What one look says: done (with its answer), or not yet (with what it saw).
#[derive(Debug)]
pub enum Look<T> {
    Done(T),
    NotYet(String),
}

/// Looks every `every` until a look is [`Look::Done`], for at most `deadline` (the first look is at once).
/// `Ok(Err(seen))` when the deadline passed: `seen` is what the last look saw.
///
/// # Errors
/// The first look that fails, at once.
pub async fn poll<T, E, F, Fut>(
    every: Duration,
    deadline: Duration,
    mut look: F,
) -> Result<Result<T, String>, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Look<T>, E>>,
{
    let start = Instant::now();
    loop {
        match look().await? {
            Look::Done(v) => return Ok(Ok(v)),
            Look::NotYet(seen) if start.elapsed() > deadline => return Ok(Err(seen)),
            Look::NotYet(_) => tokio::time::sleep(every).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn done_late_not_done_and_failed() {
        let every = Duration::from_millis(500);
        let mut n = 0;
        let r: Result<_, String> = poll(every, Duration::from_secs(5), || {
            n += 1;
            let n = n;
            async move {
                Ok(if n == 3 {
                    Look::Done(n)
                } else {
                    Look::NotYet(format!("look {n}"))
                })
            }
        })
        .await;
        assert_eq!(r, Ok(Ok(3)));
        let r: Result<Result<(), String>, String> = poll(every, Duration::from_secs(2), || async {
            Ok(Look::NotYet("still".into()))
        })
        .await;
        assert_eq!(r, Ok(Err("still".to_string())));
        let r: Result<Result<(), String>, String> = poll(every, Duration::from_secs(2), || async {
            Err("broken".to_string())
        })
        .await;
        assert_eq!(r, Err("broken".to_string()));
    }
}

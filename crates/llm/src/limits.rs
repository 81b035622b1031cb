//! Admission control for requests to one endpoint: at most `max_in_flight` at once, at most
//! `requests_per_minute` started and at most `tokens_per_minute` (estimated) sent in any
//! 60-second window (providers reject bursts with 429; pacing here avoids burning retries on
//! them).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

const WINDOW: Duration = Duration::from_secs(60);

/// The starts inside the current window, oldest first, each with its estimated tokens.
type TokenWindow = Mutex<VecDeque<(Instant, u64)>>;

pub(crate) struct RequestGate {
    in_flight: Semaphore,
    per_minute: Option<(u32, Mutex<VecDeque<Instant>>)>,
    tokens_per_minute: Option<(u64, TokenWindow)>,
}

impl RequestGate {
    pub(crate) fn new(
        max_in_flight: usize,
        requests_per_minute: Option<u32>,
        tokens_per_minute: Option<u32>,
    ) -> Self {
        Self {
            in_flight: Semaphore::new(max_in_flight.max(1)),
            per_minute: requests_per_minute
                .filter(|&limit| limit > 0)
                .map(|limit| (limit, Mutex::new(VecDeque::with_capacity(limit as usize)))),
            tokens_per_minute: tokens_per_minute
                .filter(|&limit| limit > 0)
                .map(|limit| (u64::from(limit), Mutex::new(VecDeque::new()))),
        }
    }

    /// Waits for a free slot; the request may start while the permit is held. The in-flight
    /// permit is taken first so that a start time recorded in the window is a real start.
    pub(crate) async fn admit(&self, estimated_tokens: u64) -> SemaphorePermit<'_> {
        let permit = self
            .in_flight
            .acquire()
            .await
            .expect("the request gate's semaphore is never closed");
        if let Some((limit, starts)) = &self.per_minute {
            loop {
                let wait_until = {
                    let mut starts = starts
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    let now = Instant::now();
                    while starts
                        .front()
                        .is_some_and(|&start| now.duration_since(start) >= WINDOW)
                    {
                        starts.pop_front();
                    }
                    if starts.len() < *limit as usize {
                        starts.push_back(now);
                        None
                    } else {
                        starts.front().map(|&oldest| oldest + WINDOW)
                    }
                };
                match wait_until {
                    None => break,
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                }
            }
        }
        if let Some((limit, sent)) = &self.tokens_per_minute {
            loop {
                let wait_until = {
                    let mut sent = sent.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    let now = Instant::now();
                    while sent
                        .front()
                        .is_some_and(|&(start, _)| now.duration_since(start) >= WINDOW)
                    {
                        sent.pop_front();
                    }
                    let in_window: u64 = sent.iter().map(|&(_, tokens)| tokens).sum();
                    // A request larger than the whole budget still goes, alone in its window.
                    if sent.is_empty() || in_window + estimated_tokens <= *limit {
                        sent.push_back((now, estimated_tokens));
                        None
                    } else {
                        sent.front().map(|&(oldest, _)| oldest + WINDOW)
                    }
                };
                match wait_until {
                    None => break,
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                }
            }
        }
        permit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn requests_per_minute_window_delays_the_excess_start() {
        let gate = RequestGate::new(10, Some(2), None);
        let begin = Instant::now();
        drop(gate.admit(1).await);
        drop(gate.admit(1).await);
        assert!(begin.elapsed() < Duration::from_secs(1));
        drop(gate.admit(1).await);
        assert!(
            begin.elapsed() >= WINDOW,
            "third start waited {:?}",
            begin.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_per_minute_window_delays_the_request_that_would_exceed_it() {
        let gate = RequestGate::new(10, None, Some(1000));
        let begin = Instant::now();
        drop(gate.admit(600).await);
        drop(gate.admit(400).await);
        assert!(begin.elapsed() < Duration::from_secs(1));
        drop(gate.admit(1).await);
        assert!(begin.elapsed() >= WINDOW, "waited {:?}", begin.elapsed());
        // Alone in a fresh window, a request over the whole budget is not blocked forever.
        let big = RequestGate::new(10, None, Some(10));
        drop(big.admit(50).await);
    }
}

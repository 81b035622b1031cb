//! Throughput of the LLM layer against the in-process mock server with a fixed latency: how
//! close `requests / wall time` comes to the ideal `ceil(requests / concurrency) * latency`,
//! at several concurrency limits. Every request is distinct (replicate index), so nothing is
//! served from the cache, and each passes the same validation a stage's answer does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use viss_llm::mock_server::{MockHttp, MockReply, MockServer};
use viss_llm::{ChatRequest, HttpBackend, LlmError, MemoryResponseCache, Message, complete_json};

#[derive(Debug, Serialize)]
pub struct ConcurrencyResult {
    pub concurrency: usize,
    pub requests: usize,
    pub seconds: f64,
    pub ideal_seconds: f64,
    pub requests_per_second: f64,
    /// `ideal_seconds / seconds`: 1.0 means the latency is the only cost.
    pub ratio_of_ideal: f64,
    pub most_in_flight_seen_by_server: usize,
}

#[derive(Debug, Serialize)]
pub struct LlmBenchReport {
    pub latency_ms: u64,
    pub results: Vec<ConcurrencyResult>,
}

impl LlmBenchReport {
    /// The one-line summary `viss bench` prints after the JSON report.
    pub fn summary(&self) -> String {
        self.results
            .iter()
            .map(|result| {
                format!(
                    "{} requests, {} ms latency, concurrency {}: {:.2} s (ideal {:.2} s), {:.1} \
                     req/s, {:.3} of ideal; server saw at most {} in flight",
                    result.requests,
                    self.latency_ms,
                    result.concurrency,
                    result.seconds,
                    result.ideal_seconds,
                    result.requests_per_second,
                    result.ratio_of_ideal,
                    result.most_in_flight_seen_by_server
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

pub fn run_llm_bench(
    requests: usize,
    latency: Duration,
    concurrencies: &[usize],
) -> Result<LlmBenchReport, LlmError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| LlmError::Client(error.to_string()))?;
    let mut results = Vec::new();
    for &concurrency in concurrencies {
        results.push(runtime.block_on(one_run(requests, latency, concurrency))?);
    }
    Ok(LlmBenchReport {
        latency_ms: latency.as_millis() as u64,
        results,
    })
}

async fn one_run(
    requests: usize,
    latency: Duration,
    concurrency: usize,
) -> Result<ConcurrencyResult, LlmError> {
    let server =
        MockServer::start(move |_, _| MockReply::answer(r#"{"emotion": "joy"}"#).after(latency))
            .await;
    let mut config = server.config();
    config.max_in_flight = concurrency;
    config.timeout = latency * 10 + Duration::from_secs(5);
    let backend = Arc::new(HttpBackend::new(config)?);
    let cache = Arc::new(MemoryResponseCache::new());
    let schema = json!({
        "type": "object",
        "properties": {"emotion": {"type": "string", "enum": ["joy", "sadness", "neutral"]}},
        "required": ["emotion"],
        "additionalProperties": false
    });
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(requests);
    for replicate in 0..requests {
        let backend = backend.clone();
        let cache = cache.clone();
        let mut request = ChatRequest::new(vec![Message::user(
            "How does the speaker feel? \"I got the job!\"",
        )])
        .with_schema("emotion", schema.clone());
        request.replicate = replicate as u32;
        tasks.push(tokio::spawn(async move {
            complete_json(&*backend, &request, &*cache, &|value| {
                let mut problems = viss_llm::Problems::new();
                if !value["emotion"].is_string() {
                    let message = "emotion must be a string".to_string();
                    problems.unusable("not_a_string", None, "emotion", message);
                }
                problems.finish()
            })
            .await
            .map(|_| ())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|error| LlmError::Client(error.to_string()))??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let ideal_seconds = requests.div_ceil(concurrency.max(1)) as f64 * latency.as_secs_f64();
    Ok(ConcurrencyResult {
        concurrency,
        requests,
        seconds,
        ideal_seconds,
        requests_per_second: requests as f64 / seconds,
        ratio_of_ideal: ideal_seconds / seconds,
        most_in_flight_seen_by_server: server
            .state
            .most_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
    })
}

//! An endpoint's batch API (OpenAI's `/v1/files` and `/v1/batches`, which vLLM and several
//! providers also serve): with `batch = true`, the requests a build sends to the endpoint are
//! gathered for a moment, written as one JSON-lines file, uploaded and submitted as a batch
//! instead of one call each, at the provider's batch discount.
//!
//! Every request line is named by the hash of its body (`custom_id`), and before anything waits
//! on a batch its id is recorded under each of its lines' names in the store's memos (the
//! *ledger*). A build killed while a batch is pending, or a later build, asks for the same lines
//! and finds them there: it waits on that batch again instead of submitting. A line the batch did
//! not answer (it expired, failed as a whole, or failed that line) is resubmitted in a new batch
//! on its own, at most `batch_resubmits` times. Answers go through the same checks, re-asks
//! and response cache as online ones (a re-ask is a new line, in the next batch), and are cached
//! under the same request keys, so the online and batched paths share every answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tracing::{info, warn};
use viss_engine::hash::ContentHash;

use crate::cache::ResponseCache;
use crate::error::LlmError;

/// How an endpoint's batches are made and waited on (`[llm.endpoints.*] batch_*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchSettings {
    /// How long the first request waits for others to join its batch.
    pub window: Duration,
    /// Lines per batch at most (OpenAI takes 50,000).
    pub max_requests: usize,
    /// The first wait between two looks at a pending batch; doubled each time up to
    /// [`MAX_POLL`].
    pub poll: Duration,
    /// The batch price as a fraction of the online one (OpenAI: 0.5).
    pub discount: f64,
    /// How many times a line the batch did not answer is submitted again.
    pub resubmits: u32,
    /// Re-ask rounds sent in batches; later ones go to the endpoint online, at its full price,
    /// so a stubborn answer does not wait a batch window per round.
    pub reask_rounds: u32,
}

/// The longest wait between two looks at a pending batch.
pub const MAX_POLL: Duration = Duration::from_secs(600);

/// The ledger's key for the batches still pending: what `viss status` lists.
pub fn pending_key() -> ContentHash {
    ContentHash::of(b"viss batch ledger: pending batches")
}

/// The ledger's key for the batch a line was last submitted in.
fn line_key(custom_id: &str) -> ContentHash {
    ContentHash::of(format!("viss batch ledger: line {custom_id}").as_bytes())
}

/// A batch submitted and not yet seen finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingBatch {
    pub id: String,
    pub endpoint: String,
    pub model: String,
    pub requests: usize,
    pub submitted_unix_ms: u64,
}

/// The batches still pending, as the ledger holds them.
pub fn pending_batches(ledger: &dyn ResponseCache) -> Vec<PendingBatch> {
    ledger
        .get(pending_key())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// What a finished batch said about each of its lines: the chat completion, or why there is
/// none.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub status: String,
    pub lines: HashMap<String, Result<Value, String>>,
}

struct Queued {
    custom_id: String,
    body: Value,
    /// Everyone waiting on this line: identical requests are one line.
    submitted: Vec<tokio::sync::oneshot::Sender<Result<String, String>>>,
}

#[derive(Default)]
struct Queue {
    lines: Vec<Queued>,
    /// Someone is waiting out the window and will submit what has gathered.
    gathering: bool,
}

/// The batches of one endpoint and model: the lines gathering for the next one, and what the
/// finished ones said.
pub(crate) struct Batches {
    pub settings: BatchSettings,
    pub ledger: Arc<dyn ResponseCache>,
    queue: Mutex<Queue>,
    outcomes: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Arc<Outcome>>>>>,
    /// Read-modify-write of the pending list, one at a time.
    pending: Mutex<()>,
}

impl Batches {
    pub fn new(settings: BatchSettings, ledger: Arc<dyn ResponseCache>) -> Self {
        Self {
            settings,
            ledger,
            queue: Mutex::default(),
            outcomes: Mutex::default(),
            pending: Mutex::new(()),
        }
    }

    /// The batch `custom_id` was last submitted in, from the ledger.
    pub fn recorded(&self, custom_id: &str) -> Option<String> {
        self.ledger
            .get(line_key(custom_id))
            .and_then(|bytes| String::from_utf8(bytes).ok())
    }

    /// Adds a line to the next batch. The first line of a batch is handed `true`: its caller
    /// waits out the window and submits ([`Batches::take`]).
    fn enqueue(
        &self,
        custom_id: String,
        body: Value,
    ) -> (bool, tokio::sync::oneshot::Receiver<Result<String, String>>) {
        let (submitted, receiver) = tokio::sync::oneshot::channel();
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        match queue
            .lines
            .iter_mut()
            .find(|line| line.custom_id == custom_id)
        {
            Some(line) => line.submitted.push(submitted),
            None => queue.lines.push(Queued {
                custom_id,
                body,
                submitted: vec![submitted],
            }),
        }
        let leads = !queue.gathering;
        queue.gathering = true;
        (leads, receiver)
    }

    /// What has gathered, at most `max_requests` lines per batch.
    fn take(&self) -> Vec<Vec<Queued>> {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        queue.gathering = false;
        let mut lines = std::mem::take(&mut queue.lines);
        let mut batches = Vec::new();
        while !lines.is_empty() {
            let rest = lines.split_off(lines.len().min(self.settings.max_requests.max(1)));
            batches.push(lines);
            lines = rest;
        }
        batches
    }

    fn outcome_cell(&self, batch: &str) -> Arc<tokio::sync::OnceCell<Arc<Outcome>>> {
        self.outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(batch.to_string())
            .or_default()
            .clone()
    }

    fn update_pending(&self, change: impl FnOnce(&mut Vec<PendingBatch>)) {
        let _one_at_a_time = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let mut pending = pending_batches(&*self.ledger);
        change(&mut pending);
        match serde_json::to_vec(&pending) {
            Ok(bytes) => self.ledger.put(pending_key(), &bytes),
            Err(error) => warn!(%error, "could not record the pending batches"),
        }
    }

    /// Records a submitted batch: each line's batch, then the batch among the pending ones.
    fn record_submitted(&self, batch: &PendingBatch, lines: &[Queued]) {
        for line in lines {
            self.ledger
                .put(line_key(&line.custom_id), batch.id.as_bytes());
        }
        self.update_pending(|pending| pending.push(batch.clone()));
    }

    fn record_finished(&self, batch: &str) {
        self.update_pending(|pending| pending.retain(|p| p.id != batch));
    }
}

/// The name of a request line: the hash of its body.
pub(crate) fn custom_id(body: &Value) -> String {
    ContentHash::of(body.to_string().as_bytes()).to_hex()[..32].to_string()
}

/// The batch input file: one line per request.
fn input_file(lines: &[Queued]) -> Vec<u8> {
    let mut file = Vec::new();
    for line in lines {
        let entry = json!({
            "custom_id": line.custom_id,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": line.body,
        });
        file.extend_from_slice(entry.to_string().as_bytes());
        file.push(b'\n');
    }
    file
}

/// Reads a batch output or error file into `lines`: a chat completion for each line answered
/// with HTTP 200, and why not for the others.
fn read_result_file(text: &str, lines: &mut HashMap<String, Result<Value, String>>) {
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            warn!("a batch result line is not JSON; its request will be submitted again");
            continue;
        };
        let Some(custom_id) = entry["custom_id"].as_str() else {
            continue;
        };
        let response = &entry["response"];
        let result = if response["status_code"] == 200 && entry["error"].is_null() {
            Ok(response["body"].clone())
        } else if !entry["error"].is_null() {
            Err(entry["error"].to_string())
        } else {
            Err(format!(
                "HTTP {}: {}",
                response["status_code"], response["body"]
            ))
        };
        lines.insert(custom_id.to_string(), result);
    }
}

/// How one endpoint's files and batches are reached: what [`crate::http::HttpBackend`] lends
/// the batch calls.
pub(crate) struct BatchApi<'a> {
    pub client: &'a reqwest::Client,
    pub base_url: &'a str,
    pub api_key: Option<&'a str>,
    pub model: &'a str,
    pub max_retries: u32,
    pub backoff_base: Duration,
}

impl BatchApi<'_> {
    fn not_found(&self, what: &str) -> LlmError {
        LlmError::Batch {
            endpoint: self.base_url.to_string(),
            detail: format!("{what}: HTTP 404, not found"),
        }
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Sends the request `make` builds, again on a transport error, 429 or 5xx, and reads the
    /// body; `None` when the server has no such thing (HTTP 404: a batch or file it no longer
    /// keeps).
    async fn send(
        &self,
        what: &str,
        make: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<Option<String>, LlmError> {
        let mut last = String::new();
        for attempt in 0..=self.max_retries {
            if attempt > 0 {
                tokio::time::sleep(crate::http::backoff_delay(self.backoff_base, attempt - 1))
                    .await;
            }
            match self.authorized(make()).send().await {
                Err(error) => last = error.to_string(),
                Ok(response) => {
                    let status = response.status();
                    if status.as_u16() == 404 {
                        return Ok(None);
                    }
                    let text = response.text().await.unwrap_or_default();
                    if status.is_success() {
                        return Ok(Some(text));
                    }
                    last = format!("HTTP {}: {}", status.as_u16(), crate::http::excerpt(&text));
                    if !(status.as_u16() == 429 || status.is_server_error()) {
                        break;
                    }
                }
            }
        }
        Err(LlmError::Batch {
            endpoint: self.base_url.to_string(),
            detail: format!("{what}: {last}"),
        })
    }

    async fn send_json(
        &self,
        what: &str,
        make: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<Option<Value>, LlmError> {
        let Some(text) = self.send(what, make).await? else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|error| LlmError::Batch {
                endpoint: self.base_url.to_string(),
                detail: format!("{what}: the answer is not JSON ({error})"),
            })
    }

    /// Uploads the lines and submits them as one batch; records it in the ledger before
    /// anyone waits on it.
    async fn submit(&self, batches: &Batches, lines: &[Queued]) -> Result<String, LlmError> {
        let file = input_file(lines);
        let files_url = format!("{}/files", self.base_url);
        let uploaded = self
            .send_json("uploading the batch input file", || {
                let part = reqwest::multipart::Part::bytes(file.clone())
                    .file_name("viss-batch.jsonl")
                    .mime_str("application/jsonl")
                    .expect("a fixed MIME type parses");
                let form = reqwest::multipart::Form::new()
                    .text("purpose", "batch")
                    .part("file", part);
                self.client.post(&files_url).multipart(form)
            })
            .await?
            .ok_or_else(|| self.not_found("uploading the batch input file"))?;
        let input_file_id = uploaded["id"].as_str().unwrap_or_default().to_string();
        let batches_url = format!("{}/batches", self.base_url);
        let created = self
            .send_json("creating the batch", || {
                self.client.post(&batches_url).json(&json!({
                    "input_file_id": input_file_id,
                    "endpoint": "/v1/chat/completions",
                    "completion_window": "24h",
                }))
            })
            .await?
            .ok_or_else(|| self.not_found("creating the batch"))?;
        let Some(id) = created["id"].as_str() else {
            return Err(LlmError::Batch {
                endpoint: self.base_url.to_string(),
                detail: format!("creating the batch: no id in {created}"),
            });
        };
        let batch = PendingBatch {
            id: id.to_string(),
            endpoint: self.base_url.to_string(),
            model: self.model.to_string(),
            requests: lines.len(),
            submitted_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_millis() as u64),
        };
        batches.record_submitted(&batch, lines);
        info!(batch = %batch.id, requests = lines.len(), "submitted a batch");
        Ok(batch.id)
    }

    /// Gathers the lines that join within the window and submits them (as more than one batch
    /// when there are more than a batch holds), telling each line its batch.
    pub async fn gather_and_submit(&self, batches: &Batches) {
        tokio::time::sleep(batches.settings.window).await;
        for lines in batches.take() {
            let result = self
                .submit(batches, &lines)
                .await
                .map_err(|e| e.to_string());
            for waiter in lines.into_iter().flat_map(|line| line.submitted) {
                let _ = waiter.send(result.clone());
            }
        }
    }

    /// The batch `custom_id` is in: the one the ledger records unless `fresh`, or a new one
    /// it joins.
    pub async fn batch_of(
        &self,
        batches: &Batches,
        custom_id: &str,
        body: &Value,
        fresh: bool,
    ) -> Result<String, LlmError> {
        if !fresh && let Some(batch) = batches.recorded(custom_id) {
            return Ok(batch);
        }
        let (leads, submitted) = batches.enqueue(custom_id.to_string(), body.clone());
        if leads {
            self.gather_and_submit(batches).await;
        }
        let failed = |detail: String| LlmError::Batch {
            endpoint: self.base_url.to_string(),
            detail,
        };
        submitted
            .await
            .map_err(|_| failed("the batch was never submitted".to_string()))?
            .map_err(failed)
    }

    /// What batch `id` said about its lines, once it has finished: looked at with growing
    /// waits, then its output and error files read. Asked once per batch and process.
    pub async fn outcome(&self, batches: &Batches, id: &str) -> Result<Arc<Outcome>, LlmError> {
        let cell = batches.outcome_cell(id);
        cell.get_or_try_init(|| async {
            let url = format!("{}/batches/{id}", self.base_url);
            let mut wait = batches.settings.poll;
            let batch = loop {
                let Some(batch) = self
                    .send_json("looking at the batch", || self.client.get(&url))
                    .await?
                else {
                    // Gone (a provider keeps batches for a while): as if it had expired
                    // unanswered, so its lines are submitted again.
                    break json!({ "status": "gone" });
                };
                match batch["status"].as_str().unwrap_or_default() {
                    "completed" | "expired" | "failed" | "cancelled" => break batch,
                    status => {
                        info!(batch = %id, %status, "batch pending");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(MAX_POLL);
                    }
                }
            };
            let mut lines = HashMap::new();
            for file in ["output_file_id", "error_file_id"] {
                if let Some(file_id) = batch[file].as_str().filter(|f| !f.is_empty()) {
                    let url = format!("{}/files/{file_id}/content", self.base_url);
                    let text = self
                        .send("reading the batch results", || self.client.get(&url))
                        .await?;
                    // A file gone: its lines count as unanswered.
                    if let Some(text) = text {
                        read_result_file(&text, &mut lines);
                    }
                }
            }
            batches.record_finished(id);
            let status = batch["status"].as_str().unwrap_or_default().to_string();
            if status != "completed" {
                warn!(batch = %id, %status, answered = lines.len(), "batch ended unfinished");
            }
            Ok(Arc::new(Outcome { status, lines }))
        })
        .await
        .cloned()
    }
}

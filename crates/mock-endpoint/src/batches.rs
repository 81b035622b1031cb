//! The mock's batch API, OpenAI's shape: `POST /v1/files` (a multipart upload of the input
//! lines), `POST /v1/batches`, `GET /v1/batches/{id}` and `GET /v1/files/{id}/content`. Each
//! line is answered by the same responder as `/v1/chat/completions`, when the batch finishes;
//! how it finishes (held pending, expired half done, lines failed) is the test's to say.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::{MockReply, Responder};

/// How the mock's batches behave.
#[derive(Default)]
pub struct BatchBehaviour {
    /// Looks at a batch that find it still in progress before it finishes.
    pub polls_before_done: usize,
    /// While set, every batch stays in progress (a test kills its client meanwhile).
    pub hold: Arc<AtomicBool>,
    /// The batches, by the order they were created from 0, that expire having answered only
    /// the first half of their lines.
    pub expire: Vec<usize>,
    /// Lines whose body this says yes to fail with HTTP 500, in the batch's error file.
    pub fail_line: Option<Box<LinePredicate>>,
}

/// Says yes to a batch line's request body.
pub type LinePredicate = dyn Fn(&Value) -> bool + Send + Sync;

struct Batch {
    id: String,
    input_file_id: String,
    lines: Vec<(String, Value)>,
    polls: usize,
    finished: Option<Value>,
}

/// The files and batches the mock holds.
pub struct BatchApi {
    behaviour: BatchBehaviour,
    files: HashMap<String, Vec<u8>>,
    batches: Vec<Batch>,
    /// Lines answered so far, for the responder's call index.
    answered: usize,
}

impl BatchApi {
    pub fn new(behaviour: BatchBehaviour) -> Self {
        Self {
            behaviour,
            files: HashMap::new(),
            batches: Vec::new(),
            answered: 0,
        }
    }

    /// Forgets batch `id` and its files, as a provider does after a while: looks at it get
    /// HTTP 404.
    pub fn forget(&mut self, id: &str) {
        if let Some(batch) = self.batches.iter_mut().find(|b| b.id == id) {
            batch.id = format!("forgotten {id}");
            if let Some(finished) = batch.finished.take() {
                for file in ["output_file_id", "error_file_id"] {
                    if let Some(file) = finished[file].as_str() {
                        self.files.remove(file);
                    }
                }
            }
        }
    }

    /// The `custom_id`s of each batch created, in order.
    pub fn submitted(&self) -> Vec<Vec<String>> {
        self.batches
            .iter()
            .map(|b| b.lines.iter().map(|(id, _)| id.clone()).collect())
            .collect()
    }

    /// The reply to a request for one of the batch API's paths; `None` for any other path.
    pub fn serve(
        &mut self,
        method: &str,
        path: &str,
        body: &Value,
        raw: &[u8],
        responder: &Responder,
    ) -> Option<MockReply> {
        let path = path.trim_start_matches("/v1");
        let ok = |value: Value| MockReply::status(200, &value.to_string());
        match (method, path) {
            ("POST", "/files") => {
                let id = format!("file-{}", self.files.len() + 1);
                let content = uploaded_file(raw);
                let bytes = content.len();
                self.files.insert(id.clone(), content);
                Some(ok(
                    json!({"id": id, "object": "file", "bytes": bytes, "purpose": "batch"}),
                ))
            }
            ("POST", "/batches") => {
                let input_file_id = body["input_file_id"].as_str().unwrap_or_default();
                let Some(input) = self.files.get(input_file_id) else {
                    return Some(not_found());
                };
                let lines = String::from_utf8_lossy(input)
                    .lines()
                    .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                    .map(|line| (line["custom_id"].as_str().unwrap_or("").to_string(), line))
                    .collect();
                let id = format!("batch_{}", self.batches.len() + 1);
                self.batches.push(Batch {
                    id: id.clone(),
                    input_file_id: input_file_id.to_string(),
                    lines,
                    polls: 0,
                    finished: None,
                });
                Some(ok(
                    json!({"id": id, "object": "batch", "status": "validating",
                               "input_file_id": input_file_id}),
                ))
            }
            ("GET", path) if path.starts_with("/batches/") => {
                let id = &path["/batches/".len()..];
                Some(match self.batches.iter().position(|b| b.id == id) {
                    Some(index) => ok(self.look_at(index, responder)),
                    None => not_found(),
                })
            }
            ("GET", path) if path.starts_with("/files/") && path.ends_with("/content") => {
                let id = &path["/files/".len()..path.len() - "/content".len()];
                Some(match self.files.get(id) {
                    Some(content) => MockReply::status(200, &String::from_utf8_lossy(content)),
                    None => not_found(),
                })
            }
            _ => None,
        }
    }

    /// A look at batch `index`: in progress, or finished with its output and error files.
    fn look_at(&mut self, index: usize, responder: &Responder) -> Value {
        if let Some(finished) = &self.batches[index].finished {
            return finished.clone();
        }
        let batch = &mut self.batches[index];
        batch.polls += 1;
        if self.behaviour.hold.load(Ordering::SeqCst)
            || batch.polls <= self.behaviour.polls_before_done
        {
            return json!({"id": batch.id, "object": "batch", "status": "in_progress",
                          "input_file_id": batch.input_file_id});
        }
        let expires = self.behaviour.expire.contains(&index);
        let lines = self.batches[index].lines.clone();
        let answered = if expires {
            lines.len() / 2
        } else {
            lines.len()
        };
        let (mut output, mut errors) = (String::new(), String::new());
        for (custom_id, line) in &lines[..answered] {
            let failed = self
                .behaviour
                .fail_line
                .as_ref()
                .is_some_and(|f| f(&line["body"]));
            let reply = responder(self.answered, &line["body"], None);
            self.answered += 1;
            let body: Value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
            let entry = if failed || reply.status != 200 {
                json!({"custom_id": custom_id, "response": {"status_code": 500, "body": body},
                       "error": {"code": "server_error", "message": "the line failed"}})
            } else {
                json!({"custom_id": custom_id, "response": {"status_code": 200, "body": body},
                       "error": null})
            };
            let file = if failed { &mut errors } else { &mut output };
            file.push_str(&entry.to_string());
            file.push('\n');
        }
        let mut file_id = |content: String| {
            let id = format!("file-{}", self.files.len() + 1);
            self.files.insert(id.clone(), content.into_bytes());
            id
        };
        let output_file_id = file_id(output);
        let error_file_id = file_id(errors);
        let batch = &mut self.batches[index];
        let finished = json!({
            "id": batch.id, "object": "batch",
            "status": if expires { "expired" } else { "completed" },
            "input_file_id": batch.input_file_id,
            "output_file_id": output_file_id, "error_file_id": error_file_id,
        });
        batch.finished = Some(finished.clone());
        finished
    }
}

fn not_found() -> MockReply {
    MockReply::status(404, r#"{"error": {"message": "no such object"}}"#)
}

/// The file part of a multipart upload: what follows the part's headers, up to the boundary.
fn uploaded_file(raw: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(raw);
    let Some(part) = text.find("name=\"file\"") else {
        return Vec::new();
    };
    let Some(start) = text[part..].find("\r\n\r\n").map(|at| part + at + 4) else {
        return Vec::new();
    };
    let end = text[start..]
        .find("\r\n--")
        .map_or(text.len(), |at| start + at);
    text[start..end].as_bytes().to_vec()
}

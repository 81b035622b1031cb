//! An in-process mock of the OpenAI chat API on 127.0.0.1 (ephemeral port), for tests and for
//! `viss bench llm` (and of the image edit API, whose multipart bodies it records raw): it is the
//! network boundary, and nothing else in viss is mocked. A small hand-written HTTP/1.1 responder on
//! a tokio `TcpListener` rather than axum: it needs one route, and hand-rolling it lets a test
//! count requests, measure concurrency and stall responses without pulling a web framework into the
//! build. Every response says `Connection: close`, so each request is one connection.

mod batches;

pub use batches::{BatchApi, BatchBehaviour};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the mock answers to one request.
pub struct MockReply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
    pub delay: Duration,
    /// Written after `body`: a body too large to hold, made as it is sent.
    pub stream: Option<StreamedBody>,
}

/// A body written piece by piece: `repeat` `count` times (for ever when `None`, without a
/// Content-Length), then `tail`.
pub struct StreamedBody {
    pub repeat: String,
    pub count: Option<u64>,
    pub tail: String,
}

impl MockReply {
    /// A 200 chat completion whose message content is `content`.
    pub fn answer(content: &str) -> Self {
        let body = json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        });
        Self {
            status: 200,
            headers: vec![],
            body: body.to_string(),
            delay: Duration::ZERO,
            stream: None,
        }
    }

    /// A 200 chat completion cut off at the server's token limit (`finish_reason: length`).
    pub fn cut_off_answer(content: &str) -> Self {
        let mut reply = Self::answer(content);
        reply.body = reply
            .body
            .replace(r#""finish_reason":"stop""#, r#""finish_reason":"length""#);
        reply
    }

    pub fn status(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![],
            body: body.to_string(),
            delay: Duration::ZERO,
            stream: None,
        }
    }

    /// A redirect (`status` 301, 302, 303, 307 or 308) to `location`.
    pub fn redirect(status: u16, location: &str) -> Self {
        Self::status(status, "").header("Location", location)
    }

    /// A 200 chat completion answering `content`, with a field of `padding_bytes` bytes of
    /// zeros before it (a huge array beside a valid answer), or an endless one (`None`).
    pub fn padded_answer(content: &str, padding_bytes: Option<u64>) -> Self {
        let answer = Self::answer(content).body;
        let mut reply = Self::status(200, "{\"padding\": [0");
        reply.stream = Some(StreamedBody {
            repeat: ",0".repeat(4096),
            count: padding_bytes.map(|bytes| bytes / 8192),
            tail: format!("], {}", &answer[1..]),
        });
        reply
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }

    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

pub struct RecordedRequest {
    pub authorization: Option<String>,
    /// The JSON body; `Null` when the body is not JSON (a multipart upload).
    pub body: Value,
    /// Request path, e.g. `/v1/chat/completions` or `/v1/images/edits`.
    pub path: String,
    pub content_type: Option<String>,
    /// The body's bytes as sent.
    pub raw: Vec<u8>,
}

/// `(call index from 0, request body, the request's Authorization header)`.
pub type Responder = dyn Fn(usize, &Value, Option<&str>) -> MockReply + Send + Sync;

pub struct MockState {
    pub requests: Mutex<Vec<RecordedRequest>>,
    pub in_flight: AtomicUsize,
    pub most_in_flight: AtomicUsize,
    responder: Box<Responder>,
    /// The batch API, when the server serves one.
    pub batches: Option<Mutex<BatchApi>>,
}

pub struct MockServer {
    pub base_url: String,
    pub state: Arc<MockState>,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

impl MockServer {
    /// Serves `responder(call index from 0, request body)` on `POST /v1/chat/completions`.
    pub async fn start(
        responder: impl Fn(usize, &Value) -> MockReply + Send + Sync + 'static,
    ) -> Self {
        Self::start_with_authorization(move |call, body, _| responder(call, body)).await
    }

    /// Like [`MockServer::start`], with the request's Authorization header given to the
    /// responder too: for a server that echoes what it was sent, key included.
    pub async fn start_with_authorization(
        responder: impl Fn(usize, &Value, Option<&str>) -> MockReply + Send + Sync + 'static,
    ) -> Self {
        Self::start_on("127.0.0.1", move |call, body, authorization| {
            responder(call, body, authorization)
        })
        .await
    }

    /// Like [`MockServer::start_with_authorization`], listening on `address` (another loopback
    /// address such as 127.0.0.2 makes a second host for a test).
    pub async fn start_on(
        address: &str,
        responder: impl Fn(usize, &Value, Option<&str>) -> MockReply + Send + Sync + 'static,
    ) -> Self {
        Self::serve(address, Box::new(responder), None).await
    }

    /// Like [`MockServer::start`], serving the batch API too ([`BatchApi`]), each line
    /// answered by `responder`.
    pub async fn start_with_batches(
        responder: impl Fn(usize, &Value) -> MockReply + Send + Sync + 'static,
        behaviour: BatchBehaviour,
    ) -> Self {
        let responder = move |call: usize, body: &Value, _: Option<&str>| responder(call, body);
        let batches = Some(Mutex::new(BatchApi::new(behaviour)));
        Self::serve("127.0.0.1", Box::new(responder), batches).await
    }

    async fn serve(
        address: &str,
        responder: Box<Responder>,
        batches: Option<Mutex<BatchApi>>,
    ) -> Self {
        let listener = TcpListener::bind((address, 0))
            .await
            .unwrap_or_else(|error| panic!("bind the mock server to {address}: {error}"));
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let state = Arc::new(MockState {
            requests: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            most_in_flight: AtomicUsize::new(0),
            responder,
            batches,
        });
        let shared = state.clone();
        let accept_loop = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_one(stream, shared.clone()));
            }
        });
        Self {
            base_url,
            state,
            accept_loop,
        }
    }

    pub fn request_count(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    pub fn body(&self, index: usize) -> Value {
        self.state.requests.lock().unwrap()[index].body.clone()
    }

    /// Requests made to paths starting with `prefix` (`/v1/chat/completions`, `/v1/batches`).
    pub fn requests_to(&self, prefix: &str) -> usize {
        let requests = self.state.requests.lock().unwrap();
        requests
            .iter()
            .filter(|r| r.path.starts_with(prefix))
            .count()
    }

    /// See [`BatchApi::forget`].
    pub fn forget_batch(&self, id: &str) {
        if let Some(api) = &self.state.batches {
            api.lock().unwrap().forget(id);
        }
    }

    /// The `custom_id`s of each batch submitted, in order (empty without a batch API).
    pub fn submitted_batches(&self) -> Vec<Vec<String>> {
        self.state
            .batches
            .as_ref()
            .map_or_else(Vec::new, |api| api.lock().unwrap().submitted())
    }
}

/// A [`MockServer`] on a runtime of its own, serving until dropped: for callers without a
/// runtime, such as a test that drives `viss build` (which starts its own).
pub struct BackgroundMockServer {
    server: Option<MockServer>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl BackgroundMockServer {
    pub fn start(responder: impl Fn(usize, &Value) -> MockReply + Send + Sync + 'static) -> Self {
        Self::start_with_authorization(move |call, body, _| responder(call, body))
    }

    /// See [`MockServer::start_with_authorization`].
    pub fn start_with_authorization(
        responder: impl Fn(usize, &Value, Option<&str>) -> MockReply + Send + Sync + 'static,
    ) -> Self {
        Self::on_own_runtime(MockServer::start_with_authorization(responder))
    }

    /// See [`MockServer::start_with_batches`].
    pub fn start_with_batches(
        responder: impl Fn(usize, &Value) -> MockReply + Send + Sync + 'static,
        behaviour: BatchBehaviour,
    ) -> Self {
        Self::on_own_runtime(MockServer::start_with_batches(responder, behaviour))
    }

    fn on_own_runtime(start: impl std::future::Future<Output = MockServer>) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("start the mock server's runtime");
        let server = runtime.block_on(start);
        Self {
            server: Some(server),
            runtime: Some(runtime),
        }
    }

    pub fn server(&self) -> &MockServer {
        self.server.as_ref().expect("present until drop")
    }
}

impl Drop for BackgroundMockServer {
    fn drop(&mut self) {
        // The accept loop is aborted inside the runtime, then the runtime goes.
        if let Some(runtime) = self.runtime.take() {
            let _guard = runtime.enter();
            self.server.take();
            drop(_guard);
            runtime.shutdown_background();
        }
    }
}

async fn serve_one(mut stream: TcpStream, state: Arc<MockState>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(position) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break position + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).to_string();
    let header = |name: &str| {
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_string())
        })
    };
    let content_length: usize = header("content-length")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    while buffer.len() < header_end + content_length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
        }
    }
    let raw = buffer[header_end..header_end + content_length].to_vec();
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let path = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string();
    let method = head.split_whitespace().next().unwrap_or("").to_string();

    let now_in_flight = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    state
        .most_in_flight
        .fetch_max(now_in_flight, Ordering::SeqCst);
    let authorization = header("authorization");
    let call_index = {
        let mut requests = state.requests.lock().unwrap();
        requests.push(RecordedRequest {
            authorization: authorization.clone(),
            body: body.clone(),
            path: path.clone(),
            content_type: header("content-type"),
            raw: raw.clone(),
        });
        requests.len() - 1
    };
    let batch_reply = state.batches.as_ref().and_then(|api| {
        let mut api = api.lock().unwrap();
        api.serve(&method, &path, &body, &raw, &*state.responder)
    });
    let reply = match batch_reply {
        Some(reply) => reply,
        None => (state.responder)(call_index, &body, authorization.as_deref()),
    };
    tokio::time::sleep(reply.delay).await;
    // Counted out before the response leaves, so the client cannot start its next request
    // while this one still counts.
    state.in_flight.fetch_sub(1, Ordering::SeqCst);
    let length = match &reply.stream {
        None => Some(reply.body.len() as u64),
        Some(streamed) => streamed.count.map(|count| {
            (reply.body.len() + streamed.tail.len()) as u64 + count * streamed.repeat.len() as u64
        }),
    };
    let mut response = format!(
        "HTTP/1.1 {} MOCK\r\nContent-Type: application/json\r\nConnection: close\r\n",
        reply.status
    );
    if let Some(length) = length {
        response.push_str(&format!("Content-Length: {length}\r\n"));
    }
    for (name, value) in &reply.headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    response.push_str(&reply.body);
    if stream.write_all(response.as_bytes()).await.is_err() {
        return;
    }
    if let Some(streamed) = &reply.stream {
        let mut sent = 0;
        // Until the count, or until the client hangs up.
        while streamed.count.is_none_or(|count| sent < count) {
            if stream.write_all(streamed.repeat.as_bytes()).await.is_err() {
                return;
            }
            sent += 1;
        }
        if stream.write_all(streamed.tail.as_bytes()).await.is_err() {
            return;
        }
    }
    let _ = stream.shutdown().await;
}

//! End-to-end tests of [`HttpBackend`] against the in-process mock server ([`super::mock_server`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::mock_server::{MockHttp, MockReply, MockServer};
use super::*;

fn label_request() -> ChatRequest {
    let schema = json!({
        "type": "object",
        "properties": {"label": {"type": "string"}},
        "required": ["label"],
        "additionalProperties": false
    });
    let mut request = ChatRequest::new(vec![
        Message::system("Label the emotion."),
        Message::user("I won the lottery!"),
    ])
    .with_schema("emotion_label", schema);
    request.seed = Some(42);
    request.temperature = 0.7;
    request
}

/// A bad answer that alternates between two problems (not JSON; a label that is not a string):
/// never the same problem twice in a row, so a call re-asks all it may (see [`STALLED_AFTER`]).
fn alternately_bad(call: usize) -> MockReply {
    match call % 2 {
        0 => MockReply::answer("I think the emotion is joy."),
        _ => MockReply::answer(r#"{"label": 5}"#),
    }
}

/// `backend`'s answer to [`label_request`], checked by [`label_is_string`], with no cache.
async fn ask_label(backend: &HttpBackend) -> Result<Completion, LlmError> {
    backend
        .complete_json(
            &label_request(),
            &MemoryResponseCache::new(),
            label_is_string,
        )
        .await
}

fn label_is_string(value: &Value) -> Result<(), crate::Rejection> {
    let mut problems = crate::Problems::new();
    if !value["label"].is_string() {
        problems.unusable(
            "not_a_string",
            None,
            "label",
            "field \"label\" must be a string".into(),
        );
    }
    problems.finish()
}

fn last_user_text(body: &Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    last["content"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn mock_server_happy_path_sends_schema_model_seed_temperature_and_image() {
    let mock = MockServer::start(|_, _| MockReply::answer(r#"{"label": "joy"}"#)).await;
    let mut config = mock.config();
    config.prices = Some(Price {
        input_per_mtok: 1.0,
        output_per_mtok: 2.0,
    });
    let backend = HttpBackend::with_key_lookup(config, |_| None).unwrap();
    let mut request = label_request();
    request.messages.push(Message::user_parts(vec![
        Part::Text("What does this face show?".into()),
        Part::ImagePng(vec![0x89, b'P', b'N', b'G']),
    ]));
    let cache = MemoryResponseCache::new();

    let completion = backend
        .complete_json(&request, &cache, label_is_string)
        .await
        .unwrap();

    assert_eq!(completion.value, json!({"label": "joy"}));
    assert!(!completion.from_cache);
    assert_eq!(completion.usage.prompt_tokens, 100);
    assert_eq!(completion.usage.completion_tokens, 20);
    assert_eq!(completion.usage.calls, 1);
    let cost = completion.usage.cost_usd.unwrap();
    assert!((cost - 140e-6).abs() < 1e-12, "{cost}");
    assert_eq!(mock.request_count(), 1);
    let body = mock.body(0);
    assert_eq!(body["model"], "mock-model");
    assert_eq!(body["seed"], 42);
    assert!((body["temperature"].as_f64().unwrap() - 0.7).abs() < 1e-6);
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(
        body["response_format"]["json_schema"]["name"],
        "emotion_label"
    );
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    assert_eq!(
        body["response_format"]["json_schema"]["schema"],
        request.response_schema.as_ref().unwrap().1
    );
    let image_part = &body["messages"][2]["content"][1];
    assert_eq!(image_part["type"], "image_url");
    assert_eq!(
        image_part["image_url"]["url"],
        "data:image/png;base64,iVBORw=="
    );
    assert_eq!(cache.len(), 1);
}

#[tokio::test]
async fn mock_server_warm_repeat_with_same_cache_makes_no_http_calls() {
    let mock = MockServer::start(|_, _| MockReply::answer(r#"{"label": "joy"}"#)).await;
    let backend = mock.backend();
    let cache = MemoryResponseCache::new();
    let request = label_request();

    let cold = backend
        .complete_json(&request, &cache, label_is_string)
        .await
        .unwrap();
    let warm = backend
        .complete_json(&request, &cache, label_is_string)
        .await
        .unwrap();

    assert_eq!(
        mock.request_count(),
        1,
        "the warm repeat must not reach the server"
    );
    assert!(warm.from_cache);
    assert_eq!(warm.value, cold.value);
    assert_eq!(warm.key, cold.key);
    assert_eq!(warm.usage, Usage::default(), "a cache hit spends nothing");

    // Replicate 1 is a new sample: a new key and a real call.
    let mut second_sample = request.clone();
    second_sample.replicate = 1;
    let replicate = backend
        .complete_json(&second_sample, &cache, label_is_string)
        .await
        .unwrap();
    assert!(!replicate.from_cache);
    assert_ne!(replicate.key, cold.key);
    assert_eq!(mock.request_count(), 2);
    assert_eq!(
        request_key(&second_sample, &backend.endpoint_identity()),
        replicate.key,
        "the returned key is the request key"
    );
}

#[tokio::test]
async fn mock_server_429_with_retry_after_is_waited_out_then_succeeds() {
    let mock = MockServer::start(|call, _| match call {
        0 => MockReply::status(429, r#"{"error":{"message":"Rate limit reached"}}"#)
            .header("Retry-After", "1"),
        _ => MockReply::answer(r#"{"label": "calm"}"#),
    })
    .await;
    let backend = mock.backend();
    let started = Instant::now();
    let completion = ask_label(&backend).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(completion.value["label"], "calm");
    assert_eq!(mock.request_count(), 2);
    // The backoff base is 10 ms, so only Retry-After explains a wait this long.
    assert!(
        waited >= Duration::from_millis(900),
        "waited only {waited:?}"
    );
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
}

#[tokio::test]
async fn mock_server_500_twice_then_success_is_retried() {
    let mock = MockServer::start(|call, _| match call {
        0 | 1 => MockReply::status(500, "upstream overloaded"),
        _ => MockReply::answer(r#"{"label": "fear"}"#),
    })
    .await;
    let completion = ask_label(&mock.backend()).await.unwrap();
    assert_eq!(completion.value["label"], "fear");
    assert_eq!(mock.request_count(), 3);
    assert_eq!(
        completion.usage.calls, 1,
        "failed attempts are not billed completions"
    );
}

#[tokio::test]
async fn mock_server_500_forever_fails_after_max_retries_with_the_status() {
    let mock =
        MockServer::start(|_, _| MockReply::status(503, "service unavailable: maintenance")).await;
    let mut config = mock.config();
    config.max_retries = 2;
    let backend = HttpBackend::with_key_lookup(config, |_| None).unwrap();
    let cache = MemoryResponseCache::new();
    let error = backend
        .complete_json(&label_request(), &cache, label_is_string)
        .await
        .unwrap_err();
    assert_eq!(mock.request_count(), 3, "one attempt plus max_retries");
    assert!(
        matches!(error, LlmError::RetriesExhausted { attempts: 3, .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("HTTP 503") && message.contains("maintenance"),
        "{message}"
    );
    assert!(cache.is_empty());
}

#[tokio::test]
async fn mock_server_slow_response_times_out_and_is_retried_then_fails() {
    let mock = MockServer::start(|_, _| {
        MockReply::answer(r#"{"label": "joy"}"#).after(Duration::from_secs(2))
    })
    .await;
    let mut config = mock.config();
    config.timeout = Duration::from_millis(200);
    config.max_retries = 1;
    let backend = HttpBackend::with_key_lookup(config, |_| None).unwrap();
    let started = Instant::now();
    let error = ask_label(&backend).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "timeouts must cut the wait short: {:?}",
        started.elapsed()
    );
    assert_eq!(mock.request_count(), 2);
    assert!(
        error.to_string().contains("no response within 200ms"),
        "{error}"
    );
}

#[tokio::test]
async fn mock_server_slow_first_response_times_out_then_retry_succeeds() {
    let mock = MockServer::start(|call, _| {
        let reply = MockReply::answer(r#"{"label": "joy"}"#);
        if call == 0 {
            reply.after(Duration::from_secs(2))
        } else {
            reply
        }
    })
    .await;
    let mut config = mock.config();
    config.timeout = Duration::from_millis(200);
    let backend = HttpBackend::with_key_lookup(config, |_| None).unwrap();
    let completion = ask_label(&backend).await.unwrap();
    assert_eq!(completion.value["label"], "joy");
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn closed_port_connection_errors_are_retried_then_fail() {
    // A port that was just free: nothing listens, so every connect is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = HttpConfig::new(format!("http://127.0.0.1:{port}/v1"), "m");
    config.max_retries = 2;
    config.backoff_base = Duration::from_millis(5);
    let backend = HttpBackend::with_key_lookup(config, |_| None).unwrap();
    let error = ask_label(&backend).await.unwrap_err();
    assert!(
        matches!(error, LlmError::RetriesExhausted { attempts: 3, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("could not connect"), "{error}");
}

#[tokio::test]
async fn mock_server_client_errors_are_not_retried() {
    let mock = MockServer::start(|_, _| {
        MockReply::status(
            404,
            r#"{"error":{"message":"model 'mock-model' not found"}}"#,
        )
    })
    .await;
    let error = ask_label(&mock.backend()).await.unwrap_err();
    assert_eq!(mock.request_count(), 1);
    assert!(
        matches!(error, LlmError::Rejected { status: 404, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("not found"), "{error}");
}

/// Two unusable answers of one kind, then a good one: success on the third call, and each
/// follow-up asked the question again with the problem named.
async fn bad_answers_then_success(bad_answer: &'static str, problem_named: &str) {
    let mock = MockServer::start(move |call, _| match call {
        0 | 1 => MockReply::answer(bad_answer),
        _ => MockReply::answer(r#"{"label": "surprise"}"#),
    })
    .await;
    let cache = MemoryResponseCache::new();
    let request = label_request();
    let completion = mock
        .backend()
        .complete_json(&request, &cache, label_is_string)
        .await
        .unwrap();
    assert_eq!(completion.value, json!({"label": "surprise"}));
    assert_eq!(mock.request_count(), 3);
    assert_eq!(completion.usage.calls, 3);
    assert_eq!(completion.usage.prompt_tokens, 300);
    for call in 1..3 {
        let body = mock.body(call);
        let messages = body["messages"].as_array().unwrap();
        // The question again plus one message naming the problems, never the rejected answer
        // (a small model shown it writes it again).
        assert_eq!(messages.len(), request.messages.len() + 1);
        assert!(
            messages.iter().all(|m| m["role"] != "assistant"),
            "{messages:?}"
        );
        let follow_up = last_user_text(&body);
        assert!(
            follow_up.contains(problem_named),
            "follow-up {follow_up:?} does not name {problem_named:?}"
        );
    }
    assert_eq!(cache.len(), 1);
    // Why the two answers were rejected goes with the answer, from the cache too.
    assert_eq!(completion.rejected.len(), 2);
    assert!(
        completion
            .rejected
            .iter()
            .all(|r| r.message.contains(problem_named) && !r.problems.is_empty()),
        "{:?}",
        completion.rejected
    );
    let warm = mock
        .backend()
        .complete_json(&request, &cache, label_is_string)
        .await
        .unwrap();
    assert!(warm.from_cache);
    assert_eq!(warm.rejected, completion.rejected);
    assert_eq!(mock.request_count(), 3);
}

/// A cache an earlier viss wrote keeps each refusal as its text alone: its answers are still
/// answered from it (nothing paid twice), the refusals read back with a kind per problem.
#[tokio::test]
async fn mock_server_an_earlier_caches_text_refusals_still_answer_with_their_problems() {
    let mock = MockServer::start(|call, _| match call {
        0 => MockReply::answer(r#"{"label": 5}"#),
        _ => MockReply::answer(r#"{"label": "surprise"}"#),
    })
    .await;
    let request = label_request();
    let cache = MemoryResponseCache::new();
    let fresh = mock
        .backend()
        .complete_json(&request, &cache, label_is_string)
        .await
        .unwrap();
    let key = fresh.key;
    let mut entry: Value = serde_json::from_slice(&cache.get(key).unwrap()).unwrap();
    entry["rejected"] = json!([
        "the JSON does not meet the requirements: Fix these problems \
                                in your answer:\n- Ada: label is \"5\"; write a word\n- \
                                reason is empty"
    ]);
    cache.put(key, &serde_json::to_vec(&entry).unwrap());
    let warm = mock
        .backend()
        .complete_json(&request, &cache, label_is_string)
        .await
        .unwrap();
    assert!(warm.from_cache);
    assert_eq!(mock.request_count(), 2);
    assert_eq!(warm.value, fresh.value);
    let kinds: Vec<&str> = warm.rejected[0]
        .problems
        .iter()
        .map(|p| p.kind.as_str())
        .collect();
    assert_eq!(kinds, ["label is ...", "reason is empty"]);
}

#[tokio::test]
async fn mock_server_malformed_json_is_reasked_with_the_parse_error() {
    bad_answers_then_success(r#"{"label": "joy",, }"#, "not valid JSON").await;
}

#[tokio::test]
async fn mock_server_truncated_json_is_reasked_with_the_parse_error() {
    bad_answers_then_success(r#"{"label": "jo"#, "truncated").await;
}

#[tokio::test]
async fn mock_server_answer_cut_at_max_tokens_is_reported_as_cut_not_as_its_inner_object() {
    // The cut answer holds a complete inner object that tolerant extraction would pick up and
    // validate, naming the wrong problem.
    let cut = r#"{"outer": {"label": "joy"}, "label": "surpr"#;
    let mock = MockServer::start(move |call, _| match call {
        0 => MockReply::cut_off_answer(cut),
        _ => MockReply::answer(r#"{"label": "surprise"}"#),
    })
    .await;
    let cache = MemoryResponseCache::new();
    let completion = mock
        .backend()
        .complete_json(&label_request(), &cache, label_is_string)
        .await
        .unwrap();
    assert_eq!(completion.value, json!({"label": "surprise"}));
    let follow_up = last_user_text(&mock.body(1));
    assert!(
        follow_up.contains("max_tokens limit before its JSON was complete"),
        "{follow_up}"
    );
    assert!(!follow_up.contains("field"), "{follow_up}");
}

#[tokio::test]
async fn mock_server_schema_violating_json_is_reasked_with_the_validation_error() {
    bad_answers_then_success(r#"{"label": 5}"#, "field \"label\" must be a string").await;
}

#[tokio::test]
async fn mock_server_six_bad_answers_fail_after_exactly_five_reasks_with_nothing_defaulted() {
    let mock = MockServer::start(|call, _| alternately_bad(call)).await;
    let cache = MemoryResponseCache::new();
    let request = label_request();
    let error = mock
        .backend()
        .complete_json(&request, &cache, label_is_string)
        .await
        .unwrap_err();
    assert_eq!(mock.request_count(), 6, "one ask plus five re-asks");
    assert!(
        matches!(
            error,
            LlmError::InvalidOutput {
                answers: 6,
                reasks: 5,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("field \"label\" must be a string"),
        "{error}"
    );
    assert_eq!(
        mock.body(5)["messages"].as_array().unwrap().len(),
        request.messages.len() + 1
    );
    assert!(cache.is_empty(), "a failed call must cache nothing");
    // Each re-ask is sampled warmer than the one before (from the request's 0.7 up to the cap),
    // so a model repeating its rejected answer word for word gets a way out.
    let temperatures: Vec<f64> = (0..6)
        .map(|call| mock.body(call)["temperature"].as_f64().unwrap())
        .collect();
    assert!((temperatures[0] - 0.7).abs() < 1e-6, "{temperatures:?}");
    assert!(temperatures[1] > temperatures[0], "{temperatures:?}");
    assert!(
        temperatures
            .iter()
            .all(|&t| t <= f64::from(crate::backend::MAX_REASK_TEMPERATURE) + 1e-6),
        "{temperatures:?}"
    );
}

#[tokio::test]
async fn mock_server_the_same_problem_three_times_in_a_row_ends_the_reasks() {
    let mock = MockServer::start(|_, _| MockReply::answer("I think the emotion is joy.")).await;
    let error = ask_label(&mock.backend()).await.unwrap_err();
    assert_eq!(mock.request_count(), STALLED_AFTER as usize);
    assert!(
        matches!(
            error,
            LlmError::InvalidOutput {
                answers: STALLED_AFTER,
                reasks,
                ..
            } if reasks == STALLED_AFTER - 1
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("no complete JSON object"),
        "{error}"
    );
}

#[tokio::test]
async fn mock_server_a_request_allowing_more_reasks_gets_them_and_its_key_does_not_change() {
    let mock = MockServer::start(|call, _| alternately_bad(call)).await;
    let cache = MemoryResponseCache::new();
    let mut request = label_request();
    let key_before = request_key(&request, &mock.backend().endpoint_identity());
    request.max_reasks = 8;
    let error = mock
        .backend()
        .complete_json(&request, &cache, label_is_string)
        .await
        .unwrap_err();
    assert_eq!(mock.request_count(), 9, "one ask plus eight re-asks");
    assert!(
        matches!(
            error,
            LlmError::InvalidOutput {
                answers: 9,
                reasks: 8,
                ..
            }
        ),
        "{error:?}"
    );
    // A stored answer is valid whatever the budget that reached it.
    assert_eq!(
        request_key(&request, &mock.backend().endpoint_identity()),
        key_before
    );
}

#[tokio::test]
async fn a_greedy_request_is_reasked_warmer_each_time_and_keeps_its_seed() {
    let mock = MockServer::start(|call, _| alternately_bad(call)).await;
    let mut request = label_request();
    request.temperature = 0.0;
    mock.backend()
        .complete_json(&request, &MemoryResponseCache::new(), label_is_string)
        .await
        .unwrap_err();
    let temperatures: Vec<f64> = (0..6)
        .map(|call| mock.body(call)["temperature"].as_f64().unwrap())
        .collect();
    assert_eq!(temperatures[0], 0.0);
    assert!(
        temperatures.windows(2).all(|pair| pair[1] > pair[0]),
        "{temperatures:?}"
    );
    assert!((0..6).all(|call| mock.body(call)["seed"] == 42));
}

#[tokio::test]
async fn mock_server_rejecting_json_schema_falls_back_to_json_object() {
    let mock = MockServer::start(|_, body| {
        if body["response_format"]["type"] == "json_schema" {
            MockReply::status(
                400,
                concat!(
                    r#"{"error":{"message":"response_format type json_schema is not supported "#,
                    r#"by this model"}}"#,
                ),
            )
        } else {
            MockReply::answer(r#"{"label": "anger"}"#)
        }
    })
    .await;
    let backend = mock.backend();
    let cache = MemoryResponseCache::new();
    let completion = backend
        .complete_json(&label_request(), &cache, label_is_string)
        .await
        .unwrap();
    assert_eq!(completion.value["label"], "anger");
    assert_eq!(mock.request_count(), 2);
    assert_eq!(
        mock.body(1)["response_format"],
        json!({"type": "json_object", "schema": label_request().response_schema.unwrap().1})
    );

    // The backend remembers: the next request goes straight to json_object.
    let mut other = label_request();
    other.replicate = 1;
    backend
        .complete_json(&other, &cache, label_is_string)
        .await
        .unwrap();
    assert_eq!(mock.request_count(), 3);
    assert_eq!(mock.body(2)["response_format"]["type"], "json_object");
}

/// llama-cpp-python's server (0.3.36) answers a `json_schema` format with HTTP 500 and a
/// validation message naming `response_format` (its body, as a real server sent it): one
/// attempt, then `json_object` with the schema, which that server enforces; never the five
/// retries of a passing server error.
#[tokio::test]
async fn mock_server_with_llama_cpp_pythons_500_for_json_schema_steps_down_at_once() {
    let mock = MockServer::start(|_, body| {
        if body["response_format"]["type"] == "json_schema" {
            MockReply::status(
                500,
                concat!(
                    r#"{"error":{"message":"1 validation error:\n {'type': 'literal_error', "#,
                    r#"'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be "#,
                    r#"'text' or 'json_object'\", 'input': 'json_schema'}","#,
                    r#""type":"internal_server_error"}}"#,
                ),
            )
        } else {
            MockReply::answer(r#"{"label": "fear"}"#)
        }
    })
    .await;
    let completion = ask_label(&mock.backend()).await.unwrap();
    assert_eq!(completion.value["label"], "fear");
    assert_eq!(mock.request_count(), 2);
    assert_eq!(mock.body(1)["response_format"]["type"], "json_object");
    assert_eq!(
        mock.body(1)["response_format"]["schema"]["required"],
        json!(["label"])
    );
}

/// A 500 that does not name the response format is a passing server failure: retried.
#[tokio::test]
async fn mock_server_a_plain_500_is_retried_with_the_same_format() {
    let mock = MockServer::start(|index, _| {
        if index == 0 {
            MockReply::status(500, r#"{"error":{"message":"out of memory"}}"#)
        } else {
            MockReply::answer(r#"{"label": "joy"}"#)
        }
    })
    .await;
    ask_label(&mock.backend()).await.unwrap();
    assert_eq!(mock.request_count(), 2);
    assert_eq!(mock.body(1)["response_format"]["type"], "json_schema");
}

#[tokio::test]
async fn mock_server_rejecting_every_response_format_falls_back_to_fenced_text_extraction() {
    let mock = MockServer::start(|_, body| {
        if body.get("response_format").is_some() {
            MockReply::status(
                400,
                r#"{"error":{"message":"unknown field: response_format"}}"#,
            )
        } else {
            MockReply::answer("Sure, here it is:\n```json\n{\"label\": \"sadness\"}\n```\n")
        }
    })
    .await;
    let completion = ask_label(&mock.backend()).await.unwrap();
    assert_eq!(completion.value, json!({"label": "sadness"}));
    assert_eq!(mock.request_count(), 3);
    assert!(mock.body(2).get("response_format").is_none());
}

#[tokio::test]
async fn mock_server_sees_at_most_max_in_flight_concurrent_requests() {
    let mock = MockServer::start(|_, _| {
        MockReply::answer(r#"{"label": "joy"}"#).after(Duration::from_millis(200))
    })
    .await;
    let mut config = mock.config();
    config.max_in_flight = 2;
    let backend = HttpBackend::with_key_lookup(config, |_| None).unwrap();
    let cache = MemoryResponseCache::new();
    let requests: Vec<ChatRequest> = (0..6)
        .map(|replicate| ChatRequest {
            replicate,
            ..label_request()
        })
        .collect();
    let call = |index: usize| backend.complete_json(&requests[index], &cache, label_is_string);
    let started = Instant::now();
    let results = tokio::join!(call(0), call(1), call(2), call(3), call(4), call(5));
    let elapsed = started.elapsed();
    for result in [
        results.0, results.1, results.2, results.3, results.4, results.5,
    ] {
        assert_eq!(result.unwrap().value["label"], "joy");
    }
    assert_eq!(mock.request_count(), 6);
    assert_eq!(
        mock.state.most_in_flight.load(Ordering::SeqCst),
        2,
        "the bound is 2 and it is used"
    );
    assert!(
        elapsed >= Duration::from_millis(550),
        "6 requests, 2 at a time, 200 ms each: {elapsed:?}"
    );
}

#[tokio::test]
async fn mock_server_secret_is_sent_but_never_in_errors_debug_or_keys() {
    const SECRET: &str = "sk-test-3f9a1c77e2-DO-NOT-LEAK";
    // The mock echoes the key in its 401 body, as some proxies do.
    let mock =
        MockServer::start(|_, _| MockReply::status(401, &format!("invalid api key {SECRET}")))
            .await;
    let mut config = mock.config();
    config.api_key_env = Some("VISS_MOCK_API_KEY".into());
    let backend = HttpBackend::with_key_lookup(config, |name| {
        (name == "VISS_MOCK_API_KEY").then(|| SECRET.to_string())
    })
    .unwrap();

    let error = ask_label(&backend).await.unwrap_err();

    assert_eq!(mock.request_count(), 1, "a refused key is not retried");
    let authorization = mock.state.requests.lock().unwrap()[0].authorization.clone();
    assert_eq!(
        authorization.as_deref(),
        Some(format!("Bearer {SECRET}").as_str())
    );
    assert!(
        matches!(error, LlmError::Unauthorized { status: 401, .. }),
        "{error:?}"
    );
    for shown in [
        error.to_string(),
        format!("{error:?}"),
        format!("{backend:?}"),
        format!("{:?}", backend.endpoint_identity()),
    ] {
        assert!(!shown.contains(SECRET), "secret leaked into {shown:?}");
        assert!(
            !shown.contains("3f9a1c77e2"),
            "part of the secret leaked into {shown:?}"
        );
    }
    assert!(
        format!("{backend:?}").contains("VISS_MOCK_API_KEY"),
        "Debug names where the key comes from"
    );
    // The key is no input to the cache key: another secret, same key.
    let other = HttpBackend::with_key_lookup(backend.config().clone(), |_| Some("sk-other".into()))
        .unwrap();
    assert_eq!(
        request_key(&label_request(), &backend.endpoint_identity()),
        request_key(&label_request(), &other.endpoint_identity())
    );
}

#[tokio::test]
async fn mock_server_cached_answer_failing_a_stricter_validator_is_asked_again() {
    let mock = MockServer::start(|call, _| match call {
        0 => MockReply::answer(r#"{"label": "joy"}"#),
        _ => MockReply::answer(r#"{"label": "joy", "confidence": 0.9}"#),
    })
    .await;
    let backend = mock.backend();
    let cache = MemoryResponseCache::new();
    let request = label_request();
    backend
        .complete_json(&request, &cache, label_is_string)
        .await
        .unwrap();
    let needs_confidence = |value: &Value| {
        label_is_string(value)?;
        if value["confidence"].is_number() {
            Ok(())
        } else {
            let message = "field \"confidence\" is missing".to_string();
            Err(crate::Rejection::whole("missing", message))
        }
    };
    let stricter = backend
        .complete_json(&request, &cache, needs_confidence)
        .await
        .unwrap();
    assert!(!stricter.from_cache);
    assert_eq!(stricter.value["confidence"], 0.9);
    assert_eq!(mock.request_count(), 2);
    // The stricter answer replaced the old one.
    let again = backend
        .complete_json(&request, &cache, needs_confidence)
        .await
        .unwrap();
    assert!(again.from_cache);
    assert_eq!(mock.request_count(), 2);
}

#[test]
fn complete_json_future_is_send_so_stages_can_spawn_it() {
    fn assert_send<T: Send>(_: &T) {}
    let backend =
        HttpBackend::with_key_lookup(HttpConfig::new("http://127.0.0.1:9/v1", "m"), |_| None)
            .unwrap();
    let cache = MemoryResponseCache::new();
    let request = label_request();
    let future = backend.complete_json(&request, &cache, label_is_string);
    assert_send(&future);
}

#[tokio::test]
async fn mock_server_body_that_is_not_json_is_retried_then_fails_naming_it() {
    // First a cut-off body, then a good one: retried and answered.
    let mock = MockServer::start(|call, _| {
        if call == 0 {
            MockReply::status(200, "{\"choices\": [ cut")
        } else {
            MockReply::answer(r#"{"label": "joy"}"#)
        }
    })
    .await;
    let cache = MemoryResponseCache::new();
    let completion = mock
        .backend()
        .complete_json(&label_request(), &cache, label_is_string)
        .await
        .unwrap();
    assert_eq!(completion.value["label"], "joy");
    assert_eq!(mock.request_count(), 2);

    // Always cut off: bounded attempts, then an error quoting the body; nothing cached.
    let broken = MockServer::start(|_, _| MockReply::status(200, "<html>gateway</html>")).await;
    let cache = MemoryResponseCache::new();
    let error = broken
        .backend()
        .complete_json(&label_request(), &cache, label_is_string)
        .await
        .unwrap_err();
    assert_eq!(
        broken.request_count(),
        4,
        "one attempt plus max_retries = 3"
    );
    assert!(
        matches!(error, LlmError::RetriesExhausted { attempts: 4, .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("not JSON") && error.to_string().contains("gateway"),
        "{error}"
    );
    assert!(cache.is_empty());
}

/// Every answer is paid for: unusable ones are counted (and counted as rejected) whether the
/// call ends in a usable answer or fails, and so are answers before a later transport failure.
#[tokio::test]
async fn mock_server_metered_usage_counts_rejected_answers_and_those_of_failed_calls() {
    let price = Price {
        input_per_mtok: 1.0,
        output_per_mtok: 2.0,
    };
    // One label request to `mock`, priced, on a cold cache: its result and what it cost.
    let ask = |mock: MockServer| async move {
        let mut config = mock.config();
        config.prices = Some(price);
        let backend = HttpBackend::with_key_lookup(config, |_| None).unwrap();
        let mut spent = Usage::default();
        let cache = MemoryResponseCache::new();
        let result = complete_json_metered(
            &backend,
            &label_request(),
            &cache,
            &label_is_string,
            &mut spent,
        )
        .await;
        (result, spent)
    };
    // Two answers that break the schema, then a good one.
    let mock = MockServer::start(|call, _| match call {
        0 | 1 => MockReply::answer(r#"{"label": 5}"#),
        _ => MockReply::answer(r#"{"label": "joy"}"#),
    })
    .await;
    let (result, spent) = ask(mock).await;
    let completion = result.unwrap();
    assert_eq!((spent.calls, spent.rejected), (3, 2));
    assert_eq!((spent.prompt_tokens, spent.completion_tokens), (300, 60));
    assert_eq!(
        completion.usage, spent,
        "the answer's cost includes the answers re-asked"
    );

    // Never a usable answer: the call fails, and all six answers were still paid for.
    let never = MockServer::start(|call, _| alternately_bad(call)).await;
    let (result, spent) = ask(never).await;
    let error = result.unwrap_err();
    assert!(
        matches!(error, LlmError::InvalidOutput { answers: 6, .. }),
        "{error:?}"
    );
    assert_eq!((spent.calls, spent.rejected), (6, 6));
    assert_eq!((spent.prompt_tokens, spent.completion_tokens), (600, 120));
    let cost = spent.cost_usd.unwrap();
    assert!((cost - 6.0 * 140e-6).abs() < 1e-12, "{cost}");

    // One unusable answer, then the server refuses: the answer it gave is counted.
    let refusing = MockServer::start(|call, _| match call {
        0 => MockReply::answer("no JSON here"),
        _ => MockReply::status(401, "{\"error\": \"key revoked\"}"),
    })
    .await;
    let (result, spent) = ask(refusing).await;
    let error = result.unwrap_err();
    assert!(matches!(error, LlmError::Unauthorized { .. }), "{error:?}");
    assert_eq!((spent.calls, spent.rejected), (1, 1));

    // A 200 that is JSON but no chat completion was billed as the server says; it is rejected.
    let odd = MockServer::start(|_, _| {
        MockReply::status(
            200,
            r#"{"usage": {"prompt_tokens": 100, "completion_tokens": 0}}"#,
        )
    })
    .await;
    let (result, spent) = ask(odd).await;
    let error = result.unwrap_err();
    assert!(
        matches!(error, LlmError::MalformedResponse { .. }),
        "{error:?}"
    );
    assert_eq!(
        (spent.calls, spent.rejected, spent.prompt_tokens),
        (1, 1, 100)
    );
}

/// A cached answer cost nothing this time, and what older versions cached (without a count of
/// rejected answers) is still read rather than asked again.
#[tokio::test]
async fn mock_server_metered_usage_is_zero_on_a_cache_hit_and_old_cache_entries_are_read() {
    let mock = MockServer::start(|_, _| MockReply::answer(r#"{"label": "joy"}"#)).await;
    let backend = mock.backend();
    let cache = MemoryResponseCache::new();
    let request = label_request();
    let key = request_key(&request, &backend.endpoint_identity());
    let old_entry = r#"{"value": {"label": "calm"},
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "cost_usd": null, "calls": 1}}"#;
    cache.put(key, old_entry.as_bytes());
    let mut spent = Usage::default();
    let completion =
        complete_json_metered(&backend, &request, &cache, &label_is_string, &mut spent)
            .await
            .unwrap();
    assert!(completion.from_cache);
    assert_eq!(completion.value, json!({"label": "calm"}));
    assert_eq!(spent, Usage::default());
    assert_eq!(mock.request_count(), 0);
}

/// A second server on another loopback address is another origin: what it receives would have
/// left the configured endpoint.
#[tokio::test]
async fn mock_server_a_redirect_to_another_host_is_refused_and_the_prompt_never_sent_there() {
    let elsewhere = MockServer::start_on("127.0.0.2", |_, _, _| {
        MockReply::answer(r#"{"label": "from another host"}"#)
    })
    .await;
    let target = format!("{}/chat/completions", elsewhere.base_url);
    for status in [307, 308, 302, 301] {
        let location = target.clone();
        let mock = MockServer::start(move |_, _| MockReply::redirect(status, &location)).await;
        let cache = MemoryResponseCache::new();
        let error = mock
            .backend()
            .complete_json(&label_request(), &cache, label_is_string)
            .await
            .unwrap_err();
        let message = error.to_string();
        let from = mock.base_url.trim_end_matches("/v1");
        let to = elsewhere.base_url.trim_end_matches("/v1");
        assert!(
            matches!(error, LlmError::Redirect { .. }),
            "{status}: {message}"
        );
        assert!(
            message.contains(from) && message.contains(to),
            "{status}: names both origins: {message}"
        );
        assert_eq!(
            mock.request_count(),
            1,
            "{status}: a refused redirect is not retried"
        );
    }
    assert_eq!(
        elsewhere.request_count(),
        0,
        "nothing reached the other host"
    );
}

#[tokio::test]
async fn mock_server_a_302_within_the_endpoint_is_not_resent_as_a_get_and_a_307_is_followed() {
    let mock = MockServer::start(|call, body| match call {
        // Same origin, but a 302 turns the POST into a GET whose page is no answer.
        0 => MockReply::redirect(302, "/v1/moved/chat/completions"),
        1 => MockReply::redirect(307, "/v1/moved/chat/completions"),
        _ if body.is_null() => MockReply::status(400, "a GET without the request"),
        _ => MockReply::answer(r#"{"label": "joy"}"#),
    })
    .await;
    let cache = MemoryResponseCache::new();
    let backend = mock.backend();
    let error = backend
        .complete_json(&label_request(), &cache, label_is_string)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("HTTP 302") && error.to_string().contains("as a GET"),
        "{error}"
    );
    let answer = backend
        .complete_json(&label_request(), &cache, label_is_string)
        .await
        .unwrap();
    assert_eq!(answer.value, json!({"label": "joy"}));
    let requests = mock.state.requests.lock().unwrap();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].path, "/v1/moved/chat/completions");
    assert_eq!(
        requests[2].body, requests[1].body,
        "the 307 resent the same POST"
    );
}

#[tokio::test]
async fn mock_server_a_body_over_the_limit_fails_without_being_read_whole() {
    // 40 MiB of padding beside a valid answer, against a 1 MiB limit; then an endless body.
    for padding in [Some(40u64 << 20), None] {
        let mock =
            MockServer::start(move |_, _| MockReply::padded_answer(r#"{"label": "joy"}"#, padding))
                .await;
        let mut config = mock.config();
        config.max_response_bytes = 1 << 20;
        let backend = HttpBackend::with_key_lookup(config, |_| None).unwrap();
        let cache = MemoryResponseCache::new();
        let started = Instant::now();
        let error = backend
            .complete_json(&label_request(), &cache, label_is_string)
            .await
            .unwrap_err();
        assert!(
            matches!(error, LlmError::ResponseTooLarge { limit: 1048576, .. }),
            "{padding:?}: {error}"
        );
        assert!(error.to_string().contains("max_response_mib"), "{error}");
        assert_eq!(mock.request_count(), 1, "{padding:?}: not retried");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "not read until the timeout"
        );
    }
    // The same padding under the default limit is read and the answer used.
    let mock =
        MockServer::start(|_, _| MockReply::padded_answer(r#"{"label": "joy"}"#, Some(1 << 20)))
            .await;
    let answer = ask_label(&mock.backend()).await.unwrap();
    assert_eq!(answer.value, json!({"label": "joy"}));
}

#[tokio::test]
async fn mock_server_a_control_character_in_an_answers_text_is_reasked_not_kept() {
    let mock = MockServer::start(|call, _| match call {
        0 => MockReply::answer(r#"{"label": "jo\u0000y"}"#),
        1 => MockReply::answer(r#"{"label": "jo\u001b[2Jy"}"#),
        _ => MockReply::answer("{\"label\": \"joy,\\nsurely\\tso\"}"),
    })
    .await;
    let answer = ask_label(&mock.backend()).await.unwrap();
    assert_eq!(answer.value, json!({"label": "joy,\nsurely\tso"}));
    assert_eq!(answer.rejected.len(), 2, "{:?}", answer.rejected);
    assert!(
        answer.rejected[0]
            .message
            .contains("label holds the control character U+0000")
    );
    assert!(answer.rejected[1].message.contains("U+001B"));
    for refusal in &answer.rejected {
        let kinds: Vec<&str> = refusal.problems.iter().map(|p| p.kind.as_str()).collect();
        assert_eq!(kinds, ["control_character"]);
    }
}

/// The label check with "joy" refused: the mock's answers all fail it, and all are usable
/// enough for a caller to keep one, flagged.
fn label_not_joy(value: &Value) -> Result<(), crate::Rejection> {
    label_is_string(value)?;
    // Each answer's problem names its try, so no two in a row are the same.
    match value["label"].as_str() {
        Some("joy") => Err(crate::Rejection::whole(
            "barred",
            format!("joy is not allowed here (try {})", value["try"]),
        )),
        _ => Ok(()),
    }
}

fn any_label(value: &Value) -> bool {
    value["label"].is_string()
}

#[tokio::test]
async fn mock_server_rejected_answers_the_caller_keeps_are_replayed_and_others_asked_again() {
    let mock = MockServer::start(|call, _| {
        MockReply::answer(&format!(r#"{{"label": "joy", "try": {call}}}"#))
    })
    .await;
    let backend = mock.backend();
    let cache = MemoryResponseCache::new();
    let request = label_request();
    let mut spent = Usage::default();

    let first = complete_json_keeping(
        &backend,
        &request,
        &cache,
        &label_not_joy,
        Some(&any_label),
        &mut spent,
    )
    .await
    .unwrap_err();
    assert_eq!(mock.request_count(), 6);
    let LlmError::InvalidOutput { parsed, usage, .. } = &first else {
        panic!("{first:?}")
    };
    assert_eq!(parsed.len(), 6);
    assert_eq!((usage.calls, usage.rejected), (6, 6));
    assert_eq!(**usage, spent, "the failure says what its answers cost");
    let first_usage = **usage;
    assert_eq!(parsed[5].value["try"], 5);
    assert!(
        cache
            .get(request_key(&request, &backend.identity()))
            .is_none()
    );

    // The same request again: the same answers, nothing asked.
    let again = complete_json_keeping(
        &backend,
        &request,
        &cache,
        &label_not_joy,
        Some(&any_label),
        &mut spent,
    )
    .await
    .unwrap_err();
    assert_eq!(mock.request_count(), 6);
    let LlmError::InvalidOutput {
        parsed: replayed,
        last_problem,
        usage,
        ..
    } = &again
    else {
        panic!("{again:?}")
    };
    assert_eq!(replayed, parsed);
    assert_eq!(spent, first_usage, "nothing spent on the replay");
    assert_eq!(
        **usage, first_usage,
        "what the replayed answers cost when asked"
    );
    assert!(
        last_problem.message.contains("joy is not allowed here"),
        "{last_problem}"
    );

    // A loosened check accepts the first of them, still without asking.
    let completion = complete_json_keeping(
        &backend,
        &request,
        &cache,
        &label_is_string,
        Some(&any_label),
        &mut spent,
    )
    .await
    .unwrap();
    assert!(completion.from_cache);
    assert_eq!(completion.value["try"], 0);
    assert_eq!(mock.request_count(), 6);
    assert_eq!(completion.first_usage, first_usage);

    // Without `keep`, a failed call is asked again (a rebuild retries a failed item)...
    complete_json_metered(&backend, &request, &cache, &label_not_joy, &mut spent)
        .await
        .unwrap_err();
    assert_eq!(mock.request_count(), 12);
    // ...and so, every time, is one with nothing the caller would keep.
    let mut other = request.clone();
    other.seed = Some(99);
    for _ in 0..2 {
        complete_json_keeping(
            &backend,
            &other,
            &cache,
            &label_not_joy,
            Some(&|_| false),
            &mut spent,
        )
        .await
        .unwrap_err();
    }
    assert_eq!(mock.request_count(), 24);
}

/// Batches gathered and looked at every 10 ms, at half price.
fn quick_batches(resubmits: u32, reask_rounds: u32) -> crate::batch::BatchSettings {
    crate::batch::BatchSettings {
        window: Duration::from_millis(10),
        max_requests: 100,
        poll: Duration::from_millis(10),
        discount: 0.5,
        resubmits,
        reask_rounds,
    }
}

#[tokio::test]
async fn a_batch_the_provider_no_longer_keeps_is_submitted_again_not_waited_on_forever() {
    use crate::mock_server::BatchBehaviour;
    let server = MockServer::start_with_batches(
        |_, _| MockReply::answer(r#"{"label": "joy"}"#),
        BatchBehaviour::default(),
    )
    .await;
    let mut config = server.config();
    config.batch = Some(quick_batches(1, 5));
    let ledger: std::sync::Arc<dyn ResponseCache> = std::sync::Arc::new(MemoryResponseCache::new());
    let request = label_request();
    let ask = |ledger: std::sync::Arc<dyn ResponseCache>| {
        let backend = HttpBackend::with_key_lookup(config.clone(), |_| None)
            .unwrap()
            .with_batch_ledger(ledger);
        let request = request.clone();
        async move {
            let mut usage = Usage::default();
            backend
                .answer(&request, &request.messages, &mut usage)
                .await
                .map(|answer| answer.text)
        }
    };
    assert_eq!(ask(ledger.clone()).await.unwrap(), r#"{"label": "joy"}"#);
    // A later build finds the line's batch in the ledger, but the provider has dropped it.
    server.forget_batch("batch_1");
    assert_eq!(ask(ledger.clone()).await.unwrap(), r#"{"label": "joy"}"#);
    let batches = server.submitted_batches();
    assert_eq!(batches.len(), 2, "submitted again once: {batches:?}");
    assert_eq!(batches[0], batches[1]);
}

#[tokio::test]
async fn re_asks_past_the_batched_rounds_go_online() {
    use crate::mock_server::BatchBehaviour;
    // The first answer (in the batch) is unusable; the second is fine.
    let server = MockServer::start_with_batches(
        |call, _| match call {
            0 => MockReply::answer(r#"{"label": 7}"#),
            _ => MockReply::answer(r#"{"label": "joy"}"#),
        },
        BatchBehaviour::default(),
    )
    .await;
    let mut config = server.config();
    config.batch = Some(quick_batches(0, 0));
    let backend = HttpBackend::with_key_lookup(config, |_| None)
        .unwrap()
        .with_batch_ledger(std::sync::Arc::new(MemoryResponseCache::new()));
    let cache = MemoryResponseCache::new();
    let answer = complete_json(&backend, &label_request(), &cache, &label_is_string)
        .await
        .unwrap();
    assert_eq!(answer.value["label"], "joy");
    assert_eq!(
        server.submitted_batches().len(),
        1,
        "the question in a batch"
    );
    assert_eq!(server.requests_to("/v1/chat"), 1, "its re-ask online");
}

//! What is asked of a model, how it goes over the wire, and the cache key that names it.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use viss_engine::hash::{ContentHash, canonical_json};

/// Who speaks a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One piece of a message's content.
#[derive(Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    /// PNG bytes; sent as a `data:image/png;base64,...` URL.
    ImagePng(Vec<u8>),
}

impl Part {
    /// A PNG image scaled (aspect kept) to fit `size` x `size` pixels, as images are sent to
    /// models: vision models tile larger images into more tokens, which cost more and add little
    /// for a scene picture. An image already that small is sent as it is.
    pub fn image_fitted(png: &[u8], size: u32) -> Result<Part, image::ImageError> {
        let decoded = image::load_from_memory(png)?;
        if decoded.width() <= size && decoded.height() <= size {
            return Ok(Part::ImagePng(png.to_vec()));
        }
        let scaled = decoded
            .resize(size, size, image::imageops::FilterType::Triangle)
            .to_rgb8();
        Ok(Part::ImagePng(viss_vision::encode_png(&scaled)))
    }
}

// Images are megabytes: Debug shows their size and hash, not their bytes.
impl std::fmt::Debug for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Part::Text(text) => f.debug_tuple("Text").field(text).finish(),
            Part::ImagePng(bytes) => write!(
                f,
                "ImagePng({} bytes, blake3 {})",
                bytes.len(),
                &ContentHash::of(bytes).to_hex()[..12]
            ),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Part>,
}

impl Message {
    pub fn system(text: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: vec![Part::Text(text.into())],
        }
    }

    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![Part::Text(text.into())],
        }
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: vec![Part::Text(text.into())],
        }
    }

    pub fn user_parts(content: Vec<Part>) -> Self {
        Self {
            role: Role::User,
            content,
        }
    }
}

/// One chat-completion request whose answer must be a JSON value.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    /// `None`: the model the endpoint is configured with.
    pub model: Option<String>,
    pub messages: Vec<Message>,
    pub temperature: f32,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    /// `(name, JSON schema)` sent as a strict `json_schema` response format when the server
    /// supports it.
    pub response_schema: Option<(String, Value)>,
    /// Which sample of the same question this is: 0, 1, 2, ... Only part of the cache key (it is
    /// not sent), so that replicate 1 is a fresh answer rather than replicate 0 read back.
    pub replicate: u32,
    /// A narrower form of the response schema for backends that constrain decoding with a
    /// grammar (the embedded model): it may use what strict structured outputs do not take
    /// (tuples, per-role patterns). Endpoints never see it. It only narrows what the model can
    /// write; the answer is still checked by the caller's validator.
    pub decoder_schema: Option<Value>,
    /// Words a backend that decodes itself (the embedded model) gives no chance to be written,
    /// for answers that the caller's validator rejects when they hold one (a description's
    /// "worried"). Endpoints never see it; the answer is still checked by the validator.
    pub avoid_words: Vec<String>,
    /// How many times an unusable answer is sent back with its problems before the call fails
    /// ([`crate::MAX_REASKS`] unless the caller allows more). Not part of the cache key: only a
    /// valid answer is stored, and it is the same answer whatever the budget was.
    pub max_reasks: u32,
    /// What the caller checks the answer against, when one question is put under two checks
    /// (a role's entry asked beside the others' and then held to its own problems alone). Only
    /// part of the cache key (it is not sent): an answer one check accepted is not read back as
    /// the other's, which would make a rebuild take another path than the build it repeats.
    pub checked_as: Option<String>,
    /// Which round of re-asks this attempt is (0: the question itself), set by the re-ask loop
    /// for the backend: a batched endpoint sends late rounds online. Not sent, not in the key.
    pub reask_round: u32,
}

impl ChatRequest {
    /// A request with temperature 0, no seed, no token limit, no schema, replicate 0.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            model: None,
            messages,
            temperature: 0.0,
            seed: None,
            max_tokens: None,
            response_schema: None,
            replicate: 0,
            decoder_schema: None,
            avoid_words: Vec::new(),
            max_reasks: crate::MAX_REASKS,
            checked_as: None,
            reask_round: 0,
        }
    }

    pub fn with_schema(mut self, name: impl Into<String>, schema: Value) -> Self {
        self.response_schema = Some((name.into(), schema));
        self
    }
}

/// Which endpoint answers: part of every cache key, because the same question put to another
/// server or model is a different measurement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointIdentity {
    pub base_url: String,
    pub model: String,
}

impl EndpointIdentity {
    /// The model a request is answered by: its own, or the endpoint's default.
    pub fn model_for<'a>(&'a self, request: &'a ChatRequest) -> &'a str {
        request.model.as_deref().unwrap_or(&self.model)
    }
}

/// The cache key of a request: blake3 over a canonical JSON (object keys sorted) of the
/// endpoint base URL, the model, every field of the request and the replicate index. Images
/// enter by their blake3 hash (same identity, no megabytes of base64 to hash twice). The API
/// key is not an input, so it can never leak through a key and rotating it keeps the cache.
pub fn request_key(request: &ChatRequest, endpoint: &EndpointIdentity) -> ContentHash {
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|message| {
            let parts: Vec<Value> = message
                .content
                .iter()
                .map(|part| match part {
                    Part::Text(text) => json!({ "text": text }),
                    Part::ImagePng(bytes) => {
                        json!({ "image_png_blake3": ContentHash::of(bytes).to_hex() })
                    }
                })
                .collect();
            json!({ "role": message.role.as_str(), "content": parts })
        })
        .collect();
    let mut material = json!({
        "key_format": 1,
        "endpoint": endpoint.base_url.trim_end_matches('/'),
        "model": endpoint.model_for(request),
        "messages": messages,
        // f32 -> f64 widening is exact, so the key is stable across runs.
        "temperature": f64::from(request.temperature),
        "seed": request.seed,
        "max_tokens": request.max_tokens,
        "response_schema": request.response_schema.as_ref().map(|(name,
        schema)| json!({"name": name, "schema": schema})),
        "replicate": request.replicate,
    });
    // Added only when present, so requests without one keep the keys they always had.
    if let Some(decoder_schema) = &request.decoder_schema {
        material["decoder_schema"] = decoder_schema.clone();
    }
    // A model writes an object's properties in the order the schema lists them, which the
    // canonical JSON above sorts away. Keys of schemas listed in sorted order stay as they were
    // (answers cached when every schema's keys were sorted were written in that order).
    let mut written_order = Vec::new();
    for schema in [
        request.response_schema.as_ref().map(|(_, schema)| schema),
        request.decoder_schema.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        unsorted_property_orders(schema, &mut written_order);
    }
    if !written_order.is_empty() {
        material["property_order"] = Value::from(written_order);
    }
    if !request.avoid_words.is_empty() {
        // Named for what the embedded model does with them: since it also keeps out words it
        // spells in several tokens, its answers to such requests differ from those once cached
        // under "avoid_words".
        material["barred_words"] = Value::from(request.avoid_words.clone());
    }
    if let Some(checked_as) = &request.checked_as {
        material["checked_as"] = Value::from(checked_as.clone());
    }
    ContentHash::of(canonical_json(&material).as_bytes())
}

/// The property names of every object in `value` whose `properties` are not listed in sorted
/// order, in the order listed, visiting objects in sorted key order (so the list is the same
/// whatever the map ordering).
fn unsorted_property_orders(value: &Value, out: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(properties)) = map.get("properties") {
                let names: Vec<&String> = properties.keys().collect();
                if names.windows(2).any(|pair| pair[0] > pair[1]) {
                    out.push(Value::from(
                        names.into_iter().cloned().collect::<Vec<String>>(),
                    ));
                }
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            for (_, field) in entries {
                unsorted_property_orders(field, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                unsorted_property_orders(item, out);
            }
        }
        _ => {}
    }
}

/// How the answer's format is constrained on the wire; servers that reject one are asked with
/// the next, weaker one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResponseFormatMode {
    /// `{"type":"json_schema", ...,"strict":true}`
    JsonSchema = 0,
    /// `{"type":"json_object"}`, with the request's schema as `schema` when it has one
    JsonObject = 1,
    /// No `response_format`; the JSON is extracted from free text.
    Unconstrained = 2,
}

impl ResponseFormatMode {
    pub(crate) fn from_u8(raw: u8) -> Self {
        match raw {
            0 => Self::JsonSchema,
            1 => Self::JsonObject,
            _ => Self::Unconstrained,
        }
    }

    pub(crate) fn weaker(self) -> Option<Self> {
        match self {
            Self::JsonSchema => Some(Self::JsonObject),
            Self::JsonObject => Some(Self::Unconstrained),
            Self::Unconstrained => None,
        }
    }

    /// Without a schema there is nothing to send as `json_schema`.
    pub(crate) fn for_request(self, request: &ChatRequest) -> Self {
        if self == Self::JsonSchema && request.response_schema.is_none() {
            Self::JsonObject
        } else {
            self
        }
    }
}

fn wire_message(message: &Message) -> Value {
    // A single text part goes as a plain string: older OpenAI-compatible servers accept only
    // that for system and assistant messages.
    let content = match message.content.as_slice() {
        [Part::Text(text)] => Value::String(text.clone()),
        parts => Value::Array(
            parts
                .iter()
                .map(|part| match part {
                    Part::Text(text) => json!({ "type": "text", "text": text }),
                    Part::ImagePng(bytes) => json!({
                        "type": "image_url",
                        "image_url": {
                            "url": format!("data:image/png;base64,{}",
                                           base64::engine::general_purpose::STANDARD.encode(bytes))
                        }
                    }),
                })
                .collect(),
        ),
    };
    json!({ "role": message.role.as_str(), "content": content })
}

/// The `/chat/completions` body for `conversation` (the request's messages plus any re-asks).
pub(crate) fn chat_body(
    model: &str,
    request: &ChatRequest,
    conversation: &[Message],
    mode: ResponseFormatMode,
) -> Value {
    let mut body = json!({
        "model": model,
        "messages": conversation.iter().map(wire_message).collect::<Vec<_>>(),
        "temperature": request.temperature,
    });
    if let Some(seed) = request.seed {
        body["seed"] = json!(seed);
    }
    if let Some(max_tokens) = request.max_tokens {
        body["max_tokens"] = json!(max_tokens);
    }
    match (mode.for_request(request), &request.response_schema) {
        (ResponseFormatMode::JsonSchema, Some((name, schema))) => {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": { "name": name, "schema": schema, "strict": true }
            });
        }
        // The schema rides along: llama-cpp-python's server constrains `json_object` answers
        // with it; servers that do not know the key ignore it.
        (ResponseFormatMode::JsonObject, Some((_, schema))) => {
            body["response_format"] = json!({ "type": "json_object", "schema": schema });
        }
        (ResponseFormatMode::JsonObject, None) | (ResponseFormatMode::JsonSchema, None) => {
            body["response_format"] = json!({ "type": "json_object" });
        }
        (ResponseFormatMode::Unconstrained, _) => {}
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> EndpointIdentity {
        EndpointIdentity {
            base_url: "http://127.0.0.1:9/v1".into(),
            model: "m".into(),
        }
    }

    fn sample() -> ChatRequest {
        ChatRequest::new(vec![Message::system("be brief"), Message::user("hi")])
            .with_schema("answer", json!({"type": "object"}))
    }

    #[test]
    fn replicate_index_changes_the_key() {
        let first = sample();
        let mut second = sample();
        second.replicate = 1;
        assert_ne!(
            request_key(&first, &endpoint()),
            request_key(&second, &endpoint())
        );
        assert_eq!(
            request_key(&first, &endpoint()),
            request_key(&sample(), &endpoint())
        );
    }

    #[test]
    fn endpoint_model_and_every_field_change_the_key() {
        let base = request_key(&sample(), &endpoint());
        let other_url = EndpointIdentity {
            base_url: "http://127.0.0.1:10/v1".into(),
            ..endpoint()
        };
        let other_model = EndpointIdentity {
            model: "n".into(),
            ..endpoint()
        };
        assert_ne!(base, request_key(&sample(), &other_url));
        assert_ne!(base, request_key(&sample(), &other_model));
        // A trailing slash names the same endpoint.
        let slash = EndpointIdentity {
            base_url: "http://127.0.0.1:9/v1/".into(),
            ..endpoint()
        };
        assert_eq!(base, request_key(&sample(), &slash));
        type Change = Box<dyn Fn(&mut ChatRequest)>;
        let variants: Vec<Change> = vec![
            Box::new(|r| r.temperature = 0.5),
            Box::new(|r| r.seed = Some(1)),
            Box::new(|r| r.max_tokens = Some(10)),
            Box::new(|r| r.response_schema = None),
            Box::new(|r| r.decoder_schema = Some(json!({"type": "string"}))),
            Box::new(|r| r.avoid_words = vec!["worried".into()]),
            Box::new(|r| r.checked_as = Some("beside 0 of 1 entries".into())),
            Box::new(|r| r.model = Some("other".into())),
            Box::new(|r| {
                r.messages
                    .push(Message::user_parts(vec![Part::ImagePng(vec![1, 2, 3])]))
            }),
        ];
        for change in variants {
            let mut changed = sample();
            change(&mut changed);
            assert_ne!(base, request_key(&changed, &endpoint()), "{changed:?}");
        }
    }

    #[test]
    fn the_order_a_schema_lists_its_properties_in_is_part_of_the_key() {
        let listed = |schema: Value| {
            request_key(
                &ChatRequest::new(vec![Message::user("hi")]).with_schema("answer", schema),
                &endpoint(),
            )
        };
        let sorted = json!({"type": "object", "properties": {"a": {}, "b": {}}});
        let draft_first = json!({"type": "object", "properties": {"b": {}, "a": {}}});
        assert_ne!(listed(sorted.clone()), listed(draft_first));
        // Sorted properties add nothing: the key answers cached before the order counted had.
        let mut found = Vec::new();
        unsorted_property_orders(&sorted, &mut found);
        assert!(found.is_empty());
        let nested = json!({"items": {"properties": {"name": {}, "goal": {}}}});
        unsorted_property_orders(&nested, &mut found);
        assert_eq!(found, vec![json!(["name", "goal"])]);
    }

    #[test]
    fn images_are_scaled_to_fit_the_size_keeping_their_shape() {
        let wide = image::RgbImage::from_pixel(896, 504, image::Rgb([200, 40, 40]));
        let Part::ImagePng(png) = Part::image_fitted(&viss_vision::encode_png(&wide), 448).unwrap()
        else {
            panic!("an image part");
        };
        let fitted = image::load_from_memory(&png).unwrap();
        assert_eq!((fitted.width(), fitted.height()), (448, 252));
        let small = viss_vision::encode_png(&image::RgbImage::new(100, 80));
        assert_eq!(
            Part::image_fitted(&small, 448).unwrap(),
            Part::ImagePng(small)
        );
        assert!(Part::image_fitted(b"not a png", 448).is_err());
    }

    #[test]
    fn wire_body_has_schema_seed_and_image_data_url() {
        let mut request = sample();
        request.seed = Some(7);
        request.messages.push(Message::user_parts(vec![
            Part::Text("look".into()),
            Part::ImagePng(vec![0x89, b'P']),
        ]));
        let body = chat_body(
            "m",
            &request,
            &request.messages,
            ResponseFormatMode::JsonSchema,
        );
        assert_eq!(
            body["response_format"]["json_schema"]["strict"],
            json!(true)
        );
        assert_eq!(body["seed"], json!(7));
        assert_eq!(body["messages"][0]["content"], json!("be brief"));
        assert_eq!(
            body["messages"][2]["content"][1]["image_url"]["url"],
            json!("data:image/png;base64,iVA=")
        );
        let object = chat_body(
            "m",
            &request,
            &request.messages,
            ResponseFormatMode::JsonObject,
        );
        assert_eq!(
            object["response_format"],
            json!({"type": "json_object", "schema": {"type": "object"}})
        );
        let free = chat_body(
            "m",
            &request,
            &request.messages,
            ResponseFormatMode::Unconstrained,
        );
        assert!(free.get("response_format").is_none());
    }
}

//! The pictures of a `vv` or `dv` run: the group image G and each role's current portrait, what
//! a describer model says of them (`vv`), what is attached for the agent (`dv`), and the
//! speaker's portrait redrawn when its expression changes (an image edit endpoint).

use serde::Serialize;
use serde_json::{Value, json};

use crate::dag::JobCtx;
use crate::dag::StageFailure;
use crate::hash::ContentHash;
use crate::imagegen::ImageBackend;
use crate::llm::request::Part;
use crate::llm::{ChatRequest, ModelRef, Problems, Rejection};
use crate::sim::turn::Emotion;
use crate::stages::llm_step::{ask_model, question};
use crate::stages::plan_runs::RunPictures;

use super::SimulateError;

/// The describer's template for G, once per run.
pub const SCENE_TEMPLATE: &str = "simulate_scene.j2";
/// The describer's template for the other roles' current portraits, every turn.
pub const PEOPLE_TEMPLATE: &str = "simulate_people.j2";

/// A role's portrait as it stands in the run.
#[derive(Debug, Clone)]
struct Portrait {
    hash: ContentHash,
    png: Vec<u8>,
}

/// The run's pictures as they stand: G and, per role in cast order, its current portrait or
/// why it has none.
pub struct Gallery {
    group_image: Vec<u8>,
    portraits: Vec<Result<Portrait, String>>,
}

impl Gallery {
    /// The pictures `plan` starts from, read from the store.
    pub fn load(ctx: &JobCtx, pictures: &RunPictures) -> Result<Self, StageFailure> {
        let group_image = ctx.store().get_blob(&pictures.group_image)?;
        let mut portraits = Vec::new();
        for portrait in &pictures.portraits {
            portraits.push(match portrait {
                Ok(hash) => Ok(Portrait {
                    hash: *hash,
                    png: ctx.store().get_blob(hash)?,
                }),
                Err(why) => Err(why.clone()),
            });
        }
        Ok(Self {
            group_image,
            portraits,
        })
    }

    /// Every role's current portrait hash, in cast order (`None`: it has none).
    pub fn hashes(&self) -> Vec<Option<String>> {
        self.portraits
            .iter()
            .map(|p| p.as_ref().ok().map(|p| p.hash.to_hex()))
            .collect()
    }

    /// G scaled to fit `size` x `size`, as sent, and its hash.
    fn group_part(&self, size: u32) -> Result<(Part, String), SimulateError> {
        fitted(&self.group_image, size, "the group image")
    }

    /// The portraits of `roles` (cast indices, in this order) that have one, side by side and
    /// scaled to fit `size` x `size`, with the names shown and the names of those without one
    /// and why. `None` when none of them has a portrait.
    fn collage_part(
        &self,
        roles: &[usize],
        names: &[String],
        size: u32,
    ) -> Result<Collage, SimulateError> {
        let mut tiles = Vec::new();
        let mut shown = Vec::new();
        let mut missing = Vec::new();
        for &role in roles {
            match &self.portraits[role] {
                Ok(portrait) => {
                    tiles.push(decode(&portrait.png, &names[role])?);
                    shown.push(names[role].clone());
                }
                Err(why) => missing.push(format!("{} ({why})", names[role])),
            }
        }
        let picture = if tiles.is_empty() {
            None
        } else {
            let tile = (size / tiles.len() as u32).max(16);
            let png = viss_vision::encode_png(&viss_vision::portrait::collage(&tiles, tile));
            Some(fitted(&png, size, "the portrait collage")?)
        };
        Ok(Collage {
            picture,
            shown,
            missing,
        })
    }
}

/// A row of portraits as attached to a request.
struct Collage {
    picture: Option<(Part, String)>,
    /// Whose portraits it shows, left to right.
    shown: Vec<String>,
    /// Who has no portrait, with why.
    missing: Vec<String>,
}

fn decode(png: &[u8], whose: &str) -> Result<image::RgbImage, SimulateError> {
    image::load_from_memory(png)
        .map(|image| image.into_rgb8())
        .map_err(|source| SimulateError::Picture {
            what: format!("the portrait of {whose}"),
            problem: source.to_string(),
        })
}

/// `png` as a request's image part scaled to fit `size` x `size`, and the hash of what is sent.
fn fitted(png: &[u8], size: u32, what: &str) -> Result<(Part, String), SimulateError> {
    let part = Part::image_fitted(png, size).map_err(|source| SimulateError::Picture {
        what: what.to_string(),
        problem: source.to_string(),
    })?;
    let hash = match &part {
        Part::ImagePng(bytes) => ContentHash::of(bytes).to_hex(),
        Part::Text(_) => unreachable!("image_fitted makes an image part"),
    };
    Ok((part, hash))
}

/// What an agent of a `dv` run is shown besides the words: G, then the collage of the current
/// portraits of the roles `in_scene` in cast order (the speaker's too), and the sentence that
/// says so.
pub struct DirectView {
    pub parts: Vec<Part>,
    pub hashes: Vec<String>,
    pub caption: String,
}

pub fn direct_view(
    gallery: &Gallery,
    in_scene: &[usize],
    names: &[String],
    size: u32,
) -> Result<DirectView, SimulateError> {
    let (group, group_hash) = gallery.group_part(size)?;
    let collage = gallery.collage_part(in_scene, names, size)?;
    let mut parts = vec![group];
    let mut hashes = vec![group_hash];
    let mut caption = "the first picture is the whole scene".to_string();
    if let Some((part, hash)) = collage.picture {
        parts.push(part);
        hashes.push(hash);
        caption.push_str(&format!(
            "; the second shows how {} look now, left to right",
            collage.shown.join(", ")
        ));
    }
    if !collage.missing.is_empty() {
        caption.push_str(&format!("; no portrait of {}", collage.missing.join(", ")));
    }
    caption.push('.');
    Ok(DirectView {
        parts,
        hashes,
        caption,
    })
}

/// What the describer is told with G.
#[derive(Serialize)]
struct SceneQuestion<'a> {
    show: &'a str,
    heading: Option<&'a str>,
    names: &'a [String],
}

/// What the describer is told with the others' portraits.
#[derive(Serialize)]
struct PeopleQuestion<'a> {
    names: &'a [String],
}

/// How a describer is asked: model, sampling, and the run's seed for this call.
pub struct Describer<'a> {
    pub model: &'a ModelRef,
    pub temperature: f32,
    pub max_tokens: u32,
    pub size: u32,
    pub replicate: u32,
}

/// The describer's words for one call, and the hashes of the pictures it saw.
pub struct Described {
    pub lines: Vec<String>,
    pub image_hashes: Vec<String>,
    pub request_key: String,
}

/// `field`'s text (of `who`'s entry, or of the answer's own), or its problem recorded and `None`.
fn text_field(
    value: &Value,
    who: Option<&str>,
    field: &str,
    problems: &mut Problems,
) -> Option<String> {
    match value.get(field).and_then(Value::as_str).map(str::trim) {
        Some(text) if !text.is_empty() => Some(text.to_string()),
        _ => {
            let message = format!("{field} is missing or empty; describe what is visible");
            problems.unusable("missing", who, field, message);
            None
        }
    }
}

impl Describer<'_> {
    fn request(&self, messages: Vec<crate::llm::request::Message>, seed: u64) -> ChatRequest {
        let mut request = ChatRequest::new(messages);
        request.temperature = self.temperature;
        request.seed = Some(seed);
        request.replicate = self.replicate;
        request.max_tokens = Some(self.max_tokens);
        request
    }

    /// G in words, once per run (the paper's scene summary and scene-character summary).
    pub async fn scene(
        &self,
        ctx: &JobCtx,
        gallery: &Gallery,
        context: (&str, Option<&str>, &[String]),
        seed: u64,
    ) -> Result<Described, StageFailure> {
        let (show, heading, names) = context;
        let (part, hash) = gallery.group_part(self.size)?;
        let schema = json!({
            "type": "object",
            "properties": {
                "scene": {"type": "string", "minLength": 1, "maxLength": 800},
                "people": {"type": "string", "minLength": 1, "maxLength": 800},
            },
            "required": ["scene", "people"],
            "additionalProperties": false,
        });
        let messages = question(
            ctx,
            SCENE_TEMPLATE,
            &SceneQuestion {
                show,
                heading,
                names,
            },
            vec![part],
        )?;
        let request = self
            .request(messages, seed)
            .with_schema("describe_scene", schema);
        let validate = |value: &Value| {
            let mut problems = Problems::new();
            let scene = text_field(value, None, "scene", &mut problems);
            let people = text_field(value, None, "people", &mut problems);
            problems.finish()?;
            // An absent one was recorded as a problem, which `finish` returned.
            Ok([scene, people].map(|text| text.expect("both are there")))
        };
        let ([scene, people], completion) = ask_model(ctx, self.model, &request, validate).await?;
        Ok(Described {
            lines: vec![
                format!("The place: {scene}"),
                format!("The people in it: {people}"),
            ],
            image_hashes: vec![hash],
            request_key: completion.key.to_hex(),
        })
    }

    /// The current portraits of `others` (cast indices) in words, one line each; a role
    /// without a portrait is a line saying so.
    pub async fn people(
        &self,
        ctx: &JobCtx,
        gallery: &Gallery,
        others: &[usize],
        names: &[String],
        seed: u64,
    ) -> Result<Described, StageFailure> {
        let collage = gallery.collage_part(others, names, self.size)?;
        let missing = collage
            .missing
            .iter()
            .map(|who| format!("No picture of {who}."));
        let Some((part, hash)) = collage.picture else {
            return Ok(Described {
                lines: missing.collect(),
                image_hashes: Vec::new(),
                request_key: String::new(),
            });
        };
        let shown = &collage.shown;
        let schema = json!({
            "type": "object",
            "properties": {
                "people": {
                    "type": "array",
                    "minItems": shown.len(),
                    "maxItems": shown.len(),
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "enum": shown},
                            "look": {"type": "string", "minLength": 1, "maxLength": 400},
                        },
                        "required": ["name", "look"],
                        "additionalProperties": false,
                    },
                },
            },
            "required": ["people"],
            "additionalProperties": false,
        });
        let messages = question(
            ctx,
            PEOPLE_TEMPLATE,
            &PeopleQuestion { names: shown },
            vec![part],
        )?;
        let request = self
            .request(messages, seed)
            .with_schema("describe_people", schema);
        let validate = |value: &Value| -> Result<Vec<String>, Rejection> {
            let Some(entries) = value.get("people").and_then(Value::as_array) else {
                let message = "people is missing; give one entry per person".to_string();
                return Err(Rejection::unusable("missing", None, "people", message));
            };
            let mut problems = Problems::new();
            let mut looks = Vec::new();
            for name in shown {
                let found: Vec<&Value> = entries
                    .iter()
                    .filter(|entry| entry.get("name").and_then(Value::as_str) == Some(name))
                    .collect();
                match found[..] {
                    [entry] => {
                        if let Some(look) = text_field(entry, Some(name), "look", &mut problems) {
                            looks.push(format!("{name}: {look}"));
                        }
                    }
                    [] => {
                        let message = format!("{name} is not described; describe everyone");
                        problems.unusable("role_missing", Some(name), "people", message);
                    }
                    _ => {
                        let message = format!("{name} is described more than once");
                        problems.unusable("role_twice", Some(name), "people", message);
                    }
                }
            }
            if entries.len() != shown.len() {
                let message = format!(
                    "describe exactly these people, once each: {}",
                    shown.join(", ")
                );
                problems.unusable("not_a_participant", None, "people", message);
            }
            problems.finish().map(|()| looks)
        };
        let (looks, completion) = ask_model(ctx, self.model, &request, validate).await?;
        Ok(Described {
            lines: looks.into_iter().chain(missing).collect(),
            image_hashes: vec![hash],
            request_key: completion.key.to_hex(),
        })
    }
}

/// The instruction for redrawing a portrait to a new state: same person, background and light;
/// the face first, then the body.
pub fn edit_prompt(name: &str, emotion: Emotion, face: &str, body: &str) -> String {
    format!(
        "Redraw this portrait of {name} to show how they are now. Keep the same person, the same \
         background, the same lighting and the same drawing style. Change the facial expression \
         first: {}, looking {}. Then the posture and hands: {}.",
        face.trim_end_matches('.'),
        emotion.adjective(),
        body.trim_end_matches('.')
    )
}

/// Redraws role `role`'s portrait with `backend` as `prompt` asks, through the store's memo
/// under a key of the backend, the portrait, the prompt and the run's seed for this turn, so a
/// resumed run pays for no edit twice. Returns the new portrait's PNG and hash, and whether it
/// was paid for now.
pub async fn edit_portrait(
    ctx: &JobCtx,
    backend: &dyn ImageBackend,
    gallery: &mut Gallery,
    role: usize,
    prompt: &str,
    seed: u64,
) -> Result<(ContentHash, bool), StageFailure> {
    let Ok(current) = &gallery.portraits[role] else {
        unreachable!("the caller edits only a role with a portrait")
    };
    let key = ContentHash::of(
        json!({
            "memo": "simulate portrait edit",
            "backend": backend.identity(),
            "portrait": current.hash.to_hex(),
            "prompt": prompt,
            "seed": seed,
        })
        .to_string()
        .as_bytes(),
    );
    // A memo that cannot be read (a corrupt one is deleted) is an edit to make again.
    let remembered = ctx.store().memo_get(&key).unwrap_or_else(|error| {
        tracing::warn!("cannot read a remembered portrait edit: {error}");
        None
    });
    let (png, paid) =
        match remembered {
            Some(png) => (png, false),
            None => {
                let edited = backend.edit(&current.png, prompt).await.map_err(|source| {
                    SimulateError::Edit {
                        backend: backend.name(),
                        problem: source.to_string(),
                    }
                })?;
                crate::stages::group_image::add_image_usage(ctx, &backend.name(), edited.usage);
                ctx.store().memo_put(&key, &edited.png)?;
                (edited.png, true)
            }
        };
    let hash = ContentHash::of(&png);
    gallery.portraits[role] = Ok(Portrait { hash, png });
    Ok((hash, paid))
}

/// The current portrait of `role`, when it has one (to store it as an output).
pub fn portrait_png(gallery: &Gallery, role: usize) -> Option<&[u8]> {
    gallery.portraits[role]
        .as_ref()
        .ok()
        .map(|p| p.png.as_slice())
}

/// Whether `role` has a portrait to edit, or why not.
pub fn editable(gallery: &Gallery, role: usize) -> Result<(), String> {
    gallery.portraits[role]
        .as_ref()
        .map(|_| ())
        .map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::request::Role;

    fn user_text(template: &str, context: &impl Serialize) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("prompts")
            .join(template);
        let messages = crate::llm::render_prompt(&path, context).unwrap();
        assert_eq!(
            messages.iter().map(|m| m.role).collect::<Vec<_>>(),
            [Role::System, Role::User]
        );
        match &messages[1].content[..] {
            [Part::Text(text)] => text.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_describer_is_told_whose_pictures_it_sees_in_order() {
        let names = ["Ada".to_string(), "Ben".to_string()];
        let scene = user_text(
            SCENE_TEMPLATE,
            &SceneQuestion {
                show: "Van",
                heading: Some("A petrol station"),
                names: &names,
            },
        );
        assert!(
            scene.contains("\"Van\" (A petrol station). The people in the scene are Ada, Ben"),
            "{scene}"
        );
        let people = user_text(PEOPLE_TEMPLATE, &PeopleQuestion { names: &names });
        assert!(
            people.contains("2 portrait(s) side by side, left to right: Ada, Ben."),
            "{people}"
        );
    }

    #[test]
    fn an_edit_asks_for_the_face_first_and_keeps_the_person() {
        let prompt = edit_prompt("Ada", Emotion::Anger, "a tight frown.", "crosses arms");
        assert!(prompt.contains("Keep the same person, the same background, the same lighting"));
        let face = prompt.find("a tight frown, looking angry").unwrap();
        assert!(face < prompt.find("crosses arms").unwrap(), "{prompt}");
    }
}

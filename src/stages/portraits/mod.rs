//! `portraits`: the role portraits P1. For each role `match_roles` gave a face, the
//! head-and-shoulders square around that face is cut from the group frame (448 x 448, see
//! [`crate::vision::portrait`]) and redrawn by the same kind of image backend as the group image:
//! offline the local cartoon filter, so a role's portrait and its figure in G look like one
//! drawing; with an image edit endpoint configured, the endpoint, asked for a front-facing
//! portrait. Every portrait is marked synthetic and names its backend; a role without a face has
//! no portrait and its entry says why (the contract with `export`, see
//! [`crate::vision::synthetic`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dag::port::{Png, Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::imagegen::{
    ImageBackend, ImageEditOptions, ImageGenError, LazyBackend, image_edit_models,
};
use crate::project::Project;
use crate::stages::detect::GROUP_FRAME;
use crate::stages::group_image::add_image_usage;
use crate::stages::match_roles::ROLE_MATCHES;
use crate::vision::portrait::{PORTRAIT_SIZE, PortraitError, portrait_crop};
use crate::vision::stylise::StyliseParams;
use crate::vision::synthetic::{PortraitsRecord, RolePortrait, SyntheticImage};
use crate::vision::{ImageError, decode_rgb, encode_png};

/// Each role's portrait, or why it has none.
pub const PORTRAITS: Port<PortraitsRecord> = Port::item(NAME, "portraits");
/// A role's portrait pixels, keyed by the role's name.
pub const PORTRAIT_PNG: Port<Png> = Port::keyed(NAME, "portrait.png:");

const NAME: &str = "portraits";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "front-facing role portraits P1 from the matched faces",
    version: 1,
    prompts: &[],
    defaults: Defaults::of::<PortraitsParams>(),
    load: load_stage::<PortraitsParams, Portraits>,
};

/// portraits: the role portraits P1. For each role match_roles gave a face, the 448x448
/// head-and-shoulders square around it is cut from the group frame and redrawn by the image
/// backend `[llm.roles] image_edit` in viss.toml chooses, as for group_image: unset or "local"
/// is the offline cartoon filter (deterministic, the same look as G); "ENDPOINT:MODEL" sends the
/// crop and the prompt to an OpenAI-compatible image edit endpoint (POST
/// {base_url}/images/edits). Every portrait is marked synthetic and names its backend; a role
/// without a matched face gets no portrait, and its entry says why. A scenario's images are made
/// together (`--until portraits` makes G too, and a scenario whose G failed gets no portraits),
/// but nothing of G is read, so a redrawn G does not redraw the portraits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PortraitsParams {
    /// What an image edit endpoint is asked to do with the crop (the local filter has no prompt).
    pub prompt: String,
    /// Form fields sent to an image edit endpoint; gpt-image-1's sizes are 1024x1024, 1536x1024,
    /// 1024x1536 or auto.
    pub endpoint: ImageEditOptions,
    /// The local filter: edge-preserving smoothing, soft luma bands, dark outlines. Spatial
    /// sizes are pixels at 360 px image height, scaled with the portrait.
    pub local: StyliseParams,
}

const DEFAULT_PROMPT: &str = "Redraw the person at the centre of this picture as a front-facing \
    head-and-shoulders portrait, looking straight at the viewer, as a clean stylised illustration \
    with flat colours and bold outlines. Keep their face shape, hair, age, facial expression and \
    clothes. Plain background; leave out everyone else. No text, and do not make them look like a \
    real, recognisable person.";

impl crate::range::Validate for PortraitsParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        crate::range::check_table("local", &self.local)
    }
}

impl Default for PortraitsParams {
    fn default() -> Self {
        Self {
            prompt: DEFAULT_PROMPT.to_string(),
            endpoint: ImageEditOptions {
                size: "1024x1024".to_string(),
                ..ImageEditOptions::default()
            },
            local: StyliseParams::default(),
        }
    }
}

pub struct Portraits {
    params: PortraitsParams,
    backend: LazyBackend,
}

impl From<PortraitsParams> for Portraits {
    fn from(params: PortraitsParams) -> Self {
        Self {
            params,
            backend: LazyBackend::default(),
        }
    }
}

impl Portraits {
    fn backend(&self, project: &Project) -> Result<Arc<dyn ImageBackend>, ImageGenError> {
        self.backend.get(
            &project.config.llm,
            &self.params.local,
            &self.params.endpoint,
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PortraitsError {
    #[error("{scenario}: the group frame PNG from detect: {source}")]
    GroupFrame {
        scenario: String,
        source: ImageError,
    },
    #[error("{scenario}: the portrait of {role}: {source}")]
    Crop {
        scenario: String,
        role: String,
        source: PortraitError,
    },
    #[error("{scenario}: the portrait of {role}: {source}")]
    Backend {
        scenario: String,
        role: String,
        source: ImageGenError,
    },
    #[error(transparent)]
    Setup(#[from] ImageGenError),
    #[error(transparent)]
    Job(#[from] JobError),
}

/// Why a role has no portrait, from its `match_roles` entry.
fn missing_reason(status: &str, reason: Option<&str>) -> String {
    match reason {
        Some(reason) => format!("no face was matched to this role ({status}): {reason}"),
        None => format!("no face was matched to this role ({status})"),
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Portraits {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        [GROUP_FRAME.id(), ROLE_MATCHES.id()].into()
    }

    fn outputs(&self) -> Vec<PortId> {
        [PORTRAITS.id(), PORTRAIT_PNG.id()].into()
    }

    fn after(&self) -> &'static [&'static str] {
        // A scenario's images are made together: `--until portraits` makes G too, and a
        // scenario whose G failed gets no portraits. Nothing of G is read, so a redrawn G does
        // not redraw the portraits.
        &["group_image"]
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        _store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        let models = image_edit_models(
            &project.config.llm,
            &self.params.local,
            &self.params.endpoint,
        )
        .map_err(PortraitsError::from)?;
        Ok(models)
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        // No group frame (no video, or no time range): match_roles skipped it too.
        let Some(matches) = ctx.read_optional(&ROLE_MATCHES)? else {
            return Ok(Outputs::default());
        };
        let png = ctx.read_png(&GROUP_FRAME)?;
        let scenario = ctx.item.clone();
        let frame = {
            let scenario = scenario.clone();
            ctx.cpu(move || {
                decode_rgb(&png, std::path::Path::new(GROUP_FRAME.id().name))
                    .map_err(|source| PortraitsError::GroupFrame { scenario, source })
            })
            .await?
        };
        let frame = Arc::new(frame);
        let mut outputs = Outputs::default();
        let mut roles = Vec::with_capacity(matches.roles.len());
        for role in &matches.roles {
            let Some(bbox) = role.bbox else {
                let status = serde_json::to_value(role.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                roles.push(RolePortrait {
                    name: role.name.clone(),
                    image: None,
                    missing_reason: Some(missing_reason(&status, role.reason.as_deref())),
                });
                continue;
            };
            let crop = {
                let (frame, scenario, name) = (frame.clone(), scenario.clone(), role.name.clone());
                ctx.cpu(move || {
                    portrait_crop(&frame, &bbox, PORTRAIT_SIZE)
                        .map(|crop| encode_png(&crop))
                        .map_err(|source| PortraitsError::Crop {
                            scenario,
                            role: name,
                            source,
                        })
                })
                .await?
            };
            let backend = self.backend(ctx.project()).map_err(PortraitsError::from)?;
            let edited = backend
                .edit(&crop, &self.params.prompt)
                .await
                .map_err(|source| PortraitsError::Backend {
                    scenario: scenario.clone(),
                    role: role.name.clone(),
                    source,
                })?;
            add_image_usage(ctx, &backend.name(), edited.usage);
            let hash = outputs.put_png(ctx, &PORTRAIT_PNG, &role.name, &edited.png)?;
            roles.push(RolePortrait {
                name: role.name.clone(),
                image: Some(SyntheticImage {
                    png: hash,
                    width: edited.width,
                    height: edited.height,
                    synthetic: true,
                    backend: backend.name(),
                }),
                missing_reason: None,
            });
        }
        let record = PortraitsRecord { scenario, roles };
        outputs.put(ctx, &PORTRAITS, &record)?;
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_portrait_says_which_status_and_why() {
        assert_eq!(
            missing_reason(
                "below_threshold",
                Some("no face in the group frame is similar enough")
            ),
            "no face was matched to this role (below_threshold): no face in the group frame is \
             similar enough"
        );
        assert_eq!(
            missing_reason("no_faces", None),
            "no face was matched to this role (no_faces)"
        );
    }
}

//! `group_image`: the scenario's group frame becomes the stylised synthetic group image G. With
//! an image edit endpoint configured (`[llm.roles] image_edit`, e.g. gpt-image-1) the frame is
//! redrawn as the prompt asks; offline, the local cartoon filter draws it. Either way the record
//! marks the image synthetic and names what made it, and the PNG is an output of its own (the
//! contract with `export`, see [`crate::vision::synthetic`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dag::port::{Png, Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::{ModelUsage, Store, Usage};
use crate::dag::{AppCtx, Env, JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::imagegen::{
    ImageBackend, ImageEditOptions, ImageGenError, ImageUsage, LazyBackend, image_edit_models,
};
use crate::project::Project;
use crate::stages::detect::{DETECTIONS, GROUP_FRAME};
use crate::vision::stylise::StyliseParams;
use crate::vision::synthetic::{GroupImageRecord, SyntheticImage};

/// The synthetic group image G's record (what made it, from which frame).
pub const GROUP_IMAGE: Port<GroupImageRecord> = Port::item(NAME, "group_image");
/// G's pixels.
pub const GROUP_IMAGE_PNG: Port<Png> = Port::item(NAME, "group_image.png");

const NAME: &str = "group_image";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "stylised synthetic group image G from the group frame",
    version: 1,
    prompts: &[],
    defaults: Defaults::of::<GroupImageParams>(),
    load: load_stage::<GroupImageParams, GroupImage>,
};

/// group_image: the scenario's group frame (from detect) becomes the stylised synthetic group
/// image G, marked synthetic, with the backend named in its record. `[llm.roles] image_edit` in
/// viss.toml chooses the backend: unset or "local" is the offline cartoon filter
/// (deterministic); "ENDPOINT:MODEL" sends the frame and the prompt to an OpenAI-compatible
/// image edit endpoint (POST {base_url}/images/edits, as gpt-image-1 takes it; the key from the
/// environment).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GroupImageParams {
    /// What an image edit endpoint is asked to do with the frame (the local filter has no prompt).
    pub prompt: String,
    /// Form fields sent to an image edit endpoint.
    pub endpoint: ImageEditOptions,
    /// The local filter: edge-preserving smoothing, soft luma bands, dark outlines. Spatial
    /// sizes are pixels at 360 px image height, scaled with the frame.
    pub local: StyliseParams,
}

impl crate::range::Validate for GroupImageParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        crate::range::check_table("local", &self.local)
    }
}

impl Default for GroupImageParams {
    fn default() -> Self {
        Self {
            prompt: DEFAULT_PROMPT.to_string(),
            endpoint: ImageEditOptions::default(),
            local: StyliseParams::default(),
        }
    }
}

const DEFAULT_PROMPT: &str = "Redraw this film frame as a clean stylised illustration with flat \
    colours and bold outlines. Keep every person, their position, pose, gaze and facial \
    expression, and the layout of the scene exactly as they are. Do not add or remove people, \
    text or objects, and do not make anyone look like a real, recognisable person.";

pub struct GroupImage {
    params: GroupImageParams,
    backend: LazyBackend,
}

impl From<GroupImageParams> for GroupImage {
    fn from(params: GroupImageParams) -> Self {
        Self {
            params,
            backend: LazyBackend::default(),
        }
    }
}

impl GroupImage {
    fn backend(&self, project: &Project) -> Result<Arc<dyn ImageBackend>, ImageGenError> {
        self.backend.get(
            &project.config.llm,
            &self.params.local,
            &self.params.endpoint,
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GroupImageError {
    #[error("{scenario}: the group frame at {time_s:.3} s: {source}")]
    Backend {
        scenario: String,
        time_s: f64,
        source: ImageGenError,
    },
    #[error(transparent)]
    Setup(#[from] ImageGenError),
    #[error(transparent)]
    Job(#[from] JobError),
}

/// Adds what an image endpoint billed for one image to the run's usage (the local filter bills
/// nothing), under the backend's name, so `viss status` reports it.
pub(crate) fn add_image_usage(ctx: &JobCtx, backend: &str, usage: Option<ImageUsage>) {
    if let Some(usage) = usage {
        let mut spent = Usage::default();
        spent.add_model(
            backend,
            &ModelUsage {
                calls: 1,
                rejected_calls: 0,
                prompt_tokens: usage.input_tokens,
                completion_tokens: usage.output_tokens,
                cost_usd: usage.cost_usd,
            },
        );
        ctx.add_usage(&spent);
    }
}

#[async_trait::async_trait]
impl Stage<Env> for GroupImage {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        [DETECTIONS.id(), GROUP_FRAME.id()].into()
    }

    fn outputs(&self) -> Vec<PortId> {
        [GROUP_IMAGE.id(), GROUP_IMAGE_PNG.id()].into()
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
        .map_err(GroupImageError::from)?;
        Ok(models)
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        // `frames` skipped this scenario (no video or no time range) and flagged why.
        let Some(detections) = ctx.read_optional(&DETECTIONS)? else {
            return Ok(Outputs::default());
        };
        let frame = ctx.read_png(&GROUP_FRAME)?;
        let backend = self.backend(ctx.project()).map_err(GroupImageError::from)?;
        let time_s = detections.group_frame.time_s;
        let edited = backend
            .edit(&frame, &self.params.prompt)
            .await
            .map_err(|source| GroupImageError::Backend {
                scenario: ctx.item.clone(),
                time_s,
                source,
            })?;
        add_image_usage(ctx, &backend.name(), edited.usage);
        let mut outputs = Outputs::default();
        let png = outputs.put_png(ctx, &GROUP_IMAGE_PNG, "", &edited.png)?;
        let record = GroupImageRecord {
            scenario: ctx.item.clone(),
            image: SyntheticImage {
                png,
                width: edited.width,
                height: edited.height,
                synthetic: true,
                backend: backend.name(),
            },
            source_frame_seconds: time_s,
        };
        outputs.put(ctx, &GROUP_IMAGE, &record)?;
        Ok(outputs)
    }
}

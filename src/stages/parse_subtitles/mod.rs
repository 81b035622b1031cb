//! `parse_subtitles`: the episode's subtitle file (SRT, WebVTT or ASS/SSA, detected from its
//! content) becomes timed cues with markup removed and two-speaker cues split into turns. These
//! follow the broadcast cut, which `align` matches against the uncut transcript.

use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::{AppCtx, Env, JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::manifest::RawReadError;
use crate::panic_context::{ParsePanic, catch_parse_panic};
use crate::text::encoding::EncodingUsed;
use crate::text::subtitles::{Cue, SubtitleError, SubtitleFormat, read_subtitles};

/// The episode's subtitle cues.
pub const CUES: Port<CueTrack> = Port::item(NAME, "cues");

const NAME: &str = "parse_subtitles";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "subtitles -> timed cues",
    version: 1,
    prompts: &[],
    defaults: Defaults::of::<ParseSubtitlesParams>(),
    load: load_stage::<ParseSubtitlesParams, ParseSubtitles>,
};

pub struct ParseSubtitles;

/// parse_subtitles: the episode's SRT, WebVTT or ASS/SSA file -> timed cues (markup removed,
/// two-speaker cues split into turns). UTF-8, UTF-16 with BOM, else Windows-1252.
#[derive(
    Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct ParseSubtitlesParams {}

impl crate::range::Validate for ParseSubtitlesParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        Ok(())
    }
}

impl From<ParseSubtitlesParams> for ParseSubtitles {
    fn from(_: ParseSubtitlesParams) -> Self {
        Self
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CueTrack {
    pub episode: String,
    pub file: String,
    pub format: SubtitleFormat,
    pub encoding: EncodingUsed,
    pub cues: Vec<Cue>,
}

#[derive(Debug, thiserror::Error)]
pub enum ParseSubtitlesError {
    #[error(transparent)]
    Raw(#[from] RawReadError),
    #[error(transparent)]
    Subtitles(#[from] SubtitleError),
    #[error(transparent)]
    Panic(#[from] ParsePanic),
    #[error(transparent)]
    Job(#[from] JobError),
}

#[async_trait::async_trait]
impl Stage<Env> for ParseSubtitles {
    fn level(&self) -> Level {
        Level::Episode
    }

    fn inputs(&self) -> Vec<PortId> {
        [crate::stages::ingest::SUBTITLES.id()].into()
    }

    fn outputs(&self) -> Vec<PortId> {
        [CUES.id()].into()
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        // A script-only episode still gets its LLM annotations; it is flagged, and align and
        // the video stages find no cues and skip it, rather than failing every build.
        let Some(source) = ctx.read_optional(&crate::stages::ingest::SUBTITLES)? else {
            let mut outputs = Outputs::default();
            outputs.flags.push(format!(
                "episode {} lists no subtitles in its show manifest, so it gets no time ranges \
                 and no group images; add `subtitles = \"...\"` to it for those",
                ctx.item
            ));
            return Ok(outputs);
        };
        let raw_dir = ctx.project().raw_dir();
        let item = ctx.item.clone();
        let (file, format) = (source.file, source.format);
        let track = ctx
            .cpu(move || -> Result<CueTrack, ParseSubtitlesError> {
                let bytes = file.read(&raw_dir)?;
                let label = format!("raw/{}", file.path);
                // A parser panic becomes an error naming the file and line (see panic_context).
                let parse = || read_subtitles(&bytes, &label, format);
                let (subtitles, encoding) = catch_parse_panic(&label, parse)??;
                Ok(CueTrack {
                    episode: item,
                    file: file.path,
                    format: subtitles.format,
                    encoding,
                    cues: subtitles.cues,
                })
            })
            .await?;
        let mut outputs = Outputs::default();
        outputs.put(ctx, &CUES, &track)?;
        Ok(outputs)
    }
}

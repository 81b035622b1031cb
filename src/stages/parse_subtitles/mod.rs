//! `parse_subtitles`: the episode's subtitle file (SRT, WebVTT or ASS/SSA, detected from its
//! content) becomes timed cues with markup removed and two-speaker cues split into turns. These
//! follow the broadcast cut, which `align` matches against the uncut transcript. Cues that carry
//! no dialogue (credits, adverts, title cards, lyrics, sound descriptions, a recap) are kept
//! out with the reason, and hearing-impaired markup is stripped from the rest
//! ([`crate::text::subtitles::non_dialogue`]).

use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::{AppCtx, Env, JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::manifest::RawReadError;
use crate::panic_context::{ParsePanic, catch_parse_panic};
use crate::text::encoding::EncodingUsed;
use crate::text::subtitles::non_dialogue::{ExcludedCue, ScreenOptions, Screened, screen_cues};
use crate::text::subtitles::{Cue, SubtitleError, SubtitleFormat, read_subtitles};

/// The episode's subtitle cues.
pub const CUES: Port<CueTrack> = Port::item(NAME, "cues");

const NAME: &str = "parse_subtitles";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "subtitles -> timed cues",
    // 2: cues that are not dialogue are kept out (`not_dialogue`), and hearing-impaired markup
    // is stripped from the rest.
    version: 2,
    prompts: &[],
    defaults: Defaults::of::<ParseSubtitlesParams>(),
    load: load_stage::<ParseSubtitlesParams, ParseSubtitles>,
};

pub struct ParseSubtitles(ParseSubtitlesParams);

/// parse_subtitles: the episode's SRT, WebVTT or ASS/SSA file -> timed cues (markup removed,
/// two-speaker cues split into turns). UTF-8, UTF-16 with BOM, else Windows-1252. Cues that are
/// not dialogue are kept out of alignment, each with its reason (`viss show parse_subtitles
/// <episode> cues`): subtitle credits, site adverts (by their words, a web address, or a place
/// in the file far from their time), title cards, lyrics, sound descriptions and a "Previously
/// on" recap (up to its first 2 s pause). Hearing-impaired markup ([sounds], (sounds), NAME:
/// labels, lyric passages) is stripped from the cues that stay.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ParseSubtitlesParams {
    /// Keep cues that are not dialogue out of alignment; false keeps every cue as it is.
    pub screen_non_dialogue: bool,
    /// Further title cards of the show, besides its and the episode's titles from the manifest
    /// (compared ignoring case, punctuation and spacing), e.g. ["Tears of Steel"].
    pub title_cards: Vec<String>,
}

impl Default for ParseSubtitlesParams {
    fn default() -> Self {
        Self {
            screen_non_dialogue: true,
            title_cards: Vec::new(),
        }
    }
}

impl crate::range::Validate for ParseSubtitlesParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        Ok(())
    }
}

impl From<ParseSubtitlesParams> for ParseSubtitles {
    fn from(params: ParseSubtitlesParams) -> Self {
        Self(params)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CueTrack {
    pub episode: String,
    pub file: String,
    pub format: SubtitleFormat,
    pub encoding: EncodingUsed,
    /// The cues to align: dialogue, with hearing-impaired markup stripped. `index` is the cue's
    /// place among all the file's cues in time order, excluded ones included.
    pub cues: Vec<Cue>,
    /// Cues kept out of alignment, each with its kind and reason.
    pub not_dialogue: Vec<ExcludedCue>,
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
        [
            crate::stages::ingest::SUBTITLES.id(),
            crate::stages::ingest::TITLES.id(),
        ]
        .into()
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
        let titles = ctx.read(&crate::stages::ingest::TITLES)?;
        let mut options = ScreenOptions {
            titles: self.0.title_cards.clone(),
        };
        options.titles.extend(titles.iter().cloned());
        let screen = self.0.screen_non_dialogue;
        let raw_dir = ctx.project().raw_dir();
        let item = ctx.item.clone();
        let (file, format) = (source.file, source.format);
        let track = ctx
            .cpu(move || -> Result<CueTrack, ParseSubtitlesError> {
                let bytes = file.read(&raw_dir, crate::manifest::RawKind::Subtitles)?;
                let label = format!("raw/{}", file.path);
                // A parser panic becomes an error naming the file and line (see panic_context).
                let parse = || read_subtitles(bytes, &label, format);
                let (subtitles, encoding) = catch_parse_panic(&label, parse)??;
                let screened = if screen {
                    screen_cues(subtitles.cues, &options)
                } else {
                    Screened::unscreened(subtitles.cues)
                };
                Ok(CueTrack {
                    episode: item,
                    file: file.path,
                    format: subtitles.format,
                    encoding,
                    cues: screened.dialogue,
                    not_dialogue: screened.excluded,
                })
            })
            .await?;
        let mut outputs = Outputs::default();
        for cue in &track.not_dialogue {
            ctx.count(&format!("not_dialogue.{}", cue.kind.as_str()), 1);
        }
        outputs.put(ctx, &CUES, &track)?;
        Ok(outputs)
    }
}

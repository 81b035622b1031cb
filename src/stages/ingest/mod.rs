//! `ingest`: every episode listed in `manifests/shows/*.toml` becomes an item. Its raw files
//! must lie inside `raw/` and match any sha256 the manifest gives; their hashes are the item's
//! inputs, so editing a script re-runs exactly that episode's downstream work. The records are
//! the episode's sources, whole and file by file; raw bytes stay in `raw/` and never enter the
//! store.

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{Env, JobCtx, Level, Outputs, SourceItem, SourceProblem, Stage, StageFailure};
use crate::hash::ContentHash;
use crate::manifest::{
    EpisodeSource, EpisodeTitles, LoadedManifest, ShowCast, SourceFile, scan_manifests,
};
use crate::text::script::ScriptFormat;
use crate::text::subtitles::SubtitleFormat;

/// The episode's sources, whole.
pub const EPISODE: Port<EpisodeSource> = Port::item(NAME, "episode");
/// The show's characters, for matching faces to roles.
pub const CAST: Port<ShowCast> = Port::item(NAME, "cast");
/// The show's and the episode's titles, for telling title cards from dialogue.
pub const TITLES: Port<EpisodeTitles> = Port::item(NAME, "titles");
pub const SCRIPT: Port<SourceFile<ScriptFormat>> = Port::item(NAME, "script");
pub const SUBTITLES: Port<SourceFile<SubtitleFormat>> = Port::item(NAME, "subtitles");
pub const VIDEO: Port<SourceFile<()>> = Port::item(NAME, "video");

const NAME: &str = "ingest";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "validate show manifests and hash raw media",
    // 2: the video file has a record of its own; 3: the show's characters (`cast`) too; 4: the
    // titles (`titles`) too.
    version: 5,
    prompts: &[],
    defaults: Defaults::of::<IngestParams>(),
    load: load_stage::<IngestParams, Ingest>,
};

pub struct Ingest;

/// ingest: read every show manifest in manifests/shows/, check each episode's raw files (paths
/// inside raw/, files present, sha256 when given) and hash them. One item per episode.
#[derive(
    Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct IngestParams {}

impl crate::range::Validate for IngestParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        Ok(())
    }
}

impl From<IngestParams> for Ingest {
    fn from(_: IngestParams) -> Self {
        Ingest
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Ingest {
    fn level(&self) -> Level {
        Level::Episode
    }

    fn inputs(&self) -> Vec<PortId> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<PortId> {
        [
            EPISODE.id(),
            CAST.id(),
            TITLES.id(),
            SCRIPT.id(),
            SUBTITLES.id(),
            VIDEO.id(),
        ]
        .into()
    }

    fn source_items(
        &self,
        Env { project, .. }: &Env,
        store: &Store,
    ) -> Result<Vec<Result<SourceItem, SourceProblem>>, StageFailure> {
        let raw_dir = project.raw_dir();
        let mut items = Vec::new();
        let scan = scan_manifests(&project.shows_dir());
        let shows = project.display_path(&project.shows_dir());
        if let Some(reason) = &scan.missing_dir {
            tracing::warn!(
                "no show manifests: {shows}/ cannot be listed ({reason}); create it with one \
                 <show>.toml per show (`viss init` does)"
            );
        } else if scan.manifests.is_empty() && scan.misnamed.is_empty() {
            tracing::warn!(
                "no show manifests in {shows}/, so there is nothing to build; add one \
                 <show>.toml per show (see Show manifests in docs/projects.md)"
            );
        }
        for (path, why) in &scan.skipped {
            tracing::warn!("{}: {why}", project.display_path(path));
        }
        for (path, what_to_do) in scan.misnamed {
            let show = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            items.push(Err(SourceProblem {
                id: format!("{show}/*"),
                message: format!(
                    "{}: this manifest would not be read; {what_to_do}",
                    project.display_path(&path)
                ),
            }));
        }
        for path in scan.manifests {
            let label = project.display_path(&path);
            let manifest = match LoadedManifest::read(&path, label) {
                Ok(manifest) => manifest,
                Err(e) => {
                    let show = path.file_stem().unwrap_or_default().to_string_lossy();
                    items.push(Err(SourceProblem {
                        id: format!("{show}/*"),
                        message: e.to_string(),
                    }));
                    continue;
                }
            };
            for (id, episode) in manifest.episodes(store, &raw_dir) {
                items.push(match episode {
                    Ok(source) => {
                        let payload = serde_json::to_value(&source).expect("sources serialize");
                        let fingerprint =
                            ContentHash::of(&serde_json::to_vec(&payload).expect("json"));
                        Ok(SourceItem {
                            id,
                            fingerprint,
                            payload,
                        })
                    }
                    Err(e) => Err(SourceProblem {
                        id,
                        message: e.to_string(),
                    }),
                });
            }
        }
        Ok(items)
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let source: EpisodeSource = ctx.source()?;
        // Each file also gets a record of its own, so a stage that reads one file is not re-run
        // when another changes.
        let mut outputs = Outputs::default();
        outputs.put(ctx, &EPISODE, &source)?;
        outputs.put(ctx, &CAST, &source.cast())?;
        outputs.put(ctx, &TITLES, &source.titles())?;
        if let Some(script) = source.script() {
            outputs.put(ctx, &SCRIPT, &script)?;
        }
        if let Some(subtitles) = source.subtitles() {
            outputs.put(ctx, &SUBTITLES, &subtitles)?;
        }
        if let Some(video) = source.video() {
            outputs.put(ctx, &VIDEO, &video)?;
        }
        Ok(outputs)
    }
}

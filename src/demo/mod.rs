//! `viss demo`: a small show that viss writes itself (an original script and broadcast-style
//! subtitles derived from it), built through every stage that exists, offline.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::dag::scheduler::{BuildOptions, BuildReport};
use crate::fsutil::write_atomic_beside;
use crate::project::{Project, ProjectError};
use crate::stages;
use crate::workspace::{Workspace, WorkspaceError};

pub use viss_dev::demo::{EpisodePlan, plan, solvay_photo_path, video};

pub use crate::manifest::DEMO_SHOW as SHOW;

/// Files of the episode, relative to `raw/`.
pub const SCRIPT_PATH: &str = "demo/s01e01/script.txt";
pub const FOUNTAIN_PATH: &str = "demo/s01e01/script.fountain";
pub const SUBTITLES_PATH: &str = "demo/s01e01/subtitles.srt";
pub const VIDEO_PATH: &str = "demo/s01e01/video.mp4";
pub const TRUTH_PATH: &str = "demo/s01e01/truth.json";
/// What each scene is meant to be, by hand from the script (see [`plan::ANNOTATION_TRUTH`]): the
/// truth of the scorecard, for `viss check quality --truth`.
pub const ANNOTATION_TRUTH_PATH: &str = "demo/s01e01/truth.toml";
/// What the video and references were rendered from, so an unchanged demo is not re-rendered.
pub const RENDER_KEY_PATH: &str = "demo/s01e01/render.json";

/// Turns per simulation run in the demo project (the stage's default is the paper's 15): on 2
/// cores the embedded model takes about 25 s a turn (two runs at a time), and the demo's 8 runs
/// should add at most about a third to its time (docs/performance.md).
pub const DEMO_ROUNDS: usize = 2;

/// Synthetic casts per template in the demo: each is one long answer of the embedded model
/// (about 500 tokens, about a minute on 2 cores), and only one is played.
pub const DEMO_INSTANCES: usize = 2;

/// Aliases per character, as the manifest lists them.
const ALIASES: [(&str, &[&str]); 4] = [
    ("Noor", &[]),
    ("Theo", &["Theodore"]),
    ("Mila", &["the neighbour"]),
    ("Bruno", &["the clerk"]),
];

pub fn reference_path(character: &str) -> String {
    format!("demo/references/{}.png", character.to_lowercase())
}

/// The show manifest: characters with their reference images, and the episode's files.
pub fn manifest() -> String {
    let mut out = String::from(
        "# The demo show: written by `viss demo`. Paths are relative to raw/.\n\
         title = \"The Borrowed Van (viss demo)\"\n\
         license = \"Script and subtitles: original text written for viss, CC0. Faces: attendees \
         of the 1927 Solvay conference (Planck, Einstein, Curie, Lorentz), from the group \
         photograph by Benjamin Couprie, public domain in the US. Speech: espeak-ng.\"\n",
    );
    for (name, face) in video::CAST {
        let aliases = ALIASES
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(&[][..], |(_, a)| *a);
        let aliases: Vec<String> = aliases.iter().map(|a| format!("{a:?}")).collect();
        out.push_str(&format!(
            "\n[[characters]]\n# Face: {}, Solvay conference 1927.\nname = {name:?}\naliases = \
             [{}]\nreferences = [{:?}]\n",
            face.attendee,
            aliases.join(", "),
            reference_path(name)
        ));
    }
    out.push_str(&format!(
        "\n[[episodes]]\nid = \"s01e01\"\ntitle = \"The One With the Borrowed Van\"\nscript = \
         {SCRIPT_PATH:?}\nscript_format = \"friends\"\nsubtitles = {SUBTITLES_PATH:?}\nvideo = \
         {VIDEO_PATH:?}\n"
    ));
    out
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Project(#[from] ProjectError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Render(#[from] video::RenderError),
    #[error(transparent)]
    Export(#[from] crate::export::ExportError),
    #[error(transparent)]
    Quality(#[from] crate::quality::QualityError),
    #[error(transparent)]
    Simulation(#[from] crate::stages::simulate::SimulateError),
    #[error(transparent)]
    Evaluation(#[from] crate::stages::evaluate::EvaluateError),
    #[error(transparent)]
    SenseEvaluation(#[from] crate::stages::evaluate_sense::EvaluateSenseError),
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
    #[error(transparent)]
    Store(#[from] crate::dag::store::StoreError),
    #[error("the demo's faces come from the Solvay 1927 photo in the scrfd package: {0}")]
    Photo(#[from] crate::models::ModelError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub struct DemoOutcome {
    pub project_root: PathBuf,
    pub report: BuildReport,
    /// The dataset, when the whole pipeline was built without failures.
    pub export: Option<crate::export::ExportSummary>,
    /// The export against the demo's truth, and where it was written (`export/scorecard.json`).
    pub scorecard: Option<(crate::quality::Scorecard, PathBuf)>,
    /// The simulation runs the build holds, when it got that far.
    pub simulation: Option<crate::stages::simulate::RunsSummary>,
    /// The AgentSense runs the build holds, when it got that far.
    pub sense_runs: Option<crate::stages::simulate_sense::SenseRunsSummary>,
    /// What the judges made of the runs, when the build got that far.
    pub evaluation: Option<crate::stages::evaluate::JudgingSummary>,
    /// What the agents and judges said after the AgentSense runs, when it got that far.
    pub sense_evaluation: Option<crate::stages::evaluate_sense::SenseJudgingSummary>,
    /// The evaluation report, when some run was judged.
    pub evaluation_report: Option<crate::report::WrittenReport>,
    /// How much each AgentSense template still reads like its source, when any was built.
    pub leakage: Option<crate::stages::export::leakage::LeakageReport>,
    pub seconds: f64,
}

/// The stage files the demo writes over the defaults, to stay quick on the embedded model: few
/// turns per run, [`DEMO_INSTANCES`] synthetic casts per template, and one of them played,
/// flagged or not.
fn demo_stage_files() -> [(&'static str, String); 4] {
    [
        (
            "simulate.toml",
            format!(
                "# The demo plays {DEMO_ROUNDS} turns per run to stay quick; the paper plays \
                 15.\n[params]\nrounds = {DEMO_ROUNDS}\n"
            ),
        ),
        (
            "plan_sense_runs.toml",
            "# The demo plays one synthetic instance per template (AgentSense plays five),\n\
             # flagged ones too: the embedded model's answers are mostly flagged, and a\n\
             # benchmark's runs would wait for a person (`viss review`).\n\
             [params]\ninstances = 1\ninclude_flagged = true\n"
                .to_string(),
        ),
        (
            "instantiate.toml",
            format!(
                "# The demo makes {DEMO_INSTANCES} synthetic casts per template to stay quick; \
                 AgentSense makes five\n# (raising `instances` asks only for the new ones).\n\
                 [params]\ninstances = {DEMO_INSTANCES}\n"
            ),
        ),
        (
            "simulate_sense.toml",
            format!(
                "# The demo plays {DEMO_ROUNDS} turns per run to stay quick; AgentSense plays \
                 15.\n[params]\nrounds = {DEMO_ROUNDS}\n"
            ),
        ),
    ]
}

/// Writes the demo project into `dir` (creating it, or refreshing the demo's own files in an
/// existing demo project) and builds it.
pub fn run(
    dir: &Path,
    jobs: Option<usize>,
    until: Vec<String>,
    progress: bool,
) -> Result<DemoOutcome, DemoError> {
    let started = Instant::now();
    let project = if dir.join(crate::project::CONFIG_FILE).is_file() {
        Project::open(dir)?
    } else {
        let project = Project::init(
            dir,
            &stages::default_configs(),
            stages::DEFAULT_PROMPTS,
            false,
        )?;
        for (file, text) in demo_stage_files() {
            write_if_changed(&project.stages_dir().join(file), text.as_bytes())?;
        }
        project
    };
    // A demo project made before the AgentSense runs gets their quick settings too.
    for (file, text) in demo_stage_files().into_iter().skip(1) {
        let path = project.stages_dir().join(file);
        if !path.exists() {
            write_if_changed(&path, text.as_bytes())?;
        }
    }
    write_show(&project)?;
    // A demo project made by an older viss lacks newer stages' prompts; add them, never
    // overwriting one the user edited.
    for (file_name, text) in stages::DEFAULT_PROMPTS {
        let path = project.prompts_dir().join(file_name);
        if !path.exists() {
            write_if_changed(&path, text.as_bytes())?;
        }
    }
    let workspace = Workspace::open(project.clone(), stages::BUILTIN, "demo")?;
    let options = BuildOptions {
        jobs: jobs.unwrap_or_else(|| project.config.jobs()),
        until,
        progress,
        ..BuildOptions::default()
    };
    let report = workspace.build(&options)?;
    let whole_pipeline = options.until.is_empty();
    let (export, scorecard) = if whole_pipeline && report.failures.is_empty() {
        let out = project.root.join("export");
        let export = crate::export::write_dataset(
            &workspace,
            &out,
            crate::export::BuildPolicy::ExportOnly,
            progress,
        )?;
        let truth_file = project.raw_dir().join(ANNOTATION_TRUTH_PATH);
        let truth = annotation_truth(&truth_file).map_err(crate::quality::QualityError::from)?;
        let card = crate::quality::scorecard(&workspace, &out, Some((&truth, &truth_file)))?;
        let written = crate::quality::write_scorecard(&card, &out)?;
        (Some(export), Some((card, written)))
    } else {
        (None, None)
    };
    let simulation = crate::stages::simulate::runs_summary(workspace.store())?;
    let sense_runs = crate::stages::simulate_sense::sense_runs_summary(workspace.store())?;
    let evaluation = crate::stages::evaluate::judging_summary(workspace.store())?;
    let sense_evaluation = crate::stages::evaluate_sense::sense_judging_summary(workspace.store())?;
    let leakage = Some(crate::stages::export::leakage::leakage_report(
        workspace.store(),
    )?)
    .filter(|report| !report.templates.is_empty());
    let judged_any = evaluation.as_ref().is_some_and(|judged| judged.runs > 0)
        || sense_evaluation
            .as_ref()
            .is_some_and(|judged| judged.runs > 0);
    let evaluation_report = if judged_any {
        Some(crate::report::write_report(
            &workspace,
            &project.root.join("report"),
            &crate::report::tables::TableSettings::default(),
        )?)
    } else {
        None
    };
    Ok(DemoOutcome {
        project_root: project.root.clone(),
        report,
        export,
        scorecard,
        simulation,
        sense_runs,
        evaluation,
        sense_evaluation,
        evaluation_report,
        leakage,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The demo's truth (embedded in viss), named by where the demo writes it.
pub fn annotation_truth(file: &Path) -> Result<crate::quality::Truth, crate::quality::TruthError> {
    crate::quality::Truth::parse(plan::ANNOTATION_TRUTH, file)
}

/// What [`write_show`] wrote.
#[derive(Debug, Clone)]
pub struct WrittenShow {
    /// Every file the demo owns, absolute, sorted.
    pub files: Vec<PathBuf>,
    /// False when an up-to-date render was already there.
    pub rendered: bool,
    pub seconds: f64,
}

/// Writes the demo show into a project: the manifest, the script (transcript and Fountain),
/// subtitles derived from it, the ground truth, the reference images and the video. The video and
/// references are rendered only when what they are made from changed (see [`RENDER_KEY_PATH`]).
/// Unchanged files keep their mtime, so ingest does not even re-hash them.
pub fn write_show(project: &Project) -> Result<WrittenShow, DemoError> {
    write_show_into(&project.shows_dir(), &project.raw_dir())
}

/// [`write_show`] with the manifest directory and `raw/` given.
pub fn write_show_into(shows_dir: &Path, raw_dir: &Path) -> Result<WrittenShow, DemoError> {
    write_show_files(shows_dir, raw_dir, true)
}

/// `viss demo --media-only`: writes the demo show's media into the project's `raw/demo/`
/// (rendering the video only when it is missing or out of date) and builds nothing. The
/// manifest `manifests/shows/demo.toml` is written only when it is absent: a checkout of viss
/// has it in git, and one a user edited is theirs.
pub fn write_media(project: &Project) -> Result<WrittenShow, DemoError> {
    let shows_dir = project.shows_dir();
    let has_manifest = std::fs::symlink_metadata(shows_dir.join(format!("{SHOW}.toml"))).is_ok();
    write_show_files(&shows_dir, &project.raw_dir(), !has_manifest)
}

fn write_show_files(
    shows_dir: &Path,
    raw_dir: &Path,
    with_manifest: bool,
) -> Result<WrittenShow, DemoError> {
    let started = Instant::now();
    let plan = EpisodePlan::build();
    let manifest_file = with_manifest.then(|| {
        (
            shows_dir.join(format!("{SHOW}.toml")),
            manifest().into_bytes(),
        )
    });
    let mut written: Vec<(PathBuf, Vec<u8>)> = manifest_file.into_iter().collect();
    written.extend([
        (raw_dir.join(SCRIPT_PATH), plan::SCRIPT.as_bytes().to_vec()),
        (
            raw_dir.join(FOUNTAIN_PATH),
            plan::FOUNTAIN.as_bytes().to_vec(),
        ),
        (raw_dir.join(SUBTITLES_PATH), plan.srt().into_bytes()),
        (raw_dir.join(TRUTH_PATH), plan.truth_json().into_bytes()),
        (
            raw_dir.join(ANNOTATION_TRUTH_PATH),
            plan::ANNOTATION_TRUTH.as_bytes().to_vec(),
        ),
    ]);
    for (path, bytes) in &written {
        write_if_changed(path, bytes)?;
    }

    let tools = video::find_tools()?;
    let photo = solvay_photo_path()?;
    let photo_bytes = std::fs::read(&photo).map_err(|_| video::RenderError::MissingPhoto {
        path: photo.clone(),
    })?;
    let key = video::render_key(&plan, &tools, &photo_bytes);
    let media: Vec<PathBuf> = std::iter::once(raw_dir.join(VIDEO_PATH))
        .chain(
            video::CAST
                .iter()
                .map(|(name, _)| raw_dir.join(reference_path(name))),
        )
        .collect();
    let key_path = raw_dir.join(RENDER_KEY_PATH);
    let up_to_date = std::fs::read_to_string(&key_path)
        .is_ok_and(|recorded| recorded == render_record(&key, &media));
    if !up_to_date {
        let rendered = video::render(&plan, &tools, &photo)?;
        write_if_changed(&media[0], &rendered.video)?;
        for ((_, png), path) in rendered.references.iter().zip(&media[1..]) {
            write_if_changed(path, png)?;
        }
        write_if_changed(&key_path, render_record(&key, &media).as_bytes())?;
    }
    written.push((key_path, Vec::new()));
    let mut files: Vec<PathBuf> = written.into_iter().map(|(p, _)| p).chain(media).collect();
    files.sort();
    Ok(WrittenShow {
        files,
        rendered: !up_to_date,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The render key and the hash of every rendered file as it is on disk now (a missing file
/// hashes to nothing), so a deleted or edited video is rendered again.
fn render_record(key: &str, media: &[PathBuf]) -> String {
    let mut out = format!("{{\n  \"render_key\": \"{key}\",\n  \"files\": {{");
    for (k, path) in media.iter().enumerate() {
        let hash = std::fs::read(path)
            .map(|bytes| crate::hash::ContentHash::of(&bytes).to_hex())
            .unwrap_or_default();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let comma = if k + 1 < media.len() { "," } else { "" };
        out.push_str(&format!("\n    \"{name}\": \"{hash}\"{comma}"));
    }
    out.push_str("\n  }\n}\n");
    out
}

fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), DemoError> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    write_atomic_beside(path, bytes).map_err(|source| DemoError::Io {
        path: path.to_path_buf(),
        source,
    })
}

//! `match_roles`: who is who in the group image. The faces of the scenario's group frame (the
//! frame G was drawn from, so their boxes lie where G's figures are) are embedded with SFace, and
//! so is the face in each of a character's reference images from the show manifest (found by the
//! configured face detector, aligned by its five landmarks). Each role gets at most one face and
//! each face at most one role, maximising the total similarity above a threshold (the Hungarian
//! algorithm, see [`crate::vision::assign`]). A role left without a face is flagged for a person,
//! never given a guess.
//!
//! A character the manifest gives no usable reference image gets one bootstrapped from the
//! faces on screen while its lines are spoken (one frame at the middle of each of its lines in
//! the scenario, times from `align`): the person seen in most of those lines. The record and a
//! flag say so, and what to add to the manifest to be sure.
//!
//! A reference image is embedded once per build and remembered across builds, under a key made
//! of its content hash and the identities of the detector and the embedder.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::hash::ContentHash;
use crate::manifest::{CharacterSource, RawFile, RawReadError};
use crate::media::video::{VideoError, sample_frames_at};
use crate::models::{ModelCache, ModelError};
use crate::range::threads as thread_count;
use crate::stages::align::{self, ScenarioLines};
use crate::stages::detect::{DETECTIONS, Detections, GROUP_FRAME};
use crate::stages::frames::{FRAMES, FramesError, checked_video_path};
use crate::stages::ingest;
use crate::vision::assign::{AssignError, BootstrapError};
use crate::vision::face_detector::FaceDetectorError;
use crate::vision::nms::BoxXyxy;
use crate::vision::{
    BootstrapParams, DetectorError, FaceDetection, FaceDetector, FaceDetectorConfig,
    FaceDetectorModel, ImageError, RgbImage, RoleMatchStatus, SfaceEmbedder, bootstrap_reference,
    decode_rgb, frame_to_image, match_faces_to_roles,
};

/// Which face in the group frame is which role, and why a role has none.
pub const ROLE_MATCHES: Port<RoleMatches> = Port::item(NAME, "role_matches");

const NAME: &str = "match_roles";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "faces in the group frame -> roles (SFace embeddings vs character references)",
    version: 1,
    prompts: &[],
    defaults: Defaults::of::<MatchRolesParams>(),
    load: load_stage::<MatchRolesParams, MatchRoles>,
};

/// match_roles: who is who in the group image. The faces of the group frame (detect's, in the
/// frame G was drawn from) and the face in each character reference image of the show manifest
/// ([[characters]] references = [...], paths under raw/) are embedded with SFace; each role gets
/// at most one face and each face at most one role, maximising the total similarity of the
/// pairs at or above min_similarity (Hungarian algorithm). A role without a face is flagged with
/// the reason, never guessed. A character without a usable reference image gets a reference
/// bootstrapped from the faces on screen during its lines in the scenario (line times from
/// align), flagged as such.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MatchRolesParams {
    /// A role takes a face only at or above this cosine similarity to one of its references
    /// (SFace: the same person about 0.6-0.85, different people at most about 0.4); -1 to 1.
    pub min_similarity: f32,
    /// Faces scoring below this (in the group frame, in a bootstrap's frames) are not matched;
    /// 0 to 1.
    pub min_face_score: f32,
    /// ONNX Runtime threads per model, 0 to 256; 0: one per core.
    pub threads: usize,
    /// The detector that finds the face in each reference image (the largest face is used) and
    /// the faces in the frames a bootstrap samples (the group frame's faces are `detect`'s).
    /// "yunet" ships with SFace (Apache-2.0); "scrfd" is the detector `detect` uses.
    pub faces: FaceDetectorConfig,
    /// A character without a usable reference image gets one bootstrapped when at least this
    /// many of its lines in the scenario show faces; 0 to 10,000; 0 turns the bootstrap off.
    pub bootstrap_min_lines: usize,
    /// Bootstrap: the faces seen during the character's lines (one frame in the middle of each)
    /// are clustered; the person seen in the most lines stands for the speaker.
    pub bootstrap: BootstrapParams,
}

impl crate::range::Validate for MatchRolesParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        use crate::range::{Range, THREADS, UNIT, check, check_table};
        check("min_similarity", self.min_similarity, Range::new(-1.0, 1.0))?;
        check("min_face_score", self.min_face_score, UNIT)?;
        check("threads", self.threads, THREADS)?;
        check(
            "bootstrap_min_lines",
            self.bootstrap_min_lines,
            Range::new(0.0, 10_000.0),
        )?;
        check_table("faces", &self.faces)?;
        check_table("bootstrap", &self.bootstrap)
    }
}

impl Default for MatchRolesParams {
    fn default() -> Self {
        Self {
            min_similarity: 0.5,
            min_face_score: 0.5,
            threads: 0,
            faces: FaceDetectorConfig {
                model: FaceDetectorModel::Yunet,
                ..FaceDetectorConfig::default()
            },
            bootstrap_min_lines: 3,
            bootstrap: BootstrapParams::default(),
        }
    }
}

struct Models {
    embedder: SfaceEmbedder,
    detector: FaceDetector,
}

/// What one reference image gave, remembered by [`reference_key`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ReferenceFace {
    faces_found: usize,
    /// The largest face, in the reference image's pixels.
    face: Option<FaceDetection>,
    embedding: Option<Vec<f32>>,
}

pub struct MatchRoles {
    params: MatchRolesParams,
    models: OnceLock<Arc<Models>>,
    /// Reference images embedded in this process, by [`reference_key`]; held while one is
    /// embedded, so scenarios sharing a character embed its references once.
    references: Arc<Mutex<HashMap<ContentHash, ReferenceFace>>>,
}

impl From<MatchRolesParams> for MatchRoles {
    fn from(params: MatchRolesParams) -> Self {
        Self {
            params,
            models: OnceLock::new(),
            references: Arc::default(),
        }
    }
}

/// One face of the group frame that could be matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupFace {
    /// Index into the chosen candidate's `faces` in the `detect` record.
    pub detection: usize,
    /// Group-frame pixels.
    pub bbox: BoxXyxy,
    pub score: f32,
}

/// A reference image of the role's character, as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReferenceImage {
    /// Relative to `raw/`.
    pub path: String,
    pub blake3: ContentHash,
    pub faces_found: usize,
    /// The face that was embedded (the largest), in the reference image's pixels; `None` when
    /// no face was found and the image is not used.
    pub face: Option<BoxXyxy>,
}

/// A reference made from the faces on screen during the character's lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Bootstrapped {
    /// The character's lines in the scenario with a time (one frame sampled in the middle of each).
    pub lines: usize,
    pub lines_with_faces: usize,
    /// Lines in which the chosen person is seen.
    pub lines_covered: usize,
    pub faces_in_cluster: usize,
    pub clusters: usize,
    /// Lines covered by the next most frequent person.
    pub runner_up_lines: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RoleFace {
    pub name: String,
    /// The manifest's character this role is (by name or alias); `None` when it lists none.
    pub character: Option<String>,
    pub references: Vec<ReferenceImage>,
    /// Set when no reference image gave a face and one was bootstrapped instead.
    pub bootstrapped: Option<Bootstrapped>,
    pub status: RoleMatchStatus,
    /// Index into [`RoleMatches::faces`].
    pub face: Option<usize>,
    /// The matched face's box in group-frame pixels.
    pub bbox: Option<BoxXyxy>,
    /// Similarity to the matched face; for an unmatched role, to its most similar face.
    pub similarity: Option<f32>,
    /// Why the role has no face, for a person to act on; `None` when matched.
    pub reason: Option<String>,
}

/// The record: every role of the scenario with its face in the group frame, or why it has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RoleMatches {
    pub scenario: String,
    /// The group frame's PNG (`detect`'s output), its time and size.
    pub group_frame: ContentHash,
    pub group_frame_seconds: f64,
    pub frame_width: u32,
    pub frame_height: u32,
    /// Found the group frame's faces (`detect`).
    pub face_detector: String,
    /// Found the faces of the reference images and of a bootstrap's frames.
    pub reference_face_detector: String,
    pub face_embedder: String,
    pub min_similarity: f32,
    pub faces: Vec<GroupFace>,
    /// In the scenario's participant order.
    pub roles: Vec<RoleFace>,
    /// `similarities[role][face]`: the best cosine similarity of the face to any of the role's
    /// references.
    pub similarities: Vec<Vec<f32>>,
}

impl RoleMatches {
    /// What the group frame shows, in words, for a model that cannot see it (verbalised vision):
    /// which participants are recognised and where they stand, who is not recognised, and how
    /// many other faces there are. Nothing about looks or feelings, which the steps reading it
    /// must not describe.
    pub fn caption(&self) -> String {
        let width = self.frame_width.max(1) as f32;
        let placed: Vec<String> = self
            .roles
            .iter()
            .filter_map(|role| {
                let [x0, _, x1, _] = role.bbox?;
                let centre = (x0 + x1) / 2.0 / width;
                let place = if centre < 1.0 / 3.0 {
                    "on the left"
                } else if centre < 2.0 / 3.0 {
                    "in the middle"
                } else {
                    "on the right"
                };
                Some(format!("{} {place}", role.name))
            })
            .collect();
        let missing: Vec<&str> = self
            .roles
            .iter()
            .filter(|role| role.bbox.is_none())
            .map(|role| role.name.as_str())
            .collect();
        let others = self.faces.len().saturating_sub(placed.len());
        let mut caption = format!(
            "A frame of the scene ({:.0} s into the episode) shows {} face{}.",
            self.group_frame_seconds,
            self.faces.len(),
            if self.faces.len() == 1 { "" } else { "s" }
        );
        if !placed.is_empty() {
            caption.push_str(&format!(" Recognised: {}.", placed.join(", ")));
        }
        if !missing.is_empty() {
            caption.push_str(&format!(" Not recognised in it: {}.", missing.join(", ")));
        }
        if others > 0 {
            caption.push_str(&format!(
                " {others} face{} belong{} to no participant.",
                if others == 1 { "" } else { "s" },
                if others == 1 { "s" } else { "" }
            ));
        }
        caption
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MatchRolesError {
    #[error("the face models were not loaded before the build ran; this is a bug in viss")]
    NotLoaded,
    #[error("{manifest}: a reference image of {character}: {source}")]
    ReferenceUnreadable {
        manifest: String,
        character: String,
        source: RawReadError,
    },
    #[error("{manifest}: a reference image of {character}: {source}")]
    ReferenceImage {
        manifest: String,
        character: String,
        source: ImageError,
    },
    #[error("{manifest}: the face in reference image raw/{path} of {character}: {source}")]
    ReferenceFace {
        manifest: String,
        character: String,
        path: String,
        source: Box<DetectorError>,
    },
    #[error("{scenario}: the group frame PNG from detect: {source}")]
    GroupFrame {
        scenario: String,
        source: ImageError,
    },
    #[error("{scenario}: face {face} of the group frame at {time_s:.3} s: {source}")]
    GroupFace {
        scenario: String,
        time_s: f64,
        face: usize,
        source: Box<DetectorError>,
    },
    #[error(
        "{scenario}: detect chose candidate {candidate} as the group frame, but its record has \
         {candidates} candidates; rebuild detect"
    )]
    NoCandidate {
        scenario: String,
        candidate: usize,
        candidates: usize,
    },
    #[error("bootstrapping a reference: the frame at {time_s:.3} s of raw/{path}: {source}")]
    BootstrapFrame {
        path: String,
        time_s: f64,
        source: Box<MatchRolesError>,
    },
    #[error(transparent)]
    Detector(#[from] DetectorError),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Assign(#[from] AssignError),
    #[error(transparent)]
    FaceDetector(#[from] FaceDetectorError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Frames(#[from] FramesError),
    #[error(transparent)]
    Video(#[from] VideoError),
    #[error(transparent)]
    Job(#[from] JobError),
}

/// The manifest's character a role is: its name or one of its aliases, ignoring case.
pub fn find_character<'a>(
    characters: &'a [CharacterSource],
    role: &str,
) -> Option<&'a CharacterSource> {
    let wanted = role.trim().to_lowercase();
    characters.iter().find(|character| {
        std::iter::once(&character.name)
            .chain(&character.aliases)
            .any(|name| name.trim().to_lowercase() == wanted)
    })
}

/// What to add to the manifest so that `role` has a reference image.
pub fn how_to_add_references(manifest: &str, show: &str, role: &str, listed: bool) -> String {
    let example = format!(
        "references = [\"{show}/references/{}.png\"]",
        role.to_lowercase()
            .replace(|c: char| !c.is_alphanumeric(), "_")
    );
    if listed {
        format!(
            "add {example} (paths under raw/ to photos of {role}'s face, one person each) to the \
             [[characters]] entry name = {role:?} in {manifest}"
        )
    } else {
        format!(
            "add a [[characters]] entry with name = {role:?} and {example} (paths under raw/ to \
             photos of {role}'s face, one person each) to {manifest}"
        )
    }
}

/// Middle of each of `role`'s timed lines, seconds, in line order.
fn line_midpoints(lines: &ScenarioLines, role: &str) -> Vec<f64> {
    lines
        .lines
        .iter()
        .filter(|line| line.speakers.iter().any(|speaker| speaker == role))
        .filter_map(|line| Some((line.start_ms?, line.end_ms?)))
        .map(|(start, end)| (start + end) as f64 / 2000.0)
        .collect()
}

/// The memo key of a reference image's face and embedding: its bytes, and what finds and
/// embeds the face.
fn reference_key(models: &Models, reference: &RawFile) -> ContentHash {
    ContentHash::of(
        format!(
            "viss match_roles reference face v1\ndetector {}\nembedder {}\nimage {}\n",
            models.detector.identity(),
            models.embedder.identity(),
            reference.blake3
        )
        .as_bytes(),
    )
}

/// Everything about one character's reference images that an embedding needs.
struct ReferenceJob {
    character: String,
    files: Vec<RawFile>,
}

/// The face and embedding of every reference image of every job, from this process's map, the
/// store's memo, or by detecting and embedding it (then remembered in both).
fn reference_faces(
    jobs: &[Option<ReferenceJob>],
    models: &Models,
    known: &Mutex<HashMap<ContentHash, ReferenceFace>>,
    memo: &Store,
    raw_dir: &Path,
    manifest: &str,
) -> Result<Vec<Vec<ReferenceFace>>, MatchRolesError> {
    let mut known = known
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut out = Vec::with_capacity(jobs.len());
    for job in jobs {
        let Some(job) = job else {
            out.push(Vec::new());
            continue;
        };
        let mut faces = Vec::with_capacity(job.files.len());
        for file in &job.files {
            let key = reference_key(models, file);
            if let Some(found) = known.get(&key) {
                faces.push(found.clone());
                continue;
            }
            let remembered = memo
                .memo_get(&key)
                .ok()
                .flatten()
                .and_then(|bytes| serde_json::from_slice::<ReferenceFace>(&bytes).ok());
            let found = match remembered {
                Some(found) => found,
                None => {
                    let found = embed_reference(models, file, raw_dir, manifest, &job.character)?;
                    let bytes = serde_json::to_vec(&found).expect("reference faces serialize");
                    if let Err(error) = memo.memo_put(&key, &bytes) {
                        tracing::warn!("could not remember a reference embedding: {error}");
                    }
                    found
                }
            };
            known.insert(key, found.clone());
            faces.push(found);
        }
        out.push(faces);
    }
    Ok(out)
}

fn embed_reference(
    models: &Models,
    file: &RawFile,
    raw_dir: &Path,
    manifest: &str,
    character: &str,
) -> Result<ReferenceFace, MatchRolesError> {
    let bytes = file
        .read(raw_dir, crate::manifest::RawKind::ReferenceImage)
        .map_err(|source| MatchRolesError::ReferenceUnreadable {
            manifest: manifest.to_string(),
            character: character.to_string(),
            source,
        })?;
    let image = decode_rgb(&bytes, &Path::new("raw").join(&file.path)).map_err(|source| {
        MatchRolesError::ReferenceImage {
            manifest: manifest.to_string(),
            character: character.to_string(),
            source,
        }
    })?;
    let face_error = |source| MatchRolesError::ReferenceFace {
        manifest: manifest.to_string(),
        character: character.to_string(),
        path: file.path.clone(),
        source: Box::new(source),
    };
    let faces = models.detector.detect(&image).map_err(face_error)?;
    let area = |face: &FaceDetection| (face.bbox[2] - face.bbox[0]) * (face.bbox[3] - face.bbox[1]);
    let largest = faces
        .iter()
        .copied()
        .max_by(|a, b| area(a).total_cmp(&area(b)));
    let embedding = largest
        .map(|face| models.embedder.embed_face(&image, &face))
        .transpose()
        .map_err(face_error)?;
    Ok(ReferenceFace {
        faces_found: faces.len(),
        face: largest,
        embedding,
    })
}

/// The group frame's faces (at least `min_score`) and their embeddings.
fn group_faces(
    frame: &RgbImage,
    detections: &Detections,
    models: &Models,
    min_score: f32,
) -> Result<(Vec<GroupFace>, Vec<Vec<f32>>), MatchRolesError> {
    let chosen = detections.group_frame.candidate;
    let candidate =
        detections
            .candidates
            .get(chosen)
            .ok_or_else(|| MatchRolesError::NoCandidate {
                scenario: detections.scenario.clone(),
                candidate: chosen,
                candidates: detections.candidates.len(),
            })?;
    let mut faces = Vec::new();
    let mut embeddings = Vec::new();
    for (index, face) in candidate.faces.iter().enumerate() {
        if face.score < min_score {
            continue;
        }
        let embedding = models.embedder.embed_face(frame, face).map_err(|source| {
            MatchRolesError::GroupFace {
                scenario: detections.scenario.clone(),
                time_s: detections.group_frame.time_s,
                face: index,
                source: Box::new(source),
            }
        })?;
        faces.push(GroupFace {
            detection: index,
            bbox: face.bbox,
            score: face.score,
        });
        embeddings.push(embedding);
    }
    Ok((faces, embeddings))
}

/// Each sampled time with the embeddings of the faces seen then.
type FacesAt = Vec<(f64, Vec<Vec<f32>>)>;

/// The embeddings of the faces (at least `min_score`) on the frames at `times` (ascending,
/// distinct), by time.
fn faces_at(
    path: &Path,
    file: &str,
    times: &[f64],
    max_width: u32,
    models: &Models,
    min_score: f32,
) -> Result<FacesAt, MatchRolesError> {
    let mut found = Vec::with_capacity(times.len());
    let mut next = 0usize;
    sample_frames_at(path, times, Some(max_width), |frame| {
        let time_s = frame.time_s;
        // Each delivered frame serves the latest wanted time at or before it.
        while next + 1 < times.len() && times[next + 1] <= time_s + 1e-6 {
            next += 1;
        }
        let frame_error = |source: MatchRolesError| MatchRolesError::BootstrapFrame {
            path: file.to_string(),
            time_s,
            source: Box::new(source),
        };
        let image = frame_to_image(frame).map_err(|error| frame_error(error.into()))?;
        let faces = models
            .detector
            .detect(&image)
            .map_err(|error| frame_error(error.into()))?;
        let embeddings = faces
            .iter()
            .filter(|face| face.score >= min_score)
            .map(|face| models.embedder.embed_face(&image, face))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| frame_error(error.into()))?;
        found.push((times[next], embeddings));
        Ok::<(), MatchRolesError>(())
    })?;
    Ok(found)
}

/// A bootstrapped reference for one role, or why there is none.
fn bootstrap_role(
    midpoints: &[f64],
    seen: &[(f64, Vec<Vec<f32>>)],
    params: &MatchRolesParams,
) -> Result<(Vec<f32>, Bootstrapped), String> {
    let line_faces: Vec<Vec<Vec<f32>>> = midpoints
        .iter()
        .map(|time| {
            seen.iter()
                .find(|(at, _)| at == time)
                .map_or_else(Vec::new, |(_, faces)| faces.clone())
        })
        .collect();
    let reference =
        bootstrap_reference(&line_faces, &params.bootstrap).map_err(|error| match error {
            BootstrapError::NoFaces { lines } => {
                format!("no face is on screen in any of its {lines} lines")
            }
            other => other.to_string(),
        })?;
    let summary = Bootstrapped {
        lines: midpoints.len(),
        lines_with_faces: reference.lines_with_faces,
        lines_covered: reference.lines_covered,
        faces_in_cluster: reference.faces_in_cluster,
        clusters: reference.clusters,
        runner_up_lines: reference.runner_up_lines,
    };
    if reference.lines_with_faces < params.bootstrap_min_lines {
        return Err(format!(
            "only {} of its lines show faces; a bootstrap needs {} (bootstrap_min_lines)",
            reference.lines_with_faces, params.bootstrap_min_lines
        ));
    }
    if reference.runner_up_lines >= reference.lines_covered {
        return Err(format!(
            "two people are seen equally often during its lines ({} lines each), so neither can \
             be told to be the speaker",
            reference.lines_covered
        ));
    }
    Ok((reference.centroid, summary))
}

impl MatchRoles {
    fn threads(&self) -> usize {
        thread_count(self.params.threads)
    }
}

#[async_trait::async_trait]
impl Stage<Env> for MatchRoles {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        [
            ingest::CAST.id(),
            align::LINES.id(),
            FRAMES.id(),
            DETECTIONS.id(),
            GROUP_FRAME.id(),
        ]
        .into()
    }

    fn outputs(&self) -> Vec<PortId> {
        [ROLE_MATCHES.id()].into()
    }

    fn models(&self, _env: &Env, _store: &Store) -> Result<BTreeMap<String, String>, StageFailure> {
        if self.models.get().is_none() {
            let cache = ModelCache::from_env()?;
            let files = cache.ensure_face_recognition()?;
            let embedder = SfaceEmbedder::load(
                &files.onnx_runtime_library,
                &files.sface_onnx,
                self.threads(),
            )
            .map_err(MatchRolesError::from)?;
            let detector = FaceDetector::load(&cache, &self.params.faces, self.threads())
                .map_err(MatchRolesError::from)?;
            let _ = self.models.set(Arc::new(Models { embedder, detector }));
        }
        let models = self.models.get().expect("set above");
        Ok([
            ("face_embedder".to_string(), models.embedder.identity()),
            (
                "reference_face_detector".to_string(),
                models.detector.identity(),
            ),
        ]
        .into())
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        // `frames` skipped this scenario (no video or no time range) and flagged why.
        let Some(detections) = ctx.read_optional(&DETECTIONS)? else {
            return Ok(Outputs::default());
        };
        let frame_hash = ctx.input(GROUP_FRAME.id())?.hash;
        let frame_png = ctx.read_png(&GROUP_FRAME)?;
        let episode = ctx.read(&ingest::CAST)?;
        let models = self
            .models
            .get()
            .cloned()
            .ok_or(MatchRolesError::NotLoaded)?;
        let params = self.params.clone();
        let participants = detections.participants.clone();
        let characters: Vec<Option<&CharacterSource>> = participants
            .iter()
            .map(|role| find_character(&episode.characters, role))
            .collect();
        let jobs: Vec<Option<ReferenceJob>> = characters
            .iter()
            .map(|character| {
                character.map(|c| ReferenceJob {
                    character: c.name.clone(),
                    files: c.references.clone(),
                })
            })
            .collect();

        // The group frame's faces and the references' faces, embedded.
        let (faces, face_embeddings, references) = {
            let models = models.clone();
            let known = self.references.clone();
            let resources = ctx.resources().clone();
            let raw_dir = ctx.project().raw_dir();
            let manifest = episode.manifest.clone();
            let detections = detections.clone();
            let min_score = params.min_face_score;
            ctx.cpu(move || -> Result<_, MatchRolesError> {
                let frame =
                    decode_rgb(&frame_png, Path::new(GROUP_FRAME.id().name)).map_err(|source| {
                        MatchRolesError::GroupFrame {
                            scenario: detections.scenario.clone(),
                            source,
                        }
                    })?;
                let (faces, embeddings) = group_faces(&frame, &detections, &models, min_score)?;
                let references = reference_faces(
                    &jobs,
                    &models,
                    &known,
                    &resources.store,
                    &raw_dir,
                    &manifest,
                )?;
                Ok((faces, embeddings, references))
            })
            .await?
        };
        let mut role_references: Vec<Vec<Vec<f32>>> = references
            .iter()
            .map(|found| found.iter().filter_map(|f| f.embedding.clone()).collect())
            .collect();

        // Roles without a usable reference image: bootstrap one from their lines' frames.
        let mut bootstrapped: Vec<Option<Bootstrapped>> = vec![None; participants.len()];
        let mut no_reference_why: Vec<Option<String>> = vec![None; participants.len()];
        let needing: Vec<usize> = (0..participants.len())
            .filter(|&role| role_references[role].is_empty())
            .collect();
        if !needing.is_empty() {
            if params.bootstrap_min_lines == 0 {
                for &role in &needing {
                    no_reference_why[role] =
                        Some("the bootstrap is off (bootstrap_min_lines = 0)".to_string());
                }
            } else {
                let lines = ctx.read_optional(&align::LINES)?;
                let midpoints: Vec<Vec<f64>> = needing
                    .iter()
                    .map(|&role| {
                        lines
                            .as_ref()
                            .map_or_else(Vec::new, |l| line_midpoints(l, &participants[role]))
                    })
                    .collect();
                let mut times: Vec<f64> = midpoints.iter().flatten().copied().collect();
                times.sort_by(f64::total_cmp);
                times.dedup();
                let seen = if times.is_empty() {
                    Vec::new()
                } else {
                    let sampling = ctx.read(&FRAMES)?;
                    let path =
                        checked_video_path(ctx, &sampling.video).map_err(MatchRolesError::from)?;
                    let file = sampling.video.path.clone();
                    let models = models.clone();
                    let max_width = detections.frame_width;
                    let min_score = params.min_face_score;
                    ctx.cpu(move || faces_at(&path, &file, &times, max_width, &models, min_score))
                        .await?
                };
                for (&role, midpoints) in needing.iter().zip(&midpoints) {
                    if midpoints.is_empty() {
                        no_reference_why[role] = Some(
                            "align places none of its lines in the video, so no reference can be \
                             bootstrapped"
                                .to_string(),
                        );
                        continue;
                    }
                    match bootstrap_role(midpoints, &seen, &params) {
                        Ok((centroid, summary)) => {
                            role_references[role] = vec![centroid];
                            bootstrapped[role] = Some(summary);
                        }
                        Err(why) => {
                            no_reference_why[role] =
                                Some(format!("no reference could be bootstrapped: {why}"))
                        }
                    }
                }
            }
        }

        let matched =
            match_faces_to_roles(&face_embeddings, &role_references, params.min_similarity)
                .map_err(MatchRolesError::from)?;
        let mut outputs = Outputs::default();
        let manifest = episode.manifest.as_str();
        let mut roles = Vec::with_capacity(participants.len());
        for (role, name) in participants.iter().enumerate() {
            let result = &matched.roles[role];
            let character = characters[role];
            let listed_references: Vec<ReferenceImage> = character
                .map(|c| c.references.as_slice())
                .unwrap_or_default()
                .iter()
                .zip(&references[role])
                .map(|(file, found)| ReferenceImage {
                    path: file.path.clone(),
                    blake3: file.blake3,
                    faces_found: found.faces_found,
                    face: found.face.map(|face| face.bbox),
                })
                .collect();
            for reference in &listed_references {
                match reference.faces_found {
                    0 => outputs.flags.push(format!(
                        "{name}: no face found in reference image raw/{} ({manifest}); it is not \
                         used",
                        reference.path
                    )),
                    1 => {}
                    many => outputs.flags.push(format!(
                        "{name}: reference image raw/{} ({manifest}) shows {many} faces; the \
                         largest is used",
                        reference.path
                    )),
                }
            }
            let add = how_to_add_references(manifest, &episode.show, name, character.is_some());
            if let Some(summary) = &bootstrapped[role] {
                outputs.flags.push(format!(
                    "{name}: no usable reference image; matched against a reference bootstrapped \
                     from the faces on screen during {} of its {} lines. To be sure, {add}",
                    summary.lines_covered, summary.lines
                ));
            }
            let best =
                |similarity: Option<f32>| similarity.map_or(String::new(), |s| format!("{s:.2}"));
            let reason = match result.status {
                RoleMatchStatus::Matched => None,
                RoleMatchStatus::BelowThreshold => Some(format!(
                    "no face in the group frame is similar enough to its reference (best {} < \
                     min_similarity {:.2})",
                    best(result.similarity),
                    params.min_similarity
                )),
                RoleMatchStatus::FacesTakenByOtherRoles => Some(format!(
                    "the faces similar to its reference (best {}) fit other roles better",
                    best(result.similarity)
                )),
                RoleMatchStatus::NoFaces => Some(format!(
                    "the group frame ({:.1} s) shows no face",
                    detections.group_frame.time_s
                )),
                RoleMatchStatus::NoReference => {
                    let why = no_reference_why[role].clone().unwrap_or_default();
                    let images = if listed_references.is_empty() {
                        "the show manifest has no reference image of it".to_string()
                    } else {
                        "no face was found in its reference images".to_string()
                    };
                    Some(format!("{images}, and {why}; {add}"))
                }
            };
            if let Some(reason) = &reason {
                outputs.flags.push(format!("{name} has no face: {reason}"));
            }
            roles.push(RoleFace {
                name: name.clone(),
                character: character.map(|c| c.name.clone()),
                references: listed_references,
                bootstrapped: bootstrapped[role].clone(),
                status: result.status,
                face: result.face,
                bbox: result.face.map(|face| faces[face].bbox),
                similarity: result.similarity,
                reason,
            });
        }
        let record = RoleMatches {
            scenario: ctx.item.clone(),
            group_frame: frame_hash,
            group_frame_seconds: detections.group_frame.time_s,
            frame_width: detections.group_frame.width,
            frame_height: detections.group_frame.height,
            face_detector: detections.face_detector.clone(),
            reference_face_detector: models.detector.identity(),
            face_embedder: models.embedder.identity(),
            min_similarity: params.min_similarity,
            faces,
            roles,
            similarities: matched.similarities,
        };
        outputs.put(ctx, &ROLE_MATCHES, &record)?;
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::align::TimedLine;

    #[test]
    fn the_caption_says_who_is_recognised_where_and_who_is_not() {
        let role = |name: &str, bbox: Option<BoxXyxy>| RoleFace {
            name: name.to_string(),
            character: Some(name.to_string()),
            references: Vec::new(),
            bootstrapped: None,
            status: if bbox.is_some() {
                RoleMatchStatus::Matched
            } else {
                RoleMatchStatus::BelowThreshold
            },
            face: bbox.map(|_| 0),
            bbox,
            similarity: None,
            reason: None,
        };
        let face = |x0: f32| GroupFace {
            detection: 0,
            bbox: [x0, 10.0, x0 + 40.0, 60.0],
            score: 0.9,
        };
        let matches = RoleMatches {
            scenario: "demo/e1/sc1".to_string(),
            group_frame: ContentHash::of(b"frame"),
            group_frame_seconds: 61.6,
            frame_width: 600,
            frame_height: 300,
            face_detector: "scrfd".to_string(),
            reference_face_detector: "yunet".to_string(),
            face_embedder: "sface".to_string(),
            min_similarity: 0.5,
            faces: vec![face(20.0), face(500.0), face(280.0)],
            roles: vec![
                role("Noor", Some([20.0, 10.0, 60.0, 60.0])),
                role("Theo", Some([500.0, 10.0, 540.0, 60.0])),
                role("Mila", None),
            ],
            similarities: Vec::new(),
        };
        assert_eq!(
            matches.caption(),
            "A frame of the scene (62 s into the episode) shows 3 faces. Recognised: Noor on the \
             left, Theo on the right. Not recognised in it: Mila. 1 face belongs to no participant."
        );
    }

    fn character(name: &str, aliases: &[&str]) -> CharacterSource {
        CharacterSource {
            name: name.to_string(),
            aliases: aliases.iter().map(|a| a.to_string()).collect(),
            references: Vec::new(),
        }
    }

    #[test]
    fn roles_find_their_character_by_name_or_alias_ignoring_case() {
        let cast = [
            character("Theo", &["Theodore"]),
            character("Mila", &["the neighbour"]),
        ];
        assert_eq!(find_character(&cast, "Theo").unwrap().name, "Theo");
        assert_eq!(find_character(&cast, "THEODORE").unwrap().name, "Theo");
        assert_eq!(find_character(&cast, "The Neighbour").unwrap().name, "Mila");
        assert!(find_character(&cast, "Bruno").is_none());
    }

    #[test]
    fn the_advice_names_the_manifest_and_the_entry() {
        let listed =
            how_to_add_references("manifests/shows/demo.toml", "demo", "Mr. Heckles", true);
        assert!(
            listed.contains("references = [\"demo/references/mr__heckles.png\"]"),
            "{listed}"
        );
        assert!(
            listed.contains(
                "[[characters]] entry name = \"Mr. Heckles\" in manifests/shows/demo.toml"
            ),
            "{listed}"
        );
        let unlisted = how_to_add_references("manifests/shows/demo.toml", "demo", "Bruno", false);
        assert!(
            unlisted.starts_with("add a [[characters]] entry with name = \"Bruno\""),
            "{unlisted}"
        );
    }

    #[test]
    fn a_bootstrap_samples_the_middle_of_each_timed_line_of_the_character() {
        let line = |speakers: &[&str], times: Option<(u64, u64)>| TimedLine {
            speakers: speakers.iter().map(|s| s.to_string()).collect(),
            start_ms: times.map(|t| t.0),
            end_ms: times.map(|t| t.1),
        };
        let lines = ScenarioLines {
            scenario: "demo/e1/sc1".to_string(),
            lines: vec![
                line(&["Noor"], Some((1000, 3000))),
                line(&["Theo"], Some((3000, 4000))),
                line(&["Theo", "Noor"], Some((5000, 6000))),
                line(&["Noor"], None),
            ],
        };
        assert_eq!(line_midpoints(&lines, "Noor"), vec![2.0, 5.5]);
        assert_eq!(line_midpoints(&lines, "Theo"), vec![3.5, 5.5]);
        assert!(line_midpoints(&lines, "Mila").is_empty());
    }

    fn unit(direction: usize, noise: f32, random: &mut fastrand::Rng) -> Vec<f32> {
        let mut vector: Vec<f32> = (0..16).map(|_| (random.f32() - 0.5) * noise).collect();
        vector[direction] += 1.0;
        crate::text::embed::l2_normalise(&mut vector);
        vector
    }

    #[test]
    fn a_bootstrap_needs_enough_lines_and_one_clear_speaker() {
        let mut random = fastrand::Rng::with_seed(9);
        let params = MatchRolesParams::default();
        // Person 2 in each of four lines, person 5 in one.
        let seen: Vec<(f64, Vec<Vec<f32>>)> = (0..4)
            .map(|k| {
                let mut faces = vec![unit(2, 0.1, &mut random)];
                if k == 0 {
                    faces.push(unit(5, 0.1, &mut random));
                }
                (k as f64, faces)
            })
            .collect();
        let (centroid, summary) = bootstrap_role(&[0.0, 1.0, 2.0, 3.0], &seen, &params).unwrap();
        assert_eq!(
            (
                summary.lines,
                summary.lines_covered,
                summary.runner_up_lines
            ),
            (4, 4, 1)
        );
        assert!(crate::vision::sface::cosine(&centroid, &unit(2, 0.0, &mut random)) > 0.95);
        // Two lines only.
        let error = bootstrap_role(&[0.0, 1.0], &seen, &params).unwrap_err();
        assert!(error.contains("only 2 of its lines show faces"), "{error}");
        // Two people always together.
        let together: Vec<(f64, Vec<Vec<f32>>)> = (0..4)
            .map(|k| {
                (
                    k as f64,
                    vec![unit(2, 0.1, &mut random), unit(5, 0.1, &mut random)],
                )
            })
            .collect();
        let error = bootstrap_role(&[0.0, 1.0, 2.0, 3.0], &together, &params).unwrap_err();
        assert!(
            error.contains("two people are seen equally often"),
            "{error}"
        );
        let error = bootstrap_role(&[7.0, 8.0, 9.0], &seen, &params).unwrap_err();
        assert!(
            error.contains("no face is on screen in any of its 3 lines"),
            "{error}"
        );
    }
}

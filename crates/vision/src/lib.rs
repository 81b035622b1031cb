//! Faces and objects in images and video frames.
//!
//! [`scrfd`] finds faces with five landmarks (InsightFace SCRFD through ONNX Runtime), [`yunet`]
//! does the same with OpenCV Zoo's YuNet ([`face_detector`] picks one by config), [`yolo`]
//! decodes any YOLOv8-format detector, [`group`] picks the frame that best shows the people of
//! a scene together. [`sface`] turns a face into an identity embedding and [`assign`] matches
//! faces to roles. Every model shares the process's one ONNX Runtime environment.

pub mod assign;
pub mod clip;
pub mod face_detector;
pub mod group;
pub mod image;
pub mod letterbox;
pub mod nms;
pub mod portrait;
mod resample;
pub mod scrfd;
mod session;
pub mod sface;
pub mod stylise;
pub mod synthetic;
pub mod yolo;
pub mod yunet;

pub use self::image::{ImageError, RgbImage, decode_rgb, encode_png, frame_to_image, load_rgb};
pub use assign::{
    BootstrapParams, BootstrappedReference, FaceRoleMatch, RoleMatch, RoleMatchStatus,
    bootstrap_reference, match_faces_to_roles, min_cost_assignment,
};
pub use face_detector::{FaceDetector, FaceDetectorConfig, FaceDetectorModel};
pub use scrfd::{DetectionTimings, FaceDetection, ScrfdConfig, ScrfdDetector};
pub use session::DetectorError;
pub use sface::{SfaceEmbedder, align_face};
pub use yolo::{ObjectDetection, YoloConfig, YoloDetector};
pub use yunet::{YunetConfig, YunetDetector};

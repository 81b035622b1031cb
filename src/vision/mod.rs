//! Faces and objects in images and video frames.
//!
//! [`scrfd`] finds faces with five landmarks (InsightFace SCRFD through ONNX Runtime), [`yolo`]
//! decodes any YOLOv8-format detector, [`group`] picks the frame that best shows the people of
//! a scene together. Every detector shares the process's one ONNX Runtime environment.

pub mod clip;
pub mod group;
pub mod image;
pub mod letterbox;
pub mod nms;
pub mod portrait;
mod resample;
pub mod scrfd;
pub mod stylise;
pub mod synthetic;
mod session;
pub mod yolo;

pub use self::image::{ImageError, RgbImage, frame_to_image, load_rgb};
pub use scrfd::{DetectionTimings, FaceDetection, ScrfdConfig, ScrfdDetector};
pub use session::DetectorError;
pub use yolo::{ObjectDetection, YoloConfig, YoloDetector};

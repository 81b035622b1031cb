//! Video, frames and visual change points.

pub mod features;
pub mod shots;
pub mod video;

/// Test media shared by the project (see ../shared/media/README.md).
#[cfg(test)]
pub(crate) fn shared_media(relative: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/media").join(relative);
    assert!(path.exists(), "test media {} is missing", path.display());
    path
}

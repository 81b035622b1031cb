//! Video, frames and visual change points.

pub mod features;
pub mod shots;
pub mod video;

/// Real test media in the checkout (tests/fixtures/media; see its README.md for licences and
/// attributions).
#[cfg(test)]
pub(crate) fn shared_media(relative: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/media")
        .join(relative);
    assert!(path.exists(), "test media {} is missing", path.display());
    path
}

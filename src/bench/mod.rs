//! `viss bench`: measurements of viss itself, each side by side with its reference where one
//! exists, reported as ratios. Never timed assertions in tests. The capability crates'
//! benchmarks live in `viss-dev`; the DAG's and the video stages' here, beside what they run.

pub mod align_build;
pub mod command;
pub mod dag;
pub mod scripted;
pub mod shards;
pub mod simulate;
pub mod video;

pub use viss_dev::bench::{align, align_truth, embed, llm, local_llm, pelt, scrfd, sface};

/// A `--params` file that cannot be used, named with the line at fault where there is one.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AlignParamsError(String);

/// The `[params]` of a `stages/align.toml` (`viss bench align --params FILE`), checked.
pub fn align_params_from(
    path: &std::path::Path,
) -> Result<crate::text::align::AlignParams, AlignParamsError> {
    #[derive(serde::Deserialize)]
    struct StageFile {
        #[serde(default)]
        params: crate::text::align::AlignParams,
    }
    let text = std::fs::read_to_string(path)
        .map_err(|error| AlignParamsError(format!("reading {}: {error}", path.display())))?;
    let file: StageFile = toml::from_str(&text).map_err(|error| {
        AlignParamsError(crate::dag::toml_error::render(
            &path.display().to_string(),
            &text,
            &error,
        ))
    })?;
    file.params
        .validate()
        .map_err(|error| AlignParamsError(format!("{}: {error}", path.display())))?;
    Ok(file.params)
}

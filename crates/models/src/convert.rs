//! Making a model's converted files from its fetched member files.
//!
//! A conversion is a pure function of the source bytes, so its output is recorded in the spec
//! (size, sha256) and checked before it gets its final name: a mismatch means the conversion
//! code changed, never that a half-written file is used.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use super::fetch::{io_error, partial_path, rename_into_place, verify_size_and_sha256};
use super::onnx_dequantize::fold_block_dequantize;
use super::{Conversion, ConvertedFile, ModelError};

/// Told when a fresh conversion of a verified source does not give the recorded file.
pub(crate) const ADVICE_CONVERSION_CHANGED: &str =
    "the conversion no longer gives the file viss was tested with; do not use it, and report this";

/// Checks a converted file against its spec; `MissingFile` when absent.
pub(crate) fn verify_converted(
    path: &Path,
    converted: &ConvertedFile,
    advice: &'static str,
) -> Result<(), ModelError> {
    verify_size_and_sha256(path, converted.size, converted.sha256, advice)
}

/// Converts `converted.source` (already verified) in `directory` into `converted.file_name`.
pub(crate) fn convert_file(directory: &Path, converted: &ConvertedFile) -> Result<(), ModelError> {
    let source_path = directory.join(converted.source);
    let final_path = directory.join(converted.file_name);
    let source = std::fs::read(&source_path).map_err(|error| io_error(&source_path, error))?;
    let output = match converted.conversion {
        Conversion::FoldBlockDequantize => {
            let (bytes, report) =
                fold_block_dequantize(&source).map_err(|source| ModelError::Conversion {
                    source_file: source_path.clone(),
                    file: final_path.clone(),
                    source,
                    advice: ADVICE_CONVERSION_CHANGED,
                })?;
            tracing::info!(
                file = %final_path.display(),
                folded = report.folded_nodes,
                dropped_initializers = report.dropped_initializers,
                dropped_inputs = report.dropped_unread_inputs.len(),
                "converted block-quantised ONNX weights to fp32"
            );
            bytes
        }
    };
    let partial = partial_path(directory, converted.file_name);
    let result = (|| {
        let mut file = File::create(&partial).map_err(|error| io_error(&partial, error))?;
        file.write_all(&output)
            .map_err(|error| io_error(&partial, error))?;
        file.sync_all().map_err(|error| io_error(&partial, error))?;
        drop(file);
        verify_size_and_sha256(
            &partial,
            converted.size,
            converted.sha256,
            ADVICE_CONVERSION_CHANGED,
        )
        .map_err(
            // Name the file by its final name: the partial one is gone by the time anyone looks.
            |error| match error {
                ModelError::SizeMismatch {
                    expected,
                    actual,
                    advice,
                    ..
                } => ModelError::SizeMismatch {
                    file: final_path.clone(),
                    expected,
                    actual,
                    advice,
                },
                ModelError::ChecksumMismatch {
                    expected,
                    actual,
                    advice,
                    ..
                } => ModelError::ChecksumMismatch {
                    file: final_path.clone(),
                    expected,
                    actual,
                    advice,
                },
                other => other,
            },
        )?;
        rename_into_place(&partial, &final_path, directory)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

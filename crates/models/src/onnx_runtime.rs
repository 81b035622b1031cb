//! The one ONNX Runtime environment of this process.
//!
//! `ort` loads the runtime library once and refuses a second environment ("only one
//! environment is allowed per process"), even after the first is dropped. Every model in viss
//! (text embedder, face detector, ...) therefore takes its environment from here.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ort::environment::Environment;

#[derive(Debug, thiserror::Error)]
pub enum OnnxRuntimeError {
    #[error(
        "cannot load the ONNX Runtime library {library}: {reason}; run `viss models fetch` or \
         point onnx_runtime_library in the config at libonnxruntime.so from ONNX Runtime >= 1.24"
    )]
    Load { library: PathBuf, reason: String },

    #[error("ONNX Runtime from {library} loaded but could not create its environment: {reason}")]
    Environment { library: PathBuf, reason: String },
}

struct LoadedRuntime {
    library: PathBuf,
    environment: Environment,
}

/// Guarded by a mutex rather than a `OnceLock` so that a failed load (wrong path) can be retried
/// with a corrected path in the same process.
static RUNTIME: Mutex<Option<LoadedRuntime>> = Mutex::new(None);

/// Returns the process's ONNX Runtime environment, loading `library` on first use.
///
/// A later call naming a different library gets the already loaded one (a process cannot hold
/// two ONNX Runtimes); that is logged, not an error, since both are asked to run the same models.
pub fn environment(library: &Path) -> Result<Environment, OnnxRuntimeError> {
    let mut runtime = RUNTIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(loaded) = runtime.as_ref() {
        if loaded.library != library {
            tracing::warn!(
                loaded = %loaded.library.display(),
                requested = %library.display(),
                "ONNX Runtime is already loaded from another file; using the loaded one"
            );
        }
        return Ok(loaded.environment.clone());
    }
    let builder = ort::init_from(library).map_err(|error| OnnxRuntimeError::Load {
        library: library.to_path_buf(),
        reason: error.to_string(),
    })?;
    let environment = builder
        .with_name("viss")
        .with_telemetry(false)
        .build()
        .map_err(|error| OnnxRuntimeError::Environment {
            library: library.to_path_buf(),
            reason: error.to_string(),
        })?;
    *runtime = Some(LoadedRuntime {
        library: library.to_path_buf(),
        environment: environment.clone(),
    });
    tracing::info!(library = %library.display(), "loaded ONNX Runtime");
    Ok(environment)
}

/// The library the process loaded, if any.
pub fn loaded_library() -> Option<PathBuf> {
    RUNTIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .as_ref()
        .map(|loaded| loaded.library.clone())
}

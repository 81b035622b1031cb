//! Where a running build stands, for whoever is not watching its terminal: a line on stderr
//! every `[build] progress_seconds` when stderr is not a terminal, a snapshot file other
//! processes read (`viss status` during a build), and a socket through which the build answers
//! `viss show` from its own store, which it holds locked.
//!
//! Both live in the artifacts directory beside its `.lock`: `progress.json` (written
//! temp-then-rename, so a reader sees a whole snapshot) and `reader.sock`, a Unix socket with
//! the directory's owner-only permissions, removed when the build ends.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::dag::BuildResources;
use crate::dag::scheduler::{ProgressSink, ProgressSnapshot};
use crate::dag::status::render_usage;
use crate::dag::store::Store;
use crate::inspect::{ShowRequest, Shown, show};
use crate::redact::for_terminal;

const PROGRESS_FILE: &str = "progress.json";
const SOCKET_FILE: &str = "reader.sock";

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(
        "the store is held by another viss process ({holder}), and it does not answer on {}: \
         it may be a `viss` that serves no readers (not a build), or it is ending; try again \
         when it has finished ({source})", socket.display()
    )]
    NoAnswer {
        holder: String,
        socket: PathBuf,
        source: std::io::Error,
    },
    #[error("the running build answered: {0}")]
    Refused(String),
    #[error("the running build's answer does not read: {0}")]
    Garbled(String),
}

/// The snapshot file of the build running on `artifacts_dir`, if one has published one.
pub fn read_progress(artifacts_dir: &Path) -> Option<ProgressSnapshot> {
    let bytes = std::fs::read(artifacts_dir.join(PROGRESS_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Where the build stands, for `viss status` while it runs.
pub fn render_progress(snapshot: &ProgressSnapshot, now_unix_ms: u64) -> String {
    let mut out = String::new();
    let seconds = |ms: u64| ms as f64 / 1000.0;
    let _ = writeln!(
        out,
        "a build is running (pid {}, for {:.0} s); where it stood {:.0} s ago:",
        snapshot.pid,
        seconds(
            snapshot
                .updated_unix_ms
                .saturating_sub(snapshot.started_unix_ms)
        ),
        seconds(now_unix_ms.saturating_sub(snapshot.updated_unix_ms)),
    );
    let _ = writeln!(
        out,
        "{:<20} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "stage", "fresh", "ran", "running", "left", "failed", "blocked"
    );
    for stage in &snapshot.stages {
        let left = if stage.open {
            format!("{}+", stage.left)
        } else {
            stage.left.to_string()
        };
        let _ = writeln!(
            out,
            "{:<20} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            stage.stage, stage.fresh, stage.ran, stage.running, left, stage.failed, stage.blocked
        );
    }
    let _ = writeln!(
        out,
        "(left: known items not yet decided; + more may appear as earlier stages settle)"
    );
    out.push_str("so far in this build: ");
    out.push_str(&render_usage(&snapshot.usage));
    if snapshot.usage.llm_calls == 0 {
        out.push_str("no model calls\n");
    }
    for failure in &snapshot.failures {
        let _ = writeln!(
            out,
            "  failed: {} {}: {}",
            failure.stage,
            for_terminal(&failure.item),
            crate::redact::for_terminal_message(&failure.error)
        );
    }
    out
}

/// One line for a log: `12 s: 40 done, 2 running, 18+ left, 1 failed; now annotate`.
pub fn progress_line(snapshot: &ProgressSnapshot) -> String {
    let sum = |field: fn(&crate::dag::scheduler::StageProgress) -> usize| -> usize {
        snapshot.stages.iter().map(field).sum()
    };
    let open = snapshot.stages.iter().any(|s| s.open);
    let now: Vec<&str> = snapshot
        .stages
        .iter()
        .filter(|s| s.running > 0)
        .map(|s| s.stage.as_str())
        .collect();
    let mut line = format!(
        "viss: {:.0} s: {} done, {} running, {}{} left, {} failed",
        (snapshot
            .updated_unix_ms
            .saturating_sub(snapshot.started_unix_ms)) as f64
            / 1000.0,
        sum(|s| s.fresh + s.ran),
        sum(|s| s.running),
        sum(|s| s.left),
        if open { "+" } else { "" },
        sum(|s| s.failed),
    );
    if snapshot.usage.llm_calls > 0 {
        let _ = write!(
            line,
            ", {} model answers, ${:.4} spent",
            snapshot.usage.llm_calls, snapshot.usage.cost_usd
        );
    }
    if !now.is_empty() {
        let _ = write!(line, "; now {}", now.join(", "));
    }
    line
}

/// How often the snapshot file is rewritten while a build runs.
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(2);

/// The sink a build reports to: the snapshot file every [`SNAPSHOT_EVERY`], and a line on
/// stderr every `lines_every` when that is set.
pub fn progress_sink(artifacts_dir: &Path, lines_every: Option<Duration>) -> ProgressSink {
    let file = artifacts_dir.join(PROGRESS_FILE);
    let last_line = std::sync::Mutex::new(std::time::Instant::now());
    ProgressSink {
        every: SNAPSHOT_EVERY,
        send: Arc::new(move |snapshot: &ProgressSnapshot| {
            let bytes = serde_json::to_vec(snapshot).expect("snapshots serialize");
            if let Err(error) = crate::fsutil::write_atomic_beside(&file, &bytes) {
                tracing::warn!("cannot write {}: {error}", file.display());
            }
            let Some(every) = lines_every.filter(|_| !snapshot.finished) else {
                return;
            };
            let mut last = last_line
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            if last.elapsed() >= every {
                *last = std::time::Instant::now();
                eprintln!("{}", progress_line(snapshot));
            }
        }),
    }
}

#[derive(Debug, Serialize, Deserialize)]
enum Request {
    Show(ShowRequest),
}

#[derive(Debug, Serialize, Deserialize)]
enum Response {
    Shown(Shown),
    Error(String),
}

/// Answers other processes' `viss show` from `store` while it lives; dropping it stops the
/// answering and removes the socket.
pub struct Readers {
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Readers {
    /// Serves on `<artifacts_dir>/reader.sock`; `None` (with a warning) when the socket cannot
    /// be made there (a path too long for a Unix socket, a filesystem without them).
    pub fn serve(artifacts_dir: &Path, resources: Arc<BuildResources>) -> Option<Self> {
        let socket = artifacts_dir.join(SOCKET_FILE);
        // The caller holds the store's lock: a socket left here is a killed build's.
        let _ = std::fs::remove_file(&socket);
        let listener = match UnixListener::bind(&socket) {
            Ok(listener) => listener,
            Err(error) => {
                tracing::warn!(
                    "cannot serve `viss show` during the build on {}: {error}",
                    socket.display()
                );
                return None;
            }
        };
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
        }
        let _ = listener.set_nonblocking(true);
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => answer(stream, &resources.store),
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        });
        Some(Self {
            socket,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn answer(stream: UnixStream, store: &Store) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut line = String::new();
    if BufReader::new(&stream).read_line(&mut line).is_err() {
        return;
    }
    let response = match serde_json::from_str::<Request>(&line) {
        Ok(Request::Show(request)) => match show(store, &request) {
            Ok(shown) => Response::Shown(shown),
            Err(error) => Response::Error(crate::redact::redact_owned(error.to_string())),
        },
        Err(error) => Response::Error(format!("not a request: {error}")),
    };
    let mut bytes = serde_json::to_vec(&response).expect("responses serialize");
    bytes.push(b'\n');
    let _ = (&stream).write_all(&bytes);
}

/// `viss show` asked of the build holding `artifacts_dir` (`holder` is what its lock says).
pub fn ask_show(
    artifacts_dir: &Path,
    holder: &str,
    request: &ShowRequest,
) -> Result<Shown, LiveError> {
    let socket = artifacts_dir.join(SOCKET_FILE);
    let no_answer = |source| LiveError::NoAnswer {
        holder: holder.to_string(),
        socket: socket.clone(),
        source,
    };
    let mut stream = UnixStream::connect(&socket).map_err(no_answer)?;
    let mut line = serde_json::to_vec(&Request::Show(request.clone())).expect("requests serialize");
    line.push(b'\n');
    stream.write_all(&line).map_err(no_answer)?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(no_answer)?;
    match serde_json::from_str(&answer) {
        Ok(Response::Shown(shown)) => Ok(shown),
        Ok(Response::Error(error)) => Err(LiveError::Refused(error)),
        Err(error) => Err(LiveError::Garbled(error.to_string())),
    }
}

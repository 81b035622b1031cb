//! `viss review`: a person checks the LLM steps' answers, one item at a time (in the terminal,
//! or `--serve`'s page on loopback), and accepts, rejects or edits them. Verdicts are kept in
//! the project's `manifests/reviews/<reviewer>.jsonl` ([`verdicts`]) and are inputs of the
//! stages that read the reviewed answer ([`overlay`]): an edit replaces the value for them, a
//! reject leaves the scenario out of the export. Two reviewers' files give their agreement
//! ([`agreement`]). A synthetic cast is reviewed by itself, as item `<scenario>/i<index>`.

pub mod agreement;
pub mod overlay;
pub mod queue;
pub mod serve;
pub mod session;
pub mod summary;
pub mod verdicts;

use std::path::PathBuf;

use crate::stages::descriptor::StepDescriptor;

/// What a person reviews: a scenario-level LLM step's answer (a
/// [`crate::stages::llm_step::StepRecord`], the output of its descriptor's `port`, which an
/// edit must fit as the model's answer did), or one synthetic cast of `instantiate`'s record,
/// judged on its own and accepted or rejected as a whole.
#[derive(Debug, Clone, Copy)]
pub enum Reviewable {
    Step(&'static StepDescriptor),
    Instance,
}

impl Reviewable {
    pub fn stage(&self) -> &'static str {
        match self {
            Reviewable::Step(step) => step.stage(),
            Reviewable::Instance => crate::stages::instantiate::INSTANCES.id().stage,
        }
    }

    /// The name of the output, in the stage's record, that holds what is reviewed.
    pub fn output(&self) -> String {
        match self {
            Reviewable::Step(step) => step.output(),
            Reviewable::Instance => crate::stages::instantiate::INSTANCES.id().output_name(""),
        }
    }
}

/// What can be reviewed, in pipeline order: the LLM steps, then the synthetic casts.
pub fn reviewables() -> impl Iterator<Item = Reviewable> {
    crate::stages::STEPS
        .iter()
        .map(|&step| Reviewable::Step(step))
        .chain([Reviewable::Instance])
}

/// The reviewable stage called `name`.
pub fn reviewable(name: &str) -> Result<Reviewable, ReviewError> {
    reviewables()
        .find(|r| r.stage() == name)
        .ok_or_else(|| ReviewError::NotReviewable {
            stage: name.to_string(),
            known: reviewables()
                .map(|r| r.stage())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a verdict: {message}; fix or delete the line")]
    BadLine {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error(
        "`{0}` cannot name a verdict file: use letters, digits, `-`, `_` and `.` (up to 64, not \
         starting with a dot)"
    )]
    BadReviewer(String),
    #[error("`{stage}` has no answers to review; the reviewable stages are {known}")]
    NotReviewable { stage: String, known: String },
    #[error("no reviewer named: pass --reviewer NAME (or set VISS_REVIEWER)")]
    NoReviewer,
    #[error(transparent)]
    Store(#[from] crate::dag::store::StoreError),
    #[error("{stage} {item}: the stored record does not read as an answer: {message}")]
    BadRecord {
        stage: String,
        item: String,
        message: String,
    },
    #[error("the terminal: {0}")]
    Terminal(std::io::Error),
    #[error(
        "the review page listens on a loopback address only (127.0.0.1 or ::1), not {0}: \
         anything else would show the licensed scripts to the network without a login"
    )]
    NotLoopback(std::net::IpAddr),
}

/// What `viss review` was asked to do.
#[derive(Debug, Clone)]
pub struct ReviewRequest {
    /// Only these stages' answers (empty: every reviewable stage).
    pub stages: Vec<String>,
    pub selection: queue::Selection,
}

/// The reviewer named, or `$VISS_REVIEWER`, checked as a file name.
pub fn reviewer_name(named: Option<&str>) -> Result<String, ReviewError> {
    let name = match named {
        Some(name) => name.to_string(),
        None => std::env::var("VISS_REVIEWER").map_err(|_| ReviewError::NoReviewer)?,
    };
    verdicts::check_reviewer(&name)?;
    Ok(name)
}

/// Every reviewer's verdicts and the stored answers of `request`'s stages (checked to be
/// reviewable).
pub fn load(
    store: &crate::dag::store::Store,
    reviews_dir: &std::path::Path,
    request: &ReviewRequest,
) -> Result<(verdicts::Reviews, Vec<queue::ReviewItem>), ReviewError> {
    for stage in &request.stages {
        reviewable(stage)?;
    }
    let stages: Vec<&str> = request.stages.iter().map(String::as_str).collect();
    let reviews = verdicts::Reviews::load(reviews_dir)?;
    let items = queue::stored_answers(store, &stages)?;
    Ok((reviews, items))
}

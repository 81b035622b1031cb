//! What the LLM annotation steps share, free of any LLM call: the scenario context the prompt
//! templates read, the checks validators are made of, the vocabularies, the schema helpers and
//! the benchmark-wide conflict-intensity balancing.
//!
//! Each step's own answer type, JSON schema and validator (whose error a model can act on) live
//! with its stage, in `src/stages/<step>/answer.rs`; its prompt is `prompts/<step>.j2` (the
//! defaults are `crate::stages::DEFAULT_PROMPTS`).

pub mod balance;
pub(crate) mod check;
pub mod context;
pub mod gates;
pub mod schema;
pub mod vocab;
pub mod words;

pub use balance::{
    BalanceError, BalancedProfile, Quotas, RoleProfileAssignment, RoleSuggestion,
    ScenarioSuggestion, balance_conflict_intensity,
};
pub use context::{
    CastMember, ContextLine, ContextLineKind, EarlierAnswers, PromptAnswer, ScenarioContext,
    VISUAL_EVIDENCE,
};
pub use vocab::{
    ConflictCharacteristic, ConflictIntensity, DialogueType, Emotion, ExpressionStyle, Gender,
    VisionDependenceClass, VisualChannel, Vocabulary,
};

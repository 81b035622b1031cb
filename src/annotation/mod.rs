//! The LLM annotation steps' capabilities, free of any LLM call: per step the answer's type,
//! its JSON schema and a validator whose error a model can act on, plus the scenario context
//! the prompt templates read and the benchmark-wide conflict-intensity balancing.
//!
//! Steps, in pipeline order: [`annotate`], [`describe`], [`profiles`] (then [`balance`]),
//! [`bdi_risk`], [`tasks`], [`affect`], [`vision_dependence`]. Each step module has
//! `schema() -> Value`, `validate(&Value, &ScenarioContext) -> Result<Answer, String>` and an
//! `Answer` alias.

pub mod affect;
pub mod annotate;
pub mod balance;
pub mod bdi_risk;
mod check;
pub mod context;
pub mod describe;
pub mod profiles;
pub mod schema;
pub mod tasks;
pub mod vision_dependence;
pub mod vocab;

pub use balance::{
    BalanceError, BalancedProfile, Quotas, RoleProfileAssignment, RoleSuggestion,
    ScenarioSuggestion, balance_conflict_intensity,
};
pub use context::{CastMember, ContextLine, ContextLineKind, ScenarioContext};
pub use vocab::{
    ConflictCharacteristic, ConflictIntensity, DialogueType, Emotion, ExpressionStyle, Gender,
    VisionDependenceClass, VisualChannel, Vocabulary,
};

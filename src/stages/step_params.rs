//! The params type of an LLM step: its [`Sampling`](crate::stages::llm_step::Sampling),
//! under a name of the stage's own whose doc comment heads the stage's file (`viss init`
//! renders `stages/<name>.toml` from it). The same values, so the same cache keys.

/// `step_params!(/// doc... AffectParams for Affect);` declares `AffectParams`, a transparent
/// newtype of `Sampling` with that doc, and builds the stage `Affect` from it.
macro_rules! step_params {
    ($(#[$doc:meta])* $params:ident for $stage:ident) => {
        $(#[$doc])*
        #[derive(
            Debug,
            Clone,
            Default,
            PartialEq,
            serde::Serialize,
            serde::Deserialize,
            schemars::JsonSchema,
        )]
        #[serde(transparent)]
        pub struct $params(pub crate::stages::llm_step::Sampling);

        impl crate::range::Validate for $params {
            fn validate(&self) -> Result<(), crate::range::BadSetting> {
                self.0.validate()
            }
        }

        impl From<$params> for $stage {
            fn from(params: $params) -> Self {
                Self::from(params.0)
            }
        }
    };
}

pub(crate) use step_params;

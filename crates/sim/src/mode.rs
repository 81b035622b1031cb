//! What an agent observes besides the words said (AgentViSS, section 3): nothing, a description
//! of the pictures, or the pictures themselves.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a run shows the scene to its agents.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ObservationMode {
    /// Text-only: the dialogue and the agent's own state, no observation.
    Text,
    /// Verbalized vision from the roles' recorded states rather than from pixels: what an ideal
    /// describer of the portraits would write. Separates perception from decision, and needs no
    /// vision model.
    VvOracle,
    /// Verbalized vision: a describer model turns the group image and the current portraits into
    /// text for the agent.
    Vv,
    /// Direct vision: the agent is shown the group image and a collage of the current portraits.
    Dv,
}

impl ObservationMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ObservationMode::Text => "text",
            ObservationMode::VvOracle => "vv_oracle",
            ObservationMode::Vv => "vv",
            ObservationMode::Dv => "dv",
        }
    }

    /// Whether the agent itself is shown images.
    pub fn shows_agent_images(self) -> bool {
        self == ObservationMode::Dv
    }

    /// Whether a describer model is shown images for the agent.
    pub fn shows_describer_images(self) -> bool {
        self == ObservationMode::Vv
    }

    /// Whether a run in this mode starts from the scenario's pictures (to show or describe).
    pub fn uses_pictures(self) -> bool {
        self.shows_agent_images() || self.shows_describer_images()
    }
}

impl std::fmt::Display for ObservationMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

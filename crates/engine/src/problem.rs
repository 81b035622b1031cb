//! What is wrong with an answer a stage kept anyway: an answer that still failed a quality
//! gate after its re-asks is stored as the item's answer, flagged with its problems, so the
//! build goes on and a person can review it (`viss review`). A problem is a value, not a line
//! to parse: the role and field at fault, the kind (the problem without what is particular to
//! the answer, for counting), and the message the model was shown.

use serde::{Deserialize, Serialize};

// No `skip_serializing_if`: store records are postcard, which is not self-describing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Problem {
    /// The participant whose entry is at fault; `None` for the scene's own fields.
    #[serde(default)]
    pub role: Option<String>,
    /// The field at fault, where one is named.
    #[serde(default)]
    pub field: Option<String>,
    /// The problem without the names, quotes and numbers of one answer ("X: belief states X's
    /// feeling ..."), so that the same problem of two answers counts once.
    pub kind: String,
    pub message: String,
}

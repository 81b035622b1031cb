//! What is wrong with an answer a stage kept anyway: an answer that still failed a quality
//! gate after its re-asks is stored as the item's answer, flagged with its problems, so the
//! build goes on and a person can review it (`viss review`).

pub use viss_problem::Problem;

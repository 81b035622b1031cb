//! The simulator's turn protocol (AgentViSS, section 3 and appendix H), apart from any model or
//! stage: who speaks next ([`policy`]), what one agent's turn must hold and how a bad one is
//! refused ([`turn`]), what agents observe ([`mode`]) and the trace a run leaves ([`trace`]). The
//! `simulate` stage drives models through it.

pub mod mode;
pub mod policy;
pub mod trace;
pub mod turn;

//! The integration tests: one binary (linking the library once), a module per topic. Tests that
//! need the demo project share one build of it per run (`common::demo`).

mod common;

mod agentsense;
mod align_stage;
mod cli;
mod cost;
mod crash;
mod demo_media;
mod demo_rebuild;
mod engine;
mod evaluate;
mod export;
mod ingest;
mod layout;
mod llm_stages;
mod local_llm_stage;
mod old_project;
mod quality;
mod remote;
mod review;
mod roles_stages;
mod simulate;
mod text_stages;
mod video_stages;
mod vision_faces;
mod vision_identity;

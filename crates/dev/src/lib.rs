//! Development tooling, kept out of the app's library: what tests and benchmarks stand in for
//! at the network boundary. It knows nothing of viss's own types, so it sits below every crate
//! that uses it.

pub mod mock_endpoint;

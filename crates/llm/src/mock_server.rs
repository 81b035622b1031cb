//! The in-process mock of the OpenAI API (`viss_mock_endpoint`, the network boundary and
//! the one thing tests mock), and the HTTP backend's settings for talking to it.

pub use viss_mock_endpoint::*;

use super::http::{HttpBackend, HttpConfig};

/// An HTTP backend pointed at a [`MockServer`], with short timeouts and backoff so that retry
/// tests take milliseconds.
pub trait MockHttp {
    fn config(&self) -> HttpConfig;
    fn backend(&self) -> HttpBackend;
}

impl MockHttp for MockServer {
    fn config(&self) -> HttpConfig {
        let mut config = HttpConfig::new(&self.base_url, "mock-model");
        config.timeout = std::time::Duration::from_secs(3);
        config.max_retries = 3;
        config.backoff_base = std::time::Duration::from_millis(10);
        config
    }

    fn backend(&self) -> HttpBackend {
        HttpBackend::with_key_lookup(self.config(), |_| None).unwrap()
    }
}

//! The integration tests as one binary (one link, one copy of the dependencies' code
//! instead of one per file); a test that needs a process of its own stays a file of
//! its own in `tests/`.

mod assembler;
mod async_openai_client;
mod async_openai_retry_after;
mod conformance;
mod error_chain;
mod fallback;
mod fallback_mock;
mod openai_client;
mod openai_quirks;
mod providers;
mod scripted;
mod transport;

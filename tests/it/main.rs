//! The integration tests as one binary (one link, one copy of the dependencies' code
//! instead of one per file); a test that needs a process of its own stays a file of
//! its own in `tests/`.

mod common;
#[macro_use]
mod parity;

mod bank_support;
mod bank_support_http;
mod chaos;
mod collections_router;
mod deploy_manifests;
mod example_crews;
mod examples_with_testkit;
mod reference_parity;
mod reference_parity_async_openai;
mod remote_weather;
mod rolling_restart;
mod sentiment_background;
mod support_triage;
mod text_chat;
mod text_tool_calls;
mod tool_logs;
mod voice_agent;
